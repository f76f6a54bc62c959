"""End-to-end check: the same greedy generation with the plugin off and on, compared by md5.

``sglang-mamba-dedup e2e [options]`` (or ``python examples/e2e_md5.py``) runs SGLang's offline
``sglang.Engine`` twice, each time in a fresh Python process started by this driver, with identical
arguments: the model, ``--speculative-algorithm NEXTN`` with topk 1 and 4 draft tokens (3 steps),
temperature 0, a fixed seed and the fixed prompt set shipped in ``data/prompts.json``. The first run has
``SGLANG_MAMBA_DEDUP=0``, the second ``SGLANG_MAMBA_DEDUP=1``. It hashes the output token ids and the
text, prints the versions, the GPU, both md5s, each run's decode throughput and their ratio, and the
plugin's status as the *scheduler process* reported it (``SGLANG_MAMBA_DEDUP_REPORT_DIR``).

Exit status. Before anything is built or run:

* 2  a usage error (argparse: one ``error:`` line on stderr);
* 5  cannot run here: the engine needs a CUDA GPU and ``torch.cuda.is_available()`` is False.

After the runs, the first that applies:

* 3  a run failed (the engine did not start, crashed, or timed out; the last line names the logs);
* 1  the md5s differ (the first differing prompt and token are printed);
* 2  the plugin did not engage in the "on" run: no scheduler report, no dedup layout in place, no bytes
     saved, or no commit ran through our kernels;
* 4  the "off" run was not off (a scheduler report shows our commit ran, or the mode was not "off");
* 0  the md5s are equal and the plugin engaged.

Why the offline Engine, not ``launch_server`` + HTTP: it needs no port and no HTTP client, starts and
stops with the process (nothing left listening between the two runs), takes token ids directly (a
random-weight model has no tokenizer), and returns the speculative-decoding counters in ``meta_info``.
The scheduler runs in its own spawned process either way, which is what the status report checks.

``--random-weights`` builds a Qwen3.5-architecture checkpoint with its MTP layer and seeded random
weights (:mod:`sglang_mamba_dedup.random_model`) into a temporary directory: no downloads are needed.
That checkpoint is removed at exit, also after a failure; one built under ``--workdir`` or
``--random-weights-dir`` stays (and is reused by the next call).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any, Callable, Dict, List, NoReturn, Optional, Sequence, Tuple

__all__ = [
    "PROMPTS_PATH",
    "load_prompts",
    "text_to_ids",
    "md5_of_ids",
    "md5_of_texts",
    "first_difference",
    "read_reports",
    "check_engaged",
    "check_off",
    "build_engine_kwargs",
    "run_in_subprocess",
    "main",
    "EXIT_OK",
    "EXIT_MD5_DIFFER",
    "EXIT_NOT_ENGAGED",
    "EXIT_RUN_FAILED",
    "EXIT_OFF_NOT_OFF",
    "EXIT_CANNOT_RUN",
]

PROMPTS_PATH = Path(__file__).resolve().parent / "data" / "prompts.json"
DEFAULT_MODEL = "Qwen/Qwen3.5-0.8B"
SWITCH_ENV = "SGLANG_MAMBA_DEDUP"
REPORT_DIR_ENV = "SGLANG_MAMBA_DEDUP_REPORT_DIR"

EXIT_OK = 0
EXIT_MD5_DIFFER = 1
EXIT_NOT_ENGAGED = 2
EXIT_RUN_FAILED = 3
EXIT_OFF_NOT_OFF = 4
EXIT_CANNOT_RUN = 5

ENGAGED_LAYOUTS = ("ours", "upstream")


# ----------------------------------------------------------------------------- prompts, hashing
def load_prompts(path: Optional[os.PathLike] = None, limit: Optional[int] = None) -> List[str]:
    """The fixed prompt set (text), in file order; ``limit`` keeps the first ``limit`` prompts."""
    doc = json.loads(Path(path or PROMPTS_PATH).read_text(encoding="utf-8"))
    prompts = doc["prompts"] if isinstance(doc, dict) else doc
    if not all(isinstance(p, str) and p for p in prompts):
        raise ValueError("prompts must be non-empty strings")
    return list(prompts[:limit] if limit else prompts)


_PIECE = re.compile(r"\w+|[^\w\s]", re.UNICODE)


def text_to_ids(text: str, vocab_size: int) -> List[int]:
    """Token ids for a model without a tokenizer: one id per word or punctuation mark.

    ``crc32(piece) % vocab_size``: deterministic across machines and Python versions (no ``hash()``
    salt), independent of any tokenizer, and within the vocabulary of any model size.
    """
    if vocab_size <= 0:
        raise ValueError("vocab_size must be positive")
    return [zlib.crc32(p.encode("utf-8")) % vocab_size for p in _PIECE.findall(text)]


def md5_of_ids(outputs: Sequence[Sequence[int]]) -> str:
    """md5 of the output token ids of all prompts, in prompt order (canonical JSON)."""
    canon = json.dumps([[int(t) for t in ids] for ids in outputs], separators=(",", ":"))
    return hashlib.md5(canon.encode()).hexdigest()


def md5_of_texts(texts: Sequence[Optional[str]]) -> Optional[str]:
    """md5 of the output texts, or None when a run had no detokenizer output (``skip_tokenizer_init``)."""
    if not texts or any(t is None for t in texts):
        return None
    canon = json.dumps(list(texts), ensure_ascii=False, separators=(",", ":"))
    return hashlib.md5(canon.encode("utf-8")).hexdigest()


def first_difference(a: Sequence[Sequence[int]], b: Sequence[Sequence[int]]) -> Optional[Tuple[int, int]]:
    """(prompt index, token index) of the first difference between two runs' outputs, or None."""
    for i, (x, y) in enumerate(zip(a, b)):
        if list(x) != list(y):
            j = next((k for k, (u, v) in enumerate(zip(x, y)) if u != v), min(len(x), len(y)))
            return i, j
    if len(a) != len(b):
        return min(len(a), len(b)), 0
    return None


