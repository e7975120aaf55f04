"""The page in a real browser: the distribution's headless Chromium driven by Playwright (pointed at the
installed browser; never `playwright install`), against a real `vram-detective serve` on a free loopback
port. Screenshots are kept under a temporary directory (printed), never committed.

No skip: a missing browser or Playwright fails with the command that installs it (.ci/run does)."""
from __future__ import annotations

import json
import shutil
import time
import urllib.parse

import pytest

from conftest import DEV, read_jsonl
from web_server import cli_json, running_server

SEED_ARGS = ("Qwen/Qwen2.5-7B-Instruct-AWQ", "--gpu", "RTX 4090", "--vllm-version", "0.6.3", "--max-model-len", "32768")
LOG_CASE = "vllm-pr10511-llama3-8b-h100-tp1"
CHECKED = ("nvidia_smi_used_mib", "weights_gib", "kv_cache_gib", "num_gpu_blocks", "kv_cache_tokens",
           "max_concurrency", "max_model_len", "total_gpu_gib")


def _chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.fail("no chromium on PATH: the browser tests need the distribution's package "
                    "(apt-get install -y chromium; .ci/run installs it)")
    return path


@pytest.fixture(scope="module")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ModuleNotFoundError:
        pytest.fail("playwright is not installed: pip install '.[test]' (the browser itself comes from apt: chromium)")
    with sync_playwright() as driver:
        chromium = driver.chromium.launch(executable_path=_chromium(), headless=True, args=["--no-sandbox"])
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def server():
    with running_server() as (base, _):
        yield base


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    folder = tmp_path_factory.mktemp("web-screenshots")
    print(f"\nscreenshots: {folder}")
    return folder


def _watch(page, requests: list, problems: list) -> None:
    page.on("request", lambda request: requests.append(request.url))
    page.on("console", lambda message: problems.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: problems.append(str(error)))


def _figures(page) -> dict:
    return page.eval_on_selector_all("#explain-result [data-figure]",
                                     "els => Object.fromEntries(els.map(e => [e.dataset.figure, JSON.parse(e.dataset.value)]))")


def _only_loopback(requests: list, base: str) -> None:
    hosts = {urllib.parse.urlsplit(url).hostname for url in requests if not url.startswith(("data:", "about:"))}
    assert hosts == {"127.0.0.1"}, f"requests outside 127.0.0.1: {sorted(hosts)}"
    assert any(url.startswith(base + "/fragment/explain") for url in requests)


def _answer_late(page, seconds: float) -> None:
    """Hold every explain answer back, as a loaded server does: the page must not depend on answers coming fast
    (a field left by focus moving to a slider once reset the comparison this way, on a loaded CI machine)."""
    def hold(route):
        time.sleep(seconds)
        route.continue_()
    page.route("**/fragment/explain*", hold)


@pytest.mark.parametrize("latency", [0.0, 0.4], ids=["fast", "slow-server"])
def test_explain_page_matches_explain_json_and_recomputes_live(browser, server, shots, latency):
    page = browser.new_page(viewport={"width": 1200, "height": 1400})
    requests, problems = [], []
    _watch(page, requests, problems)
    if latency:
        _answer_late(page, latency)
    page.goto(server + "/")
    page.wait_for_selector("body[data-ready='1']")
    # pick the seed's case with the controls, as a person would
    page.fill("#f-model", "Qwen/Qwen2.5-7B-Instruct-AWQ")
    page.fill("#f-gpu", "RTX 4090")
    page.select_option("#f-version", "0.6.3")
    page.wait_for_selector("#explain-result [data-figure='nvidia_smi_used_mib']")
    page.eval_on_selector("#f-max_model_len", "el => { el.value = '32768'; el.dispatchEvent(new Event('input', {bubbles: true})); }")
    # 32768 is also the model's own length: wait for the answer to the lever (its launch line), not the figure
    page.wait_for_function("() => (document.querySelector('#explain-result .launch code') || {}).innerText"
                           "?.endsWith('--max-model-len 32768')")
    expected = json.loads(cli_json("explain", *SEED_ARGS))
    shown = _figures(page)
    figures = {**expected[expected["engine_name"]], **expected}  # the engine's own figures nested (schema 2)
    assert {key: shown[key] for key in CHECKED} == {key: figures[key] for key in CHECKED}
    bar = page.get_attribute("#explain-result figure.smi", "data-used-mib")
    assert int(bar) == expected["nvidia_smi_used_mib"]
    assert page.inner_text("#explain-result .log pre").splitlines() == expected["log_lines"]
    assert page.inner_text("#explain-result .launch code") == "vllm serve Qwen/Qwen2.5-7B-Instruct-AWQ --max-model-len 32768"
    page.screenshot(path=str(shots / "explain-seed.png"), full_page=True)

    # the utilization slider, moved with the keyboard: 0.90 -> 0.80 in ten steps
    page.focus("#f-gpu_memory_utilization")
    for _ in range(10):
        page.keyboard.press("ArrowLeft")
    page.wait_for_function("() => new URLSearchParams(location.search).get('gpu_memory_utilization') === '0.8'")
    moved = json.loads(cli_json("explain", *SEED_ARGS, "--gpu-memory-utilization", "0.8"))
    page.wait_for_selector(f"#explain-result [data-figure='nvidia_smi_used_mib'][data-value='{moved['nvidia_smi_used_mib']}']")
    shown = _figures(page)
    moved = {**moved[moved["engine_name"]], **moved}
    assert {key: shown[key] for key in CHECKED} == {key: moved[key] for key in CHECKED}
    assert shown["kv_cache_tokens"] < expected["kv_cache_tokens"]
    # the change from the first state (drawn once the new figures are in: wait for it, it is asynchronous)
    page.wait_for_function("() => (document.querySelector('#explain-result .delta') || {}).innerText"
                           "?.includes('nvidia-smi -')")
    page.screenshot(path=str(shots / "explain-utilization-0.8.png"), full_page=True)

    # the URL holds the whole state: a fresh page from it shows the same figures before any script runs
    other = browser.new_page()
    _watch(other, requests, problems)
    other.goto(page.url)
    assert _figures(other) == shown
    other.click("#theme")
    other.wait_for_function("() => document.documentElement.dataset.theme !== undefined")
    other.screenshot(path=str(shots / "explain-other-theme.png"), full_page=True)
    other.close()
    _only_loopback(requests, server)
    assert problems == []
    page.close()


