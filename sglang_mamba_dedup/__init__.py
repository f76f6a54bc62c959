"""sglang-mamba-dedup: deduplicated conv-window cache and fused commit kernels for SGLang (switched on by
``SGLANG_MAMBA_DEDUP=1`` or ``--enable-mamba-conv-dedup``). Importing this package is cheap: no torch, no SGLang.
"""

from .versions import plugin_version as _plugin_version

__version__ = _plugin_version()


def apply(features=None):
    """Apply the patches (all features, or a feature name or list of names): ``{feature: None or why not}``. A
    later ``load_plugins()`` with ``SGLANG_MAMBA_DEDUP`` unset keeps them (``=0`` or :func:`revert` undoes them)."""
    from . import activation, installed

    result = installed.apply(features)
    activation.mark_programmatic()
    return result


def revert(features=None, force=False):
    """Undo :func:`apply` (the commit patch stays while back-ported pools are alive, unless ``force=True``)."""
    from . import activation, installed

    activation.mark_programmatic(False)
    result = installed.revert(features, force=force)
    if not installed.PATCHER.applied():  # nothing left wrapped: the process is off, and a later activation decides
        activation.forget()  # afresh (it returned early on its remembered key, re-applying nothing)
    return result


def status():
    """Per patch: ``{"feature", "target", "state", "reason", "calls"}``."""
    from . import installed

    return installed.status()


def memory_ledger():
    """The memory ledger (:mod:`.ledger`) of the last ``MambaPool`` built with the plugin on, or None."""
    from . import report

    return report.events().get("ledger")


def memory_ledgers() -> list:
    """Every ``MambaPool``'s ledger in this process, in build order."""
    from . import report

    return list(report.events().get("ledgers", []))
