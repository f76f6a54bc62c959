"""``sglang-mamba-dedup plan``: how many requests fit, before the server starts.

Give it the server's own command line (``plan [options] -- <launch_server flags>``) or ``--model-path`` and the
sizing flags. The launch is resolved as ``launch_server`` resolves it (SGLang's parser and resolution, for a CUDA
GPU even on a CPU machine: overlap scheduling, the mamba strategy and its track slots, ReplaySSM), the state
shape comes from SGLang's own config class of the checkpoint, the weights from the checkpoint's tensors, and then
the installed SGLang's own mamba-cache estimator runs, once stock and once with the plugin. It prints the
resolved settings, mamba slots, slots per request (SGLang's own ratio), the running requests the mamba pool
admits, the bytes per request by buffer, what is left for the KV cache, and the smallest
``--mem-fraction-static`` that admits every request asked for. ``--shape`` (a model of the plugin's table, no
checkpoint) is a rougher what-if: its settings are not resolved as a launch.

The budget is SGLang's: ``free x fraction - weights`` (less its multimodal and pre-capture reserves where the
release has them), where ``free`` is the GPU's free memory when the server starts loading (``--gpu-memory-gb``;
SGLang logs it as ``Load weight begin. avail mem=``). SGLang measures what the load really took; the checkpoint's
bytes miss the model's buffers (e.g. the rotary cache), so a prediction can be a few slots high: the output says
how many slots 100 MB of budget is.
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
from ._args import number, positive_int, switched

MiB = 1 << 20
GiB = 1 << 30

EPILOG = """examples:
  sglang-mamba-dedup plan --gpu-memory-gb 139 -- --model-path /models/Qwen3.5-0.8B \\
      --speculative-algorithm NEXTN --speculative-num-steps 3 --speculative-eagle-topk 1 \\
      --speculative-num-draft-tokens 4 --mem-fraction-static 0.15 --max-running-requests 256
  sglang-mamba-dedup plan --shape qwen3.5-0.8b --gpu-memory-gb 80 --weights-gb 1.6
  sglang-mamba-dedup plan --model-path /models/Qwen3-Next-80B-A3B --tp-size 4 --max-running-requests 128
  sglang-mamba-dedup plan --shape nemotron-h-8b --mem-fraction-static 0.6 --json

