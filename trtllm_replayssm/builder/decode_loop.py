"""A batched greedy decode loop for a transformers causal LM, with or without the ReplaySSM rewrite.

Requests of different prompt lengths share one batch (left padding, an attention mask and per-row positions);
with a rewrite, every request gets a pool slot for its lifetime (`SlotAllocator`), its prefill state becomes
the slot's checkpoint, and the slot is released at the end. CPU runs the PyTorch reference ops, CUDA the kernels.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch


class SlotAllocator:
    """Request slots of a rewrite's pools: acquire for a batch of requests, release when they finish."""

    def __init__(self, num_slots: int):
        self.free = list(range(num_slots))

    def acquire(self, n: int) -> list[int]:
        if n > len(self.free):
            raise RuntimeError(f"{n} slots requested, {len(self.free)} free")
        slots, self.free = self.free[:n], self.free[n:]
        return slots

    def release(self, slots) -> None:
        self.free.extend(int(s) for s in slots)


@dataclass
class Generation:
    tokens: list[list[int]]  # generated tokens per request
    logits: torch.Tensor     # [steps, batch, vocab] fp32: the logits each generated token was taken from


def _cache_kwarg(model) -> str:
    """Name of the forward argument that takes the cache (it was renamed across transformers versions)."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


@torch.no_grad()
def greedy_decode(model, prompts: list[list[int]], max_new_tokens: int, rewrite=None, allocator=None,
                  pad_token_id: int = 0, forced: list[list[int]] | None = None) -> Generation:
    """Greedy generation of `max_new_tokens` tokens for every prompt, in one batch. With `rewrite` (a
    ReplayRewrite of `model`), the SSM layers decode with ReplaySSM; slots come from `allocator` (one over all
    of the rewrite's slots if None) and are released at the end. With `forced` (tokens per request, e.g.
    another run's), the loop feeds those tokens instead of its own argmax (teacher forcing), so that the logits
    of two models can be compared step by step even where a near tie would flip a greedy choice."""
    device = next(model.parameters()).device
    b, T = len(prompts), max(len(p) for p in prompts)
    ids = torch.full((b, T), pad_token_id, dtype=torch.long, device=device)
    mask = torch.zeros((b, T), dtype=torch.long, device=device)
    for r, p in enumerate(prompts):
        ids[r, T - len(p):] = torch.tensor(p, dtype=torch.long, device=device)
        mask[r, T - len(p):] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
    cache, logits = out.past_key_values, out.logits[:, -1].float()
    slots = None
    if rewrite is not None:
        allocator = allocator or SlotAllocator(rewrite.num_slots)
        slots = allocator.acquire(b)
        rewrite.load_prefill(cache, slots)
    tokens, all_logits = [[] for _ in prompts], []
    pos = positions[:, -1:]
    kw = _cache_kwarg(model)
    try:
        for step in range(max_new_tokens):
            all_logits.append(logits)
            nxt = logits.argmax(-1)
            if forced is not None:
                nxt = torch.tensor([f[step] for f in forced], dtype=torch.long, device=device)
            for r in range(b):
                tokens[r].append(int(nxt[r]))
            if step == max_new_tokens - 1:
                break
            mask = torch.cat([mask, mask.new_ones((b, 1))], dim=1)
            pos = pos + 1
            out = model(input_ids=nxt[:, None], attention_mask=mask, position_ids=pos, use_cache=True, **{kw: cache})
            cache, logits = out.past_key_values, out.logits[:, -1].float()
    finally:
        if rewrite is not None:
            rewrite.release(slots)
            rewrite.slot_idx = None
            allocator.release(slots)
    return Generation(tokens, torch.stack(all_logits))
