"""State pool: layout, bytes per slot (checked by hand), validation, reset after prefill."""

import pytest
import torch

from trtllm_replayssm.config import DEFAULT_LATENCY_ROUTE_BYTES, GdnLayerShape, Mamba2LayerShape, ReplayConfig
from trtllm_replayssm.pool import GdnStatePool, Mamba2StatePool

SUPER = Mamba2LayerShape(nheads=128, head_dim=64, dstate=128, ngroups=8)


def test_bytes_per_slot_super_shape_by_hand():
    pool = Mamba2StatePool(SUPER, 1, ReplayConfig(buffer_len=16, state_dtype="fp32", act_dtype="bf16"))
    b = pool.bytes_per_slot()
    assert b["checkpoint"] == 128 * 64 * 128 * 4 == 4 * 2**20  # the brief's 4 MiB
    assert b["ring_x"] == 128 * 16 * 64 * 2
    assert b["ring_B"] == 8 * 16 * 128 * 2
    assert b["ring_dt"] == 128 * 16 * 4
    assert b["cursor"] == 128 * 8 * 2 * 4
    assert b["total"] == sum(v for k, v in b.items() if k != "total")


def test_reset_slot_installs_prefill_state_and_empties_ring():
    shape = Mamba2LayerShape(4, 64, 64, 2)
    pool = Mamba2StatePool(shape, 3, ReplayConfig(buffer_len=4))
    pool.set_cursor(1, 3)
    st = torch.randn(4, 64, 64)
    pool.reset_slot(1, st)
    assert torch.equal(pool.checkpoint[1], st)
    assert pool.history().tolist() == [0, 0, 0]
    with pytest.raises(ValueError, match="shape"):
        pool.reset_slot(1, torch.randn(4, 64, 32))
    with pytest.raises(IndexError, match="slot=3"):
        pool.reset_slot(3)


def test_validate_catches_corruption():
    shape = Mamba2LayerShape(4, 64, 64, 2)
    pool = Mamba2StatePool(shape, 2, ReplayConfig(buffer_len=4))
    pool.validate()
    pool.set_cursor(0, 4)
    with pytest.raises(ValueError, match="cursor history"):
        pool.validate()
    pool.set_cursor(0, 0)
    pool.cursor[0, 3, 2, 0] = 1
    with pytest.raises(ValueError, match="replicas"):
        pool.validate()
    pool.set_cursor(0, 0)
    pool.buffers["ring_x"] = pool.ring_x.float()
    with pytest.raises(ValueError, match="ring_x.*dtype"):
        pool.validate()


