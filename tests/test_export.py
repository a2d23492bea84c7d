"""The whole-model ONNX export (builder/export.py) against the unmodified transformers models (CPU).

Tiny seeded random-weight Nemotron-H and Qwen3.5 configs (the rewrite tests' models) are exported per phase with
every SSM and conv1d step as a TensorRT plugin node; the graphs run with onnx.reference (builder/onnx_runner.py:
plugin nodes through the project's reference ops), the state kept outside the graphs and bound by name.

- prefill of prompts of different lengths into shuffled slots beside a padding row, then 14 decode steps with
  L = 4 (three flush cycles): greedy tokens equal transformers' and logits equal the eager network's;
- speculative decoding (T = 3): verify windows of drafts with random acceptance, then commit, gives the tokens
  of plain greedy decoding;
- slots no request uses hold poison that must come back bit-identical.
"""

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxscript")

from test_builder_rewrite import L, MODELS, PROMPTS, STEPS, make_model  # noqa: E402
from trtllm_replayssm import trt_plugins  # noqa: E402
from trtllm_replayssm.builder.decode_loop import greedy_decode  # noqa: E402
from trtllm_replayssm.builder.export import export_phases  # noqa: E402
from trtllm_replayssm.builder.onnx_runner import OnnxRunner  # noqa: E402
from trtllm_replayssm.config import ReplayConfig  # noqa: E402
from trtllm_replayssm.network import HybridLM, NetworkError  # noqa: E402

EXPORT_MODELS = [n for n in MODELS if n != "qwen3_next"]
SLOTS, NUM_SLOTS, MAX_SEQ = [5, 2, 7], 8, 40
LOGIT_TOL = 1e-4  # fp32 on both sides; the graphs and the eager network differ only in summation order


@pytest.fixture(autouse=True)
def _quiet():
    import warnings
    warnings.filterwarnings("ignore")


def _poisoned_state(net, spec_tokens=0):
    state = net.new_state(NUM_SLOTS, MAX_SEQ, spec_tokens)
    gen = torch.Generator().manual_seed(3)
    arrays = {}
    for n, t in state.tensors.items():
        if t.is_floating_point():
            scale = 1.0 if ".ring_" in n else 1e3  # ring records stay moderate (out-of-window records weigh 0)
            arrays[n] = (torch.randn(t.shape, generator=gen) * scale).to(t.dtype).numpy()
        else:
            arrays[n] = t.numpy().copy()
    return arrays


def _prompt_batch():
    rows = [list(p) for p in PROMPTS] + [[1]]  # a padding row
    S = max(len(p) for p in rows)
    ids = np.zeros((len(rows), S), dtype=np.int64)
    for r, p in enumerate(rows):
        ids[r, :len(p)] = p
    lengths = np.array([len(p) for p in rows], dtype=np.int32)
    return ids, lengths, np.array(SLOTS + [-1], dtype=np.int32)


def _check_untouched(state, poison):
    for n, t in state.items():
        rows = [s for s in range(NUM_SLOTS) if s not in SLOTS]
        assert np.array_equal(t[rows], poison[n][rows], equal_nan=True), f"{n}: a slot no request uses changed"


@pytest.mark.parametrize("mode", ["replay", "conventional"])
@pytest.mark.parametrize("name", EXPORT_MODELS)
def test_exported_graphs_decode_like_transformers(name, mode, tmp_path):
    model = make_model(name)
    ref = greedy_decode(model, PROMPTS, STEPS)
    net = HybridLM(model, mode=mode, replay=ReplayConfig(L, "fp32", "fp32", latency_route_bytes=0))
    graphs = export_phases(net, NUM_SLOTS, MAX_SEQ, tmp_path)
    assert [g.phase for g in graphs] == ["prefill", "decode"]
    plugins = {n.op_type for g in graphs for n in onnx.load(str(g.path), load_external_data=False).graph.node
               if n.domain == trt_plugins.PLUGIN_NAMESPACE}
    ssm = "Mamba2" if name == "nemotron_h" else "Gdn"
    assert plugins == {f"ReplaySSM{ssm}Prefill", "ReplaySSMConv1dPrefill", f"ReplaySSM{ssm}Decode", "ReplaySSMConv1d"}
    state = _poisoned_state(net)
    poison = {n: a.copy() for n, a in state.items()}
    eager = net.new_state(NUM_SLOTS, MAX_SEQ)
    for n, t in eager.tensors.items():
        t.copy_(torch.from_numpy(state[n]))
    runner = OnnxRunner({g.phase: g.path for g in graphs}, state)
    ids, lengths, slots = _prompt_batch()
    logits = runner.run("prefill", input_ids=ids, lengths=lengths, slot_idx=slots)["logits"]
    want = net.prefill(eager, torch.from_numpy(ids), torch.from_numpy(lengths), torch.from_numpy(slots))
    positions = lengths.astype(np.int64)
    tokens = [[] for _ in PROMPTS]
    for step in range(STEPS):
        live = logits[:len(PROMPTS)]
        err = np.abs(live - want[:len(PROMPTS)].numpy()).max()
        assert err < LOGIT_TOL, f"step {step}: logits differ from the eager network's by {err}"
        nxt = logits.argmax(-1)
        for r in range(len(PROMPTS)):
            tokens[r].append(int(nxt[r]))
        if step == STEPS - 1:
            break
        logits = runner.run("decode", input_ids=nxt, positions=positions, slot_idx=slots)["logits"]
        want = net.decode(eager, torch.from_numpy(nxt), torch.from_numpy(positions), torch.from_numpy(slots))
        positions = positions + 1
    assert tokens == ref.tokens
    _check_untouched(state, poison)
    if mode == "replay":  # the ring filled and flushed: cursors moved away from the empty ring
        cursors = [state[n][SLOTS] for n in state if n.endswith(".cursor")]
        assert any(c.any() for c in cursors)


