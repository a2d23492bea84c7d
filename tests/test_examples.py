"""The examples run (CPU: the PyTorch references; the same code runs the kernels on a GPU)."""

import importlib.util
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _load(name):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_speculative_example_agrees_with_the_snapshot_path():
    """fp32 throughout: the two paths differ only in summation order (~1e-7 relative)."""
    worst = _load("speculative_decode").main(steps=12, device="cpu")
    assert 0 < worst < 1e-5


@pytest.mark.parametrize("bad", [float("nan"), float("inf")], ids=["nan", "inf"])
def test_speculative_example_fails_on_a_non_finite_output(monkeypatch, bad):
    """A replay output that is not finite at one step (the others correct) must stop the example, naming the step:
    a worst-difference accumulator built on max() would skip a NaN."""
    example = _load("speculative_decode")
    verify, calls = example.replay_verify, []

    def poisoned_verify(*args, **kwargs):
        y = verify(*args, **kwargs)
        calls.append(1)
        return y.fill_(bad) if len(calls) == 3 else y

    monkeypatch.setattr(example, "replay_verify", poisoned_verify)
    with pytest.raises(RuntimeError, match=r"^step 2: the outputs are not finite"):
        example.main(steps=5, device="cpu")


def test_replay_example_shows_what_its_comments_say(capsys):
    """The ring of each decoded slot holds 40 - 2 x 16 = 8 records (a row flushes every L = 16 steps); untouched
    slots hold none; and the example's note on the latency route holds (a default-config step of three rows
    flushes every row)."""
    example = _load("replay_decode")
    assert example.pool.history().tolist() == [8, 0, 8, 0]
    out = capsys.readouterr().out
    assert "after 40 steps (L=16: a row flushes every 16 steps; 40 = 2 x 16 + 8): [8, 0, 8, 0]" in out
    assert out.rstrip().endswith("the rings stay empty): True")
