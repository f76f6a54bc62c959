"""The e2e driver: one call's steps over a :class:`.context.RunContext`, and the exit code they end in.

:func:`run` takes the options :mod:`.cli` checked and goes through the steps in order: the route (the offline
Engine of :mod:`.engine`, ``launch_server`` of :mod:`.server`, or servers the user runs), the CUDA check (before
anything is built), :func:`_prepare` (the random-weight model when asked, the prompts, the engine settings of
:mod:`.settings`, the run spec), then either :func:`_execute` (every run, each in a fresh process or server) or
``--throughput``'s :func:`.paired.execute` (both servers side by side), the judgement (:mod:`.verdict`) and
:func:`_finish` (the JSON summary and the ``RESULT`` line, always the last one). What is printed: :mod:`.console`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from . import console, engine, files, paired, random_model, server
from .context import RunContext, RunResult
from .engine import Runner
from .reports import read_reports
from .settings import (
    DEFAULT_MODEL,
    build_engine_kwargs,
    defaults_of,
    describe_settings,
    parse_engine_args,
    server_arg_fields,
    sessions_cap_problem,
    track_expectation,
)
from .stats import run_stats
from .verdict import (
    EXIT_CANNOT_RUN,
    EXIT_NOT_WRITTEN,
    EXIT_OK,
    EXIT_RUN_FAILED,
    EXIT_USAGE,
    Verdict,
    judge_pairs,
    judge_runs,
)
from .workload import load_prompts, round2_suffixes, text_to_ids, workload_md5


def run(args: argparse.Namespace, runner: Runner | None = None, t_start: float | None = None) -> int:
    """The e2e once the options are checked (:func:`.cli.main`); returns the exit status.

    ``runner`` replaces :func:`.engine.run_in_subprocess` (tests); the CUDA check belongs to that default
    runner and is skipped with another one. ``t_start``: when the call started (``time.monotonic()``).
    """
    ctx = RunContext(
        args,
        t_start=time.monotonic() if t_start is None else t_start,
        modes=list(args.modes or ["off", "on"]),
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
            console.cannot_run(problem)
            return EXIT_CANNOT_RUN
    if args.topk != 1:
        console.topk_warning(args.topk)

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
    """The temporary workdir goes after a PASS (or when nothing ran); after a failure (:func:`_finish` said so)
    or an interruption it stays, for its logs."""
    temp = ctx.temp_workdir
    if temp is None or ctx.workdir_kept:
        return
    if code is None:
        console.kept_after_interruption(temp)
    else:
        shutil.rmtree(temp, ignore_errors=True)


def _run(ctx: RunContext, work: Path, runner: Runner | None, temp_model: Path | None) -> int:
    """Body of :func:`run` once the route is chosen: prepare, run, judge, finish."""
    prepared = _prepare(ctx, work, temp_model)
    if isinstance(prepared, int):
        return prepared
    spec, model_path, random_info = prepared
    console.header(ctx, spec, model_path, random_info, work)
    if ctx.args.throughput:
        return _run_paired(ctx, spec, model_path, random_info, work, temp_model)
    results = _execute(ctx, spec, work, runner)
    summary = _summary(ctx, spec, model_path, random_info, results)
    verdict = judge_runs(
        results,
        spec,
        ctx.modes,
        track_expected=ctx.track_expected,
        no_reports=ctx.no_reports,
        verbose=ctx.args.verbose,
        fault=ctx.args.fault,
        zero_copy=ctx.args.zero_copy,
        zero_copy_radix=ctx.zero_copy_radix,
    )
    console.md5s(verdict, results)
    if verdict.negative_control:
        summary["negative_control"] = verdict.negative_control
    summary["round2_cached_tokens"] = console.round2_cached(results)
    if verdict.compared:
        summary["ids_md5"] = [r.stats["ids_md5"] for r in results if r.stats]
        summary["text_md5"] = [r.stats["text_md5"] for r in results if r.stats]
    console.plugin_status(verdict, results, ctx.modes, ctx.no_reports)
    return _finish(ctx, summary, verdict, temp_model)


def _run_paired(
    ctx: RunContext, spec: dict[str, Any], model_path: str, random_info: dict | None, work: Path, temp: Path | None
) -> int:
    """``--throughput``: both servers side by side (:mod:`.paired`), the pairs' statistics and md5s, the
    plugin's state in each server."""
    results, data = paired.execute(ctx, spec, work, say=console.say)
    if not ctx.no_reports:
        for r in results:
            r.versions, r.gpu = engine.package_versions(), engine.gpu_info()
    summary = _summary(ctx, spec, model_path, random_info, results)
    summary["label"] = ctx.args.label
    verdict = judge_pairs(
        results,
        data,
        spec,
        track_expected=ctx.track_expected,
        no_reports=ctx.no_reports,
        verbose=ctx.args.verbose,
        zero_copy=ctx.args.zero_copy,
        zero_copy_radix=ctx.zero_copy_radix,
    )
    if data is not None and all(r.ok for r in results):
        n = len(spec["prompts"])
        labels = {
            "batch1": f"batch 1: 1 request x {ctx.batch1_tokens} new tokens",
            "full": f"full batch: {n} requests x {ctx.args.max_new_tokens} new tokens",
        }
        console.pairs(ctx, data, labels)
        if ctx.args.csv_out:
            try:
                paired.write_csv(Path(ctx.args.csv_out), paired.csv_rows(data, ctx.args.label))
                console.say(f"pairs written to {ctx.args.csv_out}")
            except OSError as exc:  # a link planted there since the start (O_NOFOLLOW), a folder gone ...
                console.not_written("--csv-out", ctx.args.csv_out, exc)
                ctx.not_written.append(f"--csv-out {ctx.args.csv_out} not written ({type(exc).__name__})")
        summary["throughput"] = {**data, "labels": labels, "pair_counts": ctx.pair_counts}
    console.plugin_status(verdict, results, ("off", "on"), ctx.no_reports)
    if not ctx.no_reports:
        console.commits_per_server(verdict)
    return _finish(ctx, summary, verdict, temp)


