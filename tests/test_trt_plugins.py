"""trtllm_replayssm.trt_plugins without TensorRT: a clear error when it is absent, and the calls it makes on a
recording stand-in of the `tensorrt` module (fields, creator lookup, input order, aliasing flag, network flag)."""

import sys
import types

import numpy as np
import pytest

from trtllm_replayssm import trt_plugins
from trtllm_replayssm.config import DEFAULT_LATENCY_ROUTE_BYTES, GdnLayerShape, Mamba2LayerShape, ReplayConfig


class FakeTrt(types.SimpleNamespace):
    """The parts of the tensorrt module trt_plugins uses, recording what it is asked."""

    def __init__(self, version="10.14.1", num_outputs=6):
        calls = []
        super().__init__(calls=calls, __version__=version)
        self.PluginFieldType = types.SimpleNamespace(INT32="INT32")
        self.TensorRTPhase = types.SimpleNamespace(BUILD="BUILD")
        self.PreviewFeature = types.SimpleNamespace(ALIASED_PLUGIN_IO_10_03="ALIASED")
        self.NetworkDefinitionCreationFlag = types.SimpleNamespace(STRONGLY_TYPED=5)
        self.PluginField = lambda name, data, kind: (name, int(np.asarray(data)[0]), str(np.asarray(data).dtype), kind)
        self.PluginFieldCollection = lambda fields: list(fields)

        class Creator:
            def create_plugin(self, name, fc, phase):
                calls.append(("create_plugin", name, fc, phase))
                return "plugin"

        class Layer:
            name = None

            def __init__(self):
                self.num_outputs = num_outputs

            def get_output(self, i):
                return f"out{i}"

        class Registry:
            def get_creator(self, name, version, namespace):
                calls.append(("get_creator", name, version, namespace))
                return Creator()

            def load_library(self, path):
                calls.append(("load_library", path))
                return "handle"

        class Network:
            def add_plugin_v3(self, inputs, shape_inputs, plugin):
                calls.append(("add_plugin_v3", list(inputs), list(shape_inputs), plugin))
                return Layer()

        self.registry, self.network = Registry(), Network()
        self.get_plugin_registry = lambda: self.registry


def test_missing_tensorrt_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorrt", None)  # `import tensorrt` raises ImportError
    monkeypatch.setitem(sys.modules, "tensorrt_rtx", None)
    with pytest.raises(ImportError, match="need the `tensorrt` Python package .* or TensorRT-RTX "
                                          r"\(`pip install tensorrt-rtx==1.7.1.116`\)"):
        trt_plugins.enable_aliased_io(object())


