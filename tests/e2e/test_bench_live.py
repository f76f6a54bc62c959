"""The live-modes decode-cycle benchmark (benchmarks/bench_live.py) on the CPU: the balanced order, the bootstrap
interval and its verdict, slow generates, the one-row-per-key files (and the duplicated rows that once reached
benchmarks/results/latest/cycle_wall-nvidia-h200.csv), and the whole driver with fake Engines in worker processes:
files, md5 check, plugin engagement, a failing Engine, the budget stop; several Engines per mode (the order over
every (mode, Engine), the ratio per Engine pair, the hierarchical interval over Engines, one slow Engine), --pin and
--omp-threads reaching the workers and the options, the budget cutting further Engine sets."""

from __future__ import annotations

import csv
import importlib.util
import json
import random
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))  # bench_live imports its siblings _timing and bench_cycle
_spec = importlib.util.spec_from_file_location("bench_live", ROOT / "benchmarks/bench_live.py")
live = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(live)
sys.path.remove(str(ROOT / "benchmarks"))

MODES = ["stock", "plugin", "zero-copy"]


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


def _samples(center: float, n: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [center * (1 + rng.gauss(0, 0.02)) for _ in range(n)]


def test_a_known_ratio_is_inside_its_interval_and_called_faster():
    stock, zc = _samples(1.0, 12, 1), _samples(0.9, 12, 2)
    ratio, lo, hi = live.bootstrap_ratio(zc, stock, resamples=2000, seed=0)
    assert lo <= 0.9 <= hi and lo <= ratio <= hi
    assert hi < 1 and live.classify(lo, hi) == "faster"
    assert live.bootstrap_ratio(zc, stock, seed=0) == (ratio, lo, hi)  # a fixed seed: the same interval
    _, lo2, hi2 = live.bootstrap_ratio(stock, zc, seed=0)
    assert live.classify(lo2, hi2) == "slower"


def test_an_interval_through_one_is_no_difference():
    a, b = _samples(1.0, 12, 3), _samples(1.0, 12, 4)
    _, lo, hi = live.bootstrap_ratio(a, b, seed=0)
    assert lo < 1 < hi
    assert live.classify(lo, hi) == "no difference"
    assert live.classify(0.95, 1.0) == "no difference" and live.classify(1.0, 1.02) == "no difference"
    assert live.classify(0.9, 0.99) == "faster" and live.classify(1.01, 1.2) == "slower"


def test_slow_generates_are_above_1_3_times_their_median():
    assert live.slow_flags([1.0, 1.0, 1.0, 1.29, 1.31]) == [False, False, False, False, True]
    rows = [
        {"model": "m", "batch": 1, "mode": "stock", "wall_s": w, "gc_gen2": g, "rss_mb": 1}
        for w, g in ((1.0, 0), (1.0, 0), (2.0, 1), (1.0, 0))
    ]
    rows += [{"model": "m", "batch": 1, "mode": "plugin", "wall_s": 1.0, "gc_gen2": 0, "rss_mb": 1}] * 4
    live.mark_slow(rows)
    assert [r["slow"] for r in rows[:4]] == [0, 0, 1, 0]
    assert live.slow_by_mode(rows) == {"stock": (1, 4), "plugin": (0, 4)}
    s = {r["mode"]: r for r in live.summarize(rows)}
    assert s["stock"]["slow"] == 1 and s["stock"]["slow_with_gc2"] == 1 and s["stock"]["verdict"] == "base"
    assert s["plugin"]["verdict"] in ("faster", "no difference") and s["plugin"]["n"] == 4


def test_md5_must_be_one_and_equal_to_stocks():
    good = {(1, "stock"): {"a"}, (1, "plugin"): {"a"}, (1, "zero-copy"): {"a"}}
    assert live.md5_problems(good) == []
    assert "plugin" in live.md5_problems({**good, (1, "plugin"): {"b"}})[0]
    assert live.md5_problems({**good, (1, "zero-copy"): {"a", "b"}})  # two answers within one mode
    assert live.md5_problems({(1, "plugin"): {"a"}})  # no stock to compare with


# ---------------------------------------------------------------- one row per key


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


# ---------------------------------------------------------------- the whole driver, fake Engines


def _run(tmp_path, *extra, fake=None):
    out, work = tmp_path / "out", tmp_path / "work"
    argv = ["--dry-run", "--out", str(out), "--work", str(work), "--batches", "1,16", "--reps", "4"]
    argv += ["--fake", json.dumps(fake or {"delay_s": 0.02, "factor": {"zero-copy": 0.5}}), *extra]
    rc = live.main(argv)
    return rc, out / "latest" / "cycle_generates-cpu.csv", out / "latest" / "cycle_live-cpu.csv"


def test_a_dry_run_writes_one_row_per_generate_and_a_summary(tmp_path, capsys):
    rc, gens, summary = _run(tmp_path)
    text = capsys.readouterr().out
    assert rc == 0, text
    rows = live.read_csv(gens)
    assert len(rows) == 2 * 3 * 4 and not live.duplicates(rows, live.GEN_KEY)
    for col in ("model", "batch", "mode", "engine", "generate", "wall_s", "commit", "sglang", "gpu", "options"):
        assert all(r[col] != "" for r in rows), col
    assert all(json.loads(r["options"])["reps"] == 4 for r in rows)
    assert [r["mode"] for r in rows if r["batch"] == "1"] == live.balanced_order(MODES, 4)
    s = {(r["batch"], r["mode"]): r for r in live.read_csv(summary)}
    assert len(s) == 6 and s[("16", "zero-copy")]["verdict"] == "faster"
    assert float(s[("16", "zero-copy")]["ci_hi"]) < 1
    assert "EQUAL outputs" in text and "slow (> 1.3x" in text
    hist = live.read_csv(tmp_path / "out" / "history.csv")
    mine = [r for r in hist if r.get("benchmark") == "cycle_live" and r.get("gpu") == "cpu"]  # not the tree's H200 rows
    assert sum(1 for r in mine if r.get("model") == "qwen3.5-0.8b") == 6
    # a second run of the same model replaces its rows
    assert _run(tmp_path)[0] == 0
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
    assert not gens.exists()


def test_zero_copy_not_engaged_is_a_problem(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(live.MODES, "zero-copy", {"SGLANG_MAMBA_DEDUP": "1"})  # the switch not passed on
    rc, _, _ = _run(tmp_path)
    assert rc == 1 and "not every commit served zero-copy" in capsys.readouterr().out


def test_the_budget_stops_between_palindromes_and_the_files_stay_clean(tmp_path, capsys):
    # 0.1 s a generate at batch 1 (0.35 at 16): batch 1's 4 palindromes fit in 3 s, batch 16 is cut or not run
    rc, gens, summary = _run(tmp_path, "--budget-s", "3", "--stop-reserve-s", "0", "--reps", "8", fake={"delay_s": 0.1})
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


def test_merge_takes_each_models_rows_from_the_device_outputs(tmp_path, capsys):
    a, b, tree = tmp_path / "a", tmp_path / "b", tmp_path / "tree"
    assert (
        live.main(
            [
                "--dry-run",
                "--out",
                str(a),
                "--work",
                str(tmp_path / "w"),
                "--batches",
                "1",
                "--reps",
                "2",
                "--preset",
                "qwen",
            ]
        )
        == 0
    )
    assert (
        live.main(
            [
                "--dry-run",
                "--out",
                str(b),
                "--work",
                str(tmp_path / "w"),
                "--batches",
                "1",
                "--reps",
                "2",
                "--preset",
                "nemo",
            ]
        )
        == 0
    )
    assert live.main(["--merge", str(a), str(b), "--out", str(tree)]) == 0
    rows = live.read_csv(tree / "latest" / "cycle_generates-cpu.csv")
    assert Counter(r["model"] for r in rows) == {"qwen": 6, "nemo": 6}
    assert live.main(["--merge", str(a), str(b), "--out", str(tree)]) == 0  # again: nothing doubled
    assert len(live.read_csv(tree / "latest" / "cycle_generates-cpu.csv")) == 12
    hist = [r for r in live.read_csv(tree / "history.csv") if r.get("benchmark") == "cycle_live"]
    assert Counter(r["model"] for r in hist if r.get("gpu") == "cpu") == {
        "qwen": 3,
        "nemo": 3,
    }  # the tree's H200 rows aside


# ---------------------------------------------------------------- several Engines per mode, host-state controls

UNITS2 = [(m, e) for e in (1, 2) for m in MODES]


def test_the_order_with_two_engines_per_mode_covers_every_pair_equally():
    order = live.balanced_order(UNITS2, 4)
    assert order[:7] == [*UNITS2, UNITS2[-1]]
    assert Counter(order) == dict.fromkeys(UNITS2, 4)
    mean_pos = {u: sum(i for i, x in enumerate(order) if x == u) / 4 for u in UNITS2}
    assert len(set(mean_pos.values())) == 1, mean_pos
    for i0 in range(0, len(order), 12):  # every palindrome holds every (mode, Engine) twice
        assert Counter(order[i0 : i0 + 12]) == dict.fromkeys(UNITS2, 2)


def _rows(walls: dict[tuple[str, int], list[float]]) -> list[dict]:
    return [
        {"model": "m", "batch": 1, "mode": m, "engine": e, "generate": i + 1, "wall_s": w, "rss_mb": 1}
        for (m, e), ws in walls.items()
        for i, w in enumerate(ws)
    ]


def test_the_hierarchical_interval_resamples_engines_first():
    # plugin's Engine 1 fast (20 generates), its Engine 2 slow (4): pooled over generates, the median is always
    # Engine 1's, so the interval over generates says "faster"; over Engines, a resample holding Engine 2 twice
    # (one in four) is slower than stock: the interval straddles 1
    fast, slow, stock = _samples(0.9, 20, 5), _samples(1.2, 4, 6), [_samples(1.0, 12, 7), _samples(1.0, 12, 8)]
    ratio, lo, hi = live.bootstrap_ratio(fast + slow, stock[0] + stock[1], seed=0)
    assert hi < 1 and live.classify(lo, hi) == "faster"
    hr, hlo, hhi = live.hier_bootstrap_ratio([fast, slow], stock, seed=0)
    assert hr == ratio and hlo < 1 < hhi and hhi > 1.1
    assert live.hier_bootstrap_ratio([fast, slow], stock, seed=0) == (hr, hlo, hhi)  # a fixed seed
    # the Engines of each mode agree: the interval over Engines is as decisive as the one over generates
    _, alo, ahi = live.hier_bootstrap_ratio([_samples(0.9, 12, 9), _samples(0.9, 12, 10)], stock, seed=0)
    assert ahi < 1 and live.classify(alo, ahi) == "faster"


def test_the_summary_gives_the_ratio_per_engine_pair_and_the_verdict_over_engines():
    base = {("stock", 1): _samples(1.0, 12, 11), ("stock", 2): _samples(1.0, 12, 12)}
    agree = _rows({**base, ("plugin", 1): _samples(0.9, 12, 13), ("plugin", 2): _samples(0.9, 12, 14)})
    s = {r["mode"]: r for r in live.summarize(agree)}["plugin"]
    assert s["engines"] == 2 and s["verdict"] == "faster" and float(s["eng_ci_hi"]) < 1
    pairs = dict(x.split(":") for x in s["ratio_per_engine"].split(";"))
    assert set(pairs) == {"1", "2"} and all(0.85 < float(v) < 0.95 for v in pairs.values())
    differ = _rows({**base, ("plugin", 1): _samples(0.8, 12, 13), ("plugin", 2): _samples(1.3, 12, 14)})
    s = {r["mode"]: r for r in live.summarize(differ)}["plugin"]
    assert float(s["eng_ci_lo"]) < 1 < float(s["eng_ci_hi"]) and s["verdict"] == "no difference"
    pairs = dict(x.split(":") for x in s["ratio_per_engine"].split(";"))
    assert float(pairs["1"]) < 0.85 and float(pairs["2"]) > 1.25
    one = {r["mode"]: r for r in live.summarize(_rows({("stock", 1): [1.0] * 4, ("plugin", 1): [0.5] * 4}))}
    assert one["plugin"]["eng_ci_lo"] == "" and one["plugin"]["verdict"] == "faster"  # one Engine: as before


def test_core_sets_are_disjoint_and_equal():
    sets = live.core_sets(range(16), 6)
    assert [len(c) for c in sets] == [2] * 6
    flat = [c for cs in sets for c in cs]
    assert len(flat) == len(set(flat)) and set(flat) <= set(range(16))
    with pytest.raises(ValueError):
        live.core_sets([0, 1], 3)
    assert live._span([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"


def _ready(text: str) -> dict[str, dict]:
    import re

    return {m.group(1): json.loads(m.group(2)) for m in re.finditer(r"\[(\S+): ready in \d+ s: (\{.*\})\]", text)}


def _cores(span: str) -> set[int]:
    out: set[int] = set()
    for part in span.split(","):
        a, _, b = part.partition("-")
        out |= set(range(int(a), int(b or a) + 1))
    return out


def test_two_engines_per_mode_alive_with_one_slow_engine(tmp_path, capsys):
    fake = {"delay_s": 0.02, "factor": {"zero-copy": 0.5}}
    rc, gens, summary = _run(tmp_path, "--engines-per-mode", "2", "--batches", "16", fake=fake)
    text = capsys.readouterr().out
    assert rc == 0, text
    rows = live.read_csv(gens)
    assert len(rows) == 3 * 2 * 4 and not live.duplicates(rows, live.GEN_KEY)
    assert Counter((r["mode"], r["engine"]) for r in rows) == {(m, str(e)): 4 for m, e in UNITS2}
    assert [(r["mode"], int(r["engine"])) for r in rows] == live.balanced_order(UNITS2, 4)
    assert set(_ready(text)) == {f"{m}-e{e}" for m, e in UNITS2}
    s = {r["mode"]: r for r in live.read_csv(summary)}
    assert s["zero-copy"]["engines"] == "2" and s["zero-copy"]["verdict"] == "faster", s["zero-copy"]
    assert float(s["zero-copy"]["eng_ci_hi"]) < 1
    # zero-copy's Engine 2 in a slow host state (3x): its pair says slower, Engine 1's faster, the interval over
    # Engines straddles 1
    fake["engine_factor"] = {"zero-copy:2": 3.0}
    rc, gens, summary = _run(tmp_path, "--engines-per-mode", "2", "--batches", "16", fake=fake)
    assert rc == 0
    z = {r["mode"]: r for r in live.read_csv(summary)}["zero-copy"]
    pairs = {k: float(v) for k, v in (x.split(":") for x in z["ratio_per_engine"].split(";"))}
    assert pairs["1"] < 0.8 and pairs["2"] > 1.2, z
    assert float(z["eng_ci_lo"]) < 1 < float(z["eng_ci_hi"]) and z["verdict"] == "no difference", z


def test_pin_and_omp_threads_reach_the_workers_and_the_options(tmp_path, capsys, monkeypatch):
    if len(live.os.sched_getaffinity(0)) < 2:
        pytest.skip("--pin needs a core per worker")
    rc, gens, _ = _run(
        tmp_path, "--modes", "stock,plugin", "--pin", "--omp-threads", "2", "--sleep-on-idle", "--batches", "1"
    )
    text = capsys.readouterr().out
    assert rc == 0, text
    info = _ready(text)
    assert set(info) == {"stock-e1", "plugin-e1"}
    a, b = (_cores(i["cpus"]) for i in info.values())
    assert a and b and not a & b and a | b <= set(live.os.sched_getaffinity(0))
    assert all(i["omp_threads"] == "2" for i in info.values())
    opts = json.loads(live.read_csv(gens)[0]["options"])
    assert opts["pin"] is True and opts["omp_threads"] == 2 and opts["sleep_on_idle"] is True
    assert opts["engines_per_mode"] == 1
    # unpinned, no thread setting: as before (the cores of the driver, OMP_NUM_THREADS as inherited)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    rc, gens, _ = _run(tmp_path, "--modes", "stock,plugin", "--batches", "1")
    info = _ready(capsys.readouterr().out)
    assert rc == 0 and all(_cores(i["cpus"]) == set(live.os.sched_getaffinity(0)) for i in info.values())
    assert all(i["omp_threads"] is None for i in info.values())
    opts = json.loads(live.read_csv(gens)[0]["options"])
    assert opts["pin"] is False and opts["omp_threads"] is None


def test_pin_refuses_fewer_cores_than_workers(tmp_path):
    n = len(live.os.sched_getaffinity(0))
    with pytest.raises(SystemExit):
        live.main(["--dry-run", "--out", str(tmp_path), "--pin", "--engines-per-mode", str(n)])  # 3n workers


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
        if "warm-up" in line or not line:
            break
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130, (seen + out, err)
    assert "Traceback" not in err + out and "KeyboardInterrupt" not in err + out, err
    assert len([x for x in err.splitlines() if x.strip()]) == 1 and "interrupted" in err, err
    assert "workers stopped" in out
