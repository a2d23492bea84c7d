"""What the gated RMSNorm tests share: transformers' two modules with random weights, inputs shaped like the
mixers', the tolerance (one ulp of the output dtype at each rounding the modules make), and the bad-input table.

Tolerance. The kernel and the modules evaluate the same expression and round to the activation dtype A at the
same points (the normalised value; the weight product when the weight is in A; the output). Their fp32
arithmetic differs only in the last bits (the order of the mean's sum; the oracle has none): a relative
difference far below one ulp of bf16 or fp16, which can still move a rounding to A onto the neighbouring value.
So an element may differ by one ulp of A at each rounding on its path, carried through the multiplies after it:

    gate first:               |w| ulp(n) + ulp(out)
    norm first, weight in A:  (|w| ulp(n) + ulp(w n)) |silu(gate)| + ulp(out)
    norm first, fp32 weight:  |w| ulp(n) |silu(gate)| + ulp(out)

(n: the normalised value; ulp at each value's magnitude in A), plus FP32_SLACK |out| for the fp32 arithmetic
itself, which is what dominates with fp32 activations: summing up to 8192 squares in another order (a few tens of
fp32 ulps at worst, halved by the square root), rsqrtf (2 ulps) and a few roundings.
"""

import math

import pytest
import torch

from trtllm_replayssm.ops.norm import gated_rmsnorm

FP32_SLACK = 64 * 2.0 ** -24

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16


def nemotron_norm(D, group_size, eps, wdtype, device):
    """transformers' Nemotron-H MambaRMSNormGated (gate first) with a random weight of wdtype."""
    modeling = pytest.importorskip("transformers.models.nemotron_h.modeling_nemotron_h")
    names = ("NemotronHRMSNormGated", "Zamba2RMSNormGated")  # the class the mixer uses: newer / older transformers
    cls = next((getattr(modeling, n) for n in names if hasattr(modeling, n)), None)
    assert cls is not None, f"transformers' Nemotron-H has none of {names}"
    return _randomised(cls(D, group_size=group_size, eps=eps), wdtype, device)


def qwen_norm(D, eps, wdtype, device):
    """transformers' Qwen3.5 gated RMSNorm (norm first, over the whole last dimension) with a random weight."""
    modeling = pytest.importorskip("transformers.models.qwen3_5.modeling_qwen3_5")
    return _randomised(modeling.Qwen3_5RMSNormGated(D, eps=eps), wdtype, device)


def _randomised(m, wdtype, device):
    with torch.no_grad():
        m.weight.copy_(torch.randn(m.weight.shape) * 0.5 + 1.0)
    return m.to(device=device, dtype=wdtype)


def inputs(rows, D, dtype, device, gate_extra=0, offset=0):
    """y [rows, D] with a spread of magnitudes; gate [rows, D] as a slice of a wider row (the input projection's
    output: `gate_extra` more elements per row, starting `offset` elements in). Never zeros."""
    y = (torch.randn(rows, D, device=device) * torch.exp(torch.randn(rows, 1, device=device))).to(dtype)
    wide = (torch.randn(rows, D + gate_extra + offset, device=device) * 2.0).to(dtype)
    return y, wide[:, offset:offset + D]


def _ulp(v, dtype):
    """The spacing of dtype at |v| (the upper binade's at powers of two; subnormal spacing near zero), fp64."""
    fi = torch.finfo(dtype)
    _, e = torch.frexp(v.abs())
    return torch.ldexp(torch.full_like(v, fi.eps), e - 1).clamp_min(fi.tiny * fi.eps)


def tolerance(y, gate, weight, eps, group_size, norm_before_gate, out_ref):
    """The per-element bound of the module docstring, from fp64 intermediates; out_ref is the reference output."""
    dtype = y.dtype
    x = y.double()
    s = torch.nn.functional.silu(gate.double())
    if not norm_before_gate:
        x = x * s
    *lead, D = x.shape
    g = x.reshape(*lead, D // group_size, group_size)
    n = (g * torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + eps)).reshape(*lead, D)
    w = weight.double().abs()
    tol = w * _ulp(n, dtype)
    if norm_before_gate:
        if weight.dtype == dtype:
            tol = tol + _ulp(w * n, dtype)
        tol = tol * s.abs()
    out = out_ref.double()
    return tol + _ulp(out, dtype) + FP32_SLACK * out.abs()


