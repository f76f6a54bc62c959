"""Stand-ins for running SGLang (0.5.13.post1 ... 0.5.23) on a GPU without the compiled sgl_kernel wheel: the
lent H200's test infrastructure (FACTS §8), never shipped. ``tools/gpu-engine/sitecustomize.py`` installs
them in every Python process that has that folder on PYTHONPATH (the Engine's scheduler is started with
``spawn``, so patches in the parent are not inherited). Nothing imports SGLang or torch at start-up: the
rebinds are post-import hooks (:mod:`._hooks`).

Switches (environment):

* ``SGLANG_STANDINS=0``: nothing installed (the loader's switch);
* ``SGLANG_STANDINS_SKIP=name1,name2``: single stand-ins left out; names: pdl, tree, verify, topk,
  store_cache, conv1d, toolclose, fused, clamp, jitlog;
* ``SGLANG_STANDINS_QUIET=1``: no log; otherwise every rebind that fires is logged to stderr as
  "[standins] pid=... <what>";
* ``SGLANG_STANDINS_FLASHINFER=1``: the flashinfer import stand-in (releases before 0.5.23).

By concern: :mod:`.imports` (imports that fail here), :mod:`.speculative` (tree build, greedy verify, top-k),
:mod:`.jit_kernels` (JIT kernels with a torch path), :mod:`.layers` (layers' CUDA forwards), :mod:`.check`.
Older releases (0.5.13.post1 checked) have other targets: the tree build, greedy verify and fast_topk come
from sgl_kernel itself (AOT ops before 0.5.21: host-side twins are set on the sgl_kernel stand-in); the CUDA
forwards of MultiPlatformOp layers call sgl_kernel or JIT kernels and no env switch reaches them before 0.5.18
(``fused`` sends them to forward_native); clamp_position is a JIT kernel before 0.5.20 (the torch one is used),
and before 0.5.17 the JIT kernels live under sglang.jit_kernel (store-cache probe).
"""

import os

from . import _hooks, imports, jit_kernels, layers, probes, speculative

#: The stand-ins in the order they are installed (``check`` lists their targets in this order).
STANDINS = (
    imports.sgl_kernel_utils,
    speculative.install,
    jit_kernels.store_cache,
    imports.tool_close_tokens,
    layers.prefill_conv,
    layers.multi_platform,
    jit_kernels.clamp_position,
    jit_kernels.jit_log,
    imports.flashinfer,
    probes.load_footprint,
    probes.pad_replays,
)


def install():
    # the environment (children inherit it anyway; set here so that any process has it)
    os.environ.setdefault("SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK", "1")
    layers.fused_op_backend()
    _hooks.install_finder()
    for standin in STANDINS:
        standin()
