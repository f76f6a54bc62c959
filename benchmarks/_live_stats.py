"""The statistics of the live-modes benchmark (``benchmarks/bench_live.py``), pure Python, no third-party import.

**Engines are the unit** (``docs/benchmarks.md``, "The decode cycle, the protocol"): the generates of one Engine share
its host state, its gc timing and its placement, so they are not independent replicates of a mode. Per Engine and
batch: ``m`` = the median of log(wall) over its timed generates. Per Engine pair (Engine ``e`` of a mode and Engine
``e`` of stock, started and interleaved together, in one run): ``d = m_mode - m_stock``. The ratio is ``exp(mean d)``
over the pairs, its 95 % interval ``mean d +- t(n-1) * s / sqrt(n)`` with ``s`` the SD of that batch's own ``n``
pairs (never pooled over batches; one pair: no interval, inconclusive). The verdict is exactly one of
:data:`VERDICTS`; "equal" needs the interval and every pair of the batch within ``1 +- 1 %``. The interval over generates (:func:`bootstrap_ratio`) and the hierarchical one over Engines
(:func:`hier_bootstrap_ratio`) stay as descriptive columns: the first is conditional on the Engines drawn, the
second under-covers with 2-3 Engines per mode (the review's simulation: 66-83 % for a nominal 95 %).

Health checks per run, batch and Engine (:func:`health`): robust CV of the walls <= 1.5 %, max/min of the generates
without a gen-2 collection < 1.10 (no switch of host state), the Engines of one mode within 1.5 % of each other, no
gen-2 collection in a timed generate, gc frozen after the warm-ups.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Iterable, Mapping, Sequence

#: the verdict band: "equal" when the whole interval lies within 1 +- this
EQUAL_MARGIN = 0.01
FASTER, SLOWER, INCONCLUSIVE = "faster", "slower", "inconclusive"
EQUAL = f"equal within +-{EQUAL_MARGIN * 100:g} %"
VERDICTS = (FASTER, SLOWER, EQUAL, INCONCLUSIVE)
#: health thresholds (the review's section 4)
CV_MAX = 0.015
ENGINES_AGREE = 0.015
SWITCH_MAX = 1.10
#: the whole-Engine slow-state rule: an Engine this far off its mode's other Engines at every batch is flagged
ENGINE_OFF = 0.05
#: two runs agree when their own ratios are within +-1 % (max/min <= this; issue 51 item 5)
RUNS_AGREE = 1.01
#: the probe columns compared between a flagged Engine and its mode's others (medians per batch; CPUs as sets); the
#: GPU's busy time (``--gpu-busy``) among them: an Engine slow with it unmoved was slowed by the host, not its GPU work
SLOW_PROBES = (
    "sched_cpu_ms", "sched_wait_ms", "sched_slices", "sched_nvcsw", "worker_cpu_ms", "worker_wait_ms",
    "steal_ms", "steal_sched_cpu_ms", "cpu_busy_pct", "sched_cpu_work_us", "energy_j", "sm_mhz", "mem_mhz", "power_w", "temp_c",
    "gpu_busy_s", "gpu_kernel_s",
)  # fmt: skip
SLOW_CPUS = ("sched_cpu_last", "worker_cpu_last")
#: two-sided 95 % quantiles of Student's t, by degrees of freedom
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def t975(df: int) -> float:
    """Student's t, two-sided 95 %, ``df`` >= 1 (table to 30, then 1.96 + 2.5 / df, within 0.002)."""
    if df < 1:
        raise ValueError(f"t975 needs df >= 1, got {df}")
    return _T975[df - 1] if df <= len(_T975) else 1.96 + 2.5 / df


def verdict(lo: float | None, hi: float | None, margin: float = EQUAL_MARGIN) -> str:
    """A ratio's 95 % interval -> exactly one of :data:`VERDICTS`: the whole interval within ``1 +- margin`` is
    "equal" (a difference, if any, below the margin), else below 1 "faster", above 1 "slower", else (an interval
    through 1 that leaves the band, or none) "inconclusive": no evidence, never "no difference"."""
    if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)):
        return INCONCLUSIVE
    if lo >= 1 - margin and hi <= 1 + margin:
        return EQUAL if margin == EQUAL_MARGIN else f"equal within +-{margin * 100:g} %"
    if hi < 1:
        return FASTER
    if lo > 1:
        return SLOWER
    return INCONCLUSIVE


