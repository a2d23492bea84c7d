"""`trtllm-replayssm serve` as a real server process on loopback (bundled config, CPU reference ops), driven by
the `openai` client and plain HTTP: concurrent streams against decoding each prompt alone, OpenAI-style errors
for bad requests while the server keeps serving, a client that disconnects mid-stream freeing its slot, and a
bounded load run."""

import concurrent.futures
import json
import os
import socket
import subprocess
import sys
import time

import pytest

openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

import torch  # noqa: E402
from test_runtime import assert_same_greedy, greedy_alone  # noqa: E402
from trtllm_replayssm.builder.decode_loop import greedy_decode  # noqa: E402
from trtllm_replayssm.model_config import load_config  # noqa: E402
from trtllm_replayssm.network import load_network  # noqa: E402

SLOTS = 4
MODEL = "nemotron_h_tiny"


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def hf_model(tmp_path_factory):
    """The unmodified transformers model of the bundled default config (seeded random weights), saved as a model
    directory (config.json + safetensors) that the server loads: both sides hold the same weights."""
    transformers = pytest.importorskip("transformers")
    cfg = {k: v for k, v in load_config(None).items() if not k.startswith("_") and k != "torch_dtype"}
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**cfg)).eval()
    model.config._attn_implementation = "eager"
    path = tmp_path_factory.mktemp("model") / MODEL
    model.save_pretrained(path, safe_serialization=True)
    # transformers writes the default time_step_limit (0, inf) as {"__float__": "Infinity"}, which the network's
    # config reader does not decode; the key's absence means the same default.
    config = json.loads((path / "config.json").read_text())
    assert config.pop("time_step_limit")[0] == 0.0
    (path / "config.json").write_text(json.dumps(config))
    # save_pretrained names NemotronH weights as the published checkpoints do ("backbone."), which load_network
    # does not map; the module's own names ("model.") are what it reads.
    from safetensors.torch import save_file

    for f in path.glob("*.safetensors"):
        f.unlink()
    save_file({k: v.detach().clone().contiguous() for k, v in model.state_dict().items()},
              str(path / "model.safetensors"))
    return model, path


def _serve(model_dir):
    """`trtllm-replayssm serve model_dir` on a free loopback port; yields its URL once /health answers."""
    port = _free_port()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "trtllm_replayssm.cli", "serve", str(model_dir), "--device",
                             "cpu", "--port", str(port), "--max-batch", str(SLOTS), "--max-seq-len", "96",
                             "--max-queue", "64"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True)
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            pytest.fail(f"server exited: {proc.stdout.read()}")
        time.sleep(0.1)
    yield url
    proc.terminate()
    proc.wait(30)


@pytest.fixture(scope="module")
def server(hf_model):
    yield from _serve(hf_model[1])


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server}/v1", api_key="none", max_retries=0)


def _metric(url, name):
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise KeyError(name)


def _stream_tokens(client, prompt, n):
    got, finish = [], None
    for chunk in client.completions.create(model=MODEL, prompt=prompt, max_tokens=n, stream=True):
        c = chunk.choices[0]
        got += c.token_ids
        finish = c.finish_reason or finish
    return got, finish


def test_concurrent_streams_equal_decoding_alone_and_transformers(client, server, hf_model):
    """18 streaming requests, more than the 4 slots, prompts of 1..12 tokens and 2..14 outputs at once: every
    stream's tokens (no token lost or duplicated, each ends with 'length') equal its prompt decoded alone through
    the network and the unmodified transformers model's greedy tokens (left-padded batch), but for a flip at a
    near tie (top-2 logit margin below 1e-3 in the reference: fp32 summation order differs between the paths)."""
    prompts = [[(7 * i + j) % 1000 + 1 for j in range(1 + i % 12)] for i in range(18)]
    lens = [2 + (5 * i) % 13 for i in range(18)]
    with concurrent.futures.ThreadPoolExecutor(18) as pool:
        results = list(pool.map(lambda a: _stream_tokens(client, *a), zip(prompts, lens)))
    net = load_network(str(hf_model[1]))
    with torch.no_grad():
        ref = greedy_decode(hf_model[0], prompts, max(lens))
    for r, (p, n, (got, finish)) in enumerate(zip(prompts, lens, results)):
        want, logits = greedy_alone(net, p, n)
        assert finish == "length"
        assert len(got) == n
        assert_same_greedy(got, want, logits)
        assert_same_greedy(got, ref.tokens[r][:n], ref.logits[:n, r])
    assert _metric(server, "replayssm_free_slots") == SLOTS


