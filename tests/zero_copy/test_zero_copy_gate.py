"""The zero-copy gate (docs/zero-copy.md section 6): every excluded setting and backend keeps today's commit, with
its reason; the safe case passes; the decision is made once per pool, says one line, and strict mode stops."""

from __future__ import annotations

import logging
import types

import pytest
import torch

from sglang_mamba_dedup import env, report, state
from sglang_mamba_dedup.patches import zero_copy
from sglang_mamba_dedup.patches.zero_copy import bookkeeping, eligibility

SAFE = {
    "speculative_algorithm": "NEXTN",
    "speculative_eagle_topk": 1,
    "disable_radix_cache": True,
    "enable_linear_replayssm": False,
    "enable_linear_replayssm_spec": False,
    "disaggregation_mode": "null",
    "pp_size": 1,
    "enable_dp_attention": False,
    "enable_two_batch_overlap": False,
    "enable_mixed_chunk": False,
}

UNSAFE = [
    ("speculative_algorithm", "NGRAM", "not NEXTN/EAGLE"),
    ("speculative_eagle_topk", 4, "topk > 1"),
    ("disable_radix_cache", False, "radix cache is on"),
    ("enable_linear_replayssm", True, "ReplaySSM owns the state"),
    ("enable_linear_replayssm_spec", True, "ReplaySSM owns the commit"),
    ("disaggregation_mode", "decode", "PD disaggregation"),
    ("pp_size", 2, "pipeline parallelism"),
    ("enable_dp_attention", True, "DP attention"),
    ("enable_two_batch_overlap", True, "two-batch overlap"),
    ("enable_mixed_chunk", True, "mixed chunked prefill"),
    ("speculative_adaptive", True, "adaptive draft count"),
]


def test_the_safe_settings_pass():
    assert eligibility.settings_problem(dict(SAFE)) is None
    assert eligibility.settings_problem(dict(SAFE, speculative_eagle_topk=None, speculative_algorithm="EAGLE")) is None


@pytest.mark.parametrize("name,value,why", UNSAFE, ids=[u[0] for u in UNSAFE])
def test_each_excluded_setting_keeps_todays_commit(name, value, why):
    problem = eligibility.settings_problem(dict(SAFE, **{name: value}))
    assert problem is not None and why in problem and name in problem


def test_a_setting_that_cannot_be_read_is_refused(monkeypatch):
    settings = dict(SAFE)
    del settings["pp_size"]
    assert "cannot read SGLang's setting pp_size" in eligibility.settings_problem(settings)
    monkeypatch.setenv("SGLANG_ENABLE_PP_SPEC", "1")
    assert "SGLANG_ENABLE_PP_SPEC" in eligibility.settings_problem(dict(SAFE))


class TritonGDNKernel:  # the name the gate reads
    pass


def _backend(
    rows=6, scratch_rows=7, verify=TritonGDNKernel, commit_ok=True, scratch_dtype=torch.float32, layers=(3, 0, 7)
):
    cache = types.SimpleNamespace(
        temporal=torch.zeros(2, 10, 2, 4, 4),
        intermediate_ssm=torch.zeros(2, scratch_rows, 3, 2, 4, 4, dtype=scratch_dtype),
    )
    pool = types.SimpleNamespace(mamba_cache=cache)
    state.pool_state(pool).commit_ok = commit_ok
    rtp = types.SimpleNamespace(
        mamba_pool=pool,
        size=rows,
        short_conv_pool=None,
        ngram_pool=None,
        mamba_map={k: i for i, k in enumerate(layers)},
    )
    return types.SimpleNamespace(req_to_token_pool=rtp, kernel_dispatcher=types.SimpleNamespace(verify_kernel=verify()))


def test_a_gdn_backend_with_triton_verify_and_enough_rows_passes():
    assert eligibility.backend_problem(_backend()) is None


