"""The plugin library in real TensorRT-RTX (no GPU needed to build): its registry lists the creators (through
load_library and through a plain dlopen, once each), one-node ONNX graphs of every plugin build engines for SM89,
and wrong shapes fail the build with a message through TensorRT's logger. Skipped without `tensorrt_rtx`
(pip install tensorrt-rtx==1.7.1.116) or without the plugin library (build with RSSM_TENSORRT=1 and
RSSM_CUDA_ARCHS including 89)."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

if __name__ == "__main__":  # the child of build(): the package from this checkout
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from trtllm_replayssm import trt_plugins as tp  # noqa: E402
from trtllm_replayssm.config import GdnLayerShape, Mamba2LayerShape, ReplayConfig

HAVE_RTX = importlib.util.find_spec("tensorrt_rtx") is not None
LIBRARY = tp.native_dir() / "libreplayssm_trt.so"
pytestmark = [
    pytest.mark.skipif(not HAVE_RTX, reason="tensorrt_rtx is not installed (pip install tensorrt-rtx==1.7.1.116)"),
    pytest.mark.skipif(not LIBRARY.exists(), reason=f"{LIBRARY} is missing (build with RSSM_TENSORRT=1)"),
]
CREATORS = sorted([tp.MAMBA2_DECODE, tp.GDN_DECODE, tp.MAMBA2_VERIFY, tp.GDN_VERIFY, tp.SPEC_COMMIT,
                   tp.SNAPSHOT_COMMIT, tp.CONV1D, tp.MAMBA2_PREFILL, tp.GDN_PREFILL, tp.CONV1D_PREFILL])


def rtx():
    tp.prepare_tensorrt_rtx()
    import tensorrt_rtx

    return tensorrt_rtx


# ---- registration (each scenario in a fresh process: a library initialises once per process) ----
REGISTRY_SCRIPT = """
import ctypes, json, sys
from trtllm_replayssm import trt_plugins as tp
tp.prepare_tensorrt_rtx()
import tensorrt_rtx as trt
registry = trt.get_plugin_registry()
def ours():
    return sorted([c.name, c.plugin_version, c.plugin_namespace] for c in registry.all_creators
                  if c.plugin_namespace == tp.PLUGIN_NAMESPACE)
seen = {"before": ours()}
if "dlopen" in sys.argv:
    ctypes.CDLL(str(tp.library_path()), mode=ctypes.RTLD_GLOBAL)  # what Triton's TensorRT backend does
    seen["dlopen"] = ours()