# ----------------------------------------------------------------------------- status reports
def read_reports(report_dir: Optional[os.PathLike]) -> Tuple[List[dict], List[str]]:
    """All ``status-<pid>.json`` reports in ``report_dir`` and the problems met reading them."""
    reports: List[dict] = []
    problems: List[str] = []
    if report_dir is None or not Path(report_dir).is_dir():
        return reports, problems
    for path in sorted(Path(report_dir).glob("status-*.json")):
        try:
            doc = json.loads(path.read_text())
            if not isinstance(doc, dict) or not isinstance(doc.get("pid"), int):
                raise ValueError("not a status report (no integer 'pid')")
            doc["_file"] = path.name
            reports.append(doc)
        except Exception as e:  # a half-written or foreign file
            problems.append(f"{path.name}: {e}")
    return reports, problems


def _layout_of(report: dict) -> Optional[dict]:
    ev = report.get("events") or {}
    lay = ev.get("dedup_layout")
    return lay if isinstance(lay, dict) else None


def _saved(lay: dict) -> int:
    try:
        return int(lay.get("dense_bytes", 0)) - int(lay.get("physical_bytes", 0))
    except (TypeError, ValueError):
        return 0


def _commits(report: dict) -> Tuple[int, int]:
    ev = report.get("events") or {}
    try:
        return int(ev.get("commit_calls", 0) or 0), int(ev.get("ours_commit_calls", 0) or 0)
    except (TypeError, ValueError):
        return 0, 0


def _scheduler_reports(reports: List[dict], parent_pid: Optional[int]) -> List[dict]:
    """Reports of processes other than the driver's engine process (``parent_pid``)."""
    return [r for r in reports if parent_pid is None or r.get("pid") != parent_pid]


def check_engaged(reports: List[dict], parent_pid: Optional[int]) -> Tuple[bool, List[str], Optional[dict]]:
    """Did the plugin engage in a scheduler process? Returns (engaged, reasons/evidence, report).

    Engaged means: a report written by a process other than ``parent_pid`` (the process that created
    the ``Engine``) whose pool has the dedup layout in place ("ours" or "upstream"), saves bytes
    (dense > physical), and whose commits ran through our kernels (``ours_commit_calls`` > 0). Every
    scheduler report with a pool must pass (one per TP/PP rank).
    """
    if not reports:
        return (
            False,
            [f"no status report was written by any process (plugin not loaded? {REPORT_DIR_ENV} not passed on?)"],
            None,
        )
    sched = _scheduler_reports(reports, parent_pid)
    if not sched:
        return (
            False,
            [
                f"only the engine's own process (pid {parent_pid}) wrote a report; no scheduler "
                "process did (the plugin was not loaded there)"
            ],
            None,
        )
    with_pool = [r for r in sched if _layout_of(r) is not None]
    if not with_pool:
        r = sched[0]
        return (
            False,
            [
                f"scheduler report {r.get('_file')} (mode {r.get('mode')!r}) has no dedup_layout "
                "event: the mamba pool was not built through the plugin"
            ],
            r,
        )
    reasons: List[str] = []
    for r in with_pool:
        lay = _layout_of(r) or {}
        calls, ours = _commits(r)
        tag = f"pid {r.get('pid')}"
        if r.get("mode") not in ("on", "strict"):
            reasons.append(f"{tag}: mode is {r.get('mode')!r}, not on/strict")
        if lay.get("state") not in ENGAGED_LAYOUTS:
            reasons.append(
                f"{tag}: conv-window layout is {lay.get('state')!r} (reason: {lay.get('reason')}), "
                f"not one of {'/'.join(ENGAGED_LAYOUTS)}"
            )
        if _saved(lay) <= 0:
            reasons.append(
                f"{tag}: no bytes saved (dense {lay.get('dense_bytes')} B, physical {lay.get('physical_bytes')} B)"
            )
        if ours <= 0:
            reasons.append(f"{tag}: no commit ran through our kernels ({calls} commit calls, 0 ours)")
    return (not reasons), reasons, with_pool[0]


def check_off(reports: List[dict], parent_pid: Optional[int]) -> Tuple[bool, List[str]]:
    """Was the "off" run really off? No scheduler report may show mode on or a commit of ours."""
    reasons = []
    for r in _scheduler_reports(reports, parent_pid):
        _, ours = _commits(r)
        if r.get("mode") not in (None, "off"):
            reasons.append(f"pid {r.get('pid')}: mode {r.get('mode')!r} in the off run")
        if ours > 0:
            reasons.append(f"pid {r.get('pid')}: {ours} commits through our kernels in the off run")
    return (not reasons), reasons


