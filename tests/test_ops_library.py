"""The plugins' custom ops (trtllm_replayssm/ops/library.py): the same results as the ops they run, bit for bit
(outputs and every written buffer, over poisoned pools and a padding row), the inputs left as they were, and one
graph node per call under torch.export."""

import pytest
import torch

from trtllm_replayssm import trt_plugins
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


def _replay_node(cfg, pool, args, mode="replay"):
    """A Mamba-2 decode plugin node's fields and inputs over `pool` (conventional: the checkpoint only)."""
    fields = trt_plugins.mamba2_decode_fields(SHAPE, cfg, mode=mode, has_z=False)
    state = {"state": pool.checkpoint}
    if mode == "replay":
        state.update({n: pool.buffers[n] for n in ("ring_x", "ring_B", "ring_dt", "cursor")})
    return fields, dict(args, slot_idx=SLOTS, **state)


@pytest.mark.parametrize("cfg", [ReplayConfig(4, "fp32", "fp32"), ReplayConfig(4, "bf16", "bf16")],
                         ids=["fp32", "bf16"])
def test_replay_decode_op_equals_the_op_and_leaves_its_inputs(cfg):
    ref, mine = _pool(cfg), _pool(cfg)
    for step in range(5):  # crosses a flush (cursors start at 0..3 with L=4)
        args = _inputs(cfg, seed=step)
        before = {n: t.clone() for n, t in mine.buffers.items()}
        fields, inputs = _replay_node(cfg, mine, args)
        got, *state = library.plugin_op(trt_plugins.MAMBA2_DECODE, fields, inputs)
        x, dt, B, C, A = (args.pop(k) for k in ("x", "dt", "B", "C", "A"))
        want = mamba2_ops.replay_decode(ref, x, dt, B, C, A, slot_idx=SLOTS, **args)
        live = SLOTS >= 0
        assert torch.equal(got[live], want[live])
        for name, t in mine.buffers.items():
            assert torch.equal(t, before[name]), f"{name}: the functional op wrote its input"
        for name, t in zip(("checkpoint", "ring_x", "ring_B", "ring_dt", "cursor"), state):
            assert torch.equal(t, ref.buffers[name]), (step, name)
            mine.buffers[name] = t


def test_conventional_and_conv_ops_equal_the_ops():
    cfg = ReplayConfig(4, "fp32", "fp32")
    ref, mine = _pool(cfg), _pool(cfg)
    args = _inputs(cfg)
    fields, inputs = _replay_node(cfg, mine, args, mode="conventional")
    got, new_state = library.plugin_op(trt_plugins.MAMBA2_DECODE, fields, inputs)
    x, dt, B, C, A = (args.pop(k) for k in ("x", "dt", "B", "C", "A"))
    want = mamba2_ops.conventional_decode(ref.checkpoint, x, dt, B, C, A, slot_idx=SLOTS, **args)
    assert torch.equal(got[SLOTS >= 0], want[SLOTS >= 0]) and torch.equal(new_state, ref.checkpoint)
    assert not torch.equal(new_state, mine.checkpoint)  # the step wrote state (to the new tensor only)
    g = torch.Generator().manual_seed(7)
    state = torch.randn(5, 6, 3, generator=g)
    xc, w, bias = torch.randn(3, 6, generator=g), torch.randn(6, 4, generator=g), torch.randn(6)
    fields = trt_plugins.conv1d_fields(6, 4, state_dtype="fp32", act_dtype="fp32")
    got, new_state = library.plugin_op(trt_plugins.CONV1D, fields,
                                       dict(x=xc, weight=w, bias=bias, slot_idx=SLOTS, state=state))
    want = conv1d_update(state, xc, w, bias, True, slot_idx=SLOTS)
    assert torch.equal(got[SLOTS >= 0], want[SLOTS >= 0]) and torch.equal(new_state, state)


def test_missing_input_is_named():
    cfg = ReplayConfig(4, "fp32", "fp32")
    fields, inputs = _replay_node(cfg, _pool(cfg), _inputs(cfg))
    del inputs["ring_B"]
    with pytest.raises(ValueError, match="ring_B"):
        library.plugin_op(trt_plugins.MAMBA2_DECODE, fields, inputs)


class _Step(torch.nn.Module):
    def forward(self, x, dt, B, C, A, D, dt_bias, slot_idx, *state):
        cfg = ReplayConfig(4, "fp32", "fp32")
        fields = trt_plugins.mamba2_decode_fields(SHAPE, cfg, has_z=False)
        names = ("state", "ring_x", "ring_B", "ring_dt", "cursor")
        inputs = dict(x=x, dt=dt, B=B, C=C, A=A, D=D, dt_bias=dt_bias, slot_idx=slot_idx, **dict(zip(names, state)))
        return tuple(library.plugin_op(trt_plugins.MAMBA2_DECODE, fields, inputs))


def test_export_records_one_node_per_plugin_call():
    """Under torch.export the call is one graph node (never the op's checks or loops), and the exported program
    computes what the eager op does."""
    cfg = ReplayConfig(4, "fp32", "fp32")
    pool, ref = _pool(cfg), _pool(cfg)
    a = _inputs(cfg)
    inputs = tuple(a[k] for k in ("x", "dt", "B", "C", "A", "D", "dt_bias")) + (SLOTS,) + tuple(pool.buffers.values())
    ep = torch.export.export(_Step(), inputs, strict=False)
    targets = [str(n.target) for n in ep.graph.nodes if n.op == "call_function" and "getitem" not in str(n.target)]
    assert targets == [f"rssm.{trt_plugins.MAMBA2_DECODE}_6.default"], targets
    got, *state = ep.module()(*inputs)
    want = mamba2_ops.replay_decode(ref, *inputs[:5], D=a["D"], dt_bias=a["dt_bias"], slot_idx=SLOTS)
    live = SLOTS >= 0
    assert torch.equal(got[live], want[live])
    for name, t in zip(ref.buffers, state):
        assert torch.equal(t, ref.buffers[name]), name
