"""``tools/gpu-engine/record_memory.py``: the table of ``run_memory.sh`` (issue 18's memory-tight servers) from server
logs, with the planner beside each server. The SGLang lines are 0.5.23's wording; the plugin's lines come from the
plugin's own code (the real estimator and admission check, the ledger's formatter), so a change of wording there
breaks this test rather than the device run."""

from __future__ import annotations

import csv
import importlib.util
import json
import logging
from pathlib import Path

import pytest

from sglang_mamba_dedup import ledger
from sglang_mamba_dedup.cli import plan
from sglang_mamba_dedup.e2e import random_model
from sglang_mamba_dedup.patches import pool_config
from sglang_mamba_dedup.testing import estimator
from tests.support import integration as iu

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("record_memory", ROOT / "tools/gpu-engine/record_memory.py")
record_memory = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(record_memory)

pytestmark = pytest.mark.usefixtures("allow_cpu")

FRACTION, ASKED = 0.15, 256


def _plugin_lines(caplog, monkeypatch) -> str:
    """The estimator and admission lines of the plugin, from its real code on SGLang's real estimator, and a
    ledger line from the ledger's formatter."""
    monkeypatch.setattr(pool_config, "_admission_warned", [])
    cp = iu.make_cache_params(num_layers=3, conv_dim=40, conv_kernel=4, num_heads=2, head_dim=8, state_size=4)
    with iu.cpu_stock_paths(), iu.plugin(True), caplog.at_level(logging.INFO, logger="sglang_mamba_dedup"):
        estimator.run(cp, total_rest_gb=0.0002, device="cpu", max_running_requests=16, gdn=True)
        ledger.log(
            {
                "pool": "MambaPool",
                "buffers": {"conv": {"logical": 3 << 28, "physical": 3 << 28}},
                "allocated_bytes": 3 << 28,
                "reserved_bytes": 3 << 28,
                "unreserved_bytes": 0,
            }
        )
    return "\n".join(f"[2026-12-02 10:00:31] {r.getMessage()}" for r in caplog.records)


def _server_log(t0: int, slots: int, running: int, plugin: str = "", replayssm: bool = False) -> str:
    """A server log in SGLang 0.5.23's wording (model_runner, memory_pool, kv_cache_configurator, scheduler)."""
    ring = "[2026-12-02 10:00:{:02d}] GDN ReplaySSM ring buffers allocated (record_len=4, fold=1): d=0.038GB\n"
    return (
        f"[2026-12-02 10:00:{t0:02d}] server_args=ServerArgs(model_path='/tmp/m', ...)\n"
        f"[2026-12-02 10:00:{t0 + 1:02d}] Load weight begin. avail mem=139.31 GB\n"
        f"[2026-12-02 10:00:{t0 + 2:02d}] Load weight end. elapsed=1.20 s, type=Qwen3_5ForConditionalGeneration, "
        "avail mem=137.51 GB, mem usage=1.60 GB.\n"
        + (ring.format(t0 + 3) if replayssm else "")
        + f"[2026-12-02 10:00:{t0 + 3:02d}] Mamba Cache is allocated. max_mamba_cache_size: {slots}, "
        "conv_state size: 0.13GB, ssm_state size: 3.69GB intermediate_ssm_state_cache size: 4.50GB "
        "intermediate_conv_window_cache size: 0.08GB \n"
        f"[2026-12-02 10:00:{t0 + 4:02d}] Memory pool end. avail mem=116.40 GB\n"
        + plugin
        + f"\n[2026-12-02 10:00:{t0 + 5:02d} TP0] max_total_num_tokens=412345, chunked_prefill_size=8192, "
        f"max_prefill_tokens=16384, max_running_requests={running}, context_len=262144, available_gpu_mem=112.02 GB\n"
        f"[2026-12-02 10:00:{t0 + 9:02d}] Decode batch, #running-req: 8\n"
    )


def _config_dir(tmp_path: Path) -> Path:
    model = tmp_path / "model"
    model.mkdir()
    dims = random_model.resolve_dims("qwen3.5-0.8b")
    (model / "config.json").write_text(json.dumps(random_model.build_config(dims)))
    return model


