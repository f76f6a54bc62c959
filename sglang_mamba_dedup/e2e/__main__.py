"""``python -m sglang_mamba_dedup.e2e [options]``: the ``sglang-mamba-dedup e2e`` command."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
