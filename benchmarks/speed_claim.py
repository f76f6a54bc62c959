"""What the decode-cycle measurements let us claim (issue 51 item 7): the README's speed row and zero-copy's default,
both computed from the combined verdicts (every ``latest/cycle_live_combined-<gpu>.csv``, ``bench_live.py
--combine``) and the consoles of the radix proofs (``latest/e2e_h200_*_zero_copy_radix_*.txt``, or ``e2e_h100_``); the README row
is written from here, never by hand (``tests/e2e/test_speed_claim.py`` checks it), and the plugin's default must be
the decision.

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
the decision lists what is missing. Where several cards measured a (model, radix setting), each card's verdict must
meet the rule at every batch (the default is one for every card), and the README shows the card that measured
every batch with the newest run. Zero-copy against SGLang's ReplaySSM-spec on Gated DeltaNet is told beside it
(both against stock, from their own pairs), not a condition: issue 50 item 5 asks for the comparison, item 7 for
the default. So is the GPU's busy time (``bench_live --gpu-busy``: zero-copy / stock over the same pairs), a measure
the host's state does not move: the default stays a claim about the wall users see.
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:  # its siblings, also when loaded by path (the tests)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from _live_stats import EQUAL, FASTER, RUNS_AGREE  # noqa: E402  (the verdict words and the runs' bound the rule reads)
from _live_stats import finite_number as _num  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
LATEST = ROOT / "benchmarks" / "results" / "latest"
README = ROOT / "README.md"
#: the combined verdicts, one file per card (its ``gpu`` column names the card; bench_live.py --combine)
COMBINED_GLOB = "cycle_live_combined-*.csv"

#: the models the default rests on (bench_live presets) and their names in the README
MODELS = {"qwen3.5-0.8b": "Qwen3.5-0.8B", "nemotron-h-mini": "Nemotron-H"}
BATCHES = (1, 16, 64, 128)
FAST_BATCHES = (64, 128)
#: the largest zero-copy/stock ratio at batches 64 and 128 that counts as the gain asked for (>= 4 % faster)
GAIN = 0.96
#: the largest max/min of the runs' own ratios: two runs agree within +-1 % (the benchmark's own bound)
AGREE = RUNS_AGREE
MIN_RUNS = 2
#: a release in a console's name (0.5.23, 0.5.13.post1)
REL = r"\d+\.\d+\.\d+(?:\.post\d+)?"
#: the lent card a console ran on, in its name (a proof checks md5s, not speed: an H100's proves as an H200's does)
GPU = r"h[12]00"
#: the radix proofs of issue 50 item 4 (tools/gpu-engine/run_e2e.sh E2E_PROOF=...) and the radix-off zero-copy proof
#: of each model (the default covers those launches too): model -> proof -> the whole name of a console that proves
#: it in LATEST, a regular expression (any release; a name is matched whole, so a negative-control console ending
#: the same way is not taken); a ``None`` model: on either model. The pressure and retraction proofs run with the
#: track interval lowered (they stand for the lowered-interval proof too), and ``radix-stress`` is both in one run.
PROOFS: dict[str | None, dict[str, str]] = {
    "qwen3.5-0.8b": {p: rf"e2e_{GPU}_{REL}_zero_copy_radix_{p}\.txt" for p in ("default", "lazy", "no_overlap")}
    | {"radix off": rf"e2e_{GPU}_{REL}_zero_copy_qwen35\.txt"},
    "nemotron-h-mini": {
        p: rf"e2e_{GPU}_{REL}_zero_copy_radix_{p}_nemotron_h\.txt" for p in ("default", "lazy", "no_overlap")
    }
    | {"radix off": rf"e2e_{GPU}_{REL}_zero_copy_nemotron_h\.txt"},
    None: {p: rf"e2e_{GPU}_{REL}_zero_copy_radix_(?:{p}|stress)(?:_nemotron_h)?\.txt" for p in ("pressure", "retract")}
    | {"sessions": rf"e2e_{GPU}_{REL}_zero_copy_radix_sessions(?:_nemotron_h)?\.txt"},
}
PASS = "RESULT: PASS"
#: the combined CSV's columns the rule and the row read
NEEDED = ("model", "batch", "mode", "runs", "ratio", "ci_lo", "ci_hi", "verdict", "runs_agree", "health")
#: the README row this module writes: the line starting with this
ROW_HEAD = "| decode cycle, zero-copy / stock wall"


@dataclass
class Decision:
    default_on: bool
    unmet: list[str] = field(default_factory=list)
    told: list[str] = field(default_factory=list)  # beside the decision (ReplaySSM on Gated DeltaNet)


class Unreadable(ValueError):
    """An input the claim cannot be made from, told in one line."""


def read_combined(path: Path) -> list[dict]:
    """The combined verdict rows; none when the file is absent. A row without ``radix_cache`` is radix off.
    :class:`Unreadable` for a file that is not the combined CSV (a generates CSV given by mistake, a folder, bytes)."""
    path = Path(path)
    if not path.exists():
        return []
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            missing = [c for c in NEEDED if c not in (reader.fieldnames or [])]
            if missing:
                raise Unreadable(
                    f"{path}: not the combined verdicts (no column {', '.join(missing)}): bench_live --combine"
                )
            rows = [{**r, "radix_cache": r.get("radix_cache") or "off"} for r in reader]
        for n, r in enumerate(rows, start=2):
            if not str(r.get("batch", "")).isdigit():
                raise Unreadable(f"{path} line {n}: batch {r.get('batch')!r} is not a whole number")
            if ";" in str(r.get("gpu") or ""):
                raise Unreadable(f"{path} line {n}: a verdict pooled over cards ({r['gpu']}): one card per verdict")
        return rows
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise Unreadable(f"{path}: unreadable ({type(e).__name__}: {str(e)[:120]})") from None


def read_named(paths: Sequence[Path]) -> list[dict]:
    """The combined verdicts of the files named (``--combined``): each must exist, and be named once."""
    seen: set[Path] = set()
    for f in map(Path, paths):
        if not f.exists():
            raise Unreadable(f"{f}: no such file")
        if f.resolve() in seen:
            raise Unreadable(f"{f}: named twice (its verdicts would count twice)")
        seen.add(f.resolve())
    return [r for f in paths for r in read_combined(Path(f))]


def read_latest(latest: Path = LATEST) -> list[dict]:
    """The combined verdicts of every card in ``latest`` (:data:`COMBINED_GLOB`), in one list."""
    files = sorted(f for f in Path(latest).glob(COMBINED_GLOB) if f.is_file()) if Path(latest).is_dir() else []
    return [r for f in files for r in read_combined(f)]


def gpu_of(r: Mapping) -> str:
    """The card a verdict row ran on, its whole name ("NVIDIA H100 80GB HBM3"); "" when the row does not say."""
    return str(r.get("gpu") or "")


def card(gpu: str) -> str:
    """A card's short name, for the reader ("H100" for "NVIDIA H100 80GB HBM3"); rows are told apart by the whole."""
    m = re.search(r"\b([A-Z]+\d{2,4}[A-Z]?)\b", gpu)
    return m.group(1) if m else gpu.strip()


