"""End-to-end check: the same greedy generation with the plugin off and on, compared by md5.

``sglang-mamba-dedup e2e [options]`` (or ``python examples/e2e_md5.py``) runs SGLang's offline
``sglang.Engine`` several times, each time in a fresh Python process started by this driver, with identical
arguments: the model, ``--speculative-algorithm NEXTN`` with topk 1 and 4 draft tokens (3 steps),
temperature 0, a fixed seed and the fixed prompt set shipped in ``data/prompts.json``. An "off" run has
``SGLANG_MAMBA_DEDUP=0``, an "on" run ``SGLANG_MAMBA_DEDUP=1`` (``--server``: ``launch_server`` without and
with ``--enable-mamba-conv-dedup``). It hashes the output token ids and the text, prints the versions, the
GPU, the md5s, each run's rates, the commit counts of the plugin's status report as the *scheduler process*
wrote it (``SGLANG_MAMBA_DEDUP_REPORT_DIR``), and with ``--throughput-runs`` a throughput table.

Deployment settings by default (:func:`deployment_defaults`): decode CUDA graphs on
(``cuda_graph_backend_decode=full``), the radix (prefix) cache on, overlap scheduling as SGLang decides, prefill
CUDA graphs off (``cuda_graph_backend_prefill=disabled``: SGLang's prefill capture crashed on our machine, with
and without the plugin). ``--no-cuda-graph`` and ``--no-radix-cache`` give the old settings; an ``--engine-arg``
always wins over a default. A default the installed SGLang's ``ServerArgs`` has no field for is dropped (the
header names it), so older releases run with their own defaults.

Every run generates two rounds (:func:`run_plan`), after an untimed warm-up and an emptied prefix cache:
round 1 is the prompts; round 2 is every round-1 prompt followed by its round-1 output and a short new suffix
(:func:`round2_prompts`), so SGLang reads the mamba states it saved in round 1 back from the radix cache. The
md5 covers both rounds. With the radix cache on, SGLang >= 0.5.14 passes track slots with every verify commit
(see :func:`track_expectation` for what triggers it); the "on" run must then show commits with track slots
through our kernel (``--expect-track``, the default where SGLang tracks).

``--throughput-runs N``: one untimed throwaway engine start, then N runs per mode alternating off, on, off,
on, ...; every run also times one request of ``--batch1-tokens`` (batch 1), and round 1 is the full batch.
Per mode and phase the median and min-max of the tok/s over the runs are printed, "within noise" when the
off and on ranges overlap (:func:`compare_spreads`); no ratio of single runs is printed.

Exit status. Before anything is built or run:

* 2  a usage error (argparse: one ``error:`` line on stderr);
* 5  cannot run here: the engine needs a CUDA GPU and ``torch.cuda.is_available()`` is False.

After the runs, the first that applies:

* 3  a run failed (the engine did not start, crashed, or timed out; the last line names the logs);
* 1  the md5s differ (the first differing round, prompt and token are printed);
* 2  the plugin did not engage in an "on" run: no scheduler report, no dedup layout in place, no bytes
     saved, no commit ran through our kernels, or (``--expect-track``) no commit with track slots did;
* 4  an "off" run was not off (a scheduler report shows our commit ran, or the mode was not "off");
* 6  the negative control was not caught: a ``fault`` run (plugin on, its commit deliberately broken:
     :mod:`sglang_mamba_dedup.faults`) gave the same md5 as run 1;
* 0  the md5s are equal and the plugin engaged.

Why the offline Engine by default, not ``launch_server`` + HTTP: it needs no port and no HTTP client, starts
and stops with the process (nothing left listening between the runs), takes token ids directly (a
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
import functools
import hashlib
import importlib.util
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
from typing import (
    Any,
    Callable,
    Collection,
    Dict,
    FrozenSet,
    List,
    Mapping,
    NoReturn,
    Optional,
    Sequence,
    Tuple,
)

from packaging.version import Version

from . import faults, versions
from .e2e_reports import (
    check_engaged,
    check_off,
    commit_counts,
    describe_report,
    layout_of,
    read_reports,
    scheduler_reports,
)
from .e2e_stats import (
    _fmt_rate,
    compare_spreads,
    run_schedule,
    spread,
    throughput_stats,
    throughput_table,
)
from .report import REPORT_DIR_ENV

__all__ = [
    "PROMPTS_PATH",
    "load_prompts",
    "text_to_ids",
    "md5_of_ids",
    "md5_of_texts",
    "first_difference",
    "round2_suffixes",
    "round2_prompts",
    "read_reports",
    "commit_counts",
    "check_engaged",
    "check_off",
    "deployment_defaults",
    "describe_settings",
    "track_expectation",
    "build_engine_kwargs",
    "run_plan",
    "flush_with_retry",
    "run_in_subprocess",
    "spread",
    "compare_spreads",
    "throughput_stats",
    "throughput_table",
    "run_schedule",
    "main",
    "EXIT_OK",
    "EXIT_MD5_DIFFER",
    "EXIT_NOT_ENGAGED",
    "EXIT_RUN_FAILED",
    "EXIT_OFF_NOT_OFF",
    "EXIT_CANNOT_RUN",
    "EXIT_FAULT_NOT_CAUGHT",
]

PROMPTS_PATH = Path(__file__).resolve().parent / "data" / "prompts.json"
DEFAULT_MODEL = "Qwen/Qwen3.5-0.8B"
SWITCH_ENV = "SGLANG_MAMBA_DEDUP"

EXIT_OK = 0
EXIT_MD5_DIFFER = 1
EXIT_NOT_ENGAGED = 2
EXIT_RUN_FAILED = 3
EXIT_OFF_NOT_OFF = 4
EXIT_CANNOT_RUN = 5
EXIT_FAULT_NOT_CAUGHT = 6
#: Run modes: the plugin off, on, and on with the negative control's fault (:mod:`.faults`) installed.
MODES = ("off", "on", "fault")
EXIT_USAGE = 2


# ----------------------------------------------------------------------------- prompts, hashing
def load_prompts(path: Optional[os.PathLike] = None, limit: Optional[int] = None) -> List[str]:
    """The fixed prompt set (text), in file order; ``limit`` keeps the first ``limit`` prompts."""
    doc = json.loads(Path(path or PROMPTS_PATH).read_text(encoding="utf-8"))
    prompts = doc["prompts"] if isinstance(doc, dict) else doc
    if not isinstance(prompts, list) or not prompts:
        raise ValueError('expected a non-empty JSON list of prompts (or {"prompts": [...]})')
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


# ----------------------------------------------------------------------------- round 2: prefixes of round 1
_ROUND2_SUFFIX = " Now continue, part {n}: say more."


def round2_suffixes(num_prompts: int, prompt_format: str, vocab_size: Optional[int] = None) -> List[Any]:
    """The short new ending of every round-2 prompt: a different text per prompt (ids for ``"ids"``)."""
    texts = [_ROUND2_SUFFIX.format(n=i + 2) for i in range(num_prompts)]
    if prompt_format != "ids":
        return list(texts)
    if not vocab_size:
        raise ValueError("prompt format 'ids' needs the vocabulary size")
    return [text_to_ids(t, int(vocab_size)) for t in texts]


def round2_prompts(
    prompts: Sequence[Any], outputs: Sequence[Mapping[str, Any]], suffixes: Sequence[Any], prompt_format: str
) -> List[Any]:
    """Round 2: each round-1 prompt, then its round-1 output, then its suffix.

    The whole round-1 sequence (prompt + output) is the prefix of the new prompt, so the radix cache holds
    it, mamba states included at the positions SGLang tracked, and round 2 starts from those cached states
    instead of prefilling them again. Token ids for ``"ids"``; text otherwise (prompt + output text +
    suffix: the tokenizer sees the same text again, so the prefix matches up to where the output's own
    tokenization differs, which is at most a token or two at the seams).
    """
    if len(outputs) != len(prompts):
        raise ValueError(f"{len(prompts)} prompts but {len(outputs)} outputs")
    if suffixes and len(suffixes) != len(prompts):
        raise ValueError(f"{len(prompts)} prompts but {len(suffixes)} round-2 suffixes")
    res: List[Any] = []
    for i, (prompt, out) in enumerate(zip(prompts, outputs)):
        suffix = suffixes[i] if suffixes else ([] if prompt_format == "ids" else "")
        if prompt_format == "ids":
            res.append([int(t) for t in prompt] + [int(t) for t in out.get("output_ids") or []] + list(suffix))
        else:
            res.append(str(prompt) + (out.get("text") or "") + str(suffix))
    return res


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


@functools.lru_cache(maxsize=1)
def server_arg_fields() -> Optional[FrozenSet[str]]:
    """The field names of the installed SGLang's ``ServerArgs`` (a dataclass up to 0.5.2x, a msgspec Struct
    in 0.5.23), or None when SGLang cannot be imported here (then every default is passed)."""
    try:
        import dataclasses

        from sglang.srt.server_args import ServerArgs

        if dataclasses.is_dataclass(ServerArgs):
            return frozenset(f.name for f in dataclasses.fields(ServerArgs))
        import msgspec

        return frozenset(f.name for f in msgspec.structs.fields(ServerArgs))
    except Exception:  # noqa: BLE001 - not importable here: unknown
        return None


def deployment_defaults(
    cuda_graph: bool = True,
    radix_cache: bool = True,
    fields: Optional[Collection[str]] = None,
    sglang_version: Optional[str] = None,
) -> Tuple[Dict[str, Any], List[str]]:
    """The engine settings deployments run, as ``(kwargs, notes)``; ``notes`` name what was dropped.

    Decode CUDA graphs ``full`` (``--no-cuda-graph``: ``disabled``), prefill CUDA graphs ``disabled`` (SGLang
    0.5.23's prefill capture died on our machine, with and without the plugin), the radix cache on
    (``--no-radix-cache``: off), overlap scheduling not set (SGLang's default). With ``fields`` (the
    installed ``ServerArgs`` fields) a key it does not have is dropped and named in ``notes``; releases
    before the per-phase graph switches (<= 0.5.13.post1) get ``disable_cuda_graph`` /
    ``disable_piecewise_cuda_graph`` instead where those exist.
    """
    notes: List[str] = []
    v = versions.parse(sglang_version) if sglang_version else None
    if radix_cache and v is not None and v < Version(versions.SPEC_RADIX_FROM):
        radix_cache = False
        notes.append(
            f"disable_radix_cache=false (SGLang {sglang_version} refuses speculative decoding with the radix cache "
            f"for this model before {versions.SPEC_RADIX_FROM}; radix cache off instead)"
        )
    wanted: Dict[str, Any] = {
        "cuda_graph_backend_decode": "full" if cuda_graph else "disabled",
        "cuda_graph_backend_prefill": "disabled",
        "disable_radix_cache": not radix_cache,
    }
    if fields is None:
        return wanted, notes
    kept = {k: val for k, val in wanted.items() if k in fields}
    fallbacks = {
        "cuda_graph_backend_decode": ("disable_cuda_graph", True) if not cuda_graph else None,
        "cuda_graph_backend_prefill": ("disable_piecewise_cuda_graph", True),
    }
    for key, value in wanted.items():
        if key in fields:
            continue
        alt = fallbacks.get(key)
        if alt is not None and alt[0] in fields:
            kept[alt[0]] = alt[1]
            notes.append(f"{key}={_show(value)} (not a ServerArgs field here; {alt[0]}={_show(alt[1])} instead)")
        else:
            why = "; its default: decode CUDA graphs on" if key == "cuda_graph_backend_decode" else ""
            notes.append(f"{key}={_show(value)} (not a ServerArgs field here{why})")
    return kept, notes


def _show(value: Any) -> str:
    return json.dumps(value) if not isinstance(value, str) else value


def describe_settings(kw: Mapping[str, Any]) -> str:
    """The deployment-relevant settings of engine keywords in words (graphs, radix cache, overlap)."""
    dec = kw.get("cuda_graph_backend_decode")
    if dec is None:
        decode = "off (disable_cuda_graph)" if kw.get("disable_cuda_graph") else "on (SGLang's default)"
    else:
        decode = "off" if dec == "disabled" else f"on ({dec})"
    pre = kw.get("cuda_graph_backend_prefill")
    if pre is None:
        prefill = "off (disable_piecewise_cuda_graph)" if kw.get("disable_piecewise_cuda_graph") else "SGLang's default"
    else:
        prefill = "off" if pre == "disabled" else f"on ({pre})"
    radix = "off" if kw.get("disable_radix_cache") else "on"
    overlap = "off" if kw.get("disable_overlap_schedule") else "SGLang's default"
    return (
        f"decode CUDA graphs {decode}; prefill CUDA graphs {prefill}; radix cache {radix}; overlap scheduling {overlap}"
    )


def track_expectation(kw: Mapping[str, Any], fields: Optional[Collection[str]]) -> Tuple[bool, str]:
    """Will SGLang pass track slots to the post-verify commit with these engine keywords? ``(yes, why)``.

    What triggers it in SGLang 0.5.23 (``sglang/srt/...``):

    * ``arg_groups/overrides.py:454-483`` (``_mamba_radix_cache_resolution``): with the radix cache on, the
      strategy ``auto`` becomes ``extra_buffer`` when overlap scheduling is on (the default) or page_size > 1,
      and the model supports it (``supports_mamba_cache_extra_buffer``: Qwen3.5 / Qwen3-Next / Nemotron-H ...
      with ``linear_attn_backend == "triton"``, the default); otherwise ``no_buffer`` (no tracking).
      ``arg_groups/model_override_base.py:260`` (``mamba_extra_buffer_of``): extra buffer = radix cache on
      and strategy ``extra_buffer``/``extra_buffer_lazy``.
    * ``speculative/eagle_utils.py:372`` -> ``speculative/spec_utils.py:913-936``
      (``prepare_mamba_track_for_verify``) -> ``managers/schedule_batch.py:2322``
      (``set_mamba_track_indices_from_reqs``): with the extra buffer, every verify batch gets
      ``mamba_track_indices`` (each request's ping-pong track slot), and ``spec_utils.py:1240`` passes them
      to ``update_mamba_state_after_mtp_verify``: so every verify commit has track slots.
    * ``spec_utils.py:943-995`` (``_verify_commit_step_indices``): a request's ``mamba_steps_to_track`` is the
      accepted step at which its length crosses a multiple of ``mamba_track_grid`` (``runtime_context.py:1974``:
      lcm(max(FLA chunk 64, page_size), ``mamba_track_interval`` 256 from ``arg_groups/fields/exec_.py:530``)
      = 256), else -1 (no copy). With the shipped prompts as ids (2 ... 2464 tokens) and 128 new tokens, 6 of
      the 34 requests cross a multiple of 256 in round 1 and 28 in round 2 (prompt + 128-token output + a
      9-token suffix, then 128 more), and the batch-1 request (2 + 256 tokens) crosses 256: states are
      really snapshotted through the track slots, not only passed along.
    * Prefill saves states at chunk-aligned (64) positions when an extend is >= 64 tokens
      (``managers/schedule_batch.py:3137``); round 2's prompts match those and the decode-time snapshots in
      the radix tree and start from a copy of the cached state (``schedule_batch.py:3240``).

    SGLang <= 0.5.13.post1 has ``mamba_scheduler_strategy`` whose ``auto`` is always ``no_buffer``.
    """
    if kw.get("disable_radix_cache"):
        return False, "the radix cache is off: SGLang saves no mamba states, no track slots"
    strategy = kw.get("mamba_radix_cache_strategy") or kw.get("mamba_scheduler_strategy") or "auto"
    if strategy in ("extra_buffer", "extra_buffer_lazy"):
        return True, f"radix cache on, mamba strategy {strategy!r}: every verify commit carries track slots"
    if strategy != "auto":
        return False, f"mamba strategy {strategy!r}: no track slots"
    if fields is not None and "mamba_radix_cache_strategy" not in fields:
        return False, "this SGLang resolves mamba strategy 'auto' to no_buffer (<= 0.5.13.post1): no track slots"
    if kw.get("disable_overlap_schedule") and int(kw.get("page_size") or 1) <= 1:
        return False, "mamba strategy 'auto' is no_buffer without overlap scheduling at page size 1: no track slots"
    if kw.get("linear_attn_backend") not in (None, "triton"):
        return False, f"linear_attn_backend {kw.get('linear_attn_backend')!r}: SGLang keeps no extra buffer"
    return True, (
        "radix cache on, mamba strategy 'auto' -> extra_buffer (overlap scheduling on, Triton linear attention): "
        "every verify commit carries track slots"
    )


def build_engine_kwargs(
    args: argparse.Namespace,
    model_path: str,
    skip_tokenizer: bool,
    defaults: Optional[Mapping[str, Any]] = None,
) -> Dict[str, Any]:
    """The ``sglang.Engine(**kwargs)`` of every run (identical by construction).

    Layers, later wins: the run's own settings (model, NEXTN, seed, concurrency), the deployment ``defaults``
    (:func:`deployment_defaults` for the installed SGLang when not given), the ``--engine-arg`` overrides.
    """
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
    if defaults is None:
        defaults = deployment_defaults(
            not args.no_cuda_graph, not args.no_radix_cache, server_arg_fields(), versions.installed_sglang_version()
        )[0]
    kw.update(defaults)
    kw.update(parse_engine_args(args.engine_arg))
    return kw


# ----------------------------------------------------------------------------- what one run generates
Generate = Callable[[List[Any], Dict[str, Any]], List[dict]]


def flush_with_retry(
    flush_once: Callable[[], Optional[bool]],
    attempts: int = 40,
    wait: float = 0.25,
    sleep: Callable[[float], Any] = time.sleep,
) -> Optional[bool]:
    """Empty the prefix cache: True once done, False when every attempt was refused, None when unsupported.

    SGLang refuses a flush while requests are still queued or running (with overlap scheduling the last
    batch's results can still be in flight right after ``generate`` returned), so it is retried.
    """
    for i in range(attempts):
        ok = flush_once()
        if ok is None or ok:
            return ok
        if i + 1 < attempts:
            sleep(wait)
    return False


def _batches(prompts: Sequence[Any], batch_size: int) -> List[List[Any]]:
    bs = int(batch_size or 0) or len(prompts)
    return [list(prompts[i : i + bs]) for i in range(0, len(prompts), bs)]


def _timed(
    generate: Generate, batches: List[List[Any]], sampling: Dict[str, Any], clock: Callable[[], float]
) -> Dict[str, Any]:
    outputs: List[dict] = []
    t0 = clock()
    for batch in batches:
        out = generate(batch, dict(sampling))
        outputs.extend(out if isinstance(out, list) else [out])
    seconds = clock() - t0
    return {"seconds": seconds, **outputs_and_meta(outputs)}


def run_plan(
    spec: Dict[str, Any],
    generate: Generate,
    flush: Callable[[], Optional[bool]],
    clock: Callable[[], float] = time.perf_counter,
) -> Dict[str, Any]:
    """What every run does, Engine or HTTP alike (``generate(prompts, sampling_params) -> answers``):

    1. untimed warm-up: the round-1 batches (and the batch-1 request), ``warmup_tokens`` each (-1: all),
       so Triton compilation and autotuning are not timed;
    2. empty the prefix cache (``flush``), so round 1 starts cold in every run;
    3. round 1, timed: the prompts in batches of ``batch_size`` (all at once by default: the full batch);
    4. round 2, timed: :func:`round2_prompts` of round 1's outputs; their long prefixes are read back from
       the radix cache;
    5. with ``spec["batch1"]``: empty the cache, then one request (``prompt_index``, ``max_new_tokens``),
       timed: batch 1.

    Returns ``{"rounds": [round1, round2], "phases": {"batch1": ...}, "cache_flushes": [...]}``, each round
    and phase ``{"seconds", "outputs", "meta"}``.
    """
    prompts = spec["prompts"]
    fmt = spec["prompt_format"]
    bs = int(spec.get("batch_size") or 0) or len(prompts)
    sampling = dict(spec["sampling_params"])
    b1 = spec.get("batch1")
    warm = int(spec.get("warmup_tokens") or 0)
    if warm:
        n = sampling["max_new_tokens"] if warm < 0 else warm
        for batch in _batches(prompts, bs):
            generate(batch, dict(sampling, max_new_tokens=n))
        if b1:
            n1 = b1["max_new_tokens"] if warm < 0 else warm
            generate([prompts[b1["prompt_index"]]], dict(sampling, max_new_tokens=n1))
    flushes = [flush()]
    round1 = _timed(generate, _batches(prompts, bs), sampling, clock)
    second = round2_prompts(prompts, round1["outputs"], spec.get("round2_suffixes") or [], fmt)
    round2 = _timed(generate, _batches(second, bs), sampling, clock)
    res: Dict[str, Any] = {"rounds": [round1, round2], "cache_flushes": flushes}
    if b1:
        flushes.append(flush())
        one = [[prompts[b1["prompt_index"]]]]
        res["phases"] = {"batch1": _timed(generate, one, dict(sampling, max_new_tokens=b1["max_new_tokens"]), clock)}
    return res


# ----------------------------------------------------------------------------- one run
def fault_env(env: Dict[str, str], mode: str) -> Dict[str, str]:
    """Set (mode ``fault``) or clear the negative control's fault variable in a run's environment."""
    if mode == "fault":
        env[faults.ENV] = faults.COMMIT_STEP0
    else:
        env.pop(faults.ENV, None)
    return env


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
    env[SWITCH_ENV] = "0" if mode == "off" else "1"
    fault_env(env, mode)
    env[REPORT_DIR_ENV] = str(report_dir)
    env.setdefault("PYTHONUNBUFFERED", "1")
    t0 = time.time()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            # -P: the current directory (a source checkout, whose sglang_mamba_dedup/ has no patches/) never
            # shadows the installed package in the engine process
            [sys.executable, "-P", "-c", _WORKER_BOOT, str(spec_path), str(out_path)],
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
    "cached_tokens",
    "spec_verify_ct",
    "spec_accept_length",
    "spec_num_correct_drafts",
    "spec_correct_drafts_histogram",
    "finish_reason",
)


def outputs_and_meta(outputs: Sequence[dict]) -> Dict[str, Any]:
    """The ``outputs`` and ``meta`` fields of a round from SGLang's generate answers (Engine or HTTP)."""
    return {
        "outputs": [{"output_ids": list(o.get("output_ids") or []), "text": o.get("text")} for o in outputs],
        "meta": [{k: (o.get("meta_info") or {}).get(k) for k in _META_KEYS} for o in outputs],
    }


def _engine_flush_once(engine: Any) -> Optional[bool]:
    """One ``Engine.flush_cache()``: True done, False refused (requests pending), None when there is none."""
    fn = getattr(engine, "flush_cache", None)
    if fn is None:
        return None
    ok = getattr(fn(), "success", None)
    return True if ok is None else bool(ok)


def _worker_main(argv: List[str]) -> int:
    """Body of the engine process: build the Engine, run :func:`run_plan`, write the result JSON."""
    spec_path, out_path = argv[0], argv[1]
    spec = json.loads(Path(spec_path).read_text())
    import sglang  # noqa: F401  (import time is not part of the measurement)

    engine = sglang.Engine(**spec["engine_kwargs"])
    try:
        key = "input_ids" if spec["prompt_format"] == "ids" else "prompt"

        def generate(batch: List[Any], sampling: Dict[str, Any]) -> List[dict]:
            return engine.generate(**{key: batch}, sampling_params=sampling)

        plan = run_plan(spec, generate, lambda: flush_with_retry(lambda: _engine_flush_once(engine)))
    finally:
        engine.shutdown()
    res = {"pid": os.getpid(), **plan, "versions": _versions(), "gpu": _gpu_info()}
    Path(out_path).write_text(json.dumps(res, default=str))
    return 0


# ----------------------------------------------------------------------------- summary of a run
def _part_stats(part: Mapping[str, Any]) -> Dict[str, Any]:
    """Tokens, time and rate of one round or phase; prompt and cached tokens where SGLang reported them."""
    outs = part.get("outputs") or []
    meta = part.get("meta") or [{} for _ in outs]
    completion = sum(int(m.get("completion_tokens") or 0) for m in meta) or sum(len(o["output_ids"]) for o in outs)
    secs = float(part.get("seconds") or 0.0)

    def total(key: str) -> Optional[int]:
        vals = [m.get(key) for m in meta]
        return sum(int(v) for v in vals) if vals and all(v is not None for v in vals) else None

    return {
        "requests": len(outs),
        "completion_tokens": completion,
        "seconds": secs,
        "tokens_per_s": completion / secs if secs > 0 else None,
        "prompt_tokens": total("prompt_tokens"),
        "cached_tokens": total("cached_tokens"),
        "ids_md5": md5_of_ids([o["output_ids"] for o in outs]),
    }


def _run_stats(res: Dict[str, Any]) -> Dict[str, Any]:
    rounds = res.get("rounds") or []
    outs = [o for r in rounds for o in (r.get("outputs") or [])]
    meta = [m for r in rounds for m in (r.get("meta") or [{} for _ in (r.get("outputs") or [])])]
    per_round = [_part_stats(r) for r in rounds]
    completion = sum(r["completion_tokens"] for r in per_round)
    verify = sum(int(m.get("spec_verify_ct") or 0) for m in meta)
    hist: List[int] = []
    for m in meta:
        for i, v in enumerate(m.get("spec_correct_drafts_histogram") or []):
            if i >= len(hist):
                hist.extend([0] * (i + 1 - len(hist)))
            hist[i] += int(v)
    b1 = (res.get("phases") or {}).get("batch1")
    return {
        "rounds": per_round,
        "completion_tokens": completion,
        "verify_steps": verify,
        "accept_length": completion / verify if verify else None,
        "accepted_drafts_histogram": hist or None,
        "ids_md5": md5_of_ids([o["output_ids"] for o in outs]),
        "text_md5": md5_of_texts([o.get("text") for o in outs]),
        "batch1": _part_stats(b1) if b1 else None,
        "cache_flushes": res.get("cache_flushes"),
    }


def _throughput_sample(stats: Mapping[str, Any]) -> Dict[str, Optional[float]]:
    """A run's tok/s per phase: batch 1 (its own request) and the full batch (round 1)."""
    rounds = stats.get("rounds") or []
    return {
        "batch1": (stats.get("batch1") or {}).get("tokens_per_s"),
        "full": rounds[0].get("tokens_per_s") if rounds else None,
    }


def _fmt_tokens(x: Optional[int]) -> str:
    return "n/a" if x is None else f"{x:,}"


# ----------------------------------------------------------------------------- CLI
EPILOG = """\
examples:
  sglang-mamba-dedup e2e --random-weights                        # Qwen3.5-0.8B architecture, random weights
  sglang-mamba-dedup e2e --random-weights --throughput-runs 3    # + 1 throwaway, 3 x off,on, throughput table
  sglang-mamba-dedup e2e --random-weights --server               # the same through launch_server + HTTP
  sglang-mamba-dedup e2e --random-weights --no-cuda-graph --no-radix-cache   # the old eager, cache-less settings
  sglang-mamba-dedup e2e --base-url-off http://h:30000 --base-url-on http://h:30001 --model-path M
  sglang-mamba-dedup e2e --model-path Qwen/Qwen3.5-0.8B --num-prompts 8 --max-new-tokens 64
  sglang-mamba-dedup e2e --random-weights --modes off,off --workdir ./e2e-work   # harness check, keeps logs

exit status:
  0  the md5s are equal and the plugin engaged
  1  the md5s differ
  2  the plugin did not engage in an "on" run (with --expect-track: also no commit with track slots through
     our kernel); also any usage error (one "error:" line on stderr)
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
    """argparse type of ``--modes``: a comma list of at least two runs of ``off``/``on``/``fault``, the
    first ``off`` or ``on`` (the reference every later run is compared with)."""
    modes = [x.strip() for x in text.split(",") if x.strip()]
    if len(modes) < 2 or any(m not in MODES for m in modes) or modes[0] == "fault":
        raise argparse.ArgumentTypeError(
            f"must list at least two runs of {'/'.join(repr(m) for m in MODES)}, the first not 'fault', got {text!r}"
        )
    return modes


def _positive_int(text: str) -> int:
    try:
        num = int(text)
    except ValueError:
        num = 0
    if num <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return num


def _non_negative_int(text: str) -> int:
    try:
        num = int(text)
    except ValueError:
        num = -1
    if num < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or a positive integer, got {text!r}")
    return num


def _positive_float(text: str) -> float:
    try:
        num = float(text)
    except ValueError:
        num = 0.0
    if not num > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
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
        "--expect-track",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the 'on' run must show commits with track slots through our kernel, else exit 2 (default: yes "
        "where SGLang passes track slots: radix cache on and a mamba strategy that resolves to extra_buffer, "
        "SGLang >= 0.5.14; the header says which)",
    )
    r.add_argument(
        "--throughput-runs",
        type=int,
        default=0,
        metavar="N",
        help="measure throughput: 1 untimed throwaway engine start (an off run), then N runs per mode "
        "alternating off,on,...; prints per mode and phase (batch 1, full batch) the median and min-max "
        "(default 0: the --modes runs, no table)",
    )
    r.add_argument(
        "--batch1-tokens",
        type=_positive_int,
        default=None,
        metavar="N",
        help="new tokens of the batch-1 request of --throughput-runs (default 256)",
    )
    r.add_argument(
        "--no-throwaway",
        action="store_true",
        help="with --throughput-runs: no throwaway start (only when this machine already ran an engine)",
    )
    r.add_argument(
        "--throughput-from",
        action="append",
        default=[],
        metavar="SUMMARY.json",
        help="with --throughput-runs: add the timed runs of an earlier --json-out of the same workload "
        "(repeatable); their md5s must equal this call's",
    )
    r.add_argument(
        "--time-budget",
        type=_positive_float,
        default=None,
        metavar="SECONDS",
        help="start no further run once the time since the start plus 1.1 x the longest run so far exceeds "
        "this; the runs not started are listed (fits a call into a time limit)",
    )
    r.add_argument("--run-timeout", type=_positive_float, default=1200.0, help="seconds per run")
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
    if args.base_url_off and args.modes not in (None, ["off", "on"]):
        parser.error("--base-url-off/--base-url-on compare exactly one off and one on server (--modes off,on)")
    if args.throughput_runs < 0:
        parser.error(f"--throughput-runs must be 0 or more, got {args.throughput_runs}")
    if args.throughput_runs and args.modes not in (None, ["off", "on"]):
        parser.error("--throughput-runs plans the runs itself (1 throwaway + N x off,on): leave --modes out")
    if not args.throughput_runs:
        given = [
            o
            for o, v in (
                ("--no-throwaway", args.no_throwaway),
                ("--throughput-from", args.throughput_from),
                ("--batch1-tokens", args.batch1_tokens is not None),
            )
            if v
        ]
        if given:
            parser.error(f"{' and '.join(given)} need{'s' if len(given) == 1 else ''} --throughput-runs")
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
    if args.json_out is not None:
        problem = _unwritable(Path(args.json_out))
        if problem:
            parser.error(f"--json-out {args.json_out!r}: {problem}")
    if args.random_weights and importlib.util.find_spec("safetensors") is None:
        parser.error(
            "--random-weights writes a checkpoint with safetensors, which is not installed: "
            "pip install 'sglang-mamba-dedup[e2e]'"
        )
    if args.prompt_format == "ids" and not args.random_weights and args.vocab_size is None:
        model = args.model_path or DEFAULT_MODEL
        if not (Path(model) / "config.json").exists():
            parser.error(f"--prompt-format ids needs --vocab-size (no local config.json in {model!r} to read it from)")


def _unwritable(path: Path) -> Optional[str]:
    """Why ``path`` cannot be written (checked before any run, so a long run never ends in a traceback)."""
    if path.is_dir():
        return "is a folder"
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        return f"its folder {str(folder)!r} does not exist"
    if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        return "not writable"
    return None


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
    t_start = time.monotonic()
    parser = _build_parser()
    args = parser.parse_args(argv)
    _check_usage(parser, args)
    args.t_start = t_start
    args.plan = run_schedule(args.modes, args.throughput_runs, not args.no_throwaway)
    args.modes = [m for m, _ in args.plan]
    args.batch1_tokens = args.batch1_tokens or 256
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


def _workload(spec: Mapping[str, Any]) -> Dict[str, str]:
    """md5 of every part of the spec that decides what a run generates (runs merge only when all are equal)."""
    keys = (
        "engine_kwargs",
        "prompts",
        "prompt_format",
        "sampling_params",
        "batch_size",
        "warmup_tokens",
        "round2_suffixes",
        "batch1",
    )
    return {k: hashlib.md5(json.dumps(spec.get(k), sort_keys=True, default=str).encode()).hexdigest() for k in keys}


def _load_merged(paths: Sequence[str], workload: Mapping[str, str]) -> Tuple[List[Dict[str, Any]], Optional[str]]:
    """The timed runs of earlier summaries (``--throughput-from``), or why they cannot be merged."""
    runs: List[Dict[str, Any]] = []
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
        prompts: List[Any] = [text_to_ids(t, int(vocab)) for t in texts]
    else:
        prompts = texts

    # engine arguments: the run's own, the deployment defaults this SGLang knows, then --engine-arg
    fields = server_arg_fields()
    defaults, dropped = deployment_defaults(
        not args.no_cuda_graph, not args.no_radix_cache, fields, versions.installed_sglang_version()
    )
    kw = build_engine_kwargs(args, model_path, skip_tokenizer=(fmt == "ids"), defaults=defaults)
    explicit = parse_engine_args(args.engine_arg)
    args.dropped_defaults = [d for d in dropped if d.split("=", 1)[0] not in explicit]
    args.server_dropped = []
    if args.server:
        from . import e2e_server

        kw, args.server_dropped = e2e_server.launchable(kw, e2e_server.launch_server_options(), keep=explicit)
    if args.expect_track is None:
        args.track_expected, args.track_reason = track_expectation(kw, fields)
    else:
        args.track_expected = bool(args.expect_track)
        args.track_reason = "--expect-track" if args.expect_track else "--no-expect-track"
    if args.no_reports:
        args.track_expected, args.track_reason = False, "servers you run: their status reports are not readable"

    sampling = {"temperature": 0.0, "max_new_tokens": args.max_new_tokens, "ignore_eos": not args.no_ignore_eos}
    spec = {
        "engine_kwargs": kw,
        "prompts": prompts,
        "prompt_format": fmt,
        "sampling_params": sampling,
        "batch_size": args.batch_size or len(prompts),
        "warmup_tokens": args.warmup_tokens,
        "round2_suffixes": round2_suffixes(len(prompts), fmt, vocab),
        "batch1": {"prompt_index": 0, "max_new_tokens": args.batch1_tokens} if args.throughput_runs else None,
    }
    args.workload = _workload(spec)
    args.merged, problem = _load_merged(args.throughput_from, args.workload)
    if problem:
        print(f"sglang-mamba-dedup e2e: error: {problem}; nothing was run", file=sys.stderr, flush=True)
        return EXIT_USAGE
    return spec, model_path, random_info


def _print_header(
    args: argparse.Namespace, spec: Dict[str, Any], model_path: str, random_info: Optional[dict], work: Path
) -> None:
    prompts = spec["prompts"]
    fmt = spec["prompt_format"]
    prompt_tokens = sum(len(p) for p in prompts) if fmt == "ids" else None
    kw = spec["engine_kwargs"]
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
        f"max_running_requests {kw.get('max_running_requests')}"
    )
    _print(
        "rounds: 2 per run, after an untimed warm-up and an emptied prefix cache: round 1 the prompts, round 2 "
        "each prompt + its round-1 output + a short new suffix (prefixes read back from the radix cache)"
    )
    _print("settings: " + describe_settings(kw))
    if args.dropped_defaults:
        _print("defaults dropped (this SGLang's ServerArgs has no such field): " + "; ".join(args.dropped_defaults))
    if args.server_dropped:
        _print(
            "left out of the launch_server command (this launch_server has no such option): "
            + ", ".join(args.server_dropped)
        )
    _print(f"track slots: {'required in the on run' if args.track_expected else 'not required'} ({args.track_reason})")
    if args.throughput_runs:
        _print(
            f"throughput: {'1 untimed throwaway engine start, then ' if not args.no_throwaway else ''}"
            f"{args.throughput_runs} runs per mode alternating off,on; batch 1 = the first prompt alone, "
            f"{args.batch1_tokens} new tokens; full batch = round 1"
            + (f"; {len(args.merged)} timed runs merged from --throughput-from" if args.merged else "")
        )
    _print("engine args: " + json.dumps({k: v for k, v in kw.items() if k != "model_path"}, sort_keys=True))
    _print(f"workdir: {work}")


def _run_label(i: int, mode: str, throwaway: bool) -> str:
    return f"run {i + 1} ({mode}{', throwaway' if throwaway else ''})"


def _execute(
    args: argparse.Namespace, spec: Dict[str, Any], work: Path, runner: Optional[Runner]
) -> List[Dict[str, Any]]:
    """Every run of the schedule, one after the other, each in a fresh process (or server)."""
    plan: List[Tuple[str, bool]] = args.plan
    results: List[Dict[str, Any]] = []
    args.not_started = []
    longest = 0.0
    for i, (mode, throwaway) in enumerate(plan):
        if args.time_budget and results:
            elapsed = time.monotonic() - args.t_start
            if elapsed + 1.1 * longest > args.time_budget:
                args.not_started = [_run_label(k, m, t) for k, (m, t) in enumerate(plan) if k >= i]
                _print(
                    f"-- not started (--time-budget {args.time_budget:.0f} s: {elapsed:.0f} s elapsed, the longest "
                    f"run took {longest:.0f} s): " + ", ".join(args.not_started)
                )
                break
        rdir = work / f"reports-{i}-{mode}"
        if rdir.exists():
            shutil.rmtree(rdir)
        rdir.mkdir(parents=True)
        log = work / f"run-{i}-{mode}.log"
        if args.no_reports:
            what = f"server {args.base_url_on if mode == 'on' else args.base_url_off}"
        elif args.server:
            what = "launch_server " + ("with --enable-mamba-conv-dedup" if mode != "off" else "without the flag")
        else:
            what = f"{SWITCH_ENV}={'0' if mode == 'off' else '1'} (fresh process)"
        if mode == "fault":
            what += f" + {faults.ENV}={faults.COMMIT_STEP0} (negative control: {faults.FAULTS[faults.COMMIT_STEP0]})"
        _print(f"-- run {i + 1}/{len(plan)}: {what}" + (" [throwaway: untimed]" if throwaway else "") + " ...")
        t0 = time.monotonic()
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
        res.setdefault("wall_seconds", time.monotonic() - t0)
        longest = max(longest, float(res.get("wall_seconds") or 0.0))
        res["mode"] = mode
        res["throwaway"] = throwaway
        res["report_dir"] = str(rdir)
        res["log"] = str(log)
        res["reports"], res["report_problems"] = read_reports(rdir)
        if res.get("ok"):
            res["stats"] = _run_stats(res)
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
        f"round {k + 1} {r['completion_tokens']} tokens in {r['seconds']:.2f} s ({_fmt_rate(r['tokens_per_s'])} tok/s)"
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
            f"({_fmt_rate(b1['tokens_per_s'])} tok/s)"
        )
    flushes = st.get("cache_flushes") or []
    if any(f is not True for f in flushes):
        _print(
            "   prefix cache flushes (before round 1, before batch 1): "
            + ", ".join({True: "done", False: "REFUSED (requests pending)", None: "not supported"}[f] for f in flushes)
        )


def _all_outputs(res: Mapping[str, Any]) -> List[List[int]]:
    return [o["output_ids"] for r in res.get("rounds") or [] for o in r.get("outputs") or []]


def _where(index: int, round1_size: int) -> str:
    return f"round 1, prompt {index}" if index < round1_size else f"round 2, prompt {index - round1_size}"


def _compare(
    args: argparse.Namespace,
    spec: Dict[str, Any],
    model_path: str,
    random_info: Optional[dict],
    results: List[Dict[str, Any]],
    failures: List[Tuple[int, str]],
) -> Dict[str, Any]:
    """md5s and throughput of the runs; appends what failed to ``failures``; returns the summary."""
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
        "modes": [r["mode"] for r in results],
        "model_path": model_path,
        "random_model": random_info,
        "versions": vers,
        "gpu": gpu,
        "engine_kwargs": spec["engine_kwargs"],
        "settings": describe_settings(spec["engine_kwargs"]),
        "dropped_defaults": args.dropped_defaults,
        "server_dropped": args.server_dropped,
        "track_expected": args.track_expected,
        "track_reason": args.track_reason,
        "sampling_params": sampling,
        "num_prompts": len(prompts),
        "workload": args.workload,
        "not_started": args.not_started,
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
    if any(not r.get("ok") for r in results):
        failures.append((EXIT_RUN_FAILED, _failed_runs_text(results, args.verbose)))
        return summary
    if not results:
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
    for m in args.merged:
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
                [_fmt_rate(x["tokens_per_s"]) for x in r["stats"]["rounds"]]
                + ([_fmt_rate(r["stats"]["batch1"]["tokens_per_s"])] if r["stats"].get("batch1") else [])
            )
            for k, r in enumerate(results, start=1)
        )
        + (" (* throwaway)" if any(r.get("throwaway") for r in results) else "")
    )
    if args.throughput_runs:
        summary["throughput"] = _throughput(args, spec, results)
    else:
        _print("throughput: not compared (single runs say nothing about a speed-up; --throughput-runs 3 measures it)")
    return summary


def _negative_control(
    k: int,
    base: Dict[str, Any],
    run: Dict[str, Any],
    same: bool,
    n_prompts: int,
    summary: Dict[str, Any],
    failures: List[Tuple[int, str]],
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


def _throughput(args: argparse.Namespace, spec: Dict[str, Any], results: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The throughput table over the timed runs (throwaway left out, --throughput-from runs added)."""
    samples = [(r["mode"], _throughput_sample(r["stats"])) for r in results if not r.get("throwaway")]
    samples += [(m["mode"], _throughput_sample(m["stats"])) for m in args.merged]
    stats = throughput_stats(samples)
    n = len(spec["prompts"])
    bs = int(spec["batch_size"] or n)
    labels = {
        "batch1": f"batch 1: 1 request x {args.batch1_tokens} new tokens",
        "full": f"full batch: round 1, {n} requests x {args.max_new_tokens} new tokens"
        + ("" if bs >= n else f" in batches of {bs}"),
    }
    counts = {m: sum(1 for mm, _ in samples if mm == m) for m in ("off", "on")}
    _print(
        f"throughput ({counts['off']} off and {counts['on']} on runs, alternating"
        + (", after 1 untimed throwaway engine start" if any(r.get("throwaway") for r in results) else "")
        + (f", {len(args.merged)} of them from --throughput-from" if args.merged else "")
        + "; tok/s = new tokens / wall time of the generate call, prefill included, prefix cache emptied before):"
    )
    for line in throughput_table(stats, labels):
        _print("  " + line)
    return {"phases": stats, "labels": labels, "samples": [{"mode": m, **s} for m, s in samples]}


def _plugin_status(
    args: argparse.Namespace, results: List[Dict[str, Any]], summary: Dict[str, Any], failures: List[Tuple[int, str]]
) -> None:
    """The plugin's state in each run's scheduler process, from its status report."""
    engaged_all = None
    if args.no_reports:
        _print(
            "plugin status: not readable (servers you started write their status reports, if at all, into "
            "their own SGLANG_MAMBA_DEDUP_REPORT_DIR); only the md5 is checked"
        )
        results_for_status: List[Dict[str, Any]] = []
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
            ok, reasons, rep = check_engaged(reports, parent, expect_track=args.track_expected)
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
                if args.track_expected and ok
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
    planned_on = any(m == "on" for m, _ in args.plan)
    if planned_on and not any(r["mode"] == "on" for r in results):
        failures.append((EXIT_RUN_FAILED, "no 'on' run was started (--time-budget): nothing shows the plugin"))
    elif engaged_all is None and not planned_on and not args.no_reports:
        _print("plugin engagement: not checked (no 'on' run in --modes)")


def _verdict(
    args: argparse.Namespace, summary: Dict[str, Any], failures: List[Tuple[int, str]], temp_model: Optional[Path]
) -> int:
    order = [EXIT_RUN_FAILED, EXIT_MD5_DIFFER, EXIT_NOT_ENGAGED, EXIT_OFF_NOT_OFF, EXIT_FAULT_NOT_CAUGHT]
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
    note = f"; {len(args.not_started)} planned runs not started (--time-budget)" if args.not_started else ""
    _print(
        ("RESULT: PASS" if code == EXIT_OK else "RESULT: FAIL -- " + " | ".join(f[1] for f in failures))
        + f" (exit {code}{note})"
    )
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
