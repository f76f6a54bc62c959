"""The results of ``run_memory.sh`` (memory-tight ``launch_server`` runs, plugin off / on, per variant) in one table,
with the planner's prediction for the same settings beside each server. Test infrastructure, not part of the package.

    python3 -P tools/gpu-engine/record_memory.py OUT --model-path DIR --max-running-requests N \
        --mem-fraction-static F [--speculative-num-draft-tokens D] VARIANT=WORKDIR [...]

WORKDIR is an e2e ``--server`` workdir (``run-<i>-<mode>.log`` per server); ``OUT/gpu-apps.csv`` (nvidia-smi ``timestamp, pid, used_memory``), where present, gives each
server's peak GPU memory: the processes sampled inside its log's time window. From each server log it reads SGLang's own lines (free memory
before and after the weights, the mamba cache line, the scheduler's ``max_running_requests``, the free memory
after the pools) and the plugin's (ledger, admission warning, estimator top-up). The planner
(``sglang-mamba-dedup plan``) runs with the free memory before the weights as the GPU's memory and the weights'
footprint from the log, which is SGLang's own budget ``free_after_weights - free_before x (1 - fraction)``;
ReplaySSM is read from the log (SGLang's ring-buffer line). Writes ``OUT/memory.md``, ``OUT/memory.csv`` and
``OUT/memory.json``; prints the table. Exit 0 when every server was parsed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import re
import sys
from datetime import datetime
from pathlib import Path

_NUM = r"([0-9]+(?:\.[0-9]+)?)"
# SGLang's lines (0.5.23's wording; the first occurrence is the target model's runner)
LINES = {
    "free_before_weights_gb": re.compile(rf"Load weight begin\. avail mem={_NUM} GB"),
    "free_after_weights_gb": re.compile(rf"Load weight end\..*?avail mem={_NUM} GB"),
    "weights_gb": re.compile(rf"Load weight end\..*?mem usage={_NUM} GB"),
    "mamba_slots": re.compile(r"Mamba Cache is allocated\. max_mamba_cache_size: ([0-9]+)"),
    "free_after_pools_gb": re.compile(rf"Memory pool end\. avail mem={_NUM} GB"),
    "max_total_num_tokens": re.compile(r"max_total_num_tokens=([0-9]+)"),
    "running_requests": re.compile(r"\bmax_running_requests=([0-9]+)"),
    # the plugin's lines (patches/mamba_pool.py via ledger.py, patches/pool_config.py)
    "ledger_allocated_gib": re.compile(rf"mamba memory ledger: \w+ allocates {_NUM} GiB"),
    "ledger_reserved_gib": re.compile(rf"mamba memory ledger: .*?the estimator reserved {_NUM} GiB"),
    "topup_gib": re.compile(rf"mamba cache estimator reserves {_NUM} GiB \(\d+ bytes\) more"),
    "admission_cap": re.compile(r"caps running requests at ([0-9]+) of the [0-9]+ asked for"),
}
MAMBA_SIZES = re.compile(rf"(\w+) size: {_NUM}GB")  # the mamba cache line's buffers
REPLAYSSM = re.compile(r"ReplaySSM ring buffers allocated")
INTS = {"mamba_slots", "max_total_num_tokens", "running_requests", "admission_cap"}
MODES = ("off", "on")


def parse_log(text: str) -> dict:
    """What one server's log says about its memory (absent keys: the line was not in the log)."""
    got: dict = {}
    for key, rx in LINES.items():
        m = rx.search(text)
        if m:
            got[key] = int(m.group(1)) if key in INTS else float(m.group(1))
    line = next((ln for ln in text.splitlines() if "Mamba Cache is allocated." in ln), "")
    sizes = {name: float(v) for name, v in MAMBA_SIZES.findall(line)}
    if sizes:
        got["mamba_buffers_gb"] = sizes
        got["mamba_gb"] = round(sum(sizes.values()), 2)
    got["replayssm"] = bool(REPLAYSSM.search(text))
    return got


_LOG_TIME = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)", re.M)  # SGLang's "[2026-12-01 17:18:55 TP0] ..."


