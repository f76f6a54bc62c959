"""The results of ``run_memory.sh`` (real ``launch_server`` starts at memory-tight settings, plugin off / on, per
variant) in one table, with the planner's prediction for the very launch that ran beside each server. Test
infrastructure, not part of the package.

    python3 -P tools/gpu-engine/record_memory.py OUT WORKDIR [--model-map FROM=TO ...]

WORKDIR holds, per server, ``<variant>-<mode>.log`` (its log; mode ``off`` or ``on``) and ``<variant>-<mode>.argv``
(its launch flags, one per line; the plugin's ``--enable-mamba-conv-dedup`` of an ``on`` server is not among
them). ``--model-map FROM=TO`` rewrites a path prefix in the flags (the device's ``/tmp/smd-model-<preset>`` vs a
local copy of the checkpoint). From each log it reads SGLang's lines (free memory before and after the weights,
both weight loads' ``mem usage``, the mamba cache line, ``max_total_num_tokens`` and ``max_running_requests``, its
cap warning) and the plugin's (the estimator's budget, its give-back, the admission lift, the ledger). The planner
(``sglang-mamba-dedup plan``) runs twice per server on its flags: ``prediction`` with the log's free memory before
the weights as the GPU's memory (the CPU's prediction from the flags and the checkpoint), and ``at_budget`` with
``--rest-gb`` = the budget SGLang handed the mamba estimator (on servers, whose log has the plugin's budget line);
``stock`` is compared with an off server, ``plugin`` with an on server. ``OUT/gpu-apps.csv`` (or
``WORKDIR/gpu-apps.csv``; nvidia-smi ``timestamp, pid, used_memory``), where present, gives each server's peak GPU
memory (JSON and CSV). Writes ``OUT/memory.md``, ``OUT/memory.csv`` and ``OUT/memory.json``; prints the table and
the agreement of server and planner. Exit 0 when every server was parsed (mamba slots and running requests) and
the planner ran on it, 1 otherwise (the table is still written), 2 on a usage error.
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
from typing import Any

_NUM = r"([0-9]+(?:\.[0-9]+)?)"
# SGLang's lines (0.5.23's wording; the first occurrence is the target model's runner)
LINES = {
    "free_before_weights_gb": re.compile(rf"Load weight begin\. avail mem={_NUM} GB"),
    "free_after_weights_gb": re.compile(rf"Load weight end\..*?avail mem={_NUM} GB"),
    "mamba_slots": re.compile(r"Mamba Cache is allocated\. max_mamba_cache_size: ([0-9]+)"),
    "free_after_pools_gb": re.compile(rf"Memory pool end\. avail mem={_NUM} GB"),
    "max_total_num_tokens": re.compile(r"max_total_num_tokens=([0-9]+)"),
    "running_requests": re.compile(r"\bmax_running_requests=([0-9]+)"),
    "sglang_cap_warning": re.compile(r"max_running_requests is capped to ([0-9]+) by the mamba state cache"),
    # the plugin's lines (patches/dedup_layout.py via ledger.py, patches/estimator.py)
    "ledger_allocated_gib": re.compile(rf"mamba memory ledger: \w+ allocates {_NUM} GiB"),
    "ledger_reserved_gib": re.compile(rf"mamba memory ledger: .*?the estimator reserved {_NUM} GiB"),
    "topup_gib": re.compile(rf"mamba cache estimator reserves {_NUM} GiB \(\d+ bytes\) more"),
    "giveback_gib": re.compile(rf"mamba cache estimator gives {_NUM} GiB \(\d+ bytes\) back to the KV cache"),
    "estimator_budget_bytes": re.compile(r"mamba cache estimator budget [0-9.]+ GiB \(([0-9]+) bytes\)"),
    "admission_cap": re.compile(r"caps running requests at ([0-9]+) of the [0-9]+ asked for"),
}
# SGLang's weight loads: the target's and the draft's (MTP), one line each
WEIGHTS = re.compile(rf"Load weight end\..*?mem usage={_NUM} GB")
# the plugin's admission line: INFO where SGLang warns of the cap itself, else its WARNING
LIFTS = (
    re.compile(r"sglang-mamba-dedup: to admit all [0-9]+ requests asked for: (.*)$", re.M),
    re.compile(r"sglang-mamba-dedup: the mamba state pool caps running requests .*? To admit them all: (.*)$", re.M),
)
MAMBA_SIZES = re.compile(rf"(\w+) size: {_NUM}GB")  # the mamba cache line's buffers
REPLAYSSM = re.compile(r"ReplaySSM ring buffers allocated")
INTS = {
    "mamba_slots",
    "max_total_num_tokens",
    "running_requests",
    "admission_cap",
    "sglang_cap_warning",
    "estimator_budget_bytes",
}
MODES = ("off", "on")
ESTIMATE = {"off": "stock", "on": "plugin"}
KV_TOLERANCE = 0.01  # KV tokens agree within 1 %


def parse_log(text: str) -> dict:
    """What one server's log says about its memory (absent keys: the line was not in the log)."""
    got: dict = {}
    for key, rx in LINES.items():
        m = rx.search(text)
        if m:
            got[key] = int(m.group(1)) if key in INTS else float(m.group(1))
    loads = [float(v) for v in WEIGHTS.findall(text)]
    if loads:
        got["weights_gb"] = round(sum(loads), 4)  # target + draft
        got["weight_loads"] = len(loads)
    for rx in LIFTS:
        m = rx.search(text)
        if m:
            got["plugin_lift"] = m.group(1).strip().removesuffix(".")
            break
    line = next((ln for ln in text.splitlines() if "Mamba Cache is allocated." in ln), "")
    sizes = {name: float(v) for name, v in MAMBA_SIZES.findall(line)}
    if sizes:
        got["mamba_buffers_gb"] = sizes
        got["mamba_gb"] = round(sum(sizes.values()), 2)
    got["replayssm"] = bool(REPLAYSSM.search(text))
    return got


