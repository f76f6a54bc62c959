"""End-to-end check: the same greedy generation with the plugin off and on, compared by md5.

``sglang-mamba-dedup e2e [options]`` (or ``python examples/e2e_md5.py``) runs SGLang's offline
``sglang.Engine`` several times, each time in a fresh Python process started by this driver, with identical
arguments: the model, ``--speculative-algorithm NEXTN`` with topk 1 and 4 draft tokens (3 steps),
temperature 0, a fixed seed and the fixed prompt set shipped in ``data/prompts.json``. An "off" run has
``SGLANG_MAMBA_DEDUP=0``, an "on" run ``SGLANG_MAMBA_DEDUP=1`` (``--server``: ``launch_server`` without and
with ``--enable-mamba-conv-dedup``). It hashes the output token ids and the text, prints the versions, the
GPU, the md5s, each run's rates, the commit counts of the plugin's status report as the *scheduler process*
wrote it (``SGLANG_MAMBA_DEDUP_REPORT_DIR``).

Deployment settings by default (:func:`.settings.deployment_defaults`): decode CUDA graphs on
(``cuda_graph_backend_decode=full``), the radix (prefix) cache on, overlap scheduling as SGLang decides, prefill
CUDA graphs off (``cuda_graph_backend_prefill=disabled``: SGLang's prefill capture crashed on our machine, with
and without the plugin). ``--no-cuda-graph`` and ``--no-radix-cache`` give the old settings; an ``--engine-arg``
always wins over a default. A default the installed SGLang's ``ServerArgs`` has no field for is dropped (the
header names it), so older releases run with their own defaults.

Every run generates two rounds (:func:`.workload.run_plan`), after an untimed warm-up and an emptied prefix
cache: round 1 is the prompts; round 2 is every round-1 prompt followed by its round-1 output and a short new
suffix (:func:`.workload.round2_prompts`), so SGLang reads the mamba states it saved in round 1 back from the
radix cache. The md5 covers both rounds. With the radix cache on, SGLang >= 0.5.14 passes track slots with every
verify commit (see :func:`.settings.track_expectation` for what triggers it); the "on" run must then show commits
with track slots through our kernel (``--expect-track``, the default where SGLang tracks).

``--server --throughput`` (or with ``--base-url-off/--base-url-on``): the speed, with the off and the on server
alive at once, requests in pairs A B B A (:mod:`.paired`; per-pair on/off ratios, their median and min-max; one
md5 for every output). Exit codes as below (a server that does not start: 3).

Exit status: :data:`.verdict.MEANINGS` (``--help`` lists it, :data:`EPILOG`). Before anything is built or run a
usage error exits 2 (argparse: one ``error:`` line on stderr) and a machine without a CUDA GPU 5; after the runs
the first code of :data:`.verdict.PRECEDENCE` that applies; a SIGINT (Ctrl-C), SIGTERM or SIGHUP exits 128 + the signal.

The offline Engine runs in :mod:`.engine` (why it is the default: see there), the server route in
:mod:`.server`. This module is the command line: the parser, the usage checks that involve several options,
and :func:`main`, which hands the checked options to :func:`.driver.run`.

``--zero-copy`` adds ``SGLANG_MAMBA_DEDUP_ZERO_COPY=1`` to the "on" and "fault" runs and requires their schedulers
to serve commits zero-copy; with the radix cache on (the default; ``--no-radix-cache`` keeps it off) those runs
must also serve commits with a track set zero-copy, and every run's round 2 must read cached tokens back
(:func:`.verdict.judge_runs`); without it the variables are removed from every run (and the radix opt-out
``SGLANG_MAMBA_DEDUP_ZERO_COPY_RADIX`` from every run always). ``--mamba-radix-cache-strategy``,
``--mamba-track-interval`` and ``--disable-overlap-schedule`` are SGLang's options, the same in every run; the combinations that prove nothing or that SGLang refuses are usage errors
(:func:`.settings.radix_problem`). ``--fault`` picks the negative control's fault (:data:`sglang_mamba_dedup.patches.faults.FAULTS`).
``--streaming-sessions`` runs rounds 1 and 2 as two turns of a streaming session per prompt (the Engine route);
with ``--zero-copy`` the on runs must also materialize the states the sessions kept.

``--random-weights`` builds a Qwen3.5-architecture checkpoint with its MTP layer and seeded random
weights (:mod:`.random_model`) into a temporary directory: no downloads are needed.
That checkpoint is removed at exit, also after a failure; one built under ``--workdir`` or
``--random-weights-dir`` stays (and is reused by the next call).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import signal
import socket
import tempfile
import textwrap
import time
import urllib.parse
from pathlib import Path
from typing import NoReturn

from ..cli._args import number
from ..patches import faults
from . import console, driver, interrupts, verdict
from .engine import Runner
from .settings import DEFAULT_MODEL, mamba2_interval_problem, parse_engine_args, radix_problem
from .workload import load_prompts

#: Run modes: the plugin off, on, and on with the negative control's fault (:mod:`sglang_mamba_dedup.patches.faults`)
#: installed.
MODES = ("off", "on", "fault")

EPILOG = (
    """\