def _robust_sd(xs: Sequence[float]) -> float:
    """1.4826 x the median absolute deviation (the SD of a normal sample, robust to outliers)."""
    med = statistics.median(xs)
    return 1.4826 * statistics.median(abs(x - med) for x in xs)


def robust_cv(xs: Sequence[float]) -> float:
    """:func:`_robust_sd` / the median (the SD / mean of a normal sample, robust to outliers)."""
    med = statistics.median(xs)
    return _robust_sd(xs) / med if med else math.inf


# ---------------------------------------------------------------- generate-level intervals (descriptive)


def _percentile_interval(rs: list[float], level: float) -> tuple[float, float]:
    rs.sort()
    alpha = (1.0 - level) / 2.0
    n = len(rs)
    return rs[max(0, int(math.floor(alpha * n)))], rs[min(n - 1, int(math.ceil((1.0 - alpha) * n)) - 1)]


def bootstrap_ratio(
    xs: Sequence[float], base: Sequence[float], *, resamples: int = 2000, seed: int = 0, level: float = 0.95
) -> tuple[float, float, float]:
    """``(median(xs) / median(base), lo, hi)``: the percentile interval of the ratio of medians over ``resamples``
    resamples of the generates (each side separately, a fixed seed). Conditional on the Engines drawn."""
    if not xs or not base:
        raise ValueError("bootstrap_ratio needs samples on both sides")
    if resamples < 1:
        raise ValueError(f"bootstrap_ratio needs resamples >= 1, got {resamples}")
    rng = random.Random(seed)
    med = statistics.median
    rs = [med(rng.choices(xs, k=len(xs))) / med(rng.choices(base, k=len(base))) for _ in range(resamples)]
    lo, hi = _percentile_interval(rs, level)
    return med(xs) / med(base), lo, hi


