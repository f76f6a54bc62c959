"""Pool construction and the mamba memory estimator.

Wraps
  * ``sglang.srt.model_executor.model_runner_kv_cache_mixin.ModelRunnerKVCacheMixin._init_pools``
    (0.5.12 ... 0.5.13.post1): gets ``speculative_eagle_topk`` to the pool gate, which those releases
    do not pass to ``MambaPool``;
  * ``...ModelRunnerKVCacheMixin.handle_max_mamba_cache`` (0.5.12 ... 0.5.15.x) and
    ``sglang.srt.mem_cache.kv_cache_configurator.KVCacheConfigurator._handle_max_mamba_cache``
    (0.5.17 ... 0.5.23): reserve the deduplicated window size instead of the dense one.
Undone by ``sglang_mamba_dedup.revert()``.
"""
from __future__ import annotations


def init_pools(wrapped, instance, args, kwargs):
    # Pass-through until the integration lands (issue 4).
    return wrapped(*args, **kwargs)


def handle_max_mamba_cache(wrapped, instance, args, kwargs):
    # Pass-through until the integration lands (issue 4).
    return wrapped(*args, **kwargs)
