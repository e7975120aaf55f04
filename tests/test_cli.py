"""The command line: exit codes and one-line errors (run as a real subprocess), and the output of
each command (in process, through vram_detective.cli.main)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import DEV, GIB, MIB
from vram_detective.cli import main
from vram_detective.hardware import all_gpus, common_gpus
from vram_detective.model.sources import catalog_entries

SRC = Path(__file__).resolve().parents[1] / "src"


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(SRC), NO_COLOR="1")
    return subprocess.run([sys.executable, "-m", "vram_detective", *args], capture_output=True, text=True, env=env,
                          timeout=60)


def assert_one_line_error(result: subprocess.CompletedProcess, code: int = 2) -> str:
    assert result.returncode == code, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def run_json(capsys, *args: str, code: int = 0) -> dict:
    cut = args.index("--") if "--" in args else len(args)
    returned = main(["explain", *args[:cut], "--json", *args[cut:]])
    out = capsys.readouterr().out
    assert returned == code, out
    data = json.loads(out)
    assert data["startup_failed"] is (code == 1)
    return data


# --- bad input: exit 2, one line on stderr ----------------------------------------------------------------


def test_unknown_model():
    line = assert_one_line_error(run_cli("explain", "nobody/no-such-model", "--gpu", "4090"))
    assert "nobody/no-such-model" in line


def test_unknown_gpu():
    line = assert_one_line_error(run_cli("explain", "Qwen/Qwen3-8B", "--gpu", "Voodoo 3"))
    assert "Voodoo 3" in line


def test_unsupported_architecture(tmp_path):
    config = json.loads((Path(__file__).resolve().parents[1] / "src/vram_detective/model/catalog/"
                         "Qwen--Qwen2.5-7B-Instruct.json").read_text())["config"]
    config["architectures"], config["model_type"] = ["DeepseekV4ForCausalLM"], "deepseek_v4"
    (tmp_path / "config.json").write_text(json.dumps(config))
    line = assert_one_line_error(run_cli("explain", str(tmp_path), "--gpu", "H100"))
    assert "DeepseekV4ForCausalLM" in line


def test_malformed_config_json(tmp_path):
    (tmp_path / "config.json").write_text('{"architectures": ["LlamaForCausalLM"], "hidden_size": 4096,')
    line = assert_one_line_error(run_cli("explain", str(tmp_path), "--gpu", "4090"))
    assert "config.json" in line


def test_config_missing_hidden_size(tmp_path):
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_attention_heads": 32,
              "num_hidden_layers": 32, "intermediate_size": 11008, "vocab_size": 32000, "torch_dtype": "float16"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    line = assert_one_line_error(run_cli("explain", str(tmp_path), "--gpu", "4090"))
    assert "hidden_size" in line


def test_directory_without_config(tmp_path):
    assert_one_line_error(run_cli("explain", str(tmp_path), "--gpu", "4090"))


@pytest.mark.parametrize("flags", [
    ("--max-model-len", "abc"),
    ("--gpu-memory-utilization", "1.5"),
    ("--gpu-memory-utilization", "0"),
    ("--tensor-parallel-size", "0"),
    ("--max-num-seqs", "many"),
    ("--gpu-memory", "lots"),
    ("--vllm-version", "0.2.7"),  # older than the oldest modelled release (0.3.0)
    ("--vllm-version", "latest-and-greatest"),
    ("--kv-cache-dtype", "int3"),
])
def test_bad_flag_values(flags):
    assert_one_line_error(run_cli("explain", "Qwen/Qwen3-8B", "--gpu", "4090", *flags))


def test_bad_value_in_a_pasted_launch_line():
    assert_one_line_error(run_cli("explain", "--gpu", "4090", "--", "vllm", "serve", "Qwen/Qwen3-8B",
                                  "--max-model-len", "abc"))


def test_two_different_models():
    line = assert_one_line_error(run_cli("explain", "Qwen/Qwen3-8B", "--gpu", "4090", "--", "vllm", "serve",
                                         "Qwen/Qwen3-4B"))
    assert "Qwen/Qwen3-4B" in line


def test_v1_engine_before_it_existed_is_a_clear_error():
    """V1 arrived as an alpha in 0.6.4 (vllm-memory.md §1.1): asking for it on 0.5.4 is bad input, said
    in words, not a leaked rule name."""
    line = assert_one_line_error(run_cli("explain", "Qwen/Qwen3-8B", "--gpu", "H100", "--vllm-version", "0.5.4",
                                         "--engine", "v1"))
    assert "missing field" not in line
    assert "v1" in line.lower()


def test_v0_engine_after_it_was_removed():
    line = assert_one_line_error(run_cli("explain", "Qwen/Qwen3-8B", "--gpu", "H100", "--vllm-version", "0.11.0",
                                         "--engine", "v0"))
    assert "0.11" in line


# --- vLLM would refuse: exit 1 with its message --------------------------------------------------------------


def test_70b_on_a_4090_is_refused():
    result = run_cli("explain", "meta-llama/Llama-3.1-70B-Instruct", "--gpu", "4090")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "refuse" in (result.stdout + result.stderr)


def test_max_model_len_above_the_model_limit_is_refused():
    result = run_cli("explain", "Qwen/Qwen3-8B", "--gpu", "4090", "--max-model-len", "100000")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    # _get_and_verify_max_len's message names the asked and the derived length
    assert "100000" in result.stderr and "40960" in result.stderr


def test_kv_does_not_fit_is_refused_with_vllms_message(capsys):
    code = main(["explain", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "3090", "--vllm-version", "0.6.4",
                 "--max-model-len", "29000", "--gpu-memory-utilization", "0.9"])
    out = capsys.readouterr().out
    assert code == 1
    assert "The model's max seq len (29000) is larger than the maximum number of tokens" in out


# --- --json ---------------------------------------------------------------------------------------------------------

REQUIRED_KEYS = (
    "weights_gib", "kv_cache_gib", "kv_cache_tokens", "max_concurrency", "max_model_len",
    "nvidia_smi_used_mib", "log_lines", "components", "settings", "vllm",
)
# vLLM's own figures, under its name (schema 2)
VLLM_KEYS = ("activation_peak_gib", "non_torch_gib", "cuda_graph_gib", "budget_gib", "num_gpu_blocks",
             "num_cpu_blocks", "block_size", "vllm_version")


def test_json_has_every_required_key(capsys):
    data = run_json(capsys, "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "3090", "--vllm-version", "0.6.4",
                    "--max-model-len", "20000", "--gpu-memory-utilization", "0.9")
    for key in REQUIRED_KEYS:
        assert key in data, key
    own = data["vllm"]
    assert set(own) >= set(VLLM_KEYS) and not set(VLLM_KEYS) & set(data)  # nested, no flat copy
    assert own["vllm_version"] == data["engine_version"] == "0.6.4"
    assert data["weights_gib"] == 14.9888  # 16,094,076,928 B
    assert own["num_cpu_blocks"] == 2048 and own["block_size"] == 16
    assert data["max_model_len"] == 20000
    assert isinstance(data["log_lines"], list) and all(isinstance(line, str) for line in data["log_lines"])
    assert "Loading model weights took 14.9888 GB" in data["log_lines"]
    assert isinstance(data["components"], dict) and data["components"]["children"]
    for name, setting in data["settings"].items():
        assert set(setting) >= {"value", "given"}, name
        assert isinstance(setting["given"], bool)
    assert data["settings"]["max_model_len"] == {**data["settings"]["max_model_len"], "value": 20000, "given": True}
    assert data["settings"]["block_size"]["given"] is False
    assert data["settings"]["gpu_memory_utilization"]["value"] == 0.9
    assert "per_rank" not in data  # one rank: nothing to break down
    # the budget of a V0-d release: 0.9 x total
    assert own["budget_gib"] == pytest.approx(0.9 * data["total_gpu_gib"], abs=1e-3)


def test_json_per_rank_when_pipeline_stages_differ(capsys):
    # Qwen2.5-7B: 28 layers over 3 stages -> get_pp_indices gives [9, 10, 9]
    data = run_json(capsys, "Qwen/Qwen2.5-7B-Instruct", "--gpu", "4090", "-pp", "3", "--vllm-version", "0.10.2")
    ranks = data["per_rank"]
    assert [r["layers"] for r in ranks] == [9, 10, 9]
    assert [r["pipeline_stage"] for r in ranks] == [0, 1, 2]
    # Tensor bytes: per layer qkv 3584x4608 + bias 4608, o 3584x3584, gate_up 3584x37888, down 18944x3584,
    # 2 norms of 3584 = 233,057,792 params x 2 B = 466,115,584 B; embedding / lm_head 152064 x 3584 x 2 B
    # = 1,089,994,752 B; rotary cache 32768 x 128 x 2 B = 8,388,608 B on every stage; final norm 7,168 B.
    # PyTorch's caching allocator counts whole blocks: a request above 10 MiB gets a segment rounded up to
    # 2 MiB and a rest of at most 1 MiB is not split off. Per layer qkv 31.5 MiB (+0.5), gate_up 259 MiB
    # (+1), down 129.5 MiB (+0.5); o_proj 24.5 MiB leaves 1.5 MiB, which is split off (+0). The
    # 1039.5 MiB embedding and lm_head +0.5 MiB each.
    layer, table, rotary = 466_115_584 + 2 * MIB, 1_089_994_752 + MIB // 2, 8_388_608
    expected = [table + 9 * layer + rotary, 10 * layer + rotary, 9 * layer + 7168 + table + rotary]
    assert [r["weights_gib"] for r in ranks] == [round(b / GIB, 4) for b in expected]
    assert data["weights_gib"] == ranks[0]["weights_gib"]
    assert data["vllm"]["num_gpu_blocks"] == min(r["num_blocks_own"] for r in ranks)


def test_32k_is_32768(capsys):
    data = run_json(capsys, "Qwen/Qwen3-8B", "--gpu", "H100", "--max-model-len", "32k")
    assert data["max_model_len"] == 32768
    assert data["settings"]["max_model_len"]["given"] is True


def test_pasted_vllm_serve_line(capsys):
    # (40,960 tokens of Qwen3-8B KV need 5.6 GiB; 0.8 of a 4090 leaves less: vLLM would refuse, exit 1)
    data = run_json(capsys, "--gpu", "4090", "--", "vllm", "serve", "Qwen/Qwen3-8B", "--gpu-memory-utilization", "0.8",
                    "--max-num-seqs", "64", code=1)
    settings = data["settings"]
    assert data["model"] == "Qwen/Qwen3-8B"
    assert settings["gpu_memory_utilization"] == {**settings["gpu_memory_utilization"], "value": 0.8, "given": True}
    assert settings["max_num_seqs"] == {**settings["max_num_seqs"], "value": 64, "given": True}
    assert settings["max_model_len"]["given"] is False and settings["max_model_len"]["value"] == 40960
    assert settings["tensor_parallel_size"]["given"] is False


def test_pasted_api_server_line(capsys):
    data = run_json(capsys, "--gpu", "4090", "--", "python", "-m", "vllm.entrypoints.openai.api_server", "--model",
                    "Qwen/Qwen3-8B", "--max-model-len", "8192")
    assert data["model"] == "Qwen/Qwen3-8B"
    assert data["max_model_len"] == 8192
    assert data["settings"]["max_model_len"]["given"] is True


def test_tool_flags_win_over_the_pasted_line(capsys):
    data = run_json(capsys, "--gpu", "H100", "--max-model-len", "4096", "--", "vllm", "serve", "Qwen/Qwen3-8B",
                    "--max-model-len", "8192", "--trust-remote-code", "--port", "8000")
    assert data["max_model_len"] == 4096


# --- other outputs -----------------------------------------------------------------------------------------------------


def test_text_output(capsys):
    code = main(["explain", "Qwen/Qwen3-8B", "--gpu", "H100", "--vllm-version", "0.21.0"])
    out = capsys.readouterr().out
    assert code == 0
    assert "Qwen/Qwen3-8B" in out and "NVIDIA H100 80GB HBM3" in out
    assert "Model loading took 15.27 GiB memory and ? seconds" in out
    assert "\033[" not in out  # no colour when stdout is not a terminal


def test_markdown(capsys):
    code = main(["explain", "Qwen/Qwen3-8B", "--gpu", "H100", "--markdown"])
    out = capsys.readouterr().out
    assert code == 0
    assert out.startswith("### Qwen/Qwen3-8B on NVIDIA H100 80GB HBM3")
    assert "| component | GiB | why |" in out
    assert "```" in out and "Model loading took 15.27 GiB memory" in out


def test_no_gpu_prints_the_common_gpu_table(capsys):
    code = main(["explain", "Qwen/Qwen3-8B"])
    out = capsys.readouterr().out
    assert code == 0
    for gpu in common_gpus():
        assert gpu.short_name in out, gpu.short_name
    assert {"T4", "RTX 4090", "H100 SXM"} <= {g.short_name for g in common_gpus()}


def test_no_gpu_json(capsys):
    code = main(["explain", "Qwen/Qwen3-8B", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    assert [row["gpu"] for row in data["gpus"]] == [g.short_name for g in common_gpus()]
    by_gpu = {row["gpu"]: row for row in data["gpus"]}
    assert by_gpu["H100 SXM"]["starts"] is True
    assert by_gpu["T4"]["starts"] is False  # 15.27 GiB of bf16 weights on a 14.56 GiB card


def test_models_lists_the_catalog(capsys):
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    entries = catalog_entries()
    for source in entries:
        assert source.repo_id in out
    assert out.strip().splitlines()[-1].startswith(f"{len(entries)} models")
    sized = len(entries) - out.count("not yet:")
    assert out.strip().splitlines()[-1] == f"{len(entries)} models, {sized} sized today"


def test_models_json(capsys):
    assert main(["models", "--json"]) == 0
    rows = {row["model"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows["Qwen/Qwen3-8B"]["supported"] is True and rows["Qwen/Qwen3-8B"]["layers"] == 36
    assert rows["mistralai/Mixtral-8x7B-v0.1"]["supported"] is True
    assert rows["Qwen/Qwen2.5-VL-7B-Instruct"]["supported"] is True


def test_gpus_lists_cards(capsys):
    assert main(["gpus"]) == 0
    out = capsys.readouterr().out
    for gpu in all_gpus():
        assert gpu.name in out
    assert main(["gpus", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [g["name"] for g in data] == [g.name for g in all_gpus()]
    rtx3090 = next(g for g in data if g["name"] == "NVIDIA GeForce RTX 3090")
    assert rtx3090["cuda_total_gib"] == 23.58 and rtx3090["compute_capability"] == "8.6"


def test_score_json(capsys):
    assert main(["score", str(DEV), "--json"]) == 0
    whole = json.loads(capsys.readouterr().out)
    report = whole["vllm"]  # every engine's section has the same shape, under its name
    for key in ("cases", "scored", "skipped", "figures", "per_case"):
        assert key in report, key
    cases = sum(1 for line in DEV.read_text().splitlines() if line.strip())
    assert whole["cases"] == report["cases"] == cases
    assert report["scored"] + len(report["skipped"]) == cases
    assert report["figures"]
    for name, stats in report["figures"].items():
        assert set(stats) >= {"n", "median_abs_rel_err", "p90_abs_rel_err", "max_abs_rel_err"}, name
        assert stats["median_abs_rel_err"] <= stats["p90_abs_rel_err"] <= stats["max_abs_rel_err"]
    assert len(report["per_case"]) == report["scored"]


def test_score_text(capsys):
    assert main(["score", str(DEV)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("cases: ")
    assert "weights_gib" in out


def test_score_defaults_to_every_shipped_dev_file(capsys):
    assert main(["score", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    counts: dict[str, int] = {}
    for path in sorted(DEV.parent.glob("dev*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                engine = json.loads(line).get("engine") or "vllm"
                counts[engine] = counts.get(engine, 0) + 1
    assert report["cases"] == sum(counts.values())
    assert {name: report[name]["cases"] for name in counts} == counts and set(counts) == {"vllm", "sglang", "llamacpp"}


def test_score_missing_file():
    assert_one_line_error(run_cli("score", "/nonexistent/cases.jsonl"))


def test_launch_line_only_goes_with_explain():
    assert_one_line_error(run_cli("models", "--", "vllm", "serve", "Qwen/Qwen3-8B"))


def test_disable_hybrid_kv_cache_manager_flag_reaches_the_kv_plan(capsys):
    # gpt-oss-120b alternates 128-token sliding-window and full layers (18 + 18). With the hybrid manager a
    # block id spans 18 layers and a 32k request needs 2048 full blocks + cdiv(128 - 1 + 8192, 16) + 1 = 521
    # sliding ones (SlidingWindowSpec.max_memory_usage_bytes, 8192 batched tokens on an H200); disabled,
    # a block id spans all 36 layers and a request needs 2048 blocks
    hybrid = run_json(capsys, "openai/gpt-oss-120b", "--gpu", "H200", "--vllm-version", "0.11.0", "--max-model-len", "32k")
    full = run_json(capsys, "openai/gpt-oss-120b", "--gpu", "H200", "--vllm-version", "0.11.0", "--max-model-len", "32k",
                    "--disable-hybrid-kv-cache-manager")
    assert full["kv_cache_gib"] == pytest.approx(hybrid["kv_cache_gib"], rel=1e-6)  # same budget
    assert hybrid["max_concurrency"] / full["max_concurrency"] == pytest.approx(2 * 2048 / (2048 + 521), rel=2e-3)
    assert any(line.startswith("Hybrid KV cache manager is disabled") for line in full["log_lines"])
    # the flag arrives with the hybrid allocator: V1 0.9.1
    line = assert_one_line_error(run_cli("explain", "openai/gpt-oss-120b", "--gpu", "H100", "--vllm-version", "0.8.5",
                                         "--disable-hybrid-kv-cache-manager"))
    assert "0.9.1" in line


def test_max_cpu_loras_is_checked_like_lora_config():
    # LoRAConfig.__post_init__: max_cpu_loras < max_loras raises before any memory is touched
    result = run_cli("explain", "Qwen/Qwen3-8B", "--gpu", "H100", "--enable-lora", "--max-loras", "4", "--max-cpu-loras", "2")
    assert result.returncode == 1 and "max_cpu_loras (2) must be >= max_loras (4)" in result.stdout + result.stderr
    ok = run_cli("explain", "Qwen/Qwen3-8B", "--gpu", "H100", "--enable-lora", "--max-loras", "2", "--max-cpu-loras", "8",
                 "--json")
    assert ok.returncode == 0, ok.stderr
