"""The command line: every bad input is one line and exit status 2 before any work, good input works, a wrong
result fails the run, progress bars only on a terminal (CPU here; the GPU kernels where present)."""

import io
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import trtllm_replayssm.cli.run as run_cmd
from cli_cases import BAD, GOOD, PROG, SERVERS, fill, invoke, paths
from trtllm_replayssm.cli import build_parser, main
from trtllm_replayssm.model_config import analyze, load_config, mamba2_layers

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def where(tmp_path_factory):
    return paths(tmp_path_factory.mktemp("cli"))


def _argv_id(argv):
    return " ".join(argv) or "(none)"


def _case_id(case):
    return _argv_id(case.values[0] if hasattr(case, "values") else case[0])


@pytest.mark.parametrize("argv,words", BAD, ids=[_case_id(c) for c in BAD])
def test_bad_input_is_one_line_and_exit_2(argv, words, where):
    code, out, err = invoke(fill(argv, where))
    assert code == 2, (code, out, err)
    assert out == "", "work started before the input was checked"
    lines = err.splitlines()
    assert len(lines) == 1, err
    command = f"{PROG} {argv[0]}" if argv and argv[0] in build_parser().commands else PROG
    assert lines[0].startswith(f"{command}: error: "), lines[0]
    for word in words:
        assert word.format(**where) in lines[0], (word, lines[0])


@pytest.mark.parametrize("argv,words", GOOD, ids=[_argv_id(a) for a, _ in GOOD])
def test_good_input_works(argv, words, where):
    code, out, err = invoke(fill(argv, where))
    assert code == 0, err
    assert err == "", "stderr is not a terminal here: no progress bar, no warnings"
    for word in words:
        assert word in out, (word, out)


def test_every_option_of_every_subcommand_is_in_the_tables():
    """A new option or subcommand needs rows in tests/cli_cases.py: at least one bad value and one good run."""
    def flags(rows, command):
        return {a for argv, _ in (r.values if hasattr(r, "values") else r for r in rows)
                if argv and argv[0] == command for a in argv if a.startswith("--")}

    for command, parser in build_parser().commands.items():
        options = {s for action in parser._actions for s in action.option_strings if s.startswith("--")} - {"--help"}
        assert options - flags(BAD, command) == set(), f"{command}: options without a bad-value row"
        # --png: test_drift_writes_a_plot (needs matplotlib); servers: tests/test_serve.py
        if command not in SERVERS:
            assert options - flags(GOOD, command) <= {"--png"}, f"{command}: options without a good run"


def test_run_agrees_with_conventional(capsys):
    assert main(["run", "--steps", "20", "--buffer-len", "4", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    err = float(re.search(r"vs conventional .*: ([0-9.e+-]+|nan|inf)", out).group(1))
    assert math.isfinite(err) and err < 1e-5, out  # fp32 both ways: differences are summation order only


def test_run_on_a_gdn_config_agrees_with_conventional(capsys):
    assert main(["run", "--config", "qwen3_5_4b", "--steps", "6", "--buffer-len", "2", "--batch", "2",
                 "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "SSM layers (gdn)" in out
    err = float(re.search(r"vs conventional .*: ([0-9.e+-]+|nan|inf)", out).group(1))
    assert math.isfinite(err) and err < 1e-5, out  # fp32 both ways: differences are summation order only


@pytest.mark.parametrize("op", ["replay_decode", "conventional_decode", "gdn_replay_decode"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")], ids=["nan", "inf"])
def test_run_fails_on_a_non_finite_output(monkeypatch, capsys, op, bad):
    """The real op runs; its output at one row of one step of the second SSM layer is poisoned. The run must
    fail (exit 1) and name that layer and step, not report the largest finite difference."""
    real = getattr(run_cmd, op)
    calls = []
    config = "qwen3_5_4b" if op.startswith("gdn") else "nemotron_h_tiny"
    steps = 4

    def poisoned(*a, **kw):
        y = real(*a, **kw)
        calls.append(1)
        if len(calls) == steps + 3:  # the second layer's step 2
            y[0].view(-1)[5] = bad
        return y

    monkeypatch.setattr(run_cmd, op, poisoned)
    code = main(["run", "--config", config, "--steps", str(steps), "--batch", "2", "--device", "cpu"])
    captured = capsys.readouterr()
    second = [layer.index for layer in analyze(load_config(config)).layers if layer.kind in ("mamba2", "gdn")][1]
    assert code == 1, captured.out
    assert "max relative difference" not in captured.out
    assert re.fullmatch(rf"{PROG} run: the outputs are not finite \(relative difference (nan|inf)\) at layer "
                        rf"{second}, step 2; 1 of \d+ layer-steps\n", captured.err), captured.err


def test_drift_writes_a_plot(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    png = tmp_path / "drift.png"
    assert main(["drift", "--steps", "3", "--heads", "2", "--configs", "replay fp32", "--png", str(png)]) == 0
    assert f"plot: {png}" in capsys.readouterr().out
    assert png.read_bytes().startswith(b"\x89PNG")


class _Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.parametrize("argv,bar", [(["run", "--steps", "2", "--batch", "2"], "decode"),
                                      (["drift", "--steps", "3", "--heads", "2"], "drift")])
def test_progress_bar_on_a_terminal_unless_quiet(monkeypatch, capsys, argv, bar):
    for quiet in (False, True):
        term = _Terminal()
        monkeypatch.setattr(sys, "stderr", term)
        assert main(argv + (["--quiet"] if quiet else [])) == 0
        shown = re.search(rf"{bar}: +\d+%", term.getvalue())
        assert (shown is None) == quiet, term.getvalue()
    assert capsys.readouterr().out.count("\n") > 2


def test_bundled_config_layers():
    layers = mamba2_layers(load_config())
    assert [l.index for l in layers] == [0, 2, 4, 6]
    assert layers[0].shape.nheads == 16 and layers[0].shape.dstate == 128


def test_rejects_unknown_model_type():
    with pytest.raises(ValueError, match="model_type=.llama. is not supported"):
        mamba2_layers({"model_type": "llama"})


# ---- real processes: the exit status and a closed output pipe


def _cli(*argv, **kw):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "trtllm_replayssm.cli", *argv], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def test_process_exit_status_and_one_line():
    p = _cli("run", "--steps", "0")
    out, err = p.communicate(timeout=120)
    assert p.returncode == 2 and out == ""
    assert err == f"{PROG} run: error: argument --steps: 0 is out of range (1..1000000)\n"


def test_process_closed_output_pipe_is_quiet():
    """The reader is gone before the command writes (as `| head -1` can leave it): no BrokenPipeError traceback,
    the status of a command stopped by SIGPIPE."""
    p = _cli("build", "--dry-run", "--model", "nemotron3_super")
    p.stdout.close()
    err = p.stderr.read()
    assert p.wait(timeout=120) == 141
    assert err == ""


def test_process_piped_to_head():
    p = subprocess.run(f"{sys.executable} -m trtllm_replayssm.cli build --dry-run --model nemotron3_super | head -1",
                       shell=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0
    assert p.stdout.startswith("model_type nemotron_h, ") and p.stdout.count("\n") == 1
    assert "Traceback" not in p.stderr and "Error" not in p.stderr, p.stderr


def test_info_lists_both_families(capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "Mamba-2: head_dim (64, 80, 128), dstate (64, 128, 256)" in out
    assert "Gated DeltaNet and KDA: head_k_dim and head_v_dim (64, 128, 256)" in out
    assert "fp32+fp16, fp32+bf16, fp32+fp8 with fp16 or bf16 activations" in out
