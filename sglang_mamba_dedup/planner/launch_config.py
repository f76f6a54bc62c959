"""A ``launch_server`` command line resolved the way the server resolves it, on any machine, for a CUDA device.

The planner (``sglang-mamba-dedup plan -- <launch flags>``) and the sizing tests start here, so that what they
size is what a real launch would size: SGLang's own CLI parser (``prepare_server_args``), then SGLang's own
resolution (``ServerArgs.resolve_once`` from 0.5.16's argument pipeline on; ``ServerArgs.__post_init__`` before),
which decides overlap scheduling, the mamba radix-cache strategy (``auto`` -> ``extra_buffer`` / ``no_buffer``),
track slots, the memory ratio and the device-dependent defaults. Those decisions read the machine (is it CUDA,
which compute capability, how much memory); here the machine is said to be a CUDA GPU of ``gpu_memory_gb``
(SGLang's own ``override_platform`` where the release has it, plus its memory-capacity probe), so a CPU
machine resolves the launch a GPU would. The model's state shape comes from SGLang's own ``ModelConfig`` of
the checkpoint's ``config.json`` (its ``mamba2_cache_params``), not from our table.

Never imported on the serving path.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import struct
import sys
from pathlib import Path
from typing import Any

from .. import resolved
from ..sizing import GIB


class LaunchError(ValueError):
    """The launch flags cannot be resolved (SGLang's parser or resolution refused them): one line, exit 2."""


@dataclasses.dataclass
class Launch:
    """A resolved launch: SGLang's ``ServerArgs`` as the server would hold it, its model config, and the
    decisions the sizing depends on (``settings``, printed by the planner)."""

    argv: list[str]
    server_args: Any
    model_config: Any
    settings: dict[str, Any]

    @property
    def cache_params(self) -> Any:
        """SGLang's own ``Mamba2CacheParams`` of the model, for one rank of the launch's tensor parallelism."""
        cfg = mamba_config(self.model_config)
        try:
            with _parallel(int(self.settings["tp_size"] or 1)):
                return cfg.mamba2_cache_params
        except (AssertionError, RuntimeError) as exc:  # 0.5.14, 0.5.15: it asks the live process group
            raise LaunchError(f"SGLang's config cannot size the state outside a server: {exc}") from None


@contextlib.contextmanager
def _parallel(tp: int):
    """The launch's tensor-parallel sizes, for SGLang's config code that reads them from its parallel context
    (0.5.16+, which would ask an initialised process group otherwise)."""
    try:
        from sglang.srt import runtime_context
    except ImportError:
        yield
        return
    fields = getattr(runtime_context, "_PARALLEL_FIELDS", None)
    override = getattr(runtime_context.get_parallel(), "override", None)
    if fields is None or override is None:
        yield
        return
    want = dict(tp_size=tp, attn_tp_size=tp, tp_rank=0, attn_tp_rank=0, attn_cp_size=1, attn_cp_rank=0)
    with override(**{k: v for k, v in want.items() if k in fields}):
        yield


def mamba_config(model_config: Any) -> Any:
    """The hybrid config that carries ``mamba2_cache_params`` (the text part of a multimodal model)."""
    for cfg in (getattr(model_config, "hf_text_config", None), getattr(model_config, "hf_config", None)):
        if cfg is not None and hasattr(type(cfg), "mamba2_cache_params"):
            return cfg
    raise LaunchError(
        f"{getattr(model_config, 'model_path', 'the model')} is not a hybrid mamba / linear-attention model "
        "SGLang knows (its config has no mamba2_cache_params)"
    )


def mixer(model_config: Any) -> str:
    """``gdn`` (Gated DeltaNet: Qwen3-Next, Qwen3.5) or ``mamba2`` (Nemotron-H), from the config class."""
    name = type(mamba_config(model_config)).__name__.lower()
    return "mamba2" if "nemotron" in name or "mamba" in name else "gdn"


#: The machine the planner resolves a launch for, a Hopper GPU (what the sizing was measured on): the
#: ``sglang.srt.utils.common`` probes and what they answer there; releases before 0.5.20 read them
#: by name (``from sglang.srt.utils import is_cuda``) rather than through ``get_platform()``.
CUDA_PROBES: dict[str, Any] = dict(
    is_cuda=True,
    is_cuda_alike=True,
    is_hip=False,
    is_npu=False,
    is_xpu=False,
    is_musa=False,
    is_mps=False,
    is_cpu=False,
    is_sm90_supported=True,
    is_sm100_supported=False,
    is_sm100_or_sm110_supported=False,
    is_sm110_supported=False,
    is_sm120_supported=False,
    is_blackwell_supported=False,
    is_hopper_with_cuda_12_3=True,
    cpu_has_amx_support=False,
    is_flashinfer_available=False,
)


#: Modules the resolution imports lazily that branch on the device at import time (a CUDA answer there would
#: import SGLang's CUDA kernel package): imported before the probes answer as a GPU.
PRELOAD = (
    "sglang.srt.configs.model_config",
    "sglang.srt.model_loader",
    "sglang.srt.layers.layernorm",
    "sglang.srt.layers.quantization",
    "sglang.srt.mem_cache.memory_pool",
    "sglang.srt.mem_cache.kv_cache_configurator",
    "sglang.srt.model_executor.model_runner_kv_cache_mixin",
)


def _platform_facts(runtime_context: Any) -> dict[str, Any]:
    """The same machine in the words of the release's ``PlatformContext`` (0.5.20+): each fact it knows, answered
    as its probe in :data:`CUDA_PROBES` answers, plus the compute capability."""
    probes = getattr(runtime_context, "_PLATFORM_PROBES", {})
    facts = {fact: CUDA_PROBES[probe] for fact, probe in probes.items() if probe in CUDA_PROBES}
    values = getattr(runtime_context, "_PLATFORM_VALUES", {})
    facts.update({k: v for k, v in (("device_sm", 90), ("device_capability", (9, 0))) if k in values})
    return facts


def _hook_modules() -> tuple[str, ...]:
    """SGLang's argument-resolution hooks (0.5.16+), which its pipeline imports lazily."""
    import pkgutil

    try:
        import sglang.srt.arg_groups as groups
    except ImportError:
        return ()
    return tuple(f"{groups.__name__}.{m.name}" for m in pkgutil.iter_modules(groups.__path__))


@contextlib.contextmanager
def cuda_machine(gpu_memory_gb: float):
    """Within: SGLang's probes answer as on a CUDA GPU with ``gpu_memory_gb`` GiB. Undone on exit."""
    import importlib

    from sglang.srt.utils import common

    for name in PRELOAD + _hook_modules():  # imported with the machine's real answers: CPU-safe import branches
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    capacity_mib = float(gpu_memory_gb) * 1024
    answers: dict[str, Any] = {k: (lambda *a, _v=v, **k: _v) for k, v in CUDA_PROBES.items()}
    answers["get_device_memory_capacity"] = lambda device=None, _c=capacity_mib: _c
    probes = {name: getattr(common, name) for name in answers if hasattr(common, name)}
    holders = [m for n, m in list(sys.modules.items()) if n.startswith("sglang") and m is not None]
    with contextlib.ExitStack() as stack:
        for m in holders:
            for name, probe in probes.items():
                if getattr(m, name, None) is probe:
                    setattr(m, name, answers[name])
                    stack.callback(setattr, m, name, probe)
        rc = sys.modules.get("sglang.srt.runtime_context")
        override = getattr(rc, "override_platform", None)
        if override is not None:
            stack.enter_context(override(**_platform_facts(rc)))
        yield


def resolve(argv: list[str], *, gpu_memory_gb: float) -> Launch:
    """Parse and resolve ``argv`` (``launch_server``'s flags) as the server would on a CUDA GPU of
    ``gpu_memory_gb``; publish it to SGLang's runtime context (0.5.16+) for the estimator to read."""
    import io

    from sglang.srt import server_args as sa_mod

    has_device = any(a == "--device" or a.startswith("--device=") for a in argv)
    argv = [*argv, *([] if has_device else ["--device", "cuda"])]  # a copy: the Launch keeps it
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), _logging_kept(), cuda_machine(gpu_memory_gb):
            sa = sa_mod.prepare_server_args(argv)
            resolve_once = getattr(sa, "resolve_once", None)
            if resolve_once is not None:
                resolve_once()
            model_config = _model_config(sa)
            publish(sa)
    except SystemExit:  # argparse: an unknown or malformed flag
        lines = [ln for ln in err.getvalue().strip().splitlines() if ln.strip()]
        raise LaunchError(lines[-1] if lines else "SGLang's parser refused the launch flags") from None
    except Exception as exc:  # noqa: BLE001 - SGLang's resolution or the model's config refused this launch
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else _where(exc)
        raise LaunchError(f"SGLang refused the launch flags: {type(exc).__name__}: {first}") from None
    return Launch(argv=argv, server_args=sa, model_config=model_config, settings=settings_of(sa))


