#!/usr/bin/env python3
"""The whole post-verify commit call as SGLang makes it, plugin on vs SGLang's own, in one process (CUDA).

``HybridLinearAttnBackend.update_mamba_state_after_mtp_verify`` on a real pool and backend (Qwen3.5-0.8B
shapes, bf16 conv windows, fp32 SSM, D=4), accept only and accept + track, at the given batch sizes. Per
configuration the two providers alternate over several rounds (the plugin's ``commit`` patch applied /
reverted between rounds on the same pool); per call: CUDA events around the Python call (device + host, as
the decode loop pays it) and the host time of the call alone (``perf_counter``, no sync inside the loop).
Prints a table, writes ``commit_call-<label>.csv``. Run it once per plugin build to compare builds (e.g. the
host overhead of a change): ``--label before`` / ``--label after``.

    python3 -P benchmarks/bench_commit_call.py --out "$OUT" --label after      # the plugin installed
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.support


def _tooling_from_checkout() -> None:
    """An older plugin build under test may predate the shape table and SGLang pool builder that the test
    helpers import (``sglang_mamba_dedup.testing.shapes`` / ``.sglang_pool``): then this checkout's are loaded. They
    only describe models and call SGLang's constructors; the patches measured stay the installed build's."""
    import importlib.util

    import sglang_mamba_dedup as pkg

    if importlib.util.find_spec("sglang_mamba_dedup.patch_state") is None:  # before the rename of patching.py
        sys.modules["sglang_mamba_dedup.patch_state"] = importlib.import_module("sglang_mamba_dedup.patching")
        pkg.patch_state = sys.modules["sglang_mamba_dedup.patch_state"]  # type: ignore[attr-defined]
    if importlib.util.find_spec("sglang_mamba_dedup.testing.sglang_pool") is not None:
        return
    for name in ("shapes", "sglang_pool"):  # sglang_pool imports shapes
        spec = importlib.util.spec_from_file_location(
            f"sglang_mamba_dedup.{name}", ROOT / "sglang_mamba_dedup" / f"{name}.py"
        )
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
        setattr(pkg, name, mod)


def _copy_bandwidth(torch) -> float:
    """The device's copy bandwidth in bytes/s (read + write), timed here: a 1 GiB ``copy_``, median of 20."""
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    times = []
    for _ in range(25):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        dst.copy_(src)
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) * 1e-3)
    del src, dst
    return 2 * (1 << 30) / statistics.median(times[5:])


def _moved_bytes(shape, steps, track_steps, draft_tokens: int) -> int:
    """Bytes one commit reads and writes: every valid row (step in [0, D)) copies, in each GDN layer, one
    fp32 SSM entry and one bf16 [conv_dim, K-1] window."""
    per_row = 4 * shape.value_heads * shape.head_dim * shape.head_dim + 2 * shape.conv_dim * (shape.conv_kernel - 1)
    rows = int(((steps >= 0) & (steps < draft_tokens)).sum())
    if track_steps is not None:
        rows += int(((track_steps >= 0) & (track_steps < draft_tokens)).sum())
    return 2 * rows * shape.gdn_layers * per_row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--label", default="current")
    ap.add_argument("--models", default="qwen3.5-0.8b", help="comma list of sglang_mamba_dedup.testing.shapes.MODELS keys")
    ap.add_argument("--batches", default="1,64")
    ap.add_argument("--draft-tokens", default="4", help="comma list of D (speculative draft tokens)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=100)
    args = ap.parse_args(argv)

    import torch

    _tooling_from_checkout()
    from sglang_mamba_dedup import patch_state, report
    from sglang_mamba_dedup.testing.sglang_pool import build_pool
    from sglang_mamba_dedup.testing.shapes import MODELS
    from tests.support import integration as iu

    def toggle(on: bool) -> None:
        if on:
            assert patch_state.apply(["commit"])["commit"] is None
        else:
            try:
                patch_state.revert(["commit"], force=True)
            except TypeError:  # builds without force
                patch_state.revert(["commit"])

    os.environ["SGLANG_MAMBA_DEDUP"] = "1"
    patch_state.apply(["dedup_layout", "commit"])
    bandwidth = _copy_bandwidth(torch)
    print(f"device copy bandwidth (1 GiB copy_, read + write): {bandwidth / 1e9:.0f} GB/s", flush=True)
    rows = []
    for model in args.models.split(","):
        shape = MODELS[model]
        cp = iu.make_cache_params(**shape.state_dims(), conv_dtype=torch.bfloat16)
        for D in [int(d) for d in args.draft_tokens.split(",")]:
            for bs in [int(b) for b in args.batches.split(",")]:
                rows.extend(_measure(args, torch, iu, report, toggle, build_pool, cp, shape, model, D, bs, bandwidth))
                torch.cuda.empty_cache()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / f"commit_call-{args.label}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print(
        "\n| build | model | D | batch | track | SGLang us (host) | plugin us (host) | speed-up | plugin %BW |"
        "\n|---|---|---|---|---|---|---|---|---|"
    )
    for r in rows:
        print(
            f"| {r['label']} | {r['model']} | {r['D']} | {r['batch']} | {'yes' if r['track'] else 'no'} "
            f"| {r['sglang_us']} ({r['sglang_host_us']}) | {r['ours_us']} ({r['ours_host_us']}) | {r['speedup']}x "
            f"| {r['ours_bw_pct']}% |"
        )
    return 0


