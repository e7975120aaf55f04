"""KV-cache arithmetic: page and block bytes, heads per rank, blocks from bytes, the capacity each
release reports, and the startup fit check (design/vllm-memory.md §3; vllm/worker/cache_engine.py,
vllm/v1/kv_cache_interface.py, vllm/v1/core/kv_cache_utils.py)."""
from __future__ import annotations

import pytest

from conftest import GIB, MIB, logged_message, spec_of
from vram_detective import explain
from vram_detective.engines.vllm import kv_cache
from vram_detective.engines.vllm.kv_cache import KvLayout, fit_failure, kv_layout, num_blocks
from vram_detective.engines.vllm.kv_groups import plan_kv_groups
from vram_detective.engines.vllm.kv_layers import AttentionLayer
from vram_detective.engines.vllm.releases import release

V0_064 = release((0, 6, 4), "v0")
V1_085 = release((0, 8, 5), "v1")
V1_0100 = release((0, 10, 2), "v1")
V1_021 = release((0, 21, 0), "v1")


# --- page and block bytes ------------------------------------------------------------------------


def test_llama31_8b_bf16_block_is_2_mib():
    layout = kv_layout(spec_of("meta-llama/Llama-3.1-8B-Instruct"), 1, 32, 16, 2)
    # page = K and V x 16 tokens x 8 KV heads x 128 x 2 B = 65,536 B; x 32 layers = 2 MiB (§3.1)
    assert layout.page_bytes == 65_536
    assert layout.block_bytes == 2 * MIB
    assert layout.bytes_per_token == 131_072  # 128 KiB per token


def test_swap_space_4_gib_is_2048_cpu_blocks_for_llama31_8b():
    # #10517 logs '# CPU blocks: 2048' = 4 GiB // 2 MiB
    b = explain("meta-llama/Llama-3.1-8B-Instruct", "RTX 3090", vllm_version="0.6.4", max_model_len=20000,
                gpu_memory_utilization=0.9)
    assert b.engine == "v0"
    assert b.num_cpu_blocks == 2048
    assert b.block_size == 16 and b.kv_bytes_per_token * 16 == 2 * MIB


def test_v1_has_no_cpu_blocks():
    b = explain("meta-llama/Llama-3.1-8B-Instruct", "A100 80GB", vllm_version="0.9.2", max_model_len=8192)
    assert b.engine == "v1" and b.num_cpu_blocks == 0


def test_qwen3_8b_block_bytes():
    layout = kv_layout(spec_of("Qwen/Qwen3-8B"), 1, 36, 16, 2)
    # 36 layers x 2 x 16 x 8 x 128 x 2 B = 2,359,296 B per block (144 KiB per token, LMCache #3430)
    assert layout.block_bytes == 2_359_296


def test_fp8_kv_halves_the_page_and_block_size_scales_it():
    spec = spec_of("Qwen/Qwen2.5-7B-Instruct")
    bf16 = kv_layout(spec, 1, 28, 16, 2)
    fp8 = kv_layout(spec, 1, 28, 16, 1)
    big = kv_layout(spec, 1, 28, 128, 2)
    assert bf16.block_bytes == 28 * 2 * 16 * 4 * 128 * 2 == 917_504  # 56 KiB per token
    assert fp8.block_bytes * 2 == bf16.block_bytes
    assert big.block_bytes == 8 * bf16.block_bytes and big.bytes_per_token == bf16.bytes_per_token


def test_mha_page():
    # Llama-2-7b: 32 KV heads x 128 -> 2 x 16 x 32 x 128 x 2 B = 262,144 B page, 8 MiB block (32 layers)
    layout = kv_layout(spec_of("meta-llama/Llama-2-7b-hf"), 1, 32, 16, 2)
    assert layout.page_bytes == 262_144 and layout.block_bytes == 8 * MIB


# --- heads per rank --------------------------------------------------------------------------------


@pytest.mark.parametrize("repo_id, tp, heads", [
    ("meta-llama/Llama-3.1-8B-Instruct", 1, 8),
    ("meta-llama/Llama-3.1-8B-Instruct", 2, 4),
    ("meta-llama/Llama-3.1-8B-Instruct", 8, 1),
    ("meta-llama/Llama-3.1-70B-Instruct", 16, 1),  # tp > kv heads: one head per rank, replicated
    ("Qwen/Qwen2.5-7B-Instruct", 4, 1),
    ("Qwen/Qwen2.5-7B-Instruct", 7, 1),  # 28 q heads / 7, 4 kv heads < 7 -> replicated
    ("THUDM/glm-4-9b-chat", 4, 1),  # 2 multi-query groups over 4 ranks
    ("meta-llama/Llama-2-7b-hf", 4, 8),
])
def test_kv_heads_per_rank(repo_id, tp, heads):
    spec = spec_of(repo_id)
    assert kv_layout(spec, tp, spec.num_layers, 16, 2).kv_heads_per_rank == heads


