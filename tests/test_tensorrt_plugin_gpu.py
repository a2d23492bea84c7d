"""The TensorRT plugins on the GPU without TensorRT's runtime: replayssm_trt_gpu_test dlopens libreplayssm_trt.so,
creates each plugin through getCreators from fields (build phase, and runtime phase from its serialized fields,
attached to a context), and runs enqueue with real tensor descriptors on device buffers, plugins in sequence
over shared buffers as an engine would bind them (a verify, then a commit of random accepted counts, step after
step). This test writes the inputs, runs it, and compares y and the pool buffers the plugins updated in place
with the Python ops (the same kernels through the same C ABI: equal bit for bit) and with the PyTorch reference
(tolerance as in the kernel tests).
"""

import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

import gdn_cases
import gdn_spec_cases
import mamba2_cases
import mamba2_spec_cases
from mamba2_spec_cases import bits
from trtllm_replayssm import trt_plugins
from trtllm_replayssm.config import DTYPE_CODES, GdnLayerShape, Mamba2LayerShape, ReplayConfig
from trtllm_replayssm.ops import gdn as gdn_ops
from trtllm_replayssm.ops import mamba2 as mamba2_ops
from trtllm_replayssm.ops import prefill as prefill_ops
from trtllm_replayssm.ops.conv1d import (conv1d_commit, conv1d_commit_reference, conv1d_update,
                                         conv1d_update_reference, conv1d_verify, conv1d_verify_reference)
from trtllm_replayssm.ops.gdn import spec_reference as gdn_spec_reference
from trtllm_replayssm.ops.mamba2 import spec_reference as mamba2_spec_reference
from trtllm_replayssm.ops.slots import commit_reference, snapshot_commit, snapshot_commit_reference, spec_commit

GPU_TEST = trt_plugins.native_dir() / "replayssm_trt_gpu_test"
TRT_LIB = trt_plugins.native_dir() / "libreplayssm_trt.so"
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not (GPU_TEST.exists() and TRT_LIB.exists()),
                                 reason="TensorRT plugins not built (install with RSSM_TENSORRT_INCLUDE_DIR=...)")]