def _where(exc: BaseException) -> str:
    """m1 of the 2026-12-04 turn-2 audit: an exception without a message (a bare ``assert``) named by the line of
    SGLang that raised it."""
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return ""
    last = frames[-1]
    return f"{last.line or '?'} ({Path(last.filename).name}:{last.lineno})"


@contextlib.contextmanager
def _logging_kept():
    """SGLang's ``prepare_server_args`` reconfigures the root logger (``basicConfig(force=True)``): a planner or
    a test keeps its own."""
    import logging

    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        for h in list(root.handlers):
            if h not in handlers:
                root.removeHandler(h)
        for h in handlers:
            if h not in root.handlers:
                root.addHandler(h)
        root.setLevel(level)


def _model_config(sa: Any) -> Any:
    try:
        from sglang.srt.arg_groups.overrides import model_config_of
    except ImportError:
        from sglang.srt.configs.model_config import ModelConfig

        return ModelConfig.from_server_args(sa)
    return model_config_of(sa)


def publish(sa: Any) -> None:
    """Publish ``sa`` to SGLang's runtime context (fresh bags: an earlier estimate's overrides are gone)."""
    try:
        from sglang.srt import runtime_context
    except ImportError:  # before 0.5.14: the estimator reads server_args itself
        return
    setter = getattr(runtime_context.get_context(), "set_server_args", None)
    if setter is not None:  # 0.5.16+ (0.5.14 and 0.5.15 read server_args)
        setter(sa)


