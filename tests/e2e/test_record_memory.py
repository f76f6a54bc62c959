"""``tools/gpu-engine/record_memory.py``: the table of ``run_memory.sh`` (real memory-tight servers, plugin off / on)
from each server's log and launch flags, with the planner run on the same flags beside each server. The SGLang
lines are 0.5.23's wording (as a device run logged them); the plugin's lines are checked once against the plugin's
own code (the real estimator and admission line on SGLang's real estimator), so a change of wording there breaks
this test rather than the device run. The checkpoint is a random-model config (no weights: the planner counts
0 GB of them)."""

from __future__ import annotations

import contextlib
import csv
import importlib.util
import io
import json
import logging
from pathlib import Path

import pytest

from sglang_mamba_dedup.e2e import random_model
from sglang_mamba_dedup.planner import plan, sglang_estimate
from sglang_mamba_dedup.state import STATE
from tests.support import integration as iu

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("record_memory", ROOT / "tools/gpu-engine/record_memory.py")
record_memory = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(record_memory)

DEVICE_MODEL = "/tmp/smd-model-qwen3.5-0.8b"  # run_memory.sh's path of the checkpoint
FREE = "139.13"  # Load weight begin. avail mem= of the target's runner
BUDGET_BYTES = 19 * 2**30  # the plugin's estimator budget line of the on server
LIFT = (
    "--max-mamba-cache-size 1280 or --mem-fraction-static 0.64 (about; `sglang-mamba-dedup plan -- <these flags>` "
    "gives it exactly)"
)


def _flags(model: str) -> list[str]:
    """run_memory.sh's launch flags of the variant default-0.15 (what its argv file holds)."""
    return [
        *("--model-path", model, "--speculative-draft-model-path", model),
        *("--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1"),
        *("--speculative-num-draft-tokens", "4", "--random-seed", "0", "--max-running-requests", "256"),
        *("--skip-tokenizer-init", "--attention-backend", "triton", "--sampling-backend", "pytorch"),
        *("--grammar-backend", "none", "--linear-attn-prefill-backend", "triton", "--tp-size", "1"),
        *("--cuda-graph-backend-decode", "full", "--cuda-graph-backend-prefill", "disabled"),
        *("--mem-fraction-static", "0.15"),
    ]


def _config_dir(tmp_path: Path) -> Path:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(random_model.build_config(random_model.PRESETS["qwen3.5-0.8b"])))
    return model


def _plan(own: list[str], argv: list[str]) -> dict:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert plan.main([*own, "--json", "--", *argv]) == 0
    return json.loads(out.getvalue())


def _server_log(
    t: str,
    *,
    slots: int | None,
    running: int | None,
    kv: int,
    cap: int | None = None,
    plugin: str = "",
    begin: bool = True,
) -> str:
    """A server log in SGLang 0.5.23's wording (model_runner twice: target and MTP draft; memory_pool,
    kv_cache_configurator, scheduler); ``t`` is the minute ``HH:MM`` of its time stamps."""
    lines = [
        f"[2026-12-02 {t}:00] server_args=ServerArgs(model_path='{DEVICE_MODEL}', ...)",
        f"[2026-12-02 {t}:01] Load weight begin. avail mem={FREE} GB" if begin else "",
        f"[2026-12-02 {t}:02] Load weight end. elapsed=0.73 s, type=Qwen3_5ForConditionalGeneration, "
        "avail mem=137.13 GB, mem usage=2.00 GB.",
        f"[2026-12-02 {t}:02] Load weight begin. avail mem=137.12 GB",
        f"[2026-12-02 {t}:02] Load weight end. elapsed=0.13 s, type=Qwen3_5ForCausalLMMTP, avail mem=136.13 GB, "
        "mem usage=0.99 GB.",
        plugin,
    ]
    if slots is not None:
        lines.append(
            f"[2026-12-02 {t}:03] Mamba Cache is allocated. max_mamba_cache_size: {slots}, conv_state size: 0.16GB, "
            "ssm_state size: 4.48GB intermediate_ssm_state_cache size: 3.59GB intermediate_conv_window_cache size: "
            "0.06GB "
        )
        lines += [
            f"[2026-12-02 {t}:05] KV Cache is allocated. dtype: torch.bfloat16, #tokens: {kv}, K size: 4.06 GB, "
            "V size: 4.06 GB",
            f"[2026-12-02 {t}:05] Memory pool end. avail mem=119.67 GB",
        ]
    if cap is not None:
        lines.append(
            f"[2026-12-02 {t}:05] max_running_requests is capped to {cap} by the mamba state cache "
            f"(max_mamba_cache_size={slots}, 5 state slots per request). To raise it: increase "
            "--mamba-full-memory-ratio or --max-mamba-cache-size, or halve the state size with --mamba-ssm-dtype "
            "bfloat16."
        )
    if running is not None:
        lines.append(
            f"[2026-12-02 {t}:40] max_total_num_tokens={kv}, chunked_prefill_size=8192, max_prefill_tokens=16384, "
            f"max_running_requests={running}, context_len=262144, available_gpu_mem=117.47 GB"
        )
    return "\n".join(ln for ln in lines if ln) + "\n"