def _measure(args, torch, iu, report, toggle, build_pool, cp, shape, model, D, bs, bandwidth):
    pool = build_pool(cp, size=bs, mamba_size=3 * bs + 1, draft_tokens=D, topk=1, device="cuda")
    backend = iu.build_backend(pool, device="cuda", topk=1, draft_tokens=D)
    slots = torch.arange(1, bs + 1, dtype=torch.int32, device="cuda")
    iu.set_forward_metadata(backend, slots, D)
    g = torch.Generator(device="cuda").manual_seed(bs * 10 + D)
    steps = torch.randint(0, D, (bs,), device="cuda", dtype=torch.int64, generator=g)
    track_idx = torch.arange(bs + 1, 2 * bs + 1, device="cuda", dtype=torch.int64)
    track_steps = torch.randint(-1, D, (bs,), device="cuda", dtype=torch.int64, generator=g)
    out = []
    for track in (False, True):
        call = (steps, track_idx if track else None, track_steps if track else None, None)
        res: dict = {"ours": ([], []), "sglang": ([], [])}
        for _ in range(args.rounds):
            for name in ("sglang", "ours"):
                toggle(name == "ours")
                report.reset()
                for _ in range(10):
                    backend.update_mamba_state_after_mtp_verify(*call)
                torch.cuda.synchronize()
                ev = [
                    (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                    for _ in range(args.calls)
                ]
                host = []
                for a, b in ev:
                    a.record()
                    t0 = time.perf_counter()
                    backend.update_mamba_state_after_mtp_verify(*call)
                    host.append((time.perf_counter() - t0) * 1e6)
                    b.record()
                torch.cuda.synchronize()
                res[name][0].extend(a.elapsed_time(b) * 1000 for a, b in ev)
                res[name][1].extend(host)
                ours_calls = report.events().get("ours_commit_calls", 0)
                assert (ours_calls > 0) == (name == "ours"), (name, ours_calls)
        row = {"label": args.label, "model": model, "D": D, "batch": bs, "track": track}
        for name, (whole, host) in res.items():
            row[f"{name}_us"] = round(statistics.median(whole), 2)
            row[f"{name}_host_us"] = round(statistics.median(host), 2)
        row["speedup"] = round(row["sglang_us"] / row["ours_us"], 3)
        nbytes = _moved_bytes(shape, steps, track_steps if track else None, D)
        row["bytes"] = nbytes
        row["ours_bw_pct"] = round(100 * nbytes / (row["ours_us"] * 1e-6) / bandwidth, 1)
        out.append(row)
        print(row, flush=True)
    del pool, backend
    return out


if __name__ == "__main__":
    sys.exit(main())
