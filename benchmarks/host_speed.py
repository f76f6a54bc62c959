"""The host's CPU speed over time: a fixed piece of pure-Python work timed on every CPU in turn, for a while.

Why: on the lent KVM guests the decode cycle's wall moved 20-80 % between Engines and runs minutes apart while the
GPU's busy time stayed within 0.2 % (docs/benchmarks.md), and the in-guest probes (steal, run queue, clocks) saw
nothing. This measures the one thing left, the speed at which the guest's vCPUs run Python, as the scheduler's
host part of a generate needs it: a fixed loop, timed by the wall clock (a hypervisor that deschedules a vCPU
shows up here and nowhere in the guest's steal time), each CPU in turn (``os.sched_setaffinity``), round after
round, then a few rounds with every CPU busy at once.

    python3 benchmarks/host_speed.py --seconds 200 --out DIR      # measure: DIR/host_speed.csv and the tables
    python3 benchmarks/host_speed.py --read DIR/host_speed.csv    # the tables again from a CSV
    python3 benchmarks/host_speed.py --seconds 20 --gate 1.2      # exit 5 when the median sample is over 1.2x the fastest

Tables: per time bin (``--bin-s``, default 10 s) the median work time over every CPU's samples in it, against the
fastest sample of the run; per CPU its median, fastest and slowest; and whether the CPUs slow down together (the
correlation of two CPUs' times across rounds, and of the bins' medians) or one at a time. A host whose slow spells
are long and shared by every vCPU cannot be worked around inside the guest (pinning, a choice of vCPU): only
measuring the modes side by side in time can cancel it.
"""

from __future__ import annotations

import argparse
import csv
import math
import multiprocessing as mp
import os
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

COLUMNS = ("phase", "round", "cpu", "t_s", "work_s")
#: loops of the fixed work: ~8 ms on a quiet 2026 Xeon vCPU
LOOPS = 200_000
#: a sample slower than this many times the run's fastest counts as slow
SLOW = 1.5


def work(loops: int = LOOPS) -> float:
    """Seconds of wall clock for a fixed pure-Python loop."""
    t0 = time.perf_counter()
    acc = 0
    for i in range(loops):
        acc += i * i
    return time.perf_counter() - t0 if acc >= 0 else math.nan


