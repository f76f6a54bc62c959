"""``plan`` says what SGLang would do where the 2026-12-04 turn-2 audit found it saying otherwise (BD1, m1-m5, m7-m9):
a launch SGLang refuses is refused in one line (exit 2) or shown as not starting, the running requests are capped by
the KV cache as SGLang caps them, and the fraction search starts at the hundredth the launch's own fraction rounds up
to. SGLang 0.5.23's code is the reference here; only the KV cap's test runs on every release."""

from __future__ import annotations

import json

import pytest

from sglang_mamba_dedup import versions
from sglang_mamba_dedup.e2e import random_model
from sglang_mamba_dedup.planner import plan

pytestmark = pytest.mark.usefixtures("allow_cpu")

H200 = ("--gpu-memory-gb", "139.13")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A folder holding only the config.json of the project's random-weight Qwen3.5-0.8B (the audit's ``Q``)."""
    path = tmp_path_factory.mktemp("qwen3.5-0.8b")
    (path / "config.json").write_text(json.dumps(random_model.build_config(random_model.PRESETS["qwen3.5-0.8b"])))
    return path


def base(model, *extra: str, fraction: str = "0.15") -> list[str]:
    """The audit's BASE launch: NEXTN 3/1/4, 256 requests."""
    return [
        "--model-path", str(model), "--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3",
        "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
        "--max-running-requests", "256", "--mem-fraction-static", fraction, *extra,
    ]  # fmt: skip


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = plan.main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def _json(capsys, launch: list[str]) -> dict:
    rc, out, err = _run(capsys, *H200, "--json", "--", *launch)
    if rc == 2 and "SGLang refused the launch flags" in err:
        pytest.skip(f"this release refuses the launch: {err.strip()}")
    assert rc == 0, err
    return json.loads(out)


def _one_line_exit_2(capsys, *argv: str) -> str:
    rc, out, err = _run(capsys, *argv)
    lines = err.strip().splitlines()
    assert rc == 2 and not out and len(lines) == 1, (rc, out, err)
    return lines[0]


@pytest.mark.parametrize(
    "extra",
    [("--max-total-tokens", "-5"), ("--max-total-tokens", "0"), ("--max-total-tokens", "10", "--page-size", "64")],
)
def test_a_token_cap_below_one_page_is_refused_as_sglang_refuses_it(model, capsys, extra):
    """BD1: SGLang takes ``min(capacity, --max-total-tokens)``, floors it to whole pages, and a pool of 0 or fewer
    tokens raises "Not enough memory" (``MemoryPoolConfig.__post_init__``): no fraction starts that server. The plan
    said it starts, with -5 or 0 KV tokens."""
    line = _one_line_exit_2(capsys, *H200, "--json", "--", *base(model, *extra))
    assert "--max-total-tokens" in line and extra[1] in line and "Not enough memory" in line, line


@pytest.mark.release
def test_running_requests_are_capped_by_half_the_kv_tokens(model, capsys):
    """m7: SGLang's ``resolve_max_num_reqs`` takes ``min(requested, tokens // 2)`` before the mamba cap (0.5.14+;
    before, its pool-size estimate of at least 2048): 100 tokens admit 50 of 256, whatever the mamba pool."""
    launch = base(model, "--max-total-tokens", "100")
    doc = _json(capsys, launch)
    kv_cap = 50 if versions.parse(versions.installed_sglang_version()) >= versions.parse("0.5.14") else 2048
    for col in ("stock", "plugin"):
        est = doc[col]
        assert est["kv_tokens"] == 100, est
        mamba_cap = est["mamba_slots"] // est["slots_per_request"]
        assert est["running_requests"] == min(256, kv_cap, mamba_cap), est
        assert est["capped_by_kv_cache"] is (kv_cap < 256)
        assert est["capped_by_mamba_pool"] is (mamba_cap < min(256, kv_cap))
    if kv_cap == 50:
        rc, out, err = _run(capsys, *H200, "--", *launch)
        assert rc == 0, err
        assert "tokens cap running requests at 50 of 256" in out and "raise --max-total-tokens" in out, out
        assert "mamba pool caps running requests at 5" not in out, out