def test_forensics_tab_parses_a_real_log(browser, server, shots):
    case = next(row for row in read_jsonl(DEV) if row["id"] == LOG_CASE)
    page = browser.new_page(viewport={"width": 1200, "height": 1400})
    requests, problems = [], []
    _watch(page, requests, problems)
    page.goto(server + "/?tab=logs")
    page.wait_for_selector("body[data-ready='1']")
    assert page.is_visible("#panel-logs") and not page.is_visible("#panel-explain")
    page.fill("#f-log", case["log"])
    page.click("#analyse")
    page.wait_for_selector("#logs-result .run")
    observed = page.eval_on_selector_all("#logs-result table.observed [data-figure]",
                                         "els => Object.fromEntries(els.map(e => [e.dataset.figure, JSON.parse(e.dataset.value)]))")
    assert observed == case["observed"]
    inferred = page.inner_text("#logs-result table.inferred")
    assert "meta-llama/Meta-Llama-3-8B" in inferred and "0.6.5" in inferred
    bars = page.eval_on_selector_all("#logs-result svg.pairs rect.observed", "els => els.map(e => e.dataset.key)")
    assert "kv_cache_gib" in bars and "weights_gib" in bars
    page.screenshot(path=str(shots / "forensics.png"), full_page=True)
    hosts = {urllib.parse.urlsplit(url).hostname for url in requests}
    assert hosts == {"127.0.0.1"} and problems == []
    page.close()


def test_keyboard_reaches_the_tabs_and_the_fit_view(browser, server, shots):
    page = browser.new_page(viewport={"width": 1200, "height": 1000})
    page.goto(server + "/?model=Qwen%2FQwen2.5-7B-Instruct-AWQ&gpu=RTX+4090&version=0.6.3&tab=fit&context=32k&concurrency=4")
    page.wait_for_selector("#fit-result table.fit")
    assert page.inner_text("#fit-result table.fit code").startswith("vllm serve Qwen/Qwen2.5-7B-Instruct-AWQ")
    page.focus("#tab-fit")
    page.keyboard.press("ArrowRight")
    assert page.get_attribute("#tab-simulate", "aria-selected") == "true"
    page.keyboard.press("ArrowRight")  # wraps round to the first tab
    assert page.get_attribute("#tab-explain", "aria-selected") == "true"
    assert page.evaluate("() => document.activeElement.id") == "tab-explain"
    page.wait_for_selector("#explain-result [data-figure='nvidia_smi_used_mib']")
    page.screenshot(path=str(shots / "fit-then-explain.png"), full_page=True)
    page.close()


SIM_ARGS = ("simulate", "Qwen/Qwen2.5-7B-Instruct-AWQ", "--gpu", "RTX 4090", "--max-model-len", "32768",
            "--workload", "chat:rate=2,duration=120")


def _sim_figures(page) -> dict:
    return page.eval_on_selector_all("#simulate-result table.sim-figures [data-figure]",
                                     "els => Object.fromEntries(els.map(e => [e.dataset.figure, JSON.parse(e.dataset.value)]))")


