"""``sglang-mamba-dedup plan``: SGLang's own estimator, stock and with the plugin, for a model's sizing options."""

from __future__ import annotations

import json
import os

import pytest

from sglang_mamba_dedup import sizing
from sglang_mamba_dedup.e2e import random_model
from sglang_mamba_dedup.offline import shapes
from sglang_mamba_dedup.offline.sglang_pool import cache_params
from sglang_mamba_dedup.patches import estimator as estimator_patch
from sglang_mamba_dedup.planner import model as plan_model
from sglang_mamba_dedup.planner import plan, sglang_estimate

pytestmark = pytest.mark.release

MiB = 1 << 20


def _plan(capsys, *argv: str) -> tuple[int, str, str]:
    rc = plan.main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def _json(capsys, *argv: str) -> dict:
    rc, out, err = _plan(capsys, *argv, "--json")
    assert rc == 0, err
    return json.loads(out)


def test_plan_shape_table_and_bytes_per_buffer(capsys):
    doc = _json(capsys, "--shape", "qwen3.5-0.8b", "--weights-gb", "1.6", "--gpu-memory-gb", "80")
    q = shapes.QWEN35_08B
    assert doc["budget_gb"] == pytest.approx(80 * 0.8 - 1.6)
    stock, ours = doc["stock"], doc["plugin"]
    # independent arithmetic: 18 layers, conv [6144, 3] bf16, SSM 16x128x128 fp32, D=4
    per = ours["per_request_mib"]
    assert per["conv_state"] * MiB == q.gdn_layers * q.conv_dim * 3 * 2
    assert per["ssm_state"] * MiB == q.gdn_layers * 16 * 128 * 128 * 4
    assert per["ssm_scratch"] * MiB == 4 * per["ssm_state"] * MiB
    assert per["conv_scratch_dense"] * MiB == 4 * per["conv_state"] * MiB
    assert per["conv_scratch_allocated"] * MiB == q.gdn_layers * q.conv_dim * (4 + 4 - 2) * 2
    for est in (stock, ours):
        assert est["running_requests"] == min(256, est["mamba_slots"] // est["slots_per_request"])
        assert est["reserved_gb"] + est["kv_cache_gb"] == pytest.approx(doc["budget_gb"])
    assert ours["mamba_slots"] > stock["mamba_slots"], "the dedup's saving becomes slots"
    assert ours["plugin"]["applied"] is True


def test_plan_text_table(capsys):
    rc, out, _ = _plan(
        capsys, "--shape", "nemotron-h-8b", "--max-running-requests", "64", "--mem-fraction-static", "0.3"
    )
    assert rc == 0
    assert "Nemotron-H-8B (mamba2)" in out and "running requests that fit" in out
    # 80 GB x 0.3 cannot hold 64 requests' state x 3 + scratch: capped, or (0.5.12.x, which reserves scratch for
    # every request asked for) no KV cache left, which SGLang refuses to start
    assert "caps running requests at" in out or "the server would not start" in out


@pytest.mark.parametrize("preset", ["qwen3.5-0.8b", "nemotron-h-tiny"])
def test_plan_reads_config_json(preset, tmp_path, capsys):
    """A model directory with only config.json: its state shape is read as the table / the preset has it, and the
    weights are counted from the safetensors headers (target, and the draft's MTP layers, embedding and head)."""
    dims = random_model.PRESETS[preset]
    (tmp_path / "config.json").write_text(json.dumps(random_model.build_config(dims)))
    shape, weights = plan_model.shape_from_config(tmp_path)
    assert weights is None
    expected = _expected_state(preset, dims)
    assert (shape.gdn_layers, shape.conv_dim, shape.ssm_shape, shape.conv_kernel) == expected
    rc, out, err = _plan(capsys, "--model-path", str(tmp_path), "--json")
    if rc == 2 and "SGLang refused the launch flags" in err:  # the release's own config class rejects the preset
        pytest.skip(err.strip())
    doc = json.loads(out)
    assert doc["settings"]["weights_gb"] == 0 and "no safetensors" in doc["weights"]["how"]
    vocab = random_model.build_config(dims).get("text_config", random_model.build_config(dims))["vocab_size"]
    # the embedding named as neither model names it: found by its vocabulary-sized dimension
    tensors = {
        "lm_head.weight": [vocab, 4],
        "backbone.word_table": [vocab, 2],
        "mtp.fc.weight": [1 << 18],
        "x": [1 << 19],
    }
    _write_safetensors(tmp_path / "model.safetensors", tensors)
    tp = "2" if preset == "qwen3.5-0.8b" else "1"
    doc = _json(capsys, "--model-path", str(tmp_path), "--tp-size", tp)
    head = vocab * 6  # lm_head + the embedding
    target, draft = head + (1 << 19), (1 << 18) + head  # the draft: its MTP layer + its own embedding and head
    rope = doc["settings"]["weights_gb"] * (1 << 30) - (target + draft) / int(tp)
    if preset == "qwen3.5-0.8b":  # RoPE: [262144 + 3 x 4 x 2 + 256 -> 262528 rows] x 64 rotary dims x fp32
        assert rope == pytest.approx(262528 * 64 * 4) and "RoPE table" in doc["weights"]["how"]
    else:  # Nemotron-H: no RoPE
        assert rope == pytest.approx(0, abs=1e-3) and "RoPE" not in doc["weights"]["how"]
    assert "MTP layers" in doc["weights"]["how"]


def _write_safetensors(path, tensors: dict[str, int | list[int]]) -> None:
    """A safetensors file of uint8 tensors of the given byte sizes or shapes (header written by hand: no torch)."""
    import math
    import struct

    header, offset = {}, 0
    for name, dims in tensors.items():
        shape = dims if isinstance(dims, list) else [dims]
        size = math.prod(shape)
        header[name] = {"dtype": "U8", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * offset)


def _expected_state(preset, dims):
    """(state layers, conv dim, SSM shape, conv kernel) written independently of the planner's config reading."""
    if preset == "qwen3.5-0.8b":
        q = shapes.QWEN35_08B
        return q.gdn_layers, q.conv_dim, q.ssm_shape, q.conv_kernel
    heads, hd, state, groups = dims.mamba_num_heads, dims.mamba_head_dim, dims.ssm_state_size, dims.mamba_n_groups
    return dims.pattern.count("M"), heads * hd + 2 * groups * state, (heads, hd, state), dims.conv_kernel


def test_plan_replayssm_reserves_the_conv_scratch(capsys):
    """Under ReplaySSM (0.5.17+) stock reserves no conv-window scratch; the plugin reserves it, same slots."""
    rc, out, err = _plan(capsys, "--shape", "qwen3.5-0.8b", "--enable-linear-replayssm-spec", "--json")
    if "enable_linear_replayssm_spec" not in sglang_estimate.server_args_fields():
        assert rc == 2 and "has no --enable-linear-replayssm-spec" in err, err
        return
    doc = json.loads(out)
    stock, ours = doc["stock"], doc["plugin"]
    assert ours["mamba_slots"] == stock["mamba_slots"]
    assert stock["per_request_mib"]["ssm_scratch"] == 0 and ours["per_request_mib"]["replayssm_ring"] > 0
    if not ours["plugin"]["applied"]:  # 0.5.16: left to SGLang (its estimator does not price ReplaySSM)
        return
    rows = min(256, ours["mamba_slots"] // ours["slots_per_request"]) + 1
    conv_row = sizing.conv_window_physical_bytes(cache_params(shapes.QWEN35_08B), 4)
    extra = (ours["reserved_gb"] - stock["reserved_gb"]) * (1 << 30)
    assert extra == pytest.approx(rows * conv_row, abs=rows * estimator_patch.RING_CURSOR_BYTES + 1)


def _write_config(folder, preset: str) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(random_model.build_config(random_model.PRESETS[preset])))
    return str(folder)


def _spec(m: str, running: int | None = 64) -> list[str]:
    """NEXTN launch flags for model folder ``m`` (radix cache off; ``running``: --max-running-requests, None: none)."""
    out = [
        "--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", "4", "--speculative-draft-model-path", m,
        "--skip-tokenizer-init", "--disable-radix-cache",
    ]  # fmt: skip
    return out + ([] if running is None else ["--max-running-requests", str(running)])


def _launch(folder, preset: str = "qwen3.5-0.8b", running: int | None = 64, *extra: str) -> list[str]:
    """A pasted launch line for a random-weights config of ``preset`` written to ``folder``."""
    m = _write_config(folder, preset)
    return ["--model-path", m, *_spec(m, running), *extra]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--shape", "nemotron-h-8b", "--tp-size", "3"], "does not divide"),
        (["--shape", "nemotron-h-8b-tp2", "--tp-size", "2"], "already one rank"),
        (["--shape", "nemotron-h-8b", "--enable-linear-replayssm-spec"], "Gated DeltaNet models only"),
        (["--shape", "qwen3.5-0.8b", "--weights-gb", "70"], "no memory left after the weights"),
        (["--model-path", "/nonexistent-dir"], "has no config.json"),
        (["--shape", "qwen3.5-0.8b", "--pp-size", "2"], "--pp-size needs a launch"),  # m-P1: never ignored
    ],
    ids=["tp-not-dividing", "tp-twice", "replayssm-on-mamba2", "weights-exceed", "no-config", "pp-on-shape"],
)
def test_plan_bad_input_is_one_line_exit_2(argv, message, capsys):
    rc, out, err = _plan(capsys, *argv)
    assert rc == 2 and out == ""
    (line,) = [ln for ln in err.splitlines() if ln.startswith("sglang-mamba-dedup plan:")]
    assert message in line