_LOG_TIME = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)", re.M)  # SGLang's "[2026-12-01 17:18:55 TP0] ..."


def log_window(text: str) -> tuple[datetime, datetime] | None:
    """First and last valid time stamp of a server log (a stamp that is no date, e.g. a torn line, is skipped)."""
    stamps = []
    for raw in _LOG_TIME.findall(text):
        try:
            stamps.append(datetime.fromisoformat(raw))
        except ValueError:
            continue
    if not stamps:
        return None
    return stamps[0], stamps[-1]


def gpu_samples(gpu_csv: Path) -> dict[int, list[tuple[datetime, int]]]:
    """nvidia-smi's ``timestamp, pid, used_memory`` rows by pid: (time, MiB)."""
    out: dict[int, list[tuple[datetime, int]]] = {}
    if not gpu_csv.is_file():
        return out
    for row in csv.reader(gpu_csv.read_text(errors="replace").splitlines()):
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


def map_models(argv: list[str], model_map: list[tuple[str, str]]) -> list[str]:
    """``argv`` with each path prefix ``FROM`` rewritten to ``TO`` (a whole argument or a ``--flag=`` value)."""
    out = []
    for arg in argv:
        for old, new in model_map:
            if arg.startswith(old):
                arg = new + arg[len(old) :]
                break
            flag, eq, value = arg.partition("=")
            if eq and flag.startswith("--") and value.startswith(old):
                arg = f"{flag}={new}{value[len(old) :]}"
                break
        out.append(arg)
    return out