def _on(cpu: int, loops: int) -> float:
    os.sched_setaffinity(0, {cpu})
    work(loops // 10)  # the first slice after a move warms the caches
    return work(loops)


def _child(cpu: int, loops: int, q) -> None:
    q.put((cpu, _on(cpu, loops)))


def measure(seconds: float, loops: int = LOOPS, all_rounds: int = 5) -> list[dict]:
    """``single`` rows (each CPU of this process's affinity in turn, rounds until ``seconds`` have passed), then
    ``all_rounds`` rounds of ``all`` rows (one process per CPU, all at once). The affinity is restored."""
    cpus = sorted(os.sched_getaffinity(0))
    old = set(cpus)
    rows: list[dict] = []
    t0 = time.time()
    rnd = 0
    try:
        while time.time() - t0 < seconds or rnd == 0:
            for c in cpus:
                rows.append(
                    dict(phase="single", round=rnd, cpu=c, t_s=round(time.time() - t0, 3), work_s=_on(c, loops))
                )
            rnd += 1
    finally:
        os.sched_setaffinity(0, old)
    ctx = mp.get_context("fork")
    for k in range(all_rounds):
        q = ctx.Queue()
        procs = [ctx.Process(target=_child, args=(c, loops, q)) for c in cpus]
        for p in procs:
            p.start()
        got = [q.get(timeout=120) for _ in procs]
        for p in procs:
            p.join()
        t = round(time.time() - t0, 3)
        rows += [dict(phase="all", round=k, cpu=c, t_s=t, work_s=w) for c, w in sorted(got)]
    return rows


def read(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        out = []
        for r in csv.DictReader(f):
            # the first device run (2026-12-06) named the phase with every CPU at once "all16"
            phase = "all" if r["phase"].startswith("all") else r["phase"]
            out.append(
                dict(
                    phase=phase,
                    round=int(r["round"]),
                    cpu=int(r["cpu"]),
                    t_s=float(r["t_s"]),
                    work_s=float(r["work_s"]),
                )
            )
    return out


def write(rows: Sequence[Mapping], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{r[k]:.6f}" if k == "work_s" else r[k]) for k in COLUMNS})


def corr(a: Sequence[float], b: Sequence[float]) -> float:
    """Pearson's correlation (``statistics.correlation``); nan when either side does not vary."""
    try:
        return statistics.correlation(a, b)
    except statistics.StatisticsError:
        return math.nan


def bins(rows: Sequence[Mapping], width: float) -> list[tuple[float, int, float]]:
    """``single`` samples by time bin: (bin start s, samples, median work s)."""
    by: dict[int, list[float]] = {}
    for r in rows:
        if r["phase"] == "single":
            by.setdefault(int(r["t_s"] // width), []).append(r["work_s"])
    return [(k * width, len(v), statistics.median(v)) for k, v in sorted(by.items())]


def summary(rows: Sequence[Mapping], width: float = 10.0) -> dict:
    """The numbers the tables print: the fastest sample, the share of slow samples, the bins, per CPU medians, the
    median correlation of two CPUs' times across rounds (one CPU at a time: < ~0.3 says spells are short or a CPU's
    own), the correlation of each CPU's bin medians with the others' (near 1: spells every CPU shares)."""
    single = [r for r in rows if r["phase"] == "single"]
    if not single:
        raise ValueError("no single-CPU samples")
    fastest = min(r["work_s"] for r in single)
    cpus = sorted({r["cpu"] for r in single})
    by_round: dict[int, dict[int, float]] = {}
    for r in single:
        by_round.setdefault(r["round"], {})[r["cpu"]] = r["work_s"]
    full = [k for k, v in sorted(by_round.items()) if len(v) == len(cpus)]
    pair = []
    if len(full) >= 3:
        for i, a in enumerate(cpus):
            for b in cpus[i + 1 :]:
                c = corr([by_round[k][a] for k in full], [by_round[k][b] for k in full])
                if not math.isnan(c):
                    pair.append(c)
    per_cpu_bins: dict[int, dict[int, list[float]]] = {}
    for r in single:
        per_cpu_bins.setdefault(r["cpu"], {}).setdefault(int(r["t_s"] // width), []).append(r["work_s"])
    shared = []
    keys = sorted({k for v in per_cpu_bins.values() for k in v})
    if len(keys) >= 3 and len(cpus) >= 2:
        med = {c: [statistics.median(per_cpu_bins[c].get(k, [math.nan])) for k in keys] for c in cpus}
        for c in cpus:
            rest = [statistics.median([med[o][i] for o in cpus if o != c]) for i in range(len(keys))]
            ok = [(x, y) for x, y in zip(med[c], rest) if not (math.isnan(x) or math.isnan(y))]
            if len(ok) >= 3:
                v = corr([x for x, _ in ok], [y for _, y in ok])
                if not math.isnan(v):
                    shared.append(v)
    every = [r for r in rows if r["phase"] == "all"]
    return dict(
        fastest_s=fastest,
        samples=len(single),
        cpus=cpus,
        slow_share=sum(r["work_s"] > SLOW * fastest for r in single) / len(single),
        median_s=statistics.median(r["work_s"] for r in single),
        bins=bins(rows, width),
        per_cpu={c: sorted(r["work_s"] for r in single if r["cpu"] == c) for c in cpus},
        pair_corr=statistics.median(pair) if pair else math.nan,
        bin_corr=statistics.median(shared) if shared else math.nan,
        all_median_s=statistics.median(r["work_s"] for r in every) if every else math.nan,
    )


def report(rows: Sequence[Mapping], width: float = 10.0) -> str:
    s = summary(rows, width)
    f = s["fastest_s"]
    out = [
        f"{s['samples']} samples on {len(s['cpus'])} CPUs; fastest {f * 1e3:.2f} ms, median {s['median_s'] * 1e3:.2f} ms "
        f"(x{s['median_s'] / f:.2f}); slower than {SLOW}x the fastest: {s['slow_share']:.0%}",
        f"two CPUs' times across rounds, median correlation: {s['pair_corr']:.2f}; a CPU's {width:g}-s bin medians "
        f"against the other CPUs': {s['bin_corr']:.2f} (near 1: slow spells every CPU shares)",
    ]
    if not math.isnan(s["all_median_s"]):
        out.append(f"every CPU busy at once: median {s['all_median_s'] * 1e3:.2f} ms (x{s['all_median_s'] / f:.2f})")
    out += ["", "| from s | samples | median ms | x fastest |", "|---|---|---|---|"]
    out += [f"| {t:g} | {n} | {m * 1e3:.2f} | {m / f:.2f} |" for t, n, m in s["bins"]]
    out += ["", "| cpu | median ms | fastest ms | slowest ms |", "|---|---|---|---|"]
    out += [
        f"| {c} | {statistics.median(v) * 1e3:.2f} | {v[0] * 1e3:.2f} | {v[-1] * 1e3:.2f} |"
        for c, v in s["per_cpu"].items()
    ]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    p.add_argument("--seconds", type=float, default=200.0, help="how long the one-CPU-at-a-time rounds go on")
    p.add_argument("--out", type=Path, help="folder for host_speed.csv (nothing written without it)")
    p.add_argument("--read", type=Path, help="no measuring: the tables of this CSV")
    p.add_argument("--bin-s", type=float, default=10.0, help="the tables' time bin (s)")
    p.add_argument(
        "--gate",
        type=float,
        help="exit 5 when the median sample is over this many times the fastest (a host too slow for two runs that "
        "agree within 1 %%: the device runner's LIVE_HOST_GATE)",
    )
    p.add_argument("--loops", type=int, default=LOOPS, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if not (args.seconds > 0 and math.isfinite(args.seconds)):
        p.error(f"--seconds must be > 0 (got {args.seconds})")
    if not (args.bin_s > 0 and math.isfinite(args.bin_s)):
        p.error(f"--bin-s must be > 0 (got {args.bin_s})")
    if args.gate is not None and not (args.gate > 1 and math.isfinite(args.gate)):
        p.error(f"--gate must be a factor > 1 (got {args.gate})")
    if args.read is not None:
        if not args.read.is_file():
            p.error(f"--read {args.read}: no such file")
        rows = read(args.read)
    else:
        if not hasattr(os, "sched_setaffinity"):
            p.error("this platform cannot move a process between CPUs (os.sched_setaffinity)")
        if args.out is not None and args.out.exists() and not args.out.is_dir():
            p.error(f"--out {args.out} is a file")
        rows = measure(args.seconds, args.loops)
        if args.out is not None:
            write(rows, args.out / "host_speed.csv")
            print(f"[file: {args.out / 'host_speed.csv'}]")
    try:
        print(report(rows, args.bin_s))
        s = summary(rows, args.bin_s)
    except ValueError as e:
        print(f"host_speed: {e}", file=sys.stderr)
        return 1
    x = s["median_s"] / s["fastest_s"]
    if args.gate is not None and x > args.gate:
        print(
            f"GATE: the median sample is x{x:.2f} of the fastest, over --gate {args.gate:g}: this host is too slow now"
        )
        return 5
    return 0


if __name__ == "__main__":
    sys.exit(main())