def test_non_streaming_and_models(client):
    r = client.completions.create(model=MODEL, prompt=[3, 4, 5], max_tokens=4)
    assert len(r.choices[0].token_ids) == 4 and r.usage.completion_tokens == 4 and r.usage.prompt_tokens == 3
    assert [m.id for m in client.models.list().data] == [MODEL]


@pytest.mark.parametrize("body, status, words", [
    ({"prompt": [], "max_tokens": 4}, 400, "empty"),
    ({"prompt": list(range(1, 120)), "max_tokens": 4}, 400, "max_seq_len"),
    ({"prompt": [1, 5000], "max_tokens": 4}, 400, "vocabulary"),
    ({"prompt": [1], "max_tokens": 0}, 400, "max_tokens"),
    ({"prompt": [1], "max_tokens": 1000}, 400, "max_tokens"),
    ({"prompt": [1], "max_tokens": "x"}, 400, "max_tokens"),
    ({"prompt": [1], "temperature": -0.5}, 400, "temperature"),
    ({"prompt": [1], "top_p": 1.5}, 400, "top_p"),
    ({"prompt": [1], "top_k": -1}, 400, "top_k"),
    ({"prompt": "text"}, 400, "tokenizer"),
    ({"prompt": [1], "model": "gpt-4"}, 404, "does not exist"),
    ({"max_tokens": 3}, 400, "prompt is required"),
    ("{not json", 400, "not valid JSON"),
])
def test_bad_requests_get_openai_errors_and_the_server_keeps_serving(server, client, body, status, words):
    data = body if isinstance(body, str) else json.dumps(body)
    r = httpx.post(f"{server}/v1/completions", content=data, headers={"content-type": "application/json"})
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert words in err["message"] and err["type"]
    assert len(client.completions.create(model=MODEL, prompt=[1, 2], max_tokens=2).choices[0].token_ids) == 2


