"""The layers of the network definition, over the weights of a loaded transformers model.

Each layer reuses the loaded model's parameter modules (projections, norms, conv1d weights, rotary tables) and
writes its own forward with explicit state: a context phase over right-padded prompts [batch, S] (`prefill`)
and a generation phase over one token per row [batch] (`decode`). Every per-request tensor lives in the
network's StateSet (state.py), addressed by the rows' slot indices; nothing is kept on the module.

SSM mixers call the project's ops: prefill (trtllm_replayssm/ops/prefill.py: the conventional recurrence over
each prompt, leaving the final state as checkpoint with an empty ring), then ReplaySSM or conventional decode.
Attention keeps a slot-indexed KV cache written at each row's position (plain tensor ops; no paged KV).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from trtllm_replayssm.config import GdnLayerShape, Mamba2LayerShape, ReplayConfig
from trtllm_replayssm.ops import norm as norm_ops
from trtllm_replayssm.pool import GdnStatePool, Mamba2StatePool

from .state import StateSet
from .state_ops import IN_PLACE


@dataclass
class StepContext:
    """What every layer of one step reads besides its input: the state, the rows' slots (-1: padding) and KV
    rows, and the rows' positions (decode: [b], the token's index in its sequence; prefill: lengths [b])."""

    state: StateSet
    slot_idx: torch.Tensor  # [b] int32
    kv_rows: torch.Tensor  # [b] int64: slot, or the KV caches' spare row for padding
    positions: torch.Tensor | None = None  # decode: [b] int64
    lengths: torch.Tensor | None = None  # prefill: [b] int32
    rope: tuple | None = None  # (cos, sin) for the step's positions, [b, S, rotary_dim], or None
    accepted: torch.Tensor | None = None  # commit: [b] int32, tokens of the verified window accepted (1..T)
    ops: object = IN_PLACE  # how state is written: state_ops.IN_PLACE (runtime) or FUNCTIONAL (export)


class SsmMixer(nn.Module):
    """What the Mamba-2 and GDN mixers share: their state (pool, conv state or speculative conv window,
    snapshots), the conv1d phases and the speculative commit.

    State of a layer i: the pool buffers `layer<i>.<name>`; `layer<i>.conv_state` [slots, C, k-1+T] (T = the
    state's spec_tokens, 0 without speculative decoding: the conv history, then the verify window); with
    speculative decoding in conventional mode, `layer<i>.snapshots` [slots, T, *state] (the snapshot path)."""

    pool_cls = None

    def allocate(self, state: StateSet, cfg: ReplayConfig, device) -> None:
        pool = self.pool_cls(self.shape, state.num_slots, cfg, device=device)
        state.pools[self.index] = pool
        for name, t in pool.buffers.items():
            state.add(f"layer{self.index}.{name}", t)
        k = self.conv1d.kernel_size[0]
        T = state.spec_tokens
        state.add(f"layer{self.index}.conv_state",
                  torch.zeros(state.num_slots, self.conv_dim, k - 1 + T, dtype=cfg.act_dtype, device=device))
        if T and self.mode == "conventional":
            ckpt = pool.checkpoint
            state.add(f"layer{self.index}.snapshots",
                      torch.zeros(state.num_slots, T, *ckpt.shape[1:], dtype=ckpt.dtype, device=device))

    def _conv(self, phase, xbc, ctx):
        return ctx.ops.conv1d(phase, ctx, self.index, _rows(xbc, phase), _conv_weight(self.conv1d), self.conv1d.bias)

    def commit(self, ctx: StepContext) -> None:
        """Keeps each row's accepted prefix of the last verified window: cursor (ReplaySSM) or snapshot
        (conventional), and the conv history."""
        ctx.ops.ssm_commit(ctx, self.index, self.mode)
        ctx.ops.conv1d_commit(ctx, self.index, self.conv1d.kernel_size[0])


def _rows(t: torch.Tensor, phase: str) -> torch.Tensor:
    """t as the ops take it: in decode on CUDA, a slice of a projection or conv1d output whose rows are 16-byte
    aligned goes to the kernels as it is (they read strided rows: no copy); otherwise a contiguous copy."""
    if phase == "decode" and t.is_cuda and t.stride(-1) == 1 and t.data_ptr() % 16 == 0 \
            and all(s * t.element_size() % 16 == 0 for s in t.stride()[:-1]):
        return t
    return t.contiguous()


def _conv_weight(conv: nn.Conv1d) -> torch.Tensor:
    return conv.weight[:, 0, :]  # [C, 1, k] depthwise -> [C, k], a view


def _gated_norm(norm, y, gate, group_size, norm_before_gate, ctx: StepContext, dtype):
    """The mixer's gated RMSNorm, as the layer uses it (cast to `dtype` after). The fused kernel where the
    runtime's in-place ops run on CUDA tensors it takes and the layer casts to y's dtype (the kernel returns the
    module's result in y's dtype); the transformers module otherwise, so that the export traces the module's
    ops and the reference path stays the module."""
    if (ctx.ops is IN_PLACE and dtype == y.dtype
            and norm_ops.kernel_applies(y, gate, norm.weight, group_size)):
        return norm_ops.gated_rmsnorm(y, gate, norm.weight, norm.variance_epsilon, group_size, norm_before_gate)
    return norm(y, gate)


class Mamba2Mixer(SsmMixer):
    """Nemotron-H's Mamba-2 mixer: in_proj -> (gate, xBC, dt); causal conv1d over xBC; SSM over (x, B, C, dt)
    with the D skip; gated group RMSNorm; out_proj."""

    def __init__(self, hf, index: int, mode: str):
        super().__init__()
        self.index, self.mode = index, mode
        self.in_proj, self.conv1d, self.norm, self.out_proj = hf.in_proj, hf.conv1d, hf.norm, hf.out_proj
        self.shape = Mamba2LayerShape(hf.num_heads, hf.head_dim, hf.ssm_state_size, hf.n_groups)
        self.pool_cls = Mamba2StatePool
        self.inner = hf.num_heads * hf.head_dim
        self.conv_dim = hf.conv_dim
        # Per-head parameters as the ops take them (fp32, contiguous); buffers follow .to(device).
        self.register_buffer("A", -torch.exp(hf.A_log.detach().float()), persistent=False)
        self.register_buffer("D", hf.D.detach().float().contiguous(), persistent=False)
        self.register_buffer("dt_bias", hf.dt_bias.detach().float().contiguous(), persistent=False)


    def _split(self, xbc, phase):
        G, N = self.shape.ngroups, self.shape.dstate
        x, B, C = torch.split(xbc, [self.inner, G * N, G * N], dim=-1)
        return (_rows(x.unflatten(-1, (self.shape.nheads, self.shape.head_dim)), phase),
                _rows(B.unflatten(-1, (G, N)), phase), _rows(C.unflatten(-1, (G, N)), phase))

    def _out(self, y, gate, ctx: StepContext, dtype):
        y = _gated_norm(self.norm, y.reshape(*gate.shape[:-1], self.inner), gate, self.norm.group_size, False, ctx,
                        dtype)
        return self.out_proj(y.to(dtype))

    def _step(self, phase, h, ctx: StepContext):
        gate, xbc, dt = torch.split(self.in_proj(h), [self.inner, self.conv_dim, self.shape.nheads], dim=-1)
        x, B, C = self._split(self._conv(phase, xbc, ctx), phase)
        y = ctx.ops.mamba2(phase, ctx, self.index, self.mode, x, _rows(dt, phase), B, C, self.A, self.D, self.dt_bias)
        return self._out(y, gate, ctx, h.dtype)

    def prefill(self, h, ctx: StepContext):
        return self._step("prefill", h, ctx)

    def decode(self, h, ctx: StepContext):
        return self._step("decode", h, ctx)

    def verify(self, h, ctx: StepContext):
        return self._step("verify", h, ctx)


class GdnMixer(SsmMixer):
    """Qwen3.5's Gated DeltaNet: in_proj_qkv -> causal conv1d -> (q, k, v); z, a, b projections; the gated
    delta rule with in-op gating (g = -exp(A_log) softplus(a + dt_bias), beta = sigmoid(b)) and q/k L2
    normalisation; gated RMSNorm per value head; out_proj."""

    def __init__(self, hf, index: int, mode: str):
        super().__init__()
        self.index, self.mode = index, mode
        for name in ("in_proj_qkv", "in_proj_z", "in_proj_a", "in_proj_b", "conv1d", "norm", "out_proj"):
            setattr(self, name, getattr(hf, name))
        self.shape = GdnLayerShape(hf.num_k_heads, hf.num_v_heads, hf.head_k_dim, hf.head_v_dim)
        self.pool_cls = GdnStatePool
        self.key_dim, self.value_dim, self.conv_dim = hf.key_dim, hf.value_dim, hf.conv_dim
        self.register_buffer("A_log", hf.A_log.detach().float().contiguous(), persistent=False)
        self.register_buffer("dt_bias", hf.dt_bias.detach().float().contiguous(), persistent=False)


    def _inputs(self, h):
        lead = h.shape[:-1]
        z = self.in_proj_z(h)
        gates = dict(a=self.in_proj_a(h).contiguous(), b=self.in_proj_b(h).contiguous(), A_log=self.A_log,
                     dt_bias=self.dt_bias, use_qk_l2norm=True)
        return lead, self.in_proj_qkv(h), z, gates

    def _split(self, qkv, phase):
        S = self.shape
        q, k, v = torch.split(qkv, [self.key_dim, self.key_dim, self.value_dim], dim=-1)
        return (_rows(q.unflatten(-1, (S.num_k_heads, S.head_k_dim)), phase),
                _rows(k.unflatten(-1, (S.num_k_heads, S.head_k_dim)), phase),
                _rows(v.unflatten(-1, (S.num_v_heads, S.head_v_dim)), phase))

    def _out(self, y, z, lead, ctx: StepContext, dtype):
        V = self.shape.head_v_dim
        y = _gated_norm(self.norm, y.reshape(-1, V), z.reshape(-1, V), V, True, ctx, dtype)
        return self.out_proj(y.reshape(*lead, self.value_dim).to(dtype))

    def _step(self, phase, h, ctx: StepContext):
        lead, qkv, z, gates = self._inputs(h)
        q, k, v = self._split(self._conv(phase, qkv, ctx), phase)
        y = ctx.ops.gdn(phase, ctx, self.index, self.mode, q, k, v, gates)
        return self._out(y, z, lead, ctx, h.dtype)

    def prefill(self, h, ctx: StepContext):
        return self._step("prefill", h, ctx)

    def decode(self, h, ctx: StepContext):
        return self._step("decode", h, ctx)

    def verify(self, h, ctx: StepContext):
        return self._step("verify", h, ctx)


class Attention(nn.Module):
    """Grouped-query attention over a slot-indexed KV cache. Nemotron-H: plain q/k/v/o projections, no
    positional encoding. Qwen3.5: q_proj also yields an output gate (sigmoid), q/k RMSNorm per head, partial
    rotary embedding."""

    def __init__(self, hf, index: int, apply_rope=None):
        super().__init__()
        self.index = index
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = hf.q_proj, hf.k_proj, hf.v_proj, hf.o_proj
        self.q_norm, self.k_norm = getattr(hf, "q_norm", None), getattr(hf, "k_norm", None)
        self.head_dim, self.scaling = hf.head_dim, hf.scaling
        self.kv_heads = hf.k_proj.out_features // hf.head_dim
        self.heads = hf.o_proj.in_features // hf.head_dim
        self.gated = hf.q_proj.out_features == 2 * self.heads * self.head_dim
        self.apply_rope = apply_rope

    def allocate(self, state: StateSet, dtype, device) -> None:
        shape = (state.num_slots + 1, state.max_seq_len, self.kv_heads, self.head_dim)
        state.add(f"layer{self.index}.k_cache", torch.zeros(shape, dtype=dtype, device=device))
        state.add(f"layer{self.index}.v_cache", torch.zeros(shape, dtype=dtype, device=device))

    def _qkv(self, h, rope):
        """q [b, S, heads, hd], k, v [b, S, kv_heads, hd], gate [b, S, heads*hd] or None."""
        lead = h.shape[:-1]
        q = self.q_proj(h)
        gate = None
        if self.gated:
            q, gate = torch.chunk(q.view(*lead, self.heads, 2 * self.head_dim), 2, dim=-1)
            gate = gate.reshape(*lead, -1)
        q = q.reshape(*lead, self.heads, self.head_dim)
        k = self.k_proj(h).view(*lead, self.kv_heads, self.head_dim)
        v = self.v_proj(h).view(*lead, self.kv_heads, self.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if rope is not None:
            cos, sin = rope  # [b, S, rotary_dim]; the rotation works on [b, heads, S, hd] (unsqueeze_dim=1)
            qr, kr = self.apply_rope(q.transpose(1, 2), k.transpose(1, 2), cos, sin)
            q, k = qr.transpose(1, 2), kr.transpose(1, 2)
        return q, k, v, gate

    def _attend(self, q, keys, values, mask):
        """q [b, S, heads, hd]; keys, values [b, T, kv_heads, hd]; mask [b, S, T] bool (True: attend). Grouped
        queries attend per key head without copying the keys: the rep query heads of key head j (heads
        j*rep .. j*rep+rep-1, transformers' repeat_kv order) form one [rep*S, hd] block against [T, hd]."""
        b, S = q.shape[:2]
        rep = self.heads // self.kv_heads
        T = keys.shape[1]
        q = q.transpose(1, 2).reshape(b, self.kv_heads, rep * S, self.head_dim)
        scores = torch.matmul(q, keys.permute(0, 2, 3, 1)) * self.scaling  # [b, kv_heads, rep*S, T]
        mask = mask[:, None, None].expand(b, 1, rep, S, T).reshape(b, 1, rep * S, T)
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        out = torch.matmul(probs, values.transpose(1, 2))  # [b, kv_heads, rep*S, hd]
        return out.reshape(b, self.heads, S, self.head_dim).transpose(1, 2)  # [b, S, heads, hd]

    def _write(self, ctx, index, k, v):
        """k, v into the caches at `index` (rows, positions); returns the caches."""
        names = f"layer{self.index}.k_cache", f"layer{self.index}.v_cache"
        ctx.ops.write_kv(ctx, names[0], index, k)
        ctx.ops.write_kv(ctx, names[1], index, v)
        return ctx.state[names[0]], ctx.state[names[1]]

    def _out(self, o, gate):
        o = o.reshape(*o.shape[:-2], self.heads * self.head_dim)
        if gate is not None:
            o = o * torch.sigmoid(gate)
        return self.o_proj(o)

    def prefill(self, h, ctx: StepContext):
        b, S = h.shape[:2]
        q, k, v, gate = self._qkv(h, ctx.rope)
        at = (ctx.kv_rows[:, None], torch.arange(S, device=h.device)[None])
        self._write(ctx, at, k, v)
        causal = torch.ones(S, S, dtype=torch.bool, device=h.device).tril()
        return self._out(self._attend(q, k, v, causal.expand(b, S, S)), gate)

    def decode(self, h, ctx: StepContext):
        q, k, v, gate = self._qkv(h[:, None], ctx.rope)
        kc, vc = self._write(ctx, (ctx.kv_rows, ctx.positions), k[:, 0], v[:, 0])
        T = kc.shape[1]
        mask = torch.arange(T, device=h.device)[None, None, :] <= ctx.positions[:, None, None]
        return self._out(self._attend(q, kc[ctx.kv_rows], vc[ctx.kv_rows], mask), gate)[:, 0]


    def verify(self, h, ctx: StepContext):
        """T tokens per row at positions p..p+T-1 (p = ctx.positions): their K/V written there, each attending
        to the row's cache up to itself. Entries of rejected tokens are overwritten by later steps."""
        T = h.shape[1]
        q, k, v, gate = self._qkv(h, ctx.rope)
        at = ctx.positions[:, None] + torch.arange(T, device=h.device)[None]  # [b, T]
        kc, vc = self._write(ctx, (ctx.kv_rows[:, None], at), k, v)
        mask = torch.arange(kc.shape[1], device=h.device)[None, None, :] <= at[:, :, None]
        return self._out(self._attend(q, kc[ctx.kv_rows], vc[ctx.kv_rows], mask), gate)

    def commit(self, ctx: StepContext) -> None:
        """Nothing to keep: the accepted tokens' K/V are in place, the rejected ones are overwritten later."""


class FeedForward(nn.Module):
    """An MLP or MoE block of the loaded model, called as it is (a pure function of its input). MoE experts are
    evaluated densely (DenseExperts): exact, free of host synchronisation and of data-dependent shapes, so a
    step can be captured in a CUDA graph and exported; it costs num_experts / top_k times the routed FLOPs."""

    def __init__(self, hf):
        super().__init__()
        experts = getattr(hf, "experts", None)
        if experts is not None and not isinstance(experts, DenseExperts):
            hf.experts = DenseExperts(experts)
        self.block = hf

    def prefill(self, h, ctx):
        return self.block(h)

    def decode(self, h, ctx):
        return self.block(h[:, None])[:, 0]

    verify = prefill

    def commit(self, ctx) -> None:
        """Stateless."""


class DenseExperts(nn.Module):
    """Every expert on every token, weighted by the router's top-k weights (zero elsewhere). Holds the loaded
    experts' stacked weights: Nemotron-H's (up_proj [E, I, D'], down_proj [E, D', I], non-gated activation) or
    Qwen's (gate_up_proj [E, 2I, D], down_proj [E, D, I], SiLU-gated)."""

    def __init__(self, experts):
        super().__init__()
        self.inner = experts
        self.gated = hasattr(experts, "gate_up_proj")

    def forward(self, x, top_k_index, top_k_weights):
        e = self.inner
        num = e.down_proj.shape[0]
        weights = torch.zeros(x.shape[0], num, dtype=top_k_weights.dtype, device=x.device)
        weights.scatter_(1, top_k_index, top_k_weights)
        up = e.gate_up_proj if self.gated else e.up_proj
        hidden = torch.einsum("td,eid->tei", x, up)
        if self.gated:
            g, u = hidden.chunk(2, dim=-1)
            hidden = e.act_fn(g) * u
        else:
            hidden = e.act_fn(hidden)
        out = torch.einsum("tei,edi->ted", hidden, e.down_proj)
        return (out * weights[..., None].to(out.dtype)).sum(1)
