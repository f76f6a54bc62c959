"""Z6 through SGLang 0.5.23's own ``StreamingSession.try_cache_finished_req``: a streaming turn that ends keeps its
request row and mamba slot in the session, and its next turn extends from ``temporal[slot]``, so zero-copy must
queue that (row, slot) to be materialized. The request is SGLang's ``Req`` with its KV record (``ReqKvInfo``),
which holds the row and slot in 0.5.23 (the request itself has no ``req_pool_idx``: reading it there queued
nothing, and the H200 streaming e2e materialized no state, issue 34)."""

from __future__ import annotations

import random
import types

import pytest
import torch

from sglang_mamba_dedup import env, installed, state, versions
from tests.support import integration as iu

pytestmark = [
    *iu.release_only(versions.ZERO_COPY, f"the zero-copy commit is built for SGLang {versions.ZERO_COPY_RELEASE} only"),
    pytest.mark.usefixtures("allow_cpu"),
]


@pytest.fixture
def zero_copy_on(monkeypatch):
    monkeypatch.setenv(env.SWITCH, "1")
    monkeypatch.setenv(env.ZERO_COPY, "1")
    assert installed.apply(["zero_copy"]) == {"zero_copy": None}
    yield state.pool_state(_POOL).zero_copy
    installed.revert(force=True)


#: The mamba pool behind the sessions' radix cache, its zero-copy decided on: the hook finds it from the session.
_POOL = types.SimpleNamespace()
state.pool_state(_POOL).zero_copy = types.SimpleNamespace(handoffs=[])


@pytest.fixture(autouse=True)
def _fresh_handoffs():
    state.pool_state(_POOL).zero_copy.handoffs.clear()


def _turn(session_id: str, row: int, slot: int, *, aborted: bool = False):
    """A finished streaming turn as SGLang's scheduler hands it to the cache: a ``Req`` running on its session's
    KV record (row ``row``, mamba slot ``slot``), and the session's ``StreamingSession`` slot holding that record."""
    from sglang.srt.managers.schedule_batch import FINISH_ABORT, FINISH_LENGTH, Req, ReqKvInfo
    from sglang.srt.session.streaming_session import SessionSlot, StreamingSession

    prompt, out = [7, 8, 9], [1, 2]
    kv = ReqKvInfo(req_pool_idx=row, mamba_pool_idx=torch.tensor([slot]))
    kv.kv_allocated_len = kv.kv_committed_len = len(prompt) + len(out)
    req = Req.__new__(Req)  # the fields try_cache_finished_req reads, on SGLang's own class
    req.kv, req.origin_input_ids, req.output_ids, req.finished_len = kv, prompt, out, None
    req.finished_reason = FINISH_ABORT("gone") if aborted else FINISH_LENGTH(len(out))
    req.swa_branching_seqlen = None
    req.session = types.SimpleNamespace(
        streaming=True, session_id=session_id, finish_req=lambda r: None, abort_req=lambda: None
    )
    req.release_mm_inputs_on_abort = lambda: None
    cache = types.SimpleNamespace(
        page_size=1,
        free_kv_row=lambda *a: pytest.fail("nothing to free"),
        req_to_token_pool=types.SimpleNamespace(mamba_pool=_POOL),
    )
    sessions = StreamingSession(cache)
    sessions.slots[session_id] = SessionSlot(kv=kv)
    return sessions, req


def test_a_kept_streaming_turn_queues_its_row_and_slot(zero_copy_on):
    row, slot = random.randrange(1, 64), random.randrange(1, 64)
    sessions, req = _turn("s1", row, slot)
    assert sessions.try_cache_finished_req(req) is True  # SGLang kept the record
    assert req.kv.req_pool_idx is None  # ... and detached it from the request: the row is read before
    ((got_row, got_slot),) = zero_copy_on.handoffs
    assert got_row == row and torch.equal(got_slot.reshape(-1), torch.tensor([slot]))


def test_an_aborted_turn_queues_nothing(zero_copy_on):
    sessions, req = _turn("s2", 3, 4, aborted=True)
    assert sessions.try_cache_finished_req(req) is False  # SGLang releases it like any request
    assert zero_copy_on.handoffs == []


def test_the_wrapper_is_the_one_sglang_calls(zero_copy_on):
    """The Z6 hook really sits on the class SGLang's cache calls (``claim_kv_row`` -> ``self.session...``)."""
    from sglang.srt.session.streaming_session import StreamingSession

    assert getattr(StreamingSession.try_cache_finished_req, "__wrapped__", None) is not None
    installed.revert(force=True)
    sessions, req = _turn("s3", 5, 6)
    assert sessions.try_cache_finished_req(req) is True and zero_copy_on.handoffs == []  # unpatched: nothing
