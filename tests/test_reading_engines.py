"""Issue 23: an nvidia-smi reading read without a log (`logs --nvidia-smi F --model M --engine E`) is solved for
each engine's own pool lever through the engine interface (engines/base.py ReadingLever): vLLM's
gpu_memory_utilization, SGLang's --mem-fraction-static, llama.cpp's -c and Ollama's num_ctx; an engine without
such a lever is answered NotOffered the same way on every surface. The readings are real nvidia-smi output quoted
in groundtruth/ logs; each answer is the same JSON on the command line (a real subprocess), the web API (a real
local server) and the library."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request

import pytest

from tests.web_server import ROOT, cli_env, running_server

from vram_detective import api as core
from vram_detective import library
from vram_detective.errors import NotOffered

# (ground-truth file, case whose log quotes nvidia-smi) -> the reading
L40S = ("dev.jsonl", "file39689115050-qwen3-30b-a3b-2507-fp8-tp2-ep-2xl40s")  # vLLM 0.10.2, utilization 0.95
RTX5080 = ("dev-sglang.jsonl", "sglang-qwen3-06b-rtx5080-mineru")  # SGLang 0.4.10 at its default fraction
RTX4090 = ("dev.jsonl", "vllm-7768-internvl2-8b-2x4090")  # 14,214 MiB of a 4090
# engine -> (reading, model, release, tp, the answer's words before the value)
READINGS = {
    "vllm": (L40S, "Qwen/Qwen3-30B-A3B-Instruct-2507-FP8", "0.10.2", 2, "gpu_memory_utilization ≈"),
    "sglang": (RTX5080, "Qwen/Qwen3-0.6B", "0.4.10", None, "--mem-fraction-static ≈"),
    "llamacpp": (RTX4090, "Qwen/Qwen3-8B", None, None, "-c ≈"),
    "ollama": (RTX4090, "Qwen/Qwen3-8B", None, None, "num_ctx ≈"),
}
LEVERS = {"vllm": "gpu_memory_utilization", "sglang": "mem_fraction_static", "llamacpp": "n_ctx", "ollama": "num_ctx"}


def reading_text(case: tuple[str, str]) -> str:
    """The nvidia-smi table rows a case's log quotes, as nvidia-smi printed them."""
    name, case_id = case
    for line in (ROOT / "groundtruth" / name).read_text().splitlines():
        entry = json.loads(line)
        if entry["id"] == case_id:
            return "\n".join(row for row in entry["log"].splitlines() if row.startswith("|")) + "\n"
    raise LookupError(case_id)


def cli(*args: str, env: dict | None = None) -> tuple[int, str, str]:
    done = subprocess.run([sys.executable, "-m", "vram_detective", *args], cwd=ROOT, env=env or cli_env(),
                          capture_output=True, text=True, timeout=300)
    return done.returncode, done.stdout, done.stderr.strip()


def post(base: str, path: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=300) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.fixture(scope="module")
def server():
    with running_server() as (base, _):
        yield base


def _flags(engine: str, smi: str) -> list[str]:
    _, model, version, tp, _ = READINGS[engine]
    return (["logs", "--nvidia-smi", smi, "--model", model, "--engine", engine]
            + (["--engine-version", version] if version else []) + (["-tp", str(tp)] if tp else []))


@pytest.mark.parametrize("engine", READINGS)
def test_each_engine_solves_its_own_lever_the_same_on_every_surface(engine, server, tmp_path):
    case, model, version, tp, words = READINGS[engine]
    text = reading_text(case)
    smi = tmp_path / "smi.txt"
    smi.write_text(text)
    code, out, err = cli(*_flags(engine, str(smi)), "--json")
    assert code == 0, err
    by_cli = json.loads(out)
    status, by_api = post(server, "/api/logs", {"log": "", "nvidia_smi": text, "model": model, "engine": engine,
                                                "version": version, "tp": tp})
    by_library = library.logs("", nvidia_smi=text, model=model, engine=engine, engine_version=version, tp=tp).to_dict()
    assert status == 200 and by_cli == by_api == by_library
    assert by_cli["engine"] == engine and by_cli["log"] is None
    solved = by_cli[LEVERS[engine]]
    assert solved["where"] == "inside"
    code, out, _ = cli(*_flags(engine, str(smi)))
    value = solved["value"]
    shown = f"{value:.2f}" if isinstance(value, float) else f"{value:,}"
    assert code == 0 and f"matches {words} {shown} (predicted {by_cli['predicted_nvidia_smi_mib']:,} MiB)" in " ".join(
        out.split())


def test_the_web_page_fragment_answers_a_reading_as_the_terminal_does(server):
    """/fragment/logs (the page's logs tab) with nvidia-smi output and no log: the terminal's answer line."""
    text = reading_text(RTX4090)
    request = urllib.request.Request(server + "/fragment/logs", data=json.dumps(
        {"log": "", "nvidia_smi": text, "model": "Qwen/Qwen3-8B", "engine": "llamacpp"}).encode(),
        headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=300) as answer:
        html = answer.read().decode()
    assert answer.status == 200 and "matches -c ≈ 64,768 (predicted 14,197 MiB)." in html
    assert "KV cache pool" in html and "predicted at that context" in html


def test_vllm_finds_the_utilization_its_launch_line_gave():
    """--gpu-memory-utilization 0.95 on the launch line of the L40S run; the reading solves to 0.97."""
    found = library.logs("", nvidia_smi=reading_text(L40S), model=READINGS["vllm"][1], engine_version="0.10.2",
                         tp=2).to_dict()
    assert found["engine"] == "vllm" and found["vllm_version"] == "0.10.2" and found["engine_path"] == "v1"
    assert found["gpu_memory_utilization"]["value"] == 0.97  # 0.02 above the launch line's 0.95


