"""The e2e driver: one call's steps over a :class:`.context.RunContext`, and the exit code they end in.

:func:`run` takes the options :mod:`.cli` checked and goes through the steps in order: the run plan and the
route (the offline Engine of :mod:`.engine`, ``launch_server`` of :mod:`.server`, or servers the user runs),
the CUDA check (before anything is built), :func:`_prepare` (the random-weight model when asked, the prompts,
the engine settings of :mod:`.settings`, the run spec), :func:`_execute` (every run, each in a fresh process
or server), :func:`_compare` (md5s and throughput), :func:`_plugin_status` (the scheduler's status reports)
and :func:`_verdict` (the exit code, the JSON summary and the ``RESULT`` line, always the last one).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .. import faults, switch, versions
from . import engine, files, paired, random_model, server
from .context import RunContext
from .engine import Runner
from .reports import (
    check_engaged,
    check_off,
    commit_counts,
    describe_report,
    expected_ranks,
    layout_of,
    read_reports,
    scheduler_reports,
)
from .settings import (
    DEFAULT_MODEL,
    build_engine_kwargs,
    deployment_defaults,
    describe_settings,
    parse_engine_args,
    server_arg_fields,
    track_expectation,
)
from .stats import (
    fmt_rate,
    pair_table,
    run_schedule,
    run_stats,
    throughput_sample,
    throughput_stats,
    throughput_table,
)
from .workload import first_difference, load_prompts, output_problem, round2_suffixes, text_to_ids, workload_md5

#: The command's name in its messages (and argparse's ``prog``).
PROG = "sglang-mamba-dedup e2e"

#: The exit codes (what each means: :mod:`.cli`'s docstring and ``--help``). After the runs the first of
#: run failed, no output, md5 differ, not engaged, off not off, fault not caught that applies is the code
#: (:func:`_verdict`).
EXIT_OK = 0
EXIT_MD5_DIFFER = 1
EXIT_NOT_ENGAGED = 8
EXIT_RUN_FAILED = 3
EXIT_OFF_NOT_OFF = 4
EXIT_CANNOT_RUN = 5
EXIT_FAULT_NOT_CAUGHT = 6
#: Nothing to compare: an answer without ``output_ids``, with no token, or (ignore_eos) shorter than asked.
EXIT_NO_OUTPUT = 7
#: A usage error (argparse's own exit status; also an unusable ``--throughput-from``).
EXIT_USAGE = 2


def run(args: argparse.Namespace, runner: Runner | None = None, t_start: float | None = None) -> int:
    """The e2e once the options are checked (:func:`.cli.main`); returns the exit status.

    ``runner`` replaces :func:`.engine.run_in_subprocess` (tests); the CUDA check belongs to that default
    runner and is skipped with another one. ``t_start``: when the call started (``time.monotonic()``).
    """
    ctx = RunContext(
        args,
        t_start=time.monotonic() if t_start is None else t_start,
        plan=run_schedule(args.modes, args.throughput_runs, not args.no_throwaway),
        batch1_tokens=args.batch1_tokens or 256,
        prompt_format=args.prompt_format,
    )
    if args.throughput:
        ctx.pair_counts = {
            "batch1": 30 if args.batch1_pairs is None else args.batch1_pairs,
            "full": 10 if args.full_pairs is None else args.full_pairs,
        }
    if args.base_url_off and runner is None:
        runner = server.url_runner({"off": args.base_url_off, "on": args.base_url_on}, args.run_timeout)
        ctx.no_reports = True
        if ctx.prompt_format == "auto":
            ctx.prompt_format = "text"
    if runner is None:
        problem = engine.cuda_problem(parse_engine_args(args.engine_arg))
        if problem:
            print(
                f"{PROG}: cannot run here: {problem}; nothing was built or run (exit {EXIT_CANNOT_RUN})",
                file=sys.stderr,
                flush=True,
            )
            return EXIT_CANNOT_RUN
    if args.topk != 1:
        _print(f"warning: topk {args.topk} means tree verify; the dedup layout only applies to topk 1")

    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="smd-e2e-"))
    work.mkdir(parents=True, exist_ok=True)
    ctx.temp_workdir = None if args.workdir else work
    temp_model = None
    if args.random_weights and not args.workdir and not args.random_weights_dir:
        temp_model = work / "random-model"
    code = None
    try:
        code = _run(ctx, work, runner, temp_model)
        return code
    finally:
        _remove_temp_checkpoint(temp_model)
        _settle_temp_workdir(ctx, code)


def _settle_temp_workdir(ctx: RunContext, code: int | None) -> None:
    """The temporary workdir goes after a PASS (or when nothing ran); after a failure (:func:`_verdict` said so)
    or an interruption it stays, for its logs."""
    temp = ctx.temp_workdir
    if temp is None or ctx.workdir_kept:
        return
    if code is None:
        print(f"{PROG}: {_kept_line(temp)}", file=sys.stderr, flush=True)
    else:
        shutil.rmtree(temp, ignore_errors=True)


def _kept_line(work: Path) -> str:
    return f"the logs are kept in {work} (a temporary folder: remove it when done; --workdir chooses the folder)"


def _run(ctx: RunContext, work: Path, runner: Runner | None, temp_model: Path | None) -> int:
    """Body of :func:`run` once the route is chosen: prepare, run, compare, check the plugin, verdict."""
    prepared = _prepare(ctx, work, temp_model)
    if isinstance(prepared, int):
        return prepared
    spec, model_path, random_info = prepared
    _print_header(ctx, spec, model_path, random_info, work)
    failures: list[tuple[int, str]] = []
    if ctx.args.throughput:
        summary = _run_paired(ctx, spec, model_path, random_info, work, failures)
        return _verdict(ctx, summary, failures, temp_model)
    results = _execute(ctx, spec, work, runner)
    summary = _compare(ctx, spec, model_path, random_info, results, failures)
    _plugin_status(ctx, results, summary, failures)
    return _verdict(ctx, summary, failures, temp_model)


def _run_paired(
    ctx: RunContext,
    spec: dict[str, Any],
    model_path: str,
    random_info: dict | None,
    work: Path,
    failures: list[tuple[int, str]],
) -> dict[str, Any]:
    """``--throughput``: both servers side by side (:mod:`.paired`), the pairs' statistics and md5s, the
    plugin's state in each server; returns the summary."""
    results, data = paired.execute(ctx, spec, work, say=_print)
    if not ctx.no_reports:
        for r in results:
            r.update(versions=engine.package_versions(), gpu=engine.gpu_info())
    summary = _summary_base(ctx, spec, model_path, random_info, results)
    summary["label"] = ctx.args.label
    if data is None or any(not r.get("ok") for r in results):
        failures.append((EXIT_RUN_FAILED, _failed_runs_text(results, ctx.args.verbose)))
    else:
        summary["throughput"] = _pairs_report(ctx, spec, data, failures)
    _plugin_status(ctx, results, summary, failures)
    if not ctx.no_reports:
        _print(
            "commits through our kernel per server (ours/all, from its scheduler's status report): "
            + ", ".join(
                f"{r['mode']} "
                + (
                    "/".join(str(c[k]) for k in ("ours_commit_calls", "commit_calls"))
                    if (c := (summary["runs"][i].get("commit_counts") or [None])[0])
                    else "no report"
                )
                for i, r in enumerate(results)
            )
        )
    return summary


