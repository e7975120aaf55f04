"""Issue 31: a breakdown tree adds up - a node's children sum to it, no node is negative - for the setups the fuzz
(benchmarks/fuzz.py) found breaking it: vLLM's --cpu-offload-gb (a negative 'moved to CPU' term), a pool sized by
--kv-cache-memory-bytes or --num-gpu-blocks-override (the budget left unexplained or overrun), SGLang's
--max-total-tokens cap (budget unexplained), its padding rows (children over the budget) and the speculative
draft's weights charged to the budget (0.5.14+). Then the same invariants over random setups of every engine."""
from __future__ import annotations

import pytest

from vram_detective import api, errors
from vram_detective.units import GIB

# Qwen3-8B: hidden 4096, 36 layers, 8 KV heads of 128, vocabulary 151,936 (untied)
QWEN3_8B_EMBEDDING = 151936 * 4096 * 2
LAYER_ROLES = ("weights.attention", "weights.mlp", "weights.norm")


def tree_problems(node, slack: int = 1 << 20) -> list[str]:
    found = [f"{node.key} is {node.bytes} B"] if node.bytes < 0 else []
    if node.children:
        total = sum(child.bytes for child in node.children)
        if abs(total - node.bytes) > slack:
            found.append(f"{node.key}: children {total} B, node {node.bytes} B")
        for child in node.children:
            found += tree_problems(child, slack)
    return found


def _children(node) -> dict[str, int]:
    return {child.key: child.bytes for child in node.children}


def test_cpu_offload_takes_the_moved_bytes_off_the_layer_roles_not_a_negative_term():
    """4 GiB of Qwen3-8B's 36 layers of 368 MiB: 11 whole layers and part of the 12th move (the crossing tensor
    moves too, so exactly the limit). Embeddings and lm_head stay; the layer roles lose exactly 4 GiB."""
    plain = api.explain("Qwen/Qwen3-8B", "RTX 4090", vllm_version="0.11.0").components.find("weights")
    offloaded = api.explain("Qwen/Qwen3-8B", "RTX 4090", vllm_version="0.11.0", cpu_offload_gb=4).components.find("weights")
    assert tree_problems(offloaded, slack=0) == []
    before, after = _children(plain), _children(offloaded)
    rounding = before["weights.allocator_rounding"] - after["weights.allocator_rounding"]  # fewer blocks on the GPU
    assert plain.bytes - offloaded.bytes == 4 * GIB + rounding
    assert after["weights.embedding"] == before["weights.embedding"] == QWEN3_8B_EMBEDDING
    assert after["weights.lm_head"] == QWEN3_8B_EMBEDDING
    assert sum(before[key] for key in LAYER_ROLES) - sum(after[key] for key in LAYER_ROLES) == 4 * GIB
    assert "weights.cpu_offload" not in after
    assert "4.00 GiB of decoder-layer parameters moved to CPU memory by --cpu-offload-gb" in offloaded.reason


def test_kv_cache_memory_bytes_node_is_what_the_parts_take():
    """gpu_memory_utilization does not size the pool: 8 GiB of KV (whole 16-token blocks of 26 layers x 4 KV heads
    x 256 x 2 x 2 B = 851,968 B each) beside the weights, not a 21.58 GiB budget left 7.5 GiB unexplained."""
    b = api.explain("google/gemma-2-2b", "RX 7900 XTX", vllm_version="0.19.0", max_model_len=512,
                    kv_cache_memory_bytes=8 * GIB)
    assert tree_problems(b.components, slack=0) == []
    assert _children(b.components)["kv_cache"] == 8 * GIB // 851968 * 851968
    assert "--kv-cache-memory-bytes 8.00 GiB" in b.components.label


def test_block_override_beyond_the_budget_is_not_squeezed_into_it():
    """10,000 fp8 blocks of Qwen2.5-7B (28 layers x 2 x 16 x 4 x 128 B) take 4.27 GiB where the budget leaves
    2.05: vLLM allocates them (the GPU holds them); the node is the parts' sum, not the 20.93 GiB budget."""
    b = api.explain("Qwen/Qwen2.5-7B-Instruct", "A30", vllm_version="0.7.3", kv_cache_dtype="fp8_e5m2",
                    swap_space=0.0, num_gpu_blocks_override=10000)
    assert b.failure is None
    assert _children(b.components)["kv_cache"] == 10000 * 28 * 2 * 16 * 4 * 128
    assert tree_problems(b.components, slack=0) == []
    assert "--num-gpu-blocks-override 10,000" in b.components.label


def test_v0_block_override_where_the_profile_left_no_memory_allocates_the_blocks():
    """V0 replaces the profiled count (0 where u x T leaves nothing) by num_gpu_blocks_override and allocates it:
    gemma-3-4b in float32 on a TITAN RTX at u 0.5 (weights 17.17 GiB over an 11.88 GiB budget) starts with 100
    blocks of 34 layers x 2 x 16 x 4 x 256 x 4 B. Found by benchmarks/fuzz.py: the KV figure was -7.81 GiB."""
    b = api.explain("google/gemma-3-4b-it", "TITAN RTX", vllm_version="0.9.2", gpu_memory_utilization=0.5,
                    num_gpu_blocks_override=100)
    assert b.failure is None and b.engine_variant == "V0"
    assert b.kv_cache_bytes == _children(b.components)["kv_cache"] == 100 * 34 * 2 * 16 * 4 * 256 * 4
    assert b.kv_cache_tokens == 1600
    assert tree_problems(b.components) == []


