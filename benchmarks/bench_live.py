"""The decode cycle's wall time with Engines of several modes alive at the same time (issue 51's protocol): by
default stock SGLang and the zero-copy commit, **3 Engines per mode, one alive at a time** (``s1 z1 z2 s2 s3 z3``,
each through every batch, sleep-on-idle off: the 12-04 H200 runs showed Engines alive at once with idle schedulers
asleep ~30 % slower and noisy), one ``sglang.Engine`` per worker process; ``--alive-at-once`` starts every Engine
before the first timed generate and times them in palindromes over every (mode, Engine). Needs a CUDA
GPU and SGLang (the stand-ins of tools/gpu-engine on the lent H200: ``tools/gpu-engine/run_cycle_live.sh``);
``--dry-run`` runs the whole driver on the CPU with fake Engines (tests/e2e/test_bench_live.py).

The protocol (docs/benchmarks.md, "The decode cycle, the protocol"; the review
``benchmark-review-2026-12-04.md`` section 4):

* ``--sequential`` (the default): one Engine alive at a time, each through every batch, then stopped; the next
  starts only when its start and batches fit the budget. ``--alive-at-once``: Engines start one after the other
  (each sizes its pools from the memory free when it starts; ``--static-gb`` gives each the same static bytes), a
  further set (one per mode) only when it and ``--min-timed-s`` fit the budget; idle schedulers then sleep on their
  sockets (``--sleep-on-idle``, on by default there, off when sequential; SGLang's default busy-polls a core per idle
  Engine). ``--pairs-alive``: sequential, but each set of modes (``[s1 z1] [z2 s2] [s3 z3]``) alive together, its
  generates in palindromes (``s1 z1 z1 s1 ...``), idle schedulers busy-polling as when sequential (a pair's modes
  take turns, so each waits on the other alike): the 12-06 H100 host ran Python ~2x slower in spells of ~60 s,
  longer than a generate and shorter than an Engine's batches (``benchmarks/host_speed.py``, docs/benchmarks.md),
  which one Engine alive at a time puts on one mode only. No pinning, SGLang's own CUDA-graph list (``--engine-arg
  cuda_graph_bs*`` is refused).
* Per batch (in the order given): ``--warmups`` (3) generates per Engine, then in every Engine ``gc.collect()`` and
  ``Engine.freeze_gc()`` (the worker, the scheduler and the detokenizer), then ``--reps`` (16) timed generates per
  Engine (alive at once: in palindromes, ``s1 z1 s2 z2 z2 s2 z1 s1 ...``); the same prompts in every mode (random ids, seeded), greedy,
  ``ignore_eos``, ``--max-new-tokens`` (128). The wall of a generate is ``time.perf_counter`` around
  ``Engine.generate`` inside its worker; the worker's gc is off during it (``--gc-off``, on by default).
* Outside that window, per generate: the scheduler's and the worker's on-CPU and run-queue time, timeslices, last CPU
  (``/proc``), per-CPU steal and busy time, the GPU's energy, clocks, power, temperature and throttle reasons (NVML);
  once per run a header (kernel, CPU topology, clocks, the GPU's state) and per Engine its pids and CUDA-graph
  configuration; once per batch the GPU's processes. A probe the machine lacks is written "absent".
* Engines are the unit (``_live_stats.py``): per Engine its median, per Engine pair (Engine e of a mode and of stock)
  the ratio, the interval over that batch's pairs (Student's t, the batch's own SD; one pair: inconclusive), the
  verdict one of faster / slower / equal within +-1 % (interval and every pair) / inconclusive. An Engine more than
  5 % off its mode's other Engines at every batch is flagged (a whole-Engine slow state, with what its probes show);
  the verdict is given with and without the flagged Engines' pairs. ``--combine A.csv B.csv`` does the same over the
  pairs of two runs: runs of one workload only (tokens, Engine keywords, arms, prompts), the radix cache on and off
  apart (``radix_cache`` column).
  Health checks (printed and written): robust CV <= 1.5 % per Engine and batch, no switch of host state, the Engines
  of one mode within 1.5 %, no gen-2 gc in a timed generate, gc frozen.
* ``--gpu-busy N`` (sequential only; ``--gpu-busy-engines K``: in the first K Engines of each mode only): after all
  of an Engine's timed generates (so that nothing the profiler leaves
  behind reaches a timed window), per batch ``N`` more generates under SGLang's profiler (GPU activities, each after
  the same flush): the GPU's busy time per generate (the union of its kernels and copies, bench_cycle's
  ``profiled_generate``; ``gpu_kernel_s`` the kernels alone), their median written as ``gpu_busy_s`` on each of that
  Engine's timed rows at that batch and analysed as the wall is (Engine pairs, interval, verdict): a measure the
  host's state does not move (the 12-05 H100 host changed the wall by up to 64 % with the GPU's work the same;
  docs/benchmarks.md). The wall stays the measure of the verdict. The Engine's timed rows are written before its
  profiles. A profile that fails (an error, no trace within ``PROFILE_TRACE_WAIT_S``, a trace without the GPU's
  activity, the Engine gone under it) is said in one line and kept in the runs file, no later Engine is profiled
  (each try would cost the call's time), and the run goes on with its timed rows whole.
* Every exact mode's output ids must equal stock's at every batch (md5; a mismatch exits 1), the plugin's scheduler
  reports must show it engaged; an Engine that fails exits 2; a run that timed nothing (or not every mode) exits 3;
  ``--noise-gate N``: a clean run whose generates were too noisy for two runs to agree within N of them exits 5.
* A batch above an Engine's running-request cap (SGLang's in force, read at its start) is said once and timed in no
  Engine from then on (it would run in pieces, its output that cap's), listed as not timed; the rest of the run
  stands (the 12-06 H100 pair at 32 GiB with the radix cache on admitted 102 of batch 128).
* ``--budget-s``: no palindrome is started that would end after the budget (less ``--stop-reserve-s``); the files are
  rewritten after every batch, so a run cut short leaves clean files. Bad options are refused before anything runs
  or is written, with one line.

Results (rewritten, never appended; a (model, run)'s rows replace that (model, run)'s rows):
``<out>/latest/cycle_generates-<gpu>.csv`` (one row per model, run, batch, mode, engine, generate, with the probes),
``<out>/latest/cycle_live-<gpu>.csv`` (per model, run, batch, mode: the pair analysis, the health checks, the
descriptive intervals), ``<out>/latest/cycle_live_runs-<gpu>.json`` (per run: the header, the Engines, the health),
the summary rows appended once to ``<out>/history.csv``; ``--combine`` writes ``cycle_live_combined-<gpu>.csv``.
``--merge DIR ...`` merges the files of device calls (their ``$OUT`` copies) into ``--out``. ``--dry-run`` never
writes the tracked results (default ``--out``: ``<work>/dry-run-out``).
"""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import gc
import hashlib
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from multiprocessing import Pipe
from multiprocessing.connection import Connection
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _timing, _live_*, bench_cycle, also under python -P
from _live_probes import (  # noqa: E402
    ABSENT,
    PROBE_FIELDS,
    Gpu,
    cpu_delta,
    cpu_list,
    cpu_times,
    cpu_work_us,
    engine_pids,
    gpu_delta,
    proc_delta,
    proc_snapshot,
    run_header,
    start_probe,
)
from _live_stats import (  # noqa: E402
    BUSY_COL,
    EQUAL,
    FASTER,
    HOST_SLOW_X,
    INCONCLUSIVE,
    RUNS_AGREE,
    SLOWER,
    VERDICTS,
    analyse,
    bootstrap_ratio,
    busy_rows,
    engine_stats,
    finite_number,
    flagged_names,
    generate_noise,
    health,
    hier_bootstrap_ratio,
    host_gap_ms,
    host_slow_share,
    noise_split,
    robust_cv,
    slow_state,
    slow_within_engines,
    verdict,
)
from _timing import RESULTS, append_history, checkout_on_path, git_commit, read_history, slug, write_csv  # noqa: E402
from bench_cycle import MODES as _CYCLE_MODES  # noqa: E402
from bench_cycle import check, engine_kwargs, model_facts, plugin_report, profiled_generate, prompts_for  # noqa: E402

__all__ = [  # re-exported for the tests and for readers of this file
    "EQUAL",
    "FASTER",
    "INCONCLUSIVE",
    "SLOWER",
    "VERDICTS",
    "bootstrap_ratio",
    "hier_bootstrap_ratio",
    "robust_cv",
    "verdict",
]

#: mode -> the plugin's variables in its worker's environment. Besides stock and the plugin's two commits, the arms
#: users compare against (issue 51 item 6): SGLang's ReplaySSM-spec and no speculation at all, both plugin off.
MODES = {
    **_CYCLE_MODES,
    "replayssm": dict(_CYCLE_MODES["stock"]),
    "no-spec": dict(_CYCLE_MODES["stock"]),
}
#: mode -> what it changes in the Engine's keywords (None: drop the key)
ARM_ENGINE_KWARGS: dict[str, dict] = {
    "replayssm": {"enable_linear_replayssm_spec": True},
    "no-spec": {
        k: None
        for k in (
            "speculative_algorithm",
            "speculative_num_steps",
            "speculative_eagle_topk",
            "speculative_num_draft_tokens",
            "speculative_draft_model_path",
        )
    },
}
#: the modes whose output ids must equal stock's bit for bit (the others' md5 is printed, not judged)
EXACT_MODES = ("stock", "plugin", "zero-copy")
#: zero-copy's opt-out for the radix cache on (``sglang_mamba_dedup.env.ZERO_COPY_RADIX``): unset in every Engine
#: (their environment drops the driver's ``SGLANG_MAMBA_DEDUP*``), so zero-copy serves ``--radix-cache`` runs.
RADIX_OPT_OUT = "SGLANG_MAMBA_DEDUP_ZERO_COPY_RADIX"


def over_cap(workers: Sequence, batches: Sequence[int]) -> dict[int, str]:
    """The batches above the running-request cap in force (SGLang's, read at each Engine's start) of any of these
    Engines, each with the Engine that caps it lowest. Such a batch runs in pieces: its wall is not the batch's, and
    its output depends on the cap (the 12-06 H100 pair at 32 GiB: 102 and 103 admitted, two outputs at batch 128, each
    equal to stock's at the same cap), so it is not timed. With the radix cache on each request holds ~5 mamba slots:
    `plan` says the fraction that admits it."""
    capped = [
        (w.info["running_cap"], w.name)
        for w in workers
        if isinstance(w.info.get("running_cap"), int) and not isinstance(w.info.get("running_cap"), bool)
    ]
    if not capped:
        return {}
    cap, name = min(capped)
    return {b: f"{name} admits {cap} running requests" for b in batches if b > cap}


def radix_problems(reports: Mapping, radix_cache: bool) -> list[str]:
    """With the radix cache on, each zero-copy Engine's commits served zero-copy must all have had a track set
    (``zc_track_commits == zc_commit_calls > 0``): else it did not serve the launch being measured."""
    if not radix_cache:
        return []
    out = []
    for (mode, engine), rep in sorted(reports.items()):
        if mode == "zero-copy" and not (rep.get("zc_track_commits", 0) == rep.get("zc_commit_calls", 0) > 0):
            out.append(f"zero-copy e{engine}: not every commit served zero-copy with a track set ({rep})")
    return out


GEN_STEM, SUMMARY_STEM, COMBINED_STEM, RUNS_STEM = (
    "cycle_generates",
    "cycle_live",
    "cycle_live_combined",
    "cycle_live_runs",
)
GEN_KEY = ("model", "run", "batch", "mode", "engine", "generate")
SUMMARY_KEY = ("model", "run", "batch", "mode")
COMBINED_KEY = ("model", "radix_cache", "batch", "mode")
META_FIELDS = ["date", "commit", "sglang", "gpu", "options"]
GEN_FIELDS = [
    *GEN_KEY,
    "seq",
    "wall_s",
    "rtt_s",
    "slow",
    "frozen",
    "gc_gen0",
    "gc_gen1",
    "gc_gen2",
    "gc_ms",
    "rss_mb",
    "tokens",
    "accept_length",
    "md5",
    "t_start",
    "t_end",
    BUSY_COL,  # the GPU's busy time of this Engine's profiled generates at this batch (median; --gpu-busy)
    "gpu_kernel_s",  # of that busy time, the kernels alone (copies over PCIe left out), median
    "gpu_us_per_cycle",
    *PROBE_FIELDS,
    "run_status",
    *META_FIELDS,
]
#: per (batch, mode): the medians of these probe columns over the mode's timed generates
PROBE_MEDIANS = (
    "sched_cpu_ms", "sched_wait_ms", "steal_ms", "cpu_busy_pct", "sched_cpu_work_us", "energy_j", "sm_mhz", "power_w",
    BUSY_COL,
)  # fmt: skip
#: the GPU-busy analysis beside the wall's (--gpu-busy): per run in the summary, over the runs in the combination
BUSY_FIELDS = ["busy_pairs", "busy_ratio", "busy_ci_lo", "busy_ci_hi", "busy_verdict"]
SUMMARY_FIELDS = [
    *SUMMARY_KEY,
    "n",
    "engines",
    "reps_asked",
    "median_s",
    "min_s",
    "max_s",
    "ratio",
    "ci_lo",
    "ci_hi",
    "pairs",
    "df",
    "sd_from",
    "verdict",
    "why",
    "flagged",
    "ratio_wo",
    "verdict_wo",
    *BUSY_FIELDS,
    "pair_ratios",
    "pair_spread",
    "engine_medians",
    "cv_max",
    "engines_spread",
    "switch_max",
    "health",
    "gen_ratio",
    "gen_ci_lo",
    "gen_ci_hi",
    "eng_ci_lo",
    "eng_ci_hi",
    "slow",
    "slow_with_gc2",
    "gc_gen0",
    "gc_gen1",
    "gc_gen2",
    "gc_ms",
    "frozen",
    "rss_mb_max",
    *(f"{k}_med" for k in PROBE_MEDIANS),
    "md5",
    *META_FIELDS,
]
COMBINED_FIELDS = [
    *COMBINED_KEY,
    "runs",
    "pairs",
    "df",
    "sd_from",
    "ratio",
    "ci_lo",
    "ci_hi",
    "verdict",
    "why",
    "flagged",
    "pairs_wo",
    "ratio_wo",
    "ci_lo_wo",
    "ci_hi_wo",
    "verdict_wo",
    "why_wo",
    "run_ratios",
    "runs_agree",
    *BUSY_FIELDS,
    "busy_runs_agree",
    "busy_runs",  # the runs whose Engines gave GPU busy pairs (a run without --gpu-busy gives none)
    "host_gap_ms",  # per run: the host's part of a generate (wall - GPU busy, median ms), stock / this mode
    "host_slow",  # per run: the share of its generates that started with the host slow (host_slow_share)
    # where the spread comes from (noise_split): the pairs' SD within a run against what the generates' own noise
    # gives, the runs' gap over its standard error, which level explains it (generates, engines, runs), and the
    # timed generates per mode a run needs to agree within 1 % at the generates' noise
    "pair_sd",
    "gen_sd",
    "runs_t",
    "spread_from",
    "gens_needed",
    "gens_had",
    "pair_ratios",
    "health",
    "commits",
    "sglang",
    "gpu",
]
SLOW_FACTOR = 1.3
#: --gpu-busy: the seconds a profiled generate may take beyond a generate to write and read its trace, and the guess
#: of its time before one was measured (bench_cycle's H200 profiled rounds: ~5 s per profiled generate)
PROFILE_READ_S = 120.0
PROFILE_GUESS_S = 10.0
#: how long a profiled generate waits for its trace file after ``stop_profile`` returned (SGLang 0.5.23 exports the
#: trace before it answers, so a trace not there by then never comes: a longer wait would only spend the call)
PROFILE_TRACE_WAIT_S = 15.0
#: ``run_status`` of a generate row while its run has not finished its checks (a run cut by the wall keeps it)
RUNNING = "running"


