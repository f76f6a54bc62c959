"""Imports that fail on the lent H200, which has neither flashinfer nor the real sgl_kernel (test
infrastructure, never shipped): what makes them succeed.

* :func:`sgl_kernel_utils`: ``sgl_kernel.utils.is_arch_support_pdl`` (the sgl_kernel stand-in has no
  submodule ``utils``; skip name ``pdl``);
* :func:`tool_close_tokens`: the detokenizer's start-up without the xgrammar import (skip name ``toolclose``);
* :func:`flashinfer` (``SGLANG_STANDINS_FLASHINFER=1``): releases whose modules import flashinfer at load
  (0.5.13.post1 ... 0.5.21 on CUDA) get :func:`stub_missing_packages` and
  :func:`tolerate_missing_sgl_kernel_ops`, which ``tools/gpu-engine/proofs/release_sim_gpu.py`` also calls.
"""

import os
import sys

from ._hooks import log, skipped, when_imported


def tolerate_missing_sgl_kernel_ops() -> None:
    """Releases before 0.5.16 register fake kernels for ``sgl_kernel::*`` ops at import; with the import-time
    stand-in of ``sgl_kernel`` (../shared/gpu) those ops do not exist. Skip such registrations (test only:
    nothing on the mamba state path calls them)."""
    import torch

    real = torch.library.register_fake

    def register_fake(op, *args, **kwargs):
        name = op if isinstance(op, str) else ""
        if name.startswith("sgl_kernel::"):
            ns, _, opname = name.partition("::")
            if not hasattr(getattr(torch.ops, ns), opname.split(".")[0]):
                return (lambda fn: fn) if not args else None
        return real(op, *args, **kwargs)

    torch.library.register_fake = register_fake


def stub_missing_packages(names=("flashinfer",)) -> None:
    """Older releases import flashinfer at module load when CUDA is present; the device has none. Give them an
    import-time stand-in whose attributes raise when called (test only: the mamba state path is Triton)."""
    import importlib.abc
    import importlib.machinery
    import importlib.util
    import types

    missing = [n for n in names if importlib.util.find_spec(n) is None]
    if not missing:
        return

    class _Meta(type):
        def __getattr__(cls, attr):
            if attr.startswith("__"):
                raise AttributeError(attr)
            return _placeholder(f"{cls.__qualname__}.{attr}")

    def _placeholder(qualname):
        """A class (it may be subclassed at import) that raises when it is called."""

        def new(cls, *args, **kwargs):
            raise NotImplementedError(f"{qualname} is an import-time stand-in on this test machine")

        return _Meta(qualname.rsplit(".", 1)[-1], (), {"__new__": new, "__qualname__": qualname})

    def _module_attr(module_name, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _placeholder(f"{module_name}.{attr}")

    class _Loader(importlib.abc.Loader):
        def create_module(self, spec):
            mod = types.ModuleType(spec.name)
            mod.__path__ = []  # a package: any submodule resolves through the finder too
            mod.__getattr__ = lambda attr, _n=spec.name: _module_attr(_n, attr)  # type: ignore[attr-defined]
            return mod

        def exec_module(self, module):
            pass

    class _Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path=None, target=None):
            # Availability probes (importlib.util.find_spec, as SGLang's is_flashinfer_available uses) still
            # see "not installed", so no code path chooses the stand-in; only plain imports get it.
            frame = sys._getframe(1)
            for _ in range(3):
                if frame is None:
                    break
                code = frame.f_code
                if code.co_name == "find_spec" and code.co_filename.replace("\\", "/").endswith(
                    ("importlib/util.py", "<frozen importlib.util>")
                ):
                    return None
                frame = frame.f_back
            if fullname.split(".")[0] in missing:
                return importlib.machinery.ModuleSpec(fullname, _Loader(), is_package=True)
            return None

    sys.meta_path.append(_Finder())

    # Once a plain import has loaded the stand-in, importlib.util.find_spec answers from sys.modules without
    # asking any finder; keep its answer "not installed" for the stand-in packages.
    real_find_spec = importlib.util.find_spec

    def find_spec(name, package=None):
        if name.split(".")[0] in missing:
            return None
        return real_find_spec(name, package)

    importlib.util.find_spec = find_spec


def sgl_kernel_utils():
    """``sgl_kernel.utils.is_arch_support_pdl`` on the sgl_kernel stand-in: torch's capability >= 9."""
    if skipped("pdl"):
        return

    @when_imported("sgl_kernel")
    def _sgl_kernel_utils(sk):
        if not str(getattr(sk, "__version__", "")).endswith("stub"):
            return
        import types

        utils = types.ModuleType("sgl_kernel.utils")

        def is_arch_support_pdl():
            import torch

            return bool(torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 9)

        utils.is_arch_support_pdl = is_arch_support_pdl
        try:
            from sgl_kernel._placeholder import module_getattr

            utils.__getattr__ = module_getattr("sgl_kernel.utils")
        except Exception:
            pass
        sys.modules["sgl_kernel.utils"] = utils
        sk.utils = utils
        log("sgl_kernel.utils.is_arch_support_pdl -> torch capability >= 9")


def tool_close_tokens():
    """Detokenizer start-up: ``tool_close_tokens`` imports function_call_parser, which imports xgrammar (not
    carried) at module level, even with no tool parser and no tokenizer. With either of them None the function
    returns {} anyway: short-circuit before the import."""
    if skipped("toolclose"):
        return

    @when_imported("sglang.srt.parser.response_template")
    def _rt(m):
        orig = m.tool_close_tokens

        def tool_close_tokens(tool_call_parser, tokenizer):
            if tool_call_parser is None or tokenizer is None:
                return {}
            return orig(tool_call_parser, tokenizer)

        m.tool_close_tokens = tool_close_tokens
        log("response_template.tool_close_tokens -> {} without parser/tokenizer (no xgrammar import)")


def flashinfer():
    """Releases before 0.5.23 import flashinfer at module load on CUDA: an import-time stand-in, with
    ``SGLANG_STANDINS_FLASHINFER=1`` (run_e2e.sh sets it for those releases)."""
    if os.environ.get("SGLANG_STANDINS_FLASHINFER") == "1":
        tolerate_missing_sgl_kernel_ops()
        stub_missing_packages()
        log("flashinfer import stand-in installed")