def attn_dp_size(sa: Any) -> int:
    """The attention-DP replicas: each rank's pools are sized for ``max_running_requests // attn_dp_size``
    (SGLang's ``deployment_attn_dp_size``). 0.5.23 spells it ``--attn-dp-size N``; every release still takes
    ``--dp-size N --enable-dp-attention``; else 1."""
    explicit = int(getattr(sa, "attn_dp_size", 1) or 1)
    if explicit > 1:
        return explicit
    return int(getattr(sa, "dp_size", 1) or 1) if getattr(sa, "enable_dp_attention", False) else 1


def skip_decode_lock() -> bool | None:
    """``SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK`` as the installed release reads it (one slot fewer per running request
    with the radix cache on), or None where the release has no such switch."""
    try:
        from sglang.srt.environ import envs
    except ImportError:
        return None
    switch = getattr(envs, "SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK", None)
    return None if switch is None else bool(switch.get())


def settings_of(sa: Any) -> dict[str, Any]:
    """The resolved decisions the mamba sizing depends on, as the server will read them
    (:func:`sglang_mamba_dedup.resolved.read`; ``sa`` published first where the release has a runtime context). A
    setting the release does not have is off here (ReplaySSM, the lazy extra buffer), or 1 / ``null`` (TP, PP, PD)."""
    r = resolved.read(sa)

    def got(name: str, default: Any = None) -> Any:
        return resolved.value_or(r, name, default)

    strategy = got("mamba_radix_cache_strategy")
    lazy = r["enable_mamba_extra_buffer_lazy"]
    return {
        "device": got("device"),
        "radix_cache": not bool(got("disable_radix_cache", False)),
        "overlap_schedule": not bool(got("disable_overlap_schedule", False)),
        "mamba_strategy": strategy,
        "mamba_extra_buffer": bool(got("enable_mamba_extra_buffer", False)),
        # 0.5.12 has neither the lazy strategy nor its answer
        "mamba_extra_buffer_lazy": strategy == "extra_buffer_lazy" if lazy is resolved.ABSENT else bool(lazy),
        "mamba_track_interval": got("mamba_track_interval"),
        "skip_decode_lock": skip_decode_lock(),
        "replayssm": bool(got("enable_linear_replayssm_spec", False)),
        "speculative_algorithm": got("speculative_algorithm"),
        "speculative_num_draft_tokens": got("speculative_num_draft_tokens"),
        "speculative_num_steps": got("speculative_num_steps"),
        "speculative_eagle_topk": got("speculative_eagle_topk"),
        "max_running_requests": got("max_running_requests"),
        "max_mamba_cache_size": got("max_mamba_cache_size"),
        "mem_fraction_static": got("mem_fraction_static"),
        "mamba_full_memory_ratio": got("mamba_full_memory_ratio"),
        "page_size": got("page_size"),
        "tp_size": got("tp_size", 1),
        "pp_size": got("pp_size", 1),
        "attn_dp_size": attn_dp_size(sa),
        "disaggregation_mode": got("disaggregation_mode", "null"),
    }


# --- weights from the checkpoint ------------------------------------------------------------------------------

#: The draft (MTP / NEXTN) model's own tensors in the target's checkpoint.
DRAFT_OWN = ("mtp.", "mtp_", ".mtp")
#: Name parts of the embedding and output head when the config gives no vocabulary size to find them by.
DRAFT_SHARED = ("embed", "lm_head")


def _tensors(path: Path) -> dict[str, tuple[int, tuple[int, ...]]]:
    """``name -> (bytes, shape)`` of every tensor of one safetensors file, from its header (nothing else is read)."""
    with path.open("rb") as fh:
        (n,) = struct.unpack("<Q", fh.read(8))
        if n > 100 << 20:
            raise ValueError(f"{path.name}: a {n}-byte header is not a safetensors header")
        header = json.loads(fh.read(n))
    return {
        k: (int(v["data_offsets"][1]) - int(v["data_offsets"][0]), tuple(int(d) for d in v.get("shape", ())))
        for k, v in header.items()
        if k != "__metadata__"
    }


