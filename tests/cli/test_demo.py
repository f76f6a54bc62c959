"""``sglang-mamba-dedup demo``: shows what the plugin changes on the installed release, on this CPU machine."""

import pytest

from sglang_mamba_dedup import env, versions
from sglang_mamba_dedup.cli import demo
from sglang_mamba_dedup.patcher import is_ours

pytestmark = pytest.mark.release


def _row(out, name):
    (line,) = [ln for ln in out.splitlines() if ln.startswith(name)]
    return line


def test_demo_shows_the_plugins_effect(capsys):
    assert demo.main(["--slots", "2", "--draft-tokens", "3"]) == 0
    out = capsys.readouterr().out
    mode = versions.mode_for(versions.installed_sglang_version())
    assert f"({mode} mode)" in out
    assert _row(out, "conv-window layout").split()[-1] == ("ours" if mode == "backport" else "upstream")
    assert _row(out, "post-verify commit").endswith("plugin's fused kernel")
    physical = [float(x) for x in _row(out, "intermediate_conv_window (physical)").split()[2::2]]
    dense, off, on = physical
    assert on == pytest.approx(dense * (3 + 4 - 2) / (3 * 3), abs=0.011)  # (D+K-2)/(D*(K-1)), 2 decimals
    assert (off == dense) == (mode == "backport")  # upstream dedups by itself from 0.5.14 on
    assert "redirected to the CPU" in out and "mamba-cache estimator" in out


def test_demo_honours_strict_and_rejects_bad_input(monkeypatch, capsys):
    monkeypatch.setenv(env.SWITCH, "strict")
    assert demo.main(["--slots", "1", "--draft-tokens", "2"]) == 0
    assert "plugin on (topk=1, strict)" in capsys.readouterr().out
    monkeypatch.setenv(env.SWITCH, "bogus")
    assert demo.main([]) == 2
    for bad in (["--slots", "-1"], ["--draft-tokens", "0"]):
        with pytest.raises(SystemExit) as e:
            demo.main(bad)
        assert e.value.code == 2


def test_demo_on_a_mamba2_model_with_bf16_ssm(capsys):
    """Nemotron-H-8B (bf16 SSM): head_dim != state, conv dim 10240; the demo's bytes follow the shape table."""
    from sglang_mamba_dedup.offline import shapes

    assert demo.main(["--model", "nemotron-h-8b-bf16", "--slots", "1", "--draft-tokens", "3"]) == 0
    out = capsys.readouterr().out
    s = shapes.NEMOTRON_H_8B_BF16
    mib = 1 << 20
    ssm = [float(x) for x in _row(out, "ssm_state").split()[1::2]]
    expected_ssm = 2 * s.gdn_layers * 128 * 64 * 128 * 2 / mib  # (slots + 1) rows, bf16
    assert ssm == [pytest.approx(expected_ssm, abs=0.01)] * 3
    physical = [float(x) for x in _row(out, "intermediate_conv_window (physical)").split()[2::2]]
    dense_row = 2 * s.gdn_layers * 3 * s.conv_dim * 3 * 2 / mib  # rows x layers x D x dim x (K-1) x bf16
    assert physical[0] == pytest.approx(dense_row, abs=0.01)
    assert physical[2] == pytest.approx(dense_row * (3 + 4 - 2) / (3 * 3), abs=0.01)


@pytest.mark.parametrize("command", ["plan", "demo"])
def test_what_if_commands_write_no_report_and_install_no_fault(monkeypatch, tmp_path, capsys, command):
    """``plan`` and ``demo`` switch the plugin in their own process (``cli._args.switched``) but serve nothing: with a
    report folder and the negative-control fault in the environment, no status file appears and no fault is
    put in place, while the plugin's effect still shows."""
    from sglang_mamba_dedup import report
    from sglang_mamba_dedup.patches import commit as commit_patch
    from sglang_mamba_dedup.patches import faults
    from sglang_mamba_dedup.planner import plan

    reports = tmp_path / "reports"
    monkeypatch.setenv(env.REPORT_DIR, str(reports))
    monkeypatch.setenv(env.FAULT, faults.COMMIT_STEP0)
    installs: list[str] = []
    monkeypatch.setattr(report, "record_fault", lambda name: installs.append(name) if name else None)
    if command == "plan":
        assert plan.main(["--shape", "qwen3.5-0.8b", "--json"]) == 0
        assert '"mamba_slots"' in capsys.readouterr().out
    else:
        assert demo.main(["--slots", "1", "--draft-tokens", "2"]) == 0
        assert _row(capsys.readouterr().out, "post-verify commit").endswith("plugin's fused kernel")
    assert not reports.exists() or sorted(p.name for p in reports.iterdir()) == []
    assert installs == [] and faults.installed() is None
    assert not is_ours(vars(commit_patch._Route)["commit"])
