"""The web half of benchmarks/fuzz.py: random parameters for every endpoint and engine against a real
`vram-detective serve` on loopback (a subprocess), for a bounded time. Counts each answer's status; a 500 or a
request that gets no answer within CLIENT_TIMEOUT is a failure.

    PYTHONPATH=src python3 benchmarks/fuzz.py --cases 0 --web 120
"""
from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLIENT_TIMEOUT = 30.0
VALUES = ["1", "0", "-1", "-2", "2.5", "nan", "inf", "-inf", "1e308", "9" * 40, "", "x", "32k", "auto", "all", "true",
          '"><img src=x onerror=alert(1)>', "../../etc/passwd", "/etc/shadow", "a" * 300]
SETTINGS = {
    "vllm": ["gpu_memory_utilization", "max_model_len", "max_num_seqs", "max_num_batched_tokens", "tensor_parallel_size",
             "block_size", "kv_cache_dtype", "enforce_eager", "swap_space", "cpu_offload_gb", "num_gpu_blocks_override"],
    "sglang": ["mem_fraction_static", "context_length", "max_running_requests", "chunked_prefill_size", "tp_size",
               "page_size", "cuda_graph_max_bs", "speculative_algorithm", "speculative_num_draft_tokens"],
    "llamacpp": ["n_ctx", "n_parallel", "n_gpu_layers", "n_batch", "n_ubatch", "type_k", "type_v", "flash_attn", "mmproj"],
    "ollama": ["num_ctx", "num_parallel", "num_gpu", "num_batch", "kv_cache_type", "flash_attention"],
}
SANE = {"gpu_memory_utilization": "0.9", "max_model_len": "8192", "context_length": "8192", "n_ctx": "8192",
        "num_ctx": "4096", "mem_fraction_static": "0.85"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(*extra: str, env: dict | None = None) -> tuple[subprocess.Popen, int]:
    port = _free_port()
    environment = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1", **(env or {})}
    process = subprocess.Popen([sys.executable, "-m", "vram_detective", "serve", "--port", str(port), *extra],
                               env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    for _ in range(300):
        try:
            call(port, "GET", "/api/releases", timeout=2)
            return process, port
        except OSError:
            time.sleep(0.05)
    process.kill()
    raise RuntimeError("serve did not start")


def call(port: int, method: str, path: str, body: bytes | None = None, headers: dict | None = None,
         timeout: float = CLIENT_TIMEOUT) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def random_request(rng, models, gpus) -> tuple[str, str, bytes | None, dict]:
    endpoint = rng.choice(["explain", "explain", "explain", "whatif", "fit", "simulate", "simulate", "logs", "trace"])
    engine = rng.choice(list(SETTINGS))
    params = {"model": rng.choice(models + ["qwen2.5:7b", "/etc/passwd", "org/unknown"]),
              "gpu": rng.choice(gpus + ["nope"]), "engine": engine}
    for key in rng.sample(SETTINGS[engine], rng.randint(0, 3)):
        params[key] = SANE.get(key, "1") if rng.randrange(3) == 0 else rng.choice(VALUES)
    if rng.randrange(10) == 0:
        params["version"] = rng.choice(VALUES)
    if endpoint == "fit":
        params.update(context=rng.choice(["4k", "32k", "-1", "nan"]), concurrency=rng.choice(["1", "8", "1e308", "0"]),
                      gpus=rng.choice(["1", "2", "8", "0", "100"]))
    if endpoint == "simulate":
        params["workload"] = rng.choice(["chat:requests=20", "rag:rate=1,duration=30", "agent:users=4,duration=20",
                                         "chat:burst=inf", "chat:rate=nan", "trace:/etc/passwd", "chat:requests=-1"])
    if endpoint == "logs":
        log = rng.choice(["", "\x00\x01binary", "INFO Loading model weights took 5.2 GB\n" * rng.randint(1, 500),
                          "model='" + "a/" * 2000 + "'\n", "Capture cuda graph " + "bs=[1, 2, " * 5000])
        return "POST", "/api/logs", json.dumps({"log": log}).encode(), {"Content-Type": "application/json"}
    if endpoint == "trace":
        from fuzz import random_trace

        params["trace"] = "\n".join(random_trace(rng))
        return "POST", "/api/simulate?" + urllib.parse.urlencode({k: v for k, v in params.items() if k != "trace"}), \
            json.dumps({"trace": params["trace"]}).encode(), {"Content-Type": "application/json"}
    return "GET", f"/api/{endpoint}?" + urllib.parse.urlencode(params), None, {}


def fuzz_web(seconds: float, rng, models, gpus, counts, bad) -> None:
    """Requests for `seconds`, one at a time (the answer's status counted under ("web", status))."""
    process, port = start_server("--request-budget", "5")
    try:
        deadline = time.monotonic() + seconds
        sent = 0
        while time.monotonic() < deadline:
            method, path, body, headers = random_request(rng, models, gpus)
            try:
                status, data = call(port, method, path, body, headers)
            except (socket.timeout, TimeoutError):
                bad("web hangs", f"no answer in {CLIENT_TIMEOUT:g} s", path[:200])
                continue
            sent += 1
            counts[("web", str(status))] += 1
            if status >= 500 and status != 503:
                bad("web 500", data.decode(errors="replace")[:100], path[:300])
        counts[("web", "requests")] = sent
    finally:
        process.terminate()
        process.wait(10)

