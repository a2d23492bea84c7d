"""Shared fixtures: seeds, the gpu marker (skipped with a reason where no CUDA device or kernel library is
present), poisoned allocations, and sharding: RSSM_TEST_SHARD=i/n keeps every n-th collected test from the
i-th (0-based), so n processes can split one run by test rather than by file (benchmarks/device_run.sh)."""

import os

import pytest
import torch

from trtllm_replayssm import _lib


def _gpu_skip_reason():
    if not torch.cuda.is_available():
        return "no CUDA device"
    if not _lib.available():
        return f"kernel library not built ({_lib.library_path()})"
    return None


def _shard():
    spec = os.environ.get("RSSM_TEST_SHARD")
    if not spec:
        return None
    try:
        i, n = (int(v) for v in spec.split("/"))
    except ValueError:
        raise pytest.UsageError(f"RSSM_TEST_SHARD={spec!r}: expected i/n, e.g. 0/8") from None
    if not 0 <= i < n:
        raise pytest.UsageError(f"RSSM_TEST_SHARD={spec!r}: need 0 <= i < n")
    return i, n


def pytest_collection_modifyitems(config, items):
    shard = _shard()
    if shard is not None:
        items[:] = items[shard[0]::shard[1]]
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
