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
bytes miss the model's buffers (e.g. the rotary cache), so a prediction from the flags alone can be a few slots
high: the output gives the plan again at :data:`LOAD_MARGIN_GB` less, the range the server should fall in, and
how many slots 100 MB of budget is. ``--rest-gb`` with the budget a server logged gives its numbers exactly.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import json
import logging
import os
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from packaging.specifiers import SpecifierSet

from .. import env, versions
from ..cli._args import environ, switched
from ..offline.shapes import MODELS
from ..sizing import GIB, MIB
from . import args as plan_args
from . import launch_config, sglang_estimate
from . import render as plan_render
from .model import PlanError, flag_value, model_flag, shape_from_config, shard

#: GPU memory a server's start-up takes before it sizes the pools that is neither weights nor a buffer SGLang
#: allocates (CUDA kernel modules and libraries loaded on first use, the allocator's segment rounding), which no
#: config says. Measured on the H200 (docs/memory.md "On the H200", 2026-12-03: the estimator's budget in the
#: server's log against the plan's from the same flags, 6 servers): 0.070 GiB with Nemotron-H mini; 0.1255-0.1287
#: GiB with Qwen3.5-0.8B, whose load computes its RoPE table on the GPU (the first load's memory beyond its
#: allocations: 0.061 GiB against 0.016 for Nemotron-H's; ``[load-probe]`` lines of tools/gpu-engine).
STARTUP_GB = 0.070
ROPE_STARTUP_GB = 0.055
#: The free memory a user reads before launch (SGLang's "Load weight begin. avail mem=") has two decimals: a plan
#: from it is made at up to half a hundredth more budget as well (two H200 servers of 2026-12-02 had one mamba
#: slot more than the plan at the value read, and exactly the plan at +0.005 GB).
FREE_READING_GB = 0.005
#: Another stack (GPU, driver, CUDA, torch) takes another amount: a plan from the flags alone is also made at this
#: much less budget, and the server should fall between the two.
LOAD_MARGIN_GB = 0.2
#: The two columns of a plan: SGLang's estimator as it ships, and with the plugin.
COLUMNS = (("stock", False), ("plugin", True))
#: SGLang's refusal of a KV pool of 0 or fewer tokens (0.5.23 ``MemoryPoolConfig.__post_init__``), and of a mamba
#: pool that leaves no memory for the KV cache (``KVCacheConfigurator._handle_max_mamba_cache``).
NOT_ENOUGH = "Not enough memory. Please try to increase --mem-fraction-static."
NO_KV_MEMORY = "Loaded weights leave no GPU memory for the KV cache"


class NoSGLang(RuntimeError):
    """No SGLang to plan with: missing, unsupported, or not importable (audit m-P9: not the estimator's failure)."""


def plan(args, launch_flags: list[str] | None = None) -> dict[str, Any]:
    """The plan of a model's launch (``launch_flags``, or the planner's own flags): SGLang's estimate, stock and
    with the plugin, as the ``--json`` document. SGLang's resolution exports variables into the environment (e.g.
    ``SGLANG_MAMBA_SSM_DTYPE``); they are this plan's only: the caller's environment is as it was afterwards."""
    saved = dict(os.environ)
    try:
        return _plan(args, launch_flags)
    finally:
        if dict(os.environ) != saved:
            os.environ.clear()
            os.environ.update(saved)


def _plan(args, launch_flags: list[str] | None) -> dict[str, Any]:
    problem = versions.support_problem(versions.installed_sglang_version()) or versions.import_problem()
    if problem:
        raise NoSGLang(problem)
    from ..patches import zero_copy as zero_copy_patch

    argv = plan_args.checked_launch(args, launch_flags)
    zero_copy = False
    if argv is not None:
        argv, zero_copy = plan_args.own_flags(argv)
    # the zero-copy flag as the server reads it: the plugin's estimator then reserves the accepted table
    with environ(env.ZERO_COPY, "1") if zero_copy else contextlib.nullcontext():
        doc = _plan_shape(args) if argv is None else _plan_launch(args, argv)
        doc["settings"]["zero_copy"] = zero_copy_patch.asked()
        problem = zero_copy_patch.value_problem()  # m6: a value the server would not understand either
        if problem:
            doc["settings"]["zero_copy_problem"] = problem
        elif doc["settings"]["zero_copy"] and doc["settings"].get("zero_copy_refused"):
            doc["settings"]["zero_copy_problem"] = (
                f"a server of these settings refuses it and keeps today's commit: {doc['settings']['zero_copy_refused']}"
            )
    return doc


