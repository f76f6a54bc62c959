"""The launch flags ``--enable-mamba-conv-dedup`` and ``--enable-mamba-zero-copy-commit`` on SGLang's own command
line: ``add_cli_args`` adds them to the parser, ``from_cli_args`` sets ``SGLANG_MAMBA_DEDUP`` (and
``SGLANG_MAMBA_DEDUP_ZERO_COPY``) before SGLang spawns its schedulers (docs/internals.md).
"""

from __future__ import annotations

import logging

from sglang_mamba_dedup import env, versions

logger = logging.getLogger("sglang_mamba_dedup")

FLAG = env.FLAG
DEST = "enable_mamba_conv_dedup"
ZERO_COPY_DEST = "enable_mamba_zero_copy_commit"


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
    if parser is not None and env.ZERO_COPY_FLAG not in getattr(parser, "_option_string_actions", {}):
        parser.add_argument(
            env.ZERO_COPY_FLAG,
            dest=ZERO_COPY_DEST,
            action="store_true",
            default=False,
            help="sglang-mamba-dedup: the zero-copy commit (SGLang 0.5.23, GDN and Mamba2, radix cache off; implies "
            f"{FLAG}; same as {env.ZERO_COPY}=1): the verify reads the accepted SSM state where it wrote it.",
        )
    return result


def from_cli_args(wrapped, instance, args, kwargs):
    ns = kwargs.get("args", args[0] if args else None)
    flags = tuple(
        flag for flag, dest in ((FLAG, DEST), (env.ZERO_COPY_FLAG, ZERO_COPY_DEST)) if getattr(ns, dest, False)
    )
    # outside the supported range the flag is accepted and ignored (the activation has said why, once)
    supported = bool(flags) and not versions.support_problem(versions.installed_sglang_version())
    replaced = env.export_flags(flags, switch=supported)  # the spawned scheduler processes apply the plugin from it
    if replaced:
        logger.info("sglang-mamba-dedup: %s overrides %s=%s", FLAG, env.SWITCH, replaced)
    return wrapped(*args, **kwargs)
