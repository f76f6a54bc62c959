"""Every line ``sglang-mamba-dedup e2e`` prints, from the state :mod:`.driver` and :mod:`.verdict` hand it.

Standard output, flushed line by line (a killed call still shows how far it got); the lines on stderr are the
ones that say why nothing ran or where the logs of an interrupted call are. The ``RESULT`` line is always the
last one (:func:`result`). The per-pair lines of ``--throughput`` are printed by :func:`.paired.run_pairs` as
the pairs run, through :func:`say`.
"""

from __future__ import annotations

import datetime as _dt
import json
import platform
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..env import FAULT, FLAG, SWITCH, ZERO_COPY, ZERO_COPY_RADIX
from ..patches import faults
from .context import RunContext, RunResult
from .reports import commit_counts, describe_report
from .server import describe_command
from .settings import describe_settings
from .stats import fmt_rate, pair_table
from .verdict import EXIT_CANNOT_RUN, EXIT_OK, Verdict, decode_tracked_tokens, negative_control_text

#: The command's name in its messages (and argparse's ``prog``).
PROG = "sglang-mamba-dedup e2e"


def say(*a: Any) -> None:
    print(*a, flush=True)


def _err(text: str) -> None:
    print(f"{PROG}: {text}", file=sys.stderr, flush=True)


def usage_error(message: str) -> None:
    """A usage error found once the prompts are read (argparse's own form: one "error:" line)."""
    _err(f"error: {message} (see --help)")


def cannot_run(problem: str) -> None:
    _err(f"cannot run here: {problem}; nothing was built or run (exit {EXIT_CANNOT_RUN})")


def stopped(signal_name: str, code: int) -> None:
    say(f"{PROG}: stopped by {signal_name}; the servers it started are stopped (exit {code})")


def kept_line(work: Path) -> str:
    return f"the logs are kept in {work} (a temporary folder: remove it when done; --workdir chooses the folder)"


def kept_after_interruption(work: Path) -> None:
    _err(kept_line(work))


def topk_warning(topk: int) -> None:
    say(f"warning: topk {topk} means tree verify; the dedup layout only applies to topk 1")


def built_model(preset: str, seed: int, seconds: float, target: Path, temporary: bool) -> None:
    say(
        f"built random-weight model {preset} (seed {seed}) in {seconds:.1f} s: {target}"
        + (" (temporary: removed at exit)" if temporary else "")
    )


def removed_checkpoint(path: Path) -> None:
    say(f"removed the temporary random-weight checkpoint {path} (--workdir or --random-weights-dir keep it)")


def not_written(option: str, path: str, exc: OSError) -> None:
    say(f"{option} {path}: not written ({type(exc).__name__}: {exc})")


