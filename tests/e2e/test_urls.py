"""Which server answers (audit m19, m20, m21): URLs that are no http(s) server, or the same server twice, are
usage errors at once; a port that answers from another process than the server started here is refused."""

import os
import signal
import sys
import time

import pytest

from sglang_mamba_dedup.e2e import cli, server
from tests.e2e.procs import start_fake_server


@pytest.mark.parametrize(
    "off, on, needle",
    [
        ("127.0.0.1:30000", "127.0.0.1:30001", "--base-url-off '127.0.0.1:30000': not an http:// or https:// URL"),
        ("http://127.0.0.1:1", "file:///tmp/x", "--base-url-on 'file:///tmp/x': not an http:// or https:// URL"),
        ("http://127.0.0.1:30000", "http://127.0.0.1:30000/", "are the same server"),
        ("http://LOCALHOST", "http://localhost:80", "are the same server"),
        ("http://127.0.0.1:99999", "http://127.0.0.1:1", "--base-url-off 'http://127.0.0.1:99999': not an"),
        ("http://127.0.0.1:30000", "http://localhost:30000", "are the same server"),  # m-E8: two names, one server
        ("http://127.0.0.1:30000", "http://127.1:30000", "are the same server"),
    ],
    ids=["no-scheme", "file", "slash", "default-port", "bad-port", "localhost", "short-ip"],
)
def test_bad_base_urls_are_usage_errors_at_once(off, on, needle, tmp_path, capsys):
    t0 = time.monotonic()
    with pytest.raises(SystemExit) as exc:
        cli.main(["--base-url-off", off, "--base-url-on", on, "--workdir", str(tmp_path / "w")])
    assert exc.value.code == 2 and time.monotonic() - t0 < 5
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and needle in err[0], err
    assert not (tmp_path / "w").exists()


def test_a_port_answering_from_another_process_is_refused(tmp_path, monkeypatch):
    """The port the server was to bind answers, but from a foreign process (taken after free_port closed it)."""
    port = server.free_port()
    foreign = start_fake_server(port)
    try:
        assert server.wait_healthy(f"http://127.0.0.1:{port}", None, 20) is None
        monkeypatch.setattr(server, "free_port", lambda: port)
        loading = [sys.executable, "-c", "import time; time.sleep(30)"]  # ours: still loading, not listening
        with server.launched({}, "off", tmp_path, tmp_path / "log", timeout=10, command=lambda *a: loading) as info:
            assert info["error"] and "another process took the port" in info["error"], info
            ours = info["pid"]
        assert server.group_members(ours) == []
    finally:
        os.killpg(foreign.pid, signal.SIGKILL)
