"""SGLang's own mamba-cache estimator, run on the CPU on a stand-in runner or configurator (attributes only).

The estimator (``ModelRunnerKVCacheMixin.handle_max_mamba_cache`` before 0.5.16,
``KVCacheConfigurator._handle_max_mamba_cache`` from it on) is pure arithmetic over the cache params and the
server's sizing options; whatever the plugin patched is what runs. The planner (``sglang-mamba-dedup plan``)
and the tests read it here. Never used on the serving path.
"""

from __future__ import annotations

import dataclasses
import importlib
import types
from typing import Any

from .. import resolved, versions
from .launch_config import attn_dp_size

#: NEXTN is an alias of EAGLE; 0.5.19's runtime context only knows the canonical name.
SPEC_ALGORITHM = "EAGLE"


@dataclasses.dataclass(frozen=True)
class Estimate:
    slots: int  # max_mamba_cache_size
    rest_gb: float  # what the estimator leaves for the KV cache (GB = GiB, SGLang's unit)
    ratio: int  # mamba slots per running request (prefix-cache tracking)
    running: int  # running requests the mamba pool admits: min(asked, slots // ratio)
    reserved_bytes: int  # what the estimator took: budget - rest
    asked: int = 0  # max_running_requests per worker, as asked for


def server_args_fields() -> set[str]:
    import inspect

    from sglang.srt.server_args import ServerArgs

    return set(inspect.signature(ServerArgs).parameters)


def run(
    cache_params: Any,
    *,
    total_rest_gb: float,
    draft_tokens: int | None = 4,
    topk: int = 1,
    max_running_requests: int = 256,
    device: str = "cuda",
    replayssm: bool = False,
    radix: bool = True,
    gdn: bool = True,
    max_mamba_cache_size: int | None = None,
    extra: dict[str, Any] | None = None,
    launch: Any = None,
) -> Estimate:
    """Run the installed release's estimator for a ``total_rest_gb`` budget. ``draft_tokens`` None: no
    speculative decoding. ``gdn``: the model is Gated DeltaNet (ReplaySSM applies); ``extra``: more
    ``ServerArgs`` fields. ``launch``: a :class:`sglang_mamba_dedup.planner.launch_config.Launch`, resolved as a real
    launch resolves it; its settings and model config replace every sizing keyword above."""
    if launch is not None:
        sa = launch.server_args
        saved = getattr(sa, "max_mamba_cache_size", None)
        try:
            return _run(
                cache_params,
                sa,
                total_rest_gb,
                spec=bool(launch.settings["speculative_num_draft_tokens"]),
                device=device,
                gdn=gdn,
                model_config=launch.model_config,
                asked=launch.settings["max_running_requests"],
            )
        finally:  # releases before 0.5.17 write the size into server_args: the next estimate starts afresh
            if getattr(sa, "max_mamba_cache_size", None) != saved:
                sa.max_mamba_cache_size = saved
    from sglang.srt.server_args import ServerArgs

    fields = server_args_fields()
    kw: dict[str, Any] = dict(
        model_path="dummy", max_running_requests=max_running_requests, disable_radix_cache=not radix
    )
    if draft_tokens:
        kw.update(
            speculative_algorithm=SPEC_ALGORITHM,
            speculative_eagle_topk=topk,
            speculative_num_steps=max(1, draft_tokens - 1),
            speculative_num_draft_tokens=draft_tokens,
        )
    if max_mamba_cache_size is not None:
        kw["max_mamba_cache_size"] = max_mamba_cache_size
    if replayssm:
        name = next((n for n in ("enable_linear_replayssm_spec", "enable_gdn_replayssm_spec") if n in fields), None)
        if name is None:
            raise ValueError(f"SGLang {versions.installed_sglang_version()} has no ReplaySSM speculative verify")
        kw[name] = True
    kw.update(extra or {})
    sa = ServerArgs(**kw)
    return _run(
        cache_params, sa, total_rest_gb, spec=bool(draft_tokens), device=device, gdn=gdn, asked=max_running_requests
    )