def _plugin_lines(t: str, *, giveback: bool = False, warning: bool = False) -> str:
    """The on server's plugin lines, in the wording of patches/estimator_patch.py and ledger.py."""
    lines = [
        f"[2026-12-02 {t}:03] sglang-mamba-dedup: mamba cache estimator reserves the deduplicated scratch "
        "(D=4 counted as 3.9321 dense-equivalent draft tokens)",
    ]
    if giveback:
        lines.append(
            f"[2026-12-02 {t}:03] sglang-mamba-dedup: mamba cache estimator gives 0.042 GiB (45097156 bytes) back to "
            "the KV cache, which SGLang's estimate reserved but the pool never allocates (ReplaySSM ring rows)"
        )
    lines.append(
        f"[2026-12-02 {t}:03] sglang-mamba-dedup: mamba cache estimator budget 19.0000 GiB ({BUDGET_BYTES} bytes): "
        "9.8597 GiB reserved for 301 mamba slots and their scratch, the rest for the KV cache"
    )
    if warning:
        lines.append(
            f"[2026-12-02 {t}:03] sglang-mamba-dedup: the mamba state pool caps running requests at 60 of the 256 "
            f"asked for (301 mamba slots, 5 per request with the radix cache). To admit them all: {LIFT}."
        )
    else:
        lines.append(f"[2026-12-02 {t}:03] sglang-mamba-dedup: to admit all 256 requests asked for: {LIFT}")
    lines.append(
        f"[2026-12-02 {t}:04] sglang-mamba-dedup: mamba memory ledger: MambaPool allocates 8.397 GiB, the estimator "
        "reserved 8.397 GiB; GiB by buffer: conv 0.159, temporal 4.518"
    )
    return "\n".join(lines)


def test_parse_log_reads_sglang_and_the_plugin_lines():
    text = _server_log("01:01", slots=301, running=60, kv=705514, cap=60, plugin=_plugin_lines("01:01", giveback=True))
    got = record_memory.parse_log(text)
    assert got["free_before_weights_gb"] == 139.13 and got["free_after_weights_gb"] == 137.13
    assert got["weights_gb"] == 2.99 and got["weight_loads"] == 2  # target + draft
    assert got["mamba_slots"] == 301 and got["running_requests"] == 60 and got["max_total_num_tokens"] == 705514
    assert got["free_after_pools_gb"] == 119.67 and got["mamba_gb"] == 8.29 and got["replayssm"] is False
    assert got["sglang_cap_warning"] == 60 and got["estimator_budget_bytes"] == BUDGET_BYTES
    assert got["plugin_lift"] == LIFT and got["giveback_gib"] == 0.042
    assert got["ledger_allocated_gib"] == 8.397 and got["ledger_reserved_gib"] == 8.397
    # the WARNING form (a release where SGLang does not warn of the cap itself): the lift after "To admit them all:"
    warned = record_memory.parse_log(
        _server_log("01:01", slots=301, running=60, kv=1, plugin=_plugin_lines("01:01", warning=True))
    )
    assert warned["plugin_lift"] == LIFT and warned["admission_cap"] == 60 and "giveback_gib" not in warned
    off = record_memory.parse_log(_server_log("00:58", slots=299, running=59, kv=1))
    assert not {"estimator_budget_bytes", "plugin_lift", "giveback_gib", "sglang_cap_warning"} & off.keys()


@pytest.mark.usefixtures("allow_cpu")
def test_parse_log_reads_the_plugin_lines_as_the_plugin_writes_them(caplog, monkeypatch):
    """The budget, give-back and admission lines from the plugin's real code on SGLang's real estimator."""
    cp = iu.make_cache_params(num_layers=3, conv_dim=40, conv_kernel=4, num_heads=2, head_dim=8, state_size=4)
    STATE.warned.discard("admission")
    with iu.cpu_stock_paths(), iu.plugin(True), caplog.at_level(logging.INFO, logger="sglang_mamba_dedup"):
        sglang_estimate.run(cp, total_rest_gb=0.0002, device="cpu", max_running_requests=16, gdn=True, replayssm=True)
    text = "\n".join(f"[2026-12-02 10:00:31] {r.getMessage()}" for r in caplog.records)
    got = record_memory.parse_log(text)
    assert got["estimator_budget_bytes"] == round(0.0002 * 2**30)
    assert got["plugin_lift"].startswith("--max-mamba-cache-size ")
    assert got["giveback_gib"] >= 0  # ReplaySSM: SGLang prices ring rows and scratch the pool never allocates


