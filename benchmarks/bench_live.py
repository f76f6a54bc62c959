"""The decode cycle's wall time with the modes alive at the same time: stock SGLang, the plugin's default commit and the
zero-copy commit, one ``sglang.Engine`` per mode, all started before the first timed generate, the timed generates
alternating between the modes in a balanced order. Drift of the machine (clocks, thermals, neighbours) hits every mode
alike; the ratio to stock comes with a bootstrap interval, and an interval through 1 is "no difference". Needs a CUDA
GPU and SGLang (the stand-ins of tools/gpu-engine on the lent H200: ``tools/gpu-engine/run_cycle_live.sh``);
``--dry-run`` runs the whole driver on the CPU with fake Engines (tests/e2e/test_bench_live.py).

Method (docs/benchmarks.md, "The decode cycle, modes alive at once"):

* ``--engines-per-mode N`` long-lived worker processes per mode (default 1), each owning one Engine (SGLang keeps one published config per process and an
  Engine's ``shutdown`` kills every child of its process, so three Engines cannot share one); the driver starts them
  one after the other (an Engine sizes its pools from the memory free when it starts: ``--static-gb`` gives every
  Engine the same static budget in bytes; default 24 GiB, 16 with N > 1), the plugin's variables in each worker's
  environment; a further set of Engines (one per mode) starts only when it and ``--min-timed-s`` fit the budget;
  ``--omp-threads K`` (OMP_NUM_THREADS / MKL_NUM_THREADS / torch threads of each worker) and ``--pin`` (each worker
  and its Engine's processes on their own equal share of the cores, ``os.sched_setaffinity`` before the Engine
  starts) control the host state; ``--sleep-on-idle`` lets idle schedulers sleep;
* per batch size (in the order given): one warm-up generate per mode, then ``--reps`` timed generates per mode in
  palindromes over every (mode, Engine) (A1 B1 C1 A2 B2 C2 C2 B2 A2 C1 B1 A1 ...); the same prompts (random token ids, seeded) in every mode; greedy,
  ``ignore_eos``, a fixed output length; the wall of a generate is ``time.perf_counter`` around ``Engine.generate``
  inside its worker;
* per generate also: the worker's gc collections (per generation) and time in gc during it, its RSS;
  a generate is "slow" when it took more than 1.3x the median of its (batch, mode);
* every mode's output ids must equal stock's at every batch (md5 printed; a mismatch exits 1), and the plugin's
  scheduler reports must show it engaged (zero-copy: every commit served zero-copy);
* ``--budget-s``: no palindrome is started that would end after the budget (less ``--stop-reserve-s`` for stopping
  the Engines); the files are rewritten after every batch, so a run cut short leaves clean files.

Results (rewritten, never appended; rows of other models kept from the tree's copy):
``<out>/latest/cycle_generates-<gpu>.csv`` (one row per model, batch, mode, engine, generate) and
``<out>/latest/cycle_live-<gpu>.csv`` (per model, batch, mode: median, min-max, the ratio to stock with its 95 %
bootstrap interval over generates, the ratio per Engine pair and a hierarchical interval over Engines, the verdict
(from the Engine-level interval when N > 1), slow generates); the summary rows appended once to ``<out>/history.csv``.
``--merge DIR ...`` merges the files of device calls (their ``$OUT`` copies) into ``--out``.
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
import random
import shutil
import signal
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Iterable, Mapping, Sequence
from multiprocessing import Pipe
from multiprocessing.connection import Connection
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _timing, bench_cycle, also under python -P
from _timing import RESULTS, append_history, checkout_on_path, git_commit, slug, write_csv  # noqa: E402
from bench_cycle import MODES, check, engine_kwargs, model_facts, plugin_report, prompts_for  # noqa: E402

GEN_STEM, SUMMARY_STEM = "cycle_generates", "cycle_live"
GEN_KEY = ("model", "batch", "mode", "engine", "generate")
SUMMARY_KEY = ("model", "batch", "mode")
META_FIELDS = ["date", "commit", "sglang", "gpu", "options"]
GEN_FIELDS = [
    *GEN_KEY,
    "seq",
    "wall_s",
    "rtt_s",
    "slow",
    "gc_gen0",
    "gc_gen1",
    "gc_gen2",
    "gc_ms",
    "rss_mb",
    "tokens",
    "accept_length",
    "md5",
    *META_FIELDS,
]
SUMMARY_FIELDS = [
    *SUMMARY_KEY,
    "n",
    "reps_asked",
    "median_s",
    "min_s",
    "max_s",
    "ratio",
    "ci_lo",
    "ci_hi",
    "engines",
    "ratio_per_engine",
    "eng_ci_lo",
    "eng_ci_hi",
    "verdict",
    "slow",
    "slow_with_gc2",
    "gc_gen0",
    "gc_gen1",
    "gc_gen2",
    "gc_ms",
    "rss_mb_max",
    "md5",
    *META_FIELDS,
]
SLOW_FACTOR = 1.3
NO_DIFFERENCE = "no difference"


# ---------------------------------------------------------------- pure parts (tests/e2e/test_bench_live.py)


def balanced_order(modes: Sequence[str], reps: int) -> list[str]:
    """The timed generates of one batch: ``reps`` per mode, blocks alternately forward and reversed
    (A B C C B A A B C C B A ...): every mode takes every position equally often, its mean position is the same."""
    if reps < 2 or reps % 2:
        raise ValueError(f"reps must be even and >= 2 (palindromes), got {reps}")
    out: list[str] = []
    for k in range(reps):
        out += list(modes) if k % 2 == 0 else list(reversed(modes))
    return out


def bootstrap_ratio(
    xs: Sequence[float], base: Sequence[float], *, resamples: int = 2000, seed: int = 0, level: float = 0.95
) -> tuple[float, float, float]:
    """``(median(xs) / median(base), lo, hi)``: the percentile interval of the ratio of medians over ``resamples``
    resamples (with replacement, each sample separately, a fixed seed)."""
    if not xs or not base:
        raise ValueError("bootstrap_ratio needs samples on both sides")
    rng = random.Random(seed)
    med = statistics.median
    rs = sorted(med(rng.choices(xs, k=len(xs))) / med(rng.choices(base, k=len(base))) for _ in range(resamples))
    alpha = (1.0 - level) / 2.0
    lo = rs[max(0, int(math.floor(alpha * resamples)))]
    hi = rs[min(resamples - 1, int(math.ceil((1.0 - alpha) * resamples)) - 1)]
    return med(xs) / med(base), lo, hi


def hier_bootstrap_ratio(
    xs: Sequence[Sequence[float]],
    base: Sequence[Sequence[float]],
    *,
    resamples: int = 2000,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[float, float, float]:
    """The ratio of pooled medians with a **hierarchical** percentile interval: ``xs`` and ``base`` are the generates
    of each Engine of a mode; a resample draws Engines with replacement (as many as the mode has), then generates
    within each drawn Engine (as many as it has), pools them, takes the median. The spread between Engines of one mode
    (each sits in its own host state for many generates) enters the interval, not only the spread between generates."""
    xs = [list(e) for e in xs if e]
    base = [list(e) for e in base if e]
    if not xs or not base:
        raise ValueError("hier_bootstrap_ratio needs samples on both sides")
    rng = random.Random(seed)
    med = statistics.median

    def draw(engines: list[list[float]]) -> float:
        pool: list[float] = []
        for e in rng.choices(engines, k=len(engines)):
            pool += rng.choices(e, k=len(e))
        return med(pool)

    rs = sorted(draw(xs) / draw(base) for _ in range(resamples))
    alpha = (1.0 - level) / 2.0
    lo = rs[max(0, int(math.floor(alpha * resamples)))]
    hi = rs[min(resamples - 1, int(math.ceil((1.0 - alpha) * resamples)) - 1)]
    return med([x for e in xs for x in e]) / med([x for e in base for x in e]), lo, hi


def core_sets(cores: Iterable[int], n: int) -> list[list[int]]:
    """``n`` disjoint, equally large CPU sets from ``cores`` (sorted; a remainder stays unassigned)."""
    cores = sorted(cores)
    k = len(cores) // n if n > 0 else 0
    if k < 1:
        raise ValueError(f"--pin: {len(cores)} cores cannot give {n} workers one each")
    return [cores[i * k : (i + 1) * k] for i in range(n)]


def classify(lo: float, hi: float) -> str:
    """A wall-time ratio's interval -> ``faster`` (all below 1), ``slower`` (all above 1), else ``no difference``."""
    if hi < 1.0:
        return "faster"
    if lo > 1.0:
        return "slower"
    return NO_DIFFERENCE


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


