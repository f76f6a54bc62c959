"""The mamba memory ledger (``sglang_mamba_dedup.ledger``): every buffer of a real SGLang pool with its logical
and physical bytes, each storage counted once, next to the reservation of SGLang's real estimator."""

from __future__ import annotations

import dataclasses
import importlib
import logging
from types import SimpleNamespace

import pytest
import torch

import sglang_mamba_dedup
from sglang_mamba_dedup import ledger, report, sizing, versions
from sglang_mamba_dedup.patches import estimator as estimator_patch
from sglang_mamba_dedup.planner import sglang_estimate
from sglang_mamba_dedup.state import STATE
from tests.support import integration as iu

pytestmark = [pytest.mark.release, pytest.mark.usefixtures("allow_cpu")]


def _cp():
    return iu.make_cache_params(num_layers=2, conv_dim=8, conv_kernel=4, num_heads=2, head_dim=4, state_size=4)


def _independent_storage_bytes(pool) -> int:
    """Bytes of every distinct storage the pool's state and its kept tensors use (an independent count)."""
    tensors = []
    cache = pool.mamba_cache
    for f in dataclasses.fields(cache):
        v = getattr(cache, f.name)
        tensors += [v] if isinstance(v, torch.Tensor) else [t for t in (v or []) if isinstance(t, torch.Tensor)]
    for v in vars(pool).values():
        if isinstance(v, torch.Tensor):
            tensors.append(v)
        elif isinstance(v, (list, tuple)):
            tensors += [t for t in v if isinstance(t, torch.Tensor)]
    return sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}.values())


