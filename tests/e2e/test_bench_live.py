"""The live-modes decode-cycle benchmark (benchmarks/bench_live.py, _live_stats.py, _live_probes.py) on the CPU.

Pure parts: the palindromes and the sequential order, the statistics with Engines as the unit (per-Engine medians,
the Engine-pair interval from each batch's own pairs, "equal" only with every pair in the band, the verdict words,
the health checks, the whole-Engine slow-state rule and the verdict without flagged Engines), the descriptive
bootstrap intervals, slow generates, the one-row-per-key files (and the duplicated rows that once reached
benchmarks/results/latest/cycle_wall-nvidia-h200.csv), the probes and the per-Engine start probe degrading to
"absent". The whole driver with fake Engines in worker processes (issue 51's protocol): by default 3 Engines per mode
one alive at a time, or alive at once in palindromes; warm-ups then gc frozen in every Engine, probes in every row, a
run header, the start order reversed, two runs combined, the other arms; md5 check, plugin engagement, a failing
Engine, the budget stop; bad input refused at the start in one line with nothing written, a dry run never touching
the tracked results, a run that times nothing failing, SIGINT; the device runner's two steps."""

from __future__ import annotations

import csv
import importlib.util
import json
import math
import os
import random
import re
import shutil
import signal
import statistics
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))  # bench_live imports its siblings _timing, _live_*, bench_cycle
_spec = importlib.util.spec_from_file_location("bench_live", ROOT / "benchmarks/bench_live.py")
live = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(live)
sys.path.remove(str(ROOT / "benchmarks"))
stats = sys.modules["_live_stats"]
probes = sys.modules["_live_probes"]

MODES = ["stock", "plugin", "zero-copy"]
PROTOCOL = ["stock", "zero-copy"]


# ---------------------------------------------------------------- pure parts


def test_the_order_is_palindromes_and_balanced():
    order = live.balanced_order(MODES, 12)
    assert order[:9] == ["stock", "plugin", "zero-copy", "zero-copy", "plugin", "stock", "stock", "plugin", "zero-copy"]
    assert Counter(order) == dict.fromkeys(MODES, 12)
    mean_pos = {m: sum(i for i, x in enumerate(order) if x == m) / 12 for m in MODES}
    assert len(set(mean_pos.values())) == 1, mean_pos
    for i0 in range(0, len(order), 6):  # every palindrome alone is balanced: a budget stop between them keeps it
        assert Counter(order[i0 : i0 + 6]) == dict.fromkeys(MODES, 2)
    with pytest.raises(ValueError):
        live.balanced_order(MODES, 3)


def test_the_sequential_order_is_s1_z1_z2_s2():
    assert live.sequential_order(PROTOCOL, 2) == [("stock", 1), ("zero-copy", 1), ("zero-copy", 2), ("stock", 2)]
    assert live.sequential_order(["zero-copy", "stock"], 1) == [("zero-copy", 1), ("stock", 1)]


def _samples(center: float, n: int, seed: int, sd: float = 0.02) -> list[float]:
    rng = random.Random(seed)
    return [center * (1 + rng.gauss(0, sd)) for _ in range(n)]


def test_the_verdict_is_one_of_four_words():
    v = stats.verdict
    assert v(0.90, 0.98) == "faster" and v(1.02, 1.1) == "slower"
    assert v(0.995, 1.008) == "equal within +-1 %" == stats.EQUAL
    assert v(0.991, 0.999) == stats.EQUAL  # all of it inside the band: any difference is below 1 %
    assert v(0.985, 0.999) == "faster"  # below 1 and leaving the band
    assert v(0.97, 1.02) == "inconclusive"  # through 1, wider than the band: no evidence, not "no difference"
    assert v(None, None) == "inconclusive" and v(0.9, math.inf) == "inconclusive"
    assert {v(a, b) for a, b in ((0.9, 0.98), (1.02, 1.1), (0.995, 1.005), (0.9, 1.1))} == set(stats.VERDICTS)


def test_t_quantiles():
    assert stats.t975(1) == 12.706 and stats.t975(3) == 3.182 and stats.t975(12) == 2.179
    assert abs(stats.t975(60) - 2.000) < 0.003 and abs(stats.t975(1000) - 1.962) < 0.003
    with pytest.raises(ValueError):
        stats.t975(0)


def test_robust_cv_ignores_one_outlier():
    xs = [1.0, 1.01, 0.99, 1.0, 1.02, 0.98, 1.0, 3.0]
    assert 0.005 < stats.robust_cv(xs) < 0.02 < statistics_cv(xs)


def statistics_cv(xs):
    import statistics

    return statistics.stdev(xs) / statistics.mean(xs)


def _rows(walls: dict, run: str = "", model: str = "m", extra: dict | None = None) -> list[dict]:
    """Generate rows from ``{(mode, engine[, batch]): [walls]}`` (batch 1 where not given)."""
    out = []
    for key, ws in walls.items():
        m, e, b = (*key, 1) if len(key) == 2 else key
        for i, w in enumerate(ws):
            row = {"model": model, "run": run, "batch": b, "mode": m, "engine": e, "generate": i + 1, "wall_s": w}
            out.append({**row, "rss_mb": 1, "frozen": 1, "gc_gen2": 0, **(extra or {})})
    return out


def test_a_batch_rests_on_its_own_pairs():
    # two pairs per batch at 4 batches: d = log(0.95) +- 0.005; each batch its own SD, 1 df (never pooled: b24)
    d = {b: [math.log(0.95) + 0.005, math.log(0.95) - 0.005] for b in (1, 16, 64, 128)}
    iv = stats.pair_intervals(d)
    for b in d:
        assert iv[b]["df"] == 1 and iv[b]["sd_from"] == "batch" and iv[b]["pairs"] == 2
        assert iv[b]["lo"] < 0.95 < iv[b]["hi"] and abs(iv[b]["ratio"] - 0.95) < 1e-9
        half = stats.t975(1) * math.sqrt(0.005**2 * 2 / 2)  # the batch's own variance of +-0.005: 2 x 0.005^2 / 1
        assert abs(math.log(iv[b]["hi"]) - math.log(0.95) - half) < 1e-9
    # one pair: no interval from other batches' SD (b25), inconclusive and said why
    one = stats.pair_intervals({16: [math.log(0.9)], 64: [math.log(0.9) + x for x in (-1e-4, 0, 1e-4)]})
    assert one[16]["lo"] is None and one[16]["df"] == 0 and one[16]["verdict"] == "inconclusive"
    assert "one pair" in one[16]["why"]
    assert one[64]["verdict"] == "faster" and one[64]["df"] == 2 and one[64]["why"] == ""
    # four pairs a batch (two runs), one batch far noisier: it alone is inconclusive
    rng = random.Random(1)
    d4 = {b: [math.log(0.97) + rng.gauss(0, 0.002) for _ in range(4)] for b in (1, 16, 64)}
    d4[128] = [math.log(0.97) + x for x in (-0.05, 0.05, -0.04, 0.04)]
    iv4 = stats.pair_intervals(d4)
    assert all(v["sd_from"] == "batch" and v["df"] == 3 for v in iv4.values())
    assert iv4[1]["verdict"] == "faster" and iv4[128]["verdict"] == "inconclusive"
    assert "through 1" in iv4[128]["why"]


def test_equal_needs_every_pair_of_the_batch_within_the_band():
    # b24: a batch whose two pairs sit 3 % either side of 1, with many quiet batches, once read "equal within +-1 %"
    quiet = {b: [x * 1e-4 for x in (-1, 1, -1, 1)] for b in range(2, 12)}
    iv = stats.pair_intervals({1: [math.log(1.03), math.log(1 / 1.03)], **quiet})
    assert iv[1]["verdict"] == "inconclusive" and iv[2]["verdict"] == stats.EQUAL
    # many pairs: the interval within the band, one pair outside: not equal, and said which
    ds = [0.0] * 40 + [math.log(1.02)]
    iv = stats.pair_intervals({1: ds})
    assert iv[1]["lo"] >= 0.99 and iv[1]["hi"] <= 1.01
    assert iv[1]["verdict"] == "inconclusive" and "outside" in iv[1]["why"] and "1.0200" in iv[1]["why"]
    iv = stats.pair_intervals({1: [0.0] * 40 + [math.log(1.005)]})
    assert iv[1]["verdict"] == stats.EQUAL


def test_engines_are_the_unit_one_slow_engine_makes_it_inconclusive():
    # zero-copy's Engine 2 in a slow host state: over generates the pooled medians still say "faster",
    # over Engine pairs the two pairs disagree (0.9 and 1.2): inconclusive
    base = {("stock", 1): _samples(1.0, 16, 1, 0.005), ("stock", 2): _samples(1.0, 16, 2, 0.005)}
    rows = _rows({**base, ("zero-copy", 1): _samples(0.9, 16, 3, 0.005), ("zero-copy", 2): _samples(1.2, 16, 4, 0.005)})
    a = stats.analyse(rows)[("m", 1, "zero-copy")]
    assert a["pairs"] == 2 and a["verdict"] == "inconclusive"
    pr = dict(x.split(":") for x in a["pair_ratios"].split(";"))
    assert abs(float(pr["1"]) - 0.9) < 0.01 and abs(float(pr["2"]) - 1.2) < 0.015
    good = _rows({**base, ("zero-copy", 1): _samples(0.9, 16, 3, 0.005), ("zero-copy", 2): _samples(0.9, 16, 4, 0.005)})
    good += _rows({(m, e, 16): _samples(c, 16, 10 + e) for (m, e), c in {("stock", 1): 1, ("stock", 2): 1,
                   ("zero-copy", 1): 0.9, ("zero-copy", 2): 0.9}.items()})  # fmt: skip
    a = stats.analyse(good)
    assert a[("m", 1, "zero-copy")]["verdict"] == "faster" and a[("m", 1, "zero-copy")]["df"] == 1


def _slow_run(name, z2=1.15, engines=2, extra=None):
    """One run: stock and zero-copy, ``engines`` each, at batches 1 and 64; zero-copy's Engine 2 ``z2`` x slower."""
    w = {}
    for e in range(1, engines + 1):
        for b in (1, 64):
            w[("stock", e, b)] = _samples(1.0, 16, 3 * e + b)
            w[("zero-copy", e, b)] = _samples(0.95 * (z2 if e == 2 else 1.0), 16, 5 * e + b)
    rows = _rows(w, run=name)
    for r in rows:  # the probes: zero-copy e2's scheduler on another CPU, on-CPU time following its wall
        slow = r["mode"] == "zero-copy" and r["engine"] == 2
        r.update(sched_cpu_ms=1000 * r["wall_s"], sched_wait_ms=0.01, steal_ms=0, sm_mhz=1980,
                 sched_cpu_last=15 if slow else 3, **(extra or {}))  # fmt: skip
    return rows


def test_a_whole_engine_slow_state_is_flagged_with_its_probes():
    # run B of 12-04: zero-copy e2 > 5 % slower than its mode's other Engine at every batch
    got = stats.slow_state(_slow_run("B"))
    assert set(got) == {("m", "B", "zero-copy", 2)}, got  # of two Engines only the slower one
    f = got[("m", "B", "zero-copy", 2)]
    assert all(0.13 < off < 0.17 for off in f["off"].values()) and set(f["off"]) == {1, 64}
    assert "sched_cpu_ms" in f["probes"] and "sched_cpu_last" in f["probes"] and "sm_mhz" not in f["probes"]
    # 4 % off, or off at one batch only: not flagged
    assert stats.slow_state(_slow_run("B", z2=1.04)) == {}
    rows = _slow_run("B")
    for r in rows:
        if r["mode"] == "zero-copy" and r["engine"] == 2 and r["batch"] == 64:
            r["wall_s"] = r["wall_s"] / 1.15
    assert stats.slow_state(rows) == {}
    # three Engines: a fast one is flagged too (more than 5 % off either way), the other two not
    three = _slow_run("C", z2=0.9, engines=3)
    assert set(stats.slow_state(three)) == {("m", "C", "zero-copy", 2)}
    # in the health checks of every batch of its run
    h = stats.health(_slow_run("B"))
    assert any("zero-copy-e2 whole-Engine slow state" in x for x in h[("m", "B", 64, "zero-copy")])


def test_a_flagged_engine_says_whether_its_gpu_work_moved_with_its_wall():
    # --gpu-busy: the same GPU busy time on every Engine -> the host slowed zero-copy e2; 15 % more -> its GPU work
    host = _slow_run("B")
    for r in host:
        r[stats.BUSY_COL] = 0.5 if r["mode"] == "stock" else 0.45
    probes = stats.slow_state(host)[("m", "B", "zero-copy", 2)]["probes"]
    assert "gpu_busy_s x1 (its GPU work unmoved: the host slowed it)" in probes and "sched_cpu_ms" in probes
    gpu = _slow_run("B")
    for r in gpu:
        r[stats.BUSY_COL] = 0.45 * (1.15 if (r["mode"], r["engine"]) == ("zero-copy", 2) else 1.0)
    probes = stats.slow_state(gpu)[("m", "B", "zero-copy", 2)]["probes"]
    assert "gpu_busy_s x1.15" in probes and "unmoved" not in probes
    # without --gpu-busy nothing is said of it
    assert "gpu_busy" not in stats.slow_state(_slow_run("B"))[("m", "B", "zero-copy", 2)]["probes"]


def test_the_verdict_is_given_with_and_without_flagged_engines():
    rows = _slow_run("A", z2=1.0) + _slow_run("B", z2=1.15)
    table = {(r["batch"], r["mode"]): r for r in live.combine(rows)}
    z = table[(64, "zero-copy")]
    assert z["flagged"] == "B/zero-copy-e2" and z["pairs"] == 4 and z["pairs_wo"] == 3
    assert float(z["ratio"]) > float(z["ratio_wo"]) and abs(float(z["ratio_wo"]) - 0.95) < 0.01
    assert z["verdict_wo"] == "faster" and z["verdict"] in live.VERDICTS
    text = live.combined_table(live.combine(rows))
    assert "B/zero-copy-e2" in text and "without flagged" in text
    # each run's own summary: the flagged Engine named on its mode's rows, the run's verdict without its pair
    summ = {(r["run"], r["batch"], r["mode"]): r for r in live.summarize(rows, resamples=10)}
    zb, za = summ[("B", 64, "zero-copy")], summ[("A", 64, "zero-copy")]
    assert zb["flagged"] == "zero-copy-e2" and za["flagged"] == "" and abs(float(zb["ratio_wo"]) - 0.95) < 0.01
    assert "whole-Engine slow state" in zb["health"] and zb["verdict_wo"].startswith("inconclusive")  # one pair left
    # a flagged stock Engine is named on the mode's rows too (its pair is the one left out)
    slow_stock = _slow_run("C", z2=1.0)
    for r in slow_stock:
        if r["mode"] == "stock" and r["engine"] == 1:
            r["wall_s"] *= 1.2
    summ = {(r["batch"], r["mode"]): r for r in live.summarize(slow_stock, resamples=10)}
    assert summ[(64, "zero-copy")]["flagged"] == "stock-e1" == summ[(64, "stock")]["flagged"]
    assert live.combine(slow_stock)[0]["flagged"] == "C/stock-e1"
    # nothing flagged: the two verdicts are the same, and said so
    calm = {(r["batch"], r["mode"]): r for r in live.combine(_slow_run("A", z2=1.0))}
    assert (
        calm[(64, "zero-copy")]["flagged"] == ""
        and calm[(64, "zero-copy")]["verdict_wo"] == calm[(64, "zero-copy")]["verdict"]
    )


def test_two_runs_combine_their_pairs():
    def run(name, c):
        w = {("stock", e, b): _samples(1.0, 16, e + b) for e in (1, 2) for b in (1, 64)}
        w.update({("zero-copy", e, b): _samples(c, 16, 7 * e + b) for e in (1, 2) for b in (1, 64)})
        return _rows(w, run=name)

    rows = run("A", 0.95) + run("B", 0.95)
    table = {(r["batch"], r["mode"]): r for r in live.combine(rows)}
    z = table[(64, "zero-copy")]
    assert z["runs"] == "A;B" and z["pairs"] == 4 and z["df"] == 3 and z["verdict"] == "faster"
    assert float(z["ci_lo"]) < 0.95 < float(z["ci_hi"]) < 1
    assert set(dict(x.split(":") for x in z["run_ratios"].split(";"))) == {"A", "B"}
    assert 1 <= z["runs_agree"] < 1.03 and z["health"] != ""
    assert "A/1:" in z["pair_ratios"] and "B/2:" in z["pair_ratios"]
    assert "| 64 | zero-copy | A;B | 4 | 3 |" in live.combined_table(live.combine(rows))


def _opts(**kw) -> dict:
    """A generate row's ``options`` column: the protocol's workload, ``kw`` changed."""
    o = {"max_new_tokens": 128, "engine_args": ["tp_size=1"], "arm_engine_args": {}, "dry_run": False, "seed": 0}
    return {"options": json.dumps({**o, "radix_cache": False, **kw}, sort_keys=True)}


