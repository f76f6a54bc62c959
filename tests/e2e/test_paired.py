"""``e2e --throughput``: two servers side by side, pairs A B B A (sglang_mamba_dedup/e2e/paired.py).

Pure parts on fake endpoints (order, pairing, statistics, md5 check, time budget), then the whole command
against two fake launch_servers (tests/e2e/fake_launch_server.py): start order, request order, CSV and
summary, md5 mismatch exit code, a failed start and Ctrl-C leave no process behind, servers the user runs."""

import csv
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_mamba_dedup.e2e import cli, paired, server, stats, verdict
from tests.e2e.procs import alive
from tests.support.e2e import FakeClock, FakeEngine, fake_ids

FAKE_SERVER = str(Path(__file__).resolve().parent / "fake_launch_server.py")


# ----------------------------------------------------------------------------- pure parts
def test_pair_order_alternates_a_b_b_a():
    assert [stats.pair_order(k) for k in range(4)] == [("off", "on"), ("on", "off"), ("off", "on"), ("on", "off")]


def test_pair_schedule_first_pairs_then_phases_in_proportion():
    plan = stats.pair_schedule({"batch1": 6, "full": 2})
    assert plan[:2] == [("batch1", 0), ("full", 0)]  # the first request of each mode after the warm-up
    assert plan[2:] == [("batch1", 1), ("batch1", 2), ("batch1", 3), ("full", 1)] + [
        ("batch1", 4),
        ("batch1", 5),
        ("batch1", 6),
        ("full", 2),
    ]
    assert stats.pair_schedule({"batch1": 2, "full": 0}) == [("batch1", 0), ("batch1", 1), ("batch1", 2)]