class Refused(ValueError):
    """A bad option, told in one line before anything runs or is written."""


# ---------------------------------------------------------------- pure parts (tests/e2e/test_bench_live.py)


def balanced_order(modes: Sequence, reps: int) -> list:
    """The timed generates of one batch: ``reps`` per unit, blocks alternately forward and reversed
    (A B C C B A A B C C B A ...): every unit takes every position equally often, its mean position is the same."""
    if reps < 2 or reps % 2:
        raise ValueError(f"reps must be even and >= 2 (palindromes), got {reps}")
    out: list = []
    for k in range(reps):
        out += list(modes) if k % 2 == 0 else list(reversed(modes))
    return out


def sequential_order(modes: Sequence[str], engines: int) -> list[tuple[str, int]]:
    """``--sequential``: the Engines one after the other, each set of modes in turn forward and reversed
    (``s1 z1 z2 s2`` for two modes and two Engines each)."""
    return [(m, e) for e in range(1, engines + 1) for m in (modes if e % 2 else list(reversed(modes)))]


def design_words(args) -> str:
    """How the run's Engines were alive, for its headers."""
    if not args.sequential:
        return "at once"
    return "a pair at a time (--pairs-alive)" if args.pairs_alive else "one at a time (--sequential)"


def engine_groups(order: Sequence[tuple[str, int]], size: int) -> list[list[tuple[str, int]]]:
    """The Engines of a sequential run in the groups alive together: one each (``size`` 1, the default), or with
    ``--pairs-alive`` each set of modes (``size`` = the number of modes: ``[s1 z1] [z2 s2] [s3 z3]``), in
    :func:`sequential_order`'s order."""
    if size < 1 or len(order) % size:
        raise ValueError(f"{len(order)} Engines do not split into groups of {size}")
    return [list(order[i : i + size]) for i in range(0, len(order), size)]


def slow_flags(walls: Sequence[float], factor: float = SLOW_FACTOR) -> list[bool]:
    """Which generates took more than ``factor`` x the median of their group."""
    if not walls:
        return []
    m = statistics.median(walls)
    return [w > factor * m for w in walls]


def duplicates(rows: Iterable[Mapping], key: Sequence[str]) -> list[tuple]:
    """The keys that occur more than once in ``rows``."""
    seen: set[tuple] = set()
    dup: list[tuple] = []
    for r in rows:
        k = tuple(str(r.get(c, "")) for c in key)
        if k in seen and k not in dup:
            dup.append(k)
        seen.add(k)
    return dup


def assert_unique(rows: Iterable[Mapping], key: Sequence[str], what: str = "rows") -> None:
    dup = duplicates(rows, key)
    if dup:
        raise ValueError(f"duplicated {what} ({', '.join(key)}): {dup[:5]}{' ...' if len(dup) > 5 else ''}")


def _unit(r: Mapping, key: Sequence[str]) -> tuple:
    """What a new file replaces: (model, run) where the key has a run, (model, radix setting, mode) in the combined
    verdicts (a combination with the radix cache on leaves the one with it off, another arm's leaves zero-copy's),
    else model."""
    if "run" in key:
        return (str(r.get("model")), str(r.get("run", "")))
    if "radix_cache" in key:
        return (str(r.get("model")), str(r.get("radix_cache") or "off"), str(r.get("mode", "")))
    return (str(r.get("model")),)


def merge_rows(old: Iterable[Mapping], new: Sequence[Mapping], models: Iterable, key: Sequence[str]) -> list[dict]:
    """``old`` without the rows of ``models`` (model names, or the units of :func:`_unit`: those are replaced), a
    repeated key of ``old`` kept once, then ``new``; a key twice in the result is an error (nothing is written). A
    combined row from before the radix column is a radix-off row."""
    drop = {m if isinstance(m, tuple) else (str(m),) for m in models}
    kept: list[dict] = []
    seen: set[tuple] = set()
    for r in old:
        if _unit(r, key) in drop or (str(r.get("model")),) in drop:
            continue
        if "radix_cache" in key and not r.get("radix_cache"):
            r = {**r, "radix_cache": "off"}
        k = tuple(str(r.get(c, "")) for c in key)
        if k in seen:
            continue
        seen.add(k)
        kept.append(dict(r))
    out = kept + [dict(r) for r in new]
    assert_unique(out, key)
    return out


def mark_slow(rows: list[dict]) -> None:
    """Set ``slow`` (0/1) on every generate row from its (model, run, batch, mode) median."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["model"], r.get("run", ""), int(r["batch"]), r["mode"]), []).append(r)
    for group in groups.values():
        for r, s in zip(group, slow_flags([float(g["wall_s"]) for g in group])):
            r["slow"] = int(s)


def _fmt(x, nd: int = 4):
    return "" if x is None else round(x, nd)


def busy_fields(a: Mapping | None) -> dict:
    """:data:`BUSY_FIELDS` of one GPU-busy pair analysis (empty when there is none: no ``--gpu-busy``)."""
    if a is None:
        return dict.fromkeys(BUSY_FIELDS, "")
    return {
        "busy_pairs": a["pairs"],
        "busy_ratio": _fmt(a["ratio"]),
        "busy_ci_lo": _fmt(a["lo"]),
        "busy_ci_hi": _fmt(a["hi"]),
        "busy_verdict": a["verdict"],
    }


def _median_of(group: Sequence[Mapping], col: str):
    """The median of ``col``'s finite values (3 decimals; seconds of GPU busy time 6), or ``absent``."""
    vals = [v for v in (finite_number(r.get(col)) for r in group) if v is not None]
    return round(statistics.median(vals), 6 if col == BUSY_COL else 3) if vals else ABSENT


def summarize(
    rows: Sequence[Mapping], *, base: str = "stock", resamples: int = 2000, seed: int = 0, reps_asked: int = 0
) -> list[dict]:
    """Per (model, run, batch, mode): the pair analysis of this run (ratio, interval over the Engine pairs,
    verdict), its health, each Engine's median, the descriptive intervals over generates (conditional on these
    Engines) and over Engines (hierarchical), slow generates, gc, RSS, the probes' medians."""
    groups: dict[tuple, list[Mapping]] = {}
    for r in rows:
        groups.setdefault((r["model"], str(r.get("run", "")), int(r["batch"]), r["mode"]), []).append(r)
    stats = engine_stats(rows)
    checks = health(rows)
    pairs: dict[tuple, dict] = {}
    pairs_wo: dict[tuple, dict] = {}
    busy: dict[tuple, dict] = {}
    flags = slow_state(rows)
    for run in sorted({k[1] for k in groups}):
        mine = [r for r in rows if str(r.get("run", "")) == run]
        for (model, batch, mode), a in analyse(mine, base).items():
            pairs[(model, run, batch, mode)] = a
        for (model, batch, mode), a in analyse(busy_rows(mine), base, col=BUSY_COL).items():
            busy[(model, run, batch, mode)] = a
        for (model, batch, mode), a in analyse(mine, base, exclude=flags).items():
            pairs_wo[(model, run, batch, mode)] = a
    out = []
    for (model, run, batch, mode), group in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2])):
        walls = [float(r["wall_s"]) for r in group]
        slow = slow_flags(walls)
        engs = {k[4]: s for k, s in stats.items() if k[:4] == (model, run, batch, mode)}
        ref = groups.get((model, run, batch, base), [])
        meds = [s["median_s"] for s in engs.values()]
        bad = checks.get((model, run, batch, mode), [])
        s: dict = {
            "model": model,
            "run": run,
            "batch": batch,
            "mode": mode,
            "n": len(walls),
            "engines": len(engs),
            "reps_asked": reps_asked or "",
            "median_s": round(statistics.median(walls), 5),
            "min_s": round(min(walls), 5),
            "max_s": round(max(walls), 5),
            "engine_medians": ";".join(f"{e}:{v['median_s']:.5f}" for e, v in sorted(engs.items())),
            "cv_max": round(max(v["cv"] for v in engs.values()), 5),
            "engines_spread": round(max(meds) / min(meds) - 1, 5),
            "switch_max": round(max(v["switch"] for v in engs.values()), 4),
            "health": "ok" if not bad else "; ".join(bad),
            "slow": sum(slow),
            "slow_with_gc2": sum(1 for r, f in zip(group, slow) if f and int(r.get("gc_gen2") or 0)),
            "frozen": int(all(str(r.get("frozen", "")) == "1" for r in group)),
            "rss_mb_max": round(max(float(r.get("rss_mb") or 0) for r in group), 1),
            "md5": ";".join(sorted({str(r.get("md5", "")) for r in group})),
        }
        for g in ("gc_gen0", "gc_gen1", "gc_gen2"):
            s[g] = sum(int(r.get(g) or 0) for r in group)
        s["gc_ms"] = round(sum(float(r.get("gc_ms") or 0) for r in group), 2)
        for k in PROBE_MEDIANS:
            s[f"{k}_med"] = _median_of(group, k)
        empty = dict.fromkeys(("ci_lo", "ci_hi", "df", "sd_from", "why", "pair_ratios", "pair_spread", "pairs"), "")
        empty.update(
            flagged=flagged_names(
                {k: f for k, f in flags.items() if k[:2] == (model, run) and k[2] in (base, mode)}, runs=False
            ),
            ratio_wo="",
            verdict_wo="",
        )
        s.update(empty, gen_ratio="", gen_ci_lo="", gen_ci_hi="", eng_ci_lo="", eng_ci_hi="")
        s.update(busy_fields(busy.get((model, run, batch, mode))))
        if mode == base:
            s.update(ratio=1.0, verdict="base")
        elif ref:
            a = pairs.get((model, run, batch, mode))
            if a is None:  # no Engine of this mode has a stock partner of the same number
                s.update(ratio="", verdict=INCONCLUSIVE, why="no Engine of this mode has a stock partner")
            else:
                s.update(
                    ratio=_fmt(a["ratio"]),
                    ci_lo=_fmt(a["lo"]),
                    ci_hi=_fmt(a["hi"]),
                    pairs=a["pairs"],
                    df=a["df"],
                    sd_from=a["sd_from"],
                    verdict=a["verdict"],
                    why=a["why"],
                    pair_ratios=a["pair_ratios"],
                    pair_spread=_fmt(a["pair_spread"]),
                )
                w = pairs_wo.get((model, run, batch, mode))
                s.update(
                    ratio_wo=_fmt(w["ratio"]) if w else "",
                    verdict_wo=w["verdict"] if w else f"{INCONCLUSIVE} (no pair without a flagged Engine)",
                )
            ref_walls = [float(r["wall_s"]) for r in ref]
            gr, glo, ghi = bootstrap_ratio(walls, ref_walls, resamples=resamples, seed=seed)
            s.update(gen_ratio=_fmt(gr), gen_ci_lo=_fmt(glo), gen_ci_hi=_fmt(ghi))
            ref_engs = {k[4]: v for k, v in stats.items() if k[:4] == (model, run, batch, base)}
            if len(engs) > 1 or len(ref_engs) > 1:
                _, elo, ehi = hier_bootstrap_ratio(
                    [v["walls"] for v in engs.values()],
                    [v["walls"] for v in ref_engs.values()],
                    resamples=resamples,
                    seed=seed,
                )
                s.update(eng_ci_lo=_fmt(elo), eng_ci_hi=_fmt(ehi))
        else:
            s.update(ratio="", verdict="no base")
        for k in META_FIELDS:
            s[k] = group[0].get(k, "")
        out.append(s)
    return out


def radix_of(row: Mapping) -> str:
    """``on`` / ``off``: whether the run of a generate row had the radix cache on (its ``options``; a row without
    options, as before ``--radix-cache`` existed, ran with it off)."""
    try:
        opts = json.loads(row.get("options") or "{}")
    except ValueError:
        opts = {}
    return "on" if isinstance(opts, dict) and opts.get("radix_cache") is True else "off"


#: the options two runs must share for their Engine pairs to be pooled: the same work on the same Engine keywords
#: (the design, the start order, the number of Engines and of generates may differ between runs)
WORKLOAD_OPTIONS = ("max_new_tokens", "engine_args", "arm_engine_args", "dry_run", "seed")


def _workload(opts: Mapping, key: str, mode: str):
    """One workload option of a run as compared across runs: the arm keywords of ``mode`` only (runs of other
    arms share stock and zero-copy), Engine keywords as a set (their order changes nothing); absent, None and empty
    say the same (no arm keywords before the arms existed)."""
    v = opts.get(key)
    if key == "arm_engine_args":
        v = v.get(mode) if isinstance(v, dict) else v
    elif key == "engine_args" and isinstance(v, list):
        v = sorted(map(str, v))
    return None if v in ({}, []) else v


def unlike_runs(rows: Iterable[Mapping]) -> list[str]:
    """Runs of one model and radix setting whose workload options (:data:`WORKLOAD_OPTIONS`, for each mode) or
    cards (``gpu``) differ: their pairs measure different things and are not pooled; one line per model, setting,
    mode and option."""
    seen: dict[tuple, dict[str, str]] = {}
    for r in rows:
        try:
            opts = json.loads(r.get("options") or "{}")
        except ValueError:
            opts = {}
        opts = opts if isinstance(opts, dict) else {}
        mode = str(r.get("mode", ""))
        for k in WORKLOAD_OPTIONS:
            seen.setdefault((str(r["model"]), radix_of(r), mode, k), {}).setdefault(
                str(r.get("run", "")), json.dumps(_workload(opts, k, mode), sort_keys=True)
            )
        # the card too: a verdict is one card's (speed_claim refuses one pooled over cards)
        seen.setdefault((str(r["model"]), radix_of(r), mode, "gpu"), {}).setdefault(
            str(r.get("run", "")), json.dumps(str(r.get("gpu") or ""))
        )
    return [
        f"{model}, radix cache {radix}, {mode}: runs differ in {k} ("
        + "; ".join(f"{run or '-'}: {v}" for run, v in sorted(by_run.items()))
        + ")"
        for (model, radix, mode, k), by_run in sorted(seen.items())
        if len(set(by_run.values())) > 1
    ]