def test_plan_unknown_model_type(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 2}))
    rc, _, err = _plan(capsys, "--model-path", str(tmp_path))
    assert rc == 2 and "model_type 'llama' is not a hybrid model the plugin knows" in err
    with pytest.raises(SystemExit) as exc:
        plan.main(["--shape", "no-such-model"])
    assert exc.value.code == 2


def test_plan_pd_decode_reserves_the_pre_allocated_requests(capsys):
    """A PD-decode server (radix off, as SGLang runs it; 16 running requests, so 32 pre-allocated by SGLang's
    default on every release): the decode pool holds 16 + 32 rows of scratch and as many slots, each plus its
    padding row; the plugin reserves all of it, stock only the running requests'."""
    doc = _json(capsys, "--shape", "qwen3.5-0.8b", "--disaggregation-mode", "decode", "--max-running-requests", "16")
    stock, ours = doc["stock"], doc["plugin"]
    assert doc["settings"]["radix_cache"] is False and ours["plugin"]["pd_decode_pre_alloc"] == 32
    assert stock["mamba_slots"] == ours["mamba_slots"] == 16
    per = sizing.request_bytes(cache_params(shapes.QWEN35_08B), 4, dedup=True)
    rows = 16 + 32 + 1
    assert ours["reserved_gb"] * (1 << 30) == pytest.approx(rows * (per.state + per.scratch), abs=4096)
    assert ours["plugin"]["top_up_bytes"] > 0 and ours["reserved_gb"] > stock["reserved_gb"]
    rc, out, _ = _plan(
        capsys, "--shape", "qwen3.5-0.8b", "--disaggregation-mode", "decode", "--max-running-requests", "16"
    )
    assert rc == 0 and "scratch for 32 pre-allocated requests" in out