exit codes: 0 table printed; 1 SGLang's estimator failed on these settings (its message is printed);
2 usage error, unknown model or option"""


class PlanError(ValueError):
    """A bad model or option: one line, exit 2."""


#: The largest value a config field may hold before the planner calls it nonsense (no model has more).
FIELD_LIMIT = 1 << 20


def _count(cfg: dict[str, Any], key: str, *, low: int = 1) -> int:
    """A whole number of the config between ``low`` and :data:`FIELD_LIMIT` (a usage error otherwise)."""
    value = cfg[key]
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= FIELD_LIMIT:
        raise PlanError(f"config.json: {key} = {value!r} is not a whole number from {low} to {FIELD_LIMIT}")
    return value


def _gdn_shape(name: str, cfg: dict[str, Any]) -> ModelShape:
    need = ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_conv_kernel_dim")
    missing = [k for k in need + ("num_hidden_layers",) if k not in cfg]
    if missing:
        raise PlanError(f"config of {name} lacks {', '.join(missing)}")
    if cfg.get("linear_value_head_dim", cfg["linear_key_head_dim"]) != cfg["linear_key_head_dim"]:
        raise PlanError("linear_key_head_dim != linear_value_head_dim is not a shape the plugin knows")
    layers = _count(cfg, "num_hidden_layers")
    if isinstance(cfg.get("layer_types"), list):
        if len(cfg["layer_types"]) != layers:
            raise PlanError(
                f"config.json: layer_types lists {len(cfg['layer_types'])} layers, num_hidden_layers says {layers}"
            )
        linear = sum(1 for t in cfg["layer_types"] if t == "linear_attention")
    elif cfg.get("full_attention_interval") is not None:
        linear = layers - layers // _count(cfg, "full_attention_interval")
    else:
        raise PlanError(f"config of {name} says neither layer_types nor full_attention_interval")
    return ModelShape(
        name,
        layers=layers,
        gdn_layers=linear,
        key_heads=_count(cfg, "linear_num_key_heads"),
        value_heads=_count(cfg, "linear_num_value_heads"),
        head_dim=_count(cfg, "linear_key_head_dim"),
        conv_kernel=_count(cfg, "linear_conv_kernel_dim", low=2),
        ssm_dtype=_ssm_dtype(cfg),
    )


def _ssm_dtype(cfg: dict[str, Any]) -> str:
    value = str(cfg.get("mamba_ssm_dtype") or "float32")
    if value not in ("float32", "bfloat16", "float16"):
        raise PlanError(f"config.json: mamba_ssm_dtype = {value!r} is not float32, bfloat16 or float16")
    return value


def _mamba2_shape(name: str, cfg: dict[str, Any]) -> ModelShape:
    pattern = cfg.get("hybrid_override_pattern") or ""
    if not isinstance(pattern, str) or len(pattern) > FIELD_LIMIT:
        raise PlanError(f"config.json: hybrid_override_pattern = {pattern!r:.40} is not a layer pattern")
    need = ("mamba_num_heads", "mamba_head_dim", "ssm_state_size", "conv_kernel")
    missing = [k for k in need if k not in cfg] + ([] if pattern else ["hybrid_override_pattern"])
    if missing:
        raise PlanError(f"config of {name} lacks {', '.join(missing)}")
    group_key = "mamba_n_groups" if "mamba_n_groups" in cfg else "n_groups"
    if group_key not in cfg:
        raise PlanError(f"config of {name} lacks n_groups")
    return ModelShape(
        name,
        layers=len(pattern),
        gdn_layers=pattern.count("M"),
        key_heads=_count(cfg, group_key),
        value_heads=_count(cfg, "mamba_num_heads"),
        head_dim=_count(cfg, "mamba_head_dim"),
        conv_kernel=_count(cfg, "conv_kernel", low=2),
        state_size=_count(cfg, "ssm_state_size"),
        mixer="mamba2",
        ssm_dtype=_ssm_dtype(cfg),
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
    except (OSError, ValueError, RecursionError) as exc:
        raise PlanError(f"{cfg_file}: not readable JSON ({type(exc).__name__})") from None
    if not isinstance(cfg, dict):
        raise PlanError(f"{cfg_file}: not a JSON object")
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else None
    model_type = (text or cfg).get("model_type") or cfg.get("model_type")
    reader = MODEL_TYPES.get(str(model_type))
    if reader is None:
        raise PlanError(
            f"model_type {model_type!r} is not a hybrid model the plugin knows (known: {', '.join(MODEL_TYPES)})"
        )
    shape = reader(path.name, {**cfg, **(text or {})})
    try:
        weights = sum(f.stat().st_size for f in path.glob("*.safetensors"))
    except OSError as exc:  # a dangling link
        raise PlanError(f"{path}: a safetensors file cannot be read ({exc})") from None
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


_fraction = number(float, high=1.0)

#: Sizing flags that also exist as launch flags: given as planner flags they are turned into launch flags;
#: given after ``--`` they must not be given here too. ``None`` default = not given.
SIZING_FLAGS = (
    "tp_size",
    "pp_size",
    "max_running_requests",
    "speculative_num_draft_tokens",
    "mem_fraction_static",
    "disable_radix_cache",
    "enable_linear_replayssm_spec",
    "mamba_ssm_dtype",
    "disaggregation_mode",
    "disaggregation_decode_extra_slots",
)
DEFAULTS = dict(tp_size=1, pp_size=1, max_running_requests=256, speculative_num_draft_tokens=4, mem_fraction_static=0.8)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="sglang-mamba-dedup plan",
        usage="%(prog)s [options] [-- <launch_server flags>]",
        description=__doc__.split("\n\n")[0],
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    model = ap.add_mutually_exclusive_group()
    model.add_argument("--model-path", type=Path, help="model directory (config.json and the safetensors headers)")
    model.add_argument("--shape", choices=list(MODELS), help="a model of the plugin's shape table (no checkpoint)")
    ap.add_argument("--tp-size", type=positive_int, default=None)
    ap.add_argument("--pp-size", type=positive_int, default=None, help="pipeline stages (a stage holds its layers)")
    ap.add_argument("--max-running-requests", type=positive_int, default=None)
    ap.add_argument("--speculative-num-draft-tokens", type=positive_int, default=None)
    ap.add_argument("--mem-fraction-static", type=_fraction, default=None)
    ap.add_argument(
        "--gpu-memory-gb",
        type=number(float),
        default=80.0,
        help="the GPU's free memory (GiB) when the server starts loading: SGLang's 'Load weight begin. avail mem=' "
        "(default 80)",
    )
    ap.add_argument(
        "--weights-gb",
        type=number(float, inclusive=True),
        default=None,
        help="weights on one rank, target and draft (default: counted from the checkpoint's tensors)",
    )
    ap.add_argument(
        "--rest-gb",
        type=number(float),
        default=None,
        help="the memory SGLang handed its mamba estimator (a server log's 'estimator budget'): replaces the "
        "budget arithmetic, to check the sizing against a server",
    )
    ap.add_argument("--disable-radix-cache", action="store_true", default=None, help="one mamba slot per request")
    ap.add_argument(
        "--enable-linear-replayssm-spec", action="store_true", default=None, help="ReplaySSM verify (GDN, 0.5.17+)"
    )
    ap.add_argument("--mamba-ssm-dtype", choices=["float32", "bfloat16"], default=None)
    ap.add_argument(
        "--disaggregation-mode",
        choices=["null", "prefill", "decode"],
        default=None,
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


def split_argv(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """``(planner flags, launch flags or None)``: everything after the first ``--`` is the launch's."""
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1 :]
    return argv, None


