"""benchmarks/speed_claim.py: the README's decode-cycle row and zero-copy's default come from the data (issue 51 item
7). The rule over synthetic verdicts, one condition broken at a time; the README's row is the tracked data's row (a
hand edit fails); the plugin's default is the decision the tracked data gives."""

from __future__ import annotations

import importlib.util
import re
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


#: one console name per proof (model, proof), as kept in benchmarks/results/latest
NAMES = {
    ("qwen3.5-0.8b", "default"): "e2e_h200_0.5.23_zero_copy_radix_default.txt",
    ("qwen3.5-0.8b", "lazy"): "e2e_h200_0.5.23_zero_copy_radix_lazy.txt",
    ("qwen3.5-0.8b", "no_overlap"): "e2e_h200_0.5.23_zero_copy_radix_no_overlap.txt",
    ("qwen3.5-0.8b", "radix off"): "e2e_h200_0.5.23_zero_copy_qwen35.txt",
    ("nemotron-h-mini", "default"): "e2e_h200_0.5.23_zero_copy_radix_default_nemotron_h.txt",
    ("nemotron-h-mini", "lazy"): "e2e_h200_0.5.23_zero_copy_radix_lazy_nemotron_h.txt",
    ("nemotron-h-mini", "no_overlap"): "e2e_h200_0.5.23_zero_copy_radix_no_overlap_nemotron_h.txt",
    ("nemotron-h-mini", "radix off"): "e2e_h200_0.5.23_zero_copy_nemotron_h.txt",
    (None, "pressure"): "e2e_h200_0.5.23_zero_copy_radix_pressure.txt",
    (None, "retract"): "e2e_h200_0.5.23_zero_copy_radix_retract_nemotron_h.txt",
    (None, "sessions"): "e2e_h200_0.5.23_zero_copy_radix_sessions.txt",
}


