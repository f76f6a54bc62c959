"""What the live-modes benchmark (``benchmarks/bench_live.py``) records besides the walls, so that a run which fails its
health checks says why: a run header (kernel, CPU topology, clocks, the GPU's state) and per-generate probes read
**outside** the timed window: the scheduler's and the worker's on-CPU and run-queue time, timeslices, involuntary
context switches and last CPU (``/proc/<pid>/task/*/schedstat``, ``stat``, ``status``); per-CPU steal and busy time
(``/proc/stat``); the on-CPU time of a fixed piece of work on the scheduler's CPU just before the generate
(:func:`cpu_work_us`); the GPU's energy, clocks, power, temperature and throttle reasons (NVML via ``pynvml``, no CUDA
context). Per Engine, once after it started (:func:`start_probe`, outside any timed window): its scheduler's CPU
affinity, the NUMA nodes its memory may use and holds, ``PYTHONHASHSEED`` in its environment and a short ``py-spy
dump`` when ``py-spy`` is on PATH, to tell a whole-Engine slow state from a fast one. Every probe degrades to
:data:`ABSENT` where the machine lacks it (no GPU, no schedstat, no NVML, no py-spy, an unreadable ``/proc``).
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

ABSENT = "absent"
_TICK_MS = 1000.0 / (os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100)

#: the per-generate probe columns (rows of ``cycle_generates``)
SCHED_FIELDS = ["sched_cpu_ms", "sched_wait_ms", "sched_slices", "sched_nvcsw", "sched_cpu_last"]
WORKER_FIELDS = ["worker_cpu_ms", "worker_wait_ms", "worker_cpu_last"]
HOST_FIELDS = ["steal_ms", "steal_max_cpu_ms", "steal_sched_cpu_ms", "cpu_busy_pct"]
SPEED_FIELDS = ["sched_cpu_work_us"]  # cpu_work_us, read just before the generate
GPU_FIELDS = ["energy_j", "sm_mhz", "mem_mhz", "power_w", "temp_c", "throttle"]
PROBE_FIELDS = SCHED_FIELDS + WORKER_FIELDS + HOST_FIELDS + SPEED_FIELDS + GPU_FIELDS


def _read(path: str | Path) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


# ---------------------------------------------------------------- processes


def children(pid: int) -> list[int]:
    """The pids whose parent is ``pid`` (from ``/proc/*/stat``)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        st = _read(d / "stat")
        if st and st[st.rfind(")") + 2 :].split()[1:2] == [str(pid)]:
            out.append(int(d.name))
    return sorted(out)


def cmdline(pid: int) -> str:
    raw = _read(f"/proc/{pid}/cmdline") or ""
    return raw.replace("\0", " ").strip()


def engine_pids(worker: int) -> dict[str, int | str]:
    """The worker's SGLang subprocesses by their titles (``sglang::scheduler``, ``sglang::detokenizer``)."""
    found: dict[str, int | str] = {"worker": worker, "scheduler": ABSENT, "detokenizer": ABSENT}
    for pid in children(worker):
        text = cmdline(pid) + " " + (_read(f"/proc/{pid}/comm") or "")
        for role in ("scheduler", "detokenizer"):
            if f"sglang::{role}"[:15] in text and found[role] == ABSENT:
                found[role] = pid
    return found


def proc_snapshot(pid: int | str) -> dict | None:
    """The on-CPU ns, run-queue wait ns and timeslices summed over ``pid``'s threads, its involuntary context
    switches, and the CPU its main thread last ran on; None where ``/proc`` lacks them."""
    if pid == ABSENT:
        return None
    cpu = wait = slices = nvcsw = 0
    seen = False
    for task in Path(f"/proc/{pid}/task").glob("*"):
        ss = _read(task / "schedstat")
        if ss:
            try:
                a, b, c = (int(x) for x in ss.split()[:3])
            except ValueError:
                continue
            cpu, wait, slices, seen = cpu + a, wait + b, slices + c, True
        st = _read(task / "status") or ""
        for line in st.splitlines():
            if line.startswith("nonvoluntary_ctxt_switches:"):
                nvcsw += int(line.split()[1])
    last = None
    st = _read(f"/proc/{pid}/stat")
    if st:
        fields = st[st.rfind(")") + 2 :].split()  # field 3 (state) onwards: field n is fields[n - 3]
        if len(fields) > 36:
            last = int(fields[36])  # field 39, processor
    if not seen and last is None:
        return None
    return {"cpu": cpu if seen else None, "wait": wait if seen else None, "slices": slices if seen else None,
            "nvcsw": nvcsw, "last": last}  # fmt: skip


def proc_delta(a: Mapping | None, b: Mapping | None, prefix: str) -> dict:
    """The probe columns of one process over a generate (``prefix``: ``sched`` or ``worker``)."""
    keys = SCHED_FIELDS if prefix == "sched" else WORKER_FIELDS
    if not a or not b:
        return dict.fromkeys(keys, ABSENT)

    def d(k: str, scale: float = 1.0):
        return ABSENT if a.get(k) is None or b.get(k) is None else round((b[k] - a[k]) * scale, 3)

    out = {f"{prefix}_cpu_ms": d("cpu", 1e-6), f"{prefix}_wait_ms": d("wait", 1e-6)}
    out[f"{prefix}_cpu_last"] = b["last"] if b.get("last") is not None else ABSENT
    if prefix == "sched":
        out.update(sched_slices=d("slices"), sched_nvcsw=d("nvcsw"))
    return out


# ---------------------------------------------------------------- the host's CPUs


def cpu_times() -> dict[int, list[int]] | None:
    """``/proc/stat``: cpu index -> [user, nice, system, idle, iowait, irq, softirq, steal] in ticks."""
    text = _read("/proc/stat")
    if not text:
        return None
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0].startswith("cpu") and parts[0][3:].isdigit():
            out[int(parts[0][3:])] = [int(x) for x in parts[1:9]] + [0] * max(0, 9 - len(parts))
    return out or None


def cpu_work_us(cpu: int | str | None, loops: int = 50_000) -> float | str:
    """The on-CPU time (us) of a fixed piece of pure-Python work on ``cpu`` (the scheduler's, just before a generate):
    the speed of that vCPU's host core at the moment, which a KVM guest without ``cpufreq`` sees nowhere else (a
    slower host clock, a busy host SMT sibling). The calling thread's time only (``thread_time``), so the scheduler
    idling on the same CPU does not count; its affinity is restored. :data:`ABSENT` without a CPU or affinity.
    Added after the 2026-12-05 H100 runs, where the wall stepped 30-45 % within an Engine on one vCPU and no other
    probe moved but the GPU's power."""
    if cpu in (None, ABSENT) or not hasattr(os, "sched_setaffinity"):
        return ABSENT
    try:
        old = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {int(cpu)})
    except (OSError, ValueError):
        return ABSENT
    try:
        acc = 0
        t0 = time.thread_time_ns()
        for i in range(loops):
            acc ^= i * i
        return round((time.thread_time_ns() - t0) / 1e3, 1) if acc >= 0 else ABSENT
    finally:
        os.sched_setaffinity(0, old)


def cpu_delta(a: Mapping | None, b: Mapping | None, sched_cpu=None) -> dict:
    """Steal over all CPUs, on the worst CPU and on the scheduler's last CPU (ms), and the share of all CPUs busy
    (user + nice + system + irq + softirq + steal over the total) during a generate."""
    if not a or not b:
        return dict.fromkeys(HOST_FIELDS, ABSENT)
    steal = {c: (b[c][7] - a[c][7]) * _TICK_MS for c in b if c in a}
    total = busy = 0
    for c in b:
        if c in a:
            d = [y - x for x, y in zip(a[c], b[c])]
            total += sum(d[:8])
            busy += sum(d[:8]) - d[3] - d[4]
    return {
        "steal_ms": round(sum(steal.values()), 1),
        "steal_max_cpu_ms": round(max(steal.values(), default=0.0), 1),
        "steal_sched_cpu_ms": round(steal[sched_cpu], 1)
        if isinstance(sched_cpu, int) and sched_cpu in steal
        else ABSENT,
        "cpu_busy_pct": round(100.0 * busy / total, 1) if total else ABSENT,
    }


# ---------------------------------------------------------------- the GPU


class Gpu:
    """NVML for the first visible GPU (no CUDA context); :attr:`ok` False where there is no NVML or no GPU."""

    def __init__(self) -> None:
        self.ok, self.nv, self.h = False, None, None
        self._seen = 0  # NVML's timestamp of the last utilisation sample read
        try:
            import pynvml as nv

            nv.nvmlInit()
            dev = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0].strip() or "0"
            self.h = nv.nvmlDeviceGetHandleByIndex(int(dev)) if dev.isdigit() else nv.nvmlDeviceGetHandleByUUID(dev)
            self.nv, self.ok = nv, True
        except Exception:  # noqa: BLE001 - no NVML, no GPU: the probe is absent
            pass

    def snapshot(self) -> dict | None:
        if not self.ok:
            return None
        nv, h, out = self.nv, self.h, {}
        for key, call in (
            ("energy_mj", lambda: nv.nvmlDeviceGetTotalEnergyConsumption(h)),
            ("sm_mhz", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
            ("mem_mhz", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM)),
            ("power_w", lambda: nv.nvmlDeviceGetPowerUsage(h) / 1000.0),
            ("temp_c", lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)),
            ("throttle", lambda: self._reasons(h)),
        ):
            try:
                out[key] = call()
            except Exception:  # noqa: BLE001 - this field absent on this GPU or driver
                out[key] = None
        return out

    def _reasons(self, h) -> int:
        """The clock event (throttle) reasons: NVML's newer name first, the older one where the binding lacks it."""
        call = getattr(self.nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
        return (call or self.nv.nvmlDeviceGetCurrentClocksThrottleReasons)(h)

    def processes(self) -> list[dict] | str:
        """The compute processes on the GPU, their memory and, where NVML samples it, their SM and memory
        utilisation since the last call (once per batch: idle Engines launch nothing)."""
        if not self.ok:
            return ABSENT
        try:
            procs = self.nv.nvmlDeviceGetComputeRunningProcesses(self.h)
            out = {p.pid: {"pid": p.pid, "mib": (p.usedGpuMemory or 0) // 2**20} for p in procs}
        except Exception as e:  # noqa: BLE001
            return repr(e)
        try:
            samples = self.nv.nvmlDeviceGetProcessUtilization(self.h, self._seen)
            for smp in samples:
                row = out.setdefault(smp.pid, {"pid": smp.pid, "mib": ABSENT})
                row["sm_util"] = max(row.get("sm_util", 0), smp.smUtil)
                row["mem_util"] = max(row.get("mem_util", 0), smp.memUtil)
                self._seen = max(self._seen, smp.timeStamp)
        except Exception:  # noqa: BLE001 - no samples (none since the last call) or no such call: memory only
            pass
        return list(out.values())


def gpu_delta(a: Mapping | None, b: Mapping | None) -> dict:
    """Energy over a generate (J), the clocks, power and temperature after it, the throttle reasons seen before or
    after it (NVML's bit mask, hex; 0x0 none, 0x1 idle)."""
    if not a or not b:
        return dict.fromkeys(GPU_FIELDS, ABSENT)
    e = (
        ABSENT
        if a.get("energy_mj") is None or b.get("energy_mj") is None
        else round((b["energy_mj"] - a["energy_mj"]) / 1e3, 3)
    )
    out = {"energy_j": e}
    for k in ("sm_mhz", "mem_mhz", "temp_c"):
        out[k] = b.get(k) if b.get(k) is not None else ABSENT
    out["power_w"] = round(b["power_w"], 1) if b.get("power_w") is not None else ABSENT
    ta, tb = a.get("throttle"), b.get("throttle")
    out["throttle"] = hex((ta or 0) | (tb or 0)) if ta is not None or tb is not None else ABSENT
    return out


# ---------------------------------------------------------------- per Engine, once after its start

#: the most of a ``py-spy dump`` kept per Engine (characters)
PYSPY_CHARS = 4000


def cpu_list(cpus: Sequence[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2,5"``."""
    spans: list[list[int]] = []
    for c in sorted(cpus):
        if spans and spans[-1][1] == c - 1:
            spans[-1][1] = c
        else:
            spans.append([c, c])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def numa_pages(numa_maps: str) -> dict[str, int]:
    """``/proc/<pid>/numa_maps`` -> pages per NUMA node over every mapping (``{"N0": 1234, "N1": 5}``)."""
    out: dict[str, int] = {}
    for node, pages in re.findall(r"\b(N\d+)=(\d+)", numa_maps):
        out[node] = out.get(node, 0) + int(pages)
    return dict(sorted(out.items(), key=lambda kv: int(kv[0][1:])))


def start_probe(pid: int | str, pyspy: bool = True) -> dict:
    """What may tell one Engine's scheduler from another's, read once after the Engine started: ``affinity`` (its
    CPUs), ``mems_allowed`` (``status``' ``Mems_allowed_list``), ``numa_pages`` (its pages per node, from
    ``numa_maps``), ``pythonhashseed`` (from its environment; ``unset`` when readable and not set), ``py_spy`` (a
    ``py-spy dump`` of it, first :data:`PYSPY_CHARS` characters, when ``py-spy`` is on PATH). Each key is
    :data:`ABSENT` where it cannot be read."""
    out: dict = dict.fromkeys(("affinity", "mems_allowed", "numa_pages", "pythonhashseed", "py_spy"), ABSENT)
    if pid == ABSENT or not str(pid).isdigit():
        return out
    pid = int(pid)
    try:
        out["affinity"] = cpu_list(os.sched_getaffinity(pid))
    except (OSError, AttributeError):
        pass
    status = _read(f"/proc/{pid}/status") or ""
    m = re.search(r"^Mems_allowed_list:\s*(\S+)", status, re.M)
    if m:
        out["mems_allowed"] = m.group(1)
    pages = numa_pages(_read(f"/proc/{pid}/numa_maps") or "")
    if pages:
        out["numa_pages"] = pages
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        seed = next(
            (e.split(b"=", 1)[1].decode(errors="replace") for e in env if e.startswith(b"PYTHONHASHSEED=")), None
        )
        out["pythonhashseed"] = "unset" if seed is None else seed
    except OSError:
        pass
    exe = shutil.which("py-spy") if pyspy else None
    if exe:
        try:
            p = subprocess.run([exe, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=30)
            text = (p.stdout or "") + (f"\n[stderr] {p.stderr.strip()}" if p.returncode else "")
            out["py_spy"] = text.strip()[:PYSPY_CHARS] or f"{ABSENT} (py-spy exit {p.returncode}, no output)"
        except (OSError, subprocess.SubprocessError) as e:
            out["py_spy"] = f"{ABSENT} ({type(e).__name__})"
    return out


# ---------------------------------------------------------------- the run header


def _run(argv: Sequence[str], limit: int = 20000) -> str:
    try:
        p = subprocess.run(list(argv), capture_output=True, text=True, timeout=30)
        return (p.stdout or p.stderr)[:limit]
    except (OSError, subprocess.SubprocessError) as e:
        return f"{ABSENT} ({type(e).__name__})"


def cpu_clocks() -> dict[str, str]:
    """Each CPU's current and maximum frequency from cpufreq (kHz), or absent (typical inside a VM)."""
    out = {}
    for d in sorted(Path("/sys/devices/system/cpu").glob("cpu[0-9]*/cpufreq")):
        cur, top = _read(d / "scaling_cur_freq"), _read(d / "cpuinfo_max_freq")
        out[d.parent.name] = f"{(cur or '?').strip()}/{(top or '?').strip()}"
    return out or {"cpufreq": ABSENT}


def run_header(pid: int | None = None) -> dict:
    """The machine as the run saw it: kernel, CPU topology (``lscpu``), the CPUs this process may use, their clocks,
    the hypervisor flag, load, the GPU's clocks, performance state and power (``nvidia-smi -q``)."""
    info = _read("/proc/cpuinfo") or ""
    flags = next((line for line in info.splitlines() if line.startswith("flags")), "")
    return {
        "kernel": platform.release(),
        "uname": " ".join(platform.uname()),
        "python": platform.python_version(),
        "driver_pid": pid or os.getpid(),
        "nproc": os.cpu_count(),
        "affinity": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else ABSENT,
        "hypervisor_flag": "hypervisor" in flags.split(),
        "loadavg": (_read("/proc/loadavg") or ABSENT).strip(),
        "lscpu": _run(["lscpu"]),
        "cpu_clocks": cpu_clocks(),
        "nvidia_smi": _run(["nvidia-smi", "-q", "-d", "CLOCK,PERFORMANCE,POWER"], 12000),
    }
