"""The host-speed probe (benchmarks/host_speed.py): what its tables say of spells every CPU shares against a CPU
slow on its own, a short real run's files, and bad input refused before anything is measured or written."""

from __future__ import annotations

import importlib.util
import os
import random
import statistics
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("host_speed", ROOT / "benchmarks/host_speed.py")
assert _spec and _spec.loader
hs = importlib.util.module_from_spec(_spec)
sys.modules["host_speed"] = hs
_spec.loader.exec_module(hs)


def _rows(slow_of, rounds=60, cpus=4, base=0.010, seed=None):
    """One-CPU-at-a-time samples, a round per second (t_s), ``slow_of(round, cpu)`` the factor of that sample."""
    rng = random.Random(seed)
    return [
        dict(phase="single", round=k, cpu=c, t_s=k + c / 10, work_s=base * slow_of(k, c) * (1 + rng.random() / 50))
        for k in range(rounds)
        for c in range(cpus)
    ]


def _bin_corr(rows, width):
    """The shared-spell statistic written again: each CPU's bin medians against the median of the other CPUs'."""
    cell = {}
    for r in rows:
        cell.setdefault((r["cpu"], int(r["t_s"] // width)), []).append(r["work_s"])
    cpus = sorted({c for c, _ in cell})
    keys = sorted({k for _, k in cell})
    med = {(c, k): statistics.median(v) for (c, k), v in cell.items()}
    return statistics.median(
        statistics.correlation(
            [med[(c, k)] for k in keys], [statistics.median(med[(o, k)] for o in cpus if o != c) for k in keys]
        )
        for c in cpus
    )


def test_a_spell_every_cpu_shares_shows_in_the_bins_and_their_correlation():
    seed = random.randrange(1 << 30)
    rows = _rows(lambda k, c: 2.0 if 20 <= k < 40 else 1.0, seed=seed)
    s = hs.summary(rows, width=10)
    assert [round(m / s["fastest_s"]) for _, _, m in s["bins"]] == [1, 1, 2, 2, 1, 1], seed
    assert [n for _, n, _ in s["bins"]] == [40] * 6
    assert s["slow_share"] == pytest.approx(1 / 3)
    assert s["bin_corr"] > 0.95, seed
    assert s["bin_corr"] == pytest.approx(_bin_corr(rows, 10))
    text = hs.report(rows, 10)
    assert "slower than 1.5x the fastest: 33%" in text and "| 20 | 40 |" in text


def test_a_cpu_slow_on_its_own_does_not_read_as_a_shared_spell():
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    spells = {(k // 10, c): rng.random() < 0.3 for k in range(300) for c in range(8)}
    rows = _rows(lambda k, c: 2.0 if spells[(k // 10, c)] else 1.0, rounds=300, cpus=8, seed=seed)
    s = hs.summary(rows, width=10)
    # independent spells: a CPU's 30 bins do not follow the others' (a shared spell gives > 0.95 above)
    assert abs(s["bin_corr"]) < 0.5, (seed, s["bin_corr"])
    assert s["bin_corr"] == pytest.approx(_bin_corr(rows, 10))
    per = {c: sorted(r["work_s"] for r in rows if r["cpu"] == c) for c in range(8)}
    assert s["per_cpu"] == per


def test_a_short_real_run_writes_every_cpu_in_both_phases_and_reads_back(tmp_path, capsys):
    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("no CPU affinity on this platform")
    assert hs.main(["--seconds", "0.2", "--loops", "2000", "--out", str(tmp_path)]) == 0
    first = capsys.readouterr().out
    rows = hs.read(tmp_path / "host_speed.csv")
    cpus = sorted(os.sched_getaffinity(0))
    assert {r["cpu"] for r in rows if r["phase"] == "single"} == set(cpus)
    assert sorted(r["cpu"] for r in rows if r["phase"] == "all") == sorted(cpus * 5)
    assert all(r["work_s"] > 0 for r in rows)
    assert os.sched_getaffinity(0) == set(cpus)  # restored
    assert hs.main(["--read", str(tmp_path / "host_speed.csv")]) == 0
    again = capsys.readouterr().out
    assert again.splitlines()[0].split(";")[0] == first.splitlines()[1].split(";")[0]  # the same samples


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--seconds", "0"], "--seconds must be > 0"),
        (["--seconds", "nan"], "--seconds must be > 0"),
        (["--bin-s", "-1"], "--bin-s must be > 0"),
        (["--read", "missing.csv"], "no such file"),
        (["--out", "afile"], "is a file"),
        (["--gate", "1"], "--gate must be a factor > 1"),
        (["--gate", "inf"], "--gate must be a factor > 1"),
    ],
    ids=["zero-seconds", "nan-seconds", "negative-bin", "missing-csv", "out-is-a-file", "gate-one", "gate-inf"],
)
def test_bad_input_is_refused_before_anything_runs(tmp_path, monkeypatch, capsys, argv, says):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("x")
    monkeypatch.setattr(hs, "measure", lambda *a, **k: pytest.fail("measured despite bad input"))
    with pytest.raises(SystemExit) as e:
        hs.main(argv)
    assert e.value.code == 2
    assert says in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_the_gate_says_a_host_too_slow_now_and_exits_5(tmp_path, capsys):
    """``--gate X``: a host whose median sample is over X times its fastest exits 5 with one line (the device runner
    then starts no Engine); at or under it, 0. Half the samples 1.6x slow: the median sits between 1.0x and 1.6x."""
    rows = _rows(lambda k, c: 1.6 if (k + c) % 2 else 1.0, seed=3)
    rows[len(rows) // 2]["work_s"] = rows[0]["work_s"] * 0.99  # one fastest sample
    hs.write(rows, tmp_path / "host_speed.csv")
    x = statistics.median(r["work_s"] for r in rows) / min(r["work_s"] for r in rows)
    assert 1.2 < x < 1.6, x
    assert hs.main(["--read", str(tmp_path / "host_speed.csv"), "--gate", "1.1"]) == 5
    out = capsys.readouterr().out
    assert f"GATE: the median sample is x{x:.2f} of the fastest, over --gate 1.1" in out, out
    assert hs.main(["--read", str(tmp_path / "host_speed.csv"), "--gate", "1.7"]) == 0
    assert "GATE" not in capsys.readouterr().out
