"""The network definition (trtllm_replayssm/network) against the unmodified transformers models (CPU,
PyTorch reference ops).

Tiny seeded random-weight configs of each supported architecture (the rewrite tests' models: slow decay, a
larger output projection, no D skip, so the SSM state visibly shapes the logits) decode prompts of different
lengths greedily: once as transformers ships them (tests/test_builder_rewrite.greedy_decode, left padding) and
once through the network (right-padded prefill into shuffled slots beside a padding row, then decode steps:
L=4 and 14 tokens are 3 flush cycles). Tokens must be identical and logits within LOGIT_TOL (fp32; the paths
differ only in summation order). Slots the requests do not use hold poison and must be bit-identical
afterwards.
"""

import pytest
import torch

transformers = pytest.importorskip("transformers")

from test_builder_rewrite import L, LOGIT_TOL, MODELS, PROMPTS, STEPS, make_model  # noqa: E402
from trtllm_replayssm.builder.decode_loop import greedy_decode  # noqa: E402
from trtllm_replayssm.config import ReplayConfig  # noqa: E402
from trtllm_replayssm.network import HybridLM, NetworkError, load_network  # noqa: E402

NETWORK_MODELS = [n for n in MODELS if n != "qwen3_next"]
SLOTS = [5, 2, 7]


def _network_greedy(net, prompts, steps, slots, num_slots=8, pad_row=True):
    """Greedy tokens and logits [steps, b, vocab] through the network: right-padded prefill, then decode."""
    dev = net.lm_head.weight.device
    state = net.new_state(num_slots, 64)
    for n, t in state.tensors.items():
        if t.is_floating_point():
            # Ring records must stay finite and moderate (pool.py: out-of-window records get zero weights).
            t.normal_().mul_(1.0 if ".ring_" in n else 1e3)
    poison = {n: t.clone() for n, t in state.tensors.items()}
    rows = [list(p) for p in prompts] + ([[1]] if pad_row else [])
    slot_idx = torch.tensor(slots + ([-1] if pad_row else []), dtype=torch.int32, device=dev)
    S = max(len(p) for p in rows)
    ids = torch.zeros(len(rows), S, dtype=torch.long)
    for r, p in enumerate(rows):
        ids[r, :len(p)] = torch.tensor(p)
    ids = ids.to(dev)
    lengths = torch.tensor([len(p) for p in rows], dtype=torch.int32, device=dev)
    logits = net.prefill(state, ids, lengths, slot_idx)
    positions = lengths.long()
    out_tokens, out_logits = [[] for _ in prompts], []
    for step in range(steps):
        out_logits.append(logits[:len(prompts)])
        nxt = logits.argmax(-1)
        for r in range(len(prompts)):
            out_tokens[r].append(int(nxt[r]))
        if step == steps - 1:
            break
        logits = net.decode(state, nxt, positions, slot_idx)
        positions = positions + 1
    untouched = [s for s in range(num_slots) if s not in slots]
    return out_tokens, torch.stack(out_logits).cpu(), state, poison, untouched


@pytest.fixture(autouse=True)
def _quiet():
    import warnings
    warnings.filterwarnings("ignore")


@pytest.mark.parametrize("mode", ["replay", "conventional"])
@pytest.mark.parametrize("name", NETWORK_MODELS)
def test_network_decodes_like_transformers(name, mode):
    model = make_model(name)
    ref = greedy_decode(model, PROMPTS, STEPS)
    net = HybridLM(model, mode=mode, replay=ReplayConfig(L, "fp32", "fp32", latency_route_bytes=0))
    tokens, logits, state, poison, untouched = _network_greedy(net, PROMPTS, STEPS, SLOTS)
    assert tokens == ref.tokens
    err = (logits - ref.logits).abs().max().item()
    assert err < LOGIT_TOL, f"logits differ by {err}"
    for n, t in state.tensors.items():
        assert torch.equal(t[untouched], poison[n][untouched]), f"{n}: a slot no request uses was written"


@pytest.mark.parametrize("name", NETWORK_MODELS)
def test_checkpoint_handoff_shapes_the_logits(name, monkeypatch):
    """Negative control: corrupting the SSM checkpoints after prefill must move the logits far beyond the bound
    (the comparison above can fail)."""
    net = HybridLM(make_model(name), replay=ReplayConfig(L, "fp32", "fp32", latency_route_bytes=0))
    _, good = _network_greedy(net, PROMPTS, STEPS, SLOTS)[:2]
    prefill = net.prefill

    def corrupted(state, *args):
        logits = prefill(state, *args)
        for pool in state.pools.values():
            pool.checkpoint.copy_(pool.checkpoint.roll(1, dims=-1))
        return logits

    monkeypatch.setattr(net, "prefill", corrupted)
    _, bad = _network_greedy(net, PROMPTS, STEPS, SLOTS)[:2]
    assert (bad - good).abs().max().item() > 100 * LOGIT_TOL


