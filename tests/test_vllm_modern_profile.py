"""vLLM 0.17+: the profile run's sampler (Triton top-k/top-p), cuBLAS's workspace, and the non-torch growth at TP >= 2
(the FlashInfer all-reduce fusion workspace, the TP group's NCCL communicator) - engines/vllm/profile.py - against
hand arithmetic from the release's source and the real 0.19.0 logs of groundtruth/dev-vllm-modern.jsonl."""
from __future__ import annotations

import statistics

import pytest
from conftest import GROUNDTRUTH

from vram_detective.api import explain
from vram_detective.scoring import load_cases, score_cases
from vram_detective.units import GIB, MIB

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
VOCAB, HIDDEN = 128256, 4096
REQUESTS, TOKENS = 1024, 8192  # vLLM's serve defaults on an H100 (>= 70 GiB): max_num_seqs, max_num_batched_tokens


def _llama(version: str, **settings):
    return explain(LLAMA, "H100", vllm_version=version, **{"max_model_len": 8192, "gpu_memory_utilization": 0.95,
                                                            **settings})


def test_sampler_peak_of_the_triton_era_by_hand():
    """0.19.0: [R, V] bf16 logits + fp32 logits + probs + noise (2 + 4 + 4 + 4 B), a whole 2 MiB block for each fp32
    tensor whose rest is 1 MiB (525,336,576 B), the kernel's 132 cached rows (one per H100 SM) of fp32, the last hidden
    states and their random copy [R, H], the model's [T, H] output, and cuBLAS's 32 MiB sm90 workspace. The real
    log (dev-vllm-modern.jsonl, 0.19.0, H100) says 1.89 GiB."""
    logits = REQUESTS * VOCAB
    expected = (logits * 14 + 3 * MIB + 132 * VOCAB * 4 + 2 * REQUESTS * HIDDEN * 2 + TOKENS * HIDDEN * 2
                + 32 * MIB)
    peak = _llama("0.19.0").activation_peak_bytes
    assert peak == expected
    assert round(peak / GIB, 2) == 1.89


def test_sampler_before_the_triton_kernel_sorts():
    """0.16.0 has no topk_topp_triton.py: the sort path's 39 B per logits element and no workspace term."""
    assert _llama("0.16.0").activation_peak_bytes == REQUESTS * VOCAB * 39 + TOKENS * HIDDEN * 2


def _peak_reason(breakdown) -> str:
    return next(part for part in breakdown.components.children if part.key == "activation_peak").reason


def test_cublas_workspace_is_made_before_the_snapshot_in_0_33():
    assert "cuBLAS workspace 32 MiB" in _peak_reason(_llama("0.32.0"))
    assert "cuBLAS" not in _peak_reason(_llama("0.33.0"))


def test_non_torch_at_tp2_on_hopper_by_hand():
    """0.19.0, TP 2, H100: the Hopper growth of 0.18+ (0.25 GiB, calibration), the TP group's NCCL communicator
    (0.32 GiB, calibration) and FlashInfer's trtllm workspace: data 2 x 8192 x 4096 x 2 B = 128 MiB, flags, Lamport
    3 x 128 MiB - three SymmDeviceMemory buffers of (size + the 2 KiB signal pad) rounded up to the 512 MiB multicast
    granularity = 1.5 GiB. The real logs say 2.07 GiB (Llama-3.1-8B and Mixtral-8x7B)."""
    non_torch = _llama("0.19.0", tensor_parallel_size=2).figure("non_torch_bytes")
    assert non_torch == int(0.25 * GIB) + int(0.32 * GIB) + 3 * 512 * MIB
    assert round(non_torch / GIB, 2) == 2.07


def test_fusion_workspace_at_tp4_and_where_it_is_not_built():
    """TP 4 on sm90: 2 MB of fused input -> 256 tokens; each buffer still takes one 512 MiB multicast granule, so
    TP 4 logs about what TP 2 does (the issue: ~2.1 GiB at both). Not built with pipeline parallelism, eagerly,
    without NVSwitch multicast (H100 PCIe), before 0.17.0, nor sized for 0.25's mnnvl backend."""
    base = int(0.25 * GIB) + int(0.32 * GIB)
    assert _llama("0.19.0", tensor_parallel_size=4).figure("non_torch_bytes") == base + 3 * 512 * MIB
    assert _llama("0.19.0", tensor_parallel_size=2, pipeline_parallel_size=2).figure("non_torch_bytes") == base
    assert _llama("0.19.0", tensor_parallel_size=2, enforce_eager=True).figure("non_torch_bytes") == base
    pcie = explain(LLAMA, "H100 PCIe", vllm_version="0.19.0", max_model_len=8192, tensor_parallel_size=2)
    assert pcie.figure("non_torch_bytes") == base
    assert _llama("0.16.0", tensor_parallel_size=2).figure("non_torch_bytes") == int(0.14 * GIB) + int(0.32 * GIB)
    assert _llama("0.25.0", tensor_parallel_size=2).figure("non_torch_bytes") == int(0.25 * GIB)


