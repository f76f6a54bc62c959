"""The decode cycle end to end, stock SGLang vs the plugin vs the zero-copy commit: wall time of whole generates in
one Engine per mode, and where one verify cycle's time goes (GPU time, kernels launched, the commit, the verify, the
host gap) from one profiled generate per mode. Needs a CUDA GPU and SGLang (the stand-ins of tools/gpu-engine on the
lent H200: ``tools/gpu-engine/run_cycle.sh``).

Method (docs/benchmarks.md, "The decode cycle"):

* one fresh process and Engine per (round, mode); the modes start in interleaved order, round 1 stock, plugin,
  zero-copy, round 2 the reverse, and so on; each Engine times every batch size in turn, the same prompts
  (random token ids, seeded by the batch size) in every mode; greedy, ``ignore_eos``, a fixed output length;
* per batch: one warm-up generate, then ``--reps`` timed generates (``time.perf_counter`` around
  ``Engine.generate``): per Engine the median and min-max; per mode the ratio of its Engines' medians to stock's,
  with the range of every pairing (mode Engine / stock Engine);
* in ``--profile-round``, after the timed generates, one generate under SGLang's ``start_profile`` (GPU
  activities): its Chrome trace's kernels summed per verify cycle (cycles = launches of the verify kernel / the
  model's linear layers); host gap = the generate's wall minus the time the GPU was busy;
* every mode must produce the same output token ids as stock at every batch (bit-exact end to end; the md5 is
  printed), and the plugin's scheduler report must show it engaged (zero-copy: every commit served zero-copy).

Results: ``<out>/latest/cycle_wall-<gpu>.csv`` (columns ``model,batch,mode,round,median_s,min_s,max_s,reps``; rows of
other models kept from the tree's copy), ``cycle_profile-<gpu>.csv``, both appended to ``<out>/history.csv``.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import gzip
import hashlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _timing, also under python -P
from _timing import RESULTS, Recorder, checkout_on_path, write_csv  # noqa: E402

MODES = {  # mode -> the plugin's variables in its Engine's process
    "stock": {"SGLANG_MAMBA_DEDUP": "0"},
    "plugin": {"SGLANG_MAMBA_DEDUP": "1"},
    "zero-copy": {"SGLANG_MAMBA_DEDUP": "1", "SGLANG_MAMBA_DEDUP_ZERO_COPY": "1"},
}
#: kernel names (substrings) of the commit: SGLang 0.5.23's scatters, the plugin's kernel (the zero-copy stage-in too)
COMMIT_KERNELS = ("_fused_mamba_state_scatter_with_mask_kernel", "_fused_conv_window_scatter", "_fused_commit_kernel")
#: the verify's state-update kernel of each mixer: one launch per linear layer per verify cycle (GDN, Mamba2, and GDN
#: under ReplaySSM-spec: 0.5.23 ``gdn_replayssm_spec_decode`` launches its circular kernel once a call)
VERIFY_KERNELS = (
    "fused_sigmoid_gating_delta_rule_update_kernel",
    "_selective_scan_update_kernel",
    "gdn_replayssm_spec_circular_kernel",
)
WALL_FIELDS = ["model", "batch", "mode", "round", "median_s", "min_s", "max_s", "reps"]


# ---------------------------------------------------------------- pure parts (tests/e2e/test_bench_cycle.py)


def mode_order(modes: Sequence[str], rounds: int) -> list[tuple[int, str]]:
    """(round, mode) in start order: odd rounds as given, even rounds reversed."""
    return [(r, m) for r in range(1, rounds + 1) for m in (modes if r % 2 else list(reversed(modes)))]


def busy_us(intervals: Iterable[tuple[float, float]]) -> float:
    """The length of the union of ``(start, duration)`` intervals (µs): the time the GPU was busy."""
    total, end = 0.0, None
    for start, dur in sorted(intervals):
        stop = start + dur
        if end is None or start > end:
            total += dur
            end = stop
        elif stop > end:
            total += stop - end
            end = stop
    return total


def cycle_profile(events: Iterable[Mapping], linear_layers: int, wall_s: float) -> dict:
    """One profiled generate's trace events -> per verify cycle: GPU time, kernels, commit, verify; and the host gap
    (wall minus GPU busy, whole generate and per cycle). Kernels replayed from CUDA graphs are in the trace."""
    kernels = [e for e in events if e.get("cat") == "kernel" and "dur" in e]
    activity = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "dur" in e]
    verify = [e for e in kernels if any(k in e.get("name", "") for k in VERIFY_KERNELS)]
    commit = [e for e in kernels if any(k in e.get("name", "") for k in COMMIT_KERNELS)]
    cycles = len(verify) / linear_layers if linear_layers else 0.0
    gpu_us = sum(e["dur"] for e in kernels)
    busy = busy_us((e["ts"], e["dur"]) for e in activity)
    per = (lambda x: x / cycles) if cycles else (lambda x: float("nan"))
    return {
        "cycles": round(cycles, 2),
        "gpu_us_per_cycle": round(per(gpu_us), 1),
        "kernels_per_cycle": round(per(len(kernels)), 1),
        "commit_us_per_cycle": round(per(sum(e["dur"] for e in commit)), 1),
        "verify_us_per_cycle": round(per(sum(e["dur"] for e in verify)), 1),
        "wall_us_per_cycle": round(per(wall_s * 1e6), 1),
        "host_gap_us_per_cycle": round(per(wall_s * 1e6 - busy), 1),
        "wall_s": round(wall_s, 4),
        "gpu_busy_s": round(busy / 1e6, 6),
        "gpu_kernel_s": round(gpu_us / 1e6, 6),  # the kernels alone (no copies over PCIe), summed
    }


def ratios(wall: Sequence[Mapping], base: str = "stock") -> list[dict]:
    """Per (model, batch, mode): the median of its Engines' medians over stock's, and the range of every pairing."""
    groups: dict[tuple, dict[str, list[float]]] = {}
    for r in wall:
        groups.setdefault((r["model"], int(r["batch"])), {}).setdefault(r["mode"], []).append(float(r["median_s"]))
    out = []
    for (model, batch), by_mode in sorted(groups.items()):
        ref = by_mode.get(base)
        if not ref:
            continue
        for mode, meds in by_mode.items():
            pairs = [m / s for m in meds for s in ref]
            out.append(
                {
                    "model": model,
                    "batch": batch,
                    "mode": mode,
                    "engines": len(meds),
                    "ratio": round(statistics.median(meds) / statistics.median(ref), 4),
                    "ratio_min": round(min(pairs), 4),
                    "ratio_max": round(max(pairs), 4),
                    "every_engine_below_base": max(meds) < min(ref),
                }
            )
    return out


# ---------------------------------------------------------------- the Engine process


def prompts_for(batch: int, vocab: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed * 1_000_003 + batch)
    return [[rng.randrange(10, vocab - 10) for _ in range(rng.randrange(64, 256))] for _ in range(batch)]


def _trace_events(folder: Path, deadline: float, settle_s: float = 1.0) -> list[dict]:
    """The Chrome trace SGLang's profiler wrote into ``folder`` (waits for it until ``deadline``; ``settle_s`` once
    it is there: the writer may still be closing it)."""
    while True:
        found = sorted(folder.rglob("*.trace.json.gz"))
        if found:
            time.sleep(settle_s)
            try:
                with gzip.open(found[-1], "rt") as f:
                    return json.load(f).get("traceEvents", [])
            except (EOFError, OSError, ValueError):  # still being written: read it again until the deadline
                if time.time() > deadline:
                    raise
        elif time.time() > deadline:
            raise TimeoutError(f"no trace in {folder}")
        time.sleep(0.5)


def profiled_generate(
    engine, ids, sampling: Mapping, folder: Path, linear_layers: int, timeout_s: float = 120.0, settle_s: float = 1.0
) -> dict:
    """One generate under SGLang's profiler (GPU activities only) -> :func:`cycle_profile` of its trace (the GPU's
    busy time, per verify cycle too). The trace is written into ``folder`` and removed once read (it is large; its
    numbers are kept). Shared by this benchmark and ``bench_live --gpu-busy``."""
    folder.mkdir(parents=True, exist_ok=True)
    engine.start_profile(output_dir=str(folder), activities=["GPU"])
    t0 = time.perf_counter()
    try:
        engine.generate(input_ids=ids, sampling_params=dict(sampling))
    except BaseException:
        with contextlib.suppress(Exception):  # a profiler left running refuses every later start_profile
            engine.stop_profile()
        raise
    wall = time.perf_counter() - t0
    engine.stop_profile()
    try:
        return cycle_profile(_trace_events(folder, time.time() + timeout_s, settle_s), linear_layers, wall)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def worker(spec: dict) -> dict:
    """One Engine: every batch in turn, warm-up, timed generates, optionally one profiled generate."""
    import sglang

    engine = sglang.Engine(**spec["engine_kwargs"])
    sampling = {"temperature": 0.0, "max_new_tokens": spec["max_new_tokens"], "ignore_eos": True}
    res: dict = {"batches": {}}
    try:
        for batch in spec["batches"]:
            ids = prompts_for(batch, spec["vocab"])
            engine.generate(input_ids=ids, sampling_params=sampling)  # warm-up
            times, digests, verify_ct, tokens = [], set(), 0, 0
            for _ in range(spec["reps"]):
                t0 = time.perf_counter()
                outs = engine.generate(input_ids=ids, sampling_params=sampling)
                times.append(time.perf_counter() - t0)
                digests.add(hashlib.md5(json.dumps([o["output_ids"] for o in outs]).encode()).hexdigest())
                verify_ct = sum(int(o["meta_info"].get("spec_verify_ct", 0)) for o in outs)
                tokens = sum(len(o["output_ids"]) for o in outs)
            entry = {"times": times, "md5": sorted(digests), "accept_length": tokens / verify_ct if verify_ct else None}
            if spec.get("profile"):
                folder = Path(spec["profile_dir"]) / f"b{batch}"
                entry["profile"] = profiled_generate(engine, ids, sampling, folder, spec["linear_layers"])
            res["batches"][str(batch)] = entry
    finally:
        engine.shutdown()
    return res


def plugin_report(folder: Path) -> dict:
    """What the plugin's scheduler reports say: zero-copy's state, commits (all, ours, served zero-copy, and of those
    with a track set)."""
    seen = {"reports": 0, "zero_copy": None, "commits_all": 0, "commits_ours": 0, "zc_commit_calls": 0}
    seen["zc_track_commits"] = 0  # commits with a track set served zero-copy (the radix cache on)
    for path in folder.glob("status-*.json"):
        try:
            ev = json.loads(path.read_text()).get("events") or {}
        except ValueError:
            continue
        if not ev.get("commit_calls") and "zero_copy" not in ev:  # the Engine's own process: no pool, no commit
            continue
        seen["reports"] += 1
        seen["zero_copy"] = ev.get("zero_copy", seen["zero_copy"])
        seen["commits_all"] += int(ev.get("commit_calls", 0) or 0)
        seen["commits_ours"] += int(ev.get("ours_commit_calls", 0) or 0)
        seen["zc_commit_calls"] += int(ev.get("zc_commit_calls", 0) or 0)
        seen["zc_track_commits"] += int(ev.get("zc_track_commits", 0) or 0)
    return seen


def run_engine(args, mode: str, rnd: int, spec: dict, work: Path) -> dict:
    run = work / f"r{rnd}-{mode}"
    shutil.rmtree(run, ignore_errors=True)  # an earlier run's reports would be counted as this Engine's
    run.mkdir(parents=True)
    spec = dict(spec, profile=rnd == args.profile_round, profile_dir=str(run / "trace"))
    (run / "spec.json").write_text(json.dumps(spec))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_MAMBA_DEDUP")}
    env.update(MODES[mode], SGLANG_MAMBA_DEDUP_REPORT_DIR=str(run / "reports"), PYTHONUNBUFFERED="1")
    t0 = time.time()
    with open(run / "engine.log", "w") as log:
        proc = subprocess.run(
            [sys.executable, "-P", __file__, "--worker", str(run / "spec.json"), str(run / "result.json")],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            timeout=args.engine_timeout,
        )
    if proc.returncode != 0 or not (run / "result.json").exists():
        tail = (run / "engine.log").read_text()[-3000:]
        raise RuntimeError(f"{mode} engine (round {rnd}) exited with {proc.returncode}:\n{tail}")
    res = json.loads((run / "result.json").read_text())
    res["report"] = plugin_report(run / "reports")
    res["seconds"] = round(time.time() - t0, 1)
    return res


def model_facts(model_dir: Path) -> tuple[int, int]:
    """(linear layers, vocab) from the checkpoint's config."""
    cfg = json.loads((model_dir / "config.json").read_text())
    text = cfg.get("text_config", cfg)
    if "hybrid_override_pattern" in text:
        return text["hybrid_override_pattern"].count("M"), int(text["vocab_size"])
    types = text.get("layer_types") or []
    return sum(1 for t in types if t == "linear_attention"), int(text["vocab_size"])