def hier_bootstrap_ratio(
    xs: Sequence[Sequence[float]],
    base: Sequence[Sequence[float]],
    *,
    resamples: int = 2000,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[float, float, float]:
    """The ratio of pooled medians with a hierarchical percentile interval (Engines drawn with replacement, then
    generates within each drawn Engine). Descriptive only: with 2-3 Engines per mode it under-covers."""
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

    lo, hi = _percentile_interval([draw(xs) / draw(base) for _ in range(resamples)], level)
    return med([x for e in xs for x in e]) / med([x for e in base for x in e]), lo, hi


# ---------------------------------------------------------------- Engines and pairs


def _num(r: Mapping, key: str, default: float = 0.0) -> float:
    try:
        return float(r.get(key) or default)
    except (TypeError, ValueError):
        return default


def engine_stats(rows: Iterable[Mapping], col: str = "wall_s") -> dict[tuple, dict]:
    """(model, run, batch, mode, engine) -> n, median_s, m (median log), cv (robust), switch (max/min of the
    generates without a gen-2 collection), gc2 (timed generates with one), frozen (every generate after a freeze),
    all of the column ``col`` (seconds: the wall, or ``gpu_busy_s``, the GPU's busy time)."""
    groups: dict[tuple, list[Mapping]] = {}
    for r in rows:
        key = (str(r["model"]), str(r.get("run", "")), int(r["batch"]), str(r["mode"]), int(r.get("engine") or 1))
        groups.setdefault(key, []).append(r)
    out = {}
    for key, group in groups.items():
        walls = [float(r[col]) for r in group]
        clean = [float(r[col]) for r in group if not int(_num(r, "gc_gen2"))] or walls
        out[key] = {
            "n": len(walls),
            "median_s": statistics.median(walls),
            "m": statistics.median(math.log(w) for w in walls),
            "cv": robust_cv(walls),
            "switch": max(clean) / min(clean),
            "gc2": sum(1 for r in group if int(_num(r, "gc_gen2"))),
            "frozen": all(str(r.get("frozen", "")) == "1" for r in group),
            "walls": walls,
        }
    return out


def pair_diffs(
    stats: Mapping[tuple, Mapping], base: str = "stock", exclude: Iterable[tuple] = ()
) -> dict[tuple, list[tuple[str, int, float]]]:
    """(model, batch, mode) -> [(run, engine, d)] for every Engine of a mode whose stock partner (same run, same
    Engine number) was timed at that batch: ``d = m_mode - m_stock``; a pair with an Engine in ``exclude``
    ((model, run, mode, engine)) left out."""
    out: dict[tuple, list[tuple[str, int, float]]] = {}
    exclude = set(exclude)
    for (model, run, batch, mode, eng), s in sorted(stats.items()):
        ref = stats.get((model, run, batch, base, eng))
        if mode == base or ref is None or {(model, run, mode, eng), (model, run, base, eng)} & exclude:
            continue
        out.setdefault((model, batch, mode), []).append((run, eng, s["m"] - ref["m"]))
    return out


def pair_intervals(diffs: Mapping[int, Sequence[float]], margin: float = EQUAL_MARGIN) -> dict[int, dict]:
    """One mode's pair differences per batch -> per batch: ratio, lo, hi, pairs, df, sd_from, verdict, why. A
    batch rests on its own pairs only: its interval is ``mean d +- t(n-1) * s / sqrt(n)`` with ``s`` the SD of
    that batch's ``n`` pairs (never pooled over batches: another batch's quiet pairs must not narrow it). One pair
    gives no interval: inconclusive. "Equal" needs the interval within ``1 +- margin`` and every pair of the batch
    within it too (a batch whose pairs sit 3 % either side of 1 is not "equal"). ``why`` says why a verdict is
    inconclusive (empty otherwise)."""
    out = {}
    for b, ds in diffs.items():
        n = len(ds)
        mean = statistics.fmean(ds) if n else math.nan
        res = {"ratio": math.exp(mean) if n else None, "lo": None, "hi": None, "pairs": n, "df": 0, "sd_from": ""}
        if n >= 2:
            half = t975(n - 1) * math.sqrt(statistics.variance(ds) / n)
            res.update(lo=math.exp(mean - half), hi=math.exp(mean + half), df=n - 1, sd_from="batch")
        v = verdict(res["lo"], res["hi"], margin)
        why = ""
        outside = [math.exp(d) for d in ds if not (1 - margin <= math.exp(d) <= 1 + margin)]
        if n < 2:
            why = f"{'one pair' if n else 'no pair'}: an interval needs 2 or more pairs of this batch"
        elif v.startswith("equal") and outside:
            v = INCONCLUSIVE
            why = f"interval within 1 +- {margin * 100:g} % but pair(s) outside: " + ", ".join(
                f"{x:.4f}" for x in outside
            )
        elif v == INCONCLUSIVE:
            why = (
                f"interval [{res['lo']:.4f}, {res['hi']:.4f}] through 1 and beyond 1 +- {margin * 100:g} %"
                if res["lo"] is not None and math.isfinite(res["lo"]) and math.isfinite(res["hi"])
                else "no finite interval"
            )
        res.update(verdict=v, why=why)
        out[b] = res
    return out


def analyse(
    rows: Sequence[Mapping], base: str = "stock", exclude: Iterable[tuple] = (), col: str = "wall_s"
) -> dict[tuple, dict]:
    """(model, batch, mode) -> the pair analysis over every run in ``rows``: ratio, lo, hi, pairs, df, sd_from,
    verdict, why, per-pair ratios, per-run ratios; of the column ``col`` (the wall, or the GPU's busy time)."""
    stats = engine_stats(rows, col)
    diffs = pair_diffs(stats, base, exclude)
    by_mode: dict[tuple[str, str], dict[int, list]] = {}
    for (model, batch, mode), ds in diffs.items():
        by_mode.setdefault((model, mode), {})[batch] = ds
    out = {}
    for (model, mode), per_batch in by_mode.items():
        ivs = pair_intervals({b: [d for _, _, d in ds] for b, ds in per_batch.items()})
        for b, iv in ivs.items():
            ds = per_batch[b]
            runs: dict[str, list[float]] = {}
            for run, _, d in ds:
                runs.setdefault(run, []).append(d)
            tag = len(runs) > 1  # the run in each pair's name only when there are several
            out[(model, b, mode)] = {
                **iv,
                "pair_ratios": ";".join(f"{run + '/' if tag else ''}{e}:{math.exp(d):.4f}" for run, e, d in ds),
                "run_ratios": {run: math.exp(statistics.fmean(v)) for run, v in runs.items()},
                "pair_spread": math.exp(max(d for *_, d in ds) - min(d for *_, d in ds)),
            }
    return out


#: one-sided 95 % quantile of the standard normal (the noise split's test)
_Z95 = 1.6449


def chi2_95(df: int) -> float:
    """The one-sided 95 % quantile of chi-square with ``df`` >= 1 degrees of freedom (Wilson-Hilferty; within 1 % of
    the table from df 3, 3.6 % low at df 1)."""
    if df < 1:
        raise ValueError(f"chi2_95 needs df >= 1, got {df}")
    a = 2.0 / (9.0 * df)
    return df * (1.0 - a + _Z95 * math.sqrt(a)) ** 3


def gens_to_agree(sd: float, agree: float = RUNS_AGREE) -> int:
    """The timed generates per mode and batch each of two runs needs for their ratios to agree within ``agree`` at
    95 % when the generates' log walls have the SD ``sd`` (robust) and nothing else differs: a run's log ratio is a
    difference of medians, variance ``2 * pi/2 * sd^2 / n``; two runs differ by ``sqrt 2`` of that, within
    ``ln(agree)`` at 1.96 SD."""
    se = math.log(agree) / (1.96 * math.sqrt(2.0))
    return math.ceil(2 * math.pi / 2 * sd * sd / se**2)


def generate_noise(rows: Sequence[Mapping], agree: float = RUNS_AGREE) -> dict[tuple, tuple[float, int]]:
    """(model, batch) -> (the median over its Engines, every mode, of the robust SD of an Engine's log walls; the
    generates per mode two runs would need to agree within ``agree`` at that noise, :func:`gens_to_agree`). Engines
    with fewer than 4 timed generates are left out. One stock Engine (a prime) reads the host's noise before a
    protocol is spent on it."""
    per: dict[tuple, list[float]] = {}
    for (model, _, batch, _, _), st in engine_stats(rows).items():
        if st["n"] >= 4:
            per.setdefault((model, batch), []).append(_robust_sd([math.log(w) for w in st["walls"]]))
    return {k: (statistics.median(v), gens_to_agree(statistics.median(v), agree)) for k, v in sorted(per.items())}


def noise_split(rows: Sequence[Mapping], base: str = "stock", agree: float = RUNS_AGREE) -> dict[tuple, dict]:
    """(model, batch, mode) -> where the pairs' spread comes from, over every run in ``rows``, at three levels:

    - ``gen_sd``: the SD a pair's log ratio ``d`` would have from its two Engines' own generates alone,
      ``sqrt(pi/2 * (s1^2/n1 + s2^2/n2))`` (``s`` the robust SD of an Engine's log walls), averaged over the pairs;
    - ``pair_sd``: the SD of ``d`` between the pairs of one run (pooled over the runs, ``df`` = pairs - runs; with
      one pair per run, between all the pairs); ``engines`` is True when it is beyond what ``gen_sd`` allows at 95 %
      (chi-square): the Engines of a run differ, and more pairs narrow it; False: more generates per Engine would;
    - ``runs_t``: with two runs, their gap in mean ``d`` over its standard error from ``pair_sd`` (None otherwise);
      ``runs`` is True when it is beyond Student's t at 95 %: the runs differ by more than their own pairs allow,
      the host's state moved between them, and neither more pairs nor more generates in a run close that.

    ``source`` names the level that explains the spread (``runs``, else ``engines``, else ``generates``); ``gens``
    is the timed generates per mode a run needs for two runs to agree within ``agree`` from the generates' noise
    alone (:func:`gens_to_agree`), ``had`` the mean a run had. Needs 2 pairs. On the lent H100s of 12-05/12-06 a
    run's pairs spread about as their generates' noise predicts, and the runs that missed 1 % were short of the
    generates their noise asked for (Nemotron-H: thousands); no gap between runs passed the t test with their
    2-4 df (Qwen3.5 radix off at 1 and 16: t = 3.0-3.1, under 4.3; docs/benchmarks.md)."""
    stats = engine_stats(rows)
    logs = {k: [math.log(w) for w in s["walls"]] for k, s in stats.items()}
    sd = {k: _robust_sd(v) for k, v in logs.items()}
    out = {}
    for (model, batch, mode), ds in pair_diffs(stats, base).items():
        if len(ds) < 2:
            continue
        keys = [((model, run, batch, mode, e), (model, run, batch, base, e)) for run, e, _ in ds]
        gen_var = statistics.fmean(math.pi / 2 * sum(sd[k] ** 2 / len(logs[k]) for k in pair) for pair in keys)
        by_run: dict[str, list[float]] = {}
        for run, _, d in ds:
            by_run.setdefault(run, []).append(d)
        df = sum(len(v) - 1 for v in by_run.values())
        if df:
            pair_var = sum(sum((d - statistics.fmean(v)) ** 2 for d in v) for v in by_run.values()) / df
        else:  # one pair per run: the runs' pairs together, their gap included
            df, pair_var = len(ds) - 1, statistics.variance([d for *_, d in ds])
        runs_t = None
        if len(by_run) == 2 and df >= 1 and pair_var > 0 and len(ds) > 2:
            (a, b) = by_run.values()
            se = math.sqrt(pair_var * (1 / len(a) + 1 / len(b)))
            runs_t = abs(statistics.fmean(a) - statistics.fmean(b)) / se
        s2 = statistics.fmean(sd[k] ** 2 for pair in keys for k in pair)
        per_run: dict[str, int] = {}
        for (k, _), (run, _, _) in zip(keys, ds):
            per_run[run] = per_run.get(run, 0) + len(logs[k])
        engines = pair_var > gen_var * chi2_95(df) / df
        runs = runs_t is not None and runs_t > t975(df)
        out[(model, batch, mode)] = {
            "pair_sd": math.sqrt(pair_var),
            "gen_sd": math.sqrt(gen_var),
            "engines": engines,
            "runs_t": runs_t,
            "runs": runs,
            "source": "runs" if runs else "engines" if engines else "generates",
            "gens": gens_to_agree(math.sqrt(s2), agree),
            "had": round(statistics.fmean(per_run.values())),
        }
    return out


#: the probes compared between an Engine's slow generates and its others (:func:`slow_within_engines`)
WITHIN_PROBES = ("power_w", "sched_cpu_work_us", "steal_ms", "sched_wait_ms", "sm_mhz", "cpu_busy_pct")
WITHIN_OFF = 0.10


def slow_within_engines(rows: Sequence[Mapping], off: float = WITHIN_OFF) -> str:
    """The generates more than ``off`` slower than their Engine's median at their batch (a step within an Engine, as
    on the 2026-12-05 H100: 0.74 s then 0.51 s on one vCPU), against the others: how many, and the mean of each
    probe of :data:`WITHIN_PROBES` over each side, e.g. ``power_w 237.4 vs 303.2``. A probe that moves with the wall names
    the cause; none moving says it is outside what the guest sees."""
    groups: dict[tuple, list[Mapping]] = {}
    for r in rows:
        groups.setdefault((r.get("model"), r.get("run"), r["batch"], r["mode"], r["engine"]), []).append(r)
    slow, rest = [], []
    for g in groups.values():
        med = statistics.median(float(r["wall_s"]) for r in g)
        for r in g:
            (slow if float(r["wall_s"]) > (1 + off) * med else rest).append(r)
    head = f"generates > {1 + off:g}x their Engine's median at their batch: {len(slow)} of {len(slow) + len(rest)}"
    if not slow or not rest:
        return head

    def mean(side: Sequence[Mapping], col: str) -> float | None:
        vals = [v for v in (finite_number(r.get(col)) for r in side) if v is not None]
        return statistics.fmean(vals) if vals else None

    said = []
    for col in WITHIN_PROBES:
        a, b = mean(slow, col), mean(rest, col)
        if a is not None and b is not None:
            said.append(f"{col} {a:.4g} vs {b:.4g}")
    return head + ("; probes, slow vs the rest (means): " + ", ".join(said) if said else "; no probe read")


#: the host probe of a generate: the scheduler's CPU's time for a fixed loop just before it (``_live_probes.cpu_work_us``)
HOST_COL = "sched_cpu_work_us"
#: a probe this many times its run's fast time counts as a slow host (``benchmarks/host_speed.py``'s threshold)
HOST_SLOW_X = 1.5


def host_slow_share(rows: Iterable[Mapping]) -> dict[tuple[str, str], float]:
    """(model, run) -> the share of its timed generates that started with the host slow: their host probe over
    :data:`HOST_SLOW_X` times the run's fast time (the 5th percentile of its probes, so one lucky sample does not set
    it). On the 12-05/12-06 H100 each pair of runs with one at 23-62 % was 14-35 % apart at some batch, and the one
    pair that agreed within 1 % at every batch had 5 % and 0 % (docs/benchmarks.md). Runs without the probe have no
    entry."""
    groups: dict[tuple[str, str], list[float]] = {}
    for r in rows:
        v = finite_number(r.get(HOST_COL))
        if v is not None and v > 0:
            groups.setdefault((str(r.get("model", "")), str(r.get("run", ""))), []).append(v)
    out = {}
    for key, vals in groups.items():
        vals.sort()
        fast = vals[int(0.05 * (len(vals) - 1))]
        out[key] = sum(v > HOST_SLOW_X * fast for v in vals) / len(vals)
    return out


def finite_number(x) -> float | None:
    """A finite number, else None (an empty cell, ``absent``, NaN, a word)."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


#: the GPU's busy time per generate of an Engine at a batch (``bench_live --gpu-busy``), analysed as the wall is
BUSY_COL = "gpu_busy_s"


def busy_rows(rows: Iterable[Mapping]) -> list[Mapping]:
    """The rows that carry a GPU busy time (a positive finite ``gpu_busy_s``): runs without ``--gpu-busy`` and rows
    from before the column have none."""
    return [r for r in rows if (v := finite_number(r.get(BUSY_COL))) is not None and v > 0]


def host_gap_ms(rows: Iterable[Mapping]) -> dict[tuple, float]:
    """(model, batch, mode, run) -> the host's part of a generate: the median over its timed generates of the wall
    less its Engine's GPU busy time at that batch, in ms; only rows with a busy time (``--gpu-busy``). What moves it
    and not the busy time is the host's: the scheduler's Python, launches, waits."""
    groups: dict[tuple, list[float]] = {}
    for r in busy_rows(rows):
        wall = finite_number(r.get("wall_s"))
        if wall is not None:
            key = (r["model"], int(r["batch"]), r["mode"], str(r.get("run", "")))
            groups.setdefault(key, []).append(wall - float(r[BUSY_COL]))
    return {k: 1000 * statistics.median(v) for k, v in groups.items()}


def _probe_median(group: Sequence[Mapping], col: str) -> float | None:
    vals = [v for v in (finite_number(r.get(col)) for r in group) if v is not None]
    return statistics.median(vals) if vals else None


def _what_differed(groups: Mapping[tuple, list], key: tuple, others: Sequence[tuple], off: float) -> str:
    """The probe columns of Engine ``key`` that differ from its mode's other Engines (in the same direction by more
    than :data:`ENGINE_OFF` at every batch; CPUs: the ones only it ran on), e.g. ``sched_cpu_ms x1.14, sched_cpu_last 15 (others 0)``;
    the GPU's busy time whenever it was measured, moved or not."""
    model, run, mode, eng = key
    batches = sorted({b for (mo, ru, b, md, e) in groups if (mo, ru, md, e) == key})
    said = []
    for col in SLOW_PROBES:
        ratios = []
        for b in batches:
            mine = _probe_median(groups[(model, run, b, mode, eng)], col)
            theirs = [
                _probe_median(groups[(model, run, b, mode, o)], col)
                for o in others
                if (model, run, b, mode, o) in groups
            ]
            theirs = [t for t in theirs if t is not None]
            if mine is None or not theirs:
                break
            ref = statistics.median(theirs)
            ratios.append(mine / ref if ref else (1.0 if mine == ref else math.inf))
        else:
            if ratios and (all(x > 1 + ENGINE_OFF for x in ratios) or all(x < 1 - ENGINE_OFF for x in ratios)):
                said.append(f"{col} x{statistics.median(ratios):.3g}")
            elif ratios and col == BUSY_COL:  # said either way: the GPU's own work did not move with the wall
                said.append(f"{col} x{statistics.median(ratios):.3g} (its GPU work unmoved: the host slowed it)")

    def cpus(engs: Sequence[int], col: str) -> set[str]:
        seen = {str(r.get(col)) for e in engs for b in batches for r in groups.get((model, run, b, mode, e), ())}
        return seen - {"", "absent", "None"}

    for col in SLOW_CPUS:
        mine, theirs = cpus([eng], col), cpus(others, col)
        if mine and theirs and mine - theirs:
            said.append(
                f"{col} {','.join(sorted(mine - theirs, key=lambda c: (len(c), c)))} (others {','.join(sorted(theirs, key=lambda c: (len(c), c)))})"
            )
    return ", ".join(said) or "no probe differed"