def _pairs_report(
    ctx: RunContext, spec: dict[str, Any], data: dict[str, Any], failures: list[tuple[int, str]]
) -> dict[str, Any]:
    """The pairs of :func:`.paired.run_pairs`: first requests, the table, the md5s, the CSV."""
    args = ctx.args
    n = len(spec["prompts"])
    labels = {
        "batch1": f"batch 1: 1 request x {ctx.batch1_tokens} new tokens",
        "full": f"full batch: {n} requests x {args.max_new_tokens} new tokens",
    }
    pairs = data["pairs"]
    for phase, label in labels.items():
        first = next((p for p in pairs if p["phase"] == phase and p["first"]), None)
        if first:
            _print(
                f"first request of each mode after the warm-up ({label}; pair 0, not in the statistics): "
                + ", ".join(
                    f"{m} {fmt_rate(first[m]['tokens_per_s'])} tok/s ({first[m]['seconds']:.3f} s)"
                    for m in ("off", "on")
                )
            )
    _print(
        "throughput, two servers side by side (tok/s = new tokens / wall time of the request, prefill included, "
        "prefix cache emptied before; on/off > 1: on faster):"
    )
    for line in pair_table({p: data["stats"][p] for p in labels if ctx.pair_counts.get(p)}, labels):
        _print("  " + line)
    if data["not_started"]:
        _print(f"-- not started (--time-budget {args.time_budget:.0f} s): " + ", ".join(data["not_started"]))
    for phase in labels:
        mine = [p for p in pairs if p["phase"] == phase]
        md5s = {p[m]["ids_md5"] for p in mine for m in ("off", "on")}
        if mine and not data["no_output"]:
            _print(
                f"md5 token ids, {phase}: {len(mine)} pairs x off, on: "
                + (f"all EQUAL {next(iter(md5s))}" if len(md5s) == 1 else f"DIFFERENT ({len(md5s)} distinct)")
            )
    if data["no_output"]:
        failures.append(
            (
                EXIT_NO_OUTPUT,
                f"nothing generated in {len(data['no_output'])} requests, nothing compared: " + data["no_output"][0],
            )
        )
    if not any(not p["first"] for p in pairs):
        failures.append((EXIT_RUN_FAILED, "no timed pair ran (--time-budget): nothing was measured"))
    for text in data["mismatches"]:
        _print(text)
    if data["mismatches"]:
        failures.append((EXIT_MD5_DIFFER, f"{len(data['mismatches'])} requests differ: " + data["mismatches"][0]))
    flushes = [p[m]["flushed"] for p in pairs for m in ("off", "on")]
    if any(f is not True for f in flushes):
        _print(
            f"prefix cache flushes: {sum(f is True for f in flushes)} of {len(flushes)} done "
            "(the others refused or not supported: those requests may have read a cached prefix)"
        )
    if args.csv_out:
        try:
            paired.write_csv(Path(args.csv_out), paired.csv_rows(data, args.label))
            _print(f"pairs written to {args.csv_out}")
        except OSError as exc:  # a link planted there since the start (O_NOFOLLOW), a folder gone ...
            _print(f"--csv-out {args.csv_out}: not written ({type(exc).__name__}: {exc})")
    return {**data, "labels": labels, "pair_counts": ctx.pair_counts}