def test_sglang_max_total_tokens_leaves_the_rest_of_the_budget_free():
    """A 100,000-token cap on gemma-3-4b (34 layers x 4 KV heads x 256 x 2 x 2 B = 139,264 B a token) leaves
    10.32 GiB of mem_fraction_static's budget to the graphs and activations: it is outside the static node."""
    b = api.explain("google/gemma-3-4b-it", "A100 40GB PCIe", engine="sglang", max_total_tokens=100000)
    assert b.failure is None and b.kv_cache_tokens == 100000 and b.kv_bytes_per_token == 139264
    assert tree_problems(b.components) == [] and tree_problems(b.outside_budget) == []
    assert b.components.bytes == b.weights_bytes + b.kv_cache_bytes
    assert b.components.bytes + b.outside_budget.bytes == b.total_gpu_bytes
    assert "the cap leaves 10.32 GiB" in b.components.reason


def test_sglang_padding_page_is_allocated_beyond_the_budget():
    """page_size 64: each K/V buffer has one more page (slot 0), 64 x 512 KiB = 32 MiB past the 56,960 tokens."""
    b = api.explain("meta-llama/Llama-2-7b-chat-hf", "RTX 6000 Ada", engine="sglang", engine_version="0.5.8",
                    page_size=64)
    assert b.kv_cache_tokens == 56960 and b.kv_bytes_per_token == 524288
    assert b.kv_cache_bytes == (56960 + 64) * 524288
    assert tree_problems(b.components, slack=0) == []
    assert "padding rows take 24 MiB beyond it" in b.components.reason


def test_sglang_mamba_pool_extra_row_is_counted_in_the_node():
    b = api.explain("nvidia/Nemotron-H-8B-Base-8K", "B200", engine="sglang", engine_version="0.5.10")
    assert tree_problems(b.components, slack=0) == []
    assert "padding rows take 97 MiB beyond it" in b.components.reason
    assert b.components.bytes + b.outside_budget.bytes == b.total_gpu_bytes


# --- the same invariants over random setups of every engine (benchmarks/fuzz.py runs 100,000) -----------

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

from vram_detective.hardware import all_gpus  # noqa: E402
from vram_detective.model.sources import catalog_entries  # noqa: E402

MODELS = sorted(entry.repo_id for entry in catalog_entries())
GPUS = sorted(gpu.short_name for gpu in all_gpus())
FLAGS = {
    "vllm": {"cpu_offload_gb": st.sampled_from([0.0, 1.0, 4.0, 64.0]),
             "kv_cache_memory_bytes": st.sampled_from([1 << 30, 8 << 30]),
             "num_gpu_blocks_override": st.sampled_from([100, 10_000]), "max_model_len": st.sampled_from([512, 4096]),
             "tensor_parallel_size": st.sampled_from([1, 2]), "pipeline_parallel_size": st.sampled_from([1, 2])},
    "sglang": {"max_total_tokens": st.sampled_from([100_000, 1_000_000]), "page_size": st.sampled_from([1, 16, 64]),
               "speculative_algorithm": st.sampled_from(["EAGLE", "NGRAM"]), "context_length": st.sampled_from([4096, 32768]),
               "tp_size": st.sampled_from([1, 2])},
    "llamacpp": {"n_ctx": st.sampled_from([0, 4096, 32768]), "n_parallel": st.sampled_from([1, 4]),
                 "n_gpu_layers": st.sampled_from([0, 10, 99])},
    "ollama": {"num_ctx": st.sampled_from([2048, 8192]), "num_parallel": st.sampled_from([1, 4]),
               "num_gpu": st.sampled_from([0, 10, 999])},
}


@st.composite
def setups(draw):
    engine = draw(st.sampled_from(sorted(FLAGS)))
    chosen = draw(st.lists(st.sampled_from(sorted(FLAGS[engine])), max_size=3, unique=True))
    flags = {key: draw(FLAGS[engine][key]) for key in chosen}
    return draw(st.sampled_from(MODELS)), draw(st.sampled_from(GPUS)), engine, flags


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(setups())
def test_every_engines_tree_adds_up_when_it_starts(setup):
    model, gpu, engine, flags = setup
    try:
        b = api.explain(model, gpu, engine=engine, **flags)
    except Exception as error:  # noqa: BLE001 - only the project's own errors may escape
        assert errors.kind(error) != errors.BUG, f"{type(error).__name__}: {error}"
        return
    if b.failure is not None:
        return
    # a pool is whole blocks (what is left is below one block); SGLang's figures are rounded per term
    blocks = b.figure("num_gpu_blocks")
    slack = max(1 << 20, b.kv_cache_bytes // blocks if blocks else 0, b.components.bytes // 2000)
    assert tree_problems(b.components, slack) == []
    if b.outside_budget is not None:
        assert tree_problems(b.outside_budget, slack) == []
