#!/usr/bin/env python3
"""Stock vs plugin speculative-decode simulation on a CUDA GPU, for whichever SGLang release is installed.

The release proof of the README's matrix (GPU column): the simulation of ``tests/support/integration.simulate``
(real ``HybridReqToTokenPool``/``MambaPool``, SGLang's own Triton ``causal_conv1d_update`` writing the draft
windows, the real ``HybridLinearAttnBackend.update_mamba_state_after_mtp_verify``) runs once with the plugin
off and once on, bf16 conv windows (SGLang's default), and must give bit-identical per-step conv outputs,
verify windows and final conv + SSM states. It also checks that the plugin really ran: the pool's layout is
ours (back-port releases) or upstream's verified view (take-over releases), and every commit went through our
kernel. One JSON line per config on stdout and ``release-sim-<release>.json`` in ``--out``; exit 1 on any
difference or when the plugin did not engage.

    python tools/gpu-engine/proofs/release_sim_gpu.py --out "$OUT"   # on the GPU, one release per process
                                                                  # (tools/gpu-engine/run_release_sims.sh)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _checkout, also under python -P
import _checkout  # noqa: E402

sys.path.insert(0, str(_checkout.GPU_ENGINE))  # the standins package


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--steps", type=int, default=48)
    args = ap.parse_args(argv)

    import torch
    from standins import imports

    imports.tolerate_missing_sgl_kernel_ops()
    imports.stub_missing_packages()
    _checkout.on_path()
    from sglang_mamba_dedup.offline.shapes import QWEN35_08B
    from tests.support import integration as iu

    if not torch.cuda.is_available():
        print("release_sim_gpu: no CUDA device", file=sys.stderr)
        return 2
    iu.ensure_commit_kernel()
    bf16 = torch.bfloat16
    configs = {
        "D4-K4-bs8": iu.SimConfig(device="cuda", conv_dtype=bf16, steps=args.steps, batch=8),
        "D3-K3-bs5": iu.SimConfig(
            device="cuda", conv_dtype=bf16, draft_tokens=3, conv_kernel=3, steps=args.steps, batch=5, seed=7
        ),
        "Qwen3.5-0.8B-D4-bs8": iu.SimConfig(
            **QWEN35_08B.state_dims(),
            device="cuda",
            conv_dtype=bf16,
            batch=8,
            steps=24,
            seed=35,
        ),
    }
    expected_layout = "ours" if iu.BACKPORT else "upstream"
    rows, ok = [], True
    for name, cfg in configs.items():
        t0 = time.time()
        with iu.plugin(False):
            stock = iu.simulate(cfg)
        with iu.plugin(True):
            ours = iu.simulate(cfg)
        same = (stock.outputs_md5, stock.windows_md5, stock.final_md5) == (
            ours.outputs_md5,
            ours.windows_md5,
            ours.final_md5,
        )
        engaged = ours.layout == expected_layout and ours.events.get("ours_commit_calls") == cfg.steps
        lens = [n for step in ours.accept_lens for n in step]
        row = {
            "sglang": iu.SGLANG_VERSION,
            "config": name,
            "steps": cfg.steps,
            "device": torch.cuda.get_device_name(),
            "layout": ours.layout,
            "ours_commit_calls": ours.events.get("ours_commit_calls"),
            "stock_layout": stock.layout or "stock",
            "partial_accepts": sum(0 < n < cfg.draft_tokens for n in lens),
            "stock_md5": [stock.outputs_md5, stock.windows_md5, stock.final_md5],
            "plugin_md5": [ours.outputs_md5, ours.windows_md5, ours.final_md5],
            "bit_identical": same,
            "plugin_engaged": engaged,
            "seconds": round(time.time() - t0, 1),
        }
        ok &= same and engaged
        rows.append(row)
        print(json.dumps(row), flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / f"release-sim-{iu.SGLANG_VERSION}.json").write_text(json.dumps(rows, indent=1))
    print(f"release_sim_gpu: SGLang {iu.SGLANG_VERSION}: {'PASS' if ok else 'FAIL'}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
