"""vLLM's memory rules, release by release, in one table.

Each row says: from this release on (and for this engine path, V0 or V1, when it matters), this
rule has this value. A release's rules are the last value of every rule at or before it. Sources
are the released wheels (`shared/tools/engine-src vllm VERSION`) and `design/vllm-memory.md`;
"since X" means present in the X wheel and absent in the previous wheel inspected.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from types import MappingProxyType
from typing import Mapping, TypeVar

from ...units import format_version, parse_version
from ..common.rules import ReleaseWindow, Rule, UnsupportedReleaseError, rows_in_force  # noqa: F401
from .calibration import SAMPLER_BYTES_PER_LOGIT_FROM_0_28

Version = tuple[int, int, int]
T = TypeVar("T")

OLDEST_SUPPORTED: Version = (0, 3, 0)  # V0-c (#2863) is the oldest budget rule read from a wheel
NEWEST_KNOWN: Version = (0, 33, 0)  # the one value to move for a release without new rules (docs/architecture.md)

# The releases users pick most; `--vllm-version` accepts any version between the two ends.
NOTABLE_RELEASES = (
    "0.4.3", "0.5.5", "0.6.3", "0.6.4", "0.6.6", "0.7.3", "0.8.5", "0.9.2", "0.10.2", "0.11.0",
    "0.13.0", "0.15.1", "0.18.0", "0.19.0", "0.20.0", "0.23.0", "0.26.0", "0.27.0", "0.28.0",
    "0.30.0", "0.33.0",
)


@dataclass(frozen=True)
class BatchDefaults:
    """V1's default max_num_batched_tokens / max_num_seqs by GPU size (arg_utils.py _set_default_args_v1)."""

    large_from_gib: int  # GPUs of at least this size get the large defaults (16384 LLM / 8192 serve, 1024 seqs)
    a100_large: bool  # whether an A100 counts among them
    serve_large_from_gib: int | None = None  # from this size on, `serve` gets LLM's 16384 too


def _v(text: str) -> Version:
    return parse_version(text)


def _row(since: str, path: str | None, rule: str, value: T, source: str) -> Rule[T]:
    """From release `since` on, on engine path `path` ("v0", "v1"; None for both), `rule` is `value`."""
    return Rule(_v(since), rule, value, source, path=path)


def _added(since: str, rule: str, source: str) -> tuple[Rule[bool], Rule[bool]]:
    """A feature absent until `since`: False from the start, True from `since` on."""
    return (_row("0.0.0", None, rule, False, f"absent before {since}"), _row(since, None, rule, True, source))


