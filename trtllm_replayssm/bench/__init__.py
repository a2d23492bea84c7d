"""Benchmark helpers: CUDA-graph timers, copy-bandwidth ceiling, bytes models."""