def log_window(text: str) -> tuple[datetime, datetime] | None:
    """First and last time stamp of a server log."""
    stamps = _LOG_TIME.findall(text)
    if not stamps:
        return None
    return datetime.fromisoformat(stamps[0]), datetime.fromisoformat(stamps[-1])


def gpu_samples(gpu_csv: Path) -> dict[int, list[tuple[datetime, int]]]:
    """nvidia-smi's ``timestamp, pid, used_memory`` rows by pid: (time, MiB)."""
    out: dict[int, list[tuple[datetime, int]]] = {}
    if not gpu_csv.is_file():
        return out
    for row in csv.reader(gpu_csv.read_text().splitlines()):
        try:
            when = datetime.strptime(row[0].strip().split(".")[0], "%Y/%m/%d %H:%M:%S")
            pid, mib = int(row[1]), int(row[2].strip().split()[0])
        except (IndexError, ValueError):
            continue
        out.setdefault(pid, []).append((when, mib))
    return out


def peak_in(window: tuple[datetime, datetime] | None, samples: dict[int, list[tuple[datetime, int]]]) -> int | None:
    """Peak MiB of the GPU processes whose samples fall mostly inside the server's log window (the servers of
    ``run_memory.sh`` run one after another, so each window holds one scheduler)."""
    if window is None:
        return None
    lo, hi = window
    peaks = [
        max(m for _, m in rows) for rows in samples.values() if 2 * sum(lo <= t <= hi for t, _ in rows) > len(rows)
    ]
    return max(peaks) if peaks else None


def servers(variant: str, workdir: Path, samples: dict[int, list[tuple[datetime, int]]]) -> list[dict]:
    rows = []
    for log in sorted(workdir.glob("run-*-*.log")):
        text = log.read_text(errors="replace")
        mode = log.stem.split("-", 2)[2]
        row = {"variant": variant, "mode": mode, "log": log.name, **parse_log(text)}
        row["peak_gpu_mib"] = peak_in(log_window(text), samples)
        rows.append(row)
    return rows


def predict(row: dict, args: argparse.Namespace) -> dict | None:
    """The planner for this server's settings and measured budget (None when the log lacks the weight lines)."""
    if "free_before_weights_gb" not in row or "free_after_weights_gb" not in row:
        return None
    from sglang_mamba_dedup.cli import plan

    argv = [
        "--model-path" if args.model_path else "--shape",
        args.model_path or args.shape,
        "--max-running-requests",
        str(args.max_running_requests),
        "--mem-fraction-static",
        str(args.mem_fraction_static),
        "--speculative-num-draft-tokens",
        str(args.speculative_num_draft_tokens),
        "--gpu-memory-gb",
        str(row["free_before_weights_gb"]),
        "--weights-gb",
        f"{row['free_before_weights_gb'] - row['free_after_weights_gb']:.4f}",
    ]
    if row.get("replayssm"):
        argv.append("--enable-linear-replayssm-spec")
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = plan.main([*argv, "--json"])
    if rc != 0:
        raise RuntimeError(f"the planner exited {rc}: {err.getvalue().strip()}")
    doc = json.loads(out.getvalue())
    est = doc["plugin" if row["mode"] == "on" else "stock"]
    return {
        "budget_gb": round(doc["budget_gb"], 3),
        "mamba_slots": est["mamba_slots"],
        "running_requests": est["running_requests"],
        "reserved_gb": round(est["reserved_gb"], 3),
    }


def _fmt(v, spec: str = "") -> str:
    return "-" if v is None or v == "" else format(v, spec)