# fmt: off
RULE_CHANGES: tuple[Rule, ...] = (
    # Qwen3-VL's profiled dummy input (qwen3_vl.py get_max_video_tokens x 12.5 and the runner's expansion to the
    # encoder budget in 0.11.0-0.12.x; images of the largest size from 0.13.0)
    _row("0.0.0", None, "qwen3_vl_video_profile", True, "qwen3_vl.py 0.11.0: video_soft_tokens * 12.5 (0.12.0 too)"),
    _row("0.13.0", None, "qwen3_vl_video_profile", False, "0.13.0: no x12.5, the image has the most tokens"),
    # Encoder-decoder (Whisper) on V1: max_num_encoder_input_tokens = the encoder length (get_encdec_max_encoder_len)
    _row("0.0.0", None, "encdec_encoder_tokens_override", True, "config/vllm.py 0.10.2-0.12.0: max_num_encoder_input_tokens = 1500"),
    _row("0.13.0", None, "encdec_encoder_tokens_override", False, "0.13.0: left at max_num_batched_tokens (config/scheduler.py)"),
    # Whisper's input features on the GPU during the profile forward, bytes per element over all copies
    # (0.7.x: one model-dtype copy; 0.8.0-0.9.0: the fp32 processor output + the .to(dtype) cat; 0.9.1+: two model-dtype copies)
    _row("0.0.0", None, "whisper_feature_copies_bytes", 2, "whisper.py 0.7.0 input_mapper casts to the model dtype"),
    _row("0.8.0", None, "whisper_feature_copies_bytes", 6, "whisper.py 0.8.0 _parse_and_validate_audio_input: fp32 + fp16 cat"),
    _row("0.9.1", None, "whisper_feature_copies_bytes", 4, "inputs/registry.py 0.9.1 maybe_cast_dtype: fp16 + fp16 cat"),
    # Speculative decoding's drafter in the V1 profile run and graphs (gpu_model_runner.py, v1/spec_decode/eagle.py)
    _row("0.0.0", None, "drafter_dummy_run", False, "0.8.x _dummy_run runs the target only"),
    _row("0.9.0", None, "drafter_dummy_run", True, "_dummy_run calls drafter.dummy_run(num_tokens) after the target (0.9.0)"),
    _row("0.0.0", None, "proposer_buffers_counted", True, "0.8.x: allocated_bytes peak since the reset includes every buffer"),
    _row("0.9.1", None, "proposer_buffers_counted", False, "memory_profiling: buffers made before the snapshot fall in no term (0.9.1-0.26)"),
    _row("0.27.0", None, "proposer_buffers_counted", True, "0.27: non_kv = total_consumed since the init snapshot + transient peak"),
    _row("0.0.0", None, "drafter_graphs", False, "0.8.x: the EAGLE head runs eagerly"),
    _row("0.9.0", None, "drafter_graphs", True, "llama_eagle.py @support_torch_compile: piecewise graphs for every capture size (0.9.0-0.10.0)"),
    _row("0.10.1", None, "drafter_graphs", False, "eagle.py passes no cudagraph runtime mode: eager (0.10.1-0.11.0)"),
    _row("0.11.1", None, "drafter_graphs", True, "eagle.py 0.11.1: PIECEWISE graphs with the target's piecewise pass"),
    # Multimodal RoPE rows (rotary_embedding/mrope.py MRotaryEmbedding: max_position_embeddings x 4; 0.32.0 passes
    # mrope_positions_factor, which Qwen3-VL / Qwen3.5 set to 1 without video pruning: qwen3_vl.py 0.32.0)
    _row("0.0.0", None, "qwen3_mrope_positions_factor", 4, "MRotaryEmbedding cache_max_position_num = max_pos x 4 (0.11.0-0.31.0)"),
    _row("0.32.0", None, "qwen3_mrope_positions_factor", 1, "qwen3_vl.py mrope_positions_factor: 4 only with video pruning (0.32.0)"),
    # Which engine runs by default.
    _row("0.0.0", None, "default_engine", "v0", "V0 only before 0.6.4"),
    _row("0.8.0", None, "default_engine", "v1", "vllm/envs.py VLLM_USE_V1 defaults to '1' (0.8.5 wheel; '0' in 0.7.3)"),
    _row("0.8.0", None, "v1_falls_back_below_sm80", True, "arg_utils.py _is_v1_supported_oracle 'Compute Capability < 8.0' (0.8.5)"),
    _row("0.10.0", None, "v1_falls_back_below_sm80", False, "check absent in the 0.10.2 wheel"),
    _row("0.11.0", None, "v0_available", False, "V0 worker removed in 0.11.0"),
    _row("0.0.0", None, "v0_available", True, "V0 engine present"),
    _row("0.0.0", None, "v1_available", False, "no V1 engine before 0.6.4"),
    _row("0.6.4", None, "v1_available", True, "V1 alpha (VLLM_USE_V1=1) from 0.6.4"),

    # The available-KV formula (vllm-memory.md §1.3).
    _row("0.3.0", "v0", "budget_era", "V0-c", "#2863: u*T - (free_init - free_after_profile), reserved memory, worker.py"),
    _row("0.6.4", "v0", "budget_era", "V0-d", "#9352: u*T - (peak allocated incl. weights + everything not torch-allocated)"),
    _row("0.6.5", "v0", "budget_era", "V0-e", "#10511: u*T - (W + P + N), per instance"),
    _row("0.7.0", "v0", "budget_era", "V0-f", "#12126: MemorySnapshot-based memory_profiling; u*T - (W + P + N)"),
    _row("0.6.4", "v1", "budget_era", "V1-0", "V1 alpha: u*T - (free_init - free_after)"),
    _row("0.6.5", "v1", "budget_era", "V1-a", "#10528: u*T - (peak allocated + all non-torch memory on the GPU)"),
    _row("0.9.1", "v1", "budget_era", "V1-b", "#18974/#19312: u*T - (W + P + N), gpu_worker.py determine_available_memory"),
    _row("0.11.0", "v1", "budget_era", "V1-c", "NCCL initialised before the memory snapshot (gpu_worker.py init_device, 0.11.0)"),
    _row("0.20.0", "v1", "budget_era", "V1-d", "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS defaults to '1' (envs.py 0.20.0)"),
    _row("0.27.0", "v1", "budget_era", "V1-e", "total_consumed = free_init - free_after, plus peak - allocated_after (gpu_worker.py 0.27.0)"),

    # Default --gpu-memory-utilization.
    _row("0.0.0", None, "default_gpu_memory_utilization", 0.90, "CacheConfig default 0.9"),
    _row("0.20.0", None, "default_gpu_memory_utilization", 0.92, "CacheConfig default raised to 0.92 in the 0.20.0 wheel"),
    # requested memory = ceil(u*T) (0.15+) instead of the float product.
    _row("0.0.0", None, "request_memory_ceil", False, "float product u*T"),
    _row("0.15.0", None, "request_memory_ceil", True, "math.ceil(T*u) in vllm/v1/worker/utils.py request_memory (0.15.1)"),

    # CUDA graph pool: estimated before KV sizing and subtracted.
    _row("0.0.0", None, "cuda_graph_estimated", False, "no estimator"),
    _row("0.18.0", "v1", "cuda_graph_estimated", True, "GPUModelRunner.profile_cudagraph_memory (0.18.0), logged only"),
    _row("0.0.0", None, "cuda_graph_subtracted", False, "graphs captured after KV allocation, outside the budget"),
    _row("0.20.0", "v1", "cuda_graph_subtracted", True, "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1 by default (0.20.0)"),
    # CUDA graph mode (V1).
    _row("0.0.0", None, "cuda_graph_modes", ("PIECEWISE",), "V0 decode graphs / V1 piecewise"),
    _row("0.11.0", "v1", "cuda_graph_modes", ("PIECEWISE", "FULL"), "CompilationConfig default FULL_AND_PIECEWISE (0.11.0)"),
    _row("0.0.0", None, "capture_sizes", "up-to-max-num-seqs", "[1,2,4] + 8k up to the first size >= max_num_seqs (V0 model_runner)"),
    _row("0.6.4", "v1", "capture_sizes", "step-8-to-512", "[1,2,4] + 8..512 step 8, <= max_num_batched_tokens"),
    _row("0.10.0", "v1", "capture_sizes", "step-8-to-twice-max-num-seqs", "[1,2,4] + 8..min(2*max_num_seqs, 512) step 8"),
    _row("0.12.0", "v1", "capture_sizes", "step-16-above-256", "[1,2,4] + 8..248 step 8 + 256.. step 16, max = min(2*max_num_seqs, 512)"),

    # Where NCCL / custom all-reduce memory lands.
    _row("0.0.0", None, "nccl_inside_budget", True, "NCCL initialised after the baseline snapshot (V0 worker.py init_device)"),
    _row("0.11.0", "v1", "nccl_inside_budget", False, "init_worker_distributed_environment before the snapshot (gpu_worker.py 0.11.0)"),
    # Non-torch memory is read at the exit of memory_profiling, which from 0.18 also wraps profile_cudagraph_memory's
    # trial captures (their driver memory and module loads stay in the figure).
    _row("0.0.0", None, "non_torch_after_graph_profile", False, "non-torch read right after profile_run"),
    _row("0.18.0", "v1", "non_torch_after_graph_profile", True, "gpu_worker.py determine_available_memory: profile_cudagraph_memory inside memory_profiling (0.18.0)"),
    # The TP device group's NCCL communicator: torch.distributed makes it at the group's first collective. With
    # NCCL_CUMEM_ENABLE no longer forced to 0 (env_override.py until 0.10.x) and NCCL outside the snapshot (0.11),
    # the profile's logits all-gather (base_device_communicator.py all_gather -> all_gather_into_tensor on the
    # device group; CudaCommunicator has none of its own) creates it inside the non-torch increase.
    _row("0.0.0", None, "profile_lazy_nccl_communicator", False, "NCCL inside the budget / NCCL_CUMEM_ENABLE=0 (<= 0.10.x)"),
    _row("0.11.0", "v1", "profile_lazy_nccl_communicator", True, "logits all-gather through torch.distributed on the TP device group (0.11.0-0.24.x; NCCL_CUMEM_ENABLE override gone from env_override.py in 0.11.0)"),
    _row("0.25.0", "v1", "profile_lazy_nccl_communicator", False, "cuda_communicator.py all_gather through PyNccl, made before the snapshot (0.25.0)"),
    # FlashInfer all-reduce + RMSNorm fusion (profile.py fi_allreduce_workspace): which workspace the pass builds.
    _row("0.0.0", None, "fi_allreduce_fusion", None, "fuse_allreduce_rms off by default (config/vllm.py OPTIMIZATION_LEVEL_02, 0.16.0)"),
    _row("0.17.0", "v1", "fi_allreduce_fusion", "trtllm", "OPTIMIZATION_LEVEL_02 fuse_allreduce_rms = enable_allreduce_rms_fusion (0.17.0); VLLM_FLASHINFER_ALLREDUCE_BACKEND trtllm (0.17-0.18), auto -> trtllm on one node (0.19-0.24)"),
    _row("0.25.0", "v1", "fi_allreduce_fusion", "mnnvl", "_resolve_fi_ar_backend: auto -> mnnvl (0.25.0); its workspace size is not modelled"),
    # V1's sampler warm-up after graph capture (gpu_worker.py compile_or_warm_up_model -> _dummy_sampler_run, "called
    # after capture_model on purpose"), checked against the memory the pool and the graphs leave where the sampler's
    # tensors are read from the source (sort path, Triton path); the FlashInfer sampler of 0.28+ is calibrated only.
    _row("0.0.0", None, "sampler_warmup_checked", False, "no V1 warm-up read before 0.9.0"),
    _row("0.9.0", "v1", "sampler_warmup_checked", True, "gpu_worker.py compile_or_warm_up_model: _dummy_run(min(max_num_seqs, max_num_batched_tokens)) + _dummy_sampler_run after capture_model (0.9.0-0.27.0)"),
    _row("0.28.0", "v1", "sampler_warmup_checked", False, "FlashInfer sampler by default: its allocations are not read (sampler_bytes_per_logit is calibrated)"),
    # cuBLAS handles created before the snapshot (0.33): their workspace leaves N.
    _row("0.0.0", None, "cublas_prewarmed", False, "cuBLAS created lazily in the profile run"),
    _row("0.33.0", "v1", "cublas_prewarmed", True, "gpu_worker.py init_device torch.mm warm-up (0.33.0; absent in 0.30.0)"),

    # LoRA: extra vocabulary rows reserved for adapters' added tokens.
    _row("0.0.0", None, "lora_extra_vocab", 256, "LoRAConfig.lora_extra_vocab_size = 256 (0.11.0 and before)"),
    _row("0.15.0", None, "lora_extra_vocab", 0, "extra LoRA vocabulary removed (absent in the 0.15.1 wheel)"),

    # Pipeline stages: where the remainder of an uneven layer split goes.
    _row("0.0.0", None, "pp_remainder_to_last", True, "get_pp_indices: the last partition takes the remaining layers (<= 0.7.3)"),
    _row("0.8.0", None, "pp_remainder_to_last", False, "get_pp_indices: partitions[-2], [-3], ... get +1 (0.8.0)"),

    # MLA's latent KV cache (one 576-wide latent per token instead of per-head K and V).
    _row("0.0.0", None, "mla_latent_kv", False, "DeepSeek served as plain attention: K and V per head of qk_head_dim (0.7.0)"),
    _row("0.7.1", None, "mla_latent_kv", True, "MLA attention backends (#12601, 0.7.1)"),
    _row("0.0.0", None, "mla_quantizations", "any", "(no MLA before 0.7.1)"),
    _row("0.7.1", None, "mla_quantizations", ("fp8", "compressed-tensors"), "config.py use_mla: other quantizations disable MLA (0.7.1-0.7.2)"),
    _row("0.7.3", None, "mla_quantizations", "any", "0.7.3: MLA for every quantization (dequantized weights in process_weights_after_loading)"),
    _row("0.0.0", None, "mla_matrix_absorption", False, "no MLA backend before 0.7.1"),
    _row("0.7.1", "v0", "mla_matrix_absorption", True, "envs.py VLLM_MLA_PERFORM_MATRIX_ABSORPTION=1: W_Q_UK / W_UV_O kept (mla/utils.py 0.7.1-0.7.3)"),
    _row("0.8.0", "v0", "mla_matrix_absorption", False, "the variable and the absorbed copies are gone (0.8.0 wheel)"),
    _row("0.0.0", None, "mla_entry_align_bytes", 0, "no alignment"),
    _row("0.7.1", "v0", "mla_entry_align_bytes", 256, "cache_engine.py align_to_256bytes with VLLM_CUDA_MEM_ALIGN_KV_CACHE (0.7.2-0.7.3 wheels)"),
    _row("0.8.0", "v0", "mla_entry_align_bytes", 0, "alignment gone from cache_engine.py (0.8.0 wheel)"),

    # MLA attention backends force their own KV block size (design notes §3.5).
    _row("0.0.0", None, "mla_block_size_sm90", None, "Triton MLA: any multiple of 16"),
    _row("0.8.0", None, "mla_block_size_sm90", 64, "'Forcing kv cache block size to 64 for FlashMLA backend.' (0.8+ on Hopper)"),
    _row("0.0.0", None, "mla_block_size_sm100", None, "no Blackwell MLA backend"),
    _row("0.10.0", None, "mla_block_size_sm100", 128, "CUTLASS MLA default on Blackwell forces 128 (0.10/0.11)"),

    # Batch-size defaults that size the profiling run (vllm-memory.md §5.3).
    _row("0.0.0", "v0", "batch_defaults", None, "SchedulerConfig: max_num_seqs 256; tokens max(max_model_len, 2048) or chunked"),
    _row("0.0.0", "v1", "batch_defaults", BatchDefaults(large_from_gib=70, a100_large=True), "arg_utils.py _set_default_args_v1 (0.8.5): >=70 GiB -> 16384/8192, 1024 seqs"),
    _row("0.9.0", "v1", "batch_defaults", BatchDefaults(large_from_gib=70, a100_large=False), "#17885: the large defaults exclude A100"),
    _row("0.28.0", "v1", "batch_defaults", BatchDefaults(large_from_gib=70, a100_large=False, serve_large_from_gib=160), ">=160 GiB (B200/B300): 16384 for serve too (arg_utils.py 0.28.0)"),
    _row("0.0.0", "v0", "v0_chunked_prefill_tokens", 512, "SchedulerConfig chunked-prefill default 512 (<=0.6.4)"),
    _row("0.6.5", "v0", "v0_chunked_prefill_tokens", 2048, "chunked-prefill default 2048 (0.6.5+)"),

    # dtype "auto" resolution (vllm-memory.md §7).
    _row("0.0.0", None, "dtype_resolution", "config", "config dtype; fp32 -> fp16; bf16 on sm<80 is an error"),
    _row("0.9.0", None, "dtype_resolution", "config-fallback", "config dtype (fp32 -> fp16), then supported_dtypes[0] when the platform lacks it: bf16 -> fp16 on sm<80 (config.py 0.9.0 _get_and_verify_dtype)"),
    _row("0.9.1", None, "dtype_resolution", "platform", "_resolve_auto_dtype picks from the platform's list (config.py 0.9.1)"),
    # max_model_len for yarn rope scaling.
    _row("0.0.0", None, "yarn_scales_max_len", True, "_get_and_verify_max_len multiplies yarn by its factor"),
    _row("0.30.0", None, "yarn_scales_max_len", False, "yarn/deepseek_yarn left unscaled (config 0.30.0)"),

    # Which kernel holds AWQ/GPTQ weights, and what it keeps (docs/research-weights-by-release.md).
    _row("0.0.0", None, "awq_marlin_auto", False, "AWQ GEMM only (no awq_marlin.py before 0.5.3)"),
    _row("0.5.3", None, "awq_marlin_auto", True, "awq_marlin.py override_quantization_method (0.5.3)"),
    _row("0.0.0", None, "gptq_marlin_layout", "none", "0.4.1: Marlin only for marlin-serialized checkpoints"),
    _row("0.4.2", None, "gptq_marlin_layout", "lazy-repack", "config.py 0.4.2 auto gptq_marlin; repack at first forward keeps g_idx + sort indices"),
    _row("0.5.2", None, "gptq_marlin_layout", "repacked", "gptq_marlin.py process_weights_after_loading empties g_idx (0.5.2)"),
    _row("0.6.0", None, "gptq_marlin_layout", "zeros-kept", "gptq_marlin.py 0.6.0-0.6.1 allocates qzeros on the GPU and keeps them"),
    _row("0.6.2", None, "gptq_marlin_layout", "repacked", "choose_mp_linear_kernel -> marlin.py empties qzeros (0.6.2)"),
    _row("0.0.0", None, "machete_gptq", False, "no Machete"),
    _row("0.6.2", None, "machete_gptq", True, "Machete first for GPTQ on sm90 (kernels/linear, 0.6.2)"),
    _row("0.0.0", None, "machete_awq", False, "AWQ always on Marlin"),
    _row("0.19.0", None, "machete_awq", True, "awq_marlin -> choose_mp_linear_kernel: Machete on sm90 (0.19.0)"),
    _row("0.0.0", None, "gptq_g_idx_parameter", True, "g_idx parameter created"),
    _row("0.30.0", None, "gptq_g_idx_parameter", False, "act-order with groups rejected, no g_idx (utils/gptq_utils.py 0.30.0)"),
    _row("0.0.0", None, "marlin_workspace", "per-output", "marlin_make_workspace: int32 [N/64*16] per layer (<= 0.8.x)"),
    _row("0.9.0", None, "marlin_workspace", "per-sm", "marlin_make_workspace_new: int32 [#SMs] (0.9.0)"),
    # Other quantization formats (engines/vllm/quant_kernels.py reads these).
    _row("0.0.0", None, "bnb_available", False, "no bitsandbytes.py (absent in 0.4.3)"),
    _row("0.5.0", None, "bnb_available", True, "quantization/bitsandbytes.py (0.5.0)"),
    _row("0.28.0", None, "bnb_available", False, "bitsandbytes.py absent in the 0.28.0 wheel (present in 0.27.0)"),
    _row("0.0.0", None, "bnb_dequantizes_double_quant", False, "nested absmax kept quantized"),
    _row("0.9.2", None, "bnb_dequantizes_double_quant", True, "bitsandbytes_loader.py dequantize_dq: nested absmax -> fp32 (0.9.2; absent 0.9.1)"),
    _row("0.0.0", None, "mxfp4_available", False, "no mxfp4.py"),
    _row("0.10.1", None, "mxfp4_available", True, "quantization/mxfp4.py (0.10.1, the first wheel read)"),
    _row("0.0.0", None, "mxfp4_sm90_backend", "marlin", "Marlin MXFP4 on sm90 (torch < 2.8 in 0.10.1; triton_kernels not a dependency 0.10.2-0.11.x)"),
    _row("0.12.0", None, "mxfp4_sm90_backend", "triton", "vendored vllm/third_party/triton_kernels (0.12.0)"),
    _row("0.0.0", None, "nvfp4_min_capability", 100, "modelopt.py ModelOptNvFp4Config.get_min_capability 100 (0.8.x)"),
    _row("0.9.0", None, "nvfp4_min_capability", 80, "Marlin FP4 fallback (0.9.0)"),
    _row("0.14.0", None, "nvfp4_min_capability", 75, "get_min_capability 75 (0.14.0)"),
    _row("0.0.0", None, "modelopt_nvfp4_available", False, "no ModelOptNvFp4Config (0.7.3)"),
    _row("0.8.0", None, "modelopt_nvfp4_available", True, "modelopt.py ModelOptNvFp4Config (0.8.0)"),
    _row("0.0.0", None, "ct_wna16_min_capability", 80, "compressed_tensors_wNa16.py get_min_capability 80 (<= 0.11.x)"),
    _row("0.12.0", None, "ct_wna16_min_capability", 75, "get_min_capability 75 (0.12.0)"),
    _row("0.0.0", None, "ct_moe_wna16", "marlin", "compressed_tensors_moe.py: Marlin MoE only (<= 0.8.3)"),
    _row("0.8.4", None, "ct_moe_wna16", "triton-when-many-experts", "moe_wna16 Triton method when local experts >= 16 or dtype != fp16 (0.8.4-0.8.5)"),
    _row("0.9.0", None, "ct_moe_wna16", "marlin-when-supported", "Marlin MoE whenever check_moe_marlin_supports_layer passes (0.9.0)"),
    # AWQ / GPTQ fused-MoE experts (awq_marlin.py AWQMoEMethod, gptq_marlin.py GPTQMarlinMoEMethod, moe_wna16.py)
    _row("0.0.0", None, "awq_moe", "none", "FusedMoE asserts a quant method: AWQ has none before 0.6.3"),
    _row("0.6.3", None, "awq_moe", "marlin", "awq_marlin.py AWQMoEMethod (0.6.3)"),
    _row("0.7.3", None, "awq_moe", "wna16-above-32-experts", "awq_marlin.py: MoeWNA16Method when experts > 32 (0.7.3-0.8.4)"),
    _row("0.8.5", None, "awq_moe", "marlin-when-supported", "check_moe_marlin_supports_layer, else MoeWNA16 (0.8.5+)"),
    _row("0.0.0", None, "gptq_moe", "none", "FusedMoE asserts a quant method: GPTQ has none before 0.6.1"),
    _row("0.6.1", None, "gptq_moe", "marlin", "gptq_marlin.py GPTQMarlinMoEMethod (0.6.1)"),
    _row("0.7.3", None, "gptq_moe", "wna16-above-32-experts", "gptq_marlin.py: MoeWNA16Method when experts > 32 (0.7.3-0.8.4)"),
    _row("0.8.5", None, "gptq_moe", "marlin-when-supported", "check_moe_marlin_supports_layer, else MoeWNA16 (0.8.5+)"),
    _row("0.0.0", None, "gptq_moe_zeros_bytes", 2, "GPTQMarlinMoEMethod keeps w13/w2_qzeros in the params dtype, never processed (0.6.1-0.26)"),
    _row("0.27.0", None, "gptq_moe_zeros_bytes", 4, "0.27: qzeros int32, converted to Marlin zero points and kept"),
    _row("0.0.0", None, "ct_schemes", (), "no compressed-tensors"),
    _row("0.4.3", None, "ct_schemes", ("w8a8-int8",), "compressed_tensors/schemes: W8A8 int8 (0.4.3)"),
    _row("0.5.1", None, "ct_schemes", ("w8a8-int8", "wNa16"), "+ wNa16 (0.5.1)"),
    _row("0.5.2", None, "ct_schemes", ("w8a8-int8", "wNa16", "w8a8-fp8"), "+ W8A8 FP8 (0.5.2)"),
    _row("0.5.4", None, "ct_schemes", ("w8a8-int8", "wNa16", "w8a8-fp8", "w8a16-fp8"), "+ W8A16 FP8 (0.5.4)"),
    _row("0.9.0", None, "ct_schemes", ("w8a8-int8", "wNa16", "w8a8-fp8", "w8a16-fp8", "nvfp4", "nvfp4a16"), "+ NVFP4 W4A4 / W4A16 (0.9.0)"),
    _row("0.0.0", None, "attention_scale_buffers", (), "no per-layer scale buffers"),
    _row("0.7.0", None, "attention_scale_buffers", ("_k_scale", "_v_scale", "k_range", "v_range"), "attention/layer.py (0.7.0)"),
    _row("0.8.2", None, "attention_scale_buffers", ("_k_scale", "_v_scale", "_q_scale", "q_range", "k_range", "v_range"), "attention/layer.py (0.8.2)"),
    _row("0.8.5", None, "attention_scale_buffers", ("_k_scale", "_v_scale", "_q_scale", "_prob_scale", "q_range", "k_range", "v_range"), "attention/layer.py (0.8.5)"),
    _row("0.28.0", None, "attention_scale_buffers", ("_k_scale", "_v_scale", "_q_scale", "_prob_scale"), "layers/attention/attention.py (0.28.0)"),

    # PyTorch caching allocator during load: blocks >= 20 MiB are never split (0.21+).
    _row("0.0.0", None, "load_max_split_mib", 0, "default allocator settings during load"),
    _row("0.21.0", "v1", "load_max_split_mib", 20, "gpu_worker.py _scoped_allocator_max_split(max_split_size_mb=20) around load_model (0.21.0)"),

    # Bytes alive per logits element in the profile's dummy sampler run (profile.py explains the sum).
    _row("0.0.0", None, "sampler_bytes_per_logit", 39, "PyTorch sort-based top-k/top-p (sampler.py; v1 topk_topp_sampler.py forward_native)"),
    _row("0.17.0", "v1", "sampler_bytes_per_logit", 14, "Triton top-k/top-p for >= 8 requests, no full sort (v1/sample/ops/topk_topp_triton.py, first in the 0.17.0 wheel, absent in 0.16.0; topk_topp_sampler.py apply_top_k_top_p)"),
    # The Triton top-k/top-p kernel's per-program scratch rows, cached in the module (_TRITON_BUFFER_CACHE) from the
    # profile's dummy sampler run on: [min(next_power_of_2(programs), SMs), vocab] fp32, programs = min(SMs, requests)
    _row("0.0.0", None, "sampler_triton_buffer", False, "no Triton top-k/top-p before 0.17.0"),
    _row("0.17.0", "v1", "sampler_triton_buffer", True, "topk_topp_triton.py apply_top_k_top_p_triton buffer = logits.new_empty((size, vocab)) (0.17.0-0.19.0)"),
    _row("0.28.0", "v1", "sampler_triton_buffer", False, "FlashInfer sampler by default (the 0.28 row of sampler_bytes_per_logit)"),
    # cuBLAS's workspace comes from PyTorch's caching allocator at the first matmul (c10/cuda CublasHandlePool.cpp
    # getCurrentCUDABlasHandle: 32 MiB on sm90, 4096 KiB x 2 + 16 KiB x 8 otherwise); the first matmul of the worker
    # is the profile run's, so the torch peak increase holds it (gpu_model_runner.py profile_run, 0.17.0-0.30.0)
    _row("0.0.0", None, "cublas_workspace_in_peak", False, "not modelled before 0.17.0 (releases not re-read)"),
    _row("0.17.0", "v1", "cublas_workspace_in_peak", True, "first cuBLAS handle in profile_run (gpu_worker.py 0.17.0-0.30.0: no matmul before the snapshot)"),
    _row("0.33.0", "v1", "cublas_workspace_in_peak", False, "gpu_worker.py init_device torch.mm warm-up before the snapshot (0.33.0)"),
    _row("0.28.0", "v1", "sampler_bytes_per_logit", SAMPLER_BYTES_PER_LOGIT_FROM_0_28.value, "FlashInfer sampler default (VLLM_USE_FLASHINFER_SAMPLER=True, 0.28.0); logged peaks of 0.28-0.31 fit the sort-path footprint"),

    # The fused-MoE modular kernel's scratch (workspace13, workspace2, the output) comes from the worker's
    # WorkspaceManager (v1/worker/workspace.py, one buffer that grows and is never freed), so the profile's MoE
    # forward leaves it allocated through the dummy sampler run. Unquantized CUDA MoE runs through that kernel
    # (TritonExperts) from 0.14.0; 0.13.0 still calls fused_experts(), whose caches die with the call.
    _row("0.0.0", None, "moe_workspace_persistent", False, "unquantized_fused_moe_method.py forward_cuda -> fused_experts() (0.13.0): per-call caches"),
    _row("0.14.0", "v1", "moe_workspace_persistent", True, "unquantized_fused_moe_method.py: FusedMoEModularKernel(TritonExperts) (0.14.0); modular_kernel.py _allocate_buffers -> current_workspace_manager().get_simultaneous (0.14.0-0.33.0)"),
    # Tokens per chunk of that kernel: VLLM_FUSED_MOE_CHUNK_SIZE (16384, envs.py 0.13.0-0.17.0); 0.18.0 passes M_full
    # as the chunk (modular_kernel.py apply: _allocate_buffers(..., M_full, M_full, ...)); 0 = no chunking
    _row("0.0.0", None, "moe_workspace_chunk_tokens", 16384, "envs.py VLLM_FUSED_MOE_CHUNK_SIZE default 16 * 1024 (0.13.0-0.17.0)"),
    _row("0.18.0", "v1", "moe_workspace_chunk_tokens", 0, "modular_kernel.py 0.18.0: no chunk loop, workspaces for M_full tokens"),

    # Multimodal processor outputs on the GPU: float tensors cast to the model dtype from 0.9.1 (inputs/registry.py
    # call_hf_processor maybe_cast_dtype; multimodal/processing/context.py _postprocess_output in 0.19.0)
    _row("0.0.0", None, "mm_inputs_model_dtype", False, "0.9.0: the HF processor's float32 outputs as returned"),
    _row("0.9.1", None, "mm_inputs_model_dtype", True, "inputs/registry.py 0.9.1 maybe_cast_dtype: x.to(model dtype)"),

    # Swap space (CPU blocks).
    _row("0.0.0", "v0", "swap_space_gib", 4.0, "CacheConfig swap_space default 4 GiB per GPU (V0)"),
    _row("0.0.0", "v1", "swap_space_gib", 0.0, "V1 has no CPU swap blocks"),

    # -- Model architectures: the first release whose model registry serves each one sized here
    # (vllm/model_executor/models/registry.py; the source is the model file); older releases refuse them at startup.
    *_added("0.8.3", "serves_Llama4ForConditionalGeneration", "mllama4.py"),
    *_added("0.8.3", "serves_Llama4ForCausalLM", "llama4.py"),
    *_added("0.10.0", "serves_Glm4MoeForCausalLM", "glm4_moe.py"),
    *_added("0.19.0", "serves_Gemma4ForCausalLM", "gemma4.py"),
    *_added("0.11.0", "serves_DeepseekV32ForCausalLM", "deepseek_v2.py DeepseekV32 (sparse indexer)"),
    *_added("0.19.0", "serves_Gemma4ForConditionalGeneration", "gemma4_mm.py"),
    *_added("0.11.0", "serves_Qwen3VLForConditionalGeneration", "qwen3_vl.py"),
    *_added("0.11.0", "serves_Qwen3VLMoeForConditionalGeneration", "qwen3_vl_moe.py"),
    *_added("0.17.0", "serves_Qwen3_5ForConditionalGeneration", "qwen3_5.py"),
    *_added("0.17.0", "serves_Qwen3_5MoeForConditionalGeneration", "qwen3_5.py"),
    _row("0.0.0", None, "serves_mllama", True, "mllama.py, SupportsV0Only (up to 0.10.2)"),
    _row("0.11.0", None, "serves_mllama", False, "registry _PREVIOUSLY_SUPPORTED_MODELS 'MllamaForConditionalGeneration': '0.10.2' (0.11.0)"),
    *_added("0.7.0", "serves_whisper", "model_executor/models/whisper.py (0.7.0)"),
    # V1 refuses to start when the device's free memory (other processes' allocations gone) is below
    # total x gpu_memory_utilization (v1/worker/gpu_worker.py init_device, 0.9.1+; v1/worker/utils.py request_memory
    # in 0.19); 0.9.0 took a snapshot without the check
    *_added("0.9.1", "v1_startup_free_check", "v1/worker/gpu_worker.py init_device (0.9.1): free_memory < requested_memory"),
    # ... and before it, V1 counted every process on the device in its non-torch memory: determine_available_memory
    # took (total - free) - torch's allocated bytes (v1/worker/gpu_worker.py 0.9.0), so what others held left the
    # KV budget; 0.9.1's memory_profiling measures from the init snapshot instead
    _row("0.0.0", None, "v1_non_torch_counts_other_processes", True,
         "v1/worker/gpu_worker.py 0.9.0: non_torch = (total - free) - torch allocated"),
    _row("0.9.1", None, "v1_non_torch_counts_other_processes", False,
         "v1/worker/gpu_worker.py 0.9.1: memory_profiling from the init snapshot"),
    _row("0.0.0", None, "whisper_on_v1", False, "whisper.py SupportsV0Only until 0.10.1: V1 falls back to V0 (engine/arg_utils.py _raise_or_fallback)"),
    _row("0.10.2", None, "whisper_on_v1", True, "V1 serves Whisper from 0.10.2"),

    # -- Engine arguments and the release that brought them (engine/arg_utils.py; settings.py and plan.py read these)
    *_added("0.5.0", "v0_auto_chunked_prefill", "arg_utils.py 0.5-0.10: V0 chunks prefills above 32K context without sliding window"),
    *_added("0.10.2", "decode_context_parallel_flag", "arg_utils.py --decode-context-parallel-size / -dcp (0.10.2), splitting the TP group"),
    _row("0.0.0", None, "max_model_len_auto_fit", False, "--max-model-len -1 not accepted"),
    _row("0.15.0", "v1", "max_model_len_auto_fit", True, "--max-model-len -1 auto-fits to the KV pool (V1, 0.15+)"),
    _row("0.0.0", None, "batched_tokens_capped_by_seqs", False, "max_num_batched_tokens default kept as it is"),
    _row("0.11.0", "v1", "batched_tokens_capped_by_seqs", True, "0.11+: default max_num_batched_tokens never above max_num_seqs * max_model_len"),
    _row("0.0.0", None, "disable_hybrid_kv_cache_manager_flag", False, "no hybrid KV cache manager"),
    _row("0.9.1", "v1", "disable_hybrid_kv_cache_manager_flag", True, "the flag arrives with the hybrid allocator (engine/arg_utils.py 0.9.1, V1 only)"),
    _row("0.0.0", None, "kv_cache_memory_bytes_flag", False, "no --kv-cache-memory-bytes"),
    _row("0.10.2", "v1", "kv_cache_memory_bytes_flag", True, "--kv-cache-memory-bytes (engine/arg_utils.py 0.10.2, V1 only)"),
    *_added("0.7.0", "bnb_prequant_tp_refused", "bitsandbytes_loader.py (0.7.0+): prequantized BitsAndBytes with tensor parallelism refused"),

    # -- Speculative decoding (config/speculative.py, v1/spec_decode/eagle.py, engine/arg_utils.py)
    *_added("0.8.5", "v1_eagle", "v1/spec_decode/eagle.py (0.8.5)"),
    _row("0.0.0", None, "v1_draft_model", False, "config/speculative.py (0.10-0.14): 'Speculative decoding with draft model is not supported yet'"),
    _row("0.15.0", None, "v1_draft_model", True, "config/speculative.py takes draft_model on V1 (0.15.0)"),
    _row("0.0.0", None, "v1_draft_model_falls_back_to_v0", True, "arg_utils.py _is_v1_supported_oracle: 0.8-0.9 V1 takes ngram, medusa, eagle(3), deepseek_mtp only"),
    _row("0.10.0", None, "v1_draft_model_falls_back_to_v0", False, "0.10.0: no fallback, config/speculative.py refuses a draft model on V1"),
    _row("0.0.0", None, "proposer_hidden_buffers", 1, "EagleProposer keeps a hidden_states buffer (v1/spec_decode/eagle.py)"),
    _row("0.10.1", None, "proposer_hidden_buffers", 2, "EagleProposer hidden_states + inputs_embeds buffers (v1/spec_decode/eagle.py 0.10.1)"),

    # -- KV cache dtypes (config/cache.py CacheDType per release; kv_dtypes.py reads these)
    _row("0.0.0", None, "packed_kv_dtypes", (), "CacheDType: auto, model dtypes and fp8 only"),
    _row("0.20.0", None, "packed_kv_dtypes", ("turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc", "int8_per_token_head", "fp8_per_token_head"),
               "turboquant/config.py slot_size_aligned; kv_cache_interface.py 1-byte data + an fp32 scale for K and V (0.20.0)"),
    _row("0.21.0", None, "packed_kv_dtypes", ("turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc", "int8_per_token_head", "fp8_per_token_head", "nvfp4"),
               "nvfp4_kv_cache_full_dim: fp4 + an fp8 scale per 16 (usable 0.21.0)"),
    _row("0.25.0", None, "packed_kv_dtypes", ("turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc", "int8_per_token_head", "fp8_per_token_head", "nvfp4", "int4_per_token_head"),
               "int4_per_token_head: two codes per byte + an fp32 scale for K and V (0.25.0)"),
    *_added("0.25.0", "kv_block_from_first_page", "platforms/interface.py _align_heterogeneous_kv_block_size (0.25+)"),
    _row("0.0.0", None, "turboquant_refuses_hybrid", True, "TurboQuant: 'Boundary layer protection requires uniform attention layers' (0.20)"),
    _row("0.21.0", None, "turboquant_refuses_hybrid", False, "attention + Mamba hybrids take TurboQuant without boundary layers (arg_utils.py 0.21+)"),
    _row("0.0.0", None, "nvfp4_kv_sm100_only", False, "no compute-capability refusal for nvfp4 KV before 0.25"),
    _row("0.25.0", None, "nvfp4_kv_sm100_only", True, "the FLASHINFER backend reports 'compute capability not supported' off SM100 (0.25-0.31)"),
    _row("0.32.0", None, "nvfp4_kv_sm100_only", False, "nvfp4 KV no longer SM100 only (0.32.0)"),

    # -- V0 Mamba state cache slots (model/hybrid.py v0_mamba_batch reads this)
    _row("0.0.0", None, "v0_mamba_batch", "graph-batch", "jamba.py forward: _get_graph_batch_size(max_num_seqs), eager or not (0.6.0-0.6.4.post1)"),
    _row("0.6.5", None, "v0_mamba_batch", "capture-capped", "jamba.py __init__: pad_for_cudagraph(max_num_seqs) capped at max_capture_size, 8192 + 2 eager (0.6.5-0.7.2)"),
    _row("0.7.3", None, "v0_mamba_batch", "max-num-seqs", "mamba_cache.py MambaCacheManager: max_num_seqs, padded to the CUDA-graph batch unless eager (0.7.3-0.10.x)"),

    # Log formats: one row per format in logs/formats.py (what explain prints, what logs reads back).

    # How KV tokens and concurrency are reported (vllm-memory.md §3.4).
    _row("0.0.0", None, "kv_tokens_rule", "blocks", "num_blocks x block_size, concurrency = tokens / max_model_len (V0; V1 <= 0.9.0)"),
    _row("0.9.1", "v1", "kv_tokens_rule", "blocks-per-group", "num_blocks // num_groups x block_size, concurrency = blocks / blocks per request (0.9.1-0.20.0)"),
    _row("0.20.1", "v1", "kv_tokens_rule", "concurrency", "int(max_concurrency x max_model_len) (kv_cache_utils.py _report_kv_cache_config 0.20.1; the old formula in 0.20.0)"),
    # Wording of V1's "not enough KV cache for one max_model_len request" error (kv_cache_utils.py).
    _row("0.0.0", None, "kv_fit_message", "v0", "worker.py raise_if_cache_size_invalid"),
    _row("0.8.0", "v1", "kv_fit_message", "gb", "sizes in 'GB' (/1024**3), no length estimate (0.8.0-0.8.2)"),
    _row("0.8.3", "v1", "kv_fit_message", "gib", "'GiB', no length estimate (0.8.3)"),
    _row("0.8.4", "v1", "kv_fit_message", "gib-cut-estimate", "estimate sentence cut after 'memory,' by a missing parenthesis (0.8.4-0.9.0)"),
    _row("0.9.1", "v1", "kv_fit_message", "gib-estimate", "'Based on the available memory, the estimated maximum model length is N.' (0.9.2 wheel)"),
    _row("0.15.0", "v1", "kv_fit_message", "format-gib", "format_gib sizes and a link to the conserving-memory docs (0.15.1)"),
    _row("0.22.0", "v1", "kv_fit_message", "model-s", "'the model's max seq len', CPU-backend note (0.22.0)"),
    _row("0.0.0", None, "null_block_in_fit_check", False, "all blocks usable in the startup check"),
    _row("0.29.0", "v1", "null_block_in_fit_check", True,
               "get_kv_cache_configs / check_enough_kv_cache_memory subtract the null block (kv_cache_utils.py 0.29.0, absent in 0.28.0; kv_cache_planning.py 0.33.0)"),

    # -- KV-cache groups (from kv_groups.py) ------------------------------------------------------------
    # V1's KV-cache manager: which specs a release creates, how it groups them, what it logs and checks
    # (design/vllm-memory.md §3.2-§3.4). kv_tokens_rule and null_block_in_fit_check above belong here too.
    # Which specs V1 creates.
    _row("0.0.0", None, "v1_sliding_spec", False, "0.8.0-0.8.2: FullAttentionSpec only (v1/kv_cache_interface.py); windows act in the kernel only"),
    _row("0.8.3", None, "v1_sliding_spec", True, "SlidingWindowSpec, gpu_model_runner.get_kv_cache_spec (0.8.3 wheel; absent in 0.8.2)"),
    _row("0.0.0", None, "v1_chunked_spec", False, "Llama 4 local layers are FullAttentionSpec (attention_chunk_size only in the backends, 0.9.2)"),
    _row("0.10.0", None, "v1_chunked_spec", True, "ChunkedLocalAttentionSpec (v1/kv_cache_interface.py, gpu_model_runner.get_kv_cache_spec 0.10.0; absent in 0.9.2)"),
    # The hybrid allocator.
    _row("0.0.0", None, "hybrid_allocator", False, "unify_hybrid_kv_cache_specs always turns sliding layers into full ones when both exist (0.8.3-0.9.0)"),
    _row("0.9.1", None, "hybrid_allocator", True, "_get_kv_cache_config_uniform_page_size, --disable-hybrid-kv-cache-manager (kv_cache_utils.py 0.9.1)"),
    _row("0.0.0", None, "chunked_hybrid_default", True, "0.10.0: chunked local layers join the hybrid manager, no environment guard yet (config.py 0.10.0)"),
    _row("0.10.1", None, "chunked_hybrid_default", False, "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE default '0': chunked local attention disables the hybrid manager (envs.py, config 0.10.1-0.13.0)"),
    _row("0.14.0", None, "chunked_hybrid_default", True, "envs.py default '1' (0.14.0 wheel; '0' in 0.13.0)"),
    _row("0.0.0", None, "group_size_factor", None, "group size = fewest layers of one type (0.9.1-0.11.2)"),
    _row("0.12.0", None, "group_size_factor", 1.25, "group size = most layers of one type when max < 1.25 x min (kv_cache_utils.py 0.12.0; absent in 0.11.2)"),
    _row("0.18.0", None, "group_size_factor", 1.5, "factor 1.5 (0.18.0 wheel; 1.25 in 0.17.0)"),
    _row("0.0.0", None, "strided_groups", False, "groups are consecutive runs layers[i:i+g] (0.9.1-0.10.2)"),
    _row("0.11.0", None, "strided_groups", True, "layers[i::num_groups] so PP stages split evenly (0.11.0)"),
    _row("0.0.0", None, "global_groups", False, "each worker groups its own layers (get_kv_cache_config per worker, <= 0.10.2)"),
    _row("0.11.0", None, "global_groups", True, "groups from the merged specs of all workers, projected per worker (get_kv_cache_configs 0.11.0)"),
    _row("0.0.0", None, "v1_layers_max_over_workers", True, "num_layers = max over workers (get_kv_cache_configs 0.7.3, 0.8.0)"),
    _row("0.8.2", None, "v1_layers_max_over_workers", False, "each worker divides by its own layers, then the minimum (0.8.2)"),
    _row("0.0.0", None, "unified_page_block_size", False, "different page sizes across types: NotImplementedError (<= 0.11.2)"),
    _row("0.12.0", None, "unified_page_block_size", True, "unify_kv_cache_spec_page_size raises block_size of smaller pages (0.12.0)"),
    _row("0.0.0", None, "uniform_type_group", False, "same type, different shapes: not one group (<= 0.10.2)"),
    _row("0.11.0", None, "uniform_type_group", True, "UniformTypeKVCacheSpecs: one group, block = sum of pages (0.11.0)"),
    # A page that does not divide the largest one (unify_kv_cache_spec_page_size): padded to it, or refused.
    _row("0.0.0", None, "kv_page_padding", None, "non-divisible pages: NotImplementedError 'Cannot unify by adjusting block_size' (0.12-0.23; absent in the 0.23.0 wheel)"),
    _row("0.24.0", None, "kv_page_padding", "block-stride-backends", "page_size_padded for attention layers whose backend indexes_kv_by_block_stride (kv_cache_utils.py, v1/attention/backend.py 0.24.0-0.28.0)"),
    _row("0.29.0", None, "kv_page_padding", "non-mla", "every non-MLA attention layer is padded; MLA still raises (kv_cache_utils.py 0.29.0)"),
    _row("0.0.0", None, "kv_block_stride_backends", ("FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION", "FLASH_ATTN_MLA", "FLASHMLA", "CUTLASS_MLA", "TRITON_MLA", "FLASHINFER_MLA"),
               "backends whose layered get_kv_cache_stride_order puts num_blocks first (0.24.0-0.28.0); ROCm, CPU and TurboQuant backends do not"),
    _row("0.0.0", None, "mamba_page_padding", False, "a Mamba page below a larger attention page: block_size scaled, page unchanged, AssertionError (vLLM issue 43626; 0.25.0)"),
    _row("0.26.0", None, "mamba_page_padding", True, "MambaSpec page_size_padded to the largest page (unify_kv_cache_spec_page_size 0.26.0; absent in 0.25.0)"),
    # Layers that reuse an earlier layer's KV cache (kv_sharing_target_layer_name; Gemma 3n, Gemma 4 E2B / E4B).
    _row("0.0.0", None, "kv_sharing", False, "no kv_sharing_target_layer_name before 0.9.1 (0.9.0 wheel); V0 backends: 'KV sharing is not supported in V0.'"),
    _row("0.9.1", "v1", "kv_sharing", True, "get_kv_cache_spec skips layers with a kv_sharing_target_layer_name; the runner adds them to their target's group (gpu_model_runner.py 0.9.1)"),
    # How many tokens a sliding / chunked request holds.
    _row("0.0.0", None, "in_flight_tokens", False, "X = max_num_batched_tokens (SlidingWindowSpec.max_memory_usage_bytes 0.8.3-0.25.0)"),
    _row("0.26.0", None, "in_flight_tokens", True, "X = VllmConfig.max_in_flight_tokens = max_concurrent_batches x max_num_batched_tokens (0.26.0; absent in 0.25.0)"),
    _row("0.0.0", None, "async_scheduling_default", False, "SchedulerConfig.async_scheduling = False (0.13.0)"),
    _row("0.14.0", None, "async_scheduling_default", True, "async_scheduling None -> True unless incompatible (config/vllm.py 0.14.0)"),
    # Logged tokens and concurrency.
    _row("0.0.0", None, "log_after_min", False, "each worker logs its own blocks before the minimum (<= 0.11.0)"),
    _row("0.11.2", None, "log_after_min", True, "_report_kv_cache_config after the minimum over workers (0.11.2; absent in 0.11.0)"),
    _row("0.0.0", None, "context_parallel_kv", None, "no decode context parallel"),
    _row("0.10.2", None, "context_parallel_kv", "dcp-uniform", "FullAttentionSpec uses cdiv(L, dcp); tokens x dcp in the single-group path only (0.10.2)"),
    _row("0.11.0", None, "context_parallel_kv", "dcp", "tokens x dcp in every path (get_kv_cache_config_from_groups 0.11.0)"),
    _row("0.12.0", None, "context_parallel_kv", "dcp-pcp", "L / (dcp x pcp), tokens x dcp x pcp, 'cp_world_size' line (0.12.0)"),
    # num_gpu_blocks_override.
    _row("0.0.0", None, "gpu_blocks_override", "replace", "num_blocks = num_gpu_blocks_override"),
    _row("0.9.1", None, "gpu_blocks_override", "ignored", "get_num_blocks logs 'Overriding ...' but keeps its own count (0.9.1 bug)"),
    _row("0.9.2", None, "gpu_blocks_override", "replace", "num_blocks = num_gpu_blocks_override again (0.9.2)"),
    _row("0.21.0", None, "gpu_blocks_override", "pool", "available memory := override x bytes per block before the fit check (get_kv_cache_configs 0.21.0)"),
    # The startup check 'one max_model_len request must fit'.
    _row("0.0.0", None, "fit_check", "per-layer", "sum over layers of max_memory_usage_bytes, per worker, before any unification (0.8.0-0.13.0)"),
    _row("0.14.0", None, "fit_check", "first-group", "_max_memory_usage_bytes_from_groups: group size x page x blocks of the FIRST group only (0.14.0-0.18.0)"),
    _row("0.19.0", None, "fit_check", "sum-groups", "group size x page x sum over groups of their blocks (0.19.0)"),
    _row("0.0.0", None, "fit_per_worker_groups", False, "0.14-0.16: global groups against the smallest worker budget"),
    _row("0.17.0", None, "fit_per_worker_groups", True, "groups projected to each worker (_project_kv_cache_groups_to_worker 0.17.0)"),
    # Mamba / linear-attention layers (MambaSpec).
    _row("0.0.0", None, "v1_mamba", False, "V1 has no MambaSpec before 0.9.2 and no HybridAttentionMambaModelConfig before 0.10.1 (0.9.2 wheel); V0 keeps Mamba state in MambaCacheManager"),
    _row("0.10.1", None, "v1_mamba", True, "HybridAttentionMambaModelConfig raises the attention block size, pads the Mamba page (models/config.py 0.10.1; absent in 0.9.2)"),
    _row("0.0.0", None, "mamba_mla_alignment", False, "attention block size a multiple of 16 for every backend (0.10.1-0.11.0)"),
    _row("0.11.2", None, "mamba_mla_alignment", True, "MLA attention: multiple of 64 (128 with CUTLASS_MLA), models/config.py 0.11.2"),
    _row("0.0.0", None, "mamba_cache_modes", ("none",), "one state per request (MambaSpec block_size = max_model_len), no Mamba prefix caching (0.10.1-0.11.0)"),
    _row("0.11.2", None, "mamba_cache_modes", ("none", "all"), "prefix caching: attention block a multiple of lcm(mamba chunk, alignment), mamba_block_size = block size, cdiv(L, block) states per request (models/config.py, kv_cache_interface.py 0.11.2-0.14.0)"),
    _row("0.15.1", None, "mamba_cache_modes", ("none", "all", "align"), "mamba_cache_mode none (1 + spec blocks) / align (2 + spec) / all (cdiv(L, block)), MambaSpec.max_memory_usage_bytes 0.15.1; absent in 0.14.0"),
    # Decode context parallel next to sliding windows.
    _row("0.0.0", None, "dcp_refuses_sliding_window", False, "no decode context parallel before 0.10.2"),
    _row("0.10.2", None, "dcp_refuses_sliding_window", True, "SlidingWindowSpec.max_memory_usage_bytes asserts 'DCP not support sliding window.' (v1/kv_cache_interface.py 0.10.2; still in 0.28.0)"),
    # The chunked-local warning when --disable-hybrid-kv-cache-manager is given as well.
    _row("0.0.0", None, "chunked_hybrid_warns_when_disabled", False, "config.py 0.10.1-0.13.0: the latency-regression warning only while the hybrid manager is still on"),
    _row("0.14.0", None, "chunked_hybrid_warns_when_disabled", True, "config/vllm.py 0.14.0: warned whenever the environment variable is off, flag or not"),
    # Qwen2-family use_sliding_window with max_window_layers (models/qwen2.py Qwen2Model).
    _row("0.0.0", None, "qwen2_max_window_layers", "first-layers", "qwen2.py 0.4.1: the first max_window_layers layers slide (V0 only; no effect on V0 block counts)"),
    _row("0.4.3", None, "qwen2_max_window_layers", "refuse", "qwen2.py 0.4.3-0.8.x: 'Sliding window for some but all layers is not supported' whenever the window is used"),
    _row("0.9.0", None, "qwen2_max_window_layers", "refuse-unless-all", "qwen2.py 0.9.0: refused when max_window_layers != num_hidden_layers"),
    _row("0.10.1", None, "qwen2_max_window_layers", "refuse-if-some", "qwen2.py 0.10.1: refused when 0 < max_window_layers < num_hidden_layers"),
    # Interleaved sliding windows disabled, max_model_len capped to the window (ModelConfig -> _get_and_verify_max_len).
    _row("0.0.0", None, "interleaved_window_cap", "never", "windows left to the model before 0.5.1"),
    _row("0.5.1", None, "interleaved_window_cap", "gemma2", "0.5.1-0.6.2: Gemma 2 always ('Gemma 2 uses sliding window attention for every odd layer')"),
    _row("0.6.3", None, "interleaved_window_cap", "always", "0.6.3-0.6.4: every interleaved model ('has interleaved attention ... by vLLM')"),
    _row("0.6.5", None, "interleaved_window_cap", "backends", "0.6.5+: only with the backends of interleaved_window_backends"),
    _row("0.10.1", "v1", "interleaved_window_cap", "never", "0.10.1: the cap is V0 only"),
    _row("0.0.0", None, "interleaved_window_backends", ("XFORMERS",), "0.6.5-0.7.1: VLLM_ATTENTION_BACKEND=XFORMERS"),
    _row("0.7.2", None, "interleaved_window_backends", ("XFORMERS", "FLASHINFER"), "0.7.2-0.10.x: XFORMERS or FLASHINFER"),
    _row("0.0.0", None, "interleaved_window_types", ("gemma2",), "model types with interleaved windows (0.6.3)"),
    _row("0.7.0", None, "interleaved_window_types", ("gemma2", "cohere2"), "+ cohere2 (0.7.0)"),
    _row("0.8.0", None, "interleaved_window_types", ("gemma2", "gemma3_text", "cohere2"), "+ gemma3_text (0.8.0)"),
    _row("0.0.0", None, "interleaved_window_detection", "types", "interleaved = a list of windows or a model type of interleaved_window_types"),
    _row("0.9.0", None, "interleaved_window_detection", "pattern", "0.9.0: or sliding_window_pattern set, or gemma2"),
    _row("0.10.1", None, "interleaved_window_detection", "layer-types", "0.10.1: layer_types holds full and sliding attention, or gemma2 / gemma3_text"),
    # Mamba prefix caching by default (mamba_cache_mode left at "none"; before 0.11.2 see mamba_cache_modes).
    _row("0.0.0", None, "hybrid_prefix_caching_default", False, "ModelConfig.is_prefix_caching_supported: attn_type 'hybrid' -> False; 0.11.2 arg_utils: not model_config.is_hybrid (to 0.25)"),
    _row("0.26.0", None, "hybrid_prefix_caching_default", True, "prefix caching on for hybrids by default (0.26.0)"),
    _row("0.0.0", None, "mamba_prefix_caching_architectures", ("BambaForCausalLM", "FalconH1ForCausalLM", "GraniteMoeHybridForCausalLM", "JambaForCausalLM", "Mamba2ForCausalLM", "MambaForCausalLM", "NemotronHForCausalLM", "Zamba2ForCausalLM"), "SupportsMambaPrefixCaching users (models/interfaces.py, 0.11.2-0.25); Qwen3-Next / Qwen3.5 and MiniMax never declare it"),
    _row("0.26.0", None, "mamba_prefix_caching_architectures", ("FalconH1ForCausalLM", "GraniteMoeHybridForCausalLM", "JambaForCausalLM", "Mamba2ForCausalLM", "MambaForCausalLM", "NemotronHForCausalLM", "Zamba2ForCausalLM"), "Bamba drops out (0.26; only Mamba / Mamba2 in 0.33)"),
    _row("0.0.0", None, "mamba_prefix_cache_mode", ("all", "none"), "(if supported, else): 0.11.2-0.14 'all', else prefix caching is switched off again"),
    _row("0.15.1", None, "mamba_prefix_cache_mode", ("all", "align"), "MambaModelConfig: 'all' if supported else 'align' (models/config.py 0.15.1)"),
    _row("0.28.0", None, "mamba_prefix_cache_mode", ("align", "align"), "MambaModelConfig: 'none' -> 'align' whatever the model supports (0.28.0)"),
    # --- scheduler (simulate): the KV-cache manager and scheduler rules `vram-detective simulate` follows (issue 18);
    # rules named scheduler_<rule>, read by simulate/rules.py (one row per engine path)
    _row("0.0.0", "v1", "scheduler_prefix_caching", True, "vllm/engine/arg_utils.py 0.8.5: V1 turns prefix caching on"),
    _row("0.0.0", "v1", "scheduler_chunked_prefill", True, "v1/core/sched/scheduler.py 0.8.0: token budget max_num_batched_tokens per step"),
    _row("0.0.0", "v1", "scheduler_mixed_prefill_decode", True, "v1/core/sched/scheduler.py 0.8.0: running first, then waiting, one budget"),
    _row("0.0.0", "v1", "scheduler_reserved_blocks", 0, "v1/core/block_pool.py 0.8.0: no null block"),
    _row("0.8.5", "v1", "scheduler_reserved_blocks", 1, "v1/core/block_pool.py 0.8.5: null_block = free_block_queue.popleft()"),
    _row("0.0.0", "v1", "scheduler_admission_watermark", 0.0, "v1/core/kv_cache_manager.py 0.11.0: no watermark"),
    _row("0.0.0", "v1", "scheduler_preemption", "recompute", "v1/core/sched/scheduler.py 0.11.0: running.pop(); num_computed_tokens = 0"),
    _row("0.0.0", "v1", "scheduler_victim", "newest", "v1/core/sched/scheduler.py 0.11.0: FCFS preempts self.running.pop()"),
    _row("0.0.0", "v1", "scheduler_sliding_window_frees", True, "v1/core/single_type_kv_cache_manager.py 0.11.0: SlidingWindowManager.remove_skipped_blocks"),
    _row("0.0.0", "v0", "scheduler_prefix_caching", False, "vllm/config.py 0.6.3: enable_prefix_caching=False"),
    _row("0.0.0", "v0", "scheduler_chunked_prefill", False, "vllm/config.py 0.6.3: chunked prefill opt-in below 32K"),
    _row("0.0.0", "v0", "scheduler_mixed_prefill_decode", False, "vllm/core/scheduler.py 0.6.3: _schedule_default"),
    _row("0.0.0", "v0", "scheduler_reserved_blocks", 0, "vllm/core/block_manager.py 0.6.3"),
    _row("0.0.0", "v0", "scheduler_admission_watermark", 0.01, "vllm/core/block_manager.py 0.6.3: watermark=0.01"),
    _row("0.0.0", "v0", "scheduler_preemption", "recompute", "vllm/core/scheduler.py 0.6.3 _preempt: one running sequence -> RECOMPUTE (SWAP for n>1 or when asked)"),
    _row("0.0.0", "v0", "scheduler_victim", "newest", "vllm/core/scheduler.py 0.6.3: running_queue.pop()"),
    _row("0.0.0", "v0", "scheduler_sliding_window_frees", False, "V0 allocates full attention for every layer"),
    _row("0.0.0", "v1", "scheduler_hash_at_schedule", True, "v1/core/kv_cache_manager.py 0.8.5-0.33.0: allocate_slots ends with cache_blocks / cache_full_blocks"),
    _row("0.0.0", "v1", "scheduler_no_admission_after_preemption", "any", "v1/core/sched/scheduler.py 0.8.5-0.33.0: waiting requests only `if not preempted_reqs`"),
    _row("0.0.0", "v1", "scheduler_admission_fits_prompt", False, "v1/core/sched/scheduler.py 0.18.0: allocate_slots checks the scheduled chunk only"),
    _row("0.19.0", "v1", "scheduler_admission_fits_prompt", True, "v1/core/sched/scheduler.py 0.19.0: scheduler_reserve_full_isl (default True) -> kv_cache_manager.can_fit_full_sequence"),
    _row("0.0.0", "v1", "scheduler_lookup_counts_preempted", True, "v1/core/kv_cache_manager.py 0.11.0 get_computed_blocks: prefix_cache_stats.queries += num_tokens on every lookup"),
    _row("0.0.0", "v1", "scheduler_lookup_in_blocks", True, "v1/core/kv_cache_manager.py 0.8.5 get_computed_blocks: queries += len(block_hashes), hits += len(computed_blocks)"),
    _row("0.9.0", "v1", "scheduler_lookup_in_blocks", False, "v1/core/kv_cache_manager.py 0.9.0 get_computed_blocks: queries += request.num_tokens"),
    _row("0.0.0", "v1", "scheduler_lookup_counts_retries", True, "v1/core/kv_cache_manager.py 0.11.0-0.26.0: get_computed_blocks records every lookup"),
    _row("0.27.0", "v1", "scheduler_lookup_counts_retries", False, "v1/core/sched/scheduler.py 0.27.0: record_prefix_cache_stats at admission ('so unscheduled lookups are not counted')"),
    _row("0.0.0", "v0", "scheduler_keeps_duplicates", False, "vllm/core/block/prefix_caching_block.py 0.6.3 promote_to_immutable_block: a full block whose hash is cached is swapped for the cached one"),
    _row("0.0.0", "v1", "scheduler_keeps_duplicates", True, "v1/core/block_pool.py 0.8.5-0.33.0: cached_block_hash_to_block keeps every block of a hash ('we currently don't de-duplicate the blocks')"),
    _row("0.0.0", "v0", "scheduler_admission_caps_window", False, "vllm/core/block_manager.py 0.6.3: a sliding window allocates every block (no admission cap)"),
    _row("0.0.0", "v0", "scheduler_free_uncached_first", False, "vllm/core/block/prefix_caching_block.py 0.6.3: the V0 evictor, no V1 free queue"),
    _row("0.0.0", "v1", "scheduler_admission_caps_window", False, "v1/core/kv_cache_manager.py 0.19.0 can_fit_full_sequence: every group counts the whole prompt's blocks"),
    _row("0.21.0", "v1", "scheduler_admission_caps_window", True, "v1/core/single_type_kv_cache_manager.py 0.21.0 get_num_blocks_to_allocate(apply_admission_cap): a sliding group counts at most SlidingWindowSpec.max_admission_blocks_per_request blocks"),
    _row("0.0.0", "v1", "scheduler_free_uncached_first", False, "v1/core/block_pool.py 0.8.5-0.27.0 free_blocks: every freed block is appended to the free queue"),
    _row("0.28.0", "v1", "scheduler_free_uncached_first", True, "v1/core/block_pool.py 0.28.0 free_blocks: blocks without a hash prepend_n to the front (LIFO), cached ones append_n"),
    _row("0.12.0", "v1", "scheduler_lookup_counts_preempted", False, "v1/metrics/stats.py 0.12.0 PrefixCacheStats.record: a preempted request's lookup goes to preempted_queries"),
    _row("0.0.0", "v0", "scheduler_no_admission_after_preemption", "prefill", "vllm/core/scheduler.py 0.6.3 _schedule_default: new prefills are scheduled before the running decodes, never after them"),
    _row("0.0.0", "v0", "scheduler_admission_fits_prompt", False, "vllm/core/scheduler.py 0.6.3: can_allocate checks the whole prompt (no chunking: the chunk is the prompt)"),
    _row("0.0.0", "v0", "scheduler_lookup_counts_preempted", True, "V0 has no such counter split"),
    _row("0.0.0", "v0", "scheduler_lookup_counts_retries", True, "V0 has no such counter split"),
    _row("0.0.0", "v0", "scheduler_lookup_in_blocks", False, "V0 has no such counter"),
    _row("0.0.0", "v0", "scheduler_hash_at_schedule", False, "vllm/core/block_manager.py 0.6.3: a block counts as cached once computed (mark_blocks_as_computed after the step)"),
)
# fmt: on


