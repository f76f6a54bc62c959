"""The e2e workload: prompts, token ids, md5s, round 2 and the run plan (a fake engine, no GPU)."""

import pytest

from sglang_mamba_dedup.e2e import stats, workload
from tests.support.e2e import FakeEngine, fake_ids, plan_spec


def test_prompt_set_is_fixed_mixed_and_large_enough():
    prompts = workload.load_prompts()
    assert len(prompts) >= 32
    assert len(set(prompts)) == len(prompts)
    words = sorted(len(p.split()) for p in prompts)
    assert words[0] <= 5 and words[-1] >= 1000  # very short and very long prompts
    assert sum(1 for w in words if 20 <= w <= 200) >= 8  # and plenty in between
    assert workload.load_prompts() == prompts  # deterministic
    assert workload.load_prompts(limit=3) == prompts[:3]


def test_text_to_ids_is_deterministic_and_in_vocab():
    text = "Hello, world! Hello again."
    ids = workload.text_to_ids(text, 1024)
    assert ids == workload.text_to_ids(text, 1024)
    assert len(ids) == 7  # Hello , world ! Hello again .
    assert ids[0] == ids[4]
    assert all(0 <= i < 1024 for i in ids)
    # pinned values: the ids must not change across Python versions or machines (crc32, no hash() salt)
    import zlib

    assert workload.text_to_ids("Hello.", 248320) == [zlib.crc32(b"Hello") % 248320, zlib.crc32(b".") % 248320]
    with pytest.raises(ValueError):
        workload.text_to_ids("x", 0)


def test_md5_of_ids_and_texts():
    a = [[1, 2, 3], [4]]
    assert workload.md5_of_ids(a) == workload.md5_of_ids([[1, 2, 3], [4]])
    assert workload.md5_of_ids(a) != workload.md5_of_ids([[1, 2], [3, 4]])  # prompt boundaries count
    assert workload.md5_of_ids(a) != workload.md5_of_ids([[4], [1, 2, 3]])  # order counts
    assert workload.md5_of_texts(["a", "b"]) == workload.md5_of_texts(["a", "b"])
    assert workload.md5_of_texts(["a", "b"]) != workload.md5_of_texts(["ab", ""])
    assert workload.md5_of_texts(["a", None]) is None  # skip_tokenizer_init: no text


def test_first_difference():
    assert workload.first_difference([[1, 2], [3]], [[1, 2], [3]]) is None
    assert workload.first_difference([[1, 2], [3, 4, 5]], [[1, 2], [3, 9, 5]]) == (1, 1)
    assert workload.first_difference([[1, 2]], [[1, 2, 3]]) == (0, 2)


def test_round2_prompts_extend_round1_by_its_output_and_a_new_suffix():
    suffixes = workload.round2_suffixes(2, "ids", 1000)
    assert len(suffixes) == 2 and suffixes[0] != suffixes[1] and all(0 <= t < 1000 for t in suffixes[0])
    prompts = [[1, 2], [3]]
    outs = [{"output_ids": [7, 8]}, {"output_ids": [9]}]
    second = workload.round2_prompts(prompts, outs, suffixes, "ids")
    assert second == [[1, 2, 7, 8] + suffixes[0], [3, 9] + suffixes[1]]
    texts = workload.round2_suffixes(2, "text")
    assert workload.round2_prompts(["Hi.", "Yo"], [{"text": " there"}, {"text": None}], texts, "text") == [
        "Hi. there" + texts[0],
        "Yo" + texts[1],
    ]
    assert workload.round2_prompts([[1]], [{"output_ids": [2]}], [], "ids") == [[1, 2]]
    with pytest.raises(ValueError):
        workload.round2_prompts([[1], [2]], [{"output_ids": []}], [], "ids")
    with pytest.raises(ValueError):
        workload.round2_suffixes(1, "ids")  # ids need the vocabulary size


def test_run_plan_warms_up_flushes_and_reads_round1_back():
    fake = FakeEngine(rate=500.0)
    prompts = [[1, 2, 3], [4, 5]]
    res = workload.run_plan(plan_spec(prompts), fake.generate, fake.flush, fake.clock)
    # warm-up (the round-1 batch), flush, round 1, round 2
    assert fake.calls == [(2, 4), "flush", (2, 4), (2, 4)]
    r1, r2 = res["rounds"]
    assert [o["output_ids"] for o in r1["outputs"]] == [fake_ids(p, 4) for p in prompts]
    assert [m["cached_tokens"] for m in r1["meta"]] == [0, 0]  # cold after the flush
    assert [m["cached_tokens"] for m in r2["meta"]] == [3 + 4, 2 + 4]  # prompt + output read back
    assert r1["seconds"] == pytest.approx(8 / 500.0)
    assert res["cache_flushes"] == [True]
    st = stats.run_stats(res)
    assert st["rounds"][0]["tokens_per_s"] == pytest.approx(500.0)
    assert st["rounds"][1]["cached_tokens"] == 13 and st["rounds"][0]["cached_tokens"] == 0
    assert st["completion_tokens"] == 16 and st["batch1"] is None
    assert st["ids_md5"] == workload.md5_of_ids([o["output_ids"] for r in res["rounds"] for o in r["outputs"]])


