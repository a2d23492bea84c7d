"""The conv1d ops on CPU (the references) and their validation, the native validation of rssm_conv1d (no launch,
no GPU), and the ctypes binding against params.h."""

import ctypes

import pytest
import torch

from test_validation import PARAMS_H, _header_fields
from trtllm_replayssm import _lib
from trtllm_replayssm.config import CONV1D_KERNEL_SIZES, CONV1D_MAX_TOKENS, DTYPE_CODES
from trtllm_replayssm.ops import conv1d_kernels as kernels
from trtllm_replayssm.ops.conv1d import conv1d_commit, conv1d_update, conv1d_verify

BF16 = torch.bfloat16


@pytest.mark.parametrize("k", [2, 3, 4])
def test_update_matches_transformers_causal_conv1d_update(k):
    """The layouts are transformers' (Nemotron-H, Qwen3.5): state [b, C, k-1] oldest first, weight [C, k], bias
    [C], SiLU. fp32 throughout, 10 steps: y and state equal transformers' torch path."""
    modeling = pytest.importorskip("transformers.models.qwen3_5.modeling_qwen3_5")
    C, b = 24, 3
    weight, bias = torch.randn(C, k), torch.randn(C)
    state = torch.randn(b, C, k - 1)
    hf_state = state.clone()
    for step in range(10):
        x = torch.randn(b, C)
        y = conv1d_update(state, x, weight, bias, activation=True)
        y_hf = modeling.causal_conv1d_update(x[:, :, None], hf_state, weight, bias, activation="silu")[:, :, 0]
        torch.testing.assert_close(y, y_hf, rtol=1e-6, atol=1e-6, msg=lambda m: f"step {step}: y\n{m}")
        assert torch.equal(state, hf_state), f"step {step}: state"


def test_update_op_follows_the_sequential_conv_with_padding_and_shuffled_slots():
    """Anchored by the convolution written out here: each slot keeps every input it has seen, oldest first, and
    y[c] = sum_j weight[c, j] inputs[c, -k + j] in fp64; the state is the last k-1 inputs."""
    C, k, slots_n = 16, 4, 5
    weight = torch.randn(C, k)
    state = torch.randn(slots_n, C, k - 1)
    seen = [state[s].double().clone() for s in range(slots_n)]  # [C, inputs so far]
    for step in range(8):
        slots = torch.randperm(slots_n)[:3].to(torch.int32)
        slots[step % 3] = -1
        x = torch.randn(3, C)
        out = torch.full((3, C), float("nan"))
        conv1d_update(state, x, weight, activation=False, slot_idx=slots, out=out)
        assert torch.isnan(out[slots < 0]).all(), "padding row written"
        for row, s in enumerate(slots.tolist()):
            if s >= 0:
                seen[s] = torch.cat([seen[s], x[row].double()[:, None]], dim=1)
                y = sum(weight[:, j].double() * seen[s][:, j - k] for j in range(k))
                torch.testing.assert_close(out[row].double(), y, rtol=1e-6, atol=1e-6)
        for s in range(slots_n):
            assert torch.equal(state[s], seen[s][:, 1 - k:].float()), f"step {step}: state of slot {s}"


def test_commit_reference_leaves_counts_outside_1_to_T_untouched():
    k, T = 3, 4
    windows = torch.randn(4, 8, k - 1 + T)
    before = windows.clone()
    conv1d_commit(windows, torch.tensor([0, T + 1, -1, 2], dtype=torch.int32), k)
    assert torch.equal(windows[:3], before[:3]), "a row with an out-of-range count changed"
    assert torch.equal(windows[3, :, :k - 1], before[3, :, 2:2 + k - 1])
    assert torch.equal(windows[3, :, k - 1:], before[3, :, k - 1:]), "drafts behind the history changed"


def _pools():
    return torch.randn(4, 64, 3).to(BF16), torch.randn(4, 64, 7).to(BF16)