def _load_merged(paths: Sequence[str], workload: Mapping[str, str]) -> tuple[list[dict[str, Any]], str | None]:
    """The timed runs of earlier summaries (``--throughput-from``), or why they cannot be merged."""
    runs: list[dict[str, Any]] = []
    for path in paths:
        try:
            doc = json.loads(Path(path).read_text())
        except (OSError, ValueError) as e:
            return [], f"--throughput-from {path}: not readable ({e})"
        theirs = doc.get("workload") or {}
        differ = sorted(k for k in set(workload) | set(theirs) if workload.get(k) != theirs.get(k))
        if differ:
            return [], f"--throughput-from {path}: another workload ({', '.join(differ)} differ from this call's)"
        for i, r in enumerate(doc.get("runs") or []):
            if r.get("ok") and not r.get("throwaway") and r.get("stats"):
                runs.append({"source": f"{path} run {i + 1}", "mode": r.get("mode"), "stats": r["stats"]})
    return runs, None


def _prepare(ctx: RunContext, work: Path, temp_model: Path | None) -> int | tuple[dict[str, Any], str, dict | None]:
    """The model (built when random) and the run spec: ``(spec, model_path, random_info)``, or an exit code."""
    args = ctx.args
    # model
    random_info = None
    if args.random_weights:
        target = Path(args.random_weights_dir) if args.random_weights_dir else work / "random-model"
        dims_over = dict(args.random_dim)
        if not (target / "config.json").exists():
            t0 = time.time()
            random_model.build_random_model(
                target, preset=args.random_preset, seed=args.weights_seed, overrides=dims_over
            )
            _print(
                f"built random-weight model {args.random_preset} (seed {args.weights_seed}) in "
                f"{time.time() - t0:.1f} s: {target}" + (" (temporary: removed at exit)" if temp_model else "")
            )
        model_path = str(target)
        random_info = (
            json.loads((target / "random_model.json").read_text())
            if (target / "random_model.json").exists()
            else {"preset": args.random_preset}
        )
    else:
        model_path = args.model_path or DEFAULT_MODEL

    fmt = ctx.prompt_format
    if fmt == "auto":
        fmt = "ids" if args.random_weights else "text"
    texts = load_prompts(args.prompts, args.num_prompts)
    ctx.num_prompts_effective = len(texts)
    vocab = None
    if fmt == "ids":
        vocab = args.vocab_size
        cfg_path = Path(model_path) / "config.json"
        if vocab is None and cfg_path.exists():
            cfg = json.loads(cfg_path.read_text())
            vocab = (cfg.get("text_config") or {}).get("vocab_size") or cfg.get("vocab_size")
        if not vocab:
            _print(f"--prompt-format ids needs --vocab-size ({cfg_path} has no vocab_size)")
            return EXIT_RUN_FAILED
        prompts: list[Any] = [text_to_ids(t, int(vocab)) for t in texts]
    else:
        prompts = texts

    # engine arguments: the run's own, the deployment defaults this SGLang knows, then --engine-arg
    fields = server_arg_fields()
    defaults, dropped = deployment_defaults(
        not args.no_cuda_graph, not args.no_radix_cache, fields, versions.installed_sglang_version()
    )
    kw = build_engine_kwargs(ctx, model_path, skip_tokenizer=(fmt == "ids"), defaults=defaults)
    explicit = parse_engine_args(args.engine_arg)
    ctx.dropped_defaults = [d for d in dropped if d.split("=", 1)[0] not in explicit]
    ctx.server_dropped = []
    if args.server:
        kw, ctx.server_dropped = server.launchable(kw, server.launch_server_options(), keep=explicit)
    if args.expect_track is None:
        ctx.track_expected, ctx.track_reason = track_expectation(kw, fields)
    else:
        ctx.track_expected = bool(args.expect_track)
        ctx.track_reason = "--expect-track" if args.expect_track else "--no-expect-track"
    if ctx.no_reports:
        ctx.track_expected, ctx.track_reason = False, "servers you run: their status reports are not readable"

    sampling = {"temperature": 0.0, "max_new_tokens": args.max_new_tokens, "ignore_eos": not args.no_ignore_eos}
    spec = {
        "engine_kwargs": kw,
        "prompts": prompts,
        "prompt_format": fmt,
        "sampling_params": sampling,
        "batch_size": args.batch_size or len(prompts),
        "warmup_tokens": args.warmup_tokens,
        "round2_suffixes": round2_suffixes(len(prompts), fmt, vocab),
        "batch1": {"prompt_index": 0, "max_new_tokens": ctx.batch1_tokens}
        if args.throughput_runs or args.throughput
        else None,
    }
    ctx.workload = workload_md5(spec)
    ctx.merged, problem = _load_merged(args.throughput_from, ctx.workload)
    if problem:
        print(f"{PROG}: error: {problem}; nothing was run", file=sys.stderr, flush=True)
        return EXIT_USAGE
    return spec, model_path, random_info


