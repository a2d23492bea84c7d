"""The runtime on CUDA: the model runner's decode as a CUDA graph per batch bucket (static buffers, padding rows
at slot -1) gives the eager runner's tokens, with requests coming and going across buckets."""

import time

import pytest

from trtllm_replayssm.runtime import Engine, SamplingParams

pytestmark = pytest.mark.gpu

PROMPTS = [[1, 2, 3], [4, 5, 6, 7, 8, 9, 10], [11], [12, 13], [14, 15, 16, 17], [18, 19, 20, 21, 22], [23, 24]]
LENS = [5, 19, 3, 12, 7, 4, 9]  # the running batch passes through buckets 4, 2 and 1 as requests finish


def _tokens(mode, cuda_graphs, sampled=False):
    e = Engine.create(None, device="cuda", mode=mode, max_batch=4, max_seq_len=64, cuda_graphs=cuda_graphs)
    if cuda_graphs:
        e.runner.capture_all()
        assert sorted(e.runner._graphs) == [1, 2, 4]
    try:
        params = [SamplingParams(max_tokens=n, temperature=0.7 if sampled else 0.0, top_p=0.9, seed=i,
                                 ignore_eos=True)
                  for i, n in enumerate(LENS)]
        out = []
        for p, sp in zip(PROMPTS, params):  # one request each so every request has its own max_tokens
            out.append(e.submit(p, sp))
        e.start()
        for _ in range(6000):
            if all(r.done for r in out):
                break
            time.sleep(0.01)
        assert all(r.done for r in out), "requests unfinished after 60 s"
        assert e.free_slots == 4
        return [r.tokens for r in out]
    finally:
        e.stop()


@pytest.mark.parametrize("mode", ["replay", "conventional"])
def test_cuda_graph_engine_equals_eager_engine(mode):
    eager = _tokens(mode, cuda_graphs=False)
    assert [len(t) for t in eager] == LENS
    assert _tokens(mode, cuda_graphs=True) == eager


def test_cuda_graph_engine_seeded_sampling_equals_eager():
    assert _tokens("replay", cuda_graphs=True, sampled=True) == _tokens("replay", cuda_graphs=False, sampled=True)
