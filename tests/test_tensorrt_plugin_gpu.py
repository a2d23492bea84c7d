"""The TensorRT plugins on the GPU without TensorRT's runtime: replayssm_trt_gpu_test dlopens libreplayssm_trt.so,
creates each plugin through getCreators from fields (build phase, and runtime phase from its serialized
fields), and runs enqueue with real tensor descriptors on device buffers; this test writes the inputs, runs it
over steps that cross several flushes, and compares y and the pool buffers it updated in place with the Python
ops (the same kernels through the same C ABI: equal bit for bit) and with the PyTorch reference (tolerance as in
the kernel tests).
"""

import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

import gdn_cases
import mamba2_cases
import trtllm_replayssm
from trtllm_replayssm.config import DTYPE_CODES, GdnLayerShape, Mamba2LayerShape, ReplayConfig
from trtllm_replayssm.ops.gdn import gdn_replay_decode
from trtllm_replayssm.ops.mamba2 import replay_decode
from trtllm_replayssm import trt_plugins

LIB_DIR = Path(trtllm_replayssm.__file__).parent / "lib"
GPU_TEST, TRT_LIB = LIB_DIR / "replayssm_trt_gpu_test", LIB_DIR / "libreplayssm_trt.so"
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not (GPU_TEST.exists() and TRT_LIB.exists()),
                                 reason="TensorRT plugins not built (install with RSSM_TENSORRT_INCLUDE_DIR=...)")]