@dataclass(frozen=True)
class Release:
    """The resolved rules of one vLLM release on one engine path."""

    version: Version
    engine: str
    rules: tuple[tuple[str, object, str], ...]  # (rule, value, source)
    _values: Mapping[str, object] | None = field(default=None, repr=False, compare=False, hash=False)  # rule -> value

    def __post_init__(self) -> None:
        if self._values is None:
            object.__setattr__(self, "_values", MappingProxyType({name: value for name, value, _ in self.rules}))

    @property
    def label(self) -> str:
        return format_version(self.version)

    def __getitem__(self, rule: str) -> object:
        return self._values[rule]

    def source(self, rule: str) -> str:
        for name, _, source in self.rules:
            if name == rule:
                return source
        raise KeyError(rule)

    def get(self, rule: str, default: object = None) -> object:
        return self._values.get(rule, default)

    def at_least(self, text: str) -> bool:
        return self.version >= parse_version(text)


def resolve_version(text: str | None) -> Version:
    if text is None or text in ("", "latest", "newest"):
        return NEWEST_KNOWN
    return window().check(parse_version(text), text)


def window() -> ReleaseWindow:
    """The modelled releases, read from OLDEST_SUPPORTED and NEWEST_KNOWN when asked; a patch of the newest line
    (0.33.x) is read with that line's rules (depth 2)."""
    return ReleaseWindow("vLLM", OLDEST_SUPPORTED, NEWEST_KNOWN, 2, format_version)