def test_plan_pd_decode_extra_slots(capsys):
    argv = ["--shape", "qwen3.5-0.8b", "--max-running-requests", "16", "--disaggregation-decode-extra-slots", "5"]
    rc, _, err = _plan(capsys, *argv)
    assert rc == 2 and "needs --disaggregation-mode decode" in err
    rc, out, err = _plan(capsys, *argv, "--disaggregation-mode", "decode", "--json")
    if "disaggregation_decode_extra_slots" not in sglang_estimate.server_args_fields():  # 0.5.12 ... 0.5.13.post1
        assert rc == 2 and "SGLANG_DISAGGREGATION_NUM_PRE_ALLOCATE_REQS" in err
        return
    assert rc == 0 and json.loads(out)["plugin"]["plugin"]["pd_decode_pre_alloc"] == 5


def _qwen_config() -> dict:
    return random_model.build_config(random_model.PRESETS["qwen3.5-0.8b"])


def _edit_text(**fields):
    def edit(cfg: dict) -> dict:
        cfg["text_config"].update(fields)
        return cfg

    return edit


@pytest.mark.parametrize(
    "write, message",
    [
        (lambda p: p.write_text("[1, 2, 3]"), "not a JSON object"),
        (lambda p: p.write_text("[" * 100000), "not readable JSON"),
        (_edit_text(num_hidden_layers="abc"), "num_hidden_layers = 'abc'"),
        (_edit_text(num_hidden_layers=400000000), "num_hidden_layers = 400000000"),
        (_edit_text(linear_num_key_heads=16.9), "linear_num_key_heads = 16.9"),
        (_edit_text(linear_conv_kernel_dim=1), "linear_conv_kernel_dim = 1"),
        (_edit_text(mamba_ssm_dtype="fp32"), "mamba_ssm_dtype = 'fp32'"),
        (_edit_text(layer_types=["linear_attention"] * 100), "layer_types lists 100 layers"),
    ],
    ids=["list", "deep", "string-layers", "absurd-layers", "fractional-heads", "kernel-1", "bad-dtype", "layer-types"],
)
def test_plan_malformed_config_is_a_usage_error(write, message, tmp_path, capsys):
    """Audit m10, m11, m13: a malformed or nonsense config.json is one line, exit 2 (not 'SGLang's estimator
    failed'), before any SGLang work."""
    cfg = tmp_path / "config.json"
    if write.__name__ == "<lambda>":
        write(cfg)
    else:
        cfg.write_text(json.dumps(write(_qwen_config())))
    rc, out, err = _plan(capsys, "--model-path", str(tmp_path))
    assert rc == 2 and out == "", err
    (line,) = err.strip().splitlines()
    assert line.startswith("sglang-mamba-dedup plan: error:") and message in line, line