@pytest.mark.parametrize(
    "kw,why",
    [
        (dict(commit_ok=False), "commit does not serve"),
        (dict(scratch_rows=6), "6 scratch rows for 6 request rows"),
        (dict(verify=object), "not SGLang's Triton GDN verify"),
        (dict(scratch_dtype=torch.bfloat16), "scratch dtype"),
        (dict(layers=()), "names no linear layers"),
    ],
    ids=["not-our-commit", "too-few-rows", "flashinfer-verify", "dtype", "no-layer-map"],
)
def test_an_unsafe_backend_keeps_todays_commit(kw, why):
    assert why in eligibility.backend_problem(_backend(**kw))


def test_the_decision_is_once_per_pool_and_logged(monkeypatch, caplog):
    backend = _backend()
    monkeypatch.setattr(eligibility, "read_settings", lambda: dict(SAFE))
    assert eligibility.decide(backend) is None  # not asked for: stock, silently, and remembered
    ps = state.pool_state_of(backend.req_to_token_pool.mamba_pool)
    assert ps.zero_copy_decided and ps.zero_copy is None
    ps.zero_copy_decided = False
    monkeypatch.setenv(env.ZERO_COPY, "1")
    with caplog.at_level(logging.INFO, logger="sglang_mamba_dedup"):
        zc = eligibility.decide(backend)
        assert eligibility.decide(backend) is zc
    assert isinstance(zc, bookkeeping.ZeroCopy) and zc.pitch == 3 and zc.accepted.tolist() == [1] * 7
    assert zc.layers == (0, 7)  # the first and last linear layer ids (tables built at 0, stage-ins after 7)
    assert [r.message for r in caplog.records].count(caplog.records[0].message) == 1
    assert "zero-copy commit on" in caplog.records[0].message
    assert "hold the live SSM states" in caplog.records[0].message  # m-Z3: the stale slot is said
    # a Gated DeltaNet pool: the log names SGLang's faster ReplaySSM-spec (docs/benchmarks.md, 2026-12-05 night)
    assert "--enable-linear-replayssm-spec measured faster" in caplog.records[0].message
    assert report.events()["zero_copy"] == "on"


def test_refused_is_logged_and_strict_stops(monkeypatch, caplog):
    monkeypatch.setenv(env.ZERO_COPY, "1")
    monkeypatch.setattr(eligibility, "read_settings", lambda: dict(SAFE, disable_radix_cache=False))
    with caplog.at_level(logging.WARNING, logger="sglang_mamba_dedup"):
        assert eligibility.decide(_backend()) is None
    assert "stays off for this pool: the radix cache is on" in caplog.text
    assert report.events()["zero_copy"].startswith("off: the radix cache is on")
    monkeypatch.setenv(env.SWITCH, "strict")
    state.reset()
    with pytest.raises(RuntimeError, match="strict mode.*radix cache is on"):
        eligibility.decide(_backend())


def test_the_accepted_table_comes_from_pool_build_and_never_from_a_capture(monkeypatch):
    monkeypatch.setenv(env.ZERO_COPY, "1")
    monkeypatch.setattr(eligibility, "read_settings", lambda: dict(SAFE))
    backend = _backend()
    pool = backend.req_to_token_pool.mamba_pool
    zero_copy.prepare(pool)  # what the MambaPool.__init__ wrapper does when zero-copy is asked for
    table = state.pool_state(pool).accepted
    assert table.dtype == torch.int32 and table.tolist() == [1] * 7
    monkeypatch.setattr(eligibility, "_capturing", lambda: True)
    assert eligibility.decide(backend).accepted is table  # built with the pool: a capture changes nothing
    late = _backend()
    assert eligibility.decide(late) is None  # no table from the pool and inside a capture: stays off
    assert "inside a CUDA-graph capture" in report.events()["zero_copy"]