def _print_header(ctx: RunContext, spec: dict[str, Any], model_path: str, random_info: dict | None, work: Path) -> None:
    args = ctx.args
    prompts = spec["prompts"]
    fmt = spec["prompt_format"]
    prompt_tokens = sum(len(p) for p in prompts) if fmt == "ids" else None
    kw = spec["engine_kwargs"]
    _print("== sglang-mamba-dedup e2e: greedy md5, plugin off vs on ==")
    _print(f"date: {_dt.datetime.now(_dt.UTC).strftime('%Y-%m-%d %H:%M:%S UTC')}; host {platform.node()}")
    _print(
        f"model: {model_path}"
        + (
            f" (random weights: preset {random_info.get('preset')}, seed "
            f"{random_info.get('seed')}, {random_info.get('num_parameters', 0):,} "
            "parameters)"
            if random_info
            else ""
        )
    )
    _print(
        f"speculative: {args.speculative_algorithm}, steps {args.num_steps}, topk {args.topk}, "
        f"draft tokens {args.num_draft_tokens}; temperature 0; seed {args.seed}"
    )
    _print(
        f"prompts: {len(prompts)} ({fmt}"
        + (f", {prompt_tokens} prompt tokens" if prompt_tokens else "")
        + f"); max_new_tokens {args.max_new_tokens}; batch {spec['batch_size']}; "
        f"max_running_requests {kw.get('max_running_requests')}"
    )
    _print(
        "rounds: 2 per run, after an untimed warm-up and an emptied prefix cache: round 1 the prompts, round 2 "
        "each prompt + its round-1 output + a short new suffix (prefixes read back from the radix cache)"
    )
    _print("settings: " + describe_settings(kw))
    if ctx.dropped_defaults:
        _print("defaults dropped (this SGLang's ServerArgs has no such field): " + "; ".join(ctx.dropped_defaults))
    if ctx.server_dropped:
        _print(
            "left out of the launch_server command (this launch_server has no such option): "
            + ", ".join(ctx.server_dropped)
        )
    _print(f"track slots: {'required in the on run' if ctx.track_expected else 'not required'} ({ctx.track_reason})")
    if args.throughput:
        _print(
            "throughput: the off server, then the on server, up side by side"
            + (" (servers you run)" if ctx.no_reports else " (started one after the other)")
            + f"; warm-up of every timed request; pair 0 (the first request of each mode, reported apart), then "
            f"{ctx.pair_counts['batch1']} batch-1 pairs (the first prompt alone, {ctx.batch1_tokens} new tokens) "
            f"and {ctx.pair_counts['full']} full-batch pairs ({len(prompts)} prompts x {args.max_new_tokens} new "
            "tokens), interleaved, each pair in the order off,on or on,off in turn (A B B A), the prefix cache "
            "emptied before each request" + (f"; --time-budget {args.time_budget:.0f} s" if args.time_budget else "")
        )
        if args.label:
            _print(f"label: {args.label}")
    if args.throughput_runs:
        _print(
            f"throughput: {'1 untimed throwaway engine start, then ' if not args.no_throwaway else ''}"
            f"{args.throughput_runs} runs per mode alternating off,on; batch 1 = the first prompt alone, "
            f"{ctx.batch1_tokens} new tokens; full batch = round 1"
            + (f"; {len(ctx.merged)} timed runs merged from --throughput-from" if ctx.merged else "")
        )
    _print("engine args: " + json.dumps({k: v for k, v in kw.items() if k != "model_path"}, sort_keys=True))
    _print(f"workdir: {work}")


def _run_label(i: int, mode: str, throwaway: bool) -> str:
    return f"run {i + 1} ({mode}{', throwaway' if throwaway else ''})"


