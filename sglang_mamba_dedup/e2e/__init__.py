"""``sglang-mamba-dedup e2e``: the same greedy generation with the plugin off and on, compared by md5.

Real SGLang runs (the offline ``sglang.Engine`` in fresh processes, or ``launch_server`` + HTTP) with NEXTN
speculative decoding, two rounds per run, the second reading prefixes back from the radix cache; the
plugin's status reports, written by the scheduler processes, show whether it engaged. The command line and its
options: :mod:`.cli` (``python -m sglang_mamba_dedup.e2e``); the steps of a call: :mod:`.driver`; the exit codes
and the judgement: :mod:`.verdict`; what is printed: :mod:`.console`. Importing this package imports nothing else
(no torch, no SGLang).
"""
