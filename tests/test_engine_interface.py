"""The engine interface (engines/base.py): the registry, explain through it, the CLI's engine flags, and
the rule that only engines/ names an engine's modules."""
from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import GIB
from vram_detective.api import explain
from vram_detective.cli import main
from vram_detective.engines import ENGINES, UnknownEngineError, get_engine
from vram_detective.engines.base import Engine
from vram_detective.render import to_json

SRC = Path(__file__).resolve().parents[1] / "src" / "vram_detective"
SEED = dict(model="Qwen/Qwen2.5-7B-Instruct-AWQ", gpu="RTX 4090", max_model_len=32768)
SEED_LOGGED_WEIGHTS_GIB = 5.2048  # dev.jsonl seed-int4-7b-rtx4090: "Loading model weights took 5.2048 GB"


def test_registry_lists_vllm_and_it_implements_the_interface():
    assert list(ENGINES) == ["vllm", "sglang", "llamacpp", "ollama"]
    engine = get_engine("vllm")
    assert isinstance(engine, Engine) and engine.name == "vllm" and engine.label == "vLLM"
    assert engine.releases.resolve("0.6.3") == (0, 6, 3)
    assert engine.releases.oldest == "0.3.0" and "0.6.3" in engine.releases.known
    assert engine.releases.rules((0, 6, 3)).engine == "v0"  # VLLM_USE_V1 did not exist before 0.6.4
    line = engine.launch.parse(["vllm", "serve", "Qwen/Qwen3-8B", "--max-model-len", "8192"])
    assert line.model == "Qwen/Qwen3-8B" and line.settings["max_model_len"] == 8192
    assert engine.logs.is_mine("INFO 11-02 10:00:00 worker.py:232] Loading model weights took 5.2048 GB")


def test_unknown_engine_is_a_lookup_error_naming_the_known_ones():
    with pytest.raises(UnknownEngineError, match="unknown engine 'tgi' .known: vllm, sglang, llamacpp, ollama."):
        get_engine("tgi")


def test_sglang_implements_the_interface():
    engine = get_engine("sglang")
    assert isinstance(engine, Engine) and engine.label == "SGLang"
    assert engine.releases.resolve("0.4.6.post2") == (0, 4, 6) and engine.releases.oldest == "0.4.0"
    line = engine.launch.parse(["python", "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen3-8B", "--tp", "2"])
    assert line.model == "Qwen/Qwen3-8B" and line.settings == {"tp_size": 2}
    assert engine.logs.is_mine("[2025-05-01 10:00:00] Load weight end. type=Qwen3ForCausalLM, dtype=torch.bfloat16, "
                               "avail mem=13.91 GB, mem usage=1.25 GB.")
    assert not engine.logs.is_mine("INFO 11-02 10:00:00 worker.py:232] Loading model weights took 5.2048 GB")


def test_explain_through_the_registry_equals_the_vllm_version_path():
    by_engine = explain(SEED["model"], SEED["gpu"], engine="vllm", engine_version="0.6.3",
                        max_model_len=SEED["max_model_len"])
    by_alias = explain(SEED["model"], SEED["gpu"], vllm_version="0.6.3", max_model_len=SEED["max_model_len"])
    assert to_json(by_engine) == to_json(by_alias)
    assert (by_engine.engine_name, by_engine.engine_version, by_engine.engine) == ("vllm", "0.6.3", "v0")
    assert by_engine.vllm_version == "0.6.3"
    # the real logged weights of the seed case (an AWQ 7B on a 4090, vLLM 0.6.3), within half a percent
    assert by_engine.weights_bytes / GIB == pytest.approx(SEED_LOGGED_WEIGHTS_GIB, rel=0.005)
    assert by_engine.log_lines[0].startswith("Loading model weights took 5.")


