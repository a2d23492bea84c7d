"""The Triton model repository on a real tritonserver (nvidia-pytriton's bundled server and Python backend, CPU
reference ops, bundled config): concurrent gRPC streams and plain HTTP `generate` against decoding each prompt
alone, `ignore_eos`, `bench-serve --api triton` over `generate_stream`, per-request errors while the server keeps
serving, a cancelled stream freeing its slot (the model's replayssm_free_slots metric), and explicit unload / load
without leaking slots."""

import json
import queue
import subprocess
import sys
import socket
import threading
import time
from functools import partial

import numpy as np
import pytest

grpcclient = pytest.importorskip("tritonclient.grpc")
httpx = pytest.importorskip("httpx")

from test_runtime import assert_same_greedy, greedy_alone  # noqa: E402
from trtllm_replayssm.model_config import load_config  # noqa: E402
from trtllm_replayssm.network import load_network  # noqa: E402
from trtllm_replayssm.serve.triton_env import TritonUnavailable, find_server  # noqa: E402
from trtllm_replayssm.serve.triton_repo import write_repository  # noqa: E402

SLOTS, NAME = 4, "replayssm"
EOS_NAME, EOS_PROMPT = "replayssm_eos", [5, 6, 7]


def _ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


@pytest.fixture(scope="module")
def triton(tmp_path_factory):
    try:
        server = find_server(tmp_path_factory.mktemp("triton_cache"))
    except TritonUnavailable as e:
        pytest.skip(str(e))
    repo = tmp_path_factory.mktemp("repo")
    write_repository(repo, NAME, {"device": "cpu", "max_batch": SLOTS, "max_seq_len": 96, "max_queue": 64})
    eos_dir = _eos_model_dir(tmp_path_factory.mktemp("eos_model"))
    write_repository(repo, EOS_NAME, {"model": str(eos_dir), "device": "cpu", "max_batch": 2, "max_seq_len": 32})
    http, grpc, metrics = _ports(3)
    log = open(repo / "server.log", "w")
    proc = server.start(repo, http, grpc, metrics, explicit=True, load=[NAME], log=log)
    base = f"http://127.0.0.1:{http}"
    for _ in range(900):
        try:
            if httpx.get(f"{base}/v2/models/{NAME}/ready", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            pytest.fail(f"tritonserver exited: {(repo / 'server.log').read_text()[-3000:]}")
        time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail("tritonserver did not get ready")
    yield {"http": base, "grpc": f"127.0.0.1:{grpc}", "metrics": f"http://127.0.0.1:{metrics}/metrics",
           "eos_dir": eos_dir}
    proc.terminate()
    try:
        proc.wait(60)
    except Exception:
        proc.kill()
    log.close()


def _eos_model_dir(folder):
    """The default config with its end token set to the first token greedy decoding gives EOS_PROMPT (seeded
    random weights: the same network otherwise), so that this prompt ends at once unless the end token is ignored."""
    first = greedy_alone(load_network(None), EOS_PROMPT, 1)[0][0]
    cfg = {k: v for k, v in load_config(None).items() if not k.startswith("_") and k != "torch_dtype"}
    (folder / "config.json").write_text(json.dumps(cfg | {"eos_token_id": first}))
    return folder


def _free_slots(t, model=NAME):
    """The model's replayssm_free_slots gauge; None when Triton reports none for it."""
    for line in httpx.get(t["metrics"]).text.splitlines():
        if line.startswith(f'replayssm_free_slots{{model="{model}"}}'):
            return float(line.split()[-1])
    return None


def _assert_gauge_goes(t, model):
    """An unloaded model's free-slot gauge disappears (not left at its last value) once its stub finalizes."""
    for _ in range(300):
        if _free_slots(t, model) is None:
            return
        time.sleep(0.1)
    assert _free_slots(t, model) is None


def _inputs(prompt, max_tokens, stream=True):
    ids = grpcclient.InferInput("input_ids", [len(prompt)], "INT32")
    ids.set_data_from_numpy(np.asarray(prompt, dtype=np.int32))
    mt = grpcclient.InferInput("max_tokens", [1], "INT32")
    mt.set_data_from_numpy(np.asarray([max_tokens], dtype=np.int32))
    st = grpcclient.InferInput("stream", [1], "BOOL")
    st.set_data_from_numpy(np.asarray([stream]))
    return [ids, mt, st]


def _stream(t, prompt, max_tokens, cancel_after=None):
    """One gRPC stream: (tokens, error) when the final response arrives (or after cancelling)."""
    events = queue.Queue()
    client = grpcclient.InferenceServerClient(t["grpc"])
    client.start_stream(callback=lambda result, error: events.put((result, error)))
    client.async_stream_infer(NAME, _inputs(prompt, max_tokens), enable_empty_final_response=True)
    tokens, error = [], None
    while True:
        result, err = events.get(timeout=120)
        if err is not None:
            error = str(err)
            break
        out = result.as_numpy("output_ids")
        if out is not None:
            tokens += out.reshape(-1).tolist()
        if cancel_after is not None and len(tokens) >= cancel_after:
            client.stop_stream(cancel_requests=True)
            break
        if result.get_response().parameters["triton_final_response"].bool_param:
            break
    if cancel_after is None:
        client.stop_stream()
    client.close()
    return tokens, error


def test_concurrent_grpc_streams_equal_decoding_alone(triton):
    prompts = [[(11 * i + j) % 900 + 1 for j in range(1 + i % 9)] for i in range(16)]
    lens = [2 + (3 * i) % 11 for i in range(16)]
    results = [None] * 16
    threads = [threading.Thread(target=lambda i=i: results.__setitem__(i, _stream(triton, prompts[i], lens[i])))
               for i in range(16)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(300)
    net = load_network(None)
    for p, n, (got, err) in zip(prompts, lens, results):
        assert err is None
        want, logits = greedy_alone(net, p, n)
        eos = [i for i, t in enumerate(want) if t in net.eos_token_ids]
        if eos:  # the request ends at the model's end token (the default: ignore_eos off)
            want = want[:eos[0] + 1]
        assert len(got) == len(want)
        assert_same_greedy(got, want, logits)
    assert _free_slots(triton) == SLOTS


def test_http_generate(triton):
    r = httpx.post(f"{triton['http']}/v2/models/{NAME}/generate", json={"input_ids": [3, 4, 5], "max_tokens": 6},
                   timeout=120)
    assert r.status_code == 200, r.text
    want, logits = greedy_alone(load_network(None), [3, 4, 5], 6)
    assert_same_greedy(r.json()["output_ids"], want, logits)


def test_ignore_eos_runs_past_the_end_token(triton):
    base = triton["http"]
    assert httpx.post(f"{base}/v2/repository/models/{EOS_NAME}/load", timeout=300).status_code == 200
    try:
        url = f"{base}/v2/models/{EOS_NAME}/generate"
        stopped = httpx.post(url, json={"input_ids": EOS_PROMPT, "max_tokens": 6}, timeout=120)
        ignored = httpx.post(url, json={"input_ids": EOS_PROMPT, "max_tokens": 6, "ignore_eos": True}, timeout=120)
    finally:
        httpx.post(f"{base}/v2/repository/models/{EOS_NAME}/unload", timeout=120)
    _assert_gauge_goes(triton, EOS_NAME)
    net = load_network(str(triton["eos_dir"]))
    want, logits = greedy_alone(net, EOS_PROMPT, 6)
    assert net.eos_token_ids == (want[0],)
    assert stopped.status_code == 200, stopped.text
    assert np.atleast_1d(stopped.json()["output_ids"]).tolist() == [want[0]], stopped.text
    assert ignored.status_code == 200, ignored.text
    assert len(ignored.json()["output_ids"]) == 6
    assert_same_greedy(ignored.json()["output_ids"], want, logits)


def test_bench_serve_streams_from_triton(triton):
    """`bench-serve --api triton`: streamed generate_stream requests, every one with all its tokens."""
    r = subprocess.run([sys.executable, "-m", "trtllm_replayssm.cli", "bench-serve", "--api", "triton", "--url",
                        triton["http"], "--num-requests", "6", "--concurrency", "3", "--prompt-len", "4",
                        "--output-len", "5", "--json", "--quiet"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["requests_ok"] == 6 and s["output_tokens"] == 30 and s["ttft_ms_p50"] > 0 and s["itl_ms_p50"] > 0
    assert _free_slots(triton) == SLOTS


@pytest.mark.parametrize("body, words", [
    ({"max_tokens": 3}, "input_ids or text_input"),
    ({"input_ids": [1, 2], "max_tokens": 0}, "max_tokens=0"),
    ({"input_ids": list(range(1, 100)), "max_tokens": 2}, "max_seq_len"),
    ({"input_ids": [1, 99999], "max_tokens": 2}, "vocabulary"),
    ({"text_input": "hello", "max_tokens": 2}, "no tokenizer"),
    ({"input_ids": [1.5, 2.5], "max_tokens": 2}, ""),
])
def test_bad_requests_fail_alone(triton, body, words):
    r = httpx.post(f"{triton['http']}/v2/models/{NAME}/generate", json=body, timeout=60)
    assert r.status_code >= 400 and words in r.json()["error"], r.text
    ok = httpx.post(f"{triton['http']}/v2/models/{NAME}/generate", json={"input_ids": [1], "max_tokens": 2}, timeout=60)
    assert ok.status_code == 200 and len(ok.json()["output_ids"]) == 2


def test_wrong_input_dtype_over_grpc_is_refused(triton):
    """input_ids as FP32 on a gRPC stream: Triton refuses that request (the model declares INT32)."""
    events = queue.Queue()
    client = grpcclient.InferenceServerClient(triton["grpc"])
    client.start_stream(callback=lambda result, error: events.put((result, error)))
    bad = grpcclient.InferInput("input_ids", [2], "FP32")
    bad.set_data_from_numpy(np.asarray([1, 2], dtype=np.float32))
    client.async_stream_infer(NAME, [bad], enable_empty_final_response=True)
    result, error = events.get(timeout=60)
    client.stop_stream()
    client.close()
    assert error is not None and "FP32" in str(error) and "INT32" in str(error), str(error)


def test_cancelled_stream_frees_its_slot(triton):
    got, err = _stream(triton, [1, 2, 3], 90, cancel_after=2)
    assert len(got) >= 2
    for _ in range(200):
        if _free_slots(triton) == SLOTS:
            break
        time.sleep(0.1)
    assert _free_slots(triton) == SLOTS


def test_unload_and_load_again(triton):
    base = triton["http"]
    assert httpx.post(f"{base}/v2/repository/models/{NAME}/unload", timeout=120).status_code == 200
    for _ in range(300):
        if httpx.get(f"{base}/v2/models/{NAME}/ready").status_code != 200:
            break
        time.sleep(0.1)
    _assert_gauge_goes(triton, NAME)
    assert httpx.post(f"{base}/v2/repository/models/{NAME}/load", timeout=300).status_code == 200
    r = httpx.post(f"{base}/v2/models/{NAME}/generate", json={"input_ids": [7, 8], "max_tokens": 3}, timeout=120)
    assert r.status_code == 200 and len(r.json()["output_ids"]) == 3
    assert _free_slots(triton) == SLOTS


@pytest.mark.parametrize("control", ["none", "explicit"])
def test_triton_command_serves_and_stops_on_ctrl_c(tmp_path, control):
    """`trtllm-replayssm triton` writes a repository, starts the server (ready for generate) and stops on Ctrl-C;
    with --model-control-mode explicit the model is loaded at start and unloads through the repository API."""
    import os
    import signal
    import subprocess
    import sys

    try:
        find_server()
    except TritonUnavailable as e:
        pytest.skip(str(e))
    http, grpc, metrics = _ports(3)
    log = open(tmp_path / "cli.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "trtllm_replayssm.cli", "triton", "--device", "cpu",
                             "--max-batch", "2", "--max-seq-len", "32", "--http-port", str(http), "--grpc-port",
                             str(grpc), "--metrics-port", str(metrics), "--model-control-mode", control], stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        for _ in range(900):
            try:
                if httpx.get(f"http://127.0.0.1:{http}/v2/models/{NAME}/ready", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, (tmp_path / "cli.log").read_text()[-2000:]
            time.sleep(0.2)
        r = httpx.post(f"http://127.0.0.1:{http}/v2/models/{NAME}/generate", json={"input_ids": [1, 2], "max_tokens": 2},
                       timeout=60)
        assert r.status_code == 200 and len(r.json()["output_ids"]) == 2
        unload = httpx.post(f"http://127.0.0.1:{http}/v2/repository/models/{NAME}/unload", timeout=120)
        assert (unload.status_code == 200) == (control == "explicit"), unload.text
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(120) in (130, 0, -signal.SIGINT)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()