def test_the_fraction_search_starts_at_the_hundredth_the_own_fraction_rounds_up_to(model, capsys):
    """m9: own fractions 0.162 and 0.166 (radix off: the launch does not start at either) both need 0.17; the search
    took round(own x 100) as a lower bound it never tried, so 0.166 was answered 0.18."""
    docs = [_json(capsys, base(model, "--disable-radix-cache", fraction=f)) for f in ("0.162", "0.166")]
    for col in ("stock", "plugin"):
        low, high = (d[col] for d in docs)
        assert not low["starts"] and not high["starts"], (low, high)
        assert low["fraction_starts"] == high["fraction_starts"] == 0.17, (low, high)
        assert low["fraction_needed"] == high["fraction_needed"], (low, high)
    at = _json(capsys, base(model, "--disable-radix-cache", fraction="0.17"))
    assert at["stock"]["starts"] and at["plugin"]["starts"], at


@pytest.mark.parametrize(
    "extra, named",
    [
        (("--page-size", "0"), "--page-size 0"),  # m1: SGLang's resolution divides by it (ZeroDivisionError)
        (("--page-size", "1000000000"), "page_size"),  # m1: a bare assert of SGLang's: its line is named
        (("--speculative-eagle-topk", "0"), "--speculative-eagle-topk"),  # m2
        (("--speculative-eagle-topk", "-1"), "--speculative-eagle-topk"),  # m2
    ],
)
def test_launch_nonsense_is_one_line_naming_it(model, capsys, extra, named):
    line = _one_line_exit_2(capsys, *H200, "--", *base(model, *extra))
    assert named in line and not line.endswith(": "), line


def test_weights_beyond_the_gpu_say_no_fraction_helps(model, capsys):
    """m3: 1e9 GB of weights on a 139 GB GPU: not "the fraction must be above 7187522.462"."""
    line = _one_line_exit_2(capsys, *H200, "--weights-gb", "1e9", "--", *base(model))
    assert "do not fit" in line and "no --mem-fraction-static" in line and "must be above" not in line, line


def test_a_config_file_given_as_the_model_path_is_named_a_file(model, capsys):
    """m4: ``--model-path Q/config.json`` said "Q/config.json has no config.json"."""
    line = _one_line_exit_2(capsys, *H200, "--", *base(model / "config.json"))
    assert "is a file" in line and "folder" in line and "has no config.json" not in line, line


@pytest.mark.parametrize(
    "extra, why",
    [
        ((), "the radix cache is on and SGLANG_MAMBA_DEDUP_ZERO_COPY_RADIX='0' keeps zero-copy off there"),  # m5
        (
            ("--disable-radix-cache", "--speculative-eagle-topk", "2", "--speculative-num-draft-tokens", "6"),
            "topk > 1",
        ),  # m8
    ],
)
def test_zero_copy_a_server_would_refuse_is_said(model, capsys, monkeypatch, extra, why):
    """m5, m8: the zero-copy flag on a launch the gate refuses (radix cache on with the operator's radix opt-out; a
    tree verify) was planned under "zero-copy commit" with nothing saying a server keeps today's commit."""
    if not versions.release().zero_copy:
        pytest.skip("zero-copy is built for another release")
    monkeypatch.setenv("SGLANG_MAMBA_DEDUP_ZERO_COPY_RADIX", "0")  # no effect with the radix cache off (m8)
    launch = [*base(model, *extra), "--enable-mamba-zero-copy-commit"]
    rc, out, err = _run(capsys, *H200, "--", *launch)
    assert rc == 0, err
    head = out.splitlines()[0]
    assert "zero-copy commit asked for (a server refuses it here" in head, out
    assert f"zero-copy: a server of these settings refuses it and keeps today's commit: {why}" in out, out


