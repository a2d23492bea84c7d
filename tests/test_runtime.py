"""The runtime without a server: the request state machine and the scheduler (no tensors), sampling, and the
engine's in-flight batching on the bundled config (CPU reference ops) against decoding each prompt alone."""

import threading

import pytest
import torch

from trtllm_replayssm.network import load_network
from trtllm_replayssm.runtime import (BusyError, Engine, Request, RequestError, SamplingParams, Scheduler,
                                      Status, slots_in_budget)
from trtllm_replayssm.runtime.sampling import filtered_probs


def greedy_alone(net, prompt, n):
    """Tokens and per-step logits of one prompt decoded alone (batch 1, slot 0): the offline oracle."""
    state = net.new_state(1, 256)
    one = torch.tensor([0], dtype=torch.int32)
    logits = net.prefill(state, torch.tensor([prompt]), torch.tensor([len(prompt)], dtype=torch.int32), one)
    toks, all_logits = [], []
    for i in range(n):
        all_logits.append(logits[0])
        toks.append(int(logits[0].argmax()))
        logits = net.decode(state, torch.tensor([toks[-1]]), torch.tensor([len(prompt) + i]), one)
    return toks, all_logits


def assert_same_greedy(got, want, logits, margin=1e-3):
    """Tokens equal, or they part at a near tie of the oracle's logits (top-2 margin below `margin`): batch
    composition changes summation order, which may flip such a tie and nothing else."""
    for i, (a, b) in enumerate(zip(got, want)):
        if a != b:
            top = torch.topk(logits[i], 2).values
            assert float(top[0] - top[1]) < margin, f"token {i}: {a} != {b} with a logit margin of {top[0] - top[1]}"
            return
    assert len(got) == len(want)


def test_request_state_machine_refuses_invalid_moves():
    r = Request([1])
    r.move(Status.RUNNING)
    r.move(Status.FINISHED)
    with pytest.raises(RuntimeError, match="finished -> running"):
        r.move(Status.RUNNING)
    w = Request([1])
    w.move(Status.CANCELLED)
    with pytest.raises(RuntimeError):
        w.move(Status.RUNNING)


def test_scheduler_admits_in_order_and_frees_slots_once():
    s = Scheduler(2, max_queue=1)
    reqs = [Request([i + 1]) for i in range(3)]
    for r in reqs:
        s.submit(r)
    with pytest.raises(BusyError, match="busy"):
        s.submit(Request([9]))
    plan = s.schedule()
    assert plan.prefill == reqs[:2] and not plan.decode and s.queued == 1
    assert {r.slot for r in reqs[:2]} == {0, 1}
    reqs[0].tokens.append(5)
    plan = s.schedule()
    assert plan.prefill == [] and plan.decode == [reqs[0]]  # no free slot for the third yet
    s.finish(reqs[0], "length")
    with pytest.raises(RuntimeError):
        s.finish(reqs[0], "length")  # a slot is released once
    plan = s.schedule()
    assert plan.prefill == [reqs[2]] and reqs[2].slot == reqs[0].slot
    assert s.cancel(reqs[1]) and reqs[1].status is Status.CANCELLED and not s.cancel(reqs[1])
    assert sorted(s.free) == [reqs[1].slot]


def test_sampling_filters():
    logits = torch.tensor([3.0, 2.0, 1.0, 0.0])
    p = filtered_probs(logits, 1.0, top_k=2, top_p=1.0)
    assert p[2] == 0 and p[3] == 0 and abs(float(p.sum()) - 1) < 1e-6
    p = filtered_probs(logits, 1.0, top_k=0, top_p=0.5)
    assert p[0] == 1.0  # the top token alone holds more than half the mass
    p = filtered_probs(logits, 100.0, top_k=0, top_p=1.0)
    assert float(p.max() - p.min()) < 0.05  # a high temperature flattens


@pytest.fixture(scope="module")
def engine():
    e = Engine.create(None, max_batch=3, max_seq_len=64).start()
    yield e
    e.stop()


