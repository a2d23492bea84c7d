"""The replay step's route policy (heads per output-only block, 0 = the combined kernel) from the library's own
host code (mamba2/decode.cuh, gdn/decode.cuh output_only_heads over common/decode_tiling.cuh split_route_heads),
built with nvcc into a small host program (tests/host/route_policy.cu). Runs without a GPU; skipped without nvcc.

The expectations are the policy as docs/mamba2.md and docs/gdn.md state it (set from H200 measurements,
their "Design alternatives measured" tables): Mamba-2, fp32 checkpoint: blocks of 8 heads, halved to 4 while 8 would give
fewer than 6 blocks per multiprocessor (12 ), the route from 6 blocks per
multiprocessor; nvfp4 copy: the most heads, from 2 blocks per multiprocessor; GDN: at most 8 heads, from 6 blocks
per multiprocessor (24 before the 8-lanes-per-row mapping). The tail launches
(A/B of `benchmarks/ab_variants.sh` on the H200): below 16 blocks per multiprocessor, two rounds of resident blocks in blocks of
half the heads, for GDN's blocks of 4 heads or more and Mamba-2's (fp32) of 8."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SMS = 132  # H200
SUPER = dict(nheads=128, rows=64, most=16)  # Nemotron-3-Super: H = 128, P = 64, 16 heads per group
QWEN122B = dict(nheads=64, rows=128, most=4)  # Qwen3.5-122B-A10B: HV = 64, V = 128, 4 value heads per key head


def _nvcc():
    for cand in (os.environ.get("CUDACXX"), shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"):
        if cand and Path(cand).is_file():
            return cand
    return None


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    nvcc = _nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found: the host policy program cannot be built")
    exe = tmp_path_factory.mktemp("route_policy") / "route_policy"
    subprocess.run([nvcc, "-std=c++17", "-O1", "-I", str(ROOT / "plugins" / "include"), "-o", str(exe),
                    str(ROOT / "tests" / "host" / "route_policy.cu")], check=True, capture_output=True)

    def run(family, batch, nheads, rows, most, sms=SMS, **env):
        clean = {k: v for k, v in os.environ.items() if k not in ("RSSM_ROUTES", "RSSM_OO_HEADS", "RSSM_OO_TAIL_ROWS")}
        clean.update(env)
        out = subprocess.run([str(exe), family, str(batch), str(nheads), str(rows), str(most), str(sms)],
                             check=True, capture_output=True, text=True, env=clean)
        return int(out.stdout)

    return run


@pytest.mark.parametrize("batch, heads", [(1, 0), (16, 0), (24, 0), (32, 4), (48, 4), (50, 8), (64, 8), (96, 8),
                                          (128, 8), (256, 8), (512, 8)])
def test_mamba2_fp32_super(policy, batch, heads):
    assert policy("mamba2", batch, **SUPER) == heads


@pytest.mark.parametrize("nheads, rows, most", [(128, 64, 16), (64, 64, 8), (128, 128, 8), (256, 64, 8),
                                                (64, 128, 16)])
def test_mamba2_fp32_rule(policy, nheads, rows, most):
    """The stated rule over batches 1..600 and several shapes: 0 or a divisor of `most`, at most 8 heads; taken
    only from 6 blocks per multiprocessor; fewer than 8 heads only while 8 would give fewer than 6 blocks per
    multiprocessor, and never below 4 or below the block's 128-row quantum."""
    for batch in range(1, 601, 7):
        h = policy("mamba2", batch, nheads, rows, most)
        if h == 0:
            for cand in (8, 4):
                if cand <= most and most % cand == 0 and cand * rows % 128 == 0 and batch * nheads // cand >= 6 * SMS:
                    pytest.fail(f"b{batch}: combined kernel although {cand}-head blocks fill the machine")
            continue
        assert most % h == 0 and h <= 8 and h * rows % 128 == 0, (batch, h)
        assert batch * (nheads // h) >= 6 * SMS, (batch, h)
        if h < min(8, most):
            assert h >= 4 and batch * (nheads // (2 * h)) < 6 * SMS, (batch, h)


def test_forced_routes(policy):
    assert policy("mamba2", 256, **SUPER, RSSM_ROUTES="combined") == 0
    assert policy("mamba2", 1, **SUPER, RSSM_ROUTES="split") == 4  # halved for the small launch, never below 4
    assert policy("mamba2", 256, **SUPER, RSSM_ROUTES="split", RSSM_OO_HEADS="16") == 16  # above the cap: A/B only
    assert policy("mamba2", 256, **SUPER, RSSM_OO_HEADS="3") == 8  # not a divisor of the most: ignored
    assert policy("gdn", 8, **QWEN122B, RSSM_ROUTES="split") == 4


@pytest.mark.parametrize("batch, heads", [(16, 0), (32, 0), (64, 16), (256, 16)])
def test_mamba2_nvfp4_super(policy, batch, heads):
    assert policy("mamba2_nvfp4", batch, **SUPER) == heads


@pytest.mark.parametrize("batch, heads", [(8, 0), (32, 0), (49, 0), (50, 4), (64, 4), (128, 4), (256, 4), (512, 4)])
def test_gdn_qwen122b(policy, batch, heads):
    assert policy("gdn", batch, **QWEN122B) == heads


@pytest.mark.parametrize("batch, rows", [(8, 0), (50, 16), (64, 16), (128, 16), (256, 0), (512, 0)])
def test_gdn_qwen122b_tail_launch(policy, batch, rows):
    """GDN's tail launch (gdn/decode.cuh output_only_tail): below 16 blocks per multiprocessor, two rounds of the
    multiprocessors' resident blocks (2 each) in blocks of half the heads: 2 * 2 * 132 / 32 = 16 rows at the 122B
    shape (4-head blocks, so 2-head tail blocks); none from b256 and none without the route."""
    assert policy("gdn_tail", batch, **QWEN122B) == rows


@pytest.mark.parametrize("batch, rows", [(32, 0), (48, 0), (50, 16), (64, 16), (128, 16), (132, 0), (256, 0)])
def test_mamba2_super_tail_launch(policy, batch, rows):
    """Mamba-2's tail launch (fp32 reads; mamba2/decode.cuh kFlushTail): 8-head blocks below 16 blocks per
    multiprocessor, two rounds of 2 resident blocks in 4-head blocks: 2 * 2 * 132 / 32 = 16 rows at the Super shape;
    none for 4-head blocks (b32, b48) and from 16 blocks per multiprocessor (b132: 2112 blocks)."""
    assert policy("mamba2_tail", batch, **SUPER) == rows


def test_gdn_tail_launch_limits(policy):
    """No tail launch for 2-head blocks (Qwen3.5-4B: 2 value heads per key head; tail blocks would take 1) nor
    for more than half the batch (a small forced launch), the override read at every launch, and never more rows
    than the batch."""
    assert policy("gdn_tail", 64, nheads=32, rows=128, most=2) == 0
    assert policy("gdn_tail", 30, **QWEN122B, RSSM_ROUTES="split") == 0
    assert policy("gdn_tail", 32, **QWEN122B, RSSM_ROUTES="split") == 16
    assert policy("gdn_tail", 64, **QWEN122B, RSSM_OO_TAIL_ROWS="0") == 0
    assert policy("gdn_tail", 256, **QWEN122B, RSSM_OO_TAIL_ROWS="40") == 40
    assert policy("gdn_tail", 8, **QWEN122B, RSSM_ROUTES="split", RSSM_OO_TAIL_ROWS="100") == 8


def test_zero_most_is_combined(policy):
    """A shape the output-only mapping does not take (most 0) keeps the combined kernel, forced or not."""
    assert policy("mamba2", 256, 128, 64, 0) == 0
    assert policy("mamba2", 256, 128, 64, 0, RSSM_ROUTES="split") == 0
