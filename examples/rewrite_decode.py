"""Rewrite a small random-weight Qwen3.5 or Nemotron-H model to ReplaySSM and decode a batch with it.

    python examples/rewrite_decode.py [--model qwen3_5|nemotron_h] [--steps 40] [--buffer-len 8]

Runs the kernels on a CUDA device (bf16 activations) and the PyTorch reference on CPU (fp32); prints the
tokens of the unmodified model and of the rewritten one, which must agree.
"""

import argparse

import torch
import transformers

from trtllm_replayssm.builder.decode_loop import greedy_decode
from trtllm_replayssm.builder.rewrite import rewrite
from trtllm_replayssm.config import ReplayConfig


def tiny_model(name: str):
    if name == "nemotron_h":
        cfg = transformers.NemotronHConfig(hidden_size=256, hybrid_override_pattern="M*M-M-", num_hidden_layers=6,
                                           mamba_num_heads=8, mamba_head_dim=64, ssm_state_size=128, n_groups=2,
                                           num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                                           intermediate_size=512, vocab_size=512)
        return transformers.NemotronHForCausalLM(cfg)
    cfg = transformers.Qwen3_5TextConfig(hidden_size=256, num_hidden_layers=4,
                                         layer_types=["linear_attention"] * 3 + ["full_attention"],
                                         linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=128,
                                         linear_value_head_dim=128, num_attention_heads=4, num_key_value_heads=2,
                                         head_dim=64, intermediate_size=512, vocab_size=512)
    return transformers.Qwen3_5ForCausalLM(cfg)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen3_5", choices=["qwen3_5", "nemotron_h"])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--buffer-len", type=int, default=8)
    args = ap.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    torch.manual_seed(0)
    model = tiny_model(args.model).to(device=device, dtype=dtype).eval()
    prompts = [[3, 14, 15, 92, 65], [35, 89, 79, 32, 38, 46, 26, 43], [38, 32]]
    ref = greedy_decode(model, prompts, args.steps)
    rw = rewrite(model, ReplayConfig(args.buffer_len, "fp32", dtype), num_slots=4)
    got = greedy_decode(model, prompts, args.steps, rewrite=rw)
    rw.undo()
    for r, (a, b) in enumerate(zip(ref.tokens, got.tokens)):
        print(f"request {r}: transformers {a[:12]}...\n           replayssm    {b[:12]}...")
    same = sum(x == y for a, b in zip(ref.tokens, got.tokens) for x, y in zip(a, b))
    total = sum(len(a) for a in ref.tokens)
    print(f"{args.model} on {device.type}: {same}/{total} tokens identical, "
          f"max |logit difference| {(ref.logits - got.logits).abs().max().item():.3g}")


if __name__ == "__main__":
    main()
