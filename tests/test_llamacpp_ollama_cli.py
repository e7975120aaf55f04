"""llama.cpp and Ollama end to end through the command line: a real GGUF file written here, a catalog model at a
llama.cpp mix, pasted llama-server / llama-cli / llama_cpp.server / ollama lines, an Ollama store with a real
manifest, `logs` on the dev logs (and `ollama ps`), `compare` with three engines, `whatif` / `fit`."""
import json
from pathlib import Path

import pytest

from test_llamacpp_engine import _write
from test_ollama import _store
from vram_detective.cli import main
from vram_detective.engines import get_engine
from vram_detective.engines.base import common_settings, is_launch_line, resolve_model

MIB = 2**20
CASES = {json.loads(line)["id"]: json.loads(line)
         for line in (Path(__file__).resolve().parents[1] / "groundtruth" / "dev-llamacpp.jsonl").read_text().splitlines()}
T4 = "llamacpp-ollama-llama31-8b-q4_0-t4-kaggle-8k-np4"
LAYER = 2 * 1024 + 2 * 131072 + 2 * 65536 + 3 * 262144  # one layer of _write's file (test_llamacpp_engine)


def own(out: dict) -> dict:
    """The engine's own figures: nested under its name in the JSON (schema 2)."""
    return out[out["engine_name"]]


def _json(capsys, argv) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture
def gguf_file(tmp_path):
    return str(_write(tmp_path / "tiny.gguf"))


@pytest.fixture
def store(tmp_path, monkeypatch):
    (tmp_path / "ollama").mkdir()
    _store(tmp_path / "ollama")
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "ollama"))
    return tmp_path / "ollama"


def test_explain_a_gguf_file(gguf_file, capsys):
    out = _json(capsys, ["explain", gguf_file, "--engine", "llamacpp", "--gpu", "4090", "-ngl", "99", "-c", "4096",
                         "--engine-version", "b5274", "--json"])
    assert out["engine_name"] == "llamacpp" and out["engine_version"] == "b5274"
    assert own(out)["cuda0_model_buffer_mib"] == round((2 * LAYER + 512000 + 1024) / MIB, 2)
    assert own(out)["cpu_mapped_model_buffer_mib"] == round(512000 / MIB, 2)  # token_embd stays on the host
    assert own(out)["cuda0_kv_buffer_mib"] == 4096 * 2 * 128 * 2 * 2 / MIB
    assert (own(out)["offloaded_layers"], own(out)["total_layers"], own(out)["layers_on_gpu"]) == (3, 3, 3)
    assert out["checkpoint_vs_gpu"]["tensors"] == 2 * 9 + 3
    assert main(["explain", gguf_file, "--engine", "llamacpp", "--gpu", "4090", "-ngl", "2", "-c", "4096"]) == 0
    text = capsys.readouterr().out
    assert "layers on the GPU (output layer counted) │ 2/3 (-ngl 2: CUDA0 2, CPU 1)" in text
    assert "CPU KV buffer" in text and "theory vs reality" not in text  # the header is the truth: no walk
    assert "GGUF header: 21 tensors" in text and "vs what llama.cpp holds" in text


def test_explain_a_catalog_model_at_a_mix(capsys):
    argv = ["explain", "Qwen/Qwen3-8B", "--engine", "llamacpp", "--gpu", "4090", "-c", "32768", "--json"]
    q4 = _json(capsys, argv + ["--gguf-type", "Q4_K_M"])
    q8 = _json(capsys, argv + ["--gguf-type", "q8_0"])
    assert q4["settings"]["gguf_type"] == {"value": "Q4_K_M", "given": True}
    assert q8["settings"]["gguf_type"]["value"] == "Q8_0"
    # Qwen3-8B: 36 layers x 8 KV heads x 128 x f16 x (K + V) per cell, 32768 cells
    assert own(q4)["cuda0_kv_buffer_mib"] == own(q8)["cuda0_kv_buffer_mib"] == 36 * 8 * 128 * 2 * 2 * 32768 / MIB
    assert 1.6 < own(q8)["cuda0_model_buffer_mib"] / own(q4)["cuda0_model_buffer_mib"] < 1.8  # 8.5 vs ~4.9 bits a weight
    assert main(["explain", "Qwen/Qwen3-8B", "--engine", "llamacpp", "--gpu", "4090", "--gguf-type", "Q9_X"]) == 2
    assert main(["explain", "Qwen/Qwen3-8B", "--gpu", "4090", "--gguf-type", "Q4_K_M"]) == 2  # not a vLLM setting


