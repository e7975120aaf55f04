"""The JSON API's parameters against a real `vram-detective serve`: an unknown one is 422 naming it (with the
one meant), a start the engine refuses is 422 with what `--json` prints, token counts read as every engine's
context (32k), and each workload preset of the Simulate tab runs within the page's caps on every engine."""
from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request

import pytest

from web_server import cli_json, running_server

QWEN = {"model": "Qwen/Qwen3-8B", "gpu": "RTX 4090"}


@pytest.fixture(scope="module")
def server():
    with running_server() as (base, _):
        yield base


def _get(base: str, path: str, params: dict) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"{base}{path}?{urllib.parse.urlencode(params)}", timeout=120) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.mark.parametrize("path", ["/api/explain", "/api/fit", "/api/whatif", "/api/simulate"])
def test_an_unknown_parameter_is_422_with_the_one_meant(server, path):
    status, body = _get(server, path, {**QWEN, "max_model_length": "8k", "vllm_version": "0.6.3"})
    assert status == 422
    assert body["error"] == ("unknown parameters: 'max_model_length' (did you mean max_model_len?), "
                             "'vllm_version' (did you mean version?); see /api")
    status, body = _get(server, path, {**QWEN, "gpu_memory_utilisation": "0.8"})
    assert (status, body["error"]) == (422, "unknown parameter: 'gpu_memory_utilisation' (did you mean "
                                            "gpu_memory_utilization?); see /api")
    status, body = _get(server, path, {**QWEN, "colour": "blue"})
    assert (status, body["error"]) == (422, "unknown parameter: 'colour'; see /api")


def test_a_refused_start_is_422_with_the_commands_json(server):
    status, body = _get(server, "/api/explain", {**QWEN, "max_model_len": "32k"})
    expected = json.loads(cli_json("explain", "Qwen/Qwen3-8B", "--gpu", "RTX 4090", "--max-model-len", "32k"))
    assert status == 422 and body["startup_failed"] is True and body == expected
    assert "32768" in body["failure"]["message"]
    status, body = _get(server, "/api/explain", {**QWEN, "max_model_len": "16k"})
    assert status == 200 and body["startup_failed"] is False and body["max_model_len"] == 16384


@pytest.mark.parametrize("engine, setting", [("vllm", "max_model_len"), ("sglang", "context_length"),
                                             ("llamacpp", "n_ctx"), ("ollama", "num_ctx")])
def test_32k_is_32768_tokens_for_every_engines_context(server, engine, setting):
    status, given = _get(server, "/api/explain", {**QWEN, "engine": engine, setting: "32k", "gpu": "H100"})
    status_n, plain = _get(server, "/api/explain", {**QWEN, "engine": engine, setting: "32768", "gpu": "H100"})
    assert status == status_n == 200 and given == plain and given["max_model_len"] == 32768


@pytest.mark.parametrize("engine", ["vllm", "sglang", "llamacpp", "ollama"])
def test_every_workload_preset_runs_on_every_engine(server, engine):
    """The page fills a picked shape with its preset (web/service.py WORKLOAD_PRESETS): never over the page's
    own cap (longdoc's 2/s for 600 s was), and answered on every engine, or plainly not offered."""
    from vram_detective.web.service import WORKLOAD_PRESETS

    for shape in ("rag", "longdoc", "agent"):  # chat runs in the browser tests (test_web_pages.py)
        spec = f"{shape}:{WORKLOAD_PRESETS[shape]}"
        status, body = _get(server, "/api/simulate", {**QWEN, "engine": engine, "gpu": "H100", "workload": spec})
        if status == 200:
            assert body["workload"] == spec and body["verdict"].startswith("your traffic"), body
        else:  # an engine without a pool simulator says so; never the cap
            assert status == 400 and "not modelled" in body["error"], (spec, status, body)
            assert "cap" not in body["error"]


@pytest.mark.parametrize("line, typo, meant", [
    ("python -m sglang.launch_server --model-path Qwen/Qwen3-8B --mem-fraction-statik 0.85", "--mem-fraction-statik",
     "--mem-fraction-static"),
    ("vllm serve Qwen/Qwen3-8B --max-model-lenn 8192", "--max-model-lenn", "--max-model-len"),
])
def test_a_misspelt_flag_in_a_pasted_line_is_400_naming_the_flag_meant(server, line, typo, meant):
    status, body = _get(server, "/api/explain", {"line": line, "gpu": "RTX 4090"})
    label = "SGLang" if "sglang" in line else "vLLM"
    assert (status, body["error"]) == (400, f"unknown flag in the launch line: {typo} (did you mean {meant}?); "
                                            f"{label} would exit at once on it")
    status, body = _get(server, "/api/explain", {"line": line.replace(typo, meant), "gpu": "RTX 4090"})
    assert status == 200 and body["startup_failed"] is False


def test_v1s_re_reserved_activation_buffers_are_named_once():
    """vLLM V1 reserves the profile run's activation buffers again after start (nvidia-smi counts them): the bar
    names that part for what it is, not "other (allocator)" beside a ghost of the same size said to be freed."""
    from vram_detective import api
    from vram_detective.web.report import gpu_segments, legend_html

    b = api.explain("Qwen/Qwen3-8B", "RTX 4090", vllm_version="0.33.0")
    parts = {segment.key: segment for segment in gpu_segments(b)}
    assert "other" not in parts and parts["activation_peak"].bytes == b.activation_peak_bytes
    assert abs(parts["reserved"].bytes - b.activation_peak_bytes) < 2**20  # nvidia-smi in whole MiB
    legend = legend_html(b)
    assert "activation buffers reserved again after the warm-up <b>1.43 GiB</b>" in legend
    assert "other (allocator" not in legend and "not in nvidia-smi" not in legend
    # V0 empties the cache after profiling: no such part
    v0 = {segment.key for segment in gpu_segments(api.explain("Qwen/Qwen2.5-7B-Instruct-AWQ", "RTX 4090",
                                                              vllm_version="0.6.3", max_model_len=32768))}
    assert "reserved" not in v0
