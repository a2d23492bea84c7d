"""Memory planner and model analysis, checked against hand-computed cases."""

import re

import pytest

from trtllm_replayssm.cli import main
from trtllm_replayssm.model_config import analyze, load_config
from trtllm_replayssm.planner import PlanSettings, max_requests, request_bytes

TINY = analyze(load_config())  # 4 Mamba-2 layers (H=16, P=64, N=128, G=4, conv 4), 1 attention (2 x 64)


def test_tiny_by_hand():
    s = PlanSettings(context_len=8192, T=4, buffer_len=16)
    conv_channels = 16 * 64 + 2 * 4 * 128
    state = 16 * 64 * 128 * 4
    assert request_bytes(TINY, "conventional", s) == {
        "ssm": 4 * state, "conv": 4 * 3 * conv_channels * 2, "kv": 2 * 2 * 64 * 8192 * 2,
        "total": 4 * state + 4 * 3 * conv_channels * 2 + 2 * 2 * 64 * 8192 * 2}
    spec = request_bytes(TINY, "conventional_spec", s)
    assert spec["ssm"] == 4 * 4 * state and spec["conv"] == 4 * 4 * 3 * conv_channels * 2
    assert spec["kv"] == 2 * 2 * 64 * (8192 + 3) * 2
    ring16 = 16 * 16 * 64 * 2 + 4 * 16 * 128 * 2 + 16 * 16 * 4 + 16 * 8 * 2 * 4
    assert request_bytes(TINY, "replay", s)["ssm"] == 4 * (state + ring16)
    ring20 = 16 * 20 * 64 * 2 + 4 * 20 * 128 * 2 + 16 * 20 * 4 + 16 * 8 * 2 * 4  # L = 16 + T
    r = request_bytes(TINY, "replay_spec", s)
    assert r["ssm"] == 4 * (state + ring20) and r["conv"] == 4 * (3 + 4) * conv_channels * 2
    total = r["total"]
    assert max_requests(TINY, "replay_spec", s, gpu_bytes=1e9, weight_bytes=0.4e9) == int(0.6e9 // total)
    assert max_requests(TINY, "replay_spec", s, gpu_bytes=1e9, weight_bytes=2e9) == 0


def test_speculative_ring_must_hold_two_windows():
    with pytest.raises(ValueError, match="spec_buffer_len=7 is below 2T=8"):
        request_bytes(TINY, "replay_spec", PlanSettings(T=4, spec_buffer_len=7))


@pytest.mark.parametrize("name, counts, ssm_shape", [
    ("nemotron3_super", {"mamba2": 40, "attention": 8}, (128, 64, 128, 8)),
    ("nemotron3_nano_30b", {"mamba2": 23, "attention": 6}, (64, 64, 128, 8)),
    ("qwen3_5_4b", {"gdn": 24, "attention": 8}, (16, 32, 128, 128)),
    ("qwen3_5_122b_a10b", {"gdn": 36, "attention": 12}, (16, 64, 128, 128)),
])
def test_bundled_configs_match_the_brief(name, counts, ssm_shape):
    plan = analyze(load_config(name))
    for kind, n in counts.items():
        assert len(plan.of_kind(kind)) == n
    ssm = (plan.of_kind("mamba2") or plan.of_kind("gdn"))[0].shape
    assert tuple(vars(ssm).values())[:4] == ssm_shape


def test_analysis_refuses_unsupported_shapes():
    cfg = load_config("nemotron3_super")
    cfg["mamba_head_dim"] = 96
    with pytest.raises(ValueError, match="Mamba-2 layers: head_dim=96"):
        analyze(cfg)
    q = load_config("qwen3_5_4b")
    q["text_config"]["layer_types"][0] = "sliding_attention"
    with pytest.raises(ValueError, match="layer_types\\[0\\]='sliding_attention'"):
        analyze(q)


def test_plan_cli_prints_every_mode(capsys):
    assert main(["plan", "--config", "qwen3_5_4b", "--T", "4"]) == 0
    out = capsys.readouterr().out
    for mode in ("conventional ", "conventional_spec", "replay ", "replay_spec"):
        assert mode in out
    assert re.search(r"replay_spec .*x conventional spec", out)


def test_build_dry_run_plan(capsys):
    assert main(["build", "--model", "nemotron_h_tiny", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.count("-> ReplaySSM Mamba-2 decode") == 4 and out.count("-> unchanged") == 4
    # 4 layers x (16*64*128*4 state + 16*16*64*2 + 4*16*128*2 + 16*16*4 + 16*8*2*4 ring and cursors) bytes
    assert "state 2.0 MiB, ReplaySSM pool 2.2 MiB" in out
    with pytest.raises(SystemExit) as exit_info:
        main(["build", "--model", "nemotron_h_tiny"])
    assert exit_info.value.code == 2 and "--output DIR is required" in capsys.readouterr().err


def test_replay_spec_ratio_bound_by_hand():
    """The bound keeps one checkpoint per SSM layer, the conv window and the KV cache of a ReplaySSM request and
    drops its ring: checked against the per-part bytes the planner reports, and above the planned ratio."""
    from trtllm_replayssm.planner import replay_spec_ratio_bound

    model = analyze(load_config("qwen3_5_122b_a10b"))
    s = PlanSettings(context_len=8192, T=4)
    conv_spec = request_bytes(model, "conventional_spec", s)["total"]
    replay = request_bytes(model, "replay_spec", s)
    states = sum(layer.shape.num_v_heads * layer.shape.head_v_dim * layer.shape.head_k_dim * 4
                 for layer in model.of_kind("gdn"))
    assert replay_spec_ratio_bound(model, s) == pytest.approx(conv_spec / (states + replay["conv"] + replay["kv"]))
    assert replay_spec_ratio_bound(model, s) > conv_spec / replay["total"]
    assert replay_spec_ratio_bound(model, s) < 3.0  # the KV cache of 12 attention layers dominates at 8K


def test_plan_cli_prints_requests_by_spec_ring_length(capsys):
    """The trade-off line: one entry per speculative ring length from 2T to L + T (step T/2), each the planner's
    own max_requests at that ring, fewer requests for longer rings, and the smallest ring of Nemotron-3-Super at
    T = 4, 8K context past 3x conventional speculative decoding (the default ring, L + T = 20, is not)."""
    assert main(["plan", "--config", "nemotron3_super", "--T", "4"]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("replay_spec requests by speculative ring length"))
    found = [(int(L), int(n), float(r)) for L, n, r in re.findall(r"L=(\d+): (\d+) \(([\d.]+)x\)", line)]
    assert [L for L, _, _ in found] == [8, 10, 12, 14, 16, 18, 20]
    model = analyze(load_config("nemotron3_super"))
    for L, n, _ in found:
        assert n == max_requests(model, "replay_spec", PlanSettings(context_len=8192, T=4, spec_buffer_len=L), 141e9, 0)
    assert [n for _, n, _ in found] == sorted((n for _, n, _ in found), reverse=True)
    assert found[0][2] >= 3.0 > found[-1][2]
