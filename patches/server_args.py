"""The launch flag ``--enable-mamba-conv-dedup`` on SGLang's own command line: ``add_cli_args`` adds it to the
parser, ``from_cli_args`` sets ``SGLANG_MAMBA_DEDUP`` before SGLang spawns its schedulers (docs/internals.md).
"""

from __future__ import annotations

import logging
import os

from sglang_mamba_dedup import env, versions

logger = logging.getLogger("sglang_mamba_dedup")

FLAG = env.FLAG
DEST = "enable_mamba_conv_dedup"


def add_cli_args(wrapped, instance, args, kwargs):
    result = wrapped(*args, **kwargs)
    parser = kwargs.get("parser", args[0] if args else None)
    if parser is not None and FLAG not in getattr(parser, "_option_string_actions", {}):
        parser.add_argument(
            FLAG,
            dest=DEST,
            action="store_true",
            default=False,
            help="sglang-mamba-dedup: deduplicate the speculative conv-window cache of hybrid Mamba/GDN "
            "models and commit accepted states with the plugin's kernels (same as SGLANG_MAMBA_DEDUP=1).",
        )
    return result


def from_cli_args(wrapped, instance, args, kwargs):
    ns = kwargs.get("args", args[0] if args else None)
    if getattr(ns, DEST, False) and not versions.support_problem(versions.installed_sglang_version()):
        # (outside the range the flag is accepted and ignored; the activation has said why, once)
        current = os.environ.get(env.SWITCH, "")
        if env.parse_mode_or_off(current) is not env.Mode.STRICT:
            if current and env.parse_mode_or_off(current) is env.Mode.OFF:
                logger.info("sglang-mamba-dedup: %s overrides %s=%s", FLAG, env.SWITCH, current)
            os.environ[env.SWITCH] = "1"  # the spawned scheduler processes apply the plugin from it
    return wrapped(*args, **kwargs)