def test_json_names_the_engine_and_nests_its_own_figures():
    out = to_json(explain(SEED["model"], SEED["gpu"], vllm_version="0.6.3", max_model_len=SEED["max_model_len"]))
    own = out["vllm"]
    assert out["engine_name"] == "vllm" and out["engine_version"] == own["vllm_version"] == "0.6.3"
    assert own["engine"] == "v0" and own["num_cpu_blocks"] > 0  # V0 sizes its swap space in blocks
    for key in ("budget_gib", "activation_peak_gib", "non_torch_gib", "cuda_graph_gib", "cuda_graph_budgeted",
                "num_gpu_blocks", "block_size"):
        assert key in own and key not in out
    for key in ("kv_cache_tokens", "max_concurrency"):
        assert key in out


def _cli_json(argv: list[str], capsys) -> tuple[int, dict]:
    code = main(argv + ["--json"])
    return code, json.loads(capsys.readouterr().out)


def test_cli_engine_flags_old_and_new_spellings_agree(capsys):
    base = ["explain", SEED["model"], "--gpu", SEED["gpu"], "--max-model-len", "32768"]
    _, new = _cli_json(base + ["--engine", "vllm", "--engine-version", "0.8.5", "--vllm-engine", "v0"], capsys)
    _, old = _cli_json(base + ["--vllm-version", "0.8.5", "--engine", "v0"], capsys)
    assert new == old and new["vllm"]["engine"] == "v0" and new["vllm"]["vllm_version"] == "0.8.5"
    _, v1 = _cli_json(base + ["--vllm-version", "0.8.5", "--engine", "v1"], capsys)
    assert v1["vllm"]["engine"] == "v1" and v1["vllm"]["num_cpu_blocks"] == 0  # V1 keeps no CPU swap blocks