@pytest.mark.parametrize("value", ["nan", "inf", "-50", "1e300x"])
def test_plan_numbers_must_be_finite(value, capsys):
    """Audit m8, m9: NaN, infinity and negative weights are usage errors of argparse (exit 2)."""
    with pytest.raises(SystemExit) as exc:
        plan.main(["--shape", "qwen3.5-0.8b", "--weights-gb", value])
    assert exc.value.code == 2
    with pytest.raises(SystemExit) as exc:
        plan.main(["--shape", "qwen3.5-0.8b", "--gpu-memory-gb", value])
    assert exc.value.code == 2
    capsys.readouterr()


def test_plan_says_when_the_server_would_not_start(capsys):
    """Audit m14: a PD-decode server pre-allocating a million requests would leave no KV cache: SGLang refuses to
    start, and the plan says so instead of printing a negative KV cache as a plan."""
    if "disaggregation_decode_extra_slots" not in sglang_estimate.server_args_fields():
        pytest.skip("no --disaggregation-decode-extra-slots on this release")
    argv = ["--shape", "qwen3.5-0.8b", "--disaggregation-mode", "decode", "--disaggregation-decode-extra-slots"]
    rc, out, _ = _plan(capsys, *argv, "1000000")
    assert rc == 0 and "plugin: the server would not start" in out


def test_plan_takes_the_plugins_own_launch_flags(tmp_path, capsys, monkeypatch):
    """A server's command line pasted after ``--`` keeps the plugin's flags, which SGLang's parser knows only where
    the plugin is loaded: the planner takes them out. The zero-copy flag, where the release has zero-copy, makes
    the plugin column reserve the ``accepted`` table (one int32 per scratch row) and nothing else; the
    environment is as it was after the plan."""
    from sglang_mamba_dedup import env, versions

    monkeypatch.delenv(env.ZERO_COPY, raising=False)
    (tmp_path / "config.json").write_text(json.dumps(random_model.build_config(random_model.PRESETS["qwen3.5-0.8b"])))
    m = str(tmp_path)
    base = [
        "--model-path", m, "--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3",
        "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4", "--speculative-draft-model-path", m,
        "--max-running-requests", "64", "--skip-tokenizer-init", "--disable-radix-cache",
    ]  # fmt: skip
    rc, out, err = _plan(capsys, "--json", "--", *base)
    if rc == 2 and "SGLang refused the launch flags" in err:  # the release's own config class rejects the preset
        pytest.skip(err.strip())
    assert rc == 0, err
    plain = json.loads(out)
    docs = {}
    for flag in (env.FLAG, env.ZERO_COPY_FLAG):
        rc, out, err = _plan(capsys, "--json", "--", *base, flag)
        assert rc == 0, err
        docs[flag] = json.loads(out)
        assert flag not in docs[flag]["launch"]["argv"]
        assert env.ZERO_COPY not in os.environ
    assert docs[env.FLAG]["plugin"] == plain["plugin"] and docs[env.FLAG]["settings"]["zero_copy"] is False
    zc = docs[env.ZERO_COPY_FLAG]
    if not versions.in_range(versions.installed_sglang_version(), versions.ZERO_COPY):
        assert zc["plugin"] == plain["plugin"] and zc["settings"]["zero_copy"] is False
        return
    table = 4 * (zc["plugin"]["running_requests"] + 1)
    assert zc["settings"]["zero_copy"] is True and zc["stock"] == plain["stock"]
    assert zc["plugin"]["plugin"]["top_up_bytes"] - plain["plugin"]["plugin"]["top_up_bytes"] == table
    assert zc["plugin"]["reserved_gb"] - plain["plugin"]["reserved_gb"] == pytest.approx(table / 2**30, rel=1e-6)
    assert zc["plugin"]["mamba_slots"] == plain["plugin"]["mamba_slots"]


@pytest.mark.parametrize("release, said", [(None, "SGLang is not installed"), ("0.5.30", "outside the supported")])
def test_plan_without_a_usable_sglang_says_so_not_the_estimator(release, said, monkeypatch, capsys):
    """Audit m-P9: a missing or unsupported SGLang is not "SGLang's estimator failed"."""
    from sglang_mamba_dedup import versions

    monkeypatch.setattr(versions, "installed_sglang_version", lambda: release)
    assert plan.main(["--shape", "qwen3.5-0.8b", "--gpu-memory-gb", "80"]) == 1
    err = capsys.readouterr().err
    assert said in err and "estimator failed" not in err, err


_COLUMNS = ("mamba_slots", "running_requests", "kv_cache_gb", "reserved_gb")


def _stock_and_plugin(doc: dict) -> tuple[dict, dict]:
    return ({k: doc["stock"][k] for k in _COLUMNS}, {k: doc["plugin"][k] for k in _COLUMNS})