def test_each_pool_keeps_its_own_decision_and_reason(monkeypatch):
    """Design review 2026-12-04 D3: two pools refused for different reasons keep their own reason on their
    ``PoolState`` (the status report's event is the last pool's, a log line); a pool that passed has none."""
    from sglang_mamba_dedup.patches import server_state

    monkeypatch.setenv(env.ZERO_COPY, "1")
    monkeypatch.setattr(eligibility, "read_settings", lambda: dict(SAFE, disable_radix_cache=False))
    radix = _backend()
    assert eligibility.decide(radix) is None
    monkeypatch.setattr(eligibility, "read_settings", lambda: dict(SAFE))
    rows, on = _backend(scratch_rows=6), _backend()
    assert eligibility.decide(rows) is None and eligibility.decide(on) is not None
    states = [state.pool_state_of(zero_copy.pool_of(b)) for b in (radix, rows, on)]
    assert states[0].zero_copy_reason.startswith("the radix cache is on")
    assert states[1].zero_copy_reason.startswith("6 scratch rows for 6 request rows")
    assert states[2].zero_copy_reason is None and states[2].zero_copy is not None
    assert [server_state.zero_copy_decision(ps) for ps in states] == [
        f"off: {states[0].zero_copy_reason}",
        f"off: {states[1].zero_copy_reason}",
        "on",
    ]
    assert report.events()["zero_copy"] == "on"  # the last pool decided: a log, not what each pool says


def test_pool_of_finds_the_pool_from_every_hooked_object():
    """Design review D12: one helper knows the ways from a hooked object to its mamba pool: a backend or a model
    runner (``req_to_token_pool``), a streaming session or a radix-cache component (``cache.req_to_token_pool``),
    the request-to-token pool itself."""
    pool = types.SimpleNamespace(size=4)
    rtp = types.SimpleNamespace(mamba_pool=pool)
    backend = types.SimpleNamespace(req_to_token_pool=rtp, is_draft_worker=False)
    session = types.SimpleNamespace(cache=types.SimpleNamespace(req_to_token_pool=rtp))
    assert [zero_copy.pool_of(obj) for obj in (backend, session, rtp)] == [pool, pool, pool]
    assert zero_copy.pool_of(None) is None and zero_copy.pool_of(types.SimpleNamespace(cache=None)) is None


def test_a_rule_over_several_settings_is_one_row():
    """Design review D10: a rule may read several settings (the radix gate's "radix on only with the extra buffer");
    the refusal names them all, and a setting the release does not have refuses unless the rule says what it means.
    The gate's own rule reads the same pair: the radix cache on is served with the extra buffer only."""
    rule = eligibility.Rule(
        ("disable_radix_cache", "enable_mamba_extra_buffer"),
        lambda radix_off, extra: radix_off or extra,
        "the radix cache is on without the extra buffer",
    )
    rules = (rule,)
    on_no_buffer = dict(SAFE, disable_radix_cache=False, enable_mamba_extra_buffer=False)
    assert eligibility.settings_problem(on_no_buffer, rules) == (
        "the radix cache is on without the extra buffer (disable_radix_cache=False, enable_mamba_extra_buffer=False)"
    )
    assert eligibility.settings_problem(dict(on_no_buffer, enable_mamba_extra_buffer=True), rules) is None
    assert eligibility.settings_problem(dict(SAFE, disable_radix_cache=True), rules) == (
        "cannot read SGLang's setting enable_mamba_extra_buffer"
    )
    assert "radix cache is on with the mamba strategy no_buffer" in eligibility.settings_problem(on_no_buffer)
    assert eligibility.settings_problem(dict(on_no_buffer, enable_mamba_extra_buffer=True)) is None