def test_runs_with_the_radix_cache_on_and_off_are_never_pooled(tmp_path, capsys):
    """The radix cache on is another launch (issue 50 item 5): its pairs get their own verdict row, and combining it
    into a tree leaves the radix-off verdicts of the same model in place (they were replaced: one key per model)."""

    def run(name, c, radix):
        w = {("stock", e, 64): _samples(1.0, 8, e) for e in (1, 2)}
        w.update({("zero-copy", e, 64): _samples(c, 8, 7 * e) for e in (1, 2)})
        return _rows(w, run=name, extra={**_opts(radix_cache=radix), "gpu": "cpu"})

    rows = run("A", 0.95, False) + run("B", 0.95, False) + run("C", 1.2, True) + run("D", 1.2, True)
    got = {(r["radix_cache"], r["mode"]): r for r in live.combine(rows)}
    assert set(got) == {("off", "zero-copy"), ("on", "zero-copy")}
    off, on = got[("off", "zero-copy")], got[("on", "zero-copy")]
    assert (off["runs"], off["pairs"], on["runs"], on["pairs"]) == ("A;B", 4, "C;D", 4)
    assert 0.93 < float(off["ratio"]) < 0.97 and 1.17 < float(on["ratio"]) < 1.23  # a pooled ratio would be ~1.07
    # the files: radix off first, then radix on into the same tree; both kept, the second combine replacing its own
    fields = list(rows[0])
    f_off, f_on = tmp_path / "off.csv", tmp_path / "on.csv"
    live.write_csv(f_off, [r for r in rows if r["run"] in "AB"], fields)
    live.write_csv(f_on, [r for r in rows if r["run"] in "CD"], fields)
    out = ["--out", str(tmp_path / "t")]
    combined = tmp_path / "t" / "latest" / "cycle_live_combined-cpu.csv"
    assert live.main(["--combine", str(f_off), *out]) == 0 and live.main(["--combine", str(f_on), *out]) == 0
    assert live.main(["--combine", str(f_on), *out]) == 0
    kept = live.read_csv(combined)
    assert sorted((r["radix_cache"], r["runs"]) for r in kept) == [("off", "A;B"), ("on", "C;D")]
    assert "| m | on | 64 | zero-copy | C;D |" in capsys.readouterr().out
    # a combined file from before the radix column: its rows are radix off, replaced by a radix-off combine
    legacy = [{k: v for k, v in r.items() if k != "radix_cache"} for r in kept if r["radix_cache"] == "off"]
    live.write_csv(combined, legacy, [c for c in live.COMBINED_FIELDS if c != "radix_cache"])
    assert live.main(["--combine", str(f_on), *out]) == 0
    assert sorted((r["radix_cache"], r["runs"]) for r in live.read_csv(combined)) == [("off", "A;B"), ("on", "C;D")]
    assert live.main(["--combine", str(f_off), *out]) == 0
    assert sorted((r["radix_cache"], r["runs"]) for r in live.read_csv(combined)) == [("off", "A;B"), ("on", "C;D")]