def test_dev_vllm_modern_profile_terms():
    """Issue 25's targets on the real 0.19.0 runs: activation peak and non-torch medians within 10 %, the KV pool
    within 0.5 GiB at the median."""
    report = score_cases(load_cases(str(GROUNDTRUTH / "dev-vllm-modern.jsonl")))["vllm"]
    figures = report["figures"]
    assert report["scored"] == 7
    assert figures["activation_peak_gib"]["median_abs_rel_err"] <= 0.10
    assert figures["non_torch_gib"]["median_abs_rel_err"] <= 0.10
    assert figures["kv_cache_gib"]["median_abs_err_gib"] <= 0.5
    errors = {case["id"]: case["figures"]["activation_peak_gib"]["rel_err"] for case in report["per_case"]}
    # every run but the first pipeline stage is exact to the printed 0.01 GiB: the four text-only ones, Mixtral (the
    # MoE workspace under the sampler) and Gemma 3 (the dummy images and their outputs under the sampler)
    exact = {case["id"] for case in report["per_case"] if case["figures"]["activation_peak_gib"]["abs_err_gib"] < 0.005}
    assert len(exact) == 6
    assert "vllm-llmdplanner-h100-mixtral-8x7b-instruct-v0-1-tp2-8192-v0190" in exact
    assert statistics.median(errors.values()) < 0.01


MIXTRAL = "mistralai/Mixtral-8x7B-Instruct-v0.1"


def _mixtral(version: str, **settings):
    return explain(MIXTRAL, "H100", vllm_version=version, **{"max_model_len": 8192, "gpu_memory_utilization": 0.95,
                                                              "tensor_parallel_size": 2, **settings})


def test_moe_workspace_stays_under_the_sampler_by_hand():
    """0.19.0, Mixtral-8x7B at TP 2 (top-2 of 8 experts, 14,336 / 2 = 7,168 per rank, hidden 4,096): the modular
    kernel's scratch lives in the WorkspaceManager and outlives the forward - workspace13 [8192, 2, max(7168, 4096)]
    (the output [8192, 4096] shares it) + workspace2 [8192, 2, max(14336, 4096)], bf16 = 672 MiB. The dummy sampler
    then runs beside it: [1024, 32000] logits x 14 B, the whole 2 MiB block of each fp32 tensor (125 MiB: the 1 MiB
    rest is not split off; the bf16 one's 1.5 MiB rest is), the kernel's 132 cached fp32 rows, the last hidden states
    twice, the [T, H] output, and cuBLAS's 32 MiB. The real log says 1.21 GiB (before: 0.88 from the forward alone)."""
    tokens, requests, vocab, hidden = 8192, 1024, 32000, 4096
    workspace = tokens * 2 * 7168 * 2 + tokens * 2 * 14336 * 2
    sampler = (requests * vocab * 14 + 3 * (126 * MIB - requests * vocab * 4)
               + 132 * vocab * 4 + 2 * requests * hidden * 2 + tokens * hidden * 2)
    b = _mixtral("0.19.0")
    assert b.activation_peak_bytes == workspace + sampler + 32 * MIB
    assert round(b.activation_peak_bytes / GIB, 2) == 1.21
    assert "0.66 GiB MoE workspace the forward left allocated" in _peak_reason(b)