def test_replicated_heads_keep_the_per_rank_cache_from_shrinking():
    spec = spec_of("Qwen/Qwen2.5-7B-Instruct")  # 4 KV heads
    tp4 = kv_layout(spec, 4, 28, 16, 2).block_bytes
    tp8 = kv_layout(spec, 8, 28, 16, 2).block_bytes
    assert tp4 == tp8 == 28 * 2 * 16 * 1 * 128 * 2


# --- blocks from bytes ----------------------------------------------------------------------------


def test_num_blocks_is_floor_division():
    layout = KvLayout(16, 8, 128, 2, 32)  # 2 MiB blocks
    assert num_blocks(1952 * 2 * MIB, layout) == 1952
    assert num_blocks(1952 * 2 * MIB + 2 * MIB - 1, layout) == 1952
    assert num_blocks(2 * MIB - 1, layout) == 0
    assert num_blocks(0, layout) == 0
    assert num_blocks(-5 * GIB, layout) == 0


def test_logged_budget_reproduces_the_logged_blocks_10517():
    # #10517 (0.6.4): kv_cache_size=3.81GiB -> 1952 blocks; a logged 3.81 lies in [3.805, 3.815) GiB,
    # i.e. between 1948.2 and 1953.3 blocks of 2 MiB.
    layout = KvLayout(16, 8, 128, 2, 32)
    assert num_blocks(int(3.805 * GIB), layout) == 1948
    assert num_blocks(int(3.815 * GIB), layout) == 1953


# --- capacity per release (tokens and concurrency as logged) ------------------------------------------


def capacity(blocks, layout, max_model_len, rel):
    """The pool the engine plans for a dense model given exactly `blocks` blocks (the path explain() takes)."""
    layers = [AttentionLayer("full", layout.page_bytes)] * layout.num_layers
    return plan_kv_groups(layers, blocks * layout.block_bytes, layout.block_size, max_model_len, 8192, 256,
                          rel.version, rel.engine)


def test_v0_capacity_is_blocks_times_block_size():
    layout = KvLayout(16, 8, 128, 2, 32)
    cap = capacity(1952, layout, 20000, V0_064)
    assert cap.kv_cache_tokens == 31_232  # 1952 x 16
    assert f"{cap.max_concurrency:.2f}" == "1.56"  # 31232 / 20000: '1.56x' in #10517
    cap = capacity(1478, layout, 29000, V0_064)
    assert cap.kv_cache_tokens == 23_648  # the '(23648)' of #10517's 29k failure
    assert f"{cap.max_concurrency:.2f}" == "0.82"  # '0.82x' in the same log


def test_v1_08_capacity_tokens_over_max_len():
    layout = KvLayout(16, 8, 128, 2, 32)
    # max_model_len not a multiple of 16 tells the rules apart: 29000 = 1812.5 blocks
    cap = capacity(1478, layout, 29000, V1_085)
    assert cap.kv_cache_tokens == 1478 * 16
    assert cap.max_concurrency == pytest.approx(23648 / 29000)


def test_v1_091_capacity_blocks_over_blocks_per_request():
    layout = KvLayout(16, 8, 128, 2, 32)
    cap = capacity(1478, layout, 29000, V1_0100)
    assert cap.kv_cache_tokens == 1478 * 16  # num_blocks // 1 group x block_size
    assert cap.blocks_per_request == 1813  # cdiv(29000, 16)
    assert cap.max_concurrency == pytest.approx(1478 / 1813)


def test_v1_021_capacity_tokens_from_concurrency():
    layout = KvLayout(16, 8, 128, 2, 32)
    cap = capacity(1478, layout, 29000, V1_021)
    assert cap.max_concurrency == pytest.approx(1478 / 1813)
    # int(1478 / 1813 x 29000) = int(42,862,000 / 1813) = int(23641.48) = 23641
    assert cap.kv_cache_tokens == 23_641


def test_capacity_rules_agree_when_max_len_is_a_block_multiple():
    layout = KvLayout(16, 8, 128, 2, 36)
    for rel in (V0_064, V1_085, V1_0100, V1_021):
        cap = capacity(2898, layout, 16384, rel)
        assert cap.kv_cache_tokens == 46_368, rel.label  # 2898 x 16
        assert f"{cap.max_concurrency:.2f}" == "2.83", rel.label  # 2898 / 1024


