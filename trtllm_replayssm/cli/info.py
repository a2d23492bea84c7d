"""`trtllm-replayssm info`: library version, device, supported values (config.py's closed lists)."""

from __future__ import annotations

import torch

from trtllm_replayssm import _lib, config


def register(sub):
    p = sub.add_parser("info", help="show the kernel library, the device and the supported values")
    p.set_defaults(func=main)


def _names(dtypes) -> str:
    return ", ".join(config.dtype_name(d) for d in dtypes)


def _pairs(pairs) -> str:
    return ", ".join(f"{state}+{fmt}" for state, fmt in pairs)


def main(args) -> int:
    if _lib.available():
        v = _lib.load().rssm_version()
        print(f"kernel library: {_lib.library_path()} (version {v // 10000}.{v // 100 % 100}.{v % 100})")
    else:
        print(f"kernel library: not built ({_lib.library_path()}); the PyTorch references run instead")
    print(f"CUDA device: {torch.cuda.get_device_name() if torch.cuda.is_available() else 'none'}")
    print(f"ring length L: {config.MIN_BUFFER_LEN}..{config.MAX_BUFFER_LEN} (default {config.DEFAULT_BUFFER_LEN}); "
          f"speculative verify: T = {config.SPEC_MIN_WINDOW}..{config.SPEC_MAX_WINDOW} tokens per step, "
          f"a ring of L >= 2T")
    print(f"Mamba-2: head_dim {config.MAMBA2_HEAD_DIMS}, dstate {config.MAMBA2_DSTATES}, "
          f"state dtypes {_names(config.MAMBA2_STATE_DTYPES)}, activation dtypes {_names(config.MAMBA2_ACT_DTYPES)}; "
          f"read copies (checkpoint+copy) in the decode kernel: {_pairs(config.MAMBA2_KERNEL_READ_COPIES)}, in the "
          f"verify kernel: {_pairs((config.MAMBA2_VERIFY_READ_COPY_STATE, f) for f in config.MAMBA2_VERIFY_READ_FORMATS)} "
          f"with {' or '.join(config.MAMBA2_VERIFY_READ_COPY_ACTS)} activations")
    print(f"Gated DeltaNet and KDA: head_k_dim and head_v_dim {config.GDN_HEAD_DIMS}, value heads a multiple of key "
          f"heads, state and activation dtypes {_names(config.DTYPE_CODES)}; read copies (GDN decode kernel, not "
          f"KDA): {_pairs((config.GDN_KERNEL_READ_COPY_STATE, f) for f in config.GDN_KERNEL_READ_FORMATS)} "
          f"with {' or '.join(config.GDN_KERNEL_READ_COPY_ACTS)} activations")
    print(f"causal conv1d: kernel sizes {config.CONV1D_KERNEL_SIZES}, up to {config.CONV1D_MAX_TOKENS} tokens per "
          f"speculative verify")
    print(f"gated RMSNorm (the mixers' output norm): group sizes multiples of {config.GATED_RMSNORM_GROUP_MULTIPLE} "
          f"up to {config.GATED_RMSNORM_MAX_GROUP_SIZE}, weights in fp32 or the activation dtype")
    return 0
