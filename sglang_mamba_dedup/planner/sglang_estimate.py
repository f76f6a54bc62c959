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

from .. import versions
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
