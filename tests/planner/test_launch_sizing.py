"""Sizing on the configuration a real launch resolves: ``launch_server``'s command line through SGLang's own parser
and resolution (:mod:`sglang_mamba_dedup.planner.launch_config`), then SGLang's real estimator, the planner, and SGLang's
real pool with the plugin's ledger.

Why: on the H200 (SGLang 0.5.23, 2026-12-02, ``../shared/reports/memory-h200-2026-12-02.md``) a server launched with
the radix cache and overlap scheduling (the defaults) held 5 mamba slots per running request, where the planner,
which built ``ServerArgs(**kw)`` by hand, assumed 3; and under ReplaySSM the plugin's estimator reserved 0.777 GiB
that the pool never allocated (ring rows for every request asked for, the pool's for those it admits).
"""

from __future__ import annotations

import json
import logging
import math

import pytest

import sglang_mamba_dedup
from sglang_mamba_dedup import ledger, sizing
from sglang_mamba_dedup.e2e import random_model
from sglang_mamba_dedup.planner import launch_config, plan, sglang_estimate
from tests.support import integration as iu

pytestmark = [pytest.mark.release, pytest.mark.usefixtures("allow_cpu")]

GiB = 1 << 30


@pytest.fixture(scope="module")
def qwen35_dir(tmp_path_factory):
    """A Qwen3.5-0.8B + MTP checkpoint directory as the e2e builds it (config only: no weights are read here)."""
    path = tmp_path_factory.mktemp("qwen3.5-0.8b")
    (path / "config.json").write_text(json.dumps(random_model.build_config(random_model.PRESETS["qwen3.5-0.8b"])))
    return path


def launch_flags(model, *extra: str) -> list[str]:
    """The launch of the H200 memory run (``tools/gpu-engine/run_memory.sh`` through the e2e's server route)."""
    return [
        "--model-path", str(model), "--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3",
        "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
        "--speculative-draft-model-path", str(model), "--max-running-requests", "256", "--skip-tokenizer-init",
        "--mem-fraction-static", "0.15", *extra,
    ]  # fmt: skip


def _refused_by_release(model, extra) -> str | None:
    """SGLang's own refusal of this launch on the installed release (0.5.12 ... 0.5.13.post1 resolve the mamba
    strategy ``auto`` to no_buffer, which they refuse beside the radix cache and speculative decoding)."""
    try:
        launch_config.resolve(launch_flags(model, *extra), gpu_memory_gb=139.13)
    except launch_config.LaunchError as exc:
        return str(exc)
    return None


#: slots per running request of a real server: 1 for the request + the extra buffer's track slots, 2 with
#: overlap scheduling (ping-pong), 1 without; the radix cache off keeps 1 in all. Measured on the H200 for the
#: default launch (5: "256 mamba slots, 5 per request with the radix cache", max_running_requests=51).
EXPECTED_RATIO = {"default": 5, "no-overlap": 3, "no-radix": 1}
EXTRA = {"default": (), "no-overlap": ("--disable-overlap-schedule",), "no-radix": ("--disable-radix-cache",)}


