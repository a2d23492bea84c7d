"""State pools: per layer, per request slot, every buffer a ReplaySSM layer keeps between steps.

A pool is described by a list of BufferSpec (name, per-slot shape, dtype) before anything is allocated, so
the memory planner and the allocator read the same description, and later features (draft windows, read
copies) add buffers by adding specs.

Mamba-2 pool, one layer (H heads, P head_dim, N d_state, G groups, L ring length):
    checkpoint [slots, H, P, N]  state dtype      the state at the last flush
    ring_x     [slots, H, L, P]  activation dtype x of the tokens since the checkpoint
    ring_B     [slots, G, L, N]  activation dtype B of those tokens
    ring_dt    [slots, H, L4]    fp32             processed dt of those tokens (L4 = L rounded up to 4)
    cursor     [slots, H, 8, 2]  int32            (history, origin), replicated per head and tile

Gated DeltaNet / KDA pool, one layer (H key heads of dim K, HV value heads of dim V):
    checkpoint [slots, HV, V, K]  state dtype      (K contiguous, the serving engines' layout)
    ring_u     [slots, HV, L, V]  activation dtype corrected updates u of the tokens since the checkpoint
    ring_k     [slots, H, L, K]   activation dtype keys (after normalisation) of those tokens
    ring_g     [slots, HV, L4]    fp32             log decays g (KDA: [slots, HV, L, K])
    cursor     [slots, HV, 8, 2]  int32            as for Mamba-2
Batch rows reach slots through an int32 slot index tensor; PAD_SLOT_ID (-1) marks a padding row.
Ring positions outside a slot's window hold older records (zeros after allocation); the Mamba-2 kernel's
output-only route multiplies them by a zero weight instead of branching, so they must stay finite: write the
ring buffers only through the ops (or with finite values).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from trtllm_replayssm.quant import NVFP4_BLOCK, NVFP4_ROWS, dequantize_state, quantize_state

from trtllm_replayssm.config import (CURSOR_FIELDS, CURSOR_HISTORY, CURSOR_ORIGIN, CURSOR_REPLICAS,
                                     DEFAULT_LATENCY_ROUTE_BYTES, GdnLayerShape, Mamba2LayerShape, ReplayConfig,
                                     dtype_name)


@dataclass(frozen=True)
class BufferSpec:
    name: str
    slot_shape: tuple  # shape of one slot's part
    dtype: torch.dtype
    role: str  # one line: what the buffer holds

    @property
    def bytes_per_slot(self) -> int:
        return math.prod(self.slot_shape) * torch.empty((), dtype=self.dtype).element_size()


def read_copy_specs(state_shape: tuple, fmt: str) -> list[BufferSpec]:
    """The buffers of a read copy of a state [..., N] (quantised along N): see trtllm_replayssm/quant.py."""
    *rows, N = state_shape
    if fmt == "none":
        return []
    if fmt in ("fp16", "bf16"):
        return [BufferSpec("read_state", tuple(state_shape), torch.float16 if fmt == "fp16" else torch.bfloat16,
                           "read copy of the checkpoint")]
    if fmt == "fp8":
        return [BufferSpec("read_state", tuple(state_shape), torch.float8_e4m3fn, "read copy, fp8 e4m3"),
                BufferSpec("read_scale", tuple(rows), torch.float32, "read copy, one scale per state row")]
    *heads, R = rows
    if R % NVFP4_ROWS:
        raise ValueError(f"read_format=nvfp4 needs state rows in groups of {NVFP4_ROWS}, got {R} rows per head")
    return [BufferSpec("read_state", (*rows, N // 2), torch.uint8, "read copy, e2m1 codes (2 per byte)"),
            BufferSpec("read_block_scale", (*rows, N // NVFP4_BLOCK), torch.float8_e4m3fn,
                       "read copy, e4m3 scale per 16 elements"),
            BufferSpec("read_scale", (*heads, R // NVFP4_ROWS), torch.float32,
                       f"read copy, fp32 scale per {NVFP4_ROWS} state rows")]


def mamba2_buffer_specs(shape: Mamba2LayerShape, cfg: ReplayConfig) -> list[BufferSpec]:
    H, P, N, G, L = shape.nheads, shape.head_dim, shape.dstate, shape.ngroups, cfg.buffer_len
    return read_copy_specs((H, P, N), cfg.read_format) + [
        BufferSpec("checkpoint", (H, P, N), cfg.state_dtype, "state at the last flush"),
        BufferSpec("ring_x", (H, L, P), cfg.act_dtype, "x of the tokens since the checkpoint"),
        BufferSpec("ring_B", (G, L, N), cfg.act_dtype, "B of the tokens since the checkpoint"),
        BufferSpec("ring_dt", (H, (L + 3) // 4 * 4), torch.float32,
                   "processed dt of the tokens since the checkpoint (rows padded to 16 bytes)"),
        BufferSpec("cursor", (H, CURSOR_REPLICAS, CURSOR_FIELDS), torch.int32,
                   "ring history and origin, one replica per kernel block"),
    ]


def gdn_buffer_specs(shape: GdnLayerShape, cfg: ReplayConfig) -> list[BufferSpec]:
    H, HV, K, V, L = shape.num_k_heads, shape.num_v_heads, shape.head_k_dim, shape.head_v_dim, cfg.buffer_len
    g_shape = (HV, L, K) if shape.per_channel_decay else (HV, (L + 3) // 4 * 4)
    return read_copy_specs((HV, V, K), cfg.read_format) + [
        BufferSpec("checkpoint", (HV, V, K), cfg.state_dtype, "state at the last flush"),
        BufferSpec("ring_u", (HV, L, V), cfg.act_dtype, "corrected updates u since the checkpoint"),
        BufferSpec("ring_k", (H, L, K), cfg.act_dtype, "keys since the checkpoint"),
        BufferSpec("ring_g", g_shape, torch.float32, "log decays since the checkpoint"),
        BufferSpec("cursor", (HV, CURSOR_REPLICAS, CURSOR_FIELDS), torch.int32,
                   "ring history and origin, one replica per kernel block"),
    ]


class StatePool:
    """All ReplaySSM buffers of one SSM layer for `num_slots` requests, allocated from buffer specs.

    Every family has a `checkpoint` and a `cursor` buffer; the rest (ring records) is family specific. The
    same pool serves conventional decode (which reads and writes `checkpoint` only) and ReplaySSM decode.
    """

    buffer_specs = None  # (shape, cfg) -> list[BufferSpec], set by each family

    def __init__(self, shape, num_slots: int, cfg: ReplayConfig | None = None, device="cpu"):
        cfg = cfg or ReplayConfig()
        shape.validate()
        cfg.validate()
        if num_slots < 1:
            raise ValueError(f"num_slots={num_slots} must be >= 1")
        self.shape, self.cfg, self.num_slots = shape, cfg, num_slots
        self.specs = type(self).buffer_specs(shape, cfg)
        self.buffers = {
            s.name: torch.zeros((num_slots, *s.slot_shape), dtype=s.dtype, device=device) for s in self.specs
        }
        self.device = self.buffers["checkpoint"].device  # "cuda" resolved to "cuda:<current>"
        self.latency_route_bytes = latency_route_limit(shape, cfg)

    @classmethod
    def over(cls, shape, cfg: ReplayConfig, buffers: dict) -> "StatePool":
        """A pool over existing buffers (name -> [slots, ...] tensor, the names and slot shapes of the specs):
        the functional ops (ops/library.py) take a pool's tensors and rebuild the pool around them."""
        pool = cls.__new__(cls)
        pool.shape, pool.cfg = shape, cfg
        pool.specs = cls.buffer_specs(shape, cfg)
        missing = [s.name for s in pool.specs if s.name not in buffers]
        if missing:
            raise ValueError(f"buffers lack {', '.join(missing)} (a {cls.__name__} needs "
                             f"{', '.join(s.name for s in pool.specs)})")
        pool.buffers = {s.name: buffers[s.name] for s in pool.specs}
        pool.num_slots = pool.buffers["checkpoint"].shape[0]
        pool.device = pool.buffers["checkpoint"].device
        pool.latency_route_bytes = latency_route_limit(shape, cfg)
        return pool

    def flushes_every_row(self, batch: int) -> bool:
        """Whether a replay step of `batch` rows (padding included) takes the latency route: their fp32
        checkpoints total at most latency_route_bytes (config.py; the kernels decide the same)."""
        return self.latency_route_bytes > 0 and batch * math.prod(self.checkpoint.shape[1:]) * 4 <= self.latency_route_bytes

    checkpoint = property(lambda self: self.buffers["checkpoint"])
    cursor = property(lambda self: self.buffers["cursor"])

    @property
    def buffer_len(self) -> int:
        return self.cfg.buffer_len

    def bytes_per_slot(self) -> dict:
        """Bytes one request slot takes, per buffer and in total."""
        out = {s.name: s.bytes_per_slot for s in self.specs}
        out["total"] = sum(out.values())
        return out

    def validate(self) -> None:
        """Checks every buffer's shape, dtype, device and contiguity against the specs, and cursor ranges."""
        for s in self.specs:
            t = self.buffers.get(s.name)
            want = (self.num_slots, *s.slot_shape)
            if t is None:
                raise ValueError(f"pool buffer {s.name!r} is missing")
            if tuple(t.shape) != want:
                raise ValueError(f"pool buffer {s.name!r} has shape {tuple(t.shape)}, expected {want}")
            if t.dtype != s.dtype:
                raise ValueError(f"pool buffer {s.name!r} has dtype {dtype_name(t.dtype)}, "
                                 f"expected {dtype_name(s.dtype)}")
            if t.device != self.device:
                raise ValueError(f"pool buffer {s.name!r} is on {t.device}, expected {self.device}")
            if not t.is_contiguous():
                raise ValueError(f"pool buffer {s.name!r} is not contiguous")
        first = self.cursor[:, :1, :1]
        if not bool((self.cursor == first).all()):
            raise ValueError("cursor replicas of a slot disagree")
        hist = first[:, 0, 0, CURSOR_HISTORY]
        if bool(((hist < 0) | (hist >= self.buffer_len)).any()):
            raise ValueError(f"cursor history outside 0..{self.buffer_len - 1}")

    def reset_slot(self, slot: int, state: torch.Tensor | None = None) -> None:
        """Starts a request in `slot`: checkpoint := state (zeros if None, e.g. from prefill), empty ring."""
        if not 0 <= slot < self.num_slots:
            raise IndexError(f"slot={slot} is outside 0..{self.num_slots - 1}")
        want = tuple(self.checkpoint.shape[1:])
        if state is None:
            self.checkpoint[slot].zero_()
        else:
            if tuple(state.shape) != want:
                raise ValueError(f"state has shape {tuple(state.shape)}, expected {want}")
            self.checkpoint[slot].copy_(state)
        self.write_read_copy(slot, self.checkpoint[slot] if state is None else state)
        self.cursor[slot].zero_()

    def clone(self, device=None) -> "StatePool":
        """An independent pool with the same shape, configuration and contents (on `device`, default the same)."""
        other = type(self)(self.shape, self.num_slots, self.cfg, device=device or self.device)
        for name, t in self.buffers.items():
            other.buffers[name].copy_(t)
        return other

    def write_read_copy(self, slot: int, state: torch.Tensor) -> None:
        """Refreshes the slot's read copy (if the config has one) from a high-precision state."""
        fmt = self.cfg.read_format
        if fmt != "none":
            for name, part in quantize_state(state.float(), fmt).items():
                self.buffers[name][slot].copy_(part)

    def read_state(self, slot: int) -> torch.Tensor:
        """The state the output-only route reads: the read copy (dequantised) if any, else the checkpoint."""
        fmt = self.cfg.read_format
        if fmt == "none":
            return self.checkpoint[slot]
        return dequantize_state({n: t[slot] for n, t in self.buffers.items() if n.startswith("read_")}, fmt)

    def history(self) -> torch.Tensor:
        """Records in each slot's ring since its checkpoint (a host copy; synchronises)."""
        return self.cursor[:, 0, 0, CURSOR_HISTORY].cpu()

    def origin(self) -> torch.Tensor:
        """Ring position of each slot's first record (a host copy; synchronises)."""
        return self.cursor[:, 0, 0, CURSOR_ORIGIN].cpu()

    def window(self, slot: int, records: int | None = None) -> tuple[int, list[int]]:
        """(history h, ring positions of records 0 .. records-1 counted from the origin) of one slot;
        by default h + 1 positions: the history and the next free position."""
        h = int(self.cursor[slot, 0, 0, CURSOR_HISTORY])
        origin = int(self.cursor[slot, 0, 0, CURSOR_ORIGIN])
        return h, [(origin + j) % self.buffer_len for j in range(h + 1 if records is None else records)]

    def commit_step(self, slot: int, new_checkpoint: torch.Tensor | None = None, **records) -> None:
        """Ends a replay step of `slot` as the kernels do: a flush stores `new_checkpoint` and empties the ring;
        otherwise each record (buffer name -> this token's record) goes to the next ring position."""
        h, positions = self.window(slot)
        if new_checkpoint is not None:
            self.checkpoint[slot] = new_checkpoint.to(self.checkpoint.dtype)
            self.write_read_copy(slot, new_checkpoint)
            self.set_cursor(slot, 0)
            return
        for name, value in records.items():
            ring = self.buffers[name]
            ring[slot][:, positions[h]] = value.to(ring.dtype)
        self.set_cursor(slot, h + 1)

    def set_cursor(self, slots, history, origin=None) -> None:
        """Sets history (and origin) of `slots` in every replica; values may be tensors on the pool's device."""
        self.cursor[slots, :, :, CURSOR_HISTORY] = _per_slot(history)
        if origin is not None:
            self.cursor[slots, :, :, CURSOR_ORIGIN] = _per_slot(origin)


