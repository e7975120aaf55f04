"""Known anchors, end to end through vram_detective.explain: real startups whose logged numbers the
model has to land on (design/vllm-memory.md §3.1, §3.4, §4; shared/groundtruth/dev.jsonl)."""
from __future__ import annotations

import pytest

from conftest import GIB, MIB, logged_message
from vram_detective import explain
from vram_detective.engines.vllm import kv_cache
from vram_detective.engines.vllm.kv_groups import plan_kv_groups
from vram_detective.engines.vllm.kv_layers import AttentionLayer


# --- Llama-3.1-8B-Instruct on an RTX 3090, vLLM 0.6.4 (#10517) ---------------------------------------


@pytest.fixture(scope="module")
def llama_3090():
    return explain("meta-llama/Llama-3.1-8B-Instruct", "RTX 3090", vllm_version="0.6.4", max_model_len=20000,
                   gpu_memory_utilization=0.9)


def test_llama31_8b_weights_are_exact(llama_3090, dev_cases):
    # 8,030,261,248 params x 2 B + 131072 x 128 x 2 B rotary cache (Llama3RotaryEmbedding, bf16)
    assert llama_3090.weights_bytes == 8_030_261_248 * 2 + 131072 * 128 * 2 == 16_094_076_928
    line = logged_message(dev_cases["vllm-10517-llama31-8b-3090-20k"], "Loading model weights took")
    assert line == "Loading model weights took 14.9888 GB"
    assert line in llama_3090.log_lines


def test_llama31_8b_3090_blocks_and_kv_within_1_percent(llama_3090):
    assert llama_3090.engine == "v0" and llama_3090.vllm_version == "0.6.4"
    assert llama_3090.num_cpu_blocks == 2048  # 4 GiB swap // 2 MiB blocks
    assert llama_3090.num_gpu_blocks == pytest.approx(1952, rel=0.01)
    assert llama_3090.kv_cache_bytes / GIB == pytest.approx(3.81, rel=0.01)
    # the block count follows from the KV bytes by whole 2 MiB blocks
    assert llama_3090.num_gpu_blocks == llama_3090.kv_cache_bytes // (2 * MIB)
    assert f"# GPU blocks: {llama_3090.num_gpu_blocks}, # CPU blocks: 2048" in llama_3090.log_lines


def test_llama31_8b_3090_budget_is_v0d(llama_3090):
    # V0-d (0.6.4): budget = u x T with T = 23.58 GiB as cudaMemGetInfo reports a 3090
    assert llama_3090.total_gpu_bytes / GIB == pytest.approx(23.58, abs=0.005)
    assert llama_3090.budget_bytes == pytest.approx(0.9 * llama_3090.total_gpu_bytes, abs=1)
    # V0-d subtracts everything non-torch on the GPU, CUDA context included: 0.35 GiB logged at TP 1
    assert llama_3090.non_torch_bytes / GIB == pytest.approx(0.35, abs=0.02)


def test_llama31_8b_3090_29k_fails_like_the_log(dev_cases):
    b = explain("meta-llama/Llama-3.1-8B-Instruct", "RTX 3090", vllm_version="0.6.4", max_model_len=29000,
                gpu_memory_utilization=0.9)
    assert b.failure is not None
    assert b.num_gpu_blocks == pytest.approx(1478, rel=0.01)
    assert b.failure.message.startswith("The model's max seq len (29000) is larger than the maximum number of "
                                        "tokens that can be stored in KV cache (")
    assert b.failure.message.endswith(
        "Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.")
    assert b.failure.largest_fitting_max_model_len == b.num_gpu_blocks * 16
    assert dev_cases["vllm-10517-llama31-8b-3090-29k"]["observed"]["startup_failed"] is True


# --- Qwen3-8B on an RTX A5000, vLLM 0.21.0 (LMCache #3430) -------------------------------------------------


def test_qwen3_8b_kv_arithmetic_from_the_logged_budget(dev_cases):
    case = dev_cases["lmcache-3430-qwen3-8b-a5000-v0210"]
    b = explain("Qwen/Qwen3-8B", "RTX A5000", vllm_version="0.21.0", max_model_len=16384)
    layout = kv_cache.KvLayout(b.block_size, 8, 128, 2, 36)
    assert layout.block_bytes == b.kv_bytes_per_token * b.block_size == 2_359_296
    # 'Available KV cache memory: 6.37 GiB' is a value in [6.365, 6.375) GiB: 2896.8 .. 2901.3 blocks
    low = int(6.365 * GIB) // layout.block_bytes
    high = int(6.375 * GIB) // layout.block_bytes
    assert (low, high) == (2896, 2901)
    # the logged 46,368 tokens pin the count to 2898 blocks (46,368 / 16)
    cap = plan_kv_groups([AttentionLayer("full", layout.page_bytes)] * 36, 2898 * layout.block_bytes, 16, 16384,
                         8192, 256, (0, 21, 0), "v1")
    assert f"GPU KV cache size: {cap.kv_cache_tokens:,} tokens" == logged_message(case, "GPU KV cache size")
    assert f"Maximum concurrency for 16,384 tokens per request: {cap.max_concurrency:.2f}x" == (
        logged_message(case, "Maximum concurrency"))