@lru_cache(maxsize=256)
def _rules_for(version: Version, engine: str) -> tuple[tuple[str, object, str], ...]:
    resolved = rows_in_force(RULE_CHANGES, version, engine)
    return tuple((name, row.value, row.source) for name, row in sorted(resolved.items()))


def release(version: Version, engine: str | None = None) -> Release:
    """The rules of `version` on `engine` ('v0'/'v1'); engine defaults to the release's default."""
    if engine is None:
        engine = str(_rule_values(version, "v0")["default_engine"])
    if engine not in ("v0", "v1"):
        raise ValueError(f"unknown engine path {engine!r}")
    return Release(version=version, engine=engine, rules=_rules_for(version, engine),
                   _values=_rule_values(version, engine))


_MISSING = object()


@lru_cache(maxsize=1024)
def _rule_values(version: Version, engine: str) -> Mapping[str, object]:
    return MappingProxyType({name: value for name, value, _ in _rules_for(version, engine)})


def clear_caches() -> None:
    """Forget resolved rule sets (after RULE_CHANGES is replaced, as the calibration refit does)."""
    for cached in (_rules_for, _rule_values, _engine_specific_rules):
        cached.cache_clear()


@lru_cache(maxsize=1)
def _engine_specific_rules() -> frozenset[str]:
    return frozenset(change.rule for change in RULE_CHANGES if change.path is not None)


