"""Model layers whose CUDA forwards call sgl_kernel or JIT kernels: sent to their torch / Triton paths."""

import os

from ._hooks import log, skipped, when_imported


def fused_op_backend():
    """0.5.18+: ``SGLANG_FORCE_FUSED_OP_BACKEND=torch`` sends the fused ops (norms, activations, rope) to torch
    (skip name ``fused``, which also leaves :func:`multi_platform` out)."""
    if not skipped("fused"):
        os.environ.setdefault("SGLANG_FORCE_FUSED_OP_BACKEND", "torch")


def prefill_conv():
    """Prefill conv: the Triton path (skip name ``conv1d``)."""
    if skipped("conv1d"):
        return

    @when_imported("sglang.srt.layers.attention.mamba.causal_conv1d")
    def _conv(m):
        # the flag is _HAS_CONV1D_KERNEL from 0.5.18 on, _HAS_SGL_KERNEL before (0.5.13.post1 ... 0.5.17)
        for flag in ("_HAS_CONV1D_KERNEL", "_HAS_SGL_KERNEL"):
            if hasattr(m, flag):
                setattr(m, flag, False)
                log(f"causal_conv1d.{flag} = False")


def multi_platform():
    """Up to 0.5.17 the layers are MultiPlatformOp with its own dispatch, which SGLANG_FORCE_FUSED_OP_BACKEND
    does not reach (from 0.5.18 on MultiPlatformOp is an alias of BaseFusedOp, which it does): RMSNorm,
    GemmaRMSNorm, SiluAndMul, rotary embeddings, ... pick forward_cuda, which calls sgl_kernel (norms) or JIT
    kernels (activation, rope). Every layer that has a forward_native is sent there instead (skip name
    ``fused``)."""
    if skipped("fused"):
        return

    @when_imported("sglang.srt.layers.utils.multi_platform")
    def _multi_platform(m):
        if "dispatch_forward" not in vars(m.MultiPlatformOp):  # 0.5.18+: BaseFusedOp, the env switch
            return
        base = m.MultiPlatformOp
        orig = base.dispatch_forward

        def dispatch_forward(self):
            if type(self).forward_native is not base.forward_native:
                return self.forward_native
            return orig(self)

        base.dispatch_forward = dispatch_forward
        log("MultiPlatformOp.dispatch_forward -> forward_native (<0.5.18)")
