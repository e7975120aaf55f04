"""Several GPUs on the web page, in a real Chromium against a real `vram-detective serve`, at a desktop size
(1366 x 900) and a phone (390 x 844): one bar and one nvidia-smi figure per GPU for a two-GPU llama.cpp split
(-ts 1,1), vLLM TP 2 and PP 2, SGLang TP 2 and Ollama on two GPUs; each bar's figure is /api/explain's for that
GPU; the verdict is on screen without scrolling; the bars fit the screen; the split survives a reload and the
launch line writes it as the engine reads it. A screenshot of each is written (the folder is printed).

No skip: a missing browser or Playwright fails with the command that installs it (.ci/run does)."""
from __future__ import annotations

import urllib.parse

import pytest

from test_web_browser import browser, server, shots  # noqa: F401 - the shared fixtures (one browser, one server)
from test_web_pages import SIZES, _api, _check_screen, _open

MODEL = "Qwen/Qwen3-8B"
# case -> (query, the setting that puts it on two GPUs, the launch line's words for it)
CASES = {
    "llamacpp-ts-1-1": ({"engine": "llamacpp", "gpu": "RTX 4090", "n_ctx": "16k", "tensor_split": "1,1"},
                        "tensor_split", "-ts 1,1"),
    "vllm-tp2": ({"engine": "vllm", "gpu": "H100", "max_model_len": "16k", "tensor_parallel_size": "2"},
                 "tensor_parallel_size", "--tensor-parallel-size 2"),
    "vllm-pp2": ({"engine": "vllm", "gpu": "H100", "max_model_len": "16k", "pipeline_parallel_size": "2"},
                 "pipeline_parallel_size", "--pipeline-parallel-size 2"),
    "sglang-tp2": ({"engine": "sglang", "gpu": "H100", "context_length": "16k", "tp_size": "2"},
                   "tp_size", "--tp 2"),
    "ollama-2-gpus": ({"engine": "ollama", "gpu": "RTX 4090", "num_ctx": "16k", "num_gpus": "2"},
                      "num_gpus", "CUDA_VISIBLE_DEVICES=0,1"),
}


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("case", CASES)
def test_one_bar_per_gpu(browser, server, shots, case, size):  # noqa: F811
    query, setting, words = CASES[case]
    query = {"model": MODEL, **query}
    status, expected = _api(server, "/api/explain", query)
    assert status == 200, expected
    devices = expected["devices"]
    assert len(devices) == 2
    problems: list = []
    page = _open(browser, size, problems)
    page.goto(f"{server}/?{urllib.parse.urlencode(query)}")
    page.wait_for_selector("#explain-result figure.smi .gpu svg.bar")
    verdict = _check_screen(page, "explain", size, shots, f"gpus-{case}")
    page.screenshot(path=str(shots / f"gpus-{case}-{size}-full.png"), full_page=True)
    for d in devices:
        assert f"{d['nvidia_smi_used_mib']:,} MiB" in verdict
    gpus = page.locator("#explain-result figure.smi .gpu")
    assert gpus.count() == 2 and page.locator("#explain-result figure.smi svg.bar").count() == 2
    width, _ = SIZES[size]
    for index, d in enumerate(devices):
        gpu = gpus.nth(index)
        assert gpu.get_attribute("data-gpu") == d["name"]
        assert int(gpu.get_attribute("data-used-mib")) == d["nvidia_smi_used_mib"]
        assert f"nvidia-smi {d['nvidia_smi_used_mib']:,} MiB" in gpu.inner_text()
        box = gpu.locator("svg.bar").bounding_box()
        assert box is not None and box["width"] > 0.5 * min(width, 1100) and box["x"] + box["width"] <= width
        # the bar's parts are that GPU's: its weights segment(s) hold its own weights
        held = gpu.locator("svg.bar rect.weights").evaluate_all("els => els.reduce((s, e) => s + Number(e.dataset.bytes), 0)")
        assert held / 2**30 == pytest.approx(d["weights_gib"], abs=0.001)
    assert words in page.inner_text("#explain-result .launch code")
    assert page.input_value(f"#f-{setting}") == query[setting]
    page.reload()
    page.wait_for_selector("#explain-result figure.smi .gpu svg.bar")
    assert urllib.parse.parse_qs(urllib.parse.urlsplit(page.url).query)[setting] == [query[setting]]
    assert page.locator("#explain-result figure.smi .gpu").count() == 2
    assert problems == []
    page.close()


@pytest.mark.parametrize("size", SIZES)
def test_forensics_tab_draws_each_gpu_of_a_two_gpu_log(browser, server, shots, size):  # noqa: F811
    """A real llama.cpp log over an RTX 4090 and an RTX 5090: the Forensics tab draws one bar per GPU, each with
    the figure /api/logs gives it."""
    from conftest import GROUNDTRUTH, read_jsonl

    case = next(row for row in read_jsonl(GROUNDTRUTH / "dev-llamacpp.jsonl")
                if row["id"] == "llamacpp-b5622-qwen3-30b-a3b-q4km-4090-5090-experts-cpu")
    problems: list = []
    page = _open(browser, size, problems)
    page.goto(f"{server}/?tab=logs")
    page.wait_for_selector("body[data-ready='1']")
    page.fill("#f-log", case["log"])
    page.click("#analyse")
    page.wait_for_selector("#logs-result .verdict", timeout=60000)
    page.evaluate("() => window.scrollTo(0, document.querySelector('#logs-result').offsetTop - 8)")
    page.screenshot(path=str(shots / f"gpus-logs-4090-5090-{size}.png"))
    gpus = page.locator("#logs-result .gpu")
    assert gpus.count() == 2 and page.locator("#logs-result .gpu svg.bar").count() == 2
    assert [gpus.nth(i).get_attribute("data-gpu") for i in range(2)] == ["GPU 0", "GPU 1"]
    assert "of 32,607 MiB" in gpus.nth(1).inner_text()  # GPU 1 is the RTX 5090 the log names
    width, _ = SIZES[size]
    assert page.evaluate("() => document.documentElement.scrollWidth") <= width
    assert problems == []
    page.close()