def test_load_network_from_a_model_directory(tmp_path):
    """A directory of config.json + safetensors loads with its weights: the same logits as the model object."""
    model = make_model("qwen3_5")
    model.save_pretrained(tmp_path, safe_serialization=True)
    a = HybridLM(make_model("qwen3_5"), replay=ReplayConfig(L, "fp32", "fp32"))
    b = load_network(str(tmp_path), replay=ReplayConfig(L, "fp32", "fp32"))
    sa, sb = a.new_state(2, 16), b.new_state(2, 16)
    ids, lens, slots = torch.tensor([[1, 2, 3]]), torch.tensor([3], dtype=torch.int32), torch.tensor([1], dtype=torch.int32)
    assert torch.equal(a.prefill(sa, ids, lens, slots), b.prefill(sb, ids, lens, slots))
    for f in tmp_path.glob("*.safetensors"):
        f.write_bytes(b"")
    with pytest.raises(Exception):
        load_network(str(tmp_path))


def test_bundled_default_loads_and_decodes():
    net = load_network()
    state = net.new_state(2, 32)
    logits = net.prefill(state, torch.tensor([[1, 2, 3, 4]]), torch.tensor([4], dtype=torch.int32),
                         torch.tensor([1], dtype=torch.int32))
    assert logits.shape == (1, net.vocab_size) and bool(torch.isfinite(logits).all())


@pytest.mark.parametrize("patch, words", [
    ({"mamba_head_dim": 96}, ["head_dim=96"]),
    ({"conv_kernel": 7}, ["conv_kernel=7"]),
    ({"model_type": "llama"}, ["llama"]),
])
def test_unsupported_models_are_refused_before_building(tmp_path, patch, words):
    import json
    from trtllm_replayssm.model_config import load_config
    cfg = load_config("nemotron_h_tiny") | patch
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(NetworkError) as e:
        load_network(str(tmp_path))
    for w in words:
        assert w in str(e.value)


@pytest.mark.parametrize("mode", ["replay", "conventional"])
@pytest.mark.parametrize("name", NETWORK_MODELS)
def test_verify_and_commit_equal_plain_decoding(name, mode):
    """Speculative steps (windows of T=3: the last accepted token, then drafts) with random acceptance give, at
    every accepted position, the logits plain decoding gives there; rejected drafts (random tokens) leave no
    trace. 12 windows at L=8 pass several flushes."""
    net = HybridLM(make_model(name), mode=mode, replay=ReplayConfig(8, "fp32", "fp32", latency_route_bytes=0))
    check_verify_and_commit(net, LOGIT_TOL)


def check_verify_and_commit(net, tol, T=3, windows=12):
    """Plain decoding of two prompts, then the same streams through verify + commit windows with random
    acceptance (drafts past the accepted count are random tokens): logits equal at every accepted position."""
    dev = net.lm_head.weight.device
    g = torch.Generator().manual_seed(1)
    prompts = [[5, 6, 7, 8, 9], [11, 12, 13]]
    slots = torch.tensor([3, 1], dtype=torch.int32, device=dev)
    plain = net.new_state(4, 64)
    ids = torch.tensor([p + [0] * (5 - len(p)) for p in prompts], device=dev)
    lengths = torch.tensor([len(p) for p in prompts], dtype=torch.int32, device=dev)
    logits = net.prefill(plain, ids, lengths, slots)
    stream = [list(p) for p in prompts]
    plain_logits = [dict() for _ in prompts]  # position of the input token -> logits predicting the next one
    pos = lengths.long().clone()
    for r in range(2):
        plain_logits[r][int(pos[r]) - 1] = logits[r]
    for _ in range(T * windows):
        nxt = logits.argmax(-1)
        for r in range(2):
            stream[r].append(int(nxt[r]))
        logits = net.decode(plain, nxt, pos, slots)
        for r in range(2):
            plain_logits[r][int(pos[r])] = logits[r]
        pos = pos + 1
    spec = net.new_state(4, 64, spec_tokens=T)
    net.prefill(spec, ids, lengths, slots)
    p = lengths.long().clone()  # next position to verify: its input is stream[r][p]
    for _ in range(windows):
        window = torch.empty(2, T, dtype=torch.long)
        accepted = torch.randint(1, T + 1, (2,), generator=g, dtype=torch.int32)
        for r in range(2):
            for s in range(T):
                true = stream[r][int(p[r]) + s]
                window[r, s] = true if s < int(accepted[r]) else int(torch.randint(0, 256, (1,), generator=g))
        out = net.verify(spec, window.to(dev), p, slots)
        for r in range(2):
            for s in range(int(accepted[r])):
                want = plain_logits[r][int(p[r]) + s]
                err = (out[r, s] - want).abs().max().item()
                assert err < tol, f"row {r} position {int(p[r]) + s}: logits differ by {err}"
        net.commit(spec, accepted.to(dev), slots)
        p = p + accepted.to(dev).long()