def describe_report(report: Optional[dict]) -> str:
    if report is None:
        return "no scheduler report"
    lay = _layout_of(report)
    calls, ours = _commits(report)
    parts = [
        f"pid {report.get('pid')} ({report.get('_file')}), argv0 {report.get('argv0')!r}, "
        f"mode {report.get('mode')!r}, sglang {report.get('sglang_version')}"
    ]
    if lay is None:
        parts.append("dedup layout: none recorded")
    else:
        dense, phys = int(lay.get("dense_bytes", 0) or 0), int(lay.get("physical_bytes", 0) or 0)
        pct = f" ({100.0 * (dense - phys) / dense:.1f}%)" if dense else ""
        parts.append(
            f"dedup layout: {lay.get('state')} (reason: {lay.get('reason')}); conv-window bytes "
            f"dense {dense:,}, physical {phys:,}, saved {dense - phys:,}{pct}"
        )
    parts.append(
        f"commit calls: {calls}, through our kernels: {ours} (the report is rewritten at the 1st, 2nd, "
        "4th, 8th ... commit: counts are the last power of two reached)"
    )
    patches = report.get("patches") or {}
    if patches:
        parts.append(
            "patches: "
            + ", ".join(
                f"{name}={(st or {}).get('state')}" + (f" ({st.get('reason')})" if (st or {}).get("reason") else "")
                for name, st in sorted(patches.items())
            )
        )
    return "\n    ".join(parts)


# ----------------------------------------------------------------------------- engine arguments
def _parse_value(text: str) -> Any:
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def parse_engine_args(items: Sequence[str]) -> Dict[str, Any]:
    """``["k=v", ...]`` -> dict; ``v`` parsed as JSON/bool/None where it can be, else a string."""
    res: Dict[str, Any] = {}
    for it in items or []:
        key, sep, val = it.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--engine-arg expects KEY=VALUE, got {it!r}")
        res[key.strip().replace("-", "_")] = _parse_value(val)
    return res


def build_engine_kwargs(args: argparse.Namespace, model_path: str, skip_tokenizer: bool) -> Dict[str, Any]:
    """The ``sglang.Engine(**kwargs)`` of both runs (identical by construction)."""
    kw: Dict[str, Any] = {
        "model_path": model_path,
        "speculative_algorithm": args.speculative_algorithm,
        "speculative_num_steps": args.num_steps,
        "speculative_eagle_topk": args.topk,
        "speculative_num_draft_tokens": args.num_draft_tokens,
        "speculative_draft_model_path": args.draft_model_path or model_path,
        "random_seed": args.seed,
        "max_running_requests": args.max_running_requests or args.batch_size or args.num_prompts_effective,
        "skip_tokenizer_init": bool(skip_tokenizer),
        "log_level": args.log_level,
    }
    if args.mem_fraction_static is not None:
        kw["mem_fraction_static"] = args.mem_fraction_static
    kw.update(parse_engine_args(args.engine_arg))
    return kw


# ----------------------------------------------------------------------------- one run
Runner = Callable[[Dict[str, Any], str, Path, Path], Dict[str, Any]]

_WORKER_BOOT = "import sys; from sglang_mamba_dedup.e2e import _worker_main; sys.exit(_worker_main(sys.argv[1:]))"


def run_in_subprocess(
    spec: Dict[str, Any],
    mode: str,
    report_dir: Path,
    log_path: Path,
    timeout: Optional[float] = None,
    verbose: bool = False,
) -> Dict[str, Any]:
    """Run one generation in a fresh Python process with ``SGLANG_MAMBA_DEDUP`` set for ``mode``."""
    work = log_path.parent
    spec_path = work / f"spec-{log_path.stem}.json"
    out_path = work / f"result-{log_path.stem}.json"
    spec_path.write_text(json.dumps(spec))
    if out_path.exists():
        out_path.unlink()
    env = os.environ.copy()
    env[SWITCH_ENV] = "1" if mode == "on" else "0"
    env[REPORT_DIR_ENV] = str(report_dir)
    env.setdefault("PYTHONUNBUFFERED", "1")
    t0 = time.time()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-c", _WORKER_BOOT, str(spec_path), str(out_path)],
            env=env,
            stdout=None if verbose else log,
            stderr=subprocess.STDOUT if not verbose else None,
        )
        rc: Any
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            rc = "timeout"
    result: Dict[str, Any] = {"mode": mode, "pid": proc.pid, "returncode": rc, "wall_seconds": time.time() - t0}
    if rc == 0 and out_path.exists():
        result.update(json.loads(out_path.read_text()))
        result["ok"] = True
    else:
        result["ok"] = False
        result["error"] = f"engine process exited with {rc}" + ("" if out_path.exists() else " and wrote no result")
    result["pid"] = proc.pid
    return result


