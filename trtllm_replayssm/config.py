"""Configuration dataclasses and the closed lists of supported values: the single source of defaults.

The native dispatch table (plugins/capi/mamba2_dispatch.cu) accepts exactly these values; a test checks that
the two agree.
"""

from __future__ import annotations

import numbers

from dataclasses import dataclass

import torch

# Element types the kernels read and write (values of the C ABI enum rssm_dtype).
DTYPE_CODES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
DTYPE_NAMES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}

MAMBA2_HEAD_DIMS = (64, 80, 128)
MAMBA2_DSTATES = (64, 128, 256)
MAMBA2_STATE_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
MAMBA2_ACT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
GDN_HEAD_DIMS = (64, 128, 256)
# Causal conv1d kernels (plugins/capi/conv1d_dispatch.cu): kernel sizes, and tokens per speculative verify.
CONV1D_KERNEL_SIZES = (2, 3, 4)
CONV1D_MAX_TOKENS = 16
# Gated RMSNorm kernel (plugins/capi/norm_dispatch.cu): group sizes are multiples of this, up to the maximum.
GATED_RMSNORM_GROUP_MULTIPLE = 8
GATED_RMSNORM_MAX_GROUP_SIZE = 8192
# Read-copy formats and their bits per state element (nvfp4: 4-bit values plus an 8-bit scale per 16).
READ_FORMATS = ("none", "fp16", "bf16", "fp8", "nvfp4")
READ_FORMAT_BITS = {"fp16": 16, "bf16": 16, "fp8": 8, "nvfp4": 4.5}
# Codes of the C ABI enum rssm_read_format, and the (checkpoint dtype, read format) pairs the Mamba-2 decode
# kernel reads and writes besides "none" (plugins/capi/mamba2_dispatch.cu, kReadCopies; a test checks that the
# two agree). nvfp4 with an fp16 / bf16 checkpoint: PyTorch reference only.
READ_FORMAT_CODES = {"none": 0, "fp16": 1, "bf16": 2, "fp8": 3, "nvfp4": 4}
MAMBA2_KERNEL_READ_COPIES = (("fp32", "fp16"), ("fp32", "bf16"), ("fp32", "fp8"), ("fp16", "fp8"), ("bf16", "fp8"),
                             ("fp32", "nvfp4"))
# The GDN decode kernel's read copies (plugins/capi/gdn_dispatch.cu, kReadFormats): an fp32 checkpoint with these
# activation dtypes and copy formats, GDN replay only (not KDA). nvfp4: not for GDN.
GDN_KERNEL_READ_COPY_STATE = "fp32"
GDN_KERNEL_READ_COPY_ACTS = ("fp16", "bf16")
GDN_KERNEL_READ_FORMATS = ("fp16", "bf16", "fp8")
# The Mamba-2 verify kernel's read copies (plugins/capi/mamba2_verify_dispatch.cu, kReadFormats): an fp32 checkpoint
# with these activation dtypes and copy formats, ReplaySSM verify only. nvfp4: decode kernel only.
MAMBA2_VERIFY_READ_COPY_STATE = "fp32"
MAMBA2_VERIFY_READ_COPY_ACTS = ("fp16", "bf16")
MAMBA2_VERIFY_READ_FORMATS = ("fp16", "bf16", "fp8")
MIN_BUFFER_LEN = 1
MAX_BUFFER_LEN = 64
DEFAULT_BUFFER_LEN = 16
# The latency route (Mamba-2 and GDN, fp32 checkpoint, no read copy): a replay step whose rows' checkpoints total
# at most this many bytes (batch x a slot's checkpoint elements x 4) flushes every row, in the conventional
# kernel's mapping: small steps are latency-bound, so the replay's saving of bytes buys nothing there (H200: the
# replay step loses to the conventional one below ~48-64 MB of state per step, docs/mamba2.md, docs/gdn.md).
# At history 0 the step is the conventional step bit for bit; rows with records fold them first (the flush
# route's arithmetic).
DEFAULT_LATENCY_ROUTE_BYTES = 32 << 20
PAD_SLOT_ID = -1
# Speculative verify: tokens per window T (the last accepted token and T-1 drafts); the ring needs L >= 2T.
SPEC_MIN_WINDOW = 2
SPEC_MAX_WINDOW = 8

# Cursors: int32 [slots, heads, CURSOR_REPLICAS, CURSOR_FIELDS] with fields (history, origin); every replica
# of a slot holds the same values between launches (plugins/include/replayssm/common/types.h says why).
CURSOR_REPLICAS = 8
CURSOR_FIELDS = 2
CURSOR_HISTORY = 0
CURSOR_ORIGIN = 1


def dtype_name(dtype: torch.dtype) -> str:
    for name, dt in DTYPE_NAMES.items():
        if dt == dtype:
            return name
    return str(dtype).replace("torch.", "")


def parse_dtype(value) -> torch.dtype:
    """Accepts a torch dtype or one of 'fp32', 'fp16', 'bf16'."""
    if isinstance(value, torch.dtype):
        return value
    if isinstance(value, str) and value in DTYPE_NAMES:
        return DTYPE_NAMES[value]
    raise ValueError(f"unknown dtype {value!r} (expected one of {', '.join(DTYPE_NAMES)})")