# ----------------------------------------------------------------------------- before the runs
def header(ctx: RunContext, spec: Mapping[str, Any], model_path: str, random_info: dict | None, work: Path) -> None:
    args = ctx.args
    prompts = spec["prompts"]
    fmt = spec["prompt_format"]
    prompt_tokens = sum(len(p) for p in prompts) if fmt == "ids" else None
    kw = spec["engine_kwargs"]
    say("== sglang-mamba-dedup e2e: greedy md5, plugin off vs on ==")
    say(f"date: {_dt.datetime.now(_dt.UTC).strftime('%Y-%m-%d %H:%M:%S UTC')}; host {platform.node()}")
    model = f"model: {model_path}"
    if random_info:
        model += (
            f" (random weights: preset {random_info.get('preset')}, seed {random_info.get('seed')}, "
            f"{random_info.get('num_parameters', 0):,} parameters)"
        )
    say(model)
    say(
        f"speculative: {args.speculative_algorithm}, steps {args.num_steps}, topk {args.topk}, "
        f"draft tokens {args.num_draft_tokens}; temperature 0; seed {args.seed}"
    )
    say(
        f"prompts: {len(prompts)} ({fmt}"
        + (f", {prompt_tokens} prompt tokens" if prompt_tokens else "")
        + f"); max_new_tokens {args.max_new_tokens}; batch {spec['batch_size']}; "
        f"max_running_requests {kw.get('max_running_requests')}"
    )
    if spec.get("streaming_sessions"):
        say(
            "rounds: 2 per run, after an untimed warm-up and an emptied prefix cache, as two turns of one streaming "
            "session per prompt: round 1 the prompt, round 2 only a short new suffix (the session continues from "
            "the state it kept)"
        )
    else:
        say(
            "rounds: 2 per run, after an untimed warm-up and an emptied prefix cache: round 1 the prompts, round 2 "
            "each prompt + its round-1 output + a short new suffix (prefixes read back from the radix cache)"
        )
    say("settings: " + describe_settings(kw))
    say(
        "plugin: zero-copy commit "
        + (_zero_copy_words(spec) if args.zero_copy else "off")
        + f"; fault of the fault runs: {args.fault} ({faults.FAULTS[args.fault].breaks})"
    )
    if ctx.dropped_defaults:
        say("defaults dropped (this SGLang's ServerArgs has no such field): " + "; ".join(ctx.dropped_defaults))
    if ctx.server_dropped:
        say(
            "left out of the launch_server command (this launch_server has no such option): "
            + ", ".join(ctx.server_dropped)
        )
    say(f"track slots: {'required in the on run' if ctx.track_expected else 'not required'} ({ctx.track_reason})")
    if args.throughput:
        say(
            "throughput: the off server, then the on server, up side by side"
            + (" (servers you run)" if ctx.no_reports else " (started one after the other)")
            + f"; warm-up of every timed request; pair 0 (the first request of each mode, reported apart), then "
            f"{ctx.pair_counts['batch1']} batch-1 pairs (the first prompt alone, {ctx.batch1_tokens} new tokens) "
            f"and {ctx.pair_counts['full']} full-batch pairs ({len(prompts)} prompts x {args.max_new_tokens} new "
            "tokens), interleaved, each pair in the order off,on or on,off in turn (A B B A), the prefix cache "
            "emptied before each request" + (f"; --time-budget {args.time_budget:.0f} s" if args.time_budget else "")
        )
        if args.label:
            say(f"label: {args.label}")
    say("engine args: " + json.dumps({k: v for k, v in kw.items() if k != "model_path"}, sort_keys=True))
    say(f"workdir: {work}")


def _zero_copy_words(spec: Mapping[str, Any]) -> str:
    """The header's words for ``--zero-copy``: which variables the on and fault runs get, radix cache on or off."""
    if (spec.get("plugin") or {}).get("zero_copy_radix"):
        return (
            f"on with the radix cache on ({ZERO_COPY}=1 in the on and fault runs, {ZERO_COPY_RADIX} unset in all; "
            "they must show commits with a track set served zero-copy and round 2 must read cached tokens)"
        )
    return f"on ({ZERO_COPY}=1 in the on and fault runs; radix cache off)"


# ----------------------------------------------------------------------------- each run (md5 route)
def run_start(ctx: RunContext, i: int, mode: str) -> None:
    args = ctx.args
    if ctx.no_reports:
        what = f"server {args.base_url_on if mode == 'on' else args.base_url_off}"
    elif args.server:
        what = "launch_server " + (f"with {FLAG}" if mode != "off" else "without the flag")
    else:
        what = f"{SWITCH}={'0' if mode == 'off' else '1'} (fresh process)"
    if args.zero_copy and mode != "off":
        what += f" + {ZERO_COPY}=1"
        if ctx.zero_copy_radix:
            what += " (radix cache on)"
    if mode == "fault":
        what += f" + {FAULT}={args.fault} (negative control: {faults.FAULTS[args.fault].breaks})"
    say(f"-- run {i + 1}/{len(ctx.modes)}: {what} ...")


def not_started(budget: float, elapsed: float, longest: float, names: Sequence[str]) -> None:
    say(
        f"-- not started (--time-budget {budget:.0f} s: {elapsed:.0f} s elapsed, the longest run took "
        f"{longest:.0f} s): " + ", ".join(names)
    )