def _zero_copy_refusal(launch) -> tuple[str | None, str | None]:
    """m5, m8: why a server of this launch would refuse the zero-copy commit (the gate's own reading of SGLang's
    resolved settings, :mod:`sglang_mamba_dedup.patches.zero_copy.eligibility`), or None; and, where it would
    serve it with the radix cache on, the mamba strategy it would serve with (issue 50 item 2), else None."""
    from ..patches.zero_copy import eligibility

    launch_config.publish(launch.server_args)
    settings = eligibility.read_settings()
    problem = eligibility.settings_problem(settings)
    return problem, None if problem else eligibility.radix_strategy(settings)


def _document(model: str, mixer: str, cp, st: dict[str, Any], args, weights_gb: float, weights_how: str):
    """The head of the plan: the model and the settings that were sized (``st``: a launch's resolved settings)."""
    return {
        "sglang": versions.installed_sglang_version(),
        "model": model,
        "mixer": mixer,
        "launch": None,
        "settings": {
            "tp_size": int(st["tp_size"] or 1),
            "attn_dp_size": int(st.get("attn_dp_size") or 1),
            "max_running_requests": st["max_running_requests"],
            "speculative_num_draft_tokens": st["speculative_num_draft_tokens"],
            "mem_fraction_static": st["mem_fraction_static"],
            "gpu_memory_gb": args.gpu_memory_gb,
            "weights_gb": weights_gb,
            "radix_cache": st["radix_cache"],
            "enable_linear_replayssm_spec": st["replayssm"],
            "ssm_dtype": str(cp.dtype.temporal).replace("torch.", ""),
            "disaggregation_mode": st["disaggregation_mode"] or "null",
            "mamba_strategy": st.get("mamba_strategy"),
            "max_mamba_cache_size": st.get("max_mamba_cache_size"),
        },
        "weights": {"gb": weights_gb, "how": weights_how},
    }


def zero_copy_asked() -> bool:
    from ..patches import zero_copy as zero_copy_patch

    return zero_copy_patch.asked()


def _check_flags_before_resolution(argv: list[str]) -> None:
    """m1: a launch flag SGLang's resolution divides by or asserts on without a word: the plan's own line first."""
    page = flag_value(argv, "--page-size")
    if page is not None:
        try:
            value = int(page)
        except ValueError:
            return  # SGLang's parser says what is wrong with it
        if value < 1:
            raise PlanError(f"--page-size {value}: it must be a whole number >= 1")


def _check_token_cap(kv: sglang_estimate.KVPool) -> None:
    """BD1: ``--max-total-tokens`` below one page leaves SGLang a KV pool of no token at any fraction:
    ``KVCacheConfigurator._apply_token_constraints`` takes the cap, ``calculate_pool_sizes_from_max_tokens`` floors it
    to whole pages, and ``MemoryPoolConfig.__post_init__`` refuses a pool of 0 or fewer tokens (0.5.23
    ``pool_configurator.py``): the server does not start."""
    cap, page = kv.max_total_tokens, kv.page_size
    if cap is not None and cap // page * page <= 0:
        raise PlanError(
            f"--max-total-tokens {cap} holds {max(0, cap // page * page)} tokens in whole pages of {page}: SGLang "
            f"refuses to start ({NOT_ENOUGH!r}), whatever the fraction; give at least one page ({page})"
        )


