"""The explicit state of a network: every tensor a request keeps between steps, one row (slot) per request.

Names are `layer<i>.<buffer>`: the SSM pool buffers of a Mamba-2 / GDN layer (`checkpoint`, ring records,
`cursor`, read copy: trtllm_replayssm/pool.py), `layer<i>.conv_state` [slots, C, k-1] of its causal conv1d, and
`layer<i>.k_cache` / `layer<i>.v_cache` [slots + 1, max_seq_len, kv_heads, head_dim] of an attention layer. The
conv state holds k-1+T inputs with speculative decoding (history, then the verify window), and
`layer<i>.snapshots` [slots, T, *state] holds the conventional speculative path's states. The KV caches have one spare row past the last slot: padding rows (slot -1) write there, so a step needs no mask
and no host synchronisation. The same names are the engine's state inputs and aliased outputs
(trtllm_replayssm/builder/), so the PyTorch runtime and a TensorRT engine bind the same buffers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from trtllm_replayssm.config import PAD_SLOT_ID


@dataclass
class StateSet:
    """All per-slot state tensors of one network, by name (module docstring), plus the SSM pools that own the
    pool buffers (the ops take pools)."""

    num_slots: int
    max_seq_len: int
    spec_tokens: int = 0  # T of the speculative verify window (0: standard decode only)
    tensors: dict = field(default_factory=dict)  # name -> tensor
    pools: dict = field(default_factory=dict)  # layer index -> StatePool (its buffers are in `tensors` too)

    def __getitem__(self, name: str) -> torch.Tensor:
        return self.tensors[name]

    def add(self, name: str, tensor: torch.Tensor) -> torch.Tensor:
        self.tensors[name] = tensor
        return tensor

    def replace(self, name: str, tensor: torch.Tensor) -> None:
        """Rebinds `name` (and the pool buffer of that name) to `tensor`: the functional form of a write."""
        self.tensors[name] = tensor
        layer, _, buffer = name.partition(".")
        pool = self.pools.get(int(layer[len("layer"):]))
        if pool is not None and buffer in pool.buffers:
            pool.buffers[buffer] = tensor

    def over(self, tensors: dict) -> "StateSet":
        """A StateSet like this one (slots, lengths, pools' shapes and settings) over other tensors of the same
        names: the export traces one made of its graph inputs."""
        other = StateSet(self.num_slots, self.max_seq_len, self.spec_tokens, dict(tensors))
        for i, pool in self.pools.items():
            other.pools[i] = type(pool).over(pool.shape, pool.cfg, {n: tensors[f"layer{i}.{n}"] for n in pool.buffers})
        return other

    @property
    def bytes_per_slot(self) -> int:
        """Bytes one request slot takes over all layers (the KV caches' spare row not counted)."""
        total = 0
        for t in self.tensors.values():
            total += t[0].numel() * t.element_size()
        return total

    @property
    def total_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors.values())

    def rows(self, slot_idx: torch.Tensor) -> torch.Tensor:
        """Row of each batch row in the KV caches: its slot, or the spare row for padding (slot -1)."""
        return torch.where(slot_idx == PAD_SLOT_ID, torch.full_like(slot_idx, self.num_slots), slot_idx).long()

    def release(self, slots) -> None:
        """Zeroes every tensor's rows of `slots` (a new request starts from nothing)."""
        for s in slots:
            s = int(s)
            if not 0 <= s < self.num_slots:
                raise IndexError(f"slot={s} is outside 0..{self.num_slots - 1}")
            for pool in self.pools.values():
                pool.reset_slot(s)
            for name, t in self.tensors.items():
                if name.endswith(("conv_state", "snapshots", "k_cache", "v_cache")):
                    t[s].zero_()