def _prepare(ctx: RunContext, work: Path, temp_model: Path | None) -> int | tuple[dict[str, Any], str, dict | None]:
    """The model (built when random) and the run spec: ``(spec, model_path, random_info)``, or an exit code."""
    args = ctx.args
    random_info = None
    if args.random_weights:
        target = Path(args.random_weights_dir) if args.random_weights_dir else work / "random-model"
        if not (target / "config.json").exists():
            t0 = time.time()
            random_model.build_random_model(
                target, preset=args.random_preset, seed=args.weights_seed, overrides=dict(args.random_dim)
            )
            console.built_model(args.random_preset, args.weights_seed, time.time() - t0, target, bool(temp_model))
        model_path = str(target)
        info = target / "random_model.json"
        random_info = json.loads(info.read_text()) if info.exists() else {"preset": args.random_preset}
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
            console.say(f"--prompt-format ids needs --vocab-size ({cfg_path} has no vocab_size)")
            return EXIT_RUN_FAILED
        prompts: list[Any] = [text_to_ids(t, int(vocab)) for t in texts]
    else:
        prompts = texts

    # engine arguments: the run's own, the deployment defaults this SGLang knows, then --engine-arg
    fields = server_arg_fields()
    defaults, dropped = defaults_of(args, fields)
    kw = build_engine_kwargs(ctx, model_path, skip_tokenizer=(fmt == "ids"), defaults=defaults)
    explicit = parse_engine_args(args.engine_arg)
    if args.streaming_sessions and (problem := sessions_cap_problem(kw, len(prompts))):
        console.usage_error(problem)
        return EXIT_USAGE
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

    spec = {
        "engine_kwargs": kw,
        "prompts": prompts,
        "prompt_format": fmt,
        "sampling_params": {
            "temperature": 0.0,
            "max_new_tokens": args.max_new_tokens,
            "ignore_eos": not args.no_ignore_eos,
        },
        # streaming sessions: one turn at a time unless asked (turns sent concurrently reach the scheduler at
        # different steps, so the batches, and with them the greedy tokens, differ run to run: stock SGLang's
        # own accepted-drafts histogram moved between two identical off runs on the H200)
        "batch_size": args.batch_size or (1 if args.streaming_sessions else len(prompts)),
        "warmup_tokens": args.warmup_tokens,
        "round2_suffixes": round2_suffixes(len(prompts), fmt, vocab),
        "batch1": {"prompt_index": 0, "max_new_tokens": ctx.batch1_tokens} if args.throughput else None,
        # the runs' variables (.engine.run_env); zero-copy with the radix cache on also sets the plugin's
        # experimental switch that lets the gate accept it (with SGLang's extra buffer)
        "plugin": {
            "fault": args.fault,
            "zero_copy": args.zero_copy,
            "zero_copy_radix": bool(args.zero_copy and not kw.get("disable_radix_cache")),
        },
        "streaming_sessions": args.streaming_sessions,
    }
    ctx.zero_copy_radix = spec["plugin"]["zero_copy_radix"]
    ctx.workload = workload_md5(spec)
    return spec, model_path, random_info