def server_files(workdir: Path) -> tuple[list[tuple[str, str, Path, Path]], list[str]]:
    """``(variant, mode, log, argv file)`` per server in run order of the variants' names, and notes on the logs
    that are not one (no ``-off``/``-on`` suffix, no argv file)."""
    found, notes = [], []
    for log in sorted(workdir.glob("*.log")):
        variant, _, mode = log.stem.rpartition("-")
        if mode not in MODES or not variant:
            notes.append(f"{log.name}: not <variant>-off.log or <variant>-on.log; skipped")
            continue
        argv_file = log.with_suffix(".argv")
        if not argv_file.is_file():
            notes.append(f"{log.name}: no {argv_file.name} beside it; skipped")
            continue
        found.append((variant, mode, log, argv_file))
    found.sort(key=lambda f: (f[0], MODES.index(f[1])))
    return found, notes


def plan_doc(own: list[str], argv: list[str], cache: dict) -> dict[str, Any]:
    """``sglang-mamba-dedup plan <own> --json -- <argv>`` as JSON (once per flags: an off and an on server of a
    variant share them). Raises on a planner error."""
    key = (tuple(own), tuple(argv))
    if key in cache:
        return cache[key]
    from sglang_mamba_dedup.planner import plan

    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = plan.main([*own, "--json", "--", *argv])
    except SystemExit as exc:  # argparse: a usage error
        rc = exc.code if isinstance(exc.code, int) else 2
    if rc != 0:
        msg = err.getvalue().strip().splitlines()
        raise RuntimeError(f"the planner exited {rc}: {msg[-1] if msg else 'no message'}")
    cache[key] = json.loads(out.getvalue())
    return cache[key]


def run_plan(own: list[str], argv: list[str], mode: str, cache: dict) -> dict[str, Any]:
    """The planner's estimate of the server's kind (stock for an off server, the plugin's for an on one) and the
    budget and weights it was made for."""
    doc = plan_doc(own, argv, cache)
    est = doc[ESTIMATE[mode]]
    return {
        "flags": own,
        "estimate": ESTIMATE[mode],
        "mamba_slots": est["mamba_slots"],
        "slots_per_request": est["slots_per_request"],
        "running_requests": est["running_requests"],
        "reserved_gb": est["reserved_gb"],
        "kv_tokens": est.get("kv_tokens"),
        "capped_by_mamba_pool": est.get("capped_by_mamba_pool"),
        "fraction_needed": est.get("fraction_needed"),
        "budget_gb": doc["budget_gb"],
        "weights_gb": doc["weights"]["gb"],
    }


def _planned(row: dict, key: str, own: list[str], cache: dict) -> None:
    try:
        row[key] = run_plan(own, row["argv"], row["mode"], cache)
    except Exception as exc:  # noqa: BLE001 - the table still shows what the server said
        row[key] = None
        row["errors"].append(f"planner ({key}): {type(exc).__name__}: {exc}")


def server_row(variant: str, mode: str, log: Path, argv_file: Path, model_map, samples, cache: dict) -> dict:
    text = log.read_text(errors="replace")
    row: dict[str, Any] = {"variant": variant, "mode": mode, "log": log.name, **parse_log(text)}
    row["argv"] = map_models(argv_file.read_text(errors="replace").splitlines(), model_map)
    row["peak_gpu_mib"] = peak_in(log_window(text), samples)
    row["errors"] = []
    for key in ("mamba_slots", "running_requests"):
        if key not in row:
            row["errors"].append(f"the log has no {key} line")
    if "free_before_weights_gb" in row:
        _planned(row, "prediction", ["--gpu-memory-gb", repr(row["free_before_weights_gb"])], cache)
    else:
        row["prediction"] = None
        row["errors"].append("the log has no 'Load weight begin. avail mem=' line: no prediction")
    row["at_budget"] = None
    if "estimator_budget_bytes" in row:
        _planned(row, "at_budget", ["--rest-gb", repr(row["estimator_budget_bytes"] / 2**30)], cache)
    row["agreement"] = agreement(row)
    return row


def _kv_close(server, planner) -> bool | None:
    if server is None or planner is None:
        return None
    return abs(planner - server) <= KV_TOLERANCE * server