examples:
  sglang-mamba-dedup e2e --random-weights                        # Qwen3.5-0.8B architecture, random weights
  sglang-mamba-dedup e2e --random-weights --server               # the same through launch_server + HTTP
  sglang-mamba-dedup e2e --random-weights --server --throughput  # speed: off and on server side by side, A B B A
  sglang-mamba-dedup e2e --random-weights --no-cuda-graph --no-radix-cache   # the old eager, cache-less settings
  sglang-mamba-dedup e2e --base-url-off http://h:30000 --base-url-on http://h:30001 --model-path M
  sglang-mamba-dedup e2e --model-path Qwen/Qwen3.5-0.8B --num-prompts 8 --max-new-tokens 64
  sglang-mamba-dedup e2e --random-weights --modes off,off --workdir ./e2e-work   # harness check, keeps logs
  sglang-mamba-dedup e2e --random-weights --modes off,on,fault --zero-copy --fault zc_no_stage_in

exit status:
"""
    + "".join(
        "\n".join(textwrap.wrap(f"{code}  {text}", 114, initial_indent="  ", subsequent_indent="     ")) + "\n"
        for code, text in sorted(verdict.MEANINGS.items())
    )
    + textwrap.fill(
        f"after the runs the first of {', '.join(map(str, verdict.PRECEDENCE))} that applies is the exit status; "
        f"a SIGTERM or SIGHUP stops the servers and exits {verdict.EXIT_SIGNAL_BASE} + the signal "
        f"({verdict.EXIT_SIGNAL_BASE + signal.SIGTERM}, {verdict.EXIT_SIGNAL_BASE + signal.SIGHUP}).",
        114,
    )
    + "\n"
)


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line on stderr (exit 2), without the usage dump."""

    def error(self, message: str) -> NoReturn:
        self.exit(verdict.EXIT_USAGE, f"{self.prog}: error: {message} (see --help)\n")


def _key_value(text: str) -> str:
    """argparse type of ``--engine-arg``: ``KEY=VALUE`` with a non-empty key (kept as text)."""
    key, sep, _ = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"must be KEY=VALUE, got {text!r}")
    return text


def _random_dim(text: str) -> tuple[str, int]:
    """argparse type of ``--random-dim``: ``FIELD=INT`` with FIELD a field of the random model's dims."""
    import dataclasses

    from .random_model import ModelDims

    key, sep, val = text.partition("=")
    key = key.strip().replace("-", "_")
    try:
        num = int(val)
    except ValueError:
        num = None
    if not sep or not key or num is None:
        raise argparse.ArgumentTypeError(f"must be KEY=INT, got {text!r}")
    fields = [f.name for f in dataclasses.fields(ModelDims)]
    if key not in fields:
        raise argparse.ArgumentTypeError(f"unknown field {key!r}; one of {', '.join(fields)}")
    return key, num