def test_sglang_finds_the_default_fraction_the_run_used():
    """The RTX 5080 run gave no --mem-fraction-static: SGLang 0.4.10 picked its default for the card (0.818)."""
    found = library.logs("", nvidia_smi=reading_text(RTX5080), model="Qwen/Qwen3-0.6B", engine="sglang",
                         engine_version="0.4.10").to_dict()
    default = core.explain("Qwen/Qwen3-0.6B", "RTX 5080", engine="sglang", engine_version="0.4.10")
    assert default.figure("mem_fraction_static") == 0.818
    assert found["mem_fraction_static"]["value"] == 0.82  # the default, to 2 decimals
    assert found["engine_version"] == "0.4.10" and found["used_mib"] == 14134
    # sglang::scheduler is the one process listed: the whole reading is the engine's
    assert found["engine_mib"] == 14134 and found["other_processes_mib"] == 0
    assert abs(found["predicted_nvidia_smi_mib"] - 14134) < 0.01 * 14134


@pytest.mark.parametrize("engine", ["llamacpp", "ollama"])
def test_llamacpp_and_ollama_solve_the_context_to_the_grain(engine):
    """No fraction of the card: the context whose KV cache and compute buffers make the reading, in steps of
    256 tokens; the prediction there is within one step's memory of the reading."""
    key = LEVERS[engine]
    found = library.logs("", nvidia_smi=reading_text(RTX4090), model="Qwen/Qwen3-8B", engine=engine).to_dict()
    context = found[key]["value"]
    assert found["used_mib"] == 14214 and context % 256 == 0 and context == 64768
    at = core.explain("Qwen/Qwen3-8B", "RTX 4090", engine=engine, **{key: context}).nvidia_smi_used_mib
    step = core.explain("Qwen/Qwen3-8B", "RTX 4090", engine=engine, **{key: context + 256}).nvidia_smi_used_mib - at
    assert found["predicted_nvidia_smi_mib"] == at and abs(at - 14214) <= step


def test_ollama_is_solved_where_its_own_estimate_keeps_the_model_on_the_gpu():
    """Ollama moves layers to the CPU as num_ctx grows, so its figure falls again at the top of the range: the
    reading is found in the middle, not called 'more than Ollama takes at any num_ctx'."""
    top = core.explain("Qwen/Qwen3-8B", "RTX 4090", engine="ollama", num_ctx=131072).nvidia_smi_used_mib
    assert top < 14214
    found = library.logs("", nvidia_smi=reading_text(RTX4090), model="Qwen/Qwen3-8B", engine="ollama").to_dict()
    assert found["num_ctx"]["where"] == "inside"


# --- an engine without a lever: NotOffered on every surface ------------------------------------------------

FAKE = '''
from vram_detective.engines import ENGINES, get_engine


class NoLeverEngine:
    """llama.cpp in every respect but the reading: no setting sizes its memory from the card."""

    name, label, reading = "nolever", "NoLever", None

    def __getattr__(self, part):
        return getattr(get_engine("llamacpp"), part)


ENGINE = NoLeverEngine()
ENGINES["nolever"] = "nolever_engine:ENGINE"
'''


@pytest.fixture()
def fifth_engine_env(tmp_path):
    """A process whose registry has a fifth engine with no reading lever (registered at start-up)."""
    (tmp_path / "nolever_engine.py").write_text(textwrap.dedent(FAKE))
    (tmp_path / "sitecustomize.py").write_text("import nolever_engine  # noqa: F401\n")
    env = cli_env()
    env["PYTHONPATH"] = f"{tmp_path}:{env['PYTHONPATH']}"
    return env


def test_an_engine_without_a_lever_is_not_offered_the_same_way_everywhere(fifth_engine_env, tmp_path, monkeypatch):
    text = reading_text(RTX4090)
    smi = tmp_path / "smi.txt"
    smi.write_text(text)
    why = "NoLever has no setting that sizes its memory from the card"
    code, out, err = cli("logs", "--nvidia-smi", str(smi), "--model", "Qwen/Qwen3-8B", "--engine", "nolever",
                         env=fifth_engine_env)
    assert code == 2 and out == "" and why in err  # NotOffered: exit 2, one line
    monkeypatch.setattr("tests.web_server.cli_env", lambda: fifth_engine_env)  # the server starts with it too
    with running_server() as (base, _):
        status, body = post(base, "/api/logs", {"log": "", "nvidia_smi": text, "model": "Qwen/Qwen3-8B",
                                                "engine": "nolever"})
    assert status == 400 and why in body["error"]
    monkeypatch.syspath_prepend(str(tmp_path))
    from vram_detective.engines import ENGINES, get_engine

    get_engine.cache_clear()
    monkeypatch.setitem(ENGINES, "nolever", "nolever_engine:ENGINE")
    try:
        with pytest.raises(NotOffered, match=why):
            library.logs("", nvidia_smi=text, model="Qwen/Qwen3-8B", engine="nolever")
    finally:
        get_engine.cache_clear()


def test_a_log_names_its_engine_so_engine_goes_with_a_reading_only(tmp_path):
    log = tmp_path / "x.log"
    log.write_text("INFO 01-01 00:00:00 llm_engine.py:100] Initializing an LLM engine (v0.6.3) with config\n")
    code, _, err = cli("logs", str(log), "--engine", "sglang")
    assert code == 2 and "--engine is for nvidia-smi output read without a log" in err