def server_lines(res: RunResult) -> None:
    """The command of a run's ``launch_server`` and the plugin's lines in its log."""
    say("   server: " + describe_command(res.command))
    for line in res.plugin_log_lines:
        say("   server log: " + line)


def run_outcome(res: RunResult) -> None:
    """A run that went through: its rounds, accept length, cached prompt tokens; a failed one: its log's tail."""
    st = res.stats
    if not res.ok or st is None:
        say(f"   FAILED: {res.error}")
        log = Path(res.log) if res.log else None
        if log is not None and log.exists():
            tail = log.read_text(errors="replace").splitlines()[-40:]
            say("   last lines of " + str(log) + ":\n      " + "\n      ".join(tail))
        return
    rounds = st["rounds"]
    done = ", ".join(
        f"round {k + 1} {r['completion_tokens']} tokens in {r['seconds']:.2f} s ({fmt_rate(r['tokens_per_s'])} tok/s)"
        for k, r in enumerate(rounds)
    )
    cached = ", ".join(
        f"round {k + 1} {_fmt_tokens(r['cached_tokens'])} of {_fmt_tokens(r['prompt_tokens'])}"
        for k, r in enumerate(rounds)
    )
    accept = "n/a" if st["accept_length"] is None else format(st["accept_length"], ".3f")
    say(f"   done: {done}; accept length {accept}; accepted-drafts histogram {st['accepted_drafts_histogram']}")
    say(f"   prompt tokens read from the prefix cache: {cached}")
    if res.server_state is not None:
        say("   server state (get_server_info, internal_states): " + server_state_text(res.server_state))
    flushes = st.get("cache_flushes") or []
    if any(f is not True for f in flushes):
        say(
            "   prefix cache flush before round 1: "
            + ", ".join({True: "done", False: "REFUSED (requests pending)", None: "not supported"}[f] for f in flushes)
        )


def server_state_text(states: Sequence[Any]) -> str:
    """Each scheduler's ``mamba_dedup`` entry in one phrase: the running-request cap asked and in force, the mamba
    slots, commits through our kernel of all, zero-copy's; "no mamba_dedup entry" where the plugin added none."""
    parts = []
    for k, st in enumerate(states):
        if not isinstance(st, Mapping):
            parts.append(f"scheduler {k}: no mamba_dedup entry")
            continue
        cap = st.get("max_running_requests") or {}
        commits = st.get("commits") or {}
        text = (
            f"scheduler {k}: mode {st.get('mode')}, running requests asked {cap.get('asked')} / in force "
            f"{cap.get('effective')}, mamba slots {st.get('mamba_slots')}, commits ours {commits.get('ours_commit_calls', 0)}"
            f" of {commits.get('commit_calls', 0)}, ledgers {len(st.get('ledgers') or [])}"
        )
        zc = st.get("zero_copy")
        if isinstance(zc, Mapping):
            text += (
                f", zero-copy {zc.get('decision')} (radix cache {zc.get('radix_cache') or 'off'}; commits "
                f"{zc.get('zc_commit_calls', 0)}, with a track set {zc.get('zc_track_commits', 'not recorded')}, "
                f"track boundaries crossed {zc.get('zc_track_rows', 'not recorded')}, stage-ins "
                f"{zc.get('zc_stage_in_calls', 0)}, session states materialized {zc.get('zc_materialize_calls', 0)}, "
                f"tree evictions {zc.get('zc_tree_evictions', 0)})"
            )
        parts.append(text)
    return "; ".join(parts) or "no schedulers"


def round2_cached(results: Sequence[RunResult]) -> list[dict[str, Any]]:
    """Per run: round 2's prompt tokens and those SGLang read from the radix cache (None where not reported)."""
    out = []
    for k, r in enumerate(results, start=1):
        rounds = (r.stats or {}).get("rounds") or []
        second = rounds[1] if len(rounds) > 1 else {}
        per = (r.stats or {}).get("decode_tracked")
        out.append(
            {
                "run": k,
                "mode": r.mode,
                "cached_tokens": second.get("cached_tokens"),
                "prompt_tokens": second.get("prompt_tokens"),
                "beyond_round1_prompts": per["tokens"] if isinstance(per, dict) else decode_tracked_tokens(rounds),
                "requests_beyond": per["requests"] if isinstance(per, dict) else None,
            }
        )
    return out