def _run_time(run: str) -> str:
    """A run id's timestamp (``20261204T2054Z-A`` -> ``20261204T2054``); "" (the oldest) for an id without one."""
    m = re.match(r"(\d{8}T\d{4,6})", run)
    return m.group(1) if m else ""


def _index(rows: Sequence[Mapping]) -> dict[tuple[str, str, str, int], list[Mapping]]:
    """(model, radix, mode, batch) -> its verdict rows, one per card."""
    out: dict[tuple[str, str, str, int], list[Mapping]] = {}
    for r in rows:
        out.setdefault((r["model"], r["radix_cache"], r["mode"], int(r["batch"])), []).append(r)
    return out


def _row_problems(r: Mapping | None, batch: int) -> list[str]:
    """What keeps one (model, radix on, zero-copy, batch) verdict from supporting the default."""
    if r is None:
        return ["no combined verdict"]
    out = []
    ratio, runs = _num(r.get("ratio")), {x for x in str(r.get("runs", "")).split(";") if x}
    verdict, agree = r.get("verdict"), _num(r.get("runs_agree"))
    if batch in FAST_BATCHES:
        if verdict != FASTER or ratio is None or ratio > GAIN:
            out.append(f"not >= {(1 - GAIN) * 100:.0f} % faster ({r.get('ratio')}, {verdict})")
    elif verdict not in (FASTER, EQUAL) or ratio is None:
        out.append(f"not shown not slower ({r.get('ratio')}, {verdict})")
    if len(runs) < MIN_RUNS:
        out.append(f"{len(runs)} run(s), {MIN_RUNS} needed")
    elif agree is None or not 1 <= agree <= AGREE:
        busy = _num(r.get("busy_runs_agree"))
        why = (
            ""
            if busy is None
            else f"; the GPU busy time {busy:.4f} apart: the host's part moved"
            if busy <= AGREE
            else f"; the GPU busy time {busy:.4f} apart too"
        )
        need, had = _num(r.get("gens_needed")), _num(r.get("gens_had"))
        if need is not None and had is not None:  # bench_live's noise_split: what agreement would have taken
            why += (
                f"; spread from the {r.get('spread_from') or '?'}; ~{need:.0f} timed generates per mode needed at the "
                f"generates' noise, {had:.0f} had"
            )
        out.append(f"runs apart by {r.get('runs_agree')} (> {AGREE}{why})")
    if r.get("health") != "ok":
        out.append("health checks failed")
    return out


