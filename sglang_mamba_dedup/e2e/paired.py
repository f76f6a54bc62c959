"""End-to-end speed in one call: two servers side by side, requests interleaved (``e2e --throughput``).

Separate engine processes in turn differ by 8-12 % for reasons unrelated to the plugin; two servers alive at
once, sent the same requests in turn, differ by about 1 % per pair. So :func:`execute`

1. starts the "off" ``launch_server`` (no flag), waits until it is healthy, then the "on" one
   (``--enable-mamba-conv-dedup``), each on a free local port (one after the other: SGLang sizes its pools from
   the free memory it profiles, and two starting together each count the other's memory) -- or, with
   ``--base-url-off/--base-url-on``, uses two servers the user runs;
2. warms both up with every request it will time (the full batch and batch 1, their full lengths unless
   ``--warmup-tokens`` says otherwise), so Triton compiles every variant and CUDA graphs are captured first;
3. runs the pairs (:func:`run_pairs`): per phase (batch 1: the first prompt alone, ``--batch1-tokens`` new
   tokens; full: every prompt at once, ``--max-new-tokens``) pair 0 and then ``--batch1-pairs`` /
   ``--full-pairs`` timed pairs, the phases interleaved (:func:`.stats.pair_schedule`), each pair the same
   request to both servers in the order A B, B A, ... (:func:`.stats.pair_order`), the server's prefix cache
   emptied before each request. Pair 0 holds the first request of each mode after the warm-up (JIT
   compilation or graph capture shows there) and is reported apart, outside the statistics;
4. stops both servers (their whole process groups) at once (:class:`.server.Fleet`: two servers that outlive
   SIGTERM cost one grace time, not two), also on a failed start, a failed request or Ctrl-C.

The md5 of every request's output token ids must be the same for both modes and every pair of a phase; any
difference is a failure (exit 1). The statistics per phase (:func:`.stats.pair_stats`): the per-pair ratio
on/off of tok/s, its median and min-max, each mode's median tok/s and min-max, "within noise" when the ratio
range includes 1. :func:`execute` reads each server's status reports when both are stopped; :mod:`.verdict` judges
them (engaged, off, commits through our kernel per server) and the pairs, and decides the exit code.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import time
import urllib.error
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from . import server
from .context import RunContext, RunResult
from .files import open_for_writing
from .reports import read_reports
from .stats import fmt_rate, fmt_ratio, pair_order, pair_schedule, pair_stats
from .workload import Generate, first_difference, md5_of_ids, output_problem, split_batches, timed

#: Seconds kept free at the end of ``--time-budget`` for stopping both servers.
STOP_RESERVE_S = 30.0


#: What a request to a server raises when the server fails it (an HTTP error, a refused connection, a bad answer).
REQUEST_ERRORS = (urllib.error.URLError, OSError, ValueError)


class RequestFailed(Exception):
    """A request to one server failed: which server (``mode``) and why (``error``)."""

    def __init__(self, mode: str, error: BaseException) -> None:
        super().__init__(f"{type(error).__name__}: {error}")
        self.mode = mode


def _of_server(mode: str, call: Callable[..., Any]) -> Callable[..., Any]:
    """``call``, its failures marked with the server they came from."""

    def marked(*args: Any, **kwargs: Any) -> Any:
        try:
            return call(*args, **kwargs)
        except REQUEST_ERRORS as exc:
            raise RequestFailed(mode, exc) from exc

    return marked


@dataclasses.dataclass
class Endpoint:
    """One server as the pairs see it: ``generate(prompts, sampling_params) -> answers`` and its cache flush."""

    generate: Generate
    flush: Callable[[], bool | None]

    @classmethod
    def of_server(cls, mode: str, generate: Generate, flush: Callable[[], bool | None]) -> Endpoint:
        """An endpoint whose failed requests raise :class:`RequestFailed` naming ``mode``."""
        return cls(_of_server(mode, generate), _of_server(mode, flush))


def phase_requests(spec: Mapping[str, Any]) -> dict[str, tuple[list[list[Any]], dict[str, Any]]]:
    """Per phase the batches of one timed request and their sampling parameters: batch 1 (``spec["batch1"]``:
    one prompt, its own length) and the full batch (every prompt, in batches of ``batch_size``)."""
    prompts = spec["prompts"]
    sampling = dict(spec["sampling_params"])
    b1 = spec["batch1"]
    return {
        "batch1": ([[prompts[b1["prompt_index"]]]], dict(sampling, max_new_tokens=b1["max_new_tokens"])),
        "full": (split_batches(prompts, int(spec.get("batch_size") or 0)), sampling),
    }


def warm_up(endpoint: Endpoint, requests: Mapping[str, tuple[list[list[Any]], dict[str, Any]]], tokens: int) -> None:
    """Every timed request once, untimed (``tokens`` new tokens each; -1: their own lengths; 0: none)."""
    if not tokens:
        return
    for batches, sampling in requests.values():
        for batch in batches:
            endpoint.generate(
                batch, dict(sampling, max_new_tokens=sampling["max_new_tokens"] if tokens < 0 else tokens)
            )


def run_pairs(
    endpoints: Mapping[str, Endpoint],
    requests: Mapping[str, tuple[list[list[Any]], dict[str, Any]]],
    counts: Mapping[str, int],
    *,
    clock: Callable[[], float] = time.perf_counter,
    time_left: Callable[[], float] | None = None,
    say: Callable[[str], Any] = print,
) -> dict[str, Any]:
    """The pairs of :func:`.stats.pair_schedule` (``counts``: timed pairs per phase), each request timed after
    its server's cache flush. ``time_left()`` (seconds) skips a pair when 1.1 x the longest pair of its phase so
    far would not fit.

    Returns ``{"pairs": [{"phase", "pair", "first", "order", "off": {...}, "on": {...}, "ratio"}],
    "not_started": ["phase pair k", ...], "stats": {phase: pair_stats}, "mismatches": [text, ...], "no_output":
    [text, ...]}`` (``no_output``: the requests whose outputs :func:`.workload.output_problem` refuses); each
    mode's record ``{"seconds", "completion_tokens", "tokens_per_s", "ids_md5", "flushed"}``.
    """
    pairs: list[dict[str, Any]] = []
    not_started: list[str] = []
    mismatches: list[str] = []
    no_output: list[str] = []
    reference: dict[str, tuple[str, list[list[int]], str]] = {}  # phase -> (md5, outputs, where)
    longest: dict[str, float] = {}
    total = {phase: n + 1 for phase, n in counts.items() if n > 0}
    for phase, k in pair_schedule(counts):
        if time_left is not None and k > 0 and phase in longest and 1.1 * longest[phase] > time_left():
            not_started.append(f"{phase} pair {k}")
            continue
        batches, sampling = requests[phase]
        rec: dict[str, Any] = {"phase": phase, "pair": k, "first": k == 0, "order": ",".join(pair_order(k))}
        t0 = clock()
        for mode in pair_order(k):
            flushed = endpoints[mode].flush()
            part = timed(endpoints[mode].generate, batches, sampling, clock)
            outputs = [o["output_ids"] for o in part["outputs"]]
            where = f"{phase} pair {k} ({mode})"
            problem = output_problem(
                part["outputs"], sampling["max_new_tokens"] if sampling.get("ignore_eos") else None
            )
            if problem:
                no_output.append(f"{where}: {problem}")
            tokens = sum(int(m.get("completion_tokens") or 0) for m in part["meta"]) or sum(map(len, outputs))
            secs = float(part["seconds"])
            rec[mode] = {
                "seconds": secs,
                "completion_tokens": tokens,
                "tokens_per_s": tokens / secs if secs > 0 else None,
                "ids_md5": md5_of_ids(outputs),
                "flushed": flushed,
            }
            if phase not in reference:
                reference[phase] = (rec[mode]["ids_md5"], outputs, where)
            elif rec[mode]["ids_md5"] != reference[phase][0]:
                d = first_difference(reference[phase][1], outputs)
                at = f"; first difference at request {d[0]}, token {d[1]}" if d else ""
                mismatches.append(
                    f"md5 differ: {where} {rec[mode]['ids_md5']} vs {reference[phase][2]} {reference[phase][0]}{at}"
                )
        longest[phase] = max(longest.get(phase, 0.0), clock() - t0)
        off, on = rec["off"]["tokens_per_s"], rec["on"]["tokens_per_s"]
        rec["ratio"] = on / off if on and off else None
        pairs.append(rec)
        same = rec["off"]["ids_md5"] == rec["on"]["ids_md5"] == reference[phase][0]
        verdict = "not compared (no output)" if no_output else "equal" if same else "DIFFERENT"
        say(
            f"   {phase} pair {k}/{total[phase] - 1}{' (first after warm-up)' if k == 0 else ''} [{rec['order']}]: "
            f"off {fmt_rate(off)} tok/s, on {fmt_rate(on)} tok/s, on/off {fmt_ratio(rec['ratio'])}, "
            f"md5 {verdict}"
        )
    stats = {
        phase: pair_stats(
            [{m: p[m]["tokens_per_s"] for m in ("off", "on")} for p in pairs if p["phase"] == phase and not p["first"]]
        )
        for phase in counts
    }
    return {
        "pairs": pairs,
        "not_started": not_started,
        "stats": stats,
        "mismatches": mismatches,
        "no_output": no_output,
    }


def execute(
    ctx: RunContext,
    spec: dict[str, Any],
    work: Path,
    *,
    command: server.CommandBuilder | None = None,
    say: Callable[[str], Any] = print,
) -> tuple[list[RunResult], dict[str, Any] | None]:
    """Both servers up (or the user's), warm-up, the pairs, both stopped. Returns one result per server (its
    status reports read) and the pairs of :func:`run_pairs` (None when a server did not start or a request
    failed)."""
    args = ctx.args
    requests = phase_requests(spec)
    deadline = ctx.t_start + args.time_budget - STOP_RESERVE_S if args.time_budget else None
    results: list[RunResult] = []
    started: dict[str, dict[str, Any]] = {}  # mode -> server.launched's info (gets its returncode when stopped)
    data: dict[str, Any] | None = None
    launch = command or server.server_command
    # both servers stopped together when the block ends (the fleet's); the ExitStack keeps their blocks open
    with server.Fleet() as fleet, contextlib.ExitStack() as servers:
        endpoints: dict[str, Endpoint] = {}
        for mode in ("off", "on"):
            rdir, log = work / f"reports-{mode}", work / f"server-{mode}.log"
            rdir.mkdir(parents=True, exist_ok=True)
            for old in rdir.glob("status-*.json"):
                old.unlink()
            res = RunResult(mode, log=str(log))
            results.append(res)
            t0 = time.monotonic()
            if ctx.no_reports:
                base = (args.base_url_off if mode == "off" else args.base_url_on).rstrip("/")
                res.error = server.wait_healthy(base, None, min(args.run_timeout, 60.0))
                say(f"-- server {mode}: {base}")
            else:
                res.report_dir = str(rdir)
                say(
                    f"-- starting the {mode} server: launch_server {'with' if mode == 'on' else 'without'} the flag ..."
                )
                info = servers.enter_context(
                    server.launched(
                        spec["engine_kwargs"],
                        mode,
                        rdir,
                        log,
                        timeout=_start_timeout(ctx),
                        verbose=args.verbose,
                        command=launch,
                        plugin=spec.get("plugin"),
                        fleet=fleet,
                    )
                )
                started[mode] = info
                res.pid, res.command, res.error, base = info["pid"], info["command"], info["error"], info["base_url"]
                say("   server: " + server.describe_command(info["command"]))
            if res.error:
                say(f"   FAILED: {res.error}")
                if mode == "off":
                    results.append(RunResult("on", error="not started (the off server failed)"))
                break
            say(f"   healthy after {time.monotonic() - t0:.1f} s at {base}")
            endpoints[mode] = Endpoint.of_server(
                mode,
                server.http_generate(base, spec["prompt_format"], args.run_timeout),
                server.http_flush(base, args.run_timeout),
            )
        else:
            try:
                t0 = time.monotonic()
                for mode in ("off", "on"):
                    warm_up(endpoints[mode], requests, int(spec.get("warmup_tokens") or 0))
                say(
                    f"-- warm-up of both servers (every timed request once) took {time.monotonic() - t0:.1f} s; "
                    "pairs (prefix cache emptied before each request):"
                )
                data = run_pairs(
                    endpoints,
                    requests,
                    ctx.pair_counts,
                    time_left=(lambda: deadline - time.monotonic()) if deadline is not None else None,
                    say=say,
                )
                for r in results:
                    r.ok = True
            except (RequestFailed, *REQUEST_ERRORS) as exc:
                # only the server whose request failed failed; the other one is stopped with it (audit m-E6)
                failed_mode = exc.mode if isinstance(exc, RequestFailed) else None
                what = str(exc) if isinstance(exc, RequestFailed) else f"{type(exc).__name__}: {exc}"
                pid = started.get(failed_mode or "", {}).get("pid")
                for r in results:
                    if failed_mode in (None, r.mode):
                        r.error = server.request_failure(pid, what)  # m14: a server that died says so
                say(f"   FAILED: the {failed_mode or 'a'} server's request failed: {what}")
    for r in results:
        if r.mode in started:
            r.returncode = started[r.mode].get("returncode")
            r.plugin_log_lines = server.plugin_lines(Path(str(r.log)))
            for line in r.plugin_log_lines:
                say(f"   server log ({r.mode}): {line}")
        r.reports, r.report_problems = read_reports(r.report_dir)
    return results, data


def _start_timeout(ctx: RunContext) -> float:
    """Seconds a server may take to start: ``--run-timeout``, at most what is left of ``--time-budget`` (>= 1)."""
    if not ctx.args.time_budget:
        return float(ctx.args.run_timeout)
    left = ctx.t_start + ctx.args.time_budget - time.monotonic()
    return min(float(ctx.args.run_timeout), max(1.0, left))


#: The columns of ``--csv-out``: one row per pair.
CSV_FIELDS = (
    "variant",
    "phase",
    "pair",
    "first",
    "order",
    "off_seconds",
    "on_seconds",
    "off_tokens",
    "on_tokens",
    "off_tok_s",
    "on_tok_s",
    "on_off_ratio",
    "off_md5",
    "on_md5",
)


def csv_rows(data: Mapping[str, Any], variant: str = "") -> list[dict[str, Any]]:
    """One row per pair (:data:`CSV_FIELDS`); ``first`` marks pair 0, which the statistics leave out."""
    rows = []
    for p in data["pairs"]:
        off, on = p["off"], p["on"]
        rows.append(
            {
                "variant": variant,
                "phase": p["phase"],
                "pair": p["pair"],
                "first": int(p["first"]),
                "order": p["order"],
                "off_seconds": f"{off['seconds']:.6f}",
                "on_seconds": f"{on['seconds']:.6f}",
                "off_tokens": off["completion_tokens"],
                "on_tokens": on["completion_tokens"],
                "off_tok_s": "" if off["tokens_per_s"] is None else f"{off['tokens_per_s']:.3f}",
                "on_tok_s": "" if on["tokens_per_s"] is None else f"{on['tokens_per_s']:.3f}",
                "on_off_ratio": "" if p["ratio"] is None else f"{p['ratio']:.5f}",
                "off_md5": off["ids_md5"],
                "on_md5": on["ids_md5"],
            }
        )
    return rows


def write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    with open_for_writing(path, newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(CSV_FIELDS))
        w.writeheader()
        w.writerows(rows)
