"""What every e2e run generates, Engine or HTTP alike, and the md5s that compare runs.

The fixed prompt set (``data/prompts.json``), token ids for a model without a tokenizer
(:func:`text_to_ids`), round 2 on prefixes of round 1 (:func:`round2_prompts`), the run plan (:func:`run_plan`:
warm-up, emptied prefix cache, round 1, round 2; or the two rounds as two turns of streaming sessions,
:class:`Sessions`) over any ``generate`` function, the retried cache
flush both routes share (:func:`flush_with_retry`), and the md5 helpers: of the outputs and of the workload
(:func:`workload_md5`, what decides whether runs of two calls may be merged).
"""

from __future__ import annotations

import hashlib
import json
import numbers
import os
import re
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROMPTS_PATH = Path(__file__).resolve().parent / "data" / "prompts.json"


# ----------------------------------------------------------------------------- prompts, hashing
def load_prompts(path: os.PathLike | None = None, limit: int | None = None) -> list[str]:
    """The fixed prompt set (text), in file order; ``limit`` keeps the first ``limit`` prompts."""
    doc = json.loads(Path(path or PROMPTS_PATH).read_text(encoding="utf-8"))
    prompts = doc["prompts"] if isinstance(doc, dict) else doc
    if not isinstance(prompts, list) or not prompts:
        raise ValueError('expected a non-empty JSON list of prompts (or {"prompts": [...]})')
    if not all(isinstance(p, str) and p for p in prompts):
        raise ValueError("prompts must be non-empty strings")
    return list(prompts[:limit] if limit else prompts)


_PIECE = re.compile(r"\w+|[^\w\s]", re.UNICODE)


def text_to_ids(text: str, vocab_size: int) -> list[int]:
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


def md5_of_texts(texts: Sequence[str | None]) -> str | None:
    """md5 of the output texts, or None when a run had no detokenizer output (``skip_tokenizer_init``)."""
    if not texts or any(t is None for t in texts):
        return None
    canon = json.dumps(list(texts), ensure_ascii=False, separators=(",", ":"))
    return hashlib.md5(canon.encode("utf-8")).hexdigest()


def first_difference(a: Sequence[Sequence[int]], b: Sequence[Sequence[int]]) -> tuple[int, int] | None:
    """(prompt index, token index) of the first difference between two runs' outputs, or None."""
    for i, (x, y) in enumerate(zip(a, b)):
        if list(x) != list(y):
            j = next((k for k, (u, v) in enumerate(zip(x, y)) if u != v), min(len(x), len(y)))
            return i, j
    if len(a) != len(b):
        return min(len(a), len(b)), 0
    return None


def workload_md5(spec: Mapping[str, Any]) -> dict[str, str]:
    """md5 of every part of the spec that decides what a run generates (the summary's ``workload``: two calls
    measured the same thing when all are equal)."""
    keys = (
        "engine_kwargs",
        "prompts",
        "prompt_format",
        "sampling_params",
        "batch_size",
        "warmup_tokens",
        "round2_suffixes",
        "batch1",
        "streaming_sessions",
    )
    return {k: hashlib.md5(json.dumps(spec.get(k), sort_keys=True, default=str).encode()).hexdigest() for k in keys}


# ----------------------------------------------------------------------------- round 2: prefixes of round 1
_ROUND2_SUFFIX = " Now continue, part {n}: say more."


def round2_suffixes(num_prompts: int, prompt_format: str, vocab_size: int | None = None) -> list[Any]:
    """The short new ending of every round-2 prompt: a different text per prompt (ids for ``"ids"``)."""
    texts = [_ROUND2_SUFFIX.format(n=i + 2) for i in range(num_prompts)]
    if prompt_format != "ids":
        return list(texts)
    if not vocab_size:
        raise ValueError("prompt format 'ids' needs the vocabulary size")
    return [text_to_ids(t, int(vocab_size)) for t in texts]