def _modes(text: str) -> list[str]:
    """argparse type of ``--modes``: a comma list of at least two runs of ``off``/``on``/``fault``, the
    first ``off`` or ``on`` (the reference every later run is compared with)."""
    modes = [x.strip() for x in text.split(",") if x.strip()]
    if len(modes) < 2 or any(m not in MODES for m in modes) or modes[0] == "fault":
        raise argparse.ArgumentTypeError(
            f"must list at least two runs of {'/'.join(repr(m) for m in MODES)}, the first not 'fault', got {text!r}"
        )
    return modes


_positive_int = number(int)
_non_negative_int = number(int, inclusive=True)
_positive_float = number(float)


def _build_parser() -> argparse.ArgumentParser:
    from .random_model import PRESETS  # no torch: the presets are plain dataclasses

    p = _Parser(
        prog=console.PROG,
        description="Greedy md5 comparison of a real SGLang run with NEXTN, plugin off vs on (needs a CUDA GPU).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    m = p.add_argument_group("model")
    m.add_argument("--model-path", default=None, help=f"checkpoint or hub id (default {DEFAULT_MODEL})")
    m.add_argument(
        "--random-weights",
        action="store_true",
        help="build a checkpoint of --random-preset with seeded random weights (MTP included) "
        "into a temporary directory, removed at exit (or into --random-weights-dir / "
        "--workdir, kept) and serve it without a tokenizer",
    )
    m.add_argument(
        "--random-preset",
        default="qwen3.5-0.8b",
        choices=sorted(PRESETS),
        help="architecture of --random-weights (default %(default)s)",
    )
    m.add_argument("--random-weights-dir", default=None, help="build (or reuse) the random checkpoint here")
    m.add_argument("--weights-seed", type=int, default=0, help="seed of the random weights")
    m.add_argument(
        "--random-dim",
        action="append",
        default=[],
        metavar="FIELD=INT",
        type=_random_dim,
        help="override one architecture field of the random model, e.g. num_hidden_layers=8",
    )
    m.add_argument("--draft-model-path", default=None, help="MTP draft checkpoint (default: the model itself)")

    s = p.add_argument_group("speculative decoding")
    s.add_argument("--speculative-algorithm", default="NEXTN")
    s.add_argument("--num-steps", type=_positive_int, default=3)
    s.add_argument("--topk", type=_positive_int, default=1)
    s.add_argument("--num-draft-tokens", type=_positive_int, default=4)

    g = p.add_argument_group("generation (two rounds per run: the prompts, then prompt + output + a new suffix)")
    g.add_argument("--prompts", default=None, help="prompt file (default: the shipped data/prompts.json)")
    g.add_argument("--num-prompts", type=_positive_int, default=None, help="use the first N prompts (default all)")
    g.add_argument(
        "--prompt-format",
        choices=["auto", "text", "ids"],
        default="auto",
        help="auto: token ids (text_to_ids) for --random-weights, text otherwise",
    )
    g.add_argument(
        "--vocab-size", type=_positive_int, default=None, help="for --prompt-format ids without a local config"
    )
    g.add_argument("--max-new-tokens", type=_positive_int, default=128)
    g.add_argument("--no-ignore-eos", action="store_true", help="stop at EOS (default: fixed lengths)")
    g.add_argument("--seed", type=int, default=0, help="SGLang random_seed (and sampling seed)")
    g.add_argument(
        "--batch-size",
        type=_non_negative_int,
        default=0,
        help="prompts per generate call (default 0: all at once, the full batch)",
    )
    g.add_argument(
        "--max-running-requests",
        type=_positive_int,
        default=None,
        help="concurrency cap of the scheduler (default: the batch size); fixed so that all runs batch the same way",
    )
    g.add_argument(
        "--warmup-tokens",
        type=int,
        default=-1,
        help="tokens of the untimed warm-up generation of every batch (default -1: max_new_tokens; 0: no warm-up)",
    )

    e = p.add_argument_group(
        "engine (defaults: decode CUDA graphs on, prefill CUDA graphs off, radix cache on, overlap as SGLang decides)"
    )
    e.add_argument("--mem-fraction-static", type=float, default=None)
    e.add_argument("--log-level", default="warning")
    e.add_argument(
        "--no-cuda-graph",
        action="store_true",
        help="decode CUDA graphs off (cuda_graph_backend_decode=disabled; disable_cuda_graph on releases without it)",
    )
    e.add_argument(
        "--no-radix-cache",
        action="store_true",
        help="radix (prefix) cache off (disable_radix_cache=true): no track slots, round 2 reads nothing back",
    )
    e.add_argument(
        "--mamba-radix-cache-strategy",
        choices=["auto", "no_buffer", "extra_buffer", "extra_buffer_lazy"],
        default=None,
        help="SGLang's mamba radix-cache strategy, the same in every run (default: SGLang's, auto). "
        "extra_buffer_lazy needs overlap scheduling; --zero-copy with --disable-overlap-schedule needs extra_buffer",
    )
    e.add_argument(
        "--mamba-track-interval",
        type=_positive_int,
        default=None,
        metavar="N",
        help="SGLang's mamba_track_interval (default its own, 256): lower it (e.g. 64 for Gated DeltaNet; Nemotron-H "
        "needs >= its mamba_chunk_size) so that decode crosses track boundaries often; the same in every run",
    )
    e.add_argument(
        "--disable-overlap-schedule",
        action="store_true",
        help="overlap scheduling off in every run (disable_overlap_schedule=true)",
    )
    e.add_argument(
        "--engine-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        type=_key_value,
        help="extra sglang.Engine argument, same in every run (repeatable), e.g. attention_backend=triton; "
        "wins over the defaults",
    )

    sv = p.add_argument_group("server route (what deployments run)")
    sv.add_argument(
        "--server",
        action="store_true",
        help="run `python -m sglang.launch_server` (the engine arguments as its options, those it does not know "
        "left out) on a free local port and send the prompts over HTTP: the off run without the launch flag, "
        "the on run with --enable-mamba-conv-dedup (no SGLANG_MAMBA_DEDUP: the flag is what is tested)",
    )
    sv.add_argument(
        "--base-url-off",
        default=None,
        metavar="URL",
        help="compare two servers you already run (with --base-url-on): md5 only, no status reports; "
        "their prefix caches are flushed before round 1 and before batch 1",
    )
    sv.add_argument("--base-url-on", default=None, metavar="URL")

    r = p.add_argument_group("runs")
    r.add_argument(
        "--modes",
        default=None,
        type=_modes,
        help="comma list of runs (default off,on); 'fault' adds the negative control (the plugin on with its "
        "commit deliberately broken: its md5 must differ, else exit 6; the device recipe runs off,on,fault); "
        "'off,off' checks the harness (the engagement check is skipped)",
    )
    r.add_argument(
        "--zero-copy",
        action="store_true",
        help="the zero-copy commit: SGLANG_MAMBA_DEDUP_ZERO_COPY=1 in the on and fault runs (never in the off "
        "run); their schedulers must report it on and commits served zero-copy, else exit 8. With the radix cache "
        "on (the default) those runs must also show commits with a "
        "track set served zero-copy (zc_track_commits > 0), and every run's round 2 must read cached tokens, else "
        "exit 8; with --no-radix-cache the radix cache is off in every run. Without it the variables are removed "
        "from every run",
    )
    r.add_argument(
        "--streaming-sessions",
        action="store_true",
        help="rounds 1 and 2 as two turns of one streaming session per prompt (enable_streaming_session; round 2 "
        "sends only its suffix and continues from the state the session kept). Engine route only. With "
        "--zero-copy the on runs must report kept states materialized (events.zc_materialize_calls > 0), "
        "else exit 8",
    )
    r.add_argument(
        "--fault",
        default=faults.COMMIT_STEP0,
        choices=list(faults.FAULTS),
        help="the fault of the fault runs (default %(default)s; zc_no_stage_in needs --zero-copy)",
    )
    r.add_argument(
        "--expect-track",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the 'on' run must show commits with track slots through our kernel, else exit 8 (default: yes "
        "where SGLang passes track slots: radix cache on and a mamba strategy that resolves to extra_buffer, "
        "SGLang >= 0.5.14; the header says which)",
    )
    r.add_argument(
        "--throughput",
        action="store_true",
        help="with --server (or --base-url-off/--base-url-on): the off and the on server up side by side, both "
        "warmed up, then --batch1-pairs and --full-pairs pairs of the same request in the order A B, B A, ... "
        "(prefix cache emptied before each); per phase the on/off ratio of every pair, its median and min-max, "
        "each mode's median tok/s; any md5 difference exits 1 (docs/e2e.md)",
    )
    r.add_argument(
        "--batch1-pairs",
        type=_non_negative_int,
        default=None,
        metavar="N",
        help="with --throughput: timed pairs of the batch-1 request (default 30), after pair 0",
    )
    r.add_argument(
        "--full-pairs",
        type=_non_negative_int,
        default=None,
        metavar="N",
        help="with --throughput: timed pairs of the full batch (default 10), after pair 0",
    )
    r.add_argument(
        "--csv-out",
        default=None,
        metavar="PATH",
        help="with --throughput: one CSV row per pair (phase, order, seconds, tok/s, ratio, md5s)",
    )
    r.add_argument(
        "--label",
        default="",
        help="with --throughput: a name of this call's settings, in the header, the summary and the CSV "
        "(e.g. replayssm)",
    )
    r.add_argument(
        "--batch1-tokens",
        type=_positive_int,
        default=None,
        metavar="N",
        help="with --throughput: new tokens of the batch-1 request (default 256)",
    )
    r.add_argument(
        "--time-budget",
        type=_positive_float,
        default=None,
        metavar="SECONDS",
        help="start no further run once the time since the start plus 1.1 x the longest run so far exceeds "
        "this; the runs not started are listed (fits a call into a time limit); with --throughput the same per "
        "pair (the longest pair of its phase), 30 s kept for stopping the servers",
    )
    r.add_argument("--run-timeout", type=_positive_float, default=1200.0, help="seconds per run")
    r.add_argument(
        "--workdir",
        default=None,
        help="keep logs, results, reports and the random checkpoint here (default: a temporary folder "
        "/tmp/smd-e2e-*, removed after a PASS; after a failure or an interruption it is kept and named)",
    )
    r.add_argument("--json-out", default=None, help="write the summary as JSON here")
    r.add_argument("--verbose", action="store_true", help="show the engine logs instead of writing them to files")
    return p


def _check_usage(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Usage errors that involve more than one option (``parser.error``: exit 2)."""
    if bool(args.base_url_off) != bool(args.base_url_on):
        parser.error("--base-url-off and --base-url-on go together")
    for opt, url in (("--base-url-off", args.base_url_off), ("--base-url-on", args.base_url_on)):
        if url is not None and _server_of(url) is None:
            parser.error(f"{opt} {url!r}: not an http:// or https:// URL with a host (e.g. http://127.0.0.1:30000)")
    if args.base_url_off and _same_server(args.base_url_off, args.base_url_on):
        parser.error("--base-url-off and --base-url-on are the same server: that compares a server with itself")
    if args.base_url_off and (args.server or args.random_weights):
        parser.error("--base-url-off/--base-url-on compare servers you run: no --server or --random-weights")
    if args.base_url_off and args.modes not in (None, ["off", "on"]):
        parser.error("--base-url-off/--base-url-on compare exactly one off and one on server (--modes off,on)")
    if "fused" not in faults.FAULTS[args.fault].routes and not args.zero_copy:
        parser.error(f"--fault {args.fault} breaks the zero-copy commit: it needs --zero-copy")
    if args.zero_copy and args.base_url_off:
        parser.error("--zero-copy sets the runs' environment: not with --base-url-off/--base-url-on")
    radix_kw = _radix_keywords(args)
    if problem := radix_problem(radix_kw, args.zero_copy) or mamba2_interval_problem(radix_kw, _chunk_size(args)):
        parser.error(problem)
    if args.fault in _TRACK_FAULTS and radix_kw.get("disable_radix_cache"):
        parser.error(
            f"--fault {args.fault} breaks the zero-copy commit's track set, which only the radix cache on has: "
            "with the radix cache off it changes nothing (the fault run would equal the on run)"
        )
    if args.streaming_sessions and (args.server or args.base_url_off or args.throughput):
        parser.error("--streaming-sessions runs on the Engine route: not with --server, --base-url-* or --throughput")
    if args.throughput:
        if not (args.server or args.base_url_off):
            parser.error("--throughput runs two servers side by side: add --server or --base-url-off/--base-url-on")
        if args.modes is not None:
            parser.error("--throughput plans its own requests (off and on server, pairs): no --modes")
        if (args.batch1_pairs, args.full_pairs) == (0, 0):
            parser.error("--batch1-pairs 0 and --full-pairs 0 leave nothing to time")
    else:
        given = [
            o
            for o, v in (
                ("--batch1-pairs", args.batch1_pairs is not None),
                ("--full-pairs", args.full_pairs is not None),
                ("--batch1-tokens", args.batch1_tokens is not None),
                ("--csv-out", args.csv_out),
                ("--label", args.label),
            )
            if v
        ]
        if given:
            parser.error(f"{' and '.join(given)} need{'s' if len(given) == 1 else ''} --throughput")
    if not args.random_weights:
        given = [
            o for o, v in (("--random-dim", args.random_dim), ("--random-weights-dir", args.random_weights_dir)) if v
        ]
        if given:
            parser.error(f"{' and '.join(given)} need{'s' if len(given) == 1 else ''} --random-weights")
    if args.prompts is not None:
        try:
            load_prompts(args.prompts)
        except (OSError, ValueError, KeyError, TypeError) as exc:  # JSONDecodeError is a ValueError
            parser.error(f"--prompts {args.prompts!r}: {type(exc).__name__}: {exc}")
    if args.workdir is not None and Path(args.workdir).exists() and not Path(args.workdir).is_dir():
        parser.error(f"--workdir {args.workdir!r} exists and is not a folder")
    for opt, value in (("--json-out", args.json_out), ("--csv-out", args.csv_out)):
        problem = _unwritable(Path(value)) if value is not None else None
        if problem:
            parser.error(f"{opt} {value!r}: {problem}")
    if args.json_out and args.csv_out and os.path.realpath(args.json_out) == os.path.realpath(args.csv_out):
        parser.error(
            f"--json-out and --csv-out are the same file {args.csv_out!r}: the summary would overwrite the CSV"
        )
    if args.random_weights and importlib.util.find_spec("safetensors") is None:
        parser.error(
            "--random-weights writes a checkpoint with safetensors, which is not installed: "
            "pip install 'sglang-mamba-dedup[e2e]'"
        )
    if args.prompt_format == "ids" and not args.random_weights and args.vocab_size is None:
        model = args.model_path or DEFAULT_MODEL
        if not (Path(model) / "config.json").exists():
            parser.error(f"--prompt-format ids needs --vocab-size (no local config.json in {model!r} to read it from)")
    problem = _uncreatable(Path(args.workdir)) if args.workdir is not None else None
    if problem:
        parser.error(f"--workdir {args.workdir!r}: cannot be created or written ({problem})")


def _chunk_size(args: argparse.Namespace) -> int | None:
    """The ``mamba_chunk_size`` of the Nemotron-H model the runs load (the random preset's, or a local config.json's),
    None for another model, a model not on this machine, or a config that says none."""
    if args.mamba_track_interval is None:
        return None
    config = Path(args.random_weights_dir or "") / "config.json" if args.random_weights else None
    try:
        if args.random_weights and not (config and config.exists()):
            from .random_model import build_config, resolve_dims

            cfg = build_config(resolve_dims(args.random_preset, dict(args.random_dim)))
        else:
            path = config or Path(args.model_path or DEFAULT_MODEL) / "config.json"
            cfg = json.loads(path.read_text()) if path.exists() else {}
    except (OSError, ValueError, TypeError, KeyError):  # the run's own checks say what is wrong with it
        return None
    if not any("NemotronH" in str(a) for a in cfg.get("architectures") or []):
        return None
    chunk = cfg.get("mamba_chunk_size", cfg.get("chunk_size"))
    return chunk if isinstance(chunk, int) and not isinstance(chunk, bool) else None


#: The faults that break the zero-copy commit's track set: with the radix cache off there is none to break.
_TRACK_FAULTS = (faults.ZC_NO_TRACK, faults.TRACK_COLUMN_LIVE)


def _radix_keywords(args: argparse.Namespace) -> dict[str, object]:
    """The engine keywords :func:`.settings.radix_problem` judges, as the options and ``--engine-arg`` give them
    (an ``--engine-arg`` wins, as in the runs)."""
    kw: dict[str, object] = {
        "disable_radix_cache": args.no_radix_cache,
        "mamba_radix_cache_strategy": args.mamba_radix_cache_strategy,
        "mamba_track_interval": args.mamba_track_interval,
        "disable_overlap_schedule": args.disable_overlap_schedule,
        "speculative_num_draft_tokens": args.num_draft_tokens,
    }
    try:
        kw.update(parse_engine_args(args.engine_arg))
    except ValueError:  # argparse's type of --engine-arg already refused it
        pass
    return kw


def _server_of(url: str) -> tuple[str, str, int, str] | None:
    """``(scheme, host, port, path)`` of an http(s) URL (the port its scheme's default when left out), or None."""
    parts = urllib.parse.urlsplit(url.strip())
    try:
        port = parts.port
    except ValueError:  # not a number, or out of range
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    default = 443 if parts.scheme == "https" else 80
    return parts.scheme, parts.hostname.lower(), port or default, parts.path.rstrip("/")


def _addresses(host: str) -> set[str]:
    """The addresses ``host`` resolves to (itself when it does not resolve: compared as written)."""
    try:
        return {str(info[4][0]) for info in socket.getaddrinfo(host, None)}
    except (OSError, UnicodeError):
        return {host}


def _same_server(a: str, b: str) -> bool:
    """Two URLs reach one server: same scheme, port and path, and host names that share an address (``localhost``,
    ``127.0.0.1`` and ``127.1`` are one server; m-E8 of the second audit)."""
    sa, sb = _server_of(a), _server_of(b)
    if sa is None or sb is None:
        return sa == sb
    if (sa[0], sa[2], sa[3]) != (sb[0], sb[2], sb[3]):
        return False
    return sa[1] == sb[1] or bool(_addresses(sa[1]) & _addresses(sb[1]))


def _uncreatable(folder: Path) -> str | None:
    """Why ``folder`` cannot be created, or None; the folders made to find out are removed again."""
    made = [p for p in (folder, *folder.parents) if not os.path.lexists(p)]  # deepest first
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return exc.strerror or str(exc)
    try:  # an existing folder must also take files (a read-only one ended in a traceback, m-E7 of the audit)
        fd, probe = tempfile.mkstemp(prefix=".smd-probe-", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        return f"not writable: {exc.strerror or exc}"
    finally:
        for p in made:
            with contextlib.suppress(OSError):
                p.rmdir()
    return None


def _unwritable(path: Path) -> str | None:
    """Why ``path`` cannot be written (checked before any run, so a long run never ends in a traceback)."""
    if path.is_symlink():
        return "is a symbolic link (not followed: name the file itself)"
    if path.is_dir():
        return "is a folder"
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        return f"its folder {str(folder)!r} does not exist"
    if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        return "not writable"
    return None


def main(argv: list[str] | None = None, runner: Runner | None = None) -> int:
    """The ``e2e`` command; returns its exit status (usage errors exit 2 through argparse).

    ``runner`` replaces :func:`.engine.run_in_subprocess` (tests); the CUDA check belongs to that default
    runner and is skipped with another one.
    """
    t_start = time.monotonic()
    parser = _build_parser()
    args = parser.parse_args(argv)
    _check_usage(parser, args)
    with interrupts.handled():
        try:
            return driver.run(args, runner, t_start)
        except KeyboardInterrupt as exc:  # interrupts.Stopped, or Python's own Ctrl-C outside the handlers
            stop = exc if isinstance(exc, interrupts.Stopped) else interrupts.Stopped(signal.SIGINT)
            code = verdict.EXIT_SIGNAL_BASE + stop.signum
            console.stopped(stop.name, code)
            return code
