"""The conv-window scratch layout of ``MambaPool``.

Wraps ``sglang.srt.mem_cache.memory_pool.MambaPool.__init__`` (0.5.12 ... 0.5.23).
  * 0.5.12 ... 0.5.13.post1 (no upstream dedup): back-port, allocate the deduplicated window instead of
    the dense one when the gate allows it;
  * 0.5.14 ... 0.5.23 (upstream dedup): verify the layout upstream built and record it.
Undone by ``sglang_mamba_dedup.revert()`` (restores the original ``__init__``; pools already built keep
their layout).
"""
from __future__ import annotations


def mamba_pool_init(wrapped, instance, args, kwargs):
    # Pass-through until the integration lands (issue 4).
    return wrapped(*args, **kwargs)
