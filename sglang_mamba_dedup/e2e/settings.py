"""The engine settings of every e2e run: the deployment defaults, what SGLang will do with them, the keywords.

:func:`deployment_defaults`: decode CUDA graphs on (``cuda_graph_backend_decode=full``), prefill CUDA graphs
off (``cuda_graph_backend_prefill=disabled``: SGLang's prefill capture crashed on our machine, with and
without the plugin), the radix (prefix) cache on, overlap scheduling as SGLang decides; a default the
installed SGLang's ``ServerArgs`` has no field for is dropped and named. :func:`track_expectation`: whether
SGLang will pass track slots with every verify commit under those settings. :func:`build_engine_kwargs`:
the ``sglang.Engine(**kwargs)`` of every run (the run's own settings, the defaults, ``--engine-arg``).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from packaging.version import Version

from .. import versions
from .context import RunContext

DEFAULT_MODEL = "Qwen/Qwen3.5-0.8B"


def _parse_value(text: str) -> Any:
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def parse_engine_args(items: Sequence[str]) -> dict[str, Any]:
    """``["k=v", ...]`` -> dict; ``v`` parsed as JSON/bool/None where it can be, else a string."""
    res: dict[str, Any] = {}
    for it in items or []:
        key, sep, val = it.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--engine-arg expects KEY=VALUE, got {it!r}")
        res[key.strip().replace("-", "_")] = _parse_value(val)
    return res


@functools.lru_cache(maxsize=1)
def server_arg_fields() -> frozenset[str] | None:
    """The field names of the installed SGLang's ``ServerArgs`` (a dataclass up to 0.5.2x, a msgspec Struct
    in 0.5.23), or None when SGLang cannot be imported here (then every default is passed)."""
    try:
        import dataclasses

        from sglang.srt.server_args import ServerArgs

        if dataclasses.is_dataclass(ServerArgs):
            return frozenset(f.name for f in dataclasses.fields(ServerArgs))
        import msgspec

        return frozenset(f.name for f in msgspec.structs.fields(ServerArgs))
    except Exception:  # noqa: BLE001 - not importable here: unknown
        return None


def deployment_defaults(
    cuda_graph: bool = True,
    radix_cache: bool = True,
    fields: Collection[str] | None = None,
    sglang_version: str | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """The engine settings deployments run, as ``(kwargs, notes)``; ``notes`` name what was dropped.

    Decode CUDA graphs ``full`` (``--no-cuda-graph``: ``disabled``), prefill CUDA graphs ``disabled`` (SGLang
    0.5.23's prefill capture died on our machine, with and without the plugin), the radix cache on
    (``--no-radix-cache``: off), overlap scheduling not set (SGLang's default). With ``fields`` (the
    installed ``ServerArgs`` fields) a key it does not have is dropped and named in ``notes``; releases
    before the per-phase graph switches (<= 0.5.13.post1) get ``disable_cuda_graph`` /
    ``disable_piecewise_cuda_graph`` instead where those exist.
    """
    notes: list[str] = []
    v = versions.parse(sglang_version) if sglang_version else None
    if radix_cache and v is not None and v < Version(versions.SPEC_RADIX_FROM):
        radix_cache = False
        notes.append(
            f"disable_radix_cache=false (SGLang {sglang_version} refuses speculative decoding with the radix cache "
            f"for this model before {versions.SPEC_RADIX_FROM}; radix cache off instead)"
        )
    wanted: dict[str, Any] = {
        "cuda_graph_backend_decode": "full" if cuda_graph else "disabled",
        "cuda_graph_backend_prefill": "disabled",
        "disable_radix_cache": not radix_cache,
    }
    if fields is None:
        return wanted, notes
    kept = {k: val for k, val in wanted.items() if k in fields}
    fallbacks = {
        "cuda_graph_backend_decode": ("disable_cuda_graph", True) if not cuda_graph else None,
        "cuda_graph_backend_prefill": ("disable_piecewise_cuda_graph", True),
    }
    for key, value in wanted.items():
        if key in fields:
            continue
        alt = fallbacks.get(key)
        if alt is not None and alt[0] in fields:
            kept[alt[0]] = alt[1]
            notes.append(f"{key}={_show(value)} (not a ServerArgs field here; {alt[0]}={_show(alt[1])} instead)")
        else:
            why = "; its default: decode CUDA graphs on" if key == "cuda_graph_backend_decode" else ""
            notes.append(f"{key}={_show(value)} (not a ServerArgs field here{why})")
    return kept, notes


def defaults_of(args: argparse.Namespace, fields: Collection[str] | None) -> tuple[dict[str, Any], list[str]]:
    """:func:`deployment_defaults` as the options ask for the installed SGLang: ``--no-radix-cache`` turns the
    radix cache off (``--zero-copy`` leaves it as asked: on by default); ``--mamba-radix-cache-strategy``,
    ``--mamba-track-interval`` and ``--disable-overlap-schedule`` add their keywords (identical in every run);
    ``--streaming-sessions`` adds ``enable_streaming_session``."""
    radix_cache = not args.no_radix_cache
    kw, notes = deployment_defaults(not args.no_cuda_graph, radix_cache, fields, versions.installed_sglang_version())
    if getattr(args, "mamba_radix_cache_strategy", None):
        kw["mamba_radix_cache_strategy"] = args.mamba_radix_cache_strategy
    if getattr(args, "mamba_track_interval", None):
        kw["mamba_track_interval"] = args.mamba_track_interval
    if getattr(args, "disable_overlap_schedule", False):
        kw["disable_overlap_schedule"] = True
    if getattr(args, "streaming_sessions", False):
        kw["enable_streaming_session"] = True  # a release without it refuses the keyword: the run fails, and says so
    return kw, notes


def _whole(kw: Mapping[str, Any], key: str) -> int | None:
    """``kw[key]`` as a whole number >= 1, None where not given; ValueError (the one line) for anything else."""
    value = kw.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{key} {value!r}: not a whole number >= 1")
    return value


def radix_problem(kw: Mapping[str, Any], zero_copy: bool) -> str | None:
    """Why these engine keywords cannot give a meaningful run with the radix cache on, or None (R2 of the radix
    zero-copy review, ``reports/radix-zero-copy-review-2026-12-04.md``; SGLang 0.5.23):

    * ``extra_buffer_lazy`` without overlap scheduling: SGLang asserts at start
      (``mem_cache/kv_cache_configurator.py:3071-3075``);
    * ``no_buffer`` with overlap scheduling, or a page size above 1: SGLang refuses the launch
      (``arg_groups/mamba_hook.py``, ``validate_mamba_no_buffer``);
    * a ``mamba_track_interval`` below ``speculative_num_draft_tokens`` or off the page grid: SGLang refuses the
      launch (``validate_mamba_extra_buffer``);
    * with ``zero_copy``: overlap scheduling off and the strategy left at ``auto`` resolves to ``no_buffer``
      (``arg_groups/overrides.py:478-486``), which the gate refuses: zero-copy never serves and off == on proves
      nothing; ``--mamba-radix-cache-strategy extra_buffer`` is what that run needs; a strategy ``no_buffer``
      asked for is refused by the gate the same way.

    With the radix cache off no strategy or track interval means anything: naming one is refused too. A page size
    or track interval that is no whole number >= 1 is refused (audit 2026-12-05: it was a traceback).
    """
    radix = not kw.get("disable_radix_cache")
    strategy = kw.get("mamba_radix_cache_strategy") or "auto"
    no_overlap = bool(kw.get("disable_overlap_schedule"))
    if not radix:
        given = [k for k in ("mamba_radix_cache_strategy", "mamba_track_interval") if kw.get(k) is not None]
        if given:
            return f"{' and '.join(given)} mean nothing with the radix cache off (--no-radix-cache)"
        return None
    try:
        page, interval = _whole(kw, "page_size"), _whole(kw, "mamba_track_interval")
        draft = _whole(kw, "speculative_num_draft_tokens")
    except ValueError as exc:
        return str(exc)
    if strategy == "extra_buffer_lazy" and no_overlap:
        return (
            "mamba_radix_cache_strategy extra_buffer_lazy needs overlap scheduling (SGLang asserts without it): "
            "drop disable_overlap_schedule, or use extra_buffer"
        )
    if strategy == "no_buffer" and not zero_copy and (not no_overlap or (page or 1) > 1):
        return (
            "mamba_radix_cache_strategy no_buffer with overlap scheduling or a page size above 1: SGLang refuses "
            "the launch (add --disable-overlap-schedule, page size 1)"
        )
    if interval is not None and draft is not None and interval < draft:
        return (
            f"mamba_track_interval {interval} is below speculative_num_draft_tokens {draft}: SGLang refuses the launch"
        )
    if interval is not None and page is not None and interval % page:
        return f"mamba_track_interval {interval} is not a multiple of page_size {page}: SGLang refuses the launch"
    if zero_copy and strategy == "auto" and no_overlap and (page or 1) <= 1:
        return (
            "--zero-copy with the radix cache on and overlap scheduling off needs --mamba-radix-cache-strategy "
            "extra_buffer (at auto SGLang resolves to no_buffer, the gate refuses zero-copy and off == on proves "
            "nothing)"
        )
    if zero_copy and strategy == "no_buffer":
        return (
            "--zero-copy with the radix cache on and mamba_radix_cache_strategy no_buffer: the gate refuses "
            "zero-copy there, off == on would prove nothing; use extra_buffer or extra_buffer_lazy"
        )
    return None


def mamba2_interval_problem(kw: Mapping[str, Any], chunk: int | None) -> str | None:
    """With the radix cache on and a strategy that resolves to the extra buffer, SGLang's Mamba2 backend asserts at
    model load (0.5.13+) that ``mamba_track_interval`` is at least the model's ``mamba_chunk_size`` (``chunk``: the
    Nemotron-H config's, None for another model or where unknown): the one line, or None."""
    interval = kw.get("mamba_track_interval")
    if chunk is None or kw.get("disable_radix_cache") or not isinstance(interval, int) or interval >= chunk:
        return None
    strategy = kw.get("mamba_radix_cache_strategy") or "auto"
    page = kw.get("page_size")
    paged = isinstance(page, int) and page > 1
    if strategy == "no_buffer" or (strategy == "auto" and kw.get("disable_overlap_schedule") and not paged):
        return None  # no extra buffer: the backend does not check it
    return (
        f"mamba_track_interval {interval} is below the model's mamba_chunk_size {chunk}: SGLang's Mamba2 backend "
        "refuses it at model load with the radix cache on"
    )


def sessions_cap_problem(kw: Mapping[str, Any], sessions: int) -> str | None:
    """Why ``sessions`` streaming sessions cannot run under the engine's ``max_running_requests``, or None.

    A streaming session keeps its request row between turns (``streaming_session.py:182-192`` in 0.5.23) and
    the pool has ``max_running_requests`` rows; SGLang's admission pre-check counts free rows only
    (``scheduler.py:4119-4126``), so with every row held by a session no next turn is ever admitted: the
    run hangs silently (seen on the H200: the off run gave no result in 240 s). One row more than sessions."""
    cap = kw.get("max_running_requests")
    if isinstance(cap, int) and cap <= sessions:
        return (
            f"--streaming-sessions with {sessions} prompts needs max_running_requests >= {sessions + 1} (each "
            f"session keeps its request row between turns and SGLang admits a next turn only with a row free); "
            f"got {cap}"
        )
    return None


def _show(value: Any) -> str:
    return json.dumps(value) if not isinstance(value, str) else value


#: SGLang's choice of radix tree core (0.5.23: ``rust`` by default, else ``python``); the H200 proofs pin ``python``
TREE_CORE_VAR = "SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND"


def describe_settings(kw: Mapping[str, Any]) -> str:
    """The deployment-relevant settings of engine keywords in words (graphs, radix cache, overlap)."""
    dec = kw.get("cuda_graph_backend_decode")
    if dec is None:
        decode = "off (disable_cuda_graph)" if kw.get("disable_cuda_graph") else "on (SGLang's default)"
    else:
        decode = "off" if dec == "disabled" else f"on ({dec})"
    pre = kw.get("cuda_graph_backend_prefill")
    if pre is None:
        prefill = "off (disable_piecewise_cuda_graph)" if kw.get("disable_piecewise_cuda_graph") else "SGLang's default"
    else:
        prefill = "off" if pre == "disabled" else f"on ({pre})"
    radix = "off" if kw.get("disable_radix_cache") else "on"
    if radix == "on":
        radix += f" (mamba strategy {kw.get('mamba_radix_cache_strategy') or 'auto'}"
        radix += f", track interval {kw.get('mamba_track_interval') or 'SGLang default'}"
        core = os.environ.get(TREE_CORE_VAR)  # inherited by the runs: the tree core they build
        radix += f", tree core {core} by {TREE_CORE_VAR})" if core else ", tree core SGLang's default)"
    overlap = "off" if kw.get("disable_overlap_schedule") else "SGLang's default"
    return (
        f"decode CUDA graphs {decode}; prefill CUDA graphs {prefill}; radix cache {radix}; overlap scheduling {overlap}"
    )


def track_expectation(kw: Mapping[str, Any], fields: Collection[str] | None) -> tuple[bool, str]:
    """Will SGLang pass track slots to the post-verify commit with these engine keywords? ``(yes, why)``.

    What triggers it in SGLang 0.5.23 (``sglang/srt/...``):

    * ``arg_groups/overrides.py:454-483`` (``_mamba_radix_cache_resolution``): with the radix cache on, the
      strategy ``auto`` becomes ``extra_buffer`` when overlap scheduling is on (the default) or page_size > 1,
      and the model supports it (``supports_mamba_cache_extra_buffer``: Qwen3.5 / Qwen3-Next / Nemotron-H ...
      with ``linear_attn_backend == "triton"``, the default); otherwise ``no_buffer`` (no tracking).
      ``arg_groups/model_override_base.py:260`` (``mamba_extra_buffer_of``): extra buffer = radix cache on
      and strategy ``extra_buffer``/``extra_buffer_lazy``.
    * ``speculative/eagle_utils.py:372`` -> ``speculative/spec_utils.py:913-936``
      (``prepare_mamba_track_for_verify``) -> ``managers/schedule_batch.py:2322``
      (``set_mamba_track_indices_from_reqs``): with the extra buffer, every verify batch gets
      ``mamba_track_indices`` (each request's ping-pong track slot), and ``spec_utils.py:1240`` passes them
      to ``update_mamba_state_after_mtp_verify``: so every verify commit has track slots.
    * ``spec_utils.py:943-995`` (``_verify_commit_step_indices``): a request's ``mamba_steps_to_track`` is the
      accepted step at which its length crosses a multiple of ``mamba_track_grid`` (``runtime_context.py:1974``:
      lcm(max(FLA chunk 64, page_size), ``mamba_track_interval`` 256 from ``arg_groups/fields/exec_.py:530``)
      = 256), else -1 (no copy). With the shipped prompts as ids (2 ... 2464 tokens) and 128 new tokens, 6 of
      the 34 requests cross a multiple of 256 in round 1 and 28 in round 2 (prompt + 128-token output + a
      9-token suffix, then 128 more), and the batch-1 request (2 + 256 tokens) crosses 256: states are
      really snapshotted through the track slots, not only passed along.
    * Prefill saves states at chunk-aligned (64) positions when an extend is >= 64 tokens
      (``managers/schedule_batch.py:3137``); round 2's prompts match those and the decode-time snapshots in
      the radix tree and start from a copy of the cached state (``schedule_batch.py:3240``).

    SGLang <= 0.5.13.post1 has ``mamba_scheduler_strategy`` whose ``auto`` is always ``no_buffer``.
    """
    if kw.get("disable_radix_cache"):
        return False, "the radix cache is off: SGLang saves no mamba states, no track slots"
    strategy = kw.get("mamba_radix_cache_strategy") or kw.get("mamba_scheduler_strategy") or "auto"
    if strategy in ("extra_buffer", "extra_buffer_lazy"):
        return True, f"radix cache on, mamba strategy {strategy!r}: every verify commit carries track slots"
    if strategy != "auto":
        return False, f"mamba strategy {strategy!r}: no track slots"
    if fields is not None and "mamba_radix_cache_strategy" not in fields:
        return False, "this SGLang resolves mamba strategy 'auto' to no_buffer (<= 0.5.13.post1): no track slots"
    if kw.get("disable_overlap_schedule") and int(kw.get("page_size") or 1) <= 1:
        return False, "mamba strategy 'auto' is no_buffer without overlap scheduling at page size 1: no track slots"
    if kw.get("linear_attn_backend") not in (None, "triton"):
        return False, f"linear_attn_backend {kw.get('linear_attn_backend')!r}: SGLang keeps no extra buffer"
    return True, (
        "radix cache on, mamba strategy 'auto' -> extra_buffer (overlap scheduling on, Triton linear attention): "
        "every verify commit carries track slots"
    )


def build_engine_kwargs(
    ctx: RunContext,
    model_path: str,
    skip_tokenizer: bool,
    defaults: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``sglang.Engine(**kwargs)`` of every run (identical by construction).

    Layers, later wins: the run's own settings (model, NEXTN, seed, concurrency), the deployment ``defaults``
    (:func:`deployment_defaults` for the installed SGLang when not given), the ``--engine-arg`` overrides.
    The concurrency cap defaults to the batch size, else the number of prompts (``ctx.num_prompts_effective``);
    with ``--streaming-sessions`` to the number of prompts + 1 (:func:`sessions_cap_problem`).
    """
    args = ctx.args
    cap = args.max_running_requests or args.batch_size or ctx.num_prompts_effective
    if getattr(args, "streaming_sessions", False) and not args.max_running_requests and ctx.num_prompts_effective:
        cap = ctx.num_prompts_effective + 1
    kw: dict[str, Any] = {
        "model_path": model_path,
        "speculative_algorithm": args.speculative_algorithm,
        "speculative_num_steps": args.num_steps,
        "speculative_eagle_topk": args.topk,
        "speculative_num_draft_tokens": args.num_draft_tokens,
        "speculative_draft_model_path": args.draft_model_path or model_path,
        "random_seed": args.seed,
        "max_running_requests": cap,
        "skip_tokenizer_init": bool(skip_tokenizer),
        "log_level": args.log_level,
    }
    if args.mem_fraction_static is not None:
        kw["mem_fraction_static"] = args.mem_fraction_static
    if defaults is None:
        defaults = defaults_of(args, server_arg_fields())[0]
    kw.update(defaults)
    kw.update(parse_engine_args(args.engine_arg))
    return kw