def _execute(ctx: RunContext, spec: dict[str, Any], work: Path, runner: Runner | None) -> list[dict[str, Any]]:
    """Every run of the schedule, one after the other, each in a fresh process (or server)."""
    args = ctx.args
    plan: list[tuple[str, bool]] = ctx.plan
    results: list[dict[str, Any]] = []
    ctx.not_started = []
    longest = 0.0
    for i, (mode, throwaway) in enumerate(plan):
        if args.time_budget and results:
            elapsed = time.monotonic() - ctx.t_start
            if elapsed + 1.1 * longest > args.time_budget:
                ctx.not_started = [_run_label(k, m, t) for k, (m, t) in enumerate(plan) if k >= i]
                _print(
                    f"-- not started (--time-budget {args.time_budget:.0f} s: {elapsed:.0f} s elapsed, the longest "
                    f"run took {longest:.0f} s): " + ", ".join(ctx.not_started)
                )
                break
        rdir = work / f"reports-{i}-{mode}"
        if rdir.exists():
            shutil.rmtree(rdir)
        rdir.mkdir(parents=True)
        log = work / f"run-{i}-{mode}.log"
        if ctx.no_reports:
            what = f"server {args.base_url_on if mode == 'on' else args.base_url_off}"
        elif args.server:
            what = "launch_server " + (f"with {switch.FLAG}" if mode != "off" else "without the flag")
        else:
            what = f"{switch.ENV}={'0' if mode == 'off' else '1'} (fresh process)"
        if mode == "fault":
            what += f" + {faults.ENV}={faults.COMMIT_STEP0} (negative control: {faults.FAULTS[faults.COMMIT_STEP0]})"
        _print(f"-- run {i + 1}/{len(plan)}: {what}" + (" [throwaway: untimed]" if throwaway else "") + " ...")
        t0 = time.monotonic()
        if runner is None and args.server:
            res = server.run_server(
                spec,
                mode,
                rdir,
                log,
                timeout=args.run_timeout,
                verbose=args.verbose,
                versions=engine.package_versions,
                gpu=engine.gpu_info,
            )
            _print("   server: " + server.describe_command(res.get("command") or []))
            for line in res.get("plugin_log_lines") or []:
                _print("   server log: " + line)
        elif runner is None:
            res = engine.run_in_subprocess(spec, mode, rdir, log, timeout=args.run_timeout, verbose=args.verbose)
        else:
            res = runner(spec, mode, rdir, log)
        res.setdefault("wall_seconds", time.monotonic() - t0)
        longest = max(longest, float(res.get("wall_seconds") or 0.0))
        res["mode"] = mode
        res["throwaway"] = throwaway
        res["report_dir"] = str(rdir)
        res["log"] = str(log)
        res["reports"], res["report_problems"] = read_reports(rdir)
        if res.get("ok"):
            res["stats"] = run_stats(res)
            _print_run_stats(res["stats"])
        else:
            _print(f"   FAILED: {res.get('error')}")
            if log.exists():
                tail = log.read_text(errors="replace").splitlines()[-40:]
                _print("   last lines of " + str(log) + ":\n      " + "\n      ".join(tail))
        results.append(res)

    return results


def _print_run_stats(st: Mapping[str, Any]) -> None:
    rounds = st["rounds"]
    done = ", ".join(
        f"round {k + 1} {r['completion_tokens']} tokens in {r['seconds']:.2f} s ({fmt_rate(r['tokens_per_s'])} tok/s)"
        for k, r in enumerate(rounds)
    )
    cached = ", ".join(
        f"round {k + 1} {_fmt_tokens(r['cached_tokens'])} of {_fmt_tokens(r['prompt_tokens'])}"
        for k, r in enumerate(rounds)
    )
    _print(
        f"   done: {done}; accept length "
        f"{'n/a' if st['accept_length'] is None else format(st['accept_length'], '.3f')}; "
        f"accepted-drafts histogram {st['accepted_drafts_histogram']}"
    )
    _print(f"   prompt tokens read from the prefix cache: {cached}")
    b1 = st.get("batch1")
    if b1:
        _print(
            f"   batch 1: {b1['completion_tokens']} tokens in {b1['seconds']:.2f} s "
            f"({fmt_rate(b1['tokens_per_s'])} tok/s)"
        )
    flushes = st.get("cache_flushes") or []
    if any(f is not True for f in flushes):
        _print(
            "   prefix cache flushes (before round 1, before batch 1): "
            + ", ".join({True: "done", False: "REFUSED (requests pending)", None: "not supported"}[f] for f in flushes)
        )


def _all_outputs(res: Mapping[str, Any]) -> list[list[int]]:
    return [o["output_ids"] for r in res.get("rounds") or [] for o in r.get("outputs") or []]


def _where(index: int, round1_size: int) -> str:
    return f"round 1, prompt {index}" if index < round1_size else f"round 2, prompt {index - round1_size}"