def _given(args) -> list[str]:
    return [f for f in SIZING_FLAGS if getattr(args, f, None) is not None]


def _value(args, name: str):
    value = getattr(args, name, None)
    return DEFAULTS.get(name) if value is None else value


def launch_argv(args) -> list[str]:
    """The ``launch_server`` flags the planner's own sizing flags stand for (``--model-path`` given): NEXTN with
    the draft model from the same checkpoint, as a Qwen3.5 / Nemotron-H MTP launch is written."""
    d = _value(args, "speculative_num_draft_tokens")
    path = str(args.model_path)
    argv = ["--model-path", path, "--speculative-algorithm", "NEXTN", "--speculative-num-steps", str(max(1, d - 1))]
    argv += ["--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", str(d)]
    argv += ["--speculative-draft-model-path", path]
    for name in ("tp_size", "pp_size", "max_running_requests", "mem_fraction_static"):
        argv += [f"--{name.replace('_', '-')}", str(_value(args, name))]
    for name in ("disable_radix_cache", "enable_linear_replayssm_spec"):
        if getattr(args, name):
            argv.append(f"--{name.replace('_', '-')}")
    for name in ("mamba_ssm_dtype", "disaggregation_mode", "disaggregation_decode_extra_slots"):
        if getattr(args, name) is not None:
            argv += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    return argv


def _flag_value(argv: list[str], flag: str) -> str | None:
    for i, a in enumerate(argv):
        if a == flag and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def _check_launch_argv(argv: list[str]) -> Path:
    """The launch's model directory, after the checks that need no SGLang (one line each, exit 2)."""
    model = _flag_value(argv, "--model-path") or _flag_value(argv, "--model")
    if model is None:
        raise PlanError("the launch flags after -- have no --model-path")
    path = Path(model)
    if not (path / "config.json").is_file():
        raise PlanError(f"{path} has no config.json (the planner reads the checkpoint's config; no download)")
    try:
        cfg = json.loads((path / "config.json").read_text())
    except (OSError, ValueError, RecursionError) as exc:
        raise PlanError(f"{path / 'config.json'}: not readable JSON ({type(exc).__name__})") from None
    if not isinstance(cfg, dict):
        raise PlanError(f"{path / 'config.json'}: not a JSON object")
    shape_from_config(path)  # our own reading: a hybrid model the plugin knows, with sane numbers
    return path