def failed_runs(rows: Iterable[Mapping]) -> list[str]:
    """Runs whose own checks failed (``run_status`` not 0: an md5 mismatch, zero-copy not served as asked, a running
    cap below the batch, nothing timed) or that were cut before their checks (``running``); rows from before the
    column are taken as they were combined then. One line per run."""
    out: dict[tuple[str, str], str] = {}
    for r in rows:
        st = str(r.get("run_status") or "0")
        if st != "0":
            why = (
                "was cut before its checks"
                if st == RUNNING
                else f"failed its own checks (exit {st}; its log's PROBLEMS)"
            )
            out.setdefault((str(r["model"]), str(r.get("run", ""))), why)
    return [f"run {run!r} of {model} {why}" for (model, run), why in sorted(out.items())]


def combine(rows: Sequence[Mapping], base: str = "stock") -> list[dict]:
    """Per (model, radix cache on/off, batch, mode): the pair analysis over the Engine pairs of every run in
    ``rows`` with that radix setting (the verdict of the protocol), each run's own ratio, how far the runs are apart
    (``runs_agree``: max/min of the run ratios), each run's health; the Engines the whole-Engine slow-state rule
    flags (:func:`slow_state`) and the verdict without their pairs (``*_wo``; the same as with them when none is
    flagged), both kept. Runs with the radix cache on and off are never pooled (different launches)."""
    out = []
    for radix in ("off", "on"):
        mine = [r for r in rows if radix_of(r) == radix]
        out += [dict(r, radix_cache=radix) for r in _combine_one(mine, base)] if mine else []
    return sorted(out, key=lambda r: (r["model"], r["radix_cache"], r["batch"], r["mode"]))


def _combine_one(rows: Sequence[Mapping], base: str) -> list[dict]:
    checks = health(rows)
    flags = slow_state(rows)
    without = analyse(rows, base, exclude=flags) if flags else None
    busy = analyse(busy_rows(rows), base, col=BUSY_COL)
    noise = noise_split(rows, base)
    gaps = host_gap_ms(rows)
    slow_host = host_slow_share(rows)
    meta: dict[tuple, dict[str, set]] = {}
    for r in rows:
        m = meta.setdefault((r["model"], int(r["batch"])), {"commit": set(), "sglang": set(), "gpu": set()})
        for k in m:
            m[k].add(str(r.get(k, "")))
    out = []
    for (model, batch, mode), a in sorted(analyse(rows, base).items()):
        runs = sorted(a["run_ratios"])
        rr = a["run_ratios"]
        bad = [
            f"{run or '-'}: {'; '.join(checks.get((model, run, batch, m), []))}"
            for run in runs
            for m in (base, mode)
            if checks.get((model, run, batch, m))
        ]
        m = meta.get((model, batch), {})
        mine = {k: f for k, f in flags.items() if k[0] == model and k[2] in (base, mode)}
        b = busy.get((model, batch, mode))
        brr = b["run_ratios"] if b else {}
        w = a if without is None else without.get((model, batch, mode))
        wo = (
            {"pairs_wo": 0, "ratio_wo": "", "ci_lo_wo": "", "ci_hi_wo": "", "verdict_wo": INCONCLUSIVE}
            | {"why_wo": "no pair without a flagged Engine"}
            if w is None
            else {
                "pairs_wo": w["pairs"],
                "ratio_wo": _fmt(w["ratio"]),
                "ci_lo_wo": _fmt(w["lo"]),
                "ci_hi_wo": _fmt(w["hi"]),
                "verdict_wo": w["verdict"],
                "why_wo": w["why"],
            }
        )
        out.append(
            {
                "model": model,
                "batch": batch,
                "mode": mode,
                "runs": ";".join(runs),
                "pairs": a["pairs"],
                "df": a["df"],
                "sd_from": a["sd_from"],
                "ratio": _fmt(a["ratio"]),
                "ci_lo": _fmt(a["lo"]),
                "ci_hi": _fmt(a["hi"]),
                "verdict": a["verdict"],
                "why": a["why"],
                "flagged": flagged_names(mine, runs=True),
                **wo,
                "run_ratios": ";".join(f"{run}:{rr[run]:.4f}" for run in runs),
                "runs_agree": _fmt(max(rr.values()) / min(rr.values())) if len(rr) > 1 else "",
                **busy_fields(b),
                "busy_runs_agree": _fmt(max(brr.values()) / min(brr.values())) if len(brr) > 1 else "",
                "busy_runs": ";".join(sorted(brr)),
                "host_gap_ms": ";".join(
                    f"{run}:{gaps[(model, batch, base, run)]:.1f}/{gaps[(model, batch, mode, run)]:.1f}"
                    for run in runs
                    if (model, batch, base, run) in gaps and (model, batch, mode, run) in gaps
                ),
                "host_slow": ";".join(
                    f"{run}:{slow_host[(model, run)]:.2f}" for run in runs if (model, run) in slow_host
                ),
                **noise_fields(noise.get((model, batch, mode))),
                "pair_ratios": a["pair_ratios"],
                "health": "ok" if not bad else " | ".join(bad),
                "commits": ";".join(sorted(m.get("commit", ()))),
                "sglang": ";".join(sorted(m.get("sglang", ()))),
                "gpu": ";".join(sorted(m.get("gpu", ()))),
            }
        )
    return out


def noise_fields(n: Mapping | None) -> dict:
    """The combined row's columns of :func:`noise_split` (empty with fewer than 2 pairs)."""
    if n is None:
        return {"pair_sd": "", "gen_sd": "", "runs_t": "", "spread_from": "", "gens_needed": "", "gens_had": ""}
    return {
        "pair_sd": _fmt(n["pair_sd"]),
        "gen_sd": _fmt(n["gen_sd"]),
        "runs_t": "" if n["runs_t"] is None else _fmt(n["runs_t"], 2),
        "spread_from": n["source"],
        "gens_needed": n["gens"],
        "gens_had": n["had"],
    }


def slow_by_mode(rows: Sequence[Mapping]) -> dict[str, tuple[int, int]]:
    """mode -> (slow generates, generates), over every batch."""
    out: dict[str, tuple[int, int]] = {}
    for r in rows:
        s, n = out.get(r["mode"], (0, 0))
        out[r["mode"]] = (s + int(r.get("slow") or 0), n + 1)
    return out


def md5_problems(md5s: Mapping[tuple[int, str], set[str]], base: str = "stock") -> list[str]:
    """Every (batch, exact mode) must have produced one output (over its timed generates), equal to ``base``'s."""
    problems = []
    for (batch, mode), seen in sorted(md5s.items()):
        if mode not in EXACT_MODES:
            continue
        ref = md5s.get((batch, base), set())
        if len(seen) != 1:  # its own generates disagree (as the radix cache on did before each generate's flush)
            problems.append(f"batch {batch}: {mode} gave {len(seen)} different outputs over its timed generates")
        elif len(ref) == 1 and seen != ref:
            problems.append(f"batch {batch}: {mode} md5 {sorted(seen)} vs {base} {sorted(ref)}")
        elif not ref:
            problems.append(f"batch {batch}: {mode} has no {base} output to compare with")
    return problems


def fits(now: float, deadline: float, estimate_s: float) -> bool:
    return now + estimate_s <= deadline


def compile_excess(warmups_s: Sequence[float], timed_median_s: float) -> float:
    """What a batch's warm-ups took beyond twice a timed generate: the kernels compiled on a fresh machine (SGLang's
    Triton kernels, once per machine: their cache is on its disk). On the 12-05 H100 the first Nemotron-H Engine's
    warm-ups took 47.5 s and 35.6 s against 0.30 s and 0.48 s timed."""
    return sum(max(0.0, w - 2 * timed_median_s) for w in warmups_s)


def next_engine_need(starts: Sequence[float], batches_s: Sequence[float]) -> float:
    """The time the next Engine of a sequential run needs: 1.2 x the slowest start but the run's first (a fresh
    machine compiles then, unless it is the only one) plus the longest time an Engine spent in its batches, each
    without its compile excess (:func:`compile_excess`) and its profiles (added by the caller for an Engine that
    ``--gpu-busy-engines`` profiles: an unprofiled set was charged the first set's, 2026-12-06 review). Counting the first Engine's compiles refused every
    further Engine of the 12-05 H100 Nemotron-H run (~203 s asked; the next call's Engines took ~75 s each)."""
    return 1.2 * max(starts[1:] or starts or [0.0]) + max(batches_s or [0.0])


def runs_apart_notes(table: Sequence[Mapping], base: str = "stock") -> list[str]:
    """One line per combined row (:func:`combine`) whose runs' own ratios are more than :data:`RUNS_AGREE` apart:
    whether the GPU's busy time moved with them, and the host's part of a generate per run (``host_gap_ms``), so a
    pair of runs that does not agree says what moved (issue 51 item 5)."""
    out = []
    for r in table:
        apart = finite_number(r.get("runs_agree"))
        if apart is None or apart <= RUNS_AGREE:
            continue
        busy = finite_number(r.get("busy_runs_agree"))
        if busy is None:
            what = "the GPU's busy time was not measured in two runs (--gpu-busy): the wall cannot be split"
        elif busy <= RUNS_AGREE:
            what = (
                f"the GPU's busy time agreed ({busy:.4f} apart): its work did not move, the host's part of the wall did"
            )
        else:
            what = f"the GPU's busy time moved too ({busy:.4f} apart)"
        gaps = ", ".join(
            f"{run} {g.replace('/', ' / ')}"
            for run, _, g in (x.rpartition(":") for x in str(r["host_gap_ms"]).split(";") if x)
        )
        slow = ", ".join(
            f"{run} {float(share):.0%}"
            for run, _, share in (x.rpartition(":") for x in str(r.get("host_slow", "")).split(";") if x)
        )
        out.append(
            f"runs apart: {r['model']} radix {r.get('radix_cache', 'off')} batch {r['batch']} {r['mode']}: the wall's "
            f"run ratios ({str(r['run_ratios']).replace(';', ', ')}) are {apart:.4f} apart (> {RUNS_AGREE}); {what}"
            + (f"; host part of a generate, ms ({base} / {r['mode']}): {gaps}" if gaps else "")
            + (f"; generates begun with the host slow (> {HOST_SLOW_X:g}x its fast time): {slow}" if slow else "")
            + _spread_clause(r)
        )
    return out


def noise_line(rows: Sequence[Mapping]) -> str:
    """The report's line on the generates' own noise per batch and what it asks of two runs (:func:`generate_noise`);
    from a prime's one stock Engine it says, before the protocol, whether this host can give runs that agree."""
    noise = generate_noise(rows)
    if not noise:
        return "the generates' noise: fewer than 4 timed generates per Engine, not read"
    named = len({m for m, _ in noise}) > 1  # the model's name only when there are several
    return (
        f"the generates' noise (robust SD of an Engine's log walls; the timed generates per mode each of two runs "
        f"needs to agree within {(RUNS_AGREE - 1) * 100:g} % at it): "
        + ", ".join(
            f"{model + ' ' if named else ''}b{batch} {sd:.3f} ({need:,})"
            for (model, batch), (sd, need) in noise.items()
        )
    )


def _spread_clause(r: Mapping) -> str:
    """The runs-apart line's last part: which level the spread comes from and what would narrow it."""
    pair, gen, need, had = (finite_number(r.get(k)) for k in ("pair_sd", "gen_sd", "gens_needed", "gens_had"))
    if pair is None or gen is None or need is None or had is None:
        return ""
    t = finite_number(r.get("runs_t"))
    gap = f"the runs' gap is {t:.2f} standard errors of their pairs" if t is not None else ""
    src = r.get("spread_from")
    if src == "runs":
        what = (
            f"{gap}, beyond what their own pairs allow: the host's state moved between the runs, which more pairs "
            "or generates in a run do not close"
        )
    elif src == "engines":
        what = (
            f"a run's pairs differ beyond what their generates' own noise allows (SD of log ratios {pair:.3f}, the "
            f"generates' noise alone {gen:.3f}): more pairs would narrow it" + (f"; {gap}" if gap else "")
        )
    else:
        what = (
            f"a run's pairs differ as their generates' own noise predicts (SD of log ratios {pair:.3f}, the "
            f"generates' noise alone {gen:.3f}): more generates per Engine, not more Engines, would narrow it"
            + (f"; {gap}" if gap else "")
        )
    return (
        f"; {what}; from the generates' noise alone two runs agree within {(RUNS_AGREE - 1) * 100:g} % only with "
        f"~{need:.0f} timed generates per mode each (these had {had:.0f})"
    )


def _table(rows: Sequence[Mapping], cols: Sequence[str]) -> str:
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r.get(c, "")) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def combined_table(rows: Sequence[Mapping]) -> str:
    """The verdict table of :func:`combine` (markdown; the health column shortened to the failed checks per run,
    the whole text is in the CSV)."""
    shown = []
    for r in rows:
        iv = f"{r['ratio']} [{r['ci_lo']}, {r['ci_hi']}]" if r["ci_lo"] != "" else f"{r['ratio']} [-]"
        failed: Counter = Counter()
        for part in r["health"].split(" | ") if r["health"] != "ok" else []:
            run, _, checks = part.partition(": ")
            failed[run] += len(checks.split("; "))
        short = "ok" if not failed else "FAILED " + ", ".join(f"{run} ({n} checks)" for run, n in failed.items())
        wo = (
            f"{r['ratio_wo']} [{r['ci_lo_wo']}, {r['ci_hi_wo']}] {r['verdict_wo']}"
            if r["ci_lo_wo"] != ""
            else f"{r['ratio_wo'] or '-'} [-] {r['verdict_wo']}"
        )
        gpu = (
            f"{r['busy_ratio']} [{r['busy_ci_lo'] or '-'}, {r['busy_ci_hi'] or '-'}] {r['busy_verdict']}"
            + (f" (from {r['busy_runs']} only)" if r.get("busy_runs") and r["busy_runs"] != r["runs"] else "")
            if r.get("busy_ratio") not in ("", None)
            else "-"
        )
        shown.append(
            dict(
                r, interval=iv, health=short, flagged=r["flagged"] or "none", **{"without flagged": wo, "gpu busy": gpu}
            )
        )
    cols = [
        "model",
        "radix_cache",
        "batch",
        "mode",
        "runs",
        "pairs",
        "df",
        "interval",
        "verdict",
        "flagged",
        "pairs_wo",
        "without flagged",
        "run_ratios",
        "runs_agree",
        "gpu busy",
        "busy_runs_agree",
        "health",
    ]
    return _table(shown, cols)


# ---------------------------------------------------------------- files


