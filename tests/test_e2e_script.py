"""The e2e md5 driver without a GPU: prompts, hashing, report parsing, exit codes (runs are faked)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_mamba_dedup import e2e, report

ROOT = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------- prompts and hashing
def test_prompt_set_is_fixed_mixed_and_large_enough():
    prompts = e2e.load_prompts()
    assert len(prompts) >= 32
    assert len(set(prompts)) == len(prompts)
    words = sorted(len(p.split()) for p in prompts)
    assert words[0] <= 5 and words[-1] >= 1000  # very short and very long prompts
    assert sum(1 for w in words if 20 <= w <= 200) >= 8  # and plenty in between
    assert e2e.load_prompts() == prompts  # deterministic
    assert e2e.load_prompts(limit=3) == prompts[:3]


def test_text_to_ids_is_deterministic_and_in_vocab():
    text = "Hello, world! Hello again."
    ids = e2e.text_to_ids(text, 1024)
    assert ids == e2e.text_to_ids(text, 1024)
    assert len(ids) == 7  # Hello , world ! Hello again .
    assert ids[0] == ids[4]
    assert all(0 <= i < 1024 for i in ids)
    # pinned values: the ids must not change across Python versions or machines (crc32, no hash() salt)
    import zlib

    assert e2e.text_to_ids("Hello.", 248320) == [zlib.crc32(b"Hello") % 248320, zlib.crc32(b".") % 248320]
    with pytest.raises(ValueError):
        e2e.text_to_ids("x", 0)


def test_md5_of_ids_and_texts():
    a = [[1, 2, 3], [4]]
    assert e2e.md5_of_ids(a) == e2e.md5_of_ids([[1, 2, 3], [4]])
    assert e2e.md5_of_ids(a) != e2e.md5_of_ids([[1, 2], [3, 4]])  # prompt boundaries count
    assert e2e.md5_of_ids(a) != e2e.md5_of_ids([[4], [1, 2, 3]])  # order counts
    assert e2e.md5_of_texts(["a", "b"]) == e2e.md5_of_texts(["a", "b"])
    assert e2e.md5_of_texts(["a", "b"]) != e2e.md5_of_texts(["ab", ""])
    assert e2e.md5_of_texts(["a", None]) is None  # skip_tokenizer_init: no text


def test_first_difference():
    assert e2e.first_difference([[1, 2], [3]], [[1, 2], [3]]) is None
    assert e2e.first_difference([[1, 2], [3, 4, 5]], [[1, 2], [3, 9, 5]]) == (1, 1)
    assert e2e.first_difference([[1, 2]], [[1, 2, 3]]) == (0, 2)


# ----------------------------------------------------------------------------- status reports
def _report(
    pid,
    mode="on",
    state="ours",
    dense=4096,
    physical=2048,
    calls=10,
    ours=10,
    patches=None,
    track=None,
    ours_track=None,
    fault=None,
):
    doc = {
        "pid": pid,
        "argv0": "-c",
        "sglang_version": "0.5.23",
        "mode": mode,
        "patches": patches
        if patches is not None
        else {
            "pool": {"feature": "dedup_pool", "state": "applied", "reason": None},
            "commit": {"feature": "fused_commit", "state": "applied", "reason": None},
        },
        "events": {
            "commit_calls": calls,
            "ours_commit_calls": ours,
            "track_commit_calls": calls if track is None else track,
            "ours_track_commit_calls": ours if ours_track is None else ours_track,
            **({"fault": fault} if fault else {}),
        },
    }
    if state is not None:
        doc["events"]["dedup_layout"] = {
            "state": state,
            "reason": None,
            "dense_bytes": dense,
            "physical_bytes": physical,
        }
    return doc


def _write_reports(d: Path, docs):
    d.mkdir(parents=True, exist_ok=True)
    for doc in docs:
        (d / f"status-{doc['pid']}.json").write_text(json.dumps(doc))


def test_read_reports_skips_foreign_and_broken_files(tmp_path):
    _write_reports(tmp_path, [_report(11), _report(12)])
    (tmp_path / "status-13.json").write_text("{not json")
    (tmp_path / "status-14.json").write_text(json.dumps({"no": "pid"}))
    (tmp_path / "other.json").write_text("{}")
    reports, problems = e2e.read_reports(tmp_path)
    assert [r["pid"] for r in reports] == [11, 12]
    assert len(problems) == 2
    assert e2e.read_reports(tmp_path / "missing") == ([], [])


def test_engaged_from_scheduler_report():
    ok, reasons, rep = e2e.check_engaged([_report(100, state=None, calls=0, ours=0), _report(200)], parent_pid=100)
    assert ok, reasons
    assert rep["pid"] == 200
    ok, reasons, _ = e2e.check_engaged([_report(200, state="upstream")], parent_pid=100)
    assert ok, reasons


@pytest.mark.parametrize(
    "reports, needle",
    [
        ([], "no status report"),
        ([_report(100)], "only the engine's own process"),  # the parent's report does not count
        ([_report(100), _report(200, state=None)], "no dedup_layout"),
        ([_report(200, state="stock")], "layout is 'stock'"),
        ([_report(200, dense=2048, physical=2048)], "no bytes saved"),
        ([_report(200, ours=0)], "no commit ran through our kernels"),
        ([_report(200, mode="off")], "mode is 'off'"),
        ([_report(200), _report(201, ours=0)], "pid 201"),  # every rank must engage
    ],
    ids=["missing", "parent-only", "no-pool", "stock", "no-bytes", "no-ours-commit", "mode-off", "one-rank"],
)
def test_not_engaged(reports, needle):
    ok, reasons, _ = e2e.check_engaged(reports, parent_pid=100)
    assert not ok
    assert any(needle in r for r in reasons), reasons


def test_off_run_check():
    assert e2e.check_off([], 100) == (True, [])
    assert e2e.check_off([_report(200, mode="off", state="upstream", ours=0)], 100)[0]
    assert e2e.check_off([_report(100, mode="on")], 100)[0]  # the parent's own report is not the scheduler's
    ok, reasons = e2e.check_off([_report(200, mode="off", ours=3)], 100)
    assert not ok and "3 commits" in reasons[0]


def test_describe_report():
    text = e2e.describe_report(_report(200, calls=10, ours=9, track=4, ours_track=3))
    assert "saved 2,048 (50.0%)" in text and "pool=applied" in text
    assert "our kernel / all: 9/10; with track slots 3/4, without 6/6" in text
    assert e2e.describe_report(None) == "no scheduler report"


def test_commit_counts_tolerate_old_and_broken_reports():
    assert e2e.commit_counts(None) == dict.fromkeys(report.COUNTERS, 0)
    old = {"pid": 1, "events": {"commit_calls": 5, "ours_commit_calls": "x"}}  # before the track counters
    assert e2e.commit_counts(old) == {
        "commit_calls": 5,
        "ours_commit_calls": 0,
        "track_commit_calls": 0,
        "ours_track_commit_calls": 0,
    }


def test_track_proof_in_the_engagement_check():
    rep = _report(200, track=8, ours_track=0)
    assert e2e.check_engaged([rep], 100)[0]  # not required: engaged
    ok, reasons, _ = e2e.check_engaged([rep], 100, expect_track=True)
    assert not ok and "no commit with track slots ran through our kernel (8 commits with track slots" in reasons[0]
    assert e2e.check_engaged([_report(200, track=8, ours_track=8)], 100, expect_track=True)[0]
    # every rank must show it
    ok, reasons, _ = e2e.check_engaged([_report(200), _report(201, ours_track=0)], 100, expect_track=True)
    assert not ok and reasons[0].startswith("pid 201")


# ----------------------------------------------------------------------------- engine arguments, deployment defaults
def test_engine_args_passthrough_and_defaults():
    assert e2e.parse_engine_args(["a=1", "b=true", "c=triton", "d=0.5", "e=none", "f-g=[1,2]"]) == {
        "a": 1,
        "b": True,
        "c": "triton",
        "d": 0.5,
        "e": None,
        "f_g": [1, 2],
    }
    with pytest.raises(ValueError):
        e2e.parse_engine_args(["novalue"])


NEW_FIELDS = {"cuda_graph_backend_decode", "cuda_graph_backend_prefill", "disable_radix_cache", "disable_cuda_graph"}
NEW_FIELDS |= {"mamba_radix_cache_strategy", "disable_overlap_schedule", "disable_piecewise_cuda_graph"}
OLD_FIELDS = {"disable_cuda_graph", "disable_piecewise_cuda_graph", "disable_radix_cache", "mamba_scheduler_strategy"}


def test_deployment_defaults_graphs_and_radix_on():
    kw, notes = e2e.deployment_defaults(fields=NEW_FIELDS)
    assert kw == {
        "cuda_graph_backend_decode": "full",
        "cuda_graph_backend_prefill": "disabled",
        "disable_radix_cache": False,
    }
    assert notes == []
    assert e2e.deployment_defaults()[0] == kw  # fields unknown: everything is passed
    kw, _ = e2e.deployment_defaults(cuda_graph=False, radix_cache=False, fields=NEW_FIELDS)
    assert kw["cuda_graph_backend_decode"] == "disabled" and kw["disable_radix_cache"] is True


def test_deployment_defaults_on_an_old_release_drop_and_say_so():
    kw, notes = e2e.deployment_defaults(fields=OLD_FIELDS)
    # graphs on is that release's own default; its prefill graph switch is the piecewise one
    assert kw == {"disable_piecewise_cuda_graph": True, "disable_radix_cache": False}
    assert len(notes) == 2
    assert notes[0].startswith("cuda_graph_backend_decode=full (not a ServerArgs field here")
    assert "disable_piecewise_cuda_graph=true instead" in notes[1]
    kw, notes = e2e.deployment_defaults(cuda_graph=False, fields=OLD_FIELDS)
    assert kw["disable_cuda_graph"] is True and "disable_cuda_graph=true instead" in notes[0]
    kw, notes = e2e.deployment_defaults(fields={"disable_radix_cache"})
    assert kw == {"disable_radix_cache": False} and len(notes) == 2


def test_describe_settings():
    kw, _ = e2e.deployment_defaults(fields=NEW_FIELDS)
    assert e2e.describe_settings(kw) == (
        "decode CUDA graphs on (full); prefill CUDA graphs off; radix cache on; overlap scheduling SGLang's default"
    )
    old = e2e.describe_settings(
        {"disable_cuda_graph": True, "disable_radix_cache": True, "disable_overlap_schedule": True}
    )
    assert old == (
        "decode CUDA graphs off (disable_cuda_graph); prefill CUDA graphs SGLang's default; radix cache off; "
        "overlap scheduling off"
    )


@pytest.mark.parametrize(
    "kw, fields, expected, needle",
    [
        ({"disable_radix_cache": False}, NEW_FIELDS, True, "'auto' -> extra_buffer"),
        ({}, None, True, "'auto' -> extra_buffer"),
        ({"disable_radix_cache": True}, NEW_FIELDS, False, "radix cache is off"),
        ({"mamba_radix_cache_strategy": "no_buffer"}, NEW_FIELDS, False, "'no_buffer'"),
        ({"mamba_radix_cache_strategy": "extra_buffer"}, NEW_FIELDS, True, "'extra_buffer'"),
        ({"mamba_scheduler_strategy": "extra_buffer"}, OLD_FIELDS, True, "'extra_buffer'"),
        ({}, OLD_FIELDS, False, "<= 0.5.13.post1"),
        ({"disable_overlap_schedule": True}, NEW_FIELDS, False, "without overlap"),
        ({"disable_overlap_schedule": True, "page_size": 64}, NEW_FIELDS, True, "extra_buffer"),
        ({"linear_attn_backend": "flashinfer"}, NEW_FIELDS, False, "flashinfer"),
    ],
)
def test_track_expectation(kw, fields, expected, needle):
    got, why = e2e.track_expectation(kw, fields)
    assert got is expected and needle in why, why


@pytest.mark.release
def test_engine_kwargs_are_sglang_server_args():
    """Every key the driver passes by default is a field of the installed SGLang's ServerArgs."""
    pytest.importorskip("sglang.srt.server_args")
    fields = e2e.server_arg_fields()
    assert fields and "disable_radix_cache" in fields
    args = e2e._build_parser().parse_args(["--mem-fraction-static", "0.5"])
    args.num_prompts_effective = 34
    kw = e2e.build_engine_kwargs(args, "/m", skip_tokenizer=True)
    assert set(kw) <= fields, set(kw) - fields
    assert kw["speculative_algorithm"] == "NEXTN" and kw["speculative_eagle_topk"] == 1
    assert kw["speculative_num_draft_tokens"] == 4 and kw["speculative_num_steps"] == 3
    assert kw["speculative_draft_model_path"] == "/m" and kw["max_running_requests"] == 34
    from packaging.version import Version

    from sglang_mamba_dedup import versions

    # the radix cache is on by default wherever SGLang allows it with speculative decoding
    allowed = Version(versions.installed_sglang_version()) >= Version(versions.SPEC_RADIX_FROM)
    assert kw["disable_radix_cache"] is (not allowed)
    if "cuda_graph_backend_decode" in fields:  # 0.5.14+
        assert kw["cuda_graph_backend_decode"] == "full" and kw["cuda_graph_backend_prefill"] == "disabled"
    else:
        assert "disable_cuda_graph" not in kw  # that release's default: graphs on


