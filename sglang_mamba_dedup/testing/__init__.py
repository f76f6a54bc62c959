"""Builders shared by the demo, the tests and the benchmarks (never imported on SGLang's serving path):
the model shapes (:mod:`.shapes`) and SGLang's own pool built as ``ModelRunner`` builds it
(:mod:`.sglang_pool`)."""
