"""The offline route of the e2e: every run is SGLang's ``sglang.Engine`` in a fresh Python process.

:func:`run_in_subprocess` writes the run spec to the run's folder and starts ``python -P -c`` on
:func:`_worker_main` with ``SGLANG_MAMBA_DEDUP`` set for the mode (``0`` for "off", ``1`` for "on" and
"fault"; the fault and zero-copy variables: :func:`run_env`) and the report folder in
``SGLANG_MAMBA_DEDUP_REPORT_DIR``. The worker builds the Engine, runs :func:`.workload.run_plan` over
``Engine.generate`` and writes the outputs, SGLang's counters, the versions and the GPU as JSON.

Why the offline Engine by default, not ``launch_server`` + HTTP (:mod:`.server`): it needs no port and no HTTP
client, starts and stops with the process (nothing left listening between the runs), takes token ids
directly (a random-weight model has no tokenizer), and returns the speculative-decoding counters in
``meta_info``. The scheduler runs in its own spawned process either way, which is what the status report
checks. :func:`cuda_problem` says when it cannot run here (no CUDA GPU).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..env import REPORT_DIR, SWITCH, ZERO_COPY, ZERO_COPY_RADIX
from ..patches import faults
from . import interrupts, watchdog
from .files import open_for_writing
from .workload import Sessions, engine_flush_once, flush_with_retry, run_plan

#: What runs one generation: ``runner(spec, mode, report_dir, log_path) -> result`` (:func:`run_in_subprocess`
#: with its defaults, :func:`.server.url_runner`, or a test's stand-in).
Runner = Callable[[dict[str, Any], str, Path, Path], dict[str, Any]]


def run_env(
    env: dict[str, str],
    mode: str,
    fault: str = faults.COMMIT_STEP0,
    zero_copy: bool = False,
    zero_copy_radix: bool = False,
) -> dict[str, str]:
    """A run's plugin variables (the spec's ``plugin``): the fault ``fault`` in a "fault" run, ``ZERO_COPY=1`` in
    the "on" and "fault" runs with ``zero_copy``; each removed where not asked for (also when the parent has it).
    :data:`ZERO_COPY_RADIX` is removed from every run: zero-copy serves the radix cache on without it
    (``zero_copy_radix``, the spec's record of that case, sets nothing)."""
    faults.set_env(env, mode == "fault", fault)
    if zero_copy and mode != "off":
        env[ZERO_COPY] = "1"
    else:
        env.pop(ZERO_COPY, None)
    env.pop(ZERO_COPY_RADIX, None)
    return env


_WORKER_BOOT = (
    "import sys; from sglang_mamba_dedup.e2e.engine import _worker_main; sys.exit(_worker_main(sys.argv[1:]))"
)


def run_in_subprocess(
    spec: dict[str, Any],
    mode: str,
    report_dir: Path,
    log_path: Path,
    timeout: float | None = None,
    verbose: bool = False,
) -> dict[str, Any]:
    """Run one generation in a fresh Python process with ``SGLANG_MAMBA_DEDUP`` set for ``mode``."""
    work = log_path.parent
    spec_path = work / f"spec-{log_path.stem}.json"
    out_path = work / f"result-{log_path.stem}.json"
    spec_path.write_text(json.dumps(spec))
    if out_path.exists():
        out_path.unlink()
    env = os.environ.copy()
    env[SWITCH] = "0" if mode == "off" else "1"
    run_env(env, mode, **spec.get("plugin", {}))
    env[REPORT_DIR] = str(report_dir)
    watchdog.marked_env(env)  # its children too end with the driver, however it ends (BD2)
    env.setdefault("PYTHONUNBUFFERED", "1")
    t0 = time.time()
    with open_for_writing(log_path) as log:
        proc = subprocess.Popen(
            # -P: the current directory (a source checkout, whose sglang_mamba_dedup/ has no patches/) never
            # shadows the installed package in the engine process
            [sys.executable, "-P", "-c", _WORKER_BOOT, str(spec_path), str(out_path)],
            env=env,
            stdout=None if verbose else log,
            stderr=subprocess.STDOUT if not verbose else None,
            preexec_fn=interrupts.dying_with(os.getpid()),  # a SIGKILLed driver leaves no engine (m-E1)
        )
        rc: Any
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            rc = "timeout"
        except BaseException:  # Ctrl-C, SIGTERM, SIGHUP (.interrupts): the engine does not run on
            with interrupts.stopping():
                proc.kill()
                proc.wait()
            raise
    result: dict[str, Any] = {"mode": mode, "pid": proc.pid, "returncode": rc, "wall_seconds": time.time() - t0}
    if rc == 0 and out_path.exists():
        result.update(json.loads(out_path.read_text()))
        result["ok"] = True
    else:
        result["ok"] = False
        result["error"] = f"engine process exited with {rc}" + ("" if out_path.exists() else " and wrote no result")
    result["pid"] = proc.pid
    return result


def package_versions() -> dict[str, str | None]:
    """Python and the versions of the packages a run depends on (None where not installed)."""
    from importlib import metadata

    res: dict[str, str | None] = {"python": platform.python_version()}
    for dist in ("sglang", "torch", "triton", "transformers", "sglang-mamba-dedup"):
        try:
            res[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            res[dist] = None
    return res


def gpu_info() -> dict[str, Any]:
    """The first CUDA device as torch sees it (name, count, capability, CUDA version)."""
    try:
        import torch

        if not torch.cuda.is_available():
            return {"name": None, "count": 0, "cuda": torch.version.cuda}
        cap = torch.cuda.get_device_capability(0)
        return {
            "name": torch.cuda.get_device_name(0),
            "count": torch.cuda.device_count(),
            "capability": f"{cap[0]}.{cap[1]}",
            "cuda": torch.version.cuda,
        }
    except Exception as e:  # pragma: no cover
        return {"name": None, "error": repr(e)}


def _worker_main(argv: list[str]) -> int:
    """Body of the engine process: build the Engine, run :func:`run_plan`, write the result JSON."""
    spec_path, out_path = argv[0], argv[1]
    spec = json.loads(Path(spec_path).read_text())
    import sglang  # noqa: F401  (import time is not part of the measurement)

    engine = sglang.Engine(**spec["engine_kwargs"])
    try:
        key = "input_ids" if spec["prompt_format"] == "ids" else "prompt"

        def generate(batch: list[Any], sampling: dict[str, Any]) -> list[dict]:
            return engine.generate(**{key: batch}, sampling_params=sampling)

        plan = run_plan(
            spec,
            generate,
            lambda: flush_with_retry(lambda: engine_flush_once(engine)),
            sessions=_engine_sessions(engine, key),
        )
        server_state = engine_server_state(engine.get_server_info)
    finally:
        engine.shutdown()
    res = {"pid": os.getpid(), **plan, "versions": package_versions(), "gpu": gpu_info(), "server_state": server_state}
    Path(out_path).write_text(json.dumps(res, default=str))
    return 0


def engine_server_state(get_server_info: Any) -> list[Any] | None:
    """The plugin's ``mamba_dedup`` entry of each scheduler, read back the way a user reads it (SGLang's server
    info, ``internal_states``; the ``server_state`` feature), after the workload; None where the server info
    has no internal states (releases before the feature) or could not be read."""
    try:
        states = get_server_info().get("internal_states")
    except Exception:  # noqa: BLE001 - a readback the run does not depend on
        return None
    if not isinstance(states, list):
        return None
    return [s.get("mamba_dedup") if isinstance(s, dict) else None for s in states]


#: ``open_session``'s capacity_of_str_len: no limit a test prompt reaches
_SESSION_CAPACITY = 1 << 24


def _engine_sessions(engine: Any, key: str) -> Sessions:
    """The Engine's streaming sessions: one ``async_generate`` per session, all of a batch gathered on the
    Engine's event loop (SGLang applies one ``session_params`` to a whole batched ``generate``)."""
    import asyncio

    def turns(batch: list[Any], sampling: dict[str, Any], ids: list[str]) -> list[dict]:
        async def gather() -> list[Any]:
            calls = (
                engine.async_generate(**{key: p}, sampling_params=dict(sampling), session_params={"id": sid})
                for p, sid in zip(batch, ids)
            )
            return list(await asyncio.gather(*calls))

        return engine.loop.run_until_complete(gather())

    return Sessions(
        open=lambda: engine.open_session(_SESSION_CAPACITY, streaming=True),
        generate=turns,
        close=engine.close_session,
    )


def cuda_problem(engine_kwargs: dict[str, Any]) -> str | None:
    """Why the engine cannot run here (no CUDA GPU), or None. Not checked when the user chose a device
    other than CUDA (``--engine-arg device=...``): that choice is theirs."""
    device = str(engine_kwargs.get("device") or "cuda").lower()
    if not device.startswith("cuda"):
        return None
    try:
        import torch
    except Exception as e:
        return f"the e2e needs a CUDA GPU, and torch is not importable here ({type(e).__name__}: {e})"
    if torch.cuda.is_available():
        return None
    build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a build without CUDA"
    return f"the e2e needs a CUDA GPU: torch.cuda.is_available() is False here (torch {torch.__version__}, {build})"