def test_ledger_lists_every_buffer_and_counts_each_storage_once(caplog):
    with iu.cpu_stock_paths(), iu.plugin(True), caplog.at_level(logging.INFO, logger="sglang_mamba_dedup"):
        pool = iu.build_pool(cache_params=_cp(), size=3, mamba_size=6, draft_tokens=4, topk=1)
        doc = sglang_mamba_dedup.memory_ledger()
    mp = pool.mamba_pool
    assert doc is not None and doc == report.events()["ledger"] and doc["pool"] == type(mp).__name__
    rows = doc["buffers"]
    assert {"conv", "temporal", "intermediate_ssm", "intermediate_conv_window"} <= set(rows), rows
    # the dedup view: logical = the dense [L, R, D, dim, K-1] bytes, physical = its [L, R, dim, D+K-2] buffer
    win, phys = rows["intermediate_conv_window"], sizing.nbytes(mp._intermediate_conv_window_phys)
    assert win["logical"] == sizing.nbytes(mp.mamba_cache.intermediate_conv_window) and win["physical"] == phys
    assert win["physical"] * 4 * 3 == win["logical"] * (4 + 4 - 2)  # (D+K-2)/(D*(K-1)) at D=4, K=4
    assert rows["_intermediate_conv_window_phys"]["physical"] == 0, "a storage is charged once"
    assert rows["_intermediate_conv_window_phys"]["storage_of"] == ["intermediate_conv_window"]
    assert "storage_of" not in win
    assert doc["allocated_bytes"] == _independent_storage_bytes(mp) == sum(r["physical"] for r in rows.values())
    assert doc["allocated_bytes"] < doc["logical_bytes"]
    assert "reserved_bytes" not in doc  # no estimate ran in this process
    # SGLang's mem_usage_bytes() of the state (get_kv_size_bytes) now says physical bytes: the window's
    # physical buffer is not a state field, so the state's share is the ledger's minus nothing it shares
    state = mp.mamba_cache
    assert state.mem_usage_bytes() == ledger.state_bytes(state)
    assert state.mem_usage_bytes() < sum(
        sizing.nbytes(getattr(state, f.name)) for f in dataclasses.fields(state) if getattr(state, f.name) is not None
    )
    lines = [r for r in caplog.records if "mamba memory ledger" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.INFO
    text = lines[0].getMessage()
    assert f"intermediate_conv_window {phys / ledger.GIB:.3f} (logical " in text
    assert "_intermediate_conv_window_phys: the storage of intermediate_conv_window, counted there" in text


def test_ledger_envelope_views_of_one_buffer_count_once():
    """Two views of one byte buffer (the page-major envelope layout's way) are one storage."""
    buf = torch.zeros(4096, dtype=torch.uint8)

    class _Pool:
        pass

    @dataclasses.dataclass
    class _State:
        conv: list
        temporal: torch.Tensor

    pool = _Pool()
    pool.mamba_cache = _State(conv=[buf[:1024].view(torch.bfloat16)], temporal=buf[1024:].view(torch.float32))
    doc = ledger.build(pool)
    assert doc["allocated_bytes"] == 4096 and doc["logical_bytes"] == 4096
    assert doc["buffers"]["conv"]["physical"] == 4096 and doc["buffers"]["temporal"]["physical"] == 0


@pytest.mark.parametrize(
    "excess", [-1000, 32, 1 << 20], ids=["reserved-covers", "bookkeeping", "allocated-exceeds-1MiB"]
)
def test_ledger_compares_with_the_estimator_reservation(excess, caplog):
    """More allocated than reserved is a WARNING with the excess and the largest buffers; a few bytes of
    bookkeeping (SGLang's 32-byte conv-slot descriptor) are INFO with their bytes; otherwise INFO."""
    with iu.cpu_stock_paths(), iu.plugin(True):
        probe = iu.build_pool(cache_params=_cp(), size=3, mamba_size=6, draft_tokens=4, topk=1)
        allocated = ledger.build(probe.mamba_pool)["allocated_bytes"]
        ledger.record_reservation(allocated - excess, applied=True)
        with caplog.at_level(logging.INFO, logger="sglang_mamba_dedup"):
            iu.build_pool(cache_params=_cp(), size=3, mamba_size=6, draft_tokens=4, topk=1)
        doc = sglang_mamba_dedup.memory_ledger()
    assert doc["reserved_bytes"] == allocated - excess
    assert doc["unreserved_bytes"] == max(0, excess)
    (line,) = [r for r in caplog.records if "mamba memory ledger" in r.getMessage()]
    text = line.getMessage()
    if excess == 1 << 20:  # a real excess, far above any bookkeeping tensor
        assert line.levelno == logging.WARNING and f"{excess} bytes) more is allocated than was reserved" in text
        assert "largest buffers: intermediate_ssm" in text
    elif excess > 0:
        assert (
            line.levelno == logging.INFO and f"; {excess} bytes of bookkeeping tensors beyond the reservation" in text
        )
    else:
        assert line.levelno == logging.INFO and "beyond" not in text and "more is allocated" not in text


def test_ledger_reservation_is_what_the_real_estimator_took():
    """The estimator patch records the memory SGLang's estimator took (its argument minus its result)."""
    with iu.plugin(True):
        size, rest = iu.run_estimator(_cp(), total_rest_gb=1.0, device="cpu")
    res = ledger.reservation()
    assert res["reserved_bytes"] == ledger.last_estimate()["reserved_bytes"] > 0
    assert abs(res["reserved_bytes"] - (1.0 - rest) * ledger.GIB) <= 1
    assert size > 0


# ------------------------------------------------------------------ reserved vs allocated, per pool variant
#: (estimator options, pool constructor keywords) of each variant; a variant the installed release cannot
#: build is skipped with the reason.
VARIANTS = {
    "radix": (dict(radix=True), {}),
    "no-radix": (dict(radix=False), {}),
    "max-mamba-cache-size": (dict(max_mamba_cache_size=40), {}),
    "extra-buffer": (dict(radix=True), dict(enable_mamba_extra_buffer=True)),
    "replayssm": (dict(replayssm=True), dict(enable_linear_replayssm_spec=True, enable_gdn_replayssm_spec=True)),
    # the page-major envelope layout (0.5.23, --enable-page-major-kv-layout): one byte buffer per slot range,
    # seen as the conv and SSM views
    "envelope": (dict(extra={"enable_page_major_kv_layout": True}), dict(mamba_envelope_layout=True)),
    # a PD-prefill server never verifies: from 0.5.22 SGLang builds its pool without speculative state
    "pd-prefill": (dict(extra={"disaggregation_mode": "prefill"}), dict(speculative_num_draft_tokens=None)),
}


def _pd_prefill_skips_spec_state() -> bool:
    import importlib

    kc = importlib.import_module("sglang.srt.mem_cache.kv_cache_configurator") if iu.NEW_LAYOUT else None
    return hasattr(kc, "_pd_prefill_skips_mamba_spec_state")


def _cp_odd():
    return iu.make_cache_params(num_layers=3, conv_dim=40, conv_kernel=4, num_heads=2, head_dim=8, state_size=4)


def _estimate_then_pool(variant: str, on: bool):
    """SGLang's real estimator, then the real pool at the sizes it chose (plugin ``on`` or off)."""
    est_kw, pool_kw = VARIANTS[variant]
    if variant == "pd-prefill" and not _pd_prefill_skips_spec_state():
        pytest.skip("this release's PD-prefill pool keeps the speculative state: the plain variants cover it")
    if variant == "envelope" and "enable_page_major_kv_layout" not in sglang_estimate.server_args_fields():
        pytest.skip("no envelope layout on this release")
    cp = _cp_odd()
    with iu.cpu_stock_paths(), iu.plugin(on):
        ledger.forget_reservation()
        try:
            est = sglang_estimate.run(cp, total_rest_gb=0.01, device="cpu", max_running_requests=16, gdn=True, **est_kw)
        except ValueError as exc:
            pytest.skip(str(exc))
        pool = iu.build_pool(
            cache_params=cp, size=est.running, mamba_size=est.slots, draft_tokens=4, topk=1, extra=pool_kw
        )
        doc = sglang_mamba_dedup.memory_ledger() if on else ledger.build(pool.mamba_pool)
    return cp, est, doc, ledger.last_estimate() if on else {}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_ledger_reserved_covers_allocated(variant, caplog):
    """With the plugin on, the estimator reserves what the pool then allocates: reserved >= allocated, and the
    slack is at most one mamba slot's state. (0.5.16 with ReplaySSM is the exception, left to SGLang: its
    estimator prices neither the per-slot rings nor the missing SSM scratch; the ledger must say so.)"""
    with caplog.at_level(logging.INFO, logger="sglang_mamba_dedup"):
        cp, est, doc, decision = _estimate_then_pool(variant, on=True)
    allocated, reserved = doc["allocated_bytes"], doc["reserved_bytes"]
    assert reserved == est.reserved_bytes
    if "does not price it" in (decision.get("reason") or ""):
        assert allocated > reserved and doc["unreserved_bytes"] == allocated - reserved
        (line,) = [r for r in caplog.records if "mamba memory ledger" in r.getMessage()]
        assert line.levelno == logging.WARNING
        return
    per = sizing.request_bytes(cp, 4, dedup=True)
    # SGLang's bookkeeping tensors (0.5.12's int64 free-slot list) are no estimator's business: the ledger's
    # own tolerance (INFO, with their bytes)
    assert allocated - reserved <= ledger.tolerance(doc), (allocated, reserved, doc["buffers"], decision)
    # 0.5.12 and 0.5.12.post1 reserve a scratch row for every request asked for, also those the mamba pool will not admit:
    # left as SGLang sized it (the plugin reserves more where needed, never less)
    unadmitted = max(0, 16 - est.running) if iu.SGLANG_VERSION.startswith("0.5.12") else 0
    assert reserved - allocated <= per.state + unadmitted * per.scratch, (allocated, reserved, decision)
    (line,) = [r for r in caplog.records if "mamba memory ledger" in r.getMessage()]
    assert line.levelno == logging.INFO and "more is allocated" not in line.getMessage()
    if variant == "replayssm":
        assert decision["applied"] is True and decision["top_up_bytes"] > 0
    if variant == "envelope":  # really the envelope: the SSM state is a view of the conv state's byte buffer
        assert doc["buffers"]["temporal"]["physical"] == 0 and doc["buffers"]["temporal"]["storage_of"], doc
    if variant == "pd-prefill":  # nothing to deduplicate, nothing to top up: said so
        assert decision["applied"] is False and decision["reason"].startswith("PD prefill"), decision
        assert "intermediate_conv_window" not in doc["buffers"] and reserved == allocated


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_ledger_stock_gap_is_reported(variant, capsys):
    """Stock SGLang on the same variant: the gap between its reservation and what its pool allocates (printed
    for the record). Where the plugin keeps the slots (ReplaySSM), its top-up is exactly stock's shortfall."""
    cp, est, doc, _ = _estimate_then_pool(variant, on=False)
    gap = est.reserved_bytes - doc["allocated_bytes"]
    with capsys.disabled():
        print(
            f"\n[ledger sglang {iu.SGLANG_VERSION}] stock {variant}: slots {est.slots}, reserved {est.reserved_bytes} B, "
            f"allocated {doc['allocated_bytes']} B, gap {gap:+d} B ({'unreserved' if gap < 0 else 'over-reserved'})"
        )
    if variant == "replayssm":
        _, est_on, _, decision = _estimate_then_pool(variant, on=True)
        assert est_on.slots == est.slots
        if decision.get("applied"):
            assert decision["top_up_bytes"] == -gap > 0


@pytest.mark.parametrize("budget_gb, capped", [(0.0002, True), (0.05, False)], ids=["capped", "fits"])
def test_admission_warning_when_the_mamba_pool_caps_running_requests(budget_gb, capped, caplog, monkeypatch):
    """Once per scheduler, what admits every request asked for (the mamba cache size, exact: checked by running
    SGLang's estimator with it); where SGLang warns of the cap itself (0.5.17+) only that, at INFO, else a WARNING
    with the numbers and the other lifts; nothing when the requests fit."""
    STATE.warned.discard("admission")
    cp = _cp_odd()
    with iu.cpu_stock_paths(), iu.plugin(True), caplog.at_level(logging.INFO, logger="sglang_mamba_dedup"):
        est = sglang_estimate.run(cp, total_rest_gb=budget_gb, device="cpu", max_running_requests=16, gdn=True)
        sglang_estimate.run(cp, total_rest_gb=budget_gb, device="cpu", max_running_requests=16, gdn=True)
    lines = [r for r in caplog.records if "asked for" in r.getMessage()]
    assert (est.running < 16) is capped
    if not capped:
        assert lines == []
        return
    assert len(lines) == 1, "once per process"
    text = lines[0].getMessage()
    size = 16 * est.ratio
    assert f"--max-mamba-cache-size {size}" in text
    with iu.cpu_stock_paths(), iu.plugin(True):
        lifted = sglang_estimate.run(
            cp, total_rest_gb=1.0, device="cpu", max_running_requests=16, gdn=True, max_mamba_cache_size=size
        )
    assert lifted.running == 16, lifted
    configurator = (
        getattr(importlib.import_module("sglang.srt.mem_cache.kv_cache_configurator"), "KVCacheConfigurator", None)
        if iu.NEW_LAYOUT
        else None
    )
    if configurator is not None and estimator_patch._sglang_warns_of_the_cap(object.__new__(configurator)):
        assert lines[0].levelno == logging.INFO and "caps running requests" not in text
        return
    assert lines[0].levelno == logging.WARNING
    assert (
        f"caps running requests at {est.slots // est.ratio} of the 16 asked for ({est.slots} mamba slots, 3 per request"
        in text
    )
    per_draft = sizing.request_bytes(cp, 1, dedup=False)
    assert (
        f"lower --speculative-num-draft-tokens (now 4; each draft token is up to {(per_draft.ssm_scratch + per_draft.conv_scratch_dense) / (1 << 20):.1f} MiB"
        in text
    )
    fields = sglang_estimate.server_args_fields()
    flag = next((n for n in ("enable_linear_replayssm_spec", "enable_gdn_replayssm_spec") if n in fields), None)
    assert (flag is not None) == (f"add --{flag or ''}".replace("_", "-") in text)


def _pd_decode_pool(cp, est, pre_alloc: int):
    """SGLang's real PD-decode pool (``HybridMambaDecodeReqToTokenPool``) at the estimator's sizes, with
    ``pre_alloc`` pre-allocated requests, as ``_init_pools`` builds it on a decode server."""
    import importlib
    import inspect

    dec = importlib.import_module("sglang.srt.disaggregation.decode")
    cls = dec.HybridMambaDecodeReqToTokenPool
    kw = dict(
        size=est.running,
        max_context_len=64,
        device="cpu",
        enable_memory_saver=False,
        cache_params=cp,
        mamba_layer_ids=list(cp.layers),
        speculative_num_draft_tokens=4,
        enable_mamba_extra_buffer=False,
        pre_alloc_size=pre_alloc,
        enable_overlap_schedule=True,
        mamba_size=est.slots,
    )
    if "speculative_eagle_topk" in inspect.signature(cls.__init__).parameters:
        kw["speculative_eagle_topk"] = 1
    from sglang_mamba_dedup import gate

    with gate.speculative_topk(1):  # what _init_pools publishes where the constructor takes no topk
        return cls(**kw)


def _decode_settings(fields) -> tuple[dict, int]:
    """ServerArgs for a PD-decode server, and the pre-allocated requests SGLang will give its pool (16 running):
    5 where the release takes ``--disaggregation-decode-extra-slots`` (0.5.14+); before, SGLang's own rule
    (``_init_pools``: twice the requests when they are at most 32, so 32)."""
    if "disaggregation_decode_extra_slots" in fields:
        return {"disaggregation_mode": "decode", "disaggregation_decode_extra_slots": 5}, 5
    return {"disaggregation_mode": "decode"}, 32


@pytest.mark.parametrize("on", [True, False], ids=["plugin", "stock"])
def test_ledger_pd_decode_reserves_the_pre_allocated_rows(on, caplog):
    """A PD-decode server's pool (``HybridMambaDecodeReqToTokenPool``) keeps speculative scratch for
    ``size + pre_alloc_size`` rows (sglang #23643), which SGLang's estimate does not price: stock leaves the
    pre-allocated rows unreserved (the ledger says so at WARNING); the plugin reserves them."""
    # verify rows of ~50 KiB, so that the pre-allocated ones are well above the bookkeeping tolerance
    cp = iu.make_cache_params(num_layers=3, conv_dim=40, conv_kernel=4, num_heads=4, head_dim=16, state_size=16)
    extra, pre_alloc = _decode_settings(sglang_estimate.server_args_fields())
    with iu.cpu_stock_paths(), iu.plugin(on), caplog.at_level(logging.INFO, logger="sglang_mamba_dedup"):
        ledger.forget_reservation()
        est = sglang_estimate.run(cp, total_rest_gb=0.01, device="cpu", max_running_requests=16, gdn=True, extra=extra)
        pool = _pd_decode_pool(cp, est, pre_alloc)
        if not on:  # stock's reservation, as the plugin's estimator patch records it when on
            ledger.record_reservation(est.reserved_bytes)
        doc = ledger.build(pool.mamba_pool)
        if not on:
            ledger.log(doc)  # the plugin's pool patch logs its own
    assert doc["allocated_bytes"] == _independent_storage_bytes(pool.mamba_pool)
    allocated, reserved = doc["allocated_bytes"], est.reserved_bytes
    per = sizing.request_bytes(cp, 4, dedup=on)
    (line,) = [r for r in caplog.records if "mamba memory ledger" in r.getMessage()]
    if not on:
        # stock: the pre-allocated requests' scratch is unreserved (less what the dense conv price over-reserves
        # on releases whose own pool deduplicates), and the ledger warns
        assert allocated - reserved > ledger.tolerance(doc), (allocated, reserved, est, doc["buffers"])
        assert line.levelno == logging.WARNING
        return
    assert ledger.last_estimate()["pd_decode_pre_alloc"] == pre_alloc
    assert allocated - reserved <= ledger.tolerance(doc), (allocated, reserved, doc["buffers"])
    assert reserved - allocated <= per.state, (allocated, reserved)
    assert line.levelno == logging.INFO
    (topup,) = [r for r in caplog.records if "pre-allocated requests" in r.getMessage()]
    assert f"the PD-decode pool's {pre_alloc} pre-allocated requests" in topup.getMessage()
    assert topup.levelno == logging.WARNING and "--disaggregation-decode-extra-slots" in topup.getMessage()


@pytest.mark.parametrize("extra_buffer", [False, True], ids=["no-extra-buffer", "extra-buffer"])
@pytest.mark.parametrize("overlap", [True, False], ids=["overlap", "no-overlap"])
def test_pd_decode_rows_match_sglangs_decode_pool(extra_buffer, overlap):
    """The plugin's prediction of the PD-decode pool's mamba slots, ``(rows + pre_alloc) x slots per request``,
    against SGLang's real pool built with a mamba size below it (so that the pool raises it to its own figure)."""
    import importlib
    import inspect

    cls = importlib.import_module("sglang.srt.disaggregation.decode").HybridMambaDecodeReqToTokenPool
    rows, pre = 3, 2
    sa = SimpleNamespace(
        disaggregation_mode="decode",
        disaggregation_decode_extra_slots=pre,
        disable_overlap_schedule=not overlap,
        enable_mamba_extra_buffer=lambda: extra_buffer,
    )

    def wrapped():  # an estimator whose module has no runtime-context getters: server_args is read
        pass

    got = estimator_patch.pd_decode_rows(wrapped, SimpleNamespace(server_args=sa), rows)
    assert got is not None and got[0] == pre
    kw = dict(
        size=rows,
        max_context_len=64,
        device="cpu",
        enable_memory_saver=False,
        cache_params=_cp(),
        mamba_layer_ids=list(_cp().layers),
        speculative_num_draft_tokens=None,
        enable_mamba_extra_buffer=extra_buffer,
        pre_alloc_size=pre,
        enable_overlap_schedule=overlap,
        mamba_size=1,
    )
    if "speculative_eagle_topk" in inspect.signature(cls.__init__).parameters:
        kw["speculative_eagle_topk"] = 1
    with iu.plugin(False):
        pool = cls(**kw)
    assert (rows + pre) * got[1] == pool.mamba_pool.size, (got, pool.mamba_pool.size)
    not_decode = SimpleNamespace(server_args=SimpleNamespace(disaggregation_mode="null"))
    assert estimator_patch.pd_decode_rows(wrapped, not_decode, rows) is None


def test_estimator_top_up_fails_open(monkeypatch, caplog):
    """A prediction that raises (e.g. the decode module failing to import) keeps SGLang's estimate, says so once
    at WARNING, and does not take the server's start-up down."""
    cp = _cp_odd()

    def broken(*args, **kwargs):
        raise ImportError("simulated: no sglang.srt.disaggregation.decode")

    with iu.cpu_stock_paths(), iu.plugin(False):
        stock = sglang_estimate.run(cp, total_rest_gb=0.01, device="cpu", max_running_requests=16, gdn=True)
    monkeypatch.setattr(estimator_patch, "_top_up", broken)
    with iu.cpu_stock_paths(), iu.plugin(True), caplog.at_level(logging.INFO, logger="sglang_mamba_dedup"):
        est = sglang_estimate.run(cp, total_rest_gb=0.01, device="cpu", max_running_requests=16, gdn=True)
    (line,) = [r for r in caplog.records if "could not predict" in r.getMessage()]
    assert line.levelno == logging.WARNING and "simulated" in line.getMessage()
    assert ledger.last_estimate()["top_up_bytes"] == 0 and est.slots >= stock.slots


# ------------------------------------------------------------------ SGLang's own bookkeeping; one ledger per pool
def _state_pool(slots: int, **kept):
    """A stand-in pool: a state of ``slots`` float32 rows, and ``kept`` tensors beside it."""

    @dataclasses.dataclass
    class _State:
        conv: list
        temporal: torch.Tensor

    pool = SimpleNamespace(mamba_cache=_State(conv=[torch.zeros(slots + 1, 8)], temporal=torch.zeros(slots + 1, 16)))
    vars(pool).update(kept)
    return pool


@pytest.mark.parametrize("kept", ["free_slots", "float_buffer"])
def test_ledger_tolerates_the_pools_slot_list_but_not_an_unpriced_buffer(kept, caplog):
    """SGLang 0.5.12's int64 ``free_slots`` (8 bytes a slot: 169288 bytes at 21161 slots) is the pool's own
    bookkeeping, INFO whatever the slots; a float buffer of the same bytes beside the state is unpriced: WARNING."""
    slots = 21161
    tensor = torch.arange(1, slots + 1, dtype=torch.int64)
    pool = _state_pool(slots, **{kept: tensor if kept == "free_slots" else tensor.to(torch.float64)})
    state = (slots + 1) * (8 + 16) * 4
    ledger.record_reservation(state)
    doc = ledger.build(pool)
    assert doc["unreserved_bytes"] == slots * 8 > ledger.BOOKKEEPING_BYTES
    assert doc["bookkeeping_bytes"] == (slots * 8 if kept == "free_slots" else 0)
    with caplog.at_level(logging.INFO, logger="sglang_mamba_dedup"):
        ledger.log(doc)
    (line,) = [r for r in caplog.records if "mamba memory ledger" in r.getMessage()]
    if kept == "free_slots":
        assert line.levelno == logging.INFO
        assert f"; {slots * 8} bytes of bookkeeping tensors beyond the reservation" in line.getMessage()
    else:
        assert line.levelno == logging.WARNING and f"({slots * 8} bytes) more is allocated" in line.getMessage()


def test_ledger_large_pool_of_the_real_estimator_is_info(caplog):
    """The audit's case (m1) on the installed release: SGLang's estimator sizes a 2-layer, dim-24, K=2 pool at over
    8192 slots; the real pool's ledger is INFO (on 0.5.12.x its int64 ``free_slots`` is the whole excess)."""
    cp = iu.make_cache_params(num_layers=2, conv_dim=24, conv_kernel=2, num_heads=2, head_dim=4, state_size=4)
    with iu.cpu_stock_paths(), iu.plugin(True), caplog.at_level(logging.INFO, logger="sglang_mamba_dedup"):
        est = sglang_estimate.run(cp, total_rest_gb=0.02, device="cpu", max_running_requests=16, gdn=True)
        iu.build_pool(cache_params=cp, size=est.running, mamba_size=est.slots, draft_tokens=4, topk=1)
        doc = sglang_mamba_dedup.memory_ledger()
    assert est.slots > 8192 and doc["reserved_bytes"] == est.reserved_bytes
    assert doc["allocated_bytes"] - doc["reserved_bytes"] <= ledger.tolerance(doc), doc
    (line,) = [r for r in caplog.records if "mamba memory ledger" in r.getMessage()]
    assert line.levelno == logging.INFO and "more is allocated" not in line.getMessage()


def test_a_second_pool_keeps_its_own_ledger_and_has_no_reservation(caplog):
    """The target pool, then a draft head's (one layer, no speculative state, as 0.5.23's ``clone_with_new_mamba``
    builds for multi-layer MTP heads): each pool has its own ledger in the report; the estimate is compared with
    the target's only, and the draft's says it has no reservation of its own."""
    cp = _cp_odd()
    draft = iu.make_cache_params(num_layers=1, conv_dim=40, conv_kernel=4, num_heads=2, head_dim=8, state_size=4)
    with iu.cpu_stock_paths(), iu.plugin(True), caplog.at_level(logging.INFO, logger="sglang_mamba_dedup"):
        est = sglang_estimate.run(cp, total_rest_gb=0.01, device="cpu", max_running_requests=16, gdn=True)
        target = iu.build_pool(cache_params=cp, size=est.running, mamba_size=est.slots, draft_tokens=4, topk=1)
        head = iu.build_pool(cache_params=draft, size=est.slots, draft_tokens=None)
        events = report.events()
    first, second = events["ledgers"]
    assert first["allocated_bytes"] == _independent_storage_bytes(target.mamba_pool)
    assert (
        first["reserved_bytes"] == est.reserved_bytes and first["reservation"]["reserved_bytes"] == est.reserved_bytes
    )
    assert second["allocated_bytes"] == _independent_storage_bytes(head) < first["allocated_bytes"]
    assert second["reservation"] is None and "reserved_bytes" not in second and "unreserved_bytes" not in second
    assert events["ledger"] == second == sglang_mamba_dedup.memory_ledger()
    assert sglang_mamba_dedup.memory_ledgers() == [first, second]
    assert ledger.build(target.mamba_pool)["reserved_bytes"] == est.reserved_bytes, "the target keeps its own"
    lines = [r for r in caplog.records if "mamba memory ledger" in r.getMessage()]
    assert [r.levelno for r in lines] == [logging.INFO, logging.INFO]
    assert "the estimator reserved" in lines[0].getMessage()
    assert "no reservation of its own" in lines[1].getMessage()
    assert "the estimator reserved" not in lines[1].getMessage()


@pytest.mark.skipif(
    not versions.in_range(iu.SGLANG_VERSION, versions.ZERO_COPY), reason="the zero-copy commit exists on 0.5.23 only"
)
def test_zero_copy_accepted_table_is_reserved_and_in_the_ledger(monkeypatch):
    """Zero-copy asked for: the pool is built with its ``accepted`` table (int32, one per scratch row), and the
    estimator reserves exactly it: the reservation, the top-up and the allocation all grow by (S+1) x 4 bytes, so
    reserved stays equal to allocated."""
    _cp, base_est, base, base_decision = _estimate_then_pool("no-radix", on=True)
    monkeypatch.setenv("SGLANG_MAMBA_DEDUP_ZERO_COPY", "1")
    _cp, est, doc, decision = _estimate_then_pool("no-radix", on=True)
    table = 4 * (est.running + 1)  # rows 0..S
    assert doc["buffers"][ledger.ACCEPTED_BUFFER] == {"logical": table, "physical": table}, doc["buffers"]
    assert doc["bookkeeping_bytes"] == base["bookkeeping_bytes"]  # priced, so not in the ledger's tolerance
    assert (est.running, est.slots) == (base_est.running, base_est.slots)
    assert doc["allocated_bytes"] - base["allocated_bytes"] == table
    assert doc["reserved_bytes"] - base["reserved_bytes"] == table
    assert decision["top_up_bytes"] - base_decision["top_up_bytes"] == table
    assert doc["allocated_bytes"] - doc["reserved_bytes"] == base["allocated_bytes"] - base["reserved_bytes"]


def test_the_estimate_goes_through_the_ledger_door():
    """The estimator patch records through ``record_reservation`` only; the planner reads ``last_estimate``, and a
    decision without known bytes is the planner's to read but no pool's reservation."""
    ledger.forget_reservation()
    assert ledger.last_estimate() == {} and ledger.reservation() == {}
    ledger.record_reservation(None, applied=False, reason="why not")
    assert ledger.last_estimate() == {"applied": False, "reason": "why not"} and ledger.reservation() == {}
    ledger.record_reservation(4096, applied=True, reason=None)
    assert ledger.reservation() == ledger.last_estimate() == {"reserved_bytes": 4096, "applied": True, "reason": None}
    got = ledger.last_estimate()
    got["reserved_bytes"] = 1  # a copy: the reader cannot change the record
    assert ledger.reservation()["reserved_bytes"] == 4096
    ledger.forget_reservation()