@pytest.mark.parametrize("line, settings", [
    ("llama-server -m Qwen/Qwen3-8B -ngl 99 -c 32768 -ctk q8_0 -ctv q8_0 -fa on --host 0.0.0.0",
     {"n_ctx": 32768, "type_k": "q8_0", "flash_attention": "on"}),
    ("./build/bin/llama-cli -m Qwen/Qwen3-8B -ngl 20 -c 8192", {"n_ctx": 8192, "n_gpu_layers": 20}),
    ("python -m llama_cpp.server --model Qwen/Qwen3-8B --n_gpu_layers -1 --n_ctx 16384", {"n_ctx": 16384}),
])
def test_pasted_llama_cpp_lines(line, settings, capsys):
    out = _json(capsys, ["explain", "--gpu", "4090", "--json", "--"] + line.split())
    assert out["engine_name"] == "llamacpp" and out["model"] == "Qwen/Qwen3-8B"
    assert own(out)["kv_cells"] == settings["n_ctx"]
    if "n_gpu_layers" in settings:
        assert own(out)["offloaded_layers"] == settings["n_gpu_layers"]
    if "type_k" in settings:
        assert own(out)["k_mib"] == 36 * 8 * 128 * 34 / 32 * 32768 / MIB  # q8_0: 34 bytes per 32 values


def test_launch_line_hooks():
    llama, ollama, vllm = get_engine("llamacpp"), get_engine("ollama"), get_engine("vllm")
    assert is_launch_line(llama, ["llama-server", "-m", "x.gguf"]) and not is_launch_line(llama, ["ollama", "run", "x"])
    assert is_launch_line(ollama, ["OLLAMA_NUM_PARALLEL=2", "ollama", "run", "qwen2.5:7b"])
    assert not is_launch_line(ollama, ["llama-server", "-m", "x"])
    assert common_settings(vllm, context=8192, gpus=2) == {"tensor_parallel_size": 2, "max_model_len": 8192}
    assert common_settings(llama, context=8192, gpus=2) == {"n_ctx": 8192, "num_gpus": 2}
    assert common_settings(ollama, context=8192) == {"num_ctx": 8192}
    assert resolve_model(vllm, "Qwen/Qwen3-8B") is None and resolve_model(ollama, "Qwen/Qwen3-8B") is None


def test_explain_an_ollama_name_from_the_store(store, capsys):
    out = _json(capsys, ["explain", "tiny:q4", "--engine", "ollama", "--gpu", "4090", "--num-ctx", "1024", "--json"])
    layer = 2 * 512 + 4 * 32768 + 3 * 65536
    assert out["engine_name"] == "ollama" and out["model"] == "tiny:q4"
    assert own(out)["cuda0_model_buffer_mib"] == round((2 * layer + 512 + 128000) / MIB, 2)  # tied output copied
    assert own(out)["kv_size_mib"] == round(2 * 1024 * 128 * 2 * 2 / MIB, 2)
    pasted = _json(capsys, ["explain", "--gpu", "4090", "--json", "--", "OLLAMA_KV_CACHE_TYPE=q8_0",
                            "OLLAMA_FLASH_ATTENTION=1", "ollama", "run", "tiny:q4"])
    assert pasted["engine_name"] == "ollama" and pasted["settings"]["kv_cache_type"]["value"] == "q8_0"
    assert own(pasted)["k_mib"] == own(pasted)["v_mib"] == round(2 * 128 * 34 / 32 * own(pasted)["kv_cells"] / MIB, 2)
    # llama.cpp's names read as Ollama's knobs: -c is num_ctx
    same = _json(capsys, ["explain", "tiny:q4", "--engine", "ollama", "--gpu", "4090", "-c", "1024", "--json"])
    assert own(same)["kv_size_mib"] == own(out)["kv_size_mib"]
    assert main(["explain", "tiny:missing", "--engine", "ollama", "--gpu", "4090"]) == 2
    assert "not in the Ollama store" in capsys.readouterr().err