@pytest.mark.parametrize("mode", ["replay", "conventional"])
@pytest.mark.parametrize("name", ["nemotron_h", "qwen3_5"])
def test_exported_verify_and_commit_decode_like_plain_greedy(name, mode, tmp_path):
    """Windows of T = 3 tokens (the last accepted token, then two drafts: the true continuation with random
    corruptions), verified and committed with the accepted count, reproduce plain greedy decoding."""
    T, steps = 3, 12
    model = make_model(name)
    ref = greedy_decode(model, PROMPTS, steps + T + 1)
    net = HybridLM(model, mode=mode, replay=ReplayConfig(2 * T + 2, "fp32", "fp32", latency_route_bytes=0))
    graphs = export_phases(net, NUM_SLOTS, MAX_SEQ, tmp_path, spec_tokens=T)
    assert [g.phase for g in graphs] == ["prefill", "verify", "commit"]
    state = _poisoned_state(net, T)
    poison = {n: a.copy() for n, a in state.items()}
    runner = OnnxRunner({g.phase: g.path for g in graphs}, state)
    ids, lengths, slots = _prompt_batch()
    logits = runner.run("prefill", input_ids=ids, lengths=lengths, slot_idx=slots)["logits"]
    b = len(slots)
    out = [[int(t)] for t in logits.argmax(-1)]
    positions = lengths.astype(np.int64)
    rng = np.random.default_rng(0)
    accepted_counts = set()
    while min(len(o) for o in out[:len(PROMPTS)]) < steps:
        window = np.zeros((b, T), dtype=np.int64)
        for r in range(b):
            window[r, 0] = out[r][-1]
            for j in range(1, T):
                i = len(out[r]) + j - 1  # the index of the draft in the request's generated tokens
                true = ref.tokens[r][i] if r < len(PROMPTS) and i < len(ref.tokens[r]) else 1
                window[r, j] = true if rng.random() < 0.6 else (true + 1) % net.vocab_size
        logits = runner.run("verify", input_ids=window, positions=positions, slot_idx=slots)["logits"]
        pred = logits.argmax(-1)  # [b, T]: the token after window[:, :s+1]
        accepted = np.ones(b, dtype=np.int32)
        for r in range(b):
            while accepted[r] < T and window[r, accepted[r]] == pred[r, accepted[r] - 1]:
                accepted[r] += 1
            out[r].extend(int(t) for t in pred[r, :accepted[r]])
        accepted_counts.update(int(a) for a in accepted[:len(PROMPTS)])
        runner.run("commit", accepted=accepted, slot_idx=slots)
        positions = positions + accepted
    for r in range(len(PROMPTS)):
        assert out[r][:steps] == ref.tokens[r][:steps], f"request {r}"
    assert len(accepted_counts) > 1, f"acceptance never varied ({accepted_counts})"
    _check_untouched(state, poison)


def test_export_refuses_a_read_copy(tmp_path):
    net = HybridLM(make_model("nemotron_h"), replay=ReplayConfig(L, "fp32", "fp32", read_format="bf16"))
    with pytest.raises(NetworkError, match="read_format='bf16'"):
        export_phases(net, NUM_SLOTS, MAX_SEQ, tmp_path)
    assert not any(tmp_path.iterdir())