@pytest.mark.parametrize("case_id, release_version, layout, max_len", [
    # 0.8.x L40S, Llama-3.1-8B (2 MiB blocks): 158,656 tokens = 9916 blocks, 4.84x at 32,768
    ("vllm-pr17122-llama31-8b-l40s", (0, 8, 5), KvLayout(16, 8, 128, 2, 32), 32768),
    # 0.15.1 A100-40GB Llama-3.1-8B: 157,936 tokens = 9871 blocks -> 9871 / 8192 = 1.20x
    ("file34342936495-llama31-8b-a100-40g-gce-v0151-eager", (0, 15, 1), KvLayout(16, 8, 128, 2, 32), 131072),
    # 0.31 A100-80GB Llama-3.1-8B: 460,496 tokens = 28781 blocks -> 3.51x
    ("file70682754770-llama31-8b-a100-80-v0310", (0, 31, 0), KvLayout(16, 8, 128, 2, 32), 131072),
    # 0.31 H200 Qwen2.5-7B-AWQ (56 KiB per token): 651,504 tokens = 40719 blocks -> 40719 / 256 = 159.06x
    ("file70347757402-qwen25-7b-awq-h200-v0310", (0, 31, 0), KvLayout(16, 4, 128, 2, 28), 4096),
    # 0.21 A5000 Qwen3-8B: 46,368 tokens = 2898 blocks -> 2.83x at 16,384
    ("lmcache-3430-qwen3-8b-a5000-v0210", (0, 21, 0), KvLayout(16, 8, 128, 2, 36), 16384),
])
def test_logged_tokens_and_concurrency_are_consistent(dev_cases, case_id, release_version, layout, max_len):
    case = dev_cases[case_id]
    observed = case["observed"]
    blocks = observed["kv_cache_tokens"] // 16
    cap = capacity(blocks, layout, max_len, release(release_version, "v1"))
    assert cap.kv_cache_tokens == observed["kv_cache_tokens"]
    assert round(cap.max_concurrency, 2) == observed["max_concurrency"]
    if "kv_cache_gib" in observed:  # and the block count fits the logged budget
        assert round(blocks * layout.block_bytes / GIB, 2) == pytest.approx(observed["kv_cache_gib"], abs=0.011)


# --- the startup fit check ---------------------------------------------------------------------------


def test_v0_fit_failure_matches_10517(dev_cases):
    case = dev_cases["vllm-10517-llama31-8b-3090-29k"]
    layout = KvLayout(16, 8, 128, 2, 32)
    message = fit_failure(1478 * 2 * MIB, 1478, layout, 29000, V0_064)
    assert message == logged_message(case, "The model's max seq len")
    assert fit_failure(1478 * 2 * MIB, 1478, layout, 23648, V0_064) is None  # exactly fits


def test_v0_fit_failure_text_other_releases(dev_cases):
    layout = KvLayout(16, 8, 128, 2, 80)
    # 0.6.4.post1 (A40-48Q): 80 blocks x 16 = 1280 tokens < 8192 (log excerpt is cut after the first sentence)
    case = dev_cases["vllm-11230-qwen25-72b-gptq-v064post1-test21"]
    message = fit_failure(80 * layout.block_bytes, 80, layout, 8192, V0_064)
    assert message.startswith(logged_message(case, "The model's max seq len"))
    # 0.7.3 (LLaMA-Factory #7234): 78336 tokens < 128000
    case = dev_cases["llamafactory-7234-qwen25vl-7b-4x4090"]
    message = fit_failure(4896 * layout.block_bytes, 4896, layout, 128000, release((0, 7, 3), "v0"))
    logged = logged_message(case, "The model's max seq len").split("initiali")[0]  # excerpt cut mid-word
    assert message.startswith(logged)


def test_v0_no_blocks():
    layout = KvLayout(16, 8, 128, 2, 32)
    assert fit_failure(-GIB, 0, layout, 4096, V0_064) == (
        "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine."
    )


def test_v1_no_memory_matches_023_log(dev_cases):
    case = dev_cases["file56155919944-qwen3-8b-bf16-rtx5070ti-fail"]
    logged = " ".join(line.strip() for line in case["log"].splitlines()[-2:]).replace("ValueError: ", "")
    layout = KvLayout(16, 8, 128, 2, 36)
    message = fit_failure(-1, 0, layout, 8192, release((0, 23, 0), "v1"))
    assert message.startswith(logged)


