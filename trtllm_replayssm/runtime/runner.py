"""The model runner: turns the scheduler's decision into batched tensors for the network, and samples.

Prefill takes the step's new requests as one right-padded batch. Decode takes every running request, padded up
to a batch-size bucket (1, 2, 4, 8, ... max_batch) with padding rows at slot -1; on CUDA each bucket's step is a
CUDA graph captured once over static input buffers (as vLLM and TensorRT-LLM do), so a step costs one graph
launch whatever the layer count. The network's decode carries no host synchronisation and no per-value
validation; the one synchronisation per step is the sampled tokens' copy to the host, which streaming needs.
"""

from __future__ import annotations

import time

import torch

from trtllm_replayssm.network import HybridLM

from .sampling import sample


def buckets(max_batch: int) -> list[int]:
    out, b = [], 1
    while b < max_batch:
        out.append(b)
        b *= 2
    return out + [max_batch]


class ModelRunner:
    def __init__(self, net: HybridLM, num_slots: int, max_seq_len: int, cuda_graphs: bool | None = None):
        self.net, self.num_slots, self.max_seq_len = net, num_slots, max_seq_len
        self.device = net.lm_head.weight.device
        self.state = net.new_state(num_slots, max_seq_len)
        self.buckets = buckets(num_slots)
        self.cuda_graphs = self.device.type == "cuda" if cuda_graphs is None else cuda_graphs
        self._graphs: dict = {}  # bucket -> (graph, tokens, positions, slots, logits)
        self.last_step_s = 0.0

    # ---- phases ----
    def prefill(self, prompts: list[list[int]], slots: list[int]) -> torch.Tensor:
        """Right-padded prompts into their slots; returns the last prompt tokens' logits [b, vocab] (fp32)."""
        S = max(len(p) for p in prompts)
        ids = torch.zeros(len(prompts), S, dtype=torch.long)
        for r, p in enumerate(prompts):
            ids[r, :len(p)] = torch.tensor(p, dtype=torch.long)
        lengths = torch.tensor([len(p) for p in prompts], dtype=torch.int32)
        slot_idx = torch.tensor(slots, dtype=torch.int32)
        d = self.device
        return self.net.prefill(self.state, ids.to(d), lengths.to(d), slot_idx.to(d))

    def decode(self, tokens: list[int], positions: list[int], slots: list[int]) -> torch.Tensor:
        """One decode step of len(tokens) rows; returns their logits [b, vocab] (fp32)."""
        b = len(tokens)
        bucket = next(x for x in self.buckets if x >= b)
        pad = bucket - b
        tok = torch.tensor(tokens + [0] * pad, dtype=torch.long)
        pos = torch.tensor(positions + [0] * pad, dtype=torch.long)
        slot = torch.tensor(slots + [-1] * pad, dtype=torch.int32)
        if not self.cuda_graphs:
            d = self.device
            return self.net.decode(self.state, tok.to(d), pos.to(d), slot.to(d))[:b]
        graph, s_tok, s_pos, s_slot, s_out = self._graph(bucket)
        s_tok.copy_(tok, non_blocking=True)
        s_pos.copy_(pos, non_blocking=True)
        s_slot.copy_(slot, non_blocking=True)
        graph.replay()
        return s_out[:b]

    def _graph(self, bucket: int):
        if bucket in self._graphs:
            return self._graphs[bucket]
        d = self.device
        s_tok = torch.zeros(bucket, dtype=torch.long, device=d)
        s_pos = torch.zeros(bucket, dtype=torch.long, device=d)
        s_slot = torch.full((bucket,), -1, dtype=torch.int32, device=d)  # all padding: warm-up writes nothing
        side = torch.cuda.Stream(d)
        side.wait_stream(torch.cuda.current_stream(d))
        with torch.cuda.stream(side):
            self.net.decode(self.state, s_tok, s_pos, s_slot)  # warm-up (allocations, lazy initialisation)
        torch.cuda.current_stream(d).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            s_out = self.net.decode(self.state, s_tok, s_pos, s_slot)
        self._graphs[bucket] = (graph, s_tok, s_pos, s_slot, s_out)
        return self._graphs[bucket]

    def capture_all(self) -> None:
        """Captures every bucket's graph up front (serving starts with no capture pauses)."""
        if self.cuda_graphs:
            for b in self.buckets:
                self._graph(b)

    def release(self, slots: list[int]) -> None:
        self.net.release(self.state, slots)

    # ---- one engine step ----
    def step(self, prefill_reqs: list, decode_reqs: list) -> dict:
        """Runs the step's prefill and decode; returns request -> sampled token. Timing in last_step_s."""
        t0 = time.perf_counter()
        rows, logits = [], []
        if prefill_reqs:
            logits.append(self.prefill([r.prompt for r in prefill_reqs], [r.slot for r in prefill_reqs]))
            rows += prefill_reqs
        if decode_reqs:
            logits.append(self.decode([r.tokens[-1] for r in decode_reqs], [r.position for r in decode_reqs],
                                      [r.slot for r in decode_reqs]))
            rows += decode_reqs
        if not rows:
            return {}
        logits = logits[0] if len(logits) == 1 else torch.cat(logits)  # no copy of a decode-only step's logits
        tokens = sample(logits, [r.params for r in rows], rows)
        self.last_step_s = time.perf_counter() - t0
        return dict(zip(rows, tokens))
