"""The planner's command line: its options, the ``launch_server`` flags they stand for, and the checks that need
no estimator (each a :class:`PlanError`: one line, exit 2)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .. import env
from ..cli._args import number, positive_int
from ..offline.shapes import MODELS
from .model import PlanError, flag_value, model_flag, shape_from_config

EPILOG = """examples:
  sglang-mamba-dedup plan --gpu-memory-gb 139 -- --model-path /models/Qwen3.5-0.8B \\
      --speculative-algorithm NEXTN --speculative-num-steps 3 --speculative-eagle-topk 1 \\
      --speculative-num-draft-tokens 4 --mem-fraction-static 0.15 --max-running-requests 256
  sglang-mamba-dedup plan --shape qwen3.5-0.8b --gpu-memory-gb 80 --weights-gb 1.6
  sglang-mamba-dedup plan --model-path /models/Qwen3-Next-80B-A3B --tp-size 4 --max-running-requests 128
  sglang-mamba-dedup plan --shape nemotron-h-8b --mem-fraction-static 0.6 --json

exit codes: 0 table printed; 1 SGLang is missing, unsupported or does not import, or its estimator failed on
these settings (its message is printed); 2 usage error, unknown model or option; 130 stopped by Ctrl-C"""

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


def parser(description: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="sglang-mamba-dedup plan",
        usage="%(prog)s [options] [-- <launch_server flags>]",
        description=description,
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
    ap.add_argument("--mem-fraction-static", type=number(float, high=1.0), default=None)
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
        "--mamba-radix-cache-strategy",
        choices=list(STRATEGIES),
        default=None,
        help="--shape with the radix cache on: the tracking buffers (default extra_buffer, what a CUDA launch of "
        "0.5.23 resolves 'auto' to; a launch's own after -- or with --model-path)",
    )
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


#: The mamba radix-cache strategies a ``--shape`` what-if can take (a launch resolves its own).
STRATEGIES = ("extra_buffer", "extra_buffer_lazy", "no_buffer")
#: What ``auto`` resolves to on a CUDA launch with speculative decoding and the radix cache (0.5.23, FACTS.md).
DEFAULT_STRATEGY = "extra_buffer"


def split_argv(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """``(planner flags, launch flags or None)``: everything after the first ``--`` is the launch's."""
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1 :]
    return argv, None


def _value(args, name: str) -> Any:
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
    for name in SIZING_FLAGS:
        value = _value(args, name)
        if name == "speculative_num_draft_tokens" or value is None:
            continue
        argv += [f"--{name.replace('_', '-')}"] + ([] if value is True else [str(value)])
    return argv


def what_if_settings(args) -> dict[str, Any]:
    """A ``--shape`` what-if's settings as the planner's flags give them, in the words of a resolved launch
    (:func:`sglang_mamba_dedup.planner.launch_config.settings_of`); a PD-decode server runs without the radix cache."""
    mode = args.disaggregation_mode or "null"
    radix = not args.disable_radix_cache and mode != "decode"
    return {
        "mamba_strategy": (args.mamba_radix_cache_strategy or DEFAULT_STRATEGY) if radix else None,
        "tp_size": _value(args, "tp_size"),
        "max_running_requests": _value(args, "max_running_requests"),
        "speculative_num_draft_tokens": _value(args, "speculative_num_draft_tokens"),
        "mem_fraction_static": _value(args, "mem_fraction_static"),
        "radix_cache": radix,
        "replayssm": bool(args.enable_linear_replayssm_spec),
        "disaggregation_mode": mode,
    }


#: The planner's own flags that launch_server does not have: after ``--`` SGLang's parser would prefix-match or
#: refuse them (``--json`` reads as ``--json-model-override-args``).
PLANNER_ONLY = ("--json", "--gpu-memory-gb", "--rest-gb", "--weights-gb", "--shape")


def _check_after_dashes(launch_flags: list[str]) -> None:
    """m-P8: ``--help`` and the planner's own flags after ``--`` are one clear line, not SGLang's help or error."""
    if "--help" in launch_flags or "-h" in launch_flags:
        raise PlanError(
            "--help after -- asks SGLang's launch_server (python -m sglang.launch_server --help); the planner's own "
            "options: sglang-mamba-dedup plan --help"
        )
    misplaced = [f for f in launch_flags if f.split("=", 1)[0] in PLANNER_ONLY]
    if misplaced:
        raise PlanError(f"{', '.join(misplaced)} is the planner's: give it before --, not among the launch flags")


