#!/usr/bin/env python3
"""The whole post-verify commit call as SGLang makes it, plugin on vs SGLang's own, in one process (CUDA).

``HybridLinearAttnBackend.update_mamba_state_after_mtp_verify`` on a real pool and backend (bf16 conv windows,
fp32 SSM; models, D and batches as given), accept only and accept + track. Per configuration the two providers
alternate over several rounds (the plugin's ``commit`` patch applied / reverted between rounds on the same
pool); per call: CUDA events around the Python call (device + host, as the decode loop pays it) and the host
time of the call alone (``perf_counter``, no sync inside the loop). Prints a table; the rows go to
``<out>/latest/commit_call-<label>-<gpu>.csv`` and ``<out>/history.csv``. Run it once per plugin build to
compare builds (e.g. the host overhead of a change): ``--label before`` / ``--label after``.

    python3 -P benchmarks/bench_commit_call.py --label after      # the plugin build under test installed
    TRITON_INTERPRET=1 python benchmarks/bench_commit_call.py --cpu --batches 1 --draft-tokens 2 \
        --rounds 1 --calls 2 --out /tmp/dry                        # dry run of the script on the CPU
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _timing, also under python -P
import _timing  # noqa: E402

ROOT = _timing.ROOT


def _tooling_from_checkout() -> None:
    """An older plugin build under test may predate the test tooling the helpers import (``patch_state``, the
    ``sglang_mamba_dedup.offline`` package of shapes and SGLang's pool builder): then this checkout's are
    loaded. They only describe models and call SGLang's constructors; the patches measured stay the
    installed build's."""
    import importlib.util

    import sglang_mamba_dedup as pkg

    if importlib.util.find_spec("sglang_mamba_dedup.patch_state") is None:  # before the rename of patching.py
        sys.modules["sglang_mamba_dedup.patch_state"] = importlib.import_module("sglang_mamba_dedup.patching")
        pkg.patch_state = sys.modules["sglang_mamba_dedup.patch_state"]  # type: ignore[attr-defined]
    from sglang_mamba_dedup import report

    if not hasattr(report, "clear_events"):  # before the state object: the events' reset had another name
        report.clear_events = report.reset  # type: ignore[attr-defined]
    if importlib.util.find_spec("sglang_mamba_dedup.offline") is not None:
        return
    folder = ROOT / "sglang_mamba_dedup" / "offline"  # its submodules load from the checkout's folder
    spec = importlib.util.spec_from_file_location(
        "sglang_mamba_dedup.offline", folder / "__init__.py", submodule_search_locations=[str(folder)]
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    pkg.offline = mod  # type: ignore[attr-defined]


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
    ap.add_argument("--out", default=os.environ.get("OUT") or str(_timing.RESULTS), help="results folder")
    ap.add_argument("--label", default="current", help="names the build or run (rows and file name)")
    ap.add_argument(
        "--models", default="qwen3.5-0.8b", help="comma list of sglang_mamba_dedup.offline.shapes.MODELS keys"
    )
    ap.add_argument("--batches", default="1,64")
    ap.add_argument("--draft-tokens", default="4", help="comma list of D (speculative draft tokens)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=100)
    ap.add_argument("--cpu", action="store_true", help="dry run on the CPU (TRITON_INTERPRET=1, host clock)")
    args = ap.parse_args(argv)
    device = "cpu" if args.cpu else "cuda"
    if args.cpu:
        os.environ.setdefault("TRITON_INTERPRET", "1")
        os.environ.setdefault("SGLANG_MAMBA_DEDUP_ALLOW_CPU", "1")

    import torch

    _timing.checkout_on_path()
    _tooling_from_checkout()
    from sglang_mamba_dedup import patch_state, report
    from sglang_mamba_dedup.offline.shapes import MODELS
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
    rec = _timing.Recorder(args.out, "commit_call", label=args.label, device=device)
    bandwidth = _copy_bandwidth(torch, device)
    size = "1 GiB" if device == "cuda" else "1 MiB"
    print(f"device copy bandwidth ({size} copy_, read + write): {bandwidth / 1e9:.0f} GB/s", flush=True)
    rows = []
    with iu.cpu_stock_paths(device):
        for model in args.models.split(","):
            shape = MODELS[model]
            cp = iu.make_cache_params(**shape.state_dims(), conv_dtype=torch.bfloat16)
            for D in [int(d) for d in args.draft_tokens.split(",")]:
                for bs in [int(b) for b in args.batches.split(",")]:
                    rows.extend(_measure(args, device, torch, iu, report, toggle, cp, shape, model, D, bs, bandwidth))
                    if device == "cuda":
                        torch.cuda.empty_cache()
    path = rec.write(rows)
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
    print(f"\nwrote {path} and {rec.out / 'history.csv'}")
    return 0


def _copy_bandwidth(torch, device: str) -> float:
    """The device's copy bandwidth in bytes/s (read + write), timed here: a 1 GiB ``copy_``, median of 20
    after 5 (1 MiB on the CPU)."""
    src = torch.empty(1 << (30 if device == "cuda" else 20), dtype=torch.uint8, device=device)
    return _timing.copy_bandwidth(src, warmup=5, rounds=1, calls=20, device=device)


def _measure(args, device, torch, iu, report, toggle, cp, shape, model, D, bs, bandwidth):
    from sglang_mamba_dedup.offline.sglang_pool import build_pool

    pool = build_pool(cp, size=bs, mamba_size=3 * bs + 1, draft_tokens=D, topk=1, device=device)
    backend = iu.build_backend(pool, device=device, topk=1, draft_tokens=D)
    slots = torch.arange(1, bs + 1, dtype=torch.int32, device=device)
    iu.set_forward_metadata(backend, slots, D)
    g = torch.Generator(device=device).manual_seed(bs * 10 + D)
    steps = torch.randint(0, D, (bs,), device=device, dtype=torch.int64, generator=g)
    track_idx = torch.arange(bs + 1, 2 * bs + 1, device=device, dtype=torch.int64)
    track_steps = torch.randint(-1, D, (bs,), device=device, dtype=torch.int64, generator=g)
    out = []
    for track in (False, True):
        call_args = (steps, track_idx if track else None, track_steps if track else None, None)

        def call():
            backend.update_mamba_state_after_mtp_verify(*call_args)

        def enter(name):  # this provider's commit in place, its counters reset, 10 warm-up calls
            toggle(name == "ours")
            report.clear_events()
            for _ in range(10):
                call()

        def leave(name):
            ours_calls = report.events().get("ours_commit_calls", 0)
            assert (ours_calls > 0) == (name == "ours"), (name, ours_calls)

        res = _timing.time_calls(
            {"sglang": call, "ours": call},
            warmup=0,
            rounds=args.rounds,
            calls=args.calls,
            idle=False,
            host=True,
            on_enter=enter,
            on_leave=leave,
            device=device,
        )
        row = {"label": args.label, "model": model, "D": D, "batch": bs, "track": track}
        for name, t in (("ours", res["ours"]), ("sglang", res["sglang"])):  # the CSV's column order
            row[f"{name}_us"] = round(t.median, 2)
            row[f"{name}_host_us"] = round(t.host_median, 2)
        row["speedup"] = round(row["sglang_us"] / row["ours_us"], 3)
        nbytes = _moved_bytes(shape, steps, track_steps if track else None, D)
        row["bytes"] = nbytes
        row["ours_bw_pct"] = round(100 * nbytes / (row["ours_us"] * 1e-6) / bandwidth, 1)
        out.append(row)
        print(row, flush=True)
    return out  # pool and backend freed with this frame


if __name__ == "__main__":
    sys.exit(main())