def test_log_window_skips_a_malformed_time_stamp():
    text = (
        "[2026-12-02 25:61:00] a torn line\n[2026-12-02 01:01:08] Load weight begin.\n"
        "[2026-12-02 01:01:24] max_running_requests=51\n[2026-19-99 01:01:30 TP0] another\n"
    )
    lo, hi = record_memory.log_window(text)
    assert (lo.minute, lo.second, hi.second) == (1, 8, 24)
    assert record_memory.log_window("[2026-12-02 99:00:00] only a torn one\n") is None
    assert record_memory.map_models(
        ["--model-path", "/tmp/smd-model-x", "--draft=/tmp/smd-model-x/d", "--other", "/tmp/o"],
        [("/tmp/smd-model-", "/data/m-")],
    ) == ["--model-path", "/data/m-x", "--draft=/data/m-x/d", "--other", "/tmp/o"]


def _write(work: Path, name: str, log: str, argv: list[str]) -> None:
    (work / f"{name}.log").write_text(log)
    (work / f"{name}.argv").write_text("".join(f"{a}\n" for a in argv))


def test_record_memory_puts_the_planner_beside_each_server(tmp_path, capsys):
    out, work = tmp_path / "out", tmp_path / "work"
    out.mkdir()
    work.mkdir()
    model = _config_dir(tmp_path)
    local = _flags(str(model))
    # what the planner says for these flags: the servers' numbers are made from it, one row agreeing, one not
    pred = _plan(["--gpu-memory-gb", FREE], local)
    at = _plan(["--rest-gb", repr(BUDGET_BYTES / 2**30)], local)
    stock, plugin = pred["stock"], at["plugin"]
    off_kv = round(stock["kv_tokens"] * 1.005)  # within 1 %
    off_log = _server_log("00:58", slots=stock["mamba_slots"], running=stock["running_requests"], kv=off_kv, cap=50)
    off_log += "[2026-12-02 00:61:99] a torn time stamp\n[2026-13-02 00:59:30 TP0] another\n"
    _write(work, "default-0.15-off", off_log, _flags(DEVICE_MODEL))
    on_log = _server_log(
        "01:01",
        slots=plugin["mamba_slots"] + 2,
        running=plugin["running_requests"],
        kv=plugin["kv_tokens"],
        cap=51,
        plugin=_plugin_lines("01:01", giveback=True),
    )
    _write(work, "default-0.15-on", on_log, _flags(DEVICE_MODEL))
    (work / "stray.log").write_text("not a server of run_memory.sh\n")
    # one GPU process per server, sampled every 2 s inside its log's window; one sample outside either
    (out / "gpu-apps.csv").write_text(
        "\n".join(
            [f"2026/12/02 00:58:{s:02d}.123, 4001, {20000 + s} MiB" for s in range(1, 40, 2)]
            + [f"2026/12/02 01:01:{s:02d}.456, 4002, {30000 + s} MiB" for s in range(1, 40, 2)]
            + ["2026/12/02 03:00:00.000, 4003, 99999 MiB"]
        )
    )

    assert record_memory.main([str(out), str(work), "--model-map", f"{DEVICE_MODEL}={model}"]) == 0
    printed = capsys.readouterr()
    rows = {r["mode"]: r for r in json.loads((out / "memory.json").read_text())}
    assert rows["off"]["argv"] == local and rows["off"]["variant"] == "default-0.15"
    assert rows["off"]["peak_gpu_mib"] == 20039 and rows["on"]["peak_gpu_mib"] == 30039
    assert "stray.log" in printed.err
    # the planner columns are plan.main's for the same flags: stock beside off, the plugin's beside on
    for mode, key in (("off", "stock"), ("on", "plugin")):
        p = rows[mode]["prediction"]
        for field in ("mamba_slots", "slots_per_request", "running_requests", "reserved_gb", "kv_tokens"):
            assert p[field] == pred[key][field], (mode, field)
        assert p["fraction_needed"] == pred[key]["fraction_needed"]
        assert p["budget_gb"] == pred["budget_gb"] and p["weights_gb"] == pred["weights"]["gb"] == 0.0
    assert rows["off"]["at_budget"] is None  # a stock server logs no estimator budget
    b = rows["on"]["at_budget"]
    assert b["budget_gb"] == at["budget_gb"] == 19.0
    assert (b["mamba_slots"], b["running_requests"], b["kv_tokens"]) == (
        plugin["mamba_slots"],
        plugin["running_requests"],
        plugin["kv_tokens"],
    )
    assert rows["on"]["estimator_budget_bytes"] == BUDGET_BYTES and rows["on"]["plugin_lift"] == LIFT
    assert rows["off"]["agreement"] == {
        "prediction_mamba_slots": True,
        "prediction_running_requests": True,
        "prediction_kv_tokens": True,
        "at_budget_mamba_slots": None,
        "at_budget_running_requests": None,
        "at_budget_kv_tokens": None,
    }
    assert rows["on"]["agreement"]["at_budget_mamba_slots"] is False
    assert rows["on"]["agreement"]["at_budget_running_requests"] is True
    assert rows["on"]["agreement"]["at_budget_kv_tokens"] is True

    md = (out / "memory.md").read_text()
    p_on = rows["on"]["prediction"]
    frac = pred["plugin"]["fraction_needed"]
    assert (
        f"| default-0.15 | on | {plugin['mamba_slots'] + 2} / {p_on['mamba_slots']} / {plugin['mamba_slots']} "
        f"| {plugin['running_requests']} / {p_on['running_requests']} / {plugin['running_requests']} "
        f"| {plugin['kv_tokens']} / {p_on['kv_tokens']} ("
    ) in md
    assert (
        f"| 8.397 / 8.397 | capped to 51 | lift: {LIFT}; gives back 0.042 GiB "
        f"| {'not capped' if frac is None else format(frac, '.2f')} | 2.99 / 0.00 | 139.13 |"
    ) in md
    assert f"| {off_kv} / {stock['kv_tokens']} (-0." in md and "| - | capped to 50 | - | " in md
    assert "| default-0.15 | off | yes | yes | yes | - | - | - |" in md
    assert "| default-0.15 | on |" in md.split("agreement:")[1] and "| NO | yes | yes |" in md
    assert md.split("agreement:")[0].strip() in printed.out and "agreement:" in printed.out
    with open(out / "memory.csv") as f:
        csv_rows = list(csv.DictReader(f))
    assert [r["mode"] for r in csv_rows] == ["off", "on"]
    assert (
        csv_rows[1]["at_budget_mamba_slots"] == str(plugin["mamba_slots"])
        and csv_rows[0]["at_budget_mamba_slots"] == ""
    )
    print(printed.out)