# the second audit's zero-copy cases (issue 36: m-Z1, m-Z2, m-Z5), each failing on the code before the fix ----------
def test_an_untested_release_never_gets_zero_copy_even_when_allowed(monkeypatch):
    """m-Z1: ``ALLOW_UNTESTED`` maps 0.5.24 onto 0.5.23 for the plugin's other features, never for zero-copy."""
    from sglang_mamba_dedup import activation, versions
    from sglang_mamba_dedup.patches import PATCHES
    from sglang_mamba_dedup.patches import zero_copy as zc_patch

    assert not zc_patch.release_ok("0.5.24") and zc_patch.release_ok(versions.ZERO_COPY_RELEASE)
    monkeypatch.setattr(versions, "installed_sglang_version", lambda: "0.5.24")
    monkeypatch.setenv(env.SWITCH, "1")
    monkeypatch.setenv(env.ZERO_COPY, "1")
    monkeypatch.setenv(env.ALLOW_UNTESTED, "1")
    state.reset()
    activation.register()
    from sglang_mamba_dedup import installed

    zc_names = {p.name for p in PATCHES if p.feature.startswith("zero_copy")}
    assert installed.PATCHER.applied("commit"), "the other features still apply (allowed)"
    assert not zc_names & set(installed.PATCHER.applied())
    assert "built for SGLang 0.5.23 only (this is 0.5.24)" in activation.last_summary()
    assert not zc_patch.asked()  # so no accepted table and no reservation either


def test_one_answer_to_asked_for_and_served_here(monkeypatch):
    """``asked(version)`` is the one answer (activation, pool patch, estimator, planner, doctor, each pool's gate);
    ``not_served`` says why a value given is not served: not understood, or another release."""
    from sglang_mamba_dedup import versions

    here = versions.ZERO_COPY_RELEASE
    assert not zero_copy.asked(here) and zero_copy.not_served(here) is None  # unset: not asked, nothing to say
    monkeypatch.setenv(env.ZERO_COPY, "1")
    assert zero_copy.asked(here) and zero_copy.not_served(here) is None
    assert not zero_copy.asked("0.5.22") and "built for SGLang 0.5.23 only (this is 0.5.22)" in zero_copy.not_served(
        "0.5.22"
    )
    monkeypatch.setenv(env.ZERO_COPY, "2")
    assert not zero_copy.asked(here) and "is not understood" in zero_copy.not_served(here)
    pool = types.SimpleNamespace(mamba_cache=types.SimpleNamespace(intermediate_ssm=torch.zeros(1, 5, 2, 3)))
    table = zero_copy.prepare(pool)
    assert table.tolist() == [1] * 5 and zero_copy.prepare(pool) is table  # made once, its one home the PoolState
    assert bookkeeping.ZeroCopy(pool).accepted is state.pool_state(pool).accepted is table


def test_multi_layer_eagle_keeps_todays_commit():
    """m-Z2: docs/zero-copy.md section 6 lists multi-layer EAGLE as excluded; absent from a bag means off."""
    assert "multi-layer EAGLE" in eligibility.settings_problem(dict(SAFE, enable_multi_layer_eagle=True))
    assert eligibility.settings_problem(dict(SAFE, enable_multi_layer_eagle=False)) is None


@pytest.mark.parametrize("switch", [None, "0"], ids=["switch-unset", "switch-0"])
def test_zero_copy_asked_for_with_the_plugin_off_is_said(monkeypatch, caplog, switch):
    """m-Z5: zero-copy asked for while the plugin is off: one WARNING that says it is ignored and why."""
    from sglang_mamba_dedup import activation

    if switch is not None:
        monkeypatch.setenv(env.SWITCH, switch)
    monkeypatch.setenv(env.ZERO_COPY, "1")
    with caplog.at_level(logging.INFO, logger="sglang_mamba_dedup"):
        activation.register()
    (line,) = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert f"{env.ZERO_COPY} is ignored" in line.getMessage() and "nothing patched" in line.getMessage()


@pytest.mark.parametrize("value", ["2", "enabled"])
def test_an_unknown_zero_copy_value_is_named_and_strict_stops(monkeypatch, value):
    """m-Z5: a value that is neither yes nor no is named in the activation line (zero-copy off); strict stops."""
    from sglang_mamba_dedup import activation
    from sglang_mamba_dedup.env import Mode

    monkeypatch.setenv(env.SWITCH, "1")
    monkeypatch.setenv(env.ZERO_COPY, value)
    activation.register()
    assert f"{env.ZERO_COPY}={value!r} is not understood" in activation.last_summary()
    assert activation.current_mode() is Mode.ON  # the rest of the plugin still serves
    state.reset()
    monkeypatch.setenv(env.SWITCH, "strict")
    with pytest.raises(SystemExit, match="not understood"):
        activation.register()