def test_parse_log_reads_sglang_and_the_plugin_lines(caplog, monkeypatch):
    text = _server_log(10, slots=211, running=70, plugin=_plugin_lines(caplog, monkeypatch))
    got = record_memory.parse_log(text)
    assert got["free_before_weights_gb"] == 139.31 and got["free_after_weights_gb"] == 137.51
    assert got["weights_gb"] == 1.60 and got["free_after_pools_gb"] == 116.40
    assert got["mamba_slots"] == 211 and got["running_requests"] == 70 and got["max_total_num_tokens"] == 412345
    assert got["mamba_buffers_gb"] == {
        "conv_state": 0.13,
        "ssm_state": 3.69,
        "intermediate_ssm_state_cache": 4.50,
        "intermediate_conv_window_cache": 0.08,
    }
    assert got["mamba_gb"] == 8.4 and got["replayssm"] is False
    assert got["ledger_allocated_gib"] == 0.75 and got["ledger_reserved_gib"] == 0.75
    # the admission line the plugin really logs: its cap is what the estimator admits
    assert 0 < got["admission_cap"] < 16
    assert record_memory.parse_log(_server_log(10, 9, 3, replayssm=True))["replayssm"] is True


def test_record_memory_puts_the_planner_beside_each_server(tmp_path, capsys):
    out, work = tmp_path / "out", tmp_path / "work"
    out.mkdir()
    work.mkdir()
    (work / "run-1-off.log").write_text(_server_log(10, slots=210, running=70))
    (work / "run-2-on.log").write_text(_server_log(30, slots=212, running=70))
    # one GPU process per server, sampled every 2 s inside its log's window; one sample outside either
    (out / "gpu-apps.csv").write_text(
        "\n".join(
            [f"2026/12/02 10:00:{s:02d}.123, 4001, {20000 + s} MiB" for s in range(11, 20, 2)]
            + [f"2026/12/02 10:00:{s:02d}.456, 4002, {30000 + s} MiB" for s in range(31, 40, 2)]
            + ["2026/12/02 10:00:59.000, 4003, 99999 MiB"]
        )
    )
    model = _config_dir(tmp_path)
    argv = [str(out), "--model-path", str(model), "--max-running-requests", str(ASKED)]
    argv += ["--mem-fraction-static", str(FRACTION), f"default={work}"]
    assert record_memory.main(argv) == 0
    rows = {r["mode"]: r for r in json.loads((out / "memory.json").read_text())}
    assert rows["off"]["peak_gpu_mib"] == 20019 and rows["on"]["peak_gpu_mib"] == 30039
    # the planner with SGLang's budget: the GPU's memory = the free memory before the weights, the weights =
    # what they took of it
    args = plan.parser().parse_args(
        ["--model-path", str(model), "--max-running-requests", str(ASKED), "--mem-fraction-static", str(FRACTION)]
        + ["--gpu-memory-gb", "139.31", "--weights-gb", "1.8000"]
    )
    doc = plan.plan(args)
    for mode, key in (("off", "stock"), ("on", "plugin")):
        assert rows[mode]["planner"]["mamba_slots"] == doc[key]["mamba_slots"]
        assert rows[mode]["planner"]["running_requests"] == doc[key]["running_requests"]
        assert rows[mode]["planner"]["budget_gb"] == round(139.31 * FRACTION - 1.8, 3)
    table = (out / "memory.md").read_text()
    assert (
        f"| default | on | no | 212 / {doc['plugin']['mamba_slots']} | 70 / {doc['plugin']['running_requests']} |"
        in table
    )
    with open(out / "memory.csv") as f:
        assert [r["mode"] for r in csv.DictReader(f)] == ["off", "on"]
    assert "| default | off |" in capsys.readouterr().out


def test_record_memory_fails_when_a_server_line_is_missing(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "run-1-off.log").write_text(_server_log(10, slots=210, running=70))
    (work / "run-2-on.log").write_text("[2026-12-02 10:00:30] the server died before its pools\n")
    argv = [str(tmp_path / "out"), "--shape", "qwen3.5-0.8b", "--max-running-requests", "256"]
    argv += ["--mem-fraction-static", "0.15", f"default={work}"]
    assert record_memory.main(argv) == 1
    rows = {r["mode"]: r for r in json.loads((tmp_path / "out" / "memory.json").read_text())}
    assert rows["on"]["planner"] is None and rows["off"]["planner"]["mamba_slots"] > 0
    assert "| default | on | no | - / - |" in (tmp_path / "out" / "memory.md").read_text()