def _versions() -> Dict[str, Optional[str]]:
    from importlib import metadata

    res: Dict[str, Optional[str]] = {"python": platform.python_version()}
    for dist in ("sglang", "torch", "triton", "transformers", "sglang-mamba-dedup"):
        try:
            res[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            res[dist] = None
    return res


def _gpu_info() -> Dict[str, Any]:
    try:
        import torch

        if not torch.cuda.is_available():
            return {"name": None, "count": 0, "cuda": torch.version.cuda}
        cap = torch.cuda.get_device_capability(0)
        return {
            "name": torch.cuda.get_device_name(0),
            "count": torch.cuda.device_count(),
            "capability": f"{cap[0]}.{cap[1]}",
            "cuda": torch.version.cuda,
        }
    except Exception as e:  # pragma: no cover
        return {"name": None, "error": repr(e)}


_META_KEYS = (
    "prompt_tokens",
    "completion_tokens",
    "spec_verify_ct",
    "spec_accept_length",
    "spec_num_correct_drafts",
    "spec_correct_drafts_histogram",
    "finish_reason",
)


def outputs_and_meta(outputs: Sequence[dict]) -> Dict[str, Any]:
    """The ``outputs`` and ``meta`` fields of a run's result from SGLang's generate answers (Engine or HTTP)."""
    return {
        "outputs": [{"output_ids": list(o.get("output_ids") or []), "text": o.get("text")} for o in outputs],
        "meta": [{k: (o.get("meta_info") or {}).get(k) for k in _META_KEYS} for o in outputs],
    }


def _worker_main(argv: List[str]) -> int:
    """Body of the engine process: build the Engine, warm up, generate, write the result JSON."""
    spec_path, out_path = argv[0], argv[1]
    spec = json.loads(Path(spec_path).read_text())
    import sglang  # noqa: F401  (import time is not part of the measurement)

    engine = sglang.Engine(**spec["engine_kwargs"])
    try:
        prompts = spec["prompts"]
        key = "input_ids" if spec["prompt_format"] == "ids" else "prompt"
        bs = int(spec["batch_size"]) or len(prompts)
        batches = [prompts[i : i + bs] for i in range(0, len(prompts), bs)]
        sp = dict(spec["sampling_params"])
        warm = int(spec.get("warmup_tokens") or 0)
        if warm:
            # Compile (and autotune) every Triton kernel of the path before timing: runs share the disk
            # cache, so the first run would otherwise pay for compilation that later runs do not. A short
            # warm-up is not enough (seen on the H200: the first run stayed 4x slower with 8 tokens), so
            # by default the warm-up is the whole generation, untimed (-1 = max_new_tokens).
            n = sp["max_new_tokens"] if warm < 0 else warm
            for batch in batches:
                engine.generate(**{key: batch}, sampling_params=dict(sp, max_new_tokens=n))
        outputs: List[dict] = []
        t0 = time.perf_counter()
        for batch in batches:
            outputs.extend(engine.generate(**{key: batch}, sampling_params=sp))
        seconds = time.perf_counter() - t0
    finally:
        engine.shutdown()
    res = {
        "pid": os.getpid(),
        "gen_seconds": seconds,
        **outputs_and_meta(outputs),
        "versions": _versions(),
        "gpu": _gpu_info(),
    }
    Path(out_path).write_text(json.dumps(res, default=str))
    return 0


# ----------------------------------------------------------------------------- summary
def _run_stats(res: Dict[str, Any]) -> Dict[str, Any]:
    outs = res.get("outputs") or []
    meta = res.get("meta") or [{} for _ in outs]
    completion = sum(int(m.get("completion_tokens") or 0) for m in meta) or sum(len(o["output_ids"]) for o in outs)
    verify = sum(int(m.get("spec_verify_ct") or 0) for m in meta)
    hist: List[int] = []
    for m in meta:
        for i, v in enumerate(m.get("spec_correct_drafts_histogram") or []):
            if i >= len(hist):
                hist.extend([0] * (i + 1 - len(hist)))
            hist[i] += int(v)
    secs = float(res.get("gen_seconds") or 0.0)
    return {
        "completion_tokens": completion,
        "seconds": secs,
        "tokens_per_s": completion / secs if secs > 0 else None,
        "verify_steps": verify,
        "accept_length": completion / verify if verify else None,
        "accepted_drafts_histogram": hist or None,
        "ids_md5": md5_of_ids([o["output_ids"] for o in outs]),
        "text_md5": md5_of_texts([o.get("text") for o in outs]),
    }


def _fmt_rate(x: Optional[float]) -> str:
    return "n/a" if x is None else f"{x:,.1f}"


# ----------------------------------------------------------------------------- CLI
EPILOG = """\
examples:
  sglang-mamba-dedup e2e --random-weights                        # Qwen3.5-0.8B architecture, random weights
  sglang-mamba-dedup e2e --random-weights --server               # the same through launch_server + HTTP
  sglang-mamba-dedup e2e --base-url-off http://h:30000 --base-url-on http://h:30001 --model-path M
  sglang-mamba-dedup e2e --model-path Qwen/Qwen3.5-0.8B --num-prompts 8 --max-new-tokens 64
  sglang-mamba-dedup e2e --random-weights --modes off,off --workdir ./e2e-work   # harness check, keeps logs

exit status:
  0  the md5s are equal and the plugin engaged
  1  the md5s differ
  2  the plugin did not engage in an "on" run; also any usage error (one "error:" line on stderr)
  3  a run failed (the engine did not start, crashed or timed out; see the logs named in the last line)
  4  an "off" run was not off
  5  cannot run here: no CUDA GPU (checked before anything is built or run)
after the runs the first of 3, 1, 2, 4 that applies is the exit status.
"""


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line on stderr (exit 2), without the usage dump."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _key_value(text: str) -> str:
    """argparse type of ``--engine-arg``: ``KEY=VALUE`` with a non-empty key (kept as text)."""
    key, sep, _ = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"must be KEY=VALUE, got {text!r}")
    return text


