"""The offline route's pieces that need no GPU: the plugin variables of a run, the CUDA check."""

import json

import pytest

from sglang_mamba_dedup.e2e import engine

FAULT, ZC = "SGLANG_MAMBA_DEDUP_FAULT", "SGLANG_MAMBA_DEDUP_ZERO_COPY"
ZCR = "SGLANG_MAMBA_DEDUP_ZERO_COPY_RADIX"


@pytest.mark.parametrize(
    "mode, plugin, want",
    [
        ("off", {}, {}),
        ("on", {}, {}),
        ("fault", {}, {FAULT: "commit_step0"}),
        ("off", {"zero_copy": True, "fault": "zc_no_stage_in"}, {}),
        ("on", {"zero_copy": True, "fault": "zc_no_stage_in"}, {ZC: "1"}),
        ("fault", {"zero_copy": True, "fault": "zc_no_stage_in"}, {FAULT: "zc_no_stage_in", ZC: "1"}),
        ("off", {"zero_copy": True, "zero_copy_radix": True}, {}),
        ("on", {"zero_copy": True, "zero_copy_radix": True}, {ZC: "1"}),
        ("fault", {"zero_copy": True, "zero_copy_radix": True}, {FAULT: "commit_step0", ZC: "1"}),
        ("on", {"zero_copy": False, "zero_copy_radix": True}, {}),
    ],
)
def test_run_env_sets_the_fault_and_zero_copy_per_mode(mode, plugin, want):
    """The parent's own values never reach a run: each variable is set where asked for, removed elsewhere; the
    radix opt-out is removed from every run (zero-copy serves the radix cache on without a variable)."""
    parent = {FAULT: "stale", ZC: "1", ZCR: "0", "KEEP": "x"}
    assert engine.run_env(parent, mode, **plugin) == {**want, "KEEP": "x"}
    assert engine.ZERO_COPY_RADIX == ZCR


def test_run_in_subprocess_passes_the_spec_plugin_variables(tmp_path, monkeypatch):
    """The engine process gets the spec's plugin variables for its mode (the worker replaced by an env dump)."""
    boot = "import json, os, sys; json.dump({'env': dict(os.environ)}, open(sys.argv[2], 'w'))"
    monkeypatch.setattr(engine, "_WORKER_BOOT", boot)
    monkeypatch.setenv(ZC, "1")  # the parent's: must not reach the off run
    spec = {"plugin": {"fault": "zc_no_stage_in", "zero_copy": True}}
    got = {}
    for mode in ("off", "on", "fault"):
        res = engine.run_in_subprocess(spec, mode, tmp_path / "r", tmp_path / f"run-{mode}.log")
        assert res["ok"], res
        got[mode] = {k: res["env"].get(k) for k in ("SGLANG_MAMBA_DEDUP", FAULT, ZC)}
    assert got == {
        "off": {"SGLANG_MAMBA_DEDUP": "0", FAULT: None, ZC: None},
        "on": {"SGLANG_MAMBA_DEDUP": "1", FAULT: None, ZC: "1"},
        "fault": {"SGLANG_MAMBA_DEDUP": "1", FAULT: "zc_no_stage_in", ZC: "1"},
    }
    assert json.loads((tmp_path / "spec-run-fault.json").read_text()) == spec


def test_cuda_check_is_about_the_engine_device(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert "CUDA GPU" in engine.cuda_problem({})
    assert "CUDA GPU" in engine.cuda_problem({"device": "cuda"})
    assert engine.cuda_problem({"device": "cpu"}) is None  # the user picked another device: not our call
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert engine.cuda_problem({}) is None


def test_engine_sessions_open_streaming_and_run_each_turn_in_its_own_session():
    """The Engine route's sessions: ``open_session(streaming=True)``, one ``async_generate`` per prompt with its
    own ``session_params`` (a batched generate would give every prompt the same session), gathered on the
    Engine's loop, answers in prompt order."""
    import asyncio

    class FakeEngine:
        def __init__(self):
            self.loop = asyncio.new_event_loop()
            self.opened, self.closed, self.calls = [], [], []

        def open_session(self, capacity_of_str_len, streaming=False):
            self.opened.append((capacity_of_str_len, streaming))
            return f"sid{len(self.opened)}"

        def close_session(self, sid):
            self.closed.append(sid)

        async def async_generate(self, input_ids=None, sampling_params=None, session_params=None):
            self.calls.append((input_ids, session_params))
            await asyncio.sleep(0.01 * (3 - len(input_ids)))  # the longer prompt answers first
            return {"output_ids": [len(input_ids)], "session": session_params["id"]}

    fake = FakeEngine()
    api = engine._engine_sessions(fake, "input_ids")
    ids = [api.open(), api.open()]
    assert fake.opened == [(engine._SESSION_CAPACITY, True)] * 2
    out = api.generate([[1], [1, 2]], {"max_new_tokens": 2}, ids)
    assert out == [{"output_ids": [1], "session": "sid1"}, {"output_ids": [2], "session": "sid2"}]
    assert fake.calls == [([1], {"id": "sid1"}), ([1, 2], {"id": "sid2"})]
    api.close("sid1")
    assert fake.closed == ["sid1"]
    fake.loop.close()


def test_server_state_is_each_schedulers_mamba_dedup_entry_or_none():
    """The Engine route reads the plugin's entry back as a user would (``get_server_info()['internal_states']``):
    one per scheduler, None for a scheduler without it; None in all when the info has no internal states or
    cannot be read (the run does not depend on it)."""
    entry = {"mode": "on", "mamba_slots": 7}
    info = {"internal_states": [{"mamba_dedup": entry, "other": 1}, {"other": 2}, "odd"]}
    assert engine.engine_server_state(lambda: info) == [entry, None, None]
    assert engine.engine_server_state(lambda: {"version": "x"}) is None

    def broken():
        raise RuntimeError("scheduler gone")

    assert engine.engine_server_state(broken) is None


def test_server_state_line_names_cap_slots_and_commits():
    from sglang_mamba_dedup.e2e import console

    st = {
        "mode": "on",
        "max_running_requests": {"asked": 34, "effective": 30},
        "mamba_slots": 153,
        "ledgers": [{}, {}],
        "zero_copy": {"decision": "on", "zc_commit_calls": 88, "zc_stage_in_calls": 3, "zc_materialize_calls": 2},
        "commits": {"commit_calls": 90, "ours_commit_calls": 90},
    }
    text = console.server_state_text([st, None])
    assert "asked 34 / in force 30" in text and "mamba slots 153" in text and "commits ours 90 of 90" in text
    assert "ledgers 2" in text and "session states materialized 2, tree evictions 0)" in text
    assert (
        "zero-copy on (radix cache off; commits 88, with a track set not recorded, track boundaries crossed not "
        in text
    )
    assert "scheduler 1: no mamba_dedup entry" in text
    st["zero_copy"].update(zc_track_commits=7, zc_track_rows=3, radix_cache="extra_buffer_lazy")
    said = console.server_state_text([st])
    assert (
        "zero-copy on (radix cache extra_buffer_lazy; commits 88, with a track set 7, track boundaries crossed 3, "
        in said
    )
