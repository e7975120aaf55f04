"""`vram-detective serve`'s JSON API against the commands' own --json output (a real server on loopback),
its safety rules, and the self-contained HTML report."""
from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request

import pytest

from conftest import DEV, MODELS, read_jsonl
from web_server import cli_json, running_server

from vram_detective.read_policy import NOT_ALLOWED

SEED = {"model": "Qwen/Qwen2.5-7B-Instruct-AWQ", "gpu": "RTX 4090", "version": "0.6.3", "max_model_len": "32k"}
SEED_ARGS = ("Qwen/Qwen2.5-7B-Instruct-AWQ", "--gpu", "RTX 4090", "--vllm-version", "0.6.3", "--max-model-len", "32k")


@pytest.fixture(scope="module")
def server():
    with running_server() as (base, _):
        yield base


def get(url: str, data: bytes | None = None, headers: dict | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, data=data, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def query(**params) -> str:
    return urllib.parse.urlencode(params)


def test_explain_api_is_byte_for_byte_explain_json(server):
    status, body = get(f"{server}/api/explain?{query(**SEED)}")
    assert status == 200
    assert body == cli_json("explain", *SEED_ARGS)
    figures = json.loads(body)
    assert figures["engine_version"] == "0.6.3" and figures["max_model_len"] == 32768 and figures["kv_cache_tokens"] > 0


@pytest.mark.parametrize("params, args", [
    ({"model": "Qwen/Qwen3-8B", "gpu": "H100", "engine": "sglang", "context_length": "32768"},
     ("Qwen/Qwen3-8B", "--gpu", "H100", "--engine", "sglang", "--context-length", "32768")),
    ({"model": "Qwen/Qwen3-8B", "gpu": "RTX 4090", "engine": "llamacpp", "n_ctx": "16384", "flash_attn": "on"},
     ("Qwen/Qwen3-8B", "--gpu", "RTX 4090", "--engine", "llamacpp", "-c", "16384", "-fa", "on")),
    ({"model": "Qwen/Qwen3-8B", "gpu_memory": "20GiB", "gpu_memory_utilization": "0.8", "enforce_eager": "true",
      "kv_cache_dtype": "fp8"},
     ("Qwen/Qwen3-8B", "--gpu-memory", "20GiB", "--gpu-memory-utilization", "0.8", "--enforce-eager",
      "--kv-cache-dtype", "fp8")),
    ({"line": "vllm serve Qwen/Qwen3-8B --max-model-len 16k -tp 2", "gpu": "L4", "version": "0.8.5"},
     ("--gpu", "L4", "--vllm-version", "0.8.5", "--", "vllm", "serve", "Qwen/Qwen3-8B", "--max-model-len", "16k", "-tp", "2")),
])
def test_explain_api_other_engines_and_flags(server, params, args):
    status, body = get(f"{server}/api/explain?{query(**params)}")
    assert body == cli_json("explain", *args)
    # 20 GiB at 0.8 leaves no KV cache: vLLM refuses (the command exits 1), the API answers 422 with the same JSON
    assert status == (422 if params.get("gpu_memory") == "20GiB" else 200), body
    assert json.loads(body)["startup_failed"] is (status == 422)


def test_whatif_and_fit_api_equal_the_commands(server):
    status, body = get(f"{server}/api/whatif?{query(**SEED)}")
    assert status == 200
    assert body == cli_json("whatif", *SEED_ARGS)
    params = dict(SEED, context="32k", concurrency="4", max_gpu_memory="20GiB", top="3")
    params.pop("max_model_len")
    status, body = get(f"{server}/api/fit?{query(**params)}")
    expected = json.loads(cli_json("fit", *SEED_ARGS[:5], "--context", "32k", "--concurrency", "4",
                                   "--max-gpu-memory", "20GiB", "--top", "3"))
    result = json.loads(body)
    result.pop("seconds"), expected.pop("seconds")  # the search's own wall time
    assert status == 200 and result == expected
    assert result["candidates"][0]["command"].startswith("vllm serve Qwen/Qwen2.5-7B-Instruct-AWQ")


def test_logs_api_equals_logs_from_standard_input(server):
    case = next(row for row in read_jsonl(DEV) if row["id"] == "vllm-pr10511-llama3-8b-h100-tp1")
    status, body = get(f"{server}/api/logs", json.dumps({"log": case["log"]}).encode(),
                       {"Content-Type": "application/json"})
    assert status == 200
    assert body == cli_json("logs", "-", stdin=case["log"])
    assert json.loads(body)["runs"][0]["observed"]["kv_cache_gib"] == case["observed"]["kv_cache_gib"] == 53.29
    status, plain = get(f"{server}/api/logs", case["log"].encode(), {"Content-Type": "text/plain"})
    assert (status, plain) == (200, body)


def test_logs_api_with_nvidia_smi_equals_the_command(server, tmp_path):
    case = next(row for row in read_jsonl(DEV) if row["id"] == "vllm-pr10511-llama3-8b-h100-tp1")
    smi = "index, name, memory.used [MiB], memory.total [MiB]\n0, NVIDIA H100 80GB HBM3, 74000 MiB, 81559 MiB\n"
    (tmp_path / "smi.csv").write_text(smi)
    status, body = get(f"{server}/api/logs", json.dumps({"log": case["log"], "nvidia_smi": smi}).encode(),
                       {"Content-Type": "application/json"})
    assert status == 200, body
    assert body == cli_json("logs", "-", "--nvidia-smi", str(tmp_path / "smi.csv"), stdin=case["log"])
    assert json.loads(body)["nvidia_smi"]["gpus"][0]["used_mib"] == 74000


def test_errors_are_one_json_line_with_their_status(server):
    status, body = get(f"{server}/api/explain?{query(model='Qwen/Qwen3-8B', gpu='no such gpu')}")
    assert status == 400 and "no such gpu" in json.loads(body)["error"].lower()
    status, body = get(f"{server}/api/explain?{query(model='Qwen/Qwen3-8B')}")
    assert (status, json.loads(body)["error"]) == (400, "no GPU given (gpu=NAME or gpu_memory=SIZE)")


def test_a_request_cannot_make_the_server_read_a_local_path(server):
    for model in ("/etc", str(MODELS / "Qwen--Qwen2.5-7B-Instruct"), "../groundtruth/models/x", "x.gguf"):
        status, body = get(f"{server}/api/explain?{query(model=model, gpu='4090')}")
        assert status == 403, (model, body)
        assert json.loads(body)["error"] == f"{model}: {NOT_ALLOWED}"  # one line, whether the path exists or not
    # a path a pasted log names is not read either (the guard sits under every local model read)
    log = f"$ vllm serve {MODELS / 'Qwen--Qwen2.5-7B-Instruct'}\n" + next(
        row for row in read_jsonl(DEV) if row["id"] == "vllm-pr10511-llama3-8b-h100-tp1")["log"].split("\n", 1)[1]
    status, body = get(f"{server}/api/logs", log.encode(), {"Content-Type": "text/plain"})
    assert status == 200
    assert "Qwen2.5-7B-Instruct" not in json.dumps(json.loads(body)["runs"][0].get("model_used_for_prediction"))


def test_allow_local_models_reads_only_under_its_directory():
    with running_server("--allow-local-models", str(MODELS)) as (base, _):
        status, body = get(f"{base}/api/explain?{query(model='Qwen--Qwen2.5-7B-Instruct', gpu='H100')}")
        assert status == 200, body
        assert json.loads(body)["weights_gib"] > 14
        status, body = get(f"{base}/api/explain?{query(model='/etc', gpu='H100')}")
        assert (status, json.loads(body)["error"]) == (403, f"/etc: {NOT_ALLOWED}")  # the directory is not named


def test_a_body_over_the_limit_is_a_clear_413(server):
    import http.client

    from vram_detective.web.service import MAX_BODY_BYTES

    # the declared length alone is refused: the answer comes before the body is sent, so the client never races
    # the server closing the connection (sending the whole body could end in a broken pipe on a loaded machine)
    host, port = urllib.parse.urlsplit(server).netloc.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        connection.putrequest("POST", "/api/logs")
        connection.putheader("Content-Type", "text/plain")
        connection.putheader("Content-Length", str(MAX_BODY_BYTES + 1))
        connection.endheaders()
        response = connection.getresponse()
        status, body = response.status, response.read().decode()
    finally:
        connection.close()
    assert status == 413
    assert json.loads(body)["error"].startswith(f"request body over {MAX_BODY_BYTES:,} bytes")


def test_a_counted_body_over_the_limit_is_a_clear_413(server):
    from vram_detective.web.service import MAX_BODY_BYTES

    # no declared length (chunked): the body is counted as it arrives. The client sends one byte past the limit and
    # then waits for the answer, never the closing chunk: the server has read all that was sent when it answers and
    # closes, so its close cannot reset a client still writing (urllib writes the whole body first; under load the
    # answer was lost to a reset)
    import socket

    address = urllib.parse.urlsplit(server)
    pieces = [b"x" * (MAX_BODY_BYTES // 2), b"x" * (MAX_BODY_BYTES - MAX_BODY_BYTES // 2), b"x"]
    with socket.create_connection((address.hostname, address.port), timeout=60) as connection:
        connection.sendall(f"POST /api/logs HTTP/1.1\r\nHost: {address.netloc}\r\nContent-Type: text/plain\r\n"
                           "Transfer-Encoding: chunked\r\n\r\n".encode())
        for piece in pieces:
            connection.sendall(b"%x\r\n" % len(piece) + piece + b"\r\n")
        answer = b""
        while not answer.endswith(b"}") and (received := connection.recv(65536)):
            answer += received
    head, _, body = answer.decode().partition("\r\n\r\n")
    assert head.split()[1] == "413"
    assert json.loads(body)["error"].startswith(f"request body over {MAX_BODY_BYTES:,} bytes")


def test_api_description_and_page(server):
    status, body = get(f"{server}/api")
    described = json.loads(body)
    from vram_detective.web.app import ROUTES

    # every JSON endpoint the server answers is described (/api/compare once was not)
    assert status == 200 and set(described["paths"]) == {path for path, _, _ in ROUTES if path.startswith("/api/")}
    status, html = get(f"{server}/?{query(**SEED)}")
    assert status == 200
    used = json.loads(cli_json("explain", *SEED_ARGS))["nvidia_smi_used_mib"]
    assert f'data-figure="nvidia_smi_used_mib" data-value="{used}"' in html  # rendered before any script runs
    # nothing on the page comes from another origin
    assert not re.findall(r'(?:src|href)="(?:https?:)?//', html)


def test_html_report_is_self_contained():
    from vram_detective import api
    from vram_detective.web.report import html_report

    b = api.explain("Qwen/Qwen2.5-7B-Instruct-AWQ", "RTX 4090", engine_version="0.6.3", max_model_len=32768)
    html = html_report(b)
    assert html.startswith("<!doctype html>") and "<svg" in html and "<style>" in html
    assert "<script" not in html and not re.findall(r'(?:src|href)="', html)
    assert f"vLLM 0.6.3 starts: nvidia-smi shows about {b.nvidia_smi_used_mib:,} MiB per GPU" in html
    assert "Loading model weights took 5.1982 GB" in html  # the log lines that release prints


SIM_SEED = {"model": "Qwen/Qwen2.5-7B-Instruct-AWQ", "gpu": "RTX 4090", "max_model_len": "32k",
            "workload": "chat:rate=2,duration=120"}
SIM_ARGS = ("simulate", "Qwen/Qwen2.5-7B-Instruct-AWQ", "--gpu", "RTX 4090", "--max-model-len", "32k")


def test_simulate_api_is_byte_for_byte_simulate_json(server):
    status, body = get(f"{server}/api/simulate?{query(**SIM_SEED)}")
    assert status == 200, body
    assert body == cli_json(*SIM_ARGS, "--workload", "chat:rate=2,duration=120")
    out = json.loads(body)
    assert out["verdict"].startswith(f"your traffic peaks at {out['result']['peak_bytes'] / 2**30:.1f} GiB of the "
                                     f"{out['result']['pool_bytes'] / 2**30:.1f} GiB pool")
    assert out["fit"]["feasible"] and out["fit"]["flag"] == "--gpu-memory-utilization"
    status, other = get(f"{server}/api/simulate?{query(**SIM_SEED, seed=3)}")
    assert status == 200 and other == cli_json(*SIM_ARGS, "--workload", "chat:rate=2,duration=120", "--seed", "3")


def test_simulate_api_with_a_pasted_trace_equals_the_command_on_that_file(server, tmp_path):
    lines = [json.dumps({"timestamp": 100 + i * 0.5, "prompt_tokens": 900 + 37 * i, "output_tokens": 120 + 11 * i,
                         "prefix_id": "sys", "prefix_tokens": 512}) for i in range(40)]
    (tmp_path / "trace.jsonl").write_text("\n".join(lines) + "\n")
    params = {key: SIM_SEED[key] for key in ("model", "gpu", "max_model_len")}
    status, body = get(f"{server}/api/simulate?{query(**params)}", json.dumps({"trace": "\n".join(lines)}).encode(),
                       {"Content-Type": "application/json"})
    assert status == 200, body
    expected = json.loads(cli_json(*SIM_ARGS, "--workload", f"trace:{tmp_path / 'trace.jsonl'}"))
    shown = json.loads(body)
    assert shown.pop("workload") == "trace:(pasted, 40 requests)"
    expected.pop("workload")
    assert shown == expected and shown["result"]["requests"] == 40


def test_simulate_caps_and_refusals(server):
    from vram_detective.web import service

    params = {key: SIM_SEED[key] for key in ("model", "gpu", "max_model_len")}
    for workload, words in (("chat:rate=2,duration=7200", f"cap of {service.MAX_SIM_DURATION_S:g} s"),
                            ("chat:rate=50,duration=600", f"cap of {service.MAX_SIM_REQUESTS:,} requests"),
                            ("agent:users=200,duration=60", f"cap of {service.MAX_SIM_USERS} users")):
        status, body = get(f"{server}/api/simulate?{query(**params, workload=workload)}")
        assert status == 413 and words in json.loads(body)["error"], (workload, body)
    status, body = get(f"{server}/api/simulate?{query(**params, workload='trace:/etc/passwd')}")
    assert status == 403 and "reads no trace files" in json.loads(body)["error"]
    status, body = get(f"{server}/api/simulate?{query(**params, workload='chatty:rate=2')}")
    assert status == 400 and "unknown workload 'chatty'" in json.loads(body)["error"]
    status, body = get(f"{server}/api/simulate?{query(**params)}", json.dumps({"trace": '{"timestamp": 1}'}).encode(),
                       {"Content-Type": "application/json"})
    assert status == 400 and json.loads(body)["error"] == "trace:1: missing 'prompt_tokens'"


def test_the_server_is_warm_before_its_first_request():
    """serve answers one catalog explain before it listens: the default engine's planning modules are loaded."""
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys; from vram_detective.web.service import warm_up; "
            "before = 'vram_detective.engines.vllm.plan' in sys.modules; warm_up(); "
            "print(before, 'vram_detective.engines.vllm.plan' in sys.modules, 'vram_detective.render' in sys.modules)")
    src = str(Path(__file__).resolve().parents[1] / "src")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={"PYTHONPATH": src,
                         "HF_HUB_OFFLINE": "1"}, timeout=60, check=True).stdout.split()
    assert out == ["False", "True", "True"]
