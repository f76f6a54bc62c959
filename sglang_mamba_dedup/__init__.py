"""sglang-mamba-dedup: deduplicated conv-window cache and fused commit kernels for SGLang.

Switch it on with ``SGLANG_MAMBA_DEDUP=1`` (or ``strict``) or SGLang's ``--enable-mamba-conv-dedup``.
Importing this package is cheap: no torch, no SGLang.
"""
__version__ = "0.1.0"


def apply(features=None):
    """Apply the patches to the installed SGLang (all features by default); see :mod:`.patching`."""
    from . import patching

    return patching.apply(features)


def revert(features=None):
    from . import patching

    return patching.revert(features)


def status():
    """Per patch: ``{"feature", "target", "state", "reason", "calls"}``."""
    from . import patching

    return patching.status()