def test_v1_fit_failure_matches_0102_log(dev_cases):
    """#25350 (0.10.2, fp8 KV): 48 layers x 4 KV heads x 128 x 1 B (a Qwen3-30B-A3B-shaped cache):
    needed = cdiv(221000, 16) = 13813 blocks x 786,432 B = 10.12 GiB; 7630 blocks fit -> 122080."""
    case = dev_cases["vllm-25350-fp8kv-221k-fail"]
    layout = KvLayout(16, 4, 128, 1, 48)
    available = 7630 * layout.block_bytes + 300_000  # 5.5887 GiB: prints 5.59
    message = fit_failure(available, 7630, layout, 221000, V1_0100)
    logged = logged_message(case, "To serve at least one request")
    assert message.startswith(logged)
    assert "Try increasing `gpu_memory_utilization` or decreasing `max_model_len`" in message


def test_v1_fit_failure_matches_082_log(dev_cases):
    """#15617 (0.8.2, DeepSeek-R1-Distill-Llama-70B at TP 8 on 4090s): one KV head x 128 x 80 layers per
    rank -> cdiv(116160, 16) = 7260 blocks x 655,360 B = 4.43 GiB. vLLM 0.8.0-0.8.2 printed 'GB' (and no
    length estimate) in this message: kv_cache_utils.py of the 0.8.2 wheel, and the log itself."""
    case = dev_cases["vllm-15617-r1-distill-llama70b-8x4090-v082"]
    layout = kv_layout(spec_of("deepseek-ai/DeepSeek-R1-Distill-Llama-70B"), 8, 80, 16, 2)
    assert layout.block_bytes == 655_360
    available = int(3.48 * GIB)
    message = fit_failure(available, available // layout.block_bytes, layout, 116160, release((0, 8, 2), "v1"))
    logged = logged_message(case, "To serve at least one request")
    assert message.startswith(logged.split(" Try increasing")[0])


def test_v1_fit_failure_matches_015_log(dev_cases):
    """#34076 (0.15.2): 24.0 GiB needed for 262,144 tokens at 96 KiB per token (48 layers x 4 KV x 128 x
    2 x 2 B); 2171 blocks fit -> 34736. From 0.15 the sizes go through format_gib (str(round(x, 2))),
    so the message says '24.0 GiB', not '24.00 GiB'."""
    case = dev_cases["vllm-34076-qwen3coder30b-fp8-pp2-5070ti-5090d"]
    layout = KvLayout(16, 4, 128, 2, 48)
    available = 2171 * layout.block_bytes + 1000  # 3.1802 GiB
    message = fit_failure(available, 2171, layout, 262144, release((0, 15, 2), "v1"))
    assert message.startswith(logged_message(case, "To serve at least one request"))


def test_v1_fit_failure_spelling_fixed_in_022(dev_cases):
    """'the models's max seq len' up to 0.21; 'the model's max seq len' from the 0.22 wheel (#44376 log)."""
    case = dev_cases["vllm-44376-dsv4-flash-gh200-tp2-fail"]
    assert logged_message(case, "To serve at least one request").startswith(
        "To serve at least one request with the model's max seq len (30000)")
    layout = KvLayout(16, 8, 128, 2, 32)
    available = 1000 * layout.block_bytes
    old = fit_failure(available, 1000, layout, 30000, release((0, 21, 0), "v1"))
    new = fit_failure(available, 1000, layout, 30000, release((0, 22, 0), "v1"))
    assert old.startswith("To serve at least one request with the models's max seq len (30000), (")
    assert new.startswith("To serve at least one request with the model's max seq len (30000), (")


def test_v1_fit_check_boundaries():
    layout = KvLayout(16, 8, 128, 2, 32)
    # exactly cdiv(L, 16) blocks of memory is enough; one byte less is not
    needed = 1813 * layout.block_bytes  # cdiv(29000, 16) = 1813
    assert fit_failure(needed, 1813, layout, 29000, V1_0100) is None
    assert fit_failure(needed - 1, 1812, layout, 29000, V1_0100) is not None
    assert fit_failure(0, 0, layout, 29000, V1_0100).startswith("No available memory for the cache blocks.")


def test_029_keeps_the_null_block_out_of_the_fit_check():
    layout = KvLayout(16, 8, 128, 2, 32)
    needed = 1813 * layout.block_bytes
    assert fit_failure(needed, 1813, layout, 29000, release((0, 28, 0), "v1")) is None
    assert fit_failure(needed, 1813, layout, 29000, release((0, 29, 0), "v1")) is not None
    assert fit_failure(needed + layout.block_bytes, 1814, layout, 29000, release((0, 33, 0), "v1")) is None


def test_largest_fitting_max_model_len():
    layout = KvLayout(16, 8, 128, 2, 32)
    assert kv_cache.largest_fitting_max_model_len(1478 * 2 * MIB + 5, layout) == 23648
    assert kv_cache.largest_fitting_max_model_len(-1, layout) == 0
