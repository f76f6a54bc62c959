"""The e2e command line: usage errors (exit 2, one line), the help, no CUDA (exit 5), the entry points."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_mamba_dedup.e2e import cli, verdict
from tests.support.e2e import ON_REPORTS, FakeRuns, stderr_line

ROOT = Path(__file__).resolve().parents[2]


def test_cli_help_runs_without_sglang_import():
    """`python -m sglang_mamba_dedup.e2e --help` is cheap: no torch, no SGLang."""
    code = (
        "import sys, runpy; sys.argv=['e2e','--help']\n"
        "try: runpy.run_module('sglang_mamba_dedup.e2e', run_name='__main__')\n"
        "except SystemExit: pass\n"
        "print('MODS', 'torch' in sys.modules, 'sglang' in sys.modules)"
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert "--random-weights" in r.stdout and "MODS False False" in r.stdout, r.stderr


def test_example_wrapper_calls_main(monkeypatch):
    """The example passes its own arguments (not sys.argv[0]) to cli.main and exits with its status."""
    import runpy

    seen = []

    def fake_main(argv=None):
        seen.append(argv)
        return 7

    monkeypatch.setattr(cli, "main", fake_main)
    monkeypatch.setattr(sys, "argv", ["e2e_md5.py", "--modes", "off,on,fault"])
    with pytest.raises(SystemExit) as exc:
        runpy.run_path(str(ROOT / "examples" / "e2e_md5.py"), run_name="__main__")
    assert exc.value.code == 7
    assert seen == [["--modes", "off,on,fault"]]


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--random-weights", "--random-preset", "foo"], "invalid choice: 'foo'"),
        (["--engine-arg", "novalue"], "KEY=VALUE"),
        (["--engine-arg", "=1"], "KEY=VALUE"),
        (["--random-weights", "--random-dim", "num_hidden_layers=abc"], "KEY=INT"),
        (["--random-weights", "--random-dim", "no_such_field=3"], "no_such_field"),
        (["--random-dim", "num_hidden_layers=2"], "needs --random-weights"),
        (["--modes", "off"], "--modes"),
        (["--modes", "off,maybe"], "--modes"),
        (["--modes", "fault,on"], "the first not 'fault'"),
        (["--num-prompts", "0"], "--num-prompts"),
        (["--model-path", "org/model", "--prompt-format", "ids"], "--vocab-size"),
        (["--throughput-runs", "3"], "unrecognized arguments: --throughput-runs 3"),
        (["--throughput-from", "s.json"], "unrecognized arguments: --throughput-from s.json"),
        (["--no-throwaway"], "unrecognized arguments: --no-throwaway"),
        (["--batch1-tokens", "300"], "--batch1-tokens needs --throughput"),
        (["--batch1-tokens", "0"], "--batch1-tokens"),
        (["--time-budget", "-5"], "--time-budget"),
        (["--prompts", "/nonexistent.json"], "FileNotFoundError"),
        (["--prompts", "{tmp}/bad.json"], "JSONDecodeError"),
        (["--prompts", "{tmp}/empty.json"], "non-empty strings"),
        (["--prompts", "{tmp}/none.json"], "non-empty JSON list"),
        (["--workdir", "{tmp}/bad.json"], "is not a folder"),
        (["--num-draft-tokens", "0"], "--num-draft-tokens"),
        (["--batch-size", "-3"], "--batch-size"),
        (["--max-running-requests", "0"], "--max-running-requests"),
        (["--run-timeout", "0"], "--run-timeout"),
        (["--json-out", "/nonexistent/dir/x.json"], "does not exist"),
        (["--json-out", "{tmp}"], "is a folder"),
        (["--fault", "nope"], "invalid choice: 'nope'"),
        (["--fault", "zc_no_stage_in"], "--fault zc_no_stage_in breaks the zero-copy commit: it needs --zero-copy"),
        (
            ["--zero-copy", "--base-url-off", "http://h:1", "--base-url-on", "http://h:2"],
            "--zero-copy sets the runs' environment: not with --base-url-off",
        ),
        (["--streaming-sessions", "--server"], "--streaming-sessions runs on the Engine route"),
        (
            ["--mamba-radix-cache-strategy", "extra_buffer_lazy", "--disable-overlap-schedule"],
            "mamba_radix_cache_strategy extra_buffer_lazy needs overlap scheduling",
        ),
        (
            ["--mamba-radix-cache-strategy", "extra_buffer_lazy", "--engine-arg", "disable_overlap_schedule=true"],
            "mamba_radix_cache_strategy extra_buffer_lazy needs overlap scheduling",
        ),
        (
            ["--zero-copy", "--disable-overlap-schedule"],
            "--zero-copy with the radix cache on and overlap scheduling off needs --mamba-radix-cache-strategy "
            "extra_buffer",
        ),
        (
            ["--zero-copy", "--engine-arg", "disable_overlap_schedule=true"],
            "needs --mamba-radix-cache-strategy extra_buffer",
        ),
        (
            ["--zero-copy", "--mamba-radix-cache-strategy", "no_buffer"],
            "mamba_radix_cache_strategy no_buffer: the gate refuses zero-copy there",
        ),
        (
            ["--no-radix-cache", "--mamba-track-interval", "64"],
            "mamba_track_interval mean nothing with the radix cache off",
        ),
        (
            ["--engine-arg", "disable_radix_cache=true", "--mamba-radix-cache-strategy", "extra_buffer"],
            "mamba_radix_cache_strategy mean nothing with the radix cache off",
        ),
        (["--mamba-track-interval", "0"], "--mamba-track-interval"),
        (["--mamba-radix-cache-strategy", "eager"], "invalid choice: 'eager'"),
        # audit 2026-12-05: a page size that is no number was a traceback; a track fault with the radix cache off,
        # a no_buffer strategy with overlap and a track interval SGLang asserts on were accepted
        (
            ["--zero-copy", "--disable-overlap-schedule", "--engine-arg", "page_size=abc"],
            "page_size 'abc': not a whole number >= 1",
        ),
        (
            ["--zero-copy", "--no-radix-cache", "--fault", "zc_no_track"],
            "--fault zc_no_track breaks the zero-copy commit's track set, which only the radix cache on has",
        ),
        (
            ["--zero-copy", "--engine-arg", "disable_radix_cache=true", "--fault", "track_column_live"],
            "--fault track_column_live breaks the zero-copy commit's track set",
        ),
        (["--mamba-radix-cache-strategy", "no_buffer"], "no_buffer with overlap scheduling"),
        (["--mamba-track-interval", "3"], "mamba_track_interval 3 is below speculative_num_draft_tokens 4"),
        (
            ["--mamba-track-interval", "100", "--engine-arg", "page_size=64"],
            "mamba_track_interval 100 is not a multiple of page_size 64",
        ),
        (
            ["--random-weights", "--random-preset", "nemotron-h-mini", "--zero-copy", "--mamba-track-interval", "64"],
            "mamba_track_interval 64 is below the model's mamba_chunk_size 128",
        ),
    ],
    ids=[
        "preset",
        "engine-arg",
        "engine-arg-nokey",
        "random-dim-int",
        "random-dim-field",
        "random-dim-alone",
        "modes-one",
        "modes-bad",
        "modes-fault-first",
        "num-prompts",
        "ids-no-vocab",
        "removed-throughput-runs",
        "removed-throughput-from",
        "removed-no-throwaway",
        "batch1-tokens-alone",
        "batch1-zero",
        "time-budget",
        "prompts-missing",
        "prompts-not-json",
        "prompts-empty-prompt",
        "prompts-empty-list",
        "workdir-a-file",
        "draft-tokens-0",
        "batch-size-negative",
        "max-running-0",
        "run-timeout-0",
        "json-out-no-folder",
        "json-out-a-folder",
        "fault-unknown",
        "fault-zc-without-zero-copy",
        "zero-copy-base-urls",
        "streaming-sessions-server",
        "lazy-without-overlap",
        "lazy-without-overlap-engine-arg",
        "zero-copy-no-overlap-auto",
        "zero-copy-no-overlap-auto-engine-arg",
        "zero-copy-no-buffer",
        "track-interval-radix-off",
        "strategy-radix-off-engine-arg",
        "track-interval-0",
        "strategy-unknown",
        "page-size-not-a-number",
        "track-fault-radix-off",
        "track-fault-radix-off-engine-arg",
        "no-buffer-with-overlap",
        "track-interval-below-draft-tokens",
        "track-interval-off-the-page-grid",
        "track-interval-below-the-mamba2-chunk",
    ],
)
def test_usage_errors_exit_2_before_anything_runs(extra, needle, tmp_path, no_build, capsys):
    runs = FakeRuns(ON_REPORTS)
    (tmp_path / "bad.json").write_text("not json")
    (tmp_path / "empty.json").write_text('{"prompts": [""]}')
    (tmp_path / "none.json").write_text("[]")
    extra = [x.replace("{tmp}", str(tmp_path)) for x in extra]
    with pytest.raises(SystemExit) as exc:
        cli.main(["--workdir", str(tmp_path / "w")] + extra, runner=runs)
    assert exc.value.code == 2
    line = stderr_line(capsys.readouterr().err)
    assert needle in line, line
    assert not runs.calls and not (tmp_path / "w").exists()


@pytest.mark.parametrize(
    "argv, fault, zero_copy",
    [
        ([], "commit_step0", False),
        (["--zero-copy"], "commit_step0", True),
        (["--zero-copy", "--fault", "zc_no_stage_in"], "zc_no_stage_in", True),
        (["--fault", "commit_step0", "--modes", "off,on,fault"], "commit_step0", False),
        (
            ["--zero-copy", "--disable-overlap-schedule", "--mamba-radix-cache-strategy", "extra_buffer"],
            "commit_step0",
            True,
        ),
        (
            ["--zero-copy", "--mamba-radix-cache-strategy", "extra_buffer_lazy", "--mamba-track-interval", "64"],
            "commit_step0",
            True,
        ),
        (["--zero-copy", "--no-radix-cache", "--disable-overlap-schedule"], "commit_step0", True),
        (["--disable-overlap-schedule"], "commit_step0", False),
        (
            ["--random-weights", "--random-preset", "nemotron-h-mini", "--mamba-track-interval", "128"],
            "commit_step0",
            False,
        ),
        (
            [
                "--random-weights",
                "--random-preset",
                "nemotron-h-mini",
                "--mamba-track-interval",
                "64",
                "--disable-overlap-schedule",
            ],
            "commit_step0",
            False,
        ),
        (["--random-weights", "--mamba-track-interval", "64"], "commit_step0", False),  # Qwen3.5: no Mamba2 chunk
    ],
)
def test_zero_copy_and_fault_accepted(argv, fault, zero_copy):
    parser = cli._build_parser()
    args = parser.parse_args(argv)
    cli._check_usage(parser, args)  # a usage error would exit
    assert (args.fault, args.zero_copy) == (fault, zero_copy)


def test_missing_safetensors_is_a_usage_error(tmp_path, monkeypatch, capsys):
    real = cli.importlib.util.find_spec
    monkeypatch.setattr(
        cli.importlib.util, "find_spec", lambda name, *a: None if name == "safetensors" else real(name, *a)
    )
    runs = FakeRuns(ON_REPORTS)
    with pytest.raises(SystemExit) as exc:
        cli.main(["--workdir", str(tmp_path / "w"), "--random-weights"], runner=runs)
    assert exc.value.code == 2
    assert "pip install 'sglang-mamba-dedup[e2e]'" in stderr_line(capsys.readouterr().err)
    assert not runs.calls


def test_usage_error_from_the_command_line(tmp_path):
    """Through the console entry point: exit 2, one line on stderr, no traceback."""
    cmd = [
        sys.executable,
        "-m",
        "sglang_mamba_dedup",
        "e2e",
        "--random-weights",
        "--random-preset",
        "tiny",
        "--workdir",
        str(tmp_path / "w"),
        "--run-timeout",
        "1",
        "--random-dim",
        "x=abc",
    ]
    r = subprocess.run(
        cmd, capture_output=True, text=True, cwd=ROOT, timeout=60, env=dict(os.environ, PYTHONPATH=str(ROOT))
    )
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "KEY=INT" in stderr_line(r.stderr)


def test_help_lists_presets_examples_and_exit_codes():
    text = cli._build_parser().format_help()
    from sglang_mamba_dedup.e2e.random_model import PRESETS

    assert all(name in text for name in PRESETS)
    assert text.count("sglang-mamba-dedup e2e --") >= 2  # example command lines
    codes = {getattr(verdict, name) for name in dir(verdict) if name.startswith("EXIT_") and name != "EXIT_SIGNAL_BASE"}
    assert len(codes) == len([n for n in dir(verdict) if n.startswith("EXIT_")]) - 1  # one code, one meaning
    assert set(verdict.MEANINGS) == codes and set(verdict.PRECEDENCE) <= codes
    epilog = " ".join(text[text.index("exit status") :].split())  # the lines joined where the help wrapped them
    for code, meaning in verdict.MEANINGS.items():
        assert f" {code} {' '.join(meaning.split())}" in epilog, (code, epilog)
    assert "the first of 3, 7, 1, 8, 4, 6 that applies" in epilog and "(143, 129)" in epilog


def test_no_cuda_stops_before_building_the_checkpoint(monkeypatch, tmp_path, no_build, capsys):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    code = cli.main(["--random-weights", "--workdir", str(tmp_path / "w"), "--num-prompts", "2"])
    assert code == verdict.EXIT_CANNOT_RUN
    captured = capsys.readouterr()
    line = stderr_line(captured.err)
    assert "CUDA GPU" in line and "torch.cuda.is_available()" in line
    assert "RESULT" not in captured.out and not (tmp_path / "w").exists()
