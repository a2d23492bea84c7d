"""The builder's rewrite against the unmodified transformers models (CPU, PyTorch reference ops).

Tiny seeded random-weight configs of each supported architecture decode a batch of prompts of different
lengths greedily, once as transformers ships them and once rewritten to ReplaySSM (L=4, 14 generated tokens:
3 flush cycles past the prefill). Tokens must be identical and logits close: fp32 everywhere, and the two paths
differ only in the order of the state's summations (sequential update vs checkpoint + replayed ring), so the
logits agree to ~1e-6 of their magnitude; the bound is 1e-4. A negative control permutes the checkpoints after
the prefill hand-off and must move the logits by far more than the bound. The mixers are set to slow decay
(A ~ -0.1, dt ~ 0.13), a larger output projection and (Mamba-2) no D skip, so the SSM state visibly shapes
the logits.
"""

import math
import sys

import pytest
import torch

transformers = pytest.importorskip("transformers")

from trtllm_replayssm.builder.decode_loop import SlotAllocator, greedy_decode  # noqa: E402
from trtllm_replayssm.builder.rewrite import RewriteError, rewrite  # noqa: E402
from trtllm_replayssm.config import ReplayConfig  # noqa: E402
from trtllm_replayssm.model_config import analyze  # noqa: E402

PROMPTS = [[5, 6, 7, 8, 9], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], [11, 12, 13]]
STEPS, L, LOGIT_TOL = 14, 4, 1e-4

QWEN_COMMON = dict(hidden_size=128, num_hidden_layers=4,
                   layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"],
                   linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=64,
                   linear_value_head_dim=64, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                   vocab_size=256)
MOE = dict(moe_intermediate_size=64, shared_expert_intermediate_size=64, num_experts=4, num_experts_per_tok=2)


def _nemotron_h():
    cfg = transformers.NemotronHConfig(hidden_size=128, hybrid_override_pattern="M*M-", num_hidden_layers=4,
                                       mamba_num_heads=4, mamba_head_dim=64, ssm_state_size=64, n_groups=2,
                                       conv_kernel=4, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                                       intermediate_size=256, vocab_size=256, torch_dtype="float32")
    return transformers.NemotronHForCausalLM(cfg)


def _qwen3_5():
    return transformers.Qwen3_5ForCausalLM(transformers.Qwen3_5TextConfig(**QWEN_COMMON, intermediate_size=256))


def _qwen3_5_moe():
    return transformers.Qwen3_5MoeForCausalLM(transformers.Qwen3_5MoeTextConfig(**QWEN_COMMON, **MOE))


def _qwen3_next():
    return transformers.Qwen3NextForCausalLM(transformers.Qwen3NextConfig(**QWEN_COMMON, intermediate_size=256, **MOE))


MODELS = {"nemotron_h": _nemotron_h, "qwen3_5": _qwen3_5, "qwen3_5_moe": _qwen3_5_moe, "qwen3_next": _qwen3_next}


def make_model(name):
    torch.manual_seed(0)
    model = MODELS[name]().eval()
    with torch.no_grad():
        for m in model.modules():
            if hasattr(m, "A_log") and hasattr(m, "out_proj"):
                m.A_log.fill_(math.log(0.1))
                m.dt_bias.fill_(-2.0)
                m.out_proj.weight.mul_(20.0)
                if hasattr(m, "D"):
                    m.D.zero_()  # Mamba-2: y is the state's read-out alone, not dominated by the D x skip
    return model


@pytest.fixture(autouse=True)
def _quiet(monkeypatch):
    import warnings
    warnings.filterwarnings("ignore")


@pytest.mark.parametrize("latency_route_bytes", [0, None], ids=["ring", "default"])
@pytest.mark.parametrize("name", list(MODELS))
def test_rewritten_model_decodes_like_transformers(name, latency_route_bytes):
    """Greedy decoding through the rewritten model equals transformers' (tokens, logits within LOGIT_TOL), with
    the ring (latency route off) and with the library's default (these small steps take the latency route)."""
    model = make_model(name)
    ref = greedy_decode(model, PROMPTS, STEPS)
    rw = rewrite(model, ReplayConfig(L, "fp32", "fp32", latency_route_bytes=latency_route_bytes), num_slots=8)
    kinds = {layer.kind for layer in rw.layers.values()}
    assert kinds == ({"mamba2"} if name == "nemotron_h" else {"gdn"})
    # Slots out of order, from an allocator with some slots taken: slot indices are exercised.
    alloc = SlotAllocator(8)
    taken = alloc.acquire(3)
    got = greedy_decode(model, PROMPTS, STEPS, rewrite=rw, allocator=alloc)
    assert got.tokens == ref.tokens
    err = (got.logits - ref.logits).abs().max().item()
    assert err < LOGIT_TOL, f"logits differ by {err}"
    # Every used slot was released (zeroed) and returned to the allocator.
    assert sorted(alloc.free) == sorted(set(range(8)) - set(taken))
    for layer in rw.layers.values():
        assert int(layer.pool.cursor.abs().sum()) == 0 and float(layer.pool.checkpoint.abs().sum()) == 0.0

    # Negative control: a wrong checkpoint after the hand-off must show.
    load = rw.load_prefill

    def corrupted(cache, slots, rows=None):
        load(cache, slots, rows)
        for layer in rw.layers.values():
            layer.pool.checkpoint.copy_(layer.pool.checkpoint.roll(1, dims=-1))

    rw.load_prefill = corrupted
    bad = greedy_decode(model, PROMPTS, STEPS, rewrite=rw)
    assert (bad.logits - ref.logits).abs().max().item() > 100 * LOGIT_TOL

    # Undo restores the model exactly.
    rw.undo()
    again = greedy_decode(model, PROMPTS, STEPS)
    assert torch.equal(again.logits, ref.logits)
    assert all("forward" not in m.__dict__ for m in model.modules())