def read_csv(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def write_results(
    out: Path, gpu: str, units: Iterable, gens: Sequence[Mapping], summary: Sequence[Mapping]
) -> tuple[Path, Path]:
    """Both latest CSVs under ``out``, the rows of ``units`` ((model, run) pairs, or model names) replaced, other
    rows of the file at ``out`` kept (never seeded from the tree's copy: ``--merge`` brings a run into the tree); a
    duplicated key anywhere raises before anything is written."""
    units = list(units)
    paths = []
    merged = []
    for stem, rows, key, fields in (
        (GEN_STEM, gens, GEN_KEY, GEN_FIELDS),
        (SUMMARY_STEM, summary, SUMMARY_KEY, SUMMARY_FIELDS),
    ):
        path = Path(out) / "latest" / f"{stem}-{slug(gpu)}.csv"
        merged.append((path, merge_rows(read_csv(path), rows, units, key), fields))
    for path, rows, fields in merged:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_csv(path, rows, fields)
        paths.append(path)
    return paths[0], paths[1]


def write_runs(out: Path, gpu: str, runs: Mapping[str, Mapping]) -> Path:
    """``<out>/latest/cycle_live_runs-<gpu>.json``: run -> its header, Engines, options, health (runs kept)."""
    path = Path(out) / "latest" / f"{RUNS_STEM}-{slug(gpu)}.json"
    have = {}
    if path.exists():
        try:
            have = json.loads(path.read_text())
        except ValueError:
            have = {}
    have.update(runs)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(have, indent=1, sort_keys=True, default=str))
    return path


def merge_outputs(sources: Sequence[Path], out: Path) -> list[Path]:
    """The latest files of device calls (each source a copy of one ``$OUT``) into ``out``: a (model, run)'s rows from
    the last source that has it; runs of the runs JSON likewise; history rows of the benchmark not in ``out``'s
    history appended. Raises :class:`Refused` when no source holds anything of this benchmark."""
    found = [
        p
        for src in sources
        for stem in (GEN_STEM, SUMMARY_STEM, COMBINED_STEM)
        for p in sorted((Path(src) / "latest").glob(f"{stem}-*.csv"))
    ]
    if not found:
        raise Refused(
            f"--merge: nothing of this benchmark in {', '.join(map(str, sources))} (no latest/{GEN_STEM}-*.csv)"
        )
    # everything read and checked first: a bad source refused before anything of --out is written
    csvs, runs_files, histories = [], [], []
    for stem, key, fields in (
        (GEN_STEM, GEN_KEY, GEN_FIELDS),
        (SUMMARY_STEM, SUMMARY_KEY, SUMMARY_FIELDS),
        (COMBINED_STEM, COMBINED_KEY, COMBINED_FIELDS),
    ):
        for src in sources:
            for path in sorted((Path(src) / "latest").glob(f"{stem}-*.csv")):
                rows = _read_source(path, read_csv)
                try:
                    assert_unique(rows, key, str(path))
                except ValueError as e:
                    raise Refused(f"--merge: {e}") from None
                csvs.append((path, key, fields, rows))
    for src in sources:
        for path in sorted((Path(src) / "latest").glob(f"{RUNS_STEM}-*.json")):
            runs = _read_source(path, lambda p: json.loads(p.read_text()))
            if not isinstance(runs, dict):
                raise Refused(f"--merge: {path} is not a JSON object of runs")
            runs_files.append((path, runs))
        histories.append(_read_source(Path(src) / "history.csv", lambda p: read_history(p)[1] if p.exists() else []))
    hist = Path(out) / "history.csv"
    have_rows = {_history_key(r) for r in _read_source(hist, lambda p: read_history(p)[1] if p.exists() else [])}
    written = []
    for path, key, fields, rows in csvs:
        if "radix_cache" in key:  # a combined file from before the radix column: radix-off verdicts
            rows = [r if r.get("radix_cache") else {**r, "radix_cache": "off"} for r in rows]
        dest = Path(out) / "latest" / path.name
        merged = merge_rows(read_csv(dest), rows, {_unit(r, key) for r in rows}, key)
        dest.parent.mkdir(parents=True, exist_ok=True)
        write_csv(dest, merged, fields)
        written.append(dest)
    for path, runs in runs_files:
        dest = Path(out) / "latest" / path.name
        have = json.loads(dest.read_text()) if dest.exists() else {}
        have.update(runs)
        dest.write_text(json.dumps(have, indent=1, sort_keys=True))
        written.append(dest)
    for src_rows in histories:
        new = [r for r in src_rows if r.get("benchmark") == SUMMARY_STEM]
        new = [r for r in new if _history_key(r) not in have_rows]
        if new:
            append_history(hist, new)
            have_rows |= {_history_key(r) for r in new}
            written.append(hist)
    return sorted(set(written))


def _read_source(path: Path, read):
    """``read(path)`` for ``--merge``; a file that is not readable text, CSV or JSON: :class:`Refused`, one line."""
    try:
        return read(path)
    except (OSError, UnicodeDecodeError, csv.Error, ValueError) as e:
        raise Refused(f"--merge: {path} is unreadable ({type(e).__name__}: {str(e)[:300]})") from None


def _history_key(row: dict) -> tuple:
    """A history row as a hashable, orderable key, its empty cells left out: one row read from two files whose
    headers differ (a device's copy has the columns of newer runs) has one key."""
    return tuple(sorted((str(k), str(v)) for k, v in row.items() if v not in ("", None)))


def _check_generate_row(r: Mapping, where: str) -> None:
    """A generate row the statistics can read: wall_s positive finite seconds, batch and Engine whole numbers."""
    try:
        wall = float(r.get("wall_s") or "")
    except (TypeError, ValueError):
        wall = math.nan
    if not (math.isfinite(wall) and wall > 0):
        raise Refused(f"{where}: wall_s {r.get('wall_s')!r} is not a positive number of seconds")
    for col, default in (("batch", None), ("engine", "1")):
        try:
            int(r.get(col) or default)
        except (TypeError, ValueError):
            raise Refused(f"{where}: {col} {r.get(col)!r} is not a whole number") from None


def combine_files(
    paths: Sequence[Path], out: Path | None, runs: Sequence[str] | None = None
) -> tuple[list[dict], Path | None]:
    """``--combine``: the generate rows of several runs' CSVs (a file's rows without a run named after the file;
    ``runs``: only these runs), the pair analysis over all their pairs; written to
    ``<out>/latest/cycle_live_combined-<gpu>.csv`` when ``out``."""
    rows: list[dict] = []
    seen: dict[tuple, str] = {}
    contents: dict[bytes, str] = {}  # a file's bytes -> its path: one file's rows (or a copy's) count once
    for i, p in enumerate(paths):
        try:
            data = Path(p).read_bytes()
            mine = read_csv(Path(p))
        except (OSError, UnicodeDecodeError, csv.Error) as e:
            raise Refused(f"--combine: {p} is not a readable CSV ({type(e).__name__}: {e})") from None
        if data in contents:
            raise Refused(f"--combine: {p} holds the same rows as {contents[data]} (its pairs would count twice)")
        contents[data] = str(p)
        if not mine or "wall_s" not in mine[0]:
            raise Refused(f"--combine: {p} holds no generate rows (a {GEN_STEM}-<gpu>.csv)")
        for n, r in enumerate(mine, start=2):
            _check_generate_row(r, f"--combine: {p} line {n}")
        for r in mine:
            r["run"] = r.get("run") or f"{Path(p).stem}#{i + 1}"
        if runs:
            mine = [r for r in mine if r["run"] in runs]
        elif any(r["run"] == f"{Path(p).stem}#{i + 1}" for r in mine) and len({r["run"] for r in mine}) > 1:
            print(
                f"note: rows of {p} without a run name are taken as run {Path(p).stem}#{i + 1} (--runs leaves them out)"
            )
        units = set()
        for r in mine:
            units.add((r["model"], r["run"]))
        for u in units:
            if u in seen:
                raise Refused(f"--combine: run {u[1]!r} of {u[0]} is in both {seen[u]} and {p}")
            seen[u] = str(p)
        rows += mine
    absent = sorted(set(runs or ()) - {r["run"] for r in rows})
    if absent:
        raise Refused(f"--combine --runs: {', '.join(map(repr, absent))} in none of these files")
    unlike = unlike_runs(rows)
    if unlike:
        raise Refused(f"--combine: {unlike[0]}; pick runs of one workload with --runs")
    failed = failed_runs(rows)
    if failed:
        raise Refused(f"--combine: {failed[0]}: its pairs are not pooled; leave it out with --runs")
    table = combine(rows)
    if out is None or not table:
        return table, None
    gpu = next((r.get("gpu") for r in rows if r.get("gpu")), "unknown")
    path = Path(out) / "latest" / f"{COMBINED_STEM}-{slug(gpu)}.csv"
    merged = merge_rows(read_csv(path), table, {_unit(r, COMBINED_KEY) for r in table}, COMBINED_KEY)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_csv(path, merged, COMBINED_FIELDS)
    return table, path


# ---------------------------------------------------------------- the worker (one Engine)


class GcProbe:
    """Collections (per generation) and milliseconds in gc since the last :meth:`reset`, from ``gc.callbacks``."""

    def __init__(self) -> None:
        self.counts = [0, 0, 0]
        self.ms = 0.0
        self._t: float | None = None
        gc.callbacks.append(self._cb)

    def _cb(self, phase: str, info: Mapping) -> None:
        if phase == "start":
            self._t = time.perf_counter()
            return
        self.counts[min(2, int(info.get("generation", 0)))] += 1
        if self._t is not None:
            self.ms += (time.perf_counter() - self._t) * 1e3
            self._t = None

    def reset(self) -> None:
        self.counts, self.ms = [0, 0, 0], 0.0


