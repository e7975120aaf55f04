"""Issue 27: the web page's Forensics tab on SGLang, llama.cpp and Ollama logs, in a real browser (the
distribution's Chromium through Playwright, as tests/test_web_browser.py drives it): the verdict first, naming the
engine and the GPU the log names, GPU 0's bar, the figures in words, no raw JSON. Screenshots go to a temporary
directory (printed)."""
from __future__ import annotations

import re
import urllib.parse

import pytest

from conftest import GROUNDTRUTH, read_jsonl
from test_web_browser import browser, server, shots  # noqa: F401 - the module's fixtures: one browser, one server

CASES = {case["id"]: case for name in ("dev.jsonl", "dev-sglang.jsonl", "dev-llamacpp.jsonl")
         for case in read_jsonl(GROUNDTRUTH / name)}

# (case, the verdict's start, a figure the page shows in words)
PAGES = [
    ("vllm-pr10511-llama3-8b-h100-tp1", "vLLM 0.6.5 (V0) on ", ("weights", "14.96 GiB")),
    ("sglang-qwen3-06b-rtx5080-mineru", "SGLang 0.4.7 on NVIDIA GeForce RTX 5080: nvidia-smi 14,134 MiB of 16,303 MiB",
     ("K cache", "5.57 GiB")),
    ("llamacpp-b5622-qwen3-30b-a3b-q4km-4090-5090-experts-cpu", "llama.cpp b5622 on NVIDIA GeForce RTX 4090: GPU 0 holds",
     ("KV cache buffer on CUDA0", "384.00 MiB")),
    ("llamacpp-ollama-llama31-8b-q4_0-t4-kaggle-8k-np4", "Ollama on Tesla T4: GPU 0 holds",
     ("Ollama's estimate: KV cache", "1.00 GiB")),
]


@pytest.mark.parametrize("case_id, verdict, figure", PAGES)
def test_the_forensics_tab_answers_first_for_every_engine(case_id, verdict, figure, browser, server, shots):  # noqa: F811
    page = browser.new_page(viewport={"width": 1366, "height": 900})
    requests, problems = [], []
    page.on("request", lambda request: requests.append(request.url))
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.goto(server + "/?tab=logs")
    page.wait_for_selector("body[data-ready='1']")
    page.fill("#f-log", CASES[case_id]["log"])
    page.click("#analyse")
    page.wait_for_selector("#logs-result .verdict")
    first = page.eval_on_selector("#logs-result", "el => el.firstElementChild.className")
    assert first.startswith("verdict")
    assert page.inner_text("#logs-result .verdict").startswith(verdict)
    assert page.is_visible("#logs-result svg.bar")
    rows = page.eval_on_selector_all("#logs-result table.observed tr:has(td)",
                                     "els => els.map(e => [e.querySelector('th').innerText, e.querySelector('td').innerText])")
    assert list(figure) in [list(row) for row in rows]
    assert not any(re.fullmatch(r"[a-z0-9]+(_[a-z0-9]+)+", label) for label, _ in rows)  # words, not keys
    html = page.inner_html("#logs-result")
    assert "<pre" not in html and "relative_gap" not in html
    assert ("vLLM" in page.inner_text("#logs-result")) == verdict.startswith("vLLM")  # the log's own engine named
    page.screenshot(path=str(shots / f"forensics-{case_id}.png"), full_page=True)
    assert {urllib.parse.urlsplit(url).hostname for url in requests} == {"127.0.0.1"} and problems == []
    page.close()