def round2_prompts(
    prompts: Sequence[Any], outputs: Sequence[Mapping[str, Any]], suffixes: Sequence[Any], prompt_format: str
) -> list[Any]:
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
    res: list[Any] = []
    for i, (prompt, out) in enumerate(zip(prompts, outputs)):
        suffix = suffixes[i] if suffixes else ([] if prompt_format == "ids" else "")
        if prompt_format == "ids":
            res.append([int(t) for t in prompt] + [int(t) for t in out.get("output_ids") or []] + list(suffix))
        else:
            res.append(str(prompt) + (out.get("text") or "") + str(suffix))
    return res


# ----------------------------------------------------------------------------- what one run generates
Generate = Callable[[list[Any], dict[str, Any]], list[dict]]


@dataclass(frozen=True)
class Sessions:
    """A route's streaming sessions (SGLang's ``open_session(streaming=True)``): ``open() -> id``,
    ``generate(prompts, sampling_params, ids) -> answers`` (prompt ``i`` as the next turn of session ``ids[i]``,
    the sessions concurrently) and ``close(id)``."""

    open: Callable[[], str]
    generate: Callable[[list[Any], dict[str, Any], list[str]], list[dict]]
    close: Callable[[str], Any]


def _turns(sessions: Sessions, ids: Sequence[str]) -> Generate:
    """A :data:`Generate` that sends its batches, in order, as the next turn of ``ids``' sessions."""
    pos = 0

    def generate(batch: list[Any], sampling: dict[str, Any]) -> list[dict]:
        nonlocal pos
        out = sessions.generate(batch, sampling, list(ids[pos : pos + len(batch)]))
        pos += len(batch)
        return out

    return generate


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


def outputs_and_meta(outputs: Sequence[Any]) -> dict[str, Any]:
    """The ``outputs`` and ``meta`` fields of a round from SGLang's generate answers (Engine or HTTP).

    An answer without ``output_ids`` becomes an empty output marked ``no_ids`` (:func:`output_problem` names it);
    an answer that is no object, ids that are no list of integers, or a ``completion_tokens`` that is no count
    (negative) raise ``ValueError``: the request failed.
    """
    answers = [_answer(o) for o in outputs]
    return {"outputs": [_output(o) for o in answers], "meta": [_meta(o) for o in answers]}