def _names(dtypes) -> str:
    return ", ".join(dtype_name(d) for d in dtypes)


@dataclass(frozen=True)
class Mamba2LayerShape:
    """Shapes of one Mamba-2 mixer: H heads of head_dim P, d_state N, G groups sharing B and C."""

    nheads: int
    head_dim: int
    dstate: int
    ngroups: int

    def validate(self) -> None:
        if self.head_dim not in MAMBA2_HEAD_DIMS:
            raise ValueError(f"head_dim={self.head_dim} is not supported (supported: {MAMBA2_HEAD_DIMS})")
        if self.dstate not in MAMBA2_DSTATES:
            raise ValueError(f"dstate={self.dstate} is not supported (supported: {MAMBA2_DSTATES})")
        if not 1 <= self.nheads <= 65535:
            raise ValueError(f"nheads={self.nheads} is out of range (1..65535)")
        if self.ngroups < 1 or self.nheads % self.ngroups:
            raise ValueError(f"ngroups={self.ngroups} must be >= 1 and divide nheads={self.nheads}")

    @property
    def heads_per_group(self) -> int:
        return self.nheads // self.ngroups


@dataclass(frozen=True)
class GdnLayerShape:
    """Shapes of one Gated DeltaNet mixer: H key heads of dim K, HV value heads of dim V (HV/H value heads share
    a key head). per_channel_decay selects KDA (Kimi Delta Attention): a decay vector of length K per value head
    instead of one scalar."""

    num_k_heads: int
    num_v_heads: int
    head_k_dim: int
    head_v_dim: int
    per_channel_decay: bool = False

    def validate(self) -> None:
        for name in ("head_k_dim", "head_v_dim"):
            if getattr(self, name) not in GDN_HEAD_DIMS:
                raise ValueError(f"{name}={getattr(self, name)} is not supported (supported: {GDN_HEAD_DIMS})")
        if not 1 <= self.num_k_heads <= 65535:
            raise ValueError(f"num_k_heads={self.num_k_heads} is out of range (1..65535)")
        if self.num_v_heads < 1 or self.num_v_heads % self.num_k_heads:
            raise ValueError(f"num_v_heads={self.num_v_heads} must be a positive multiple of "
                             f"num_k_heads={self.num_k_heads}")

    @property
    def v_heads_per_k_head(self) -> int:
        return self.num_v_heads // self.num_k_heads


@dataclass(frozen=True)
class ReplayConfig:
    """ReplaySSM settings of a layer: ring length L, the dtypes of the checkpoint (the recurrence) and of the
    activations, and the format of the optional read copy (written at flush, read by the output-only route,
    never fed back into the recurrence): one of READ_FORMATS."""

    buffer_len: int = DEFAULT_BUFFER_LEN
    state_dtype: torch.dtype = torch.float32
    act_dtype: torch.dtype = torch.bfloat16
    read_format: str = "none"
    # The latency route (DEFAULT_LATENCY_ROUTE_BYTES above): None = the default where the layer's kernels take it
    # (fp32 checkpoint, no read copy; shapes in pool.latency_route_limit), else off; 0 = off; n = the limit.
    latency_route_bytes: int | None = None

    def __post_init__(self):
        object.__setattr__(self, "state_dtype", parse_dtype(self.state_dtype))
        object.__setattr__(self, "act_dtype", parse_dtype(self.act_dtype))

    def validate(self) -> None:
        if not MIN_BUFFER_LEN <= self.buffer_len <= MAX_BUFFER_LEN:
            raise ValueError(
                f"buffer_len={self.buffer_len} is out of range ({MIN_BUFFER_LEN}..{MAX_BUFFER_LEN})")
        if self.state_dtype not in MAMBA2_STATE_DTYPES:
            raise ValueError(f"state_dtype={dtype_name(self.state_dtype)} is not supported "
                             f"(supported: {_names(MAMBA2_STATE_DTYPES)})")
        if self.act_dtype not in MAMBA2_ACT_DTYPES:
            raise ValueError(f"act_dtype={dtype_name(self.act_dtype)} is not supported "
                             f"(supported: {_names(MAMBA2_ACT_DTYPES)})")
        if self.read_format not in READ_FORMATS:
            raise ValueError(f"read_format={self.read_format!r} is not supported (supported: {', '.join(READ_FORMATS)})")
        if self.latency_route_bytes is not None:
            if (isinstance(self.latency_route_bytes, bool) or not isinstance(self.latency_route_bytes, numbers.Integral)
                    or self.latency_route_bytes < 0):
                raise ValueError(f"latency_route_bytes={self.latency_route_bytes!r} must be None or an int >= 0")
            if self.latency_route_bytes and (self.state_dtype != torch.float32 or self.read_format != "none"):
                raise ValueError(f"latency_route_bytes={self.latency_route_bytes} needs state_dtype=fp32 and "
                                 f"read_format='none' (got {dtype_name(self.state_dtype)}, {self.read_format!r})")
        state_bits = torch.empty((), dtype=self.state_dtype).element_size() * 8
        if self.read_format != "none" and READ_FORMAT_BITS[self.read_format] >= state_bits:
            raise ValueError(f"read_format={self.read_format} is not narrower than state_dtype="
                             f"{dtype_name(self.state_dtype)}: the copy would cost memory and save no traffic")
