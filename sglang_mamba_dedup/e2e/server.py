"""The server route of ``sglang-mamba-dedup e2e``: ``python -m sglang.launch_server`` + HTTP, as users deploy.

:func:`run_server` starts SGLang's own server in a subprocess (its own process group) on a free local port,
without the launch flag for an "off" run and with ``--enable-mamba-conv-dedup`` for an "on" run (no
``SGLANG_MAMBA_DEDUP`` in its environment: the flag is what is tested), waits for ``/health``, runs the same
two-round plan as the offline route (:func:`.workload.run_plan`: warm-up, ``/flush_cache``,
round 1, round 2 on prefixes of round 1) greedily over ``/generate``
(token ids when there is no tokenizer), and stops the whole process group (SIGTERM, then SIGKILL), also when
the start fails, a request fails or the user presses Ctrl-C. The server's own log lines of the plugin (its
activation line) are returned with the outputs.

The engine keywords become ``launch_server`` options (:func:`server_command`); :func:`launchable` leaves out
those the installed ``launch_server`` does not know (an older release), except the ones the user gave.

:func:`url_runner` talks to a server the user already runs (``--base-url-off`` / ``--base-url-on``): then
nothing is started and no status report can be read, only the md5 is compared.

Both return what :func:`.engine.run_in_subprocess` returns, so the driver compares them the same way.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..env import FLAG, REPORT_DIR, SWITCH
from . import interrupts, watchdog
from .engine import run_env
from .files import open_for_writing, write_text
from .workload import Generate, flush_with_retry, run_plan

#: Engine keywords whose ``None`` the server's command line spells as the choice "none".
_NONE_IS_A_CHOICE = ("grammar_backend",)

CommandBuilder = Callable[[dict[str, Any], int, bool], list[str]]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_command(engine_kwargs: dict[str, Any], port: int, flag: bool) -> list[str]:
    """``python -m sglang.launch_server`` with the Engine keywords spelled as its command-line options."""
    cmd = [sys.executable, "-m", "sglang.launch_server", "--host", "127.0.0.1", "--port", str(port)]
    for key, value in engine_kwargs.items():
        opt = "--" + key.replace("_", "-")
        if value is None and key in _NONE_IS_A_CHOICE:
            value = "none"
        if value is None or value is False:
            continue
        if value is True:
            cmd.append(opt)
        else:
            cmd += [opt, str(value)]
    if flag:
        cmd.append(FLAG)
    return cmd


@functools.lru_cache(maxsize=1)
def launch_server_options() -> frozenset[str] | None:
    """The option strings of the installed ``launch_server`` (``ServerArgs.add_cli_args``), or None when
    SGLang cannot be imported here (then every option is passed)."""
    try:
        from sglang.srt.server_args import ServerArgs

        parser = argparse.ArgumentParser(add_help=False)
        ServerArgs.add_cli_args(parser)
    except Exception:  # noqa: BLE001 - not importable or not readable here: unknown
        return None
    return frozenset(opt for action in parser._actions for opt in action.option_strings)


def launchable(
    engine_kwargs: Mapping[str, Any], options: Collection[str] | None, keep: Collection[str] = ()
) -> tuple[dict[str, Any], list[str]]:
    """``(kwargs, left_out)``: the engine keywords whose ``--option`` the installed ``launch_server`` has.

    ``model_path`` and the keys in ``keep`` (what the user gave with ``--engine-arg``) always stay: an option
    the server does not know then fails the start with SGLang's own message. ``options`` None keeps all.
    """
    if options is None:
        return dict(engine_kwargs), []
    kept: dict[str, Any] = {}
    left: list[str] = []
    for key, value in engine_kwargs.items():
        if key == "model_path" or key in keep or "--" + key.replace("_", "-") in options:
            kept[key] = value
        else:
            left.append(f"--{key.replace('_', '-')}")
    return kept, left


def _request(url: str, payload: dict | None = None, timeout: float = 30.0) -> Any:
    """One JSON request, whole within ``timeout`` seconds: ``urlopen``'s timeout bounds each read only, so a server
    that trickles its answer (a byte a second) would hold the e2e past ``--run-timeout`` (m-E2 of the second audit);
    the body is read in the pieces that arrive, against one deadline."""
    deadline = time.monotonic() + timeout
    data = None if payload is None else json.dumps(payload).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"} if data else {})
    chunks: list[bytes] = []
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        while True:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no whole answer from {url} within {timeout:g} s")
            piece = resp.read1(1 << 16)
            if not piece:
                break
            chunks.append(piece)
    body = b"".join(chunks)
    return json.loads(body) if body else None


def wait_healthy(base_url: str, proc: subprocess.Popen | None, timeout: float) -> str | None:
    """None once ``GET /health`` answers 200 (whatever its body) from the server; else why not (the process
    died, the time ran out, or, for a server started here, the port answers from another process)."""
    deadline = time.time() + timeout
    pause = 0.1
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            return f"the server exited with {proc.returncode} before it was healthy"
        try:
            with urllib.request.urlopen(base_url + "/health", timeout=5.0) as resp:
                resp.read()
            return None if proc is None else _not_ours(base_url, proc)
        except (urllib.error.URLError, ConnectionError, OSError, ValueError):
            time.sleep(pause)
            pause = min(2 * pause, 1.0)
    return f"the server was not healthy within {timeout:.0f} s"


def _not_ours(base_url: str, proc: subprocess.Popen) -> str | None:
    """Why what answered on the port is not the server started here, or None (it is, or this cannot tell)."""
    if proc.poll() is not None:
        return f"the server exited with {proc.returncode}; {base_url} answers from another process"
    port = urllib.parse.urlsplit(base_url).port
    if port is not None and serves_port(proc.pid, port) is False:
        return (
            f"{base_url} answers, but no process of the server started here (pid {proc.pid}) listens on port "
            f"{port}: another process took the port"
        )
    return None


def serves_port(pgid: int, port: int) -> bool | None:
    """Whether a process of the group listens on the local TCP ``port`` (None: ``/proc`` cannot tell)."""
    inodes = _listening_sockets(port)
    members = group_members(pgid)
    if not inodes or members is None:
        return None
    for pid in members:
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                        return True
    return False


def _listening_sockets(port: int) -> set[str]:
    """``socket:[inode]`` of every socket listening on the TCP ``port`` (``/proc/net/tcp``, ``tcp6``)."""
    found = set()
    for table in ("tcp", "tcp6"):
        try:
            rows = Path("/proc/net", table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if len(cols) > 9 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                found.add(f"socket:[{cols[9]}]")
    return found


def flush_once(base_url: str, timeout: float = 30.0) -> bool | None:
    """One ``POST /flush_cache``: True flushed, False refused (requests pending), None when the server has no
    such endpoint or wants an admin key for it (then the prefix cache stays as it is; the run goes on)."""
    req = urllib.request.Request(base_url + "/flush_cache", data=b"", method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            resp.read()
            return True
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403, 404, 405):
            return None
        if exc.code == 400:
            return False
        raise


def http_generate(base_url: str, prompt_format: str, timeout: float) -> Generate:
    """``generate(prompts, sampling_params) -> answers`` over ``POST /generate`` (token ids for ``"ids"``)."""
    key = "input_ids" if prompt_format == "ids" else "text"

    def gen(batch: list[Any], sampling: dict[str, Any]) -> list[dict]:
        out = _request(base_url + "/generate", {key: batch, "sampling_params": sampling}, timeout)
        return out if isinstance(out, list) else [out]

    return gen


def http_flush(base_url: str, timeout: float) -> Callable[[], bool | None]:
    """Empty the server's prefix cache, retried while it refuses (:func:`.workload.flush_with_retry`)."""
    return lambda: flush_with_retry(lambda: flush_once(base_url, min(timeout, 60.0)))