def _random_dim(text: str) -> Tuple[str, int]:
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


def _modes(text: str) -> List[str]:
    """argparse type of ``--modes``: a comma list of at least two of ``off``/``on``."""
    modes = [x.strip() for x in text.split(",") if x.strip()]
    if len(modes) < 2 or any(m not in ("off", "on") for m in modes):
        raise argparse.ArgumentTypeError(f"must list at least two runs of 'off'/'on', got {text!r}")
    return modes


def _positive_int(text: str) -> int:
    try:
        num = int(text)
    except ValueError:
        num = 0
    if num <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return num


def _build_parser() -> argparse.ArgumentParser:
    from .random_model import PRESETS  # no torch: the presets are plain dataclasses

    p = _Parser(
        prog="sglang-mamba-dedup e2e",
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
    s.add_argument("--num-steps", type=int, default=3)
    s.add_argument("--topk", type=int, default=1)
    s.add_argument("--num-draft-tokens", type=int, default=4)

    g = p.add_argument_group("generation")
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
        "--batch-size", type=int, default=0, help="prompts per Engine.generate call (default 0: all at once)"
    )
    g.add_argument(
        "--max-running-requests",
        type=int,
        default=None,
        help="concurrency cap of the scheduler (default: the batch size); fixed so that both runs batch the same way",
    )
    g.add_argument(
        "--warmup-tokens",
        type=int,
        default=-1,
        help="tokens of the untimed warm-up generation of every batch (default -1: max_new_tokens; 0: no warm-up)",
    )

    e = p.add_argument_group("engine")
    e.add_argument("--mem-fraction-static", type=float, default=None)
    e.add_argument("--log-level", default="warning")
    e.add_argument(
        "--engine-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        type=_key_value,
        help="extra sglang.Engine argument, same in both runs (repeatable), e.g. attention_backend=triton",
    )

    sv = p.add_argument_group("server route (what deployments run)")
    sv.add_argument(
        "--server",
        action="store_true",
        help="run `python -m sglang.launch_server` (the --engine-arg keys as its options) on a free "
        "local port and send the prompts over HTTP: the off run without the launch flag, the on "
        "run with --enable-mamba-conv-dedup (no SGLANG_MAMBA_DEDUP: the flag is what is tested)",
    )
    sv.add_argument(
        "--base-url-off",
        default=None,
        metavar="URL",
        help="compare two servers you already run (with --base-url-on): md5 only, no status reports",
    )
    sv.add_argument("--base-url-on", default=None, metavar="URL")

    r = p.add_argument_group("runs")
    r.add_argument(
        "--modes",
        default="off,on",
        type=_modes,
        help="comma list of runs; 'off,off' checks the harness (the engagement check is skipped)",
    )
    r.add_argument("--run-timeout", type=float, default=1200.0, help="seconds per run")
    r.add_argument(
        "--workdir",
        default=None,
        help="keep logs, results, reports and the random checkpoint here (default: a temp dir)",
    )
    r.add_argument("--json-out", default=None, help="write the summary as JSON here")
    r.add_argument("--verbose", action="store_true", help="show the engine logs instead of writing them to files")
    return p


