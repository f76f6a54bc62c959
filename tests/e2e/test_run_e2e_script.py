"""``tools/gpu-engine/run_e2e.sh`` refuses a proof it does not know, and a track interval that is no number, before
its minutes of setup (audit 2026-12-05: two proof names in one ``E2E_PROOF`` passed the check and ran the default
proof under their names). The script runs in a copy of the tree whose setup only says it was reached."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SETUP_REACHED = 99


@pytest.fixture
def tree(tmp_path):
    tools = tmp_path / "tools" / "gpu-engine"
    tools.mkdir(parents=True)
    shutil.copy(ROOT / "tools" / "gpu-engine" / "run_e2e.sh", tools)
    (tools / "_setup.sh").write_text(f"echo setup reached; exit {SETUP_REACHED}\n")
    return tmp_path


def _run(tree, **env):
    full = {k: v for k, v in os.environ.items() if not k.startswith("E2E_")}
    full.update(OUT=str(tree / "out"), **env)
    r = subprocess.run(
        ["bash", "tools/gpu-engine/run_e2e.sh"], cwd=tree, env=full, capture_output=True, text=True, timeout=60
    )
    return r.returncode, r.stdout, r.stderr


@pytest.mark.parametrize(
    "env, needle",
    [
        ({"E2E_PROOF": "radix-lazy radix-no-overlap"}, "E2E_PROOF='radix-lazy radix-no-overlap' is not one of"),
        ({"E2E_PROOF": "radix-default radix-lazy"}, "is not one of"),
        ({"E2E_PROOF": "radix-"}, "is not one of"),
        ({"E2E_PROOF": "radix-lazy "}, "is not one of"),
        ({"E2E_PROOF": "radix-interval", "E2E_TRACK_INTERVAL": "abc"}, "E2E_TRACK_INTERVAL='abc' is not a whole"),
        ({"E2E_PROOF": "radix-pressure", "E2E_TRACK_INTERVAL": "0"}, "E2E_TRACK_INTERVAL='0' is not a whole"),
    ],
    ids=["two-names", "two-names-first", "prefix", "trailing-space", "interval-word", "interval-0"],
)
def test_a_bad_proof_is_one_line_before_the_setup(tree, env, needle):
    rc, out, err = _run(tree, **env)
    assert rc == 2 and "setup reached" not in out and len(err.strip().splitlines()) == 1, (rc, out, err)
    assert needle in err, err


@pytest.mark.parametrize("proof", ["", "radix-default", "radix-sessions"])
def test_a_known_proof_goes_on_to_the_setup(tree, proof):
    rc, out, err = _run(tree, E2E_PROOF=proof, E2E_TRACK_INTERVAL="64")
    assert rc == SETUP_REACHED and "setup reached" in out, (rc, out, err)


def _fake_e2e(tree, summary: dict) -> dict:
    """A setup that defines what the runner uses, and a ``python3`` whose e2e writes ``summary`` as its JSON summary,
    records its argument list and ``SGLANG_TEST_RETRACT`` (``calls/<route>``), prints the e2e's passing verdict and
    exits 0 (the server route: ``FAKE_SERVER_RC``); every other ``python3`` call is the real one."""
    (tree / "summary.json").write_text(json.dumps(summary))
    (tree / "calls").mkdir()
    (tree / "tools" / "gpu-engine" / "_setup.sh").write_text("standin_engine_args=()\ncollect_outputs() { :; }\n")
    bin_dir = tree / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "python3"
    fake.write_text(
        "#!/usr/bin/env bash\n"
        'if [ "$2" = -m ]; then\n'
        "  shift 3\n"
        '  route=offline; for a in "$@"; do [ "$a" = --server ] && route=server; done\n'
        '  printf "%s\\n" "SGLANG_TEST_RETRACT=${SGLANG_TEST_RETRACT:-}" "$@" > "$FAKE_CALLS/$route"\n'
        '  if [ "$route" = server ]; then echo "RESULT: FAIL (exit ${FAKE_SERVER_RC:-0})"; exit "${FAKE_SERVER_RC:-0}"; fi\n'
        '  while [ $# -gt 0 ]; do [ "$1" = --json-out ] && cp "$FAKE_SUMMARY" "$2"; shift; done\n'
        '  echo "RESULT: PASS (exit 0)"\n'
        "  exit 0\n"
        "fi\n"
        f'exec {sys.executable} "$@"\n'
    )
    fake.chmod(0o755)
    return {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "FAKE_SUMMARY": str(tree / "summary.json"),
        "FAKE_CALLS": str(tree / "calls"),
        "E2E_FAULT": "zc_no_track",
    }


def _console_passes(tree) -> bool:
    """What benchmarks/speed_claim.py makes of the call's console ($OUT/e2e.txt): its last RESULT line."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("speed_claim_for_test", ROOT / "benchmarks" / "speed_claim.py")
    claim = sys.modules.setdefault("speed_claim_for_test", importlib.util.module_from_spec(spec))
    spec.loader.exec_module(claim)
    return claim.passed_console((tree / "out" / "e2e.txt").read_text())


