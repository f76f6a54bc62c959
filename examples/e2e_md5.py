#!/usr/bin/env python3
"""Greedy md5 comparison of a real SGLang run with NEXTN, plugin off vs on.

Thin wrapper around ``sglang_mamba_dedup.e2e.cli.main`` (also ``sglang-mamba-dedup e2e``); see docs/e2e.md.

    python examples/e2e_md5.py --random-weights                 # Qwen3.5-0.8B architecture, random weights
    python examples/e2e_md5.py --model-path Qwen/Qwen3.5-0.8B   # the real checkpoint, if you have it
"""

import sys

from sglang_mamba_dedup.e2e import cli

if __name__ == "__main__":
    sys.exit(cli.main(sys.argv[1:]))