def _compare(
    ctx: RunContext,
    spec: dict[str, Any],
    model_path: str,
    random_info: dict | None,
    results: list[dict[str, Any]],
    failures: list[tuple[int, str]],
) -> dict[str, Any]:
    """md5s and throughput of the runs; appends what failed to ``failures``; returns the summary."""
    args = ctx.args
    prompts = spec["prompts"]
    summary = _summary_base(ctx, spec, model_path, random_info, results)
    if any(not r.get("ok") for r in results):
        failures.append((EXIT_RUN_FAILED, _failed_runs_text(results, args.verbose)))
        return summary
    if not results:
        return summary
    empty = _output_problems(spec, results)
    if empty:
        failures.append((EXIT_NO_OUTPUT, "nothing generated, nothing compared: " + "; ".join(empty)))
        return summary

    base = results[0]
    a = base["stats"]
    for k, r in enumerate(results[1:], start=2):
        b = r["stats"]
        same = a["ids_md5"] == b["ids_md5"]
        _print(
            f"md5 token ids, rounds 1+2: run 1 ({base['mode']}) {a['ids_md5']} | run {k} ({r['mode']}) {b['ids_md5']} -> "
            f"{'EQUAL' if same else 'DIFFERENT'}"
        )
        if a["text_md5"] is not None or b["text_md5"] is not None:
            _print(f"md5 text, rounds 1+2:      run 1 {a['text_md5']} | run {k} {b['text_md5']}")
        if r["mode"] == "fault":
            _negative_control(k, base, r, same, len(prompts), summary, failures)
            continue
        if not same:
            d = first_difference(_all_outputs(base), _all_outputs(r))
            failures.append(
                (
                    EXIT_MD5_DIFFER,
                    f"md5 differ (run 1 {base['mode']} vs run {k} {r['mode']}); first difference at "
                    f"{_where(d[0], len(prompts))}, token {d[1]}"
                    if d
                    else "md5 differ",
                )
            )
        elif a["text_md5"] != b["text_md5"]:
            failures.append((EXIT_MD5_DIFFER, f"token ids equal but texts differ (run 1 vs run {k})"))
    if a["text_md5"] is None:
        _print("md5 text: none (no text: skip_tokenizer_init)")
    b1_md5 = [
        (k, (r["stats"].get("batch1") or {}).get("ids_md5"))
        for k, r in enumerate(results, start=1)
        if r["mode"] != "fault"
    ]
    b1_md5 = [(k, m) for k, m in b1_md5 if m]
    if b1_md5:
        differ = [f"run {k} {m}" for k, m in b1_md5 if m != b1_md5[0][1]]
        _print(
            f"md5 token ids, batch 1: run 1 {b1_md5[0][1]}; "
            + (f"DIFFERENT: {', '.join(differ)}" if differ else f"all {len(b1_md5)} runs EQUAL")
        )
        if differ:
            failures.append((EXIT_MD5_DIFFER, "batch-1 md5 differ: " + ", ".join(differ)))
    for m in ctx.merged:
        theirs = m["stats"]
        ok = theirs.get("ids_md5") == a["ids_md5"] and (
            not b1_md5 or (theirs.get("batch1") or {}).get("ids_md5") in (None, b1_md5[0][1])
        )
        _print(
            f"md5 token ids, merged {m['source']} ({m['mode']}): {theirs.get('ids_md5')} -> {'EQUAL' if ok else 'DIFFERENT'}"
        )
        if not ok:
            failures.append((EXIT_MD5_DIFFER, f"md5 of {m['source']} differs from this call's"))
    summary["ids_md5"] = [r["stats"]["ids_md5"] for r in results]
    summary["text_md5"] = [r["stats"]["text_md5"] for r in results]

    _print(
        "rates (tok/s of single runs, for the record; round 1 / round 2"
        + (" / batch 1" if b1_md5 else "")
        + "): "
        + ", ".join(
            f"run {k} {r['mode']}"
            + ("*" if r.get("throwaway") else "")
            + " "
            + " / ".join(
                [fmt_rate(x["tokens_per_s"]) for x in r["stats"]["rounds"]]
                + ([fmt_rate(r["stats"]["batch1"]["tokens_per_s"])] if r["stats"].get("batch1") else [])
            )
            for k, r in enumerate(results, start=1)
        )
        + (" (* throwaway)" if any(r.get("throwaway") for r in results) else "")
    )
    if args.throughput_runs:
        summary["throughput"] = _throughput(ctx, spec, results)
    else:
        _print("throughput: not compared (single runs say nothing about a speed-up; --throughput-runs 3 measures it)")
    return summary


def _output_problems(spec: Mapping[str, Any], results: list[dict[str, Any]]) -> list[str]:
    """Per run the first round or phase whose outputs :func:`.workload.output_problem` refuses."""
    sampling = spec["sampling_params"]
    fixed = bool(sampling.get("ignore_eos"))
    b1_tokens = (spec.get("batch1") or {}).get("max_new_tokens")
    problems = []
    for k, r in enumerate(results, start=1):
        parts = [(f"round {i + 1}", part, sampling["max_new_tokens"]) for i, part in enumerate(r.get("rounds") or [])]
        parts += [("batch 1", part, b1_tokens) for part in [(r.get("phases") or {}).get("batch1")] if part]
        found = (
            f"{name}: {p}" for name, part, n in parts if (p := output_problem(part["outputs"], n if fixed else None))
        )
        problem = next(found, None)
        if problem:
            problems.append(f"run {k} ({r['mode']}) {problem}")
    return problems


def _summary_base(
    ctx: RunContext, spec: dict[str, Any], model_path: str, random_info: dict | None, results: list[dict[str, Any]]
) -> dict[str, Any]:
    """The versions and the GPU (printed) and the summary's fields every route has, one entry per run."""
    # versions and GPU from the first run that reports them (they are the engine's environment)
    first_ok = next((r for r in results if r.get("ok")), None)
    vers = (first_ok or {}).get("versions") or engine.package_versions()
    gpu = (first_ok or {}).get("gpu") or {}
    _print("versions: " + ", ".join(f"{k} {v}" for k, v in vers.items()))
    _print(
        "gpu: "
        + (
            f"{gpu.get('name')} x{gpu.get('count')} (capability {gpu.get('capability')}, CUDA {gpu.get('cuda')})"
            if gpu.get("name")
            else f"none ({gpu})"
        )
    )

    summary: dict[str, Any] = {
        "modes": [r["mode"] for r in results],
        "model_path": model_path,
        "random_model": random_info,
        "versions": vers,
        "gpu": gpu,
        "engine_kwargs": spec["engine_kwargs"],
        "settings": describe_settings(spec["engine_kwargs"]),
        "dropped_defaults": ctx.dropped_defaults,
        "server_dropped": ctx.server_dropped,
        "track_expected": ctx.track_expected,
        "track_reason": ctx.track_reason,
        "sampling_params": spec["sampling_params"],
        "num_prompts": len(spec["prompts"]),
        "workload": ctx.workload,
        "not_started": ctx.not_started,
        "runs": [],
    }
    for r in results:
        summary["runs"].append(
            {
                k: r.get(k)
                for k in (
                    "mode",
                    "throwaway",
                    "ok",
                    "pid",
                    "returncode",
                    "error",
                    "wall_seconds",
                    "stats",
                    "report_problems",
                )
            }
        )
    return summary


