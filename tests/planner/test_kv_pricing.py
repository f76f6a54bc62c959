"""Every column of ``plan`` follows the flags that change bytes (issue 45 item 1; audit 2026-12-04 B1-B6, m1, m6-m8,
m14): the KV cache is priced in the dtype SGLang gives it, its token count rounded as SGLang rounds it, and a launch
the plan cannot price, or that no server runs, is said so.

The arithmetic the tests hold the plan to is SGLang 0.5.23's, written out here from the config (not the plan's code):
``DefaultPoolConfigurator._compute_cell_size`` (``pool_configurator.py``): KV heads per rank x (head_dim +
v_head_dim) x full-attention layers x the KV dtype's element size, plus ``int(cell x draft layers / layers)`` for an
EAGLE/MTP draft sized off the target (a draft model path given), then ``calculate_pool_sizes``: ``bytes // cell //
page x page``, capped by ``--max-total-tokens`` (``KVCacheConfigurator._apply_token_constraints``).
"""

from __future__ import annotations

import json

import pytest

from sglang_mamba_dedup import versions
from sglang_mamba_dedup.e2e import random_model
from sglang_mamba_dedup.planner import plan

pytestmark = [pytest.mark.release, pytest.mark.usefixtures("allow_cpu")]

GiB = 1 << 30
H200 = ("--gpu-memory-gb", "139.13")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    out = {}
    for preset in ("qwen3.5-0.8b", "nemotron-h-mini"):
        path = tmp_path_factory.mktemp(preset)
        (path / "config.json").write_text(json.dumps(random_model.build_config(random_model.PRESETS[preset])))
        out[preset] = path
    return out


def base(model, *extra: str, fraction: str = "0.15", draft: bool = True) -> list[str]:
    """The audit's BASE launch (NEXTN 3/1/4, 256 requests), the draft from the same checkpoint as on the H200."""
    return [
        "--model-path", str(model), "--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3",
        "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
        *(["--speculative-draft-model-path", str(model)] if draft else []),
        "--max-running-requests", "256", "--mem-fraction-static", fraction, *extra,
    ]  # fmt: skip


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = plan.main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def _json(capsys, launch: list[str], *own: str) -> dict:
    rc, out, err = _run(capsys, *H200, *own, "--json", "--", *launch)
    if rc == 2 and "SGLang refused the launch flags" in err:
        pytest.skip(f"this release refuses the launch: {err.strip()}")
    assert rc == 0, err
    return json.loads(out)


def _sglang():
    return versions.parse(versions.installed_sglang_version() or "0")


def _text_config(model) -> dict:
    cfg = json.loads((model / "config.json").read_text())
    return cfg.get("text_config", cfg)


def _attention_layers(cfg: dict) -> int:
    if "hybrid_override_pattern" in cfg:  # Nemotron-H: '*' is an attention layer
        return cfg["hybrid_override_pattern"].count("*")
    if "layer_types" in cfg:
        return sum(t == "full_attention" for t in cfg["layer_types"])
    return cfg["num_hidden_layers"] // cfg["full_attention_interval"]