def rule_at(version: Version, rule: str, engine: str | None = None, default: object = _MISSING) -> object:
    """One rule's value at `version`, for code that holds a version rather than a Release. A rule with rows for one
    engine path only needs `engine`; `default` answers for a rule absent from the table."""
    if engine is None:
        if rule in _engine_specific_rules():
            raise ValueError(f"rule {rule!r} differs between V0 and V1: name the engine")
        engine = "v0"
    values = _rule_values(tuple(version[:3]), engine)
    if rule in values:
        return values[rule]
    if default is _MISSING:
        raise KeyError(rule)
    return default


def era(version: str, path: str = "") -> str:
    """The release's budget era (rule `budget_era`), e.g. 'V1-b': what `score`'s tables and the intervals group
    cases by."""
    return str(rule_at(parse_version(version), "budget_era", (path or "v1").lower(), default="?"))


def is_modelled(version: Version) -> bool:
    """Whether the tool models `version` (the oldest budget rule read from a wheel and on)."""
    return tuple(version[:3]) >= OLDEST_SUPPORTED


def first_release_serving(architecture: str, version: Version) -> tuple[Release, str] | None:
    """When `version` predates `architecture` (rule serves_<architecture>): the first release that serves it and
    its model file; None when `version` serves it (architectures without the rule are served by every release)."""
    rule = f"serves_{architecture}"
    if rule_at(version, rule, default=True):
        return None
    first = first_release(lambda later: later[rule])
    return first, first.source(rule)


def first_release(test, engine: str = "v0") -> Release | None:
    """The oldest release at which some rule changes whose rules pass `test(release)`; None when none does."""
    for since in sorted({change.since for change in RULE_CHANGES}):
        candidate = release(since, engine)
        if test(candidate):
            return candidate
    return None