def _weights(args, launch, argv: list[str], model_path: Path) -> tuple[float, str, float]:
    """``(weights GB on one rank, how they were counted, start-up GB beyond them)`` of a resolved launch: given
    (``--weights-gb``), or the checkpoint's tensors (target and, from the same checkpoint, the draft) plus the RoPE
    table SGLang builds at load."""
    st = launch.settings
    draft_path = flag_value(argv, "--speculative-draft-model-path")
    same = draft_path is None or Path(draft_path).resolve() == model_path.resolve()
    try:
        weights = launch_config.checkpoint_weights(model_path, draft_from_same=same)
    except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
        raise PlanError(f"{model_path}: the safetensors headers cannot be read ({type(exc).__name__}: {exc})") from None
    tp, pp = int(st["tp_size"] or 1), int(st["pp_size"] or 1)
    startup_gb = STARTUP_GB
    if args.weights_gb is not None:
        weights_gb, how = args.weights_gb, "given (--weights-gb)"
    else:
        rope = (  # only with the checkpoint counted: "weights not counted" stays zero
            launch_config.rope_table_bytes(
                launch_config.text_config(model_path),
                getattr(launch.model_config, "context_len", None),
                st.get("speculative_num_steps") or 0,
                st["speculative_num_draft_tokens"],
            )
            if weights["target_gib"] > 0
            else 0
        )
        weights_gb = (weights["target_gib"] + weights["draft_gib"]) / (tp * pp) + rope / GIB
        startup_gb = STARTUP_GB + (ROPE_STARTUP_GB if rope else 0.0)
        how = weights["how"] + (f", / TP {tp}" if tp > 1 else "") + (f", / PP {pp} (even stages)" if pp > 1 else "")
        if rope:
            how += f", + the RoPE table SGLang builds at load {rope / GIB:.3f} GiB (fp32, shared by target and draft)"
        if not same:
            how += "; the draft model is another checkpoint: not counted (pass --weights-gb)"
    return weights_gb, how, startup_gb


def _plan_launch(args, argv: list[str]) -> dict[str, Any]:
    _check_flags_before_resolution(argv)
    try:
        launch = launch_config.resolve(argv, gpu_memory_gb=args.gpu_memory_gb)
        mixer = launch_config.mixer(launch.model_config)
    except launch_config.LaunchError as exc:
        raise PlanError(str(exc)) from None
    st = launch.settings
    _check_resolved(st, args.gpu_memory_gb, given_fraction="--mem-fraction-static" in argv)
    _check_track_interval(st, launch.model_config, mixer)
    try:
        kv = sglang_estimate.kv_pool(launch, args.gpu_memory_gb)
    except ValueError as exc:  # SGLang's own refusal of the KV cache dtype
        raise PlanError(f"--kv-cache-dtype: SGLang refused it: {exc}") from None
    _check_token_cap(kv)
    cp, note = launch_cache_params(launch)
    if st["replayssm"] and mixer != "gdn":  # m-P4: SGLang's ReplaySSM is Gated DeltaNet's (and KDA's)
        st = dict(st, replayssm=False)
        note = "; ".join(
            filter(
                None,
                [
                    note,
                    f"--enable-linear-replayssm-spec covers Gated DeltaNet models only, not {mixer}: "
                    "SGLang sizes this launch without it, and so does the plan",
                ],
            )
        )
    model_path = Path(model_flag(argv) or ".")
    weights_gb, how, startup_gb = _weights(args, launch, argv, model_path)
    budget = Budget(launch, args.gpu_memory_gb, weights_gb, args.rest_gb, startup_gb)
    rest = budget.rest(st["mem_fraction_static"])
    if rest <= 0:
        need = (weights_gb + startup_gb + budget.reserves_gb()) / args.gpu_memory_gb
        if need >= 1:  # m3: no fraction can help
            raise PlanError(
                f"the weights ({weights_gb:.2f} GB) and the start-up beyond them ({startup_gb:.3f} GB) do not fit in "
                f"the GPU's {args.gpu_memory_gb:g} GB free: no --mem-fraction-static starts it"
            )
        raise PlanError(
            f"no memory left after the weights: {args.gpu_memory_gb:g} GB free x {st['mem_fraction_static']} - "
            f"weights {weights_gb:.2f} GB (the fraction must be above {need:.3f})"
        )
    doc = _document(model_path.name, mixer, cp, st, args, weights_gb, how)
    if zero_copy_asked():
        doc["settings"]["zero_copy_refused"], doc["settings"]["zero_copy_radix"] = _zero_copy_refusal(launch)
    doc.update(launch={"argv": launch.argv, "resolved": st}, budget_gb=rest, budget_how=budget.how(), note=note)
    doc["kv"] = kv.as_dict()
    for key, plugin in COLUMNS:
        est = _estimate(cp, mixer, st, rest, plugin, launch=launch, kv=kv)
        if args.rest_gb is None:  # what fraction admits every request asked for, capped or not

            def at(f: float, plugin: bool = plugin) -> dict[str, Any] | None:
                rest_f = budget.rest(f)
                return _estimate(cp, mixer, st, rest_f, plugin, launch=launch, kv=kv) if rest_f > 0 else None

            _search_fraction(est, lambda f: _admits_all(at(f)), st["mem_fraction_static"])
            _search_start(est, lambda f: _starts(at(f)), st["mem_fraction_static"])
        if args.rest_gb is None:  # from the flags alone: the plan again if the load takes more than its bytes
            low = (
                _estimate(cp, mixer, st, rest - LOAD_MARGIN_GB, plugin, launch=launch, kv=kv)
                if rest > LOAD_MARGIN_GB
                else None
            )
            est["load_margin"] = {
                "gb": LOAD_MARGIN_GB,
                "starts": bool(low and low["starts"]),  # m-P3: at the margin SGLang may refuse to start
                "kv_cache_gb": low["kv_cache_gb"] if low else 0.0,
                "mamba_slots": low["mamba_slots"] if low else 0,
                "running_requests": low["running_requests"] if low else 0,
                # the top of the range: the free memory a user reads has two decimals (SGLang's "avail mem")
                "high": {
                    k: high[k]
                    for high in [_estimate(cp, mixer, st, rest + FREE_READING_GB, plugin, launch=launch, kv=kv)]
                    for k in ("mamba_slots", "running_requests")
                },
            }
        doc[key] = est
    per_slot = doc["plugin"]["reserved_gb"] / max(1, doc["plugin"]["mamba_slots"])
    doc["slots_per_100mb"] = round(0.1 / 1.073741824 / per_slot * _mamba_share(st), 2) if per_slot else None
    return doc