def test_a_pasted_launch_with_the_plugins_flag_keeps_the_stock_column_stock(tmp_path, monkeypatch, capsys):
    """Audit B2: the real command line (``sys.argv`` is the pasted launch, which the activation reads) with
    ``--enable-mamba-conv-dedup`` or the zero-copy flag: the stock column is the one without the flag, and differs
    from the plugin's. In this process, ``sys.argv`` set as the console script would have it (the subprocess check
    is the next test, on one release)."""
    import sys

    from sglang_mamba_dedup import env

    base = _launch(tmp_path, "qwen3.5-0.8b", 256, "--mem-fraction-static", "0.15")
    for name in (env.SWITCH, env.ZERO_COPY):
        monkeypatch.delenv(name, raising=False)

    def stock_and_plugin(*flag: str) -> tuple[dict, dict]:
        argv = ["plan", "--gpu-memory-gb", "139.13", "--json", "--", *base, *flag]
        monkeypatch.setattr(sys, "argv", ["sglang-mamba-dedup", *argv])
        rc, out, err = _plan(capsys, *argv[1:])
        if rc == 2 and "SGLang refused the launch flags" in err:
            pytest.skip(err.strip())
        assert rc == 0, err
        assert all(name not in os.environ for name in (env.SWITCH, env.ZERO_COPY)), "plan left a switch set"
        return _stock_and_plugin(json.loads(out))

    stock, plugin = stock_and_plugin()
    assert stock != plugin, "the plugin changes nothing here: the test could not fail"
    for flag in (env.FLAG, env.ZERO_COPY_FLAG):
        assert stock_and_plugin(flag)[0] == stock, flag


def test_a_pasted_launch_through_the_console_entry(tmp_path, capsys):
    """Audit B2 as a user meets it: ``python -m sglang_mamba_dedup plan ... -- <launch> --enable-mamba-conv-dedup``
    in a fresh process gives the stock column of the same launch without the flag, planned in this process. One
    release (a fresh process costs ~11 s; the in-process test above covers every release's flag parsing)."""
    import subprocess
    import sys

    from sglang_mamba_dedup import env, versions

    if versions.installed_sglang_version() != versions.ZERO_COPY_RELEASE:
        pytest.skip(f"one release is enough for the fresh-process check ({versions.ZERO_COPY_RELEASE})")
    base = _launch(tmp_path, "qwen3.5-0.8b", 256, "--mem-fraction-static", "0.15")
    own = ["--gpu-memory-gb", "139.13", "--"]
    environ = {k: v for k, v in os.environ.items() if k not in (env.SWITCH, env.ZERO_COPY)}
    proc = subprocess.run(
        [sys.executable, "-m", "sglang_mamba_dedup", "plan", "--json", *own, *base, env.FLAG],
        capture_output=True,
        text=True,
        timeout=300,
        env=environ,
    )
    assert proc.returncode == 0, proc.stderr
    stock, plugin = _stock_and_plugin(json.loads(proc.stdout))
    assert stock != plugin, "the plugin changes nothing here: the test could not fail"
    rc, out, err = _plan(capsys, "--json", *own, *base)
    assert rc == 0, err
    assert (stock, plugin) == _stock_and_plugin(json.loads(out)), "the flag moved the stock column"


def test_a_shape_plan_searches_the_fraction_it_advises(capsys):
    """Audit B1: a ``--shape`` plan names the smallest fraction that admits every request, and it is true: planned
    at it all fit, a hundredth below they do not; "no fraction below 1" only after a search found none."""
    base = ["--shape", "qwen3.5-0.8b", "--gpu-memory-gb", "80", "--weights-gb", "1.6", "--max-running-requests", "200"]
    rc, out, err = _plan(capsys, *base)
    assert rc == 0, err
    doc = _json(capsys, *base)
    named = 0
    for column in ("stock", "plugin"):
        est, need = doc[column], doc[column]["fraction_needed"]
        assert est["fraction_searched"], est
        if need is None:
            assert f"{column}: " in out and "no --mem-fraction-static below 1" in out, out
            continue
        named += 1
        at = _json(capsys, *base, "--mem-fraction-static", str(need))[column]
        assert at["running_requests"] == 200 and not at["capped_by_mamba_pool"] and at["starts"], (need, at)
        if need > 0.01:
            below = _json(capsys, *base, "--mem-fraction-static", f"{need - 0.01:.2f}")[column]
            assert below["capped_by_mamba_pool"] or not below["starts"], (need, below)
    assert named, "no fraction named: the test checked nothing"


def test_a_fixed_budget_claims_no_fraction(capsys):
    """Audit B1: with ``--rest-gb`` the fraction is not what sizes the pool: no claim about any fraction."""
    rc, out, err = _plan(capsys, "--shape", "qwen3.5-0.8b", "--gpu-memory-gb", "80", "--rest-gb", "18")
    assert rc == 0, err
    assert "no --mem-fraction-static below 1" not in out and "not searched" in out, out
    doc = _json(capsys, "--shape", "qwen3.5-0.8b", "--gpu-memory-gb", "80", "--rest-gb", "18")
    assert doc["stock"]["fraction_needed"] is None and doc["stock"]["fraction_searched"] is False