def _fmt_tokens(x: int | None) -> str:
    return "n/a" if x is None else f"{x:,}"


# ----------------------------------------------------------------------------- after the runs
def environment(versions: Mapping[str, Any], gpu: Mapping[str, Any]) -> None:
    say("versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    say(
        "gpu: "
        + (
            f"{gpu.get('name')} x{gpu.get('count')} (capability {gpu.get('capability')}, CUDA {gpu.get('cuda')})"
            if gpu.get("name")
            else f"none ({gpu})"
        )
    )


def md5s(verdict: Verdict, results: Sequence[RunResult]) -> None:
    """Run 1 against every later run (the negative control's line after a fault run's), the rates of each run."""
    if not verdict.compared:
        return
    base = results[0]
    a = base.stats or {}
    for c in verdict.md5:
        b = results[c.run - 1].stats or {}
        say(
            f"md5 token ids, rounds 1+2: run 1 ({base.mode}) {a['ids_md5']} | run {c.run} ({c.mode}) {b['ids_md5']} -> "
            f"{'EQUAL' if c.same else 'DIFFERENT'}"
        )
        if a["text_md5"] is not None or b["text_md5"] is not None:
            say(f"md5 text, rounds 1+2:      run 1 {a['text_md5']} | run {c.run} {b['text_md5']}")
        if c.mode == "fault" and c.same:
            say(negative_control_text(c, verdict.fault))
        elif c.mode == "fault":
            at = f" (first difference at {c.where})" if c.where else ""
            say(f"negative control caught: run {c.run} (fault) differs from run 1 ({base.mode}){at}")
    if a["text_md5"] is None:
        say("md5 text: none (no text: skip_tokenizer_init)")
    say(
        "rates (tok/s of single runs, for the record; round 1 / round 2): "
        + ", ".join(
            f"run {k} {r.mode} " + " / ".join(fmt_rate(x["tokens_per_s"]) for x in (r.stats or {})["rounds"])
            for k, r in enumerate(results, start=1)
        )
    )
    say(
        "round 2 prompt tokens read from the radix cache (SGLang's cached_tokens; round 2 extends the whole round-1 "
        "text, so it reads states tracked in round 1's decode back): "
        + ", ".join(
            f"run {e['run']} {e['mode']} {_fmt_tokens(e['cached_tokens'])} of {_fmt_tokens(e['prompt_tokens'])}"
            + (
                f" ({_fmt_tokens(e['beyond_round1_prompts'])} beyond round 1's prompts"
                + (f", in {e['requests_beyond']} requests" if e["requests_beyond"] is not None else "")
                + ": decode-tracked)"
            )
            for e in round2_cached(results)
        )
    )
    say("throughput: not compared (single runs say nothing about a speed-up; --server --throughput measures it)")