def test_cli_unknown_engine_is_one_line_exit_2(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["explain", SEED["model"], "--gpu", SEED["gpu"], "--engine", "tgi"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert err.count("\n") == 1 and "invalid choice: 'tgi'" in err


def test_help_does_not_import_the_planners():
    probe = ("import sys, contextlib, io\nfrom vram_detective.cli import main\n"
             "with contextlib.redirect_stdout(io.StringIO()):\n"
             "    try: main(['explain', '--help'])\n    except SystemExit: pass\n"
             "print(sorted(m for m in sys.modules if m.startswith('vram_detective.engines.vllm.')))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(SRC.parent)}).stdout
    assert eval(out) == ["vram_detective.engines.vllm.engine", "vram_detective.engines.vllm.launch"]


_ENGINE_IMPORT = re.compile(r"^\s*(from\s+\S*engines\.vllm\S*\s+import|from\s+\S*engines\s+import\s+vllm\b|"
                            r"import\s+\S*engines\.vllm)", re.MULTILINE)


def test_only_engines_imports_an_engine_module():
    offenders = [f"{path.relative_to(SRC)}:{text[:match.start()].count(chr(10)) + 1}"
                 for path in sorted(SRC.rglob("*.py")) if "engines" not in path.relative_to(SRC).parts[:1]
                 for text in [path.read_text()] for match in _ENGINE_IMPORT.finditer(text)]
    assert offenders == [], f"import engines only through vram_detective.engines.get_engine: {offenders}"


def test_a_line_of_flags_alone_is_read_after_the_engines_own_program():
    read = {}
    for name, flags in (("vllm", ["--max-model-len", "8192"]), ("sglang", ["--context-length", "8192"]),
                        ("llamacpp", ["-c", "8192", "-ngl", "20"])):
        engine = get_engine(name)
        parsed = engine.launch.parse(list(engine.launch.program) + flags)
        read[name] = (parsed.model, parsed.settings)
    assert read == {"vllm": ("_", {"max_model_len": 8192}), "sglang": ("_", {"context_length": 8192}),
                    "llamacpp": ("_", {"n_ctx": 8192, "n_gpu_layers": 20})}
    ollama = get_engine("ollama")  # no flags of its own: the words are read as they are, and refused
    with pytest.raises(ollama.launch.error, match="not an Ollama line"):
        ollama.launch.parse(list(ollama.launch.program) + ["--num-ctx", "8192"])


LINES = {  # settings -> the engine's own launch line, which the engine reads back to the same settings
    "vllm": ({"max_model_len": 8192, "gpu_memory_utilization": 0.8},
             "vllm serve Qwen/Qwen3-8B --gpu-memory-utilization 0.8 --max-model-len 8192"),
    "sglang": ({"context_length": 8192, "mem_fraction_static": 0.8},
               "python -m sglang.launch_server --model-path Qwen/Qwen3-8B --context-length 8192 "
               "--mem-fraction-static 0.8"),
    "llamacpp": ({"n_ctx": 8192, "n_gpu_layers": 20, "flash_attn": "on"},
                 "llama-server -m Qwen/Qwen3-8B -c 8192 -ngl 20 -fa on"),
}


@pytest.mark.parametrize("name", sorted(LINES))
def test_every_engine_writes_the_launch_line_it_reads(name):
    engine = get_engine(name)
    settings, line = LINES[name]
    assert engine.launch_line("Qwen/Qwen3-8B", settings) == line
    parsed = engine.launch.parse(line.split())
    assert (parsed.model, parsed.settings) == ("Qwen/Qwen3-8B", settings)


def test_vllm_launch_line_sets_the_v0_v1_path_asked_for():
    assert (get_engine("vllm").launch_line("Qwen/Qwen3-8B", {"engine": "v0"})
            == "VLLM_USE_V1=0 vllm serve Qwen/Qwen3-8B")


def test_ollama_writes_a_launch_line_it_reads():
    """It was llama-server's program with Ollama's flag names, which no program reads."""
    engine = get_engine("ollama")
    settings = {"num_ctx": 8192, "num_parallel": 2, "flash_attention": True, "kv_cache_type": "q8_0"}
    line = engine.launch_line("qwen2.5:7b", dict(settings, num_gpu=20))
    assert line == ("OLLAMA_CONTEXT_LENGTH=8192 OLLAMA_NUM_PARALLEL=2 OLLAMA_FLASH_ATTENTION=1 "
                    "OLLAMA_KV_CACHE_TYPE=q8_0 ollama run qwen2.5:7b  # /set parameter num_gpu 20")
    parsed = engine.launch.parse(shlex.split(line, comments=True))
    assert (parsed.model, parsed.settings) == ("qwen2.5:7b", settings)


def test_metrics_and_deployments_are_offered_or_plainly_not():
    offered = {name: (get_engine(name).live_metrics is not None, get_engine(name).deployment is not None)
               for name in ENGINES}
    assert offered == {"vllm": (True, True), "sglang": (True, True), "llamacpp": (True, True),
                       "ollama": (False, True)}  # Ollama serves no Prometheus /metrics


def test_a_pasted_sglang_line_reads_the_same_whatever_the_hash_seed():
    code = ("from vram_detective.engines import get_engine; print(get_engine('sglang').launch.parse("
            "'python -m sglang.launch_server --model-path m --context-length 8192 --mem-fraction-static 0.8 "
            "--tp 2 --page-size 64'.split()).settings)")
    env = {"PYTHONPATH": str(SRC.parent)}
    seen = {subprocess.run([sys.executable, "-c", code], env=dict(env, PYTHONHASHSEED=str(seed)),
                           capture_output=True, text=True, check=True).stdout for seed in range(4)}
    assert seen == {"{'tp_size': 2, 'mem_fraction_static': 0.8, 'page_size': 64, 'context_length': 8192}\n"}


def test_every_engine_names_the_controls_the_web_page_shows_in_its_own_settings():
    shown = {name: [row[0] for row in get_engine(name).controls] for name in ENGINES}
    assert shown["vllm"][:2] == ["gpu_memory_utilization", "max_model_len"]
    assert shown["sglang"][:2] == ["mem_fraction_static", "context_length"]
    assert shown["llamacpp"][:2] == ["n_ctx", "n_parallel"] and shown["ollama"][:2] == ["num_ctx", "num_parallel"]
    for name, settings in shown.items():  # each a setting the engine's own flags set
        assert set(settings) <= {flag.setting for flag in get_engine(name).launch.flags}, name
