"""The custom-op form of the decode ops (trtllm_replayssm/ops/library.py): the same results as the ops they
wrap, bit for bit (outputs and every written buffer, over poisoned pools and a padding row), and one graph node
per call under torch.export with the written buffers recorded as mutated."""

import pytest
import torch

from trtllm_replayssm.config import Mamba2LayerShape, ReplayConfig
from trtllm_replayssm.ops import library
from trtllm_replayssm.ops import mamba2 as mamba2_ops
from trtllm_replayssm.ops.conv1d import conv1d_update
from trtllm_replayssm.pool import Mamba2StatePool

SHAPE = Mamba2LayerShape(2, 64, 64, 1)
SLOTS = torch.tensor([3, -1, 0], dtype=torch.int32)


def _pool(cfg, seed=0):
    g = torch.Generator().manual_seed(seed)
    pool = Mamba2StatePool(SHAPE, 5, cfg)
    for name, t in pool.buffers.items():
        if t.is_floating_point():
            t.copy_(torch.randn(t.shape, generator=g).to(t.dtype))
    pool.set_cursor(list(range(5)), torch.tensor([0, 1, 2, 3, 1], dtype=torch.int32))
    return pool


def _inputs(cfg, seed=1):
    g = torch.Generator().manual_seed(seed)
    b, H, P, G, N = len(SLOTS), SHAPE.nheads, SHAPE.head_dim, SHAPE.ngroups, SHAPE.dstate
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    return dict(x=r(b, H, P).to(cfg.act_dtype), dt=r(b, H).to(cfg.act_dtype), B=r(b, G, N).to(cfg.act_dtype),
                C=r(b, G, N).to(cfg.act_dtype), A=-r(H).abs(), D=r(H), dt_bias=r(H))


@pytest.mark.parametrize("cfg", [ReplayConfig(4, "fp32", "fp32"), ReplayConfig(4, "bf16", "bf16")],
                         ids=["fp32", "bf16"])
def test_replay_decode_op_equals_the_op(cfg):
    ref, mine = _pool(cfg), _pool(cfg)
    for step in range(5):  # crosses a flush (cursors start at 0..3 with L=4)
        args = _inputs(cfg, seed=step)
        x, dt, B, C, A = (args.pop(k) for k in ("x", "dt", "B", "C", "A"))
        want = mamba2_ops.replay_decode(ref, x, dt, B, C, A, slot_idx=SLOTS, **args)
        got = library.mamba2_replay_decode(mine, x, dt, B, C, A, slot_idx=SLOTS, **args)
        live = SLOTS >= 0
        assert torch.equal(got[live], want[live])
        for name in ref.buffers:
            assert torch.equal(mine.buffers[name], ref.buffers[name]), (step, name)


def test_conventional_and_conv_ops_equal_the_ops():
    cfg = ReplayConfig(4, "fp32", "fp32")
    ref, mine = _pool(cfg).checkpoint, _pool(cfg).checkpoint
    args = _inputs(cfg)
    x, dt, B, C, A = (args.pop(k) for k in ("x", "dt", "B", "C", "A"))
    want = mamba2_ops.conventional_decode(ref, x, dt, B, C, A, slot_idx=SLOTS, **args)
    got = library.mamba2_conventional_decode(mine, x, dt, B, C, A, slot_idx=SLOTS, **args)
    assert torch.equal(got[SLOTS >= 0], want[SLOTS >= 0]) and torch.equal(mine, ref)
    g = torch.Generator().manual_seed(7)
    state = torch.randn(5, 6, 3, generator=g)
    state2, xc, w, bias = state.clone(), torch.randn(3, 6, generator=g), torch.randn(6, 4, generator=g), torch.randn(6)
    want = conv1d_update(state, xc, w, bias, True, slot_idx=SLOTS)
    got = library.conv1d_update(state2, xc, w, bias, True, slot_idx=SLOTS)
    assert torch.equal(got[SLOTS >= 0], want[SLOTS >= 0]) and torch.equal(state2, state)


class _Step(torch.nn.Module):
    def __init__(self, pool):
        super().__init__()
        self.pool = pool
        for name, t in pool.buffers.items():
            self.register_buffer(name, t)

    def forward(self, x, dt, B, C, A, slot_idx):
        self.pool.buffers = {n: getattr(self, n) for n in self.pool.buffers}
        return library.mamba2_replay_decode(self.pool, x, dt, B, C, A, slot_idx=slot_idx)


def test_export_records_one_node_and_the_mutated_buffers():
    """The pool's buffers become state inputs with written outputs once functionalized (the ONNX exporter's
    step), and the exported program computes what the eager op does."""
    cfg = ReplayConfig(4, "fp32", "fp32")
    pool, ref = _pool(cfg), _pool(cfg)
    args = _inputs(cfg)
    inputs = (args["x"], args["dt"], args["B"], args["C"], args["A"], SLOTS)
    ep = torch.export.export(_Step(_pool(cfg)), inputs, strict=False)
    targets = [str(n.target) for n in ep.graph.nodes if n.op == "call_function" and "getitem" not in str(n.target)]
    # the op, then the write-back of its new state (one copy per buffer)
    assert targets == ["rssm.mamba2_replay_decode.default"] + ["aten.copy_.default"] * len(pool.buffers), targets
    mutated = set(ep.run_decompositions({}).graph_signature.buffers_to_mutate.values())
    assert mutated == set(pool.buffers), mutated
    step = ep.module()
    for name, t in pool.buffers.items():
        getattr(step, name).copy_(t)
    got = step(*inputs)
    want = mamba2_ops.replay_decode(ref, *inputs[:5], slot_idx=SLOTS)
    live = SLOTS >= 0
    assert torch.equal(got[live], want[live])
    for name in ref.buffers:
        assert torch.equal(getattr(step, name), ref.buffers[name]), name