@pytest.mark.parametrize("name", list(MODELS))
def test_dry_run_plan_matches_the_model(name):
    """The plan read from the model's config alone (what `build --dry-run` prints) names exactly the layers the
    rewrite finds in the instantiated model, with the same shapes."""
    model = make_model(name)
    plan = analyze(model.config.to_dict())
    rw = rewrite(model, ReplayConfig(L, "fp32", "fp32"), num_slots=2)
    planned = {layer.index: layer.shape for layer in plan.layers if layer.kind in ("mamba2", "gdn")}
    found = {idx: layer.pool.shape for idx, layer in rw.layers.items()}
    rw.undo()
    assert planned == found


def test_undo_restores_the_modeling_functions():
    model = make_model("qwen3_5")
    modeling = sys.modules[type(model).__module__]
    before = modeling.torch_recurrent_gated_delta_rule
    rw = rewrite(model, ReplayConfig(L, "fp32", "fp32"), num_slots=2)
    assert modeling.torch_recurrent_gated_delta_rule is not before
    rw.undo()
    assert modeling.torch_recurrent_gated_delta_rule is before


def test_second_batch_reuses_released_slots():
    model = make_model("nemotron_h")
    rw = rewrite(model, ReplayConfig(L, "fp32", "fp32"), num_slots=3)
    first = greedy_decode(model, PROMPTS, 6, rewrite=rw)
    second = greedy_decode(model, PROMPTS[::-1], 6, rewrite=rw)
    assert second.tokens == first.tokens[::-1]


def test_rewrite_refuses_models_without_ssm_layers():
    cfg = transformers.LlamaConfig(hidden_size=64, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                                   vocab_size=64)
    with pytest.raises(RewriteError, match="no SSM mixer this rewrite knows"):
        rewrite(transformers.LlamaForCausalLM(cfg))


def test_rewrite_refuses_unsupported_head_dims():
    torch.manual_seed(0)
    cfg = transformers.NemotronHConfig(hidden_size=64, hybrid_override_pattern="M-", num_hidden_layers=2,
                                       mamba_num_heads=2, mamba_head_dim=32, ssm_state_size=64, n_groups=1,
                                       num_attention_heads=2, num_key_value_heads=1, head_dim=32,
                                       intermediate_size=64, vocab_size=64)
    with pytest.raises(RewriteError, match="head_dim=32 is not supported"):
        rewrite(transformers.NemotronHForCausalLM(cfg))


def test_too_many_requests_for_the_slots():
    model = make_model("qwen3_5")
    rw = rewrite(model, ReplayConfig(L, "fp32", "fp32"), num_slots=2)
    with pytest.raises(RuntimeError, match="3 slots requested, 2 free"):
        greedy_decode(model, PROMPTS, 2, rewrite=rw)


@pytest.mark.parametrize("name", ["nemotron_h", "qwen3_5"])
def test_bf16_rewrite_is_no_farther_from_fp32_than_the_bf16_model(name):
    """bf16 activations (CPU reference ops): every run is teacher-forced with the fp32 model's greedy tokens, and
    the fp32 model is the oracle. The rewrite's logits must stay within 2x the unmodified bf16 model's distance
    to it: the rewrite keeps an fp32 checkpoint (Mamba-2: closer than the model's bf16 state, ~0.8x here), but
    its GDN ring holds the updates u in bf16, one rounding per token more than transformers' GDN path, which
    runs in fp32 (~1.4x here). The GPU test does the same with the kernels."""
    model = make_model(name)
    oracle = greedy_decode(model, PROMPTS, 2 * STEPS)
    model = model.to(torch.bfloat16)
    ref = greedy_decode(model, PROMPTS, 2 * STEPS, forced=oracle.tokens)
    rw = rewrite(model, ReplayConfig(L, "fp32", torch.bfloat16, latency_route_bytes=0), num_slots=4)  # the ring
    got = greedy_decode(model, PROMPTS, 2 * STEPS, rewrite=rw, forced=oracle.tokens)
    rw.undo()
    err_ref = (ref.logits - oracle.logits).abs().max().item()
    err_got = (got.logits - oracle.logits).abs().max().item()
    assert err_ref > 0  # bf16 does round: the comparison is not vacuous
    assert err_got <= 2.0 * err_ref, f"rewrite bf16 error {err_got:.3g} vs unmodified bf16 {err_ref:.3g}"


def test_forced_tokens_replace_the_argmax():
    model = make_model("nemotron_h")
    free = greedy_decode(model, PROMPTS, 6)
    forced = [[(t + 1) % 256 for t in toks] for toks in free.tokens]
    again = greedy_decode(model, PROMPTS, 6, forced=forced)
    assert torch.equal(again.logits[0], free.logits[0])  # the first logits come from the prefill
    assert not torch.allclose(again.logits[1:], free.logits[1:])  # later ones follow the forced tokens
