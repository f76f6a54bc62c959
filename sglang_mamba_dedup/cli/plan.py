"""``sglang-mamba-dedup plan``: how many requests fit, before the server starts.

Runs the installed SGLang's own mamba-cache estimator on the CPU (no GPU, no weights: ``config.json`` or a
shape of the table), once stock and once with the plugin, for the server's sizing options, and prints mamba
slots, the running requests the mamba pool admits, the bytes per request by buffer and what is left for the
KV cache. The budget is simplified: ``GPU memory x --mem-fraction-static - weights``; SGLang measures the real one
on the device after loading (activations and CUDA graphs are not counted here), so compare runs with each other.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import sys
import warnings
from pathlib import Path
from typing import Any

from ..testing.shapes import MODELS, ModelShape

MiB = 1 << 20
GiB = 1 << 30

EPILOG = """examples:
  sglang-mamba-dedup plan --shape qwen3.5-0.8b --gpu-memory-gb 80 --weights-gb 1.6
  sglang-mamba-dedup plan --model-path /models/Qwen3-Next-80B-A3B --tp-size 4 --max-running-requests 128
  sglang-mamba-dedup plan --shape nemotron-h-8b --mem-fraction-static 0.6 --json

exit codes: 0 table printed; 1 SGLang's estimator failed on these settings (its message is printed);
2 usage error, unknown model or option"""


class PlanError(ValueError):
    """A bad model or option: one line, exit 2."""


def _gdn_shape(name: str, cfg: dict[str, Any]) -> ModelShape:
    need = ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_conv_kernel_dim")
    missing = [k for k in need + ("num_hidden_layers",) if k not in cfg]
    if missing:
        raise PlanError(f"config of {name} lacks {', '.join(missing)}")
    if cfg.get("linear_value_head_dim", cfg["linear_key_head_dim"]) != cfg["linear_key_head_dim"]:
        raise PlanError("linear_key_head_dim != linear_value_head_dim is not a shape the plugin knows")
    layers = int(cfg["num_hidden_layers"])
    if isinstance(cfg.get("layer_types"), list):
        linear = sum(1 for t in cfg["layer_types"] if t == "linear_attention")
    elif cfg.get("full_attention_interval"):
        linear = layers - layers // int(cfg["full_attention_interval"])
    else:
        raise PlanError(f"config of {name} says neither layer_types nor full_attention_interval")
    return ModelShape(
        name,
        layers=layers,
        gdn_layers=linear,
        key_heads=int(cfg["linear_num_key_heads"]),
        value_heads=int(cfg["linear_num_value_heads"]),
        head_dim=int(cfg["linear_key_head_dim"]),
        conv_kernel=int(cfg["linear_conv_kernel_dim"]),
    )


def _mamba2_shape(name: str, cfg: dict[str, Any]) -> ModelShape:
    pattern = str(cfg.get("hybrid_override_pattern") or "")
    need = ("mamba_num_heads", "mamba_head_dim", "ssm_state_size", "conv_kernel")
    missing = [k for k in need if k not in cfg] + ([] if pattern else ["hybrid_override_pattern"])
    if missing:
        raise PlanError(f"config of {name} lacks {', '.join(missing)}")
    groups = cfg.get("mamba_n_groups", cfg.get("n_groups"))
    if groups is None:
        raise PlanError(f"config of {name} lacks n_groups")
    return ModelShape(
        name,
        layers=len(pattern),
        gdn_layers=pattern.count("M"),
        key_heads=int(groups),
        value_heads=int(cfg["mamba_num_heads"]),
        head_dim=int(cfg["mamba_head_dim"]),
        conv_kernel=int(cfg["conv_kernel"]),
        state_size=int(cfg["ssm_state_size"]),
        mixer="mamba2",
        ssm_dtype=str(cfg.get("mamba_ssm_dtype") or "float32"),
    )


#: model_type of config.json -> how its state shape is read (and where the text part lives).
MODEL_TYPES = {
    "qwen3_next": _gdn_shape,
    "qwen3_5": _gdn_shape,
    "qwen3_5_text": _gdn_shape,
    "qwen3_5_moe": _gdn_shape,
    "qwen3_5_moe_text": _gdn_shape,
    "nemotron_h": _mamba2_shape,
}


def shape_from_config(path: Path) -> tuple[ModelShape, float | None]:
    """``(shape, weights_gb)`` of a model directory: its ``config.json`` (the text part of a multimodal one),
    and the size of its ``*.safetensors`` files when present (None otherwise)."""
    cfg_file = path / "config.json"
    if not cfg_file.is_file():
        raise PlanError(f"{path} has no config.json")
    try:
        cfg = json.loads(cfg_file.read_text())
    except (OSError, ValueError) as exc:
        raise PlanError(f"{cfg_file}: not readable JSON ({exc})") from None
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else None
    model_type = (text or cfg).get("model_type") or cfg.get("model_type")
    reader = MODEL_TYPES.get(str(model_type))
    if reader is None:
        raise PlanError(
            f"model_type {model_type!r} is not a hybrid model the plugin knows (known: {', '.join(MODEL_TYPES)})"
        )
    shape = reader(path.name, {**cfg, **(text or {})})
    weights = sum(f.stat().st_size for f in path.glob("*.safetensors"))
    return shape, (weights / GiB if weights else None)


def shard(shape: ModelShape, tp: int) -> ModelShape:
    """One tensor-parallel rank's state: heads and groups divided by ``tp``."""
    if tp == 1:
        return shape
    if shape.tp != 1:
        raise PlanError(f"--shape {shape.name} is already one rank of TP {shape.tp}; pass its unsharded model")
    if shape.value_heads % tp or shape.key_heads % tp:
        raise PlanError(
            f"--tp-size {tp} does not divide {shape.name}'s heads ({shape.value_heads}) and groups ({shape.key_heads})"
        )
    return dataclasses.replace(
        shape,
        name=f"{shape.name} TP{tp} (one rank)",
        key_heads=shape.key_heads // tp,
        value_heads=shape.value_heads // tp,
        tp=tp,
    )


