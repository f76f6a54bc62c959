#!/usr/bin/env python3
"""The whole post-verify commit call as SGLang makes it, plugin on vs SGLang's own, in one process (CUDA).

``HybridLinearAttnBackend.update_mamba_state_after_mtp_verify`` on a real pool and backend (bf16 conv windows,
fp32 SSM; models, D and batches as given), accept only and accept + track. Per configuration the providers
alternate over several rounds on the same pool: ``sglang`` (the plugin's ``commit`` patch reverted), ``ours``
(applied) and, accept only, ``zero_copy`` (applied, the pool's ``PoolState.zero_copy`` set and ``req_pool_indices`` passed:
the conv windows only, read from the requests' scratch rows; docs/zero-copy.md 2.4; checked first to leave the
SSM slots untouched and write the conv ones). Per call: CUDA events around the Python call (device + host, as the
decode loop pays it) and the host time of the call alone (``perf_counter``, no sync inside the loop). Prints a
table; the rows go to ``<out>/latest/commit_call-<label>-<gpu>.csv`` and ``<out>/history.csv``. Then the bytes
each commit moves per model and batch (``--bytes-batches``), from the pool's tensors: SSM and conv, read + write,
for SGLang, the plugin and zero-copy, and zero-copy's stage-in per request per extend; into
``<out>/latest/commit_bytes-<label>-<gpu>.csv`` and the history. Run it once per plugin build to compare builds
(e.g. the host overhead of a change): ``--label before`` / ``--label after``. List options take commas or spaces.

    python3 -P benchmarks/bench_commit_call.py --label after      # the plugin build under test installed
    python3 -P benchmarks/bench_commit_call.py --label zc --models qwen3.5-0.8b qwen3-next-80b \
        --batches 1 16 64 128                                      # the zero-copy sweep (docs/zero-copy.md 10)
    TRITON_INTERPRET=1 python benchmarks/bench_commit_call.py --cpu --batches 1 2 --draft-tokens 2 \
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
    """An older plugin build under test may predate the test tooling the helpers import (``installed``, the
    ``sglang_mamba_dedup.offline`` package of shapes and SGLang's pool builder): then this checkout's are
    loaded. They only describe models and call SGLang's constructors; the patches measured stay the
    installed build's."""
    import importlib.util

    import sglang_mamba_dedup as pkg

    if importlib.util.find_spec("sglang_mamba_dedup.installed") is None:  # builds before 2026-12-04's rename
        old = "patch_state" if importlib.util.find_spec("sglang_mamba_dedup.patch_state") else "patching"
        sys.modules["sglang_mamba_dedup.installed"] = importlib.import_module(f"sglang_mamba_dedup.{old}")
        pkg.installed = sys.modules["sglang_mamba_dedup.installed"]  # type: ignore[attr-defined]
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


def _entry_bytes(cache) -> tuple[int, int, int]:
    """The pool's state layers and the bytes of one slot's entry per layer, from its tensors: the SSM state
    (``temporal``) and the conv windows (every conv tensor, the logical [dim, K-1] window)."""
    ssm = cache.temporal[0, 0].numel() * cache.temporal.element_size()
    conv = sum(c[0, 0].numel() * c.element_size() for c in cache.conv)
    return cache.temporal.shape[0], ssm, conv


def _moved_bytes(entry, steps, track_steps, draft_tokens: int, ssm: bool = True) -> int:
    """Bytes one commit reads and writes: every valid row (step in [0, D)) copies, in each state layer, one
    SSM entry (``ssm``; zero-copy moves none) and one conv window."""
    layers, ssm_bytes, conv_bytes = entry
    rows = int(((steps >= 0) & (steps < draft_tokens)).sum())
    if track_steps is not None:
        rows += int(((track_steps >= 0) & (track_steps < draft_tokens)).sum())
    return 2 * rows * layers * (ssm_bytes * ssm + conv_bytes)


def _bytes_rows(label: str, model: str, entry, batches: list[int]) -> list[dict]:
    """Per batch, the bytes one accept-only commit moves (every row valid, read + write): SSM and conv, for
    SGLang, the plugin (the same copies, one launch) and zero-copy (no SSM bytes: the state stays in the
    scratch), and zero-copy's stage-in (``temporal[slot]`` into scratch column 0, every layer) per request per
    extend. Bytes of the index tensors and ``accepted`` (4 B a row) left out."""
    layers, ssm, conv = entry
    out = []
    for bs in batches:
        n = 2 * layers * bs
        out.append(
            dict(
                label=label,
                model=model,
                batch=bs,
                layers=layers,
                ssm_entry=ssm,
                conv_entry=conv,
                sglang_ssm=n * ssm,
                sglang_conv=n * conv,
                ours_ssm=n * ssm,
                ours_conv=n * conv,
                zero_copy_ssm=0,
                zero_copy_conv=n * conv,
                stage_in_per_req=2 * layers * ssm,
            )
        )
    return out


def _items(values: list[str]) -> list[str]:
    """``["1,16", "64"]`` -> ``["1", "16", "64"]``: a list option's commas and spaces alike."""
    return [v for value in values for v in value.split(",") if v]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT") or str(_timing.RESULTS), help="results folder")
    ap.add_argument("--label", default="current", help="names the build or run (rows and file name)")
    ap.add_argument(
        "--models", nargs="+", default=["qwen3.5-0.8b"], help="sglang_mamba_dedup.offline.shapes.MODELS keys"
    )
    ap.add_argument("--batches", nargs="+", default=["1,64"])
    ap.add_argument("--draft-tokens", nargs="+", default=["4"], help="D (speculative draft tokens)")
    ap.add_argument("--bytes-batches", nargs="+", default=["1,16,64,128"], help="batches of the bytes table")
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
    from sglang_mamba_dedup import installed, report
    from sglang_mamba_dedup.offline.sglang_pool import build_pool
    from sglang_mamba_dedup.offline.shapes import MODELS
    from tests.support import integration as iu

    def toggle(on: bool) -> None:
        if on:
            assert installed.apply(["commit"])["commit"] is None
        else:
            try:
                installed.revert(["commit"], force=True)
            except TypeError:  # builds without force
                installed.revert(["commit"])

    os.environ["SGLANG_MAMBA_DEDUP"] = "1"
    installed.apply(["dedup_layout", "commit"])
    rec = _timing.Recorder(args.out, "commit_call", label=args.label, device=device)
    bandwidth = _copy_bandwidth(torch, device)
    size = "1 GiB" if device == "cuda" else "1 MiB"
    print(f"device copy bandwidth ({size} copy_, read + write): {bandwidth / 1e9:.0f} GB/s", flush=True)
    bytes_batches = [int(b) for b in _items(args.bytes_batches)]
    rows, byte_rows = [], []
    with iu.cpu_stock_paths(device):
        for model in _items(args.models):
            cp = iu.make_cache_params(**MODELS[model].state_dims(), conv_dtype=torch.bfloat16)
            pool = build_pool(cp, size=1, mamba_size=4, draft_tokens=2, topk=1, device=device)  # its tensors' sizes
            byte_rows += _bytes_rows(args.label, model, _entry_bytes(pool.mamba_pool.mamba_cache), bytes_batches)
            del pool
            for D in [int(d) for d in _items(args.draft_tokens)]:
                for bs in [int(b) for b in _items(args.batches)]:
                    rows.extend(_measure(args, device, torch, iu, report, toggle, cp, model, D, bs, bandwidth))
                    if device == "cuda":
                        torch.cuda.empty_cache()
    path = rec.write(rows)
    bytes_path = _timing.Recorder(args.out, "commit_bytes", label=args.label, device=device).write(byte_rows)
    print(
        "\n| build | model | D | batch | track | SGLang us (host) | plugin us (host) | zero-copy us (host) "
        "| speed-up | plugin %BW | zero-copy %BW | direct launches (plugin / zero-copy) |"
        "\n|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    for r in rows:
        zc = f"{r['zero_copy_us']} ({r['zero_copy_host_us']})" if "zero_copy_us" in r else "-"
        zc_bw = f"{r['zero_copy_bw_pct']}%" if "zero_copy_us" in r else "-"
        print(
            f"| {r['label']} | {r['model']} | {r['D']} | {r['batch']} | {'yes' if r['track'] else 'no'} "
            f"| {r['sglang_us']} ({r['sglang_host_us']}) | {r['ours_us']} ({r['ours_host_us']}) | {zc} "
            f"| {r['speedup']}x | {r['ours_bw_pct']}% | {zc_bw} "
            f"| {r['ours_direct_pct']}% / {r.get('zero_copy_direct_pct', '-')}{'%' if 'zero_copy_us' in r else ''} |"
        )
    print(
        "\nBytes per accept-only commit, read + write, MB (SSM / conv); zero-copy's stage-in once per request per "
        "extend\n\n| model | batch | SGLang | plugin | zero-copy | stage-in per request |\n|---|---|---|---|---|---|"
    )
    for r in byte_rows:
        mb = {k: f"{v / 1e6:.2f}" for k, v in r.items() if k.endswith(("_ssm", "_conv", "_per_req"))}
        print(
            f"| {r['model']} | {r['batch']} | {mb['sglang_ssm']} / {mb['sglang_conv']} | {mb['ours_ssm']} / "
            f"{mb['ours_conv']} | {mb['zero_copy_ssm']} / {mb['zero_copy_conv']} | {mb['stage_in_per_req']} |"
        )
    print(f"\nwrote {path}, {bytes_path} and {rec.out / 'history.csv'}")
    return 0


def _copy_bandwidth(torch, device: str) -> float:
    """The device's copy bandwidth in bytes/s (read + write), timed here: a 1 GiB ``copy_``, median of 20
    after 5 (1 MiB on the CPU)."""
    src = torch.empty(1 << (30 if device == "cuda" else 20), dtype=torch.uint8, device=device)
    return _timing.copy_bandwidth(src, warmup=5, rounds=1, calls=20, device=device)


def _measure(args, device, torch, iu, report, toggle, cp, model, D, bs, bandwidth):
    from sglang_mamba_dedup.offline.sglang_pool import build_pool
    from sglang_mamba_dedup.patches.zero_copy.bookkeeping import ZeroCopy
    from sglang_mamba_dedup.state import STATE, pool_state

    pool = build_pool(cp, size=bs, mamba_size=3 * bs + 1, draft_tokens=D, topk=1, device=device)
    backend = iu.build_backend(pool, device=device, topk=1, draft_tokens=D)
    slots = torch.arange(1, bs + 1, dtype=torch.int32, device=device)
    iu.set_forward_metadata(backend, slots, D)
    g = torch.Generator(device=device).manual_seed(bs * 10 + D)
    steps = torch.randint(0, D, (bs,), device=device, dtype=torch.int64, generator=g)
    track_idx = torch.arange(bs + 1, 2 * bs + 1, device=device, dtype=torch.int64)
    track_steps = torch.randint(-1, D, (bs,), device=device, dtype=torch.int64, generator=g)
    rpi = torch.randperm(bs, device=device, generator=g) + 1  # req_pool_indices: the scratch rows (row 0: padding)
    mamba = pool.mamba_pool
    zc = ZeroCopy(mamba)
    assert zc.accepted.shape[0] > bs, "a scratch row per request row, plus row 0"
    entry = _entry_bytes(mamba.mamba_cache)
    out = []
    for track in (False, True):
        call_args = (steps, track_idx if track else None, track_steps if track else None, None)

        def call():
            backend.update_mamba_state_after_mtp_verify(*call_args)

        def zc_call():
            backend.update_mamba_state_after_mtp_verify(*call_args, req_pool_indices=rpi)

        fns = {"sglang": call, "ours": call} if track else {"sglang": call, "ours": call, "zero_copy": zc_call}

        start: dict = {}  # provider -> STATE.launches when its timed calls began
        paths: dict = {}  # provider -> [direct, triton] launches of our kernel over its timed calls

        def enter(name):  # this provider's commit in place, its counters reset, 10 warm-up calls
            toggle(name != "sglang")
            pool_state(mamba).zero_copy = zc if name == "zero_copy" else None
            # a route binds its committer once, at its first commit: the next call builds a fresh one for this provider
            vars(backend).pop("_smd_route", None)
            report.clear_events()
            for _ in range(10):
                fns[name]()
            start[name] = dict(STATE.launches)

        def leave(name):
            ours_calls, zc_calls = (report.events().get(k, 0) for k in ("ours_commit_calls", "zc_commit_calls"))
            assert (ours_calls > 0) == (name != "sglang") and (zc_calls > 0) == (name == "zero_copy"), (name, zc_calls)
            counts = paths.setdefault(name, [0, 0])
            for i, path in enumerate(("direct", "triton")):
                counts[i] += STATE.launches[path] - start[name][path]

        if not track:
            enter("zero_copy")
            _check_zero_copy(torch, report, mamba.mamba_cache, slots, rpi, steps, zc_call)
        res = _timing.time_calls(
            fns,
            warmup=0,
            rounds=args.rounds,
            calls=args.calls,
            idle=False,
            host=True,
            on_enter=enter,
            on_leave=leave,
            device=device,
        )
        pool_state(mamba).zero_copy = None
        row = {"label": args.label, "model": model, "D": D, "batch": bs, "track": track}
        for name in (n for n in ("ours", "sglang", "zero_copy") if n in res):  # the CSV's column order
            row[f"{name}_us"] = round(res[name].median, 2)
            row[f"{name}_host_us"] = round(res[name].host_median, 2)
            if name != "sglang":  # the share of the timed calls that took the direct launch (the host path's floor)
                direct, triton = paths[name]
                row[f"{name}_direct_pct"] = round(100 * direct / max(direct + triton, 1), 1)
        row["speedup"] = round(row["sglang_us"] / row["ours_us"], 3)
        nbytes = _moved_bytes(entry, steps, track_steps if track else None, D)
        row["bytes"] = nbytes
        row["ours_bw_pct"] = round(100 * nbytes / (row["ours_us"] * 1e-6) / bandwidth, 1)
        if not track:
            row["zero_copy_bytes"] = _moved_bytes(entry, steps, None, D, ssm=False)
            row["zero_copy_bw_pct"] = round(100 * row["zero_copy_bytes"] / (row["zero_copy_us"] * 1e-6) / bandwidth, 1)
        out.append(row)
        print(row, flush=True)
    return out  # pool and backend freed with this frame


def _check_zero_copy(torch, report, cache, slots, rows, steps, call) -> None:
    """One zero-copy call takes the zero-copy route (``zc_commit_calls`` grows), leaves the requests' SSM slots
    of ``temporal`` as they were and writes their conv slots, each from its request's scratch row at the accepted
    step (``conv[:, slot] == window[:, row, step]``); the slots are poisoned first."""
    idx = slots.long()
    for t in (cache.temporal, *cache.conv):
        t[:, idx] = -7
    for w in cache.intermediate_conv_window:
        w.copy_(torch.rand(w.shape, dtype=torch.float32, device=w.device))  # no -7 in the scratch
    before = report.events().get("zc_commit_calls", 0)
    call()
    assert report.events().get("zc_commit_calls", 0) == before + 1, "the zero-copy route was not taken"
    assert bool((cache.temporal[:, idx] == -7).all()), "the zero-copy commit wrote SSM slots of temporal"
    for c, w in zip(cache.conv, cache.intermediate_conv_window):
        assert torch.equal(c[:, idx], w[:, rows, steps]), "the conv slots not written from the requests' scratch rows"
    print(f"zero-copy check: SSM slots untouched, conv slots written ({slots.shape[0]} requests)", flush=True)


if __name__ == "__main__":
    sys.exit(main())