def _check_track_interval(st: dict[str, Any], model_config: Any, mixer: str) -> None:
    """Audit 2026-12-05: with the mamba extra buffer, SGLang's Mamba2 backend asserts at model load (0.5.13+) that
    the track interval is at least the model's ``mamba_chunk_size`` (its default 64 where the config has none): a
    launch SGLang refuses is refused here too, in one line."""
    interval = st.get("mamba_track_interval")
    if mixer != "mamba2" or not st["mamba_extra_buffer"] or not isinstance(interval, int):
        return
    cfg = getattr(model_config, "hf_text_config", None) or getattr(model_config, "hf_config", None)
    chunk = getattr(cfg, "mamba_chunk_size", 64)
    if isinstance(chunk, int) and interval < chunk:
        raise PlanError(
            f"--mamba-track-interval {interval} is below the model's mamba_chunk_size {chunk}: SGLang's Mamba2 "
            "backend refuses it at model load with the radix cache on (the mamba extra buffer)"
        )


def _check_resolved(st: dict[str, Any], free_gb: float, *, given_fraction: bool) -> None:
    """m-P6: SGLang's resolution accepts numbers no server runs with; the plan refuses them, as it does its own."""
    import math

    # m11: no speculative decoding is the reason, not what it leaves unresolved
    if not st["speculative_algorithm"] and not st["speculative_num_draft_tokens"]:
        raise PlanError("the launch has no speculative decoding (--speculative-algorithm NEXTN): nothing to plan")
    steps, draft = st.get("speculative_num_steps"), st["speculative_num_draft_tokens"]
    if isinstance(steps, int) and steps < 1:  # B6: SGLang resolves a negative count to a draft count of -1
        raise PlanError(
            f"--speculative-num-steps resolved to {steps} (draft tokens {draft}): it must be a whole number >= 1"
        )
    topk = st.get("speculative_eagle_topk")  # m2: SGLang's parser takes 0 and negative counts
    if topk is not None and (not isinstance(topk, int) or topk < 1):
        raise PlanError(f"--speculative-eagle-topk resolved to {topk!r}: it must be a whole number >= 1")
    if not isinstance(draft, int) or draft < 1:
        raise PlanError(f"--speculative-num-draft-tokens resolved to {draft!r}: it must be a whole number >= 1")
    ratio = st.get("mamba_full_memory_ratio")  # m6-m8: SGLang's estimator divides by it and rounds
    if ratio is not None and (not isinstance(ratio, (int, float)) or not math.isfinite(ratio) or ratio <= 0):
        raise PlanError(f"--mamba-full-memory-ratio {ratio!r}: it must be a finite number above 0")
    size = st.get("max_mamba_cache_size")  # m4, m5
    if size is not None and (not isinstance(size, int) or size < 1):
        raise PlanError(f"--max-mamba-cache-size {size!r}: it must be a whole number >= 1")
    if st.get("radix_cache") and st.get("mamba_extra_buffer_lazy") and not st.get("overlap_schedule"):
        raise PlanError(  # audit 2026-12-05 h4: SGLang asserts it at pool sizing (0.5.13+, every release with lazy)
            "--mamba-radix-cache-strategy extra_buffer_lazy with --disable-overlap-schedule: SGLang refuses it (its "
            "lazy extra buffer needs overlap scheduling; use extra_buffer)"
        )
    page = st.get("page_size")  # m2, m3
    if page is not None and (not isinstance(page, int) or page < 1):
        raise PlanError(f"--page-size {page!r}: it must be a whole number >= 1")
    running = st["max_running_requests"]
    if not isinstance(running, int) or running < 1:
        raise PlanError(f"--max-running-requests resolved to {running!r}: it must be a whole number >= 1")
    fraction = st["mem_fraction_static"]
    if not isinstance(fraction, (int, float)) or not math.isfinite(fraction) or not 0 < fraction < 1:
        raise PlanError(
            f"--mem-fraction-static resolved to {fraction!r} for {free_gb:g} GB free: it must be above 0 and below 1"
            + (
                " (SGLang derived it from the GPU's size: this much memory is too small for its reserves)"
                if not given_fraction
                else ""
            )
        )


