"""Build SGLang's own target and MTP draft model classes for a checkpoint on the CPU and load its weights
through their ``load_weights`` (run as ``python -m tests.support.sglang_model_load CKPT``, one JSON line out).

SGLang 0.5.23's process context is global (``runtime_context.publish``, a one-rank gloo group), hence a
subprocess per check. Every parameter is poisoned with NaN before loading, so a parameter that no checkpoint
tensor reached stays NaN; the loaders' "not found" warnings are collected (names the checkpoint has and the
model does not).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys


def main(ckpt: str) -> dict:
    import torch
    from safetensors.torch import load_file
    from sglang.srt import runtime_context as rc
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.distributed import parallel_state as ps
    from sglang.srt.model_loader.utils import get_model_architecture
    from sglang.srt.server_args import ServerArgs

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rc.publish(ServerArgs(model_path="dummy", device="cpu"), role="scheduler", ranks=rc.SpawnRanks(world_rank=0))
    ps.init_distributed_environment(
        world_size=1, rank=0, local_rank=0, backend="gloo", distributed_init_method=f"tcp://127.0.0.1:{port}"
    )
    ps.initialize_model_parallel()

    warnings: list[str] = []

    class _Collect(logging.Handler):
        def emit(self, record):
            if record.levelno >= logging.WARNING:
                warnings.append(record.getMessage())

    logging.getLogger().addHandler(_Collect())
    weights = load_file(os.path.join(ckpt, "model.safetensors"))
    out: dict = {"checkpoint": sorted(weights)}
    for role, draft in (("target", False), ("draft", True)):
        mc = ModelConfig(ckpt, is_draft_model=draft)
        cls, arch = get_model_architecture(mc)
        torch.set_default_dtype(torch.bfloat16)
        model = cls(config=mc.hf_config)
        params = dict(model.named_parameters())
        for p in params.values():
            if p.dtype.is_floating_point:
                p.data.fill_(float("nan"))
        before = len(warnings)
        model.load_weights(iter(weights.items()))
        cp = getattr(mc.hf_config, "mamba2_cache_params", None) if not draft else None
        out[role] = {
            "architecture": arch,
            "class": cls.__name__,
            "parameters": sorted(params),
            "not_loaded": sorted(n for n, p in params.items() if p.dtype.is_floating_point and p.isnan().any()),
            "warnings": [w for w in warnings[before:] if "not found" in w],
            "cache": None
            if cp is None
            else {
                "conv": [list(c) for c in cp.shape.conv],
                "temporal": list(cp.shape.temporal),
                "layers": list(cp.layers),
                "ssm_dtype": str(cp.dtype.temporal),
            },
        }
    return out


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(sys.argv[1])))
