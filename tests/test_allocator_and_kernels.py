"""The caching-allocator model and the release-dependent AWQ/GPTQ kernel layouts, against logged weights
(docs/research-weights-by-release.md has the derivations)."""
from __future__ import annotations

import pytest

from conftest import GIB, MIB, spec_of
from vram_detective import explain
from vram_detective.engines.vllm.allocator import block_overhead, load_overhead
from vram_detective.engines.vllm.releases import release
from vram_detective.engines.vllm.weights import AllocationPlan
from vram_detective.model.quantization import QuantConfig
from vram_detective.engines.vllm.quant_kernels import kernel_for, linear_tensors


# --- allocator rules -----------------------------------------------------------------------------------


def test_small_and_mid_sized_tensors_only_pay_the_512_byte_rounding():
    assert block_overhead(1000, 0) == 24  # 1000 -> 1024
    assert block_overhead(5 * MIB + 1, 0) == 511  # carved from a 20 MiB segment and split
    assert block_overhead(5 * MIB + 1, 20 * MIB) == 511


def test_large_tensor_keeps_an_unsplit_rest_of_at_most_1_mib():
    # 1039.5 MiB embedding -> 1040 MiB segment, 0.5 MiB rest is not split (rest must exceed 1 MiB)
    assert block_overhead(int(1039.5 * MIB), 0) == MIB // 2
    # 12.5 MiB -> 14 MiB segment: 1.5 MiB rest is split off again
    assert block_overhead(int(12.5 * MIB), 0) == 0


def test_max_split_20_mib_keeps_every_rest_of_big_tensors():
    # 42.5 MiB -> 44 MiB segment: split without max_split, counted whole with max_split_size_mb=20
    assert block_overhead(int(42.5 * MIB), 0) == 0
    assert block_overhead(int(42.5 * MIB), 20 * MIB) == int(1.5 * MIB)
    # below max_split the ordinary rule applies
    assert block_overhead(int(12.5 * MIB), 20 * MIB) == 0


def test_rope_staging_block_is_taken_whole_by_the_first_tensor_it_holds():
    # Llama-3.1-8B: the float32 [131072, 128] cat result (64 MiB) is freed after the bf16 cache is
    # built; layer 1's 48 MiB qkv weight takes it without splitting under max_split 20 MiB (+16 MiB)
    qkv, o, gate_up, down = 48 * MIB, 32 * MIB, 224 * MIB, 112 * MIB
    plan = AllocationPlan((), (qkv, o, gate_up, down), 32, (), rope_after=2, rope_staging_bytes=64 * MIB)
    assert load_overhead(plan, 0) == 0
    assert load_overhead(plan, 20) == 16 * MIB


@pytest.mark.parametrize(
    "model, gpu, version, logged, tolerance",
    [
        # Llama-3.1-8B bf16: exact before 0.21, +16 MiB of rope-staging reuse from 0.21 ("15.0" in 0.31)
        ("meta-llama/Llama-3.1-8B-Instruct", "RTX 3090", "0.6.4", 14.9888, 0.00005),
        ("meta-llama/Llama-3.1-8B-Instruct", "A100", "0.15.1", 14.99, 0.005),
        ("meta-llama/Llama-3.1-8B-Instruct", "A100", "0.31.0", 15.0, 0.005),
        # Qwen3-14B-AWQ on an L40S: Marlin; +0.06 GiB of unsplit rests before 0.21, +0.12 GiB after
        ("Qwen/Qwen3-14B-AWQ", "L40S", "0.9.2", 9.36, 0.005),
        ("Qwen/Qwen3-14B-AWQ", "L40S", "0.28.0", 9.44, 0.025),
    ],
)
def test_weights_against_logged_figures(model, gpu, version, logged, tolerance):
    weights = explain(model, gpu, vllm_version=version, max_model_len=4096).weights_bytes / GIB
    assert weights == pytest.approx(logged, abs=tolerance)


def test_allocator_rounding_is_a_named_weights_component():
    b = explain("Qwen/Qwen3-14B-AWQ", "L40S", vllm_version="0.28.0", max_model_len=4096)
    rounding = b.components.find("weights.allocator_rounding")
    # per layer: qkv 17.5 MiB (+0.5), gate_up 85 MiB (+1), down 42.5 MiB (+1.5 under max_split);
    # embedding and lm_head 1483.75 MiB (+0.25 each); q_norm/k_norm of 256 B are rounded to 512 B (+256 each);
    # the four 4-byte attention scale buffers of 0.28 take 512 B blocks (+508 each)
    assert rounding.bytes == 40 * 3 * MIB + 2 * MIB // 4 + 40 * 2 * 256 + 40 * 4 * 508
    assert any(step.key == "allocator_rounding" for step in b.weights_explained)


# --- kernel layouts by release and GPU ----------------------------------------------------------------

AWQ = QuantConfig(method="awq", bits=4, group_size=128, zero_point=True)
GPTQ = QuantConfig(method="gptq", bits=4, group_size=128)