def test_dp_attention_sizes_each_rank_for_its_share_of_requests(tmp_path, capsys):
    """Audit m-P2: with DP attention SGLang sizes each rank's pool for ``max_running_requests // dp_size``; the plan
    does too, and says it is per rank."""
    base = _launch(tmp_path, "qwen3.5-0.8b", 256, "--mem-fraction-static", "0.3", "--tp-size", "2")
    rc, out, err = _plan(capsys, "--gpu-memory-gb", "139.13", "--json", "--", *base, "--dp-size", "2")
    if rc == 2 and "SGLang refused the launch flags" in err:
        pytest.skip(err.strip())
    assert rc == 0, err
    plain = json.loads(out)
    rc, out, err = _plan(
        capsys, "--gpu-memory-gb", "139.13", "--json", "--", *base, "--dp-size", "2", "--enable-dp-attention"
    )
    assert rc == 0, err
    dp = json.loads(out)
    assert plain["settings"]["attn_dp_size"] == 1 and dp["settings"]["attn_dp_size"] == 2
    for column in ("stock", "plugin"):
        assert plain[column]["running_requests"] == 256 and plain[column]["mamba_slots"] >= 256
        assert dp[column]["running_requests"] == 128, dp[column]  # each rank's share
        assert dp[column]["mamba_slots"] < plain[column]["mamba_slots"], (dp[column], plain[column])
    rc, text, _ = _plan(capsys, "--gpu-memory-gb", "139.13", "--", *base, "--dp-size", "2", "--enable-dp-attention")
    assert "128 per attention-DP rank" in text, text
    rc, out, err = _plan(capsys, "--gpu-memory-gb", "139.13", "--json", "--", *base, "--attn-dp-size", "2")
    if rc == 0:  # 0.5.23's own spelling (older releases' parsers refuse it)
        assert json.loads(out)["stock"]["running_requests"] == 128


def test_replayssm_on_a_mamba2_launch_is_not_priced(tmp_path, capsys):
    """Audit m-P4: ReplaySSM is SGLang's for Gated DeltaNet (and KDA) models: a Mamba2 launch asking for it is
    planned without a ring, and the plan says why, as ``--shape`` does."""
    base = _launch(tmp_path, "nemotron-h-mini")
    environ = dict(os.environ)
    rc, out, err = _plan(capsys, "--gpu-memory-gb", "80", "--json", "--", *base, "--enable-linear-replayssm-spec")
    if rc == 2 and ("SGLang refused the launch flags" in err or "unrecognized arguments" in err):
        pytest.skip(err.strip())  # a release without the flag
    assert rc == 0, err
    assert dict(os.environ) == environ, "SGLang's resolution exported variables out of the plan"
    doc = json.loads(out)
    assert doc["mixer"] == "mamba2"
    for column in ("stock", "plugin"):
        assert doc[column]["per_request_mib"]["replayssm_ring"] == 0, doc[column]
    assert doc["settings"]["enable_linear_replayssm_spec"] is False
    assert "Gated DeltaNet" in doc["note"], doc["note"]


def test_the_load_margin_says_when_the_server_would_not_start(tmp_path, capsys):
    """Audit m-P3: at 0.19 the stock KV share is 0.19 GB; 0.2 GB less and SGLang refuses to start: the margin line
    says so instead of "256 running requests"."""
    launch = _launch(tmp_path, "qwen3.5-0.8b", 256, "--mem-fraction-static", "0.19")
    own = ["--gpu-memory-gb", "139.13", "--weights-gb", "2.86"]
    rc, out, err = _plan(capsys, *own, "--json", "--", *launch)
    if rc == 2 and "SGLang refused the launch flags" in err:
        pytest.skip(err.strip())
    doc = json.loads(out)
    stock = doc["stock"]
    if not 0 < stock["kv_cache_gb"] < stock["load_margin"]["gb"]:
        pytest.skip(f"this release leaves {stock['kv_cache_gb']:.3f} GB: not the margin's case")
    assert stock["load_margin"]["starts"] is False and stock["load_margin"]["kv_cache_gb"] <= 0
    rc, text, _ = _plan(capsys, *own, "--", *launch)
    margin = next(line for line in text.splitlines() if line.startswith("from the flags alone"))
    assert "stock would not start" in margin, margin


