"""Timing with CUDA graphs and events: warm-up, many launches per graph, median over replays."""

from __future__ import annotations

import math
import statistics

import torch

L2_BYTES = 60 << 20  # H200 L2 (50 MiB) rounded up: pools and slot rotations are sized against it


def pool_slots(batch: int, state_bytes: int) -> int:
    """Slots of a benchmark pool: at least twice the batch and four times the L2 size of state."""
    return max(2 * batch, math.ceil(4 * L2_BYTES / state_bytes))


def cold_slot_sets(num_slots: int, batch: int, state_bytes: int, cold_l2: bool = True, device="cuda"):
    """Disjoint sets of `batch` shuffled slot indices (int32) that the launches of a graph rotate through. cold_l2:
    enough sets that a pass over them touches twice the L2 size of state, so small batches are timed with their
    state coming from HBM, as in a model whose other layers evict it between steps; otherwise one set (every
    launch reuses the same rows: a small batch then runs from a warm L2)."""
    perm = torch.randperm(num_slots, device=device).to(torch.int32)
    sets = min(num_slots // batch, math.ceil(2 * L2_BYTES / (batch * state_bytes))) if cold_l2 else 1
    return [perm[j * batch:(j + 1) * batch] for j in range(sets)]


def graph_launches(base: int, sets: int, period: int = 1) -> int:
    """Launches per graph: at least `base`, a whole number of passes over the slot sets, and for replay every
    set visited a multiple of L (period) times, so each row goes through all its flush phases equally often."""
    unit = sets * period
    return unit * max(1, math.ceil(base / unit))


# Whether this process has timed a graph yet (time_graph_us): the first timing of a process is discarded.
_settled = False


def time_graph_us(step, launches_per_graph: int, replays: int = 10, warmup: int = 3) -> float:
    """Median µs per `step()` call: `launches_per_graph` calls are captured in one CUDA graph, the graph is
    replayed `warmup` times, then timed with events `replays` times.

    The first timing of a process is made twice and the first result dropped: it runs faster than every later
    one, whichever step it times (H200, benchmarks/timing_order.py, GDN Qwen3.5-122B b1: our conventional step
    4.06 µs first, 4.40-4.43 after; the ReplaySSM step 4.04 first, 4.19-4.25 after; b8 conventional 18.45 first,
    18.85 after), so a table's first method would be favoured at small batches."""
    global _settled
    if not _settled:
        _settled = True
        time_graph_us_raw(step, launches_per_graph, replays, warmup)
    return time_graph_us_raw(step, launches_per_graph, replays, warmup)


def time_graph_us_raw(step, launches_per_graph: int, replays: int = 10, warmup: int = 3) -> float:
    """time_graph_us without dropping the process's first timing (benchmarks/timing_order.py shows the effect)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(launches_per_graph):
            step()
    for _ in range(warmup):
        graph.replay()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / launches_per_graph)
    del graph
    return statistics.median(times)


def median_of_passes(rows: list[dict]) -> dict:
    """One result row from the rows of several passes over the same point: every number (and every number in a
    nested dict) the median over the passes, anything else as the first pass has it. With an odd number of passes
    a rate derived from a time (bytes / time) is the rate of the median time."""
    out = {}
    for key, value in rows[0].items():
        if isinstance(value, dict):
            out[key] = median_of_passes([r[key] for r in rows])
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = statistics.median(r[key] for r in rows)
        else:
            out[key] = value
    return out


def copy_bandwidth_gbs(nbytes: int = 1 << 30) -> float:
    """Device-to-device copy bandwidth in GB/s, counting bytes read plus bytes written."""
    src = torch.randn(nbytes // 4, device="cuda")
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    times = []
    for _ in range(10):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(10):
            dst.copy_(src)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e-3 / 10)
    return 2 * nbytes / statistics.median(times) / 1e9