def agreement(row: dict) -> dict[str, bool | None]:
    """Whether the planner's slots and running requests equal the server's and its KV tokens are within 1 %
    (None: one side is missing)."""
    got: dict[str, bool | None] = {}
    for key in ("prediction", "at_budget"):
        p = row.get(key) or {}
        for what in ("mamba_slots", "running_requests"):
            a, b = row.get(what), p.get(what)
            got[f"{key}_{what}"] = None if a is None or b is None else a == b
        got[f"{key}_kv_tokens"] = _kv_close(row.get("max_total_num_tokens"), p.get("kv_tokens"))
    return got


def _fmt(v, spec: str = "") -> str:
    return "-" if v is None or v == "" else format(v, spec)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _yes(v: bool | None) -> str:
    return "-" if v is None else ("yes" if v else "NO")


def _fraction(p: dict) -> str:
    if not p:
        return "-"
    if not p.get("capped_by_mamba_pool"):
        return "not capped"
    return _fmt(p.get("fraction_needed"), ".2f") if p.get("fraction_needed") is not None else "none below 1"


def _kv(r: dict, p: dict) -> str:
    server, planner = r.get("max_total_num_tokens"), p.get("kv_tokens")
    diff = f" ({(planner - server) / server * 100:+.2f} %)" if server and planner is not None else ""
    return f"{_fmt(server)} / {_fmt(planner)}{diff}"


def _plugin_line(r: dict) -> str:
    parts = []
    if "plugin_lift" in r:
        parts.append(f"lift: {r['plugin_lift']}")
    if "giveback_gib" in r:
        parts.append(f"gives back {r['giveback_gib']:.3f} GiB")
    return _cell("; ".join(parts)) if parts else "-"