registry.load_library(str(tp.library_path()))
seen["load_library"] = ours()
print(json.dumps(seen))
"""


def registry_after(*steps):
    run = subprocess.run([sys.executable, "-c", REGISTRY_SCRIPT, *steps], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_load_library_registers_every_creator_once():
    seen = registry_after()
    assert seen["before"] == []
    assert seen["load_library"] == [[name, tp.PLUGIN_VERSION, tp.PLUGIN_NAMESPACE] for name in CREATORS]


def test_plain_dlopen_registers_the_creators_and_load_library_does_not_duplicate_them():
    seen = registry_after("dlopen")
    expected = [[name, tp.PLUGIN_VERSION, tp.PLUGIN_NAMESPACE] for name in CREATORS]
    assert seen["before"] == [] and seen["dlopen"] == expected and seen["load_library"] == expected


# ---- engines from one-node ONNX graphs ----
B, SLOTS, L, T, S = 3, 5, 8, 2, 6  # S: prompt tokens of the prefill plugins
M2 = Mamba2LayerShape(nheads=4, head_dim=64, dstate=64, ngroups=2)
GDN = GdnLayerShape(num_k_heads=2, num_v_heads=4, head_k_dim=64, head_v_dim=64)
CFG = ReplayConfig(L, "fp32", "bf16")
R4 = (L + 3) // 4 * 4  # fp32 ring records per head


def m2_tensors(tokens=()):
    H, P, N, G = M2.nheads, M2.head_dim, M2.dstate, M2.ngroups
    return {"x": ([B, *tokens, H, P], "bf16"), "dt": ([B, *tokens, H], "bf16"), "B": ([B, *tokens, G, N], "bf16"),
            "C": ([B, *tokens, G, N], "bf16"), "z": ([B, *tokens, H, P], "bf16"), "A": ([H], "fp32"),
            "D": ([H], "fp32"), "dt_bias": ([H], "fp32"), "slot_idx": ([B], "int32"),
            "state": ([SLOTS, H, P, N], "fp32"), "ring_x": ([SLOTS, H, L, P], "bf16"),
            "ring_B": ([SLOTS, G, L, N], "bf16"), "ring_dt": ([SLOTS, H, R4], "fp32"),
            "cursor": ([SLOTS, H, 8, 2], "int32"), "snapshots": ([SLOTS, T, H, P, N], "fp32"),
            "lengths": ([B], "int32")}


def gdn_tensors(tokens=()):
    H, HV, K, V = GDN.num_k_heads, GDN.num_v_heads, GDN.head_k_dim, GDN.head_v_dim
    return {"q": ([B, *tokens, H, K], "bf16"), "k": ([B, *tokens, H, K], "bf16"), "v": ([B, *tokens, HV, V], "bf16"),
            "g": ([B, *tokens, HV], "fp32"), "beta": ([B, *tokens, HV], "fp32"), "slot_idx": ([B], "int32"),
            "state": ([SLOTS, HV, V, K], "fp32"), "ring_u": ([SLOTS, HV, L, V], "bf16"),
            "ring_k": ([SLOTS, H, L, K], "bf16"), "ring_g": ([SLOTS, HV, R4], "fp32"),
            "cursor": ([SLOTS, HV, 8, 2], "int32"), "snapshots": ([SLOTS, T, HV, V, K], "fp32"),
            "lengths": ([B], "int32")}


def conv_tensors(tokens=()):
    return {"x": ([B, *tokens, 64], "bf16"), "weight": ([64, 4], "bf16"), "bias": ([64], "bf16"),
            "slot_idx": ([B], "int32"), "state": ([SLOTS, 64, 3], "bf16"), "lengths": ([B], "int32")}


# (plugin, fields, tensors by name, the input y copies or None)
CASES = {
    "mamba2_decode": (tp.MAMBA2_DECODE, tp.mamba2_decode_fields(M2, CFG), m2_tensors(), "x"),
    "mamba2_decode_conventional": (tp.MAMBA2_DECODE, tp.mamba2_decode_fields(M2, CFG, mode="conventional"),
                                   m2_tensors(), "x"),
    "gdn_decode": (tp.GDN_DECODE, tp.gdn_decode_fields(GDN, CFG), gdn_tensors(), "v"),
    "mamba2_verify": (tp.MAMBA2_VERIFY, tp.mamba2_verify_fields(M2, CFG, T), m2_tensors((T,)), "x"),
    "gdn_verify_snapshot": (tp.GDN_VERIFY, tp.gdn_verify_fields(GDN, CFG, T, mode="snapshot"), gdn_tensors((T,)),
                            "v"),
    "spec_commit": (tp.SPEC_COMMIT, tp.spec_commit_fields(M2, CFG, T),
                    {"accepted": ([B], "int32"), **m2_tensors()}, None),
    "snapshot_commit": (tp.SNAPSHOT_COMMIT, tp.snapshot_commit_fields(CFG, T),
                        {"accepted": ([B], "int32"), **m2_tensors()}, None),
    "conv1d": (tp.CONV1D, tp.conv1d_fields(64), conv_tensors(), "x"),
    "mamba2_prefill": (tp.MAMBA2_PREFILL, tp.mamba2_prefill_fields(M2, CFG), m2_tensors((S,)), "x"),
    "gdn_prefill": (tp.GDN_PREFILL, tp.gdn_prefill_fields(GDN, CFG), gdn_tensors((S,)), "v"),
    "conv1d_prefill": (tp.CONV1D_PREFILL, tp.conv1d_prefill_fields(64), conv_tensors((S,)), "x"),
}
INPUT_ORDER = {tp.MAMBA2_DECODE: tp.mamba2_decode_inputs, tp.GDN_DECODE: tp.gdn_decode_inputs,
               tp.MAMBA2_VERIFY: tp.mamba2_verify_inputs, tp.GDN_VERIFY: tp.gdn_verify_inputs,
               tp.SPEC_COMMIT: tp.spec_commit_inputs, tp.SNAPSHOT_COMMIT: tp.snapshot_commit_inputs,
               tp.CONV1D: tp.conv1d_inputs, tp.MAMBA2_PREFILL: tp.mamba2_prefill_inputs,
               tp.GDN_PREFILL: tp.gdn_prefill_inputs, tp.CONV1D_PREFILL: tp.conv1d_prefill_inputs}
IN_PLACE = {"state", "ring_x", "ring_B", "ring_dt", "ring_u", "ring_k", "ring_g", "cursor", "snapshots", "windows"}


def one_node_model(plugin, fields, tensors, y_like, omit=()):
    """The plugin as the only node of an ONNX graph; its fields as attributes (less those in `omit`)."""
    from onnx import TensorProto, helper

    kinds = {"bf16": TensorProto.BFLOAT16, "fp32": TensorProto.FLOAT, "int32": TensorProto.INT32}
    names = INPUT_ORDER[plugin](fields)
    in_place = [n for n in names if n in IN_PLACE]
    if "snapshots" in names:  # the snapshot path: its verify updates the snapshots, its commit the state
        in_place = ["state"] if plugin == tp.SNAPSHOT_COMMIT else ["snapshots"]
    outputs = (["y"] if y_like else []) + [f"{n}_out" for n in in_place]
    node = tp.onnx_plugin_node(plugin, {k: v for k, v in fields.items() if k not in omit}, names, outputs)
    inputs = [helper.make_tensor_value_info(n, kinds[tensors[n][1]], tensors[n][0]) for n in names]
    outs = ([helper.make_tensor_value_info("y", kinds[tensors[y_like][1]], None)] if y_like else [])
    outs += [helper.make_tensor_value_info(f"{n}_out", kinds[tensors[n][1]], None) for n in in_place]
    graph = helper.make_graph([node], plugin, inputs, outs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def build(case, omit=(), wrong_input=None):
    """Builds CASES[case] (less the fields in `omit`, input `wrong_input` = (name, shape) changed) for SM89 in a
    child process (the parser dlopens libtensorrt_rtx.so, found through the LD_LIBRARY_PATH a process starts with):
    (engine bytes or 0, whether the engine names the plugin, the error messages of the logger and the parser).
    The engine holds no kernels: the library must have SM89's (built with RSSM_CUDA_ARCHS including 89)."""
    tp.check_targets([89])
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(tp.prepare_tensorrt_rtx()),
                                                           env.get("LD_LIBRARY_PATH")]))
    spec = json.dumps({"case": case, "omit": list(omit), "wrong": wrong_input})
    run = subprocess.run([sys.executable, __file__, spec], capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1])