def test_the_stage_in_runs_once_after_the_last_linear_layer_and_says_when_it_cannot(caplog):
    """Z1/Z4's stage-in: only at the pool's last linear layer (one launch for every layer), never for other layers;
    an extend whose slots and requests differ in number is not staged and is said once (WARNING)."""
    from sglang_mamba_dedup.patches.zero_copy import hooks

    calls = []
    zc = types.SimpleNamespace(
        layers=(0, 7), pool=types.SimpleNamespace(mamba_cache="cache"), stage_in=lambda *a: calls.append(a)
    )
    slots, rpi = torch.tensor([4, 2], dtype=torch.int32), torch.tensor([1, 3])
    hooks._stage_in_after_last_layer(zc, 3, slots, rpi)
    assert calls == []
    hooks._stage_in_after_last_layer(zc, 7, slots, rpi)
    assert len(calls) == 1 and calls[0][0] == "cache" and calls[0][1] is slots and calls[0][2] is rpi
    with caplog.at_level(logging.WARNING, logger="sglang_mamba_dedup"):
        hooks._stage_in_after_last_layer(zc, 7, slots, torch.tensor([1, 3, 5]))
    assert len(calls) == 1 and "was not staged in" in caplog.text


def test_a_draft_workers_linear_backend_never_takes_zero_copy(monkeypatch, caplog):
    """R12 (audit m-Z3): a draft with linear layers keeps today's commit. A draft worker's backend on an undecided
    pool decides it off (the target shares that pool: it must not take zero-copy either); on a pool the target
    already took it for, the draft gets the stock path and one ERROR line, and strict mode stops."""
    monkeypatch.setenv(env.ZERO_COPY, "1")
    monkeypatch.setattr(eligibility, "read_settings", lambda: dict(SAFE))
    target = _backend()
    draft = types.SimpleNamespace(**vars(target), is_draft_worker=True)
    with caplog.at_level(logging.WARNING, logger="sglang_mamba_dedup"):
        assert eligibility.decide(draft) is None
        assert eligibility.decide(target) is None  # the pool was decided off by its draft
    assert "a draft worker's linear layers" in caplog.text
    assert report.events()["zero_copy"].startswith("off: a draft worker's linear layers")

    target = _backend()
    draft = types.SimpleNamespace(**vars(target), is_draft_worker=True)
    zc = eligibility.decide(target)
    assert isinstance(zc, bookkeeping.ZeroCopy)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="sglang_mamba_dedup"):
        assert eligibility.decide(draft) is None and eligibility.decide(draft) is None
        assert eligibility.decide(target) is zc
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "draft" in errors[0].getMessage(), caplog.text
    monkeypatch.setenv(env.SWITCH, "strict")
    state.reset()
    with pytest.raises(RuntimeError, match="strict mode.*draft"):
        eligibility.decide(draft)


# ------------------------------------------------------------- the radix cache on (docs/zero-copy.md §12.7, R1)
RADIX_ON = dict(
    SAFE,
    disable_radix_cache=False,
    mamba_radix_cache_strategy="extra_buffer",
    enable_mamba_extra_buffer=True,
    enable_mamba_extra_buffer_lazy=False,
    disable_overlap_schedule=False,
    enable_hierarchical_cache=False,
    enable_lmcache=False,
    enable_flexkv=False,
    enable_unified_cache_external_linker=False,
    enable_int8_mamba_checkpoint=False,
    radix_cache_backend=None,
    hicache_storage_backend=None,
    dcp_size=1,
)
LAZY_CHANGES = dict(mamba_radix_cache_strategy="extra_buffer_lazy", enable_mamba_extra_buffer_lazy=True)
LAZY = dict(RADIX_ON, **LAZY_CHANGES)