def test_add_mamba2_decode_passes_fields_and_inputs_in_the_plugin_order():
    trt = FakeTrt()
    shape = Mamba2LayerShape(128, 64, 128, 8)
    names = trt_plugins.mamba2_decode_inputs(trt_plugins.mamba2_decode_fields(shape, ReplayConfig(16)))
    inputs = {n: f"tensor_{n}" for n in reversed(names)}  # given in any order
    outs = trt_plugins.add_mamba2_decode(trt.network, inputs, shape, ReplayConfig(16, "fp32", "bf16"), trt=trt)
    assert outs == [f"out{i}" for i in range(6)]
    kinds = [c[0] for c in trt.calls]
    assert kinds == ["get_creator", "create_plugin", "add_plugin_v3"]
    assert trt.calls[0][1:] == ("ReplaySSMMamba2Decode", "1", "trtllm_replayssm")
    fields = {name: value for name, value, dtype, kind in trt.calls[1][2]}
    assert all(dtype == "int32" and kind == "INT32" for _, _, dtype, kind in trt.calls[1][2])
    assert fields == {"nheads": 128, "head_dim": 64, "dstate": 128, "ngroups": 8, "buffer_len": 16, "mode": 1,
                      "state_dtype": 0, "act_dtype": 2, "has_z": 1, "has_D": 1, "has_dt_bias": 1, "dt_softplus": 1,
                      "pad_slot_id": -1, "latency_route_kib": DEFAULT_LATENCY_ROUTE_BYTES // 1024}
    assert trt.calls[2][1] == [f"tensor_{n}" for n in names] and names[0] == "x" and names[-1] == "cursor"


def test_add_gdn_decode_conventional_and_input_errors():
    trt = FakeTrt()
    shape = GdnLayerShape(16, 64, 128, 128)
    fields = trt_plugins.gdn_decode_fields(shape, ReplayConfig(8), mode="conventional")
    names = trt_plugins.gdn_decode_inputs(fields)
    assert names == ["q", "k", "v", "g", "beta", "slot_idx", "state"]
    trt_plugins.add_gdn_decode(trt.network, {n: n for n in names}, shape, ReplayConfig(8), mode="conventional",
                               trt=trt)
    assert trt.calls[-1][1] == names
    with pytest.raises(ValueError, match=r"inputs missing \['state'\], unexpected \['ring_u'\]"):
        trt_plugins.add_gdn_decode(trt.network, {**{n: n for n in names[:-1]}, "ring_u": 1}, shape,
                                   ReplayConfig(8), mode="conventional", trt=trt)
    with pytest.raises(ValueError, match="mode='train' is not supported"):
        trt_plugins.gdn_decode_fields(shape, ReplayConfig(8), mode="train")
    with pytest.raises(ValueError, match="KDA"):
        trt_plugins.gdn_decode_fields(GdnLayerShape(16, 64, 128, 128, per_channel_decay=True), ReplayConfig(8))


def test_network_flags_and_aliasing():
    calls = []
    builder = types.SimpleNamespace(create_network=lambda flags: calls.append(flags) or "net")
    trt_plugins.create_network(builder, trt=FakeTrt("10.14.1"))
    trt_plugins.create_network(builder, trt=FakeTrt("11.1.0"))
    assert calls == [1 << 5, 0]  # TensorRT 10: the strongly-typed flag; 11: strongly typed always
    cfg_calls = []
    config = types.SimpleNamespace(set_preview_feature=lambda f, on: cfg_calls.append((f, on)))
    trt_plugins.enable_aliased_io(config, trt=FakeTrt())
    assert cfg_calls == [("ALIASED", True)]


def _created(trt):
    """(plugin name, fields by name, inputs) of the last plugin added through the fake module."""
    get_creator = [c for c in trt.calls if c[0] == "get_creator"][-1]
    create = [c for c in trt.calls if c[0] == "create_plugin"][-1]
    add = [c for c in trt.calls if c[0] == "add_plugin_v3"][-1]
    assert all(dtype == "int32" and kind == "INT32" for _, _, dtype, kind in create[2])
    assert get_creator[2:] == ("1", "trtllm_replayssm") and create[3] == "BUILD"
    return get_creator[1], {name: value for name, value, _, _ in create[2]}, add[1]


def test_add_mamba2_verify_replay_and_snapshot():
    trt, shape, cfg = FakeTrt(), Mamba2LayerShape(128, 64, 128, 8), ReplayConfig(16, "fp32", "bf16")
    names = trt_plugins.mamba2_verify_inputs(trt_plugins.mamba2_verify_fields(shape, cfg, 4))
    trt_plugins.add_mamba2_verify(trt.network, {n: f"t_{n}" for n in reversed(names)}, shape, cfg, 4, trt=trt)
    name, fields, inputs = _created(trt)
    assert name == "ReplaySSMMamba2Verify" and inputs == [f"t_{n}" for n in names]
    assert fields == {"nheads": 128, "head_dim": 64, "dstate": 128, "ngroups": 8, "window": 4, "buffer_len": 16,
                      "mode": 1, "state_dtype": 0, "act_dtype": 2, "has_z": 1, "has_D": 1, "has_dt_bias": 1,
                      "dt_softplus": 1, "pad_slot_id": -1}
    assert names[-5:] == ["state", "ring_x", "ring_B", "ring_dt", "cursor"]
    snap = trt_plugins.mamba2_verify_fields(shape, cfg, 4, mode="snapshot", has_z=False, has_D=False)
    assert snap["mode"] == 0 and snap["has_z"] == 0
    assert trt_plugins.mamba2_verify_inputs(snap) == ["x", "dt", "B", "C", "A", "dt_bias", "slot_idx", "state",
                                                      "snapshots"]
    with pytest.raises(ValueError, match="mode='conventional' is not supported"):
        trt_plugins.mamba2_verify_fields(shape, cfg, 4, mode="conventional")


def test_add_gdn_verify_and_the_commits():
    trt, shape, cfg = FakeTrt(num_outputs=1), GdnLayerShape(16, 64, 128, 128), ReplayConfig(12, "fp32", "bf16")
    fields = trt_plugins.gdn_verify_fields(shape, cfg, 3, mode="snapshot")
    assert fields["window"] == 3 and fields["mode"] == 0
    assert trt_plugins.gdn_verify_inputs(fields) == ["q", "k", "v", "g", "beta", "slot_idx", "state", "snapshots"]
    assert trt_plugins.gdn_verify_inputs(dict(fields, mode=1))[-4:] == ["ring_u", "ring_k", "ring_g", "cursor"]
    # The ReplaySSM commit: the cursor has a row per value head.
    outs = trt_plugins.add_spec_commit(trt.network, {"accepted": "a", "slot_idx": "s", "cursor": "c"}, shape, cfg, 3,
                                       trt=trt)
    name, fields, inputs = _created(trt)
    assert outs == ["out0"] and name == "ReplaySSMSpecCommit" and inputs == ["a", "s", "c"]
    assert fields == {"nheads": 64, "window": 3, "buffer_len": 12, "pad_slot_id": -1}
    assert trt_plugins.spec_commit_fields(Mamba2LayerShape(24, 64, 128, 1), cfg, 3)["nheads"] == 24
    trt_plugins.add_snapshot_commit(trt.network, {"accepted": "a", "slot_idx": "s", "snapshots": "p", "state": "x"},
                                    ReplayConfig(12, "bf16", "bf16"), 3, trt=trt)
    name, fields, inputs = _created(trt)
    assert name == "ReplaySSMSnapshotCommit" and inputs == ["a", "s", "p", "x"]
    assert fields == {"window": 3, "state_dtype": 2, "pad_slot_id": -1}
    with pytest.raises(ValueError, match=r"inputs missing \['accepted'\]"):
        trt_plugins.add_spec_commit(trt.network, {"slot_idx": "s", "cursor": "c"}, shape, cfg, 3, trt=trt)


def test_add_conv1d_modes():
    trt = FakeTrt(num_outputs=2)
    base = dict(has_bias=1, silu=1, pad_slot_id=-1, kernel_size=4, channels=96)
    trt_plugins.add_conv1d(trt.network, {"x": 1, "weight": 2, "bias": 3, "slot_idx": 4, "state": 5}, 96, trt=trt)
    name, fields, inputs = _created(trt)
    assert name == "ReplaySSMConv1d" and inputs == [1, 2, 3, 4, 5]
    assert fields == dict(base, mode=0, num_tokens=1, state_dtype=2, act_dtype=2, weight_dtype=2)
    trt_plugins.add_conv1d(trt.network, {"x": 1, "weight": 2, "slot_idx": 4, "windows": 5}, 96, mode="verify",
                           num_tokens=4, has_bias=False, state_dtype="fp32", act_dtype="fp16", weight_dtype="fp32",
                           trt=trt)
    _, fields, inputs = _created(trt)
    assert inputs == [1, 2, 4, 5]
    assert fields == dict(base, mode=1, num_tokens=4, state_dtype=0, act_dtype=1, weight_dtype=0, has_bias=0)
    trt_plugins.add_conv1d(trt.network, {"accepted": 1, "slot_idx": 2, "windows": 3}, 96, mode="commit",
                           num_tokens=4, trt=trt)
    _, fields, inputs = _created(trt)
    assert inputs == [1, 2, 3] and fields["mode"] == 2
    with pytest.raises(ValueError, match="mode='train' is not supported"):
        trt_plugins.conv1d_fields(96, mode="train")


def test_add_prefill_plugins_take_no_decode_settings():
    trt = FakeTrt(num_outputs=3)
    shape, cfg = Mamba2LayerShape(8, 64, 64, 2), ReplayConfig(16, "fp32", "bf16")
    names = trt_plugins.mamba2_prefill_inputs(trt_plugins.mamba2_prefill_fields(shape, cfg))
    trt_plugins.add_mamba2_prefill(trt.network, {n: n for n in names}, shape, cfg, trt=trt)
    name, fields, inputs = _created(trt)
    assert name == "ReplaySSMMamba2Prefill" and inputs == names and names[-3:] == ["slot_idx", "state", "cursor"]
    assert fields == {"nheads": 8, "head_dim": 64, "dstate": 64, "ngroups": 2, "mode": 1, "state_dtype": 0,
                      "act_dtype": 2, "has_z": 1, "has_D": 1, "has_dt_bias": 1, "dt_softplus": 1, "pad_slot_id": -1}
    g_shape = GdnLayerShape(2, 4, 64, 64)
    names = ["q", "k", "v", "g", "beta", "lengths", "slot_idx", "state"]
    trt_plugins.add_gdn_prefill(trt.network, {n: n for n in names}, g_shape, cfg, mode="conventional", trt=trt)
    name, fields, inputs = _created(trt)
    assert name == "ReplaySSMGdnPrefill" and inputs == names and fields["mode"] == 0 and "buffer_len" not in fields
    trt_plugins.add_conv1d_prefill(trt.network, {"x": 1, "weight": 2, "bias": 3, "lengths": 4, "slot_idx": 5,
                                                 "state": 6}, 96, trt=trt)
    name, fields, inputs = _created(trt)
    assert name == "ReplaySSMConv1dPrefill" and inputs == [1, 2, 3, 4, 5, 6]
    assert "mode" not in fields and "num_tokens" not in fields and fields["channels"] == 96


def test_native_dir_follows_rssm_library(monkeypatch, tmp_path):
    monkeypatch.setenv("RSSM_LIBRARY", str(tmp_path / "libreplayssm.so"))
    assert trt_plugins.native_dir() == tmp_path.resolve()
    with pytest.raises(FileNotFoundError, match="libreplayssm_trt.so is missing"):
        trt_plugins.library_path()
    monkeypatch.delenv("RSSM_LIBRARY")
    assert trt_plugins.native_dir().name == "lib"