def _negative_control(
    k: int,
    base: dict[str, Any],
    run: dict[str, Any],
    same: bool,
    n_prompts: int,
    summary: dict[str, Any],
    failures: list[tuple[int, str]],
) -> None:
    """A ``fault`` run (the commit deliberately broken) must give other outputs than run 1."""
    if same:
        text = (
            f"negative control NOT caught: run {k} (fault: {faults.FAULTS[faults.COMMIT_STEP0]}) gave run 1's md5; "
            "this md5 check cannot see a broken commit"
        )
        _print(text)
        failures.append((EXIT_FAULT_NOT_CAUGHT, text))
    else:
        d = first_difference(_all_outputs(base), _all_outputs(run))
        where = f" (first difference at {_where(d[0], n_prompts)}, token {d[1]})" if d else ""
        _print(f"negative control caught: run {k} (fault) differs from run 1 ({base['mode']}){where}")
    summary.setdefault("negative_control", []).append({"run": k, "caught": not same})


def _throughput(ctx: RunContext, spec: dict[str, Any], results: list[dict[str, Any]]) -> dict[str, Any]:
    """The throughput table over the timed runs (throwaway left out, --throughput-from runs added)."""
    args = ctx.args
    samples = [(r["mode"], throughput_sample(r["stats"])) for r in results if not r.get("throwaway")]
    samples += [(m["mode"], throughput_sample(m["stats"])) for m in ctx.merged]
    stats = throughput_stats(samples)
    n = len(spec["prompts"])
    bs = int(spec["batch_size"] or n)
    labels = {
        "batch1": f"batch 1: 1 request x {ctx.batch1_tokens} new tokens",
        "full": f"full batch: round 1, {n} requests x {args.max_new_tokens} new tokens"
        + ("" if bs >= n else f" in batches of {bs}"),
    }
    counts = {m: sum(1 for mm, _ in samples if mm == m) for m in ("off", "on")}
    _print(
        f"throughput ({counts['off']} off and {counts['on']} on runs, alternating"
        + (", after 1 untimed throwaway engine start" if any(r.get("throwaway") for r in results) else "")
        + (f", {len(ctx.merged)} of them from --throughput-from" if ctx.merged else "")
        + "; tok/s = new tokens / wall time of the generate call, prefill included, prefix cache emptied before):"
    )
    for line in throughput_table(stats, labels):
        _print("  " + line)
    return {"phases": stats, "labels": labels, "samples": [{"mode": m, **s} for m, s in samples]}


