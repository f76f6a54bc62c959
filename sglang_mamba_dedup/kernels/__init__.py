"""The Triton commit kernel for the deduplicated Mamba/GDN state layout.

Modules (each named apart from its functions):

* :mod:`.commit` -- the one kernel, its launch plan and :func:`fused_commit` (all layers, all conv kinds,
  the SSM state, accept and track index sets, one launch);
* :mod:`.entry_points` -- :func:`conv_commit` / :func:`ssm_commit` (single-kind) and :func:`tail_copy`
  (vLLM's DS tail copy ``dst[b_dst, d, 0:W-o] = src[b_src, d, o:W]``), each one launch of that kernel;
* :mod:`._direct_launch` -- the compiled-kernel fast path (the only code on Triton internals);
* :mod:`._validate` -- launch configuration, argument checks, index semantics and duplicate-destination
  behaviour;
* :mod:`.reference` -- plain-PyTorch references of every entry point.
"""

from .commit import clear_plan_cache, fused_commit
from .entry_points import conv_commit, ssm_commit, tail_copy

__all__ = ["fused_commit", "conv_commit", "ssm_commit", "tail_copy", "clear_plan_cache"]
