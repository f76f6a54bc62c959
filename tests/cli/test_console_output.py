"""What the console commands print: their own lines only (SGLang 0.5.23 here; not a release test)."""

import subprocess
import sys

import pytest


@pytest.mark.parametrize("command", ["demo", "doctor"])
def test_no_sglang_import_warning_in_the_output(command):
    """N5 of the 2026-12-04 newcomer audit: on a CPU machine SGLang's imports warn about AWQ, GGUF and Triton; those
    lines fell between demo's header and its table. The console command prints only its own lines."""
    proc = subprocess.run(
        [sys.executable, "-m", "sglang_mamba_dedup", command], capture_output=True, text=True, timeout=300
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode in (0, 1), out  # doctor: 1 on a machine without CUDA
    assert "Warning" not in out and "warnings.warn" not in out, out
    assert ("MambaPool of" if command == "demo" else "sglang-mamba-dedup") in out, out
