"""The checkout's root on ``sys.path`` for the proofs (``tests.support``), without shadowing the plugin build
under test."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
GPU_ENGINE = ROOT / "tools" / "gpu-engine"


def on_path() -> None:
    """The plugin is imported first, from where it is installed (e.g. /tmp/smd-meta under ``python -P``), then
    the checkout goes first on ``sys.path`` for ``tests``; only where no plugin is installed does the
    checkout's serve."""
    try:
        import sglang_mamba_dedup  # noqa: F401
    except ImportError:
        pass
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