def _plan_shape(args) -> dict[str, Any]:
    from ..offline.sglang_pool import cache_params

    st = plan_args.what_if_settings(args)
    shape = shard(MODELS[args.shape], st["tp_size"])
    if args.mamba_ssm_dtype:
        shape = dataclasses.replace(shape, ssm_dtype=args.mamba_ssm_dtype)
    weights_gb = args.weights_gb if args.weights_gb is not None else 0.0
    weights_note = None if args.weights_gb is not None else "weights not counted (pass --weights-gb)"
    frac = st["mem_fraction_static"]
    budget = args.rest_gb if args.rest_gb is not None else args.gpu_memory_gb * frac - weights_gb
    if budget <= 0:
        if weights_gb >= args.gpu_memory_gb:  # m3
            raise PlanError(
                f"the weights ({weights_gb:.2f} GB) do not fit in the GPU's {args.gpu_memory_gb:g} GB free: no "
                "--mem-fraction-static starts it"
            )
        raise PlanError(f"no memory left after the weights: {args.gpu_memory_gb} GB x {frac} - {weights_gb:.2f} GB")
    cp = cache_params(shape)
    doc = _document(shape.name, shape.mixer, cp, st, args, weights_gb, weights_note or "given (--weights-gb)")
    doc.update(
        budget_gb=budget,
        budget_how="free x fraction - weights",
        note="--shape: the settings are not resolved as a launch (no checkpoint config); SGLang's estimator runs "
        "on them as given. Pass --model-path or -- <launch flags> for a launch's sizing"
        + (f"; {weights_note}" if weights_note else ""),
        slots_per_100mb=None,
    )
    extra = dict(_disaggregation(args, st), **_strategy(st))
    if st["mamba_strategy"]:
        doc["note"] += (
            f"; radix cache on: mamba strategy {st['mamba_strategy']} with overlap scheduling on (a CUDA launch of "
            "0.5.23 resolves 'auto' to extra_buffer; other releases and models may not: --mamba-radix-cache-strategy "
            "or a launch)"
        )
    for key, plugin in COLUMNS:
        doc[key] = est = _estimate(cp, shape.mixer, st, budget, plugin, extra=extra)
        if args.rest_gb is None:  # B1: the fraction that admits them all, searched as for a launch

            def at(f: float, plugin: bool = plugin) -> dict[str, Any] | None:
                rest_f = args.gpu_memory_gb * f - weights_gb
                return _estimate(cp, shape.mixer, st, rest_f, plugin, extra=extra) if rest_f > 0 else None

            _search_fraction(est, lambda f: _admits_all(at(f)), frac)
            _search_start(est, lambda f: _starts(at(f)), frac)
    return doc