def _plugin_status(
    ctx: RunContext, results: list[dict[str, Any]], summary: dict[str, Any], failures: list[tuple[int, str]]
) -> None:
    """The plugin's state in each run's scheduler process, from its status report."""
    engaged_all = None
    if ctx.no_reports:
        _print(
            "plugin status: not readable (servers you started write their status reports, if at all, into "
            "their own SGLANG_MAMBA_DEDUP_REPORT_DIR); only the md5 is checked"
        )
        results_for_status: list[dict[str, Any]] = []
    else:
        results_for_status = results
    if results_for_status:
        _print(
            "plugin status (a scheduler rewrites its report at its 1st, 2nd, 4th, 8th ... commit and at a normal "
            "exit: the commit counts of a killed one are the last power of two reached, a lower bound):"
        )
    for i, r in enumerate(results_for_status):
        reports = r.get("reports") or []
        parent = r.get("pid")
        sched = scheduler_reports(reports, parent)
        shown = [s for s in sched if layout_of(s) is not None] or sched[:1]
        _print(
            f"plugin status, {_run_label(i, r['mode'], bool(r.get('throwaway')))}: {len(reports)} report(s), "
            f"{len(sched)} from scheduler process(es)"
            + (f"; unreadable: {r['report_problems']}" if r.get("report_problems") else "")
        )
        summary["runs"][i]["commit_counts"] = [dict(commit_counts(s), pid=s.get("pid")) for s in shown]
        if r["mode"] != "off" and not r.get("ok"):
            # the run failed: a missing or partial report says nothing about the plugin
            for s in shown:
                _print("    " + describe_report(s))
            _print("    engaged: not judged (the run failed)")
            summary["runs"][i]["engaged"] = None
            summary["runs"][i]["scheduler_report"] = sched[0] if sched else None
        elif r["mode"] in ("on", "fault"):
            ok, reasons, rep = check_engaged(
                reports,
                parent,
                expect_track=ctx.track_expected,
                expect_ranks=expected_ranks(summary.get("engine_kwargs")),
            )
            if r["mode"] == "fault":
                with_fault = [s for s in sched if (s.get("events") or {}).get("fault") == faults.COMMIT_STEP0]
                if not with_fault:
                    ok = False
                    reasons = [*reasons, f"no scheduler report shows the fault {faults.COMMIT_STEP0} installed"]
            for s in shown:
                _print("    " + describe_report(s))
            if not shown:
                _print("    " + describe_report(rep))
            track = (
                f" (track slots required: {min(commit_counts(s)['ours_track_commit_calls'] for s in shown)} "
                "commits with track slots through our kernel)"
                if ctx.track_expected and ok
                else ""
            )
            _print(f"    engaged: {'YES' if ok else 'NO'}" + (track if ok else " -- " + "; ".join(reasons)))
            summary["runs"][i]["engaged"] = ok
            summary["runs"][i]["engagement_reasons"] = reasons
            summary["runs"][i]["scheduler_report"] = {k: v for k, v in (rep or {}).items()}
            engaged_all = ok if engaged_all is None else (engaged_all and ok)
            if not ok:
                failures.append((EXIT_NOT_ENGAGED, "plugin not engaged: " + "; ".join(reasons)))
        else:
            ok, reasons = check_off(reports, parent)
            for s in shown:
                _print("    " + describe_report(s))
            if not sched:
                _print("    commits: no report (the plugin is off and wraps nothing)")
            if ok and not r.get("ok"):
                _print("    off as expected: not judged (the run failed)")
            else:
                _print(f"    off as expected: {'yes' if ok else 'NO -- ' + '; '.join(reasons)}")
            summary["runs"][i]["scheduler_report"] = sched[0] if sched else None
            if not ok:
                failures.append((EXIT_OFF_NOT_OFF, "the off run was not off: " + "; ".join(reasons)))
    planned_on = any(m == "on" for m, _ in ctx.plan)
    if planned_on and not any(r["mode"] == "on" for r in results):
        failures.append((EXIT_RUN_FAILED, "no 'on' run was started (--time-budget): nothing shows the plugin"))
    elif engaged_all is None and not planned_on and not ctx.no_reports:
        _print("plugin engagement: not checked (no 'on' run in --modes)")


def _verdict(ctx: RunContext, summary: dict[str, Any], failures: list[tuple[int, str]], temp_model: Path | None) -> int:
    args = ctx.args
    order = [
        EXIT_RUN_FAILED,
        EXIT_NO_OUTPUT,
        EXIT_MD5_DIFFER,
        EXIT_NOT_ENGAGED,
        EXIT_OFF_NOT_OFF,
        EXIT_FAULT_NOT_CAUGHT,
    ]
    code = EXIT_OK
    for c in order:
        if any(f[0] == c for f in failures):
            code = c
            break
    summary["failures"] = [f[1] for f in failures]
    summary["exit_code"] = code
    if args.json_out:
        try:
            files.write_text(args.json_out, json.dumps(summary, indent=1, default=str))
        except OSError as exc:  # a link planted there since the start (O_NOFOLLOW), a folder gone ...
            _print(f"--json-out {args.json_out}: not written ({type(exc).__name__}: {exc})")
    _remove_temp_checkpoint(temp_model)  # before the RESULT line, which stays the last one
    if ctx.temp_workdir is not None and code != EXIT_OK:
        ctx.workdir_kept = True
        _print(_kept_line(ctx.temp_workdir))
    note = f"; {len(ctx.not_started)} planned runs not started (--time-budget)" if ctx.not_started else ""
    _print(
        ("RESULT: PASS" if code == EXIT_OK else "RESULT: FAIL -- " + " | ".join(f[1] for f in failures))
        + f" (exit {code}{note})"
    )
    return code


def _fmt_tokens(x: int | None) -> str:
    return "n/a" if x is None else f"{x:,}"


def _print(*a: Any) -> None:
    print(*a, flush=True)


def _remove_temp_checkpoint(path: Path | None) -> None:
    """Remove the random-weight checkpoint built in a temporary directory (idempotent)."""
    if path is not None and path.exists():
        shutil.rmtree(path, ignore_errors=True)
        _print(f"removed the temporary random-weight checkpoint {path} (--workdir or --random-weights-dir keep it)")


def _failed_runs_text(results: list[dict[str, Any]], verbose: bool) -> str:
    """The failure line of runs that failed: what failed and where its log is, no guess at the cause."""
    failed = [(i, r) for i, r in enumerate(results) if not r.get("ok")]
    errors = "; ".join(dict.fromkeys(str(r.get("error")) for _, r in failed))
    logs = [str(r["log"]) for _, r in failed if r.get("log")]  # a server never started has none
    where = (
        "see the engine output above (--verbose)"
        if verbose
        else (f"see {'its log' if len(logs) == 1 else 'the logs'}: " + ", ".join(logs))
    )
    if len(failed) == len(results):
        return f"all {len(results)} runs failed ({errors}), nothing was compared; {where}"
    names = ", ".join(f"run {i + 1} ({r['mode']})" for i, r in failed)
    return f"{names} failed ({errors}), nothing was compared; {where}"