def test_in_flight_batching_matches_decoding_alone(engine):
    """More prompts than slots, different lengths: each request's tokens equal its prompt decoded alone."""
    prompts = [[1, 2, 3], [4, 5, 6, 7, 8, 9, 10], [11], [12, 13], [14, 15, 16, 17], [18, 19, 20, 21, 22]]
    lens = [5, 9, 3, 12, 7, 4]
    results = {}

    def go(i):
        results[i] = engine.generate([prompts[i]], SamplingParams(max_tokens=lens[i]))[0]

    threads = [threading.Thread(target=go, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    net = engine.net
    for i, p in enumerate(prompts):
        want, logits = greedy_alone(net, p, lens[i])
        assert_same_greedy(results[i], want, logits)
    assert engine.free_slots == 3


def test_seeded_sampling_is_reproducible_and_batch_independent(engine):
    params = SamplingParams(max_tokens=8, temperature=0.8, top_p=0.9, top_k=50, seed=123)
    a = engine.generate([[7, 8, 9]], params)[0]
    b = engine.generate([[7, 8, 9], [1, 2], [3]], params)[0]
    c = engine.generate([[7, 8, 9]], SamplingParams(max_tokens=8, temperature=0.8, top_p=0.9, top_k=50, seed=124))[0]
    assert a == b and a != c


def test_stop_token_ends_a_request(engine):
    first = engine.generate([[1, 2, 3]], SamplingParams(max_tokens=5))[0]
    got = engine.generate([[1, 2, 3]], SamplingParams(max_tokens=5, stop_token_ids=(first[2],)))[0]
    assert got == first[:3]


@pytest.mark.parametrize("prompt, params, words", [
    ([], SamplingParams(), "empty"),
    ([1, 99999], SamplingParams(), "outside the vocabulary"),
    (list(range(1, 70)), SamplingParams(), "max_seq_len=64"),
    ([1], SamplingParams(max_tokens=0), "max_tokens=0"),
    ([1], SamplingParams(max_tokens=64), "exceeds"),
    ([1], SamplingParams(temperature=-1.0), "temperature"),
    ([1], SamplingParams(top_p=0.0), "top_p"),
    ([1], SamplingParams(top_k=-2), "top_k"),
    ([1], SamplingParams(stop=("x",)), "tokenizer"),
])
def test_bad_requests_are_refused_before_queueing(engine, prompt, params, words):
    with pytest.raises(RequestError, match=words):
        engine.submit(prompt, params)
    assert engine.scheduler.queued == 0


def test_cancel_frees_the_slot(engine):
    done = threading.Event()
    seen = []

    def on_event(req, tokens):
        seen.extend(tokens)
        if len(seen) >= 2 and not done.is_set():
            done.set()
            engine.cancel(req)

    req = engine.submit([5, 6], SamplingParams(max_tokens=60), on_event)
    assert done.wait(60)
    for _ in range(200):
        if req.done:
            break
        threading.Event().wait(0.05)
    assert req.status is Status.CANCELLED and req.finish_reason == "cancelled"
    assert len(req.tokens) < 60 and engine.free_slots == 3


def test_network_state_is_released_with_the_slot():
    net = load_network(None)
    e = Engine(net, max_batch=2, max_seq_len=32)
    e.generate([[1, 2, 3]], SamplingParams(max_tokens=4))
    e.stop()
    for name, t in e.runner.state.tensors.items():
        rows = t[:2]
        assert not rows.any(), f"{name} still holds a finished request's state"


def test_pool_budget_caps_the_slots_at_what_a_real_allocation_takes():
    """The budget is measured on a real one-slot state: an engine made with room for 2.5 slots gets 2, whose
    allocated state fits the budget; a budget below one slot is refused naming both sizes."""
    net = load_network(None)
    per_slot = net.new_state(1, 48).bytes_per_slot
    assert net.new_state(1, 96).bytes_per_slot > per_slot  # the KV cache grows with max_seq_len
    budget = 2 * per_slot + per_slot // 2
    assert slots_in_budget(net, budget, 48) == 2
    e = Engine.create(None, max_batch=8, max_seq_len=48, pool_budget=budget)
    assert e.max_batch == 2 and e.free_slots == 2
    assert 2 * e.runner.state.bytes_per_slot <= budget
    with pytest.raises(ValueError, match=f"{per_slot - 1} bytes holds no request.*takes {per_slot} bytes"):
        slots_in_budget(net, per_slot - 1, 48)