TOL = {torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
CODE = {**DTYPE_CODES, torch.int32: 3}


def _write(t: torch.Tensor, path: Path):
    t.detach().contiguous().cpu().view(torch.uint8).numpy().tofile(path)


def _read(path: Path, like: torch.Tensor) -> torch.Tensor:
    raw = torch.from_numpy(np.fromfile(path, dtype=np.uint8))
    return raw.view(like.dtype).reshape(like.shape).to(like.device)


def run_plugin(tmp: Path, plugin: str, fields: dict, order: list, once: dict, steps: list, y_like):
    """Runs the plugin driver; returns (y per step, final values of the `once` tensors it updated)."""
    lines = [f"plugin {plugin}"] + [f"field {k} {v}" for k, v in fields.items()] + [f"steps {len(steps)}"]
    for name in order:
        t = once[name] if name in once else steps[0][name]
        lines.append(f"input {name} {CODE[t.dtype]} {t.dim()} {' '.join(map(str, t.shape))} "
                     f"{'once' if name in once else 'step'}")
    (tmp / "manifest.txt").write_text("\n".join(lines) + "\n")
    for name, t in once.items():
        _write(t, tmp / f"{name}.bin")
    for i, step in enumerate(steps):
        for name, t in step.items():
            _write(t, tmp / f"{name}.{i}.bin")
    run = subprocess.run([str(GPU_TEST), str(TRT_LIB), str(tmp)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    ys = [_read(tmp / f"y.{i}.bin", y_like) for i in range(len(steps))]
    finals = {name: _read(tmp / f"{name}.final.bin", t) for name, t in once.items()
              if (tmp / f"{name}.final.bin").exists()}
    return ys, finals


def test_mamba2_plugin_matches_ops_and_reference(tmp_path):
    torch.manual_seed(0)
    dev = torch.device("cuda")
    shape, cfg, slots, batch, nsteps = Mamba2LayerShape(8, 64, 64, 2), ReplayConfig(4, "fp32", "bf16"), 7, 5, 11
    pool = mamba2_cases.random_pool(shape, slots, cfg, dev)
    start = mamba2_cases.clone_pool(pool)
    ref = mamba2_cases.clone_pool(pool, device="cpu")
    A, D, dt_bias = mamba2_cases.layer_params(shape, dev)
    slot_idx = mamba2_cases.slot_map(batch, slots, 1, dev)
    live = slot_idx >= 0
    steps, ys_ops, ys_ref = [], [], []
    for _ in range(nsteps):
        x, dt, B, C, z = mamba2_cases.step_inputs(shape, batch, cfg.act_dtype, dev)
        steps.append(dict(x=x, dt=dt, B=B, C=C, z=z))
        ys_ops.append(replay_decode(pool, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias, slot_idx=slot_idx))
        ys_ref.append(replay_decode(ref, x.cpu(), dt.cpu(), B.cpu(), C.cpu(), A.cpu(), D=D.cpu(), z=z.cpu(),
                                    dt_bias=dt_bias.cpu(), slot_idx=slot_idx.cpu()))
    fields = trt_plugins.mamba2_decode_fields(shape, cfg)
    once = dict(A=A, D=D, dt_bias=dt_bias, slot_idx=slot_idx, state=start.checkpoint, ring_x=start.ring_x,
                ring_B=start.ring_B, ring_dt=start.ring_dt, cursor=start.cursor)
    ys, finals = run_plugin(tmp_path, trt_plugins.MAMBA2_DECODE, fields, trt_plugins.mamba2_decode_inputs(fields),
                            once, steps, ys_ops[0])
    for i in range(nsteps):
        assert torch.equal(ys[i][live], ys_ops[i][live]), f"step {i}: plugin y differs from the ops"
        assert torch.isnan(ys[i][~live].float()).all(), "padding row written"
        assert mamba2_cases.rel_err(ys[i][live].cpu(), ys_ref[i][live.cpu()]) < TOL[torch.bfloat16]
    for name in ("state", "ring_x", "ring_B", "ring_dt", "cursor"):
        ops_buf = pool.checkpoint if name == "state" else pool.buffers[name]
        assert torch.equal(finals[name], ops_buf), f"{name} differs from the ops"


def test_gdn_plugin_matches_ops_and_reference(tmp_path):
    torch.manual_seed(0)
    dev = torch.device("cuda")
    shape, cfg, slots, batch, nsteps = GdnLayerShape(2, 4, 128, 128), ReplayConfig(4, "fp32", "bf16"), 7, 5, 11
    pool = gdn_cases.random_pool(shape, slots, cfg, dev)
    start = gdn_cases.clone_pool(pool)
    ref = gdn_cases.clone_pool(pool, device="cpu")
    slot_idx = mamba2_cases.slot_map(batch, slots, 1, dev)
    live = slot_idx >= 0
    steps, ys_ops, ys_ref = [], [], []
    for _ in range(nsteps):
        q, k, v, g, beta = gdn_cases.step_inputs(shape, batch, cfg.act_dtype, dev)
        steps.append(dict(q=q, k=k, v=v, g=g, beta=beta))
        kw = dict(g=g, beta=beta, use_qk_l2norm=False, scale=1.0)
        ys_ops.append(gdn_replay_decode(pool, q, k, v, slot_idx=slot_idx, **kw))
        ys_ref.append(gdn_replay_decode(ref, q.cpu(), k.cpu(), v.cpu(), slot_idx=slot_idx.cpu(),
                                        **{n: (t.cpu() if isinstance(t, torch.Tensor) else t) for n, t in kw.items()}))
    fields = trt_plugins.gdn_decode_fields(shape, cfg)
    once = dict(slot_idx=slot_idx, state=start.checkpoint, ring_u=start.ring_u, ring_k=start.ring_k,
                ring_g=start.ring_g, cursor=start.cursor)
    ys, finals = run_plugin(tmp_path, trt_plugins.GDN_DECODE, fields, trt_plugins.gdn_decode_inputs(fields), once,
                            steps, ys_ops[0])
    for i in range(nsteps):
        assert torch.equal(ys[i][live], ys_ops[i][live]), f"step {i}: plugin y differs from the ops"
        assert torch.isnan(ys[i][~live].float()).all(), "padding row written"
        assert mamba2_cases.rel_err(ys[i][live].cpu(), ys_ref[i][live.cpu()]) < TOL[torch.bfloat16]
    for name in ("state", "ring_u", "ring_k", "ring_g", "cursor"):
        ops_buf = pool.checkpoint if name == "state" else pool.buffers[name]
        assert torch.equal(finals[name], ops_buf), f"{name} differs from the ops"