def _estimate(cp, mixer: str, args, rest_gb: float, plugin: bool, launch=None) -> dict[str, Any]:
    from .. import ledger, sizing
    from ..patches import pool_config
    from ..testing import estimator

    if launch is not None:
        d, replay = launch.settings["speculative_num_draft_tokens"], launch.settings["replayssm"]
    else:
        d, replay = _value(args, "speculative_num_draft_tokens"), bool(args.enable_linear_replayssm_spec)
    with switched("1" if plugin else "0"):
        ledger.reset()
        if launch is not None:
            from .. import launch_config

            launch_config.publish(launch.server_args)
            est = estimator.run(cp, total_rest_gb=rest_gb, launch=launch, gdn=mixer == "gdn")
        else:
            est = estimator.run(
                cp,
                total_rest_gb=rest_gb,
                draft_tokens=d,
                max_running_requests=_value(args, "max_running_requests"),
                replayssm=replay,
                radix=not args.disable_radix_cache,
                gdn=mixer == "gdn",
                extra=_disaggregation(args),
            )
        decision = dict(pool_config.last_estimate) if plugin else {}
    dedup = bool(plugin and decision.get("applied")) or _upstream_dedups()
    import inspect

    from sglang.srt.server_args import ServerArgs

    record_len = inspect.signature(ServerArgs).parameters.get("linear_replayssm_cache_len")
    ring = sizing.ring_bytes(cp, record_len.default if record_len else None) if replay else 0
    per = sizing.request_bytes(cp, d, dedup=dedup, replayssm=replay, ring=ring or 0)
    return {
        "mamba_slots": est.slots,
        "slots_per_request": est.ratio,
        "running_requests": est.running,
        "capped_by_mamba_pool": est.running < est.asked,
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
    mode = args.disaggregation_mode or "null"
    if mode != "null":
        out["disaggregation_mode"] = mode
    if mode == "decode" and "disaggregation_decode_extra_slots" in estimator.server_args_fields():
        extra = args.disaggregation_decode_extra_slots
        if extra is None:
            extra = pool_config.default_pre_alloc(_value(args, "max_running_requests"))
        out["disaggregation_decode_extra_slots"] = extra
    return out


def _upstream_dedups() -> bool:
    """Whether the installed release's stock pool already allocates the deduplicated window (0.5.14+)."""
    from .. import versions

    return versions.mode_for(versions.installed_sglang_version()) != "backport"


def _check_flags(args) -> None:
    """The planner-flag checks that need no model (one line each, exit 2)."""
    from .. import versions
    from ..testing import estimator

    release = versions.installed_sglang_version()
    if args.enable_linear_replayssm_spec and "enable_linear_replayssm_spec" not in estimator.server_args_fields():
        raise PlanError(
            f"SGLang {release} has no --enable-linear-replayssm-spec "
            "(0.5.17+; 0.5.16 spells it --enable-gdn-replayssm-spec and its estimator does not price it)"
        )
    if args.disaggregation_decode_extra_slots is not None:
        if (args.disaggregation_mode or "null") != "decode":
            raise PlanError("--disaggregation-decode-extra-slots needs --disaggregation-mode decode")
        if args.disaggregation_decode_extra_slots < 0:
            raise PlanError("--disaggregation-decode-extra-slots must be 0 or more")
        if "disaggregation_decode_extra_slots" not in estimator.server_args_fields():
            raise PlanError(
                f"SGLang {release} has no --disaggregation-decode-extra-slots (0.5.14+); "
                "it pre-allocates SGLANG_DISAGGREGATION_NUM_PRE_ALLOCATE_REQS, or twice the requests up to 32"
            )


def plan(args, launch_flags: list[str] | None = None) -> dict[str, Any]:
    from .. import versions

    problem = versions.support_problem(versions.installed_sglang_version())
    if problem:
        raise RuntimeError(problem)
    if launch_flags is not None:
        if args.model_path is not None or args.shape is not None or _given(args):
            given = ["model_path"] * (args.model_path is not None) + ["shape"] * (args.shape is not None) + _given(args)
            raise PlanError(
                "give the model and sizing flags either after -- (as launch_server flags) or as planner flags, "
                f"not both (also given here: {', '.join('--' + g.replace('_', '-') for g in given)})"
            )
        _check_launch_argv(launch_flags)
        return _plan_launch(args, launch_flags)
    if args.model_path is None and args.shape is None:
        raise PlanError("say which model: --model-path DIR, --shape NAME, or -- <launch_server flags>")
    if args.shape is not None and args.enable_linear_replayssm_spec and MODELS[args.shape].mixer != "gdn":
        raise PlanError(
            f"--enable-linear-replayssm-spec covers Gated DeltaNet models only, not {MODELS[args.shape].mixer}"
        )
    _check_flags(args)
    if args.model_path is not None:
        _check_launch_argv(["--model-path", str(args.model_path)])
        return _plan_launch(args, launch_argv(args))
    return _plan_shape(args)


def _plan_launch(args, argv: list[str]) -> dict[str, Any]:
    from .. import launch_config, versions

    note = None
    try:
        launch = launch_config.resolve(argv, gpu_memory_gb=args.gpu_memory_gb)
        mixer = launch_config.mixer(launch.model_config)
    except launch_config.LaunchError as exc:
        raise PlanError(str(exc)) from None
    st = launch.settings
    cp, note = launch_cache_params(launch)
    if not st["speculative_num_draft_tokens"]:
        raise PlanError("the launch has no speculative decoding (--speculative-algorithm NEXTN): nothing to plan")
    draft_path = _flag_value(argv, "--speculative-draft-model-path")
    model_path = Path(_flag_value(argv, "--model-path") or _flag_value(argv, "--model") or ".")
    same = draft_path is None or Path(draft_path).resolve() == model_path.resolve()
    try:
        weights = launch_config.checkpoint_weights(model_path, draft_from_same=same)
    except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
        raise PlanError(f"{model_path}: the safetensors headers cannot be read ({type(exc).__name__}: {exc})") from None
    tp, pp = int(st["tp_size"] or 1), int(st["pp_size"] or 1)
    if args.weights_gb is not None:
        weights_gb, how = args.weights_gb, "given (--weights-gb)"
    else:
        weights_gb = (weights["target_gib"] + weights["draft_gib"]) / (tp * pp)
        how = weights["how"] + (f", / TP {tp}" if tp > 1 else "") + (f", / PP {pp} (even stages)" if pp > 1 else "")
        if not same:
            how += "; the draft model is another checkpoint: not counted (pass --weights-gb)"
    budget = Budget(launch, args.gpu_memory_gb, weights_gb, args.rest_gb)
    rest = budget.rest(st["mem_fraction_static"])
    if rest <= 0:
        need = (weights_gb + budget.reserves_gb()) / args.gpu_memory_gb
        raise PlanError(
            f"no memory left after the weights: {args.gpu_memory_gb:g} GB free x {st['mem_fraction_static']} - "
            f"weights {weights_gb:.2f} GB (the fraction must be above {need:.3f})"
        )
    doc: dict[str, Any] = {
        "sglang": versions.installed_sglang_version(),
        "model": model_path.name,
        "mixer": mixer,
        "launch": {"argv": launch.argv, "resolved": st},
        "settings": {
            "tp_size": tp,
            "max_running_requests": st["max_running_requests"],
            "speculative_num_draft_tokens": st["speculative_num_draft_tokens"],
            "mem_fraction_static": st["mem_fraction_static"],
            "gpu_memory_gb": args.gpu_memory_gb,
            "weights_gb": weights_gb,
            "radix_cache": st["radix_cache"],
            "enable_linear_replayssm_spec": st["replayssm"],
            "ssm_dtype": str(cp.dtype.temporal).replace("torch.", ""),
            "disaggregation_mode": st["disaggregation_mode"] or "null",
        },
        "weights": {"gb": weights_gb, "how": how},
        "budget_gb": rest,
        "budget_how": budget.how(),
        "note": note,
    }
    for key, plugin in (("stock", False), ("plugin", True)):
        est = _estimate(cp, mixer, args, rest, plugin, launch=launch)
        est["kv_tokens"] = int(est["kv_cache_gb"] * GiB) // max(1, kv_bytes_per_token(launch, len(cp.layers)))
        est["fraction_needed"] = None
        est["starts"] = est["kv_cache_gb"] > 0
        if args.rest_gb is None:  # what fraction admits every request asked for, capped or not
            est["fraction_needed"] = _fraction_needed(cp, mixer, args, launch, budget, plugin, est)
        doc[key] = est
    per_slot = doc["plugin"]["reserved_gb"] / max(1, doc["plugin"]["mamba_slots"])
    doc["slots_per_100mb"] = round(0.1 / 1.073741824 / per_slot * _mamba_share(st), 2) if per_slot else None
    return doc


def launch_cache_params(launch) -> tuple[Any, str | None]:
    """``(cache params, note)`` of a resolved launch: SGLang's own, or, where the release's config asks a live
    process group for them (0.5.14, 0.5.15, and older), the plugin's reading of ``config.json`` (the note says so)."""
    from .. import launch_config

    try:
        return launch.cache_params, None
    except launch_config.LaunchError as exc:
        from ..testing.sglang_pool import cache_params

        path = Path(_flag_value(launch.argv, "--model-path") or _flag_value(launch.argv, "--model") or ".")
        shape = shard(shape_from_config(path)[0], int(launch.settings["tp_size"] or 1))
        return cache_params(shape), f"state shape read by the plugin from config.json ({exc})"


def _mamba_share(st: dict[str, Any]) -> float:
    r = st.get("mamba_full_memory_ratio")
    return float(r) / (1 + float(r)) if r else 1.0


class Budget:
    """SGLang's memory budget for the mamba estimator at a fraction ``f``: ``free x f - weights``, less the
    multimodal reserve and, where the release sizes the KV cache after graph capture, the pre-capture
    activation reserve (0.5.23: ``KVCacheConfigurator._profile_available_bytes``); ``rest_gb`` fixes it."""

    def __init__(self, launch, free_gb: float, weights_gb: float, rest_gb: float | None) -> None:
        self.launch, self.free, self.weights, self.fixed = launch, free_gb, weights_gb, rest_gb

    def _mm_gb(self) -> float:
        try:
            from sglang.srt.mem_cache.kv_cache_configurator import mm_runtime_reservation_gb
            from sglang.srt.runtime_context import get_mm
        except ImportError:
            return 0.0
        return float(
            mm_runtime_reservation_gb(
                is_multimodal=bool(getattr(self.launch.model_config, "is_multimodal", False)),
                mm_feature_transport=get_mm().mm_feature_transport,
            )
        )

    def _pre_capture_gb(self) -> float:
        try:
            from sglang.srt.arg_groups.overrides import post_capture_kv_sizing_planned
            from sglang.srt.runtime_context import pre_capture_activation_reserve_mb
        except ImportError:
            return 0.0
        if not post_capture_kv_sizing_planned(self.launch.server_args):
            return 0.0
        return float(pre_capture_activation_reserve_mb(self.free * 1024)) / 1024

    def reserves_gb(self) -> float:
        from .. import launch_config

        launch_config.publish(self.launch.server_args)
        return self._mm_gb()

    def rest(self, fraction: float) -> float:
        if self.fixed is not None:
            return self.fixed
        from .. import launch_config

        launch_config.publish(self.launch.server_args)
        slack = max(self.free * (1 - fraction), self._pre_capture_gb())
        return self.free - self.weights - slack - self._mm_gb()

    def how(self) -> str:
        if self.fixed is not None:
            return "given (--rest-gb)"
        extra = []
        if self._mm_gb():
            extra.append(f"multimodal reserve {self._mm_gb():.2f} GB")
        if self._pre_capture_gb():
            extra.append(f"at least {self._pre_capture_gb():.2f} GB kept for activations before graph capture")
        return "free x fraction - weights" + (" (" + "; ".join(extra) + ")" if extra else "")


def _fraction_needed(cp, mixer: str, args, launch, budget: Budget, plugin: bool, now: dict) -> float | None:
    """The smallest ``--mem-fraction-static`` (in hundredths, as a launch line is written: the load's footprint
    on the GPU can exceed the checkpoint's bytes, and a hundredth of a GPU's memory is more than that) at which
    the mamba pool admits every request asked for, by the same estimator (``now``: the estimate at the launch's
    own fraction); None when no fraction below 1 does."""

    def fits(f: float) -> bool:
        rest = budget.rest(f)
        if rest <= 0:
            return False
        est = _estimate(cp, mixer, args, rest, plugin, launch=launch)
        return est["kv_cache_gb"] > 0 and not est["capped_by_mamba_pool"]

    own = int(round(launch.settings["mem_fraction_static"] * 100))
    admitted = now["kv_cache_gb"] > 0 and not now["capped_by_mamba_pool"]
    lo, hi = (0, own) if admitted else (own, 99)
    if not admitted and not fits(hi / 100):
        return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fits(mid / 100) else (mid, hi)
    return hi / 100


def kv_bytes_per_token(launch, mamba_layers: int) -> int:
    """KV-cache bytes per token of the target's full-attention layers plus the draft's (MTP) layers, one rank,
    in the model's dtype: what turns the KV share into SGLang's ``max_total_num_tokens`` (pages not counted)."""
    from .. import launch_config

    cfg = launch_config.mamba_config(launch.model_config)
    layers = int(getattr(cfg, "num_hidden_layers", 0))
    pattern = getattr(cfg, "hybrid_override_pattern", None)
    attn = pattern.count("*") if isinstance(pattern, str) else max(0, layers - mamba_layers)
    draft = int(getattr(cfg, "mtp_num_hidden_layers", 0) or getattr(cfg, "num_nextn_predict_layers", 0) or 1)
    tp = int(launch.settings["tp_size"] or 1)
    heads = max(1, int(getattr(cfg, "num_key_value_heads", 1)) // tp)
    head_dim = int(
        getattr(cfg, "head_dim", 0)
        or int(getattr(cfg, "hidden_size", 0)) // int(getattr(cfg, "num_attention_heads", 1))
    )
    return 2 * (attn + draft) * heads * head_dim * 2


def _plan_shape(args) -> dict[str, Any]:
    from .. import versions

    weights_note = None
    shape = MODELS[args.shape]
    shape = shard(shape, _value(args, "tp_size"))
    if args.mamba_ssm_dtype:
        shape = dataclasses.replace(shape, ssm_dtype=args.mamba_ssm_dtype)
    if args.enable_linear_replayssm_spec and shape.mixer != "gdn":
        raise PlanError(f"--enable-linear-replayssm-spec covers Gated DeltaNet models only, not {shape.mixer}")
    if (args.disaggregation_mode or "null") == "decode":
        args.disable_radix_cache = True  # SGLang's decode server runs without the radix cache
    if args.weights_gb is not None:
        weights_gb = args.weights_gb
    else:
        weights_gb, weights_note = 0.0, "weights not counted (pass --weights-gb)"
    frac = _value(args, "mem_fraction_static")
    budget = args.rest_gb if args.rest_gb is not None else args.gpu_memory_gb * frac - weights_gb
    if budget <= 0:
        raise PlanError(f"no memory left after the weights: {args.gpu_memory_gb} GB x {frac} - {weights_gb:.2f} GB")
    from ..testing.sglang_pool import cache_params

    cp = cache_params(shape)
    doc: dict[str, Any] = {
        "sglang": versions.installed_sglang_version(),
        "model": shape.name,
        "mixer": shape.mixer,
        "launch": None,
        "settings": {
            "tp_size": _value(args, "tp_size"),
            "max_running_requests": _value(args, "max_running_requests"),
            "speculative_num_draft_tokens": _value(args, "speculative_num_draft_tokens"),
            "mem_fraction_static": frac,
            "gpu_memory_gb": args.gpu_memory_gb,
            "weights_gb": weights_gb,
            "radix_cache": not args.disable_radix_cache,
            "enable_linear_replayssm_spec": bool(args.enable_linear_replayssm_spec),
            "ssm_dtype": shape.ssm_dtype,
            "disaggregation_mode": args.disaggregation_mode or "null",
        },
        "weights": {"gb": weights_gb, "how": "given (--weights-gb)" if weights_note is None else weights_note},
        "budget_gb": budget,
        "budget_how": "free x fraction - weights",
        "note": (
            "--shape: the settings are not resolved as a launch (no checkpoint config); SGLang's estimator runs "
            "on them as given. Pass --model-path or -- <launch flags> for a launch's sizing"
        ),
        "slots_per_100mb": None,
    }
    for key, plugin in (("stock", False), ("plugin", True)):
        doc[key] = _estimate(cp, shape.mixer, args, budget, plugin)
        doc[key]["fraction_needed"] = None
        doc[key]["starts"] = doc[key]["kv_cache_gb"] > 0
    if weights_note:
        doc["note"] += "; " + weights_note
    return doc


def _resolved_line(doc: dict[str, Any]) -> str | None:
    launch = doc.get("launch")
    if not launch:
        return None
    r = launch["resolved"]
    track = "extra_buffer (track slots)" if r["mamba_extra_buffer"] else "no extra buffer"
    return (
        f"resolved as launch_server does on a CUDA GPU: radix cache {'on' if r['radix_cache'] else 'off'}, "
        f"overlap scheduling {'on' if r['overlap_schedule'] else 'off'}, mamba strategy {r['mamba_strategy']} -> "
        f"{track}, ReplaySSM {'on' if r['replayssm'] else 'off'}, {r['speculative_algorithm']} "
        f"topk {r['speculative_eagle_topk']} D={r['speculative_num_draft_tokens']}, "
        f"mamba memory ratio {r['mamba_full_memory_ratio']}"
    )


def render(doc: dict[str, Any]) -> str:
    s, p = doc["stock"], doc["plugin"]
    st = doc["settings"]
    lines = [
        f"SGLang {doc['sglang']}: {doc['model']} ({doc['mixer']}), TP {st['tp_size']}, "
        f"D={st['speculative_num_draft_tokens']} draft tokens, max running {st['max_running_requests']}, "
        f"radix {'on' if st['radix_cache'] else 'off'}, ReplaySSM {'on' if st['enable_linear_replayssm_spec'] else 'off'}, "
        f"SSM {st['ssm_dtype']}" + (f", PD {st['disaggregation_mode']}" if st["disaggregation_mode"] != "null" else ""),
    ]
    resolved = _resolved_line(doc)
    if resolved:
        lines.append(resolved)
    lines.append(f"weights {st['weights_gb']:.3f} GB: {doc['weights']['how']}")
    lines.append(
        f"budget {doc['budget_gb']:.3f} GB ({doc['budget_how']}: {st['gpu_memory_gb']:g} GB free x "
        f"{st['mem_fraction_static']} - {st['weights_gb']:.3f} GB)"
    )
    if doc["note"]:
        lines.append(f"note: {doc['note']}")
    lines += ["", f"{'':34}{'stock':>14}{'plugin':>14}"]

    def row(label: str, a, b, fmt: str) -> None:
        lines.append(f"{label:34}{format(a, fmt):>14}{format(b, fmt):>14}")

    row("mamba slots", s["mamba_slots"], p["mamba_slots"], "d")
    row("slots per running request", s["slots_per_request"], p["slots_per_request"], "d")
    row("running requests that fit", s["running_requests"], p["running_requests"], "d")
    row("mamba pool reserved (GB)", s["reserved_gb"], p["reserved_gb"], ".3f")
    row("left for the KV cache (GB)", s["kv_cache_gb"], p["kv_cache_gb"], ".3f")
    if "kv_tokens" in s and s["kv_tokens"] > 0 and p["kv_tokens"] > 0:
        row("KV cache tokens (about)", s["kv_tokens"], p["kv_tokens"], "d")
    lines.append("per request (MiB):")
    for key in s["per_request_mib"]:
        row(f"  {key.replace('_', ' ')}", s["per_request_mib"][key], p["per_request_mib"][key], ".2f")
    for label, est in (("stock", s), ("plugin", p)):
        if est.get("starts") is False:
            need = est.get("fraction_needed")
            lines.append(
                f"{label}: the server would not start (SGLang: 'Loaded weights leave no GPU memory for the KV cache'): "
                f"the mamba pool takes {est['reserved_gb']:.3f} GB of {doc['budget_gb']:.3f}; "
                + (
                    f"--mem-fraction-static {need} starts it with all {st['max_running_requests']} requests"
                    if need
                    else "no --mem-fraction-static below 1 starts it"
                )
                + ", or lower --max-running-requests"
            )
            continue
        if est["capped_by_mamba_pool"]:
            need = est.get("fraction_needed")
            lift = (
                f"--mem-fraction-static {need} admits all {st['max_running_requests']}"
                if need
                else "no --mem-fraction-static below 1 admits them all; lower --speculative-num-draft-tokens"
                + (
                    " or add --enable-linear-replayssm-spec"
                    if doc["mixer"] == "gdn" and not st["enable_linear_replayssm_spec"]
                    else ""
                )
            )
            lines.append(
                f"{label}: the mamba pool caps running requests at {est['running_requests']} of "
                f"{st['max_running_requests']}; {lift}"
            )
    for label, est in (("stock", s), ("plugin", p)):
        if est.get("starts") is not False and not est["capped_by_mamba_pool"] and est.get("fraction_needed"):
            lines.append(
                f"{label}: all {st['max_running_requests']} requests fit; the smallest --mem-fraction-static that "
                f"admits them is {est['fraction_needed']}"
            )
    if doc.get("slots_per_100mb"):
        lines.append(
            f"precision: 100 MB of budget is {doc['slots_per_100mb']} mamba slots; SGLang measures the load's "
            "footprint on the GPU, which can exceed the checkpoint's bytes (model buffers, allocator rounding)"
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
    """SGLang's import-time warnings and log lines, and the plugin's server log lines (the estimator's
    INFO/WARNING lines are for a server's log; the plan prints the same facts as a table)."""
    loggers = [logging.getLogger(n) for n in ("sglang_mamba_dedup", "sglang", "root")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def main(argv: list[str] | None = None) -> int:
    own, launch = split_argv(list(sys.argv[1:] if argv is None else argv))
    args = parser().parse_args(own)
    try:
        with _quiet():
            doc = plan(args, launch)
    except PlanError as exc:
        print(f"sglang-mamba-dedup plan: error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - SGLang's estimator refused these settings: say what it said
        print(f"sglang-mamba-dedup plan: SGLang's estimator failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(doc, indent=2) if args.json else render(doc))
    return 0