def test_combine_refuses_runs_of_different_work(tmp_path, capsys):
    """Two runs of one model and radix setting pool their pairs only when they did the same work: 64 tokens against
    128, other Engine keywords, another arm, fake Engines or other prompts measure different things (the 12-04 rows
    of 64 tokens sit in the same file as the protocol's runs). One line naming the option and the runs; ``--runs``
    picks the runs of one workload."""

    def run(name, **kw):
        w = {(m, e, 1): _samples(1.0, 6, e) for m in PROTOCOL for e in (1, 2)}
        return _rows(w, run=name, extra=_opts(**kw))

    assert live.unlike_runs(run("A") + run("B") + run("C", radix_cache=True, max_new_tokens=64)) == []
    # Engine keywords in another order, or another arm's keywords: the same work for these modes
    same = run("A", engine_args=["a=1", "b=2"]) + run("B", engine_args=["b=2", "a=1"], arm_engine_args={"x": {"k": 1}})
    assert live.unlike_runs(same) == []
    for kw, what in (
        ({"max_new_tokens": 64}, "max_new_tokens"),
        ({"engine_args": ["tp_size=2"]}, "engine_args"),
        ({"arm_engine_args": {"zero-copy": {"x": 1}}}, "arm_engine_args"),
        ({"dry_run": True}, "dry_run"),
        ({"seed": 1}, "seed"),
    ):
        rows = run("A") + run("B", **kw)
        lines = live.unlike_runs(rows)
        assert lines and all(what in x for x in lines), (kw, lines)
        path = tmp_path / f"mixed-{what}.csv"
        live.write_csv(path, rows, list(rows[0]))
        out = tmp_path / f"o-{what}"
        assert live.main(["--combine", str(path), "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert what in err and "A: " in err and "B: " in err and len(err.splitlines()) == 1, err
        assert not out.exists()  # nothing written
        assert live.main(["--combine", str(path), "--runs", "B", "--out", str(out)]) == 0
        capsys.readouterr()
    # another card: a lent H100's run beside an H200's is another measurement (audit 2026-12-05)
    cards = run("A") + [dict(r, gpu="NVIDIA H100 80GB HBM3") for r in run("B")]
    lines = live.unlike_runs([dict(r, gpu=r.get("gpu") or "NVIDIA H200") for r in cards])
    assert lines and all("gpu" in x and "H100" in x and "H200" in x for x in lines), lines


def test_another_arm_sits_beside_zero_copy_in_the_combined_verdicts(tmp_path, capsys):
    """Issue 51 item 6's arms run as their own protocol (``--modes stock,replayssm``): combined with zero-copy's runs
    or after them into one tree, both arms' verdicts stay (a combination replaced every row of its model and radix
    setting, and the arms' keywords made their runs "different work")."""
    arm = {"replayssm": {"enable_linear_replayssm_spec": True}}

    def run(name, mode, c):
        w = {("stock", e, 64): _samples(1.0, 8, e) for e in (1, 2)}
        w.update({(mode, e, 64): _samples(c, 8, 7 * e) for e in (1, 2)})
        opts = _opts(radix_cache=True, arm_engine_args=arm if mode == "replayssm" else {})
        return _rows(w, run=name, extra={**opts, "gpu": "cpu"})

    zc, rs = (
        run("A", "zero-copy", 0.95) + run("B", "zero-copy", 0.95),
        run("C", "replayssm", 0.97) + run("D", "replayssm", 0.97),
    )
    got = {(r["mode"], r["runs"]) for r in live.combine(zc + rs)}
    assert got == {("zero-copy", "A;B"), ("replayssm", "C;D")} and live.unlike_runs(zc + rs) == []
    f_zc, f_rs = tmp_path / "zc.csv", tmp_path / "rs.csv"
    live.write_csv(f_zc, zc, list(zc[0]))
    live.write_csv(f_rs, rs, list(rs[0]))
    out = ["--out", str(tmp_path / "t")]
    assert live.main(["--combine", str(f_zc), *out]) == 0 and live.main(["--combine", str(f_rs), *out]) == 0
    kept = live.read_csv(tmp_path / "t" / "latest" / "cycle_live_combined-cpu.csv")
    assert sorted((r["mode"], r["runs"]) for r in kept) == [("replayssm", "C;D"), ("zero-copy", "A;B")]
    capsys.readouterr()


def test_combine_refuses_a_run_that_failed_its_own_checks(tmp_path, capsys):
    """A run that exited 1 (zero-copy not served with a track set, an md5 mismatch)
    or was cut before its checks did not measure what it says: its pairs are not pooled (they were: the checks'
    verdict was only printed). Its exit status is on every row and in the runs file; rows from before the column
    combine as before."""
    rc, gens, _ = _protocol(tmp_path, "--run", "A", "--radix-cache", out="a")
    assert rc == 0
    rows = live.read_csv(gens)
    assert {r["run_status"] for r in rows} == {"0"}
    runs = json.loads((tmp_path / "a" / "latest" / "cycle_live_runs-cpu.json").read_text())
    assert runs["A"]["status"] == 0 and runs["A"]["problems"] == []
    fake = {"delay_s": 0.01, "factor": {"zero-copy": 0.5}, "break": "zero-copy"}  # its outputs differ: exit 1
    rc_b, gens_b, _ = _protocol(
        tmp_path, "--run", "B", "--radix-cache", "--modes", "zero-copy,stock", out="b", fake=fake
    )
    assert rc_b == 1 and "PROBLEMS" in capsys.readouterr().out
    assert json.loads((tmp_path / "b" / "latest" / "cycle_live_runs-cpu.json").read_text())["B"]["problems"]
    assert {r["run_status"] for r in live.read_csv(gens_b)} == {"1"}
    assert live.main(["--combine", str(gens), str(gens_b), "--out", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err
    assert "run 'B' of qwen3.5-0.8b failed its own checks (exit 1" in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "c").exists()
    assert live.main(["--combine", str(gens), str(gens_b), "--runs", "A", "--out", str(tmp_path / "c")]) == 0
    # cut before its checks (the wall): refused too; no column at all (the 12-04 runs): combined as before
    cut = [dict(r, run_status=live.RUNNING) for r in live.read_csv(gens_b)]
    live.write_csv(gens_b, cut, live.GEN_FIELDS)
    assert live.main(["--combine", str(gens), str(gens_b), "--out", str(tmp_path / "d")]) == 2
    assert "was cut before its checks" in capsys.readouterr().err
    old = [{k: v for k, v in r.items() if k != "run_status"} for r in live.read_csv(gens_b)]
    live.write_csv(gens_b, old, [f for f in live.GEN_FIELDS if f != "run_status"])
    assert live.main(["--combine", str(gens), str(gens_b), "--out", str(tmp_path / "d")]) == 0


def test_health_checks_name_what_failed():
    calm = {("stock", 1): [1.0, 1.001, 0.999, 1.0] * 4, ("stock", 2): [1.005, 1.006, 1.004, 1.005] * 4}
    assert stats.health(_rows(calm)) == {("m", "", 1, "stock"): []}
    noisy = {("stock", 1): [1.0, 1.05, 0.95, 1.0] * 4, ("stock", 2): [1.1] * 16}
    bad = stats.health(_rows(noisy))[("m", "", 1, "stock")]
    assert any("stock-e1 robust CV" in b for b in bad) and any("Engines of stock differ by 10.0 %" in b for b in bad)
    switch = {("stock", 1): [1.0] * 8 + [1.3] * 8}
    assert any("max/min 1.300" in b for b in stats.health(_rows(switch))[("m", "", 1, "stock")])
    rows = _rows({("stock", 1): [1.0] * 4})
    rows[1].update(gc_gen2=1)
    rows[2].update(frozen=0)
    bad = stats.health(rows)[("m", "", 1, "stock")]
    assert any("gen-2 gc in 1 timed" in b for b in bad) and any("not frozen" in b for b in bad)


def test_the_generate_level_intervals_stay_descriptive():
    stock, zc = _samples(1.0, 12, 1), _samples(0.9, 12, 2)
    ratio, lo, hi = live.bootstrap_ratio(zc, stock, resamples=2000, seed=0)
    assert lo <= 0.9 <= hi and lo <= ratio <= hi and hi < 1
    assert live.bootstrap_ratio(zc, stock, seed=0) == (ratio, lo, hi)  # a fixed seed: the same interval
    with pytest.raises(ValueError):
        live.bootstrap_ratio(zc, stock, resamples=0)
    fast, slow, ref = _samples(0.9, 20, 5), _samples(1.2, 4, 6), [_samples(1.0, 12, 7), _samples(1.0, 12, 8)]
    hr, hlo, hhi = live.hier_bootstrap_ratio([fast, slow], ref, seed=0)
    assert hlo < 1 < hhi and live.hier_bootstrap_ratio([fast, slow], ref, seed=0) == (hr, hlo, hhi)


def test_slow_generates_are_above_1_3_times_their_median():
    assert live.slow_flags([1.0, 1.0, 1.0, 1.29, 1.31]) == [False, False, False, False, True]
    rows = _rows({("stock", 1): [1.0, 1.0, 2.0, 1.0], ("plugin", 1): [1.0] * 4})
    rows[2]["gc_gen2"] = 1
    live.mark_slow(rows)
    assert [r["slow"] for r in rows[:4]] == [0, 0, 1, 0]
    assert live.slow_by_mode(rows) == {"stock": (1, 4), "plugin": (0, 4)}
    s = {r["mode"]: r for r in live.summarize(rows)}
    assert s["stock"]["slow"] == 1 and s["stock"]["slow_with_gc2"] == 1 and s["stock"]["verdict"] == "base"
    assert s["plugin"]["verdict"] == "inconclusive" and s["plugin"]["pairs"] == 1  # one pair: no interval
    assert "gen-2 gc" in s["stock"]["health"]


def test_md5_must_be_one_and_equal_to_stocks():
    good = {(1, "stock"): {"a"}, (1, "plugin"): {"a"}, (1, "zero-copy"): {"a"}}
    assert live.md5_problems(good) == []
    assert "plugin" in live.md5_problems({**good, (1, "plugin"): {"b"}})[0]
    two = live.md5_problems({**good, (1, "zero-copy"): {"a", "b"}})  # two answers within one mode
    assert two == ["batch 1: zero-copy gave 2 different outputs over its timed generates"], two
    assert live.md5_problems({(1, "plugin"): {"a"}})  # no stock to compare with
    assert live.md5_problems({**good, (1, "no-spec"): {"c"}}) == []  # not an exact mode: told, not judged


def test_the_arms_change_only_their_engine_keywords():
    kw = {"model_path": "x", "speculative_algorithm": "NEXTN", "speculative_num_steps": 3, "sleep_on_idle": True}
    assert live.arm_kwargs(kw, "zero-copy") == kw and live.arm_kwargs(kw, "stock") == kw
    assert live.arm_kwargs(kw, "replayssm") == {**kw, "enable_linear_replayssm_spec": True}
    assert live.arm_kwargs(kw, "no-spec") == {"model_path": "x", "sleep_on_idle": True}
    assert live.MODES["replayssm"] == live.MODES["no-spec"] == live.MODES["stock"] == {"SGLANG_MAMBA_DEDUP": "0"}


def test_the_cpu_work_probe_runs_on_the_cpu_asked_and_gives_the_affinity_back():
    mine = sorted(os.sched_getaffinity(0))
    seen = []
    real = os.sched_setaffinity

    def spy(pid, cpus):
        seen.append(set(cpus))
        real(pid, cpus)

    os.sched_setaffinity = spy
    try:
        us = probes.cpu_work_us(mine[-1])
    finally:
        os.sched_setaffinity = real
    assert isinstance(us, float) and us > 0
    assert seen == [{mine[-1]}, set(mine)] and sorted(os.sched_getaffinity(0)) == mine
    more = probes.cpu_work_us(mine[0], loops=400_000)  # 8x the work: more on-CPU time
    assert more > us
    for bad in (None, probes.ABSENT, 10**6, "x"):  # no CPU, or one this machine lacks
        assert probes.cpu_work_us(bad) == probes.ABSENT
    assert sorted(os.sched_getaffinity(0)) == mine


def test_the_slow_generates_within_an_engine_are_compared_with_the_rest_probe_by_probe():
    # one Engine steps from 0.51 s to 0.74 s at one batch (the 12-05 H100), its power falls; the other is steady
    rows = []
    for w in [0.51] * 5 + [0.74] * 3:
        rows.append(dict(model="m", run="A", batch="128", mode="zero-copy", engine="3", wall_s=str(w),
                         power_w="380" if w < 0.6 else "290", sched_cpu_work_us="2000", steal_ms="absent"))  # fmt: skip
    rows += [  # the stock Engine's last generate 5 % over its median: not slow (the line is 10 %)
        dict(model="m", run="A", batch="128", mode="stock", engine="1", wall_s=w, power_w="300")
        for w in ["0.70"] * 7 + ["0.735"]
    ]
    text = stats.slow_within_engines(rows)
    assert text.startswith("generates > 1.1x their Engine's median at their batch: 3 of 16")
    assert "power_w 290 vs 330.8" in text and "sched_cpu_work_us 2000 vs 2000" in text and "steal_ms" not in text
    flat = [dict(r, wall_s="0.5") for r in rows]
    assert stats.slow_within_engines(flat) == "generates > 1.1x their Engine's median at their batch: 0 of 16"


def test_the_probes_read_proc_or_say_absent():
    import os as _os

    me = _os.getpid()
    a = probes.proc_snapshot(me)
    sum(i * i for i in range(300000))  # some CPU time
    b = probes.proc_snapshot(me)
    d = probes.proc_delta(a, b, "worker")
    assert set(d) == set(probes.WORKER_FIELDS)
    if a and a["cpu"] is not None:  # schedstat present on this kernel
        assert d["worker_cpu_ms"] > 0 and isinstance(d["worker_cpu_last"], int)
    assert probes.proc_snapshot(probes.ABSENT) is None
    assert set(probes.proc_delta(None, None, "sched").values()) == {"absent"}
    assert set(probes.cpu_delta(None, None).values()) == {"absent"}
    assert set(probes.gpu_delta(None, None).values()) == {"absent"}
    ct = probes.cpu_times()
    if ct:
        h = probes.cpu_delta(ct, probes.cpu_times(), sched_cpu=min(ct))
        assert h["steal_ms"] >= 0 and h["steal_sched_cpu_ms"] != "absent"
    snap = {"energy_mj": 1000, "sm_mhz": 1980, "mem_mhz": 2619, "power_w": 300.0, "temp_c": 40, "throttle": 0}
    g = probes.gpu_delta(snap, {**snap, "energy_mj": 3500, "throttle": 4})
    assert g["energy_j"] == 2.5 and g["throttle"] == "0x4" and g["sm_mhz"] == 1980
    gpu = probes.Gpu()
    assert gpu.ok or (gpu.snapshot() is None and gpu.processes() == "absent")  # no NVML / no GPU here: absent
    h = probes.run_header()
    assert h["kernel"] and h["nproc"] >= 1 and "lscpu" in h and "nvidia_smi" in h


# ---------------------------------------------------------------- one row per key


def test_the_start_probe_reads_a_scheduler_or_says_absent(tmp_path, monkeypatch):
    import subprocess

    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)"], env={**os.environ, "PYTHONHASHSEED": "7"}
    )
    try:
        monkeypatch.setenv("PATH", str(tmp_path))  # no py-spy
        got = probes.start_probe(child.pid)
        assert got["py_spy"] == "absent"
        if Path(f"/proc/{child.pid}/environ").exists():
            assert got["pythonhashseed"] == "7"
            assert got["affinity"] == live._span(sorted(os.sched_getaffinity(child.pid)))
        if (
            Path(f"/proc/{child.pid}/status").exists()
            and "Mems_allowed_list" in Path(f"/proc/{child.pid}/status").read_text()
        ):
            assert re.fullmatch(r"[0-9,-]+", got["mems_allowed"])
        spy = tmp_path / "py-spy"  # a stand-in py-spy on PATH: its dump is kept, cut to PYSPY_CHARS
        spy.write_text(
            f"#!{sys.executable}\nimport sys\nprint('Thread 1 (active): MainThread', *sys.argv[1:])\nprint('x' * 9000)\n"
        )
        spy.chmod(0o755)
        got = probes.start_probe(child.pid)
        assert got["py_spy"].startswith(f"Thread 1 (active): MainThread dump --pid {child.pid}")
        assert len(got["py_spy"]) == probes.PYSPY_CHARS
    finally:
        child.kill()
        child.wait()
    # no scheduler found, or one gone: every key absent
    assert set(probes.start_probe("absent").values()) == {"absent"}
    assert probes.start_probe(child.pid)["pythonhashseed"] == "absent"
    assert probes.numa_pages("7f00 default anon=3 N0=3 kernelpagesize_kB=4\n7f01 bind:1 N1=2 N0=1") == {
        "N0": 4,
        "N1": 2,
    }
    # SGLang's graph pools from get_server_info, absent where the release has none
    info = {"internal_states": [{"memory_usage": {"graph": {"decode": 0.51, "draft_decode": 0.12}}}]}
    assert live.graph_memory(info) == {"decode": 0.51, "draft_decode": 0.12}
    assert live.graph_memory({}) == "absent" and live.graph_memory({"internal_states": [{}]}) == "absent"


def test_the_old_cycle_wall_csv_had_duplicated_rows_and_the_check_rejects_them():
    path = ROOT / "benchmarks/results/latest/cycle_wall-nvidia-h200.csv"
    if not path.exists():
        pytest.skip("the old wall CSV is gone")
    rows = live.read_csv(path)
    key = ("model", "batch", "mode", "round")
    if live.duplicates(rows, key):  # the problem this benchmark's writer must never repeat
        with pytest.raises(ValueError, match="duplicated"):
            live.assert_unique(rows, key)
    # those rows doubled as the "other models" of a new file: kept once each, never twice
    merged = live.merge_rows(rows + rows, [], ["nobody"], key)
    assert not live.duplicates(merged, key)
    assert {tuple(r[c] for c in key) for r in merged} == {tuple(r[c] for c in key) for r in rows}


def test_new_rows_with_a_repeated_key_are_refused_and_nothing_is_written(tmp_path):
    row = {"model": "m", "batch": 1, "mode": "stock", "engine": 1, "generate": 1, "wall_s": 1.0}
    with pytest.raises(ValueError, match="duplicated"):
        live.write_results(tmp_path, "GPU X", ["m"], [row, dict(row)], [])
    assert not (tmp_path / "latest" / "cycle_generates-gpu-x.csv").exists()


def test_writing_again_replaces_the_models_rows(tmp_path):
    def rows(model, n, wall):
        return [
            {"model": model, "batch": 1, "mode": "stock", "engine": 1, "generate": g, "wall_s": wall}
            for g in range(1, n + 1)
        ]

    live.write_results(tmp_path, "GPU X", ["a"], rows("a", 3, 1.0), [])
    live.write_results(tmp_path, "GPU X", ["b"], rows("b", 2, 2.0), [])
    g, _ = live.write_results(tmp_path, "GPU X", ["a"], rows("a", 2, 3.0), [])  # a again: replaced, b kept
    got = live.read_csv(g)
    assert not live.duplicates(got, live.GEN_KEY)
    assert sorted((r["model"], r["generate"], r["wall_s"]) for r in got) == [
        ("a", "1", "3.0"),
        ("a", "2", "3.0"),
        ("b", "1", "2.0"),
        ("b", "2", "2.0"),
    ]


@pytest.mark.parametrize("name", ["cycle_generates-*.csv", "cycle_live-*.csv"])
def test_the_trees_live_files_have_one_row_per_key(name):
    key = live.GEN_KEY if name.startswith("cycle_generates") else live.SUMMARY_KEY
    for path in sorted((ROOT / "benchmarks/results/latest").glob(name)):
        assert not live.duplicates(live.read_csv(path), key), path


def test_two_runs_of_one_model_live_side_by_side_and_a_run_replaces_itself(tmp_path):
    def rows(run, n, wall):
        return [
            {"model": "a", "run": run, "batch": 1, "mode": "stock", "engine": 1, "generate": g, "wall_s": wall}
            for g in range(1, n + 1)
        ]

    live.write_results(tmp_path, "GPU X", [("a", "A")], rows("A", 2, 1.0), [])
    g, _ = live.write_results(tmp_path, "GPU X", [("a", "B")], rows("B", 2, 2.0), [])
    assert Counter(r["run"] for r in live.read_csv(g)) == {"A": 2, "B": 2}
    live.write_results(tmp_path, "GPU X", [("a", "A")], rows("A", 1, 3.0), [])
    assert sorted((r["run"], r["wall_s"]) for r in live.read_csv(g)) == [("A", "3.0"), ("B", "2.0"), ("B", "2.0")]


# ---------------------------------------------------------------- the whole driver, fake Engines


def _run(tmp_path, *extra, fake=None, out="out"):
    """A dry run with three modes, one Engine each and one warm-up (the older, quicker shape) unless ``extra``
    says otherwise (later options win)."""
    out, work = tmp_path / out, tmp_path / "work"
    argv = ["--dry-run", "--out", str(out), "--work", str(work), "--batches", "1,16", "--reps", "4"]
    argv += ["--modes", ",".join(MODES), "--engines-per-mode", "1", "--warmups", "1", "--alive-at-once"]
    argv += ["--fake", json.dumps(fake or {"delay_s": 0.02, "factor": {"zero-copy": 0.5}}), *extra]
    rc = live.main(argv)
    return rc, out / "latest" / "cycle_generates-cpu.csv", out / "latest" / "cycle_live-cpu.csv"


def _protocol(tmp_path, *extra, fake=None, out="out"):
    """A dry run with the alive-at-once protocol (stock and zero-copy, 2 Engines each alive at once, 3 warm-ups, 128
    tokens; the defaults otherwise)."""
    out, work = tmp_path / out, tmp_path / "work"
    argv = ["--dry-run", "--out", str(out), "--work", str(work), "--batches", "1,16", "--reps", "4"]
    argv += ["--alive-at-once", "--engines-per-mode", "2"]
    argv += ["--fake", json.dumps(fake or {"delay_s": 0.01, "factor": {"zero-copy": 0.5}}), *extra]
    rc = live.main(argv)
    return rc, out / "latest" / "cycle_generates-cpu.csv", out / "latest" / "cycle_live-cpu.csv"


UNITS = [(m, e) for e in (1, 2) for m in PROTOCOL]


def test_the_default_is_sequential_three_engines_per_mode_sleep_off(tmp_path, capsys):
    argv = ["--dry-run", "--out", str(tmp_path / "o"), "--work", str(tmp_path / "w"), "--batches", "1", "--reps", "2"]
    assert live.main([*argv, "--fake", json.dumps({"delay_s": 0.002})]) == 0
    text = capsys.readouterr().out
    opts = json.loads(live.read_csv(tmp_path / "o" / "latest" / "cycle_generates-cpu.csv")[0]["options"])
    assert opts["sequential"] is True and opts["engines_per_mode"] == 3 and opts["sleep_on_idle"] is False
    starts = re.findall(r"\[(\S+): starting its Engine", text)
    assert starts == ["stock-e1", "zero-copy-e1", "zero-copy-e2", "stock-e2", "stock-e3", "zero-copy-e3"]
    # alive at once keeps sleep-on-idle on by default; either may be set
    assert live.main([*argv, "--alive-at-once", "--engines-per-mode", "1", "--run", "X"]) == 0
    rows = [r for r in live.read_csv(tmp_path / "o" / "latest" / "cycle_generates-cpu.csv") if r["run"] == "X"]
    opts = json.loads(rows[0]["options"])
    assert opts["sequential"] is False and opts["sleep_on_idle"] is True


def test_engine_groups_are_one_engine_or_one_set_of_modes_in_the_sequential_order():
    order = live.sequential_order(["stock", "zero-copy"], 3)
    assert live.engine_groups(order, 1) == [[u] for u in order]
    assert live.engine_groups(order, 2) == [
        [("stock", 1), ("zero-copy", 1)],
        [("zero-copy", 2), ("stock", 2)],
        [("stock", 3), ("zero-copy", 3)],
    ]
    for size in (0, 4):
        with pytest.raises(ValueError, match="groups of"):
            live.engine_groups(order, size)


@pytest.mark.parametrize("busy_engines", [0, 1], ids=["every-engine-profiled", "first-engine-profiled"])
def test_pairs_alive_times_each_set_of_modes_together_in_palindromes_one_set_after_another(
    tmp_path, capsys, busy_engines
):
    """``--pairs-alive``: the Engines of a set (one per mode) alive together, their timed generates interleaved in
    palindromes at every batch (so a spell of the host's slows both modes of a pair alike), the next set started only
    once this one has stopped; its profiles (``--gpu-busy``) fill the timed rows of every Engine, or with
    ``--gpu-busy-engines 1`` of the first of each mode only, whose pair still gives the GPU-busy ratio; the design is
    written down."""
    out, work = tmp_path / "o", tmp_path / "w"
    argv = ["--dry-run", "--out", str(out), "--work", str(work), "--batches", "1,16", "--reps", "4"]
    argv += ["--warmups", "1", "--engines-per-mode", "2", "--pairs-alive", "--gpu-busy", "1", "--run", "P"]
    argv += ["--gpu-busy-engines", str(busy_engines)]
    argv += ["--fake", json.dumps({"delay_s": 0.004, "factor": {"zero-copy": 0.5}})]
    assert live.main(argv) == 0
    log = capsys.readouterr().out
    rows = live.read_csv(out / "latest" / "cycle_generates-cpu.csv")
    assert len(rows) == 2 * 2 * 2 * 4
    s, z = "stock", "zero-copy"
    first = {1: [s, z, z, s, s, z, z, s], 2: [z, s, s, z, z, s, s, z]}  # set 2 starts with the other mode
    for e, modes in first.items():
        for b in ("1", "16"):
            mine = sorted(
                (r for r in rows if r["engine"] == str(e) and r["batch"] == b), key=lambda r: float(r["t_start"])
            )
            assert [r["mode"] for r in mine] == modes, (e, b, [r["mode"] for r in mine])
            assert [int(r["seq"]) for r in mine] == list(range(1, 9))
    one = [r for r in rows if r["engine"] == "1"]
    two = [r for r in rows if r["engine"] == "2"]
    assert max(float(r["t_end"]) for r in one) < min(float(r["t_start"]) for r in two)
    assert log.index("[stock-e1 zero-copy-e1: stopped]") < log.index("[zero-copy-e2: starting its Engine")
    assert log.index("[zero-copy-e1: starting its Engine") < log.index("[b1 stock-e1: 4 timed")  # both alive
    profiled = [r for r in rows if r["engine"] == "1" or not busy_engines]
    assert profiled and all(float(r["gpu_busy_s"]) > 0 for r in profiled)
    assert all(r["gpu_busy_s"] == "" for r in rows if r not in profiled)
    assert log.count("per generate (median of 1 profiled)") == (4 if busy_engines else 8)
    summary = live.read_csv(out / "latest" / "cycle_live-cpu.csv")
    assert all(r["busy_ratio"] not in ("", None) for r in summary if r["mode"] == "zero-copy")
    opts = json.loads(rows[0]["options"])
    assert opts["gpu_busy_engines"] == busy_engines
    assert opts["pairs_alive"] is True and opts["sequential"] is True and opts["sleep_on_idle"] is False
    assert "Engines alive a pair at a time (--pairs-alive)" in log


@pytest.mark.parametrize("busy_engines", [0, 1], ids=["every-engine-profiled", "first-engine-profiled"])
def test_a_set_is_charged_the_profiles_of_its_own_engines_only(tmp_path, capsys, busy_engines):
    """The budget's need of a further set (the runs file's ``need_s``): its Engines' time without any profiles, plus
    2 s per profile only where ``--gpu-busy-engines`` profiles it. Charging set 2 the first set's profiles (they were
    in its time) would have left no room for the third pair that profiling one Engine per mode was to buy."""
    out, work = tmp_path / "o", tmp_path / "w"
    argv = ["--dry-run", "--out", str(out), "--work", str(work), "--batches", "1", "--reps", "2", "--warmups", "1"]
    argv += ["--engines-per-mode", "2", "--pairs-alive", "--gpu-busy", "1", "--gpu-busy-engines", str(busy_engines)]
    argv += ["--fake", json.dumps({"delay_s": 0.002, "profile_s": 2.0}), "--run", "N"]
    assert live.main(argv) == 0
    capsys.readouterr()
    need = json.loads((out / "latest" / "cycle_live_runs-cpu.json").read_text())["N"]["need_s"]
    assert set(need) == {"stock-e1 zero-copy-e1", "zero-copy-e2 stock-e2"}
    second = need["zero-copy-e2 stock-e2"]
    if busy_engines:
        assert second < 2.0, need  # no profile of its own: set 1's 2 x 2 s are not in it
    else:
        assert second >= 2 * 2.0, need  # its own two profiles


def test_the_protocol_alive_at_once(tmp_path, capsys):
    rc, gens, summary = _protocol(tmp_path, "--run", "A")
    text = capsys.readouterr().out
    assert rc == 0, text
    rows = live.read_csv(gens)
    assert len(rows) == 2 * 4 * 4 and not live.duplicates(rows, live.GEN_KEY)
    # palindromes over (mode, Engine): s1 z1 s2 z2 z2 s2 z1 s1 ...
    assert [(r["mode"], int(r["engine"])) for r in rows if r["batch"] == "1"] == live.balanced_order(UNITS, 4)
    assert {r["run"] for r in rows} == {"A"}
    assert all(r["frozen"] == "1" for r in rows)  # every timed generate after gc.collect + freeze_gc
    assert all(int(r["tokens"]) == int(r["batch"]) * 128 for r in rows)
    opts = json.loads(rows[0]["options"])
    assert opts["modes"] == PROTOCOL and opts["engines_per_mode"] == 2 and opts["warmups"] == 3
    assert opts["sleep_on_idle"] is True and opts["gc_off"] is True and opts["freeze_gc"] is True
    assert opts["max_new_tokens"] == 128 and opts["sequential"] is False and "pin" not in opts
    # 3 warm-ups per Engine and batch, all before the batch's first timed generate
    for b in (1, 16):
        warm = re.findall(rf"\[b{b} (\S+) warm-up (\d)/3", text)
        assert Counter(n for n, _ in warm) == {f"{m}-e{e}": 3 for m, e in UNITS}, warm
    # Engines started in the order of --modes, a set at a time
    assert re.findall(r"\[(\S+): starting its Engine", text) == ["stock-e1", "zero-copy-e1", "stock-e2", "zero-copy-e2"]
    # the per-run verdict over the Engine pairs; the health checks printed and written
    s = {(r["batch"], r["mode"]): r for r in live.read_csv(summary)}
    z = s[("16", "zero-copy")]
    assert z["pairs"] == "2" and z["df"] == "1" and z["verdict"] in live.VERDICTS and z["health"]
    assert set(dict(x.split(":") for x in z["pair_ratios"].split(";"))) == {"1", "2"}
    assert "HEALTH: " in text and "EQUAL outputs" in text


def test_every_row_has_its_probes_and_the_run_its_header(tmp_path, capsys):
    rc, gens, _ = _protocol(tmp_path, "--batches", "1", "--run", "P")
    assert rc == 0, capsys.readouterr().out
    rows = live.read_csv(gens)
    for col in probes.PROBE_FIELDS:
        assert all(r[col] != "" for r in rows), col
    for col in probes.GPU_FIELDS:  # no NVML on the CPU machine
        assert {r[col] for r in rows} == {"absent"} or probes.Gpu().ok, col
    if probes.proc_snapshot(os.getpid()):  # /proc with schedstat: the fake scheduler child was read
        assert all(r["sched_cpu_ms"] != "absent" and r["sched_cpu_last"] != "absent" for r in rows)
        assert all(float(r["worker_cpu_ms"]) >= 0 for r in rows)
        assert all(float(r["sched_cpu_work_us"]) > 0 for r in rows)  # the work ran on the scheduler's CPU
    assert all(float(r["t_end"]) > float(r["t_start"]) for r in rows)
    runs = json.loads((tmp_path / "out" / "latest" / "cycle_live_runs-cpu.json").read_text())
    h = runs["P"]["header"]
    assert h["kernel"] and h["nproc"] >= 1 and "lscpu" in h and "cpu_clocks" in h and "nvidia_smi" in h
    engines = runs["P"]["engines"]
    assert set(engines) == {"stock-e1", "zero-copy-e1", "stock-e2", "zero-copy-e2"}
    for e in engines.values():  # the start probe of each Engine's scheduler (the fake one's child here)
        assert set(e["start_probe"]) == {"affinity", "mems_allowed", "numa_pages", "pythonhashseed", "py_spy"}
        if probes.proc_snapshot(os.getpid()):
            assert e["start_probe"]["affinity"] != "absent" and e["start_probe"]["pythonhashseed"] != "absent"
    for e in engines.values():
        assert isinstance(e["pids"]["worker"], int) and isinstance(e["pids"]["scheduler"], int), e
        assert "graphs" in e
    assert set(runs["P"]["health"]) == {"b1 stock", "b1 zero-copy"}
    assert set(runs["P"]["freeze"]) == {"b1 " + n for n in engines}


def test_the_start_order_reversed_keeps_stock_as_the_base(tmp_path, capsys):
    rc, gens, summary = _protocol(tmp_path, "--modes", "zero-copy,stock", "--batches", "16")
    text = capsys.readouterr().out
    assert rc == 0, text
    assert re.findall(r"\[(\S+): starting its Engine", text) == ["zero-copy-e1", "stock-e1", "zero-copy-e2", "stock-e2"]
    rows = live.read_csv(gens)
    assert [(r["mode"], int(r["engine"])) for r in rows][:4] == [
        ("zero-copy", 1),
        ("stock", 1),
        ("zero-copy", 2),
        ("stock", 2),
    ]
    s = {r["mode"]: r for r in live.read_csv(summary)}
    assert s["stock"]["verdict"] == "base" and float(s["zero-copy"]["ratio"]) < 0.8


def test_sequential_runs_one_engine_at_a_time(tmp_path, capsys):
    rc, gens, summary = _protocol(tmp_path, "--sequential")
    text = capsys.readouterr().out
    assert rc == 0, text
    rows = live.read_csv(gens)
    seen = [(r["mode"], int(r["engine"])) for r in rows]
    blocks = [seen[i] for i in range(len(seen)) if i == 0 or seen[i] != seen[i - 1]]
    assert blocks == live.sequential_order(PROTOCOL, 2)  # each Engine through every batch, then the next
    events = re.findall(r"\[(\S+): (starting its Engine|stopped)", text)
    alive = 0
    for _, what in events:  # never two alive
        alive += 1 if what.startswith("starting") else -1
        assert alive <= 1, events
    assert json.loads(rows[0]["options"])["sequential"] is True and all(r["frozen"] == "1" for r in rows)
    assert {r["verdict"] for r in live.read_csv(summary) if r["mode"] == "zero-copy"} <= set(live.VERDICTS)


def _combine_ab(tmp_path, capsys):
    """``--combine`` of the dry runs written under ``tmp_path/a`` and ``tmp_path/b`` into ``tmp_path/c``: the two
    generate files, the printed table, the combined rows by (batch, mode)."""
    capsys.readouterr()
    a, b = (tmp_path / x / "latest" / "cycle_generates-cpu.csv" for x in ("a", "b"))
    assert live.main(["--combine", str(a), str(b), "--out", str(tmp_path / "c")]) == 0
    text = capsys.readouterr().out
    got = {(r["batch"], r["mode"]): r for r in live.read_csv(tmp_path / "c" / "latest" / "cycle_live_combined-cpu.csv")}
    return a, b, text, got


def test_two_runs_combined_give_one_verdict_over_their_pairs(tmp_path, capsys):
    fake = {"delay_s": 0.01, "factor": {"zero-copy": 0.5}}
    assert _protocol(tmp_path, "--run", "A", fake=fake, out="a")[0] == 0
    assert _protocol(tmp_path, "--run", "B", "--modes", "zero-copy,stock", fake=fake, out="b")[0] == 0
    a, b, text, got = _combine_ab(tmp_path, capsys)
    z = got[("16", "zero-copy")]
    assert z["runs"] == "A;B" and z["pairs"] == "4" and z["verdict"] in live.VERDICTS
    # each batch its own SD over its 4 pairs (3 df), never pooled over the batches
    assert (z["sd_from"], z["df"]) == ("batch", "3"), z
    assert float(z["ratio"]) < 0.8 and f"| 16 | zero-copy | A;B | 4 | {z['df']} |" in text
    # the same run twice is refused, and so is a file without generate rows
    assert live.main(["--combine", str(a), str(a), "--out", str(tmp_path / "c")]) == 2
    assert "the same rows" in capsys.readouterr().err
    assert live.main(["--combine", str(tmp_path / "nope.csv")]) == 2
    # --runs keeps the named runs only: one run's two pairs
    assert live.main(["--combine", str(a), str(b), "--runs", "B", "--out", str(tmp_path / "d")]) == 0
    got = {(r["batch"], r["mode"]): r for r in live.read_csv(tmp_path / "d" / "latest" / "cycle_live_combined-cpu.csv")}
    assert got[("16", "zero-copy")]["runs"] == "B" and got[("16", "zero-copy")]["pairs"] == "2"
    capsys.readouterr()
    # a run named in --runs but in none of the files: refused, naming it (it was left out silently)
    assert live.main(["--combine", str(a), str(b), "--runs", "B,Z", "--out", str(tmp_path / "d")]) == 2
    assert "'Z'" in capsys.readouterr().err
    # merged into one tree, both runs' rows side by side
    assert (
        live.main(
            ["--merge", str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "c"), "--out", str(tmp_path / "t")]
        )
        == 0
    )
    rows = live.read_csv(tmp_path / "t" / "latest" / "cycle_generates-cpu.csv")
    assert Counter(r["run"] for r in rows) == {"A": 32, "B": 32}
    assert (tmp_path / "t" / "latest" / "cycle_live_combined-cpu.csv").exists()
    assert set(json.loads((tmp_path / "t" / "latest" / "cycle_live_runs-cpu.json").read_text())) == {"A", "B"}