def expected_cell(model, element: int, *, draft: bool = True, tp: int = 1) -> int:
    """SGLang 0.5.23's KV bytes per token of this checkpoint (module docstring), from its config.json alone."""
    cfg = _text_config(model)
    attn = _attention_layers(cfg)
    heads = max(1, cfg["num_key_value_heads"] // tp)
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    cell = heads * 2 * head_dim * attn * element
    if draft:  # 0.5.22+; 0.5.16 ... 0.5.21 resolve other draft layer counts (their own code: see _cell)
        layers = cfg.get("mtp_num_hidden_layers") or cfg.get("num_nextn_predict_layers") or 1
        cell += int(cell * layers / attn)
    return cell


def _cell(doc: dict, model, element: int, **kw) -> int:
    """The bytes per token the plan must use: 0.5.23's arithmetic above on 0.5.22+; on older releases the plan's
    own (SGLang's configurator there prices the draft from its own draft-layer resolution), held to scale with
    the element size: ``cell / element`` is the same for every KV dtype."""
    if _sglang() >= versions.parse("0.5.22"):
        return expected_cell(model, element, **kw)
    cell = doc["kv"]["cell_bytes"]
    per_byte = expected_cell(model, 1, draft=False, **{k: v for k, v in kw.items() if k != "draft"})
    layer = per_byte // _attention_layers(_text_config(model))  # one attention layer's bytes per element
    # the target's layers plus a whole number of draft layers (0.5.16/0.5.17 count 24, 0.5.18+ one), per element
    extra = cell // element - per_byte
    assert cell % element == 0 and extra >= 0 and extra % layer == 0, (cell, element, per_byte, layer)
    if not kw.get("draft", True):
        assert extra == 0, (cell, element, per_byte)
    return cell


def _tokens(est: dict, cell: int, page: int = 1) -> int:
    return int(est["kv_cache_gb"] * GiB) // cell // page * page


@pytest.mark.parametrize("preset", ["qwen3.5-0.8b", "nemotron-h-mini"])
@pytest.mark.parametrize("kv_dtype", ["fp8_e5m2", "fp8_e4m3"])
def test_fp8_kv_cache_holds_twice_the_tokens(models, capsys, preset, kv_dtype):
    """B1-B3: ``--kv-cache-dtype fp8_*`` stores 1 byte per element: twice the tokens of the bf16 cache on the same
    budget (the H200's fp8 server had 1,961,187 KV tokens where the plan said 980,724)."""
    m = models[preset]
    fraction = "0.15" if preset == "qwen3.5-0.8b" else "0.1"
    auto = _json(capsys, base(m, fraction=fraction))
    fp8 = _json(capsys, base(m, "--kv-cache-dtype", kv_dtype, fraction=fraction))
    for col in ("stock", "plugin"):
        assert fp8[col]["kv_cache_gb"] == auto[col]["kv_cache_gb"]  # the mamba side does not see the KV dtype
        assert auto[col]["kv_tokens"] == _tokens(auto[col], _cell(auto, m, 2))
        assert fp8[col]["kv_tokens"] == _tokens(fp8[col], _cell(fp8, m, 1))
        assert 2 * auto[col]["kv_tokens"] <= fp8[col]["kv_tokens"] <= 2 * auto[col]["kv_tokens"] + 1
    assert fp8["kv"]["dtype"] == ("float8_e5m2" if kv_dtype == "fp8_e5m2" else "float8_e4m3fn")
    assert fp8["kv"]["element_bytes"] == 1 and auto["kv"]["element_bytes"] == 2


@pytest.mark.parametrize("dtype, element", [("float32", 4), ("float16", 2), ("bfloat16", 2), ("auto", 2)])
def test_model_dtype_sets_the_auto_kv_dtype(models, capsys, dtype, element):
    """B4: ``--kv-cache-dtype auto`` is the model's dtype: ``--dtype float32`` halves the tokens per byte; ``auto``
    takes the config's ``torch_dtype`` (bfloat16 here)."""
    m = models["qwen3.5-0.8b"]
    doc = _json(capsys, base(m, "--dtype", dtype))
    assert doc["kv"]["element_bytes"] == element
    assert doc["kv"]["cell_bytes"] == _cell(doc, m, element)
    for col in ("stock", "plugin"):
        assert doc[col]["kv_tokens"] == _tokens(doc[col], _cell(doc, m, element))


def test_fp8_kv_cache_regression_of_the_h200_server(models, capsys):
    """The H200 server that showed B1 (SGLang 0.5.23, fp8_e5m2): 1,961,187 KV tokens where the plan said 980,724.
    From the KV share the server logged, the plan's token count is the server's (page 1, MTP draft counted)."""
    if _sglang() != versions.parse("0.5.23"):
        pytest.skip("measured on SGLang 0.5.23")
    m = models["qwen3.5-0.8b"]
    doc = _json(capsys, base(m, "--kv-cache-dtype", "fp8_e5m2"))
    cell = doc["kv"]["cell_bytes"]
    assert cell == 7168  # 2 KV heads x (256 + 256) x (6 + 1 MTP) layers x 1 byte
    # the bf16 plan of that server: 980,724 tokens x 14,336 B; the same KV share at the fp8 cell is the server's
    fp8 = 980_724 * 14_336 // cell
    assert fp8 == 1_961_448 and abs(fp8 - 1_961_187) / 1_961_187 < 2e-4


@pytest.mark.parametrize("page", [16, 64])
def test_page_size_rounds_the_tokens_down_to_pages(models, capsys, page):
    """m1: SGLang's pool holds whole pages: ``tokens // page x page``."""
    m = models["qwen3.5-0.8b"]
    doc = _json(capsys, base(m, "--page-size", str(page)))
    assert doc["kv"]["page_size"] == page
    for col in ("stock", "plugin"):
        assert doc[col]["kv_tokens"] % page == 0
        assert doc[col]["kv_tokens"] == _tokens(doc[col], _cell(doc, m, 2), page)


def test_max_total_tokens_caps_the_tokens(models, capsys):
    """``--max-total-tokens`` caps what the budget would hold, re-aligned to the page (``_apply_token_constraints``)."""
    m = models["qwen3.5-0.8b"]
    doc = _json(capsys, base(m, "--max-total-tokens", "100000", "--page-size", "64"))
    for col in ("stock", "plugin"):
        assert doc[col]["kv_tokens"] == 100000 // 64 * 64


def test_a_path_less_mtp_draft_is_not_priced_in_the_target_pool(models, capsys):
    """SGLang 0.5.23 sizes a path-less Qwen3.5 MTP draft's KV off the target config, which has no
    ``num_nextn_predict_layers``: the target pool's cell has no draft layers (``_resolve_eagle_aux_hidden_state``)."""
    if _sglang() != versions.parse("0.5.23"):
        pytest.skip("SGLang 0.5.23's draft-layer resolution")
    m = models["qwen3.5-0.8b"]
    doc = _json(capsys, base(m, draft=False))
    assert doc["kv"]["cell_bytes"] == expected_cell(m, 2, draft=False)


def test_a_flag_the_plan_cannot_price_is_named(models, capsys):
    """A flag SGLang reads when it sizes the KV pool and the plan does not model is named, in text and --json."""
    m = models["qwen3.5-0.8b"]
    launch = base(m, "--pp-size", "2")
    doc = _json(capsys, launch)
    assert any("--pp-size" in item for item in doc["kv"]["not_priced"]), doc["kv"]
    rc, out, err = _run(capsys, *H200, "--", *launch)
    assert rc == 0, err
    assert "not priced" in out and "--pp-size" in out, out


@pytest.mark.parametrize(
    "extra", [("--max-mamba-cache-size", "1000"), ("--enable-mamba-zero-copy-commit", "--disable-radix-cache")]
)
def test_a_launch_that_would_not_start_names_the_fraction_that_starts_it(models, capsys, extra):
    """B5, m14: a launch whose mamba pool leaves no KV cache names a fraction that starts it, which does (a fixed
    ``--max-mamba-cache-size`` admits no more requests at any fraction, yet one starts it); --json has no negative
    token count or KV share."""
    m = models["qwen3.5-0.8b"]
    launch = base(m, *extra)
    doc = _json(capsys, launch)
    rc, out, err = _run(capsys, *H200, "--", *launch)
    assert rc == 0, err
    checked = 0
    for col in ("stock", "plugin"):
        est = doc[col]
        assert est["kv_cache_gb"] >= 0 and (est["kv_tokens"] is None or est["kv_tokens"] >= 0), est
        if est["starts"]:
            continue
        assert "starts it" in out and "no --mem-fraction-static below 1 starts it" not in out, out
        start = est["fraction_starts"]
        assert start is not None and start < 1, est
        assert f"--mem-fraction-static {start} starts it" in out, out
        at = _json(capsys, base(m, *extra, fraction=str(start)))[col]
        assert at["starts"] and at["kv_tokens"] > 0, at
        below = _json(capsys, base(m, *extra, fraction=f"{start - 0.01:.2f}"))[col]
        assert not below["starts"], below
        checked += 1
    assert checked, "the launch started at 0.15: the test checked nothing"
    if "--max-mamba-cache-size" in extra:
        assert "lower --max-running-requests" not in out, out


@pytest.mark.parametrize(
    "flags, named",
    [
        (("--speculative-num-steps", "-2"), "-2"),
        (("--speculative-num-steps", "-1"), "-1"),
        (("--mamba-full-memory-ratio", "nan"), "nan"),
        (("--mamba-full-memory-ratio", "inf"), "inf"),
        (("--mamba-full-memory-ratio", "-1"), "-1"),
        (("--mamba-full-memory-ratio", "0"), "0"),
    ],
)
def test_resolved_nonsense_is_one_line_exit_2(models, capsys, flags, named):
    """B6, m6-m8: a negative ``--speculative-num-steps`` (SGLang resolves the draft count to -1) and a non-finite or
    non-positive ``--mamba-full-memory-ratio``: one line naming the flag and its value, exit 2."""
    m = models["qwen3.5-0.8b"]
    _json(capsys, base(m))  # skips where the release refuses the launch itself (0.5.12 ... 0.5.13.post1)
    without_steps = [a for a in base(m) if a not in ("--speculative-num-steps", "3")]
    launch = [*without_steps, *flags] if flags[0] == "--speculative-num-steps" else [*base(m), *flags]
    rc, out, err = _run(capsys, *H200, "--", *launch)
    assert rc == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and flags[0] in lines[0] and named in lines[0], err
