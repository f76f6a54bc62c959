"""The e2e server route against a fake launch_server (tests/e2e/fake_launch_server.py): the flag, the md5,
the process group stopped, servers the user runs, the launch_server options."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_mamba_dedup.e2e import cli, engine, server, settings, verdict
from sglang_mamba_dedup.e2e.context import RunContext
from tests.e2e.procs import alive, start_fake_server

FAKE_SERVER = str(Path(__file__).resolve().parent / "fake_launch_server.py")


def _fake_command(engine_kwargs, port, flag):
    cmd = server.server_command(engine_kwargs, port, flag)
    assert cmd[1:3] == ["-m", "sglang.launch_server"] and ("--enable-mamba-conv-dedup" in cmd) == flag
    return [sys.executable, FAKE_SERVER] + cmd[3:]


def _server_runner(**kw):
    def run(spec, mode, report_dir, log_path):
        return server.run_server(spec, mode, report_dir, log_path, timeout=30, command=_fake_command, **kw)

    return run


def _server_args(tmp_path, workdir="w", prompts=3, tokens=4):
    """The e2e command line of the server-route tests (fake launch_server, token-id prompts)."""
    return [
        "--server",
        "--prompt-format",
        "ids",
        "--vocab-size",
        "100",
        "--num-prompts",
        str(prompts),
        "--max-new-tokens",
        str(tokens),
        "--model-path",
        str(tmp_path),
        "--workdir",
        str(tmp_path / workdir),
    ]


def test_server_route_flag_md5_and_plugin_line(tmp_path, monkeypatch, capsys):
    pid_file = tmp_path / "child.pid"
    monkeypatch.setenv("FAKE_SERVER_CHILD_PID_FILE", str(pid_file))
    monkeypatch.setenv("SGLANG_MAMBA_DEDUP", "1")  # must not reach the server: the flag is what is tested
    code = cli.main(_server_args(tmp_path), runner=_server_runner())
    out = capsys.readouterr().out
    assert code == verdict.EXIT_OK, out
    assert "-> EQUAL" in out and "engaged: YES" in out and "off as expected: yes" in out
    children = [int(x) for x in pid_file.read_text().split()]
    assert len(children) == 2 and not any(map(alive, children)), "a server's child process was left running"


def test_server_route_through_main_without_a_runner(tmp_path, monkeypatch, capsys):
    """--server itself picks the server runner (the fake stands in for launch_server)."""
    monkeypatch.setattr(engine, "cuda_problem", lambda kw: None)
    monkeypatch.setattr(
        server.run_server, "__kwdefaults__", dict(server.run_server.__kwdefaults__, command=_fake_command)
    )
    code = cli.main(_server_args(tmp_path, prompts=2, tokens=3) + ["--run-timeout", "30"])
    out = capsys.readouterr().out
    assert code == verdict.EXIT_OK, out
    assert "launch_server with --enable-mamba-conv-dedup" in out
    assert "server log: sglang-mamba-dedup 0.1.0 (SGLang fake" in out, "the server's own plugin line is shown"


def test_server_route_md5_differ_and_failed_start(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FAKE_SERVER_DIFFER", "1")
    args = _server_args(tmp_path, "a", prompts=2, tokens=3)
    assert cli.main(args, runner=_server_runner()) == verdict.EXIT_MD5_DIFFER
    monkeypatch.delenv("FAKE_SERVER_DIFFER")
    monkeypatch.setenv("FAKE_SERVER_FAIL", "1")
    args = _server_args(tmp_path, "b", prompts=2, tokens=3)
    assert cli.main(args, runner=_server_runner()) == verdict.EXIT_RUN_FAILED
    assert "exited with 7 before it was healthy" in capsys.readouterr().out


def test_server_is_stopped_on_ctrl_c(tmp_path, monkeypatch):
    pid_file = tmp_path / "child.pid"
    monkeypatch.setenv("FAKE_SERVER_CHILD_PID_FILE", str(pid_file))
    started = {}

    def interrupted(base_url, spec, timeout):
        started["url"] = base_url
        raise KeyboardInterrupt

    monkeypatch.setattr(server, "generate", interrupted)
    spec = {
        "engine_kwargs": {},
        "prompts": [[1, 2]],
        "prompt_format": "ids",
        "batch_size": 1,
        "sampling_params": {"max_new_tokens": 2},
        "warmup_tokens": 0,
    }
    with pytest.raises(KeyboardInterrupt):
        server.run_server(spec, "on", tmp_path, tmp_path / "log", timeout=30, command=_fake_command)
    assert started and not alive(int(pid_file.read_text().split()[0]))


def test_server_gets_the_spec_plugin_variables_per_mode(tmp_path, monkeypatch):
    """launch_server's environment: the zero-copy variable in the on and fault runs only (never the parent's), the
    chosen fault in the fault run (the server replaced by an env dump into its report folder)."""
    dump = "import json, os; json.dump(dict(os.environ), open(os.environ['SGLANG_MAMBA_DEDUP_REPORT_DIR'] + '/e', 'w'))"
    monkeypatch.setenv("SGLANG_MAMBA_DEDUP_ZERO_COPY", "1")
    spec = {"engine_kwargs": {}, "plugin": {"fault": "zc_no_stage_in", "zero_copy": True}}
    got = {}
    for mode in ("off", "on", "fault"):
        rdir = tmp_path / mode
        rdir.mkdir()
        res = server.run_server(
            spec, mode, rdir, tmp_path / f"{mode}.log", timeout=30, command=lambda *a: [sys.executable, "-c", dump]
        )
        assert "exited with 0 before it was healthy" in res["error"]
        env = json.loads((rdir / "e").read_text())
        got[mode] = (env.get("SGLANG_MAMBA_DEDUP_ZERO_COPY"), env.get("SGLANG_MAMBA_DEDUP_FAULT"))
    assert got == {"off": (None, None), "on": ("1", None), "fault": ("1", "zc_no_stage_in")}


def test_base_urls_compare_md5_only(tmp_path, monkeypatch, capsys):
    procs = []
    urls = {}
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
        code = cli.main(
            [
                "--base-url-off",
                urls["off"],
                "--base-url-on",
                urls["on"],
                "--prompt-format",
                "ids",
                "--vocab-size",
                "50",
                "--num-prompts",
                "2",
                "--max-new-tokens",
                "3",
                "--workdir",
                str(tmp_path / "w"),
            ]
        )
    finally:
        for p in procs:
            os.killpg(p.pid, signal.SIGKILL)
    out = capsys.readouterr().out
    assert code == verdict.EXIT_OK, out
    assert "-> EQUAL" in out and "not readable" in out and "engaged" not in out.split("plugin status")[1]
    with pytest.raises(SystemExit) as e:
        cli.main(["--base-url-off", urls["off"]])
    assert e.value.code == 2


def test_server_route_two_rounds_flush_and_track_counts(tmp_path, monkeypatch, capsys):
    requests = tmp_path / "requests.log"
    monkeypatch.setenv("FAKE_SERVER_LOG", str(requests))
    commands = []
    inner = _server_runner()

    def runner(spec, mode, report_dir, log_path):
        res = inner(spec, mode, report_dir, log_path)
        commands.append(" ".join(res["command"]))
        return res

    code = cli.main(
        _server_args(tmp_path) + ["--json-out", str(tmp_path / "s.json")],
        runner=runner,
    )
    out = capsys.readouterr().out
    assert code == verdict.EXIT_OK, out
    # per server: warm-up, flush, round 1, round 2 (one batch each)
    assert [ln.split()[1] for ln in requests.read_text().splitlines()] == [
        "/generate",
        "/flush_cache",
        "/generate",
        "/generate",
    ] * 2
    assert "with track slots 8/8" in out and "engaged: YES (track slots required: 8" in out
    assert "read from the prefix cache: round 1 0 of " in out
    summary = json.loads((tmp_path / "s.json").read_text())
    r2 = summary["runs"][1]["stats"]["rounds"][1]
    assert r2["requests"] == 3 and r2["cached_tokens"] > 0  # round 2 starts from round 1's sequences
    # the deployment defaults reached the server's command line, spelled as its options
    assert all("--cuda-graph-backend-decode full --cuda-graph-backend-prefill disabled" in c for c in commands)
    assert not any("--disable-radix-cache" in c for c in commands)
    assert "--enable-mamba-conv-dedup" in commands[1] and "--enable-mamba-conv-dedup" not in commands[0]


def test_server_route_without_track_commits_is_not_engaged(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FAKE_SERVER_NO_TRACK", "1")
    args = _server_args(tmp_path)
    assert cli.main(args, runner=_server_runner()) == verdict.EXIT_NOT_ENGAGED
    assert "no commit with track slots ran through our kernel" in capsys.readouterr().out


def test_launchable_keeps_what_launch_server_knows():
    kw = {"model_path": "/m", "cuda_graph_backend_decode": "full", "new_knob": 1, "mine": 2}
    kept, left = server.launchable(kw, {"--model-path", "--cuda-graph-backend-decode"}, keep={"mine"})
    assert kept == {"model_path": "/m", "cuda_graph_backend_decode": "full", "mine": 2}
    assert left == ["--new-knob"]
    assert server.launchable(kw, None) == (kw, [])


def test_launch_server_options_of_the_installed_sglang():
    pytest.importorskip("sglang.srt.server_args")
    opts = server.launch_server_options()
    assert opts and {"--model-path", "--disable-radix-cache", "--speculative-algorithm"} <= opts
    args = cli._build_parser().parse_args([])
    ctx = RunContext(args)
    ctx.num_prompts_effective = 2
    kw = settings.build_engine_kwargs(ctx, "/m", True)
    kept, left = server.launchable(kw, opts)
    assert left == [], left  # every default is a launch_server option on this release
    cmd = server.server_command(kept, 1234, True)
    assert cmd[-1] == "--enable-mamba-conv-dedup" and "--skip-tokenizer-init" in cmd


def test_flush_once_against_a_server(tmp_path):
    port = server.free_port()
    proc = start_fake_server(port)
    try:
        base = f"http://127.0.0.1:{port}"
        assert server.wait_healthy(base, proc, 30) is None
        assert server.flush_once(base) is True
        assert server.flush_once(base + "/nowhere") is None  # no such endpoint: not supported
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
