"""Test-environment fix, installed into the venv as a .pth hook by .ci/setup-env.sh (never shipped).

PyPI's torchvision is a CUDA build; beside the CPU torch of our CI venv its compiled ops library does not
load and `import torchvision` dies with "operator torchvision::nms does not exist". SGLang imports
torchvision at module load. Before torchvision is first imported we try to load its library ourselves; only
when that fails do we declare the two operator schemas its Python code registers fake kernels for.
"""

import importlib.abc
import importlib.util
import sys


class _TorchvisionSchemaFix(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torchvision":
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec("torchvision")
            if spec is None or not spec.submodule_search_locations:
                return None
            import glob
            import os

            import torch

            libs = glob.glob(os.path.join(list(spec.submodule_search_locations)[0], "_C*.so"))
            try:
                for lib in libs:
                    torch.ops.load_library(lib)
                loaded = bool(libs)
            except Exception:
                loaded = False
            if not loaded:
                lib = torch.library.Library("torchvision", "DEF")
                lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
                lib.define("qnms(Tensor qdets, Tensor scores, float iou_threshold) -> Tensor")
                _KEEP.append(lib)
        except Exception:
            pass
        return None  # let the normal finders import torchvision


_KEEP = []
sys.meta_path.insert(0, _TorchvisionSchemaFix())
