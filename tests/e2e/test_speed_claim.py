"""benchmarks/speed_claim.py: the README's decode-cycle row and zero-copy's default come from the data (issue 51 item
7). The rule over synthetic verdicts, one condition broken at a time; the README's row is the tracked data's row (a
hand edit fails); the plugin's default is the decision the tracked data gives."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("speed_claim", ROOT / "benchmarks/speed_claim.py")
claim = importlib.util.module_from_spec(_spec)
sys.modules["speed_claim"] = claim
_spec.loader.exec_module(claim)

GOOD = {
    1: ("1.0010", "equal within +-1 %"),
    16: ("0.9800", "faster"),
    64: ("0.9500", "faster"),
    128: ("0.9300", "faster"),
}


def _rows(models=tuple(claim.MODELS), radix="on", mode="zero-copy", good=GOOD) -> list[dict]:
    return [
        {
            "model": m,
            "radix_cache": radix,
            "batch": str(b),
            "mode": mode,
            "runs": "20261206T0100Z-A;20261206T0110Z-B",
            "ratio": ratio,
            "ci_lo": f"{float(ratio) - 0.005:.4f}",
            "ci_hi": f"{float(ratio) + 0.005:.4f}",
            "verdict": verdict,
            "runs_agree": "1.004",
            "health": "ok",
        }
        for m in models
        for b, (ratio, verdict) in good.items()
    ]


def _consoles(folder: Path, text: str = "...\nRESULT: PASS (exit 0)\n", skip: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for proofs in claim.PROOFS.values():
        for proof, patterns in proofs.items():
            name = patterns[0].replace("*", "0.5.23", 1).replace("*", "_qwen35")
            if proof != skip:
                (folder / name).write_text(text)
    return folder


def test_every_condition_met_gives_the_default_on(tmp_path):
    d = claim.decide(_rows(), _consoles(tmp_path))
    assert d.default_on and d.unmet == [], d.unmet
    assert "**on**" in claim.readme_row(_rows(), d)


def _set(rows, model, batch, **kw):
    for r in rows:
        if r["model"] == model and r["batch"] == str(batch):
            r.update(kw)
    return rows


@pytest.mark.parametrize(
    "change, said",
    [
        (lambda r: _set(r, "qwen3.5-0.8b", 64, ratio="0.9700"), "batch 64: not >= 4 % faster (0.9700, faster)"),
        (
            lambda r: _set(r, "nemotron-h-mini", 128, verdict="inconclusive"),
            "Nemotron-H, radix on, batch 128: not >= 4",
        ),
        (lambda r: _set(r, "qwen3.5-0.8b", 1, ratio="1.03", verdict="slower"), "batch 1: not shown not slower"),
        (lambda r: _set(r, "nemotron-h-mini", 16, verdict="inconclusive"), "batch 16: not shown not slower"),
        (lambda r: _set(r, "qwen3.5-0.8b", 64, runs="20261206T0100Z-A"), "1 run(s), 2 needed"),
        (lambda r: _set(r, "qwen3.5-0.8b", 1, runs_agree="1.0150"), "runs apart by 1.0150"),
        (
            lambda r: _set(r, "nemotron-h-mini", 1, health="20261206T0100Z-A: stock-e1 robust CV 2.0 % > 1.5 %"),
            "health",
        ),
        (lambda r: [x for x in r if x["model"] != "nemotron-h-mini"], "Nemotron-H, radix on, batch 1: no combined"),
        (lambda r: [dict(x, radix_cache="off") for x in r], "Qwen3.5-0.8B, radix on, batch 64: no combined verdict"),
    ],
    ids=[
        "gain-3pc",
        "b128-inconclusive",
        "b1-slower",
        "b16-inconclusive",
        "one-run",
        "runs-apart",
        "health",
        "no-nemotron",
        "radix-off-only",
    ],
)
def test_each_unmet_condition_keeps_zero_copy_opt_in_and_is_named(tmp_path, change, said):
    rows = change(_rows())
    d = claim.decide(rows, _consoles(tmp_path))
    assert not d.default_on and any(said in u for u in d.unmet), d.unmet
    assert "opt-in (" in claim.readme_row(rows, d)


@pytest.mark.parametrize("proof", ["default", "no_overlap", "pressure", "sessions"])
def test_a_missing_or_failed_radix_proof_keeps_zero_copy_opt_in(tmp_path, proof):
    d = claim.decide(_rows(), _consoles(tmp_path / "missing", skip=proof))
    assert not d.default_on and any(f"radix proof {proof}" in u and "no console" in u for u in d.unmet), d.unmet
    for i, text in enumerate(
        [
            "RESULT: FAIL -- on differs from off\n",
            # run_e2e.sh's own verdict after the e2e's: the e2e passed, the proof's event never happened
            "RESULT: PASS (exit 0)\n[run_e2e +200s] evicted: 0\nRESULT: FAIL -- no tree eviction under zero-copy\n",
            "the e2e was cut before its verdict\n",
        ]
    ):
        failed = _consoles(tmp_path / f"failed{i}")
        for p in failed.glob(f"*radix_{proof}*"):
            p.write_text(text)
        d = claim.decide(_rows(), failed)
        assert not d.default_on and any(f"radix proof {proof}" in u and "not passed" in u for u in d.unmet), text


def test_replayssm_is_told_beside_the_decision(tmp_path):
    rows = _rows() + _rows(models=["qwen3.5-0.8b"], mode="replayssm", good={**GOOD, 64: ("0.9600", "faster")})
    d = claim.decide(rows, _consoles(tmp_path))
    assert d.default_on  # not a condition of the default
    told = {t.split(":")[0]: t for t in d.told}
    assert "0.9500 (faster) at least as fast as ReplaySSM-spec 0.9600" in told["Qwen3.5-0.8B, radix on, batch 64"]
    rows = _set(rows, "qwen3.5-0.8b", 128, ratio="0.9300")
    for r in rows:
        if r["mode"] == "replayssm" and r["batch"] == "128":
            r["ratio"] = "0.9000"
    told = {t.split(":")[0]: t for t in claim.decide(rows, tmp_path).told}
    assert "slower than ReplaySSM-spec 0.9000" in told["Qwen3.5-0.8B, radix on, batch 128"]
    assert "not measured" in claim.decide(_rows(), tmp_path).told[0]


def test_the_row_shows_each_model_and_radix_setting_with_its_intervals():
    rows = _rows(models=["qwen3.5-0.8b"], radix="off")[1:] + _rows(models=["nemotron-h-mini"])
    row = claim.readme_row(rows, claim.Decision(default_on=False, unmet=["x"]))
    assert row.startswith(claim.ROW_HEAD) and row.count(" | ") == 2 and row.endswith(" |")
    off, on = row.index("Qwen3.5-0.8B radix off"), row.index("Nemotron-H radix on")
    assert off < on  # radix off first
    assert "2 runs 12-06: - / 0.98 [0.97, 0.98] / 0.95 [0.94, 0.95]" in row  # batch 1 not measured: "-"
    assert "equal at 1; faster at 16, 64, 128" in row and "Default: opt-in (1 conditions unmet" in row
    assert "not measured" in claim.readme_row([], claim.Decision(default_on=False))


def test_the_readmes_row_is_the_tracked_datas_row(tmp_path, capsys):
    assert claim.main(["--check"]) == 0, "README.md's decode-cycle row: run python3 benchmarks/speed_claim.py --write"
    readme = tmp_path / "README.md"
    text = (ROOT / "README.md").read_text()
    row = next(line for line in text.split("\n") if line.startswith(claim.ROW_HEAD))
    readme.write_text(text.replace(row, row.replace("0.95 [", "0.93 [", 1)))
    assert claim.main(["--check", "--readme", str(readme)]) == 1  # a hand edit
    assert claim.main(["--write", "--readme", str(readme)]) == 0 and readme.read_text() == text
    readme.write_text(text.replace(row, ""))
    assert claim.main(["--check", "--readme", str(readme)]) == 2
    assert "0 lines start with" in capsys.readouterr().err


def test_the_plugins_default_is_the_decision_of_the_tracked_data(monkeypatch):
    """Zero-copy's default is the data's: flipping it without the measurements fails here, and so does leaving it
    opt-in once the measurements and proofs say on."""
    from sglang_mamba_dedup import env
    from sglang_mamba_dedup.patches import zero_copy

    monkeypatch.delenv(env.ZERO_COPY, raising=False)
    d = claim.decide(claim.read_combined(), claim.LATEST)
    assert zero_copy.wanted() == d.default_on, (
        f"the data says zero-copy {'on' if d.default_on else 'opt-in'}; unmet: {d.unmet}"
    )


def test_the_stress_proof_stands_for_pressure_and_retraction(tmp_path):
    folder = _consoles(tmp_path, skip="pressure")
    for p in folder.glob("*radix_retract*"):
        p.unlink()
    assert {u.split(":")[0] for u in claim.decide(_rows(), folder).unmet} == {
        "radix proof pressure on either model",
        "radix proof retract on either model",
    }
    (folder / "e2e_h200_0.5.23_zero_copy_radix_stress_nemotron_h.txt").write_text("RESULT: PASS (exit 0)\n")
    assert claim.decide(_rows(), folder).default_on