@pytest.mark.parametrize(
    "pairs, verdict, ratio",
    [
        ([(100, 110), (100, 90), (100, 100)], "within noise", (1.0, 0.9, 1.1)),
        ([(100, 120), (100, 110), (200, 240)], "on faster", (1.2, 1.1, 1.2)),
        ([(100, 80), (100, 90), (100, 95)], "on slower", (0.9, 0.8, 0.95)),
        ([(100, 120), (100, 130)], "not compared", (1.25, 1.2, 1.3)),
        ([(100, 100), (100, 110), (100, 120)], "within noise", (1.1, 1.0, 1.2)),  # the range touches 1
    ],
    ids=["noise", "faster", "slower", "too-few", "touching-1"],
)
def test_pair_stats_ratio_median_range_and_verdict(pairs, verdict, ratio):
    st = stats.pair_stats([{"off": a, "on": b} for a, b in pairs])
    assert st["verdict"] == verdict, st
    r = st["ratio"]
    assert (r["median"], r["min"], r["max"]) == pytest.approx(ratio)
    assert st["off"]["median"] == pytest.approx(sorted(a for a, _ in pairs)[len(pairs) // 2] if len(pairs) % 2 else 100)
    assert st["on"]["max"] == max(b for _, b in pairs)


class _Logged:
    """A FakeEngine endpoint that writes ``(mode, what)`` into a shared log."""

    def __init__(self, mode, log, rate, clock, differ_prompt=None):
        self.engine = FakeEngine(rate=rate, clock=clock, differ_prompt=differ_prompt)
        self.mode, self.log = mode, log

    def endpoint(self):
        def gen(batch, sampling):
            self.log.append((self.mode, "generate", len(batch), sampling["max_new_tokens"]))
            return self.engine.generate(batch, sampling)

        def flush():
            self.log.append((self.mode, "flush"))
            return self.engine.flush()

        return paired.Endpoint(gen, flush)


def _requests(prompts, n_full=4, n_b1=8):
    spec = {
        "prompts": prompts,
        "sampling_params": {"temperature": 0.0, "max_new_tokens": n_full, "ignore_eos": True},
        "batch_size": 0,
        "batch1": {"prompt_index": 0, "max_new_tokens": n_b1},
    }
    return paired.phase_requests(spec)


def test_run_pairs_order_flush_and_statistics():
    log, clock = [], FakeClock()
    prompts = [[1, 2, 3], [4, 5], [6]]
    eps = {"off": _Logged("off", log, 1000.0, clock), "on": _Logged("on", log, 1250.0, clock)}
    lines = []
    data = paired.run_pairs(
        {m: e.endpoint() for m, e in eps.items()},
        _requests(prompts),
        {"batch1": 3, "full": 1},
        clock=clock,
        say=lines.append,
    )
    # every timed request comes right after its own server's flush
    assert all(log[i][1] == "flush" and log[i + 1][:2] == (log[i][0], "generate") for i in range(0, len(log), 2))
    timed = [(m, n) for m, what, *rest in log if what == "generate" for n in [rest[0]]]
    expected = []
    for phase, k in stats.pair_schedule({"batch1": 3, "full": 1}):
        expected += [(m, 1 if phase == "batch1" else 3) for m in stats.pair_order(k)]
    assert timed == expected
    assert [(p["phase"], p["pair"], p["first"], p["order"]) for p in data["pairs"]] == [
        ("batch1", 0, True, "off,on"),
        ("full", 0, True, "off,on"),
        ("batch1", 1, False, "on,off"),
        ("batch1", 2, False, "off,on"),
        ("batch1", 3, False, "on,off"),
        ("full", 1, False, "on,off"),
    ]
    b1 = data["stats"]["batch1"]
    assert b1["ratio"]["runs"] == 3 and b1["ratio"]["median"] == pytest.approx(1.25)  # pair 0 left out
    assert b1["off"]["median"] == pytest.approx(1000.0) and b1["verdict"] == "on faster"
    assert data["stats"]["full"]["verdict"] == "not compared"  # 1 timed pair
    assert data["mismatches"] == [] and data["not_started"] == []
    assert data["pairs"][0]["off"]["ids_md5"] == data["pairs"][0]["on"]["ids_md5"]
    assert any("batch1 pair 0/3 (first after warm-up) [off,on]" in ln and "md5 equal" in ln for ln in lines)


def test_run_pairs_md5_mismatch_names_pair_and_token():
    log, clock = [], FakeClock()
    prompts = [[1, 2, 3], [4, 5]]
    eps = {"off": _Logged("off", log, 1000.0, clock), "on": _Logged("on", log, 1000.0, clock, differ_prompt=[4, 5])}
    data = paired.run_pairs({m: e.endpoint() for m, e in eps.items()}, _requests(prompts), {"batch1": 1, "full": 1})
    # batch 1 (prompt 0) is equal; every full-batch "on" request differs at request 1, token 2
    assert len(data["mismatches"]) == 2, data["mismatches"]
    assert data["mismatches"][0].startswith("md5 differ: full pair 0 (on)")
    assert "vs full pair 0 (off)" in data["mismatches"][0] and "request 1, token 2" in data["mismatches"][0]


def test_run_pairs_time_budget_skips_pairs_that_do_not_fit():
    log, clock = [], FakeClock()
    eps = {m: _Logged(m, log, 1000.0, clock) for m in ("off", "on")}
    budget = {"left": 10.0}

    def time_left():
        return budget["left"] - (clock.t - 100.0)

    # each full pair takes 2 x 3 x 4 / 1000 = 0.024 s, each batch-1 pair 2 x 8 / 1000 = 0.016 s
    budget["left"] = 0.060  # pairs 0 (0.040 s), then one batch-1 pair (1.1 x 0.016 fits in 0.020), no more
    data = paired.run_pairs(
        {m: e.endpoint() for m, e in eps.items()},
        _requests([[1, 2, 3], [4, 5], [6]]),
        {"batch1": 4, "full": 2},
        clock=clock,
        time_left=time_left,
    )
    done = [(p["phase"], p["pair"]) for p in data["pairs"]]
    assert done == [("batch1", 0), ("full", 0), ("batch1", 1)]
    assert data["not_started"] == ["batch1 pair 2", "full pair 1", "batch1 pair 3", "batch1 pair 4", "full pair 2"]


def test_warm_up_covers_every_timed_request():
    log, clock = [], FakeClock()
    e = _Logged("off", log, 1000.0, clock)
    paired.warm_up(e.endpoint(), _requests([[1], [2], [3]], n_full=5, n_b1=9), -1)
    assert log == [("off", "generate", 1, 9), ("off", "generate", 3, 5)]
    log.clear()
    paired.warm_up(e.endpoint(), _requests([[1], [2], [3]]), 0)
    assert log == []


def test_csv_rows_one_per_pair(tmp_path):
    clock = FakeClock()
    eps = {m: _Logged(m, [], 1000.0 if m == "off" else 500.0, clock) for m in ("off", "on")}
    data = paired.run_pairs(
        {m: e.endpoint() for m, e in eps.items()}, _requests([[1], [2]]), {"batch1": 2, "full": 0}, clock=clock
    )
    path = tmp_path / "p.csv"
    paired.write_csv(path, paired.csv_rows(data, "x"))
    rows = list(csv.DictReader(path.open()))
    assert [(r["phase"], r["pair"], r["first"], r["order"]) for r in rows] == [
        ("batch1", "0", "1", "off,on"),
        ("batch1", "1", "0", "on,off"),
        ("batch1", "2", "0", "off,on"),
    ]
    assert all(r["variant"] == "x" and r["off_md5"] == r["on_md5"] for r in rows)
    assert float(rows[1]["on_off_ratio"]) == pytest.approx(0.5)


# ----------------------------------------------------------------------------- the command, fake servers
def _children(tmp_path):
    path = tmp_path / "children.pid"
    return [int(x) for x in path.read_text().split()] if path.exists() else []


def _args(tmp_path, *extra):
    return [
        "--server",
        "--throughput",
        "--prompt-format",
        "ids",
        "--vocab-size",
        "100",
        "--num-prompts",
        "3",
        "--max-new-tokens",
        "4",
        "--batch1-tokens",
        "6",
        "--batch1-pairs",
        "3",
        "--full-pairs",
        "1",
        "--model-path",
        str(tmp_path),
        "--workdir",
        str(tmp_path / "w"),
        "--run-timeout",
        "30",
        *extra,
    ]


def test_throughput_servers_side_by_side(tmp_path, fake_servers, capsys):
    code = cli.main(
        _args(tmp_path, "--json-out", str(tmp_path / "s.json"), "--csv-out", str(tmp_path / "p.csv"), "--label", "L")
    )
    out = capsys.readouterr().out
    assert code == verdict.EXIT_OK, out
    # off first, on only once off was healthy, each on its own port
    assert [(m, h) for m, _, h in fake_servers] == [("off", None), ("on", True)]
    assert fake_servers[0][1] != fake_servers[1][1]
    # requests: the warm-up of every timed request (batch 1 and the full batch) on each server, then the pairs
    lines = [tuple(ln.split()) for ln in (tmp_path / "requests.log").read_text().splitlines()]
    assert lines[:4] == [("off", "/generate"), ("off", "/generate"), ("on", "/generate"), ("on", "/generate")]
    pairs = lines[4:]
    assert all(
        pairs[i][1] == "/flush_cache" and pairs[i + 1] == (pairs[i][0], "/generate") for i in range(0, len(pairs), 2)
    )
    expected = [m for _, k in stats.pair_schedule({"batch1": 3, "full": 1}) for m in stats.pair_order(k)]
    assert [m for m, what in pairs if what == "/generate"] == expected
    # the outputs: CSV, summary, table, commits per server
    rows = list(csv.DictReader((tmp_path / "p.csv").open()))
    assert len(rows) == 4 + 2 and {r["variant"] for r in rows} == {"L"}
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["label"] == "L" and summary["exit_code"] == 0
    tp = summary["throughput"]
    assert tp["stats"]["batch1"]["ratio"]["runs"] == 3 and tp["stats"]["full"]["verdict"] == "not compared"
    assert [r["mode"] for r in summary["runs"]] == ["off", "on"] and summary["runs"][1]["engaged"] is True
    assert summary["runs"][1]["commit_counts"][0]["ours_commit_calls"] == 8
    assert "| batch 1: 1 request x 6 new tokens | 3 |" in out
    assert "first request of each mode after the warm-up (batch 1" in out
    assert (
        "commits through our kernel per server (ours/all, from its scheduler's status report): off 0/8, on 8/8" in out
    )
    assert "md5 token ids, batch1: 4 pairs x off, on: all EQUAL" in out
    # both servers stopped, their children too
    children = _children(tmp_path)
    assert len(children) == 2 and not any(map(alive, children))


def test_throughput_zero_copy_reaches_the_on_server(tmp_path, fake_servers, monkeypatch, capsys):
    """--zero-copy: the on server gets the variable (its fake scheduler reports zero-copy on) and is judged on it."""
    code = cli.main(_args(tmp_path, "--zero-copy", "--json-out", str(tmp_path / "s.json")))
    out = capsys.readouterr().out
    assert code == verdict.EXIT_OK, out
    assert "zero-copy: on; commits served zero-copy 8" in out
    runs = json.loads((tmp_path / "s.json").read_text())["runs"]
    assert "zero_copy" not in runs[0]["scheduler_report"]["events"]
    assert runs[1]["scheduler_report"]["events"]["zero_copy"] == "on"
    assert "zero-copy: on; commits served zero-copy 8 (with a track set 5)" in out  # the radix cache on
    monkeypatch.setenv("FAKE_SERVER_ZERO_COPY", "off: not GDN")  # the on server refused it
    code = cli.main(_args(tmp_path, "--zero-copy"))
    out = capsys.readouterr().out
    assert code == verdict.EXIT_NOT_ENGAGED and "the gate refused zero-copy: off: not GDN" in out, out


@pytest.mark.parametrize("zc_track, needle", [("0", "(events.zc_track_commits: 0)"), ("absent", "not recorded")])
def test_throughput_zero_copy_with_the_radix_cache_needs_track_commits(
    tmp_path, fake_servers, monkeypatch, capsys, zc_track, needle
):
    """The on server's report without commits with a track set served zero-copy (none, or the counter absent):
    not a pass; with --no-radix-cache the counter is not asked for (and the radix switch not set)."""
    monkeypatch.setenv("FAKE_SERVER_ZC_TRACK", zc_track)
    code = cli.main(_args(tmp_path, "--zero-copy"))
    out = capsys.readouterr().out
    assert code == verdict.EXIT_NOT_ENGAGED and needle in out.splitlines()[-1], out
    code = cli.main(_args(tmp_path, "--zero-copy", "--no-radix-cache"))
    out = capsys.readouterr().out
    assert code == verdict.EXIT_OK, out


def test_throughput_md5_mismatch_exits_1(tmp_path, fake_servers, monkeypatch, capsys):
    monkeypatch.setenv("FAKE_SERVER_DIFFER", "1")
    code = cli.main(_args(tmp_path, "--json-out", str(tmp_path / "s.json")))
    out = capsys.readouterr().out
    assert code == verdict.EXIT_MD5_DIFFER, out
    assert "md5 differ: batch1 pair 0 (on)" in out and "DIFFERENT" in out and "RESULT: FAIL" in out
    assert json.loads((tmp_path / "s.json").read_text())["exit_code"] == 1
    assert not any(map(alive, _children(tmp_path)))


def test_throughput_failed_start_stops_the_other_server(tmp_path, fake_servers, monkeypatch, capsys):
    monkeypatch.setenv("FAKE_SERVER_FAIL", "on")
    code = cli.main(_args(tmp_path))
    out = capsys.readouterr().out
    assert code == verdict.EXIT_RUN_FAILED, out
    assert "exited with 7 before it was healthy" in out
    children = _children(tmp_path)
    assert len(children) == 1 and not alive(children[0]), "the off server's process group was left running"
    assert not (tmp_path / "requests.log").exists()  # nothing was sent


def test_throughput_failed_off_server_starts_no_on_server(tmp_path, fake_servers, monkeypatch, capsys):
    monkeypatch.setenv("FAKE_SERVER_FAIL", "1")
    code = cli.main(_args(tmp_path))
    out = capsys.readouterr().out
    assert code == verdict.EXIT_RUN_FAILED, out
    assert [m for m, _, _ in fake_servers] == ["off"]
    assert "not started (the off server failed)" in out and "see its log: " in out and "None" not in out


def test_throughput_ctrl_c_stops_both_servers(tmp_path, fake_servers, monkeypatch):
    seen = {}

    def interrupted(endpoints, *a, **k):
        seen["modes"] = sorted(endpoints)
        raise KeyboardInterrupt

    monkeypatch.setattr(paired, "run_pairs", interrupted)
    assert cli.main(_args(tmp_path)) == verdict.EXIT_SIGNAL_BASE + signal.SIGINT  # one "stopped" line, no traceback
    children = _children(tmp_path)
    assert seen["modes"] == ["off", "on"] and len(children) == 2
    assert not any(map(alive, children))


def test_throughput_against_servers_you_run(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FAKE_SERVER_LOG", str(tmp_path / "requests.log"))
    procs, urls = [], {}
    try:
        for mode in ("off", "on"):
            port = server.free_port()
            cmd = [sys.executable, FAKE_SERVER, "--port", str(port)] + (
                ["--enable-mamba-conv-dedup"] if mode == "on" else []
            )
            procs.append(
                subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            )
            urls[mode] = f"http://127.0.0.1:{port}"
        args = _args(tmp_path)[2:]  # no --server, no --throughput (added below)
        code = cli.main(["--base-url-off", urls["off"], "--base-url-on", urls["on"], "--throughput"] + args)
    finally:
        for p in procs:
            os.killpg(p.pid, signal.SIGKILL)
    out = capsys.readouterr().out
    assert code == verdict.EXIT_OK, out
    assert "(servers you run)" in out and "plugin status: not readable" in out and "| batch 1" in out
    gens = [ln.split()[0] for ln in (tmp_path / "requests.log").read_text().splitlines() if ln.endswith("/generate")]
    expected = [m for _, k in stats.pair_schedule({"batch1": 3, "full": 1}) for m in stats.pair_order(k)]
    assert gens[4:] == expected


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--throughput"], "add --server or --base-url-off/--base-url-on"),
        (["--server", "--throughput", "--modes", "off,on"], "(off and on server, pairs): no --modes"),
        (["--server", "--throughput", "--batch1-pairs", "0", "--full-pairs", "0"], "leave nothing to time"),
        (["--server", "--batch1-pairs", "3"], "--batch1-pairs needs --throughput"),
        (["--server", "--csv-out", "x.csv", "--label", "a"], "--csv-out and --label need --throughput"),
        (["--server", "--throughput", "--full-pairs", "-1"], "--full-pairs"),
        (["--server", "--throughput", "--csv-out", "/nonexistent/x.csv"], "--csv-out"),
    ],
    ids=["no-server", "with-modes", "zero-pairs", "pairs-alone", "csv-alone", "negative", "csv-folder"],
)
def test_throughput_usage_errors(argv, needle, tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(argv + ["--workdir", str(tmp_path / "w")])
    assert exc.value.code == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and needle in err[0], err
    assert not (tmp_path / "w").exists()


def test_fake_ids_are_what_the_fake_engine_returns():
    """The pure tests above rely on FakeEngine's outputs being a function of the prompt only."""
    e = FakeEngine()
    assert e.generate([[1, 2]], {"max_new_tokens": 3})[0]["output_ids"] == fake_ids([1, 2], 3)
