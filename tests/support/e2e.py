"""Shared fakes of the e2e tests (tests/e2e): status reports as the plugin writes them, a greedy prefix-caching
engine, and the runs that stand in for the engine processes (no GPU, no SGLang)."""

import json
import os
from pathlib import Path

from sglang_mamba_dedup.e2e import workload


def status_report(
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
    """A status report as the plugin writes it (defaults: mode on, our layout saving half, 10 commits, all ours
    and all with track slots)."""
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


def write_reports(d: Path, docs):
    d.mkdir(parents=True, exist_ok=True)
    for doc in docs:
        (d / f"status-{doc['pid']}.json").write_text(json.dumps(doc))


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


def plan_spec(prompts, n=4, batch1=None, warm=-1, bs=0):
    return {
        "engine_kwargs": {},
        "prompts": prompts,
        "prompt_format": "ids",
        "sampling_params": {"temperature": 0.0, "max_new_tokens": n, "ignore_eos": True},
        "batch_size": bs,
        "warmup_tokens": warm,
        "round2_suffixes": workload.round2_suffixes(len(prompts), "ids", 1000),
        "batch1": batch1,
    }


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
        write_reports(report_dir, docs)
        nth = sum(1 for m, _ in self.calls if m == mode) - 1
        rates = self.rates[mode]
        idx = self.differ.get(mode)
        fake = FakeEngine(rate=rates[nth % len(rates)], differ_prompt=None if idx is None else spec["prompts"][idx])
        plan = workload.run_plan(spec, fake.generate, fake.flush, fake.clock)
        return {
            "ok": True,
            "pid": parent,
            **plan,
            "versions": {"sglang": "0.5.23", "torch": "x"},
            "gpu": {"name": "FakeGPU", "count": 1},
        }


ON_REPORTS = {"on": [status_report(0)], "off": [status_report(0, mode="off", state="upstream", calls=5, ours=0)]}


FAULT_REPORTS = {**ON_REPORTS, "fault": [status_report(0, fault="commit_step0")]}


ARGS = ["--random-weights", "--random-preset", "tiny", "--num-prompts", "2", "--max-new-tokens", "4"]


def stderr_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]
