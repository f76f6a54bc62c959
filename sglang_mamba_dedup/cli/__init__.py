"""Command line: ``sglang-mamba-dedup {doctor,demo,plan,e2e}`` (also ``python -m sglang_mamba_dedup``)."""

from __future__ import annotations

import contextlib
import sys

COMMANDS = {
    "doctor": ("sglang_mamba_dedup.cli.doctor", "versions, CUDA, what would be patched and why not"),
    "demo": ("sglang_mamba_dedup.cli.demo", "build SGLang's MambaPool with the plugin off and on, print buffer bytes"),
    "plan": ("sglang_mamba_dedup.planner.plan", "mamba slots, running requests and KV memory, stock vs plugin (CPU)"),
    "e2e": ("sglang_mamba_dedup.e2e.cli", "greedy md5 comparison of a real SGLang run, plugin off vs on"),
}


EXAMPLES = """examples:
  sglang-mamba-dedup doctor                      # can the plugin engage on this install? (exit 0/1/2)
  sglang-mamba-dedup doctor --release 0.5.13.post1
  sglang-mamba-dedup demo                        # SGLang's real MambaPool, plugin off vs on
  sglang-mamba-dedup plan --shape qwen3.5-0.8b   # how many requests fit, stock vs plugin
  sglang-mamba-dedup e2e --random-weights        # greedy md5 off vs on (CUDA GPU)
  sglang-mamba-dedup COMMAND --help              # options and exit codes of one command"""


def _usage(out) -> None:
    print("usage: sglang-mamba-dedup [--version] {" + ",".join(COMMANDS) + "} [options]", file=out)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("-V", "--version"):
        from .. import versions

        if len(argv) > 1:
            _usage(sys.stderr)
            print(
                f"sglang-mamba-dedup: error: --version takes no arguments, got {' '.join(argv[1:])!r}", file=sys.stderr
            )
            return 2
        print(
            f"sglang-mamba-dedup {versions.plugin_version()} (SGLang {versions.installed_sglang_version() or 'not installed'}; "
            f"supports {versions.SUPPORTED})"
        )
        return 0
    if argv and argv[0] not in COMMANDS and argv[0] not in ("-h", "--help", "help"):
        _usage(sys.stderr)
        print(
            f"sglang-mamba-dedup: error: unknown command {argv[0]!r} (choose from {', '.join(COMMANDS)})",
            file=sys.stderr,
        )
        return 2
    if not argv or argv[0] in ("-h", "--help", "help"):
        _usage(sys.stdout)
        print()
        for name, (_, text) in COMMANDS.items():
            print(f"  {name:<8} {text}")
        print("\n" + EXAMPLES)
        return 0
    import importlib

    from ._args import sglang_warnings_quiet

    # doctor and demo import SGLang on any machine: its import-time warnings about this machine are not theirs
    with sglang_warnings_quiet() if argv[0] in ("doctor", "demo") else contextlib.nullcontext():
        module = importlib.import_module(COMMANDS[argv[0]][0])
        return int(module.main(argv[1:]) or 0)


if __name__ == "__main__":
    sys.exit(main())
