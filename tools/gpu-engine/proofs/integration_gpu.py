#!/usr/bin/env python3
"""Integration checks on a CUDA GPU with the real SGLang (the lent H200 runs 0.5.23; see
../shared/gpu/README.md for the carried wheels).

Sections (each one fails on its own and is reported, the others still run):

1. ``sim``: the stock-vs-plugin speculative-decode simulation of ``tests/support/integration.simulate`` on
   CUDA, bf16 conv windows (SGLang's default), four code paths, all of which must give bit-identical
   per-step conv outputs, verify windows and final conv + SSM states:
     * ``0.5.23 stock``: upstream dedup layout + SGLang 0.5.23's scatter;
     * ``plugin take-over``: upstream layout + our fused commit (0.5.14+ mode);
     * ``plugin back-port``: our back-port allocation path (original ``MambaPool.__init__`` without draft
       tokens + our deduplicated scratch) + our fused commit (0.5.12 ... 0.5.13.post1 mode, forced here);
     * ``0.5.13 stock``: SGLang's dense window (pool told topk=2) + SGLang 0.5.13.post1's own commit
       (four launches of its ``fused_mamba_state_scatter_with_mask``, loaded from the unpacked 0.5.13.post1
       file carried in ``.sgl0513/``, when present).
2. ``peak``: ``torch.cuda.max_memory_allocated`` during ``MambaPool`` construction vs the final footprint,
   for the back-port path (the dense window must never be allocated, not even transiently).
3. ``memory``: pool memory, dense vs dedup, Qwen3.5-0.8B and Qwen3-Next-80B shapes, batch 64.
4. ``commit``: the post-verify commit through ``HybridLinearAttnBackend.update_mamba_state_after_mtp_verify``,
   SGLang 0.5.23 vs the plugin, Qwen3.5-0.8B shapes, CUDA events, median of 50.

Writes ``integration_gpu.md`` and ``integration_gpu.json`` into ``--out`` (default ``$OUT`` or ``.``).
``--cpu`` runs a tiny version on CPU under the Triton interpreter (a dry run of the script itself).
Needs the plugin installed (``pip install -e .`` here; on the GPU machine ``bash tools/gpu-engine/install-plugin.sh``
and ``PYTHONPATH=/tmp/smd-meta:... python3 -P tools/gpu-engine/proofs/integration_gpu.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import faulthandler
import importlib.util
import json
import os
import signal
import statistics
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _checkout, also under python -P
import _checkout  # noqa: E402

ROOT = _checkout.ROOT
GB = 1 << 30  # layout.GB: this proof runs against older builds too, which may lack it
MB = 1 << 20

#: (label, plugin on, back-port allocation forced, pool topk) of the pool paths the peak and memory sections build.
POOL_PATHS = [
    ("SGLang dense window (0.5.13 stock layout; pool told topk=2)", False, False, 2),
    ("SGLang 0.5.23 upstream dedup", False, False, 1),
    ("plugin take-over (upstream dedup, verified)", True, False, 1),
    ("plugin back-port allocation", True, True, 1),
]


@dataclasses.dataclass
class Run:
    """What the sections share: the device, the markdown report and the JSON results, both growing."""

    device: str
    md: list
    results: dict

    @property
    def cuda(self) -> bool:
        return self.device == "cuda"


class SectionTimeout(Exception):
    pass


# ------------------------------------------------------------------------------------------ helpers


@contextlib.contextmanager
def _layout_of(pool) -> str:
    """The layout the plugin's pool patch recorded for ``pool`` (its PoolState), "stock" where none."""
    from sglang_mamba_dedup.state import pool_state_of

    return getattr(pool_state_of(pool), "layout", None) or "stock"


def force_backport():
    from sglang_mamba_dedup.patches import dedup_layout as mp_patch

    saved = mp_patch._is_backport
    mp_patch._is_backport = lambda: True
    try:
        yield
    finally:
        mp_patch._is_backport = saved


