"""Bytes each decode step must move through HBM (each input read once, each output written once)."""

from __future__ import annotations

from trtllm_replayssm.config import GdnLayerShape, Mamba2LayerShape


def mamba2_io_bytes(shape: Mamba2LayerShape, act_bytes: int, with_z=True) -> int:
    """Per row: x, z, y of [H, P]; B, C of [G, N]; dt of [H] (all in the activation dtype)."""
    H, P, N, G = shape.nheads, shape.head_dim, shape.dstate, shape.ngroups
    return act_bytes * ((3 if with_z else 2) * H * P + 2 * G * N + H)


def mamba2_conventional_bytes(shape: Mamba2LayerShape, state_bytes: int, act_bytes: int) -> int:
    H, P, N = shape.nheads, shape.head_dim, shape.dstate
    return 2 * H * P * N * state_bytes + mamba2_io_bytes(shape, act_bytes)


def replay_amortised_bytes(state: int, record: int, io: int, L: int) -> float:
    """Average over the L phases of a row: the checkpoint (`state` bytes) read every step and written on 1 step
    in L; the ring window (mean (L-1)/2 records of `record` bytes) read; one record written on L-1 steps in L;
    the step's inputs and outputs (`io`)."""
    return state * (1 + 1 / L) + record * ((L - 1) / 2 + (L - 1) / L) + io


def mamba2_replay_amortised_bytes(shape: Mamba2LayerShape, L: int, state_bytes: int, act_bytes: int) -> float:
    """Records: x, B (activation dtype) and dt (fp32)."""
    H, P, N, G = shape.nheads, shape.head_dim, shape.dstate, shape.ngroups
    record = act_bytes * (H * P + G * N) + 4 * H
    return replay_amortised_bytes(H * P * N * state_bytes, record, mamba2_io_bytes(shape, act_bytes), L)


def gdn_io_bytes(shape: GdnLayerShape, act_bytes: int) -> int:
    """Per row: q, k of [H, K] and v, y of [HV, V] in the activation dtype; g ([HV], KDA [HV, K]) and beta [HV]
    in fp32."""
    H, HV, K, V = shape.num_k_heads, shape.num_v_heads, shape.head_k_dim, shape.head_v_dim
    g = HV * K if shape.per_channel_decay else HV
    return act_bytes * (2 * H * K + 2 * HV * V) + 4 * (g + HV)


def gdn_conventional_bytes(shape: GdnLayerShape, state_bytes: int, act_bytes: int) -> int:
    HV, K, V = shape.num_v_heads, shape.head_k_dim, shape.head_v_dim
    return 2 * HV * V * K * state_bytes + gdn_io_bytes(shape, act_bytes)


def gdn_replay_amortised_bytes(shape: GdnLayerShape, L: int, state_bytes: int, act_bytes: int) -> float:
    """Records: u, k (activation dtype) and g (fp32; [HV, K] for KDA)."""
    H, HV, K, V = shape.num_k_heads, shape.num_v_heads, shape.head_k_dim, shape.head_v_dim
    record = act_bytes * (HV * V + H * K) + 4 * (HV * K if shape.per_channel_decay else HV)
    return replay_amortised_bytes(HV * V * K * state_bytes, record, gdn_io_bytes(shape, act_bytes), L)
