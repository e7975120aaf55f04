"""The web page's Fit tab (/fragment/fit on a real local server) answers for every engine as `fit` does: llama.cpp's
answers with their lines, and what comes nearest (with the line that starts it) when nothing meets the target."""
from __future__ import annotations

import re
import urllib.parse
import urllib.request
from html import unescape

import pytest

from tests.web_server import running_server


@pytest.fixture(scope="module")
def server():
    with running_server() as (base, _):
        yield base


def fragment(base: str, **params) -> str:
    with urllib.request.urlopen(f"{base}/fragment/fit?{urllib.parse.urlencode(params)}", timeout=300) as answer:
        assert answer.status == 200
        return unescape(answer.read().decode())


def _lines(html: str) -> list[str]:
    return re.findall(r"<code>(.*?)</code>", html)


def test_llamacpp_answers_each_question_with_its_line(server):
    html = fragment(server, model="Qwen/Qwen3-8B", gpu="4090", engine="llamacpp", gguf_type="Q4_K_M", context="8k")
    assert html.startswith('<p class="verdict">37/37 layers on the GPU at -c 8192') and "No configuration" not in html
    assert html.count('data-rank="') == 2
    assert [line.split(" -c ")[0] for line in _lines(html)] == ["llama-server -m Qwen3-8B-Q4_K_M.gguf -ngl all"] * 2


def test_sglang_with_nothing_meeting_the_target_shows_the_nearest(server):
    html = fragment(server, model="Qwen/Qwen3-8B", gpu="4090", engine="sglang", context="32k", concurrency="4",
                    max_gpu_memory="20GiB")
    assert "No configuration meets the target (4 x 32k tokens under 20GiB per GPU)." in html
    assert re.findall(r'data-relaxed="(\w+)"', html) == ["context", "gpus"]
    assert _lines(html)[1] == ("python -m sglang.launch_server --model-path Qwen/Qwen3-8B --tp 2 --kv-cache-dtype "
                               "fp8_e4m3 --context-length 32768")


def test_vllm_with_nothing_meeting_the_target_says_why_and_what_comes_nearest(server):
    html = fragment(server, model="Qwen/Qwen3-8B", gpu="4090", engine="vllm", context="128k", concurrency="4")
    assert "No configuration meets the target" in html
    assert re.findall(r'data-relaxed="([\w ]+)"', html)[:2] == ["model limit", "context"]
    assert "exceed the model's max_model_len (40,960)" in html
    assert _lines(html) and all(line.startswith("vllm serve Qwen/Qwen3-8B") for line in _lines(html))