def engine_kwargs(args, model: str) -> dict:
    from sglang_mamba_dedup.e2e.settings import parse_engine_args

    kw = {
        "model_path": model,
        "speculative_algorithm": "NEXTN",
        "speculative_num_steps": 3,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 4,
        "speculative_draft_model_path": model,
        "random_seed": 0,
        "max_running_requests": max(args.batches),
        "skip_tokenizer_init": True,
        "mem_fraction_static": args.mem_fraction_static,
        "disable_radix_cache": True,  # zero-copy needs it off: off in every mode, so the modes compare
        "cuda_graph_backend_decode": "full",
        "cuda_graph_backend_prefill": "disabled",
        "log_level": "warning",
    }
    kw.update(parse_engine_args(args.engine_arg))
    return kw


def check(results: Mapping[tuple[int, str], dict], batches: Sequence[int]) -> list[str]:
    """Every mode's outputs equal stock's at every batch, and the plugin engaged as its mode says."""
    problems = []
    for b in batches:
        ref = {tuple(r["batches"][str(b)]["md5"]) for (_, m), r in results.items() if m == "stock"}
        for (rnd, mode), r in results.items():
            md5 = tuple(r["batches"][str(b)]["md5"])
            if len(md5) != 1 or (ref and md5 not in ref) or len(ref) > 1:
                problems.append(f"batch {b}: {mode} round {rnd} md5 {md5} vs stock {sorted(ref)}")
    for (rnd, mode), r in results.items():
        rep = r["report"]
        if mode != "stock" and not rep["commits_ours"]:
            problems.append(f"{mode} round {rnd}: no commit through the plugin's kernel ({rep})")
        if mode == "zero-copy" and (rep["zero_copy"] != "on" or rep["zc_commit_calls"] != rep["commits_ours"]):
            problems.append(f"zero-copy round {rnd}: not every commit served zero-copy ({rep})")
    return problems