def table(rows: list[dict]) -> list[str]:
    lines = [
        "| variant | server | mamba slots: server / planner / planner at the server's budget "
        "| running requests: server / planner / at budget | KV tokens: server / planner (difference) "
        "| ledger: allocated / reserved (GiB) | SGLang's cap warning | the plugin's line (lift / give-back) "
        "| planner's fraction for all requests | weights: server / planner (GB) | free at load (GB) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        p, b = r.get("prediction") or {}, r.get("at_budget") or {}
        ledger = (
            f"{_fmt(r.get('ledger_allocated_gib'), '.3f')} / {_fmt(r.get('ledger_reserved_gib'), '.3f')}"
            if "ledger_allocated_gib" in r or "ledger_reserved_gib" in r
            else "-"
        )
        cap = f"capped to {r['sglang_cap_warning']}" if "sglang_cap_warning" in r else "-"
        lines.append(
            f"| {r['variant']} | {r['mode']} "
            f"| {_fmt(r.get('mamba_slots'))} / {_fmt(p.get('mamba_slots'))} / {_fmt(b.get('mamba_slots'))} "
            f"| {_fmt(r.get('running_requests'))} / {_fmt(p.get('running_requests'))} "
            f"/ {_fmt(b.get('running_requests'))} "
            f"| {_kv(r, p)} | {ledger} | {cap} | {_plugin_line(r)} | {_fraction(p)} "
            f"| {_fmt(r.get('weights_gb'), '.2f')} / {_fmt(p.get('weights_gb'), '.2f')} "
            f"| {_fmt(r.get('free_before_weights_gb'), '.2f')} |"
        )
    return lines


def agreement_table(rows: list[dict]) -> list[str]:
    lines = [
        "| variant | server | slots = planner | running = planner | KV tokens within 1 % "
        "| slots = at budget | running = at budget | KV tokens within 1 % at budget |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        a = r["agreement"]
        cells = [
            a[f"{k}_{w}"] for k in ("prediction", "at_budget") for w in ("mamba_slots", "running_requests", "kv_tokens")
        ]
        lines.append(f"| {r['variant']} | {r['mode']} | " + " | ".join(_yes(c) for c in cells) + " |")
    return lines


SERVER_FIELDS = [
    "variant",
    "mode",
    "log",
    "mamba_slots",
    "running_requests",
    "max_total_num_tokens",
    "sglang_cap_warning",
    "admission_cap",
    "plugin_lift",
    "giveback_gib",
    "topup_gib",
    "estimator_budget_bytes",
    "ledger_allocated_gib",
    "ledger_reserved_gib",
    "mamba_gb",
    "replayssm",
    "free_before_weights_gb",
    "free_after_weights_gb",
    "weights_gb",
    "weight_loads",
    "free_after_pools_gb",
    "peak_gpu_mib",
]
PLANNER_FIELDS = [
    "mamba_slots",
    "slots_per_request",
    "running_requests",
    "reserved_gb",
    "kv_tokens",
    "fraction_needed",
    "budget_gb",
    "weights_gb",
]
CSV_FIELDS = (
    SERVER_FIELDS
    + [f"{k}_{f}" for k in ("prediction", "at_budget") for f in PLANNER_FIELDS]
    + [f"agree_{k}_{w}" for k in ("prediction", "at_budget") for w in ("mamba_slots", "running_requests", "kv_tokens")]
    + ["errors"]
)


def csv_row(r: dict) -> dict[str, Any]:
    flat: dict[str, Any] = {k: r.get(k) for k in SERVER_FIELDS}
    for key in ("prediction", "at_budget"):
        p = r.get(key) or {}
        flat.update({f"{key}_{f}": p.get(f) for f in PLANNER_FIELDS})
    flat.update({f"agree_{k}": v for k, v in r["agreement"].items()})
    flat["errors"] = "; ".join(r["errors"])
    return {k: "" if flat.get(k) is None else flat[k] for k in CSV_FIELDS}


def complete(r: dict) -> bool:
    """The server was parsed and the planner ran on it (at the server's budget too where the log gives one)."""
    return (
        "mamba_slots" in r
        and "running_requests" in r
        and r.get("prediction") is not None
        and ("estimator_budget_bytes" not in r or r.get("at_budget") is not None)
    )


def _pair(text: str) -> tuple[str, str]:
    old, eq, new = text.partition("=")
    if not eq or not old:
        raise argparse.ArgumentTypeError(f"must be FROM=TO, got {text!r}")
    return old, new


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="record_memory.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("workdir", type=Path, help="run_memory.sh's work folder: <variant>-<mode>.log and .argv")
    ap.add_argument(
        "--model-map",
        type=_pair,
        action="append",
        default=[],
        metavar="FROM=TO",
        help="rewrite a model path prefix in the launch flags (e.g. /tmp/smd-model-=/data/smd-model-)",
    )
    return ap


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    if not args.workdir.is_dir():
        print(f"record_memory.py: {args.workdir} is not a folder", file=sys.stderr)
        return 2
    gpu_csv = args.out / "gpu-apps.csv"
    samples = gpu_samples(gpu_csv if gpu_csv.is_file() else args.workdir / "gpu-apps.csv")
    found, notes = server_files(args.workdir)
    for note in notes:
        print(f"record_memory.py: {note}", file=sys.stderr)
    cache: dict = {}
    rows = [server_row(*f, args.model_map, samples, cache) for f in found]
    if not rows:
        print(f"record_memory.py: no server logs with their argv files in {args.workdir}", file=sys.stderr)
    lines = table(rows)
    agree = agreement_table(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "memory.md").write_text("\n".join(lines) + "\n\nagreement:\n\n" + "\n".join(agree) + "\n")
    (args.out / "memory.json").write_text(json.dumps(rows, indent=1, default=str))
    with open(args.out / "memory.csv", "w", newline="") as f:
        w = csv.DictWriter(f, CSV_FIELDS)
        w.writeheader()
        for r in rows:
            w.writerow(csv_row(r))
    print("\n".join(lines))
    print("\nagreement:\n")
    print("\n".join(agree))
    for r in rows:
        for err in r["errors"]:
            print(f"{r['variant']} {r['mode']}: {err}")
    return 0 if rows and all(complete(r) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
