"""SGLang's own pool and mamba-cache estimator, driven without a server: the model shapes (:mod:`.shapes`),
SGLang's pool built as ``ModelRunner`` builds it (:mod:`.sglang_pool`) and its estimator run on a configuration
(:mod:`.estimator`). Used by ``plan``, ``demo``, the tests and the benchmarks; never on SGLang's serving path."""
