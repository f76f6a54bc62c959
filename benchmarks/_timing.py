"""Timing and results of the benchmarks: one way to time a call, one place for what was measured.

* :func:`time_calls`: CUDA events around whole Python calls (device time plus the host overhead every decode
  step pays), providers interleaved, optionally the host time of each call alone.
* :func:`copy_bandwidth`: the device's ``dst.copy_(src)`` bandwidth, timed the same way.
* :class:`Recorder`: a run's rows into ``<out>/latest/<benchmark>[-<label>]-<gpu>.csv`` (the newest output of
  that benchmark on that GPU, rewritten) and appended to ``<out>/history.csv`` (every measurement ever made,
  with date, git commit, GPU and benchmark in front of the benchmark's own columns).

Imports no torch at module load (``--help`` stays cheap).
"""

from __future__ import annotations

import csv
import datetime as _dt
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The tree's results: ``latest/`` and ``history.csv``.
RESULTS = ROOT / "benchmarks" / "results"
#: The columns every history row starts with.
HISTORY_KEYS = ("date", "commit", "gpu", "benchmark")


def checkout_on_path() -> None:
    """This checkout's root on ``sys.path`` (``tests.support``) without its ``sglang_mamba_dedup`` shadowing an
    installed build: the plugin is imported first, from where it is installed (the build under test, e.g.
    /tmp/smd-meta under ``python -P``); only where none is installed does the checkout's serve."""
    try:
        import sglang_mamba_dedup  # noqa: F401
    except ImportError:
        pass
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))


# ---------------------------------------------------------------- timing


@dataclass
class Timing:
    """The timed calls of one provider: microseconds per call."""

    device_us: list[float] = field(default_factory=list)  # CUDA events around the Python call
    host_us: list[float] = field(default_factory=list)  # the call alone on the host clock (``host=True``)

    def _q(self, p: float) -> float:
        ts = sorted(self.device_us)
        return ts[min(len(ts) - 1, int(p * len(ts)))]

    @property
    def reps(self) -> int:
        return len(self.device_us)

    @property
    def median(self) -> float:
        return statistics.median(self.device_us)

    @property
    def p20(self) -> float:
        return self._q(0.2)

    @property
    def p80(self) -> float:
        return self._q(0.8)

    @property
    def host_median(self) -> float:
        return statistics.median(self.host_us)


class _HostEvent:
    """A CUDA event's stand-in for dry runs on the CPU: the host clock at ``record()``."""

    t = 0.0

    def record(self) -> None:
        self.t = time.perf_counter()

    def elapsed_time(self, end: _HostEvent) -> float:  # milliseconds, as torch.cuda.Event
        return (end.t - self.t) * 1e3


def _syncer(device: str) -> Callable[[], None]:
    """``torch.cuda.synchronize`` on CUDA, nothing on the CPU."""
    if device != "cuda":
        return lambda: None
    import torch

    return torch.cuda.synchronize


def _event_pairs(n: int, device: str) -> list:
    if device != "cuda":
        return [(_HostEvent(), _HostEvent()) for _ in range(n)]
    import torch

    return [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]