@pytest.mark.parametrize("call, match", [
    (lambda st, w, x, wt: conv1d_update(st, x, wt[:, :3].contiguous()),
     "state holds 3 inputs per channel, expected k-1 = 2"),
    (lambda st, w, x, wt: conv1d_update(st, x[:, :32], wt), r"x has shape \(3, 32\), expected \[batch, 64\]"),
    (lambda st, w, x, wt: conv1d_update(st, x, wt[:32]), r"weight has shape \(32, 4\), expected \[64, kernel_size\]"),
    (lambda st, w, x, wt: conv1d_update(st, x, torch.randn(64, 5)), "kernel_size=5 .* supported: 2, 3, 4"),
    (lambda st, w, x, wt: conv1d_update(st, x.float(), wt.to(BF16)), r"weight has dtype bf16; supported: fp32 or x"),
    (lambda st, w, x, wt: conv1d_update(st, x, wt, bias=torch.randn(64).to(BF16)), "bias must have shape"),
    (lambda st, w, x, wt: conv1d_update(st, x, wt.t().contiguous().t()), "weight must be contiguous"),
    (lambda st, w, x, wt: conv1d_update(st.transpose(1, 2).contiguous().transpose(1, 2), x, wt),
     "state must be contiguous in its last dimension"),
    (lambda st, w, x, wt: conv1d_update(st.double(), x, wt), "state has dtype float64"),
    (lambda st, w, x, wt: conv1d_update(st, x, wt, activation="silu"), "activation must be a bool"),
    (lambda st, w, x, wt: conv1d_update(st, x, wt, slot_idx=torch.arange(3)), "slot_idx must be int32"),
    (lambda st, w, x, wt: conv1d_update(st, torch.randn(5, 64).to(BF16), wt), "batch=5 exceeds the 4 state slots"),
    (lambda st, w, x, wt: conv1d_update(st, x, wt, out=torch.empty(3, 64)), "out must have x's shape"),
    (lambda st, w, x, wt: conv1d_verify(w, x[:, None].expand(3, 2, 64).contiguous(), wt), r"expected k-1\+T = 5"),
    (lambda st, w, x, wt: conv1d_verify(torch.randn(4, 64, 20).to(BF16), torch.randn(3, 17, 64).to(BF16), wt),
     r"T=17 \(x.shape\[1\]\) is out of range \(1..16\)"),
    (lambda st, w, x, wt: conv1d_commit(w, torch.ones(3, dtype=torch.int32), 5), "kernel_size=5"),
    (lambda st, w, x, wt: conv1d_commit(w, torch.ones(3, dtype=torch.int64), 4), "accepted must be a contiguous"),
    (lambda st, w, x, wt: conv1d_commit(torch.randn(4, 64, 3).to(BF16), torch.ones(3, dtype=torch.int32), 4),
     r"T = 0 is out of range"),
], ids=lambda v: v.split(" ")[0] if isinstance(v, str) else None)
def test_ops_reject_bad_input_and_touch_nothing(call, match):
    state, windows = _pools()
    before = state.clone(), windows.clone()
    x, wt = torch.randn(3, 64).to(BF16), torch.randn(64, 4)
    with pytest.raises(ValueError, match=match):
        call(state, windows, x, wt)
    assert torch.equal(state, before[0]) and torch.equal(windows, before[1]), "a rejected call wrote the pool"


def test_empty_batch_returns_without_touching_the_pool():
    state, windows = _pools()
    before = state.clone(), windows.clone()
    wt = torch.randn(64, 4)
    assert conv1d_update(state, torch.randn(0, 64).to(BF16), wt).shape == (0, 64)
    assert conv1d_verify(windows, torch.randn(0, 4, 64).to(BF16), wt).shape == (0, 4, 64)
    conv1d_commit(windows, torch.ones(0, dtype=torch.int32), 4)
    assert torch.equal(state, before[0]) and torch.equal(windows, before[1])


# ---- the C ABI: binding, dispatch table, error messages (validation only: no launch, no GPU) ----

def test_binding_fields_follow_params_h():
    assert [(n, t) for n, t in kernels.Conv1dParams._fields_] == \
        _header_fields(PARAMS_H / "conv1d/params.h", "rssm_conv1d_params")


needs_conv1d = pytest.mark.skipif(not (_lib.available() and _lib.has_symbol(_lib.load(), "rssm_conv1d")),
                                  reason="kernel library not built, or built without the conv1d kernels")


def _status(**overrides):
    """The library's validation of a well-formed verify launch (bf16 windows and activations, fp32 weights,
    C = 64, k = 4, T = 4, packed strides) with overrides; fake 16-byte aligned addresses (never dereferenced)."""
    p = kernels.Conv1dParams(mode=kernels.VERIFY, batch=2, channels=64, kernel_size=4, num_tokens=4, num_slots=4,
                             pad_slot_id=-1, state_dtype=2, act_dtype=2, weight_dtype=0, silu=1,
                             state_slot_stride=64 * 7, state_channel_stride=7, x_batch_stride=256,
                             x_token_stride=64, y_batch_stride=256, y_token_stride=64)
    dummy = 1 << 20
    for name in ("state", "accepted", "x", "weight", "bias", "y"):
        setattr(p, name, dummy)
    for k, v in overrides.items():
        setattr(p, k, v)
    lib = _lib.load()
    status = lib.rssm_conv1d_validate(ctypes.byref(p), ctypes.sizeof(p))
    return status, lib.rssm_last_error().decode()