def test_engine_arg_wins_over_the_defaults():
    args = e2e._build_parser().parse_args(
        ["--engine-arg", "disable_radix_cache=true", "--engine-arg", "cuda_graph_backend_decode=breakable"]
    )
    args.num_prompts_effective = 2
    kw = e2e.build_engine_kwargs(args, "/m", True, defaults=e2e.deployment_defaults(fields=NEW_FIELDS)[0])
    assert kw["disable_radix_cache"] is True and kw["cuda_graph_backend_decode"] == "breakable"
    args = e2e._build_parser().parse_args(["--no-cuda-graph", "--no-radix-cache"])
    args.num_prompts_effective = 2
    kw = e2e.build_engine_kwargs(args, "/m", True)
    assert kw["disable_radix_cache"] is True
    assert kw.get("cuda_graph_backend_decode", "disabled") == "disabled"


# ----------------------------------------------------------------------------- round 2, the run plan
def test_round2_prompts_extend_round1_by_its_output_and_a_new_suffix():
    suffixes = e2e.round2_suffixes(2, "ids", 1000)
    assert len(suffixes) == 2 and suffixes[0] != suffixes[1] and all(0 <= t < 1000 for t in suffixes[0])
    prompts = [[1, 2], [3]]
    outs = [{"output_ids": [7, 8]}, {"output_ids": [9]}]
    second = e2e.round2_prompts(prompts, outs, suffixes, "ids")
    assert second == [[1, 2, 7, 8] + suffixes[0], [3, 9] + suffixes[1]]
    texts = e2e.round2_suffixes(2, "text")
    assert e2e.round2_prompts(["Hi.", "Yo"], [{"text": " there"}, {"text": None}], texts, "text") == [
        "Hi. there" + texts[0],
        "Yo" + texts[1],
    ]
    assert e2e.round2_prompts([[1]], [{"output_ids": [2]}], [], "ids") == [[1, 2]]
    with pytest.raises(ValueError):
        e2e.round2_prompts([[1], [2]], [{"output_ids": []}], [], "ids")
    with pytest.raises(ValueError):
        e2e.round2_suffixes(1, "ids")  # ids need the vocabulary size