def build_here(spec):
    """The child's side of build(): a builder with the plugin library, a logger that keeps every message."""
    trt = rtx()
    errors = []

    class Logger(trt.ILogger):
        def log(self, severity, msg):
            if severity <= trt.ILogger.Severity.ERROR:
                errors.append(msg)

    logger = Logger()
    builder = trt.Builder(logger)
    builder.get_plugin_registry().load_library(str(tp.library_path()))
    plugin, fields, tensors, y_like = CASES[spec["case"]]
    if spec["wrong"]:
        name, shape = spec["wrong"]
        tensors = {**tensors, name: (shape, tensors[name][1])}
    network = builder.create_network(1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED))
    parser = trt.OnnxParser(network, logger)
    engine = None
    if parser.parse(one_node_model(plugin, fields, tensors, y_like, omit=spec["omit"])):
        config = builder.create_builder_config()
        tp.enable_aliased_io(config, trt=trt)
        config.num_compute_capabilities = 1
        config.set_compute_capability(trt.ComputeCapability.SM89, 0)
        engine = builder.build_serialized_network(network, config)
    errors += [str(parser.get_error(i)) for i in range(parser.num_errors)]
    data = bytes(engine) if engine is not None else b""
    print(json.dumps({"bytes": len(data), "names_plugin": plugin.encode() in data, "errors": errors}))