def _estimate(
    cp, mixer: str, st: dict[str, Any], rest_gb: float, plugin: bool, *, launch=None, extra=None, kv=None
) -> dict[str, Any]:
    """SGLang's estimate for a budget of ``rest_gb``, the plugin off or on: for a resolved ``launch``, or for the
    what-if settings ``st`` (with ``extra`` ``ServerArgs`` fields)."""
    from sglang.srt.server_args import ServerArgs

    from .. import ledger, sizing

    d, replay = st["speculative_num_draft_tokens"], st["replayssm"]
    with switched("1" if plugin else "0"):
        ledger.forget_reservation()
        if launch is not None:
            launch_config.publish(launch.server_args)
            est = sglang_estimate.run(cp, total_rest_gb=rest_gb, launch=launch, gdn=mixer == "gdn")
        else:
            est = sglang_estimate.run(
                cp,
                total_rest_gb=rest_gb,
                draft_tokens=d,
                max_running_requests=st["max_running_requests"],
                replayssm=replay,
                radix=st["radix_cache"],
                gdn=mixer == "gdn",
                extra=extra,
            )
        decision = ledger.last_estimate() if plugin else {}
    dedup = bool(plugin and decision.get("applied")) or not versions.release().backport
    ring = 0
    if replay:
        record_len = inspect.signature(ServerArgs).parameters.get("linear_replayssm_cache_len")
        ring = sizing.ring_bytes(cp, record_len.default if record_len else None) or 0
    per = sizing.request_bytes(cp, d, dedup=dedup, replayssm=replay, ring=ring)
    out: dict[str, Any] = {
        "mamba_slots": est.slots,
        "slots_per_request": est.ratio,
        "running_requests": est.running,
        "capped_by_mamba_pool": est.running < est.asked,
        "reserved_gb": est.reserved_bytes / GIB,
        "kv_cache_gb": est.rest_gb,
        "per_request_mib": {
            "ssm_state": per.ssm_state / MIB,
            "conv_state": per.conv_state / MIB,
            "ssm_scratch": per.ssm_scratch / MIB,
            "conv_scratch_dense": per.conv_scratch_dense / MIB,
            "conv_scratch_allocated": per.conv_scratch_physical / MIB,
            "replayssm_ring": per.ring / MIB,
        },
        "plugin": decision
        and {k: v for k, v in decision.items() if k in ("applied", "reason", "top_up_bytes", "pd_decode_pre_alloc")},
    }
    out["starts"] = out["kv_cache_gb"] > 0
    out["refusal"] = None if out["starts"] else NO_KV_MEMORY
    if not out["starts"]:  # m14: SGLang refuses to start; no negative share or token count
        out["kv_cache_gb"] = 0.0
    out["capped_by_kv_cache"] = False
    if kv is not None:  # a launch: SGLang's max_total_num_tokens (None: not priced, or it would not start)
        tokens = kv.tokens(out["kv_cache_gb"])
        if tokens is not None and tokens <= 0:  # BD1: a share too small for one page; SGLang refuses the pool
            out.update(starts=False, refusal=NOT_ENOUGH)
            tokens = None
        out["kv_tokens"] = tokens
        if tokens is not None:  # m7: SGLang caps the requests by the KV pool before the mamba pool
            kv_cap = kv_running_cap(tokens, getattr(launch.model_config, "context_len", None) if launch else None)
            wanted = min(est.asked, kv_cap)
            out.update(
                running_requests=min(wanted, est.slots // est.ratio),
                capped_by_mamba_pool=est.slots // est.ratio < wanted,
                capped_by_kv_cache=kv_cap < est.asked,
            )
    out["fraction_needed"] = None  # with fraction_searched: no fraction below 1 admits every request
    out["fraction_searched"] = False  # --rest-gb fixes the budget: no fraction was looked for
    out["fraction_starts"] = None  # set when the launch would not start: the smallest fraction that starts it
    return out


def kv_running_cap(tokens: int, context_len: int | None) -> int:
    """The running requests SGLang's KV pool of ``tokens`` admits per worker, before the mamba pool's cap (the
    release's ``resolve_max_num_reqs``, ``_resolve_max_num_reqs`` before 0.5.16): half the tokens from 0.5.14 on;
    before, the pool-size estimate ``max(min(tokens / context x 512, 4096), 2048)``."""
    if versions.in_range(versions.installed_sglang_version(), SpecifierSet(">=0.5.14")):
        return tokens // 2
    return max(min(int(tokens / (context_len or 4096) * 512), 4096), 2048)


def _admits_all(est: dict[str, Any] | None) -> bool:
    return bool(est and est["starts"] and not est["capped_by_mamba_pool"] and not est.get("capped_by_kv_cache"))


def _starts(est: dict[str, Any] | None) -> bool:
    return bool(est and est["starts"])


def _strategy(st: dict[str, Any]) -> dict[str, Any]:
    """A what-if's radix-cache strategy as the release's ``ServerArgs`` field (0.5.23 and older spell it apart)."""

    fields = sglang_estimate.server_args_fields()
    name = next((n for n in ("mamba_radix_cache_strategy", "mamba_scheduler_strategy") if n in fields), None)
    return {name: st["mamba_strategy"]} if name and st["mamba_strategy"] else {}


def _disaggregation(args, st: dict[str, Any]) -> dict[str, Any]:
    """The PD settings as ``ServerArgs`` fields (empty for a plain server); a decode server's pre-allocated
    requests default as SGLang's start-up sets them (:func:`.patches.estimator.default_pre_alloc`)."""
    from ..patches import estimator as estimator_patch

    out: dict[str, Any] = {}
    mode = st["disaggregation_mode"]
    if mode != "null":
        out["disaggregation_mode"] = mode
    if mode == "decode" and "disaggregation_decode_extra_slots" in sglang_estimate.server_args_fields():
        extra = args.disaggregation_decode_extra_slots
        if extra is None:
            extra = estimator_patch.default_pre_alloc(st["max_running_requests"])
        out["disaggregation_decode_extra_slots"] = extra
    return out


def launch_cache_params(launch) -> tuple[Any, str | None]:
    """``(cache params, note)`` of a resolved launch: SGLang's own, or, where the release's config asks a live
    process group for them (0.5.14, 0.5.15, and older), the plugin's reading of ``config.json`` (the note says so)."""
    try:
        return launch.cache_params, None
    except launch_config.LaunchError as exc:
        from ..offline.sglang_pool import cache_params

        shape = shard(shape_from_config(Path(model_flag(launch.argv) or "."))[0], int(launch.settings["tp_size"] or 1))
        return cache_params(shape), f"state shape read by the plugin from config.json ({exc})"


def _mamba_share(st: dict[str, Any]) -> float:
    r = st.get("mamba_full_memory_ratio")
    return float(r) / (1 + float(r)) if r else 1.0


class Budget:
    """SGLang's memory budget for the mamba estimator at a fraction ``f``: ``free x f - weights``, less the
    multimodal reserve and, where the release sizes the KV cache after graph capture, the pre-capture
    activation reserve (0.5.23: ``KVCacheConfigurator._profile_available_bytes``); ``rest_gb`` fixes it."""

    def __init__(
        self, launch, free_gb: float, weights_gb: float, rest_gb: float | None, startup_gb: float = 0.0
    ) -> None:
        self.launch, self.free, self.weights, self.fixed = launch, free_gb, weights_gb, rest_gb
        self.startup = startup_gb

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
        launch_config.publish(self.launch.server_args)
        return self._mm_gb()

    def rest(self, fraction: float) -> float:
        if self.fixed is not None:
            return self.fixed
        reserves = self.reserves_gb()
        slack = max(self.free * (1 - fraction), self._pre_capture_gb())
        return self.free - self.weights - self.startup - slack - reserves

    def how(self) -> str:
        if self.fixed is not None:
            return "given (--rest-gb)"
        extra = []
        if mm := self._mm_gb():
            extra.append(f"multimodal reserve {mm:.2f} GB")
        if pre := self._pre_capture_gb():
            extra.append(f"at least {pre:.2f} GB kept for activations before graph capture")
        if self.startup:
            extra.append(f"start-up beyond weights and pools {self.startup:.3f} GB, as measured on the H200")
        return "free x fraction - weights" + (" (" + "; ".join(extra) + ")" if extra else "")


def _search_fraction(est: dict[str, Any], admits_at: Callable[[float], bool], own: float) -> None:
    """Sets ``est["fraction_needed"]``: the smallest ``--mem-fraction-static`` (in hundredths, as a launch line is
    written: the load's footprint on the GPU can exceed the checkpoint's bytes, and a hundredth of a GPU's memory
    is more than that) at which the mamba pool admits every request asked for (``admits_at``, the same estimator;
    ``est``: the estimate at the launch's own fraction ``own``); None when no fraction below 1 does. Sets
    ``est["fraction_searched"]``: only then does None mean "none"."""
    own_h = _hundredth_up(own)
    admitted = _admits_all(est)
    lo, hi = (0, own_h) if admitted else (own_h - 1, 99)  # lo never admits, hi does
    est["fraction_searched"] = True
    if not admitted and not admits_at(hi / 100):
        est["fraction_needed"] = None
        return
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if admits_at(mid / 100) else (mid, hi)
    est["fraction_needed"] = hi / 100


def _hundredth_up(fraction: float) -> int:
    """m9: the hundredth ``fraction`` rounds up to (0.166 -> 17, 0.17 -> 17): the first a search may answer."""
    import math

    return math.ceil(round(fraction * 100, 6))


def _search_start(est: dict[str, Any], starts_at: Callable[[float], bool], own: float) -> None:
    """B5: sets ``est["fraction_starts"]`` when the launch would not start at its own fraction ``own``: the smallest
    ``--mem-fraction-static`` (hundredths) at which SGLang's estimate leaves a KV cache, whether or not the mamba pool
    admits every request there (a fixed ``--max-mamba-cache-size`` never does); None when none below 1 does."""
    if est["starts"]:
        return
    lo, hi = _hundredth_up(own) - 1, 99  # lo never starts it (below the own fraction)
    if not starts_at(hi / 100):
        return
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if starts_at(mid / 100) else (mid, hi)
    est["fraction_starts"] = hi / 100


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
    own, launch = plan_args.split_argv(list(sys.argv[1:] if argv is None else argv))
    args = plan_args.parser(__doc__.split("\n\n")[0]).parse_args(own)
    try:
        with _quiet():
            doc = plan(args, launch)
    except PlanError as exc:
        print(f"sglang-mamba-dedup plan: error: {exc}", file=sys.stderr)
        return 2
    except NoSGLang as exc:
        print(f"sglang-mamba-dedup plan: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - SGLang's estimator refused these settings: say what it said
        print(f"sglang-mamba-dedup plan: SGLang's estimator failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # m10: Ctrl-C while SGLang imports or the estimator runs: one line, 128 + SIGINT
        print("sglang-mamba-dedup plan: stopped by SIGINT", file=sys.stderr)
        return 130
    print(json.dumps(doc, indent=2) if args.json else plan_render.render(doc))
    return 0
