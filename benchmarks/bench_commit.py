"""Post-verify commit benchmark: ours vs SGLang 0.5.23 vs the 0.5.13.post1-style path.

Providers, on the same logical inputs (the same random SSM scratch, the same conv
windows, the same index tensors: steps int64, slots int32, as SGLang passes them):

* ``ours``            -- ``fused_commit``: one launch, dedup conv view, SSM, accept (+ track).
* ``ours_graph``      -- the same call replayed from a CUDA graph (device time, no host overhead).
* ``sglang_0.5.23``   -- ``scatter_mamba_states_after_mtp_verify`` over the same dedup view.
* ``sglang_0.5.13``   -- the 0.5.13.post1 path: ``fused_mamba_state_scatter_with_mask`` (dense
  flat copy, taken from 0.5.23 where it still exists, with a precomputed source-row
  arange as 0.5.13 had none) for SSM and conv, accept then track: 2 or 4 launches,
  over a dense ``[L, R, D, dim, K-1]`` conv scratch (that path cannot read the dedup view).

Timing: CUDA events around the whole Python call (host overhead counts: it is paid
every decode step), the device idle before each call, median of many after warm-up.
Bandwidth: bytes read + written by the valid rows (SSM entry + logical conv window,
once read and once written, per valid row and layer) over the median time, and as
a percentage of a large ``dst.copy_(src)`` measured in the same run.

Track rows: when on, every request also tracks (a distinct slot, a random step):
the worst case, twice the bytes.

Results (``_timing.Recorder``): ``<out>/latest/commit-<gpu>.csv`` (every row), ``.md`` (the table),
``.png``, and the rows appended to ``<out>/history.csv``.

Usage (on a GPU machine, SGLang 0.5.23 importable; ``gpu_check.py`` runs the kernel tests first)::

    python benchmarks/bench_commit.py [--out DIR] [--quick] [--sweep]     # DIR: $OUT, else benchmarks/results
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _timing, also under python -P
import _timing  # noqa: E402

_timing.checkout_on_path()
from sglang_mamba_dedup.offline.shapes import MODELS, ModelShape  # noqa: E402

BATCHES = (1, 16, 64, 128, 256)
STEPS = (4, 8)
MEM_FRACTION = 0.85


def log(*a):
    print(*a, flush=True)


def triton_jit_lazy(fn):
    """Decorate with ``triton.jit`` on first use (keeps ``import bench_commit`` cheap)."""
    cache = {}

    def get():
        if "k" not in cache:
            import triton

            cache["k"] = triton.jit(fn)
        return cache["k"]

    return get


def copy_bandwidth_gbs(nbytes=4 << 30):
    src = torch.empty(nbytes // 4, dtype=torch.float32, device="cuda").normal_()
    bw = _timing.copy_bandwidth(src, warmup=3, budget_s=0.5, min_reps=20)
    del src
    torch.cuda.empty_cache()
    return bw / 1e9


# ---------------------------------------------------------------- inputs


def _ssm_bytes(shape: ModelShape) -> int:
    h, d, n = shape.ssm_shape
    return 4 * h * d * n  # fp32


def _bytes_needed(shape: ModelShape, R, D):
    L, dim, K = shape.gdn_layers, shape.conv_dim, shape.conv_kernel
    ssm = _ssm_bytes(shape)
    n_slots = 2 * R + 1
    return (
        L * R * D * ssm  # ssm scratch
        + L * n_slots * ssm  # ssm pool
        + L * R * dim * (D + K - 2) * 2  # dedup conv scratch
        + L * R * D * dim * (K - 1) * 2  # dense conv scratch (0.5.13 path)
        + L * n_slots * dim * (K - 1) * 2  # conv pool
    )


def build_inputs(shape: ModelShape, R, D, gen):
    L, dim, K = shape.gdn_layers, shape.conv_dim, shape.conv_kernel
    n_slots = 2 * R + 1
    dev = "cuda"
    ssm_src = torch.empty((L, R, D, *shape.ssm_shape), dtype=torch.float32, device=dev).normal_(generator=gen)
    ssm_dst = torch.empty((L, n_slots, *shape.ssm_shape), dtype=torch.float32, device=dev).fill_(float("nan"))
    phys = torch.empty((L, R, dim, D + K - 2), dtype=torch.bfloat16, device=dev).normal_(generator=gen)
    sl, sr, sd, sw = phys.stride()
    view = phys.as_strided((L, R, D, dim, K - 1), (sl, sr, sw, sd, sw))
    dense = view.contiguous()  # same logical windows, dense layout (0.5.13 path)
    conv_dst = torch.empty((L, n_slots, dim, K - 1), dtype=torch.bfloat16, device=dev).fill_(float("nan"))
    return SimpleNamespace(
        ssm_src=ssm_src,
        ssm_dst=ssm_dst,
        phys=phys,
        view=view,
        dense=dense,
        conv_dst=conv_dst,
        n_slots=n_slots,
        R=R,
        D=D,
    )


def make_indices(B, D, R, gen):
    perm = torch.randperm(2 * R, generator=gen, device="cuda") + 1  # slot 0 = scratch
    steps = torch.randint(0, D, (B,), generator=gen, device="cuda", dtype=torch.int64)
    slots = perm[:B].to(torch.int32)
    t_steps = torch.randint(0, D, (B,), generator=gen, device="cuda", dtype=torch.int64)
    t_slots = perm[R : R + B].to(torch.int32)
    return steps, slots, t_steps, t_slots


def moved_bytes(shape: ModelShape, B, track):
    conv = shape.conv_dim * (shape.conv_kernel - 1) * 2
    rows = B * (2 if track else 1)
    return 2 * rows * shape.gdn_layers * (_ssm_bytes(shape) + conv)


def result_row(meta, kind, model, D, B, mode, provider, t=None, nbytes=0, median=None):
    """One CSV row; ``t`` a :class:`_timing.Timing` (or only ``median``, without quantiles)."""
    med = t.median if t is not None else median
    return dict(
        meta,
        kind=kind,
        model=model,
        D=D,
        batch=B,
        mode=mode,
        provider=provider,
        median_us=round(med, 2),
        p20_us=round(t.p20, 2) if t is not None else 0,
        p80_us=round(t.p80, 2) if t is not None else 0,
        reps=t.reps if t is not None else 0,
        bytes=nbytes,
        GBps=round(nbytes / (med * 1e-6) / 1e9, 1) if nbytes else 0,
    )


# ---------------------------------------------------------------- providers


def providers(x, idx, track, sg, fused_commit):
    steps, slots, t_steps, t_slots = idx
    B = steps.shape[0]
    ts, tl_ = (t_steps, t_slots) if track else (None, None)

    def ours():
        fused_commit(
            conv_dsts=[x.conv_dst],
            conv_srcs=[x.view],
            ssm_dst=x.ssm_dst,
            ssm_src=x.ssm_src,
            accept_steps=steps,
            accept_slots=slots,
            track_steps=ts,
            track_slots=tl_,
        )

    caches = SimpleNamespace(
        temporal=x.ssm_dst, intermediate_ssm=x.ssm_src, conv=[x.conv_dst], intermediate_conv_window=[x.view]
    )

    def sglang_0523():
        sg.scatter_mamba_states_after_mtp_verify(caches, slots, steps, tl_, ts)

    src_rows = torch.arange(B, dtype=torch.int32, device="cuda")

    def sglang_0513():
        f = sg.fused_mamba_state_scatter_with_mask
        f(x.ssm_dst, x.ssm_src, slots, steps, src_rows)
        f(x.conv_dst, x.dense, slots, steps, src_rows)
        if track:
            f(x.ssm_dst, x.ssm_src, t_slots, t_steps, src_rows)
            f(x.conv_dst, x.dense, t_slots, t_steps, src_rows)

    return {"ours": ours, "sglang_0.5.23": sglang_0523, "sglang_0.5.13": sglang_0513}


def graph_of(fn):
    fn()
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    g = torch.cuda.CUDAGraph()
    with torch.cuda.stream(s), torch.cuda.graph(g, stream=s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    return g.replay, g


def check_same_result(x, idx, track, provs):
    """Gate: every provider writes the same bytes into the touched slots and leaves the
    same number of untouched (NaN-poisoned) elements in both pools."""
    steps, slots, t_steps, t_slots = idx
    touched = torch.cat([slots.long(), t_slots.long()]) if track else slots.long()
    outs = {}
    for name in ("ours", "sglang_0.5.23", "sglang_0.5.13"):
        x.ssm_dst.fill_(float("nan"))
        x.conv_dst.fill_(float("nan"))
        provs[name]()
        torch.cuda.synchronize()
        outs[name] = (
            x.ssm_dst[:, touched].view(torch.int32).clone(),
            x.conv_dst[:, touched].view(torch.int16).clone(),
            sum(int(torch.isnan(x.ssm_dst[layer]).sum()) for layer in range(x.ssm_dst.shape[0])),
            sum(int(torch.isnan(x.conv_dst[layer]).sum()) for layer in range(x.conv_dst.shape[0])),
        )
    ref = outs["ours"]
    ok = all(torch.equal(ref[0], o[0]) and torch.equal(ref[1], o[1]) and ref[2:] == o[2:] for o in outs.values())
    del outs
    torch.cuda.empty_cache()
    return ok


# ---------------------------------------------------------------- sweep of tile configs


def sweep_tiles(sg, fused_commit, gen, out_rows, meta):
    """Device time (CUDA-graph replay) of a few SSM tilings on Qwen3.5-0.8B, D=4; keeps
    the fastest at batch 64 + 128 for the rest of the run (``--sweep``)."""
    common = importlib.import_module("sglang_mamba_dedup.kernels._validate")
    fc = importlib.import_module("sglang_mamba_dedup.kernels.descriptor")
    shape = MODELS["qwen3.5-0.8b"]
    R, D = 128, 4
    x = build_inputs(shape, R, D, gen)
    configs = ((8192, 4), (16384, 4), (32768, 4), (32768, 8), (65536, 8), (131072, 8))
    cases = ((1, False), (64, False), (128, False))
    scores = {}
    for tile_bytes, warps in configs:
        common.SSM_TILE_BYTES, common.SSM_NUM_WARPS = tile_bytes, warps
        fc.clear_plan_cache()
        res = {}
        for B, track in cases:
            idx = make_indices(B, D, R, gen)
            replay, graph = graph_of(providers(x, idx, track, sg, fused_commit)["ours"])
            t = _timing.time_calls({"ours_graph": replay}, budget_s=0.25)["ours_graph"]
            res[(B, track)] = t.median
            provider = f"ours_graph[tile={tile_bytes},warps={warps}]"
            out_rows.append(
                result_row(meta, "sweep", "qwen3.5-0.8b", D, B, "accept", provider, t, moved_bytes(shape, B, track))
            )
            del graph
        scores[(tile_bytes, warps)] = res
        log(
            f"sweep (graph) tile={tile_bytes:6d} warps={warps}: "
            + "  ".join(f"b{B}: {m:8.1f} us" for (B, _), m in res.items())
        )
    big = min(scores, key=lambda c: scores[c][(64, False)] + 0.5 * scores[c][(128, False)])
    common.SSM_TILE_BYTES, common.SSM_NUM_WARPS = big
    fc.clear_plan_cache()
    log(f"sweep: SSM tile {big[0]} B / {big[1]} warps")
    del x
    torch.cuda.empty_cache()
    return big


@triton_jit_lazy
def _noop_kernel(x_ptr):
    pass


def launch_overheads(gen, fused_commit, sg, out_rows, meta):
    """Where batch-1 time goes: empty event pair, one tiny torch op, one empty Triton
    launch, ours, ours replayed from a CUDA graph (interleaved, same timing method)."""
    t = torch.zeros(16, device="cuda")
    x = build_inputs(MODELS["qwen3.5-0.8b"], 4, 4, gen)
    idx = make_indices(1, 4, 4, gen)
    ours = providers(x, idx, False, sg, fused_commit)["ours"]
    cases = [
        ("events_only", lambda: None),
        ("torch_add_", lambda: t.add_(1)),
        ("triton_empty_kernel", lambda: _noop_kernel()[(1,)](t)),
    ]
    replay, graph = graph_of(ours)
    cases += [("ours", ours), ("ours_graph_replay", replay)]
    res = {name: v.median for name, v in _timing.time_calls(dict(cases), budget_s=0.5).items()}
    for name, med in res.items():
        out_rows.append(result_row(meta, "overhead", "qwen3.5-0.8b", 4, 1, "accept", name, median=med))
    log("launch overheads (median us, events around the call): " + "  ".join(f"{k}={v:.1f}" for k, v in res.items()))
    del x, graph
    torch.cuda.empty_cache()
    return res


# ---------------------------------------------------------------- main


def run(out_dir, quick=False, sweep=False, models=None):
    """The whole benchmark; rows and the table into ``out_dir`` (:class:`_timing.Recorder`). Returns the rows."""
    sg = importlib.import_module("sglang.kernels.ops.mamba.mamba_state_scatter_triton")

    from sglang_mamba_dedup.kernels import clear_plan_cache, fused_commit

    gen = torch.Generator(device="cuda")
    gen.manual_seed(int(time.time()))
    rec = _timing.Recorder(out_dir, "commit")
    meta = {k: rec.meta[k] for k in ("gpu", "torch", "triton", "sglang", "python", "date", "commit")}
    log("env:", json.dumps(meta))
    rows = []
    bw = copy_bandwidth_gbs()
    log(f"device copy bandwidth (dst.copy_(src), 4 GiB fp32, read+write): {bw:.0f} GB/s")
    rows.append(
        dict(result_row(meta, "copy", "-", 0, 0, "-", "torch_copy", median=0), bytes=2 * (4 << 30), GBps=round(bw, 1))
    )
    try:
        launch_overheads(gen, fused_commit, sg, rows, meta)
    except Exception as e:
        log("launch overheads failed:", repr(e))
    common = importlib.import_module("sglang_mamba_dedup.kernels._validate")
    if sweep:
        try:
            sweep_tiles(sg, fused_commit, gen, rows, meta)
        except Exception as e:  # keep going with the defaults
            log("sweep failed:", repr(e))
    tile = (common.SSM_TILE_BYTES, common.SSM_NUM_WARPS)
    free = torch.cuda.mem_get_info()[0]
    budget = free * MEM_FRACTION
    batches = (1, 64) if quick else BATCHES
    gate_failures: list = []
    for model in models or MODELS:
        shape = MODELS[model]
        for D in (4,) if quick else STEPS:
            fits = [B for B in batches if _bytes_needed(shape, B, D) <= budget]
            if not fits:
                continue
            skipped = [B for B in batches if B not in fits]
            if skipped:
                log(f"{model} D={D}: batches {skipped} skipped: inputs over {budget / 2**30:.0f} GiB of GPU memory")
            R = max(fits)
            clear_plan_cache()
            torch.cuda.empty_cache()
            try:
                gate_failures += bench_model(shape, model, R, D, fits, gen, sg, fused_commit, rows, meta)
            except torch.cuda.OutOfMemoryError as e:
                log(f"{model} D={D}: out of memory, rest skipped: {e}")
            clear_plan_cache()
            torch.cuda.empty_cache()
            write_outputs(rows, bw, rec, meta, tile, gate_failures, quiet=True)
    write_outputs(rows, bw, rec, meta, tile, gate_failures)
    return rows


def bench_model(shape, model, R, D, fits, gen, sg, fused_commit, rows, meta):
    """Rows of one model and D into ``rows``; returns the configurations whose gate failed."""
    gate_failures = []
    x = build_inputs(shape, R, D, gen)
    for B in fits:
        idx = make_indices(B, D, R, gen)
        for track in (False, True):
            mode = "accept+track" if track else "accept"
            provs = providers(x, idx, track, sg, fused_commit)
            if B in (1, 16):
                ok = check_same_result(x, idx, track, provs)
                log(f"  gate {model} D={D} b={B} {mode}: identical pools = {ok}")
                if not ok:
                    log("  !!! GATE FAILED: ours and SGLang wrote different pools; timings below are suspect")
                    gate_failures.append(f"{model} D={D} b={B} {mode}")
            replay, graph = graph_of(provs["ours"])
            provs = dict(provs, ours_graph=replay)
            nbytes = moved_bytes(shape, B, track)
            done = []
            try:
                timed = _timing.time_calls(provs)
            except Exception as e:  # keep the other configurations
                log(f"  timing failed: {e!r}")
                timed = {}
            for name, t in timed.items():
                rows.append(result_row(meta, "bench", model, D, B, mode, name, t, nbytes))
                done.append(f"{name}={t.median:.1f}us/{nbytes / (t.median * 1e-6) / 1e9:.0f}GB/s")
            log(f"{model:15s} D={D} b={B:3d} {mode:12s} " + "  ".join(done))
            del graph, replay
    del x
    return gate_failures


def write_outputs(rows, bw, rec, meta, tile, gate_failures, quiet=False):
    """CSV, table and plot into ``latest/``, the rows not yet there into the history."""
    rec.write(rows)
    md = markdown_table(rows, bw, meta, tile, gate_failures)
    rec.latest(".md").write_text(md)
    if quiet:
        return
    log(md)
    try:
        plot(rows, bw, rec.latest(".png"), meta)
    except Exception as e:  # matplotlib missing or headless trouble: skip the PNG
        log("no PNG:", repr(e))


def markdown_table(rows, bw, meta, tile, gate_failures):
    bench = [r for r in rows if r["kind"] == "bench"]
    key = lambda r: (r["model"], r["D"], r["batch"], r["mode"])  # noqa: E731
    by = {}
    for r in bench:
        by.setdefault(key(r), {})[r["provider"]] = r
    out = [
        f"Post-verify commit on {meta['gpu']} (torch {meta['torch']}, triton {meta['triton']}, "
        f"SGLang {meta['sglang']}, {meta['date']}). Device copy bandwidth (read+write) measured in "
        f"the same run: **{bw:.0f} GB/s**. Times: median of CUDA-event-timed Python calls (host overhead "
        f"included; `ours (graph)` = the same launch replayed from a CUDA graph). %BW = bytes read+written / time "
        f"/ copy bandwidth. bf16 conv (dedup view for ours and 0.5.23, dense scratch for 0.5.13), fp32 SSM; "
        f"accept+track = every row also tracks (2x bytes)."
        + (f" SSM tile {tile[0]} B, {tile[1]} warps. Providers are timed interleaved (round robin)." if tile else ""),
        "",
        "| model | D | batch | mode | ours us (%BW) | ours (graph) us | SGLang 0.5.23 us (%BW) | 0.5.13-style us (%BW) | speed-up vs 0.5.23 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for k in sorted(by, key=lambda k: (k[0], k[1], k[3], k[2])):
        p = by[k]

        def cell(name, pct=True):
            r = p.get(name)
            if r is None:
                return "-"
            s = f"{r['median_us']:.1f}"
            return s + (f" ({100 * r['GBps'] / bw:.0f}%)" if pct else "")

        sp = p["sglang_0.5.23"]["median_us"] / p["ours"]["median_us"] if "ours" in p and "sglang_0.5.23" in p else 0
        out.append(
            f"| {k[0]} | {k[1]} | {k[2]} | {k[3]} | {cell('ours')} | {cell('ours_graph', False)} | "
            f"{cell('sglang_0.5.23')} | {cell('sglang_0.5.13')} | {sp:.2f}x |"
        )
    ov = {r["provider"]: r["median_us"] for r in rows if r["kind"] == "overhead"}
    if ov:
        out.append("")
        out.append(
            "Batch-1 launch overheads (median us, CUDA events around the call, Qwen3.5-0.8B D=4 accept): "
            + ", ".join(f"{k} {v:.1f}" for k, v in ov.items())
        )
    out.append("")
    out.append(
        "Correctness gate (ours vs SGLang 0.5.23 vs 0.5.13-style, bitwise, batch 1 and 16): "
        + ("FAILED for " + ", ".join(gate_failures) if gate_failures else "identical pools everywhere")
    )
    out.append("")
    out.append(
        "Command: `python benchmarks/gpu_check.py` (runs the GPU tests, then "
        "`benchmarks/bench_commit.py`), on the lent H200 with SGLang 0.5.23 carried as wheels."
    )
    return "\n".join(out) + "\n"


def plot(rows, bw, path, meta):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bench = [r for r in rows if r["kind"] == "bench" and r["D"] == 4]
    models = sorted({r["model"] for r in bench})
    fig, axes = plt.subplots(2, len(models), figsize=(6 * len(models), 8), squeeze=False)
    for j, model in enumerate(models):
        for i, mode in enumerate(("accept", "accept+track")):
            ax = axes[i][j]
            for prov in ("ours", "ours_graph", "sglang_0.5.23", "sglang_0.5.13"):
                pts = sorted(
                    (r["batch"], r["median_us"])
                    for r in bench
                    if r["model"] == model and r["mode"] == mode and r["provider"] == prov
                )
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=prov)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("batch")
            ax.set_ylabel("us per commit (median)")
            ax.set_title(f"{model}, D=4, {mode}")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend()
    fig.suptitle(f"{meta['gpu']}  copy BW {bw:.0f} GB/s  {meta['date']}")
    fig.tight_layout()
    fig.savefig(path, dpi=80)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or str(_timing.RESULTS), help="results folder")
    ap.add_argument("--quick", action="store_true", help="batches 1 and 64, D=4 only")
    ap.add_argument("--sweep", action="store_true", help="first sweep SSM tilings and keep the fastest")
    ap.add_argument("--models", nargs="*", choices=sorted(MODELS))
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("bench_commit needs a CUDA GPU")
    run(a.out, quick=a.quick, sweep=a.sweep, models=a.models)


if __name__ == "__main__":
    main()