def test_run_plan_without_warmup_and_in_batches():
    fake = FakeEngine()
    res = workload.run_plan(plan_spec([[1], [2], [3]], warm=0, bs=2), fake.generate, fake.flush, fake.clock)
    assert fake.calls == ["flush", (2, 4), (1, 4), (2, 4), (1, 4)]
    assert set(res) == {"rounds", "cache_flushes"} and res["cache_flushes"] == [True]
    fake = FakeEngine()
    workload.run_plan(plan_spec([[1], [2]], warm=2), fake.generate, fake.flush)
    assert fake.calls[:2] == [(2, 2), "flush"]  # an explicit warm-up length


def test_flush_with_retry():
    answers = iter([False, False, True])
    waits = []
    assert workload.flush_with_retry(lambda: next(answers), sleep=waits.append) is True
    assert len(waits) == 2
    assert workload.flush_with_retry(lambda: None, sleep=waits.append) is None  # not supported: no retries
    assert workload.flush_with_retry(lambda: False, attempts=3, sleep=lambda s: None) is False


class FakeSessions:
    """Streaming sessions over a FakeEngine: a session's context is every turn and its outputs so far, and a turn
    generates from the whole context (SGLang's append-only streaming session)."""

    def __init__(self, engine):
        self.engine, self.ctx, self.opened, self.closed, self.turns = engine, {}, [], [], []

    def open(self):
        sid = f"s{len(self.opened)}"
        self.opened.append(sid)
        self.ctx[sid] = []
        return sid

    def generate(self, batch, sampling, ids):
        assert len(ids) == len(batch) == len(set(ids)), "one turn per session at a time"
        self.turns.append(list(ids))
        outs = []
        for p, sid in zip(batch, ids):
            ctx = self.ctx[sid] + list(p)
            out = self.engine.generate([ctx], sampling)[0]
            self.ctx[sid] = ctx + out["output_ids"]
            outs.append(out)
        return outs

    def close(self, sid):
        self.closed.append(sid)

    def api(self):
        return workload.Sessions(open=self.open, generate=self.generate, close=self.close)


def test_run_plan_in_streaming_sessions_sends_round2_as_the_next_turn():
    prompts = [[1, 2, 3], [4, 5], [6]]
    spec = dict(plan_spec(prompts, warm=0, bs=2), streaming_sessions=True)
    fake = FakeSessions(FakeEngine())
    res = workload.run_plan(spec, fake.engine.generate, fake.engine.flush, fake.engine.clock, sessions=fake.api())
    assert fake.opened == ["s0", "s1", "s2"] and fake.closed == fake.opened and res["sessions"] == 3
    assert fake.turns == [["s0", "s1"], ["s2"], ["s0", "s1"], ["s2"]]  # round 1, then round 2, in batches
    # round 2 sent only the suffixes, and the sessions continued from what they kept: the same sequences as the
    # plain plan's round-2 prompts, so the same outputs
    plain = workload.run_plan(plan_spec(prompts, warm=0, bs=2), FakeEngine().generate, FakeEngine().flush)
    for got, want in zip(res["rounds"], plain["rounds"]):
        assert [o["output_ids"] for o in got["outputs"]] == [o["output_ids"] for o in want["outputs"]]
    assert fake.ctx["s1"] == plain_round2_sequence(prompts[1], plain, 1, spec)


def plain_round2_sequence(prompt, plain, i, spec):
    return (
        list(prompt)
        + plain["rounds"][0]["outputs"][i]["output_ids"]
        + list(spec["round2_suffixes"][i])
        + (plain["rounds"][1]["outputs"][i]["output_ids"])
    )


def test_run_plan_streaming_sessions_need_a_route_with_them_and_close_what_they_opened():
    spec = dict(plan_spec([[1], [2]], warm=0), streaming_sessions=True)
    fake = FakeEngine()
    with pytest.raises(ValueError, match="streaming sessions asked for, but this route has none"):
        workload.run_plan(spec, fake.generate, fake.flush)
    broken = FakeSessions(FakeEngine())

    def fail(batch, sampling, ids):
        raise RuntimeError("the engine died")

    api = workload.Sessions(open=broken.open, generate=fail, close=broken.close)
    with pytest.raises(RuntimeError, match="the engine died"):
        workload.run_plan(spec, fake.generate, fake.flush, sessions=api)
    assert broken.closed == broken.opened == ["s0", "s1"]