def assert_within(out, ref, tol, what):
    """|out - ref| <= tol everywhere, with the worst element named."""
    assert not torch.isnan(out).any(), f"{what}: output not fully written (NaN left)"
    err = (out.double() - ref.double()).abs()
    excess = err - tol
    worst = int(excess.argmax())
    assert excess.max() <= 0, (f"{what}: element {worst} off by {err.flatten()[worst].item():.3g} "
                               f"(tolerance {tol.flatten()[worst].item():.3g}; out {out.flatten()[worst].item():.6g}, "
                               f"reference {ref.flatten()[worst].item():.6g})")


# Bad input: (make call from (y, gate, weight, out), words of the error). y, gate [6, 64] bf16, weight [64] fp32,
# group 16, gate first; out [6, 64] bf16.
def _call(y, gate, weight, out, **kw):
    args = dict(y=y, gate=gate, weight=weight, eps=1e-5, group_size=16, norm_before_gate=False, out=out)
    args.update(kw)
    return gated_rmsnorm(**args)


BAD_INPUT = [
    (lambda y, g, w, o: _call(y[:, :32], g, w, o), r"gate has shape \(6, 64\), expected y's \(6, 32\)"),
    (lambda y, g, w, o: _call(y, g.float(), w, o), "gate has dtype fp32, expected y's bf16"),
    (lambda y, g, w, o: _call(y.double(), g, w, o), "y has dtype float64"),
    (lambda y, g, w, o: _call(y, g, w[:32], o), r"weight has shape \(32,\), expected \(64,\)"),
    (lambda y, g, w, o: _call(y, g, w.half(), o), "weight has dtype fp16; supported: fp32 or y's dtype"),
    (lambda y, g, w, o: _call(y, g, w, o, group_size=12), "group_size=12 is not supported"),
    (lambda y, g, w, o: _call(y, g, w, o, group_size=48), "group_size=48 does not divide y's last dimension 64"),
    (lambda y, g, w, o: _call(y, g, w, o, group_size=16384), "group_size=16384 is not supported"),
    (lambda y, g, w, o: _call(y, g, w, o, group_size=16.0), "group_size=16.0 is not supported"),
    (lambda y, g, w, o: _call(y, g, w, o, eps=0.0), "eps=0.0 must be positive"),
    (lambda y, g, w, o: _call(y, g, w, o, eps=-1e-6), "eps=-1e-06 must be positive"),
    (lambda y, g, w, o: _call(y, g, w, o, eps=math.inf), "eps=inf must be positive and finite"),
    (lambda y, g, w, o: _call(y, g, w, o, eps=1e-60), "eps=1e-60 must be positive and finite \\(in fp32\\)"),
    (lambda y, g, w, o: _call(y, g, w, o, norm_before_gate=1), "norm_before_gate must be a bool"),
    (lambda y, g, w, o: _call(y.t().contiguous().t(), g, w, o), "y must be contiguous in its last dimension"),
    (lambda y, g, w, o: _call(y, g, w, o[:, :32]), r"out has shape \(6, 32\), expected y's \(6, 64\)"),
    (lambda y, g, w, o: _call(y, g, w, o[:1].expand(6, 64)), "out's rows overlap"),
    (lambda y, g, w, o: _call(y.reshape(3, 2, 64).transpose(0, 1), g.reshape(3, 2, 64).transpose(0, 1), w,
                              None), r"y of shape \(2, 3, 64\) .* is not a view of rows of 64 elements"),
]
BAD_INPUT_IDS = [words.split(" ")[0] + f"-{i}" for i, (_, words) in enumerate(BAD_INPUT)]


def check_rejects_and_touches_nothing(call, words, device):
    """call raises a one-line ValueError naming the bad value, and out keeps its bits."""
    y, gate = inputs(6, 64, BF16, device, gate_extra=8)
    weight = torch.randn(64, device=device)
    out = torch.randn(6, 64, device=device).to(BF16)
    before = out.clone()
    with pytest.raises(ValueError, match=words) as err:
        call(y, gate, weight, out)
    assert "\n" not in str(err.value), f"error spans lines: {err.value}"
    assert torch.equal(out, before), "a rejected call wrote out"
