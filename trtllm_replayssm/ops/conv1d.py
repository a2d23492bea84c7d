"""The causal depthwise conv1d in front of the SSM mixers (kernel k, channels C), decode and speculative
references. Its state is the last k-1 inputs; ReplaySSM leaves it unchanged for standard decode, and
speculative decoding needs the same rollback as the SSM state.

    y = silu(sum_i w[:, i] * window[:, i] + bias)   window = last k-1 committed inputs, then the new input

Speculative layout: a per-slot window buffer of k-1+T inputs [C, k-1+T]: positions 0..k-2 hold the committed
history, the verify writes the T tokens behind it, and the commit keeps the last k-1 inputs of the committed
history plus the accepted tokens (a shift by the accepted count).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from trtllm_replayssm.ops.slots import live_rows


def conv1d_step(state, x, weight, bias=None, activation=True):
    """state [b, C, k-1], x [b, C], weight [C, k] -> (y [b, C], new state). Inputs unchanged."""
    window = torch.cat([state, x[..., None]], dim=-1)
    y = (window * weight).sum(-1)
    if bias is not None:
        y = y + bias
    return (F.silu(y) if activation else y), window[..., 1:]


def conv1d_verify_reference(windows, x, weight, bias=None, activation=True, slot_idx=None, pad_slot_id=-1,
                            out=None):
    """windows [slots, C, k-1+T] (history in the first k-1 positions); x [b, T, C]. Writes the T inputs behind
    the history and returns y [b, T, C] (padding rows of `out` untouched)."""
    T = x.shape[1]
    k1 = weight.shape[-1] - 1
    if windows.shape[-1] != k1 + T:
        raise ValueError(f"conv window holds {windows.shape[-1]} inputs, expected k-1+T = {k1 + T}")
    y = torch.empty_like(x) if out is None else out
    for b, s in live_rows(slot_idx, x.shape[0], windows.shape[0], pad_slot_id):
        windows[s, :, k1:] = x[b].transpose(0, 1).to(windows.dtype)
        for i in range(T):
            yi, _ = conv1d_step(windows[s, :, i:k1 + i][None].float(), x[b, i][None].float(), weight.float(),
                                None if bias is None else bias.float(), activation)
            y[b, i] = yi[0].to(y.dtype)
    return y


def conv1d_commit_reference(windows, accepted, kernel_size, slot_idx=None, pad_slot_id=-1):
    """Keeps the last k-1 inputs of (history + accepted tokens) as the new history (a shift by the accepted
    count; accepted: ints 1..T)."""
    k1 = kernel_size - 1
    for b, s in live_rows(slot_idx, accepted.shape[0], windows.shape[0], pad_slot_id):
        a = int(accepted[b])
        windows[s, :, :k1] = windows[s, :, a:a + k1].clone()
