"""The network definition on the kernels (CUDA): greedy tokens against the unmodified transformers model on the
same GPU (fp32: logits within 1e-4, as tests/test_builder_rewrite_gpu.py), speculative verify + commit against
plain decoding, the context phase's prefill kernels, and a decode step captured in a CUDA graph (what the
runtime replays) bitwise equal to the eager step."""

import pytest
import torch

transformers = pytest.importorskip("transformers")

from test_builder_rewrite import PROMPTS, STEPS, make_model  # noqa: E402
from test_network import NETWORK_MODELS, SLOTS, _network_greedy, check_verify_and_commit  # noqa: E402
from trtllm_replayssm.builder.decode_loop import greedy_decode  # noqa: E402
from trtllm_replayssm.config import ReplayConfig  # noqa: E402
from trtllm_replayssm.network import HybridLM  # noqa: E402

pytestmark = pytest.mark.gpu
TOL = 1e-4


@pytest.mark.parametrize("mode", ["replay", "conventional"])
@pytest.mark.parametrize("name", NETWORK_MODELS)
def test_network_on_kernels_decodes_like_transformers(name, mode):
    model = make_model(name).cuda()
    ref = greedy_decode(model, PROMPTS, STEPS)
    net = HybridLM(model, mode=mode, replay=ReplayConfig(4, "fp32", "fp32", latency_route_bytes=0))
    tokens, logits, state, poison, untouched = _network_greedy(net, PROMPTS, STEPS, SLOTS)
    assert tokens == ref.tokens
    err = (logits - ref.logits.cpu()).abs().max().item()
    assert err < TOL, f"logits differ by {err}"
    for n, t in state.tensors.items():
        assert torch.equal(t[untouched], poison[n][untouched]), f"{n}: a slot no request uses was written"


@pytest.mark.parametrize("mode", ["replay", "conventional"])
@pytest.mark.parametrize("name", ["nemotron_h", "qwen3_5"])
def test_network_verify_and_commit_on_kernels(name, mode):
    net = HybridLM(make_model(name).cuda(), mode=mode, replay=ReplayConfig(8, "fp32", "fp32", latency_route_bytes=0))
    check_verify_and_commit(net, TOL)


@pytest.mark.parametrize("name", ["nemotron_h", "qwen3_5"])
def test_decode_in_a_cuda_graph_equals_eager(name):
    """A decode step captured once and replayed over several steps (flushes included) gives the eager steps'
    logits and state bit for bit; padding rows (slot -1) included."""
    net = HybridLM(make_model(name).cuda().to(torch.bfloat16), replay=ReplayConfig(4, "fp32", "bf16"))
    dev = torch.device("cuda")
    slots = torch.tensor([6, -1, 0, 3], dtype=torch.int32, device=dev)
    ids = torch.tensor([[5, 6, 7, 8], [1, 1, 1, 1], [9, 10, 0, 0], [2, 3, 4, 0]], device=dev)
    lengths = torch.tensor([4, 1, 2, 3], dtype=torch.int32, device=dev)
    eager = net.new_state(8, 64)
    net.prefill(eager, ids, lengths, slots)
    graphed = net.new_state(8, 64)
    for k, t in eager.tensors.items():
        graphed.tensors[k].copy_(t)
    tok = torch.tensor([11, 12, 13, 14], device=dev)
    pos = lengths.long().clone()
    static_tok, static_pos = tok.clone(), pos.clone()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm-up outside the graph on a copy of the state
        warm = net.new_state(8, 64)
        net.decode(warm, static_tok, static_pos, slots)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = net.decode(graphed, static_tok, static_pos, slots)
    for _ in range(6):
        want = net.decode(eager, tok, pos, slots)
        static_tok.copy_(tok)
        static_pos.copy_(pos)
        graph.replay()
        live = slots >= 0
        assert torch.equal(static_out[live], want[live])
        tok, pos = want.argmax(-1), pos + 1
    for k in eager.tensors:
        if k.endswith(("k_cache", "v_cache")):  # the spare row takes the padding row's writes in both
            assert torch.equal(eager[k][:-1], graphed[k][:-1]), k
        else:
            assert torch.equal(eager[k], graphed[k]), k


@pytest.mark.parametrize("name", ["nemotron_h", "qwen3_5"])
def test_mixers_run_the_fused_norm_on_cuda(name, monkeypatch):
    """On CUDA with the kernel library, every SSM layer's gated RMSNorm of a decode step is the fused kernel
    (one call per layer), and the logits stay within TOL of the transformers-module path (fp32)."""
    from trtllm_replayssm.ops import norm as norm_ops
    net = HybridLM(make_model(name).cuda(), replay=ReplayConfig(4, "fp32", "fp32", latency_route_bytes=0))
    ssm_layers = sum(1 for m in net.modules() if getattr(m, "pool_cls", None) is not None)
    dev = torch.device("cuda")
    ids, lens = torch.tensor([[4, 5, 6], [7, 8, 0]], device=dev), torch.tensor([3, 2], dtype=torch.int32, device=dev)
    slots = torch.tensor([2, 0], dtype=torch.int32, device=dev)

    def decode(fused):
        state = net.new_state(4, 32)
        net.prefill(state, ids, lens, slots)
        calls = []
        real, applies = norm_ops.gated_rmsnorm, norm_ops.kernel_applies
        monkeypatch.setattr(norm_ops, "gated_rmsnorm", lambda *a, **k: calls.append(1) or real(*a, **k))
        monkeypatch.setattr(norm_ops, "kernel_applies", lambda *a: fused and applies(*a))
        logits = net.decode(state, torch.tensor([9, 10], device=dev), lens.long(), slots)
        monkeypatch.undo()
        return logits, len(calls)

    fused_logits, n = decode(True)
    assert n == ssm_layers, f"{n} fused norm calls in a decode step of {ssm_layers} SSM layers"
    module_logits, n = decode(False)
    assert n == 0
    err = (fused_logits - module_logits).abs().max().item()
    assert err < TOL, f"logits differ by {err}"