def slow_state(rows: Sequence[Mapping], off: float = ENGINE_OFF) -> dict[tuple, dict]:
    """The whole-Engine slow-state rule: (model, run, mode, engine) -> ``off`` (batch -> its median / the median of
    its mode's other Engines' medians in that run, less 1), ``probes`` (what differed, :func:`_what_differed`),
    ``note``, for every Engine more than ``off`` away at every batch it shares with another Engine of its mode, in
    the same direction; one Engine per run and mode at most, the farthest off (it alone moves its others'
    reference; with two Engines each is as far off as the other: the slower one)."""
    stats = engine_stats(rows)
    groups: dict[tuple, list[Mapping]] = {}
    for r in rows:
        key = (str(r["model"]), str(r.get("run", "")), int(r["batch"]), str(r["mode"]), int(r.get("engine") or 1))
        groups.setdefault(key, []).append(r)
    engines: dict[tuple, set[int]] = {}
    for model, run, _, mode, eng in stats:
        engines.setdefault((model, run, mode), set()).add(eng)
    out = {}
    for (model, run, mode), engs in sorted(engines.items()):
        if len(engs) < 2:
            continue
        found = []
        for eng in sorted(engs):
            others = sorted(engs - {eng})
            offs = {}
            for (mo, ru, b, md, e), s in sorted(stats.items()):
                if (mo, ru, md, e) != (model, run, mode, eng):
                    continue
                theirs = [
                    stats[(model, run, b, mode, o)]["median_s"] for o in others if (model, run, b, mode, o) in stats
                ]
                if theirs:
                    offs[b] = s["median_s"] / statistics.median(theirs) - 1
            if offs and (all(x > off for x in offs.values()) or all(x < -off for x in offs.values())):
                far = round(statistics.fmean(abs(math.log1p(x)) for x in offs.values()), 9)
                found.append((far, min(offs.values()) > 0, eng, others, offs))
        if found:  # the farthest one (two Engines: the slower); it alone moves the others' reference
            _, _, eng, others, offs = max(found, key=lambda f: f[:2])
            note = f"of {len(engs)} Engines, the slower" if len(engs) == 2 else f"the farthest of {len(engs)} Engines"
            probes = _what_differed(groups, (model, run, mode, eng), others, off)
            out[(model, run, mode, eng)] = {"off": offs, "probes": probes, "note": note}
    return out


