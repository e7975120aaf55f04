"""SGLang end to end: the plan on the dev cases (targets from issue 12), its rules' worked examples, the CLI."""
from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import pytest

from vram_detective.api import explain
from vram_detective.cli import main
from vram_detective.engines.sglang import allocator, graphs
from vram_detective.engines.sglang.releases import rules
from vram_detective.engines.sglang.settings import from_values, resolve
from vram_detective.scoring import load_cases, score_cases

CASES_PATH = Path(__file__).resolve().parents[1] / "groundtruth" / "dev-sglang.jsonl"
REPORT = score_cases(load_cases(str(CASES_PATH)))["sglang"]
BY_ID = {entry["id"]: entry for entry in REPORT["per_case"]}
SCORED = [entry for entry in REPORT["per_case"] if not entry["separate"]]


def _errors(key: str) -> list[float]:
    return [entry["figures"][key]["rel_err"] for entry in SCORED if key in entry["figures"]]


def _p90(values: list[float]) -> float:
    return sorted(values)[max(0, -(-9 * len(values) // 10) - 1)]


def test_weights_within_targets():
    errors = _errors("weights_mem_usage_gb")
    assert len(errors) == 7
    assert statistics.median(errors) <= 0.005 and _p90(errors) <= 0.02


# speculative decoding on a hybrid (GDN) model with an MTP draft (0.5.17): the joint solve of the Mamba slots and the
# draft tokens' intermediate states (kv_cache_configurator.py _handle_max_mamba_cache), the draft's layer in the cell
EAGLE_HYBRID = "sglang-v0517-a100pcie-qwen38-27b-eagle-mf092-ctx169k-r0"


def test_tokens_end_to_end_within_targets():
    errors = [entry["figures"]["kv_cache_tokens"]["rel_err"] for entry in SCORED
              if "kv_cache_tokens" in entry["figures"] and entry["id"] != EAGLE_HYBRID]
    assert len(errors) == 4
    assert statistics.median(errors) <= 0.03 and _p90(errors) <= 0.10


def test_speculative_hybrid_tokens_within_target():
    # 0.5.17's joint solve at the config's float32 SSM state (146.8 MiB a request): 26 slots, 5 requests' draft
    # states off the rest, the MTP layer's KV in the cell (x 17/16): 183,045 tokens vs 171,008 logged (+7.0 %);
    # the draft's pool holds the same #tokens, its K one layer of the target's 16
    figures = BY_ID[EAGLE_HYBRID]["figures"]
    assert figures["kv_cache_tokens"]["observed"] == 171008 and figures["kv_cache_tokens"]["rel_err"] <= 0.10
    assert figures["draft_kv_cache_tokens"]["predicted"] == figures["kv_cache_tokens"]["predicted"]
    assert figures["k_size_gb"]["rel_err"] <= 0.10 and figures["draft_k_size_gb"]["rel_err"] <= 0.10


@pytest.mark.xfail(strict=True, reason="Qwen3.8-27B EAGLE on 0.5.17: 26 Mamba slots predicted, 43 logged; the log's "
                   "ssm_state 3.09 GB over 44 rows is 72 MiB a row (48 GDN layers x 48 x 128 x 128 x 2 B: bfloat16) "
                   "where the config names float32 (146.8 MiB a request); at bfloat16 the solve gives 55 slots and "
                   "212,134 tokens, so the run's SSM dtype and ratio are not settled; intermediate_ssm_state_cache "
                   "4.22 GB predicted (5 rows x 6 draft tokens, float32) vs 2.11 logged")
def test_speculative_hybrid_mamba_slots():
    figures = BY_ID[EAGLE_HYBRID]["figures"]
    assert figures["mamba_max_cache_size"]["rel_err"] <= 0.10
    assert figures["mamba_intermediate_ssm_state_gb"]["rel_err"] <= 0.10


def test_tokens_from_the_logged_memory_are_exact():
    assert sum("tokens_from_logged_memory" in entry["figures"] for entry in REPORT["per_case"]) == 5
    for entry in REPORT["per_case"]:
        figure = entry["figures"].get("tokens_from_logged_memory")
        if figure is None:
            continue
        low, high = figure["interval"]
        assert low <= figure["observed"] <= high and figure["rel_err"] == 0, entry["id"]


@pytest.mark.parametrize("case_id,expected", [
    ("sglang-qwq32b-4xl4-g6-tp4", 46611), ("sglang-qwen3-06b-rtx5080-mineru", 104273),
    ("sglang-qwen3-14b-4x4090-tp4-mfs080", 298447),
])
def test_tokens_end_to_end_per_case(case_id, expected):
    figure = BY_ID[case_id]["figures"]["kv_cache_tokens"]
    assert figure["observed"] == expected and figure["rel_err"] <= 0.03


@pytest.mark.xfail(strict=True, reason="WSL: 0.82 GiB taken before 'Load weight begin' (22.76 GiB free of 23.58) "
                   "vs the 0.52 GiB CUDA context; predicted 111005 tokens vs 105531 logged (+5.2 %)")
def test_tokens_end_to_end_on_wsl():
    assert BY_ID["sglang-dsr1-distill-qwen7b-rtx3090-wsl"]["figures"]["kv_cache_tokens"]["rel_err"] <= 0.03


def test_reserved_segments_worked_example():
    # QwQ-32B at TP4, one layer: qkv 17.5 MiB -> an 18 MiB segment, o_proj 12.5 -> 14, gate_up 135 -> 136, down
    # 67.5 -> 68: 3.5 MiB a layer stays reserved beyond the tensors (c10 rounds segments above 10 MiB to 2 MiB)
    mib = 2**20
    layer = (int(17.5 * mib), int(12.5 * mib), 135 * mib, int(67.5 * mib))
    assert allocator.reserved_bytes(layer) - sum(layer) == int(3.5 * mib)
    # below 10 MiB a request carves a 20 MiB segment; the next one takes the rest
    assert allocator.reserved_bytes((8 * mib, 8 * mib)) == 20 * mib


def test_capture_batch_sizes_by_release():
    # 0.4.3: [1, 2, 4] + 8..160 step 8, cut at cuda_graph_max_bs 80: 13 sizes (the L4 case)
    s = resolve(from_values({"tp_size": 4}), "0.4.3", 23034)
    assert graphs.capture_batch_sizes(s, rules("0.4.3"), 23034, 2049) == [1, 2, 4] + list(range(8, 81, 8))
    # 0.5.10 B200: [1, 2, 4, 8, 12] + 16..256/8 + 272..496/16 + 512 = 52 sizes (the B200 note)
    s = resolve(from_values({}), "0.5.10", 183359)
    assert len(graphs.capture_batch_sizes(s, rules("0.5.10"), 183359, 4096)) == 52
    # piecewise token counts for a 16384-token chunk: 74 (the B200 note)
    assert graphs.piecewise_graph_bytes(s, rules("0.5.10"), False)[0] == 74


def test_not_enough_memory_refusal():
    b = explain("Qwen/Qwen3-32B", "RTX 4090", engine="sglang", engine_version="0.4.10")
    assert b.failure.message == "Not enough memory. Please try to increase --mem-fraction-static."
    assert b.kv_cache_tokens == 0 and b.log_lines[-1].startswith("RuntimeError: Not enough memory")


def test_explain_names_sglang_parts():
    b = explain("meta-llama/Llama-3.1-8B-Instruct", "H100", engine="sglang", engine_version="0.4.4")
    assert b.engine_label == "SGLang" and b.components.label.startswith("mem_fraction_static 0.88")
    assert b.figure("max_running_requests") == 2049 and b.max_model_len == 131072
    assert any(line.startswith("KV Cache is allocated. #tokens: ") for line in b.log_lines)


def test_cli_engine_sglang(capsys):
    assert main(["explain", "Qwen/Qwen3-8B", "--gpu", "4090", "--engine", "sglang", "--engine-version", "0.4.10",
                 "--mem-fraction-static", "0.8", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["engine_name"] == "sglang" and out["settings"]["mem_fraction_static"]["value"] == 0.8


def test_cli_pasted_sglang_line(capsys):
    assert main(["explain", "--gpu", "H100", "--json", "--", "python", "-m", "sglang.launch_server", "--model-path",
                 "Qwen/Qwen3-8B", "--tp", "2", "--mem-fraction-static", "0.85"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["engine_name"] == "sglang" and out["settings"]["tp_size"]["value"] == 2
    assert main(["explain", "--gpu", "H100", "--", "sglang", "serve", "--model-path", "Qwen/Qwen3-8B"]) == 0
    assert "SGLang 0.5.23" in capsys.readouterr().out  # the newest modelled release


def test_cli_logs_on_an_sglang_log(tmp_path, capsys):
    case = next(c for c in load_cases(str(CASES_PATH)) if c["id"] == "sglang-qwen3-06b-rtx5080-mineru")
    log = tmp_path / "sglang.log"
    log.write_text(case["log"])
    assert main(["logs", str(log), "--gpu", "5080", "--model", "Qwen/Qwen3-0.6B", "--engine-version", "0.4.10",
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["engine"] == "sglang" and report["observed"]["kv_cache_tokens"] == 104273
    tokens = next(row for row in report["comparison"] if row["key"] == "kv_cache_tokens")
    assert abs(tokens["relative_gap"]) < 0.02


def test_cli_compare(capsys):
    assert main(["compare", "Qwen/Qwen3-8B", "--gpu", "4090", "--context", "32k", "--version", "vllm=0.33.0",
                 "--version", "sglang=0.5.23"]) == 0
    out = capsys.readouterr().out
    assert "vLLM 0.33.0" in out and "SGLang 0.5.23" in out and "mem_fraction_static" in out
    assert "gpu_memory_utilization" in out and "at 32,768" in out


def test_cli_whatif_and_fit_print_sglang_lines(capsys):
    assert main(["whatif", "Qwen/Qwen3-8B", "--gpu", "4090", "--engine", "sglang", "--engine-version", "0.5.11"]) == 0
    assert "python -m sglang.launch_server --model-path Qwen/Qwen3-8B --kv-cache-dtype fp8_e4m3" in capsys.readouterr().out
    assert main(["fit", "Qwen/Qwen3-8B", "--gpu", "4090", "--engine", "sglang", "--engine-version", "0.5.11", "--context", "32k",
                 "--concurrency", "4", "--gpus", "2"]) == 0
    assert "--tp 2 --context-length 32768" in capsys.readouterr().out


def test_fit_raises_the_fraction_when_the_default_pool_is_short(capsys):
    # Qwen3-8B on a 4090 at 16k: the default fraction's pool holds 7,019 tokens (0.5.23's reserve: 512 MiB + the
    # 4096-token chunk x 1.5 + 48 graph sizes x 2), so fit raises mem_fraction_static until one request fits
    # (0.764, 17,125 tokens) while the graphs still fit; --max-model-len is read as --context-length
    assert main(["fit", "Qwen/Qwen3-8B", "--engine", "sglang", "--gpu", "4090", "--max-model-len", "16k", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["target"] == "1 x 16,384 tokens" and data["candidates"]
    by_dtype = {row["settings"].get("kv_cache_dtype", "auto"): row for row in data["candidates"]}
    auto = by_dtype["auto"]
    assert auto["lever"] == "higher mem_fraction_static" and auto["starts"]
    assert 0.704 < auto["settings"]["mem_fraction_static"] < 0.9 and auto["kv_cache_tokens"] >= 16384
    assert "--context-length 16384" in auto["command"] and "--mem-fraction-static" in auto["command"]
    # one step less does not hold the request: the smallest raise is chosen
    lower = explain("Qwen/Qwen3-8B", "RTX 4090", engine="sglang", context_length=16384,
                    mem_fraction_static=round(auto["settings"]["mem_fraction_static"] - 0.01, 3))
    assert lower.kv_cache_tokens < 16384


def test_score_prints_a_table_per_engine(tmp_path, capsys):
    mixed = tmp_path / "mixed.jsonl"
    vllm_case = (Path(__file__).resolve().parents[1] / "groundtruth" / "dev.jsonl").read_text().splitlines()[0]
    mixed.write_text(vllm_case + "\n" + CASES_PATH.read_text())
    assert main(["score", str(mixed)]) == 0
    out = capsys.readouterr().out
    sglang_cases = [line for line in CASES_PATH.read_text().splitlines() if line.strip()]
    assert out.startswith("cases: 1, ")
    found = re.search(r"^SGLang: cases: (\d+), scored: (\d+), skipped: (\d+)$", out, re.M)
    assert found and int(found.group(1)) == len(sglang_cases)
    # every case is either scored or listed; at least the 10 scored before speculative decoding was modelled
    assert int(found.group(2)) + int(found.group(3)) == len(sglang_cases) and int(found.group(2)) >= 10


def test_speculative_draft_weights_per_release():
    """Qwen3.5-27B's MTP block (the Qwen3.8 EAGLE case's config) on 0.5.13 and 0.5.17: its own layer (the target's
    embedding and lm_head shared) comes out of the slack before 0.5.14 and out of the KV budget from 0.5.14."""
    from vram_detective.engines.sglang.plan import startup
    from vram_detective.hardware import find_gpu
    from vram_detective.model.config import parse_config

    case = next(c for c in load_cases(str(CASES_PATH)) if c["id"] == EAGLE_HYBRID)
    spec = parse_config(case["model_config"], "Qwen/Qwen3.8-27B")
    h, bf16 = 5120, 2
    mtp_layer = (3 * h * 17408  # gate_up + down
                 + h * (2 * 16 * 128 + 2 * 48 * 128) + h * 2 * 48 + 48 * 128 * h  # GDN in_proj_qkvz, in_proj_ba, out_proj
                 + (2 * 16 * 128 + 48 * 128) * 4 + 48 + 128  # conv1d, dt_bias, norm (A_log: float32, below)
                 + 2 * h + h  # two layer norms, the final norm
                 + 2 * h + h * 2 * h)  # enorm / hnorm, eh_proj
    values = {"mem_fraction_static": 0.92, "context_length": 169000, "max_running_requests": 4,
              "speculative_algorithm": "EAGLE", "speculative_num_steps": 5, "speculative_num_draft_tokens": 6}
    gpu = find_gpu("NVIDIA A100 80GB PCIe")
    new, old = startup(spec, gpu, values, "0.5.17"), startup(spec, gpu, values, "0.5.13")
    assert new.draft_weights == old.draft_weights == mtp_layer * bf16 + 48 * 4
    # 0.5.17: the budget is what is free after both workers' weights
    free = gpu.free_bytes - new.context
    assert round(new.pool.avail_after_weights_gib * 2**30) == pytest.approx(free - new.weights - new.draft_weights, abs=2)
    assert new.draft_in_slack == 0
    # 0.5.13: the pool sees the target's weights only; the draft is paid from what is left after it
    assert round(old.pool.avail_after_weights_gib * 2**30) == pytest.approx(free - old.weights, abs=2)
    assert old.draft_in_slack == old.draft_weights