RADIX_REFUSED = [
    ("no_buffer", dict(mamba_radix_cache_strategy="no_buffer", enable_mamba_extra_buffer=False), "no_buffer"),
    (
        "lazy_no_overlap",
        dict(LAZY_CHANGES, disable_overlap_schedule=True),
        "extra_buffer_lazy without the overlap schedule",
    ),
    ("hicache", dict(enable_hierarchical_cache=True), "HiCache"),
    ("lmcache", dict(enable_lmcache=True), "LMCache"),
    ("flexkv", dict(enable_flexkv=True), "FlexKV"),
    ("linker", dict(enable_unified_cache_external_linker=True), "external linker"),
    ("int8", dict(enable_int8_mamba_checkpoint=True), "int8 mamba checkpoints"),
    ("radix_backend", dict(radix_cache_backend="my_tree"), "another radix cache backend"),
    ("hicache_storage", dict(hicache_storage_backend="file"), "HiCache storage backend"),
    ("dcp", dict(dcp_size=2), "decode context parallelism"),
]


@pytest.mark.parametrize("value", [None, "", " ", "1", "on", "TRUE", "yes"], ids=repr)
def test_the_radix_cache_on_is_served_unless_the_operator_opts_out(monkeypatch, value):
    """One switch: zero-copy asked for serves the radix cache on too (its proofs passed, docs/e2e.md); the variable
    is an opt-out only."""
    if value is None:
        monkeypatch.delenv(env.ZERO_COPY_RADIX, raising=False)
    else:
        monkeypatch.setenv(env.ZERO_COPY_RADIX, value)
    assert eligibility.settings_problem(dict(RADIX_ON)) is None and zero_copy.radix_wanted()


@pytest.mark.parametrize("value", ["0", "off", "False", " no "], ids=repr)
def test_the_radix_opt_out_keeps_the_radix_cache_on_todays_commit_in_one_line(monkeypatch, value):
    monkeypatch.setenv(env.ZERO_COPY_RADIX, value)
    problem = eligibility.settings_problem(dict(RADIX_ON))
    assert problem.startswith(f"the radix cache is on and {env.ZERO_COPY_RADIX}={value!r} keeps zero-copy off there")
    assert "\n" not in problem and not zero_copy.radix_wanted()
    assert eligibility.settings_problem(dict(RADIX_ON, disable_radix_cache=True)) is None  # radix off: still served


def test_a_radix_value_not_understood_keeps_it_off_and_says_so(monkeypatch):
    monkeypatch.setenv(env.ZERO_COPY_RADIX, "maybe")
    problem = eligibility.settings_problem(dict(RADIX_ON))
    assert problem.startswith(f"{env.ZERO_COPY_RADIX}='maybe' is not understood; accepted values: 1, on") and (
        "\n" not in problem
    )


@pytest.mark.parametrize(
    "settings",
    [RADIX_ON, LAZY, dict(RADIX_ON, disable_overlap_schedule=True)],
    ids=["extra_buffer", "extra_buffer_lazy", "extra_buffer-no_overlap"],
)
def test_the_radix_cache_on_passes_with_the_extra_buffer(monkeypatch, settings):
    monkeypatch.delenv(env.ZERO_COPY_RADIX, raising=False)
    assert eligibility.settings_problem(dict(settings)) is None


@pytest.mark.parametrize("case,changes,why", RADIX_REFUSED, ids=[r[0] for r in RADIX_REFUSED])
def test_the_radix_cache_on_refuses_the_rest_with_one_line_each(monkeypatch, case, changes, why):
    monkeypatch.delenv(env.ZERO_COPY_RADIX, raising=False)
    problem = eligibility.settings_problem(dict(RADIX_ON, **changes))
    assert problem is not None and why in problem and "\n" not in problem, (case, problem)
    off = dict(RADIX_ON, **changes, disable_radix_cache=True)  # with the radix cache off, none of these matters
    assert eligibility.settings_problem(off) is None, (case, eligibility.settings_problem(off))


def test_the_gate_reads_every_radix_setting_through_the_settings_reader():
    from sglang_mamba_dedup import resolved

    names = eligibility._names(eligibility.RULES)
    for name in RADIX_ON:
        assert name in names and name in resolved.ROWS, name


