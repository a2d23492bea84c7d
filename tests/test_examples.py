"""The examples run (CPU: the PyTorch references; the same code runs the kernels on a GPU)."""

import importlib.util
from pathlib import Path

import torch

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _load(name):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_speculative_example_agrees_with_the_snapshot_path():
    """fp32 throughout: the two paths differ only in summation order (~1e-7 relative)."""
    worst = _load("speculative_decode").main(steps=12, device="cpu")
    assert 0 <= worst < 1e-5
    assert torch.isfinite(torch.tensor(worst))