def _table(rows: Sequence[Mapping], cols: Sequence[str]) -> str:
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r.get(c, "")) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    p.add_argument("--model-dir", type=Path, help="a checkpoint (built with --preset when missing)")
    p.add_argument("--preset", default="qwen3.5-0.8b", help="random-weight preset (sglang_mamba_dedup.e2e)")
    p.add_argument("--batches", default="1,16,64,128", type=lambda s: [int(x) for x in s.split(",")])
    p.add_argument("--modes", default="stock,plugin,zero-copy", type=lambda s: s.split(","))
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--reps", type=int, default=5, help="timed generates per batch and Engine")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--profile-round", type=int, default=1, help="the round whose Engines profile (0: none)")
    p.add_argument("--mem-fraction-static", type=float, default=0.3)
    p.add_argument("--engine-arg", action="append", default=[], help="KEY=VALUE for sglang.Engine (repeatable)")
    p.add_argument("--engine-timeout", type=float, default=400)
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or RESULTS))
    args = p.parse_args(argv)
    if args.worker:
        spec = json.loads(Path(args.worker[0]).read_text())
        Path(args.worker[1]).write_text(json.dumps(worker(spec)))
        return 0
    checkout_on_path()
    bad = [m for m in args.modes if m not in MODES]
    if bad or "stock" not in args.modes:
        p.error(f"--modes: choose from {', '.join(MODES)}, stock included (got {args.modes})")
    model_dir = args.model_dir or Path(f"/tmp/smd-model-{args.preset}")
    if not (model_dir / "config.json").exists():
        from sglang_mamba_dedup.e2e.random_model import build_random_model

        build_random_model(model_dir, preset=args.preset)
    layers, vocab = model_facts(model_dir)
    model = args.preset if args.model_dir is None else model_dir.name
    spec = {
        "engine_kwargs": engine_kwargs(args, str(model_dir)),
        "batches": args.batches,
        "reps": args.reps,
        "max_new_tokens": args.max_new_tokens,
        "vocab": vocab,
        "linear_layers": layers,
    }
    work = Path(os.environ.get("CYCLE_WORK", "/tmp/bench-cycle")) / model
    results: dict[tuple[int, str], dict] = {}
    wall: list[dict] = []
    prof: list[dict] = []
    wall_rec, prof_rec = Recorder(args.out, "cycle_wall"), Recorder(args.out, "cycle_profile")
    print(
        f"model {model} ({layers} linear layers); batches {args.batches}; {args.reps} timed generates of "
        f"{args.max_new_tokens} tokens; engine {json.dumps(spec['engine_kwargs'], sort_keys=True)}",
        flush=True,
    )
    for rnd, mode in mode_order(args.modes, args.rounds):
        res = run_engine(args, mode, rnd, spec, work)
        results[(rnd, mode)] = res
        for b in args.batches:
            e = res["batches"][str(b)]
            t = e["times"]
            wall.append(
                dict(
                    model=model,
                    batch=b,
                    mode=mode,
                    round=rnd,
                    median_s=round(statistics.median(t), 5),
                    min_s=round(min(t), 5),
                    max_s=round(max(t), 5),
                    reps=len(t),
                )
            )
            if "profile" in e:
                prof.append(
                    dict(
                        model=model, batch=b, mode=mode, accept_length=round(e["accept_length"] or 0, 3), **e["profile"]
                    )
                )
        print(
            f"[{mode} round {rnd}: {res['seconds']} s; report {res['report']}] "
            + ", ".join(f"b{w['batch']} {w['median_s']}s" for w in wall if w["mode"] == mode and w["round"] == rnd),
            flush=True,
        )
        _write(args, wall_rec, prof_rec, model, wall, prof)
    problems = check(results, args.batches)
    print("\n## wall per Engine (s)\n" + _table(wall, WALL_FIELDS))
    print(
        "\n## ratio to stock (median of Engine medians; range over every pairing)\n"
        + _table(
            ratios(wall),
            ["model", "batch", "mode", "engines", "ratio", "ratio_min", "ratio_max", "every_engine_below_base"],
        )
    )
    if prof:
        print(
            "\n## per verify cycle (one profiled generate per mode)\n"
            + _table(
                prof,
                [
                    "model",
                    "batch",
                    "mode",
                    "cycles",
                    "accept_length",
                    "gpu_us_per_cycle",
                    "kernels_per_cycle",
                    "commit_us_per_cycle",
                    "verify_us_per_cycle",
                    "wall_us_per_cycle",
                    "host_gap_us_per_cycle",
                ],
            )
        )
    md5 = {b: results[next(k for k in results if k[1] == "stock")]["batches"][str(b)]["md5"] for b in args.batches}
    print(f"\noutput md5 per batch (stock): {md5}")
    print(
        "\nEQUAL outputs in every mode and batch; plugin engaged as each mode says"
        if not problems
        else "\nPROBLEMS:\n  " + "\n  ".join(problems)
    )
    return 1 if problems else 0


def _write(args, wall_rec, prof_rec, model, wall, prof) -> None:
    """The CSVs so far (a run cut short keeps what it measured); other models' wall rows kept from the tree."""
    kept = []
    tree = RESULTS / "latest" / f"{wall_rec.stem}.csv"
    if tree.exists():
        with open(tree, newline="") as f:
            kept = [r for r in csv.DictReader(f) if r.get("model") != model]
    wall_rec.write(wall)
    write_csv(wall_rec.latest(".csv"), kept + wall, WALL_FIELDS)
    if prof:
        prof_rec.write(prof)


if __name__ == "__main__":
    sys.exit(main())
