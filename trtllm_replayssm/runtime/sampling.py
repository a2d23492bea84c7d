"""Token sampling per request: greedy, or temperature with optional top-k / top-p, from a private seeded stream.

Greedy rows are decided on the device in one argmax; sampled rows draw from each request's own torch.Generator
(seeded from `SamplingParams.seed`, else from the request id), so a request's tokens do not depend on what else
is in the batch.
"""

from __future__ import annotations

import torch


def _generator(req) -> torch.Generator:
    g = getattr(req, "_generator", None)
    if g is None:
        g = torch.Generator().manual_seed(req.params.seed if req.params.seed is not None else req.id)
        req._generator = g
    return g


def filtered_probs(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """Probabilities [vocab] (fp32, CPU) after temperature, top-k and top-p (nucleus) filtering."""
    logits = logits.float() / temperature
    if 0 < top_k < logits.numel():
        kth = torch.topk(logits, top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, -1)
    if top_p < 1.0:
        sorted_p, order = torch.sort(probs, descending=True)
        keep = sorted_p.cumsum(-1) - sorted_p < top_p  # the smallest prefix whose mass reaches top_p
        mask = torch.zeros_like(probs, dtype=torch.bool)
        mask[order[keep]] = True
        probs = torch.where(mask, probs, torch.zeros_like(probs))
        probs = probs / probs.sum()
    return probs


def sample(logits: torch.Tensor, params: list, reqs: list) -> list[int]:
    """One token per row of logits [b, vocab]."""
    greedy = logits.argmax(-1).tolist()  # the step's one host synchronisation
    out = []
    for r, (p, req) in enumerate(zip(params, reqs)):
        if p.greedy:
            out.append(greedy[r])
            continue
        probs = filtered_probs(logits[r].cpu(), p.temperature, p.top_k, p.top_p)
        out.append(int(torch.multinomial(probs, 1, generator=_generator(req))))
    return out