DEV = torch.device("cuda")
TOL = {torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
CODE = {**DTYPE_CODES, torch.int32: 3}
PREPARED = dict(use_qk_l2norm=False, scale=1.0)  # GDN inputs arrive prepared: the ops pass them through


def _write(t: torch.Tensor, path: Path):
    t.detach().contiguous().cpu().view(torch.uint8).numpy().tofile(path)


def _read(path: Path, like: torch.Tensor) -> torch.Tensor:
    raw = torch.from_numpy(np.fromfile(path, dtype=np.uint8))
    return raw.view(like.dtype).reshape(like.shape).to(like.device)


class PluginDriver:
    """Writes what replayssm_trt_gpu_test reads (the manifest format is in plugins/tensorrt/tests/gpu_test.cpp),
    runs it, and reads back what it wrote. Declare tensors, then plugins, then runs."""

    def __init__(self, tmp: Path):
        self.tmp, self.lines, self.like, self.runs = tmp, [], {}, 0

    def tensor(self, name: str, t: torch.Tensor, initial=True):
        """A device buffer shaped and typed as t; filled with t when `initial`, else with 0xff bytes."""
        self.like[name] = t
        self.lines.append(f"tensor {name} {CODE[t.dtype]} {t.dim()} {' '.join(map(str, t.shape))}")
        if initial:
            _write(t, self.tmp / f"{name}.bin")

    def plugin(self, label: str, name: str, fields: dict, inputs: list, output: str | None = None):
        self.lines += [f"plugin {label} {name}"] + [f"field {k} {v}" for k, v in fields.items()]
        self.lines += [f"input {n}" for n in inputs] + ([f"output {output}"] if output else [])

    def run(self, label: str, **uploads) -> int:
        """One enqueue of plugin `label` after writing `uploads` into their buffers; returns the run's index."""
        for name, t in uploads.items():
            assert name in self.like and t.shape == self.like[name].shape and t.dtype == self.like[name].dtype, name
            _write(t, self.tmp / f"in.{self.runs}.{name}.bin")
        self.lines.append(f"run {label}")
        self.runs += 1
        return self.runs - 1

    def execute(self):
        (self.tmp / "manifest.txt").write_text("\n".join(self.lines) + "\n")
        run = subprocess.run([str(GPU_TEST), str(TRT_LIB), str(self.tmp)], capture_output=True, text=True,
                             timeout=300)
        assert run.returncode == 0, run.stdout + run.stderr

    def out(self, run: int, name: str) -> torch.Tensor:
        return _read(self.tmp / f"out.{run}.{name}.bin", self.like[name])

    def final(self, name: str) -> torch.Tensor:
        return _read(self.tmp / f"final.{name}.bin", self.like[name])


def _check_y(y, y_ops, y_ref, live, what):
    assert torch.equal(bits(y[live]), bits(y_ops[live])), f"{what}: plugin y differs from the ops"
    assert torch.isnan(y[~live].float()).all(), f"{what}: padding row written"
    assert mamba2_cases.rel_err(y[live], y_ref[live]) < TOL[y.dtype], f"{what}: y off the reference"


def _pool_tensors(pool) -> dict:
    """The pool's buffers under the plugins' input names (the checkpoint is `state`)."""
    return {("state" if n == "checkpoint" else n): t for n, t in pool.buffers.items()}


def _check_finals(drv, expected: dict):
    for name, t in expected.items():
        assert torch.equal(bits(drv.final(name)) if t.is_floating_point() else drv.final(name),
                           bits(t) if t.is_floating_point() else t), f"{name} differs from the ops"


# ---- decode

@pytest.mark.parametrize("latency_route_bytes", [0, None], ids=["ring", "latency_route"])
def test_mamba2_decode_plugin_matches_ops_and_reference(tmp_path, latency_route_bytes):
    torch.manual_seed(0)
    cfg = ReplayConfig(4, "fp32", "bf16", latency_route_bytes=latency_route_bytes)
    shape, slots, batch, nsteps = Mamba2LayerShape(8, 64, 64, 2), 7, 5, 11
    pool = mamba2_cases.random_pool(shape, slots, cfg, DEV)
    ref = pool.clone("cpu")
    A, D, dt_bias = mamba2_cases.layer_params(shape, DEV)
    slot_idx = mamba2_cases.slot_map(batch, slots, 1, DEV)
    fields = trt_plugins.mamba2_decode_fields(shape, cfg)
    drv = PluginDriver(tmp_path)
    for name, t in dict(A=A, D=D, dt_bias=dt_bias, slot_idx=slot_idx, **_pool_tensors(pool)).items():
        drv.tensor(name, t)
    steps = [dict(zip(("x", "dt", "B", "C", "z"), mamba2_cases.step_inputs(shape, batch, cfg.act_dtype, DEV)))
             for _ in range(nsteps)]
    for name, t in steps[0].items():
        drv.tensor(name, t, initial=False)
    drv.tensor("y", steps[0]["x"], initial=False)
    drv.plugin("decode", trt_plugins.MAMBA2_DECODE, fields, trt_plugins.mamba2_decode_inputs(fields), output="y")
    runs = [drv.run("decode", **s) for s in steps]
    drv.execute()
    for i, s in enumerate(steps):
        y_ops = mamba2_ops.replay_decode(pool, A=A, D=D, dt_bias=dt_bias, slot_idx=slot_idx, **s)
        y_ref = mamba2_ops.replay_decode(ref, A=A.cpu(), D=D.cpu(), dt_bias=dt_bias.cpu(), slot_idx=slot_idx.cpu(),
                                         **{n: t.cpu() for n, t in s.items()})
        _check_y(drv.out(runs[i], "y"), y_ops, y_ref.to(DEV), slot_idx >= 0, f"step {i}")
    _check_finals(drv, _pool_tensors(pool))


@pytest.mark.parametrize("latency_route_bytes", [0, None], ids=["ring", "latency_route"])
def test_gdn_decode_plugin_matches_ops_and_reference(tmp_path, latency_route_bytes):
    torch.manual_seed(0)
    cfg = ReplayConfig(4, "fp32", "bf16", latency_route_bytes=latency_route_bytes)
    shape, slots, batch, nsteps = GdnLayerShape(2, 4, 128, 128), 7, 5, 11
    pool = gdn_cases.random_pool(shape, slots, cfg, DEV)
    ref = pool.clone("cpu")
    slot_idx = mamba2_cases.slot_map(batch, slots, 1, DEV)
    fields = trt_plugins.gdn_decode_fields(shape, cfg)
    drv = PluginDriver(tmp_path)
    for name, t in dict(slot_idx=slot_idx, **_pool_tensors(pool)).items():
        drv.tensor(name, t)
    steps = [dict(zip(("q", "k", "v", "g", "beta"), gdn_cases.step_inputs(shape, batch, cfg.act_dtype, DEV)))
             for _ in range(nsteps)]
    for name, t in steps[0].items():
        drv.tensor(name, t, initial=False)
    drv.tensor("y", steps[0]["v"], initial=False)
    drv.plugin("decode", trt_plugins.GDN_DECODE, fields, trt_plugins.gdn_decode_inputs(fields), output="y")
    runs = [drv.run("decode", **s) for s in steps]
    drv.execute()
    for i, s in enumerate(steps):
        y_ops = gdn_ops.gdn_replay_decode(pool, slot_idx=slot_idx, **s, **PREPARED)
        y_ref = gdn_ops.gdn_replay_decode(ref, slot_idx=slot_idx.cpu(), **{n: t.cpu() for n, t in s.items()},
                                          **PREPARED)
        _check_y(drv.out(runs[i], "y"), y_ops, y_ref.to(DEV), slot_idx >= 0, f"step {i}")
    _check_finals(drv, _pool_tensors(pool))


# ---- speculative verify + commit

class _SpecFamily:
    """What the verify + commit test needs of a family: its pool, window inputs, plugin fields and ops."""

    def __init__(self, family: str, mode: str):
        self.family, self.replay = family, mode == "replay"
        if family == "mamba2":
            self.shape, self.T, self.cases = Mamba2LayerShape(8, 64, 64, 2), 4, mamba2_spec_cases
            self.names, self.y_like = ("x", "dt", "B", "C", "z"), "x"
            self.fields = trt_plugins.mamba2_verify_fields(self.shape, CFG, self.T, mode=mode)
            self.inputs, self.plugin = trt_plugins.mamba2_verify_inputs(self.fields), trt_plugins.MAMBA2_VERIFY
        else:
            self.shape, self.T, self.cases = GdnLayerShape(2, 4, 128, 128), 3, gdn_spec_cases
            self.names, self.y_like = ("q", "k", "v", "g", "beta"), "v"
            self.fields = trt_plugins.gdn_verify_fields(self.shape, CFG, self.T, mode=mode)
            self.inputs, self.plugin = trt_plugins.gdn_verify_inputs(self.fields), trt_plugins.GDN_VERIFY
        self.layer = mamba2_cases.layer_params(self.shape, DEV) if family == "mamba2" else ()

    def window(self, batch):
        return dict(zip(self.names, self.cases.window_inputs(self.shape, batch, self.T, CFG.act_dtype, DEV)))

    def layer_tensors(self):
        return dict(zip(("A", "D", "dt_bias"), self.layer))

    def verify(self, state, snapshots_or_pool, w, slot_idx, reference):
        """One verify by the ops (reference=False) or the reference; replay: snapshots_or_pool is the pool."""
        if self.family == "mamba2":
            A, D, dt_bias = self.layer
            args = (w["x"], w["dt"], w["B"], w["C"], A)
            if reference:
                ref = mamba2_spec_reference
                if self.replay:
                    return ref.replay_verify_reference(snapshots_or_pool, *args, D, w["z"], dt_bias, True, slot_idx)
                return ref.snapshot_verify_reference(state, snapshots_or_pool, *args, D, w["z"], dt_bias, True,
                                                     slot_idx)
            kw = dict(D=D, z=w["z"], dt_bias=dt_bias, slot_idx=slot_idx)
            if self.replay:
                return mamba2_ops.replay_verify(snapshots_or_pool, *args, **kw)
            return mamba2_ops.snapshot_verify(state, snapshots_or_pool, *args, **kw)
        args = tuple(w[n] for n in self.names)
        if reference:
            ref = gdn_spec_reference
            if self.replay:
                return ref.replay_verify_reference(snapshots_or_pool, *args, slot_idx)
            return ref.snapshot_verify_reference(state, snapshots_or_pool, *args, slot_idx)
        if self.replay:
            return gdn_ops.replay_verify(snapshots_or_pool, *args, slot_idx=slot_idx, **PREPARED)
        return gdn_ops.snapshot_verify(state, snapshots_or_pool, *args, slot_idx=slot_idx, **PREPARED)


CFG = ReplayConfig(12, "fp32", "bf16")  # L = 12 >= 2T: flushes every few steps


@pytest.mark.parametrize("family", ["mamba2", "gdn"])
@pytest.mark.parametrize("mode", ["replay", "snapshot"])
def test_verify_and_commit_plugins_match_ops_and_reference(tmp_path, family, mode):
    """8 steps of verify (T tokens) then commit (random accepted counts, a device int32 input) over a pool with
    shuffled slots and a padding row, alternating build- and runtime-phase plugin objects: every y equals the
    ops' bit for bit (padding rows untouched) and follows the reference; the pool buffers the plugins updated in
    place (ReplaySSM: state, ring, cursor, across flushes; snapshot path: snapshots, then the state) equal the
    ops' at the end."""
    torch.manual_seed(0)
    f, slots, batch, nsteps = _SpecFamily(family, mode), 7, 5, 8
    pool = f.cases.spec_pool(f.shape, slots, CFG, f.T, DEV)
    drv = PluginDriver(tmp_path)
    if f.replay:
        ops, ref = pool.clone(), pool.clone()
        buffers = _pool_tensors(pool)
        commit_fields = trt_plugins.spec_commit_fields(f.shape, CFG, f.T)
        commit_plugin, commit_inputs = trt_plugins.SPEC_COMMIT, trt_plugins.spec_commit_inputs(commit_fields)
    else:
        snapshots = torch.zeros(slots, f.T, *pool.checkpoint.shape[1:], dtype=pool.checkpoint.dtype, device=DEV)
        buffers = dict(state=pool.checkpoint, snapshots=snapshots)
        ops, ref = {n: t.clone() for n, t in buffers.items()}, {n: t.clone() for n, t in buffers.items()}
        commit_fields = trt_plugins.snapshot_commit_fields(CFG, f.T)
        commit_plugin, commit_inputs = trt_plugins.SNAPSHOT_COMMIT, trt_plugins.snapshot_commit_inputs(commit_fields)
    steps = [dict(f.window(batch), slot_idx=mamba2_cases.slot_map(batch, slots, 1, DEV),
                  accepted=torch.randint(1, f.T + 1, (batch,), dtype=torch.int32, device=DEV))
             for _ in range(nsteps)]
    for name, t in dict(f.layer_tensors(), **buffers).items():
        drv.tensor(name, t)
    for name, t in steps[0].items():
        drv.tensor(name, t, initial=False)
    drv.tensor("y", steps[0][f.y_like], initial=False)
    drv.plugin("verify", f.plugin, f.fields, f.inputs, output="y")
    drv.plugin("commit", commit_plugin, commit_fields, commit_inputs)
    runs = []
    for s in steps:
        runs.append(drv.run("verify", **{n: s[n] for n in (*f.names, "slot_idx")}))
        drv.run("commit", accepted=s["accepted"])
    drv.execute()

    for i, s in enumerate(steps):
        slot_idx, accepted = s["slot_idx"], s["accepted"]
        if f.replay:
            y_ops = f.verify(None, ops, s, slot_idx, reference=False)
            spec_commit(ops, accepted, slot_idx, window=f.T)
            y_ref = f.verify(None, ref, s, slot_idx, reference=True)
            commit_reference(ref, accepted, slot_idx)
        else:
            y_ops = f.verify(ops["state"], ops["snapshots"], s, slot_idx, reference=False)
            snapshot_commit(ops["state"], ops["snapshots"], accepted, slot_idx)
            y_ref = f.verify(ref["state"], ref["snapshots"], s, slot_idx, reference=True)
            snapshot_commit_reference(ref["state"], ref["snapshots"], accepted, slot_idx)
        _check_y(drv.out(runs[i], "y"), y_ops, y_ref, slot_idx >= 0, f"step {i}")
    _check_finals(drv, _pool_tensors(ops) if f.replay else ops)
    if f.replay:
        assert not torch.equal(ops.origin(), pool.origin()), "no flush in the steps: the case misses the fold"
    else:
        assert not torch.equal(ops["state"], pool.checkpoint), "no commit reached the state"


# ---- conv1d

@pytest.mark.parametrize("mode", ["update", "speculative"])
def test_conv1d_plugin_matches_ops_and_reference(tmp_path, mode):
    """6 decode steps (update: bf16 state, weights and activations, with bias) or 6 verify + commit steps (T=3;
    fp32 windows and weights, fp16 activations, no bias) over shuffled slots with a padding row: every y equals
    the ops' bit for bit and follows the reference; the state / windows equal the ops' at the end."""
    torch.manual_seed(0)
    C, k, T, slots, batch, nsteps = 200, 4, 3, 7, 5, 6
    spec = mode == "speculative"
    sdt, adt, wdt = (torch.float32, torch.float16, torch.float32) if spec else (torch.bfloat16,) * 3
    weight = (torch.randn(C, k, device=DEV) * 0.5).to(wdt)
    bias = None if spec else (torch.randn(C, device=DEV) * 0.1).to(wdt)
    pool = torch.randn(slots, C, k - 1 + (T if spec else 0), device=DEV).to(sdt)
    ops, ref = pool.clone(), pool.clone()
    fields = trt_plugins.conv1d_fields(C, k, mode="verify" if spec else "update", num_tokens=T if spec else 1,
                                       state_dtype=sdt, act_dtype=adt, weight_dtype=wdt, has_bias=not spec)
    pool_name = "windows" if spec else "state"
    steps = [dict(x=torch.randn(batch, *((T,) if spec else ()), C, device=DEV).to(adt),
                  slot_idx=mamba2_cases.slot_map(batch, slots, 1, DEV),
                  accepted=torch.randint(1, T + 1, (batch,), dtype=torch.int32, device=DEV))
             for _ in range(nsteps)]
    drv = PluginDriver(tmp_path)
    for name, t in dict(weight=weight, **({} if spec else dict(bias=bias)), **{pool_name: pool}).items():
        drv.tensor(name, t)
    for name, t in steps[0].items():
        drv.tensor(name, t, initial=False)
    drv.tensor("y", steps[0]["x"], initial=False)
    drv.plugin("conv", trt_plugins.CONV1D, fields, trt_plugins.conv1d_inputs(fields), output="y")
    if spec:
        commit = trt_plugins.conv1d_fields(C, k, mode="commit", num_tokens=T, state_dtype=sdt)
        drv.plugin("commit", trt_plugins.CONV1D, commit, trt_plugins.conv1d_inputs(commit))
    runs = []
    for s in steps:
        runs.append(drv.run("conv", x=s["x"], slot_idx=s["slot_idx"]))
        if spec:
            drv.run("commit", accepted=s["accepted"])
    drv.execute()

    for i, s in enumerate(steps):
        x, slot_idx, accepted = s["x"], s["slot_idx"], s["accepted"]
        if spec:
            y_ops = conv1d_verify(ops, x, weight, slot_idx=slot_idx)
            conv1d_commit(ops, accepted, k, slot_idx=slot_idx)
            y_ref = conv1d_verify_reference(ref, x, weight, slot_idx=slot_idx)
            conv1d_commit_reference(ref, accepted, k, slot_idx=slot_idx)
        else:
            y_ops = conv1d_update(ops, x, weight, bias, slot_idx=slot_idx)
            y_ref = conv1d_update_reference(ref, x, weight, bias, slot_idx=slot_idx)
        _check_y(drv.out(runs[i], "y"), y_ops, y_ref, slot_idx >= 0, f"step {i}")
    _check_finals(drv, {pool_name: ops})


# ---- prefill (the context phase)

def _prefill_runs(drv, label, prompts, y_like, plugin):
    """Two prefill runs over the same pool (the second restarts its rows' slots); returns their indices. The
    prompt tensors are declared before the plugin that reads them (plugin: (name, fields, inputs))."""
    for name, t in prompts[0].items():
        drv.tensor(name, t, initial=False)
    drv.tensor("y", y_like, initial=False)
    drv.plugin(label, *plugin, output="y")
    return [drv.run(label, **p) for p in prompts]


def _check_prefill_y(y, y_ops, lengths, slot_idx, what):
    for b, s in enumerate(slot_idx.tolist()):
        n = int(lengths[b]) if s >= 0 else 0
        assert torch.equal(bits(y[b, :n]), bits(y_ops[b, :n])), f"{what}: row {b} differs from the ops"
        assert torch.isnan(y[b, n:].float()).all(), f"{what}: row {b} written past its prompt"


@pytest.mark.parametrize("family", ["mamba2", "gdn", "conv1d"])
def test_prefill_plugins_match_ops(tmp_path, family):
    """Two prompts' worth of context phase (mixed lengths, a padding row, shuffled slots of a larger pool) through
    the plugin, with TensorRT's workspace: y at the prompt tokens and the pool buffers equal the ops' bit for bit,
    y keeps the poison elsewhere."""
    torch.manual_seed(0)
    b, S, slots = 4, 6, 7
    lengths = [torch.tensor(v, dtype=torch.int32, device=DEV) for v in ([6, 1, 3, 5], [2, 6, 4, 1])]
    slot_idx = [torch.tensor(v, dtype=torch.int32, device=DEV) for v in ([5, -1, 0, 2], [2, 6, -1, 3])]
    cfg = ReplayConfig(8, "fp32", "bf16")
    drv = PluginDriver(tmp_path)
    if family == "mamba2":
        shape = Mamba2LayerShape(8, 64, 64, 2)
        pool = mamba2_cases.random_pool(shape, slots, cfg, DEV)
        A, D, dt_bias = mamba2_cases.layer_params(shape, DEV)
        fields, prompts = trt_plugins.mamba2_prefill_fields(shape, cfg), []
        for name, t in dict(A=A, D=D, dt_bias=dt_bias, state=pool.checkpoint, cursor=pool.cursor).items():
            drv.tensor(name, t)
        for i in range(2):
            inputs = mamba2_cases.step_inputs(shape, b * S, cfg.act_dtype, DEV)
            prompts.append({n: t.reshape(b, S, *t.shape[1:]) for n, t in zip(("x", "dt", "B", "C", "z"), inputs)})
            prompts[-1].update(lengths=lengths[i], slot_idx=slot_idx[i])
        run_ops = lambda p: prefill_ops.mamba2_prefill(pool, A=A, D=D, dt_bias=dt_bias, **p)  # noqa: E731
        y_like, finals, name, inputs = prompts[0]["x"], dict(state=pool.checkpoint, cursor=pool.cursor), \
            trt_plugins.MAMBA2_PREFILL, trt_plugins.mamba2_prefill_inputs(fields)
    elif family == "gdn":
        shape = GdnLayerShape(2, 4, 128, 64)
        pool = gdn_cases.random_pool(shape, slots, cfg, DEV)
        fields, prompts = trt_plugins.gdn_prefill_fields(shape, cfg), []
        for n, t in dict(state=pool.checkpoint, cursor=pool.cursor).items():
            drv.tensor(n, t)
        for i in range(2):
            inputs = gdn_cases.step_inputs(shape, b * S, cfg.act_dtype, DEV)
            prompts.append({n: t.reshape(b, S, *t.shape[1:]) for n, t in zip(("q", "k", "v", "g", "beta"), inputs)})
            prompts[-1].update(lengths=lengths[i], slot_idx=slot_idx[i])
        run_ops = lambda p: prefill_ops.gdn_prefill(pool, **PREPARED, **p)  # noqa: E731
        y_like, finals, name, inputs = prompts[0]["v"], dict(state=pool.checkpoint, cursor=pool.cursor), \
            trt_plugins.GDN_PREFILL, trt_plugins.gdn_prefill_inputs(fields)
    else:
        C, k = 200, 4
        state = torch.randn(slots, C, k - 1, device=DEV).to(torch.bfloat16)
        weight, bias = (torch.randn(C, k, device=DEV) * 0.5).bfloat16(), (torch.randn(C, device=DEV) * 0.1).bfloat16()
        fields = trt_plugins.conv1d_prefill_fields(C, k)
        for n, t in dict(weight=weight, bias=bias, state=state).items():
            drv.tensor(n, t)
        prompts = [dict(x=torch.randn(b, S, C, device=DEV).bfloat16(), lengths=lengths[i], slot_idx=slot_idx[i])
                   for i in range(2)]
        run_ops = lambda p: prefill_ops.conv1d_prefill(state, p["x"], weight, bias, lengths=p["lengths"],  # noqa: E731
                                                       slot_idx=p["slot_idx"])
        y_like, finals, name, inputs = prompts[0]["x"], dict(state=state), trt_plugins.CONV1D_PREFILL, \
            trt_plugins.conv1d_prefill_inputs(fields)
    runs = _prefill_runs(drv, "prefill", prompts, y_like, (name, fields, inputs))
    drv.execute()
    for i, p in enumerate(prompts):
        _check_prefill_y(drv.out(runs[i], "y"), run_ops(p), p["lengths"], p["slot_idx"], f"{family} run {i}")
    _check_finals(drv, finals)
