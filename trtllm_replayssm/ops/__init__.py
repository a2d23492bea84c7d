"""Operator families: each has a readable PyTorch reference, a replay reference and a binding to the kernels."""