def _state(evictions):
    return [{"zero_copy": {"decision": "on", "zc_tree_evictions": evictions}}]


@pytest.mark.parametrize(
    "on, fault, rc",
    [(0, 5, 10), (None, 5, 10), (3, 0, 0), (2, 4, 0)],
    ids=["fault-run-only", "on-run-unreported", "on-run", "both"],
)
def test_the_pressure_proof_needs_evictions_in_the_on_run(tree, on, fault, rc):
    """Audit 2026-12-05: the evictions were summed over every run, so a fault run that evicted passed a pressure
    proof whose on run (the one off == on is about) saw none."""
    summary = {
        "runs": [
            {"mode": "off", "server_state": None},
            {"mode": "on", "server_state": _state(on)},
            {"mode": "fault", "server_state": _state(fault)},
        ]
    }
    env = _fake_e2e(tree, summary)
    got, out, err = _run(tree, E2E_PROOF="radix-pressure", **env)
    assert got == rc, (got, out, err)
    assert ("RESULT: FAIL -- no tree eviction" in out) is (rc == 10), out
    assert _console_passes(tree) is (rc == 0)  # the kept console ends with the verdict that decides


@pytest.mark.parametrize(
    "proof, evicted, on_log, fault_log, rc, said",
    [
        ("radix-stress", 3, 2, 0, 0, None),
        ("radix-stress", 0, 2, 0, 10, "no tree eviction"),
        ("radix-stress", 3, 0, 4, 10, "shows no retraction"),
        ("radix-retract", None, 1, 0, 0, None),
        ("radix-retract", None, 0, 4, 10, "shows no retraction"),
    ],
    ids=["stress", "stress-no-eviction", "stress-fault-run-retracted-only", "retract", "retract-fault-run-only"],
)
def test_the_retraction_and_stress_proofs_need_their_events_in_the_on_run(
    tree, proof, evicted, on_log, fault_log, rc, said
):
    """``radix-stress`` is ``radix-pressure`` and ``radix-retract`` in one run: it passes only with a tree eviction
    and a retraction, each counted in the on run (a fault run's retraction proves nothing about off == on)."""
    summary = {"runs": [{"mode": "on", "server_state": _state(evicted)}, {"mode": "fault", "server_state": None}]}
    env = _fake_e2e(tree, summary)
    work = tree / "out" / "work"
    work.mkdir(parents=True)
    for name, n in (("run-1-on.log", on_log), ("run-2-fault.log", fault_log)):
        (work / name).write_text(f"WARNING scheduler: Decode out of memory happened. #retracted_reqs: {n}, ...\n")
    got, out, err = _run(tree, E2E_PROOF=proof, **env)
    assert got == rc, (got, out, err)
    assert ("RESULT: FAIL" in out) is (rc == 10) and (said is None or said in out), out
    assert _console_passes(tree) is (rc == 0)
    # what makes the proof work reached the e2e: SGLang's retraction switch, and for stress the small pool
    argv = (tree / "calls" / "offline").read_text().splitlines()
    assert argv[0] == "SGLANG_TEST_RETRACT=1", argv[0]
    assert argv[argv.index("--mamba-track-interval") + 1] == "64"
    if proof == "radix-stress":
        assert argv[argv.index("--max-running-requests") + 1] == "16"
        assert "max_mamba_cache_size=96" in argv, argv


@pytest.mark.parametrize("proof", ["radix-pressure", "radix-stress"])
def test_the_pressure_proofs_get_the_small_pool_and_only_the_retraction_proofs_the_switch(tree, proof):
    env = _fake_e2e(tree, {"runs": [{"mode": "on", "server_state": _state(3)}]})
    work = tree / "out" / "work"
    work.mkdir(parents=True)
    (work / "run-2-on.log").write_text("#retracted_reqs: 1\n")
    assert _run(tree, E2E_PROOF=proof, E2E_MAMBA_CACHE="40", **env)[0] == 0
    argv = (tree / "calls" / "offline").read_text().splitlines()
    assert "max_mamba_cache_size=40" in argv and argv[argv.index("--max-running-requests") + 1] == "16"
    assert argv[0] == ("SGLANG_TEST_RETRACT=1" if proof == "radix-stress" else "SGLANG_TEST_RETRACT="), argv[0]


def test_a_stress_run_missing_both_events_says_both_and_its_console_fails(tree):
    env = _fake_e2e(tree, {"runs": [{"mode": "on", "server_state": _state(0)}]})
    got, out, err = _run(tree, E2E_PROOF="radix-stress", **env)
    assert got == 10 and "no tree eviction" in out and "shows no retraction" in out, out
    assert not _console_passes(tree)