@pytest.mark.parametrize("kwargs, match", [
    (dict(buffer_len=0), "buffer_len=0"),
    (dict(buffer_len=65), "buffer_len=65"),
    (dict(state_dtype=torch.float64), "state_dtype=float64"),
    (dict(act_dtype=torch.int8), "act_dtype=int8"),
    (dict(latency_route_bytes=-1), "latency_route_bytes=-1 must be None or an int >= 0"),
    (dict(latency_route_bytes=1 << 20, state_dtype=torch.bfloat16), "latency_route_bytes=1048576 needs state_dtype=fp32"),
    (dict(latency_route_bytes=1 << 20, read_format="fp8"), "read_format='none'"),
])
def test_rejects_bad_config(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Mamba2StatePool(Mamba2LayerShape(4, 64, 64, 2), 2, ReplayConfig(**kwargs))


@pytest.mark.parametrize("shape, match", [
    (Mamba2LayerShape(4, 96, 64, 2), "head_dim=96"),
    (Mamba2LayerShape(4, 64, 32, 2), "dstate=32"),
    (Mamba2LayerShape(6, 64, 64, 4), "ngroups=4"),
])
def test_rejects_unsupported_shape(shape, match):
    with pytest.raises(ValueError, match=match):
        Mamba2StatePool(shape, 2)


def test_latency_route_limit_by_default_and_where_the_kernels_cannot_take_it():
    """The latency route's limit: the default on an fp32 checkpoint without copy whose head fits the kernels'
    replica scheme (Mamba-2 head_dim * dstate <= 8192; GDN scalar decay, head_v_dim * head_k_dim <= 32768), off
    elsewhere by default, an explicit limit honoured or refused naming what is missing."""
    assert Mamba2StatePool(SUPER, 1).latency_route_bytes == DEFAULT_LATENCY_ROUTE_BYTES
    assert Mamba2StatePool(SUPER, 1, ReplayConfig(latency_route_bytes=0)).latency_route_bytes == 0
    assert Mamba2StatePool(SUPER, 1, ReplayConfig(latency_route_bytes=4096)).latency_route_bytes == 4096
    assert Mamba2StatePool(SUPER, 1, ReplayConfig(state_dtype="bf16")).latency_route_bytes == 0
    assert Mamba2StatePool(SUPER, 1, ReplayConfig(read_format="nvfp4")).latency_route_bytes == 0
    h56b = Mamba2LayerShape(nheads=8, head_dim=64, dstate=256, ngroups=8)  # 16 tiles: a replica per block of 4
    assert Mamba2StatePool(h56b, 1).latency_route_bytes == DEFAULT_LATENCY_ROUTE_BYTES
    odd = Mamba2LayerShape(nheads=8, head_dim=80, dstate=128, ngroups=8)  # 10 tiles: neither scheme
    assert Mamba2StatePool(odd, 1).latency_route_bytes == 0
    with pytest.raises(ValueError, match=r"latency_route_bytes=4096 is not supported .* \(got 80 \* 128\)"):
        Mamba2StatePool(odd, 1, ReplayConfig(latency_route_bytes=4096))
    pool = Mamba2StatePool(SUPER, 1)
    per_row = 128 * 64 * 128 * 4
    assert pool.flushes_every_row(DEFAULT_LATENCY_ROUTE_BYTES // per_row)
    assert not pool.flushes_every_row(DEFAULT_LATENCY_ROUTE_BYTES // per_row + 1)
    qwen = GdnLayerShape(16, 64, 128, 128)
    assert GdnStatePool(qwen, 1).latency_route_bytes == DEFAULT_LATENCY_ROUTE_BYTES
    assert GdnStatePool(qwen, 1).flushes_every_row(DEFAULT_LATENCY_ROUTE_BYTES // (64 * 128 * 128 * 4))
    assert GdnStatePool(GdnLayerShape(2, 4, 256, 256), 1).latency_route_bytes == 0  # 64 tiles per head
    kda = GdnLayerShape(2, 4, 128, 128, per_channel_decay=True)
    assert GdnStatePool(kda, 1).latency_route_bytes == 0
    with pytest.raises(ValueError, match=r"latency_route_bytes=1024 is not supported .* scalar decay"):
        GdnStatePool(kda, 1, ReplayConfig(latency_route_bytes=1024))


def test_clone_is_independent_and_equal():
    from trtllm_replayssm.config import GdnLayerShape, Mamba2LayerShape, ReplayConfig
    from trtllm_replayssm.pool import GdnStatePool, Mamba2StatePool

    for pool in (Mamba2StatePool(Mamba2LayerShape(4, 64, 64, 2), 3, ReplayConfig(4, "fp32", "bf16")),
                 GdnStatePool(GdnLayerShape(2, 4, 64, 64), 3, ReplayConfig(4, "fp32", "bf16"))):
        for t in pool.buffers.values():
            if t.is_floating_point():
                t.copy_(torch.randn(t.shape))
        other = pool.clone()
        assert type(other) is type(pool) and other.cfg == pool.cfg
        assert all(torch.equal(other.buffers[n], t) and other.buffers[n].data_ptr() != t.data_ptr()
                   for n, t in pool.buffers.items())
        other.checkpoint.add_(1.0)
        assert not torch.equal(other.checkpoint, pool.checkpoint)