def load_0513_scatter():
    path = ROOT / ".sgl0513" / "mamba_state_scatter_triton.py"
    if not path.exists():
        return None
    spec = importlib.util.spec_from_file_location("sgl0513_mamba_state_scatter_triton", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.fused_mamba_state_scatter_with_mask


@contextlib.contextmanager
def commit_0513(device: str):
    """SGLang 0.5.13.post1's commit body (hybrid_linear_attn_backend, four scatter launches) in place of
    0.5.23's ``scatter_mamba_states_after_mtp_verify``; the plugin is off while it is used."""
    from tests.support import integration as iu

    scatter = load_0513_scatter()
    if scatter is None:
        raise FileNotFoundError(".sgl0513/mamba_state_scatter_triton.py not carried")
    if device == "cpu":
        scatter = iu._widen_is_cuda(scatter)
    bk = iu.backend_module()

    def body(
        mamba_caches,
        state_indices_tensor,
        last_correct_step_indices,
        mamba_track_indices,
        mamba_steps_to_track,
        src_indices_raw=None,
    ):
        assert src_indices_raw is None
        conv_states = mamba_caches.conv[0]
        ssm_states = mamba_caches.temporal
        inter_ssm = mamba_caches.intermediate_ssm
        inter_conv = mamba_caches.intermediate_conv_window[0]
        scatter(ssm_states, inter_ssm, state_indices_tensor, last_correct_step_indices)
        scatter(conv_states, inter_conv, state_indices_tensor, last_correct_step_indices)
        if mamba_track_indices is not None:
            scatter(ssm_states, inter_ssm, mamba_track_indices, mamba_steps_to_track)
            scatter(conv_states, inter_conv, mamba_track_indices, mamba_steps_to_track)

    saved = bk.scatter_mamba_states_after_mtp_verify
    bk.scatter_mamba_states_after_mtp_verify = body
    try:
        yield
    finally:
        bk.scatter_mamba_states_after_mtp_verify = saved


def build_mamba_pool(device, shape_kw, *, batch, size, topk, draft_tokens=4):
    """A bare ``MambaPool`` through the package's one builder (topk published to the gate where it takes none)."""
    import torch

    from sglang_mamba_dedup.offline.sglang_pool import build_pool
    from tests.support import integration as iu

    cp = iu.make_cache_params(**shape_kw, conv_dtype=torch.bfloat16)
    return build_pool(cp, size=size, spec_state_size=batch, draft_tokens=draft_tokens, topk=topk, device=device)


def pool_shapes(device):
    """Model shapes (CUDA) or a tiny stand-in (the ``--cpu`` dry run) for the peak and memory sections."""
    from sglang_mamba_dedup.offline.shapes import QWEN3_NEXT_80B, QWEN35_08B

    if device == "cuda":
        return [("Qwen3.5-0.8B", QWEN35_08B.state_dims()), ("Qwen3-Next-80B", QWEN3_NEXT_80B.state_dims())]
    return [("tiny", dict(num_layers=2, conv_dim=8, conv_kernel=4, num_heads=2, head_dim=4, state_size=4))]


def measured(device, build, *args, **kwargs):
    """``(build(*args, **kwargs), peak bytes, final bytes)`` allocated on the device while building (0, 0 on
    the CPU)."""
    if device != "cuda":
        return build(*args, **kwargs), 0, 0
    import torch

    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    obj = build(*args, **kwargs)
    torch.cuda.synchronize()
    return obj, torch.cuda.max_memory_allocated() - base, torch.cuda.memory_allocated() - base


@contextlib.contextmanager
def no_warmup():
    """0.5.23's MambaPool ends with a copy-kernel warm-up that allocates small temporaries."""
    from tests.support import integration as iu

    mpm = iu.mem_pool_module()
    fn = getattr(mpm.MambaPool, "_warmup_fused_copy_slot_kernel", None)
    if fn is None:
        yield
        return
    mpm.MambaPool._warmup_fused_copy_slot_kernel = lambda self: None
    try:
        yield
    finally:
        mpm.MambaPool._warmup_fused_copy_slot_kernel = fn


def pool_path(on, backport, warm=True):
    """The plugin switched as a pool path needs it (back-port allocation forced, copy-kernel warm-up off)."""
    from tests.support import integration as iu

    ctx = contextlib.ExitStack()
    ctx.enter_context(iu.plugin(on))
    if backport:
        ctx.enter_context(force_backport())
    if not warm:
        ctx.enter_context(no_warmup())
    return ctx


# ------------------------------------------------------------------------------------------ 1. sim
def section_sim(run: Run) -> dict:
    import torch

    from sglang_mamba_dedup.offline.shapes import QWEN35_08B
    from tests.support import integration as iu

    device, bf16 = run.device, torch.bfloat16
    cfgs = [
        (
            "small D4 K4 bs8",
            iu.SimConfig(device=device, conv_dtype=bf16, steps=64 if run.cuda else 4, batch=8 if run.cuda else 3),
        ),
        (
            "small D3 K3 bs5",
            iu.SimConfig(
                device=device,
                conv_dtype=bf16,
                draft_tokens=3,
                conv_kernel=3,
                steps=48 if run.cuda else 3,
                batch=5 if run.cuda else 2,
            ),
        ),
    ]
    if run.cuda:
        cfgs.append(
            (
                "Qwen3.5-0.8B D4 bs8",
                iu.SimConfig(
                    **QWEN35_08B.state_dims(),
                    device=device,
                    conv_dtype=bf16,
                    draft_tokens=4,
                    batch=8,
                    steps=32,
                    seed=35,
                ),
            )
        )
    for c in cfgs:
        c[1].progress = True
        c[1].check_outputs = run.cuda  # the interpreter mis-computes bf16 conv outputs
    rows = []
    all_equal = True
    for name, cfg in cfgs:
        print(f"  config {name}", flush=True)
        runs = {}
        with iu.cpu_stock_paths(device), iu.plugin(False):
            runs["0.5.23 stock (upstream dedup + SGLang scatter)"] = iu.simulate(cfg)
        with iu.cpu_stock_paths(device), iu.plugin(True):
            runs["plugin take-over (upstream layout + our commit)"] = iu.simulate(cfg)
        with iu.cpu_stock_paths(device), iu.plugin(True), force_backport():
            runs["plugin back-port path (our allocation + our commit)"] = iu.simulate(cfg)
        try:
            with iu.cpu_stock_paths(device), iu.plugin(False), commit_0513(device):
                runs["0.5.13.post1 stock (dense window + 0.5.13 scatter)"] = iu.simulate(
                    dataclasses.replace(cfg, pool_topk=2)
                )
        except FileNotFoundError as exc:
            print(f"skip 0.5.13 commit path: {exc}")
        ref = next(iter(runs.values()))
        for label, r in runs.items():
            same = (r.outputs_md5, r.windows_md5, r.final_md5) == (ref.outputs_md5, ref.windows_md5, ref.final_md5)
            all_equal &= same
            lens = [n for step in r.accept_lens for n in step]
            rows.append(
                {
                    "config": name,
                    "path": label,
                    "layout": r.layout or "stock",
                    "ours_commits": r.events.get("ours_commit_calls", 0),
                    "steps": cfg.steps,
                    "outputs_md5": r.outputs_md5,
                    "windows_md5": r.windows_md5,
                    "final_md5": r.final_md5,
                    "equal_to_first": same,
                    "accept_0/partial/full": f"{lens.count(0)}/{sum(1 for n in lens if 0 < n < cfg.draft_tokens)}/{lens.count(cfg.draft_tokens)}",
                }
            )
    run.md.extend(
        [
            "## 1. Speculative-decode simulation, stock vs plugin (bf16 conv, fp32 SSM)",
            "",
            "| config | code path | layout | our commits | steps | accepted 0/partial/full | outputs md5 | windows md5 | final states md5 | equal |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
    )
    for r in rows:
        run.md.append(
            f"| {r['config']} | {r['path']} | {r['layout']} | {r['ours_commits']} | {r['steps']} | {r['accept_0/partial/full']} | `{r['outputs_md5']}` | `{r['windows_md5']}` | `{r['final_md5']}` | {'yes' if r['equal_to_first'] else '**NO**'} |"
        )
    run.md.extend(["", f"All paths bit-identical: **{'yes' if all_equal else 'NO'}**", ""])
    assert all_equal, "code paths differ"
    return {"rows": rows, "all_equal": all_equal}


# ------------------------------------------------------------------------------------------ 2. peak
def section_peak(run: Run) -> dict:
    rows = []
    for sname, skw in pool_shapes(run.device):
        for label, on, bp, topk in POOL_PATHS:
            for warm in (True, False):
                with pool_path(on, bp, warm):
                    pool, peak, final = measured(
                        run.device, build_mamba_pool, run.device, skw, batch=64, size=64, topk=topk
                    )
                    rows.append(
                        {
                            "shapes": sname,
                            "path": label,
                            "warmup": warm,
                            "peak": peak,
                            "final": final,
                            "peak_minus_final": peak - final,
                            "layout": _layout_of(pool),
                        }
                    )
                    del pool
    run.md.extend(
        [
            "## 2. Peak device memory during MambaPool construction (batch 64, 64 slots, D=4)",
            "",
            "`torch.cuda.max_memory_allocated()` during the constructor minus the allocation before it, vs the allocation after it.",
            "",
            "| shapes | path | 0.5.23 copy-kernel warm-up | peak (MiB) | final (MiB) | peak - final (bytes) |",
            "|---|---|---|---|---|---|",
        ]
    )
    for r in rows:
        run.md.append(
            f"| {r['shapes']} | {r['path']} | {'on' if r['warmup'] else 'off'} | {r['peak'] / MB:.2f} | {r['final'] / MB:.2f} | {r['peak_minus_final']} |"
        )
    run.md.append("")
    bp_rows = [r for r in rows if r["path"] == "plugin back-port allocation" and not r["warmup"]]
    if run.cuda:
        assert all(r["peak_minus_final"] == 0 for r in bp_rows), bp_rows
    return {"rows": rows}


# ------------------------------------------------------------------------------------------ 3. memory
def section_memory(run: Run) -> dict:
    from sglang_mamba_dedup import sizing as layout

    rows = []
    for sname, skw in pool_shapes(run.device):
        for label, on, bp, topk in POOL_PATHS:
            with pool_path(on, bp):
                pool, peak, final = measured(
                    run.device, build_mamba_pool, run.device, skw, batch=64, size=64, topk=topk
                )
                c = pool.mamba_cache
                phys = getattr(pool, "_intermediate_conv_window_phys", None) or c.intermediate_conv_window
                rows.append(
                    {
                        "shapes": sname,
                        "path": label,
                        "layout": _layout_of(pool),
                        "conv_state": layout.nbytes(c.conv),
                        "ssm_state": layout.nbytes(c.temporal),
                        "intermediate_ssm": layout.nbytes(c.intermediate_ssm),
                        "window_logical": layout.nbytes(c.intermediate_conv_window),
                        "window_physical": layout.nbytes(phys),
                        "mem_usage": pool.mem_usage * GB,
                        "allocated": final,
                    }
                )
                del pool, c, phys
    run.md.extend(
        [
            "## 3. MambaPool memory, dense vs dedup, batch 64 (64 slots + 1, 65 verify rows, D=4, bf16 conv, fp32 SSM)",
            "",
            "| shapes | path | conv-window scratch (MiB) | window dense-equivalent (MiB) | intermediate SSM (MiB) | conv + SSM state (MiB) | pool mem_usage (MiB) | measured allocation (MiB) |",
            "|---|---|---|---|---|---|---|---|",
        ]
    )
    for r in rows:
        run.md.append(
            f"| {r['shapes']} | {r['path']} | {r['window_physical'] / MB:.2f} | {r['window_logical'] / MB:.2f} | {r['intermediate_ssm'] / MB:.1f} | {(r['conv_state'] + r['ssm_state']) / MB:.1f} | {r['mem_usage'] / MB:.1f} | {r['allocated'] / MB:.1f} |"
        )
    run.md.append("")
    return {"rows": rows}


# ------------------------------------------------------------------------------------------ 4. commit
def section_commit(run: Run) -> dict:
    if not run.cuda:
        return {"skipped": "cpu"}
    import torch

    from sglang_mamba_dedup import report
    from sglang_mamba_dedup.offline.shapes import QWEN35_08B
    from tests.support import integration as iu

    device = run.device
    rows = []
    cp = iu.make_cache_params(**QWEN35_08B.state_dims(), conv_dtype=torch.bfloat16)
    for bs in (1, 16, 64):
        res = {}
        for label, on in (("SGLang 0.5.23", False), ("plugin", True)):
            with iu.plugin(on):
                pool = iu.build_pool(
                    cache_params=cp, size=bs, mamba_size=2 * bs + 1, draft_tokens=4, topk=1, device=device
                )
                backend = iu.build_backend(pool, device=device, topk=1, draft_tokens=4)
                slots = torch.arange(1, bs + 1, dtype=torch.int32, device=device)
                iu.set_forward_metadata(backend, slots, 4)
                steps = torch.randint(0, 4, (bs,), device=device, dtype=torch.int64)
                for _ in range(5):
                    backend.update_mamba_state_after_mtp_verify(steps, None, None, None)
                times = []
                for _ in range(50):
                    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    a.record()
                    backend.update_mamba_state_after_mtp_verify(steps, None, None, None)
                    b.record()
                    b.synchronize()
                    times.append(a.elapsed_time(b) * 1000)
                res[label] = statistics.median(times)
                ours = report.events()["ours_commit_calls"]
                assert (ours > 0) == on
                del pool, backend
        rows.append({"batch": bs, **res})
    run.md.extend(
        [
            "## 4. Post-verify commit through `update_mamba_state_after_mtp_verify` (Qwen3.5-0.8B shapes, accept only, D=4)",
            "",
            "CUDA events around the Python call, median of 50 after 5 warm-up calls.",
            "",
            "| batch | SGLang 0.5.23 (us) | plugin (us) | speed-up |",
            "|---|---|---|---|",
        ]
    )
    for r in rows:
        run.md.append(
            f"| {r['batch']} | {r['SGLang 0.5.23']:.1f} | {r['plugin']:.1f} | {r['SGLang 0.5.23'] / r['plugin']:.2f}x |"
        )
    run.md.append("")
    return {"rows": rows}


def section_context(run: Run) -> dict:
    from tests.support import integration as iu

    t = time.time()
    iu.publish_server_args(1, 4)  # the backends read SGLang's runtime context
    return {"publish_server_args_s": round(time.time() - t, 1)}


SECTIONS = {
    "sim": section_sim,
    "peak": section_peak,
    "memory": section_memory,
    "commit": section_commit,
    "context": section_context,
}


# ------------------------------------------------------------------------------------------ main
def run_section(run: Run, name: str, timeout_s: int) -> None:
    """One section, its result (or its failure) into ``run``; never raises."""
    t0 = time.time()
    print(f"[{name}] start", flush=True)
    try:
        if timeout_s:
            signal.alarm(timeout_s)
        out = SECTIONS[name](run)
        signal.alarm(0)
        run.results["sections"][name] = {"ok": True, "seconds": round(time.time() - t0, 1), **(out or {})}
    except Exception as exc:  # noqa: BLE001 - report and go on
        signal.alarm(0)
        tb = traceback.format_exc()
        print(tb, flush=True)
        run.results["sections"][name] = {
            "ok": False,
            "error": f"{type(exc).__name__}: {exc}",
            "traceback": tb[-3000:],
        }
        run.md.extend([f"## {name}: FAILED", "", "```", tb[-2000:], "```", ""])
    print(f"[{name}] {time.time() - t0:.1f}s", flush=True)


def write(run: Run, out: Path) -> None:
    (out / "integration_gpu.md").write_text("\n".join(run.md) + "\n")
    (out / "integration_gpu.json").write_text(json.dumps(run.results, indent=1, default=str))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cpu", action="store_true", help="tiny dry run on CPU under TRITON_INTERPRET=1")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--sections", default="peak,memory,context,commit,sim")
    ap.add_argument("--section-timeout", type=int, default=0, help="seconds per section (SIGALRM), 0 = none")
    args = ap.parse_args()
    if args.cpu:
        os.environ.setdefault("TRITON_INTERPRET", "1")
        os.environ.setdefault("SGLANG_MAMBA_DEDUP_ALLOW_CPU", "1")

    import torch

    _checkout.on_path()
    from tests.support import integration as iu

    device = "cpu" if args.cpu else "cuda"
    run = Run(device=device, md=[], results={"env": {}, "sections": {}})
    env = run.results["env"]
    env["sglang"] = iu.SGLANG_VERSION
    env["torch"] = torch.__version__
    try:
        import triton

        env["triton"] = triton.__version__
    except Exception:  # noqa: BLE001
        env["triton"] = "?"
    env["device"] = torch.cuda.get_device_name() if device == "cuda" else "cpu (TRITON_INTERPRET)"
    env["commit_kernel"] = iu.ensure_commit_kernel()
    run.md.extend(
        [
            f"# Integration on {env['device']}",
            "",
            f"SGLang {env['sglang']}, torch {env['torch']}, triton {env['triton']}, commit kernel: {env['commit_kernel']}",
            "",
        ]
    )
    print(run.md[0], run.md[2], flush=True)

    faulthandler.dump_traceback_later(45, repeat=True, file=sys.stdout)

    def _alarm(signum, frame):
        raise SectionTimeout(f"section exceeded {args.section_timeout}s")

    signal.signal(signal.SIGALRM, _alarm)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in args.sections.split(","):
        if name in SECTIONS:
            run_section(run, name, args.section_timeout)
            write(run, out)

    ok = all(s.get("ok") for s in run.results["sections"].values())
    run.md.append(f"Overall: **{'all sections passed' if ok else 'some sections FAILED'}**")
    write(run, out)
    print("\n".join(run.md), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