def _check_simulation(page, expected: dict) -> None:
    result, fit = expected["result"], expected["fit"]
    assert page.inner_text("#simulate-result .sim-verdict") == expected["verdict"]
    chart = "#simulate-result svg.occupancy"
    assert int(page.get_attribute(chart, "data-pool-blocks")) == result["pool_blocks"]
    assert int(page.get_attribute(chart, "data-peak-blocks")) == result["peak_blocks"]
    assert int(page.get_attribute(chart, "data-buckets")) == len(result["occupancy"])
    assert page.eval_on_selector_all(f"{chart} line.preempt", "els => els.length") == len(result["preemption_log"])
    assert int(page.get_attribute(f"{chart} line.pool", "data-blocks")) == result["pool_blocks"]
    assert int(page.get_attribute(f"{chart} line.needed", "data-blocks")) == fit["needed_blocks"]
    # the peak line reaches the peak: its highest point is the peak bucket's maximum
    assert max(peak for _, peak, _ in result["occupancy"]) == result["peak_blocks"]
    shown = _sim_figures(page)
    assert shown and all(shown[key] == result[key] for key in shown)
    assert page.get_attribute("#simulate-result .sim-fit", "data-flag") == fit["flag"]
    assert json.loads(page.get_attribute("#simulate-result .sim-fit", "data-value")) == fit["value"]
    assert f"--gpu-memory-utilization {fit['value']}" in page.inner_text("#simulate-result .launch code")


def test_simulate_tab_runs_the_seed_case_and_matches_simulate_json(browser, server, shots):
    expected = json.loads(cli_json(*SIM_ARGS))
    page = browser.new_page(viewport={"width": 1200, "height": 1400})
    requests, problems = [], []
    _watch(page, requests, problems)
    page.goto(server + "/?model=Qwen%2FQwen2.5-7B-Instruct-AWQ&gpu=RTX+4090&max_model_len=32768")
    page.wait_for_selector("body[data-ready='1']")
    page.click("#tab-simulate")
    assert page.is_visible("#panel-simulate") and not page.is_visible("#panel-explain")
    page.select_option("#f-sim_shape", "chat")
    page.fill("#f-sim_rate", "2")
    page.fill("#f-sim_duration", "120")
    page.click("#simulate")
    page.wait_for_selector("#simulate-result svg.occupancy", timeout=60000)
    _check_simulation(page, expected)
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(page.url).query)
    assert query["tab"] == ["simulate"] and query["workload"] == ["chat:rate=2,duration=120"]
    page.screenshot(path=str(shots / "simulate-seed.png"), full_page=True)
    # the URL holds the state: a fresh page from it runs the same simulation
    other = browser.new_page(viewport={"width": 1200, "height": 1400})
    _watch(other, requests, problems)
    other.goto(page.url)
    other.wait_for_selector("#simulate-result svg.occupancy", timeout=60000)
    assert other.input_value("#f-sim_rate") == "2" and other.input_value("#f-sim_duration") == "120"
    _check_simulation(other, expected)
    other.close()
    hosts = {urllib.parse.urlsplit(url).hostname for url in requests if not url.startswith(("data:", "about:"))}
    assert hosts == {"127.0.0.1"}, f"requests outside 127.0.0.1: {sorted(hosts)}"
    assert any("/fragment/simulate?" in url for url in requests) and problems == []
    page.close()


XSS = '"><img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'


def test_error_messages_echoing_input_are_never_html(browser, server, tmp_path):
    """Errors quote the input ('not a vLLM version: ...'): on the page (served and live-updated) and in an HTML
    report they are text, never markup: no element is made from them and no script of theirs runs."""
    page = browser.new_page()
    problems: list = []
    page.on("pageerror", lambda error: problems.append(str(error)))
    query = urllib.parse.urlencode({"model": "Qwen/Qwen3-8B", "gpu": "H100", "version": XSS})
    page.goto(f"{server}/?{query}")
    page.wait_for_selector("body[data-ready='1']")
    page.wait_for_selector(".error")
    assert "not a vLLM version" in page.inner_text(".error") and "onerror" in page.inner_text(".error")
    page.goto(f"{server}/?" + urllib.parse.urlencode({"model": "Qwen/Qwen3-8B", "gpu": "H100 " + XSS}))
    page.wait_for_selector("body[data-ready='1']")
    page.wait_for_selector(".error")
    assert "window.__pwned" in page.inner_text(".error")
    assert page.evaluate("() => window.__pwned === undefined && document.querySelectorAll('img[src=x]').length === 0")
    page.close()
    report = tmp_path / "report.html"
    log = next(row for row in read_jsonl(DEV) if row["id"] == LOG_CASE)["log"]
    (tmp_path / "x.log").write_text(log.replace("Loading model weights", XSS + " Loading model weights", 1))
    import subprocess
    import sys

    from web_server import cli_env

    subprocess.run([sys.executable, "-m", "vram_detective", "logs", str(tmp_path / "x.log"), "--html", str(report)],
                   env=cli_env(), capture_output=True, timeout=120)
    if report.exists():
        view = browser.new_page()
        view.goto(report.as_uri())
        assert view.evaluate("() => window.__pwned === undefined && document.querySelectorAll('img[src=x]').length === 0")
        view.close()
    assert problems == []