def _check_usage(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Usage errors that involve more than one option (``parser.error``: exit 2)."""
    if bool(args.base_url_off) != bool(args.base_url_on):
        parser.error("--base-url-off and --base-url-on go together")
    if args.base_url_off and (args.server or args.random_weights):
        parser.error("--base-url-off/--base-url-on compare servers you run: no --server or --random-weights")
    if args.base_url_off and args.modes != ["off", "on"]:
        parser.error("--base-url-off/--base-url-on compare exactly one off and one on server (--modes off,on)")
    if not args.random_weights:
        given = [
            o for o, v in (("--random-dim", args.random_dim), ("--random-weights-dir", args.random_weights_dir)) if v
        ]
        if given:
            parser.error(f"{' and '.join(given)} need{'s' if len(given) == 1 else ''} --random-weights")
    if args.prompt_format == "ids" and not args.random_weights and args.vocab_size is None:
        model = args.model_path or DEFAULT_MODEL
        if not (Path(model) / "config.json").exists():
            parser.error(f"--prompt-format ids needs --vocab-size (no local config.json in {model!r} to read it from)")


def _cuda_problem(engine_kwargs: Dict[str, Any]) -> Optional[str]:
    """Why the engine cannot run here (no CUDA GPU), or None. Not checked when the user chose a device
    other than CUDA (``--engine-arg device=...``): that choice is theirs."""
    device = str(engine_kwargs.get("device") or "cuda").lower()
    if not device.startswith("cuda"):
        return None
    try:
        import torch
    except Exception as e:
        return f"the e2e needs a CUDA GPU, and torch is not importable here ({type(e).__name__}: {e})"
    if torch.cuda.is_available():
        return None
    build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a build without CUDA"
    return f"the e2e needs a CUDA GPU: torch.cuda.is_available() is False here (torch {torch.__version__}, {build})"


def _print(*a: Any) -> None:
    print(*a, flush=True)


def _remove_temp_checkpoint(path: Optional[Path]) -> None:
    """Remove the random-weight checkpoint built in a temporary directory (idempotent)."""
    if path is not None and path.exists():
        shutil.rmtree(path, ignore_errors=True)
        _print(f"removed the temporary random-weight checkpoint {path} (--workdir or --random-weights-dir keep it)")


def _failed_runs_text(results: List[Dict[str, Any]], verbose: bool) -> str:
    """The failure line of runs that failed: what failed and where its log is, no guess at the cause."""
    failed = [(i, r) for i, r in enumerate(results) if not r.get("ok")]
    errors = "; ".join(dict.fromkeys(str(r.get("error")) for _, r in failed))
    where = (
        "see the engine output above (--verbose)"
        if verbose
        else (
            f"see {'its log' if len(failed) == 1 else 'the logs'}: " + ", ".join(str(r.get("log")) for _, r in failed)
        )
    )
    if len(failed) == len(results):
        return f"all {len(results)} runs failed ({errors}), nothing was compared; {where}"
    names = ", ".join(f"run {i + 1} ({r['mode']})" for i, r in failed)
    return f"{names} failed ({errors}), nothing was compared; {where}"


def main(argv: Optional[List[str]] = None, runner: Optional[Runner] = None) -> int:
    """The ``e2e`` command; returns its exit status (usage errors exit 2 through argparse).

    ``runner`` replaces :func:`run_in_subprocess` (tests); the CUDA check belongs to that default runner and
    is skipped with another one.
    """
    parser = _build_parser()
    args = parser.parse_args(argv)
    _check_usage(parser, args)
    args.no_reports = False
    if args.base_url_off and runner is None:
        from . import e2e_server

        runner = e2e_server.url_runner({"off": args.base_url_off, "on": args.base_url_on}, args.run_timeout)
        args.no_reports = True
        if args.prompt_format == "auto":
            args.prompt_format = "text"
    if runner is None:
        problem = _cuda_problem(parse_engine_args(args.engine_arg))
        if problem:
            print(
                f"{parser.prog}: cannot run here: {problem}; nothing was built or run (exit {EXIT_CANNOT_RUN})",
                file=sys.stderr,
                flush=True,
            )
            return EXIT_CANNOT_RUN
    if args.topk != 1:
        _print(f"warning: topk {args.topk} means tree verify; the dedup layout only applies to topk 1")

    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="smd-e2e-"))
    work.mkdir(parents=True, exist_ok=True)
    temp_model = None
    if args.random_weights and not args.workdir and not args.random_weights_dir:
        temp_model = work / "random-model"
    try:
        return _run(args, work, runner, temp_model)
    finally:
        _remove_temp_checkpoint(temp_model)


def _run(args: argparse.Namespace, work: Path, runner: Optional[Runner], temp_model: Optional[Path]) -> int:
    """Body of :func:`main` once the options are checked: prepare, run, compare, check the plugin, verdict."""
    prepared = _prepare(args, work, temp_model)
    if isinstance(prepared, int):
        return prepared
    spec, model_path, random_info = prepared
    _print_header(args, spec, model_path, random_info, work)
    results = _execute(args, spec, work, runner)
    failures: List[Tuple[int, str]] = []
    summary = _compare(args, spec, model_path, random_info, results, failures)
    _plugin_status(args, results, summary, failures)
    return _verdict(args, summary, failures, temp_model)


def _prepare(args: argparse.Namespace, work: Path, temp_model: Optional[Path]):
    """The model (built when random) and the run spec: ``(spec, model_path, random_info)``, or an exit code."""
    # model
    random_info = None
    if args.random_weights:
        from . import random_model

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

    fmt = args.prompt_format
    if fmt == "auto":
        fmt = "ids" if args.random_weights else "text"
    texts = load_prompts(args.prompts, args.num_prompts)
    args.num_prompts_effective = len(texts)
    if fmt == "ids":
        vocab = args.vocab_size
        cfg_path = Path(model_path) / "config.json"
        if vocab is None and cfg_path.exists():
            cfg = json.loads(cfg_path.read_text())
            vocab = (cfg.get("text_config") or {}).get("vocab_size") or cfg.get("vocab_size")
        if not vocab:
            _print(f"--prompt-format ids needs --vocab-size ({cfg_path} has no vocab_size)")
            return EXIT_RUN_FAILED
        prompts: List[Any] = [text_to_ids(t, int(vocab)) for t in texts]
    else:
        prompts = texts

    sampling = {"temperature": 0.0, "max_new_tokens": args.max_new_tokens, "ignore_eos": not args.no_ignore_eos}
    spec = {
        "engine_kwargs": build_engine_kwargs(args, model_path, skip_tokenizer=(fmt == "ids")),
        "prompts": prompts,
        "prompt_format": fmt,
        "sampling_params": sampling,
        "batch_size": args.batch_size or len(prompts),
        "warmup_tokens": args.warmup_tokens,
    }

    return spec, model_path, random_info


def _print_header(
    args: argparse.Namespace, spec: Dict[str, Any], model_path: str, random_info: Optional[dict], work: Path
) -> None:
    prompts = spec["prompts"]
    fmt = spec["prompt_format"]
    prompt_tokens = sum(len(p) for p in prompts) if fmt == "ids" else None
    _print("== sglang-mamba-dedup e2e: greedy md5, plugin off vs on ==")
    _print(f"date: {_dt.datetime.now(_dt.timezone.utc).strftime('%Y-%m-%d %H:%M:%S UTC')}; host {platform.node()}")
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
        f"max_running_requests {spec['engine_kwargs'].get('max_running_requests')}"
    )
    _print(
        "engine args: "
        + json.dumps({k: v for k, v in spec["engine_kwargs"].items() if k != "model_path"}, sort_keys=True)
    )
    _print(f"workdir: {work}")


def _execute(
    args: argparse.Namespace, spec: Dict[str, Any], work: Path, runner: Optional[Runner]
) -> List[Dict[str, Any]]:
    """Every run of ``--modes``, one after the other, each in a fresh process (or server)."""
    modes: List[str] = args.modes
    results: List[Dict[str, Any]] = []
    for i, mode in enumerate(modes):
        rdir = work / f"reports-{i}-{mode}"
        if rdir.exists():
            shutil.rmtree(rdir)
        rdir.mkdir(parents=True)
        log = work / f"run-{i}-{mode}.log"
        if args.no_reports:
            what = f"server {args.base_url_on if mode == 'on' else args.base_url_off}"
        elif args.server:
            what = "launch_server " + ("with --enable-mamba-conv-dedup" if mode == "on" else "without the flag")
        else:
            what = f"{SWITCH_ENV}={'1' if mode == 'on' else '0'} (fresh process)"
        _print(f"-- run {i + 1}/{len(modes)}: {what} ...")
        if runner is None and args.server:
            from . import e2e_server

            res = e2e_server.run_server(
                spec, mode, rdir, log, timeout=args.run_timeout, verbose=args.verbose, versions=_versions, gpu=_gpu_info
            )
            _print("   server: " + e2e_server.describe_command(res.get("command") or []))
            for line in res.get("plugin_log_lines") or []:
                _print("   server log: " + line)
        elif runner is None:
            res = run_in_subprocess(spec, mode, rdir, log, timeout=args.run_timeout, verbose=args.verbose)
        else:
            res = runner(spec, mode, rdir, log)
        res["mode"] = mode
        res["report_dir"] = str(rdir)
        res["log"] = str(log)
        res["reports"], res["report_problems"] = read_reports(rdir)
        if res.get("ok"):
            res["stats"] = _run_stats(res)
            st = res["stats"]
            _print(
                f"   done: {st['completion_tokens']} tokens in {st['seconds']:.2f} s = "
                f"{_fmt_rate(st['tokens_per_s'])} tok/s; accept length "
                f"{'n/a' if st['accept_length'] is None else format(st['accept_length'], '.3f')}; "
                f"accepted-drafts histogram {st['accepted_drafts_histogram']}"
            )
        else:
            _print(f"   FAILED: {res.get('error')}")
            if log.exists():
                tail = log.read_text(errors="replace").splitlines()[-40:]
                _print("   last lines of " + str(log) + ":\n      " + "\n      ".join(tail))
        results.append(res)

    return results


def _compare(
    args: argparse.Namespace,
    spec: Dict[str, Any],
    model_path: str,
    random_info: Optional[dict],
    results: List[Dict[str, Any]],
    failures: List[Tuple[int, str]],
) -> Dict[str, Any]:
    """md5s and throughput of the runs; appends what failed to ``failures``; returns the summary."""
    modes: List[str] = args.modes
    prompts = spec["prompts"]
    sampling = spec["sampling_params"]
    # versions and GPU from the first run that reports them (they are the engine's environment)
    first_ok = next((r for r in results if r.get("ok")), None)
    vers = (first_ok or {}).get("versions") or _versions()
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

    summary: Dict[str, Any] = {
        "modes": modes,
        "model_path": model_path,
        "random_model": random_info,
        "versions": vers,
        "gpu": gpu,
        "engine_kwargs": spec["engine_kwargs"],
        "sampling_params": sampling,
        "num_prompts": len(prompts),
        "runs": [],
    }
    for r in results:
        summary["runs"].append(
            {k: r.get(k) for k in ("mode", "ok", "pid", "returncode", "error", "stats", "report_problems")}
        )
    if any(not r.get("ok") for r in results):
        failures.append((EXIT_RUN_FAILED, _failed_runs_text(results, args.verbose)))
    else:
        base = results[0]
        for r in results[1:]:
            a, b = base["stats"], r["stats"]
            same = a["ids_md5"] == b["ids_md5"]
            _print(
                f"md5 token ids: {base['mode']} {a['ids_md5']} | {r['mode']} {b['ids_md5']} -> "
                f"{'EQUAL' if same else 'DIFFERENT'}"
            )
            _print(
                f"md5 text:      {base['mode']} {a['text_md5']} | {r['mode']} {b['text_md5']}"
                + ("  (no text: skip_tokenizer_init)" if a["text_md5"] is None else "")
            )
            if not same:
                d = first_difference(
                    [o["output_ids"] for o in base["outputs"]], [o["output_ids"] for o in r["outputs"]]
                )
                failures.append(
                    (
                        EXIT_MD5_DIFFER,
                        f"md5 differ ({base['mode']} vs {r['mode']}); first difference at prompt {d[0]}, token {d[1]}"
                        if d
                        else "md5 differ",
                    )
                )
            elif a["text_md5"] != b["text_md5"]:
                failures.append((EXIT_MD5_DIFFER, "token ids equal but texts differ"))
        rates = {
            m: [r["stats"]["tokens_per_s"] for r in results if r["mode"] == m and r["stats"]["tokens_per_s"]]
            for m in ("off", "on")
        }
        _print(
            "throughput (tok/s, decode phase, per run): "
            + ", ".join(f"{r['mode']} {_fmt_rate(r['stats']['tokens_per_s'])}" for r in results)
        )
        if rates["off"] and rates["on"]:
            off_mean = sum(rates["off"]) / len(rates["off"])
            on_mean = sum(rates["on"]) / len(rates["on"])
            ratio = on_mean / off_mean
            summary["throughput_tok_s"] = {"off": off_mean, "on": on_mean}
            summary["throughput_ratio"] = ratio
            _print(
                f"throughput: off {_fmt_rate(off_mean)} tok/s, on {_fmt_rate(on_mean)} tok/s, "
                f"ratio on/off = {ratio:.3f}"
                + (" (means over runs of the same mode)" if len(rates["off"]) + len(rates["on"]) > 2 else "")
            )
        summary["ids_md5"] = [r["stats"]["ids_md5"] for r in results]
        summary["text_md5"] = [r["stats"]["text_md5"] for r in results]

    return summary


def _plugin_status(
    args: argparse.Namespace, results: List[Dict[str, Any]], summary: Dict[str, Any], failures: List[Tuple[int, str]]
) -> None:
    """The plugin's state in each run's scheduler process, from its status report."""
    modes: List[str] = args.modes
    # plugin status, as the scheduler processes reported it
    engaged_all = None
    if args.no_reports:
        _print(
            "plugin status: not readable (servers you started write their status reports, if at all, into "
            "their own SGLANG_MAMBA_DEDUP_REPORT_DIR); only the md5 is checked"
        )
        results_for_status: List[Dict[str, Any]] = []
    else:
        results_for_status = results
    for i, r in enumerate(results_for_status):
        reports = r.get("reports") or []
        parent = r.get("pid")
        sched = _scheduler_reports(reports, parent)
        _print(
            f"plugin status, run {i + 1} ({r['mode']}): {len(reports)} report(s), {len(sched)} from "
            f"scheduler process(es)" + (f"; unreadable: {r['report_problems']}" if r.get("report_problems") else "")
        )
        if r["mode"] == "on" and not r.get("ok"):
            # the run failed: a missing or partial report says nothing about the plugin
            if sched:
                _print("    " + describe_report(sched[0]))
            _print("    engaged: not judged (the run failed)")
            summary["runs"][i]["engaged"] = None
            summary["runs"][i]["scheduler_report"] = sched[0] if sched else None
        elif r["mode"] == "on":
            ok, reasons, rep = check_engaged(reports, parent)
            _print("    " + describe_report(rep))
            _print(f"    engaged: {'YES' if ok else 'NO'}" + ("" if ok else " -- " + "; ".join(reasons)))
            summary["runs"][i]["engaged"] = ok
            summary["runs"][i]["engagement_reasons"] = reasons
            summary["runs"][i]["scheduler_report"] = {k: v for k, v in (rep or {}).items()}
            engaged_all = ok if engaged_all is None else (engaged_all and ok)
            if not ok:
                failures.append((EXIT_NOT_ENGAGED, "plugin not engaged: " + "; ".join(reasons)))
        else:
            ok, reasons = check_off(reports, parent)
            if sched:
                _print("    " + describe_report(sched[0]))
            if ok and not r.get("ok"):
                _print("    off as expected: not judged (the run failed)")
            else:
                _print(f"    off as expected: {'yes' if ok else 'NO -- ' + '; '.join(reasons)}")
            summary["runs"][i]["scheduler_report"] = sched[0] if sched else None
            if not ok:
                failures.append((EXIT_OFF_NOT_OFF, "the off run was not off: " + "; ".join(reasons)))
    if engaged_all is None and "on" not in modes and not args.no_reports:
        _print("plugin engagement: not checked (no 'on' run in --modes)")


def _verdict(
    args: argparse.Namespace, summary: Dict[str, Any], failures: List[Tuple[int, str]], temp_model: Optional[Path]
) -> int:
    order = [EXIT_RUN_FAILED, EXIT_MD5_DIFFER, EXIT_NOT_ENGAGED, EXIT_OFF_NOT_OFF]
    code = EXIT_OK
    for c in order:
        if any(f[0] == c for f in failures):
            code = c
            break
    summary["failures"] = [f[1] for f in failures]
    summary["exit_code"] = code
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(summary, indent=1, default=str))
    _remove_temp_checkpoint(temp_model)  # before the RESULT line, which stays the last one
    _print(
        ("RESULT: PASS" if code == EXIT_OK else "RESULT: FAIL -- " + " | ".join(f[1] for f in failures))
        + f" (exit {code})"
    )
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
