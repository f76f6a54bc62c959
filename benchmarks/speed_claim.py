"""What the decode-cycle measurements let us claim (issue 51 item 7): the README's speed row and zero-copy's default,
both computed from the combined verdicts (``latest/cycle_live_combined-<gpu>.csv``, ``bench_live.py --combine``) and
the consoles of the radix proofs (``latest/e2e_h200_*_zero_copy_radix_*.txt``); the README row is written from
here, never by hand (``tests/e2e/test_speed_claim.py`` checks it), and the plugin's default must be the decision.

    python3 benchmarks/speed_claim.py            # the decision with every unmet condition, then the README row
    python3 benchmarks/speed_claim.py --write    # the row into README.md (replaces the row starting ROW_HEAD)
    python3 benchmarks/speed_claim.py --check    # exit 1 when README.md's row is not this data's row

The rule (issue 51 item 7, issue 50 item 5): zero-copy is on by default wherever its gate passes only if, with the
radix cache on (SGLang's default launch), on **both** models (:data:`MODELS`), zero-copy against stock

* at batches 64 and 128 is ``faster`` (the 95 % interval over the Engine pairs below 1 - 1 %) with a ratio of at
  most :data:`GAIN` (>= 4 % faster),
* at batches 1 and 16 is ``faster`` or ``equal within +-1 %`` (an inconclusive interval does not show "not slower"),
* rests on at least :data:`MIN_RUNS` runs whose own ratios agree within +-1 % (``runs_agree`` <= :data:`AGREE`) and
  whose health checks passed (``health`` ok),

and every radix proof of :data:`PROOFS` has its console with ``RESULT: PASS``. Otherwise zero-copy stays opt-in and
the decision lists what is missing. Zero-copy against SGLang's ReplaySSM-spec on Gated DeltaNet is told beside it
(both against stock, from their own pairs), not a condition: issue 50 item 5 asks for the comparison, item 7 for
the default.
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LATEST = ROOT / "benchmarks" / "results" / "latest"
README = ROOT / "README.md"
COMBINED = LATEST / "cycle_live_combined-nvidia-h200.csv"

#: the models the default rests on (bench_live presets) and their names in the README
MODELS = {"qwen3.5-0.8b": "Qwen3.5-0.8B", "nemotron-h-mini": "Nemotron-H"}
BATCHES = (1, 16, 64, 128)
FAST_BATCHES = (64, 128)
#: the largest zero-copy/stock ratio at batches 64 and 128 that counts as the gain asked for (>= 4 % faster)
GAIN = 0.96
#: the largest max/min of the runs' own ratios: two runs agree within +-1 %
AGREE = 1.01
MIN_RUNS = 2
#: the radix proofs of issue 50 item 4 (tools/gpu-engine/run_e2e.sh E2E_PROOF=...) and the radix-off zero-copy proof
#: of each model (the default covers those launches too): model -> proof -> the name
#: patterns of a console that proves it, in LATEST (any release); a ``None`` model: on either model. The pressure
#: and retraction proofs run with the track interval lowered (they stand for the lowered-interval proof too), and
#: ``radix-stress`` is both in one run.
PROOFS: dict[str | None, dict[str, tuple[str, ...]]] = {
    "qwen3.5-0.8b": {p: (f"e2e_h200_*_zero_copy_radix_{p}.txt",) for p in ("default", "lazy", "no_overlap")}
    | {"radix off": ("e2e_h200_*_zero_copy_qwen35.txt",)},
    "nemotron-h-mini": {
        p: (f"e2e_h200_*_zero_copy_radix_{p}_nemotron_h.txt",) for p in ("default", "lazy", "no_overlap")
    }
    | {"radix off": ("e2e_h200_*_zero_copy_nemotron_h.txt",)},
    None: {
        p: (f"e2e_h200_*_zero_copy_radix_{p}*.txt", "e2e_h200_*_zero_copy_radix_stress*.txt")
        for p in ("pressure", "retract")
    }
    | {"sessions": ("e2e_h200_*_zero_copy_radix_sessions*.txt",)},
}
PASS = "RESULT: PASS"
#: the README row this module writes: the line starting with this
ROW_HEAD = "| decode cycle, zero-copy / stock wall"


@dataclass
class Decision:
    default_on: bool
    unmet: list[str] = field(default_factory=list)
    told: list[str] = field(default_factory=list)  # beside the decision (ReplaySSM on Gated DeltaNet)


def read_combined(path: Path = COMBINED) -> list[dict]:
    """The combined verdict rows; none when the file is absent. A row without ``radix_cache`` is radix off."""
    if not Path(path).exists():
        return []
    with open(path, newline="") as f:
        return [{**r, "radix_cache": r.get("radix_cache") or "off"} for r in csv.DictReader(f)]


def _index(rows: Sequence[Mapping]) -> dict[tuple[str, str, str, int], Mapping]:
    return {(r["model"], r["radix_cache"], r["mode"], int(r["batch"])): r for r in rows}


def _num(x) -> float | None:
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def _row_problems(r: Mapping | None, batch: int) -> list[str]:
    """What keeps one (model, radix on, zero-copy, batch) verdict from supporting the default."""
    if r is None:
        return ["no combined verdict"]
    out = []
    ratio, runs = _num(r.get("ratio")), [x for x in str(r.get("runs", "")).split(";") if x]
    if batch in FAST_BATCHES:
        if r.get("verdict") != "faster" or ratio is None or ratio > GAIN:
            out.append(f"not >= {(1 - GAIN) * 100:.0f} % faster ({r.get('ratio')}, {r.get('verdict')})")
    elif not (r.get("verdict") == "faster" or str(r.get("verdict", "")).startswith("equal")):
        out.append(f"not shown not slower ({r.get('ratio')}, {r.get('verdict')})")
    if len(runs) < MIN_RUNS:
        out.append(f"{len(runs)} run(s), {MIN_RUNS} needed")
    elif (_num(r.get("runs_agree")) or float("inf")) > AGREE:
        out.append(f"runs apart by {r.get('runs_agree')} (> {AGREE})")
    if r.get("health") != "ok":
        out.append("health checks failed")
    return out


def passed_console(text: str) -> bool:
    """The console's last ``RESULT:`` line says PASS: run_e2e.sh appends its own FAIL line after the e2e's PASS
    when a proof's event is missing (no eviction, no retraction), so the first line alone would pass it."""
    results = [line for line in text.splitlines() if line.startswith("RESULT:")]
    return bool(results) and results[-1].startswith(PASS)