def plugin_status(verdict: Verdict, results: Sequence[RunResult], planned: Sequence[str], no_reports: bool) -> None:
    """The plugin's state in each run's scheduler process (:attr:`.verdict.Verdict.plugin`)."""
    if no_reports:
        say(
            "plugin status: not readable (servers you started write their status reports, if at all, into "
            "their own SGLANG_MAMBA_DEDUP_REPORT_DIR); only the md5 is checked"
        )
    if verdict.plugin:
        say(
            "plugin status (a scheduler rewrites its report at its 1st, 2nd, 4th, 8th ... commit and at a normal "
            "exit: the commit counts of a killed one are the last power of two reached, a lower bound):"
        )
    for c in verdict.plugin:
        r = results[c.index]
        say(
            f"plugin status, run {c.index + 1} ({c.mode}): {len(r.reports)} report(s), "
            f"{len(c.scheduler)} from scheduler process(es)"
            + (f"; unreadable: {r.report_problems}" if r.report_problems else "")
        )
        for s in c.shown:
            say("    " + describe_report(s))
        if c.judged == "failed":
            say("    engaged: not judged (the run failed)")
        elif c.judged == "engaged":
            if not c.shown:
                say("    " + describe_report(c.report))
            track = (
                f" (track slots required: {c.track_commits} commits with track slots through our kernel)"
                if c.track_commits is not None
                else ""
            )
            say(f"    engaged: {'YES' if c.ok else 'NO'}" + (track if c.ok else " -- " + "; ".join(c.reasons)))
        else:
            if not c.scheduler:
                say("    commits: no report (the plugin is off and wraps nothing)")
            if c.ok and not r.ok:
                say("    off as expected: not judged (the run failed)")
            else:
                say(f"    off as expected: {'yes' if c.ok else 'NO -- ' + '; '.join(c.reasons)}")
    engaged_judged = any(c.judged == "engaged" for c in verdict.plugin)
    if "on" not in planned and not engaged_judged and not no_reports:
        say("plugin engagement: not checked (no 'on' run in --modes)")


def pairs(ctx: RunContext, data: Mapping[str, Any], labels: Mapping[str, str]) -> None:
    """The pairs of :func:`.paired.run_pairs`: the first requests, the table, the md5s, the mismatches."""
    pairs = data["pairs"]
    for phase, label in labels.items():
        first = next((p for p in pairs if p["phase"] == phase and p["first"]), None)
        if first:
            say(
                f"first request of each mode after the warm-up ({label}; pair 0, not in the statistics): "
                + ", ".join(
                    f"{m} {fmt_rate(first[m]['tokens_per_s'])} tok/s ({first[m]['seconds']:.3f} s)"
                    for m in ("off", "on")
                )
            )
    say(
        "throughput, two servers side by side (tok/s = new tokens / wall time of the request, prefill included, "
        "prefix cache emptied before; on/off > 1: on faster):"
    )
    for line in pair_table({p: data["stats"][p] for p in labels if ctx.pair_counts.get(p)}, labels):
        say("  " + line)
    if data["not_started"]:
        say(f"-- not started (--time-budget {ctx.args.time_budget:.0f} s): " + ", ".join(data["not_started"]))
    for phase in labels:
        mine = [p for p in pairs if p["phase"] == phase]
        md5s = {p[m]["ids_md5"] for p in mine for m in ("off", "on")}
        if mine and not data["no_output"]:
            say(
                f"md5 token ids, {phase}: {len(mine)} pairs x off, on: "
                + (f"all EQUAL {next(iter(md5s))}" if len(md5s) == 1 else f"DIFFERENT ({len(md5s)} distinct)")
            )
    for text in data["mismatches"]:
        say(text)
    flushes = [p[m]["flushed"] for p in pairs for m in ("off", "on")]
    if any(f is not True for f in flushes):
        say(
            f"prefix cache flushes: {sum(f is True for f in flushes)} of {len(flushes)} done "
            "(the others refused or not supported: those requests may have read a cached prefix)"
        )


def commits_per_server(verdict: Verdict) -> None:
    """``--throughput``: the commits through our kernel in each server's scheduler (ours/all)."""
    parts = []
    for c in verdict.plugin:
        n = commit_counts(c.shown[0]) if c.shown else None
        parts.append(f"{c.mode} " + (f"{n['ours_commit_calls']}/{n['commit_calls']}" if n else "no report"))
    say("commits through our kernel per server (ours/all, from its scheduler's status report): " + ", ".join(parts))


def result(verdict: Verdict, not_started: Sequence[str]) -> None:
    note = f"; {len(not_started)} planned runs not started (--time-budget)" if not_started else ""
    text = (
        "RESULT: PASS" if verdict.code == EXIT_OK else "RESULT: FAIL -- " + " | ".join(f[1] for f in verdict.failures)
    )
    say(text + f" (exit {verdict.code}{note})")