def checked_launch(args, launch_flags: list[str] | None) -> list[str] | None:
    """The ``launch_server`` flags to resolve (None: a ``--shape`` what-if), after the checks that need no
    estimator."""
    if launch_flags is not None:
        _check_after_dashes(launch_flags)
        given = ["model_path"] * (args.model_path is not None) + ["shape"] * (args.shape is not None)
        given += [f for f in SIZING_FLAGS if getattr(args, f, None) is not None]
        if given:
            raise PlanError(
                "give the model and sizing flags either after -- (as launch_server flags) or as planner flags, "
                f"not both (also given here: {', '.join('--' + g.replace('_', '-') for g in given)})"
            )
    elif args.model_path is None and args.shape is None:
        raise PlanError("say which model: --model-path DIR, --shape NAME, or -- <launch_server flags>")
    else:
        if args.shape is not None and args.enable_linear_replayssm_spec and MODELS[args.shape].mixer != "gdn":
            raise PlanError(
                f"--enable-linear-replayssm-spec covers Gated DeltaNet models only, not {MODELS[args.shape].mixer}"
            )
        _check_flags(args)
        if args.mamba_radix_cache_strategy is not None and (args.shape is None or args.disable_radix_cache):
            raise PlanError(
                "--mamba-radix-cache-strategy is for a --shape what-if with the radix cache on; a launch's own goes "
                "after -- as its release spells it"
            )
        if args.shape is not None and (args.pp_size or 1) > 1:  # m-P1: an accepted flag must change the plan
            raise PlanError(
                "--pp-size needs a launch: each pipeline stage holds its own layers' state and weights, which a "
                "--shape what-if does not split; pass --model-path DIR or -- <launch_server flags>"
            )
        if args.shape is not None:
            return None
        launch_flags = launch_argv(args)
    model = model_flag(launch_flags)
    if model is None:
        raise PlanError("the launch flags after -- have no --model-path")
    shape_from_config(Path(model))  # our own reading: a hybrid model the plugin knows, with sane numbers
    return launch_flags


def _check_flags(args) -> None:
    """The planner-flag checks that need no model (one line each, exit 2)."""
    from .. import versions
    from . import sglang_estimate

    release = versions.installed_sglang_version()
    if args.enable_linear_replayssm_spec and "enable_linear_replayssm_spec" not in sglang_estimate.server_args_fields():
        raise PlanError(
            f"SGLang {release} has no --enable-linear-replayssm-spec "
            "(0.5.17+; 0.5.16 spells it --enable-gdn-replayssm-spec and its estimator does not price it)"
        )
    if args.disaggregation_decode_extra_slots is not None:
        if (args.disaggregation_mode or "null") != "decode":
            raise PlanError("--disaggregation-decode-extra-slots needs --disaggregation-mode decode")
        if args.disaggregation_decode_extra_slots < 0:
            raise PlanError("--disaggregation-decode-extra-slots must be 0 or more")
        if "disaggregation_decode_extra_slots" not in sglang_estimate.server_args_fields():
            raise PlanError(
                f"SGLang {release} has no --disaggregation-decode-extra-slots (0.5.14+); "
                "it pre-allocates SGLANG_DISAGGREGATION_NUM_PRE_ALLOCATE_REQS, or twice the requests up to 32"
            )


def own_flags(launch_flags: list[str]) -> tuple[list[str], bool]:
    """``launch_flags`` without the plugin's own launch flags (SGLang's parser knows them only where the plugin is
    loaded), and whether the zero-copy commit's was among them. The switch's own flag changes nothing here: a plan
    always shows both columns."""
    kept = [f for f in launch_flags if f not in (env.FLAG, env.ZERO_COPY_FLAG)]
    zero_copy = env.ZERO_COPY_FLAG in launch_flags
    config = flag_value(kept, "--config")
    if config is not None:  # m-P7: a --config file can carry them too
        kept, from_file = _config_without_own_flags(kept, config)
        zero_copy = zero_copy or from_file
    return kept, zero_copy


def _remove(path: str) -> None:
    import contextlib
    import os

    with contextlib.suppress(OSError):
        os.unlink(path)


def _config_without_own_flags(argv: list[str], path: str) -> tuple[list[str], bool]:
    """``argv`` with its ``--config`` file replaced by a copy without the plugin's own keys (when it has any), and
    whether the zero-copy commit's key was set there."""
    import atexit
    import os
    import tempfile

    import yaml

    try:
        with open(path) as fh:
            data = yaml.safe_load(fh)
    except (OSError, yaml.YAMLError):
        return argv, False  # SGLang's parser says what is wrong with it
    if not isinstance(data, dict):
        return argv, False
    own = {f.lstrip("-") for f in (env.FLAG, env.ZERO_COPY_FLAG)}
    ours = {k for k in data if isinstance(k, str) and k.replace("_", "-") in own}
    if not ours:
        return argv, False
    zero_copy = any(bool(data[k]) for k in ours if k.replace("_", "-") == env.ZERO_COPY_FLAG.lstrip("-"))
    fd, copy = tempfile.mkstemp(prefix="smd-plan-config-", suffix=".yaml")
    with os.fdopen(fd, "w") as fh:
        yaml.safe_dump({k: v for k, v in data.items() if k not in ours}, fh)
    atexit.register(_remove, copy)
    out = []
    for a in argv:
        out.append(f"--config={copy}" if a.startswith("--config=") else a)
    if "--config" in out:
        i = len(out) - 1 - out[::-1].index("--config")
        out[i + 1] = copy
    return out, zero_copy