def merge_rows(old: Iterable[Mapping], new: Sequence[Mapping], models: Iterable[str], key: Sequence[str]) -> list[dict]:
    """``old`` without the rows of ``models`` (those are replaced), a repeated key of ``old`` kept once, then ``new``;
    a key twice in the result is an error (nothing is written)."""
    drop = {str(m) for m in models}
    kept: list[dict] = []
    seen: set[tuple] = set()
    for r in old:
        if str(r.get("model")) in drop:
            continue
        k = tuple(str(r.get(c, "")) for c in key)
        if k in seen:
            continue
        seen.add(k)
        kept.append(dict(r))
    out = kept + [dict(r) for r in new]
    assert_unique(out, key)
    return out


def mark_slow(rows: list[dict]) -> None:
    """Set ``slow`` (0/1) on every generate row from its (model, batch, mode) median."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["model"], int(r["batch"]), r["mode"]), []).append(r)
    for group in groups.values():
        for r, s in zip(group, slow_flags([float(g["wall_s"]) for g in group])):
            r["slow"] = int(s)


def summarize(
    rows: Sequence[Mapping], *, base: str = "stock", resamples: int = 2000, seed: int = 0, reps_asked: int = 0
) -> list[dict]:
    """Per (model, batch, mode): median, min-max, the ratio of medians to ``base`` with its bootstrap interval over
    generates (pooled over Engines), the ratio per Engine pair (Engine e of the mode / Engine e of ``base``) and the
    hierarchical interval over Engines (:func:`hier_bootstrap_ratio`), the verdict (from the Engine-level interval when
    a mode has more than one Engine), slow generates (and how many of them saw a gen-2 collection), gc, RSS."""
    groups: dict[tuple, list[Mapping]] = {}
    for r in rows:
        groups.setdefault((r["model"], int(r["batch"]), r["mode"]), []).append(r)
    out = []
    for (model, batch, mode), group in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        walls = [float(r["wall_s"]) for r in group]
        slow = [w > SLOW_FACTOR * statistics.median(walls) for w in walls]
        ref = [float(r["wall_s"]) for r in groups.get((model, batch, base), [])]
        by_eng = _by_engine(group)
        ref_by_eng = _by_engine(groups.get((model, batch, base), []))
        s: dict = {
            "model": model,
            "batch": batch,
            "mode": mode,
            "n": len(walls),
            "engines": len(by_eng),
            "reps_asked": reps_asked or "",
            "median_s": round(statistics.median(walls), 5),
            "min_s": round(min(walls), 5),
            "max_s": round(max(walls), 5),
            "slow": sum(slow),
            "slow_with_gc2": sum(1 for r, f in zip(group, slow) if f and int(r.get("gc_gen2") or 0)),
            "rss_mb_max": round(max(float(r.get("rss_mb") or 0) for r in group), 1),
            "md5": ";".join(sorted({str(r.get("md5", "")) for r in group})),
        }
        for g in ("gc_gen0", "gc_gen1", "gc_gen2"):
            s[g] = sum(int(r.get(g) or 0) for r in group)
        s["gc_ms"] = round(sum(float(r.get("gc_ms") or 0) for r in group), 2)
        s.update(ratio_per_engine="", eng_ci_lo="", eng_ci_hi="")
        if mode == base:
            s.update(ratio=1.0, ci_lo="", ci_hi="", verdict="base")
        elif ref:
            ratio, lo, hi = bootstrap_ratio(walls, ref, resamples=resamples, seed=seed)
            s.update(ratio=round(ratio, 4), ci_lo=round(lo, 4), ci_hi=round(hi, 4), verdict=classify(lo, hi))
            pairs = [e for e in by_eng if e in ref_by_eng]
            s["ratio_per_engine"] = ";".join(
                f"{e}:{statistics.median(by_eng[e]) / statistics.median(ref_by_eng[e]):.4f}" for e in pairs
            )
            if len(by_eng) > 1 or len(ref_by_eng) > 1:
                _, elo, ehi = hier_bootstrap_ratio(
                    list(by_eng.values()), list(ref_by_eng.values()), resamples=resamples, seed=seed
                )
                s.update(eng_ci_lo=round(elo, 4), eng_ci_hi=round(ehi, 4), verdict=classify(elo, ehi))
        else:
            s.update(ratio="", ci_lo="", ci_hi="", verdict="no base")
        for k in META_FIELDS:
            s[k] = group[0].get(k, "")
        out.append(s)
    return out


def _by_engine(group: Iterable[Mapping]) -> dict[str, list[float]]:
    """engine -> its walls (in engine order)."""
    out: dict[str, list[float]] = {}
    for r in group:
        out.setdefault(str(r.get("engine", 1) or 1), []).append(float(r["wall_s"]))
    return dict(sorted(out.items(), key=lambda kv: (len(kv[0]), kv[0])))


def slow_by_mode(rows: Sequence[Mapping]) -> dict[str, tuple[int, int]]:
    """mode -> (slow generates, generates), over every batch."""
    out: dict[str, tuple[int, int]] = {}
    for r in rows:
        s, n = out.get(r["mode"], (0, 0))
        out[r["mode"]] = (s + int(r.get("slow") or 0), n + 1)
    return out


def md5_problems(md5s: Mapping[tuple[int, str], set[str]], base: str = "stock") -> list[str]:
    """Every (batch, mode) must have produced one output (over its timed generates), equal to ``base``'s."""
    problems = []
    for (batch, mode), seen in sorted(md5s.items()):
        ref = md5s.get((batch, base), set())
        if len(seen) != 1 or len(ref) != 1 or seen != ref:
            problems.append(f"batch {batch}: {mode} md5 {sorted(seen)} vs {base} {sorted(ref)}")
    return problems