def _run(
    cache_params: Any,
    sa: Any,
    total_rest_gb: float,
    *,
    spec: bool,
    device: str,
    gdn: bool,
    asked: int,
    model_config: Any = None,
) -> Estimate:
    spec_alg = types.SimpleNamespace(is_none=lambda: not spec)
    mambaish = types.SimpleNamespace(mamba2_cache_params=cache_params)
    dp = int(getattr(sa, "dp_size", 1) or 1)
    attn_dp = attn_dp_size(sa)  # each attention-DP rank serves its share of the requests (m-P2)
    asked = max(1, int(asked) // attn_dp)
    if versions.release().new_layout:
        from sglang.srt import runtime_context
        from sglang.srt.mem_cache import kv_cache_configurator as kc

        runtime_context.get_context().set_server_args(sa)

        class _Configurator(kc.KVCacheConfigurator):
            def fused_entry_bytes(self, sub_pool_name):  # no fused draft state block
                return None

        obj: Any = object.__new__(_Configurator)
        pp = int(getattr(sa, "pp_size", 1) or 1)
        attrs: dict[str, Any] = dict(
            mambaish_config=mambaish,
            model_config=model_config
            or types.SimpleNamespace(
                hf_config=types.SimpleNamespace(), num_hidden_layers=len(cache_params.layers), context_len=4096
            ),
            pp_size=pp,
            attn_dp_size=attn_dp,
            ps=types.SimpleNamespace(
                pp_size=pp, attn_dp_size=attn_dp, tp_size=int(getattr(sa, "tp_size", 1) or 1), dp_size=dp
            ),
            hybrid_gdn_config=types.SimpleNamespace() if gdn else None,
            hybrid_kda_config=None,
            extra_mamba_cache_bytes_per_req=0,
            spec_algorithm=spec_alg,
            device=device,
            server_args=sa,
        )
        for attr, value in attrs.items():
            setattr(obj, attr, value)
        rest = obj._handle_max_mamba_cache(total_rest_gb)
        get_schedule = getattr(runtime_context, "get_schedule", None)  # 0.5.17+; 0.5.16 writes server_args
        size = get_schedule().max_mamba_cache_size if get_schedule is not None else sa.max_mamba_cache_size
    else:
        mixin = importlib.import_module("sglang.srt.model_executor.model_runner_kv_cache_mixin")

        runner_cls: Any = type("_Runner", (mixin.ModelRunnerKVCacheMixin,), {})
        obj = runner_cls.__new__(runner_cls)
        vars(obj).update(mambaish_config=mambaish, server_args=sa, spec_algorithm=spec_alg, device=device, dp_size=dp)
        rest = obj.handle_max_mamba_cache(total_rest_gb)
        size = sa.max_mamba_cache_size
    ratio = int(obj._calculate_mamba_ratio())
    return Estimate(
        slots=int(size),
        rest_gb=float(rest),
        ratio=ratio,
        running=min(int(asked), int(size) // ratio),
        asked=int(asked),
        reserved_bytes=int(round((total_rest_gb - float(rest)) * (1 << 30))),
    )


# --- the KV cache: what SGLang makes of the share the mamba estimator leaves -----------------------------------


@dataclasses.dataclass(frozen=True)
class KVPool:
    """How SGLang turns the KV share into ``max_total_num_tokens`` for a resolved launch (0.5.23
    ``KVCacheConfigurator.config_from_budget``): bytes per token (``cell_bytes``, None where it cannot be priced),
    whole pages of ``page_size`` tokens, at most ``max_total_tokens`` (``--max-total-tokens``)."""

    dtype: str  # the KV cache's torch dtype, as SGLang resolves --kv-cache-dtype (auto: the model's)
    element_bytes: int
    cell_bytes: int | None
    page_size: int
    max_total_tokens: int | None
    full_attention_layers: int
    draft_layers: int  # the EAGLE/MTP draft's layers priced in the target's pool (0: its own pool, not priced)
    how: str
    not_priced: tuple[str, ...] = ()

    def tokens(self, kv_gb: float) -> int | None:
        """``max_total_num_tokens`` for a KV share of ``kv_gb`` GiB (``DefaultPoolConfigurator.calculate_pool_sizes``
        then ``_apply_token_constraints`` and ``calculate_pool_sizes_from_max_tokens``); None if not priced or the
        server would not start (no share)."""
        if not self.cell_bytes or kv_gb <= 0:
            return None
        tokens = int(kv_gb * (1 << 30)) // self.cell_bytes // self.page_size * self.page_size
        if self.max_total_tokens is not None and self.max_total_tokens < tokens:
            tokens = self.max_total_tokens // self.page_size * self.page_size
        return tokens

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {"not_priced": list(self.not_priced)}


#: ``--kv-cache-dtype`` to the torch dtype on a CUDA (not ROCm) GPU, where the release has no
#: ``mem_cache.kv_cache_dtype.configure_kv_cache_dtype`` (before 0.5.16: ``ModelRunner.configure_kv_cache_dtype``,
#: the same mapping). ``auto`` is the model's dtype (or fp8_e4m3 for a checkpoint quantized with an FP8 KV cache).
KV_DTYPES = {
    "fp8_e5m2": "float8_e5m2",
    "fp8_e4m3": "float8_e4m3fn",
    "mxfp8": "float8_e4m3fn",
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
    "fp4_e2m1": "float4_e2m1fn_x2",
    "nvfp4": "float4_e2m1fn_x2",
    "fp4_mx_block16": "float4_e2m1fn_x2",
}


def _kv_torch_dtype(kv_cache_dtype: str, model_dtype: Any, quant_algo: str | None) -> Any:
    """SGLang's resolution of ``--kv-cache-dtype`` (its own function where the release has one)."""
    import inspect

    import torch

    try:
        from sglang.srt.mem_cache.kv_cache_dtype import configure_kv_cache_dtype
    except ImportError:
        configure_kv_cache_dtype = None
    if configure_kv_cache_dtype is not None and quant_algo is None:
        kw: dict[str, Any] = dict(
            server_args_kv_cache_dtype=kv_cache_dtype,
            model=None,
            model_dtype=model_dtype,
            is_draft_worker=False,
            is_dflash=False,
            speculative_draft_attention_backend=None,
            speculative_draft_kv_cache_dtype=None,
        )
        params = inspect.signature(configure_kv_cache_dtype).parameters
        return configure_kv_cache_dtype(**{k: v for k, v in kw.items() if k in params})[1]
    if kv_cache_dtype == "auto":
        return torch.float8_e4m3fn if (quant_algo or "").upper() == "FP8" else model_dtype
    name = KV_DTYPES.get(kv_cache_dtype)
    if name is None or not hasattr(torch, name):
        raise ValueError(f"Unsupported kv_cache_dtype: {kv_cache_dtype}")
    return getattr(torch, name)


def _not_priced(sa: Any) -> list[str]:
    """The launch's flags that SGLang reads when it sizes the KV pool and this plan does not model."""
    out = []
    if int(getattr(sa, "pp_size", 1) or 1) > 1:
        out.append(
            "--pp-size: KV tokens of the first stage's layers; SGLang takes the smallest over the stages "
            "(an all-reduce across the ranks)"
        )
    checks = (
        ("enable_hisparse", "--enable-hisparse", "a host-expanded logical address space"),
        ("enable_unified_memory", "--enable-unified-memory", "one pool shared by KV and mamba state"),
        ("speculative_draft_kv_cache_dtype", "--speculative-draft-kv-cache-dtype", "the draft's own KV dtype"),
    )
    for name, flag, what in checks:
        value = getattr(sa, name, None)
        if value not in (None, False, "auto"):
            out.append(f"{flag} {value}: {what}")
    for name, flag in (("attn_cp_size", "--attn-cp-size"), ("dcp_size", "--dcp-size")):
        value = getattr(sa, name, 1)
        if isinstance(value, int) and value > 1:
            out.append(f"{flag} {value}: context-parallel KV sharding")
    return out


def kv_pool(launch: Any, gpu_memory_gb: float) -> KVPool:
    """SGLang's KV pool sizing for a resolved ``launch`` (one rank of its tensor parallelism)."""
    import torch

    from . import launch_config

    sa, mc = launch.server_args, launch.model_config
    launch_config.publish(sa)
    got = resolved.read(sa, ("kv_cache_dtype", "page_size", "max_total_tokens"))
    kv_flag = str(resolved.value_or(got, "kv_cache_dtype", "auto") or "auto")
    page = int(resolved.value_or(got, "page_size", 1) or 1)
    cap = resolved.value_or(got, "max_total_tokens", None)
    model_dtype = getattr(mc, "dtype", torch.bfloat16)
    quant = getattr(getattr(mc, "quantization_config", None), "kv_cache_quant_algo", None)
    not_priced = _not_priced(sa)
    with launch_config.cuda_machine(gpu_memory_gb):
        dtype = _kv_torch_dtype(kv_flag, model_dtype, quant)
    element = int(torch._utils._element_size(dtype))
    tp = int(launch.settings["tp_size"] or 1)
    cfg = launch_config.mamba_config(mc)
    full = list(getattr(cfg, "full_attention_layer_ids", []) or [])
    if int(getattr(sa, "pp_size", 1) or 1) > 1:
        from sglang.srt.distributed.utils import get_pp_indices

        start, end = get_pp_indices(int(mc.num_hidden_layers), 0, int(sa.pp_size))
        full = [i for i in full if start <= i < end]
    common: dict[str, Any] = dict(
        dtype=str(dtype).replace("torch.", ""),
        element_bytes=element,
        page_size=page,
        max_total_tokens=int(cap) if cap is not None else None,
        full_attention_layers=len(full),
    )
    try:
        cell, draft, how = _sglang_cell(launch, dtype, kv_flag, page, tp, len(full))
    except Exception as exc:  # noqa: BLE001 - the release's configurator wants more than a stand-in has
        if dtype == getattr(torch, "float4_e2m1fn_x2", None) or kv_flag == "mxfp8":
            flag = f"--kv-cache-dtype {kv_flag}: its scale buffers ({type(exc).__name__})"
            return KVPool(cell_bytes=None, draft_layers=0, how="not priced", not_priced=(*not_priced, flag), **common)
        cell, draft, how = _mirrored_cell(launch, element, tp, len(full))
        how += f" (the release's own configurator did not run on the CPU: {type(exc).__name__})"
    return KVPool(cell_bytes=cell, draft_layers=draft, how=how, not_priced=tuple(not_priced), **common)


def _draft_layers(launch: Any) -> tuple[Any, Any]:
    """SGLang's ``(spec aux config, algorithm)`` of the launch: its ``eagle_draft_num_layers`` are the EAGLE/MTP
    draft layers SGLang prices in the target's KV pool (0.5.16+ ``resolve_spec_aux_hidden_state_config``)."""
    from sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state import (
        resolve_spec_aux_hidden_state_config,
    )
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    alg = SpeculativeAlgorithm.from_string(launch.settings["speculative_algorithm"])
    aux = resolve_spec_aux_hidden_state_config(
        server_args=launch.server_args, model_config=launch.model_config, spec_algorithm=alg, is_draft_worker=False
    )
    return aux, alg


def _sglang_cell(launch: Any, dtype: Any, kv_flag: str, page: int, tp: int, full: int) -> tuple[int, int, str]:
    """SGLang's own ``DefaultPoolConfigurator`` (``model_executor/pool_configurator.py``) on a stand-in
    ``KVCacheConfigurator`` holding the launch's model config, KV dtype and draft layers."""
    import types

    from sglang.srt.mem_cache import kv_cache_configurator as kc
    from sglang.srt.model_executor import pool_configurator as pc

    from . import launch_config

    aux, alg = _draft_layers(launch)

    class _Configurator(kc.KVCacheConfigurator):
        def fused_entry_bytes(self, sub_pool_name):  # no fused draft region
            return None

    mc, sa = launch.model_config, launch.server_args
    obj: Any = object.__new__(_Configurator)
    pp = int(getattr(sa, "pp_size", 1) or 1)
    start, end = 0, int(mc.num_hidden_layers)
    if pp > 1:
        from sglang.srt.distributed.utils import get_pp_indices

        start, end = get_pp_indices(end, 0, pp)
    attrs: dict[str, Any] = dict(
        model_config=mc,
        server_args=sa,
        kv_cache_dtype=dtype,
        kv_cache_dtype_str=kv_flag,
        model_dtype=getattr(mc, "dtype", None),
        page_size=page,
        device="cuda",
        use_mla_backend=False,
        is_hybrid_swa=False,
        is_draft_worker=False,
        pp_size=pp,
        spec_algorithm=alg,
        spec_aux_config=aux,
        layer_info=types.SimpleNamespace(start_layer=start, end_layer=end, num_effective_layers=end - start),
    )
    for attr, value in attrs.items():
        setattr(obj, attr, value)
    with launch_config._parallel(tp):
        configurator = pc.create_memory_pool_configurator(obj)
        if type(configurator) is not pc.DefaultPoolConfigurator:
            raise TypeError(f"{type(configurator).__name__} is not the pool a hybrid mamba model gets")
        cell = int(configurator._cell_size)
    draft = int(aux.eagle_draft_num_layers or 0)
    return cell, draft, f"SGLang's DefaultPoolConfigurator ({full} full-attention layers + {draft} draft)"


def _mirrored_cell(launch: Any, element: int, tp: int, full: int) -> tuple[int, int, str]:
    """0.5.23's arithmetic (``pool_configurator.py`` ``DefaultPoolConfigurator._compute_cell_size`` and its EAGLE
    draft term), for releases whose configurator a stand-in cannot run: KV heads per rank x (head_dim +
    v_head_dim) x full-attention layers x element size, plus ``int(cell x draft / layers)`` for an MTP draft."""
    mc = launch.model_config
    heads = int(mc.get_num_kv_heads(tp))
    head_dim = int(mc.head_dim)
    v_head_dim = int(getattr(mc, "v_head_dim", 0) or head_dim)
    cell = heads * (head_dim + v_head_dim) * full * element
    draft = 0
    if launch.settings["speculative_algorithm"] and full:
        draft = int(getattr(mc, "num_nextn_predict_layers", None) or 1)
        cell += int(cell * draft / full)
    return cell, draft, f"0.5.23's arithmetic, mirrored ({full} full-attention layers + {draft} draft)"
