"""The Triton commit kernel for the deduplicated Mamba/GDN state layout.

Launchers (plain functions; references in :mod:`.reference`), all through the
one kernel of :mod:`.fused_commit`:

* :func:`fused_commit` -- all layers, all conv kinds, the SSM state, accept and
  track index sets, one launch.
* :func:`conv_commit` / :func:`ssm_commit` -- the single-kind versions.
* :func:`tail_copy` -- vLLM's DS tail copy ``dst[b_dst, d, 0:W-o] = src[b_src, d, o:W]``
  (a window read at step ``o``).

Index semantics, bitwise copies and duplicate-destination behaviour are
described in :mod:`._common`.
"""

from .conv_commit import conv_commit
from .fused_commit import clear_plan_cache, fused_commit
from .ssm_commit import ssm_commit
from .tail_copy import tail_copy

__all__ = ["fused_commit", "conv_commit", "ssm_commit", "tail_copy", "clear_plan_cache"]