def test_pd_advice_names_what_would_lift_the_cap(capsys):
    """Audit m-P5: a PD prefill pool holds no speculative scratch (no "fewer draft tokens"); a PD decode server that
    cannot start because of its pre-allocated requests is told to lower those."""
    rc, out, err = _plan(capsys, "--shape", "nemotron-h-8b", "--disaggregation-mode", "prefill", "--weights-gb", "16")
    assert rc == 0, err
    capped = [ln for ln in out.splitlines() if "caps running requests" in ln or "would not start" in ln]
    assert all("--speculative-num-draft-tokens" not in ln for ln in capped), out
    from sglang_mamba_dedup.planner import sglang_estimate

    if "disaggregation_decode_extra_slots" not in sglang_estimate.server_args_fields():
        return  # 0.5.12 ... 0.5.13.post1: SGLang pre-allocates twice the requests up to 32, no flag to lower
    argv = ["--shape", "qwen3.5-0.8b", "--gpu-memory-gb", "80", "--disaggregation-mode", "decode"]
    rc, out, err = _plan(capsys, *argv, "--disaggregation-decode-extra-slots", "1000000")
    assert rc == 0, err
    line = next(ln for ln in out.splitlines() if ln.startswith("plugin: the server would not start"))
    assert "lower --disaggregation-decode-extra-slots" in line, line


@pytest.mark.parametrize(
    "extra, gpu, message",
    [
        (["--max-running-requests", "0"], "139.13", "--max-running-requests resolved to 0"),
        (["--max-running-requests", "-5"], "139.13", "--max-running-requests resolved to -5"),
        (["--mem-fraction-static", "1.5"], "139.13", "--mem-fraction-static resolved to 1.5"),
        (["--mem-fraction-static", "nan"], "139.13", "--mem-fraction-static resolved to nan"),
        ([], "0.5", "SGLang derived it from the GPU's size"),
    ],
    ids=["running-0", "running-negative", "fraction-above-1", "fraction-nan", "gpu-too-small"],
)
def test_resolved_numbers_no_server_runs_with_are_refused(extra, gpu, message, tmp_path, capsys):
    """Audit m-P6: numbers after ``--`` that SGLang's resolution accepts but no server runs with: one line, exit 2."""
    launch = _launch(tmp_path, "qwen3.5-0.8b", None)
    rc, out, err = _plan(capsys, "--gpu-memory-gb", gpu, "--", *launch, *extra)
    if rc == 2 and "SGLang refused the launch flags" in err:
        pytest.skip(err.strip())
    assert rc == 2 and out == "" and message in err, (rc, out, err)


def test_the_last_model_path_is_the_one_planned_as_sglang_reads_it(tmp_path, capsys):
    """Audit m-P7: ``--model-path A --model-path B``: argparse keeps B, and so does the plan (its label too)."""
    a, b = _write_config(tmp_path / "qwen", "qwen3.5-0.8b"), _write_config(tmp_path / "nemo", "nemotron-h-mini")
    rc, out, err = _plan(
        capsys, "--gpu-memory-gb", "80", "--json", "--", "--model-path", a, "--model-path", b, *_spec(b)
    )
    if rc == 2 and "SGLang refused the launch flags" in err:
        pytest.skip(err.strip())
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["model"] == "nemo" and doc["mixer"] == "mamba2", (doc["model"], doc["mixer"])


def test_a_config_file_with_the_plugins_flags_is_planned(tmp_path, capsys):
    """Audit m-P7: a ``--config`` YAML that carries ``enable-mamba-conv-dedup: true`` is planned like the flag on
    the command line (SGLang's parser in the planner does not know the plugin's keys)."""
    m = _write_config(tmp_path / "qwen", "qwen3.5-0.8b")
    (tmp_path / "launch.yaml").write_text("enable-mamba-conv-dedup: true\nmem-fraction-static: 0.5\n")
    own = ["--gpu-memory-gb", "80", "--json", "--", "--model-path", m, *_spec(m)]
    rc, out, err = _plan(capsys, *own, "--config", str(tmp_path / "launch.yaml"))
    if rc == 2 and "SGLang refused the launch flags" in err and "enable-mamba-conv-dedup" not in err:
        pytest.skip(err.strip())
    assert rc == 0, err
    with_file = json.loads(out)
    assert with_file["settings"]["mem_fraction_static"] == 0.5  # the rest of the file is read
    rc, out, err = _plan(capsys, *own, "--mem-fraction-static", "0.5")
    assert rc == 0, err
    assert with_file["stock"] == json.loads(out)["stock"]


@pytest.mark.parametrize(
    "after, message",
    [(["--help"], "asks SGLang's launch_server"), (["--json"], "--json is the planner's: give it before --")],
    ids=["help", "json"],
)
def test_planner_flags_after_the_dashes_are_one_line(after, message, tmp_path, capsys):
    """Audit m-P8: ``--help`` after ``--`` (SGLang's help on stdout, then an error) and a planner flag there."""
    m = _write_config(tmp_path / "qwen", "qwen3.5-0.8b")
    rc, out, err = _plan(capsys, "--gpu-memory-gb", "80", "--", "--model-path", m, *_spec(m), *after)
    assert rc == 2 and out == "" and message in err, (rc, out[:300], err)


