"""Every SGLang target the plugin changes, in one table (shipped as ``sglang_mamba_dedup.patches``), applied
all-or-nothing per feature by :class:`sglang_mamba_dedup.patcher.Patcher`; ``tests/plugin/test_patch_table.py``
checks that every wrapper here is in it once and that the README's table (``doctor --patch-table``) is this one.
"""

from __future__ import annotations

from sglang_mamba_dedup import versions
from sglang_mamba_dedup.patcher import Patch

from . import commit, dedup_layout, estimator, launch_flag, server_state, topk_plumbing

# Ranges come only from the named boundaries in ``sglang_mamba_dedup.versions``.
ALL = str(versions.SUPPORTED)
BACKPORT = str(versions.BACKPORT)
OLD_LAYOUT = str(versions.OLD_LAYOUT)  # pools built in model_runner_kv_cache_mixin
NEW_LAYOUT = str(versions.NEW_LAYOUT)  # pools built in kv_cache_configurator
UNIFIED_POOL = str(versions.UNIFIED_POOL)  # UnifiedMambaPool exists
ZERO_COPY = str(versions.ZERO_COPY)  # the one release the zero-copy commit is built against
SERVER_STATE = str(versions.SERVER_STATE)  # Scheduler.get_internal_state importable on a CPU test machine

#: Features in application order; all of them only when the plugin is switched on (``zero_copy*`` only when
#: asked for as well; the Mamba2 mixer's kernel bindings exist on CUDA only, hence a feature of their own).
#: ``launch_flag`` makes SGLang's parser accept our flags (which switched the plugin on from ``sys.argv``).
FEATURES = (
    "launch_flag",
    "dedup_layout",
    "commit",
    "topk_plumbing",
    "estimator",
    "server_state",
    "zero_copy",
    "zero_copy_mamba2",
)
#: Features applied only when asked for as well (``SGLANG_MAMBA_DEDUP_ZERO_COPY``).
ASKED_FOR = ("zero_copy", "zero_copy_mamba2")
#: What switching the plugin on applies (besides the flag).
SWITCHED_FEATURES = tuple(f for f in FEATURES[1:] if f not in ASKED_FOR)


def _zero_copy(name: str):
    """The zero-copy wrapper ``name``, its module imported at its first call: only a process that asked for
    zero-copy has these patches installed, so no other process loads :mod:`.zero_copy.hooks`."""

    hook = None  # resolved at the first call, then kept: some of these run per request on the scheduler's host path

    def wrapper(wrapped, instance, args, kwargs):
        nonlocal hook
        if hook is None:
            from .zero_copy import hooks

            hook = getattr(hooks, name)
        return hook(wrapped, instance, args, kwargs)

    wrapper.__name__ = wrapper.__qualname__ = name
    wrapper._smd_lazy = f"{__name__}.zero_copy.hooks.{name}"  # type: ignore[attr-defined]
    return wrapper


