"""SGLang's JIT-compiled CUDA kernels that have a torch path: the torch path is taken (no JIT build)."""

from ._hooks import log, skipped, when_imported


def _no_store_cache(*a, **k):
    return False


def store_cache():
    """KV write: the torch indexing fallback, no JIT build retried on every write (skip name ``store_cache``)."""
    if skipped("store_cache"):
        return

    @when_imported("sglang.kernels.ops.kvcache.kvcache")
    def _kv(m):
        m.can_use_store_cache = _no_store_cache
        log("kvcache.can_use_store_cache -> False")

    @when_imported("sglang.jit_kernel.kvcache")  # releases before 0.5.17 (0.5.13.post1)
    def _jit_kv(m):
        m.can_use_store_cache = _no_store_cache
        log("jit_kernel.kvcache.can_use_store_cache -> False")

    @when_imported("sglang.srt.mem_cache.memory_pool")
    def _mp(m):
        m.can_use_store_cache = _no_store_cache
        log("memory_pool.can_use_store_cache -> False")


def clamp_position():
    """Releases before 0.5.20: decode positions go through the JIT ``clamp_position_cuda``; the torch one is
    used (skip name ``clamp``)."""
    if skipped("clamp"):
        return

    @when_imported("sglang.srt.model_executor.forward_batch_info")
    def _clamp(m):
        if hasattr(m, "_clamp_position_native"):
            m.clamp_position = m._clamp_position_native
            log("forward_batch_info.clamp_position -> _clamp_position_native (<0.5.20)")


def jit_log():
    """Releases before 0.5.17 build JIT kernels through ``sglang.jit_kernel.utils.load_jit``: each first build
    is logged, so that a JIT kernel no stand-in covers shows up in the run's log (it still builds, or fails;
    skip name ``jitlog``)."""
    if skipped("jitlog"):
        return

    @when_imported("sglang.jit_kernel.utils")
    def _jitlog(m):
        orig, seen = m.load_jit, set()

        def load_jit(*args, **kwargs):
            if args and args[0] not in seen:
                seen.add(args[0])
                log(f"JIT kernel build requested: {args[0]} (no stand-in covers it)")
            return orig(*args, **kwargs)

        m.load_jit = load_jit
        log("jit_kernel.utils.load_jit -> logs each JIT build")
