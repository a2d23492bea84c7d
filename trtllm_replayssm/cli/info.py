"""`trtllm-replayssm info`: library version, device, supported values."""

from __future__ import annotations

import torch

from trtllm_replayssm import _lib, config


def register(sub):
    p = sub.add_parser("info", help="show the kernel library, the device and the supported values")
    p.set_defaults(func=main)


def main(args) -> int:
    if _lib.available():
        v = _lib.load().rssm_version()
        print(f"kernel library: {_lib.library_path()} (version {v // 10000}.{v // 100 % 100}.{v % 100})")
    else:
        print(f"kernel library: not built ({_lib.library_path()})")
    print(f"CUDA device: {torch.cuda.get_device_name() if torch.cuda.is_available() else 'none'}")
    print(f"Mamba-2 head_dim: {config.MAMBA2_HEAD_DIMS}, dstate: {config.MAMBA2_DSTATES}, "
          f"buffer_len: {config.MIN_BUFFER_LEN}..{config.MAX_BUFFER_LEN}, "
          f"state dtypes: {[config.dtype_name(d) for d in config.MAMBA2_STATE_DTYPES]}, "
          f"activation dtypes: {[config.dtype_name(d) for d in config.MAMBA2_ACT_DTYPES]}")
    return 0
