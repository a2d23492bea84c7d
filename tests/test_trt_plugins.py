"""trtllm_replayssm.trt_plugins without TensorRT: a clear error when it is absent, and the calls it makes on a
recording stand-in of the `tensorrt` module (fields, creator lookup, input order, aliasing flag, network flag)."""

import sys
import types

import numpy as np
import pytest

from trtllm_replayssm import trt_plugins
from trtllm_replayssm.config import GdnLayerShape, Mamba2LayerShape, ReplayConfig


class FakeTrt(types.SimpleNamespace):
    """The parts of the tensorrt module trt_plugins uses, recording what it is asked."""

    def __init__(self, version="10.14.1"):
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
            num_outputs = 6
            name = None

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
    with pytest.raises(ImportError, match="need the `tensorrt` Python package"):
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
                      "pad_slot_id": -1}
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