class Mamba2StatePool(StatePool):
    """ReplaySSM buffers of one Mamba-2 layer (layout in the module docstring)."""

    buffer_specs = staticmethod(mamba2_buffer_specs)

    ring_x = property(lambda self: self.buffers["ring_x"])
    ring_B = property(lambda self: self.buffers["ring_B"])
    ring_dt = property(lambda self: self.buffers["ring_dt"])


class GdnStatePool(StatePool):
    """ReplaySSM buffers of one Gated DeltaNet (or KDA) layer (layout in the module docstring)."""

    buffer_specs = staticmethod(gdn_buffer_specs)

    ring_u = property(lambda self: self.buffers["ring_u"])
    ring_k = property(lambda self: self.buffers["ring_k"])
    ring_g = property(lambda self: self.buffers["ring_g"])


def latency_route_limit(shape, cfg: ReplayConfig) -> int:
    """The latency route's limit of a layer (config.py): the config's value, its default where the kernels take
    the route, 0 where they do not; an explicit limit they cannot honour is an error naming what is missing.
    The kernels take it on an fp32 checkpoint without read copy whose head's warp tiles (elements / 1024) can
    own the cursor replicas: one per tile (at most CURSOR_REPLICAS tiles, Mamba-2) or one per block of four tiles
    (a multiple of four, at most 4 * CURSOR_REPLICAS; GDN always, with scalar decay, not KDA)."""
    if isinstance(shape, GdnLayerShape):
        shape_ok = not shape.per_channel_decay and shape.head_v_dim * shape.head_k_dim <= CURSOR_REPLICAS * 4096
        rule = (f"scalar decay (GDN, not KDA) and head_v_dim * head_k_dim <= {CURSOR_REPLICAS * 4096} "
                f"(got {shape.head_v_dim} * {shape.head_k_dim})")
    else:
        tiles = shape.head_dim * shape.dstate // 1024
        shape_ok = tiles <= CURSOR_REPLICAS or (tiles % 4 == 0 and tiles <= 4 * CURSOR_REPLICAS)
        rule = (f"head_dim * dstate / 1024 tiles <= {CURSOR_REPLICAS}, or a multiple of 4 <= {4 * CURSOR_REPLICAS} "
                f"(got {shape.head_dim} * {shape.dstate})")
    fits = shape_ok and cfg.state_dtype == torch.float32 and cfg.read_format == "none"
    limit = cfg.latency_route_bytes
    if limit is None:
        return DEFAULT_LATENCY_ROUTE_BYTES if fits else 0
    if limit and not fits:
        raise ValueError(f"latency_route_bytes={limit} is not supported for this layer: the latency route needs an "
                         f"fp32 checkpoint without read copy and {rule}")
    return limit


def _per_slot(v):
    """A per-slot value broadcast over the head and replica dimensions of the cursor."""
    return v[:, None, None] if isinstance(v, torch.Tensor) and v.dim() == 1 else v