def test_record_memory_gives_dash_and_exit_1_when_a_line_is_missing(tmp_path, capsys):
    work, out = tmp_path / "work", tmp_path / "out"
    work.mkdir()
    model = _config_dir(tmp_path)
    # the on server died after the weights: no mamba cache line, no max_running_requests; the planner still runs
    died = _server_log("01:01", slots=None, running=None, kv=0)
    _write(work, "default-on", died, _flags(str(model)))
    # a server whose checkpoint is not here (no --model-map): the planner cannot run on it
    _write(work, "lost-off", _server_log("00:58", slots=299, running=59, kv=827146), _flags(DEVICE_MODEL + "-gone"))
    (work / "noargv-off.log").write_text(_server_log("00:50", slots=1, running=1, kv=1))
    assert record_memory.main([str(out), str(work)]) == 1
    rows = {r["variant"]: r for r in json.loads((out / "memory.json").read_text())}
    assert set(rows) == {"default", "lost"}  # a log without its argv file is no server row
    p = rows["default"]["prediction"]
    assert p is not None and "the log has no mamba_slots line" in rows["default"]["errors"]
    assert rows["lost"]["prediction"] is None and "planner (prediction)" in rows["lost"]["errors"][0]
    md = (out / "memory.md").read_text()
    assert (
        f"| default | on | - / {p['mamba_slots']} / - | - / {p['running_requests']} / - | - / {p['kv_tokens']} |" in md
    )
    assert "| lost | off | 299 / - / - | 59 / - / - | 827146 / - | - | - | - | - | 2.99 / - | 139.13 |" in md
    assert "| default | on | - | - | - | - | - | - |" in md
    printed = capsys.readouterr()
    assert "lost off: planner (prediction)" in printed.out and "noargv-off.log" in printed.err
    with open(out / "memory.csv") as f:
        assert [r["variant"] for r in csv.DictReader(f)] == ["default", "lost"]