def test_doctor_and_the_activation_line_say_whether_zero_copy_serves_with_the_radix_cache_on(monkeypatch):
    from sglang_mamba_dedup import activation, versions
    from sglang_mamba_dedup.cli import doctor

    if not zero_copy.release_ok(versions.installed_sglang_version()):
        pytest.skip("zero-copy's own release only")
    monkeypatch.setenv(env.SWITCH, "1")
    monkeypatch.setenv(env.ZERO_COPY, "1")
    for value, said in (
        (
            None,
            f"with the radix cache on: served (mamba strategy extra_buffer or extra_buffer_lazy only; "
            f"{env.ZERO_COPY_RADIX}=0 keeps it off there)",
        ),
        ("1", "with the radix cache on: served (mamba strategy"),
        ("0", f"with the radix cache on: off ({env.ZERO_COPY_RADIX}='0': the operator's opt-out)"),
        ("sure", f"with the radix cache on: off ({env.ZERO_COPY_RADIX}='sure' is not understood"),
    ):
        if value is None:
            monkeypatch.delenv(env.ZERO_COPY_RADIX, raising=False)
        else:
            monkeypatch.setenv(env.ZERO_COPY_RADIX, value)
        state.reset()
        activation.register()
        assert f"zero-copy {said}" in activation.last_summary(), (value, activation.last_summary())
        assert doctor.collect()["zero_copy"]["radix"].startswith(said), value


@pytest.mark.parametrize(
    "settings,strategy",
    [(SAFE, None), (RADIX_ON, "extra_buffer"), (dict(RADIX_ON, mamba_radix_cache_strategy="auto"), "extra_buffer"),
     (LAZY, "extra_buffer_lazy")],
    ids=["radix-off", "extra_buffer", "auto-resolved-elsewhere", "extra_buffer_lazy"],
)  # fmt: skip
def test_the_pool_the_log_line_and_server_info_say_the_radix_cache_zero_copy_serves(
    monkeypatch, caplog, settings, strategy
):
    """Issue 50 item 2: a pool that passed the gate with the radix cache on knows its strategy; the "on" line and the
    scheduler's ``/get_server_info`` entry say it (radix off: None, and the line says off)."""
    from sglang_mamba_dedup.patches import server_state

    backend = _backend()
    monkeypatch.setattr(eligibility, "read_settings", lambda: dict(settings))
    monkeypatch.setenv(env.ZERO_COPY, "1")
    monkeypatch.delenv(env.ZERO_COPY_RADIX, raising=False)
    with caplog.at_level(logging.INFO, logger="sglang_mamba_dedup"):
        zc = eligibility.decide(backend)
    assert isinstance(zc, bookkeeping.ZeroCopy) and zc.radix == strategy
    (line,) = [r.getMessage() for r in caplog.records if "zero-copy commit on" in r.getMessage()]
    if strategy is None:
        assert "radix cache off" in line and "radix cache on" not in line, line
    else:
        assert f"radix cache on, mamba strategy {strategy}" in line, line
    sched = types.SimpleNamespace(max_running_requests=4, req_to_token_pool=backend.req_to_token_pool)
    try:
        entry = server_state.scheduler_state(sched)["zero_copy"]
    finally:
        report.clear_events()
    assert entry["decision"] == "on" and entry["radix_cache"] == strategy and "zc_track_commits" in entry


def test_the_replayssm_hint_is_for_gated_deltanet_on_a_release_that_has_it():
    class Mamba2AttnBackend:  # the name the gate reads
        pass

    assert "replayssm-spec measured faster" in eligibility.replayssm_hint(_backend(), dict(SAFE))
    assert eligibility.replayssm_hint(Mamba2AttnBackend(), dict(SAFE)) == ""  # Mamba2: ReplaySSM does not cover it
    without = {k: v for k, v in SAFE.items() if k != "enable_linear_replayssm_spec"}
    assert eligibility.replayssm_hint(_backend(), without) == ""  # a release without ReplaySSM-spec