def _brief(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _answer(answer: Any) -> Mapping[str, Any]:
    if not isinstance(answer, Mapping):
        raise ValueError(f"an answer is {type(answer).__name__} {_brief(answer)}, not an object")
    return answer


def _output(answer: Mapping[str, Any]) -> dict[str, Any]:
    ids = answer.get("output_ids")
    if ids is None:
        return {"output_ids": [], "text": answer.get("text"), "no_ids": True}
    # a bool is an Integral in Python, never a token id (m-E3 of the second audit)
    if not isinstance(ids, list) or not all(isinstance(t, numbers.Integral) and not isinstance(t, bool) for t in ids):
        raise ValueError(f"output_ids {_brief(ids)} is not a list of token ids")
    return {"output_ids": [int(t) for t in ids], "text": answer.get("text")}


def _meta(answer: Mapping[str, Any]) -> dict[str, Any]:
    info = answer.get("meta_info") or {}
    if not isinstance(info, Mapping):
        raise ValueError(f"meta_info {_brief(info)} is not an object")
    count = info.get("completion_tokens")
    if count is not None and not (isinstance(count, numbers.Integral) and int(count) >= 0):
        raise ValueError(f"completion_tokens {_brief(count)} is not a token count")
    return {k: info.get(k) for k in _META_KEYS}


def output_problem(outputs: Sequence[Mapping[str, Any]], want: int | None) -> str | None:
    """Why these outputs (of :func:`outputs_and_meta`) hold nothing to compare, or None: no answers, an answer
    without ``output_ids`` or with no token, or (``want``: ``ignore_eos`` fixed the length) another token count."""
    if not outputs:
        return "no answers"
    for i, out in enumerate(outputs):
        got = len(out["output_ids"])
        if out.get("no_ids"):
            return f"answer {i} has no output_ids"
        if got == 0:
            return f"answer {i} has no token"
        if want is not None and got != want:
            return f"answer {i} has {got} of the {want} tokens asked (ignore_eos fixes the length)"
    return None


def engine_flush_once(engine: Any) -> bool | None:
    """One ``Engine.flush_cache()``: True done, False refused (requests pending), None when there is none."""
    fn = getattr(engine, "flush_cache", None)
    if fn is None:
        return None
    ok = getattr(fn(), "success", None)
    return True if ok is None else bool(ok)


def flush_with_retry(
    flush_once: Callable[[], bool | None],
    attempts: int = 40,
    wait: float = 0.25,
    sleep: Callable[[float], Any] = time.sleep,
) -> bool | None:
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


def split_batches(prompts: Sequence[Any], batch_size: int) -> list[list[Any]]:
    bs = int(batch_size or 0) or len(prompts)
    return [list(prompts[i : i + bs]) for i in range(0, len(prompts), bs)]


def timed(
    generate: Generate, batches: list[list[Any]], sampling: dict[str, Any], clock: Callable[[], float]
) -> dict[str, Any]:
    outputs: list[Any] = []
    t0 = clock()
    for batch in batches:
        out = generate(batch, dict(sampling))
        outputs.extend(out if isinstance(out, list) else [out])
    seconds = clock() - t0
    return {"seconds": seconds, **outputs_and_meta(outputs)}


def run_plan(
    spec: dict[str, Any],
    generate: Generate,
    flush: Callable[[], bool | None],
    clock: Callable[[], float] = time.perf_counter,
    sessions: Sessions | None = None,
) -> dict[str, Any]:
    """What every run does, Engine or HTTP alike (``generate(prompts, sampling_params) -> answers``):

    1. untimed warm-up: the round-1 batches, ``warmup_tokens`` each (-1: all), so Triton compilation and
       autotuning are not timed;
    2. empty the prefix cache (``flush``), so round 1 starts cold in every run;
    3. round 1, timed: the prompts in batches of ``batch_size`` (all at once by default: the full batch);
    4. round 2, timed: :func:`round2_prompts` of round 1's outputs; their long prefixes are read back from
       the radix cache.

    With ``spec["streaming_sessions"]`` rounds 1 and 2 are two turns of one streaming session per prompt
    (``sessions``; a route without them raises ``ValueError``): round 1 sends the prompt, round 2 only its
    suffix, and SGLang continues from the state the session kept (the same token sequence as round 2's prompt).

    Returns ``{"rounds": [round1, round2], "cache_flushes": [flushed]}`` (and ``"sessions"``: how many), each
    round ``{"seconds", "outputs", "meta"}``.
    """
    prompts = spec["prompts"]
    fmt = spec["prompt_format"]
    bs = int(spec.get("batch_size") or 0) or len(prompts)
    sampling = dict(spec["sampling_params"])
    warm = int(spec.get("warmup_tokens") or 0)
    if warm:
        n = sampling["max_new_tokens"] if warm < 0 else warm
        for batch in split_batches(prompts, bs):
            generate(batch, dict(sampling, max_new_tokens=n))
    flushes = [flush()]
    if spec.get("streaming_sessions"):
        if sessions is None:
            raise ValueError("streaming sessions asked for, but this route has none (the Engine route has them)")
        ids = [sessions.open() for _ in prompts]
        try:
            round1 = timed(_turns(sessions, ids), split_batches(prompts, bs), sampling, clock)
            suffixes = spec["round2_suffixes"]
            round2 = timed(_turns(sessions, ids), split_batches(suffixes, bs), sampling, clock)
        finally:
            for sid in ids:
                sessions.close(sid)
        return {"rounds": [round1, round2], "cache_flushes": flushes, "sessions": len(ids)}
    round1 = timed(generate, split_batches(prompts, bs), sampling, clock)
    second = round2_prompts(prompts, round1["outputs"], spec.get("round2_suffixes") or [], fmt)
    round2 = timed(generate, split_batches(second, bs), sampling, clock)
    return {"rounds": [round1, round2], "cache_flushes": flushes}