def test_the_other_arms_run_with_the_same_protocol(tmp_path, capsys):
    fake = {"delay_s": 0.005, "break": "no-spec"}  # no speculation may answer differently: told, not judged
    rc, gens, summary = _protocol(
        tmp_path, "--modes", "stock,replayssm,no-spec", "--engines-per-mode", "1", "--batches", "1", fake=fake
    )
    text = capsys.readouterr().out
    assert rc == 0, text
    assert "not judged" in text and "no-spec" in text
    opts = json.loads(live.read_csv(gens)[0]["options"])
    assert opts["arm_engine_args"]["replayssm"] == {"enable_linear_replayssm_spec": True}
    assert {r["mode"] for r in live.read_csv(summary)} == {"stock", "replayssm", "no-spec"}


def test_a_dry_run_writes_one_row_per_generate_and_a_summary(tmp_path, capsys):
    rc, gens, summary = _run(tmp_path, "--run", "R")
    text = capsys.readouterr().out
    assert rc == 0, text
    rows = live.read_csv(gens)
    assert len(rows) == 2 * 3 * 4 and not live.duplicates(rows, live.GEN_KEY)
    for col in ("model", "run", "batch", "mode", "engine", "generate", "wall_s", "commit", "sglang", "gpu", "options"):
        assert all(r[col] != "" for r in rows), col
    assert all(json.loads(r["options"])["reps"] == 4 for r in rows)
    assert [r["mode"] for r in rows if r["batch"] == "1"] == live.balanced_order(MODES, 4)
    s = {(r["batch"], r["mode"]): r for r in live.read_csv(summary)}
    assert len(s) == 6 and s[("16", "zero-copy")]["verdict"] == "inconclusive"  # one Engine pair: no interval
    assert float(s[("16", "zero-copy")]["gen_ci_hi"]) < 1  # over generates, conditional on these Engines
    assert "EQUAL outputs" in text and "slow (> 1.3x" in text
    hist = live.read_csv(tmp_path / "out" / "history.csv")
    mine = [r for r in hist if r.get("benchmark") == "cycle_live" and r.get("gpu") == "cpu"]  # not the tree's H200 rows
    assert sum(1 for r in mine if r.get("model") == "qwen3.5-0.8b") == 6
    # the same run again replaces its rows
    assert _run(tmp_path, "--run", "R")[0] == 0
    assert len(live.read_csv(gens)) == 24 and not live.duplicates(live.read_csv(gens), live.GEN_KEY)


def test_a_mode_answering_differently_fails_the_run_but_keeps_the_files(tmp_path, capsys):
    rc, gens, summary = _run(tmp_path, fake={"delay_s": 0.001, "break": "plugin"})
    text = capsys.readouterr().out
    assert rc == 1 and "PROBLEMS" in text and "plugin md5" in text
    assert len(live.read_csv(gens)) == 24 and summary.exists()


def test_an_engine_that_does_not_start_is_named_and_every_worker_stops(tmp_path, capsys):
    rc, gens, _ = _run(tmp_path, fake={"fail": "zero-copy"})
    text = capsys.readouterr().out
    assert rc == 2 and "ENGINE FAILED: zero-copy" in text and "told to fail" in text
    assert not gens.exists() and "EQUAL" not in text


