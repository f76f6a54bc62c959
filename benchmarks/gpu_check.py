"""Everything the lent H200 has to run for the commit kernels, in one go:

1. the kernel tests (``tests/kernels/``) on CUDA tensors (the CPU/interpreter tests plus the GPU-only
   ones: CUDA-graph capture + replay of fused_commit, int64 offsets past 2**31),
   in 4 pytest-xdist workers;
2. the benchmark (``bench_commit.py``), after the tests, on an idle GPU.

The pytest log goes to ``<out>/latest/pytest_gpu-<gpu>.log``, the benchmark's CSV, markdown table and PNG to
``<out>/latest/commit-<gpu>.*`` and its rows to ``<out>/history.csv`` (``--out``: $OUT, else
benchmarks/results).

    python3 benchmarks/gpu_check.py [--out DIR] [--quick] [--sweep] [--skip-tests] [--skip-bench]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # _timing and bench_commit, also under python -P
import _timing  # noqa: E402

ROOT = _timing.ROOT


def run_tests(out_dir: str) -> int:
    files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests" / "kernels").glob("test_*.py"))
    cmd = [sys.executable, "-m", "pytest", "-q", "-rfEs", "--noconftest", "-p", "no:cacheprovider", *files]
    try:
        import xdist  # noqa: F401

        cmd[4:4] = ["-n", "4"]
    except ImportError:
        pass
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)
    t0 = time.time()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log = Path(out_dir) / "latest" / f"pytest_gpu-{_timing.slug(_timing.gpu_name())}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(proc.stdout)
    tail = proc.stdout.strip().splitlines()[-15:]
    print("\n".join(tail), flush=True)
    print(f"GPU tests: rc={proc.returncode} in {time.time() - t0:.0f} s", flush=True)
    return proc.returncode


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or str(_timing.RESULTS), help="results folder")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--skip-tests", action="store_true")
    ap.add_argument("--skip-bench", action="store_true")
    ap.add_argument("--sweep", action="store_true", help="sweep SSM tilings before the benchmark")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    _timing.checkout_on_path()
    rc = 0
    if not a.skip_tests:
        rc = run_tests(a.out)
    if not a.skip_bench:
        import bench_commit

        t0 = time.time()
        bench_commit.run(a.out, quick=a.quick, sweep=a.sweep)
        print(f"benchmark done in {time.time() - t0:.0f} s", flush=True)
    sys.exit(rc)


if __name__ == "__main__":
    main()
