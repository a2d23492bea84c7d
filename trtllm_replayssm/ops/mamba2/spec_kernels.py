"""Binding of the Mamba-2 speculative verify kernels (ReplaySSM verify and the snapshot path): fills
rssm_mamba2_verify_params (one host function) and calls the C ABI on the current CUDA stream. No
synchronisation, no allocation: usable inside CUDA graph capture."""

from __future__ import annotations

import ctypes

import torch

from trtllm_replayssm import _lib
from trtllm_replayssm.config import DTYPE_CODES, READ_FORMAT_CODES

SNAPSHOT, REPLAY = 0, 1  # rssm_mamba2_mode: CONVENTIONAL (the snapshot path), REPLAY

_i32, _i64, _ptr = ctypes.c_int32, ctypes.c_int64, ctypes.c_void_p
_STRIDED = (("x", "head"), ("dt", "head"), ("B", "group"), ("C", "group"), ("z", "head"), ("y", "head"))


class Mamba2VerifyParams(ctypes.Structure):
    """Mirror of rssm_mamba2_verify_params (plugins/include/replayssm/mamba2/spec_params.h); the size is checked
    against the library on every call."""

    _fields_ = [(n, _i32) for n in ("batch", "nheads", "head_dim", "dstate", "ngroups", "window", "buffer_len",
                                    "num_slots", "pad_slot_id", "mode", "state_dtype", "act_dtype",
                                    "dt_softplus")]
    _fields_ += [(n, _ptr) for n in ("state", "ring_x", "ring_B", "ring_dt", "cursor", "snapshots", "slot_idx",
                                     "x", "dt", "B", "C", "z", "A", "D", "dt_bias", "y")]
    _fields_ += [(f"{n}_{d}_stride", _i64) for n, inner in _STRIDED for d in ("batch", "token", inner)]
    _fields_ += [("read_format", _i32), ("read_state", _ptr), ("read_scale", _ptr)]


def fill_params(mode, state, x, dt, B, C, A, D, z, dt_bias, dt_softplus, slot_idx, pad_slot_id, y, *,
                ring_x=None, ring_B=None, ring_dt=None, cursor=None, buffer_len=0, snapshots=None,
                read_format="none", read_state=None, read_scale=None):
    """read_format (a key of READ_FORMAT_CODES) with its buffers read_state / read_scale (replay only; the pool's
    buffers of the same names): the outputs read the copy, flush rows rewrite it."""
    p = Mamba2VerifyParams()
    p.batch, p.window, p.nheads, p.head_dim = x.shape[0], x.shape[1], x.shape[2], x.shape[3]
    p.ngroups, p.dstate = B.shape[2], B.shape[3]
    p.buffer_len, p.num_slots, p.pad_slot_id, p.mode = buffer_len, state.shape[0], pad_slot_id, mode
    p.state_dtype, p.act_dtype = DTYPE_CODES[state.dtype], DTYPE_CODES[x.dtype]
    p.dt_softplus = int(bool(dt_softplus))
    for name, t in (("state", state), ("ring_x", ring_x), ("ring_B", ring_B), ("ring_dt", ring_dt),
                    ("cursor", cursor), ("snapshots", snapshots), ("slot_idx", slot_idx), ("x", x), ("dt", dt),
                    ("B", B), ("C", C), ("z", z), ("A", A), ("D", D), ("dt_bias", dt_bias), ("y", y),
                    ("read_state", read_state), ("read_scale", read_scale)):
        setattr(p, name, None if t is None else t.data_ptr())
    p.read_format = READ_FORMAT_CODES[read_format]
    tensors = {"x": x, "dt": dt, "B": B, "C": C, "z": z, "y": y}
    for name, inner in _STRIDED:
        t = tensors[name]
        strides = (0, 0, 0) if t is None else t.stride()[:3]
        for d, s in zip(("batch", "token", inner), strides):
            setattr(p, f"{name}_{d}_stride", s)
    return p


def launch(p: Mamba2VerifyParams, device: torch.device) -> None:
    lib = _lib.require("rssm_mamba2_verify")
    stream = torch.cuda.current_stream(device).cuda_stream
    _lib.check(lib.rssm_mamba2_verify(ctypes.byref(p), ctypes.sizeof(p), ctypes.c_void_p(stream)),
               "rssm_mamba2_verify")


def validate(p: Mamba2VerifyParams) -> None:
    lib = _lib.require("rssm_mamba2_verify")
    _lib.check(lib.rssm_mamba2_verify_validate(ctypes.byref(p), ctypes.sizeof(p)), "rssm_mamba2_verify_validate")


def abi_size_matches() -> bool:
    return _lib.require("rssm_mamba2_verify").rssm_mamba2_verify_params_size() == ctypes.sizeof(Mamba2VerifyParams)