def proof_problems(latest: Path = LATEST) -> list[str]:
    """The radix proofs without a passing console in ``latest``."""
    out = []
    for model, proofs in PROOFS.items():
        for proof, patterns in proofs.items():
            found = sorted({f for pattern in patterns for f in Path(latest).glob(pattern)})
            passed = [p for p in found if passed_console(p.read_text(errors="replace"))]
            if not passed:
                where = MODELS[model] if model else "either model"
                what = "no console" if not found else "not passed"
                out.append(f"radix proof {proof} on {where}: {what} ({' or '.join(patterns)})")
    return out


def decide(rows: Sequence[Mapping], latest: Path = LATEST) -> Decision:
    """Zero-copy's default from the combined verdicts ``rows`` and the proofs' consoles in ``latest`` (module doc)."""
    idx = _index(rows)
    unmet = []
    for model, name in MODELS.items():
        for b in BATCHES:
            for p in _row_problems(idx.get((model, "on", "zero-copy", b)), b):
                unmet.append(f"{name}, radix on, batch {b}: {p}")
    unmet += proof_problems(latest)
    told = []
    for b in BATCHES:
        z, rs = idx.get(("qwen3.5-0.8b", "on", "zero-copy", b)), idx.get(("qwen3.5-0.8b", "on", "replayssm", b))
        if z is None or rs is None:
            told.append(f"Qwen3.5-0.8B, radix on, batch {b}: zero-copy vs ReplaySSM-spec not measured")
            continue
        zr, rr = _num(z.get("ratio")), _num(rs.get("ratio"))
        than = "unknown" if zr is None or rr is None else "at least as fast as" if zr <= rr else "slower than"
        told.append(
            f"Qwen3.5-0.8B, radix on, batch {b}: zero-copy {z.get('ratio')} ({z.get('verdict')}) {than} "
            f"ReplaySSM-spec {rs.get('ratio')} ({rs.get('verdict')}), both vs stock"
        )
    return Decision(default_on=not unmet, unmet=unmet, told=told)


