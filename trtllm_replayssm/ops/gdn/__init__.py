"""Gated DeltaNet (Qwen3.5 / Qwen3-Next) and KDA decode: PyTorch references (kernels: a later issue)."""
