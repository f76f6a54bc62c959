"""``sglang-mamba-dedup demo``: shows what the plugin changes on the installed release, on this CPU machine."""

import pytest

from sglang_mamba_dedup import activation, versions
from sglang_mamba_dedup.cli import demo

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
    monkeypatch.setenv(activation.ENV, "strict")
    assert demo.main(["--slots", "1", "--draft-tokens", "2"]) == 0
    assert "plugin on (topk=1, strict)" in capsys.readouterr().out
    monkeypatch.setenv(activation.ENV, "bogus")
    assert demo.main([]) == 2
    for bad in (["--slots", "-1"], ["--draft-tokens", "0"]):
        with pytest.raises(SystemExit) as e:
            demo.main(bad)
        assert e.value.code == 2