class FakeClock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def fake_ids(prompt, n):
    return [(sum(prompt) * (i + 7) + len(prompt)) % 1000 for i in range(n)]


class FakeEngine:
    """generate/flush of a greedy, prefix-caching engine: outputs a function of the prompt; time = tokens / rate."""

    def __init__(self, rate=1000.0, clock=None, differ_prompt=None):
        self.rate, self.clock, self.differ_prompt = rate, clock or FakeClock(), differ_prompt
        self.seen = []
        self.calls = []

    def generate(self, batch, sampling):
        n = sampling["max_new_tokens"]
        self.calls.append((len(batch), n))
        outs = []
        for p in batch:
            ids = fake_ids(p, n)
            if self.differ_prompt is not None and p == self.differ_prompt:
                ids[min(2, n - 1)] += 1
            hit = max([len(os.path.commonprefix([s, p])) for s in self.seen] or [0])
            self.seen.append(list(p) + ids)
            meta = {"completion_tokens": n, "prompt_tokens": len(p), "cached_tokens": hit}
            meta.update({"spec_verify_ct": max(1, n // 2), "spec_correct_drafts_histogram": [1, 2, 0, 1]})
            outs.append({"output_ids": ids, "text": None, "meta_info": meta})
        self.clock.t += n * len(batch) / self.rate
        return outs

    def flush(self):
        self.seen.clear()
        self.calls.append("flush")
        return True


def _spec(prompts, n=4, batch1=None, warm=-1, bs=0):
    return {
        "engine_kwargs": {},
        "prompts": prompts,
        "prompt_format": "ids",
        "sampling_params": {"temperature": 0.0, "max_new_tokens": n, "ignore_eos": True},
        "batch_size": bs,
        "warmup_tokens": warm,
        "round2_suffixes": e2e.round2_suffixes(len(prompts), "ids", 1000),
        "batch1": batch1,
    }


def test_run_plan_warms_up_flushes_and_reads_round1_back():
    fake = FakeEngine(rate=500.0)
    prompts = [[1, 2, 3], [4, 5]]
    res = e2e.run_plan(
        _spec(prompts, batch1={"prompt_index": 0, "max_new_tokens": 8}), fake.generate, fake.flush, fake.clock
    )
    # warm-up (round-1 batch, batch-1 request), flush, round 1, round 2, flush, batch 1
    assert fake.calls == [(2, 4), (1, 8), "flush", (2, 4), (2, 4), "flush", (1, 8)]
    r1, r2 = res["rounds"]
    assert [o["output_ids"] for o in r1["outputs"]] == [fake_ids(p, 4) for p in prompts]
    assert [m["cached_tokens"] for m in r1["meta"]] == [0, 0]  # cold after the flush
    assert [m["cached_tokens"] for m in r2["meta"]] == [3 + 4, 2 + 4]  # prompt + output read back
    assert r1["seconds"] == pytest.approx(8 / 500.0)
    assert res["phases"]["batch1"]["seconds"] == pytest.approx(8 / 500.0)
    assert res["cache_flushes"] == [True, True]
    st = e2e._run_stats(res)
    assert st["rounds"][0]["tokens_per_s"] == pytest.approx(500.0)
    assert st["rounds"][1]["cached_tokens"] == 13 and st["rounds"][0]["cached_tokens"] == 0
    assert st["batch1"]["completion_tokens"] == 8 and st["completion_tokens"] == 16
    assert st["ids_md5"] == e2e.md5_of_ids([o["output_ids"] for r in res["rounds"] for o in r["outputs"]])


def test_run_plan_without_warmup_or_batch1_and_in_batches():
    fake = FakeEngine()
    res = e2e.run_plan(_spec([[1], [2], [3]], warm=0, bs=2), fake.generate, fake.flush, fake.clock)
    assert fake.calls == ["flush", (2, 4), (1, 4), (2, 4), (1, 4)]
    assert "phases" not in res and res["cache_flushes"] == [True]
    fake = FakeEngine()
    e2e.run_plan(_spec([[1]], warm=2, batch1={"prompt_index": 0, "max_new_tokens": 9}), fake.generate, fake.flush)
    assert fake.calls[:2] == [(1, 2), (1, 2)]  # an explicit warm-up length applies to batch 1 too


def test_flush_with_retry():
    answers = iter([False, False, True])
    waits = []
    assert e2e.flush_with_retry(lambda: next(answers), sleep=waits.append) is True
    assert len(waits) == 2
    assert e2e.flush_with_retry(lambda: None, sleep=waits.append) is None  # not supported: no retries
    assert e2e.flush_with_retry(lambda: False, attempts=3, sleep=lambda s: None) is False


# ----------------------------------------------------------------------------- throughput statistics
def test_spread_median_of_odd_and_even_counts():
    assert e2e.spread([]) is None and e2e.spread([None]) is None
    assert e2e.spread([3.0, 1.0, 2.0]) == {"runs": 3, "median": 2.0, "min": 1.0, "max": 3.0}
    assert e2e.spread([4.0, 1.0, 2.0, 3.0]) == {"runs": 4, "median": 2.5, "min": 1.0, "max": 4.0}
    assert e2e.spread([5.0, None]) == {"runs": 1, "median": 5.0, "min": 5.0, "max": 5.0}


def test_compare_spreads_within_noise_faster_and_too_few():
    off = e2e.spread([100.0, 104.0, 102.0])
    on = e2e.spread([103.0, 106.0, 105.0])
    c = e2e.compare_spreads(off, on)
    assert c["verdict"] == "within noise" and c["overlap"] is True
    assert c["text"].startswith("within noise") and "+2.9%" in c["text"]
    faster = e2e.compare_spreads(off, e2e.spread([110.0, 112.0, 111.0]))
    assert faster["verdict"] == "on faster" and faster["overlap"] is False
    assert "median 8.8% above off" in faster["text"]
    slower = e2e.compare_spreads(off, e2e.spread([90.0, 91.0, 92.0, 93.0]))
    assert slower["verdict"] == "off faster" and "median 11.5% above on" in slower["text"]
    touching = e2e.compare_spreads(off, e2e.spread([104.0, 106.0, 108.0]))
    assert touching["verdict"] == "within noise"  # ranges that touch overlap
    few = e2e.compare_spreads(e2e.spread([1.0, 2.0]), on)
    assert few["verdict"] == "not compared" and "2 off / 3 on runs (3 per mode needed)" in few["text"]
    assert e2e.compare_spreads(None, on)["verdict"] == "not compared"


def test_throughput_stats_and_table():
    samples = [("off", {"batch1": 10.0, "full": 100.0}), ("on", {"batch1": 12.0, "full": 101.0})] * 3
    samples.append(("on", {"batch1": None, "full": 99.0}))
    stats = e2e.throughput_stats(samples)
    assert stats["batch1"]["on"]["runs"] == 3 and stats["full"]["on"]["runs"] == 4
    assert stats["batch1"]["comparison"]["verdict"] == "on faster"
    assert stats["full"]["comparison"]["verdict"] == "within noise"
    table = e2e.throughput_table(stats, {"batch1": "batch 1", "full": "full"})
    assert table[0].startswith("| phase |") and len(table) == 4
    assert (
        "| batch 1 | 10.0 (10.0 - 10.0, 3 runs) | 12.0 (12.0 - 12.0, 3 runs) | on faster: median 20.0% above off"
        in table[2]
    )
    assert "ratio" not in "\n".join(table)


def test_run_schedule():
    assert e2e.run_schedule(None) == [("off", False), ("on", False)]
    assert e2e.run_schedule(["off", "on", "off"]) == [("off", False), ("on", False), ("off", False)]
    assert e2e.run_schedule(None, 2) == [("off", True), ("off", False), ("on", False), ("off", False), ("on", False)]
    assert e2e.run_schedule(None, 1, throwaway=False) == [("off", False), ("on", False)]


# ----------------------------------------------------------------------------- main() with faked runs
class FakeRuns:
    """Stands in for the engine processes: runs the real run plan on a FakeEngine and writes the reports.

    ``rates``: tok/s per mode, one per run of that mode (cycled); ``differ``: mode -> prompt index whose
    round-1 output gets one token changed in that mode.
    """

    def __init__(self, reports_by_mode=None, fail_mode=None, differ=None, rates=None):
        self.reports_by_mode = reports_by_mode or {}
        self.fail_modes = {fail_mode} if isinstance(fail_mode, str) else set(fail_mode or ())
        self.differ = differ or {}
        self.rates = rates or {"off": [1000.0], "on": [1250.0]}
        self.calls = []

    def __call__(self, spec, mode, report_dir, log_path):
        self.calls.append((mode, spec))
        parent = 1000 + len(self.calls)
        if mode in self.fail_modes:
            log_path.write_text("Traceback: boom\n")
            return {"ok": False, "pid": parent, "error": "engine process exited with 1"}
        docs = [dict(d, pid=parent + 100 + i) for i, d in enumerate(self.reports_by_mode.get(mode, []))]
        _write_reports(report_dir, docs)
        nth = sum(1 for m, _ in self.calls if m == mode) - 1
        rates = self.rates[mode]
        idx = self.differ.get(mode)
        fake = FakeEngine(rate=rates[nth % len(rates)], differ_prompt=None if idx is None else spec["prompts"][idx])
        plan = e2e.run_plan(spec, fake.generate, fake.flush, fake.clock)
        return {
            "ok": True,
            "pid": parent,
            **plan,
            "versions": {"sglang": "0.5.23", "torch": "x"},
            "gpu": {"name": "FakeGPU", "count": 1},
        }


ON_REPORTS = {"on": [_report(0)], "off": [_report(0, mode="off", state="upstream", calls=5, ours=0)]}
ARGS = ["--random-weights", "--random-preset", "tiny", "--num-prompts", "2", "--max-new-tokens", "4"]


@pytest.fixture
def workdir(tmp_path):
    return ["--workdir", str(tmp_path / "w"), "--random-weights-dir", str(tmp_path / "model")]


def test_main_pass_when_equal_and_engaged(workdir, tmp_path, capsys):
    runs = FakeRuns(ON_REPORTS)
    code = e2e.main(ARGS + workdir + ["--json-out", str(tmp_path / "s.json")], runner=runs)
    out = capsys.readouterr().out
    assert code == e2e.EXIT_OK, out
    assert [m for m, _ in runs.calls] == ["off", "on"]
    spec_off, spec_on = runs.calls[0][1], runs.calls[1][1]
    assert spec_off == spec_on  # identical arguments in both runs
    assert spec_off["prompt_format"] == "ids" and spec_off["engine_kwargs"]["skip_tokenizer_init"]
    assert spec_off["sampling_params"]["temperature"] == 0.0
    assert spec_off["batch1"] is None and len(spec_off["round2_suffixes"]) == 2
    kw = spec_off["engine_kwargs"]  # the deployment defaults (SGLang 0.5.23 has every field)
    assert kw["cuda_graph_backend_decode"] == "full" and kw["cuda_graph_backend_prefill"] == "disabled"
    assert kw["disable_radix_cache"] is False and "disable_overlap_schedule" not in kw
    assert "settings: decode CUDA graphs on (full); prefill CUDA graphs off; radix cache on" in out
    assert "track slots: required in the on run (radix cache on" in out
    assert "rounds: 2 per run" in out
    assert "-> EQUAL" in out and "engaged: YES (track slots required: 10 commits" in out and "RESULT: PASS" in out
    assert "with track slots 10/10" in out
    assert "read from the prefix cache: round 1 0 of " in out
    assert "ratio" not in out and "throughput: not compared" in out
    assert "FakeGPU" in out and "sglang 0.5.23" in out
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["exit_code"] == 0 and summary["ids_md5"][0] == summary["ids_md5"][1]
    assert summary["runs"][1]["engaged"] is True and summary["track_expected"] is True
    assert summary["runs"][1]["commit_counts"][0]["ours_track_commit_calls"] == 10
    assert summary["runs"][1]["stats"]["rounds"][1]["cached_tokens"] > 0  # round 2 read round 1 back
    assert "throughput" not in summary and "throughput_ratio" not in summary


FAULT_REPORTS = {**ON_REPORTS, "fault": [_report(0, fault="commit_step0")]}


def test_main_negative_control_caught(workdir, tmp_path, capsys):
    runs = FakeRuns(FAULT_REPORTS, differ={"fault": 1}, rates={"off": [1.0], "on": [1.0], "fault": [1.0]})
    code = e2e.main(ARGS + workdir + ["--modes", "off,on,fault", "--json-out", str(tmp_path / "s.json")], runner=runs)
    out = capsys.readouterr().out
    assert code == e2e.EXIT_OK, out
    assert [m for m, _ in runs.calls] == ["off", "on", "fault"]
    assert (
        "negative control caught: run 3 (fault) differs from run 1 (off) (first difference at round 1, prompt 1" in out
    )
    assert "SGLANG_MAMBA_DEDUP_FAULT=commit_step0" in out and "RESULT: PASS" in out
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["negative_control"] == [{"run": 3, "caught": True}] and summary["runs"][2]["engaged"] is True


def test_main_negative_control_not_caught_is_a_failure(workdir, capsys):
    runs = FakeRuns(FAULT_REPORTS, rates={"off": [1.0], "on": [1.0], "fault": [1.0]})  # the fault changed nothing
    code = e2e.main(ARGS + workdir + ["--modes", "off,on,fault"], runner=runs)
    out = capsys.readouterr().out
    assert code == e2e.EXIT_FAULT_NOT_CAUGHT == 6
    assert "negative control NOT caught: run 3" in out and "RESULT: FAIL" in out


def test_main_fault_run_without_the_fault_in_its_report_is_not_engaged(workdir, capsys):
    reports = {**ON_REPORTS, "fault": [_report(0)]}  # the scheduler never installed the fault
    runs = FakeRuns(reports, differ={"fault": 1}, rates={"off": [1.0], "on": [1.0], "fault": [1.0]})
    assert e2e.main(ARGS + workdir + ["--modes", "off,on,fault"], runner=runs) == e2e.EXIT_NOT_ENGAGED
    assert "no scheduler report shows the fault commit_step0 installed" in capsys.readouterr().out


def test_fault_mode_sets_the_fault_only_in_fault_runs():
    env = e2e.fault_env({"SGLANG_MAMBA_DEDUP_FAULT": "stale"}, "on")
    assert "SGLANG_MAMBA_DEDUP_FAULT" not in env
    assert e2e.fault_env({}, "fault") == {"SGLANG_MAMBA_DEDUP_FAULT": "commit_step0"}


def test_main_md5_differ(workdir, capsys):
    runs = FakeRuns(ON_REPORTS, differ={"on": 1})
    code = e2e.main(ARGS + workdir, runner=runs)
    out = capsys.readouterr().out
    assert code == e2e.EXIT_MD5_DIFFER
    assert "DIFFERENT" in out and "round 1, prompt 1, token 2" in out


def test_main_not_engaged_is_nonzero(workdir, capsys):
    # md5s equal, but the scheduler never used our commit: a no-op plugin must not pass
    runs = FakeRuns({"on": [_report(0, ours=0)]})
    assert e2e.main(ARGS + workdir, runner=runs) == e2e.EXIT_NOT_ENGAGED
    assert "engaged: NO" in capsys.readouterr().out


def test_main_no_track_commit_of_ours_is_not_engaged(workdir, capsys):
    runs = FakeRuns({"on": [_report(0, track=10, ours_track=0)]})
    assert e2e.main(ARGS + workdir, runner=runs) == e2e.EXIT_NOT_ENGAGED
    assert "no commit with track slots ran through our kernel" in capsys.readouterr().out.splitlines()[-1]
    # not required: without the radix cache, or when the user says so
    for extra in (["--no-radix-cache"], ["--no-expect-track"]):
        runs = FakeRuns({"on": [_report(0, track=0, ours_track=0)]})
        assert e2e.main(ARGS + workdir + extra, runner=runs) == e2e.EXIT_OK
        out = capsys.readouterr().out
        assert "track slots: not required" in out
    assert "radix cache off" in out or "--no-expect-track" in out


def test_main_missing_report_is_nonzero(workdir):
    runs = FakeRuns({})
    assert e2e.main(ARGS + workdir, runner=runs) == e2e.EXIT_NOT_ENGAGED


def test_main_off_run_not_off(workdir):
    runs = FakeRuns({"on": [_report(0)], "off": [_report(0, mode="off", ours=7)]})
    assert e2e.main(ARGS + workdir, runner=runs) == e2e.EXIT_OFF_NOT_OFF


def test_main_run_failure(workdir, capsys):
    runs = FakeRuns(ON_REPORTS, fail_mode="on")
    assert e2e.main(ARGS + workdir, runner=runs) == e2e.EXIT_RUN_FAILED
    assert "boom" in capsys.readouterr().out


def test_main_harness_mode_off_off(workdir, capsys):
    runs = FakeRuns({})
    assert e2e.main(ARGS + workdir + ["--modes", "off,off"], runner=runs) == e2e.EXIT_OK
    assert "not checked" in capsys.readouterr().out


def test_cli_help_runs_without_sglang_import():
    """`python -m sglang_mamba_dedup.e2e --help` is cheap: no torch, no SGLang."""
    code = (
        "import sys, runpy; sys.argv=['e2e','--help']\n"
        "try: runpy.run_module('sglang_mamba_dedup.e2e', run_name='__main__')\n"
        "except SystemExit: pass\n"
        "print('MODS', 'torch' in sys.modules, 'sglang' in sys.modules)"
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert "--random-weights" in r.stdout and "MODS False False" in r.stdout, r.stderr


def test_example_wrapper_calls_main(monkeypatch):
    """The example passes its own arguments (not sys.argv[0]) to e2e.main and exits with its status."""
    import runpy

    seen = []

    def fake_main(argv=None):
        seen.append(argv)
        return 7

    monkeypatch.setattr(e2e, "main", fake_main)
    monkeypatch.setattr(sys, "argv", ["e2e_md5.py", "--modes", "off,on,fault"])
    with pytest.raises(SystemExit) as exc:
        runpy.run_path(str(ROOT / "examples" / "e2e_md5.py"), run_name="__main__")
    assert exc.value.code == 7
    assert seen == [["--modes", "off,on,fault"]]


def test_throughput_runs_throwaway_alternating_table(workdir, tmp_path, capsys):
    rates = {"off": [900.0, 1000.0, 1010.0, 990.0], "on": [1005.0, 1020.0, 995.0]}  # the first off is the throwaway
    runs = FakeRuns(ON_REPORTS, rates=rates)
    code = e2e.main(ARGS + workdir + ["--throughput-runs", "3", "--json-out", str(tmp_path / "s.json")], runner=runs)
    out = capsys.readouterr().out
    assert code == e2e.EXIT_OK, out
    assert [m for m, _ in runs.calls] == ["off", "off", "on", "off", "on", "off", "on"]
    assert runs.calls[0][1]["batch1"] == {"prompt_index": 0, "max_new_tokens": 256}
    assert (
        "[throwaway: untimed]"
        in out.splitlines()[[i for i, ln in enumerate(out.splitlines()) if "-- run 1/7" in ln][0]]
    )
    assert "throughput (3 off and 3 on runs, alternating, after 1 untimed throwaway engine start" in out
    assert (
        "| batch 1: 1 request x 256 new tokens | 1,000.0 (990.0 - 1,010.0, 3 runs) | 1,005.0 (995.0 - 1,020.0, 3 runs) | within noise"
        in out
    )
    assert "| full batch: round 1, 2 requests x 4 new tokens |" in out
    assert "md5 token ids, batch 1: run 1 " in out and "all 7 runs EQUAL" in out
    assert "ratio" not in out
    summary = json.loads((tmp_path / "s.json").read_text())
    th = summary["throughput"]
    assert (
        th["phases"]["batch1"]["off"]["median"] == pytest.approx(1000.0)
        and th["phases"]["batch1"]["comparison"]["overlap"]
    )
    assert len(th["samples"]) == 6 and summary["runs"][0]["throwaway"] is True
    assert summary["modes"] == ["off", "off", "on", "off", "on", "off", "on"]


def test_throughput_faster_mode_and_no_throwaway(workdir, capsys):
    rates = {"off": [1000.0, 1001.0, 1002.0], "on": [1100.0, 1101.0, 1102.0]}
    runs = FakeRuns(ON_REPORTS, rates=rates)
    assert e2e.main(ARGS + workdir + ["--throughput-runs", "3", "--no-throwaway"], runner=runs) == e2e.EXIT_OK
    out = capsys.readouterr().out
    assert [m for m, _ in runs.calls] == ["off", "on"] * 3
    assert "on faster: median 10.0% above off (the ranges do not overlap)" in out
    assert "throwaway" not in out.split("throughput (")[1]


def test_throughput_from_earlier_summary_merges_samples(workdir, tmp_path, capsys):
    first = tmp_path / "first.json"
    runs = FakeRuns(ON_REPORTS, rates={"off": [500.0, 1000.0, 1000.0], "on": [1100.0]})
    assert e2e.main(ARGS + workdir + ["--throughput-runs", "2", "--json-out", str(first)], runner=runs) == 0
    capsys.readouterr()
    runs = FakeRuns(ON_REPORTS, rates={"off": [1000.0], "on": [1100.0]})
    extra = ["--throughput-runs", "1", "--no-throwaway", "--throughput-from", str(first)]
    assert e2e.main(ARGS + workdir + extra, runner=runs) == e2e.EXIT_OK
    out = capsys.readouterr().out
    assert "throughput (3 off and 3 on runs, alternating, 4 of them from --throughput-from" in out
    assert "on faster: median 10.0% above off" in out
    assert out.count("md5 token ids, merged ") == 4 and "DIFFERENT" not in out


def test_throughput_from_another_workload_is_refused(workdir, tmp_path, capsys):
    first = tmp_path / "first.json"
    e2e.main(ARGS + workdir + ["--throughput-runs", "1", "--json-out", str(first)], runner=FakeRuns(ON_REPORTS))
    capsys.readouterr()
    runs = FakeRuns(ON_REPORTS)
    extra = ["--throughput-runs", "1", "--max-new-tokens", "5", "--throughput-from", str(first)]
    assert e2e.main(ARGS + workdir + extra, runner=runs) == 2
    err = capsys.readouterr().err
    assert "another workload (sampling_params differ" in err and not runs.calls


def test_time_budget_stops_starting_runs(workdir, monkeypatch, tmp_path, capsys):
    clock = {"t": 0.0}
    monkeypatch.setattr(e2e.time, "monotonic", lambda: clock["t"])

    class Slow(FakeRuns):
        def __call__(self, *a):
            clock["t"] += 100.0
            return super().__call__(*a)

    runs = Slow(ON_REPORTS)
    code = e2e.main(
        ARGS + workdir + ["--throughput-runs", "3", "--time-budget", "450", "--json-out", str(tmp_path / "s.json")],
        runner=runs,
    )
    out = capsys.readouterr().out
    assert len(runs.calls) == 4  # 400 s used: a 5th run (110 s) would end after 450 s
    assert code == e2e.EXIT_OK, out
    assert "not started (--time-budget 450 s" in out and "run 5 (on), run 6 (off), run 7 (on)" in out
    assert "not compared: 2 off / 1 on runs" in out
    assert "(exit 0; 3 planned runs not started (--time-budget))" in out.splitlines()[-1]
    assert json.loads((tmp_path / "s.json").read_text())["not_started"] == ["run 5 (on)", "run 6 (off)", "run 7 (on)"]
    runs = Slow(ON_REPORTS)
    assert e2e.main(ARGS + workdir + ["--throughput-runs", "1", "--time-budget", "150"], runner=runs) == 3
    assert "no 'on' run was started" in capsys.readouterr().out


def test_warmup_defaults_to_the_whole_generation(workdir):
    runs = FakeRuns(ON_REPORTS)
    e2e.main(ARGS + workdir, runner=runs)
    assert runs.calls[0][1]["warmup_tokens"] == -1


# ----------------------------------------------------------------------------- usage errors, no GPU, cleanup
@pytest.fixture
def no_build(monkeypatch):
    """Building a checkpoint is a failure of the test: usage errors and a missing GPU must stop first."""
    from sglang_mamba_dedup import random_model

    def build(*a, **k):
        raise AssertionError("a random-weight checkpoint was built")

    monkeypatch.setattr(random_model, "build_random_model", build)


def _stderr_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--random-weights", "--random-preset", "foo"], "invalid choice: 'foo'"),
        (["--engine-arg", "novalue"], "KEY=VALUE"),
        (["--engine-arg", "=1"], "KEY=VALUE"),
        (["--random-weights", "--random-dim", "num_hidden_layers=abc"], "KEY=INT"),
        (["--random-weights", "--random-dim", "no_such_field=3"], "no_such_field"),
        (["--random-dim", "num_hidden_layers=2"], "needs --random-weights"),
        (["--modes", "off"], "--modes"),
        (["--modes", "off,maybe"], "--modes"),
        (["--modes", "fault,on"], "the first not 'fault'"),
        (["--num-prompts", "0"], "--num-prompts"),
        (["--model-path", "org/model", "--prompt-format", "ids"], "--vocab-size"),
        (["--throughput-runs", "2", "--modes", "off,on,off"], "--throughput-runs plans the runs itself"),
        (["--throughput-runs", "-1"], "--throughput-runs must be 0 or more"),
        (["--no-throwaway"], "--no-throwaway needs --throughput-runs"),
        (["--throughput-from", "s.json", "--batch1-tokens", "300"], "--throughput-from and --batch1-tokens need"),
        (["--throughput-runs", "1", "--batch1-tokens", "0"], "--batch1-tokens"),
        (["--time-budget", "-5"], "--time-budget"),
        (["--prompts", "/nonexistent.json"], "FileNotFoundError"),
        (["--prompts", "{tmp}/bad.json"], "JSONDecodeError"),
        (["--prompts", "{tmp}/empty.json"], "non-empty strings"),
        (["--prompts", "{tmp}/none.json"], "non-empty JSON list"),
        (["--workdir", "{tmp}/bad.json"], "is not a folder"),
        (["--num-draft-tokens", "0"], "--num-draft-tokens"),
        (["--batch-size", "-3"], "--batch-size"),
        (["--max-running-requests", "0"], "--max-running-requests"),
        (["--run-timeout", "0"], "--run-timeout"),
        (["--json-out", "/nonexistent/dir/x.json"], "does not exist"),
        (["--json-out", "{tmp}"], "is a folder"),
    ],
    ids=[
        "preset",
        "engine-arg",
        "engine-arg-nokey",
        "random-dim-int",
        "random-dim-field",
        "random-dim-alone",
        "modes-one",
        "modes-bad",
        "modes-fault-first",
        "num-prompts",
        "ids-no-vocab",
        "throughput-modes",
        "throughput-negative",
        "no-throwaway-alone",
        "throughput-options-alone",
        "batch1-zero",
        "time-budget",
        "prompts-missing",
        "prompts-not-json",
        "prompts-empty-prompt",
        "prompts-empty-list",
        "workdir-a-file",
        "draft-tokens-0",
        "batch-size-negative",
        "max-running-0",
        "run-timeout-0",
        "json-out-no-folder",
        "json-out-a-folder",
    ],
)
def test_usage_errors_exit_2_before_anything_runs(extra, needle, tmp_path, no_build, capsys):
    runs = FakeRuns(ON_REPORTS)
    (tmp_path / "bad.json").write_text("not json")
    (tmp_path / "empty.json").write_text('{"prompts": [""]}')
    (tmp_path / "none.json").write_text("[]")
    extra = [x.replace("{tmp}", str(tmp_path)) for x in extra]
    with pytest.raises(SystemExit) as exc:
        e2e.main(["--workdir", str(tmp_path / "w")] + extra, runner=runs)
    assert exc.value.code == 2
    line = _stderr_line(capsys.readouterr().err)
    assert needle in line, line
    assert not runs.calls and not (tmp_path / "w").exists()


def test_missing_safetensors_is_a_usage_error(tmp_path, monkeypatch, capsys):
    real = e2e.importlib.util.find_spec
    monkeypatch.setattr(
        e2e.importlib.util, "find_spec", lambda name, *a: None if name == "safetensors" else real(name, *a)
    )
    runs = FakeRuns(ON_REPORTS)
    with pytest.raises(SystemExit) as exc:
        e2e.main(["--workdir", str(tmp_path / "w"), "--random-weights"], runner=runs)
    assert exc.value.code == 2
    assert "pip install 'sglang-mamba-dedup[e2e]'" in _stderr_line(capsys.readouterr().err)
    assert not runs.calls


def test_usage_error_from_the_command_line(tmp_path):
    """Through the console entry point: exit 2, one line on stderr, no traceback."""
    cmd = [
        sys.executable,
        "-m",
        "sglang_mamba_dedup",
        "e2e",
        "--random-weights",
        "--random-preset",
        "tiny",
        "--workdir",
        str(tmp_path / "w"),
        "--run-timeout",
        "1",
        "--random-dim",
        "x=abc",
    ]
    r = subprocess.run(
        cmd, capture_output=True, text=True, cwd=ROOT, timeout=60, env=dict(os.environ, PYTHONPATH=str(ROOT))
    )
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "KEY=INT" in _stderr_line(r.stderr)


def test_help_lists_presets_examples_and_exit_codes():
    text = e2e._build_parser().format_help()
    from sglang_mamba_dedup.random_model import PRESETS

    assert all(name in text for name in PRESETS)
    assert text.count("sglang-mamba-dedup e2e --") >= 2  # example command lines
    codes = {
        e2e.EXIT_OK,
        e2e.EXIT_MD5_DIFFER,
        e2e.EXIT_NOT_ENGAGED,
        e2e.EXIT_RUN_FAILED,
        e2e.EXIT_OFF_NOT_OFF,
        e2e.EXIT_CANNOT_RUN,
    }
    assert len(codes) == 6  # distinct
    epilog = text[text.index("exit status") :]
    for c in codes:
        assert f"\n  {c} " in epilog, epilog
    assert "CUDA" in epilog and "usage" in epilog


def test_no_cuda_stops_before_building_the_checkpoint(monkeypatch, tmp_path, no_build, capsys):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    code = e2e.main(["--random-weights", "--workdir", str(tmp_path / "w"), "--num-prompts", "2"])
    assert code == e2e.EXIT_CANNOT_RUN
    captured = capsys.readouterr()
    line = _stderr_line(captured.err)
    assert "CUDA GPU" in line and "torch.cuda.is_available()" in line
    assert "RESULT" not in captured.out and not (tmp_path / "w").exists()


def test_cuda_check_is_about_the_engine_device(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert "CUDA GPU" in e2e._cuda_problem({})
    assert "CUDA GPU" in e2e._cuda_problem({"device": "cuda"})
    assert e2e._cuda_problem({"device": "cpu"}) is None  # the user picked another device: not our call
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert e2e._cuda_problem({}) is None


def _temp_runs(monkeypatch, tmp_path):
    """Temporary directories go under tmp_path; return where they go."""
    import tempfile

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    return tmp


class SeesModel(FakeRuns):
    """FakeRuns that checks the checkpoint exists while the runs go (removed only afterwards)."""

    def __init__(self, *a, raise_in=None, **k):
        super().__init__(*a, **k)
        self.raise_in = raise_in

    def __call__(self, spec, mode, report_dir, log_path):
        assert (Path(spec["engine_kwargs"]["model_path"]) / "config.json").exists()
        if mode == self.raise_in:
            raise RuntimeError("runner broke")
        return super().__call__(spec, mode, report_dir, log_path)


@pytest.mark.parametrize("raise_in", [None, "on"], ids=["pass", "exception"])
def test_temporary_checkpoint_is_removed_at_exit(monkeypatch, tmp_path, capsys, raise_in):
    tmp = _temp_runs(monkeypatch, tmp_path)
    runs = SeesModel(ON_REPORTS, raise_in=raise_in)
    if raise_in:
        with pytest.raises(RuntimeError):
            e2e.main(ARGS, runner=runs)
    else:
        assert e2e.main(ARGS, runner=runs) == e2e.EXIT_OK
    assert runs.calls or raise_in
    (work,) = tmp.glob("smd-e2e-*")
    assert not (work / "random-model").exists(), list(work.rglob("*"))
    assert (work / "reports-0-off").is_dir()  # the rest of the workdir (logs, reports) stays
    assert "removed the temporary random-weight checkpoint" in capsys.readouterr().out


def test_temporary_checkpoint_is_removed_when_a_run_fails(monkeypatch, tmp_path):
    tmp = _temp_runs(monkeypatch, tmp_path)
    runs = SeesModel(ON_REPORTS, fail_mode="on")
    assert e2e.main(ARGS, runner=runs) == e2e.EXIT_RUN_FAILED
    (work,) = tmp.glob("smd-e2e-*")
    assert not (work / "random-model").exists()


@pytest.mark.parametrize("keep", ["--workdir", "--random-weights-dir"])
def test_user_checkpoint_stays(monkeypatch, tmp_path, keep):
    _temp_runs(monkeypatch, tmp_path)
    runs = SeesModel(ON_REPORTS)
    assert e2e.main(ARGS + [keep, str(tmp_path / "mine")], runner=runs) == e2e.EXIT_OK
    model = tmp_path / "mine" / "random-model" if keep == "--workdir" else tmp_path / "mine"
    assert (model / "config.json").exists() and (model / "model.safetensors").exists()


def test_all_runs_failed_does_not_blame_the_plugin(workdir, tmp_path, capsys):
    runs = FakeRuns({}, fail_mode=("off", "on"))
    assert e2e.main(ARGS + workdir, runner=runs) == e2e.EXIT_RUN_FAILED
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("RESULT: FAIL") and last.endswith("(exit 3)"), last
    assert "plugin" not in last and "not loaded" not in last and "engaged" not in last, last
    assert "all 2 runs failed" in last
    assert str(tmp_path / "w" / "run-0-off.log") in last and str(tmp_path / "w" / "run-1-on.log") in last


def test_failed_on_run_is_not_judged_for_engagement(workdir, tmp_path, capsys):
    runs = FakeRuns(ON_REPORTS, fail_mode="on")
    assert e2e.main(ARGS + workdir, runner=runs) == e2e.EXIT_RUN_FAILED
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert "not loaded" not in last and "not engaged" not in last, last
    assert "run 2 (on) failed" in last and str(tmp_path / "w" / "run-1-on.log") in last


# ------------------------------------------------------------------ server route (a fake launch_server)
import signal  # noqa: E402

from sglang_mamba_dedup import e2e_server  # noqa: E402

FAKE_SERVER = str(Path(__file__).resolve().parent / "fake_launch_server.py")


def _fake_command(engine_kwargs, port, flag):
    cmd = e2e_server.server_command(engine_kwargs, port, flag)
    assert cmd[1:3] == ["-m", "sglang.launch_server"] and ("--enable-mamba-conv-dedup" in cmd) == flag
    return [sys.executable, FAKE_SERVER] + cmd[3:]


def _server_runner(**kw):
    def run(spec, mode, report_dir, log_path):
        return e2e_server.run_server(spec, mode, report_dir, log_path, timeout=30, command=_fake_command, **kw)

    return run


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _server_args(tmp_path, workdir="w", prompts=3, tokens=4):
    """The e2e command line of the server-route tests (fake launch_server, token-id prompts)."""
    return [
        "--server",
        "--prompt-format",
        "ids",
        "--vocab-size",
        "100",
        "--num-prompts",
        str(prompts),
        "--max-new-tokens",
        str(tokens),
        "--model-path",
        str(tmp_path),
        "--workdir",
        str(tmp_path / workdir),
    ]


def test_server_route_flag_md5_and_plugin_line(tmp_path, monkeypatch, capsys):
    pid_file = tmp_path / "child.pid"
    monkeypatch.setenv("FAKE_SERVER_CHILD_PID_FILE", str(pid_file))
    monkeypatch.setenv("SGLANG_MAMBA_DEDUP", "1")  # must not reach the server: the flag is what is tested
    code = e2e.main(_server_args(tmp_path), runner=_server_runner())
    out = capsys.readouterr().out
    assert code == e2e.EXIT_OK, out
    assert "-> EQUAL" in out and "engaged: YES" in out and "off as expected: yes" in out
    child = int(pid_file.read_text())
    assert not _alive(child), "the server's child process was left running"


def test_server_route_through_main_without_a_runner(tmp_path, monkeypatch, capsys):
    """--server itself picks the server runner (the fake stands in for launch_server)."""
    monkeypatch.setattr(e2e, "_cuda_problem", lambda kw: None)
    monkeypatch.setattr(
        e2e_server.run_server, "__kwdefaults__", dict(e2e_server.run_server.__kwdefaults__, command=_fake_command)
    )
    code = e2e.main(_server_args(tmp_path, prompts=2, tokens=3) + ["--run-timeout", "30"])
    out = capsys.readouterr().out
    assert code == e2e.EXIT_OK, out
    assert "launch_server with --enable-mamba-conv-dedup" in out
    assert "server log: sglang-mamba-dedup 0.1.0 (SGLang fake" in out, "the server's own plugin line is shown"


def test_server_route_md5_differ_and_failed_start(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FAKE_SERVER_DIFFER", "1")
    args = _server_args(tmp_path, "a", prompts=2, tokens=3)
    assert e2e.main(args, runner=_server_runner()) == e2e.EXIT_MD5_DIFFER
    monkeypatch.delenv("FAKE_SERVER_DIFFER")
    monkeypatch.setenv("FAKE_SERVER_FAIL", "1")
    args = _server_args(tmp_path, "b", prompts=2, tokens=3)
    assert e2e.main(args, runner=_server_runner()) == e2e.EXIT_RUN_FAILED
    assert "exited with 7 before it was healthy" in capsys.readouterr().out


def test_server_is_stopped_on_ctrl_c(tmp_path, monkeypatch):
    pid_file = tmp_path / "child.pid"
    monkeypatch.setenv("FAKE_SERVER_CHILD_PID_FILE", str(pid_file))
    started = {}

    def interrupted(base_url, spec, timeout):
        started["url"] = base_url
        raise KeyboardInterrupt

    monkeypatch.setattr(e2e_server, "generate", interrupted)
    spec = {
        "engine_kwargs": {},
        "prompts": [[1, 2]],
        "prompt_format": "ids",
        "batch_size": 1,
        "sampling_params": {"max_new_tokens": 2},
        "warmup_tokens": 0,
    }
    with pytest.raises(KeyboardInterrupt):
        e2e_server.run_server(spec, "on", tmp_path, tmp_path / "log", timeout=30, command=_fake_command)
    assert started and not _alive(int(pid_file.read_text()))


def test_base_urls_compare_md5_only(tmp_path, monkeypatch, capsys):
    procs = []
    urls = {}
    try:
        for mode in ("off", "on"):
            port = e2e_server.free_port()
            cmd = [sys.executable, FAKE_SERVER, "--port", str(port)] + (
                ["--enable-mamba-conv-dedup"] if mode == "on" else []
            )
            procs.append(
                subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            )
            urls[mode] = f"http://127.0.0.1:{port}"
        code = e2e.main(
            [
                "--base-url-off",
                urls["off"],
                "--base-url-on",
                urls["on"],
                "--prompt-format",
                "ids",
                "--vocab-size",
                "50",
                "--num-prompts",
                "2",
                "--max-new-tokens",
                "3",
                "--workdir",
                str(tmp_path / "w"),
            ]
        )
    finally:
        for p in procs:
            os.killpg(p.pid, signal.SIGKILL)
    out = capsys.readouterr().out
    assert code == e2e.EXIT_OK, out
    assert "-> EQUAL" in out and "not readable" in out and "engaged" not in out.split("plugin status")[1]
    with pytest.raises(SystemExit) as e:
        e2e.main(["--base-url-off", urls["off"]])
    assert e.value.code == 2


def test_server_route_two_rounds_flush_and_track_counts(tmp_path, monkeypatch, capsys):
    requests = tmp_path / "requests.log"
    monkeypatch.setenv("FAKE_SERVER_LOG", str(requests))
    commands = []
    inner = _server_runner()

    def runner(spec, mode, report_dir, log_path):
        res = inner(spec, mode, report_dir, log_path)
        commands.append(" ".join(res["command"]))
        return res

    code = e2e.main(
        _server_args(tmp_path) + ["--json-out", str(tmp_path / "s.json")],
        runner=runner,
    )
    out = capsys.readouterr().out
    assert code == e2e.EXIT_OK, out
    # per server: warm-up, flush, round 1, round 2 (one batch each)
    assert requests.read_text().split() == ["/generate", "/flush_cache", "/generate", "/generate"] * 2
    assert "with track slots 8/8" in out and "engaged: YES (track slots required: 8" in out
    assert "read from the prefix cache: round 1 0 of " in out
    summary = json.loads((tmp_path / "s.json").read_text())
    r2 = summary["runs"][1]["stats"]["rounds"][1]
    assert r2["requests"] == 3 and r2["cached_tokens"] > 0  # round 2 starts from round 1's sequences
    # the deployment defaults reached the server's command line, spelled as its options
    assert all("--cuda-graph-backend-decode full --cuda-graph-backend-prefill disabled" in c for c in commands)
    assert not any("--disable-radix-cache" in c for c in commands)
    assert "--enable-mamba-conv-dedup" in commands[1] and "--enable-mamba-conv-dedup" not in commands[0]


def test_server_route_without_track_commits_is_not_engaged(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FAKE_SERVER_NO_TRACK", "1")
    args = _server_args(tmp_path)
    assert e2e.main(args, runner=_server_runner()) == e2e.EXIT_NOT_ENGAGED
    assert "no commit with track slots ran through our kernel" in capsys.readouterr().out


def test_server_route_throughput_batch1(tmp_path, capsys):
    args = _server_args(tmp_path)
    args += ["--throughput-runs", "1", "--no-throwaway", "--batch1-tokens", "6"]
    assert e2e.main(args, runner=_server_runner()) == e2e.EXIT_OK
    out = capsys.readouterr().out
    assert "batch 1: 6 tokens in" in out and "not compared: 1 off / 1 on runs (3 per mode needed)" in out


def test_launchable_keeps_what_launch_server_knows():
    kw = {"model_path": "/m", "cuda_graph_backend_decode": "full", "new_knob": 1, "mine": 2}
    kept, left = e2e_server.launchable(kw, {"--model-path", "--cuda-graph-backend-decode"}, keep={"mine"})
    assert kept == {"model_path": "/m", "cuda_graph_backend_decode": "full", "mine": 2}
    assert left == ["--new-knob"]
    assert e2e_server.launchable(kw, None) == (kw, [])


def test_launch_server_options_of_the_installed_sglang():
    pytest.importorskip("sglang.srt.server_args")
    opts = e2e_server.launch_server_options()
    assert opts and {"--model-path", "--disable-radix-cache", "--speculative-algorithm"} <= opts
    args = e2e._build_parser().parse_args([])
    args.num_prompts_effective = 2
    kw = e2e.build_engine_kwargs(args, "/m", True)
    kept, left = e2e_server.launchable(kw, opts)
    assert left == [], left  # every default is a launch_server option on this release
    cmd = e2e_server.server_command(kept, 1234, True)
    assert cmd[-1] == "--enable-mamba-conv-dedup" and "--skip-tokenizer-init" in cmd


def test_flush_once_against_a_server(tmp_path):
    port = e2e_server.free_port()
    proc = subprocess.Popen(
        [sys.executable, FAKE_SERVER, "--port", str(port)],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        assert e2e_server.wait_healthy(base, proc, 30) is None
        assert e2e_server.flush_once(base) is True
        assert e2e_server.flush_once(base + "/nowhere") is None  # no such endpoint: not supported
    finally:
        os.killpg(proc.pid, signal.SIGKILL)


def test_deployment_defaults_turn_the_radix_off_where_sglang_refuses_it_with_speculation():
    """Before 0.5.14 SGLang refuses NEXTN + radix cache for hybrid GDN models: the default turns it off, says so."""
    from sglang_mamba_dedup import versions

    kw, notes = e2e.deployment_defaults(sglang_version="0.5.13.post1")
    assert kw["disable_radix_cache"] is True and any("radix cache off instead" in n for n in notes), notes
    kw, notes = e2e.deployment_defaults(sglang_version=versions.SPEC_RADIX_FROM)
    assert kw["disable_radix_cache"] is False and notes == []
