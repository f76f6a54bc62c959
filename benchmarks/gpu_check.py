"""Everything the lent H200 has to run for the commit kernels, in one go:

1. the kernel tests on CUDA tensors (the CPU/interpreter tests plus the GPU-only
   ones: CUDA-graph capture + replay of fused_commit, int64 offsets past 2**31),
   in 4 pytest-xdist workers;
2. the benchmark (``bench_commit.py``), after the tests, on an idle GPU.

Logs, CSV, markdown table and PNG go to ``$OUT`` (or ``--out``).

    python3 benchmarks/gpu_check.py [--out DIR] [--quick] [--skip-tests] [--skip-bench]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def run_tests(out_dir: str) -> int:
    files = sorted(
        os.path.join("tests", f) for f in os.listdir(os.path.join(ROOT, "tests")) if f.startswith("test_kernel_")
    )
    cmd = [sys.executable, "-m", "pytest", "-q", "-rfEs", "--noconftest", "-p", "no:cacheprovider", *files]
    try:
        import xdist  # noqa: F401

        cmd[4:4] = ["-n", "4"]
    except ImportError:
        pass
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)
    t0 = time.time()
    with open(os.path.join(out_dir, "pytest_gpu.log"), "w") as log:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        log.write(proc.stdout)
    tail = proc.stdout.strip().splitlines()[-15:]
    print("\n".join(tail), flush=True)
    print(f"GPU tests: rc={proc.returncode} in {time.time() - t0:.0f} s", flush=True)
    return proc.returncode


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", os.path.join(HERE, "results")))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--skip-tests", action="store_true")
    ap.add_argument("--skip-bench", action="store_true")
    ap.add_argument("--sweep", action="store_true", help="sweep SSM tilings before the benchmark")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    sys.path.insert(0, ROOT)
    rc = 0
    if not a.skip_tests:
        rc = run_tests(a.out)
    if not a.skip_bench:
        sys.path.insert(0, HERE)
        import bench_commit

        t0 = time.time()
        bench_commit.run(a.out, quick=a.quick, sweep=a.sweep)
        print(f"benchmark done in {time.time() - t0:.0f} s", flush=True)
    sys.exit(rc)


if __name__ == "__main__":
    main()