@needs_conv1d
def test_native_abi_struct_size_matches_binding():
    assert kernels.abi_size_matches()


@needs_conv1d
def test_native_dispatch_table_matches_python_lists():
    for mode in (kernels.VERIFY, kernels.COMMIT):
        for k in range(0, 8):
            for T in range(0, CONV1D_MAX_TOKENS + 3):
                width = k - 1 + T
                ok = _status(mode=mode, kernel_size=k, num_tokens=T, state_channel_stride=max(width, 1),
                             state_slot_stride=64 * max(width, 1), y_batch_stride=64 * max(T, 1))[0] == 0
                assert ok == (k in CONV1D_KERNEL_SIZES and 1 <= T <= CONV1D_MAX_TOKENS), f"mode={mode} k={k} T={T}"
    for k in range(0, 8):
        ok = _status(mode=kernels.UPDATE, kernel_size=k, num_tokens=1, state_channel_stride=max(k - 1, 1),
                     state_slot_stride=64 * max(k - 1, 1))[0] == 0
        assert ok == (k in CONV1D_KERNEL_SIZES), f"update k={k}"
    codes = set(DTYPE_CODES.values())
    for code in range(-1, 5):
        assert (_status(state_dtype=code)[0] == 0) == (code in codes), f"state_dtype={code}"
        assert (_status(act_dtype=code, weight_dtype=0)[0] == 0) == (code in codes), f"act_dtype={code}"
        assert (_status(weight_dtype=code)[0] == 0) == (code in (0, 2)), f"weight_dtype={code} with bf16 x"


@needs_conv1d
def test_native_commit_needs_no_activations():
    assert _status(mode=kernels.COMMIT, x=None, y=None, weight=None, bias=None, act_dtype=7, weight_dtype=7,
                   silu=5) == (0, "")


@needs_conv1d
@pytest.mark.parametrize("overrides, words", [
    (dict(mode=3), "mode=3"),
    (dict(kernel_size=5), "kernel_size=5"),
    (dict(num_tokens=17), "num_tokens=17"),
    (dict(mode=kernels.UPDATE), "num_tokens=4 must be 1 in update mode"),
    (dict(channels=0), "channels=0"),
    (dict(batch=70000), "batch=70000"),
    (dict(batch=9, slot_idx=None), "batch=9 exceeds num_slots=4"),
    (dict(weight_dtype=1), "weight_dtype=1"),
    (dict(silu=2), "silu=2"),
    (dict(state=None), "state is NULL"),
    (dict(x=None), "x is NULL"),
    (dict(y=(1 << 20) + 1), "y (0x100001) is not aligned"),
    (dict(mode=kernels.COMMIT, accepted=None), "accepted is NULL"),
    (dict(state_channel_stride=6), "state_channel_stride=6 is smaller than the window width k-1+T = 7"),
    (dict(state_slot_stride=64 * 7 - 1), "state_slot_stride=447"),
    (dict(y_token_stride=63), "y_token_stride=63"),
    (dict(y_batch_stride=255), "y_batch_stride=255"),
    (dict(x_batch_stride=-1), "x_batch_stride=-1"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_native_errors_name_the_offending_value(overrides, words):
    status, msg = _status(**overrides)
    assert status == 1 and words in msg, msg


@needs_conv1d
def test_native_accepts_unaligned_rows_and_odd_channels():
    """Alignment is not required: the kernels fall back to element-wise accesses."""
    assert _status(channels=37, state_channel_stride=7, state_slot_stride=37 * 7, x=(1 << 20) + 2,
                   x_batch_stride=4 * 37 + 1, x_token_stride=37, y_token_stride=37, y_batch_stride=4 * 37) == (0, "")


@needs_conv1d
def test_native_rejects_mismatched_struct_size():
    lib = _lib.load()
    p = kernels.Conv1dParams()
    assert lib.rssm_conv1d_validate(ctypes.byref(p), ctypes.sizeof(p) - 8) == 3


@pytest.mark.skipif(not _lib.available(), reason="kernel library not built")
def test_binding_asks_to_rebuild_a_library_without_conv1d(monkeypatch):
    monkeypatch.setattr(_lib, "has_symbol", lambda lib, name: False)
    with pytest.raises(_lib.KernelError, match="rssm_conv1d_validate.*rebuild"):
        kernels.validate(kernels.Conv1dParams())