def text_config(model_path: Path) -> dict[str, Any]:
    """The language model's part of ``config.json`` (``text_config`` of a multimodal one); {} without one."""
    try:
        cfg = json.loads((model_path / "config.json").read_text())
    except (OSError, ValueError):
        return {}
    text = cfg.get("text_config") if isinstance(cfg, dict) else None
    return text if isinstance(text, dict) else cfg if isinstance(cfg, dict) else {}


def checkpoint_weights(model_path: Path, *, draft_from_same: bool) -> dict[str, Any]:
    """The weights one launch loads from ``model_path``, in GiB, and how they were counted: the target (every
    tensor but the MTP layers), and, when the draft model is the same checkpoint, the draft's: its MTP layers plus
    its own copy of the embedding and output head (SGLang's MTP classes build both and load them from the same
    tensors; shared with the target only after loading), found as the 2-D tensors with a vocabulary-sized
    dimension (by name where the config has no ``vocab_size``). The safetensors headers give each tensor's bytes;
    without them, the index's ``total_size`` (then the whole checkpoint counts as the target's)."""
    files = sorted(model_path.glob("*.safetensors"))
    if files:
        tensors: dict[str, tuple[int, tuple[int, ...]]] = {}
        for f in files:
            tensors.update(_tensors(f))
        vocab = text_config(model_path).get("vocab_size")

        def copied_by_draft(name: str, shape: tuple[int, ...]) -> bool:
            if isinstance(vocab, int) and vocab > 0:
                return len(shape) == 2 and vocab in shape
            return any(t in name for t in DRAFT_SHARED)

        own = sum(b for k, (b, _) in tensors.items() if any(t in k for t in DRAFT_OWN))
        shared = sum(
            b for k, (b, shape) in tensors.items() if not any(t in k for t in DRAFT_OWN) and copied_by_draft(k, shape)
        )
        target = sum(b for b, _ in tensors.values()) - own
        draft = own + shared if draft_from_same else 0
        how = f"{len(files)} safetensors file(s): target {target / GIB:.3f} GiB (all but the MTP layers)"
        if draft_from_same:
            how += f", draft {draft / GIB:.3f} GiB (MTP layers {own / GIB:.3f} + its embedding and head)"
        return {"target_gib": target / GIB, "draft_gib": draft / GIB, "how": how}
    index = model_path / "model.safetensors.index.json"
    if index.is_file():
        total = int(json.loads(index.read_text()).get("metadata", {}).get("total_size", 0))
        if total > 0:
            return {
                "target_gib": total / GIB,
                "draft_gib": 0.0,
                "how": "the safetensors index's total_size (shards absent: the draft's share not counted)",
            }
    return {"target_gib": 0.0, "draft_gib": 0.0, "how": "no safetensors in the model directory: weights not counted"}


# --- what the load allocates beside the checkpoint ------------------------------------------------------------

#: SGLang's RoPE table reserve (0.5.23 ``utils/common.py:4999-5036``, ``environ.py:1545-1548``): the context plus
#: ``steps x draft tokens x`` this factor plus this margin, rounded up to this alignment; one fp32 row of
#: ``rotary_dim`` values (cos and sin halves) per position on CUDA (``rotary_embedding/base.py:115-154``).
ROPE_SPEC_FACTOR, ROPE_MARGIN, ROPE_ALIGN = 2, 256, 128


def rope_table_bytes(cfg: dict[str, Any], context_len: int | None, steps: int, draft_tokens: int) -> int:
    """The bytes of the RoPE table SGLang builds at load for a model with ``cfg`` (its text config): one table,
    which the target's attention layers and the MTP draft share (``get_rope`` caches it by its parameters:
    seen on the H200, the draft's table is the target's storage); 0 for a model without RoPE (no
    ``rope_theta``: Nemotron-H's attention has no positional encoding)."""
    params = cfg.get("rope_parameters")
    rope: dict[str, Any] = params if isinstance(params, dict) else {}
    if cfg.get("rope_theta") is None and rope.get("rope_theta") is None:
        return 0
    head_dim = cfg.get("head_dim") or (int(cfg["hidden_size"]) // int(cfg["num_attention_heads"]))
    factor = rope.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0))
    rotary_dim = int(int(head_dim) * float(factor)) if float(factor) < 1.0 else int(head_dim)
    base = int(context_len or cfg.get("max_position_embeddings") or 2048)
    rows = base + int(steps or 0) * int(draft_tokens or 0) * ROPE_SPEC_FACTOR + ROPE_MARGIN
    rows = (rows + ROPE_ALIGN - 1) // ROPE_ALIGN * ROPE_ALIGN
    return rows * rotary_dim * 4