@pytest.mark.parametrize("server_rc", [0, 3], ids=["server-passes", "server-fails"])
def test_the_server_route_never_hides_a_proofs_missing_event(tree, server_rc):
    """E2E_SERVER_TOO=1: a failed server route made the proof's own check skip, leaving the offline console's
    PASS last for a stress run that neither evicted nor retracted (audit 2026-12-05b BE2)."""
    env = _fake_e2e(tree, {"runs": [{"mode": "on", "server_state": _state(0)}]})
    got, out, err = _run(tree, E2E_PROOF="radix-stress", E2E_SERVER_TOO="1", FAKE_SERVER_RC=str(server_rc), **env)
    assert got == 10 and not _console_passes(tree), (got, out)
    assert "no tree eviction" in out and "shows no retraction" in out, out  # each check said what it missed
    # a proof that held: the server route's status is the call's
    env2 = dict(env)
    (tree / "summary.json").write_text(json.dumps({"runs": [{"mode": "on", "server_state": _state(2)}]}))
    work = tree / "out" / "work"
    work.mkdir(parents=True, exist_ok=True)
    (work / "run-2-on.log").write_text("#retracted_reqs: 1\n")
    got, out, err = _run(tree, E2E_PROOF="radix-stress", E2E_SERVER_TOO="1", FAKE_SERVER_RC=str(server_rc), **env2)
    assert got == server_rc and _console_passes(tree), (got, out)


@pytest.mark.parametrize("modes", ["off,on", "on,fault,x", "off,fault", "on"])
def test_a_proof_without_its_on_run_or_its_negative_control_is_refused(tree, modes):
    """``E2E_PROOF=radix-default bash run_e2e.sh off,on``: no fault run, yet the console said PASS and counted as a
    proof (audit 2026-12-05b BE3). Refused in one line before the setup; with both it goes on."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("E2E_")}
    full.update(OUT=str(tree / "out"), E2E_PROOF="radix-default")
    r = subprocess.run(
        ["bash", "tools/gpu-engine/run_e2e.sh", modes], cwd=tree, env=full, capture_output=True, text=True, timeout=60
    )
    needs = "on" not in modes.split(",") or "fault" not in modes.split(",")
    if needs:
        assert r.returncode == 2 and "setup reached" not in r.stdout and "needs the modes on and fault" in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    else:
        assert r.returncode == SETUP_REACHED, (r.returncode, r.stdout, r.stderr)


PROOF_NAMES = ["radix-default", "radix-lazy", "radix-no-overlap", "radix-interval", "radix-pressure"]
PROOF_NAMES += ["radix-retract", "radix-sessions", "radix-stress"]


@pytest.mark.parametrize("preset", ["qwen3.5-0.8b", "nemotron-h-mini"])
def test_every_proof_passes_the_e2es_own_checks_on_both_models(tree, preset):
    """A device call lost to a refused option costs minutes of scarce device time: each proof's command line, as
    run_e2e.sh builds it for either model, goes through the e2e's own parser and start checks here (the R2
    refusals, the Mamba2 track interval against ``mamba_chunk_size``, ...) and is accepted."""
    from sglang_mamba_dedup.e2e import cli

    (tree / "tools" / "gpu-engine" / "_setup.sh").write_text("standin_engine_args=()\ncollect_outputs() { :; }\n")
    bin_dir = tree / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(  # the e2e's argv to a file, one argument per line; every other call the real one
        "#!/usr/bin/env bash\n"
        'if [ "$2" = -m ]; then shift 3; printf "%s\\n" "$@" > "$ARGV_OUT.$E2E_PROOF"; exit 0; fi\n'
        f'exec {sys.executable} "$@"\n'
    )
    (bin_dir / "python3").chmod(0o755)
    for proof in PROOF_NAMES:
        env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "ARGV_OUT": str(tree / "argv"), "E2E_FAULT": "zc_no_track"}
        if proof == "radix-sessions":  # its own default control: a session's second turn reads no tree state
            del env["E2E_FAULT"]
        rc, out, err = _run(tree, E2E_PROOF=proof, E2E_PRESET=preset, **env)
        assert rc in (0, 10), (proof, rc, out, err)  # 10: the stub ran nothing, so no eviction / retraction
        argv = (tree / f"argv.{proof}").read_text().splitlines()
        assert "--zero-copy" in argv and argv[argv.index("--random-preset") + 1] == preset, argv
        parser = cli._build_parser()
        args = parser.parse_args(argv)
        cli._check_usage(parser, args)  # a refusal exits 2 (SystemExit)
        # the budget lets the third run (the fault) start: three streaming-session runs take ~436 s
        assert args.time_budget == (560 if proof == "radix-sessions" else 520) and "fault" in args.modes, (proof, args)
        assert args.fault == ("zc_no_stage_in" if proof == "radix-sessions" else "zc_no_track"), (proof, args.fault)