def test_the_plan_says_the_device_it_resolved_for_and_keeps_huge_columns_apart(tmp_path, capsys):
    """Audit m-P8: ``--device cpu`` after ``--`` is not "on a CUDA GPU"; 10^12 GB keeps a space between columns."""
    m = _write_config(tmp_path / "qwen", "qwen3.5-0.8b")
    rc, out, err = _plan(capsys, "--gpu-memory-gb", "80", "--", "--model-path", m, *_spec(m), "--device", "cpu")
    if rc == 2 and "SGLang refused the launch flags" in err:
        pytest.skip(err.strip())
    assert rc == 0, err
    assert "on a CUDA GPU" not in out and "resolved as launch_server does on --device cpu" in out, out
    rc, out, err = _plan(capsys, "--shape", "qwen3.5-0.8b", "--gpu-memory-gb", "1e12")
    assert rc == 0, err
    row = next(ln for ln in out.splitlines() if ln.startswith("mamba slots"))
    assert len(row.split()) == 4, row  # "mamba slots <stock> <plugin>"


def test_a_shape_plan_with_the_radix_cache_resolves_the_strategy_as_a_launch_does(capsys):
    """Issue 35 item 5: ``--shape`` with the radix cache on (the default) is planned with the tracking buffers a
    default CUDA launch of 0.5.23 resolves (``auto`` -> ``extra_buffer``, overlap on: 5 slots per request), says
    so, and takes ``--mamba-radix-cache-strategy`` for another."""
    from sglang_mamba_dedup import versions
    from sglang_mamba_dedup.planner import sglang_estimate

    fields = sglang_estimate.server_args_fields()
    if "mamba_radix_cache_strategy" not in fields and "mamba_scheduler_strategy" not in fields:
        pytest.skip("this release has no mamba radix-cache strategy")
    doc = _json(capsys, "--shape", "qwen3.5-0.8b", "--gpu-memory-gb", "80", "--weights-gb", "1.6")
    assert doc["stock"]["slots_per_request"] == 5 and doc["settings"]["mamba_strategy"] == "extra_buffer"
    lazy = _json(capsys, "--shape", "qwen3.5-0.8b", "--mamba-radix-cache-strategy", "extra_buffer_lazy")
    if versions.in_range(versions.installed_sglang_version(), versions.UPSTREAM_DEDUP):  # 0.5.12.x: no lazy slots
        assert lazy["stock"]["slots_per_request"] == 4
    rc, out, _ = _plan(capsys, "--shape", "qwen3.5-0.8b")
    assert "mamba strategy extra_buffer" in out, out
    off = _json(capsys, "--shape", "qwen3.5-0.8b", "--disable-radix-cache")
    assert off["stock"]["slots_per_request"] == 1


def test_the_skip_decode_lock_switch_is_modelled_and_named(tmp_path, capsys, monkeypatch):
    """Issue 35 item 4: ``SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK=1`` (0.5.23) frees one slot per request with the radix
    cache on; the plan reads it as the server does (its environment) and names it in the "resolved as" line."""
    from sglang_mamba_dedup.planner.launch_config import skip_decode_lock

    m = _write_config(tmp_path / "qwen", "qwen3.5-0.8b")
    launch = [a for a in _spec(m) if a != "--disable-radix-cache"]
    monkeypatch.delenv("SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK", raising=False)
    rc, out, err = _plan(capsys, "--gpu-memory-gb", "80", "--json", "--", "--model-path", m, *launch)
    if rc == 2 and "SGLang refused the launch flags" in err:
        pytest.skip(err.strip())
    assert rc == 0, err
    plain = json.loads(out)
    monkeypatch.setenv("SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK", "1")
    if skip_decode_lock() is None:
        pytest.skip("this release has no SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK")
    rc, out, err = _plan(capsys, "--gpu-memory-gb", "80", "--json", "--", "--model-path", m, *launch)
    skipped = json.loads(out)
    assert skipped["stock"]["slots_per_request"] == plain["stock"]["slots_per_request"] - 1
    assert skipped["launch"]["resolved"]["skip_decode_lock"] is True
    rc, text, _ = _plan(capsys, "--gpu-memory-gb", "80", "--", "--model-path", m, *launch)
    assert "SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK=1" in text, text
    strategy = ["--mamba-radix-cache-strategy", "extra_buffer_lazy"]
    rc, out, err = _plan(capsys, "--gpu-memory-gb", "80", "--json", "--", "--model-path", m, *launch, *strategy)
    assert rc == 0, err
    assert json.loads(out)["launch"]["resolved"]["mamba_extra_buffer_lazy"] is True