def test_moe_workspace_from_0_14_and_only_for_unquantized_experts():
    """0.13.0 calls fused_experts(), whose caches die with the call: the sampler runs alone. 0.14.0's modular kernel
    chunks at VLLM_FUSED_MOE_CHUNK_SIZE (16,384): at 32,768 tokens two chunks of scratch + a separate [T, H] output;
    0.18.0 takes the whole batch as one chunk. Quantized experts (other kernels, not read here) keep the older
    per-call model."""
    peak13 = _mixtral("0.13.0").activation_peak_bytes
    peak14 = _mixtral("0.14.0").activation_peak_bytes
    assert peak14 - peak13 == 8192 * 2 * (7168 + 14336) * 2
    tokens = 32768
    chunked = 16384 * 2 * 7168 * 2 + 16384 * 2 * 14336 * 2 + tokens * 4096 * 2
    whole = tokens * 2 * 7168 * 2 + tokens * 2 * 14336 * 2
    # 8 sequences: the forward (3 hidden tensors + the scratch) is the peak, beside cuBLAS's 32 MiB
    peak = {version: _mixtral(version, max_num_batched_tokens=tokens, max_num_seqs=8).activation_peak_bytes
            for version in ("0.17.0", "0.18.0")}
    assert peak["0.17.0"] == 3 * tokens * 4096 * 2 + chunked + 32 * MIB
    assert peak["0.18.0"] == 3 * tokens * 4096 * 2 + whole + 32 * MIB
    fp8 = explain(MIXTRAL, "H100", vllm_version="0.19.0", max_model_len=8192, tensor_parallel_size=2, quantization="fp8")
    assert "MoE workspace" not in _peak_reason(fp8)


def test_gemma3_dummy_images_stay_through_the_sampler_by_hand():
    """0.19.0, Gemma-3-4B on an H100: profile_run encodes 8,192 // 256 = 32 dummy 896 x 896 images and keeps both
    their outputs (the encoder cache, [32 x 256, 2560]) and the batch itself (the local batched_dummy_mm_inputs:
    pixel_values [32, 3, 896, 896], bf16 after the processor's cast) until it returns, so both sit under the
    sampler: [1024, 262208] logits x 14 B (every tensor's rest above 1 MiB is split off: no whole-block overhead),
    132 cached rows, [1024, 2560] twice, [8192, 2560], cuBLAS's 32 MiB. The SigLIP tower itself peaks lower
    (eagerly at its GELU: 2 hidden + 2 intermediate per patch, 131,072 patches: 2.66 GiB + the images). The real
    log says 3.89 GiB (before: 4.03, the tower counted like a compiled text MLP)."""
    vocab, hidden, requests, tokens = 262208, 2560, 1024, 8192
    sampler = requests * vocab * 14 + 132 * vocab * 4 + 2 * requests * hidden * 2 + tokens * hidden * 2
    images = 32 * 3 * 896 * 896 * 2
    outputs = 32 * 256 * hidden * 2
    b = explain("google/gemma-3-4b-it", "H100", vllm_version="0.19.0", max_model_len=8192, gpu_memory_utilization=0.95)
    assert b.activation_peak_bytes == sampler + images + outputs + 32 * MIB
    assert round(b.activation_peak_bytes / GIB, 2) == 3.89
    assert "0.14 GiB of dummy images" in _peak_reason(b)
    # the processor's float32 output stays float32 before 0.9.1's cast (V1 0.9.0)
    b90 = explain("google/gemma-3-4b-it", "H100", vllm_version="0.9.0", max_model_len=8192)
    assert "0.29 GiB of dummy images" in _peak_reason(b90)


def _first_stage_figures() -> dict:
    report = score_cases([case for case in load_cases(str(GROUNDTRUTH / "dev-vllm-modern.jsonl"))
                          if "tp1pp2" in case["id"]])["vllm"]
    return report["per_case"][0]["figures"]


@pytest.mark.xfail(strict=True, reason="first pipeline stage: 0.875 GiB predicted (3 hidden + 3 intermediate tensors "
                                       "per token + cuBLAS), 1.10 GiB logged; Inductor's plan of the MLP piece holds "
                                       "the 3 + 3 count - the 225-236 MiB more need a memory snapshot of rank 0's "
                                       "profile run (docs/accuracy.md)")
def test_first_pipeline_stage_forward_peak():
    assert abs(_first_stage_figures()["activation_peak_gib"]["rel_err"]) <= 0.10


@pytest.mark.xfail(strict=True, reason="first pipeline stage: 0.25 GiB of non-torch predicted (the TP 1 figure), 0.07 "
                                       "logged; what the last stage's logits and sampler add outside torch is not in "
                                       "any source - a device measurement (docs/accuracy.md)")
def test_first_pipeline_stage_non_torch():
    assert abs(_first_stage_figures()["non_torch_gib"]["rel_err"]) <= 0.10


