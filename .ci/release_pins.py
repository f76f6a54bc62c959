"""The packages each SGLang release's own code needs to import on a CPU test machine, beyond the base venv
(CI data, not the plugin's: measured with each release's wheel; 0.5.18/0.5.19 on 2026-12-01: they fail with
transformers 5.19's ``qwen3_asr`` config clash).

    python .ci/release_pins.py 0.5.16     # prints the pip requirements, space-separated
"""

import sys

from packaging.version import Version

#: First releases that import with the base venv's newer transformers / take upstream's dedup.
_UPSTREAM_DEDUP_FROM = "0.5.14"
_NEW_TRANSFORMERS_FROM = "0.5.20"


def release_pins(release: str) -> tuple:
    v = Version(release)
    if v < Version(_UPSTREAM_DEDUP_FROM):
        return ("transformers==5.8.1", "tokenizers==0.22.2")
    if v < Version(_NEW_TRANSFORMERS_FROM):
        return ("transformers==5.12.1", "tokenizers==0.22.2")
    return ()


if __name__ == "__main__":
    print(" ".join(release_pins(sys.argv[1])))