@pytest.mark.parametrize(
    "extra, strategy",
    [((), "extra_buffer"), (("--mamba-radix-cache-strategy", "extra_buffer_lazy"), "extra_buffer_lazy"),
     (("--disable-radix-cache",), None)],
    ids=["default", "lazy", "radix-off"],
)  # fmt: skip
def test_zero_copy_with_the_radix_cache_on_is_planned_as_served(model, capsys, monkeypatch, extra, strategy):
    """Issue 50 item 2: ``plan`` says a server of this launch serves zero-copy with the radix cache on and the
    strategy it resolves to (the gate's own reading); with the operator's radix opt-out, that it refuses."""
    from sglang_mamba_dedup import env

    if not versions.release().zero_copy:
        pytest.skip("zero-copy is built for another release")
    launch = [*base(model, *extra), "--enable-mamba-zero-copy-commit"]
    monkeypatch.delenv(env.ZERO_COPY_RADIX, raising=False)
    doc = _json(capsys, launch)
    st = doc["settings"]
    assert st["zero_copy"] is True and st["zero_copy_refused"] is None and st["zero_copy_radix"] == strategy, st
    rc, out, err = _run(capsys, *H200, "--", *launch)
    assert rc == 0, err
    head = out.splitlines()[0]
    if strategy is None:
        assert "zero-copy commit (its accepted table reserved)" in head, head
    else:
        assert f"zero-copy commit with the radix cache on ({strategy}; its accepted table reserved)" in head, head
    monkeypatch.setenv(env.ZERO_COPY_RADIX, "0")
    st = _json(capsys, launch)["settings"]
    assert (st["zero_copy_refused"] is None) is (strategy is None) and st["zero_copy_radix"] is None, st


def test_ctrl_c_is_one_line(model, capsys, monkeypatch):
    """m10: SIGINT while SGLang imports or the estimator runs printed a KeyboardInterrupt traceback (exit 1)."""

    def interrupted(*_a, **_k):
        raise KeyboardInterrupt

    monkeypatch.setattr(plan, "plan", interrupted)
    rc, out, err = _run(capsys, *H200, "--", *base(model))
    assert rc == 130 and not out and err.strip() == "sglang-mamba-dedup plan: stopped by SIGINT", (rc, out, err)


def test_a_zero_copy_value_a_server_would_not_understand_is_said(model, capsys, monkeypatch):
    """m6: ``SGLANG_MAMBA_DEDUP_ZERO_COPY=2`` was planned silently (a server keeps zero-copy off and says why)."""
    from sglang_mamba_dedup import env

    monkeypatch.setenv(env.ZERO_COPY, "2")
    rc, out, err = _run(capsys, *H200, "--", *base(model, "--disable-radix-cache"))
    assert rc == 0, err
    assert f"zero-copy: {env.ZERO_COPY}='2' is not understood" in out, out
    assert "zero-copy commit" not in out.splitlines()[0], out


@pytest.fixture(scope="module")
def nemotron(tmp_path_factory):
    """The config.json of the project's random-weight Nemotron-H mini (Mamba2, mamba_chunk_size 128)."""
    path = tmp_path_factory.mktemp("nemotron-h-mini")
    (path / "config.json").write_text(json.dumps(random_model.build_config(random_model.PRESETS["nemotron-h-mini"])))
    return path


def test_a_mamba2_track_interval_below_the_chunk_size_is_refused_as_sglang_does(nemotron, capsys):
    """Audit 2026-12-05: with the radix cache on (the extra buffer) SGLang's Mamba2 backend asserts at model load that
    ``mamba_track_interval >= mamba_chunk_size``; ``plan`` said such a launch starts (and serves zero-copy)."""
    launch = [*base(nemotron, "--mamba-track-interval", "64"), "--max-running-requests", "64"]
    line = _one_line_exit_2(capsys, *H200, "--", *launch)
    assert "--mamba-track-interval 64 is below the model's mamba_chunk_size 128" in line, line
    for ok in (("--mamba-track-interval", "128"), ("--mamba-track-interval", "64", "--disable-radix-cache")):
        rc, out, err = _run(capsys, *H200, "--json", "--", *base(nemotron, *ok), "--max-running-requests", "64")
        assert rc == 0, (ok, err)


def test_the_lazy_extra_buffer_without_overlap_is_refused_as_a_launch_sglang_refuses(model, capsys):
    """Audit 2026-12-05 (h4): SGLang asserts at pool sizing that its lazy extra buffer has overlap scheduling (every
    release with the strategy); ``plan`` said "SGLang's estimator failed" (exit 1) instead of refusing the flags."""
    launch = base(model, "--mamba-radix-cache-strategy", "extra_buffer_lazy", "--disable-overlap-schedule")
    line = _one_line_exit_2(capsys, *H200, "--", *launch)
    assert "extra_buffer_lazy" in line and "--disable-overlap-schedule" in line and "estimator" not in line, line
