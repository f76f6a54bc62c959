"""Dry check of the stand-ins (imports only, nothing runs): every hook target and the Engine-path modules
that bind them imported, which hooks fired and what the names resolve to; exit status 1 when an import or a
hook failed. ``fake_cuda`` makes torch report one sm90 GPU first, so that a CPU machine takes SGLang's CUDA
import branches."""

import importlib
import sys

from ._hooks import FIRED, TARGETS

#: Engine-path modules that bind a stand-in's target by name (old and new layouts).
BINDINGS = (
    ("sglang.srt.layers.attention.triton_backend", "is_arch_support_pdl"),
    ("sglang.srt.speculative.eagle_utils", "sgl_build_tree_kernel_efficient"),
    ("sglang.srt.speculative.spec_utils", "fast_topk"),
    ("sglang.kernels.ops.speculative.tree", "build_tree_kernel_efficient"),
    ("sglang.kernels.ops.speculative.tree", "verify_tree_greedy"),
    ("sglang.srt.mem_cache.memory_pool", "can_use_store_cache"),
    ("sglang.srt.model_executor.forward_batch_info", "clamp_position"),
    ("sglang.srt.layers.attention.mamba.causal_conv1d", "_HAS_SGL_KERNEL"),
    ("sglang.srt.layers.attention.mamba.causal_conv1d", "_HAS_CONV1D_KERNEL"),
    ("sglang.srt.layers.utils.multi_platform", "MultiPlatformOp.dispatch_forward"),
    ("sglang.srt.parser.response_template", "tool_close_tokens"),
    ("sgl_kernel", "verify_tree_greedy"),
    ("sgl_kernel.utils", "is_arch_support_pdl"),
)
#: What the offline Engine's scheduler imports on the way (model, workers, backends).
CHECK_IMPORTS = (
    "sglang.srt.layers.layernorm",
    "sglang.srt.layers.activation",
    "sglang.srt.layers.rotary_embedding",
    "sglang.srt.layers.sampler",
    "sglang.srt.layers.attention.triton_backend",
    "sglang.srt.layers.attention.hybrid_linear_attn_backend",
    "sglang.srt.layers.attention.linear.gdn_backend",
    "sglang.srt.speculative.eagle_worker_v2",
    "sglang.srt.models.qwen3_5",
    "sglang.srt.models.qwen3_5_mtp",
    # Nemotron-H (Mamba2): its mixer calls SGLang's Triton conv (use_triton_causal_conv=True), the Triton
    # selective_state_update / mamba_chunk_scan_combined and Mixer2RMSNormGated (a fused op: torch under
    # SGLANG_FORCE_FUSED_OP_BACKEND); nothing on that path needs a stand-in of its own (read in 0.5.23).
    "sglang.kernels.ops.mamba.triton_ops",
    "sglang.srt.layers.attention.mamba.mamba",
    "sglang.srt.models.nemotron_h",
    "sglang.srt.models.nemotron_h_mtp",
    "sglang.srt.managers.scheduler",
    "sglang.srt.managers.detokenizer_manager",
    "sglang.srt.entrypoints.engine",
)


def _fake_cuda():
    import torch

    torch.cuda.is_available = lambda: True
    torch.version.cuda = torch.version.cuda or "13.0"
    torch.cuda.device_count = lambda: 1
    torch.cuda.get_device_capability = lambda *a, **k: (9, 0)
    torch.cuda.get_device_name = lambda *a, **k: "fake sm90 (standins check)"


def check(fake_cuda=False):
    """Import the hook targets and the Engine-path modules, report hooks and bindings, exit (status 1 on failure)."""
    if fake_cuda:
        _fake_cuda()
    failed = 0
    for name in list(TARGETS) + [n for n in CHECK_IMPORTS if n not in TARGETS]:
        try:
            importlib.import_module(name)
            res = "imported"
        except ModuleNotFoundError as e:
            own = e.name and (name == e.name or name.startswith(e.name + "."))
            res = f"absent in this release ({e.name})" if own else f"IMPORT FAILED: {e!r}"
            failed += not own
        except Exception as e:
            res, failed = f"IMPORT FAILED: {e!r}", failed + 1
        hooks = f"; hooks run {FIRED.get(name, 0)}" if name in TARGETS else ""
        bad = FIRED.get(name + "!", 0)
        failed += bad
        print(f"[standins-check] {name}: {res}{hooks}" + (f"; HOOKS FAILED {bad}" if bad else ""))
    for mod, attr in BINDINGS:
        m = sys.modules.get(mod)
        val = m
        for part in attr.split("."):
            val = getattr(val, part, "<absent>") if val is not None else None
        where = getattr(val, "__module__", None)
        shown = f"{where}.{getattr(val, '__qualname__', val)}" if callable(val) and where else repr(val)
        print(f"[standins-check] {mod}.{attr} = {shown if m is not None else '(module not imported)'}")
    print(f"[standins-check] {'FAILED' if failed else 'OK'}")
    sys.stdout.flush()
    sys.exit(1 if failed else 0)