def flagged_names(flags: Mapping[tuple, Mapping], runs: bool = True) -> str:
    """``B/zero-copy-e2;...`` (the run only when ``runs``)."""
    return ";".join(f"{run + '/' if runs else ''}{mode}-e{eng}" for _, run, mode, eng in sorted(flags))


def health(rows: Sequence[Mapping]) -> dict[tuple, list[str]]:
    """(model, run, batch, mode) -> what failed (empty: healthy): each Engine's robust CV, switch, gen-2
    collections and gc freeze; the spread of the Engines of the mode."""
    stats = engine_stats(rows)
    out: dict[tuple, list[str]] = {}
    for (model, run, batch, mode, eng), s in sorted(stats.items()):
        bad = out.setdefault((model, run, batch, mode), [])
        name = f"{mode}-e{eng}"
        if s["cv"] > CV_MAX:
            bad.append(f"{name} robust CV {s['cv'] * 100:.1f} % > {CV_MAX * 100:g} %")
        if s["switch"] >= SWITCH_MAX:
            bad.append(f"{name} max/min {s['switch']:.3f} >= {SWITCH_MAX}")
        if s["gc2"]:
            bad.append(f"{name} gen-2 gc in {s['gc2']} timed generate(s)")
        if not s["frozen"]:
            bad.append(f"{name} gc not frozen")
    for (model, run, batch, mode), bad in out.items():
        meds = [s["median_s"] for k, s in stats.items() if k[:4] == (model, run, batch, mode)]
        spread = max(meds) / min(meds) - 1
        if len(meds) > 1 and spread > ENGINES_AGREE:
            bad.append(f"the Engines of {mode} differ by {spread * 100:.1f} % > {ENGINES_AGREE * 100:g} %")
    for (model, run, mode, eng), f in slow_state(rows).items():
        for b, x in f["off"].items():
            out.setdefault((model, run, b, mode), []).append(
                f"{mode}-e{eng} whole-Engine slow state: {x * 100:+.1f} % vs its mode's other Engines "
                f"(> {ENGINE_OFF * 100:g} % at every batch, {f['note']}; probes: {f['probes']})"
            )
    return out