def test_spec_state_limits_are_refused():
    net = HybridLM(make_model("nemotron_h"), replay=ReplayConfig(4, "fp32", "fp32"))
    with pytest.raises(NetworkError, match="buffer_len=4"):
        net.new_state(2, 16, spec_tokens=3)
    with pytest.raises(NetworkError, match="spec_tokens=9"):
        net.new_state(2, 16, spec_tokens=9)


def test_nemotron_checkpoint_names_and_saved_config_load(tmp_path):
    """A Nemotron-H directory as transformers saves it (weights under `backbone.`, time_step_limit with an encoded
    infinity) loads with its weights."""
    import json

    from safetensors.torch import save_file
    model = make_model("nemotron_h")
    sd = {("backbone." + k[len("model."):] if k.startswith("model.") else k): v.contiguous()
          for k, v in model.state_dict().items()}
    save_file(sd, str(tmp_path / "model.safetensors"))
    cfg = model.config.to_dict() | {"time_step_limit": [0.0, {"__float__": "Infinity"}]}
    (tmp_path / "config.json").write_text(json.dumps(cfg, default=str))
    net = load_network(str(tmp_path), replay=ReplayConfig(L, "fp32", "fp32"))
    ref = HybridLM(make_model("nemotron_h"), replay=ReplayConfig(L, "fp32", "fp32"))
    s1, s2 = net.new_state(2, 16), ref.new_state(2, 16)
    ids, lens, slots = torch.tensor([[4, 5, 6]]), torch.tensor([3], dtype=torch.int32), torch.tensor([0], dtype=torch.int32)
    assert torch.equal(net.prefill(s1, ids, lens, slots), ref.prefill(s2, ids, lens, slots))


@pytest.mark.parametrize("name", ["nemotron_h", "qwen3_5"])
def test_mixers_take_the_gated_norm_op_only_on_in_place_ops(name, monkeypatch):
    """Where the fused norm applies (forced here: on CPU the op runs its reference), the runtime's in-place ops
    call gated_rmsnorm once per SSM layer and step and give the module path's logits bit for bit (bf16 model);
    the export's functional ops keep the transformers module (the op is never called, the exported graph is
    unchanged)."""
    from trtllm_replayssm.network import state_ops
    from trtllm_replayssm.ops import norm as norm_ops
    net = HybridLM(make_model(name).to(torch.bfloat16), replay=ReplayConfig(L, "fp32", "bf16"))
    ssm_layers = sum(1 for m in net.modules() if hasattr(m, "pool_cls") and m.pool_cls is not None)
    assert ssm_layers > 0

    def run(applies, ops):
        calls = []
        real = norm_ops.gated_rmsnorm
        monkeypatch.setattr(norm_ops, "kernel_applies", lambda *a: applies)
        monkeypatch.setattr(norm_ops, "gated_rmsnorm", lambda *a, **k: calls.append(1) or real(*a, **k))
        state = net.new_state(4, 32)
        ids, lens = torch.tensor([[4, 5, 6], [7, 8, 0]]), torch.tensor([3, 2], dtype=torch.int32)
        slots = torch.tensor([2, 0], dtype=torch.int32)
        net.prefill(state, ids, lens, slots)
        calls.clear()
        logits = net.decode(state, torch.tensor([9, 10]), lens.long(), slots, ops=ops)
        monkeypatch.undo()
        return logits, len(calls)

    module_logits, n = run(False, state_ops.IN_PLACE)
    assert n == 0
    fused_logits, n = run(True, state_ops.IN_PLACE)
    assert n == ssm_layers, f"{n} gated_rmsnorm calls in a decode step of {ssm_layers} SSM layers"
    assert torch.equal(fused_logits, module_logits), "the op's logits differ from the module's"
    _, n = run(True, state_ops.FUNCTIONAL)
    assert n == 0, "the export's functional ops called the fused norm"
