"""What the servers answer (audit B4, m16, m17, m18): outputs that hold nothing fail with their own exit code on
every route, and never give an "EQUAL" md5; answers of another shape are a failed request, not a traceback."""

import os
import signal

import pytest

from sglang_mamba_dedup.e2e import cli, server, verdict, workload
from tests.e2e.procs import start_fake_server
from tests.e2e.test_paired import _args as _throughput_args
from tests.e2e.test_server_route import _server_args, _server_runner

EMPTY = ["no_ids", "empty", "short"]


def _result_line(out: str) -> str:
    return out.strip().splitlines()[-1]


def _assert_no_output(code: int, out: str) -> None:
    assert code == verdict.EXIT_NO_OUTPUT == 7, out
    assert "EQUAL" not in out and "md5 equal" not in out, out
    line = _result_line(out)
    assert line.startswith("RESULT: FAIL -- nothing generated") and line.endswith("(exit 7)"), line


@pytest.mark.parametrize("shape", EMPTY)
def test_offline_route_refuses_empty_outputs(shape, tmp_path, capsys):
    """The offline route: the engine process runs the same run plan (a stand-in for Engine.generate here)."""

    def generate(batch, sampling):
        n = sampling["max_new_tokens"]
        return [workload_answer(shape, n) for _ in batch]

    def runner(spec, mode, report_dir, log_path):
        return {"ok": True, "pid": 1, **workload.run_plan(spec, generate, lambda: True)}

    args = ["--prompt-format", "ids", "--vocab-size", "50", "--num-prompts", "2", "--max-new-tokens", "4"]
    code = cli.main(args + ["--modes", "off,off", "--workdir", str(tmp_path / "w")], runner=runner)
    _assert_no_output(code, capsys.readouterr().out)


def workload_answer(shape, n):
    ids = {"no_ids": None, "empty": [], "short": [5] * (n - 1)}[shape]
    return {"meta_info": {"completion_tokens": n}} if ids is None else {"output_ids": ids, "meta_info": {}}


@pytest.mark.parametrize("shape", EMPTY)
def test_server_route_refuses_empty_outputs(shape, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FAKE_SERVER_ANSWER", shape)
    code = cli.main(_server_args(tmp_path), runner=_server_runner())
    _assert_no_output(code, capsys.readouterr().out)


@pytest.mark.parametrize("shape", EMPTY)
def test_throughput_refuses_empty_outputs(shape, tmp_path, fake_servers, monkeypatch, capsys):
    monkeypatch.setenv("FAKE_SERVER_ANSWER", shape)
    code = cli.main(_throughput_args(tmp_path))
    _assert_no_output(code, capsys.readouterr().out)


@pytest.fixture
def two_servers(tmp_path):
    """Two fake servers "you run", started with the environment the test sets first; their base URLs."""
    procs, urls = [], {}

    def start(**env):
        for mode in ("off", "on"):
            port = server.free_port()
            procs.append(start_fake_server(port, *(["--enable-mamba-conv-dedup"] * (mode == "on")), **env))
            urls[mode] = f"http://127.0.0.1:{port}"
        return ["--base-url-off", urls["off"], "--base-url-on", urls["on"], "--workdir", str(tmp_path / "w")]

    yield start
    for p in procs:
        os.killpg(p.pid, signal.SIGKILL)


BASE = ["--prompt-format", "ids", "--vocab-size", "50", "--num-prompts", "2", "--max-new-tokens", "3"]


@pytest.mark.parametrize("throughput", [False, True], ids=["md5", "throughput"])
def test_base_urls_refuse_answers_without_output_ids(throughput, two_servers, capsys):
    argv = two_servers(FAKE_SERVER_ANSWER="no_ids") + BASE
    if throughput:
        argv += ["--throughput", "--batch1-pairs", "2", "--full-pairs", "1", "--batch1-tokens", "3"]
    _assert_no_output(cli.main(argv), capsys.readouterr().out)


@pytest.mark.parametrize(
    "shape, needle",
    [
        ("strings", "an answer is str 'x', not an object"),
        ("ids_str", "output_ids 'abc' is not a list of token ids"),
        ("negative", "completion_tokens -5 is not a token count"),
    ],
)
def test_answers_of_another_shape_are_a_failed_request(shape, needle, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FAKE_SERVER_ANSWER", shape)
    code = cli.main(_server_args(tmp_path), runner=_server_runner())
    out = capsys.readouterr().out
    assert code == verdict.EXIT_RUN_FAILED, out
    assert "request failed: ValueError: " + needle in _result_line(out), out


def test_health_with_a_text_body_is_up(two_servers, capsys):
    code = cli.main(two_servers(FAKE_SERVER_HEALTH_TEXT="1") + BASE)
    out = capsys.readouterr().out
    assert code == verdict.EXIT_OK and "-> EQUAL" in out, out


def test_booleans_are_not_token_ids_and_extra_tokens_are_not_ok():
    """m-E3 of the second audit: ``output_ids: [true, ...]`` passed (a bool is an Integral), and 50 times the tokens
    asked passed (only fewer was checked) on the --base-url route, whose md5 is its only check."""
    with pytest.raises(ValueError, match="is not a list of token ids"):
        workload._output({"output_ids": [True, True]})
    assert workload._output({"output_ids": [3, 4]})["output_ids"] == [3, 4]
    too_many = [{"output_ids": [5] * 200}]
    assert "200 of the 4 tokens asked" in workload.output_problem(too_many, 4)
    assert workload.output_problem([{"output_ids": [5] * 4}], 4) is None
    assert workload.output_problem(too_many, None) is None  # no fixed length asked: any count


def test_a_trickled_answer_ends_at_the_deadline():
    """m-E2 of the second audit: a server that sends its answer a few bytes at a time kept the e2e past
    --run-timeout (urlopen's timeout bounds each read only)."""
    import threading
    import time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Trickle(BaseHTTPRequestHandler):
        def do_POST(self):
            body = b'{"output_ids": [1, 2, 3], "meta_info": {}}' + b" " * 200
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            for i in range(len(body)):
                self.wfile.write(body[i : i + 1])
                self.wfile.flush()
                time.sleep(0.05)

        def log_message(self, *args):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Trickle)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        t0 = time.monotonic()
        with pytest.raises(TimeoutError, match="no whole answer"):
            server._request(f"http://127.0.0.1:{srv.server_address[1]}/generate", {"x": 1}, timeout=1.0)
        assert time.monotonic() - t0 < 3.0
    finally:
        srv.shutdown()
