"""What was run on each SGLang release: the evidence ``doctor`` prints for the installed release and
``docs/releases.md`` shows for every one (a test keeps the doc equal to :func:`matrix`). The support policy
itself (boundaries, ranges, what is refused) is :mod:`sglang_mamba_dedup.versions`."""

from __future__ import annotations

from typing import Any

from .. import versions

#: What was run on each release (``docs/releases.md`` matrix and ``doctor``; a test keeps the doc in step). CPU: the
#: ``release`` tests of ``bash .ci/test.sh`` (the whole suite on the base release), with that release's own
#: SGLang package. GPU: ``tools/gpu-engine/proofs/release_sim_gpu.py`` (stock vs plugin speculative-decode simulation on
#: CUDA, bf16, three configs incl. Qwen3.5-0.8B shapes, bit-identical md5s) and the e2e md5 of a real
#: ``sglang.Engine`` (``tools/gpu-engine/run_e2e.sh``), H200, 2026-11-29 / 2026-12-01.
_SIM = "simulation bit-identical (md5s in benchmarks/results/latest/release_sims_h200.json)"
EVIDENCE = {
    "0.5.12": ("release tests", "not run"),
    "0.5.12.post1": ("release tests", "not run"),
    "0.5.13": ("release tests", "not run"),
    "0.5.13.post1": (
        "release tests",
        f"{_SIM}; e2e md5 equal off/on (648a8899…, back-port layout, 128/128 commits ours; graphs and radix off)",
    ),
    "0.5.14": ("release tests", _SIM),
    "0.5.15": ("release tests", "not run"),
    "0.5.15.post1": ("release tests", "not run"),
    "0.5.16": ("release tests", _SIM),
    "0.5.17": ("release tests", "not run"),
    "0.5.18": ("release tests", "not run"),
    "0.5.19": ("release tests", "not run"),
    "0.5.20": ("release tests", "not run"),
    "0.5.21": ("release tests", f"{_SIM}; e2e md5 equal off/on (f936d6df…, 64/64 commits ours)"),
    "0.5.22": ("release tests", "not run"),
    "0.5.23": (
        "all tests",
        "simulation, kernels, benchmarks; e2e md5 equal off/on with CUDA graphs + radix cache, two rounds "
        "(77fdfb36…, 256/256 commits ours, all with track slots), earlier also TP=2; launch_server route "
        "(e2e --server, flag only) md5 equal (8f106bdc…)",
    ),
}
#: Release-specific behaviour worth a note in the matrix.
NOTES = {
    "0.5.14": "upstream also dedups KDA / opt-out shapes here: the plugin records it and keeps SGLang's commit for them",
    "0.5.15": "as 0.5.14",
    "0.5.15.post1": "as 0.5.14",
    "0.5.16": "pools move to kv_cache_configurator, kernels to sglang.kernels.ops",
    "0.5.13.post1": "SGLang refuses speculative decoding + radix cache for this model before 0.5.14 (no_buffer)",
    "0.5.20": "PLE side states: 4-argument call; xgrammar needed to import",
    "0.5.21": "PLE side states: 4-argument call",
    "0.5.22": "PLE side states: 5 arguments (src_indices_raw), pipeline stable rows kept on SGLang's path",
}


def matrix_row(release: str) -> str:
    cpu, gpu = EVIDENCE[release]
    mode = "back-port" if versions.release(release).backport else "take-over"
    return f"| {release} | {mode} | {cpu} pass | {gpu} | {NOTES.get(release, '')} |"


def matrix() -> str:
    head = "| release | mode | CPU CI | lent H200 | notes |\n|---|---|---|---|---|"
    return "\n".join([head] + [matrix_row(r) for r in versions.RELEASES])


def tested(release: str | None) -> dict[str, Any] | None:
    """What ``doctor`` says was run on the installed ``release`` (None when SGLang is not installed)."""
    if release in EVIDENCE:
        cpu, gpu = EVIDENCE[release]
        return {"cpu_ci": f"{cpu} pass", "h200": gpu, "notes": NOTES.get(release, "")}
    if release:
        return {"cpu_ci": "never tested", "h200": "never tested", "notes": versions.untested_note(release) or ""}
    return None