def test_zero_copy_not_engaged_is_a_problem(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(live.MODES, "zero-copy", {"SGLANG_MAMBA_DEDUP": "1"})  # the switch not passed on
    rc, _, _ = _run(tmp_path)
    assert rc == 1 and "not every commit served zero-copy" in capsys.readouterr().out


def test_the_budget_stops_between_palindromes_and_the_files_stay_clean(tmp_path, capsys):
    # 0.1 s a generate at batch 1 (0.35 at 16): the starts (~1 s each here) and batch 1's 4 palindromes fit in 9 s,
    # batch 16 (~8 s) is cut or not run
    rc, gens, summary = _run(tmp_path, "--budget-s", "9", "--stop-reserve-s", "0", "--reps", "8", fake={"delay_s": 0.1})
    text = capsys.readouterr().out
    assert rc == 0 and "PARTIAL" in text, text
    rows = live.read_csv(gens)
    assert not live.duplicates(rows, live.GEN_KEY)
    per = Counter((r["batch"], r["mode"]) for r in rows)
    assert len({n for (b, _), n in per.items() if b == "1"}) == 1  # every mode the same count: whole palindromes
    assert all(n % 2 == 0 for n in per.values())
    assert per[("16", "stock")] < 8
    with open(summary, newline="") as f:
        assert {r["batch"] for r in csv.DictReader(f)} == {b for b, _ in per}


def test_merge_takes_each_runs_rows_from_the_device_outputs(tmp_path, capsys):
    a, b, tree = tmp_path / "a", tmp_path / "b", tmp_path / "tree"
    for out, preset in ((a, "qwen"), (b, "nemo")):
        argv = ["--dry-run", "--out", str(out), "--work", str(tmp_path / "w"), "--batches", "1", "--reps", "2"]
        argv += ["--preset", preset, "--modes", ",".join(MODES), "--engines-per-mode", "1", "--warmups", "1"]
        assert live.main(argv) == 0
    assert live.main(["--merge", str(a), str(b), "--out", str(tree)]) == 0
    rows = live.read_csv(tree / "latest" / "cycle_generates-cpu.csv")
    assert Counter(r["model"] for r in rows) == {"qwen": 6, "nemo": 6}
    assert live.main(["--merge", str(a), str(b), "--out", str(tree)]) == 0  # again: nothing doubled
    assert len(live.read_csv(tree / "latest" / "cycle_generates-cpu.csv")) == 12
    hist = [r for r in live.read_csv(tree / "history.csv") if r.get("benchmark") == "cycle_live"]
    assert Counter(r["model"] for r in hist if r.get("gpu") == "cpu") == {"qwen": 3, "nemo": 3}


def test_omp_threads_and_sleep_on_idle_reach_the_workers_and_the_options(tmp_path, capsys, monkeypatch):
    rc, gens, _ = _run(
        tmp_path, "--modes", "stock,plugin", "--omp-threads", "2", "--no-sleep-on-idle", "--batches", "1"
    )
    text = capsys.readouterr().out
    assert rc == 0, text
    info = _ready(text)
    assert set(info) == {"stock-e1", "plugin-e1"}
    assert all(i["omp_threads"] == "2" for i in info.values())
    opts = json.loads(live.read_csv(gens)[0]["options"])
    assert opts["omp_threads"] == 2 and opts["sleep_on_idle"] is False and opts["engines_per_mode"] == 1
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    rc, gens, _ = _run(tmp_path, "--modes", "stock,plugin", "--batches", "1")
    info = _ready(capsys.readouterr().out)
    assert rc == 0 and all(i["omp_threads"] is None for i in info.values())
    assert live._span([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"


def _ready(text: str) -> dict[str, dict]:
    return {m.group(1): json.loads(m.group(2)) for m in re.finditer(r"\[(\S+): ready in \d+ s: (\{.*\})\]", text)}


def test_the_budget_cuts_further_engine_sets_before_they_start(tmp_path, capsys):
    fake = {"delay_s": 0.01, "start_s": 0.5}
    argv = ("--engines-per-mode", "3", "--budget-s", "6", "--stop-reserve-s", "0", "--min-timed-s", "3")
    rc, gens, summary = _run(tmp_path, *argv, "--batches", "1", fake=fake)
    text = capsys.readouterr().out
    # set 1 takes >= 1.5 s; set 2 needs 3 x 1.2 x (>= 0.5 s) + 3 s >= 4.8 s: 1.5 + 4.8 > 6, it never starts
    assert rc == 0 and "engines per mode cut to 1 of 3" in text, text
    rows = live.read_csv(gens)
    assert {r["engine"] for r in rows} == {"1"} and len(rows) == 3 * 4
    assert {r["mode"]: r for r in live.read_csv(summary)}["plugin"]["engines"] == "1"


def test_the_next_engines_estimate_leaves_out_the_first_engines_compiles():
    # the 12-05 H100 Nemotron-H run: warm-ups 47.5 / 35.6 / 5.7 s against timed medians 0.48 / 0.63 s (b64 / b128)
    assert live.compile_excess([47.5, 0.42], 0.48) == pytest.approx(47.5 - 0.96)
    assert live.compile_excess([0.9, 0.8], 0.48) == 0.0  # a warm-up under twice a timed generate is no compile
    assert live.compile_excess([], 0.5) == 0.0
    assert live.next_engine_need([], []) == 0.0
    assert live.next_engine_need([79.0], [15.0]) == pytest.approx(1.2 * 79 + 15)  # the only start counts
    assert live.next_engine_need([79.0, 55.0, 60.0], [15.0, 30.0]) == pytest.approx(1.2 * 60 + 30)


def test_a_first_engine_that_compiles_does_not_stop_the_run(tmp_path, capsys):
    # the first generate of each batch size compiles (5 s, a cache shared by the Engines, as Triton's on disk): the
    # first Engine takes >= 5 s and leaves ~4.4 s of the 9.5; the next Engines take ~0.1 s each (up to ~1 s on a
    # loaded CI host, which a 2 s margin had not covered). Counting the compile in the estimate (~5.1 s) started none
    # of them: nothing timed for zero-copy, exit 3
    fake = {"delay_s": 0.005, "compile_s": 5.0, "compile_dir": str(tmp_path / "kernel-cache")}
    argv = ("--sequential", "--engines-per-mode", "2", "--budget-s", "9.5", "--stop-reserve-s", "0", "--batches", "1")
    rc, gens, _ = _run(tmp_path, *argv, "--modes", "stock,zero-copy", fake=fake)
    text = capsys.readouterr().out
    assert rc == 0 and "were compiles, not counted" in text and "Engines not started" not in text, text
    rows = live.read_csv(gens)
    assert Counter((r["mode"], r["engine"]) for r in rows) == {(m, e): 4 for m in ("stock", "zero-copy") for e in "12"}
    assert sorted(p.name for p in (tmp_path / "kernel-cache").iterdir()) == ["b1"]  # compiled once


def test_a_set_of_modes_starts_only_when_all_of_it_fits(tmp_path, capsys):
    # an Engine takes ~1 s (its start) here: set 1 (s1 z1) ends near 2.1 s of the 4.2, leaving room for one more
    # Engine but not for a set of two: z2 alone would pair with nothing
    fake = {"delay_s": 0.002, "start_s": 1.0}
    argv = ("--sequential", "--engines-per-mode", "2", "--budget-s", "4.2", "--stop-reserve-s", "0", "--batches", "1")
    rc, gens, _ = _run(tmp_path, *argv, "--modes", "stock,zero-copy", fake=fake)
    text = capsys.readouterr().out
    assert (
        rc == 0
        and "Engines not started ['zero-copy-e2', 'stock-e2'] (the next set needs" in text
        and " s left)]" in text
    ), text
    assert {(r["mode"], r["engine"]) for r in live.read_csv(gens)} == {("stock", "1"), ("zero-copy", "1")}


# ---------------------------------------------------------------- bad input: refused at the start (issue 51 item 4)


def _refused(tmp_path, capsys, argv):
    """``argv`` must end at the start: exit 2, one line on stderr (no usage, no traceback), nothing written."""
    out, work = tmp_path / "o", tmp_path / "w"
    with pytest.raises(SystemExit) as e:
        live.main(["--dry-run", "--out", str(out), "--work", str(work), *argv])
    got = capsys.readouterr()
    lines = [x for x in got.err.splitlines() if x.strip()]
    assert e.value.code == 2 and len(lines) == 1 and "Traceback" not in got.err + got.out, got
    assert not out.exists() and not work.exists(), "something was written"
    return lines[0]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--gpu-busy", "-1"], "--gpu-busy"),
        (["--gpu-busy", "1", "--alive-at-once"], "--sequential"),
        (["--pairs-alive", "--alive-at-once"], "--pairs-alive"),
        (["--gpu-busy-engines", "1"], "wants --gpu-busy"),
        (["--gpu-busy", "1", "--gpu-busy-engines", "-1"], "--gpu-busy-engines must be >= 0"),
        (["--alive"], "unrecognized arguments: --alive"),  # no abbreviations: the runner reads full names (M10)
        (["--radix"], "unrecognized arguments: --radix"),
        (["--batches", "0"], "--batches"),
        (["--batches", "-1"], "--batches"),
        (["--batches", "1,x"], "--batches"),
        (["--batches", "16,16"], "twice"),
        (["--bootstrap", "0"], "--bootstrap"),
        (["--fake", "{not json"], "--fake"),
        (["--fake", "[1, 2]"], "--fake"),
        (["--budget-s", "-5"], "--budget-s"),
        (["--budget-s", "10", "--stop-reserve-s", "10"], "--budget-s"),
        (["--warmups", "-1"], "--warmups"),
        (["--reps", "3"], "--reps"),
        (["--engine-arg", "cuda_graph_bs_decode=[1,16]"], "graph"),
        (["--pin"], "--pin"),
        (["--modes", "zero-copy"], "--modes"),
        (["--modes", "stock,nonsense"], "--modes"),
        (["--engines-per-mode", "0"], "--engines-per-mode"),
        (["--budget-s", "nan"], "--budget-s"),
        (["--budget-s", "inf"], "--budget-s"),
        (["--stop-reserve-s", "nan"], "--stop-reserve-s"),
        (["--generate-timeout", "-1"], "--generate-timeout"),
        (["--engine-timeout", "0"], "--engine-timeout"),
        (["--stop-timeout", "nan"], "--stop-timeout"),
        (["--min-timed-s", "-1"], "--min-timed-s"),
        (["--engine-arg", "foo"], "KEY=VALUE"),
        (["--static-gb", "-1"], "--static-gb"),
        (["--noise-gate", "-1"], "--noise-gate must be 0"),
        (["--noise-gate", "x"], "--noise-gate"),
        (["--mem-fraction-static", "2"], "--mem-fraction-static"),
        (["--mem-fraction-static", "nan"], "--mem-fraction-static"),
    ],
)
def test_bad_input_is_refused_at_the_start(tmp_path, capsys, argv, says):
    assert says in _refused(tmp_path, capsys, argv)


def test_an_out_under_a_file_is_refused_at_the_start(tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    with pytest.raises(SystemExit) as e:
        live.main(["--dry-run", "--out", str(tmp_path / "f" / "o"), "--work", str(tmp_path / "w")])
    got = capsys.readouterr()
    assert e.value.code == 2 and len(got.err.strip().splitlines()) == 1 and "--out" in got.err, got
    assert not (tmp_path / "w").exists()


def test_a_dry_run_never_writes_the_tracked_results(tmp_path, capsys, monkeypatch):
    tree = tmp_path / "tree-results"
    (tree / "latest").mkdir(parents=True)
    (tree / "history.csv").write_text("date,commit,gpu,benchmark\n")
    monkeypatch.setattr(live, "RESULTS", tree)
    monkeypatch.delenv("OUT", raising=False)
    argv = ["--dry-run", "--work", str(tmp_path / "w"), "--batches", "1", "--reps", "2", "--engines-per-mode", "1"]
    argv += ["--warmups", "0"]
    rc = live.main(argv)
    text = capsys.readouterr().out
    assert rc == 0, text
    assert sorted(p.name for p in tree.rglob("*")) == ["history.csv", "latest"]
    assert (tree / "history.csv").read_text() == "date,commit,gpu,benchmark\n"
    assert "files:" in text  # it says where it wrote instead
    with pytest.raises(SystemExit) as e:  # and an --out inside the tracked results is refused
        live.main([*argv, "--out", str(tree)])
    assert e.value.code == 2


def test_a_budget_that_times_nothing_is_a_failure_not_equal(tmp_path, capsys):
    fake = {"delay_s": 0.3}
    rc, gens, _ = _run(tmp_path, "--budget-s", "0.6", "--stop-reserve-s", "0", "--engines-per-mode", "1", fake=fake)
    text = capsys.readouterr().out
    assert rc != 0 and "EQUAL" not in text and "nothing timed" in text, text
    assert not gens.exists()


def test_merge_of_nothing_says_so(tmp_path, capsys):
    rc = live.main(["--merge", str(tmp_path / "missing"), "--out", str(tmp_path / "o")])
    assert rc != 0 and "nothing" in capsys.readouterr().err


def test_sigint_gives_one_line_and_stops_the_workers(tmp_path):
    import os
    import signal
    import subprocess
    import time

    argv = [sys.executable, str(ROOT / "benchmarks/bench_live.py"), "--dry-run", "--out", str(tmp_path / "o")]
    argv += ["--work", str(tmp_path / "w"), "--batches", "1", "--reps", "40", "--fake", '{"delay_s": 0.05}']
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.time() + 60
    seen = ""
    while time.time() < deadline:  # wait for the first warm-up: the workers are up
        line = p.stdout.readline()
        seen += line
        if "warm-up 1/" in line or not line:
            break
    p.send_signal(signal.SIGINT)
    out, err = p.stdout.read(), p.stderr.read()  # the rest (communicate() would miss readline's buffer)
    p.wait(60)
    assert p.returncode == 130, (seen + out, err)
    assert "Traceback" not in err + out and "KeyboardInterrupt" not in err + out, err
    assert len([x for x in err.splitlines() if x.strip()]) == 1 and "interrupted" in err, err
    assert "workers stopped" in out


def test_stock_alone_is_a_census_for_the_prime(tmp_path, capsys):
    rc, gens, summary = _protocol(tmp_path, "--modes", "stock", "--engines-per-mode", "1", "--batches", "1")
    assert rc == 0, capsys.readouterr().out
    assert {r["verdict"] for r in live.read_csv(summary)} == {"base"} and len(live.read_csv(gens)) == 4


@pytest.mark.parametrize("radix", [False, True], ids=["radix-off", "radix-on"])
def test_the_device_runner_does_a_then_b_and_combines(tmp_path, radix):
    """tools/gpu-engine/run_cycle_live.sh's steps on the CPU: its _setup.sh replaced by a stand-in that turns every
    run into a --dry-run; the same command twice: run A, run B (start order reversed), both sequential with 3
    Engines per mode, + the combined verdict, then nothing left. With ``--radix-cache`` (issue 50 item 5's run) the
    verdict rows are the radix-on ones."""
    import shutil
    import subprocess

    tree = tmp_path / "tree"
    (tree / "tools/gpu-engine").mkdir(parents=True)
    shutil.copytree(ROOT / "benchmarks", tree / "benchmarks", ignore=shutil.ignore_patterns("results"))
    shutil.copy(ROOT / "tools/gpu-engine/run_cycle_live.sh", tree / "tools/gpu-engine/")
    (tree / "tools/gpu-engine/_setup.sh").write_text(
        'echo stub > "$OUT/env.txt"\n'
        "standin_engine_args=(--dry-run --fake '{\"delay_s\": 0.002}')\n"
        'collect_outputs() { echo > "$3"; echo "{}" > "$4"; }\n'
        "nvidia-smi() { echo none; }\n"
    )
    state = Path("/tmp/cycle-live-state") / f"test-{os.getpid()}"  # the runner keeps its steps there
    preset = state.name
    bin_ = tmp_path / "bin"  # the runner calls python3 -P: this interpreter
    bin_.mkdir()
    (bin_ / "python3").symlink_to(sys.executable)
    env = dict(os.environ, LIVE_STEP="next", PYTHONPATH=str(ROOT), PATH=f"{bin_}:{os.environ['PATH']}", LIVE_HOST_S="1")
    seen = []
    try:
        for call in range(3):
            out = tmp_path / f"out{call}"
            out.mkdir()
            p = subprocess.run(
                [
                    "bash",
                    "tools/gpu-engine/run_cycle_live.sh",
                    preset,
                    "--batches",
                    "1",
                    "--reps",
                    "2",
                    "--warmups",
                    "0",
                    *(["--radix-cache"] if radix else []),
                ],
                cwd=tree,
                env=dict(env, OUT=str(out), CYCLE_WORK=str(tmp_path / "w")),
                capture_output=True,
                text=True,
                timeout=120,
            )
            seen.append((p.returncode, sorted(x.name for x in out.rglob("*") if x.is_file()), p.stdout))
    finally:
        shutil.rmtree(state, ignore_errors=True)
        shutil.rmtree(Path("/tmp/bench-live") / preset, ignore_errors=True)  # the runner's --work
    assert [rc for rc, _, _ in seen] == [0, 0, 4], [s[2][-2000:] for s in seen]
    assert "step A" in seen[0][2] and "step B" in seen[1][2]
    for _, _, text in seen[:2]:  # the host check before each step: its summary up front, its tables in the log
        assert re.search(r"\[host\] \d+ samples on \d+ CPUs; fastest", text), text[:2000]
    assert "== the host check before this step" in (tmp_path / "out1" / f"cycle_live-{preset}-B.txt").read_text()
    for _, files, _ in seen[:2]:
        assert len(files) <= 8 and "env.txt" not in files, files  # what comes back from the device
    assert f"cycle_live-{preset}-B.txt" in seen[1][1] and "cycle_live_combined-cpu.csv" in seen[1][1]
    rows = live.read_csv(tmp_path / "out1" / "latest" / "cycle_generates-cpu.csv")
    runs = sorted({r["run"] for r in rows})
    assert len(runs) == 2 and runs[0].endswith("-A") and runs[1].endswith("-B")
    starts = {}
    for r in rows:  # each run's Engines in the order they ran (one at a time)
        starts.setdefault(r["run"][-1], []).append(f"{r['mode'][0]}{r['engine']}")
    order = {k: list(dict.fromkeys(v)) for k, v in starts.items()}
    assert order == {"A": ["s1", "z1", "z2", "s2", "s3", "z3"], "B": ["z1", "s1", "s2", "z2", "z3", "s3"]}, order
    opts = json.loads(rows[0]["options"])
    assert opts["sequential"] is True and opts["sleep_on_idle"] is False and opts["reps"] == 2  # the user's win
    assert (
        "run A and run B combined" in seen[1][2] and "| zero-copy |" in seen[1][2] and "without flagged" in seen[1][2]
    )
    combined = live.read_csv(tmp_path / "out1" / "latest" / "cycle_live_combined-cpu.csv")
    assert {(r["radix_cache"], r["runs"]) for r in combined} == {("on" if radix else "off", ";".join(runs))}
    assert opts["radix_cache"] is radix
    # the runner asks for the GPU's busy time: every combined verdict has one beside the wall's
    assert opts["gpu_busy"] == 1 and all(r["busy_ratio"] and r["busy_verdict"] for r in combined), combined


def test_a_real_engine_gets_its_arms_keywords_and_reports_its_graphs_and_pids(monkeypatch):
    """The worker's real-Engine path (``_make_engine``) with ``sglang.Engine`` replaced by a recorder: the arm's
    keywords, the static budget as a fraction of the free memory, the graph settings and the pids it reports."""
    import types

    got = {}

    class Engine:
        def __init__(self, **kw):
            got.update(kw)

        def get_server_info(self):
            graph = {"memory_usage": {"graph": {"decode": 0.4}}}
            return {"cuda_graph_bs_decode": None, "cuda_graph_max_bs_decode": 128, "sleep_on_idle": True, "x": 1} | {
                "internal_states": [graph]
            }

    monkeypatch.setitem(sys.modules, "sglang", types.SimpleNamespace(Engine=Engine, __version__="9.9"))
    monkeypatch.setattr(live, "gpu_query", lambda: ("GPU X", 100.0, 140.0))
    kw = {"model_path": "m", "speculative_algorithm": "NEXTN", "sleep_on_idle": True, "mem_fraction_static": 0.25}
    spec = {"mode": "no-spec", "engine": 2, "engine_kwargs": kw, "static_gb": 16, "fake": None}
    engine, info = live._make_engine(spec)
    assert got == {"model_path": "m", "sleep_on_idle": True, "mem_fraction_static": 0.16}
    assert info["sglang"] == "9.9" and info["gpu"] == "GPU X" and info["mem_fraction_static"] == 0.16
    assert info["graphs"] == {"cuda_graph_bs_decode": None, "cuda_graph_max_bs_decode": 128, "sleep_on_idle": True} | {
        "graph_mem_gb": {"decode": 0.4}
    }
    assert info["pids"]["worker"] == os.getpid() and info["pids"]["scheduler"] == "absent"  # no SGLang children here
    live._make_engine(dict(spec, mode="replayssm"))
    assert got["enable_linear_replayssm_spec"] is True and got["speculative_algorithm"] == "NEXTN"


def test_the_gpu_probe_reads_nvml_where_there_is_one(monkeypatch):
    import types

    energy = iter([1_000, 4_500])
    nv = types.SimpleNamespace(
        NVML_CLOCK_SM=0,
        NVML_CLOCK_MEM=1,
        NVML_TEMPERATURE_GPU=0,
        nvmlInit=lambda: None,
        nvmlDeviceGetHandleByIndex=lambda i: f"h{i}",
        nvmlDeviceGetTotalEnergyConsumption=lambda h: next(energy),
        nvmlDeviceGetClockInfo=lambda h, c: (1980, 2619)[c],
        nvmlDeviceGetPowerUsage=lambda h: 312_500,
        nvmlDeviceGetTemperature=lambda h, t: 41,
        nvmlDeviceGetCurrentClocksThrottleReasons=lambda h: 0x4,  # an older binding: the old name only
        nvmlDeviceGetComputeRunningProcesses=lambda h: [types.SimpleNamespace(pid=7, usedGpuMemory=3 * 2**30)],
        nvmlDeviceGetProcessUtilization=lambda h, since: [
            types.SimpleNamespace(pid=7, smUtil=55, memUtil=20, timeStamp=9)
        ],
    )
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    gpu = probes.Gpu()
    assert gpu.ok and gpu.h == "h3"
    a, b = gpu.snapshot(), gpu.snapshot()
    assert probes.gpu_delta(a, b) == {
        "energy_j": 3.5,
        "sm_mhz": 1980,
        "mem_mhz": 2619,
        "power_w": 312.5,
        "temp_c": 41,
        "throttle": "0x4",
    }
    assert gpu.processes() == [{"pid": 7, "mib": 3072, "sm_util": 55, "mem_util": 20}]


def test_a_history_row_has_one_key_whatever_the_files_header():
    """A device's copy of history.csv has the columns of newer runs: a row read there and in the tree is one row."""
    plain = {"date": "d", "benchmark": "commit", "median_us": "3"}
    wider = {**plain, "run": "", "ratio": ""}
    assert live._history_key(wider) == live._history_key(plain)
    assert live._history_key(dict(reversed(list(plain.items())))) == live._history_key(plain)
    assert live._history_key({**plain, "ratio": "1.0"}) != live._history_key(plain)


def test_a_ragged_history_is_refused_with_its_line_and_left_as_it_was(tmp_path, capsys):
    """On 2026-12-04 36 rows were appended past a shorter header; rewriting that file put their surplus cells, as one
    Python list, under an unnamed column. Now the history is refused, the tree's and a source's alike, with the
    line, before anything is written."""
    from _timing import append_history

    hist = tmp_path / "history.csv"
    text = "date,benchmark,median_s\r\nd1,cycle_live,0.5\r\nd2,cycle_live,0.6,12,ab12\r\n"
    hist.write_bytes(text.encode())
    with pytest.raises(ValueError, match=r"line 3 has 2 cells more than the header's 3"):
        append_history(hist, [{"date": "d3", "benchmark": "cycle_live", "median_s": "0.7", "run": "r"}])
    assert hist.read_bytes() == text.encode()
    with pytest.raises(ValueError, match="unnamed column"):
        append_history(tmp_path / "new.csv", [{"date": "d3", "benchmark": "cycle_live", "": "x"}])
    # --merge: a source's ragged history, or the tree's, is refused in one line and nothing is written
    src, tree = tmp_path / "src", tmp_path / "tree"
    argv = ["--dry-run", "--out", str(src), "--work", str(tmp_path / "w"), "--batches", "1", "--reps", "2"]
    assert live.main([*argv, "--modes", "stock,zero-copy", "--engines-per-mode", "1", "--warmups", "1"]) == 0
    capsys.readouterr()
    good = (src / "history.csv").read_bytes()
    (src / "history.csv").write_bytes(good + b"d9,cycle_live" + b",x" * 400 + b"\r\n")
    assert live.main(["--merge", str(src), "--out", str(tree)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "cells more than the header" in err and not tree.exists(), err
    (src / "history.csv").write_bytes(good)
    tree.mkdir()
    (tree / "history.csv").write_bytes(text.encode())
    assert live.main(["--merge", str(src), "--out", str(tree)]) == 2
    assert "line 3" in capsys.readouterr().err
    assert (
        sorted(p.name for p in tree.iterdir()) == ["history.csv"]
        and (tree / "history.csv").read_bytes() == text.encode()
    )


def test_the_trees_history_is_not_ragged():
    header, rows = __import__("_timing").read_history(live.RESULTS / "history.csv")
    assert "" not in header and len(rows) > 800


def test_combine_refuses_one_files_rows_twice_and_walls_that_are_not_times(tmp_path, capsys):
    """A file without a run column names its rows after the file: the same file given twice (or a copy of it) would
    count every Engine pair twice, a narrower interval from no new data (the audit of 2026-12-04 evening: df 1 -> 3,
    [0.92, 1.09] -> [0.99, 1.01]). Refused, as are walls that are not positive finite seconds, a batch or an Engine
    that is not a whole number (a math domain error or a traceback before), each in one line naming the file."""
    w = {("stock", 1): _samples(1.0, 8, 1), ("stock", 2): _samples(1.0, 8, 2)}
    w.update({("zero-copy", 1): _samples(0.99, 8, 3), ("zero-copy", 2): _samples(1.01, 8, 4)})
    rows = _rows(w)
    fields = [k for k in rows[0] if k != "run"]
    path = tmp_path / "norun.csv"
    live.write_csv(path, rows, fields)
    copy = tmp_path / "copy.csv"
    copy.write_bytes(path.read_bytes())
    out = ["--out", str(tmp_path / "o")]
    assert live.main(["--combine", str(path), *out]) == 0
    capsys.readouterr()
    for twice in ([path, path], [path, copy]):
        assert live.main(["--combine", *map(str, twice), *out]) == 2
        err = capsys.readouterr().err
        assert "the same rows" in err and len(err.splitlines()) == 1, err
    for col, value, what in (
        ("wall_s", "0", "wall_s"),
        ("wall_s", "-1", "wall_s"),
        ("wall_s", "nan", "wall_s"),
        ("wall_s", "inf", "wall_s"),
        ("wall_s", "", "wall_s"),
        ("batch", "x", "batch"),
        ("engine", "1.5", "engine"),
    ):
        bad = [dict(r) for r in rows]
        bad[3][col] = value
        p = tmp_path / f"bad-{col}-{value or 'empty'}.csv"
        live.write_csv(p, bad, list(rows[0]))
        assert live.main(["--combine", str(p), *out]) == 2, (col, value)
        err = capsys.readouterr().err
        assert what in err and str(p) in err and len(err.splitlines()) == 1, err


def _descendants(pid: int) -> set[int]:
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        try:
            kids = [int(k) for k in Path(f"/proc/{p}/task/{p}/children").read_text().split()]
        except OSError:
            kids = []
        out.update(kids)
        todo += kids
    return out


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads /proc")
def test_a_sigkill_of_the_driver_while_an_engine_starts_leaves_nothing(tmp_path):
    """SIGKILL (the device's hard wall, the OOM killer) cannot be handled by the driver; its workers run in their own
    sessions, and one still building its Engine reads nothing from the driver, so it lived on to the end of the start
    (minutes with a real Engine, holding GPU memory; the audit of 2026-12-04 evening saw 5 of 6 tries leave the
    worker and its scheduler). A worker watches its driver while its Engine starts: its whole session goes."""
    import os
    import signal
    import subprocess
    import time

    argv = [sys.executable, str(ROOT / "benchmarks/bench_live.py"), "--dry-run", "--out", str(tmp_path / "o")]
    argv += ["--work", str(tmp_path / "w"), "--batches", "1", "--reps", "2", "--fake", '{"start_s": 30}']
    p = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(os.environ, PYTHONPATH=str(ROOT))
    )
    seen: set[int] = set()
    deadline = time.time() + 30
    while time.time() < deadline and len(seen) < 2:  # the worker and its stand-in scheduler
        seen |= _descendants(p.pid)
        time.sleep(0.02)
    try:
        assert len(seen) >= 2, "no worker started"
        p.kill()
        p.wait(10)
        deadline = time.time() + 5
        while time.time() < deadline and any(_alive(q) for q in seen):
            time.sleep(0.05)
        left = [q for q in seen if _alive(q)]
        assert not left, f"left after the driver's SIGKILL: {left}"
    finally:
        for q in seen:
            if _alive(q):
                os.kill(q, signal.SIGKILL)


def test_merge_refuses_a_bad_source_in_one_line_and_writes_nothing(tmp_path, capsys):
    """A source with a broken runs JSON, duplicated rows or a CSV that is not text: a traceback before, after the
    CSVs of the good part were already merged into --out (half a merge). Now one line, and --out untouched."""
    fake = {"delay_s": 0.002}
    assert _run(tmp_path, "--engines-per-mode", "1", "--batches", "1", "--reps", "2", fake=fake, out="good")[0] == 0
    good = tmp_path / "good"
    capsys.readouterr()
    breaks = {
        "json": lambda d: (d / "latest" / "cycle_live_runs-cpu.json").write_text("{broken"),
        "rows": lambda d: (
            (d / "latest" / "cycle_generates-cpu.csv")
            .open("a")
            .write((d / "latest" / "cycle_generates-cpu.csv").read_text().splitlines()[-1] + "\n")
        ),
        "binary": lambda d: (d / "latest" / "cycle_live-cpu.csv").write_bytes(b"\xff\xfe\x00"),
    }
    for name, brk in breaks.items():
        src = tmp_path / f"src-{name}"
        shutil.copytree(good, src)
        brk(src)
        out = tmp_path / f"out-{name}"
        assert live.main(["--merge", str(good), str(src), "--out", str(out)]) == 2, name
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and str(src) in err and "Traceback" not in err, (name, err)
        assert not out.exists(), f"{name}: something was merged"


def _runner_tree(tmp_path):
    """tools/gpu-engine/run_cycle_live.sh in a copy of the tree whose _setup.sh turns every run into a --dry-run
    (as in test_the_device_runner_does_prime_then_a_then_b_and_combines); returns a function running it."""
    import subprocess

    tree = tmp_path / "tree"
    (tree / "tools/gpu-engine").mkdir(parents=True)
    shutil.copytree(ROOT / "benchmarks", tree / "benchmarks", ignore=shutil.ignore_patterns("results"))
    shutil.copy(ROOT / "tools/gpu-engine/run_cycle_live.sh", tree / "tools/gpu-engine/")
    (tree / "tools/gpu-engine/_setup.sh").write_text(
        'echo stub > "$OUT/env.txt"\n'
        "standin_engine_args=(--dry-run --fake '{\"delay_s\": 0.002}')\n"
        'collect_outputs() { echo > "$3"; echo "{}" > "$4"; }\n'
        "nvidia-smi() { echo none; }\n"
    )
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "python3").symlink_to(sys.executable)
    env = dict(os.environ, PYTHONPATH=str(ROOT), PATH=f"{bin_}:{os.environ['PATH']}", CYCLE_WORK=str(tmp_path / "w"))
    env["LIVE_HOST_S"] = "1"  # the host check before a step: a second here (20 on the device)
    calls = iter(range(100))

    def run(preset, *args, **extra_env):
        out = tmp_path / f"out{next(calls)}"
        out.mkdir()
        p = subprocess.run(
            ["bash", "tools/gpu-engine/run_cycle_live.sh", preset, "--batches", "1", "--reps", "2", "--warmups", "0"]
            + list(args),
            cwd=tree,
            env=dict(env, OUT=str(out), **extra_env),
            capture_output=True,
            text=True,
            timeout=120,
        )
        return p.returncode, p.stdout + p.stderr, out

    return run


def test_the_device_runners_prime_can_stop_on_a_noisy_host(tmp_path):
    """LIVE_NOISE_GATE=N: a prime whose generates are noisy (the fake's +-50 % jitter) ends with exit 5, the
    NOISY HOST line and the runner's own, and marks no step done; a gate above the need lets it pass and mark the
    prime; without the variable there is no gate."""
    run = _runner_tree(tmp_path)
    preset = f"noise-test-{os.getpid()}"
    state = Path("/tmp/cycle-live-state") / preset
    noisy = ["--fake", json.dumps({"delay_s": 0.002, "jitter": 0.5})]
    try:
        rc, log, _ = run(preset, *noisy, LIVE_STEP="prime", LIVE_NOISE_GATE="1")
        assert rc == 5, log[-3000:]
        assert re.search(r"NOISY HOST \(--noise-gate 1\): two runs would need [\d,]+ at batch 1 timed", log), log
        assert "LIVE_NOISE_GATE=1: this host is too noisy" in log and not (state / "prime.done").exists()
        need = int(re.search(r"the generates' noise \(robust SD.*: b1 \d\.\d{3} \(([\d,]+)\)", log)[1].replace(",", ""))
        assert need > 1
        rc, log, _ = run(preset, *noisy, LIVE_STEP="prime", LIVE_NOISE_GATE=str(need * 1000))
        assert rc == 0 and "NOISY HOST" not in log and (state / "prime.done").exists(), log[-3000:]
        rc, log, _ = run(preset, *noisy, LIVE_STEP="prime")
        assert rc == 0 and "NOISY HOST" not in log, log[-3000:]
    finally:
        shutil.rmtree(state, ignore_errors=True)
        shutil.rmtree(Path("/tmp/bench-live") / preset, ignore_errors=True)


def test_the_device_runners_host_check_can_stop_a_step_before_any_engine(tmp_path):
    """Before steps A, B and single the runner times the host (benchmarks/host_speed.py, LIVE_HOST_S seconds);
    LIVE_HOST_GATE=X ends the call there with exit 5 when the median sample is over X times the fastest (1.0001: any
    real host), starts no Engine and marks no step done, so a later call runs that step; LIVE_HOST_S=0 skips the
    check, a prime has none, and a LIVE_HOST_S that is not whole seconds is refused."""
    run = _runner_tree(tmp_path)
    preset = f"test-host-{os.getpid()}"
    state = Path("/tmp/cycle-live-state") / preset
    try:
        rc, log, out = run(preset, LIVE_STEP="next", LIVE_HOST_GATE="1.0001")
        assert rc == 5 and "[host] GATE: the median sample is x" in log, log[-1500:]
        assert "no run on this host now (step A not started)" in log and "bench_live" not in log, log[-1500:]
        assert not list(out.rglob("*.csv")) and not (state / "A.done").exists()
        rc, log, out = run(preset, LIVE_STEP="next", LIVE_HOST_S="0")
        assert rc == 0 and "step A" in log and "[host]" not in log, log[-1500:]
        assert "the host check before this step" not in (out / f"cycle_live-{preset}-A.txt").read_text()
        rc, log, _ = run(preset, LIVE_STEP="prime", LIVE_HOST_GATE="1.0001")
        assert rc == 0 and "[host]" not in log, log[-1500:]
        rc, log, _ = run(preset, LIVE_STEP="next", LIVE_HOST_S="2.5")
        assert rc == 2 and "LIVE_HOST_S must be whole seconds" in log, log[-1500:]
    finally:
        shutil.rmtree(state, ignore_errors=True)
        shutil.rmtree(Path("/tmp/bench-live") / preset, ignore_errors=True)


def test_the_device_runner_refuses_odd_steps_and_reverses_modes_given_with_an_equals_sign(tmp_path):
    """The audit of 2026-12-04 evening: ``--modes=stock,plugin`` (one word) was not seen, so run B timed zero-copy
    instead of plugin and the "combined" verdict mixed two arms; step B with A's files gone combined run B alone
    (exit 0); ``LIVE_B=foo`` ran alive silently; a preset ``../x`` made the runner ``rm -rf /tmp/x``; a wall that is
    not a number stopped on an unbound variable. Each now refused in one line, exit 2, or reversed as meant."""
    run = _runner_tree(tmp_path)
    preset = f"test-{os.getpid()}"
    state = Path("/tmp/cycle-live-state") / preset
    victim = Path("/tmp") / f"victim-{os.getpid()}"
    victim.mkdir()
    try:
        rc, log, _ = run(f"../{victim.name}", LIVE_STEP="prime")
        assert rc == 2 and "preset" in log and victim.exists(), log[-1500:]
        rc, log, _ = run(preset, LIVE_WALL_S="abc")
        assert rc == 2 and "LIVE_WALL_S" in log and "unbound" not in log, log[-1500:]
        assert run(preset, "--modes=stock,plugin", LIVE_STEP="A")[0] == 0
        # run A had one Engine alive at a time: a B with them alive at once is another design, not its pair
        rc, log, _ = run(preset, "--modes=stock,plugin", LIVE_STEP="B", LIVE_B="alive")
        assert rc == 2 and "step B needs run A's options" in log and "LIVE_B=alive" in log, log[-1500:]
        rc, log, out = run(preset, "--modes=stock,plugin", LIVE_STEP="B")
        assert rc == 0, log[-2000:]
        modes = {(r["run"][-1], r["mode"]) for r in live.read_csv(out / "latest" / "cycle_generates-cpu.csv")}
        assert modes == {("A", "stock"), ("A", "plugin"), ("B", "stock"), ("B", "plugin")}, modes
        rc, log, _ = run(preset, LIVE_STEP="B", LIVE_B="foo")
        assert rc == 2 and "LIVE_B" in log, log[-1500:]
        # run A had --modes=stock,plugin: a B without them (or a radix-on B after a radix-off A) is not its pair
        rc, log, _ = run(preset, "--radix-cache", LIVE_STEP="B")
        assert rc == 2 and "step B needs run A's options" in log, log[-1500:]
        rc, log, out = run(preset, LIVE_STEP="next")  # "next" with other options: run A again, said
        assert rc == 0 and "this call runs A with these" in log and "step A" in log, log[-1500:]
        assert {r["mode"] for r in live.read_csv(out / "latest" / "cycle_generates-cpu.csv")} == {"stock", "zero-copy"}
        shutil.rmtree(state / "A")
        rc, log, _ = run(preset, LIVE_STEP="B")
        assert rc == 2 and "run A's files" in log, log[-1500:]
    finally:
        shutil.rmtree(state, ignore_errors=True)
        shutil.rmtree(victim, ignore_errors=True)
        shutil.rmtree(Path("/tmp/bench-live") / preset, ignore_errors=True)


def test_the_radix_cache_on_serves_zero_copy_and_checks_the_track_sets(tmp_path, capsys, monkeypatch):
    """Issue 50 item 5 with issue 51's benchmark: with ``--radix-cache`` zero-copy's Engines serve it (their fake
    reports, like the gate, show every commit with a track set) and the run is EQUAL; an Engine whose commits had no
    track set (here the plugin's radix opt-out set in its mode) is a problem, exit 1."""
    from sglang_mamba_dedup import env

    assert live.RADIX_OPT_OUT == env.ZERO_COPY_RADIX
    monkeypatch.setenv(env.ZERO_COPY_RADIX, "0")  # the driver's own: never reaches an Engine
    argv = ["--dry-run", "--out", str(tmp_path / "o"), "--work", str(tmp_path / "w"), "--batches", "1", "--reps", "2"]
    argv += ["--engines-per-mode", "1", "--fake", json.dumps({"delay_s": 0.002}), "--radix-cache"]
    assert live.main(argv) == 0
    text = capsys.readouterr().out
    assert "zero-copy serves with the radix cache on" in text and "EQUAL outputs" in text, text
    assert json.loads(live.read_csv(tmp_path / "o" / "latest" / "cycle_generates-cpu.csv")[0]["options"])["radix_cache"]
    reports = {
        ("zero-copy", 1): {"zc_commit_calls": 8, "zc_track_commits": 8},
        ("stock", 1): {"zc_commit_calls": 0, "zc_track_commits": 0},
    }
    assert live.radix_problems(reports, True) == [] and live.radix_problems(reports, False) == []
    reports[("zero-copy", 1)]["zc_track_commits"] = 0
    (problem,) = live.radix_problems(reports, True)
    assert problem.startswith("zero-copy e1: not every commit served zero-copy with a track set"), problem
    monkeypatch.setitem(live.MODES, "zero-copy", {**live.MODES["zero-copy"], env.ZERO_COPY_RADIX: "0"})
    assert live.main([*argv, "--run", "X", "--out", str(tmp_path / "o2")]) == 1
    assert "not every commit served zero-copy with a track set" in capsys.readouterr().out


@pytest.mark.parametrize("design", ["--sequential", "--pairs-alive", "--alive-at-once"])
def test_a_batch_above_an_engines_running_cap_is_not_timed_and_said(tmp_path, capsys, design):
    """SGLang's running-request cap in force, read at each Engine's start: a batch above it runs in pieces (the
    12-06 H100 pair at 32 GiB with the radix cache on admitted 102 and 103 of batch 128, and zero-copy's Engines gave
    two outputs, each its cap's). Such a batch is said once with the Engine that caps it, timed in no Engine of the
    run from then on (one Engine alive at a time: the Engines before it did), and listed as not timed; the batches
    under the cap are timed and judged as usual (exit 0). A cap at or above every batch says nothing."""
    argv = ["--dry-run", "--out", str(tmp_path / "o"), "--work", str(tmp_path / "w"), "--batches", "1,16,4"]
    argv += ["--reps", "2", "--warmups", "1", "--engines-per-mode", "2", design]
    fake = {"delay_s": 0.002, "running_cap": {"stock": 16, "zero-copy": 8}}
    assert live.main([*argv, "--fake", json.dumps(fake)]) == 0
    text = capsys.readouterr().out
    assert text.count("[b16 not timed: zero-copy-e1 admits 8 running requests, fewer than the batch") == 1, text
    assert "PARTIAL: not timed over SGLang's running cap: b16 (zero-copy-e1 admits 8 running requests)" in text
    assert re.search(r"\nthe host: \d+% of \S+'s generates began with it slow \(the scheduler's CPU", text), text
    rows = live.read_csv(tmp_path / "o" / "latest" / "cycle_generates-cpu.csv")
    # one Engine alive at a time: stock-e1 ran batch 16 before zero-copy-e1 started and said its cap; no later Engine
    early = {("stock", "1")} if design == "--sequential" else set()
    assert {(r["mode"], r["engine"]) for r in rows if r["batch"] == "16"} == early
    assert {(r["batch"], r["mode"], r["engine"]) for r in rows if r["batch"] != "16"} == {
        (b, m, e) for b in ("1", "4") for m in ("stock", "zero-copy") for e in ("1", "2")
    }
    runs = json.loads((tmp_path / "o" / "latest" / "cycle_live_runs-cpu.json").read_text())
    (info,) = runs.values()
    assert info["over_cap"] == {"16": "zero-copy-e1 admits 8 running requests"}
    fake["running_cap"] = {"stock": 1, "zero-copy": 1}
    argv[argv.index("1,16,4")] = "4,16"
    assert live.main([*argv, "--fake", json.dumps(fake), "--run", "Y", "--out", str(tmp_path / "o3")]) == 3
    assert "nothing timed for stock, zero-copy (every batch over SGLang's running cap)" in capsys.readouterr().out
    fake["running_cap"] = {"stock": 16, "zero-copy": 16}
    assert live.main([*argv, "--fake", json.dumps(fake), "--run", "X", "--out", str(tmp_path / "o2")]) == 0
    assert "not timed" not in capsys.readouterr().out


@pytest.mark.parametrize("flush", ["flush_cache", "absent", "refuse"])
def test_with_the_radix_cache_on_every_generate_starts_from_an_empty_prefix_cache(tmp_path, capsys, flush):
    """H100 smoke, 2026-12-05: with the radix cache on, a generate that repeats the last one's prompts prefilled from
    the cached states and answered differently (two outputs among stock's own timed generates at batch 128), and the
    run failed its md5 check. Each generate now starts from an emptied prefix cache (``Engine.flush_cache``), asked
    for before the generate and its probes: neither its wall time nor its round trip holds the flush (the fake's
    takes 200 ms, a generate a few). The fake Engine answers differently after a generate without a flush, so without
    the flush this run fails; an Engine with no ``flush_cache`` is a problem, a refused flush fails the Engine."""
    fake = {"delay_s": 0.002, "factor": {"zero-copy": 0.5}, "flush_s": 0.2, "flush_attempts": 2}
    if flush != "flush_cache":
        fake["flush"] = flush
    short = ["--batches", "1,16", "--reps", "2", "--warmups", "1", "--engines-per-mode", "1"]  # 12 flushes
    rc, gens, _ = _protocol(tmp_path, "--run", "A", "--radix-cache", *short, fake=fake)
    out = capsys.readouterr().out
    if flush == "refuse":
        assert rc == 2 and "flush_cache refused 2 times: the prefix cache was not emptied" in out, out[-2000:]
        return
    rows = live.read_csv(gens)
    md5s = {}
    for r in rows:
        md5s.setdefault(r["batch"], set()).add(r["md5"])
    if flush == "absent":
        assert rc == 1 and "its prefix cache was not emptied before each generate" in out, out[-2000:]
        assert any(len(v) > 1 for v in md5s.values()), md5s  # the fake's cache: the failure the flush prevents
    else:
        assert rc == 0 and "every generate starts from an empty prefix cache" in out, out[-2000:]
        assert all(len(v) == 1 for v in md5s.values()), md5s
        assert max(float(r["rtt_s"]) for r in rows) < 0.2 and max(float(r["wall_s"]) for r in rows) < 0.2, rows[0]


# ---------------------------------------------------------------- the GPU's busy time beside the wall (--gpu-busy)


def _busy_run(tmp_path, run, *extra, out="out", fake=None):
    """A sequential dry run, 2 Engines per mode, whose wall the host's states move (a slow stock Engine, 30 %
    jitter) while the GPU's work is zero-copy 0.9 of stock's (the fake's busy time)."""
    fake = fake or {
        "delay_s": 0.002,
        "busy_s": 0.01,
        "factor": {"zero-copy": 0.9},
        "jitter": 0.3,
        "engine_factor": {"stock:2": 1.4},
    }
    argv = ["--dry-run", "--out", str(tmp_path / out), "--work", str(tmp_path / "work"), "--batches", "1,16"]
    argv += ["--reps", "4", "--warmups", "1", "--engines-per-mode", "2", "--run", run, "--fake", json.dumps(fake)]
    return live.main([*argv, *extra]), tmp_path / out / "latest"


def test_gpu_busy_sees_the_gpu_work_the_host_hides(tmp_path, capsys):
    rc, latest = _busy_run(tmp_path, "A", "--gpu-busy", "2")
    text = capsys.readouterr().out
    assert rc == 0, text
    rows = live.read_csv(latest / "cycle_generates-cpu.csv")
    # the profiled generates are not timed rows: 4 per Engine and batch, as without them
    assert Counter((r["batch"], r["mode"], r["engine"]) for r in rows) == {
        (b, m, e): 4 for b in ("1", "16") for m in PROTOCOL for e in ("1", "2")
    }
    for r in rows:  # each timed row carries its Engine's busy time at that batch: the fake GPU's work, no host state
        factor = 0.9 if r["mode"] == "zero-copy" else 1.0
        assert float(r[live.BUSY_COL]) == pytest.approx(0.01 * factor * (1 + int(r["batch"]) / 64), rel=1e-4), r
        assert r["gpu_kernel_s"] == r[live.BUSY_COL]  # the fake's GPU runs kernels only, one after the other
    assert len(re.findall(r"GPU busy [0-9.]+ s per generate \(median of 2 profiled\)", text)) == 2 * 2 * 2
    # each Engine's profiled generates after all of its timed ones: the profiler's after-effects reach no window
    events = re.findall(r"\[b\d+ (\S+): (?:4 timed|GPU busy)", text)
    kinds = re.findall(r"\[b\d+ \S+: (4 timed|GPU busy)", text)
    for name in set(events):
        mine = [k for e, k in zip(events, kinds, strict=True) if e == name]
        assert mine == ["4 timed", "4 timed", "GPU busy", "GPU busy"], (name, mine)
    summary = {(r["batch"], r["mode"]): r for r in live.read_csv(latest / "cycle_live-cpu.csv")}
    for b in ("1", "16"):
        z = summary[(b, "zero-copy")]
        assert float(z["busy_ratio"]) == pytest.approx(0.9, rel=1e-3) and z["busy_verdict"] == live.FASTER, z
        assert z["busy_pairs"] == "2"
        assert float(z["gpu_busy_s_med"]) == pytest.approx(0.009 * (1 + int(b) / 64), rel=1e-4)  # not 3 decimals
        # the wall, moved by the host's states (and this machine's sleeps), is far less sure than the GPU's work: a
        # wall verdict of "faster" came by chance in ~2 % of rows (12-06, 1 of 50), so its interval is compared
        width = float(z["ci_hi"]) - float(z["ci_lo"])
        assert float(z["busy_ci_hi"]) - float(z["busy_ci_lo"]) < width / 10, z
    assert "gpu busy ratio" in text
    assert not list((tmp_path / "work").rglob("trace-*")), "a profile's trace was left behind"


def test_without_gpu_busy_the_rows_and_the_verdicts_have_none(tmp_path, capsys):
    rc, latest = _busy_run(tmp_path, "A", "--batches", "1")
    text = capsys.readouterr().out
    assert rc == 0, text
    assert all(r[live.BUSY_COL] == "" for r in live.read_csv(latest / "cycle_generates-cpu.csv"))
    assert all(r["busy_ratio"] == "" for r in live.read_csv(latest / "cycle_live-cpu.csv"))
    assert "gpu busy ratio" not in text and "profiled" not in text


def test_two_runs_combine_their_gpu_busy_pairs_and_say_how_far_apart(tmp_path, capsys):
    assert _busy_run(tmp_path, "A", "--gpu-busy", "1", out="a")[0] == 0
    fake = {"delay_s": 0.002, "busy_s": 0.01, "factor": {"zero-copy": 0.85}}  # run B's GPU work differs
    assert _busy_run(tmp_path, "B", "--gpu-busy", "1", "--modes", "zero-copy,stock", out="b", fake=fake)[0] == 0
    a, b, text, got = _combine_ab(tmp_path, capsys)
    z = got[("16", "zero-copy")]
    assert z["busy_pairs"] == "4" and float(z["busy_runs_agree"]) == pytest.approx(0.9 / 0.85, rel=1e-3), z
    assert float(z["busy_ratio"]) == pytest.approx((0.9 * 0.85) ** 0.5, rel=1e-3)
    assert "| gpu busy | busy_runs_agree |" in text


@pytest.mark.parametrize("moved", ["host", "gpu"])
def test_runs_apart_say_whether_the_gpu_work_or_the_hosts_part_moved(tmp_path, capsys, moved):
    """Run B's zero-copy Engines are slower than run A's: by their host's part (the fake's sleep beyond its GPU
    work) or by their GPU work. The combination says which, per batch, with each run's host part per generate. The
    fake's sleeps may overshoot on a loaded host, never undershoot: the host parts are checked from below."""
    even = {"delay_s": 0.05, "busy_s": 0.01, "factor": {"zero-copy": 0.9}}
    slow = (
        {**even, "engine_factor": {"zero-copy:1": 1.5, "zero-copy:2": 1.5}}
        if moved == "host"
        else {**even, "factor": {"zero-copy": 1.2}}  # wall and GPU work alike
    )
    assert _busy_run(tmp_path, "A", "--gpu-busy", "1", out="a", fake=even)[0] == 0
    assert _busy_run(tmp_path, "B", "--gpu-busy", "1", "--modes", "zero-copy,stock", out="b", fake=slow)[0] == 0
    a, b, text, got = _combine_ab(tmp_path, capsys)
    notes = [line for line in text.splitlines() if line.startswith("runs apart: ")]
    assert len(notes) == 2, text  # batches 1 and 16
    for batch, note in zip(("1", "16"), notes, strict=True):
        z = got[(batch, "zero-copy")]
        assert float(z["runs_agree"]) > 1.2 and f"batch {batch} zero-copy" in note, (z, note)
        gaps = {
            run: tuple(map(float, g.split("/")))
            for run, _, g in (x.rpartition(":") for x in z["host_gap_ms"].split(";"))
        }
        assert set(gaps) == {"A", "B"}, z["host_gap_ms"]
        scale = 1 + int(batch) / 64  # the fake's work grows with the batch
        assert gaps["A"][0] >= 40 * scale - 0.5 and gaps["A"][1] >= 36 * scale - 0.5, gaps  # 50 / 45 ms, 10 / 9 of GPU
        if moved == "host":
            assert "its work did not move, the host's part of the wall did" in note, note
            assert gaps["B"][1] >= 58.5 * scale - 0.5, gaps  # 0.9 x 50 x 1.5 ms, 9 of GPU work
        else:
            assert "the GPU's busy time moved too" in note and "did not move" not in note, note
            assert gaps["B"][1] >= 48 * scale - 0.5, gaps  # 60 ms, 12 of GPU work
        assert f"A {gaps['A'][0]:.1f} / {gaps['A'][1]:.1f}, B {gaps['B'][0]:.1f} / {gaps['B'][1]:.1f}" in note, note
        slow = dict(x.split(":") for x in z["host_slow"].split(";"))  # this machine's host probes, whatever they say
        assert set(slow) == {"A", "B"} and all(0 <= float(v) <= 1 for v in slow.values()), z["host_slow"]
        assert re.search(r"host slow \(> 1.5x its fast time\): A \d+%, B \d+%; the runs' gap is", note), note
        assert "beyond what their own pairs allow" in note and z["spread_from"] == "runs", note  # B moved by design
        for run, path in (("A", a), ("B", b)):  # each the median of wall - busy over its timed generates
            for i, mode in enumerate(("stock", "zero-copy")):
                mine = [r for r in live.read_csv(path) if r["batch"] == batch and r["mode"] == mode]
                want = 1000 * statistics.median(float(r["wall_s"]) - float(r[live.BUSY_COL]) for r in mine)
                assert gaps[run][i] == pytest.approx(want, abs=0.051), (run, mode, gaps, want)


def test_runs_that_agree_or_lack_gpu_busy_say_so():
    row = {"model": "m", "radix_cache": "on", "batch": 1, "mode": "zero-copy", "run_ratios": "A:0.9;B:0.95"}
    assert live.runs_apart_notes([{**row, "runs_agree": "1.0099", "host_gap_ms": "A:1/2;B:3/4"}]) == []
    assert live.runs_apart_notes([{**row, "runs_agree": "", "host_gap_ms": ""}]) == []  # one run
    (note,) = live.runs_apart_notes([{**row, "runs_agree": "1.0556", "busy_runs_agree": "", "host_gap_ms": ""}])
    assert "1.0556 apart" in note and "not measured in two runs (--gpu-busy)" in note and "host part" not in note


def test_the_hosts_slow_share_of_a_run_is_read_from_its_host_probes():
    """The share of a run's generates that began with the scheduler's CPU slow (its fixed loop > 1.5x the run's fast
    time, the 5th percentile: one lucky sample does not set it); rows without the probe are left out, a run with none
    has no entry. The notes of runs apart carry it per run."""
    col = "sched_cpu_work_us"
    rows = [{"model": "m", "run": "A", col: v} for v in [100.0 + i % 3 for i in range(95)] + [200.0] * 5]
    rows += [{"model": "m", "run": "B", col: v} for v in [100.0] * 40 + [160.0] * 60 + [10.0]]
    rows += [{"model": "m", "run": "A", col: "absent"}, {"model": "m", "run": "C", col: ""}]
    got = live.host_slow_share(rows)
    assert got == {("m", "A"): pytest.approx(0.05), ("m", "B"): pytest.approx(60 / 101)}, got
    row = {"model": "m", "radix_cache": "on", "batch": 1, "mode": "zero-copy", "run_ratios": "A:0.9;B:0.95"}
    row |= {"runs_agree": "1.0556", "busy_runs_agree": "1.001", "host_gap_ms": "A:1/2;B:3/4"}
    (note,) = live.runs_apart_notes([{**row, "host_slow": "A:0.05;B:0.59"}])
    assert note.endswith("generates begun with the host slow (> 1.5x its fast time): A 5%, B 59%"), note
    (note,) = live.runs_apart_notes([{**row, "host_slow": ""}])  # runs from before the probe
    assert "host slow" not in note


def _spread_rows(ds: dict, delta: float, base_s: float = 0.4) -> list[dict]:
    """Pairs ``{(run, engine): d}`` of Engines whose 8 log walls sit at known offsets around their median:
    ``log median + delta * (-2, -1, -0.5, 0, 0, 0.5, 1, 2)`` (median exact, robust SD 1.4826 x 0.75 x delta),
    stock at ``base_s`` and zero-copy at ``base_s * exp(d)``, shuffled."""
    offs = [-2, -1, -0.5, 0, 0, 0.5, 1, 2]
    rows = []
    for (run, eng), d in ds.items():
        for mode, m in (("stock", math.log(base_s)), ("zero-copy", math.log(base_s) + d)):
            walls = [math.exp(m + delta * o) for o in random.sample(offs, len(offs))]
            rows += _rows({(mode, eng, 16): walls}, run=run)
    return rows


@pytest.mark.parametrize("spread", ["generates", "engines", "runs"])
def test_the_spread_is_split_into_the_generates_the_engines_and_the_runs(spread):
    """noise_split: a run's pairs' SD of log ratios (pooled over the runs) against the SD their generates' own noise
    gives (pi/2 x the robust variances over n, both Engines; chi-square at 95 %), the two runs' gap over its standard
    error (Student's t at 95 %), and the generates per mode a run needs for two runs to agree within 1 % at the
    generates' noise; 3 pairs in run A and 2 in run B, Engines of 8 generates."""
    delta = random.uniform(0.02, 0.08)
    s = 1.4826 * 0.75 * delta  # each Engine's robust SD of log walls
    gen_sd = math.sqrt(math.pi / 2 * 2 * s * s / 8)
    # within a run: A at -1, 0, 1 and B at -0.5, +0.5 (x k), pooled SD k * sqrt((2 + 0.5) / 3); runs' means equal
    # unless shifted by `gap`. Generates: 1.3x the generates' SD (the chi-square bound at 3 df is 1.61x); engines: 3x;
    # runs: 0.5x and a gap of 8 standard errors (t975 at 3 df: 3.18)
    pooled = math.sqrt(2.5 / 3)
    k = {"generates": 1.3, "engines": 3.0, "runs": 0.5}[spread] * gen_sd / pooled
    gap = 8 * k * pooled * math.sqrt(1 / 3 + 1 / 2) if spread == "runs" else 0.0
    within = {("A", 1): -1.0, ("A", 2): 0.0, ("A", 3): 1.0, ("B", 1): -0.5, ("B", 2): 0.5}
    ds = {key: math.log(0.95) + k * x + (gap if key[0] == "B" else 0.0) for key, x in within.items()}
    rows = _spread_rows(ds, delta)
    (key, got), *rest = stats.noise_split(rows).items()
    assert not rest and key == ("m", 16, "zero-copy")
    assert got["gen_sd"] == pytest.approx(gen_sd, rel=1e-9) and got["pair_sd"] == pytest.approx(k * pooled, rel=1e-6)
    assert got["engines"] is (spread == "engines") and got["runs"] is (spread == "runs"), got
    assert got["source"] == spread and got["runs_t"] == pytest.approx(8.0 if spread == "runs" else 0.0, abs=1e-6)
    se = math.log(1.01) / (1.96 * math.sqrt(2))
    assert got["gens"] == math.ceil(math.pi * s * s / se**2) and got["had"] == 20, got  # (24 + 16) / 2 per run
    # the combined row and the runs-apart line carry it (the runs' own ratios here are far apart by design)
    (row,) = live.combine(rows)
    assert row["spread_from"] == spread and int(row["gens_needed"]) == got["gens"] and row["gens_had"] == 20
    assert float(row["runs_t"]) == pytest.approx(got["runs_t"], abs=0.006)
    (note,) = live.runs_apart_notes([{**row, "runs_agree": "1.05"}])
    want = {
        "generates": "more generates per Engine, not more Engines, would narrow it",
        "engines": "a run's pairs differ beyond what their generates' own noise allows",
        "runs": "the runs' gap is 8.00 standard errors of their pairs, beyond what their own pairs allow",
    }
    assert want[spread] in note and sum(w in note for w in want.values()) == 1, note
    assert note.endswith(f"~{got['gens']} timed generates per mode each (these had 20)"), note


def test_a_runs_report_reads_the_generates_noise_and_what_agreement_would_take():
    """generate_noise / noise_line: per model and batch the median over Engines (every mode) of the robust SD of an
    Engine's log walls and the generates per mode two runs need to agree within 1 % at it; Engines under 4 timed
    generates are not read (a prime's old 2 generates)."""
    d1, d2 = random.uniform(0.01, 0.03), random.uniform(0.05, 0.1)
    rows = _spread_rows({("A", 1): 0.0, ("A", 2): 0.0}, d1)  # batch 16: 4 Engines at d1
    rows += [dict(r, batch=64, wall_s=r["wall_s"] ** (d2 / d1)) for r in rows]  # log walls scaled: SD x d2/d1
    got = stats.generate_noise(rows)
    s1 = 1.4826 * 0.75 * d1
    assert set(got) == {("m", 16), ("m", 64)}
    assert got[("m", 16)][0] == pytest.approx(s1, rel=1e-9) and got[("m", 16)][1] == stats.gens_to_agree(s1)
    se = math.log(1.01) / (1.96 * math.sqrt(2))
    assert stats.gens_to_agree(s1) == math.ceil(math.pi * s1 * s1 / se**2)
    assert got[("m", 64)][0] == pytest.approx(s1 * d2 / d1, rel=1e-9)  # log walls scaled by d2/d1
    line = live.noise_line(rows)
    assert line.startswith("the generates' noise (robust SD") and f"b16 {s1:.3f} ({stats.gens_to_agree(s1):,})" in line
    assert "m b16" not in line  # one model: no model names
    two = rows + [dict(r, model="n") for r in rows]
    assert "m b16" in live.noise_line(two) and "n b64" in live.noise_line(two)
    few = [r for r in rows if int(r["generate"]) <= 3]
    assert stats.generate_noise(few) == {} and live.noise_line(few).endswith("not read")


def test_the_noise_split_needs_two_pairs_and_the_chi_square_quantile_holds():
    one = _spread_rows({("A", 1): math.log(0.9)}, 0.05)
    assert stats.noise_split(one) == {}
    (row,) = live.combine(one)
    assert all(row[c] == "" for c in ("pair_sd", "gen_sd", "runs_t", "spread_from", "gens_needed", "gens_had")), row
    assert "pairs' spread" not in " ".join(live.runs_apart_notes([{**row, "runs_agree": "1.05"}]))
    table = {1: 3.841, 2: 5.991, 3: 7.815, 4: 9.488, 5: 11.070, 10: 18.307, 30: 43.773}  # chi-square, 95 %
    for df, want in table.items():
        assert stats.chi2_95(df) == pytest.approx(want, rel=0.04 if df == 1 else 0.01), df
    with pytest.raises(ValueError):
        stats.chi2_95(0)


def test_a_combination_says_when_its_gpu_busy_verdict_rests_on_one_run(tmp_path, capsys):
    # run A with --gpu-busy, run B without: the busy verdict is run A's alone, and the row and the table say so
    assert _busy_run(tmp_path, "A", "--gpu-busy", "1", out="a")[0] == 0
    assert _busy_run(tmp_path, "B", "--modes", "zero-copy,stock", out="b")[0] == 0
    a, b, text, got = _combine_ab(tmp_path, capsys)
    z = got[("16", "zero-copy")]
    assert z["runs"] == "A;B" and z["pairs"] == "4" and z["busy_runs"] == "A" and z["busy_pairs"] == "2", z
    assert z["busy_runs_agree"] == "" and "faster (from A only)" in text
    capsys.readouterr()
    assert live.main(["--combine", str(a), "--out", str(tmp_path / "d")]) == 0  # one run: nothing to say
    assert "only)" not in capsys.readouterr().out


def test_the_budget_counts_the_profiles_still_to_come(tmp_path, capsys):
    """The profiled generates come after all of an Engine's timed ones: each batch's check counts those of the batches
    before it too. Here a profile takes 3 s: zero-copy-e1 (knowing that from stock-e1) times three batches and leaves
    the fourth, instead of timing four and ending its profiles past the budget."""
    import time

    fake = {"delay_s": 0.001, "busy_s": 0.01, "profile_s": 3.0}
    argv = ["--dry-run", "--out", str(tmp_path / "o"), "--work", str(tmp_path / "w"), "--batches", "1,16,64,128"]
    argv += ["--reps", "2", "--warmups", "0", "--engines-per-mode", "1", "--gpu-busy", "1", "--fake", json.dumps(fake)]
    t0 = time.time()
    rc = live.main([*argv, "--budget-s", "14", "--stop-reserve-s", "0"])
    took = time.time() - t0
    text = capsys.readouterr().out
    # stock-e1's first check guessed 10 s a profile: it timed batch 1 alone (the run's rc says what stock lacks)
    assert rc in (0, 1) and "PARTIAL" in text, text
    # the batch left out is the evidence; the time only a loose bound (a loaded 2-core machine starts workers slowly):
    # never a whole profile past the budget
    assert took < 14 + 3.0, (took, text)
    profiled = re.findall(r"\[b(\d+) (\S+): GPU busy", text)
    assert ("128", "zero-copy-e1") not in profiled and ("1", "zero-copy-e1") in profiled, profiled


def test_profiles_slower_than_the_guess_overrun_the_budget_by_one_at_most(tmp_path, capsys, monkeypatch):
    """Audit 2026-12-05c M8: the first Engine's batch checks guess a profile's time (here 0.5 s for 3 s profiles); its
    four profiles then ran 12 s into a 7 s budget. Once one profile is measured each must fit, or no further profile
    runs: the four batches stay timed, the cut is said once and kept in the runs file."""
    import time

    monkeypatch.setattr(live, "PROFILE_GUESS_S", 0.5)
    fake = {"delay_s": 0.001, "busy_s": 0.01, "profile_s": 3.0}
    argv = ["--dry-run", "--out", str(tmp_path / "o"), "--work", str(tmp_path / "w"), "--batches", "1,16,64,128"]
    argv += ["--modes", "stock", "--reps", "2", "--warmups", "0", "--engines-per-mode", "1", "--gpu-busy", "1"]
    t0 = time.time()
    rc = live.main([*argv, "--fake", json.dumps(fake), "--budget-s", "7", "--stop-reserve-s", "0", "--run", "A"])
    took = time.time() - t0
    text = capsys.readouterr().out
    assert rc == 0, text
    profiled = re.findall(r"\[b(\d+) stock-e1: GPU busy", text)
    # the profiles left out are the evidence; the time only a loose bound (a loaded 2-core CI host is slower)
    assert 1 <= len(profiled) < 4 and took < 7 + 2 * 3.0 + 2.0, (took, profiled, text)
    (line,) = [x for x in text.splitlines() if "no further profiles" in x]
    assert line.startswith(f"[budget: no further profiles in this run (b{[1, 16, 64, 128][len(profiled)]} stock-e1 ")
    latest = tmp_path / "o" / "latest"
    rows = live.read_csv(latest / "cycle_generates-cpu.csv")
    assert sorted({int(r["batch"]) for r in rows}) == [1, 16, 64, 128] and len(rows) == 8
    assert len({r["batch"] for r in rows if r[live.BUSY_COL]}) == len(profiled)
    runs = json.loads((latest / "cycle_live_runs-cpu.json").read_text())
    assert runs["A"]["profiles_cut"] == line.split("(")[1].split(" and after")[0]


@pytest.mark.parametrize(
    "breaks, said",
    [
        ({"profile_fail": "zero-copy"}, "RuntimeError: fake profiler told to fail"),  # the profiler does not start
        ({"profile_break": {"zero-copy": "die"}}, "the Engine failed: zero-copy-e1: worker gone"),  # killed under it
        ({"profile_break": {"zero-copy": "notrace"}, "trace_wait_s": 0.5}, "TimeoutError: no trace in"),  # none written
        (
            {"profile_break": {"zero-copy": "idle"}},
            "no GPU activity in the trace (gpu_busy_s 0.0)",
        ),  # CUPTI saw nothing
    ],
    ids=["fails-to-start", "engine-dies", "no-trace", "no-gpu-activity"],
)
def test_a_profile_that_fails_costs_the_gpu_busy_column_never_the_wall(tmp_path, capsys, breaks, said):
    """A profile that fails in any way (the 12-05 audit's B2-B4) is said in one line and kept in the runs file; no
    further Engine is profiled (each try would cost the call's time); every Engine still starts and times its batches,
    and the run stays whole (its status 0: ``--combine`` pools it)."""
    import time

    fake = {"delay_s": 0.002, "busy_s": 0.01, **breaks}
    t0 = time.time()
    rc, latest = _busy_run(tmp_path, "A", "--gpu-busy", "1", "--batches", "1,16", fake=fake)
    took = time.time() - t0
    text = capsys.readouterr().out
    assert rc == 0, text
    rows = live.read_csv(latest / "cycle_generates-cpu.csv")
    # every Engine (s1 z1 z2 s2) timed both batches; only stock-e1, profiled before zero-copy-e1 failed, has a busy time
    assert Counter((r["mode"], r["engine"]) for r in rows) == {(m, e): 8 for m in PROTOCOL for e in ("1", "2")}
    assert {(r["mode"], r["engine"]) for r in rows if r[live.BUSY_COL]} == {("stock", "1")}
    assert {r["run_status"] for r in rows} == {"0"}
    lines = [x for x in text.splitlines() if "the profile failed" in x]
    assert len(lines) == 1 and "[b1 zero-copy-e1: no GPU busy time" in lines[0] and said in lines[0], lines
    assert "no further profiles in this run" in lines[0]
    assert len(re.findall(r"GPU busy [0-9.]+ s per generate", text)) == 2  # stock-e1's two batches, nobody else's
    z = {(r["batch"], r["mode"]): r for r in live.read_csv(latest / "cycle_live-cpu.csv")}[("1", "zero-copy")]
    assert z["busy_ratio"] == "" and z["verdict"] in live.VERDICTS
    runs = json.loads((latest / "cycle_live_runs-cpu.json").read_text())
    assert list(runs["A"]["profile_errors"]) == ["b1 zero-copy-e1"]
    assert took < 60, took  # a missing trace is waited for trace_wait_s once, not per Engine and batch
    combined, _ = live.combine_files([latest / "cycle_generates-cpu.csv"], None)  # pooled: the run is whole
    assert {r["pairs"] for r in combined if r["mode"] == "zero-copy"} == {2}, combined


def test_a_wall_that_cuts_a_profile_short_loses_no_timed_row(tmp_path):
    """An Engine's timed rows are on disk before its profiled generates: the runner's hard wall (SIGKILL after
    SIGTERM) during a long profile leaves them (the audit's B6: they were only in memory until the Engine stopped)."""
    import subprocess
    import sys
    import time

    fake = {"delay_s": 0.002, "busy_s": 0.01, "profile_s": 60}
    out = tmp_path / "o"
    argv = [sys.executable, str(ROOT / "benchmarks" / "bench_live.py"), "--dry-run", "--out", str(out), "--work"]
    argv += [str(tmp_path / "w"), "--modes", "stock", "--batches", "1", "--reps", "4", "--warmups", "0"]
    argv += ["--engines-per-mode", "1", "--gpu-busy", "1", "--run", "A", "--fake", json.dumps(fake)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    seen, deadline = [], time.time() + 120
    try:
        for line in proc.stdout:  # until the Engine's timed rows are written, then into its 60 s profile
            seen.append(line)
            if "4 timed, median" in "".join(seen) and line.startswith("[files:") or time.time() > deadline:
                break
        time.sleep(0.5)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    assert "4 timed, median" in "".join(seen), "".join(seen)
    rows = live.read_csv(out / "latest" / "cycle_generates-cpu.csv")
    assert [r["seq"] for r in rows] == ["1", "2", "3", "4"] and {r["run_status"] for r in rows} == {live.RUNNING}


def test_the_device_runner_asks_for_gpu_busy_only_where_bench_live_takes_it(tmp_path):
    """The runner's ``--gpu-busy 1`` is dropped with Engines alive at once (``LIVE_B=alive`` or the user's
    ``--alive-at-once``), which bench_live refuses with it; a one-alive run keeps it."""
    run = _runner_tree(tmp_path)
    cases = [
        ((), {}, 1, True, False),
        (("--alive-at-once", "--engines-per-mode", "1"), {}, 0, False, False),
        (("--engines-per-mode", "1"), {"LIVE_STEP": "A", "LIVE_B": "alive"}, 0, False, False),
        (("--engines-per-mode", "1"), {"LIVE_STEP": "A", "LIVE_B": "pairs"}, 1, True, True),  # one mode generates
        (("--engines-per-mode", "1"), {"LIVE_B": "pairs"}, 1, True, True),  # a single run takes the design too
        ((), {"LIVE_STEP": "prime"}, 0, True, False),  # a prime compiles: nothing of it is analysed
    ]
    for args, env, busy, sequential, pairs in cases:
        rc, text, out = run("busy-test", *args, **env)
        assert rc == 0, text[-3000:]
        opts = json.loads(live.read_csv(out / "latest" / "cycle_generates-cpu.csv")[-1]["options"])
        assert opts["gpu_busy"] == busy and opts["sequential"] is sequential, (args, env, opts)
        assert opts.get("pairs_alive", False) is pairs, (args, env, opts)
        assert opts.get("gpu_busy_engines", 0) == busy, (args, env, opts)  # the runner profiles the first Engines
        if env.get("LIVE_STEP") == "prime":  # enough generates to read the host's noise before a protocol
            assert opts["reps"] == 12 and re.search(r"the generates' noise \(robust SD.*: b1 \d\.\d{3} \(", text), text
    shutil.rmtree(Path("/tmp/bench-live") / "busy-test", ignore_errors=True)
