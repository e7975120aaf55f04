"""Issue 30, the web server under hostile requests (a real `vram-detective serve` on loopback, raw HTTP): the
Host and Origin checks, each request's computation budget, work cancelled when the client leaves, requests
that used to spin forever, and errors that are the user's input rather than internal ones."""
from __future__ import annotations

import http.client
import json
import time
import urllib.parse

import pytest

from web_server import running_server, tree_cpu_seconds, wait_for_workers, worker_pids

FIT_7S = {"model": "Qwen/Qwen3-235B-A22B", "gpu": "H100", "gpus": "64", "context": "128k", "concurrency": "256"}


@pytest.fixture(scope="module")
def server():
    with running_server() as (base, process):
        yield base, process


def request(base: str, path: str, headers: dict | None = None, body: bytes | None = None, method: str = "GET",
            timeout: float = 60) -> tuple[int, dict]:
    parts = urllib.parse.urlsplit(base)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    connection.request(method, path, body=body, headers=headers or {})
    response = connection.getresponse()
    data = response.read().decode()
    connection.close()
    return response.status, (json.loads(data) if data.startswith("{") else {"text": data})


def query(**params) -> str:
    return urllib.parse.urlencode(params)


@pytest.mark.parametrize("headers", [{"Host": "attacker.example"}, {"Host": "attacker.example:8000"},
                                     {"Origin": "http://attacker.example"}, {"Host": "127.0.0.1.nip.io"}])
def test_a_foreign_host_or_origin_is_refused(server, headers):
    """DNS rebinding: a page on attacker.example resolving its name to 127.0.0.1 sends Host: attacker.example."""
    status, body = request(server[0], "/api/releases", headers)
    assert status == 403
    assert "not a name this server answers to" in body["error"] and "--allow-host" in body["error"]


@pytest.mark.parametrize("headers", [{}, {"Host": "localhost:1234"}, {"Host": "[::1]:80"},
                                     {"Origin": "http://localhost:8000"}, {"Origin": "null"}])
def test_loopback_names_are_served(server, headers):
    status, body = request(server[0], "/api/releases", headers)
    assert status == 200 and "vllm" in body


def test_allow_host_adds_a_name():
    with running_server("--allow-host", "gpu-box.lan") as (base, _):
        assert request(base, "/api/releases", {"Host": "gpu-box.lan:8000"})[0] == 200
        assert request(base, "/api/releases", {"Host": "other.lan"})[0] == 403


def test_sglang_without_chunked_prefill_answers(server):
    """chunked_prefill_size=-1 (SGLang: no chunking) spun the server forever (issue 30)."""
    status, body = request(server[0], "/api/simulate?" + query(engine="sglang", model="Qwen/Qwen3-8B", gpu="H100",
                                                               chunked_prefill_size=-1, workload="chat:requests=1"),
                           timeout=30)
    assert status == 200, body
    assert body["result"]["requests"] == 1


@pytest.mark.parametrize("row, words", [
    ({"timestamp": float("nan"), "prompt_tokens": 10, "output_tokens": 5}, "timestamp must be finite"),
    ({"timestamp": float("-inf"), "prompt_tokens": 10, "output_tokens": 5}, "timestamp must be finite"),
    ({"timestamp": 0, "prompt_tokens": -10 ** 12, "output_tokens": 5}, "prompt_tokens must be a whole number"),
    ({"timestamp": 0, "prompt_tokens": 10, "output_tokens": 2.5}, "output_tokens must be a whole number"),
])
def test_a_bad_trace_is_400_at_once(server, row, words):
    trace = json.dumps(row) + "\n" + json.dumps({"timestamp": 1, "prompt_tokens": 10, "output_tokens": 5})
    status, body = request(server[0], "/api/simulate?" + query(model="Qwen/Qwen3-8B", gpu="H100"),
                           {"Content-Type": "application/json"}, json.dumps({"trace": trace}).encode(), "POST",
                           timeout=30)
    assert status == 400, body
    assert words in body["error"] and "trace:1" in body["error"]


def test_a_request_past_its_budget_is_503():
    """The fit over 64 GPUs takes about 7 s of CPU: under a 0.3 s budget it is stopped with one line."""
    with running_server("--request-budget", "0.3") as (base, _):
        status, body = request(base, "/api/fit?" + query(**FIT_7S))
        assert status == 503
        assert "ran past its budget of 0.3 s of computation (CPU)" in body["error"]


def test_work_stops_when_the_client_leaves(server):
    """A 7-second fit abandoned after half a second: its worker process is killed and replaced, and the CPU of
    the server and its workers is idle again within a second."""
    base, process = server
    before_workers = wait_for_workers(process.pid)
    parts = urllib.parse.urlsplit(base)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    connection.request("GET", "/api/fit?" + query(**FIT_7S))
    time.sleep(0.5)
    connection.sock.close()
    time.sleep(1.5)
    before = tree_cpu_seconds(process.pid)
    time.sleep(2.0)
    spent = tree_cpu_seconds(process.pid) - before
    assert spent < 0.3, f"{spent:.2f} s of server CPU in the 2 s after the client left"
    after_workers = worker_pids(process.pid)
    assert len(after_workers) == len(before_workers) and len(before_workers - after_workers) == 1
    assert request(base, "/api/releases")[0] == 200


def _safetensors_model(folder) -> None:
    from test_hostile_regressions import LLAMA

    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(LLAMA))
    header = json.dumps({"model.embed_tokens.weight": {"dtype": "BF16", "shape": [1000, 256],
                                                       "data_offsets": [0, 512000]}}).encode()
    (folder / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header + b"\0" * 512000)


@pytest.mark.parametrize("engine", ["llamacpp", "ollama"])
def test_llama_engines_with_a_safetensors_checkpoint_answer(tmp_path, engine):
    """A Hub or local model with safetensors under engine=llamacpp/ollama was a 500 ("'NoneType' object has no
    attribute 'to_dict'"): llama.cpp compares GGUF tensors only, so the answer has no checkpoint table."""
    _safetensors_model(tmp_path / "models" / "tiny")
    with running_server("--allow-local-models", str(tmp_path / "models")) as (base, _):
        status, body = request(base, "/api/explain?" + query(model="tiny", gpu="H100", engine=engine))
    assert status == 200, body
    assert body["engine_name"] == engine and "checkpoint_vs_gpu" not in body


@pytest.mark.parametrize("path, words", [
    ("/api/explain?" + query(model="Qwen/Qwen3-8B", gpu="T4", engine="llamacpp", type_k="9" * 40),
     "is not a KV cache type"),  # was 500 (KeyError), found by benchmarks/fuzz_web.py
    ("/api/fit?" + query(model="Qwen/Qwen3-8B", gpu="T4", context="4k", concurrency="1e308"),
     "more than any GPU's KV cache holds"),  # was 500 (OverflowError); the CLI refused it already
])
def test_values_the_cli_refuses_are_400_on_the_api_too(server, path, words):
    status, body = request(server[0], path)
    assert status == 400, body
    assert words in body["error"]
