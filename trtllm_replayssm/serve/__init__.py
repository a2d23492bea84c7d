"""Serving front ends, thin over the runtime's Engine: the OpenAI-compatible HTTP server (openai_server.py) and
the load generator `bench-serve` (bench.py)."""
