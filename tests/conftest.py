"""Shared fixtures: seeds, the gpu marker (skipped with a reason where no CUDA device or kernel library is
present), and poisoned allocations."""

import pytest
import torch

from trtllm_replayssm import _lib


def _gpu_skip_reason():
    if not torch.cuda.is_available():
        return "no CUDA device (GPU tests run on the H200 via the device tool)"
    if not _lib.available():
        return f"kernel library not built ({_lib.library_path()})"
    return None


def pytest_collection_modifyitems(config, items):
    reason = _gpu_skip_reason()
    if reason is None:
        return
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(1234)


def poisoned(shape, dtype, device):
    """A tensor full of NaN: anything a kernel should have written and did not stays NaN."""
    return torch.full(shape, float("nan"), dtype=dtype, device=device)