def rss_mb() -> float:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class FakeEngine:
    """``--dry-run``'s Engine: sleeps ``delay_s * factor[mode] * engine_factor["mode:engine"] * (1 + batch / 64)`` a
    generate (``engine_factor``: one Engine of a mode in a slow "host state"; ``jitter``: a relative spread, seeded;
    ``compile_s``: a batch size's first generate under ``compile_dir``, shared by the Engines, takes that longer),
    output ids from the prompts (``break``: one mode answers differently; with the radix cache on a generate after
    another without ``flush_cache`` between answers differently, as SGLang's prefill from a cached state does;
    ``"flush": "absent"``: no ``flush_cache``); a child process titled like SGLang's scheduler (the probes read it);
    ``freeze_gc`` as SGLang's; writes a plugin report like the scheduler's."""

    def __init__(self, spec: Mapping) -> None:
        import random

        self.fake = fake = spec["fake"]
        self.mode = spec["mode"]
        self.delay = float(fake.get("delay_s", 0.002)) * float(fake.get("factor", {}).get(self.mode, 1.0))
        self.delay *= float(fake.get("engine_factor", {}).get(f"{self.mode}:{spec.get('engine', 1)}", 1.0))
        self.jitter = float(fake.get("jitter", 0.0))
        self.rng = random.Random(f"{self.mode}:{spec.get('engine', 1)}")  # the same jitter in every process
        self.broken = fake.get("break") == self.mode
        self.commits = 0
        self.profiling: Path | None = None  # the profiler's folder while it runs (start_profile .. stop_profile)
        self.events: list[dict] = []
        # the radix cache on: the prefix cache fills with each generate and changes the next one's output (as SGLang's
        # prefill from a cached state differs from a whole prefill); flush_cache empties it
        self.cached = 0 if spec.get("radix_cache") else None
        if fake.get("flush") == "absent":  # a release whose Engine has no flush_cache
            self.flush_cache = None
        self.frozen = 0
        if fake.get("fail") == self.mode:
            raise RuntimeError(f"fake Engine of {self.mode} told to fail at start")
        self.child = subprocess.Popen(  # the "scheduler": ends when its stdin closes (or with this process group)
            ["sh", "-c", "read -r _", "sglang::scheduler"], stdin=subprocess.PIPE
        )
        time.sleep(float(fake.get("start_s", 0)))  # an Engine's start, for the budget of further Engine sets

    def generate(self, input_ids, sampling_params):
        n = int(sampling_params["max_new_tokens"])
        if self.fake.get("compile_dir"):  # a batch size's first generate on the machine compiles (a cache on disk)
            mark = Path(self.fake["compile_dir"]) / f"b{len(input_ids)}"
            if not mark.exists():
                time.sleep(float(self.fake.get("compile_s", 0)))
                mark.parent.mkdir(parents=True, exist_ok=True)
                mark.touch()
        jit = 1 + self.jitter * self.rng.uniform(-1, 1)
        time.sleep(self.delay * jit * (1 + len(input_ids) / 64))
        if self.profiling is not None:
            self._record(len(input_ids))
        self.commits += n // 2
        outs = []
        cached = self.cached % 2 if self.cached is not None else 0
        if self.cached is not None:
            self.cached += 1
        for p in input_ids:
            h = (sum(p) + (1 if self.broken else 0) + cached) % 997
            outs.append({"output_ids": [(h + i) % 1000 for i in range(n)], "meta_info": {"spec_verify_ct": n // 2}})
        self._report()
        return outs

    def freeze_gc(self) -> None:
        gc.freeze()
        self.frozen += 1

    def start_profile(self, output_dir: str, activities) -> None:
        """As SGLang's profiler: the GPU's kernels of every generate until :meth:`stop_profile` go into a Chrome trace
        in ``output_dir``. The fake's busy time is ``busy_s * factor[mode] * (1 + batch / 64)``: the GPU's work,
        which neither ``engine_factor`` nor ``jitter`` (the host's states) moves."""
        assert list(activities) == ["GPU"], activities
        if self.fake.get("profile_fail") == self.mode:  # a release or machine whose profiler does not start
            raise RuntimeError("fake profiler told to fail")
        self.profiling, self.events = Path(output_dir), []

    def _record(self, batch: int) -> None:
        busy = float(self.fake.get("busy_s", 0.001)) * float(self.fake.get("factor", {}).get(self.mode, 1.0))
        dur = busy * (1 + batch / 64) * 1e6 / 8  # µs, 8 kernels with gaps between them
        t = len(self.events) * 2 * dur
        name = "fused_sigmoid_gating_delta_rule_update_kernel"
        self.events += [{"cat": "kernel", "name": name, "ts": t + 2 * i * dur, "dur": dur} for i in range(8)]

    def stop_profile(self) -> None:
        import gzip

        folder, self.profiling = self.profiling, None
        assert folder is not None, "stop_profile without start_profile"
        time.sleep(float(self.fake.get("profile_s", 0)))  # writing a trace takes time (the budget's tests)
        # a profiler that breaks on the machine: "die" (the Engine killed under it), "notrace" (no trace ever
        # written), "idle" (a trace without GPU activity, as a CUPTI that records nothing)
        how = (self.fake.get("profile_break") or {}).get(self.mode)
        if how == "die":
            os._exit(3)
        if how == "notrace":
            return
        folder.mkdir(parents=True, exist_ok=True)
        with gzip.open(folder / "fake.trace.json.gz", "wt") as f:
            json.dump({"traceEvents": [] if how == "idle" else self.events}, f)

    def flush_cache(self):
        """As SGLang's ``Engine.flush_cache``: the prefix cache emptied, a result with ``success`` (``"flush":
        "refuse"``: never done, as while requests are pending); ``flush_s``: the time it takes."""
        time.sleep(float(self.fake.get("flush_s", 0)))
        if self.fake.get("flush") == "refuse":
            return type("FlushCacheReqOutput", (), {"success": False})()
        if self.cached is not None:
            self.cached = 0
        return type("FlushCacheReqOutput", (), {"success": True})()

    def _report(self) -> None:
        folder = os.environ.get("SGLANG_MAMBA_DEDUP_REPORT_DIR")
        if not folder:
            return
        on = os.environ.get("SGLANG_MAMBA_DEDUP") == "1"
        zc = on and os.environ.get("SGLANG_MAMBA_DEDUP_ZERO_COPY") == "1"
        ev = {"commit_calls": self.commits, "ours_commit_calls": self.commits if on else 0}
        if zc:
            ev.update(zero_copy="on", zc_commit_calls=self.commits)
            # the gate's reading (``patches.zero_copy.radix_wanted``) written out: the fake imports none of the plugin
            opt_out = os.environ.get(RADIX_OPT_OUT, "").strip().lower() not in ("", "1", "on", "true", "yes")
            if self.cached is not None and not opt_out:  # the radix cache on, as the gate: every commit is tracked
                ev["zc_track_commits"] = self.commits
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / f"status-{os.getpid()}-fake.json").write_text(json.dumps({"events": ev}))

    def shutdown(self) -> None:
        try:
            self.child.stdin.close()
            self.child.wait(5)
        except (OSError, subprocess.TimeoutExpired):
            self.child.kill()


def gpu_query() -> tuple[str, float, float] | None:
    """(name, free GiB, total GiB) of the first visible GPU from ``nvidia-smi`` (no CUDA context in this process)."""
    dev = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0].strip() or "0"
    try:
        out = subprocess.run(
            ["nvidia-smi", "-i", dev, "--query-gpu=name,memory.free,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        name, free, total = (x.strip() for x in out.stdout.strip().splitlines()[0].split(","))
        return name, float(free) / 1024, float(total) / 1024
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return None


def arm_kwargs(kw: Mapping, mode: str) -> dict:
    """The Engine keywords of ``mode``: the common ones with the arm's changes (:data:`ARM_ENGINE_KWARGS`)."""
    out = dict(kw)
    for k, v in ARM_ENGINE_KWARGS.get(mode, {}).items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = v
    return out


def _graph_config(engine) -> dict:
    """The Engine's resolved CUDA-graph settings and what decides the captured sizes (SGLang captures the listed
    decode sizes up to its request pool), with the flags the protocol relies on."""
    try:
        info = engine.get_server_info()
    except Exception as e:  # noqa: BLE001 - informational only
        return {"error": repr(e)[:200]}
    keep = ("max_running_requests", "sleep_on_idle", "disable_radix_cache", "enable_linear_replayssm_spec")
    out = {k: v for k, v in info.items() if "cuda_graph" in k or k in keep}
    out["graph_mem_gb"] = graph_memory(info)
    return out


def graph_memory(info: Mapping) -> dict | str:
    """The CUDA-graph memory pools (GB per phase, target and draft) from ``get_server_info()``'s internal states
    (SGLang's scheduler ``memory_usage.graph``, where the release reports it), else absent."""
    try:
        states = info.get("internal_states") or []
        graph = (states[0] if isinstance(states, list) else states)["memory_usage"]["graph"]
        return {str(k): round(float(v), 4) for k, v in dict(graph).items()}
    except (KeyError, IndexError, TypeError, ValueError, AttributeError):
        return ABSENT


def _make_engine(spec: Mapping):
    """The mode's Engine and what to say about it (pids, GPU, versions, memory, graphs, start time)."""
    from importlib import metadata

    info: dict = {"pid": os.getpid(), "mode": spec["mode"], "engine": spec.get("engine", 1)}
    info.update(cpus=_span(sorted(os.sched_getaffinity(0))), omp_threads=os.environ.get("OMP_NUM_THREADS"))
    if spec.get("fake") is not None:
        engine = FakeEngine(spec)
        info.update(gpu="cpu", sglang="-", start_s=0.0, graphs={"cuda_graph": ABSENT})
        info["running_cap"] = (spec["fake"].get("running_cap") or {}).get(spec["mode"])
        info["pids"] = engine_pids(os.getpid())
        return engine, info
    kw = arm_kwargs(spec["engine_kwargs"], spec["mode"])
    if spec.get("omp_threads"):  # this process's intra-op pool too (its children read OMP_NUM_THREADS)
        import torch

        torch.set_num_threads(int(spec["omp_threads"]))
    import sglang

    info["sglang"] = getattr(sglang, "__version__", "") or metadata.version("sglang")
    gpu = gpu_query()
    if gpu is None:  # no nvidia-smi: ask torch (a CUDA context in this process)
        import torch

        free, total = torch.cuda.mem_get_info()
        gpu = (torch.cuda.get_device_name(), free / 2**30, total / 2**30)
    info.update(gpu=gpu[0], free_gib=round(gpu[1], 2), total_gib=round(gpu[2], 2))
    if spec.get("static_gb"):  # the same static budget in bytes for every Engine, whatever the others hold
        kw["mem_fraction_static"] = round(min(0.9, max(0.05, float(spec["static_gb"]) / gpu[1])), 4)
    info["mem_fraction_static"] = kw.get("mem_fraction_static")
    t0 = time.time()
    engine = sglang.Engine(**kw)
    info["start_s"] = round(time.time() - t0, 1)
    try:
        sinfo = engine._scheduler_init_result.scheduler_infos[0]
        info["max_total_num_tokens"] = sinfo.get("max_total_num_tokens")
    except Exception:  # noqa: BLE001 - informational only
        pass
    info["graphs"] = _graph_config(engine)
    info["pids"] = engine_pids(os.getpid())
    try:  # SGLang's own running-request cap in force (0.5.23's internal state), read once, outside any timing
        states = engine.get_server_info().get("internal_states") or [{}]
        info["running_cap"] = states[0].get("effective_max_running_requests_per_dp")
    except Exception:  # noqa: BLE001 - not reported by this release: the check below says nothing
        info["running_cap"] = None
    return engine, info


#: ``[0, 1, 2, 5]`` -> ``"0-2,5"`` (the probes' CPU lists)
_span = cpu_list


def _generate(engine, ids, sampling: Mapping, probe: GcProbe, gc_off: bool, sched) -> dict:
    """One generate, timed with ``perf_counter`` around ``Engine.generate`` alone; the probes of the scheduler
    (pid ``sched``) and of this process are read before and after that window, never inside it."""
    me = os.getpid()
    before = (proc_snapshot(sched), proc_snapshot(me))
    probe.reset()
    if gc_off:
        gc.disable()
    try:
        t_start = time.time()
        t0 = time.perf_counter()
        outs = engine.generate(input_ids=ids, sampling_params=dict(sampling))
        wall = time.perf_counter() - t0
        t_end = time.time()
    finally:
        if gc_off:
            gc.enable()
    counts, ms = list(probe.counts), probe.ms
    after = (proc_snapshot(sched), proc_snapshot(me))
    out_ids = [o["output_ids"] for o in outs]
    verify = sum(int((o.get("meta_info") or {}).get("spec_verify_ct", 0) or 0) for o in outs)
    tokens = sum(len(x) for x in out_ids)
    return {
        "wall_s": wall,
        "t_start": round(t_start, 4),
        "t_end": round(t_end, 4),
        "md5": hashlib.md5(json.dumps(out_ids).encode()).hexdigest(),
        "gc": counts,
        "gc_ms": ms,
        "rss_mb": rss_mb(),
        "tokens": tokens,
        "accept_length": tokens / verify if verify else None,
        "probes": {**proc_delta(before[0], after[0], "sched"), **proc_delta(before[1], after[1], "worker")},
    }


def _send(conn: Connection, msg: Mapping) -> None:
    conn.send_bytes(json.dumps(msg, default=str).encode())  # default: an odd type in SGLang's server info


def _watch_driver(driver: int) -> threading.Event:
    """While the Engine starts (minutes; nothing is read from the driver then), a thread checks 10 times a second that
    the driver is still this process's parent; when it is gone (a SIGKILL it could not handle), this worker's whole
    session goes (the Engine's processes with it). Set the returned event to stop watching (the Engine is up: from
    then on the driver's socket tells its end). Compared with the driver's pid from the spec, so a driver killed
    before the thread starts is seen too."""
    done = threading.Event()

    def watch() -> None:
        while driver and not done.wait(0.1):
            if os.getppid() != driver:
                os.killpg(os.getpgrp(), signal.SIGKILL)

    threading.Thread(target=watch, name="watch-driver", daemon=True).start()
    return done


def serve(spec_path: str, fd: int) -> int:
    """The worker: build the Engine, then answer ``generate`` and ``freeze`` requests until ``stop`` (or the driver
    is gone). ``freeze``: ``gc.collect()`` here, then ``Engine.freeze_gc()`` (this process's tokenizer manager, the
    scheduler and, through it, the detokenizer); every later generate says ``frozen``."""
    conn = Connection(fd)
    os.set_inheritable(fd, False)  # not into SGLang's subprocesses: the driver sees EOF when this process ends
    spec = json.loads(Path(spec_path).read_text())
    probe = GcProbe()
    starting = _watch_driver(int(spec.get("driver_pid") or 0))
    try:
        engine, info = _make_engine(spec)
    except BaseException:  # noqa: BLE001 - told to the driver
        traceback.print_exc()
        _send(conn, {"error": traceback.format_exc()[-4000:]})
        return 1
    finally:
        starting.set()
    _send(conn, {"ready": True, **info})
    sched = info["pids"]["scheduler"]
    sampling = {"temperature": 0.0, "max_new_tokens": spec["max_new_tokens"], "ignore_eos": True}
    from sglang_mamba_dedup.e2e.workload import engine_flush_once, flush_with_retry

    attempts = int((spec.get("fake") or {}).get("flush_attempts", 40))  # 40 x 0.25 s (the fake's tests: fewer)
    prompts: dict[int, list[list[int]]] = {}
    frozen = 0
    rc = 0
    try:
        while True:
            try:
                msg = json.loads(conn.recv_bytes())
            except (EOFError, OSError):
                break
            if msg.get("op") == "freeze":
                collected = gc.collect()
                if hasattr(engine, "freeze_gc"):
                    engine.freeze_gc()
                    frozen = 1
                _send(conn, {"frozen": frozen, "collected": collected})
                continue
            if msg.get("op") == "flush":  # the prefix cache emptied (the radix cache on), asked before each generate
                flushed = flush_with_retry(lambda: engine_flush_once(engine), attempts=attempts)
                if flushed is False:
                    _send(conn, {"error": f"flush_cache refused {attempts} times: the prefix cache was not emptied"})
                    rc = 1
                    break
                _send(conn, {"flushed": flushed})
                continue
            if msg.get("op") not in ("generate", "profile"):
                break
            b = int(msg["batch"])
            if b not in prompts:
                prompts[b] = prompts_for(b, spec["vocab"], spec["seed"])
            if msg["op"] == "profile":  # --gpu-busy: outside every timed window
                try:
                    folder = Path(spec_path).parent / f"trace-{os.getpid()}-b{b}"
                    t0 = time.time()
                    res = profiled_generate(
                        engine,
                        prompts[b],
                        sampling,
                        folder,
                        int(spec.get("linear_layers") or 0),
                        timeout_s=float((spec.get("fake") or {}).get("trace_wait_s", PROFILE_TRACE_WAIT_S)),
                        settle_s=0.0,  # the trace is whole once stop_profile returned; a torn read is retried
                    )
                    res["profile_s"] = round(time.time() - t0, 3)
                except Exception as e:  # noqa: BLE001 - the wall is measured: told, the Engine goes on
                    traceback.print_exc()
                    res = {"profile_error": f"{type(e).__name__}: {str(e)[:300]}"}
                _send(conn, res)
                continue
            try:
                warm = bool(msg.get("warmup"))
                res = _generate(engine, prompts[b], sampling, probe, bool(spec["gc_off"]) and not warm, sched)
            except Exception:  # noqa: BLE001 - told to the driver
                traceback.print_exc()
                _send(conn, {"error": traceback.format_exc()[-4000:]})
                rc = 1
                break
            res["frozen"] = frozen
            _send(conn, res)
    finally:
        t0 = time.time()
        try:
            engine.shutdown()
        except BaseException:  # noqa: BLE001 - the driver kills what is left
            traceback.print_exc()
        try:
            _send(conn, {"stopped": True, "shutdown_s": round(time.time() - t0, 1)})
        except OSError:
            pass
    return rc


# ---------------------------------------------------------------- the driver


class EngineFailed(RuntimeError):
    pass


class Worker:
    """One Engine's worker process (Engine ``engine`` of ``mode``): its own session (so what it leaves can be killed),
    a socket pair to the driver, its log in ``<work>/<mode>-e<engine>.log``, the plugin's reports in
    ``<work>/reports-<mode>-e<engine>/``; ``omp_threads`` its thread pools."""

    def __init__(self, mode: str, spec: Mapping, work: Path, engine: int = 1, omp_threads: int | None = None):
        self.mode, self.engine = mode, engine
        self.name = f"{mode}-e{engine}"
        self.log_path = work / f"{self.name}.log"
        self.report_dir = work / f"reports-{self.name}"
        shutil.rmtree(self.report_dir, ignore_errors=True)  # an earlier run's reports would count as this one's
        spec_path = work / f"{self.name}.spec.json"
        spec_path.write_text(
            json.dumps(dict(spec, mode=mode, engine=engine, omp_threads=omp_threads, driver_pid=os.getpid()))
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_MAMBA_DEDUP")}
        env.update(MODES[mode], SGLANG_MAMBA_DEDUP_REPORT_DIR=str(self.report_dir), PYTHONUNBUFFERED="1")
        if omp_threads:  # before Python starts: torch and the BLAS libraries read them at import
            env.update(OMP_NUM_THREADS=str(omp_threads), MKL_NUM_THREADS=str(omp_threads))
        self.conn, child = Pipe()
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-P", str(Path(__file__).resolve()), "--serve", str(spec_path), str(child.fileno())],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=(child.fileno(),),
                start_new_session=True,
            )
        child.close()
        self.info: dict = {}
        self.stopped = False

    def tail(self, n: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def ask(self, msg: Mapping | None, timeout: float) -> dict:
        try:
            if msg is not None:
                _send(self.conn, msg)
            if not self.conn.poll(timeout):
                raise EngineFailed(f"{self.name}: no answer in {timeout:.0f} s\n{self.tail()}")
            reply = json.loads(self.conn.recv_bytes())
        except (EOFError, OSError) as e:
            raise EngineFailed(f"{self.name}: worker gone ({e!r}, exit {self.proc.poll()})\n{self.tail()}") from e
        if "error" in reply:
            raise EngineFailed(f"{self.name}: {reply['error']}")
        return reply


def stop_all(workers: Sequence[Worker], timeout: float) -> None:
    """Ask every worker not yet stopped to stop at once, wait up to ``timeout``, then kill each worker's session."""
    workers = [w for w in workers if not w.stopped]
    for w in workers:
        try:
            _send(w.conn, {"op": "stop"})
        except OSError:
            pass
    deadline = time.time() + timeout
    for w in workers:
        try:
            w.proc.wait(max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            print(f"[{w.name}: worker still running after {timeout:.0f} s: killed]", flush=True)
    for w in workers:
        try:
            os.killpg(w.proc.pid, signal.SIGKILL)  # the worker and whatever of its Engine is left
        except (ProcessLookupError, PermissionError):
            pass
        try:
            w.proc.wait(10)
        except subprocess.TimeoutExpired:
            pass
        w.conn.close()
        w.stopped = True


def _terminate(signum, frame):  # SIGTERM (the runner's timeout), SIGINT: unwind, stop the workers, keep the files
    raise SystemExit(128 + signum)


def run(args, model: str, spec: dict, work: Path, options: dict) -> int:
    t_start = time.time()
    deadline = t_start + args.budget_s - args.stop_reserve_s if args.budget_s else math.inf
    date = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    commit = git_commit()
    opts = json.dumps(options, sort_keys=True, separators=(",", ":"))
    run_id = args.run
    header = run_header()
    gpu = Gpu()
    header["nvml"] = gpu.ok
    lscpu = {k.strip(): v.strip() for k, _, v in (x.partition(":") for x in header["lscpu"].splitlines()) if v}
    print(
        f"[run {run_id}: kernel {header['kernel']}, {header['nproc']} CPUs ({lscpu.get('Thread(s) per core', '?')} "
        f"threads per core, {lscpu.get('Model name', '?')}, hypervisor {lscpu.get('Hypervisor vendor', header['hypervisor_flag'])}), "
        f"load {header['loadavg']}, NVML {'yes' if gpu.ok else ABSENT}, driver pid {header['driver_pid']}]",
        flush=True,
    )
    run_info: dict = {"date": date, "commit": commit, "options": options, "header": header, "engines": {}}
    run_info.update(gpu_processes={}, health={}, freeze={})
    workers: dict[tuple[str, int], Worker] = {}  # (mode, engine) -> its worker
    rows: list[dict] = []
    md5s: dict[tuple[int, str], set[str]] = {}  # the timed generates' outputs
    warm_md5: dict[tuple[int, str], str] = {}  # the warm-ups' (told, not checked)
    unflushed: set[str] = set()  # with the radix cache on: Engines whose prefix cache was not emptied before a generate
    done: list[int] = []
    skipped: list[int] = []
    partial: list[int] = []
    not_started: list[str] = []
    capped: dict[int, str] = {}  # batches not timed: above an Engine's running-request cap (over_cap)
    meta = {"gpu": "unknown", "sglang": "-"}
    status = 0
    written = False
    last: dict[tuple[str, int], float] = {}  # the latest wall of each Engine (budget estimates)
    warm_s: dict[tuple[tuple[str, int], int], list[float]] = {}  # (Engine, batch) -> its warm-ups' walls

    def save(summary: list[dict] | None = None) -> list[dict]:
        """Both CSVs and the runs file rewritten (``summary``: already made from these rows); the summary."""
        nonlocal written
        if not rows and not written:
            return []
        mark_slow(rows)
        if summary is None:
            summary = summarize(rows, resamples=args.bootstrap, seed=args.seed, reps_asked=args.reps)
        g, s = write_results(args.out, meta["gpu"], [(model, run_id)], rows, summary)
        run_info["health"] = {f"b{r['batch']} {r['mode']}": r["health"] for r in summary}
        run_info["engines"] = {w.name: w.info for w in workers.values()}
        j = write_runs(args.out, meta["gpu"], {run_id: run_info})
        written = True
        print(f"[files: {g}, {s}, {j}]", flush=True)
        return summary

    def start(mode: str, e: int) -> Worker:
        t0 = time.time()
        print(f"[{mode}-e{e}: starting its Engine ({time.time() - t_start:.0f} s into the run)]", flush=True)
        workers[(mode, e)] = w = Worker(mode, spec, work, e, args.omp_threads)
        w.info = w.ask(None, args.engine_timeout)
        w.info["ready_after_s"] = round(time.time() - t0, 1)
        # outside every timed window: what may tell this Engine's scheduler from another's (a whole-Engine slow state)
        w.info["start_probe"] = sp = start_probe((w.info.get("pids") or {}).get("scheduler", ABSENT))
        short = {k: v for k, v in sp.items() if k != "py_spy"}
        py_spy = "absent" if str(sp["py_spy"]).startswith(ABSENT) else f"{len(sp['py_spy'])} chars"
        print(f"[{w.name}: start probe {json.dumps(short, sort_keys=True)}, py-spy dump {py_spy}]", flush=True)
        if meta["gpu"] == "unknown":
            meta.update(gpu=w.info.get("gpu", "unknown"), sglang=w.info.get("sglang", "-"))
        print(f"[{w.name}: ready in {time.time() - t0:.0f} s: {json.dumps(w.info, sort_keys=True)}]", flush=True)
        return w

    def warm_and_freeze(units: Sequence[tuple[str, int]], b: int) -> None:
        """``--warmups`` generates per Engine (in turn), then ``gc.collect()`` + ``freeze_gc`` in every Engine."""
        for k in range(args.warmups):
            for unit in units:
                w = workers[unit]
                flush(unit)
                r = w.ask({"op": "generate", "batch": b, "warmup": True}, args.generate_timeout)
                prev = warm_md5.setdefault((b, unit[0]), r["md5"])
                if r["md5"] != prev:
                    warm_md5[(b, unit[0])] = "differs between Engines"
                last[unit] = r["wall_s"]
                warm_s.setdefault((unit, b), []).append(r["wall_s"])
                print(
                    f"[b{b} {w.name} warm-up {k + 1}/{args.warmups} {r['wall_s']:.3f} s md5 {r['md5'][:8]}]", flush=True
                )
        for unit in units:
            f = workers[unit].ask({"op": "freeze"}, args.generate_timeout)
            run_info["freeze"][f"b{b} {workers[unit].name}"] = f
        run_info["gpu_processes"][f"b{b}"] = gpu.processes()

    def flush(unit: tuple[str, int]) -> None:
        """With the radix cache on: the Engine's prefix cache emptied before a generate, before its probes too (a
        flush resets the pools and may retry: none of it is the generate's)."""
        if args.radix_cache:
            f = workers[unit].ask({"op": "flush"}, args.generate_timeout)
            if f.get("flushed") is not True:  # an Engine without flush_cache
                unflushed.add(workers[unit].name)

    def timed(unit: tuple[str, int], b: int, seq: int, count: dict) -> None:
        mode, eng = unit
        flush(unit)
        sched = proc_snapshot((workers[unit].info.get("pids") or {}).get("scheduler", ABSENT))
        work = cpu_work_us(sched["last"] if sched else None)  # the scheduler's CPU's speed, before the window
        ca, ga = cpu_times(), gpu.snapshot()  # outside the worker's timed window
        t0 = time.perf_counter()
        r = workers[unit].ask({"op": "generate", "batch": b}, args.generate_timeout)
        rtt = time.perf_counter() - t0
        cb, gb = cpu_times(), gpu.snapshot()
        probes = dict(r["probes"])
        probes.update(cpu_delta(ca, cb, probes.get("sched_cpu_last")), **gpu_delta(ga, gb), sched_cpu_work_us=work)
        count[unit] = count.get(unit, 0) + 1
        last[unit] = r["wall_s"]
        md5s.setdefault((b, mode), set()).add(r["md5"])
        rows.append(
            dict(
                base_row,
                run=run_id,
                batch=b,
                mode=mode,
                engine=eng,
                generate=count[unit],
                seq=seq,
                wall_s=round(r["wall_s"], 6),
                rtt_s=round(rtt, 6),
                slow=0,
                frozen=r.get("frozen", 0),
                gc_gen0=r["gc"][0],
                gc_gen1=r["gc"][1],
                gc_gen2=r["gc"][2],
                gc_ms=round(r["gc_ms"], 3),
                rss_mb=round(r["rss_mb"], 1),
                tokens=r["tokens"],
                accept_length=round(r["accept_length"], 3) if r["accept_length"] else "",
                md5=r["md5"],
                t_start=r["t_start"],
                t_end=r["t_end"],
                **probes,
                run_status=RUNNING,  # the run's exit status once its checks are done (combine_files reads it)
            )
        )

    prof_s: list[float] = []  # what each profiled generate took, its trace written and read (the budget's estimate)
    prof_failed: list[str] = []  # the first failed profile: no Engine after it is profiled (a profiler that fails once
    # fails again: each further try would cost the call's time, never the wall's rows)
    prof_cut: list[str] = []  # the first profile the budget left out: none after it either (audit 2026-12-05c M8)

    def profile(unit: tuple[str, int], b: int, timed_rows: Sequence[dict]) -> bool:
        """``--gpu-busy`` profiled generates of this Engine at this batch, each after the same flush as a timed one,
        outside every timed window: their median GPU busy time (and GPU time per verify cycle) onto ``timed_rows``.
        False when a profile failed (an error, no trace, no GPU activity, the Engine gone): said in one line and kept
        in the runs file; no more profiles in this run; the Engine's timed rows stand (its timed generates are done)."""
        got, name = [], workers[unit].name
        for _ in range(args.gpu_busy):
            # once a profile's time is known, each fits the budget or none is tried: the first Engine's batch checks
            # guessed PROFILE_GUESS_S, which profiles slower than that overran by all of its profiles (M8)
            if prof_s and not fits(time.time(), deadline, max(prof_s)):
                prof_cut.append(f"b{b} {name}")
                run_info["profiles_cut"] = prof_cut[0]
                print(
                    f"[budget: no further profiles in this run (b{b} {name} and after; one takes ~{max(prof_s):.0f} s,"
                    f" {max(0.0, deadline - time.time()):.0f} s left); the timed rows stand]",
                    flush=True,
                )
                break
            t0 = time.time()
            try:
                flush(unit)
                r = workers[unit].ask({"op": "profile", "batch": b}, args.generate_timeout + PROFILE_READ_S)
            except EngineFailed as e:  # the Engine died under the profiler: its timed rows are complete
                r = {"profile_error": f"the Engine failed: {str(e).splitlines()[0][:300]}"}
            busy = finite_number(r.get(BUSY_COL))
            if "profile_error" not in r and not (busy and busy > 0):
                r = {"profile_error": f"no GPU activity in the trace ({BUSY_COL} {r.get(BUSY_COL)!r})"}
            prof_s.append(float(r.get("profile_s") or time.time() - t0))  # a failed one costs time too
            if "profile_error" in r:
                prof_failed.append(f"b{b} {name}")
                run_info.setdefault("profile_errors", {})[f"b{b} {name}"] = r["profile_error"]
                print(
                    f"[b{b} {name}: no GPU busy time, the profile failed: {r['profile_error']}; "
                    "no further profiles in this run]",
                    flush=True,
                )
                break
            got.append(r)
        if not got:
            return not (prof_failed or prof_cut)
        busy = statistics.median(float(r[BUSY_COL]) for r in got)
        kern = statistics.median(float(r["gpu_kernel_s"]) for r in got)
        per = [v for v in (finite_number(r.get("gpu_us_per_cycle")) for r in got) if v is not None]
        for row in timed_rows:
            row[BUSY_COL] = round(busy, 6)
            row["gpu_kernel_s"] = round(kern, 6)
            row["gpu_us_per_cycle"] = round(statistics.median(per), 1) if per else ""
        print(
            f"[b{b} {name}: GPU busy {busy:.4f} s per generate (median of {len(got)} profiled), "
            f"{prof_s[-1]:.1f} s each with its trace]",
            flush=True,
        )
        return not (prof_failed or prof_cut)

    def profiled(unit: tuple[str, int]) -> bool:
        """Whether ``--gpu-busy`` profiles this Engine: every Engine, or the first ``--gpu-busy-engines`` of each mode."""
        return bool(args.gpu_busy) and (not args.gpu_busy_engines or unit[1] <= args.gpu_busy_engines)

    def cap_batches(ws: Sequence) -> None:
        """Batches above these Engines' running cap: said once each, then not timed in any Engine of the run."""
        for b, why in over_cap(ws, [b for b in args.batches if b not in capped]).items():
            capped[b] = why
            run_info.setdefault("over_cap", {})[str(b)] = why
            print(
                f"[b{b} not timed: {why}, fewer than the batch (it would run in pieces, and its output depend on "
                "the cap); raise --static-gb: sglang-mamba-dedup plan -- <the launch> says what admits it]",
                flush=True,
            )

    def batch_done(b: int, count: dict) -> None:
        done.append(b)
        meds = {
            m: statistics.median([x["wall_s"] for x in rows if x["batch"] == b and x["mode"] == m] or [0])
            for m in args.modes
        }
        print(
            f"[b{b}: {sum(count.values())} timed ({args.reps} per Engine); medians {json.dumps({m: round(v, 4) for m, v in meds.items()})}; {time.time() - t_start:.0f} s into the run]",
            flush=True,
        )

    base_row: dict = {}
    n_eng = args.engines_per_mode
    try:
        if args.sequential:
            starts: list[float] = []
            spent: list[float] = []  # each Engine's batches, without its compiles (a set alive together: its share)
            prof_engine_s: list[float] = []  # each profiled Engine's profiles (--gpu-busy), all its batches together
            order = sequential_order(args.modes, n_eng)
            for group in engine_groups(order, len(args.modes) if args.pairs_alive else 1):
                i = order.index(group[0])
                # a set of modes starts only when all of it fits: an Engine without its set's other modes has no
                # pair (the 12-05 H100 run A timed s1 z1 z2, and z2 paired with nothing)
                rest = order[i : i + len(args.modes) - i % len(args.modes)]  # this Engine and the rest of its set
                need = next_engine_need(starts, spent) * len(rest)
                # their profiles on top, only for the Engines profiled (--gpu-busy-engines): ``spent`` has none; a
                # profiled Engine's as long as the longest an earlier one took for its (the batches it timed)
                if prof_engine_s and not (prof_failed or prof_cut):
                    need += max(prof_engine_s) * sum(map(profiled, rest))
                run_info.setdefault("need_s", {})[" ".join(f"{m}-e{e}" for m, e in group)] = round(need, 2)
                if starts and not fits(time.time(), deadline, need):
                    not_started += [f"{m}-e{e}" for m, e in order[i:]]
                    what = "the next set" if i % len(args.modes) == 0 else "the next"
                    left = deadline - time.time()
                    print(
                        f"[budget: Engines not started {not_started} ({what} needs ~{need:.0f} s, {left:.0f} s left)]",
                        flush=True,
                    )
                    break
                ws = []
                for unit in group:  # --pairs-alive: the set's Engines started one after the other, then timed together
                    t0 = time.time()
                    ws.append(start(*unit))
                    starts.append(time.time() - t0)
                base_row = dict(model=model, date=date, commit=commit, options=opts, **meta)
                cap_batches(ws)
                t1 = time.time()
                compiled = 0.0
                prof_spent = 0.0
                timed_rows: dict[tuple[str, int], dict[int, list[dict]]] = {u: {} for u in group}  # --gpu-busy fills
                for b in (b for b in args.batches if b not in capped):
                    per_b = sum(2 * (args.warmups + args.reps) * last.get(u, 0.0) for u in group)
                    # with this batch's profiled generates, those of the batches before it, done after the last
                    slowest = max(last.get(u, 0.0) for u in group)
                    one = max(prof_s) if prof_s else PROFILE_GUESS_S + 2 * slowest
                    n_prof = (args.gpu_busy if not (prof_failed or prof_cut) else 0) * sum(map(profiled, group))
                    per_b += n_prof * one * (len(timed_rows[group[0]]) + 1)
                    if not fits(time.time(), deadline, per_b):
                        partial.append(b)
                        break
                    warm_and_freeze(group, b)
                    count: dict = {}
                    first = len(rows)
                    # one Engine: its generates in a row; a set alive together: palindromes over its Engines, so a
                    # spell of the host's (docs/benchmarks.md, 2026-12-06: ~2x for ~60 s) slows every mode alike
                    for seq, unit in enumerate(balanced_order(group, args.reps), start=1):
                        timed(unit, b, seq, count)
                    for unit, w in zip(group, ws):
                        mine = [r for r in rows[first:] if (r["mode"], r["engine"]) == unit]
                        med = statistics.median(r["wall_s"] for r in mine)
                        compiled += compile_excess(warm_s.get((unit, b), []), med)
                        print(f"[b{b} {w.name}: {args.reps} timed, median {med:.4f} s]", flush=True)
                        timed_rows[unit][b] = mine
                # the profiled generates after every timed one of this set: whatever the profiler leaves behind in
                # its processes (CUPTI's callbacks, a slower launch) reaches none of its timed windows; one Engine
                # generates at a time, so a profile sees its own GPU work only
                if (
                    args.gpu_busy
                    and any(map(profiled, group))
                    and timed_rows[group[0]]
                    and not (prof_failed or prof_cut)
                ):
                    save()  # its timed rows on disk first: a wall that cuts a profile short loses none of them
                    t_prof = time.time()
                    for unit in filter(profiled, group):
                        if not all(profile(unit, b, mine) for b, mine in timed_rows[unit].items()):
                            break
                    prof_spent = time.time() - t_prof  # left out of ``spent``: the next set's need adds its own
                    prof_engine_s.append(prof_spent / sum(map(profiled, group)))
                share = (time.time() - t1 - compiled - prof_spent) / len(group)
                spent.append(share)
                names = " ".join(w.name for w in ws)
                if compiled >= 1.0:
                    print(
                        f"[{names}: {compiled:.0f} s of its warm-ups were compiles, not counted for the next Engines]",
                        flush=True,
                    )
                stop_all(ws, args.stop_timeout)
                print(f"[{names}: stopped]", flush=True)
                save()
            done += [b for b in args.batches if all((b, m) in md5s for m in args.modes)]
        else:
            starts = []
            units: list[tuple[str, int]] = []
            for e in range(1, n_eng + 1):  # one after the other: an Engine sizes its pools from what is free
                slowest = max(starts[1:] or starts or [0.0])  # not the run's first: a cold machine compiles then
                need = len(args.modes) * 1.2 * slowest + args.min_timed_s
                if e > 1 and not fits(time.time(), deadline, need):
                    print(
                        f"[budget: engines per mode cut to {e - 1} of {n_eng} (set {e} needs ~{need:.0f} s)]",
                        flush=True,
                    )
                    not_started += [f"{m}-e{k}" for k in range(e, n_eng + 1) for m in args.modes]
                    break
                for mode in args.modes:
                    t0 = time.time()
                    start(mode, e)
                    starts.append(time.time() - t0)
                units += [(m, e) for m in args.modes]
            base_row = dict(model=model, date=date, commit=commit, options=opts, **meta)
            cap_batches([workers[u] for u in units])
            prev_batch = 0
            for b in (b for b in args.batches if b not in capped):
                scale = max(1.0, b / prev_batch) if prev_batch else 1.0
                per_round = sum(last.values())
                if not fits(time.time(), deadline, (args.warmups + 2) * scale * per_round):
                    skipped.append(b)
                    continue
                warm_and_freeze(units, b)
                order = balanced_order(units, args.reps)
                block = 2 * len(units)
                count = {}
                for i0 in range(0, len(order), block):
                    if not fits(time.time(), deadline, 1.25 * 2 * sum(last.values())):
                        partial.append(b)
                        break
                    for seq, unit in enumerate(order[i0 : i0 + block], start=i0 + 1):
                        timed(unit, b, seq, count)
                if count:
                    batch_done(b, count)
                prev_batch = b
                save()
                if partial:
                    break
            skipped += [x for x in args.batches if x not in done + skipped + partial + list(capped)]
    except EngineFailed as e:
        print(f"\nENGINE FAILED: {e}", flush=True)
        status = 2
    finally:
        save()  # before the workers stop: a worker busy in a profile may hold stop_all until the wall's SIGKILL
        t0 = time.time()
        stop_all(list(workers.values()), args.stop_timeout)
        print(f"[workers stopped in {time.time() - t0:.0f} s]", flush=True)
        summary = save()
    reports = {unit: plugin_report(w.report_dir) for unit, w in workers.items()}
    summary = summary if rows else []
    print(_report(args, model, summary, rows, md5s, reports, workers, done, skipped, partial, meta, commit))
    untimed = [m for m in args.modes if not any(r["mode"] == m for r in rows)]
    if status == 0 and untimed:
        why = "the budget" if (skipped or partial or not_started) else "no batch"
        why = "every batch over SGLang's running cap" if capped and set(capped) >= set(args.batches) else why
        print(f"\nFAILED: nothing timed for {', '.join(untimed)} ({why}): no verdict")
        status = 3
    problems = md5_problems(md5s)
    problems += [f"{n}: its prefix cache was not emptied before each generate (flush_cache)" for n in sorted(unflushed)]
    odd = [f"b{b} {m}" for (b, m), h in sorted(warm_md5.items()) if (b, m) in md5s and md5s[(b, m)] != {h}]
    if odd:
        print(f"note: warm-up output differs from the timed generates' in {', '.join(odd)}")
    other = [f"b{b} {m}" for (b, m), h in sorted(md5s.items()) if m not in EXACT_MODES and h != md5s.get((b, "stock"))]
    if other:
        print(f"note: output differs from stock's (not judged: not an exact mode) in {', '.join(other)}")
    ran = [b for b in args.batches if all((b, m) in md5s for m in args.modes)]
    judged = {u: rep for u, rep in reports.items() if u[0] in EXACT_MODES}
    if ran and judged:
        results = {
            (e, m): {"batches": {str(b): {"md5": ["-"]} for b in ran}, "report": rep} for (m, e), rep in judged.items()
        }
        problems += [p for p in check(results, ran) if "md5" not in p]  # md5 above (check() wants one per Engine)
        problems += radix_problems(judged, args.radix_cache)
    sick = [f"b{s['batch']} {s['mode']}: {s['health']}" for s in summary if s["health"] != "ok"]
    if summary:
        print(
            "\nHEALTH: "
            + (
                "ok (robust CV, switches, Engines agree, no gen-2 gc, gc frozen)"
                if not sick
                else "FAILED\n  " + "\n  ".join(sick)
            )
        )
    if problems:
        print("\nPROBLEMS:\n  " + "\n  ".join(problems))
        status = status or 1
    elif status == 0:
        print("\nEQUAL outputs in every exact mode and batch; plugin engaged as each mode says")
    # the run's own verdict on every row and in the runs file: --combine pools only runs that passed their checks
    run_info.update(status=status, problems=problems)
    for r in rows:
        r["run_status"] = status
    save(summary)  # the same rows: the summary made above, not made again
    if written and rows:
        hist_rows = [{"benchmark": SUMMARY_STEM, **r} for r in summary]
        append_history(Path(args.out) / "history.csv", hist_rows)
    if skipped or partial or not_started:
        print(
            f"PARTIAL: budget reached; batches cut short {partial}, not run {skipped}, Engines not started {not_started}"
        )
    if capped:
        print(f"PARTIAL: not timed over SGLang's running cap: {', '.join(f'b{b} ({w})' for b, w in capped.items())}")
    if args.noise_gate and status == 0:  # the run stands; the host is not one to spend a protocol on now
        loud = {b: need for (_, b), (_, need) in generate_noise(rows).items() if need > args.noise_gate}
        if loud:
            print(
                f"\nNOISY HOST (--noise-gate {args.noise_gate}): two runs would need "
                + ", ".join(f"{need:,} at batch {b}" for b, need in sorted(loud.items()))
                + " timed generates per mode to agree within 1 % at this run's noise: exit 5"
            )
            return 5
    return status


def _report(args, model, summary, rows, md5s, reports, workers, done, skipped, partial, meta, commit) -> str:
    shown = []
    for s in summary:
        s = dict(s)
        if s["verdict"] == "base":
            s["ratio [95 % over pairs]"] = "1"
        else:
            s["ratio [95 % over pairs]"] = (
                f"{s['ratio']} [{s['ci_lo']}, {s['ci_hi']}]" if s["ci_lo"] != "" else f"{s['ratio']} [-]"
            )
            s["over generates*"] = f"{s['gen_ratio']} [{s['gen_ci_lo']}, {s['gen_ci_hi']}]"
            if s.get("busy_ratio") not in ("", None):
                s["gpu busy ratio"] = (
                    f"{s['busy_ratio']} [{s['busy_ci_lo'] or '-'}, {s['busy_ci_hi'] or '-'}] {s['busy_verdict']}"
                )
        s["health"] = "ok" if s["health"] == "ok" else "FAIL"
        shown.append(s)
    cols = ["run", "batch", "mode", "n", "median_s", "engine_medians", "ratio [95 % over pairs]", "df", "verdict"]
    cols += ["flagged", "ratio_wo", "verdict_wo"]
    cols += ["pair_ratios", "cv_max", "engines_spread", "health", "over generates*", "gc_gen2"]
    cols += ["sched_wait_ms_med", "steal_ms_med", "sched_cpu_work_us_med", "energy_j_med"]
    if any(s.get("busy_ratio") not in ("", None) for s in summary):  # --gpu-busy: the host-independent measure
        cols += [f"{BUSY_COL}_med", "gpu busy ratio"]
    parts = [
        f"\n## {model}: wall per generate, Engines alive {design_words(args)} "
        f"(s; sglang {meta['sglang']}, {meta['gpu']}, commit {commit})",
        _table(shown, cols),
        "* over generates: conditional on these Engines, not a verdict",
        f"\nslow (> {SLOW_FACTOR}x the median of its batch and mode) per mode: "
        + ", ".join(f"{m} {s}/{n}" for m, (s, n) in slow_by_mode(rows).items()),
        "within Engines, " + slow_within_engines(rows),
        "the host: "
        + (
            "; ".join(
                f"{share:.0%} of {run}'s generates began with it slow (the scheduler's CPU's fixed loop > "
                f"{HOST_SLOW_X:g}x the run's fast time; what it meant for runs that agree: docs/benchmarks.md)"
                for (_, run), share in host_slow_share(rows).items()
            )
            or "no host probe read"
        ),
        noise_line(rows),
        "\nEngines: "
        + "; ".join(
            f"{w.name}: start {w.info.get('start_s')} s, pids {json.dumps(w.info.get('pids'))}, mem_fraction_static "
            f"{w.info.get('mem_fraction_static')}, KV tokens {w.info.get('max_total_num_tokens', '-')}, "
            f"running cap {w.info.get('running_cap', '-')}, "
            f"graphs {json.dumps(w.info.get('graphs'), sort_keys=True)}, OMP_NUM_THREADS {w.info.get('omp_threads')}"
            for w in workers.values()
        ),
        "plugin reports: "
        + "; ".join(f"{workers[u].name}: {json.dumps(r, sort_keys=True)}" for u, r in reports.items()),
        "output md5 per batch (stock): "
        + json.dumps({b: sorted(md5s.get((b, "stock"), set())) for b in sorted({b for b, _ in md5s})}),
        f"batches done {done}, cut short {partial}, not run {skipped}",
    ]
    return "\n".join(parts)


class _Parser(argparse.ArgumentParser):
    """Bad options in one line (no usage block): ``bench_live.py: error: ...``, exit 2."""

    def error(self, message: str):  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        sys.exit(2)


def _batches(text: str) -> list[int]:
    try:
        out = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"whole numbers separated by commas, got {text!r}") from None
    bad = [b for b in out if b < 1]
    if bad:
        raise argparse.ArgumentTypeError(f"every batch must be >= 1, got {text!r}")
    twice = sorted({b for b in out if out.count(b) > 1})
    if twice:
        raise argparse.ArgumentTypeError(f"{', '.join(map(str, twice))} given twice in {text!r}")
    return out


def _writable_folder(path: Path, what: str) -> None:
    """``path`` is a folder or can become one: its nearest existing ancestor is a writable folder."""
    p = Path(path).absolute()
    for anc in (p, *p.parents):
        if anc.exists():
            if not anc.is_dir():
                raise Refused(f"{what} {path}: {anc} is a file, not a folder")
            if not os.access(anc, os.W_OK | os.X_OK):
                raise Refused(f"{what} {path}: {anc} is not writable")
            return


def _inside(path: Path, folder: Path) -> bool:
    p, f = Path(path).resolve(), Path(folder).resolve()
    return p == f or f in p.parents


def _check(args, p: argparse.ArgumentParser) -> None:
    """Every option that would fail later (or time nothing) refused now, in one line, before anything is written."""
    bad = [m for m in args.modes if m not in MODES]
    if bad or "stock" not in args.modes or len(set(args.modes)) != len(args.modes):
        p.error(f"--modes: distinct, from {', '.join(MODES)}, stock included (got {args.modes})")
    if args.reps < 2 or args.reps % 2:
        p.error(f"--reps must be even and >= 2 (palindromes; got {args.reps})")
    if args.warmups < 0:
        p.error(f"--warmups must be >= 0 (got {args.warmups})")
    if args.engines_per_mode < 1:
        p.error(f"--engines-per-mode must be >= 1 (got {args.engines_per_mode})")
    if args.gpu_busy < 0:
        p.error(f"--gpu-busy must be >= 0 profiled generates (got {args.gpu_busy})")
    if args.gpu_busy_engines < 0 or (args.gpu_busy_engines and not args.gpu_busy):
        p.error(f"--gpu-busy-engines must be >= 0 and wants --gpu-busy (got {args.gpu_busy_engines})")
    if args.pairs_alive and not args.sequential:
        p.error("--pairs-alive is a sequential design (each set of modes alive together): not with --alive-at-once")
    if args.gpu_busy and not args.sequential:
        p.error("--gpu-busy is for --sequential runs: with Engines alive at once a profile would see the others' work")
    if args.omp_threads is not None and args.omp_threads < 1:
        p.error(f"--omp-threads must be >= 1 (got {args.omp_threads})")
    if args.bootstrap < 1:
        p.error(f"--bootstrap must be >= 1 resample (got {args.bootstrap})")
    if args.max_new_tokens < 1:
        p.error(f"--max-new-tokens must be >= 1 (got {args.max_new_tokens})")
    for name in ("budget_s", "stop_reserve_s", "min_timed_s", "stop_timeout", "engine_timeout", "generate_timeout"):
        v, flag = getattr(args, name), "--" + name.replace("_", "-")
        if not math.isfinite(v) or v < 0 or (v == 0 and name.endswith("timeout")):
            p.error(
                f"{flag} must be a finite number of seconds, {'> 0' if name.endswith('timeout') else '>= 0'} (got {v:g})"
            )
    if args.budget_s < 0 or (args.budget_s and args.budget_s <= args.stop_reserve_s):
        p.error(
            f"--budget-s {args.budget_s:g} leaves nothing to time after --stop-reserve-s {args.stop_reserve_s:g} "
            "(0: no budget)"
        )
    plain = [a for a in args.engine_arg if "=" not in a or not a.partition("=")[0].strip()]
    if plain:
        p.error(f"--engine-arg expects KEY=VALUE, got {plain[0]!r}")
    if args.noise_gate < 0:
        p.error(f"--noise-gate must be 0 (none) or a number of generates >= 1 (got {args.noise_gate})")
    if args.static_gb is not None and not (math.isfinite(args.static_gb) and args.static_gb > 0):
        p.error(f"--static-gb must be a finite number of GiB > 0 (got {args.static_gb:g})")
    frac = args.mem_fraction_static
    if frac is not None and not (0 < frac < 1):
        p.error(f"--mem-fraction-static must lie between 0 and 1 (got {frac:g})")
    cut = [a for a in args.engine_arg if a.partition("=")[0].strip().replace("-", "_").startswith("cuda_graph_bs")]
    if cut:
        p.error(f"--engine-arg {cut[0]}: the protocol keeps SGLang's own CUDA-graph list (a cut list changes the wall)")
    if args.fake_text is not None and not args.dry_run:
        p.error("--fake is for --dry-run only")
    try:
        args.fake = json.loads(args.fake_text or "{}")
    except ValueError as e:
        p.error(f"--fake: not JSON ({e})")
    if not isinstance(args.fake, dict):
        p.error(f"--fake: a JSON object {{...}}, got {type(args.fake).__name__}")
    try:
        _writable_folder(args.out, "--out")
        _writable_folder(args.work_root, "--work")
    except Refused as e:
        p.error(str(e))
    if args.dry_run and _inside(args.out, RESULTS):
        p.error(f"--dry-run never writes the tracked results: --out {args.out} is inside {RESULTS}")


def main(argv: list[str] | None = None) -> int:
    # no abbreviations: the device runner reads the options by their full names (audit 2026-12-05c M10: ``--alive``
    # meant --alive-at-once to bench_live, and nothing to the runner, which then kept --gpu-busy)
    p = _Parser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter, allow_abbrev=False)
    p.add_argument("--serve", nargs=2, help=argparse.SUPPRESS)
    p.add_argument("--model-dir", type=Path, help="a checkpoint (built with --preset when missing)")
    p.add_argument("--preset", default="qwen3.5-0.8b", help="random-weight preset (sglang_mamba_dedup.e2e)")
    p.add_argument("--batches", default=[1, 16, 64, 128], type=_batches, help="in this order (default 1,16,64,128)")
    p.add_argument(
        "--modes",
        default="stock,zero-copy",
        type=lambda s: s.split(","),
        help=f"from {', '.join(MODES)}; stock included; the start order of the Engines of each set (default "
        "stock,zero-copy; zero-copy,stock reverses it)",
    )
    p.add_argument("--reps", type=int, default=16, help="timed generates per Engine and batch (even: palindromes)")
    p.add_argument("--warmups", type=int, default=3, help="generates per Engine and batch before gc is frozen")
    p.add_argument("--engines-per-mode", type=int, default=3, help="Engines (workers) per mode; pairs by number")
    p.add_argument(
        "--gpu-busy",
        type=int,
        default=0,
        metavar="N",
        help="per Engine and batch, N profiled generates after the timed ones: the GPU's busy time, analysed beside "
        "the wall (--sequential only; default 0: none)",
    )
    p.add_argument(
        "--noise-gate",
        type=int,
        default=0,
        metavar="N",
        help="exit 5 after a clean run when two runs would need more than N timed generates per mode at some batch "
        "to agree within 1 %% at this run's own noise (the report's line 'the generates' noise'); the device "
        "runner's LIVE_NOISE_GATE for its prime. 0 (default): no gate",
    )
    p.add_argument(
        "--gpu-busy-engines",
        type=int,
        default=0,
        metavar="K",
        help="with --gpu-busy: profile only the first K Engines of each mode (default 0: every Engine); the GPU's "
        "busy time agreed within 0.2 %% across Engines and runs (12-05/12-06 H100), a profile costs ~18 s per Engine",
    )
    p.add_argument(
        "--sequential",
        action="store_true",
        default=True,
        help="the default: one Engine alive at a time (s1 z1 z2 s2 s3 z3), each through every batch",
    )
    p.add_argument(
        "--alive-at-once",
        dest="sequential",
        action="store_false",
        help="every Engine alive at once, timed in palindromes (s1 z1 s2 z2 z2 s2 z1 s1 ...)",
    )
    p.add_argument(
        "--pairs-alive",
        action="store_true",
        help="sequential, but each set of modes alive together ([s1 z1] [z2 s2] [s3 z3]), its generates in "
        "palindromes (s1 z1 z1 s1 ...): a spell of the host's slows both modes of a pair alike",
    )
    p.add_argument(
        "--sleep-on-idle",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="idle schedulers sleep on their sockets (SGLang's sleep_on_idle; its default busy-polls a core); "
        "default: on with --alive-at-once, off when sequential",
    )
    p.add_argument(
        "--gc-off",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the workers' gc disabled during timed generates (every process's gc is frozen after the warm-ups)",
    )
    p.add_argument(
        "--omp-threads",
        type=int,
        help="OMP_NUM_THREADS / MKL_NUM_THREADS in each worker's environment, torch.set_num_threads in it",
    )
    p.add_argument(
        "--min-timed-s",
        type=float,
        default=60,
        help="kept of the budget for timed generates: a further set of Engines starts only when it fits before",
    )
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--seed", type=int, default=0, help="prompts and bootstrap")
    p.add_argument("--bootstrap", type=int, default=2000, help="resamples of the descriptive intervals")
    p.add_argument(
        "--static-gb",
        type=float,
        help="each Engine's static memory (GiB): its fraction of what is free when it starts (default 24, 16 with "
        "more than one Engine per mode alive at once, 48 with --radix-cache one Engine at a time, 32 with "
        "--radix-cache --pairs-alive); an Engine that admits fewer "
        "running requests than the largest batch is a problem (exit 1)",
    )
    p.add_argument("--mem-fraction-static", type=float, help="a fixed fraction instead of --static-gb")
    p.add_argument(
        "--radix-cache",
        action="store_true",
        help="radix cache on in every mode; every zero-copy commit must have had a track set (the plugin's radix "
        "opt-out unset in every Engine)",
    )
    p.add_argument("--engine-arg", action="append", default=[], help="KEY=VALUE for sglang.Engine (repeatable)")
    p.add_argument("--budget-s", type=float, default=0, help="the run's wall budget (0: none)")
    p.add_argument("--stop-reserve-s", type=float, default=30, help="kept of --budget-s for stopping the Engines")
    p.add_argument("--stop-timeout", type=float, default=20, help="wait for the workers to stop, then kill")
    p.add_argument("--engine-timeout", type=float, default=400)
    p.add_argument("--generate-timeout", type=float, default=180)
    p.add_argument("--run", help="this run's name in the files (default: its start, UTC)")
    p.add_argument("--work", type=Path, help="logs and reports (default $CYCLE_WORK or /tmp/bench-live, per model)")
    p.add_argument(
        "--out",
        type=Path,
        help="results (default $OUT, else the tree's benchmarks/results; --dry-run: <work>/dry-run-out)",
    )
    p.add_argument("--dry-run", action="store_true", help="fake Engines on the CPU: the driver, files and checks")
    p.add_argument(
        "--fake",
        dest="fake_text",
        help="--dry-run: JSON {delay_s, jitter, factor: {mode: x}, engine_factor: {'mode:engine': x}, start_s, "
        "compile_s, compile_dir, break: mode, fail: mode}",
    )
    p.add_argument("--merge", nargs="+", type=Path, help="merge these device outputs ($OUT copies) into --out")
    p.add_argument(
        "--combine",
        nargs="+",
        type=Path,
        help="the verdict over the Engine pairs of these runs' cycle_generates CSVs (e.g. run A's and run B's)",
    )
    p.add_argument(
        "--runs", type=lambda t: t.split(","), help="--combine: only these runs (names as in the files' run column)"
    )
    args = p.parse_args(argv)
    if args.serve:
        return serve(args.serve[0], int(args.serve[1]))
    handled = (signal.SIGTERM, signal.SIGINT)
    old = {sig: signal.signal(sig, _terminate) for sig in handled}
    try:
        return _main(args, p)
    except SystemExit as e:
        if e.code in {128 + int(sig) for sig in handled}:
            name = signal.Signals(int(e.code) - 128).name
            print(
                f"{p.prog}: interrupted ({name}): workers stopped, the files written so far kept in {args.out}",
                file=sys.stderr,
                flush=True,
            )
        raise
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)


def _main(args, p: argparse.ArgumentParser) -> int:
    args.work_root = args.work or Path(os.environ.get("CYCLE_WORK", "/tmp/bench-live"))
    if args.out is None:
        env_out = os.environ.get("OUT")
        args.out = Path(env_out) if env_out else (args.work_root / "dry-run-out" if args.dry_run else RESULTS)
    if args.merge or args.combine:
        try:
            _writable_folder(args.out, "--out")
            if args.merge:
                for path in merge_outputs(args.merge, args.out):
                    print(f"merged: {path}")
                return 0
            missing = [str(x) for x in args.combine if not Path(x).is_file()]
            if missing:
                raise Refused(f"--combine: no such file {', '.join(missing)}")
            table, path = combine_files(args.combine, args.out, args.runs)
        except Refused as e:
            print(f"{p.prog}: error: {e}", file=sys.stderr)
            return 2
        if not table:
            print(
                f"{p.prog}: error: --combine: no Engine pairs (no mode with a stock partner) in these files",
                file=sys.stderr,
            )
            return 3
        print(combined_table(table))
        for line in runs_apart_notes(table):
            print(line)
        print(f"[files: {path}]")
        return 0
    _check(args, p)
    if args.sleep_on_idle is None:
        args.sleep_on_idle = not args.sequential
    if args.static_gb is None:  # with the radix cache on a request holds ~5 mamba slots: batch 128 needs ~46 GiB
        # --pairs-alive: two Engines alive, 32 each fits an H100 (Qwen3.5 at batch 128 wants 48: an H200)
        if args.radix_cache and args.sequential:
            args.static_gb = 32.0 if args.pairs_alive else 48.0
        else:
            args.static_gb = 24.0 if args.engines_per_mode == 1 or args.pairs_alive else 16.0
    if args.run is None:
        args.run = _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    if args.radix_cache and "zero-copy" in args.modes:
        print(
            f"note: --radix-cache: zero-copy serves with the radix cache on ({RADIX_OPT_OUT} unset in its Engines); "
            "every zero-copy commit must have a track set"
        )
    if args.radix_cache:
        print(
            "note: --radix-cache: every generate starts from an empty prefix cache (Engine.flush_cache before it, "
            "outside the timed window): the same work each time (a fresh prompt's prefill, then its decode with "
            "track rows written), so one output per batch and mode"
        )
    static_gb = None if args.dry_run or args.mem_fraction_static is not None else args.static_gb
    if args.dry_run:
        model, layers, vocab, kw = args.preset, 0, 1000, {}
        fake = args.fake
    else:
        checkout_on_path()
        model_dir = args.model_dir or Path(f"/tmp/smd-model-{args.preset}")
        if not (model_dir / "config.json").exists():
            from sglang_mamba_dedup.e2e.random_model import build_random_model

            build_random_model(model_dir, preset=args.preset)
        layers, vocab = model_facts(model_dir)
        model = args.preset if args.model_dir is None else model_dir.name
        fake = None
        if args.mem_fraction_static is None:
            args.mem_fraction_static = 0.25  # replaced in each worker by its share for --static-gb
        kw = engine_kwargs(args, str(model_dir))
        kw["disable_radix_cache"] = not args.radix_cache
        if args.sleep_on_idle:
            kw["sleep_on_idle"] = True
    spec = {
        "engine_kwargs": kw,
        "max_new_tokens": args.max_new_tokens,
        "vocab": vocab,
        "seed": args.seed,
        "gc_off": args.gc_off,
        "static_gb": static_gb,
        "fake": fake,
        "radix_cache": args.radix_cache,
        "linear_layers": layers,
    }
    options = {
        "batches": args.batches,
        "modes": args.modes,
        "reps": args.reps,
        "warmups": args.warmups,
        "engines_per_mode": args.engines_per_mode,
        "gpu_busy": args.gpu_busy,
        "gpu_busy_engines": args.gpu_busy_engines,
        "sequential": args.sequential,
        "pairs_alive": args.pairs_alive,
        "omp_threads": args.omp_threads,
        "max_new_tokens": args.max_new_tokens,
        "radix_cache": args.radix_cache,
        "gc_off": args.gc_off,
        "freeze_gc": True,
        "sleep_on_idle": args.sleep_on_idle,
        "static_gb": static_gb,
        "mem_fraction_static": None if static_gb else args.mem_fraction_static,
        "engine_args": args.engine_arg,
        "arm_engine_args": {m: ARM_ENGINE_KWARGS[m] for m in args.modes if m in ARM_ENGINE_KWARGS},
        "seed": args.seed,
        "dry_run": args.dry_run,
    }
    work = args.work_root / model
    work.mkdir(parents=True, exist_ok=True)
    print(
        f"model {model} ({layers} linear layers); modes {args.modes}, {args.engines_per_mode} Engine(s) each, "
        f"alive {design_words(args)}; batches {args.batches}; {args.warmups} "
        f"warm-ups and {args.reps} timed generates of {args.max_new_tokens} tokens per Engine and batch; out {args.out}; "
        f"options {json.dumps(options, sort_keys=True)}; engine {json.dumps(kw, sort_keys=True)}",
        flush=True,
    )
    return run(args, model, spec, work, options)


if __name__ == "__main__":
    sys.exit(main())