def generate(base_url: str, spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    """The run plan of ``spec`` (:func:`.workload.run_plan`) over HTTP; the result fields of a run."""
    return run_plan(spec, http_generate(base_url, spec["prompt_format"], timeout), http_flush(base_url, timeout))


#: Seconds into a stop's grace time after which a line says what the stop waits for (m15).
NOTE_AFTER_S = 5.0


def stop(proc: subprocess.Popen, grace: float = 30.0) -> None:
    """Stop the server and every process it started (its own process group): :func:`stop_all` of one."""
    stop_all([proc], grace)


def stop_all(procs: Sequence[subprocess.Popen], grace: float = 30.0) -> None:
    """Stop the servers and every process each started (each its own process group), all at once: SIGTERM to
    every group, then SIGKILL to what is left after ``grace`` seconds (so servers that outlive SIGTERM cost one
    grace time together, not one each), at once when a signal comes meanwhile (:func:`.interrupts.stopping`:
    none interrupts a stop). A group still running when the grace runs out is named on stderr with its pids.
    Ends with SIGKILL of whatever is left of every group."""
    with interrupts.stopping():
        try:
            running = [p for p in procs if _running(p)]
            for proc in running:
                _signal_group(proc, signal.SIGTERM)
            _wait_stopped(running, min(grace, NOTE_AFTER_S))
            still = [p for p in running if _running(p)]
            if still and grace > NOTE_AFTER_S and not interrupts.hurry():  # m15: a word while the wait goes on
                print(
                    f"sglang-mamba-dedup e2e: waiting up to {grace - NOTE_AFTER_S:g} s more for the server(s) "
                    f"(pid {', '.join(str(p.pid) for p in still)}) to end after SIGTERM, then SIGKILL; a signal "
                    "now kills them at once",
                    file=sys.stderr,
                    flush=True,
                )
            _wait_stopped(still, grace - NOTE_AFTER_S)
        finally:
            left = [p for p in procs if _running(p)]
            if left and grace > 0 and not interrupts.hurry():  # m16: grace 0 asked for SIGKILL at once
                for proc in left:
                    print(
                        f"sglang-mamba-dedup e2e: the server (pid {proc.pid}) still runs {grace:g} s after SIGTERM "
                        f"(its processes: {group_members(proc.pid)}): SIGKILL",
                        file=sys.stderr,
                        flush=True,
                    )
            for proc in left:
                _signal_group(proc, signal.SIGKILL)
            _wait_stopped(left, 10.0, hurry=False)
            for proc in procs:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=5)


