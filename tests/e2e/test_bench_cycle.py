"""The decode-cycle benchmark's pure parts (benchmarks/bench_cycle.py): the interleaved start order, the GPU-busy union,
the per-cycle numbers of a trace, the ratios to stock with their range, and the bit-exact / engaged check."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))  # bench_cycle imports its sibling _timing
_spec = importlib.util.spec_from_file_location("bench_cycle", ROOT / "benchmarks/bench_cycle.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)
sys.path.remove(str(ROOT / "benchmarks"))


def test_modes_start_interleaved_round_by_round():
    assert bench.mode_order(["stock", "plugin", "zero-copy"], 2) == [
        (1, "stock"),
        (1, "plugin"),
        (1, "zero-copy"),
        (2, "zero-copy"),
        (2, "plugin"),
        (2, "stock"),
    ]


def test_busy_time_is_the_union_of_overlapping_intervals():
    assert bench.busy_us([(0, 10), (5, 10), (20, 5), (21, 1)]) == 20
    assert bench.busy_us([]) == 0


def test_a_trace_becomes_per_cycle_numbers():
    layers = 2
    events = []
    for cycle in range(3):  # per cycle: 2 verify launches, 1 commit, 1 other kernel, 1 memcpy; 100 µs apart
        t = cycle * 100
        events += [
            {"cat": "kernel", "name": "fused_sigmoid_gating_delta_rule_update_kernel", "ts": t, "dur": 10},
            {"cat": "kernel", "name": "fused_sigmoid_gating_delta_rule_update_kernel", "ts": t + 10, "dur": 10},
            {"cat": "kernel", "name": "_fused_commit_kernel", "ts": t + 20, "dur": 4},
            {"cat": "kernel", "name": "other", "ts": t + 30, "dur": 6},
            {"cat": "gpu_memcpy", "name": "Memcpy DtoD", "ts": t + 40, "dur": 10},
            {"cat": "cpu_op", "name": "aten::add", "ts": t, "dur": 50},  # host events are not GPU time
        ]
    p = bench.cycle_profile(events, layers, wall_s=600e-6)
    assert p["cycles"] == 3
    assert p["kernels_per_cycle"] == 4 and p["gpu_us_per_cycle"] == 30
    assert p["commit_us_per_cycle"] == 4 and p["verify_us_per_cycle"] == 20
    assert p["gpu_busy_s"] == 120e-6 and p["gpu_kernel_s"] == 90e-6  # busy counts the copies, kernel_s does not
    assert p["wall_us_per_cycle"] == 200 and p["host_gap_us_per_cycle"] == 200 - 40


def test_ratios_say_the_range_of_every_pairing():
    wall = [
        {"model": "m", "batch": 64, "mode": "stock", "median_s": 1.0},
        {"model": "m", "batch": 64, "mode": "stock", "median_s": 1.1},
        {"model": "m", "batch": 64, "mode": "zero-copy", "median_s": 0.9},
        {"model": "m", "batch": 64, "mode": "zero-copy", "median_s": 0.95},
    ]
    zc = next(r for r in bench.ratios(wall) if r["mode"] == "zero-copy")
    assert zc["ratio"] == pytest.approx(0.925 / 1.05, abs=1e-4)
    assert (zc["ratio_min"], zc["ratio_max"]) == (round(0.9 / 1.1, 4), 0.95)
    assert zc["every_engine_below_base"] is True
    wall[3]["median_s"] = 1.05  # one zero-copy Engine above one stock Engine
    assert next(r for r in bench.ratios(wall) if r["mode"] == "zero-copy")["every_engine_below_base"] is False


def _result(md5, zero_copy=None, ours=8, zc=0):
    report = {"zero_copy": zero_copy, "commits_ours": ours, "zc_commit_calls": zc}
    return {"batches": {"1": {"md5": [md5]}}, "report": report}


def test_the_check_wants_equal_outputs_and_each_mode_engaged():
    good = {
        (1, "stock"): _result("a", ours=0),
        (1, "plugin"): _result("a"),
        (1, "zero-copy"): _result("a", "on", 8, 8),
    }
    assert bench.check(good, [1]) == []
    assert "md5" in bench.check({**good, (1, "plugin"): _result("b")}, [1])[0]
    assert "no commit through" in bench.check({**good, (1, "plugin"): _result("a", ours=0)}, [1])[0]
    off = bench.check({**good, (1, "zero-copy"): _result("a", "off: radix", 8, 0)}, [1])
    assert "not every commit served zero-copy" in off[0]


def test_an_engine_counts_only_its_own_reports(tmp_path, monkeypatch):
    """A folder left by an earlier run (the same round and mode) does not add its reports to this Engine's (seen on
    the H200: a cut run's plugin reports doubled the next run's commit count)."""
    stale = tmp_path / "r1-plugin" / "reports"
    stale.mkdir(parents=True)
    (stale / "status-1.json").write_text('{"events": {"commit_calls": 7, "ours_commit_calls": 7}}')

    def fake_run(cmd, env, stdout, stderr, timeout):  # the worker: one report, one result
        run = Path(cmd[-1]).parent
        (run / "reports").mkdir(exist_ok=True)
        (run / "reports" / "status-2.json").write_text('{"events": {"commit_calls": 3, "ours_commit_calls": 3}}')
        Path(cmd[-1]).write_text('{"batches": {}}')
        return type("Done", (), {"returncode": 0})()

    monkeypatch.setattr(bench.subprocess, "run", fake_run)
    args = type("Args", (), {"profile_round": 0, "engine_timeout": 5})()
    res = bench.run_engine(args, "plugin", 1, {}, tmp_path)
    assert res["report"]["reports"] == 1 and res["report"]["commits_all"] == 3, res["report"]


def test_a_trace_still_being_written_is_read_again_until_whole(tmp_path):
    """``profiled_generate`` reads the trace with no settle time (SGLang exports it before ``stop_profile`` returns); a
    file caught half-written is read again until the deadline, not taken for a failed profile."""
    import gzip
    import json
    import threading
    import time

    whole = gzip.compress(json.dumps({"traceEvents": [{"cat": "kernel", "ts": 0, "dur": 5}]}).encode())
    path = tmp_path / "x.trace.json.gz"
    path.write_bytes(whole[: len(whole) // 2])  # torn: an EOFError for a reader now
    threading.Timer(0.6, path.write_bytes, args=(whole,)).start()
    assert bench._trace_events(tmp_path, time.time() + 10, settle_s=0.0) == [{"cat": "kernel", "ts": 0, "dur": 5}]
    path.write_bytes(whole[:10])  # never whole: the read's own error once the deadline has passed
    with pytest.raises((EOFError, OSError, ValueError)):
        bench._trace_events(tmp_path, time.time() + 0.3, settle_s=0.0)
    path.unlink()
    with pytest.raises(TimeoutError):
        bench._trace_events(tmp_path, time.time() + 0.3, settle_s=0.0)


def test_a_generate_that_fails_under_the_profiler_stops_it(tmp_path):
    """SGLang refuses every later ``start_profile`` while one runs: a generate that raises under the profiler stops it
    before the error goes on."""
    calls = []

    class Engine:
        def start_profile(self, **kw):
            calls.append("start")

        def generate(self, **kw):
            raise RuntimeError("the generate failed")

        def stop_profile(self):
            calls.append("stop")

    with pytest.raises(RuntimeError, match="the generate failed"):
        bench.profiled_generate(Engine(), [[1, 2]], {"max_new_tokens": 2}, tmp_path / "t", 2, timeout_s=0.2)
    assert calls == ["start", "stop"]