def fits(now: float, deadline: float, estimate_s: float) -> bool:
    return now + estimate_s <= deadline


def _table(rows: Sequence[Mapping], cols: Sequence[str]) -> str:
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r.get(c, "")) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


# ---------------------------------------------------------------- files


def read_csv(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def write_results(
    out: Path, gpu: str, models: Iterable[str], gens: Sequence[Mapping], summary: Sequence[Mapping]
) -> tuple[Path, Path]:
    """Both latest CSVs, the rows of ``models`` replaced (other models kept from the file at ``out``, or else from the
    tree's copy); a duplicated key anywhere raises before anything is written."""
    models = list(models)
    paths = []
    merged = []
    for stem, rows, key, fields in (
        (GEN_STEM, gens, GEN_KEY, GEN_FIELDS),
        (SUMMARY_STEM, summary, SUMMARY_KEY, SUMMARY_FIELDS),
    ):
        path = Path(out) / "latest" / f"{stem}-{slug(gpu)}.csv"
        tree = RESULTS / "latest" / path.name
        old = read_csv(path) if path.exists() else read_csv(tree)
        merged.append((path, merge_rows(old, rows, models, key), fields))
    for path, rows, fields in merged:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_csv(path, rows, fields)
        paths.append(path)
    return paths[0], paths[1]


def merge_outputs(sources: Sequence[Path], out: Path) -> list[Path]:
    """The latest CSVs of device calls (each source a copy of one ``$OUT``) into ``out``: a model's rows from the last
    source that has it; history rows of the benchmark not in ``out``'s history appended."""
    written = []
    for stem, key, fields in ((GEN_STEM, GEN_KEY, GEN_FIELDS), (SUMMARY_STEM, SUMMARY_KEY, SUMMARY_FIELDS)):
        for src in sources:
            for path in sorted((Path(src) / "latest").glob(f"{stem}-*.csv")):
                rows = read_csv(path)
                assert_unique(rows, key, str(path))
                dest = Path(out) / "latest" / path.name
                merged = merge_rows(read_csv(dest), rows, {r["model"] for r in rows}, key)
                dest.parent.mkdir(parents=True, exist_ok=True)
                write_csv(dest, merged, fields)
                written.append(dest)
    hist = Path(out) / "history.csv"
    have = {tuple(sorted(r.items())) for r in read_csv(hist)}
    for src in sources:
        new = [r for r in read_csv(Path(src) / "history.csv") if r.get("benchmark") == SUMMARY_STEM]
        new = [r for r in new if tuple(sorted(r.items())) not in have]
        if new:
            append_history(hist, new)
            have |= {tuple(sorted(r.items())) for r in new}
            written.append(hist)
    return sorted(set(written))


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
    generate (``engine_factor``: one Engine of a mode in a slow "host state"), output ids from the prompts (one mode can
    be told to answer differently: ``break``); writes a plugin report like the scheduler's."""

    def __init__(self, spec: Mapping) -> None:
        fake = spec["fake"]
        self.mode = spec["mode"]
        self.delay = float(fake.get("delay_s", 0.002)) * float(fake.get("factor", {}).get(self.mode, 1.0))
        self.delay *= float(fake.get("engine_factor", {}).get(f"{self.mode}:{spec.get('engine', 1)}", 1.0))
        self.broken = fake.get("break") == self.mode
        self.commits = 0
        if fake.get("fail") == self.mode:
            raise RuntimeError(f"fake Engine of {self.mode} told to fail at start")
        time.sleep(float(fake.get("start_s", 0)))  # an Engine's start, for the budget of further Engine sets

    def generate(self, input_ids, sampling_params):
        n = int(sampling_params["max_new_tokens"])
        time.sleep(self.delay * (1 + len(input_ids) / 64))
        self.commits += n // 2
        outs = []
        for p in input_ids:
            h = (sum(p) + (1 if self.broken else 0)) % 997
            outs.append({"output_ids": [(h + i) % 1000 for i in range(n)], "meta_info": {"spec_verify_ct": n // 2}})
        self._report()
        return outs

    def _report(self) -> None:
        folder = os.environ.get("SGLANG_MAMBA_DEDUP_REPORT_DIR")
        if not folder:
            return
        on = os.environ.get("SGLANG_MAMBA_DEDUP") == "1"
        zc = on and os.environ.get("SGLANG_MAMBA_DEDUP_ZERO_COPY") == "1"
        ev = {"commit_calls": self.commits, "ours_commit_calls": self.commits if on else 0}
        if zc:
            ev.update(zero_copy="on", zc_commit_calls=self.commits)
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / f"status-{os.getpid()}-fake.json").write_text(json.dumps({"events": ev}))

    def shutdown(self) -> None:
        pass


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


def _make_engine(spec: Mapping):
    """The mode's Engine and what to say about it (pid, GPU, versions, memory, start time)."""
    from importlib import metadata

    info: dict = {"pid": os.getpid(), "mode": spec["mode"], "engine": spec.get("engine", 1)}
    info.update(cpus=_span(sorted(os.sched_getaffinity(0))), omp_threads=os.environ.get("OMP_NUM_THREADS"))
    if spec.get("fake") is not None:
        info.update(gpu="cpu", sglang="-", start_s=0.0)
        return FakeEngine(spec), info
    kw = dict(spec["engine_kwargs"])
    if spec.get("omp_threads"):  # this process's intra-op pool too (its children read OMP_NUM_THREADS)
        import torch

        torch.set_num_threads(int(spec["omp_threads"]))
    info["sglang"] = metadata.version("sglang")
    gpu = gpu_query()
    if gpu is None:  # no nvidia-smi: ask torch (a CUDA context in this process)
        import torch

        free, total = torch.cuda.mem_get_info()
        gpu = (torch.cuda.get_device_name(), free / 2**30, total / 2**30)
    info.update(gpu=gpu[0], free_gib=round(gpu[1], 2), total_gib=round(gpu[2], 2))
    if spec.get("static_gb"):  # the same static budget in bytes for every Engine, whatever the others hold
        kw["mem_fraction_static"] = round(min(0.9, max(0.05, float(spec["static_gb"]) / gpu[1])), 4)
    info["mem_fraction_static"] = kw.get("mem_fraction_static")
    import sglang

    t0 = time.time()
    engine = sglang.Engine(**kw)
    info["start_s"] = round(time.time() - t0, 1)
    try:
        sinfo = engine._scheduler_init_result.scheduler_infos[0]
        info["max_total_num_tokens"] = sinfo.get("max_total_num_tokens")
    except Exception:  # noqa: BLE001 - informational only
        pass
    return engine, info


def _span(cores: Sequence[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2,5"``."""
    runs: list[list[int]] = []
    for c in sorted(cores):
        if runs and runs[-1][1] == c - 1:
            runs[-1][1] = c
        else:
            runs.append([c, c])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _generate(engine, ids, sampling: Mapping, probe: GcProbe, gc_off: bool) -> dict:
    probe.reset()
    if gc_off:
        gc.disable()
    try:
        t0 = time.perf_counter()
        outs = engine.generate(input_ids=ids, sampling_params=dict(sampling))
        wall = time.perf_counter() - t0
    finally:
        if gc_off:
            gc.enable()
    counts, ms = list(probe.counts), probe.ms
    out_ids = [o["output_ids"] for o in outs]
    verify = sum(int((o.get("meta_info") or {}).get("spec_verify_ct", 0) or 0) for o in outs)
    tokens = sum(len(x) for x in out_ids)
    return {
        "wall_s": wall,
        "md5": hashlib.md5(json.dumps(out_ids).encode()).hexdigest(),
        "gc": counts,
        "gc_ms": ms,
        "rss_mb": rss_mb(),
        "tokens": tokens,
        "accept_length": tokens / verify if verify else None,
    }


def _send(conn: Connection, msg: Mapping) -> None:
    conn.send_bytes(json.dumps(msg).encode())


def serve(spec_path: str, fd: int) -> int:
    """The worker: build the Engine, then answer ``generate`` requests until ``stop`` (or the driver is gone)."""
    conn = Connection(fd)
    os.set_inheritable(fd, False)  # not into SGLang's subprocesses: the driver sees EOF when this process ends
    spec = json.loads(Path(spec_path).read_text())
    if spec.get("cpus"):  # --pin: before the Engine starts, so its scheduler and detokenizer inherit the set
        os.sched_setaffinity(0, spec["cpus"])
    probe = GcProbe()
    try:
        engine, info = _make_engine(spec)
    except BaseException:  # noqa: BLE001 - told to the driver
        traceback.print_exc()
        _send(conn, {"error": traceback.format_exc()[-4000:]})
        return 1
    _send(conn, {"ready": True, **info})
    sampling = {"temperature": 0.0, "max_new_tokens": spec["max_new_tokens"], "ignore_eos": True}
    prompts: dict[int, list[list[int]]] = {}
    rc = 0
    try:
        while True:
            try:
                msg = json.loads(conn.recv_bytes())
            except (EOFError, OSError):
                break
            if msg.get("op") != "generate":
                break
            b = int(msg["batch"])
            if b not in prompts:
                prompts[b] = prompts_for(b, spec["vocab"], spec["seed"])
            try:
                res = _generate(engine, prompts[b], sampling, probe, bool(spec["gc_off"]) and not msg.get("warmup"))
            except Exception:  # noqa: BLE001 - told to the driver
                traceback.print_exc()
                _send(conn, {"error": traceback.format_exc()[-4000:]})
                rc = 1
                break
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
    ``<work>/reports-<mode>-e<engine>/``; ``cpus`` (``--pin``) its CPU set, ``omp_threads`` its thread pools."""

    def __init__(
        self,
        mode: str,
        spec: Mapping,
        work: Path,
        engine: int = 1,
        cpus: Sequence[int] | None = None,
        omp_threads: int | None = None,
    ):
        self.mode, self.engine = mode, engine
        self.name = f"{mode}-e{engine}"
        self.log_path = work / f"{self.name}.log"
        self.report_dir = work / f"reports-{self.name}"
        shutil.rmtree(self.report_dir, ignore_errors=True)  # an earlier run's reports would count as this one's
        spec_path = work / f"{self.name}.spec.json"
        spec_path.write_text(
            json.dumps(dict(spec, mode=mode, engine=engine, cpus=list(cpus or []), omp_threads=omp_threads))
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
    """Ask every worker to stop at once, wait up to ``timeout``, then kill each worker's session."""
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


def _terminate(signum, frame):  # SIGTERM (the runner's timeout): unwind, stop the workers, keep the files
    raise SystemExit(128 + signum)


def run(args, model: str, spec: dict, work: Path, options: dict) -> int:
    t_start = time.time()
    deadline = t_start + args.budget_s - args.stop_reserve_s if args.budget_s else math.inf
    date = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    commit = git_commit()
    opts = json.dumps(options, sort_keys=True, separators=(",", ":"))
    workers: dict[tuple[str, int], Worker] = {}  # (mode, engine) -> its worker
    rows: list[dict] = []
    md5s: dict[tuple[int, str], set[str]] = {}  # the timed generates' outputs
    warm_md5: dict[tuple[int, str], str] = {}  # the warm-ups' (told, not checked)
    done: list[int] = []
    skipped: list[int] = []
    partial: list[int] = []
    meta = {"gpu": "unknown", "sglang": "-"}
    status = 0
    written = False

    def save() -> None:
        nonlocal written
        if not rows and not written:
            return
        mark_slow(rows)
        summary = summarize(rows, resamples=args.bootstrap, seed=args.seed, reps_asked=args.reps)
        g, s = write_results(args.out, meta["gpu"], [model], rows, summary)
        written = True
        print(f"[files: {g}, {s}]", flush=True)

    n_eng = args.engines_per_mode
    planned = [(m, e) for e in range(1, n_eng + 1) for m in args.modes]  # a set of every mode, then the next set
    cpus = core_sets(os.sched_getaffinity(0), len(planned)) if args.pin else [None] * len(planned)
    units: list[tuple[str, int]] = []
    try:
        starts: list[float] = []
        for e in range(1, n_eng + 1):  # one after the other: an Engine sizes its pools from what is free when it starts
            slowest = max(starts[1:] or starts or [0.0])  # not the run's first: a cold machine compiles then
            need = len(args.modes) * 1.2 * slowest + args.min_timed_s
            if e > 1 and not fits(time.time(), deadline, need):
                print(f"[budget: engines per mode cut to {e - 1} of {n_eng} (set {e} needs ~{need:.0f} s)]", flush=True)
                break
            for mode in args.modes:
                t0 = time.time()
                i = planned.index((mode, e))
                print(f"[{mode}-e{e}: starting its Engine ({time.time() - t_start:.0f} s into the run)]", flush=True)
                workers[(mode, e)] = w = Worker(mode, spec, work, e, cpus[i], args.omp_threads)
                w.info = w.ask(None, args.engine_timeout)
                starts.append(time.time() - t0)
                print(
                    f"[{w.name}: ready in {time.time() - t0:.0f} s: {json.dumps(w.info, sort_keys=True)}]", flush=True
                )
            units += [(m, e) for m in args.modes]
        first = workers[(args.modes[0], 1)].info
        meta = {"gpu": first.get("gpu", "unknown"), "sglang": first.get("sglang", "-")}
        base_row = dict(model=model, date=date, commit=commit, options=opts, **meta)
        last: dict[tuple[str, int], float] = {}
        prev_batch = 0
        for b in args.batches:
            scale = max(1.0, b / prev_batch) if prev_batch else 1.0
            if not fits(time.time(), deadline, 2 * scale * sum(last.values())):
                skipped.append(b)
                continue
            for unit in units:
                w = workers[unit]
                r = w.ask({"op": "generate", "batch": b, "warmup": True}, args.generate_timeout)
                warm_md5.setdefault((b, unit[0]), r["md5"])
                if r["md5"] != warm_md5[(b, unit[0])]:
                    warm_md5[(b, unit[0])] = "differs between Engines"
                last[unit] = r["wall_s"]
                print(f"[b{b} {w.name} warm-up {r['wall_s']:.3f} s md5 {r['md5'][:8]}]", flush=True)
            order = balanced_order(units, args.reps)
            block = 2 * len(units)
            count = dict.fromkeys(units, 0)
            for i0 in range(0, len(order), block):
                if not fits(time.time(), deadline, 1.25 * 2 * sum(last.values())):
                    partial.append(b)
                    break
                for seq, unit in enumerate(order[i0 : i0 + block], start=i0 + 1):
                    mode, eng = unit
                    t0 = time.perf_counter()
                    r = workers[unit].ask({"op": "generate", "batch": b}, args.generate_timeout)
                    rtt = time.perf_counter() - t0
                    count[unit] += 1
                    last[unit] = r["wall_s"]
                    md5s.setdefault((b, mode), set()).add(r["md5"])
                    rows.append(
                        dict(
                            base_row,
                            batch=b,
                            mode=mode,
                            engine=eng,
                            generate=count[unit],
                            seq=seq,
                            wall_s=round(r["wall_s"], 6),
                            rtt_s=round(rtt, 6),
                            slow=0,
                            gc_gen0=r["gc"][0],
                            gc_gen1=r["gc"][1],
                            gc_gen2=r["gc"][2],
                            gc_ms=round(r["gc_ms"], 3),
                            rss_mb=round(r["rss_mb"], 1),
                            tokens=r["tokens"],
                            accept_length=round(r["accept_length"], 3) if r["accept_length"] else "",
                            md5=r["md5"],
                        )
                    )
            done.append(b)
            prev_batch = b
            meds = {
                m: statistics.median([x["wall_s"] for x in rows if x["batch"] == b and x["mode"] == m] or [0])
                for m in args.modes
            }
            print(
                f"[b{b}: {sum(count.values())} timed ({args.reps} per Engine); medians {json.dumps({m: round(v, 4) for m, v in meds.items()})}; {time.time() - t_start:.0f} s into the run]",
                flush=True,
            )
            save()
            if partial:
                skipped += [x for x in args.batches if x not in done and x not in skipped]
                break
    except EngineFailed as e:
        print(f"\nENGINE FAILED: {e}", flush=True)
        status = 2
    finally:
        t0 = time.time()
        stop_all(list(workers.values()), args.stop_timeout)
        print(f"[workers stopped in {time.time() - t0:.0f} s]", flush=True)
        save()
    reports = {unit: plugin_report(w.report_dir) for unit, w in workers.items()}
    print(_report(args, model, rows, md5s, reports, workers, done, skipped, partial, meta, commit))
    problems = md5_problems(md5s)
    odd = [f"b{b} {m}" for (b, m), h in sorted(warm_md5.items()) if (b, m) in md5s and md5s[(b, m)] != {h}]
    if odd:
        print(f"note: warm-up output differs from the timed generates' in {', '.join(odd)}")
    ran = [b for b in done if all((b, m) in md5s for m in args.modes)]
    if ran:
        results = {
            (e, m): {"batches": {str(b): {"md5": ["-"]} for b in ran}, "report": rep} for (m, e), rep in reports.items()
        }
        problems += [p for p in check(results, ran) if "md5" not in p]  # md5 above (check() wants one per Engine)
    if problems:
        print("\nPROBLEMS:\n  " + "\n  ".join(problems))
        status = status or 1
    elif status == 0:
        print("\nEQUAL outputs in every mode and batch; plugin engaged as each mode says")
    if written and rows:
        hist_rows = [
            {"benchmark": SUMMARY_STEM, **r}
            for r in summarize(rows, resamples=args.bootstrap, seed=args.seed, reps_asked=args.reps)
        ]
        append_history(Path(args.out) / "history.csv", hist_rows)
    if skipped or partial:
        print(f"PARTIAL: budget reached; batches cut short {partial}, not run {skipped}")
    return status


def _report(args, model, rows, md5s, reports, workers, done, skipped, partial, meta, commit) -> str:
    summary = summarize(rows, resamples=args.bootstrap, seed=args.seed, reps_asked=args.reps)
    for s in summary:
        s["min-max"] = f"{s['min_s']}-{s['max_s']}"
        s["ratio [95 % CI]"] = "1" if s["verdict"] == "base" else f"{s['ratio']} [{s['ci_lo']}, {s['ci_hi']}]"
        s["over Engines [95 % CI]"] = f"[{s['eng_ci_lo']}, {s['eng_ci_hi']}]" if s["eng_ci_lo"] != "" else "-"
    parts = [
        f"\n## {model}: wall per generate, modes alive at once (s; sglang {meta['sglang']}, {meta['gpu']}, commit {commit})",
        _table(
            summary,
            [
                "batch",
                "mode",
                "n",
                "median_s",
                "min-max",
                "engines",
                "ratio [95 % CI]",
                "ratio_per_engine",
                "over Engines [95 % CI]",
                "verdict",
                "slow",
                "slow_with_gc2",
                "gc_gen2",
                "gc_ms",
                "rss_mb_max",
            ],
        ),
        f"\nslow (> {SLOW_FACTOR}x the median of its batch and mode) per mode: "
        + ", ".join(f"{m} {s}/{n}" for m, (s, n) in slow_by_mode(rows).items()),
        "\nEngines: "
        + "; ".join(
            f"{w.name}: start {w.info.get('start_s')} s, mem_fraction_static {w.info.get('mem_fraction_static')}, "
            f"free {w.info.get('free_gib', '-')} GiB, KV tokens {w.info.get('max_total_num_tokens', '-')}, "
            f"cpus {w.info.get('cpus')}, OMP_NUM_THREADS {w.info.get('omp_threads')}"
            for w in workers.values()
        ),
        "plugin reports: "
        + "; ".join(f"{workers[u].name}: {json.dumps(r, sort_keys=True)}" for u, r in reports.items()),
        "output md5 per batch (stock): "
        + json.dumps({b: sorted(md5s.get((b, "stock"), set())) for b in sorted({b for b, _ in md5s})}),
        f"batches done {done}, cut short {partial}, not run {skipped}",
    ]
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--serve", nargs=2, help=argparse.SUPPRESS)
    p.add_argument("--model-dir", type=Path, help="a checkpoint (built with --preset when missing)")
    p.add_argument("--preset", default="qwen3.5-0.8b", help="random-weight preset (sglang_mamba_dedup.e2e)")
    p.add_argument("--batches", default="1,16,64,128", type=lambda s: [int(x) for x in s.split(",")])
    p.add_argument("--modes", default="stock,plugin,zero-copy", type=lambda s: s.split(","))
    p.add_argument(
        "--reps", type=int, default=12, help="timed generates per Engine and batch (even: palindromes of all Engines)"
    )
    p.add_argument(
        "--engines-per-mode",
        type=int,
        default=1,
        help="Engines (workers) per mode, all alive at once; the verdict then comes from the interval over Engines",
    )
    p.add_argument(
        "--omp-threads",
        type=int,
        help="OMP_NUM_THREADS / MKL_NUM_THREADS in each worker's environment, torch.set_num_threads in it (default: unset)",
    )
    p.add_argument(
        "--pin",
        action="store_true",
        help="each worker (and its Engine's processes) on its own CPU set: this process's cores split evenly",
    )
    p.add_argument(
        "--min-timed-s",
        type=float,
        default=60,
        help="kept of the budget for timed generates: a further set of Engines starts only when it fits before",
    )
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--seed", type=int, default=0, help="prompts and bootstrap")
    p.add_argument("--bootstrap", type=int, default=2000, help="bootstrap resamples")
    p.add_argument(
        "--static-gb",
        type=float,
        help="each Engine's static memory (GiB): its fraction of what is free when it starts "
        "(default 24, 16 with --engines-per-mode > 1: 6 x 16 GiB + ~3 GiB a CUDA context and graphs fit a 141 GB H200)",
    )
    p.add_argument("--mem-fraction-static", type=float, help="a fixed fraction instead of --static-gb")
    p.add_argument("--radix-cache", action="store_true", help="radix cache on in every mode (zero-copy then stays off)")
    p.add_argument(
        "--sleep-on-idle", action="store_true", help="idle Engines sleep on their sockets (SGLang's default: busy-poll)"
    )
    p.add_argument("--gc-off", action="store_true", help="the workers' gc disabled during timed generates")
    p.add_argument("--engine-arg", action="append", default=[], help="KEY=VALUE for sglang.Engine (repeatable)")
    p.add_argument("--budget-s", type=float, default=0, help="the run's wall budget (0: none)")
    p.add_argument("--stop-reserve-s", type=float, default=30, help="kept of --budget-s for stopping the Engines")
    p.add_argument("--stop-timeout", type=float, default=20, help="wait for the workers to stop, then kill")
    p.add_argument("--engine-timeout", type=float, default=400)
    p.add_argument("--generate-timeout", type=float, default=180)
    p.add_argument("--work", type=Path, help="logs and reports (default $CYCLE_WORK or /tmp/bench-live, per model)")
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or RESULTS))
    p.add_argument("--dry-run", action="store_true", help="fake Engines on the CPU: the driver, files and checks")
    p.add_argument(
        "--fake",
        default="{}",
        help="--dry-run: JSON {delay_s, factor: {mode: x}, engine_factor: {'mode:engine': x}, start_s, break: mode, "
        "fail: mode}",
    )
    p.add_argument("--merge", nargs="+", type=Path, help="merge these device outputs ($OUT copies) into --out")
    args = p.parse_args(argv)
    if args.serve:
        return serve(args.serve[0], int(args.serve[1]))
    if args.merge:
        for path in merge_outputs(args.merge, args.out):
            print(f"merged: {path}")
        return 0
    bad = [m for m in args.modes if m not in MODES]
    if bad or "stock" not in args.modes or len(set(args.modes)) != len(args.modes):
        p.error(f"--modes: distinct, from {', '.join(MODES)}, stock included (got {args.modes})")
    if args.reps < 2 or args.reps % 2:
        p.error(f"--reps must be even and >= 2 (got {args.reps})")
    if args.engines_per_mode < 1:
        p.error(f"--engines-per-mode must be >= 1 (got {args.engines_per_mode})")
    if args.omp_threads is not None and args.omp_threads < 1:
        p.error(f"--omp-threads must be >= 1 (got {args.omp_threads})")
    if args.pin:
        try:
            core_sets(os.sched_getaffinity(0), args.engines_per_mode * len(args.modes))
        except ValueError as e:
            p.error(str(e))
    if args.static_gb is None:
        args.static_gb = 24.0 if args.engines_per_mode == 1 else 16.0
    if args.radix_cache and "zero-copy" in args.modes:
        print("note: --radix-cache: zero-copy needs the radix cache off; its engagement check is expected to fail")
    static_gb = None if args.dry_run or args.mem_fraction_static is not None else args.static_gb
    if args.dry_run:
        model, layers, vocab, kw = args.preset, 0, 1000, {}
        fake = json.loads(args.fake)
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
    }
    options = {
        "batches": args.batches,
        "modes": args.modes,
        "reps": args.reps,
        "engines_per_mode": args.engines_per_mode,
        "omp_threads": args.omp_threads,
        "pin": args.pin,
        "max_new_tokens": args.max_new_tokens,
        "radix_cache": args.radix_cache,
        "gc_off": args.gc_off,
        "sleep_on_idle": args.sleep_on_idle,
        "static_gb": static_gb,
        "mem_fraction_static": None if static_gb else args.mem_fraction_static,
        "engine_args": args.engine_arg,
        "seed": args.seed,
        "dry_run": args.dry_run,
    }
    work = (args.work or Path(os.environ.get("CYCLE_WORK", "/tmp/bench-live"))) / model
    work.mkdir(parents=True, exist_ok=True)
    print(
        f"model {model} ({layers} linear layers); modes {args.modes} alive at once, {args.engines_per_mode} Engine(s) "
        f"each; batches {args.batches}; {args.reps} timed generates of {args.max_new_tokens} tokens per Engine and batch; options {json.dumps(options, sort_keys=True)}; "
        f"engine {json.dumps(kw, sort_keys=True)}",
        flush=True,
    )
    old = signal.signal(signal.SIGTERM, _terminate)
    try:
        return run(args, model, spec, work, options)
    finally:
        signal.signal(signal.SIGTERM, old)


if __name__ == "__main__":
    sys.exit(main())