def test_qwen3_8b_log_lines_with_a_fixed_kv_budget(dev_cases):
    case = dev_cases["lmcache-3430-qwen3-8b-a5000-v0210"]
    kv_bytes = 2898 * 2_359_296  # 6.3677 GiB: prints 6.37
    b = explain("Qwen/Qwen3-8B", "RTX A5000", vllm_version="0.21.0", max_model_len=16384,
                kv_cache_memory_bytes=kv_bytes)
    assert b.kv_cache_bytes == kv_bytes
    assert b.num_gpu_blocks == 2898
    assert b.kv_cache_tokens == 46368
    for start in ("Available KV cache memory", "GPU KV cache size", "Maximum concurrency"):
        assert logged_message(case, start) in b.log_lines, start
    assert b.failure is None


def test_qwen3_8b_weights_line(dev_cases):
    # 8,190,735,360 params x 2 B + 40960 x 128 x 2 B rotary cache = 16,391,956,480 B = 15.266 GiB;
    # params: 2 x 151936 x 4096 + 36 x (4096 x 6144 + 4096 x 4096 + 4096 x 24576 + 12288 x 4096 + 2 x 4096
    # + 2 x 128) + 4096. What torch counts as allocated adds the caching allocator's block rounding: the
    # 1187 MiB embedding and lm_head each get a 1188 MiB segment whose 1 MiB rest is not split off, and
    # the 256 B q_norm / k_norm weights take 512 B blocks (36 layers x 2 x 256 B); each attention layer's
    # seven fp32 scale buffers of 0.23 (_k_scale, _v_scale, _q_scale, _prob_scale, q/k/v_range) take one
    # 512 B block each (36 x 7 x 512 B).
    b = explain("Qwen/Qwen3-8B", "RTX 5070 Ti", vllm_version="0.23.0", max_model_len=8192, gpu_memory_utilization=0.9)
    assert b.weights_bytes == 8_190_735_360 * 2 + 40960 * 128 * 2 + 2 * MIB + 36 * 2 * 256 + 36 * 7 * 512
    logged = logged_message(dev_cases["file56155919944-qwen3-8b-bf16-rtx5070ti-fail"], "Model loading took")
    assert logged.startswith("Model loading took 15.27 GiB memory and")
    assert b.log_lines[0].split(" and ")[0] == logged.split(" and ")[0]
    # 0.9 x 15.48 GiB = 13.9 GiB < 15.27 GiB of weights (which still fit in the card): the KV budget is
    # negative and vLLM 0.23 stops with the log's 'ValueError: No available memory for the cache blocks.'
    assert b.kv_cache_bytes < 0 and b.num_gpu_blocks == 0
    assert b.failure is not None
    assert b.failure.message.startswith(logged_message(
        dev_cases["file56155919944-qwen3-8b-bf16-rtx5070ti-fail"], "No available memory").replace("ValueError: ", ""))


# --- the seed: an INT4 7B on an RTX 4090 ------------------------------------------------------------------------


def test_seed_awq_weights_within_half_a_percent(dev_cases):
    b = explain("Qwen/Qwen2.5-7B-Instruct-AWQ", "RTX 4090", vllm_version="0.6.3", max_model_len=32768)
    observed = dev_cases["seed-int4-7b-rtx4090"]["observed"]["weights_gib"]
    assert observed == 5.2048
    assert b.weights_bytes / GIB == pytest.approx(observed, rel=0.005)
    assert b.log_lines[0].startswith("Loading model weights took 5.")


def test_llama31_8b_format_gib_weights_on_015(dev_cases):
    b = explain("meta-llama/Llama-3.1-8B-Instruct", "A100 40GB", vllm_version="0.15.1", max_model_len=131072,
                max_num_batched_tokens=8192, enforce_eager=True, entrypoint="llm")
    logged = logged_message(dev_cases["file34342936495-llama31-8b-a100-40g-gce-v0151-eager"], "Model loading took")
    assert logged.startswith(b.log_lines[0].replace("? seconds", ""))  # 'Model loading took 14.99 GiB memory and'


def test_meta_llama3_8b_weights_14_96(dev_cases):
    # #10511: Meta-Llama-3-8B logs 14.96: 8,030,261,248 x 2 B + 8192 x 128 x 2 B rotary = 14.9595 GiB
    b = explain("meta-llama/Meta-Llama-3-8B", "H100", vllm_version="0.6.5", gpu_memory_utilization=0.9)
    assert b.weights_bytes == 8_030_261_248 * 2 + 8192 * 128 * 2
    assert round(b.weights_bytes / GIB, 2) == dev_cases["vllm-pr10511-llama3-8b-h100-tp1"]["observed"]["weights_gib"]


def test_llama2_7b_fp16_weights_12_5523(dev_cases):
    # 6,738,415,616 params x 2 B + 4096 x 128 x 2 B rotary = 13,477,879,808 B = 12.5523 GiB (lmflow #942, 0.6.x)
    b = explain("meta-llama/Llama-2-7b-hf", "A100 80GB", vllm_version="0.6.1")
    assert b.weights_bytes == 13_477_879_808
    assert b.log_lines[0] == "Loading model weights took 12.5523 GB"
    assert dev_cases["lmflow-942-7b-mha-v06"]["observed"]["weights_gib"] == 12.5523