def _bytes(tensors, suffix):
    return sum(t.bytes for t in tensors if t.suffix == suffix)


def test_awq_stays_on_the_gemm_kernel_before_0_5_3():
    assert kernel_for(AWQ, (8, 9), release((0, 5, 2), "v0")).kernel == "awq"
    assert kernel_for(AWQ, (8, 9), release((0, 5, 3), "v0")).kernel == "awq_marlin"
    assert kernel_for(AWQ, (7, 5), release((0, 6, 3), "v0")).kernel == "awq"  # Marlin needs sm80


def test_machete_stores_awq_zero_points_as_fp16_on_sm90_from_0_19():
    assert kernel_for(AWQ, (9, 0), release((0, 18, 0), "v1")).kernel == "awq_marlin"
    layout = kernel_for(AWQ, (9, 0), release((0, 19, 0), "v1"))
    assert layout.kernel == "machete" and layout.fp16_zeros
    # qkv of Qwen2.5-7B: K 3584, N 4608, 28 groups: fp16 zero points 28 x 4608 x 2 B
    tensors = linear_tensors(AWQ, layout, 3584, 4608, 3, "float16", 3584)
    assert _bytes(tensors, "qzeros") == 28 * 4608 * 2
    marlin = linear_tensors(AWQ, kernel_for(AWQ, (8, 9), release((0, 19, 0), "v1")), 3584, 4608, 3, "float16", 3584)
    assert _bytes(marlin, "qzeros") == 28 * 4608 // 2  # int32-packed 4-bit


def test_marlin_workspace_per_output_until_0_9():
    old = kernel_for(AWQ, (8, 9), release((0, 8, 5), "v1"))
    new = kernel_for(AWQ, (8, 9), release((0, 9, 0), "v1"))
    assert old.per_output_workspace and not new.per_output_workspace
    # marlin_make_workspace: int32 [N / 64 * 16] -> N bytes
    assert _bytes(linear_tensors(AWQ, old, 3584, 37888, 2, "float16", 3584), "workspace") == 37888


@pytest.mark.parametrize(
    "version, zeros, g_idx",
    [
        ((0, 4, 3), False, True),  # lazy repack: g_idx + sort indices still there when the load is measured
        ((0, 5, 4), False, False),
        ((0, 6, 1), True, False),  # 0.6.0-0.6.1 allocate qzeros and keep them
        ((0, 6, 2), False, False),
    ],
)
def test_gptq_marlin_layout_by_release(version, zeros, g_idx):
    layout = kernel_for(GPTQ, (8, 6), release(version, "v0"))
    assert layout.kernel == "gptq_marlin"
    tensors = linear_tensors(GPTQ, layout, 4096, 4096, 1, "float16", 4096)
    assert (_bytes(tensors, "qzeros") > 0) is zeros
    assert (_bytes(tensors, "g_idx") + _bytes(tensors, "g_idx_sort_indices") == 2 * 4 * 4096) is g_idx


def test_gptq_machete_keeps_zeros_and_g_idx_on_sm90():
    layout = kernel_for(GPTQ, (9, 0), release((0, 11, 0), "v1"))
    assert layout.kernel == "machete"
    tensors = linear_tensors(GPTQ, layout, 4096, 4096, 1, "bfloat16", 4096)
    assert _bytes(tensors, "qzeros") == 32 * 4096 // 2 and _bytes(tensors, "g_idx") == 4 * 4096


def test_seed_weights_within_half_a_percent():
    b = explain("Qwen/Qwen2.5-7B-Instruct-AWQ", "RTX 4090", vllm_version="0.6.3", max_model_len=32768)
    assert b.weights_bytes / GIB == pytest.approx(5.2048, rel=0.005)
    theory = b.weights_explained[0]
    assert theory.bytes / GIB == pytest.approx(3.55, abs=0.01)  # 7.6 B parameters x 4 bit
    kept = next(step for step in b.weights_explained if step.key == "kept_16bit")
    assert kept.bytes / GIB == pytest.approx(1.52, abs=0.01)  # embeddings + lm_head at 16 bit, not 4


def test_auto_fit_max_model_len_shrinks_to_the_pool():
    b = explain("meta-llama/Llama-3.1-8B-Instruct", "RTX 4090", vllm_version="0.20.0", max_model_len=-1)
    assert b.failure is None
    assert b.max_model_len < 131072 and b.max_model_len % 16 == 0
    assert b.max_model_len == b.num_gpu_blocks * 16  # the whole pool is one request
    assert any(line.startswith("Auto-fit max_model_len: reduced from 131072 to ") for line in b.log_lines)
    with pytest.raises(ValueError, match="auto-fit"):
        explain("meta-llama/Llama-3.1-8B-Instruct", "RTX 4090", vllm_version="0.11.0", max_model_len=-1)


def test_spec_of_seed_model():
    spec = spec_of("qwen/qwen2.5-7b-instruct-awq")  # case-insensitive catalog lookup
    assert spec.quantization.method == "awq" and spec.vocab_size == 152064