def passed_console(text: str) -> bool:
    """The console's last ``RESULT:`` line says PASS: run_e2e.sh appends its own FAIL line after the e2e's PASS
    when a proof's event is missing (no eviction, no retraction), so the first line alone would pass it."""
    results = [line for line in text.splitlines() if line.startswith("RESULT:")]
    return bool(results) and re.match(rf"{PASS}(\s|$)", results[-1]) is not None


def proof_problems(latest: Path = LATEST) -> list[str]:
    """The radix proofs without a passing console in ``latest`` (its files; folders are no consoles)."""
    out = []
    files = [f for f in Path(latest).glob("e2e_h*.txt") if f.is_file()] if Path(latest).is_dir() else []
    for model, proofs in PROOFS.items():
        for proof, pattern in proofs.items():
            found = sorted(f for f in files if re.fullmatch(pattern, f.name))
            passed = [p for p in found if passed_console(p.read_text(errors="replace"))]
            if not passed:
                where = MODELS[model] if model else "either model"
                what = "no console" if not found else "not passed"
                out.append(f"radix proof {proof} on {where}: {what} ({pattern})")
    return out


def decide(rows: Sequence[Mapping], latest: Path = LATEST) -> Decision:
    """Zero-copy's default from the combined verdicts ``rows`` and the proofs' consoles in ``latest`` (module doc)."""
    idx = _index(rows)
    unmet = []
    for model, name in MODELS.items():
        # every card that measured this model with the radix cache on answers for every batch
        gpus = sorted({gpu_of(r) for b in BATCHES for r in idx.get((model, "on", "zero-copy", b), [])})
        for gpu in gpus or [None]:
            on = f" on the {card(gpu)}" if gpu else ""
            for b in BATCHES:
                r = next((x for x in idx.get((model, "on", "zero-copy", b), []) if gpu_of(x) == gpu), None)
                unmet += [f"{name}, radix on, batch {b}{on}: {p}" for p in _row_problems(r, b)]
    unmet += proof_problems(latest)
    told = []
    for b in BATCHES:
        rs_by_gpu = {gpu_of(r): r for r in idx.get(("qwen3.5-0.8b", "on", "replayssm", b), [])}
        zs = idx.get(("qwen3.5-0.8b", "on", "zero-copy", b), [])
        pairs = [(z, rs_by_gpu[gpu_of(z)]) for z in zs if gpu_of(z) in rs_by_gpu]  # the same card only
        if not pairs:
            told.append(f"Qwen3.5-0.8B, radix on, batch {b}: zero-copy vs ReplaySSM-spec not measured")
        for z, rs in pairs:
            zr, rr = _num(z.get("ratio")), _num(rs.get("ratio"))
            than = "unknown" if zr is None or rr is None else "at least as fast as" if zr <= rr else "slower than"
            on = f" on the {card(gpu_of(z))}" if gpu_of(z) else ""
            told.append(
                f"Qwen3.5-0.8B, radix on, batch {b}{on}: zero-copy {z.get('ratio')} ({z.get('verdict')}) {than} "
                f"ReplaySSM-spec {rs.get('ratio')} ({rs.get('verdict')}), both vs stock"
            )
    for model, name in MODELS.items():  # the GPU's busy time beside the wall (bench_live --gpu-busy), not a condition
        busy = [
            (b, z)
            for b in BATCHES
            for mode in ("zero-copy", "replayssm")
            for z in idx.get((model, "on", mode, b), [])
            if _num(z.get("busy_ratio")) is not None
        ]
        if not busy:
            told.append(f"{name}, radix on: GPU busy time not measured (bench_live --gpu-busy)")
        for b, z in busy:
            on = f" on the {card(gpu_of(z))}" if gpu_of(z) else ""
            apart = f", runs apart by {z['busy_runs_agree']}" if z.get("busy_runs_agree") else ""
            few = z.get("busy_runs") and z["busy_runs"] != z.get("runs")
            apart += f", from {z['busy_runs']} only of {z.get('runs')}" if few else ""
            what = "zero-copy" if z.get("mode") == "zero-copy" else "ReplaySSM-spec"
            told.append(
                f"{name}, radix on, batch {b}{on}: GPU busy {what} / stock {z['busy_ratio']} "
                f"[{z.get('busy_ci_lo') or '-'}, {z.get('busy_ci_hi') or '-'}] ({z.get('busy_verdict')}{apart})"
            )
    return Decision(default_on=not unmet, unmet=unmet, told=told)


def _plural(n: int) -> str:
    return "" if n == 1 else "s"