PATCHES: list[Patch] = [
    Patch(
        name="server_args.add_cli_args",
        feature="launch_flag",
        module="sglang.srt.server_args",
        attr="ServerArgs.add_cli_args",
        releases=ALL,
        wrapper=launch_flag.add_cli_args,
        params=("parser",),
        doc="adds --enable-mamba-conv-dedup",
    ),
    Patch(
        name="server_args.from_cli_args",
        feature="launch_flag",
        module="sglang.srt.server_args",
        attr="ServerArgs.from_cli_args",
        releases=ALL,
        wrapper=launch_flag.from_cli_args,
        params=("args",),
        doc="turns the flag into SGLANG_MAMBA_DEDUP=1 before scheduler processes spawn",
    ),
    Patch(
        name="mamba_pool.init",
        feature="dedup_layout",
        module="sglang.srt.mem_cache.memory_pool",
        attr="MambaPool.__init__",
        releases=ALL,
        wrapper=dedup_layout.mamba_pool_init,
        params=("size", "spec_state_size", "cache_params", "mamba_layer_ids", "device", "speculative_num_draft_tokens"),
        doc="back-ports the deduplicated window (no upstream dedup) / checks, records and counts physically upstream's",
    ),
    Patch(
        name="unified_mamba_pool.init",
        feature="dedup_layout",
        module="sglang.srt.mem_cache.unified_memory_pool",
        attr="UnifiedMambaPool.__init__",
        releases=UNIFIED_POOL,
        wrapper=dedup_layout.unified_mamba_pool_init,
        params=("unified_buffer", "spec_state_size", "speculative_num_draft_tokens"),
        doc="says (WARNING; strict stops) that a unified-memory pool keeps SGLang's dense window and commit",
    ),
    Patch(
        name="hybrid_linear_attn.update_mamba_state_after_mtp_verify",
        feature="commit",
        module="sglang.srt.layers.attention.hybrid_linear_attn_backend",
        attr="HybridLinearAttnBackend.update_mamba_state_after_mtp_verify",
        releases=ALL,
        wrapper=commit.update_mamba_state_after_mtp_verify,
        params=("last_correct_step_indices", "mamba_track_indices", "mamba_steps_to_track", "model"),
        calls=commit.CALLEES,
        doc="one fused launch of our kernel (SSM, every conv kind, accept + track), then SGLang's own PLE side-state commit",
    ),
    Patch(
        name="kv_cache_mixin.init_pools",
        feature="topk_plumbing",
        module="sglang.srt.model_executor.model_runner_kv_cache_mixin",
        attr="ModelRunnerKVCacheMixin._init_pools",
        releases=BACKPORT,
        wrapper=topk_plumbing.init_pools,
        params=("self",),
        doc="passes speculative_eagle_topk to the pool gate",
    ),
    Patch(
        name="kv_cache_mixin.handle_max_mamba_cache",
        feature="estimator",
        module="sglang.srt.model_executor.model_runner_kv_cache_mixin",
        attr="ModelRunnerKVCacheMixin.handle_max_mamba_cache",
        releases=OLD_LAYOUT,
        wrapper=estimator.handle_max_mamba_cache,
        params=("total_rest_memory",),
        doc="reserves the deduplicated window (more slots) and what the pool allocates beyond SGLang's estimate",
    ),
    Patch(
        name="kv_cache_configurator.handle_max_mamba_cache",
        feature="estimator",
        module="sglang.srt.mem_cache.kv_cache_configurator",
        attr="KVCacheConfigurator._handle_max_mamba_cache",
        releases=NEW_LAYOUT,
        wrapper=estimator.handle_max_mamba_cache,
        params=("total_rest_memory",),
        doc="reserves the deduplicated window (more slots) and what the pool allocates beyond SGLang's estimate",
    ),
    Patch(
        name="scheduler.get_internal_state",
        feature="server_state",
        module="sglang.srt.managers.scheduler",
        attr="Scheduler.get_internal_state",
        releases=SERVER_STATE,
        wrapper=server_state.get_internal_state,
        params=("recv_req",),
        doc="adds the running-request cap in force, the mamba slots and each pool's ledger to /get_server_info",
    ),
    Patch(
        name="gdn_backend.forward_extend",
        feature="zero_copy",
        module="sglang.srt.layers.attention.linear.gdn_backend",
        attr="GDNAttnBackend.forward_extend",
        releases=ZERO_COPY,
        wrapper=_zero_copy("gdn_forward_extend"),
        params=("layer", "forward_batch"),
        doc="zero-copy (asked for): a verify runs seeded from the scratch; any other extend stages its rows in",
    ),
    Patch(
        name="gdn_backend.select_verify_intermediate_state_indices",
        feature="zero_copy",
        module="sglang.srt.layers.attention.linear.gdn_backend",
        attr="select_verify_intermediate_state_indices",
        releases=ZERO_COPY,
        wrapper=_zero_copy("select_rows"),
        params=("default_indices", "req_pool_indices", "valid", "pool_size"),
        doc="zero-copy: a request's scratch row is its req_pool_idx (padding: row 0)",
    ),
    Patch(
        name="gdn_triton.target_verify",
        feature="zero_copy",
        module="sglang.srt.layers.attention.linear.kernels.gdn_triton",
        attr="TritonGDNKernel.target_verify",
        releases=ZERO_COPY,
        wrapper=_zero_copy("triton_target_verify"),
        params=("ssm_states", "cache_indices", "intermediate_states_buffer", "intermediate_state_indices"),
        doc="zero-copy: SGLang's Triton verify reads each request's state from the scratch column it is in",
    ),
    Patch(
        name="streaming_session.try_cache_finished_req",
        feature="zero_copy",
        module="sglang.srt.session.streaming_session",
        attr="StreamingSession.try_cache_finished_req",
        releases=ZERO_COPY,
        wrapper=_zero_copy("session_kept"),
        params=("req",),
        doc="zero-copy: a streaming session's kept turn is queued to be materialized into its slot",
    ),
    Patch(
        name="model_runner.deferred_mamba_cow_and_clear",
        feature="zero_copy",
        module="sglang.srt.model_executor.model_runner",
        attr="ModelRunner._maybe_execute_deferred_mamba_cow_and_clear",
        releases=ZERO_COPY,
        wrapper=_zero_copy("before_extend"),
        params=("forward_batch",),
        doc="zero-copy: the queued session hand-offs are materialized before the next extend reads the pool",
    ),
    Patch(
        name="mamba_component.prepare_for_caching_req",
        feature="zero_copy",
        module="sglang.srt.mem_cache.unified_cache.components.mamba",
        attr="MambaComponent.prepare_for_caching_req",
        releases=ZERO_COPY,
        wrapper=_zero_copy("radix_tripwire"),
        params=("req", "insert_params", "token_ids_len", "is_finished"),
        doc="zero-copy: a tripwire where the radix tree takes a state (exactly UnifiedRadixCache, extra buffer, no int8)",
    ),
    Patch(
        name="batch_result_processor.mamba_check_track_boundary",
        feature="zero_copy",
        module="sglang.srt.managers.scheduler_components.batch_result_processor",
        attr="SchedulerBatchResultProcessor._mamba_check_track_boundary",
        releases=ZERO_COPY,
        wrapper=_zero_copy("track_boundaries"),
        params=("req", "batch", "result", "i"),
        doc="zero-copy: counts the track boundaries a zero-copy pool's requests cross (zc_track_rows)",
    ),
    Patch(
        name="unified_radix_cache.evict",
        feature="zero_copy",
        module="sglang.srt.mem_cache.unified_radix_cache",
        attr="UnifiedRadixCache._evict",
        releases=ZERO_COPY,
        wrapper=_zero_copy("tree_evictions"),
        params=("params", "available_size_targets"),
        doc="zero-copy: counts the mamba states the radix tree evicts from a zero-copy pool (zc_tree_evictions)",
    ),
    Patch(
        name="mamba2_backend.forward",
        feature="zero_copy_mamba2",
        module="sglang.srt.layers.attention.hybrid_linear_attn_backend",
        attr="Mamba2AttnBackend.forward",
        releases=ZERO_COPY,
        wrapper=_zero_copy("mamba2_forward"),
        params=("mixer", "hidden_states", "output", "layer_id", "forward_batch"),
        doc="zero-copy (Mamba2): a verify layer runs seeded from the scratch; any other extend stages its rows in",
    ),
    Patch(
        name="mamba2_mixer.causal_conv1d_update_triton",
        feature="zero_copy_mamba2",
        module="sglang.srt.layers.attention.mamba.mamba",
        attr="causal_conv1d_update_triton",
        releases=ZERO_COPY,
        wrapper=_zero_copy("mamba2_conv"),
        params=("conv_state_indices", "intermediate_conv_window", "intermediate_state_indices"),
        doc="zero-copy (Mamba2): the verify's conv windows go to the requests' scratch rows",
    ),
    Patch(
        name="mamba2_mixer.selective_state_update",
        feature="zero_copy_mamba2",
        module="sglang.srt.layers.attention.mamba.mamba",
        attr="selective_state_update",
        releases=ZERO_COPY,
        wrapper=_zero_copy("mamba2_ssm"),
        params=(
            "state",
            "state_batch_indices",
            "intermediate_states_buffer",
            "cache_steps",
            "intermediate_state_indices",
        ),
        doc="zero-copy (Mamba2): the verify's state update seeds from the scratch column its request is in",
    ),
]