@pytest.mark.parametrize("case", sorted(CASES))
def test_one_node_graph_builds_an_engine(case):
    result = build(case)
    assert result["bytes"] > 0, result["errors"]
    assert result["names_plugin"]  # the engine names the plugin; its kernels stay in the library


def test_latency_route_kib_may_be_omitted():
    result = build("mamba2_decode", omit=("latency_route_kib",))
    assert result["bytes"] > 0, result["errors"]


H, P, N, G = M2.nheads, M2.head_dim, M2.dstate, M2.ngroups
WRONG_SHAPES = {
    "ring of the wrong length": ("ring_x", [SLOTS, H, L + 1, P], f"ring_x has dims [{SLOTS}, {H}, {L + 1}, {P}], "
                                                                 f"expected [slots={SLOTS}, {H}, {L}, {P}]"),
    "fewer state slots than the cursor": ("cursor", [SLOTS + 1, H, 8, 2], f"cursor has dims [{SLOTS + 1}, {H}, 8, 2], "
                                                                         f"expected [slots={SLOTS}, {H}, 8, 2]"),
    "mismatched batch": ("dt", [B + 1, H], f"dt has dims [{B + 1}, {H}], expected [batch={B}, {H}]"),
}


@pytest.mark.parametrize("what", sorted(WRONG_SHAPES))
def test_wrong_shapes_fail_the_build_through_the_logger(what):
    name, shape, message = WRONG_SHAPES[what]
    result = build("mamba2_decode", wrong_input=(name, shape))
    assert result["bytes"] == 0
    assert any(f"{tp.MAMBA2_DECODE}: {message}" in e for e in result["errors"]), result["errors"]


def test_add_plugin_names_the_onnx_route_under_tensorrt_rtx():
    trt = rtx()
    network = trt.Builder(trt.Logger(trt.Logger.ERROR)).create_network(0)
    with pytest.raises(RuntimeError, match="no plugin layer .*ONNX"):
        tp.add_mamba2_decode(network, {}, M2, CFG, trt=trt)


if __name__ == "__main__":
    build_here(json.loads(sys.argv[1]))


def test_tensorrt_module_falls_back_to_tensorrt_rtx(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorrt", None)  # `import tensorrt` raises ImportError
    assert tp.tensorrt_module().__name__ == "tensorrt_rtx"


FIELDS_SCRIPT = """
import json, sys
from trtllm_replayssm import trt_plugins as tp
from trtllm_replayssm.config import Mamba2LayerShape, ReplayConfig
trt = tp.tensorrt_module()
messages = []
class Logger(trt.ILogger):
    def log(self, severity, msg):
        messages.append(msg)
logger = Logger()
builder = trt.Builder(logger)
registry = builder.get_plugin_registry()
registry.load_library(str(tp.library_path()))
fields = tp.mamba2_decode_fields(Mamba2LayerShape(4, 64, 64, 2), ReplayConfig(8, "fp32", "bf16"))
tp.create_plugin(tp.MAMBA2_DECODE, fields, registry)  # accepted: every field arrived as given
refused = None
try:
    tp.create_plugin(tp.MAMBA2_DECODE, dict(fields, buffer_len=int(sys.argv[1])), registry)
except RuntimeError as e:
    refused = str(e)
print(json.dumps({"refused": refused, "messages": messages}))
"""


def test_create_plugin_hands_the_fields_to_the_library_intact():
    """The library reads the fields during create_plugin: a value it refuses comes back in its message, as given
    (buffers freed before that point would arrive as other values)."""
    run = subprocess.run([sys.executable, "-c", FIELDS_SCRIPT, "977"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["refused"] and "the library refused the fields" in result["refused"]
    # through TensorRT-RTX's logger (its logger finder has the TensorRT 11 layout), not stderr
    assert f"{tp.MAMBA2_DECODE}: field 'buffer_len'=977 is outside 1..64" in result["messages"]
    assert "977" not in run.stderr
