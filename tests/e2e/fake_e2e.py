"""``python tests/e2e/fake_e2e.py [e2e options]``: a real e2e process whose launch_server is the fake
(tests/e2e/fake_launch_server.py), for the tests that signal it. SIGINT gets Python's own handler, SIGHUP and
SIGTERM their default action, even where the test runner's parent ignores them, as in a terminal: the e2e keeps
a signal its caller ignores ignored, and a CI runner started under ``nohup`` ignores SIGHUP. SGLang and torch are not imported (seconds each): every default
and option is passed, and versions and GPU are left empty."""

import signal
import sys
from pathlib import Path

from sglang_mamba_dedup.e2e import cli, driver, engine, server

FAKE_SERVER = str(Path(__file__).resolve().parent / "fake_launch_server.py")
_launch = server.server_command


def _fake_command(engine_kwargs, port, flag):
    return [sys.executable, FAKE_SERVER] + _launch(engine_kwargs, port, flag)[3:]


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    server.server_command = _fake_command
    server.run_server.__kwdefaults__ = dict(server.run_server.__kwdefaults__, command=_fake_command)
    engine.cuda_problem = lambda kw: None
    driver.server_arg_fields = lambda: None
    server.launch_server_options = lambda: None
    engine.package_versions = engine.gpu_info = dict
    sys.exit(cli.main(sys.argv[1:]))