def test_cuda_graph_estimate_follows_vllms_formula():
    """profile_cudagraph_memory (0.18+): the first capture once + (graphs of a mode - 1) x its second capture, per
    mode. Llama-3.1-8B, 1,024 sequences: 51 capture sizes up to 512 in PIECEWISE and 51 FULL decode graphs; the two
    measured captures are calibrated (0.37 GiB, 0.11 MiB per layer), the pool is 1.30 x the estimate."""
    from vram_detective.engines.vllm import calibration

    first = calibration.GRAPH_FIRST_CAPTURE_HOPPER_PLUS.bytes
    second = calibration.GRAPH_SECOND_CAPTURE_PER_LAYER_HOPPER_PLUS.bytes * 32
    estimate = first + 2 * (51 - 1) * second
    b = _llama("0.19.0")
    assert b.figure("cuda_graph_estimate_bytes") == estimate
    assert b.figure("cuda_graph_bytes") == int(estimate * 1.30)
    assert f"Estimated CUDA graph memory: {estimate / GIB:.2f} GiB total" in b.log_lines
    pool = int(estimate * 1.30)
    line = (f"CUDA graph pool memory: {round(pool / GIB, 2)} GiB (actual), {round(estimate / GIB, 2)} GiB (estimated), "
            f"difference: {round((pool - estimate) / GIB, 2)} GiB ({100 * (pool - estimate) / pool:.1f}%).")
    assert line in b.log_lines


def test_the_estimate_not_the_pool_leaves_the_budget_from_0_20():
    """0.19.0 logs the estimate only (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS '0'); 0.20.0 subtracts it ('1')."""
    b19, b20 = _llama("0.19.0"), _llama("0.20.0")
    assert not any(part.key == "cuda_graphs" for part in b19.components.children)
    graphs = next(part for part in b20.components.children if part.key == "cuda_graphs")
    assert graphs.bytes == b20.figure("cuda_graph_estimate_bytes") < b20.figure("cuda_graph_bytes")


def test_dev_vllm_modern_graph_figures():
    report = score_cases(load_cases(str(GROUNDTRUTH / "dev-vllm-modern.jsonl")))["vllm"]
    assert report["figures"]["cuda_graph_gib"]["median_abs_rel_err"] <= 0.10
    assert report["figures"]["cuda_graph_estimate_gib"]["median_abs_rel_err"] <= 0.10


@pytest.mark.xfail(strict=True, reason="the estimate's two captures are measured by vLLM (cudaMemGetInfo deltas); "
                                       "calibrated, they land within 0.01 GiB on 1 of 7 runs (median |error| "
                                       "0.08 GiB; Llama-3.1-8B TP 2 logs 1.69 GiB against 0.71: torch memory of its "
                                       "first capture that Mixtral's at TP 2 lacks - the per-mode DEBUG lines of the "
                                       "source logs would settle the split)")
def test_estimate_line_within_a_hundredth_of_a_gib():
    report = score_cases(load_cases(str(GROUNDTRUTH / "dev-vllm-modern.jsonl")))["vllm"]
    errors = [case["figures"]["cuda_graph_estimate_gib"]["abs_err_gib"] for case in report["per_case"]]
    assert max(errors) <= 0.01


def test_sampler_warm_up_after_capture_takes_what_pool_and_graphs_leave():
    """compile_or_warm_up_model runs the sampler on min(max_num_seqs, max_num_batched_tokens) = 1,024 dummy requests
    after the KV pool and the graphs: 1,024 x 128,256 x 14 B = 1.67 GiB (+ the last hidden states). At u = 0.98 an
    H100's 79.19 GiB leave 1.58 GiB beyond the budget, plus the 1.89 GiB peak the budget kept free, minus the CUDA
    context (0.30) and the 0.93 GiB graph pool 0.19 captures outside the budget: it fits. At 0.99 (0.79 GiB beyond
    the budget) it does not, with vLLM's own message."""
    assert _llama("0.19.0", gpu_memory_utilization=0.98).failure is None
    failed = _llama("0.19.0", gpu_memory_utilization=0.99).failure
    assert failed.message == ("CUDA out of memory occurred when warming up sampler with 1024 dummy requests. Please "
                              "try lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the engine.")
    # 0.20 subtracts the graph estimate from the budget: the headroom is no longer the graphs' too
    assert _llama("0.20.0", gpu_memory_utilization=0.99).failure is None
