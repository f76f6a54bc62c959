"""Command line: ``sglang-mamba-dedup {doctor,demo,e2e}`` (also ``python -m sglang_mamba_dedup``)."""
from __future__ import annotations

import sys
from typing import List, Optional

COMMANDS = {
    "doctor": ("sglang_mamba_dedup.doctor", "versions, CUDA, what would be patched and why not"),
    "demo": ("sglang_mamba_dedup.demo", "build SGLang's MambaPool with the plugin off and on, print buffer bytes"),
    "e2e": ("sglang_mamba_dedup.e2e", "greedy md5 comparison of a real SGLang run, plugin off vs on"),
}


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print("usage: sglang-mamba-dedup {" + ",".join(COMMANDS) + "} [options]\n")
        for name, (_, text) in COMMANDS.items():
            print(f"  {name:<8} {text}")
        if argv and argv[0] not in ("-h", "--help"):
            print(f"\nunknown command {argv[0]!r}", file=sys.stderr)
            return 2
        return 0
    import importlib

    module = importlib.import_module(COMMANDS[argv[0]][0])
    return int(module.main(argv[1:]) or 0)


if __name__ == "__main__":
    sys.exit(main())
