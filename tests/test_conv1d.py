"""Causal conv1d: speculative verify + commit against the sequential conv over the accepted tokens, written out
here in fp64 (independent of the package's conv1d_step)."""

import pytest
import torch

from mamba2_cases import rel_err
from spec_harness import advance_truth
from trtllm_replayssm.ops.conv1d import conv1d_commit_reference, conv1d_verify_reference


def conv_token(weight, bias):
    """One token of the causal conv with SiLU: (history [1, C, k-1] oldest first, x [1, C]) -> (y [1, C] fp64,
    the last k-1 inputs)."""
    k = weight.shape[1]

    def step(history, x):
        inputs = torch.cat([history, x[..., None]], dim=-1)
        y = bias.double() + sum(weight[:, j].double() * inputs[..., j].double() for j in range(k))
        return y * torch.sigmoid(y), inputs[..., 1:]
    return step


@pytest.mark.parametrize("k, T", [(4, 1), (4, 4), (2, 3), (4, 8)])
def test_speculative_conv_matches_sequential_over_40_steps(k, T):
    C, slots_n, batch = 32, 5, 3
    weight, bias = torch.randn(C, k), torch.randn(C)
    conv = conv_token(weight, bias)
    windows = torch.zeros(slots_n, C, k - 1 + T)
    windows[:, :, :k - 1] = torch.randn(slots_n, C, k - 1)
    truth = windows[:, :, :k - 1].clone()
    for step in range(40):
        slots = torch.randperm(slots_n)[:batch].to(torch.int32)
        slots[step % batch] = -1
        x = torch.randn(batch, T, C)
        out = conv1d_verify_reference(windows, x, weight, bias, slot_idx=slots, out=torch.full_like(x, float("nan")))
        assert torch.isnan(out[slots < 0]).all(), "padding row written"
        accepted = torch.randint(1, T + 1, (batch,))

        def close(b, i, y_true):
            assert rel_err(out[b, i], y_true) < 1e-6, f"step {step} token {i}"

        advance_truth(truth, slots, accepted, T, lambda st, b, i: conv(st, x[b:b + 1, i]), close)
        conv1d_commit_reference(windows, accepted, k, slot_idx=slots)
        assert torch.equal(windows[:, :, :k - 1], truth), "committed history differs from the sequential state"


def test_window_size_is_checked():
    with pytest.raises(ValueError, match="expected k-1\\+T = 7"):
        conv1d_verify_reference(torch.zeros(2, 8, 6), torch.randn(1, 4, 8), torch.randn(8, 4))