def _consoles(folder: Path, text: str = "...\nRESULT: PASS (exit 0)\n", skip: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for (_, proof), name in NAMES.items():
        if proof != skip:
            (folder / name).write_text(text)
    return folder


def test_each_console_name_proves_its_own_proof_only():
    """A name matches its proof's pattern whole and no other's: a negative-control or streaming console ending the
    same way (``..._negative_control_zero_copy_qwen35.txt``) proves nothing (the glob ``*_zero_copy_qwen35.txt`` took
    it)."""
    import re

    patterns = {(m, p): pat for m, proofs in claim.PROOFS.items() for p, pat in proofs.items()}
    assert set(patterns) == set(NAMES)
    for key, name in NAMES.items():
        assert [k for k, pat in patterns.items() if re.fullmatch(pat, name)] == [key], name
    for other in (
        "e2e_h200_0.5.23_negative_control_zero_copy_qwen35.txt",
        "e2e_h200_0.5.23_streaming_sessions_zero_copy.txt",
        "e2e_h200_0.5.23_zero_copy_radix_default.txt.bak",
        "e2e_h200_0.5.13.post1_zero_copy_radix_stress_nemotron_h.txt",
    ):
        got = [k for k, pat in patterns.items() if re.fullmatch(pat, other)]
        assert got == ([(None, "pressure"), (None, "retract")] if "stress" in other else []), (other, got)
    # the card in the name: a proof run on a lent H100 proves as one on an H200 (md5s, not speed); no other card
    for key, name in NAMES.items():
        h100 = name.replace("e2e_h200_", "e2e_h100_")
        assert [k for k, pat in patterns.items() if re.fullmatch(pat, h100)] == [key], h100
        assert not [k for k, pat in patterns.items() if re.fullmatch(pat, name.replace("_h200_", "_a100_"))], name


def test_a_negative_control_console_proves_no_proof(tmp_path):
    folder = _consoles(tmp_path / "l", skip="radix off")
    (folder / "e2e_h200_0.5.23_negative_control_zero_copy_qwen35.txt").write_text("RESULT: PASS (exit 0)\n")
    (folder / "e2e_h200_0.5.23_negative_control_zero_copy_nemotron_h.txt").write_text("RESULT: PASS (exit 0)\n")
    unmet = {u.split(":")[0] for u in claim.decide(_rows(), folder).unmet}
    assert unmet == {"radix proof radix off on Qwen3.5-0.8B", "radix proof radix off on Nemotron-H"}, unmet


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
        (lambda r: _set(r, "qwen3.5-0.8b", 1, runs_agree="1.0150"), "runs apart by 1.0150 (> 1.01)"),
        (
            lambda r: _set(r, "qwen3.5-0.8b", 16, runs_agree="1.0557", busy_runs_agree="1.0003"),
            "runs apart by 1.0557 (> 1.01; the GPU busy time 1.0003 apart: the host's part moved)",
        ),
        (
            lambda r: _set(r, "qwen3.5-0.8b", 16, runs_agree="1.0557", busy_runs_agree="1.0400"),
            "runs apart by 1.0557 (> 1.01; the GPU busy time 1.0400 apart too)",
        ),
        (
            lambda r: _set(
                r, "nemotron-h-mini", 64, runs_agree="1.07", spread_from="generates", gens_needed="4381", gens_had="20"
            ),
            "runs apart by 1.07 (> 1.01; spread from the generates; ~4381 timed generates per mode needed at the "
            "generates' noise, 20 had)",
        ),
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
        "runs-apart-host",
        "runs-apart-gpu-too",
        "runs-apart-needs",
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


def test_the_row_shows_each_model_with_its_intervals_radix_on_once_measured():
    off = _rows(models=["qwen3.5-0.8b"], radix="off")[1:]
    row = claim.readme_row(off, claim.Decision(default_on=False, unmet=["x"]))
    assert row.startswith(claim.ROW_HEAD) and row.count(" | ") == 2 and row.endswith(" |")
    assert "Qwen3.5-0.8B radix off, 2 runs 12-06: - / 0.98 [0.97, 0.98] / 0.95 [0.94, 0.95]" in row  # "-": batch 1
    assert "faster at 16, 64, 128" in row and "Default: opt-in (1 unmet conditions" in row
    both = off + _rows(radix="on")
    row = claim.readme_row(both, claim.Decision(default_on=False, unmet=["x"]))
    assert "radix off" not in row and row.index("Nemotron-H radix on") < row.index("Qwen3.5-0.8B radix on")
    assert "equal at 1; faster at 16, 64, 128" in row
    assert "not measured" in claim.readme_row([], claim.Decision(default_on=False))


def test_the_readme_holds_the_longest_row_two_models_give():
    """Both models measured with the radix cache on, mixed verdicts, intervals of 4 digits, cards named, every
    condition unmet:
    the README stays within its 12 KiB (tests/plugin/test_patch_table.py) with that row in place of today's."""
    worst = {
        1: ("1.0123", "inconclusive"),
        16: ("0.9987", "equal within +-1 %"),
        64: ("0.9512", "faster"),
        128: ("1.0234", "slower"),
    }
    rows = _rows(good=worst) + _rows(radix="off", good=worst)
    for r in rows:
        r["ci_lo"], r["ci_hi"], r["runs"] = "0.8765", "1.2345", "20261231T2359Z-A;20261230T0000Z-B;20261229T0000Z-C"
        r["gpu"] = "NVIDIA H100 80GB HBM3"  # the card named in each cell
        r["runs_agree"] = "1.0123" if r["batch"] == "1" else "1.2345"  # runs apart, said in each cell
    d = claim.Decision(default_on=False, unmet=["x"] * 99)
    row = claim.readme_row(rows, d)
    assert row.count("3 runs 12-29…12-31 (1.01-1.23 apart): ") == 2, row
    text = claim.replace_row((ROOT / "README.md").read_text(), row)
    assert len(text.encode()) <= 12 * 1024, len(text.encode())


def test_the_row_says_when_the_runs_of_a_pooled_verdict_are_more_than_one_percent_apart():
    rows = _rows()  # every batch's runs within 0.4 %
    row = claim.readme_row(rows, claim.Decision(default_on=True))
    assert "apart" not in row and "Nemotron-H radix on, 2 runs 12-06: " in row, row
    rows = _set(rows, "nemotron-h-mini", 16, runs_agree="1.0557")
    rows = _set(rows, "nemotron-h-mini", 128, runs_agree="1.0188")
    row = claim.readme_row(rows, claim.Decision(default_on=False, unmet=["x"]))
    assert "Nemotron-H radix on, 2 runs 12-06 (1.00-1.06 apart): " in row, row
    assert "Qwen3.5-0.8B radix on, 2 runs 12-06: " in row, row  # its runs agree: nothing said
    one = _set(_rows(), "qwen3.5-0.8b", 64, runs_agree="1.2")
    for r in one:
        if r["model"] == "qwen3.5-0.8b":
            r["runs_agree"] = "1.2"
    assert "Qwen3.5-0.8B radix on, 2 runs 12-06 (1.20 apart): " in claim.readme_row(
        one, claim.Decision(default_on=False)
    )


@pytest.mark.parametrize(
    "change, said",
    [
        (lambda r: _set(r, "qwen3.5-0.8b", 64, ratio="nan"), "batch 64: not >= 4"),
        (lambda r: _set(r, "qwen3.5-0.8b", 1, ratio=""), "batch 1: not shown not slower"),
        (lambda r: _set(r, "qwen3.5-0.8b", 16, verdict="equal-ish"), "batch 16: not shown not slower"),
        (lambda r: _set(r, "qwen3.5-0.8b", 64, runs_agree="nan"), "runs apart by nan"),
        (lambda r: _set(r, "qwen3.5-0.8b", 64, runs_agree="0.5"), "runs apart by 0.5"),
        (lambda r: _set(r, "qwen3.5-0.8b", 64, runs="20261206T0100Z-A;20261206T0100Z-A"), "1 run(s), 2 needed"),
    ],
    ids=["ratio-nan", "ratio-empty", "verdict-equalish", "agree-nan", "agree-below-1", "one-run-twice"],
)
def test_odd_cells_meet_no_condition(tmp_path, change, said):
    d = claim.decide(change(_rows()), _consoles(tmp_path))
    assert not d.default_on and any(said in u for u in d.unmet), d.unmet


@pytest.mark.parametrize("what", ["generates-csv", "foreign-csv", "folder", "bytes", "batch-word", "no-readme"])
def test_unreadable_inputs_are_one_line(tmp_path, capsys, what):
    combined, readme = tmp_path / "combined.csv", tmp_path / "README.md"
    readme.write_text((ROOT / "README.md").read_text())
    header = ",".join(claim.NEEDED)
    if what == "generates-csv":
        combined.write_text("model,run,batch,mode,engine,generate,wall_s\nm,A,1,stock,1,1,0.2\n")
    elif what == "foreign-csv":
        combined.write_text("a,b\n1,2\n")
    elif what == "folder":
        combined.mkdir()
    elif what == "bytes":
        combined.write_bytes(b"\xff\xfe\x00\x81" * 50)
    elif what == "batch-word":
        combined.write_text(header + "\nm,x,zero-copy,A;B,0.9,0.8,1.0,faster,1.0,ok\n")
    else:
        combined.write_text(header + "\n")
        readme.unlink()
    assert claim.main(["--check", "--combined", str(combined), "--readme", str(readme)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("speed_claim.py: "), err


def test_a_folder_named_like_a_console_is_no_proof(tmp_path):
    folder = _consoles(tmp_path / "l", skip="sessions")
    (folder / NAMES[(None, "sessions")]).mkdir()
    d = claim.decide(_rows(), folder)
    assert [u.split(":")[0] for u in d.unmet] == ["radix proof sessions on either model"]


def test_the_readmes_row_is_the_tracked_datas_row(tmp_path, capsys):
    assert claim.main(["--check"]) == 0, "README.md's decode-cycle row: run python3 benchmarks/speed_claim.py --write"
    readme = tmp_path / "README.md"
    text = (ROOT / "README.md").read_text()
    row = next(line for line in text.split("\n") if line.startswith(claim.ROW_HEAD))
    ratio = re.search(r"\d\.\d\d \[", row).group(0)  # the row's first ratio, edited by hand
    readme.write_text(text.replace(row, row.replace(ratio, ("0.93 [" if ratio != "0.93 [" else "0.94 ["), 1)))
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
    monkeypatch.delenv(env.ZERO_COPY_RADIX, raising=False)
    d = claim.decide(claim.read_latest(), claim.LATEST)
    said = f"the data says zero-copy {'on' if d.default_on else 'opt-in'}; unmet: {d.unmet}"
    assert zero_copy.wanted() == d.default_on, said
    assert zero_copy.radix_wanted(), "one switch: zero-copy asked for serves the radix cache on too"


def test_the_stress_proof_stands_for_pressure_and_retraction(tmp_path):
    folder = _consoles(tmp_path, skip="pressure")
    (folder / NAMES[(None, "retract")]).unlink()
    assert {u.split(":")[0] for u in claim.decide(_rows(), folder).unmet} == {
        "radix proof pressure on either model",
        "radix proof retract on either model",
    }
    (folder / "e2e_h200_0.5.23_zero_copy_radix_stress_nemotron_h.txt").write_text("RESULT: PASS (exit 0)\n")
    assert claim.decide(_rows(), folder).default_on


def test_every_card_measured_must_meet_the_rule_and_the_row_shows_each_models_newest_card(tmp_path):
    """Verdicts of one model from two cards: each card's must meet the rule (the default is one for every card), the
    unmet condition names its card, ReplaySSM is compared on the same card only, and the README shows each model's
    newest card, named."""
    h200 = [dict(r, gpu="NVIDIA H200") for r in _rows()]
    h100 = [dict(r, gpu="NVIDIA H100 80GB HBM3", runs="20261207T0100Z-A;20261207T0110Z-B") for r in _rows()]
    folder = _consoles(tmp_path)
    assert claim.decide(h200 + h100, folder).default_on
    _set(h100, "qwen3.5-0.8b", 128, ratio="1.0200", verdict="slower")
    d = claim.decide(h200 + h100, folder)
    assert not d.default_on and d.unmet == [
        "Qwen3.5-0.8B, radix on, batch 128 on the H100: not >= 4 % faster (1.0200, slower)"
    ]
    row = claim.readme_row(h200 + h100, d)
    assert row.count("(H100), 2 runs 12-07") == 2 and "(H200)" not in row and "slower at 128" in row
    assert "(H200), 2 runs 12-06" in claim.readme_row(h200 + [r for r in h100 if r["model"] != "qwen3.5-0.8b"], d)
    rs = [dict(r, mode="replayssm", ratio="0.9000") for r in h200]
    told = claim.decide(h200 + h100 + rs, folder).told
    vs = [t for t in told if "ReplaySSM" in t]
    assert sum("ReplaySSM-spec 0.9000" in t for t in vs) == 4 and all("on the H200" in t for t in vs), told


def test_the_combined_verdicts_of_every_card_in_latest_are_read(tmp_path, capsys):
    header = list(claim.NEEDED) + ["radix_cache", "gpu"]
    for gpu, tag in (("NVIDIA H200", "nvidia-h200"), ("NVIDIA H100 80GB HBM3", "nvidia-h100")):
        lines = [",".join(header)] + [",".join(str(dict(r, gpu=gpu)[k]) for k in header) for r in _rows()]
        (tmp_path / f"cycle_live_combined-{tag}.csv").write_text("\n".join(lines) + "\n")
    (tmp_path / "cycle_live_combined-nvidia-h100.csv.bak").write_text("not read\n")
    rows = claim.read_latest(tmp_path)
    assert len(rows) == 2 * len(_rows()) and {claim.card(claim.gpu_of(r)) for r in rows} == {"H100", "H200"}
    _consoles(tmp_path)
    assert claim.main(["--latest", str(tmp_path)]) == 0
    assert "zero-copy's default: on wherever its gate passes" in capsys.readouterr().out
    one = tmp_path / "cycle_live_combined-nvidia-h100.csv"
    assert claim.main(["--latest", str(tmp_path), "--combined", str(one)]) == 0
    capsys.readouterr()
    for argv, said in (
        ([str(one), str(tmp_path / ".." / tmp_path.name / one.name)], "named twice"),  # would count twice
        ([str(tmp_path / "cycle_live_combined-nvidia-h10.csv")], "no such file"),  # a typo: not "not measured"
    ):
        assert claim.main(["--latest", str(tmp_path), "--combined", *argv]) == 2
        err = capsys.readouterr().err
        assert said in err and len(err.strip().splitlines()) == 1, err


def test_a_card_answers_for_every_batch_and_a_pooled_card_is_refused(tmp_path, capsys):
    """Audit 2026-12-05: an H100 that measured batch 64 only raised nothing for its other batches (the H200's rows
    stood for them), and the README showed the partial card as the newest; a verdict pooled over two cards counted
    as the first card's; a run id without a timestamp sorted as the newest."""
    h200 = [dict(r, gpu="NVIDIA H200") for r in _rows()]
    part = [dict(r, gpu="NVIDIA H100 80GB HBM3", runs="20261209T0100Z-A;20261209T0110Z-B") for r in _rows()]
    part = [r for r in part if r["batch"] == "64"]
    folder = _consoles(tmp_path)
    d = claim.decide(h200 + part, folder)
    assert sorted(u.split(":")[0] for u in d.unmet) == sorted(
        f"{m}, radix on, batch {b} on the H100" for m in ("Qwen3.5-0.8B", "Nemotron-H") for b in (1, 16, 128)
    ), d.unmet
    row = claim.readme_row(h200 + part, d)
    assert "(H200), 2 runs 12-06" in row and "(H100)" not in row, row  # the card with every batch is shown
    named = [dict(r, gpu="NVIDIA H100 80GB HBM3", runs="smoke-radix;smoke-2") for r in _rows()]
    assert "(H200)" in claim.readme_row(h200 + named, d)  # no timestamp: not the newest
    header = list(claim.NEEDED) + ["radix_cache", "gpu"]
    pooled = tmp_path / "pooled.csv"
    lines = [",".join(header)] + [
        ",".join(str(dict(r, gpu="NVIDIA H100;NVIDIA H200")[k]) for k in header) for r in _rows()
    ]
    pooled.write_text("\n".join(lines) + "\n")
    assert claim.main(["--latest", str(tmp_path), "--combined", str(pooled)]) == 2
    assert "pooled over cards" in capsys.readouterr().err


def test_the_claim_tells_the_gpu_busy_verdict_beside_the_wall(tmp_path):
    """The GPU's busy time is told beside the decision, never a condition of it: a wall that meets the rule everywhere
    gives the default on whatever the busy verdicts say, and busy verdicts of "faster" everywhere do not lift a wall
    that does not (the 12-05 audit's B5: with one inconclusive row the first assertion could not fail)."""
    consoles = _consoles(tmp_path)

    def busy(rows, verdict, ratio="0.9312", runs=None):
        for r in rows:
            r.update(busy_ratio=ratio, busy_ci_lo="0.92", busy_ci_hi="0.94", busy_verdict=verdict)
            r.update(busy_runs_agree="1.004", busy_runs=runs or r["runs"], gpu="NVIDIA H100 80GB HBM3")
        return rows

    assert claim.decide(busy(_rows(), "slower", ratio="1.0500"), consoles).default_on  # the wall's rule met
    assert claim.decide(busy(_rows(), "inconclusive"), consoles).default_on
    walls_fail = busy(_set(_rows(), "nemotron-h-mini", 64, verdict="inconclusive"), "faster")
    d = claim.decide(walls_fail, consoles)
    assert not d.default_on and d.unmet == [
        "Nemotron-H, radix on, batch 64 on the H100: not >= 4 % faster (0.9500, inconclusive)"
    ], d.unmet
    told = [t for t in d.told if "GPU busy" in t]
    assert (
        len(told) == 8
        and (
            "Nemotron-H, radix on, batch 64 on the H100: GPU busy zero-copy / stock 0.9312 [0.92, 0.94] "
            "(faster, runs apart by 1.004)"
        )
        in told
    ), told
    # from one run of two: said; a model without busy verdicts: "not measured"; ReplaySSM's told too
    rows = busy(_rows(models=["qwen3.5-0.8b"]), "faster", runs="20261206T0100Z-A")
    rows += busy(_rows(models=["qwen3.5-0.8b"], mode="replayssm"), "faster", ratio="0.8000")
    told = claim.decide(rows, consoles).told
    few = [t for t in told if "GPU busy zero-copy" in t]
    assert len(few) == 4 and all("from 20261206T0100Z-A only of 20261206T0100Z-A;20261206T0110Z-B" in t for t in few)
    assert "Nemotron-H, radix on: GPU busy time not measured (bench_live --gpu-busy)" in told
    assert any("GPU busy ReplaySSM-spec / stock 0.8000" in t for t in told), told
