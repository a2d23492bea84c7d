"""The builder's rewrite with the kernels (H200): the same equivalence as tests/test_builder_rewrite.py, in fp32
and with bf16 activations, plus a long generation.

Bounds: fp32 as on the CPU (1e-4 on logits of magnitude ~1: the paths differ in summation order only). bf16:
the unmodified model keeps its SSM state and activations in bf16 while the rewrite keeps an fp32 checkpoint and
rounds only the ring records, so the two drift apart by bf16 rounding (~4e-3 relative per op); logits are
compared with 0.1 over 32 steps (a few bf16 ulps of the logit scale after 4 layers), tokens must match on this
seed. Long run: 520 tokens in fp32, L=16 (32 flush cycles), tokens identical and logits within 1e-3.
"""

import pytest
import torch

transformers = pytest.importorskip("transformers")

from builder.decode_loop import greedy_decode  # noqa: E402
from builder.rewrite import rewrite  # noqa: E402
from test_builder_rewrite import PROMPTS, make_model  # noqa: E402
from trtllm_replayssm.config import ReplayConfig  # noqa: E402

pytestmark = pytest.mark.gpu


def _pair(name, dtype, steps, L):
    model = make_model(name).to(device="cuda", dtype=dtype)
    ref = greedy_decode(model, PROMPTS, steps)
    rw = rewrite(model, ReplayConfig(L, "fp32", dtype), num_slots=8)
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
    ref, got = _pair(name, torch.bfloat16, 32, 8)
    assert got.tokens == ref.tokens
    assert (got.logits - ref.logits).abs().max().item() < 0.1


@pytest.mark.parametrize("name", ["nemotron_h", "qwen3_5"])
def test_kernels_long_generation(name):
    ref, got = _pair(name, torch.float32, 520, 16)
    assert got.tokens == ref.tokens
    assert (got.logits - ref.logits).abs().max().item() < 1e-3