def _execute(ctx: RunContext, spec: dict[str, Any], work: Path, runner: Runner | None) -> list[RunResult]:
    """Every planned run, one after the other, each in a fresh process (or server)."""
    args = ctx.args
    results: list[RunResult] = []
    ctx.not_started = []
    longest = 0.0
    for i, mode in enumerate(ctx.modes):
        if args.time_budget and results:
            elapsed = time.monotonic() - ctx.t_start
            if elapsed + 1.1 * longest > args.time_budget:
                ctx.not_started = [f"run {k + 1} ({m})" for k, m in enumerate(ctx.modes) if k >= i]
                console.not_started(args.time_budget, elapsed, longest, ctx.not_started)
                break
        rdir = work / f"reports-{i}-{mode}"
        if rdir.exists():
            shutil.rmtree(rdir)
        rdir.mkdir(parents=True)
        log = work / f"run-{i}-{mode}.log"
        console.run_start(ctx, i, mode)
        t0 = time.monotonic()
        if runner is None and args.server:
            answer = server.run_server(
                spec,
                mode,
                rdir,
                log,
                timeout=args.run_timeout,
                verbose=args.verbose,
                versions=engine.package_versions,
                gpu=engine.gpu_info,
            )
        elif runner is None:
            answer = engine.run_in_subprocess(spec, mode, rdir, log, timeout=args.run_timeout, verbose=args.verbose)
        else:
            answer = runner(spec, mode, rdir, log)
        res = RunResult.of(mode, answer, log=str(log), report_dir=str(rdir))
        if res.wall_seconds is None:
            res.wall_seconds = time.monotonic() - t0
        longest = max(longest, float(res.wall_seconds or 0.0))
        if runner is None and args.server:
            console.server_lines(res)
        res.reports, res.report_problems = read_reports(rdir)
        if res.ok:
            res.stats = run_stats(answer)
        console.run_outcome(res)
        results.append(res)
    return results


def _summary(
    ctx: RunContext, spec: dict[str, Any], model_path: str, random_info: dict | None, results: list[RunResult]
) -> dict[str, Any]:
    """The versions and the GPU (printed) and the summary's fields every route has, one entry per run."""
    # versions and GPU from the first run that reports them (they are the engine's environment)
    first_ok = next((r for r in results if r.ok), None)
    vers = (first_ok.versions if first_ok else None) or engine.package_versions()
    gpu = (first_ok.gpu if first_ok else None) or {}
    console.environment(vers, gpu)
    return {
        "modes": [r.mode for r in results],
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
        **spec["plugin"],
        "sampling_params": spec["sampling_params"],
        "num_prompts": len(spec["prompts"]),
        "workload": ctx.workload,
        "not_started": ctx.not_started,
        "runs": [r.summary() for r in results],
    }


def _finish(ctx: RunContext, summary: dict[str, Any], verdict: Verdict, temp_model: Path | None) -> int:
    """The summary (``--json-out``), the temporary checkpoint removed, the kept workdir named, the RESULT line."""
    for c in verdict.plugin:
        summary["runs"][c.index].update(c.summary())
    summary["failures"] = [f[1] for f in verdict.failures]
    summary["exit_code"] = verdict.code
    if ctx.args.json_out:
        try:
            files.write_text(ctx.args.json_out, json.dumps(summary, indent=1, default=str))
        except OSError as exc:  # a link planted there since the start (O_NOFOLLOW), a folder gone ...
            console.not_written("--json-out", ctx.args.json_out, exc)
            ctx.not_written.append(f"--json-out {ctx.args.json_out} not written ({type(exc).__name__})")
    if ctx.not_written:  # never PASS, never exit 0, when a result the call promised is missing
        verdict = dataclasses.replace(
            verdict,
            code=verdict.code if verdict.code != EXIT_OK else EXIT_NOT_WRITTEN,
            failures=[*verdict.failures, *((EXIT_NOT_WRITTEN, w) for w in ctx.not_written)],
        )
    _remove_temp_checkpoint(temp_model)  # before the RESULT line, which stays the last one
    if ctx.temp_workdir is not None and verdict.code != EXIT_OK:
        ctx.workdir_kept = True
        console.say(console.kept_line(ctx.temp_workdir))
    console.result(verdict, ctx.not_started)
    return verdict.code


def _remove_temp_checkpoint(path: Path | None) -> None:
    """Remove the random-weight checkpoint built in a temporary directory (idempotent)."""
    if path is not None and path.exists():
        shutil.rmtree(path, ignore_errors=True)
        console.removed_checkpoint(path)