def _verdicts(rs: Sequence[Mapping]) -> str:
    """'inconclusive at all' or 'faster at 64, 128; inconclusive at 1, 16'."""
    by: dict[str, list[str]] = {}
    for r in rs:
        by.setdefault(str(r["verdict"]).replace("equal within +-1 %", "equal"), []).append(str(r["batch"]))
    if len(by) == 1 and len(rs) == len(BATCHES):
        return f"{next(iter(by))} at all"
    return "; ".join(f"{v} at {', '.join(bs)}" for v, bs in by.items())


def readme_row(rows: Sequence[Mapping], decision: Decision) -> str:
    """The README's decode-cycle row: per model and radix setting (radix off first), zero-copy / stock at each of
    :data:`BATCHES` with its 95 % interval over the Engine pairs ("-": not measured), the verdicts, and the default
    the data gives."""
    groups: dict[tuple[str, str], dict[int, Mapping]] = {}
    for r in rows:
        if r["mode"] == "zero-copy":
            groups.setdefault((r["model"], r["radix_cache"]), {})[int(r["batch"])] = r
    cells = []
    for (model, radix), by_batch in sorted(groups.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        rs = [by_batch[b] for b in sorted(by_batch)]
        runs = sorted({x for r in rs for x in str(r["runs"]).split(";") if x})
        days = sorted({f"{x[4:6]}-{x[6:8]}" for x in runs if re.match(r"\d{8}T", x)})
        ivs = " / ".join(_interval(by_batch.get(b)) for b in BATCHES)
        when = f" {', '.join(days)}" if days else ""
        cells.append(f"{MODELS.get(model, model)} radix {radix}, {len(runs)} runs{when}: {ivs}, {_verdicts(rs)}")
    n = len(decision.unmet)
    default = "**on**" if decision.default_on else f"opt-in ({n} conditions unmet, `benchmarks/speed_claim.py`)"
    body = "; ".join(cells) if cells else "not measured"
    return (
        f"{ROW_HEAD}, 95 % over Engine pairs, batch {' / '.join(map(str, BATCHES))} | 1 | {body}. Default: {default} |"
    )


def _interval(r: Mapping | None) -> str:
    if r is None or _num(r.get("ratio")) is None:
        return "-"
    if _num(r.get("ci_lo")) is None or _num(r.get("ci_hi")) is None:
        return f"{float(r['ratio']):.2f}"
    return f"{float(r['ratio']):.2f} [{float(r['ci_lo']):.2f}, {float(r['ci_hi']):.2f}]"


def replace_row(text: str, row: str) -> str:
    """``text`` (the README) with its line starting :data:`ROW_HEAD` replaced by ``row``; ValueError when the README
    has none or several."""
    lines = text.split("\n")
    at = [i for i, line in enumerate(lines) if line.startswith(ROW_HEAD)]
    if len(at) != 1:
        raise ValueError(f"README: {len(at)} lines start with {ROW_HEAD!r}, 1 expected")
    lines[at[0]] = row
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="speed_claim.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--combined", type=Path, default=COMBINED, help="the combined verdicts (bench_live.py --combine)")
    p.add_argument("--latest", type=Path, default=LATEST, help="the folder of the proofs' consoles")
    p.add_argument("--readme", type=Path, default=README)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--write", action="store_true", help="write the row into the README")
    g.add_argument("--check", action="store_true", help="exit 1 when the README's row is not this data's row")
    args = p.parse_args(argv)
    rows = read_combined(args.combined)
    d = decide(rows, args.latest)
    row = readme_row(rows, d)
    text = new = ""
    if args.write or args.check:
        text = args.readme.read_text()
        try:
            new = replace_row(text, row)
        except ValueError as e:
            print(f"speed_claim.py: {e}", file=sys.stderr)
            return 2
    if args.check:
        if new != text:
            print(f"speed_claim.py: {args.readme}'s row is not the data's; run benchmarks/speed_claim.py --write")
            return 1
        return 0
    print(f"zero-copy's default: {'on wherever its gate passes' if d.default_on else 'opt-in'}")
    for u in d.unmet:
        print(f"  unmet: {u}")
    for t in d.told:
        print(f"  told: {t}")
    print(row)
    if args.write and new != text:
        args.readme.write_text(new)
        print(f"written: {args.readme}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