@pytest.mark.parametrize("variant", list(EXPECTED_RATIO))
def test_planner_matches_launch_slots_per_request(variant, qwen35_dir, capsys):
    argv = ["--gpu-memory-gb", "139.13", "--weights-gb", "3.0", "--json", "--", *launch_flags(qwen35_dir)]
    argv += EXTRA[variant]
    rc = plan.main(argv)
    out, err = capsys.readouterr()
    refused = _refused_by_release(qwen35_dir, EXTRA[variant])
    if refused:  # the server would not start either: the planner says SGLang's own reason, exit 2
        assert rc == 2 and "SGLang refused the launch flags" in err and out == "", err
        return
    assert rc == 0, err
    doc = json.loads(out)
    for key in ("stock", "plugin"):
        assert doc[key]["slots_per_request"] == EXPECTED_RATIO[variant], (variant, doc["launch"]["resolved"])
        assert doc[key]["running_requests"] == min(256, doc[key]["mamba_slots"] // EXPECTED_RATIO[variant])
    resolved = doc["launch"]["resolved"]
    assert resolved["overlap_schedule"] is (variant != "no-overlap")
    assert resolved["radix_cache"] is (variant != "no-radix")
    if variant == "default":
        assert resolved["mamba_extra_buffer"] is True


def test_planner_matches_launch_slots_by_sglangs_arithmetic(qwen35_dir, capsys):
    """The stock slot count for a given estimator budget, by independent arithmetic of SGLang's joint solve
    (``K = (B r/(1+r) - s (1+D)) // (s (1 + D/ratio))``, ``s`` a slot's dense state, r = 0.9) with the
    launch's ratio: 5 slots per request, not 3."""
    if _refused_by_release(qwen35_dir, ()):
        pytest.skip("this release refuses the default launch (no_buffer with the radix cache)")
    if not _reads_pp_scale():
        pytest.skip("the joint solve with the padding slot in both terms is 0.5.17's (before, another solve)")
    rest = 17.8695  # the H200 default server's budget: 136.13 GB after the weights - 139.13 GB x 0.85
    rc = plan.main(["--rest-gb", str(rest), "--json", "--", *launch_flags(qwen35_dir)])
    out, err = capsys.readouterr()
    assert rc == 0, err
    stock = json.loads(out)["stock"]
    layers, conv, ssm = 18, 6144 * 3 * 2, 16 * 128 * 128 * 4
    s, d, ratio = layers * (conv + ssm), 4, 5
    budget = rest * 0.9 / 1.9 * GiB
    assert stock["mamba_slots"] == math.floor((budget - s * (1 + d)) // (s * (1 + d / ratio)))


def test_planner_from_flags_gives_the_plan_at_the_load_margin_too(qwen35_dir, capsys):
    """From the flags alone the planner cannot see what another GPU stack's start-up takes: it plans again at
    ``plan.LOAD_MARGIN_GB`` less budget and at ``plan.FREE_READING_GB`` more (the free memory read has two
    decimals), the same numbers ``--rest-gb`` gives there, and says so; with ``--rest-gb`` (a server's logged
    budget) there is no range to give."""
    if _refused_by_release(qwen35_dir, ()):
        pytest.skip("this release refuses the default launch (no_buffer with the radix cache)")
    flags = ["--json", "--", *launch_flags(qwen35_dir)]
    assert plan.main(["--gpu-memory-gb", "139.13", "--weights-gb", "3.0", *flags]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert plan.main(["--rest-gb", str(doc["budget_gb"] - plan.LOAD_MARGIN_GB), *flags]) == 0
    low = json.loads(capsys.readouterr().out)
    assert plan.main(["--rest-gb", str(doc["budget_gb"] + plan.FREE_READING_GB), *flags]) == 0
    high = json.loads(capsys.readouterr().out)
    for key in ("stock", "plugin"):
        margin = doc[key]["load_margin"]
        assert margin["high"] == {k: high[key][k] for k in ("mamba_slots", "running_requests")}
        assert margin["high"]["mamba_slots"] >= doc[key]["mamba_slots"]
        assert margin["gb"] == plan.LOAD_MARGIN_GB
        assert (margin["mamba_slots"], margin["running_requests"]) == (
            low[key]["mamba_slots"],
            low[key]["running_requests"],
        )
        assert margin["mamba_slots"] < doc[key]["mamba_slots"]
        assert not low[key].get("load_margin")
    assert plan.main(["--gpu-memory-gb", "139.13", "--weights-gb", "3.0", "--", *launch_flags(qwen35_dir)]) == 0
    text = capsys.readouterr().out
    assert (
        "from the flags alone" in text and f"plugin {doc['plugin']['load_margin']['mamba_slots']} mamba slots" in text
    )
    assert (
        f"read half a hundredth higher: stock {doc['stock']['load_margin']['high']['mamba_slots']} mamba slots" in text
    )


def _reads_pp_scale() -> bool:
    """0.5.17+: the estimator of the installed release prices stages and padding rows as 0.5.23 does."""
    try:
        from sglang.srt.mem_cache.kv_cache_configurator import KVCacheConfigurator
    except ImportError:
        return False
    return "pp_layer_scale" in KVCacheConfigurator._handle_max_mamba_cache.__code__.co_varnames


LEDGER_VARIANTS = {
    "default": (),
    "no-overlap": ("--disable-overlap-schedule",),
    "no-radix": ("--disable-radix-cache", "--max-running-requests", "12"),
    "replayssm": ("--enable-linear-replayssm-spec",),
}


@pytest.mark.parametrize("variant", list(LEDGER_VARIANTS))
def test_ledger_reserved_equals_allocated_on_the_launch_config(variant, qwen35_dir, caplog):
    """The server's real resolved configuration (its launch flags through SGLang's parser and resolution), SGLang's
    real estimator with the plugin, then SGLang's real pool at the sizes it chose, with the launch's extra buffer
    and ReplaySSM: the reservation equals the pool's allocation (within the ledger's bookkeeping tolerance; at most
    one slot's state of rounding the other way). ReplaySSM with the mamba pool capping the requests is the case
    the H200 hit (SGLang prices ring rows for every request asked for, the pool allocates the admitted ones')."""
    extra = LEDGER_VARIANTS[variant]
    if variant == "replayssm" and "enable_linear_replayssm_spec" not in sglang_estimate.server_args_fields():
        pytest.skip("no --enable-linear-replayssm-spec on this release")
    refused = _refused_by_release(qwen35_dir, extra)
    if refused:
        pytest.skip(f"this release refuses the launch: {refused}")
    launch = launch_config.resolve(launch_flags(qwen35_dir, *extra), gpu_memory_gb=139.13)
    st = launch.settings
    cp, _ = plan.launch_cache_params(launch)
    pool_kw = dict(enable_mamba_extra_buffer=st["mamba_extra_buffer"])
    if st["replayssm"]:
        pool_kw.update(enable_linear_replayssm_spec=True)
    with iu.cpu_stock_paths(), iu.plugin(True), caplog.at_level(logging.INFO, logger="sglang_mamba_dedup"):
        ledger.forget_reservation()
        launch_config.publish(launch.server_args)
        est = sglang_estimate.run(cp, total_rest_gb=3.0, launch=launch, device="cpu")
        if variant != "no-radix":
            assert est.running < st["max_running_requests"], est  # the mamba pool caps: the case the server hit
        pool = iu.build_pool(
            cache_params=cp, size=est.running, mamba_size=est.slots, draft_tokens=4, topk=1, extra=pool_kw
        )
        doc = sglang_mamba_dedup.memory_ledger()
    allocated, reserved = doc["allocated_bytes"], doc["reserved_bytes"]
    if st["replayssm"]:
        assert "replayssm_g" in doc["buffers"], "the pool really keeps the ReplaySSM rings"
    slot = sizing.request_bytes(cp, None, dedup=True).state
    assert allocated - reserved <= ledger.tolerance(doc), (reserved, allocated, est)
    assert reserved - allocated <= slot, (reserved, allocated, est)
    del pool


def test_planner_matches_launch_from_planner_flags(qwen35_dir, capsys):
    """``plan --model-path`` with the planner's own flags stands for the same launch (NEXTN, the draft from the
    same checkpoint): 5 slots per request, as the server measured (the planner said 3 before it resolved)."""
    if _refused_by_release(qwen35_dir, ()):
        pytest.skip("this release refuses the default launch (no_buffer with the radix cache)")
    argv = ["--model-path", str(qwen35_dir), "--max-running-requests", "256", "--mem-fraction-static", "0.15"]
    rc = plan.main([*argv, "--gpu-memory-gb", "139.13", "--weights-gb", "3.0", "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["stock"]["slots_per_request"] == doc["plugin"]["slots_per_request"] == EXPECTED_RATIO["default"]
    assert doc["stock"]["running_requests"] == doc["stock"]["mamba_slots"] // 5 < 256


@pytest.mark.parametrize("pp", [1, 2], ids=["pp1", "pp2"])
def test_pipeline_stage_top_up_prices_the_stage_only(pp):
    """Audit B1: under pipeline parallelism (0.5.17+) SGLang charges a stage only its own mamba layers; the
    plugin's prediction did not, and topped up a second copy of the stage's pool (21 GiB of 60 on Qwen3-Next-80B at
    PP 2). The top-up is at most one slot's state (the padding rows' rounding), and the plugin reserves no more
    than a few percent over stock (its extra slots and scratch rows), never a second pool."""
    from sglang_mamba_dedup.offline import shapes
    from sglang_mamba_dedup.offline.sglang_pool import cache_params

    cp = cache_params(shapes.QWEN3_NEXT_80B)
    cp = type(cp)(shape=cp.shape, layers=[i for i in range(48) if i % 4 != 3], dtype=cp.dtype)
    out = {}
    for on in (False, True):
        with iu.plugin(on):
            ledger.forget_reservation()
            est = sglang_estimate.run(cp, total_rest_gb=60.0, max_running_requests=64, extra={"pp_size": pp})
            out[on] = (est, ledger.last_estimate())
    (stock, _), (ours, decision) = out[False], out[True]
    per = sizing.request_bytes(cp, 4, dedup=True)
    # at most the pool's padding rows (0.5.12 ... 0.5.15 price neither the padding slot nor the padding scratch row)
    assert decision.get("top_up_bytes", 0) <= per.state + per.scratch, decision
    assert ours.slots >= stock.slots
    # more slots and rows cost more, but never a second pool: the stage's whole reservation stays within 5 %
    assert ours.reserved_bytes <= stock.reserved_bytes * 1.05, (stock, ours)


@pytest.mark.parametrize("asked", [40, 256])
def test_plan_answers_what_fraction_admits_n_requests(asked, qwen35_dir, capsys):
    """``plan -- ... --max-running-requests N`` answers "what fraction do I need for N": at the printed fraction the
    same launch admits all N, a hundredth below it does not (checked by planning both)."""
    if _refused_by_release(qwen35_dir, ()):
        pytest.skip("this release refuses the default launch (no_buffer with the radix cache)")

    def run(fraction: float | None = None) -> dict:
        flags = launch_flags(qwen35_dir, "--max-running-requests", str(asked))
        if fraction is not None:
            flags += ["--mem-fraction-static", f"{fraction:.2f}"]
        rc = plan.main(["--gpu-memory-gb", "139.13", "--weights-gb", "3.0", "--json", "--", *flags])
        out, err = capsys.readouterr()
        assert rc == 0, err
        return json.loads(out)["plugin"]

    need = run()["fraction_needed"]
    assert need is not None and 0 < need < 1
    at = run(need)
    assert at["running_requests"] == asked and at["kv_cache_gb"] > 0
    below = run(need - 0.01)
    assert below["running_requests"] < asked or below["kv_cache_gb"] <= 0