class Fleet:
    """Servers stopped together (:func:`stop_all`) when the fleet's block ends: a :func:`launched` given
    ``fleet=`` joins it instead of stopping its server when its own block ends. Each joined server's info gets
    its ``returncode`` after the stop."""

    def __init__(self, grace: float = 30.0) -> None:
        self.grace = grace
        self._members: list[tuple[subprocess.Popen, dict[str, Any]]] = []

    def join(self, proc: subprocess.Popen, info: dict[str, Any]) -> None:
        self._members.append((proc, info))

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            stop_all([proc for proc, _ in self._members], self.grace)
        finally:
            for proc, info in self._members:
                info["returncode"] = proc.returncode


def _running(proc: subprocess.Popen) -> bool:
    return proc.poll() is None or _group_alive(proc.pid)


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)


def _wait_stopped(procs: Sequence[subprocess.Popen], seconds: float, hurry: bool = True) -> None:
    """Until every group is gone, ``seconds`` are over, or (``hurry``) a signal asks to hurry."""
    deadline = time.time() + seconds
    while time.time() < deadline and any(map(_running, procs)) and not (hurry and interrupts.hurry()):
        time.sleep(0.1)


def death(pid: int) -> str | None:
    """m14: how a server process of this driver ended, while it waits to be reaped (``/proc``: a zombie's exit
    status), e.g. "killed by SIGKILL"; None while it runs, or when this cannot tell."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] != "Z" or len(fields) < 50:
        return None
    status = int(fields[-1])  # the wait status (Linux 3.5+)
    if os.WIFSIGNALED(status):
        return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exited with {os.WEXITSTATUS(status)}"


def request_failure(pid: int | None, error: BaseException | str) -> str:
    """The cause of a failed request: the server's death where it died meanwhile (a refused connection says
    less), else the request's error."""
    what = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    end = death(pid) if pid else None
    if end is None and pid:
        time.sleep(0.2)  # a killed server's socket closes before its process is a zombie
        end = death(pid)
    return f"the server (pid {pid}) {end} during the run (request failed: {what})" if end else f"request failed: {what}"


def _group_alive(pgid: int) -> bool:
    """Some process of the group runs (a zombie, ended and waiting to be reaped, holds nothing: not counted)."""
    members = group_members(pgid)
    if members is not None:
        return bool(members)
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def group_members(pgid: int) -> list[int] | None:
    """The pids of the process group's running processes (zombies left out), from ``/proc``; None without it."""
    proc = Path("/proc")
    if not (proc / "self" / "stat").exists():
        return None
    members = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        if fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def plugin_lines(log_path: Path) -> list[str]:
    """The plugin's own lines in the server's log output (its activation line, pool and commit notes)."""
    if not log_path.exists():
        return []
    return [ln.rstrip() for ln in log_path.read_text(errors="replace").splitlines() if "sglang-mamba-dedup" in ln]