def test_logs_of_an_ollama_server(tmp_path, capsys):
    log = tmp_path / "ollama.log"
    log.write_text(CASES[T4]["log"])
    report = _json(capsys, ["logs", str(log), "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "T4",
                            "--engine-version", "0.3.8", "--json"])
    assert report["engine"] == "ollama"
    assert report["settings"] == {"num_parallel": 4, "num_ctx": 2048, "flash_attention": False, "gguf_type": "Q4_0"}
    rows = {row["key"]: row for row in report["comparison"]}
    assert rows["cuda0_kv_buffer_mib"]["observed"] == rows["cuda0_kv_buffer_mib"]["predicted"] == 1024.0
    assert abs(rows["cuda0_model_buffer_mib"]["relative_gap"]) < 0.001
    found = {row["figure"]: row for row in report["findings"]["rows"]}
    assert found["KV cache"]["delta"] == 0.0 and found["graph"]["delta"] == 0.0
    assert found["weights"]["delta"] == pytest.approx(4.7 * 1024 - 4156.0 - 281.81)
    ps = tmp_path / "ps.txt"
    ps.write_text("NAME           ID              SIZE      PROCESSOR    UNTIL\n"
                  "llama3.1:8b    42182419e950    6.7 GB    100% GPU     4 minutes from now\n")
    with_ps = _json(capsys, ["logs", str(log), "--ollama-ps", str(ps), "--json"])
    assert with_ps["observed"]["ollama_ps_size_bytes"] == 6_700_000_000
    assert with_ps["findings"]["rows"][-1]["figure"] == "ollama ps SIZE"
    alone = _json(capsys, ["logs", str(ps), "--json"])  # `ollama ps` output given as the log
    assert alone["engine"] == "ollama" and alone["observed"]["ollama_ps_gpu_percent"] == 100
    assert main(["logs", str(log), "--ollama-ps", str(ps)]) == 0
    assert "Ollama's estimate vs llama.cpp's allocation" in capsys.readouterr().out


def test_logs_of_llama_cpp(tmp_path, capsys):
    case = CASES["llamacpp-glm-z1-32b-iq4xs-3090ti-32k-fa"]
    log = tmp_path / "llama.log"
    log.write_text(case["log"])
    report = _json(capsys, ["logs", str(log), "--json"])
    assert report["engine"] == "llamacpp" and report["engine_version"] == "b5274"  # as llama.cpp names its builds
    assert report["settings"] == {"gguf_type": "IQ4_XS", "n_gpu_layers": 62, "n_ctx": 32768, "n_batch": 2048,
                                  "n_ubatch": 512, "flash_attn": "on", "type_k": "f16", "type_v": "f16"}
    assert all(report["observed"][key] == value for key, value in case["observed"].items() if key in report["observed"])
    # a catalog model at the log's settings: the KV buffer follows from the shape alone
    qwen = CASES["llamacpp-b7342-qwen3-coder-30b-a3b-q8-a100-40g-64k-np4"]
    log.write_text(qwen["log"])
    report = _json(capsys, ["logs", str(log), "--model", "Qwen/Qwen3-30B-A3B", "--gpu", "A100-40G", "--json"])
    rows = {row["key"]: row for row in report["comparison"]}
    assert rows["cuda0_kv_buffer_mib"]["relative_gap"] == 0.0 and rows["kv_cells"]["observed"] == 65536
    assert rows["offloaded_layers"]["predicted"] == 49


def test_compare_three_engines(capsys):
    assert main(["compare", "Qwen/Qwen3-8B", "--gpu", "4090", "--context", "32k", "--version", "vllm=0.33.0",
                 "--version", "sglang=0.5.23", "--version", "llamacpp=b11312"]) == 0
    out = capsys.readouterr().out
    assert "vLLM 0.33.0" in out and "SGLang 0.5.23" in out and "llama.cpp b11312" in out
    assert "4.35 GiB (Q4_K_M)" in out and "host RAM" in out
    assert "budget: llama.cpp 9.47 GiB vs vLLM 21.76 GiB" in out
    assert "weights: -10.92 GiB (llama.cpp holds the Q4_K_M mix, vLLM the checkpoint as stored)" in out
    data = _json(capsys, ["compare", "Qwen/Qwen3-8B", "--gpu", "4090", "--context", "8k", "--engines",
                          "llamacpp,ollama", "--gguf-type", "Q8_0", "--json"])
    assert [e["engine_name"] for e in data["engines"]] == ["llamacpp", "ollama"]
    assert own(data["engines"][0])["kv_cells"] == 8192 and data["engines"][1]["settings"]["num_ctx"]["value"] == 8192
    assert own(data["engines"][0])["cuda0_model_buffer_mib"] == own(data["engines"][1])["cuda0_model_buffer_mib"]


