"""The builder's rewrite with the kernels (H200): the same equivalence as tests/test_builder_rewrite.py, in fp32
and with bf16 activations, plus a long generation.

Bounds: fp32 as on the CPU (1e-4 on logits of magnitude ~1: the paths differ in summation order only). bf16:
the unmodified model keeps its SSM state in bf16 while the rewrite keeps an fp32 checkpoint and rounds only the
ring records, so greedy tokens of the two can part at near ties after ~10-20 steps (seen on the H200 with these
random-weight models, which fall into repetitive loops). The bf16 test therefore teacher-forces all runs with
the fp32 model's greedy tokens and uses the fp32 model as the oracle: the rewritten bf16 model's logits must stay
within 2x the unmodified bf16 model's distance to it, over 32 steps at L=8 (4 flush cycles). 2x: the GDN ring
holds u in bf16, one rounding per token more than transformers' GDN path, which computes in fp32 (CPU reference
ops: Mamba-2 0.8x, GDN 1.4x). Long run: 520 tokens in fp32, L=16 (32 flush cycles), tokens identical and logits
within 1e-3.
"""

import pytest
import torch

transformers = pytest.importorskip("transformers")

from trtllm_replayssm.builder.decode_loop import greedy_decode  # noqa: E402
from trtllm_replayssm.builder.rewrite import rewrite  # noqa: E402
from test_builder_rewrite import PROMPTS, make_model  # noqa: E402
from trtllm_replayssm.config import ReplayConfig  # noqa: E402

pytestmark = pytest.mark.gpu


def _pair(name, dtype, steps, L):
    model = make_model(name).to(device="cuda", dtype=dtype)
    ref = greedy_decode(model, PROMPTS, steps)
    rw = rewrite(model, ReplayConfig(L, "fp32", dtype, latency_route_bytes=0), num_slots=8)  # the ring's cycles
    got = greedy_decode(model, PROMPTS, steps, rewrite=rw)
    rw.undo()
    return ref, got


@pytest.mark.parametrize("name", ["nemotron_h", "qwen3_5"])
def test_kernels_fp32(name):
    ref, got = _pair(name, torch.float32, 14, 4)
    assert got.tokens == ref.tokens
    assert (got.logits - ref.logits).abs().max().item() < 1e-4


@pytest.mark.parametrize("name", ["nemotron_h", "qwen3_5"])
def test_kernels_bf16(name):
    steps, L = 32, 8
    model = make_model(name).to(device="cuda")
    oracle = greedy_decode(model, PROMPTS, steps)  # fp32, unmodified
    forced = oracle.tokens
    model = model.to(torch.bfloat16)
    ref = greedy_decode(model, PROMPTS, steps, forced=forced)
    rw = rewrite(model, ReplayConfig(L, "fp32", torch.bfloat16, latency_route_bytes=0), num_slots=8)  # the ring
    got = greedy_decode(model, PROMPTS, steps, rewrite=rw, forced=forced)
    rw.undo()
    err_ref = (ref.logits - oracle.logits).abs().max().item()
    err_got = (got.logits - oracle.logits).abs().max().item()
    assert torch.isfinite(got.logits).all()
    assert err_got <= 2.0 * err_ref, f"rewrite bf16 error {err_got:.3g} vs unmodified bf16 {err_ref:.3g}"


@pytest.mark.parametrize("name", ["nemotron_h", "qwen3_5"])
def test_kernels_long_generation(name):
    ref, got = _pair(name, torch.float32, 520, 16)
    assert got.tokens == ref.tokens
    assert (got.logits - ref.logits).abs().max().item() < 1e-3