@contextlib.contextmanager
def launched(
    engine_kwargs: dict[str, Any],
    mode: str,
    report_dir: Path,
    log_path: Path,
    *,
    timeout: float = 1200.0,
    verbose: bool = False,
    command: CommandBuilder = server_command,
    plugin: Mapping[str, Any] | None = None,
    fleet: Fleet | None = None,
) -> Iterator[dict[str, Any]]:
    """A ``launch_server`` of ``mode`` on a free local port, stopped (its whole process group) when the block
    ends, also on an exception or Ctrl-C -- or, given a ``fleet``, when the fleet's block ends, together with the
    fleet's other servers; modes "on" and "fault" add the launch flag; ``plugin``: the spec's
    (:func:`.engine.run_env`).

    Yields ``{"mode", "command", "base_url", "pid", "error"}`` once ``/health`` answers (``error`` None) or the
    start failed (``error`` says why); ``returncode`` is added after the stop.
    """
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = os.environ.copy()
    env.pop(SWITCH, None)  # off: the plugin stays off; on / fault: the flag alone switches it on
    run_env(env, mode, **(plugin or {}))  # the negative control's fault, the zero-copy commit
    env[REPORT_DIR] = str(report_dir)
    watchdog.marked_env(env)  # its children too end with the driver, however it ends (BD2)
    env.setdefault("PYTHONUNBUFFERED", "1")
    cmd = command(engine_kwargs, port, mode != "off")
    info: dict[str, Any] = {"mode": mode, "command": cmd, "base_url": base, "error": None}
    with open_for_writing(log_path) as log:
        # cwd: the run's own folder, so nothing in the caller's directory shadows installed packages
        proc = subprocess.Popen(
            cmd,
            env=env,
            cwd=str(log_path.parent),
            stdout=None if verbose else log,
            stderr=None if verbose else subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=interrupts.dying_with(os.getpid()),  # a SIGKILLed driver leaves no server (m-E1)
        )
        info["pid"] = proc.pid
        if fleet is not None:
            fleet.join(proc, info)
        try:
            info["error"] = wait_healthy(base, proc, timeout)
            yield info
        finally:
            if fleet is None:
                stop(proc)  # also on KeyboardInterrupt: no server is left behind
                info["returncode"] = proc.returncode


def run_server(
    spec: dict[str, Any],
    mode: str,
    report_dir: Path,
    log_path: Path,
    *,
    timeout: float = 1200.0,
    verbose: bool = False,
    command: CommandBuilder = server_command,
    versions: Callable[[], dict[str, Any]] = dict,
    gpu: Callable[[], dict[str, Any]] = dict,
) -> dict[str, Any]:
    """One run through a fresh ``launch_server`` (:func:`launched`)."""
    t0 = time.time()
    result: dict[str, Any] = {"mode": mode, "ok": False}
    with launched(
        spec["engine_kwargs"],
        mode,
        report_dir,
        log_path,
        timeout=timeout,
        verbose=verbose,
        command=command,
        plugin=spec.get("plugin"),
    ) as info:
        result.update(info)
        try:
            if not info["error"]:
                result.update(generate(info["base_url"], spec, timeout))
                result["ok"] = True
        except (urllib.error.URLError, OSError, ValueError) as exc:
            result["error"] = request_failure(info.get("pid"), exc)
    result["returncode"] = info["returncode"]
    if result.get("error") is None:
        result.pop("error", None)
    result["wall_seconds"] = time.time() - t0
    result["plugin_log_lines"] = plugin_lines(log_path)
    result["versions"] = versions()
    result["gpu"] = gpu()
    return result


def url_runner(urls: dict[str, str], timeout: float = 1200.0) -> Callable[..., dict[str, Any]]:
    """A runner that sends the prompts to servers the user already runs (``{"off": url, "on": url}``)."""

    def run(spec: dict[str, Any], mode: str, report_dir: Path, log_path: Path) -> dict[str, Any]:
        base = urls[mode].rstrip("/")
        res: dict[str, Any] = {"mode": mode, "ok": False, "pid": None, "base_url": base}
        try:
            problem = wait_healthy(base, None, min(timeout, 60.0))
            if problem:
                res["error"] = f"{base}: {problem}"
            else:
                res.update(generate(base, spec, timeout))
                res["ok"] = True
        except (urllib.error.URLError, OSError, ValueError) as exc:
            res["error"] = f"{base}: request failed: {type(exc).__name__}: {exc}"
        brief = {k: v for k, v in res.items() if k != "rounds"}
        write_text(log_path, json.dumps(brief, default=str) + "\n")
        return res

    return run


def describe_command(cmd: Sequence[str]) -> str:
    return " ".join(cmd[1:]) if cmd else ""