def test_whatif_and_fit_llama_cpp(capsys):
    assert main(["whatif", "Qwen/Qwen3-8B", "--engine", "llamacpp", "--gpu", "4090", "-c", "32768"]) == 0
    out = capsys.readouterr().out
    assert "-ctk q8_0 -ctv q8_0 -fa on" in out and "llama-server -m Qwen3-8B-Q8_0.gguf -ngl all -c 32768" in out
    assert "-ngl 18 -c 32768" in out  # half the layers
    answers = _json(capsys, ["fit", "Qwen/Qwen3-8B", "--engine", "llamacpp", "--gpu", "3060", "--gguf-type", "Q8_0",
                             "--json"])["answers"]
    assert answers[0]["command"].startswith("llama-server -m Qwen3-8B-Q8_0.gguf -ngl ")
    assert "-c 32768" in answers[0]["command"] and answers[0]["vram_per_gpu_mib"]["CUDA0"] <= 12 * 1024
    assert answers[1]["command"].startswith("llama-server -m Qwen3-8B-Q8_0.gguf -ngl all -c ")
    ngl = int(answers[0]["command"].split("-ngl ")[1].split()[0])
    assert 0 < ngl < 37  # 8.1 GiB of Q8_0 weights and 4.5 GiB of KV do not all fit 12 GiB
    assert main(["whatif", "Qwen/Qwen3-8B", "--engine", "ollama", "--gpu", "3060"]) == 0
    assert "OLLAMA_KV_CACHE_TYPE=q8_0 OLLAMA_FLASH_ATTENTION=1 ollama run Qwen/Qwen3-8B" in capsys.readouterr().out
    assert main(["fit", "Qwen/Qwen3-8B", "--engine", "ollama", "--gpu", "3060"]) == 2


@pytest.mark.parametrize("build, flash, word", [("b6150", "auto", " -fa "), ("b6150", "on", " -fa "),
                                                ("b7342", "on", " -fa on ")])
def test_fit_writes_flash_attention_as_the_build_spells_it(capsys, build, flash, word):
    """Before b6325 -fa is a switch and flash attention is off by default, so a plan with it on (pinned, or 'auto'
    resolved on) must say `-fa` — found by benchmarks/fuzz.py: the line left it out and explained 255-639 MiB
    more per GPU than the candidate it printed (DeepSeek-Coder-V2-Lite, b6150, -ub 128)."""
    args = ["fit", "deepseek-ai/DeepSeek-Coder-V2-Lite-Instruct", "--engine", "llamacpp", "--engine-version", build,
            "--gpu", "RTX 4000 Ada", "--gpus", "2", "--concurrency", "2", "--json", "-fa", flash, "-ub", "128"]
    assert main(args) == 0
    candidate = json.loads(capsys.readouterr().out)["answers"][0]
    line = candidate["command"]
    assert word in line + " "
    if build == "b6150":  # the switch takes no value: "-fa on" would be a stray argument to that llama-server
        assert "-fa on" not in line
    file = line.split(" -m ")[1].split()[0]
    explained = ["explain", "deepseek-ai/DeepSeek-Coder-V2-Lite-Instruct", "--engine", "llamacpp",
                 "--engine-version", build, "--gpu", "RTX 4000 Ada", "--gguf-type", file.rsplit("-", 1)[1][:-5],
                 "--json", "--", *line.replace(f" -m {file}", "").split(), "-dev", "CUDA0,CUDA1"]
    assert main(explained) == 0
    own = json.loads(capsys.readouterr().out)["llamacpp"]
    for device, mib in candidate["vram_per_gpu_mib"].items():
        assert round(own[f"vram_{device.lower()}_gib"] * 1024) == pytest.approx(mib, abs=1.5)