def table(rows: list[dict]) -> list[str]:
    lines = [
        "| variant | server | ReplaySSM | mamba slots: server / planner | running requests: server / planner "
        "| plugin's admission warning | mamba cache (SGLang's line, GB) | ledger: allocated / reserved (GiB) "
        "| planner's mamba reservation (GiB) | static budget: free before weights x fraction (GB) "
        "| weights + pools: free before weights - free after pools (GB) | KV tokens | peak GPU memory (MiB) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        p = r.get("planner") or {}
        budget = before = None
        if "free_before_weights_gb" in r:
            budget = r["free_before_weights_gb"] * r["mem_fraction_static"]
            if "free_after_pools_gb" in r:
                before = r["free_before_weights_gb"] - r["free_after_pools_gb"]
        ledger = (
            f"{_fmt(r.get('ledger_allocated_gib'), '.3f')} / {_fmt(r.get('ledger_reserved_gib'), '.3f')}"
            if "ledger_allocated_gib" in r
            else "-"
        )
        lines.append(
            f"| {r['variant']} | {r['mode']} | {'yes' if r.get('replayssm') else 'no'} "
            f"| {_fmt(r.get('mamba_slots'))} / {_fmt(p.get('mamba_slots'))} "
            f"| {_fmt(r.get('running_requests'))} / {_fmt(p.get('running_requests'))} "
            f"| {'caps at ' + str(r['admission_cap']) if 'admission_cap' in r else '-'} "
            f"| {_fmt(r.get('mamba_gb'), '.2f')} | {ledger} | {_fmt(p.get('reserved_gb'), '.3f')} "
            f"| {_fmt(budget, '.2f')} | {_fmt(before, '.2f')} | {_fmt(r.get('max_total_num_tokens'))} "
            f"| {_fmt(r.get('peak_gpu_mib'))} |"
        )
    return lines


CSV_FIELDS = [
    "variant",
    "mode",
    "replayssm",
    "mamba_slots",
    "planner_mamba_slots",
    "running_requests",
    "planner_running_requests",
    "admission_cap",
    "mamba_gb",
    "ledger_allocated_gib",
    "ledger_reserved_gib",
    "topup_gib",
    "planner_reserved_gb",
    "planner_budget_gb",
    "free_before_weights_gb",
    "free_after_weights_gb",
    "weights_gb",
    "free_after_pools_gb",
    "max_total_num_tokens",
    "peak_gpu_mib",
]


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="record_memory.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("variants", nargs="+", metavar="VARIANT=WORKDIR")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--model-path")
    src.add_argument("--shape")
    ap.add_argument("--max-running-requests", type=int, required=True)
    ap.add_argument("--mem-fraction-static", type=float, required=True)
    ap.add_argument("--speculative-num-draft-tokens", type=int, default=4)
    return ap


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    if any("=" not in v for v in args.variants):
        print("record_memory.py: each variant is VARIANT=WORKDIR", file=sys.stderr)
        return 2
    samples = gpu_samples(args.out / "gpu-apps.csv")
    rows: list[dict] = []
    complete = True
    for item in args.variants:
        variant, _, workdir = item.partition("=")
        found = servers(variant, Path(workdir), samples)
        if len(found) < len(MODES):
            print(f"record_memory.py: {variant}: {len(found)} server logs in {workdir}", file=sys.stderr)
            complete = False
        rows += found
    for r in rows:
        r["mem_fraction_static"] = args.mem_fraction_static
        try:
            r["planner"] = predict(r, args)
        except Exception as exc:  # noqa: BLE001 - the table still shows what the servers said
            r["planner"] = None
            r["planner_error"] = f"{type(exc).__name__}: {exc}"
        complete = complete and "mamba_slots" in r and "running_requests" in r and r["planner"] is not None
    lines = table(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "memory.md").write_text("\n".join(lines) + "\n")
    (args.out / "memory.json").write_text(json.dumps(rows, indent=1, default=str))
    with open(args.out / "memory.csv", "w", newline="") as f:
        w = csv.DictWriter(f, CSV_FIELDS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            flat = dict(r, **{f"planner_{k}": v for k, v in (r.get("planner") or {}).items()})
            w.writerow({k: ("" if flat.get(k) is None else flat.get(k)) for k in CSV_FIELDS})
    print("\n".join(lines))
    for r in rows:
        if r.get("planner_error"):
            print(f"{r['variant']} {r['mode']}: planner failed: {r['planner_error']}")
    return 0 if complete else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
