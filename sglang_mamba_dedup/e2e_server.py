"""The server route of ``sglang-mamba-dedup e2e``: ``python -m sglang.launch_server`` + HTTP, as users deploy.

:func:`run_server` starts SGLang's own server in a subprocess (its own process group) on a free local port,
without the launch flag for an "off" run and with ``--enable-mamba-conv-dedup`` for an "on" run (no
``SGLANG_MAMBA_DEDUP`` in its environment: the flag is what is tested), waits for ``/health``, sends the
prompts greedily to ``/generate`` (token ids when there is no tokenizer), and stops the whole process group
(SIGTERM, then SIGKILL), also when the start fails, a request fails or the user presses Ctrl-C. The server's
own log lines of the plugin (its activation line) are returned with the outputs.

:func:`url_runner` talks to a server the user already runs (``--base-url-off`` / ``--base-url-on``): then
nothing is started and no status report can be read, only the md5 is compared.

Both return what :func:`sglang_mamba_dedup.e2e.run_in_subprocess` returns, so the driver compares them the
same way.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

FLAG = "--enable-mamba-conv-dedup"
SWITCH_ENV = "SGLANG_MAMBA_DEDUP"
REPORT_DIR_ENV = "SGLANG_MAMBA_DEDUP_REPORT_DIR"

#: Engine keywords whose ``None`` the server's command line spells as the choice "none".
_NONE_IS_A_CHOICE = ("grammar_backend",)

CommandBuilder = Callable[[Dict[str, Any], int, bool], List[str]]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_command(engine_kwargs: Dict[str, Any], port: int, flag: bool) -> List[str]:
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


def _request(url: str, payload: Optional[dict] = None, timeout: float = 30.0) -> Any:
    data = None if payload is None else json.dumps(payload).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"} if data else {})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        body = resp.read()
    return json.loads(body) if body else None


def wait_healthy(base_url: str, proc: Optional[subprocess.Popen], timeout: float) -> Optional[str]:
    """None once ``GET /health`` answers 200; else why not (the process died, or the time ran out)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            return f"the server exited with {proc.returncode} before it was healthy"
        try:
            _request(base_url + "/health", timeout=5.0)
            return None
        except (urllib.error.URLError, ConnectionError, OSError, ValueError):
            time.sleep(1.0)
    return f"the server was not healthy within {timeout:.0f} s"


def generate(base_url: str, spec: Dict[str, Any], timeout: float) -> Dict[str, Any]:
    """The untimed warm-up and the timed generation of ``spec`` over HTTP; the result fields of a run."""
    key = "input_ids" if spec["prompt_format"] == "ids" else "text"
    prompts = spec["prompts"]
    bs = int(spec["batch_size"]) or len(prompts)
    batches = [prompts[i : i + bs] for i in range(0, len(prompts), bs)]
    sp = dict(spec["sampling_params"])
    warm = int(spec.get("warmup_tokens") or 0)
    if warm:
        n = sp["max_new_tokens"] if warm < 0 else warm
        for batch in batches:
            _request(base_url + "/generate", {key: batch, "sampling_params": dict(sp, max_new_tokens=n)}, timeout)
    outputs: List[dict] = []
    t0 = time.perf_counter()
    for batch in batches:
        out = _request(base_url + "/generate", {key: batch, "sampling_params": sp}, timeout)
        outputs.extend(out if isinstance(out, list) else [out])
    seconds = time.perf_counter() - t0
    from .e2e import outputs_and_meta

    return {"gen_seconds": seconds, **outputs_and_meta(outputs)}


def stop(proc: subprocess.Popen, grace: float = 30.0) -> None:
    """Stop the server and every process it started (its own process group): SIGTERM, then SIGKILL."""
    if proc.poll() is None or _group_alive(proc.pid):
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            deadline = time.time() + wait
            while time.time() < deadline and (proc.poll() is None or _group_alive(proc.pid)):
                time.sleep(0.2)
            if proc.poll() is not None and not _group_alive(proc.pid):
                break
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:  # pragma: no cover
        pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def plugin_lines(log_path: Path) -> List[str]:
    """The plugin's own lines in the server's log output (its activation line, pool and commit notes)."""
    if not log_path.exists():
        return []
    return [ln.rstrip() for ln in log_path.read_text(errors="replace").splitlines() if "sglang-mamba-dedup" in ln]


def run_server(
    spec: Dict[str, Any],
    mode: str,
    report_dir: Path,
    log_path: Path,
    *,
    timeout: float = 1200.0,
    verbose: bool = False,
    command: CommandBuilder = server_command,
    versions: Callable[[], Dict[str, Any]] = dict,
    gpu: Callable[[], Dict[str, Any]] = dict,
) -> Dict[str, Any]:
    """One run through a fresh ``launch_server``; ``mode`` "on" adds the launch flag."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = os.environ.copy()
    env.pop(SWITCH_ENV, None)  # off: the plugin stays off; on: the flag alone switches it on
    env[REPORT_DIR_ENV] = str(report_dir)
    env.setdefault("PYTHONUNBUFFERED", "1")
    cmd = command(spec["engine_kwargs"], port, mode == "on")
    t0 = time.time()
    result: Dict[str, Any] = {"mode": mode, "ok": False, "command": cmd, "base_url": base}
    with open(log_path, "w") as log:
        # cwd: the run's own folder, so nothing in the caller's directory shadows installed packages
        proc = subprocess.Popen(
            cmd,
            env=env,
            cwd=str(log_path.parent),
            stdout=None if verbose else log,
            stderr=None if verbose else subprocess.STDOUT,
            start_new_session=True,
        )
        result["pid"] = proc.pid
        try:
            problem = wait_healthy(base, proc, timeout)
            if problem:
                result["error"] = problem
            else:
                result.update(generate(base, spec, timeout))
                result["ok"] = True
        except (urllib.error.URLError, OSError, ValueError) as exc:
            result["error"] = f"request failed: {type(exc).__name__}: {exc}"
        finally:
            stop(proc)  # also on KeyboardInterrupt: no server is left behind
    result["returncode"] = proc.returncode
    result["wall_seconds"] = time.time() - t0
    result["plugin_log_lines"] = plugin_lines(log_path)
    result["versions"] = versions()
    result["gpu"] = gpu()
    return result


def url_runner(urls: Dict[str, str], timeout: float = 1200.0) -> Callable[..., Dict[str, Any]]:
    """A runner that sends the prompts to servers the user already runs (``{"off": url, "on": url}``)."""

    def run(spec: Dict[str, Any], mode: str, report_dir: Path, log_path: Path) -> Dict[str, Any]:
        base = urls[mode].rstrip("/")
        res: Dict[str, Any] = {"mode": mode, "ok": False, "pid": None, "base_url": base}
        try:
            problem = wait_healthy(base, None, min(timeout, 60.0))
            if problem:
                res["error"] = f"{base}: {problem}"
            else:
                res.update(generate(base, spec, timeout))
                res["ok"] = True
        except (urllib.error.URLError, OSError, ValueError) as exc:
            res["error"] = f"{base}: request failed: {type(exc).__name__}: {exc}"
        log_path.write_text(json.dumps({k: v for k, v in res.items() if k != "outputs"}, default=str) + "\n")
        return res

    return run


def describe_command(cmd: Sequence[str]) -> str:
    return " ".join(cmd[1:]) if cmd else ""