def test_chat_needs_a_chat_template(server):
    r = httpx.post(f"{server}/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 400 and "chat template" in r.json()["error"]["message"]


def test_disconnect_mid_stream_frees_the_slot(server):
    """A client that goes away after two tokens of a long generation: its slot is free again shortly after."""
    with httpx.stream("POST", f"{server}/v1/completions",
                      json={"prompt": [1, 2, 3], "max_tokens": 90, "stream": True}) as r:
        seen = 0
        for line in r.iter_lines():
            if line.startswith("data: {"):
                seen += 1
                if seen == 2:
                    assert _metric(server, "replayssm_free_slots") < SLOTS
                    break
    for _ in range(100):
        if _metric(server, "replayssm_free_slots") == SLOTS:
            break
        time.sleep(0.1)
    assert _metric(server, "replayssm_free_slots") == SLOTS
    assert _metric(server, "replayssm_requests_cancelled_total") >= 1


def test_bounded_load_run(server):
    """200 streamed requests from 32 clients: every one completes with its tokens (bench-serve's code path)."""
    import asyncio

    from trtllm_replayssm.serve.bench import run

    res = asyncio.run(run(server, num_requests=200, concurrency=32, prompt_len=6, output_len=6, quiet=True))
    assert res.failed == 0 and res.ok == 200, res.errors[:3]
    assert res.tokens == 200 * 6
    assert _metric(server, "replayssm_free_slots") == SLOTS


def test_bench_serve_command_reports_latencies(server):
    r = subprocess.run([sys.executable, "-m", "trtllm_replayssm.cli", "bench-serve", "--url", server, "--model",
                        MODEL, "--num-requests", "8", "--concurrency", "4", "--prompt-len", "3",
                        "--output-len", "4", "--vocab", "50", "--seed", "2", "--json", "--quiet"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["requests_ok"] == 8 and s["output_tokens"] == 32 and s["ttft_ms_p50"] > 0 and s["itl_ms_p50"] > 0


def _word_tokenizer(vocab_size):
    """A real tokenizer (tokenizers' WordLevel: token i is the word "w{i-2}" after <eos> and <unk>) with a chat
    template, as a model directory would ship it."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["<eos>", "<unk>"] + [f"w{i}" for i in range(vocab_size - 2)]
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<eos>", unk_token="<unk>")
    tok.chat_template = "{% for m in messages %}w1 {{ m['content'] }} {% endfor %}w0"
    return tok


@pytest.fixture(scope="module")
def text_server(hf_model, tmp_path_factory):
    """The same model directory with a tokenizer beside it: text prompts, stop strings and chat."""
    import shutil

    path = tmp_path_factory.mktemp("text") / MODEL
    shutil.copytree(hf_model[1], path)
    tok = _word_tokenizer(hf_model[0].config.vocab_size)
    tok.save_pretrained(path)
    for url in _serve(path):
        yield url, tok, load_network(str(path))


def test_text_prompt_returns_the_decoded_tokens(text_server):
    url, tok, net = text_server
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
    r = client.completions.create(model=MODEL, prompt="w5 w6 w7", max_tokens=6)
    c = r.choices[0]
    want, logits = greedy_alone(net, tok.encode("w5 w6 w7"), 6)
    assert_same_greedy(c.token_ids, want, logits)
    assert c.text == tok.decode(c.token_ids) and c.text.startswith("w") and r.usage.prompt_tokens == 3


def test_stop_string_ends_the_text_before_it_streamed_or_not(text_server):
    """The third generated word as a stop string: the output is the text before it (not included), finish
    'stop'; the streamed text deltas add up to the same text."""
    url, tok, _ = text_server
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
    full = client.completions.create(model=MODEL, prompt="w9 w3", max_tokens=8).choices[0].text
    stop = full.split()[2]
    want = full[:full.index(stop)]
    r = client.completions.create(model=MODEL, prompt="w9 w3", max_tokens=8, stop=[stop]).choices[0]
    assert r.finish_reason == "stop" and r.text == want and stop not in r.text
    parts, finish = [], None
    for chunk in client.completions.create(model=MODEL, prompt="w9 w3", max_tokens=8, stop=stop, stream=True):
        parts.append(chunk.choices[0].text)
        finish = chunk.choices[0].finish_reason or finish
    assert "".join(parts) == want and finish == "stop"


def test_chat_completion_applies_the_chat_template(text_server):
    url, tok, net = text_server
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
    messages = [{"role": "user", "content": "w4 w8"}]
    prompt = tok.encode(tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False),
                        add_special_tokens=False)
    assert prompt == [3, 6, 10, 2]  # w1 w4 w8 w0: the template around the message
    want, logits = greedy_alone(net, prompt, 5)
    r = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=5)
    assert r.usage.prompt_tokens == 4
    got = tok.encode(r.choices[0].message.content)
    assert_same_greedy(got, want, logits)
    streamed = "".join(c.choices[0].delta.content or "" for c in
                       client.chat.completions.create(model=MODEL, messages=messages, max_tokens=5, stream=True))
    assert streamed == r.choices[0].message.content


def test_text_prompt_without_a_tokenizer_names_the_fix(server):
    r = httpx.post(f"{server}/v1/completions", json={"model": MODEL, "prompt": "hello", "max_tokens": 2})
    assert r.status_code == 400 and "token ids" in r.json()["error"]["message"]