def _verdicts(rs: Sequence[Mapping]) -> str:
    """'inconclusive at all' or 'faster at 64, 128; inconclusive at 1, 16'."""
    by: dict[str, list[str]] = {}
    for r in rs:
        by.setdefault(str(r["verdict"]).replace("equal within +-1 %", "equal"), []).append(str(r["batch"]))
    if len(by) == 1 and len(rs) == len(BATCHES):
        return f"{next(iter(by))} at all"
    return "; ".join(f"{v} at {', '.join(bs)}" for v, bs in by.items())


def readme_row(rows: Sequence[Mapping], decision: Decision) -> str:
    """The README's decode-cycle row: zero-copy / stock at each of :data:`BATCHES` with its 95 % interval over the
    Engine pairs ("-": not measured) and the verdicts, per model, for the radix cache on (the launch users run and
    the default's subject) once measured, else for it off (the README's 12 KiB hold two models, not four groups:
    the rest is in docs/benchmarks.md), and the default the data gives. A model measured on several cards shows the
    card that measured every batch with the newest run (named in the cell; every card's verdict counts in the
    decision)."""
    groups: dict[tuple[str, str, str], dict[int, Mapping]] = {}
    for r in rows:
        if r["mode"] == "zero-copy":
            groups.setdefault((r["model"], r["radix_cache"], gpu_of(r)), {})[int(r["batch"])] = r
    shown = "on" if any(radix == "on" for _, radix, _ in groups) else "off"
    newest: dict[str, tuple[tuple[bool, str], str]] = {}  # model -> ((all batches, newest run time), its card)
    for (model, radix, gpu), by_batch in sorted(groups.items()):
        last = max(_run_time(x) for r in by_batch.values() for x in [*str(r["runs"]).split(";"), ""])
        rank = (set(BATCHES) <= set(by_batch), last)  # a card with every batch first, then the newest
        if radix == shown and (model not in newest or rank > newest[model][0]):
            newest[model] = (rank, gpu)
    cells = []
    for (model, radix, gpu), by_batch in sorted(groups.items()):
        if radix != shown or newest[model][1] != gpu:
            continue
        rs = [by_batch[b] for b in sorted(by_batch)]
        runs = sorted({x for r in rs for x in str(r["runs"]).split(";") if x})
        days = sorted({f"{x[4:6]}-{x[6:8]}" for x in runs if re.match(r"\d{8}T", x)})
        ivs = " / ".join(_interval(by_batch.get(b)) for b in BATCHES)
        when = f" {days[0]}" + (f"…{days[-1]}" if len(days) > 1 else "") if days else ""
        on = f" ({card(gpu)})" if gpu else ""
        cells.append(
            f"{MODELS.get(model, model)} radix {radix}{on}, {len(runs)} run{_plural(len(runs))}{when}{_apart(rs)}: "
            f"{ivs}, {_verdicts(rs)}"
        )
    n = len(decision.unmet)
    default = "**on**" if decision.default_on else f"opt-in ({n} unmet conditions: `benchmarks/speed_claim.py`)"
    body = "; ".join(cells) if cells else "not measured"
    return (
        f"{ROW_HEAD}, 95 % over Engine pairs, batch {' / '.join(map(str, BATCHES))} | 1 | {body}. Default: {default} |"
    )


def _apart(rs: Sequence[Mapping]) -> str:
    """' (1.02-1.06 apart)' when the runs' own ratios are further apart than :data:`AGREE` at some batch (the pooled
    verdict then rests on runs that disagree, which the row says); '' when they agree or there is one run."""
    agree = [a for a in (_num(r.get("runs_agree")) for r in rs) if a is not None]
    if not agree or max(agree) <= AGREE:
        return ""
    lo, hi = min(agree), max(agree)
    return f" ({hi:.2f} apart)" if f"{lo:.2f}" == f"{hi:.2f}" else f" ({lo:.2f}-{hi:.2f} apart)"


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
    p.add_argument(
        "--combined",
        type=Path,
        nargs="+",
        help=f"the combined verdicts (bench_live.py --combine; default: every {COMBINED_GLOB} in --latest)",
    )
    p.add_argument("--latest", type=Path, default=LATEST, help="the folder of the proofs' consoles")
    p.add_argument("--readme", type=Path, default=README)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--write", action="store_true", help="write the row into the README")
    g.add_argument("--check", action="store_true", help="exit 1 when the README's row is not this data's row")
    args = p.parse_args(argv)
    try:
        rows = read_named(args.combined) if args.combined else read_latest(args.latest)
        d = decide(rows, args.latest)
        row = readme_row(rows, d)
        text = new = ""
        if args.write or args.check:
            text = args.readme.read_text()
            new = replace_row(text, row)
    except (Unreadable, OSError, UnicodeDecodeError, ValueError) as e:
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