def time_calls(
    fns: Mapping[str, Callable[[], object]],
    *,
    warmup: int = 5,
    rounds: int | None = None,
    calls: int = 1,
    idle: bool = True,
    host: bool = False,
    on_enter: Callable[[str], None] | None = None,
    on_leave: Callable[[str], None] | None = None,
    budget_s: float = 0.8,
    min_reps: int = 15,
    max_reps: int = 300,
    device: str = "cuda",
) -> dict[str, Timing]:
    """Time every provider of ``fns``, interleaved so that the host's slow and fast phases hit all alike.

    First each provider runs ``warmup`` times (then once more, timed on the host, when ``rounds`` is None).
    Then ``rounds`` rounds; in each, provider after provider:
    ``on_enter(name)``, a device sync, ``calls`` timed calls, a sync, ``on_leave(name)``. A timed call is a
    CUDA event pair around the Python call, the device idle before it when ``idle`` (else the calls queue
    back to back), and with ``host`` also the host time of the call alone (``perf_counter``).

    ``rounds=None`` sizes the run by that host time: ``budget_s / (sum over the providers)`` rounds, clamped
    to ``[min_reps, max_reps]``.
    """
    sync = _syncer(device)
    one = 0.0
    for fn in fns.values():
        for _ in range(warmup):
            fn()
        sync()
        if rounds is None:
            t0 = time.perf_counter()
            fn()
            sync()
            one += max(time.perf_counter() - t0, 1e-6)
    if rounds is None:
        rounds = int(min(max_reps, max(min_reps, budget_s / one)))
    out = {name: Timing() for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            if on_enter is not None:
                on_enter(name)
            sync()
            pairs = _event_pairs(calls, device)
            host_us = out[name].host_us
            for a, b in pairs:
                if idle:
                    sync()
                a.record()
                if host:
                    t0 = time.perf_counter()
                    fn()
                    host_us.append((time.perf_counter() - t0) * 1e6)
                else:
                    fn()
                b.record()
            sync()
            out[name].device_us.extend(a.elapsed_time(b) * 1e3 for a, b in pairs)
            if on_leave is not None:
                on_leave(name)
    return out


def copy_bandwidth(src, **timing) -> float:
    """Bytes per second read + written by ``dst.copy_(src)`` (median of :func:`time_calls` with ``timing``)."""
    import torch

    dst = torch.empty_like(src)
    t = time_calls({"copy": lambda: dst.copy_(src)}, **timing)["copy"]
    nbytes = src.numel() * src.element_size()
    return 2 * nbytes / (t.median * 1e-6)


# ---------------------------------------------------------------- results


def gpu_name(device: str = "cuda") -> str:
    import torch

    return torch.cuda.get_device_name() if device == "cuda" else "cpu"


def slug(name: str) -> str:
    """``NVIDIA H200`` -> ``nvidia-h200``: a file-name part."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "unknown"


def git_commit() -> str:
    """The checkout's commit (``+dirty`` with uncommitted changes), ``$BENCH_COMMIT`` where there is no git
    (the device gets the tree without ``.git``), else ``unknown``."""
    if os.environ.get("BENCH_COMMIT"):
        return os.environ["BENCH_COMMIT"]
    try:
        git = ["git", "-C", str(ROOT)]
        head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True)
        dirty = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True)
        return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def environment() -> dict:
    """The software a measurement ran on (the columns after :data:`HISTORY_KEYS`)."""
    import torch

    def version(dist: str) -> str:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "-"

    return dict(
        torch=torch.__version__,
        triton=version("triton"),
        sglang=version("sglang"),
        python=platform.python_version(),
    )


class Recorder:
    """Where one run's rows go: ``<out>/latest/<benchmark>[-<label>]-<gpu slug><ext>`` (rewritten on every
    :meth:`write`) and ``<out>/history.csv`` (the rows not yet appended). An ``out`` other than the tree's
    ``benchmarks/results`` (the device's ``$OUT``) starts its history from a copy of the tree's, so what comes
    back replaces both as is."""

    def __init__(self, out, benchmark: str, *, label: str | None = None, device: str = "cuda"):
        self.out = Path(out)
        self.benchmark = benchmark
        gpu = gpu_name(device)
        self.stem = "-".join(p for p in (benchmark, label, slug(gpu)) if p)
        self.meta = dict(
            date=_dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            commit=git_commit(),
            gpu=gpu,
            benchmark=benchmark,
            **environment(),
        )
        self._appended = 0

    def latest(self, ext: str) -> Path:
        """``<out>/latest/<stem><ext>`` (the folder made)."""
        path = self.out / "latest" / f"{self.stem}{ext}"
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def write(self, rows: list[dict]) -> Path:
        """All ``rows`` into the latest CSV; those not appended yet to the history. Returns the CSV's path."""
        path = self.latest(".csv")
        if rows:
            write_csv(path, rows)
        new = rows[self._appended :]
        if new:
            append_history(self.out / "history.csv", [{**self.meta, **r} for r in new])
        self._appended = len(rows)
        return path


def write_csv(path: Path, rows: list[dict], fields: list[str] | None = None) -> None:
    """``rows`` as a CSV; the columns are ``fields`` or every key in the order first seen."""
    fields = list(fields or [])
    for r in rows:
        fields += [k for k in r if k not in fields]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, restval="")
        w.writeheader()
        w.writerows(rows)


def read_history(path: Path) -> tuple[list[str], list[dict]]:
    """The header and rows of a history CSV. A row with more cells than the header, or an unnamed column, raises
    ``ValueError`` naming the line: rewriting such a file would put the surplus cells, as one Python list, under an
    unnamed column (on 2026-12-04 36 rows of the decode-cycle benchmark were appended past a shorter header)."""
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        header, rows = list(reader.fieldnames or []), []
        if "" in header:
            raise ValueError(f"column {header.index('') + 1} of the header has no name ({path})")
        for r in reader:
            if None in r:
                raise ValueError(
                    f"line {reader.line_num} has {len(r[None])} cells more than the header's {len(header)} ({path})"
                )
            rows.append(r)
    return header, rows


def append_history(path: Path, rows: list[dict]) -> None:
    """Append ``rows`` to the history CSV ``path``; a column it lacks extends its header (the file rewritten).
    A history outside the tree's results starts as a copy of the tree's. A ragged file or a row with an unnamed
    column raises ``ValueError`` before anything is written (:func:`read_history`)."""
    tree = RESULTS / "history.csv"
    if not path.exists() and path.resolve() != tree.resolve() and tree.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(tree, path)
    header: list[str] = []
    old: list[dict] = []
    if path.exists():
        header, old = read_history(path)
    fields = list(header or HISTORY_KEYS)
    for r in rows:
        if None in r or "" in r:
            raise ValueError(f"{path}: a new row has an unnamed column: nothing appended")
        fields += [k for k in r if k not in fields]
    if fields != header:  # a new file or new columns
        write_csv(path, old + rows, fields)
        return
    with open(path, "a", newline="") as f:
        csv.DictWriter(f, fieldnames=fields, restval="").writerows(rows)