def _positive(kind):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number > 0, got {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
        return value

    return parse


def _fraction(text: str) -> float:
    value = _positive(float)(text)
    if value >= 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {text!r}")
    return value


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="sglang-mamba-dedup plan",
        description=__doc__.split("\n\n")[0],
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    model = ap.add_mutually_exclusive_group(required=True)
    model.add_argument("--model-path", type=Path, help="model directory (config.json is read; no weights needed)")
    model.add_argument("--shape", choices=list(MODELS), help="a model of the plugin's shape table")
    ap.add_argument("--tp-size", type=_positive(int), default=1)
    ap.add_argument("--max-running-requests", type=_positive(int), default=256)
    ap.add_argument("--speculative-num-draft-tokens", type=_positive(int), default=4)
    ap.add_argument("--mem-fraction-static", type=_fraction, default=0.8)
    ap.add_argument("--gpu-memory-gb", type=_positive(float), default=80.0, help="memory of one GPU (default 80)")
    ap.add_argument(
        "--weights-gb",
        type=float,
        default=None,
        help="weights on one rank (default: the model directory's *.safetensors / tp; else 0, and said so)",
    )
    ap.add_argument("--disable-radix-cache", action="store_true", help="one mamba slot per running request")
    ap.add_argument("--enable-linear-replayssm-spec", action="store_true", help="ReplaySSM verify (GDN, 0.5.16+)")
    ap.add_argument("--mamba-ssm-dtype", choices=["float32", "bfloat16"], default=None)
    ap.add_argument(
        "--disaggregation-mode",
        choices=["null", "prefill", "decode"],
        default="null",
        help="a PD server: prefill (no speculative state from 0.5.22) or decode (pre-allocated requests)",
    )
    ap.add_argument(
        "--disaggregation-decode-extra-slots",
        type=int,
        default=None,
        help="requests a PD-decode server pre-allocates (0.5.14+; default: SGLang's)",
    )
    ap.add_argument("--json", action="store_true", help="print the plan as JSON")
    return ap


def _estimate(cp, shape: ModelShape, args, rest_gb: float, plugin: bool) -> dict[str, Any]:
    from .. import ledger, sizing
    from ..patches import pool_config
    from ..testing import estimator
    from .demo import _switch

    with _switch("1" if plugin else "0"):
        ledger.reset()
        est = estimator.run(
            cp,
            total_rest_gb=rest_gb,
            draft_tokens=args.speculative_num_draft_tokens,
            max_running_requests=args.max_running_requests,
            replayssm=args.enable_linear_replayssm_spec,
            radix=not args.disable_radix_cache,
            gdn=shape.mixer == "gdn",
            extra=_disaggregation(args),
        )
        decision = dict(pool_config.last_estimate) if plugin else {}
    dedup = bool(plugin and decision.get("applied")) or _upstream_dedups()
    import inspect

    from sglang.srt.server_args import ServerArgs

    record_len = inspect.signature(ServerArgs).parameters.get("linear_replayssm_cache_len")
    ring = sizing.ring_bytes(cp, record_len.default if record_len else None) if args.enable_linear_replayssm_spec else 0
    per = sizing.request_bytes(
        cp, args.speculative_num_draft_tokens, dedup=dedup, replayssm=args.enable_linear_replayssm_spec, ring=ring or 0
    )
    return {
        "mamba_slots": est.slots,
        "slots_per_request": est.ratio,
        "running_requests": est.running,
        "capped_by_mamba_pool": est.running < args.max_running_requests,
        "reserved_gb": est.reserved_bytes / GiB,
        "kv_cache_gb": est.rest_gb,
        "per_request_mib": {
            "ssm_state": per.ssm_state / MiB,
            "conv_state": per.conv_state / MiB,
            "ssm_scratch": per.ssm_scratch / MiB,
            "conv_scratch_dense": per.conv_scratch_dense / MiB,
            "conv_scratch_allocated": per.conv_scratch_physical / MiB,
            "replayssm_ring": per.ring / MiB,
        },
        "plugin": decision
        and {k: v for k, v in decision.items() if k in ("applied", "reason", "top_up_bytes", "pd_decode_pre_alloc")},
    }


def _disaggregation(args) -> dict[str, Any]:
    """The PD settings as ``ServerArgs`` fields (empty for a plain server); a decode server's pre-allocated
    requests default as SGLang's start-up sets them (:func:`pool_config.default_pre_alloc`)."""
    from ..patches import pool_config
    from ..testing import estimator

    out: dict[str, Any] = {}
    if args.disaggregation_mode != "null":
        out["disaggregation_mode"] = args.disaggregation_mode
    if args.disaggregation_mode == "decode" and "disaggregation_decode_extra_slots" in estimator.server_args_fields():
        extra = args.disaggregation_decode_extra_slots
        if extra is None:
            extra = pool_config.default_pre_alloc(args.max_running_requests)
        out["disaggregation_decode_extra_slots"] = extra
    return out


def _upstream_dedups() -> bool:
    """Whether the installed release's stock pool already allocates the deduplicated window (0.5.14+)."""
    from .. import versions

    return versions.mode_for(versions.installed_sglang_version()) != "backport"


def plan(args) -> dict[str, Any]:
    from .. import versions

    problem = versions.support_problem(versions.installed_sglang_version())
    if problem:
        raise RuntimeError(problem)
    weights_note = None
    if args.model_path is not None:
        shape, weights = shape_from_config(args.model_path)
    else:
        shape, weights = MODELS[args.shape], None
    shape = shard(shape, args.tp_size)
    if args.mamba_ssm_dtype:
        shape = dataclasses.replace(shape, ssm_dtype=args.mamba_ssm_dtype)
    if args.enable_linear_replayssm_spec and shape.mixer != "gdn":
        raise PlanError(f"--enable-linear-replayssm-spec covers Gated DeltaNet models only, not {shape.mixer}")
    if args.enable_linear_replayssm_spec:
        from ..testing import estimator

        if "enable_linear_replayssm_spec" not in estimator.server_args_fields():
            raise PlanError(
                f"SGLang {versions.installed_sglang_version()} has no --enable-linear-replayssm-spec "
                "(0.5.17+; 0.5.16 spells it --enable-gdn-replayssm-spec and its estimator does not price it)"
            )
    if args.disaggregation_decode_extra_slots is not None:
        from ..testing import estimator

        if args.disaggregation_mode != "decode":
            raise PlanError("--disaggregation-decode-extra-slots needs --disaggregation-mode decode")
        if args.disaggregation_decode_extra_slots < 0:
            raise PlanError("--disaggregation-decode-extra-slots must be 0 or more")
        if "disaggregation_decode_extra_slots" not in estimator.server_args_fields():
            raise PlanError(
                f"SGLang {versions.installed_sglang_version()} has no --disaggregation-decode-extra-slots (0.5.14+); "
                "it pre-allocates SGLANG_DISAGGREGATION_NUM_PRE_ALLOCATE_REQS, or twice the requests up to 32"
            )
    if args.disaggregation_mode == "decode":
        args.disable_radix_cache = True  # SGLang's decode server runs without the radix cache
    if args.weights_gb is not None:
        weights_gb = args.weights_gb
    elif weights is not None:
        weights_gb = weights / args.tp_size
    else:
        weights_gb, weights_note = 0.0, "weights not counted (pass --weights-gb)"
    budget = args.gpu_memory_gb * args.mem_fraction_static - weights_gb
    if budget <= 0:
        raise PlanError(
            f"no memory left after the weights: {args.gpu_memory_gb} GB x {args.mem_fraction_static} - {weights_gb:.2f} GB"
        )
    from ..testing.sglang_pool import cache_params

    cp = cache_params(shape)
    return {
        "sglang": versions.installed_sglang_version(),
        "model": shape.name,
        "mixer": shape.mixer,
        "settings": {
            "tp_size": args.tp_size,
            "max_running_requests": args.max_running_requests,
            "speculative_num_draft_tokens": args.speculative_num_draft_tokens,
            "mem_fraction_static": args.mem_fraction_static,
            "gpu_memory_gb": args.gpu_memory_gb,
            "weights_gb": weights_gb,
            "radix_cache": not args.disable_radix_cache,
            "enable_linear_replayssm_spec": args.enable_linear_replayssm_spec,
            "ssm_dtype": shape.ssm_dtype,
            "disaggregation_mode": args.disaggregation_mode,
        },
        "budget_gb": budget,
        "note": weights_note,
        "stock": _estimate(cp, shape, args, budget, plugin=False),
        "plugin": _estimate(cp, shape, args, budget, plugin=True),
    }


def render(doc: dict[str, Any]) -> str:
    s, p = doc["stock"], doc["plugin"]
    st = doc["settings"]
    lines = [
        f"SGLang {doc['sglang']}: {doc['model']} ({doc['mixer']}), TP {st['tp_size']}, "
        f"D={st['speculative_num_draft_tokens']} draft tokens, max running {st['max_running_requests']}, "
        f"radix {'on' if st['radix_cache'] else 'off'}, ReplaySSM {'on' if st['enable_linear_replayssm_spec'] else 'off'}, "
        f"SSM {st['ssm_dtype']}" + (f", PD {st['disaggregation_mode']}" if st["disaggregation_mode"] != "null" else ""),
        f"budget {doc['budget_gb']:.2f} GB = {st['gpu_memory_gb']:g} GB x {st['mem_fraction_static']} - weights "
        f"{st['weights_gb']:.2f} GB" + (f" ({doc['note']})" if doc["note"] else ""),
        "",
        f"{'':34}{'stock':>14}{'plugin':>14}",
    ]

    def row(label: str, a, b, fmt: str) -> None:
        lines.append(f"{label:34}{format(a, fmt):>14}{format(b, fmt):>14}")

    row("mamba slots", s["mamba_slots"], p["mamba_slots"], "d")
    row("slots per running request", s["slots_per_request"], p["slots_per_request"], "d")
    row("running requests that fit", s["running_requests"], p["running_requests"], "d")
    row("mamba pool reserved (GB)", s["reserved_gb"], p["reserved_gb"], ".3f")
    row("left for the KV cache (GB)", s["kv_cache_gb"], p["kv_cache_gb"], ".3f")
    lines.append("per request (MiB):")
    for key in s["per_request_mib"]:
        row(f"  {key.replace('_', ' ')}", s["per_request_mib"][key], p["per_request_mib"][key], ".2f")
    for label, est in (("stock", s), ("plugin", p)):
        if est["capped_by_mamba_pool"]:
            lines.append(
                f"{label}: the mamba pool caps running requests at {est['running_requests']} of "
                f"{st['max_running_requests']} (raise --mem-fraction-static, lower --speculative-num-draft-tokens"
                + (
                    ", or add --enable-linear-replayssm-spec"
                    if doc["mixer"] == "gdn" and not st["enable_linear_replayssm_spec"]
                    else ""
                )
                + ")"
            )
    pre = (p.get("plugin") or {}).get("pd_decode_pre_alloc")
    if pre is not None:
        lines.append(
            f"PD decode: the pool keeps scratch for {pre} pre-allocated requests beyond the running ones; SGLang's "
            f"estimate leaves it unreserved, the plugin reserves it ({p['plugin']['top_up_bytes'] / GiB:.3f} GB)"
        )
    if p.get("plugin"):
        lines.append(f"plugin estimator: {p['plugin']}")
    return "\n".join(lines)


@contextlib.contextmanager
def _quiet():
    """SGLang's import-time warnings and the plugin's server log lines (the estimator's INFO/WARNING lines are
    for a server's log; the plan prints the same facts as a table)."""
    log = logging.getLogger("sglang_mamba_dedup")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        log.setLevel(level)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        with _quiet():
            doc = plan(args)
    except PlanError as exc:
        print(f"sglang-mamba-dedup plan: error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - SGLang's estimator refused these settings: say what it said
        print(f"sglang-mamba-dedup plan: SGLang's estimator failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(doc, indent=2) if args.json else render(doc))
    return 0
