"""What the profiling run peaks at, what lies outside torch, and the CUDA-graph pool.

These are models, not rules read from a file: each term is a tensor inventory of what is alive at
the peak, with the few measured constants named where they come from (design/vllm-memory.md §5, §6,
§1.4 and the dev ground-truth logs).
"""
from __future__ import annotations

from dataclasses import dataclass

from ...hardware import Gpu
from ...model.spec import ModelSpec
from ...units import GIB, MIB
from . import calibration
from .releases import Release
from .settings import EngineSettings

# Bytes alive per logits element while the PyTorch sort-based sampler runs on the [R, vocab] logits
# (the release table's "sampler_bytes_per_logit" picks this or the lighter Triton path): model-dtype
# logits 2 + fp32 copy 4 + sorted values 4 + sort indices (int64) 8 + softmax 4 + cumsum 4 + top-p
# mask 1 + scattered logits 4 + probs 4 + exponential noise / logprobs 4 = 39
# (vllm/model_executor/layers/sampler.py _apply_top_k_top_p; v1/sample/ops/topk_topp_sampler.py).
# Checks: Llama-3-8B, 256 x 128256 -> 1.26 GiB (#10511, observed 1.26); Qwen3-32B, 1024 x 151936 on
# H100 0.11.0 -> 5.73 GiB (observed 5.64); Qwen3-8B-FP8 0.10.2, 256 x 151936 -> 1.43 (observed 1.40).
SAMPLER_BYTES_PER_LOGIT = 39

# Triton top-k/top-p (vLLM 0.20-0.27 for >= 8 requests): model-dtype logits 2 + fp32 copy 4 + probs 4
# + exponential noise 4 = 14; checks: Qwen3-4B 1024 x 151936 on H100 (~0.19 dev, #38479) implies
# ~2.3 GiB of peak + non-torch; Qwen3-8B on an A5000 (0.21, LMCache #3430) implies ~0.6 GiB.
TRITON_SAMPLER_BYTES_PER_LOGIT = 14

# The rest of the dummy sampler run's inventory in the Triton era (0.17.0+, gpu_model_runner.py _dummy_run /
# _dummy_sampler_run, sampler.py, topk_topp_sampler.py): the last tokens' hidden states hidden_states[logit_indices]
# and torch.rand_like of them ([R, hidden] twice, model dtype), the kernel's cached per-program rows
# (TRITON_BUFFER_BYTES per vocabulary entry, fp32) and the caching allocator's whole blocks for the [R, vocab]
# tensors (bf16 logits, fp32 logits, probs, exponential noise). Checks (H100, 1,024 requests, 8,192 tokens, 0.19.0):
# Llama-3.1-8B 1.888 GiB (logged 1.89), Qwen3-8B 2.214 (2.21), Phi-4 1.518 (1.52).
SAMPLER_HIDDEN_COPIES = 2
TRITON_BUFFER_BYTES = 4
# PyTorch's cuBLAS workspace, taken from the caching allocator when the first cuBLAS handle is made
# (c10/cuda/CublasHandlePool.cpp parseChosenWorkspaceSize: ":4096:8" = 32 MiB on sm90, ":4096:2:16:8" otherwise).
CUBLAS_WORKSPACE_SM90 = 4096 * 1024 * 8
CUBLAS_WORKSPACE_OTHER = 4096 * 1024 * 2 + 16 * 1024 * 8

# V0-c (<= 0.6.3) measures the profile with free memory, i.e. *reserved* bytes (fitted: calibration.py)
RESERVED_OVER_ALLOCATED_AT_PEAK = calibration.RESERVED_OVER_ALLOCATED_AT_PEAK.value

# Per-token activations alive at the MLP in a dense decoder: 3 hidden-sized tensors (residual,
# normed input, attention output) + gate_up (2 x I) + activation output (I).
# Check: Llama-3.1-8B on a 3090 (#10517, V0 0.6.4): peak 2.07 GiB at 20,000 tokens and 2.99 GiB at
# 29,000 tokens -> 110 KB/token marginal; (3 x 4096 + 3 x 14336) x 2 B = 110.6 KB.
HIDDEN_TENSORS_AT_PEAK = 3
INTERMEDIATE_TENSORS_AT_PEAK = 3
# Fused MoE (fused_moe.py): tokens are processed in chunks of VLLM_FUSED_MOE_CHUNK_SIZE (default 32768)
# with intermediate caches [M, topk, max(2I, H)] (shared by cache1 and cache3) and [M*topk, I].
# Check: Qwen3-235B-FP8 TP 4, 8192 tokens, 32 sequences on RTX PRO 6000 logs a 0.76 GiB peak; this
# gives 8192 x 8 x (4096 + 384) x 2 B + 3 x 8192 x 4096 x 2 B = 0.73 GiB.
FUSED_MOE_CHUNK_TOKENS = 32768

# Non-torch memory and the CUDA-graph pool: fitted to logged figures (calibration.py names the cases and the method).
NON_TORCH_HOPPER_PLUS = calibration.NON_TORCH_HOPPER_PLUS.bytes
NON_TORCH_OTHER = calibration.NON_TORCH_OTHER.bytes
NCCL_PER_RANK = calibration.NCCL_PER_RANK.bytes
NON_TORCH_HOPPER_PLUS_FROM_0_18 = calibration.NON_TORCH_HOPPER_PLUS_FROM_0_18.bytes
NCCL_LAZY_COMMUNICATOR_HOPPER_PLUS = calibration.NCCL_LAZY_COMMUNICATOR_HOPPER_PLUS.bytes
CUDA_CONTEXT = calibration.CUDA_CONTEXT.bytes
GLOBAL_ERA_PER_EXTRA_RANK = calibration.GLOBAL_ERA_PER_EXTRA_RANK.bytes
# Only peers on the same node map memory here; nodes hold at most 8 GPUs.
GPUS_PER_NODE = 8
GRAPH_FIRST_CAPTURE_HOPPER_PLUS = calibration.GRAPH_FIRST_CAPTURE_HOPPER_PLUS.bytes
GRAPH_SECOND_CAPTURE_PER_LAYER_HOPPER_PLUS = calibration.GRAPH_SECOND_CAPTURE_PER_LAYER_HOPPER_PLUS.bytes
GRAPH_ACTUAL_OVER_ESTIMATE_HOPPER_PLUS = calibration.GRAPH_ACTUAL_OVER_ESTIMATE_HOPPER_PLUS.value
GRAPH_BYTES_PER_LAYER = {"v0": calibration.GRAPH_BYTES_PER_LAYER_V0.bytes,
                         "v1-piecewise": calibration.GRAPH_BYTES_PER_LAYER_V1_PIECEWISE.bytes,
                         "v1-full-and-piecewise": calibration.GRAPH_BYTES_PER_LAYER_V1_FULL_AND_PIECEWISE.bytes}


# Vision encoders in the profile run (V1 profile_run first encodes dummy images of the largest size that
# the encoder budget max(max_num_batched_tokens, tokens of one item) holds, and keeps their outputs in the
# encoder cache). Per patch alive in a ViT block: residual, norm, attention out (3 x hidden) + the MLP
# (3 x intermediate) - the same tensor count as the text MLP model above (an estimate, not calibrated).
# Largest item: Qwen2-VL / Qwen2.5-VL max_pixels 12,845,056 = 65,536 patches of 14x14 -> 16,384 tokens
# after the 2x2 merge (image_processing_qwen2_vl.py defaults); Gemma 3: 896x896 -> 4,096 patches, 256 tokens.
QWEN_VL_MAX_PATCHES = 12_845_056 // (14 * 14)
# Llama4ImageProcessor max_patches default (transformers 4.51 image_processing_llama4_fast.py)
LLAMA4_MAX_PATCHES = 16
# Gemma 4 (gemma4_mm.py _VIDEO_MAX_FRAMES, _VIDEO_MAX_SOFT_TOKENS + the frame's boundary tokens, pooling 3 x 3)
GEMMA4_VIDEO_FRAMES = 32
GEMMA4_FRAME_TOKENS = 70 + 2 + 6
GEMMA4_FRAME_PATCHES = 70 * 9


# Gemma 3's SigLIP tower (siglip.py SiglipEncoderLayer / SiglipMLP, run eagerly: vLLM compiles a tower only with
# compile_mm_encoder, off by default): at nn.GELU(approximate="tanh") a layer holds its residual and the normed
# input the MLP was called with (2 x hidden) and fc1's and GELU's outputs (2 x intermediate); fc2's moment
# (3 x hidden + 1 x intermediate) is lower for any intermediate above hidden.
SIGLIP_HIDDEN_AT_PEAK = 2
SIGLIP_INTERMEDIATE_AT_PEAK = 2


def dummy_image_bytes(spec: ModelSpec, settings: EngineSettings, release: Release, items: int, dtype_bytes: int) -> int:
    """The dummy images V1's profile_run encodes stay on the GPU until it returns (gpu_model_runner.py: the local
    batched_dummy_mm_inputs is never deleted, 0.8.5-0.33.0), through the text dummy run and the sampler:
    Gemma 3's pixel_values [items, 3, image, image] (one crop per image: pan-and-scan is off by default), cast to the
    model dtype by the processor from 0.9.1 (inputs/registry.py maybe_cast_dtype; float32 before). Other towers'
    inputs are not sized here (0)."""
    vision = spec.vision
    if settings.engine != "v1" or vision is None or vision.kind != "siglip" or not vision.image_size:
        return 0
    element = dtype_bytes if release["mm_inputs_model_dtype"] else 4
    return items * vision.in_channels * vision.image_size ** 2 * element


def clip_item(vision) -> tuple[int, int]:
    """LLaVA-1.5: one 336x336 image -> 577 CLIP positions (576 patches + the class token), 576 tokens
    (vision_feature_select_strategy "default" drops the class token). LLaVA-NeXT anyres: the largest
    feature size over image_grid_pinpoints of an image of exactly that size (no unpadding): the base
    image (576) + (H/14) x (W/14) grid features + one image_newline per grid row; tiles = (H/336)(W/336)
    + the base image, each 577 positions through the tower. 1.6 pinpoints -> 672x672: 5 tiles, 2,928
    tokens (llava_next.py get_num_image_tokens; the 0.10.2 log: 16,384-token budget -> 5 items)."""
    side = vision.image_size // vision.patch_size
    base = side * side
    if vision.kind == "clip" or not vision.grid_pinpoints:
        return base + 1, base
    best = (base + 1, base)
    for height, width in vision.grid_pinpoints:
        rows = height // vision.image_size * side
        cols = width // vision.image_size * side
        tiles = (height // vision.image_size) * (width // vision.image_size) + 1
        tokens = base + rows * cols + (rows if vision.image_newline else 0)
        best = max(best, (tiles * (base + 1), tokens), key=lambda item: item[1])
    return best


def vision_item(spec: ModelSpec) -> tuple[int, int]:
    """(patches the encoder runs, tokens it hands the language model) for one largest image."""
    vision = spec.vision
    if vision.kind == "siglip":
        return (vision.image_size // vision.patch_size) ** 2, 256
    if vision.kind in ("clip", "clip_anyres"):
        return clip_item(vision)
    if vision.kind == "intern_vit":
        # dynamic tiling: up to max_dynamic_patch tiles of image_size + a thumbnail, each (448/14)^2 + 1
        # positions through the tower and (448/14)^2 / merge^2 = 256 tokens after the pixel shuffle
        side = vision.image_size // vision.patch_size
        tiles = max(1, vision.max_num_tiles)
        return tiles * (side * side + 1), tiles * side * side // vision.spatial_merge_size ** 2
    if vision.kind == "gemma4_vision":
        # Gemma4ProcessingInfo: a video (32 frames x (70 + 2 + 6) = 2,496 tokens) has more tokens than an image
        # (280), so the profile encodes one dummy video: 32 frames of at most 630 patches (max_soft_tokens 70 x 3^2)
        return GEMMA4_VIDEO_FRAMES * GEMMA4_FRAME_PATCHES, GEMMA4_VIDEO_FRAMES * GEMMA4_FRAME_TOKENS
    if vision.kind == "llama4":
        # mllama4.py get_image_size_with_most_features: a max_patches x 1 tile image (16 x 336 by 336 with the
        # processor's max_patches 16) -> 16 tiles + the global tile, each (image/patch)^2 + 1 positions through the
        # tower, (16 + 1) x (144 + 1) + 2 = 2,467 tokens after the 2x2 pixel shuffle (0.8.3 get_mm_max_tokens_per_item)
        tiles = LLAMA4_MAX_PATCHES + 1
        per_tile = (vision.image_size // vision.patch_size) ** 2 // vision.spatial_merge_size ** 2
        return tiles * ((vision.image_size // vision.patch_size) ** 2 + 1), tiles * (per_tile + 1) + 2
    if vision.kind == "mllama":
        # one image = max_num_tiles tiles of (image/patch)^2 + 1 positions; the language model cross-attends
        # to all of them (an estimate: the cross-attention K/V and the V0 encoder profile are not modelled)
        positions = vision.max_num_tiles * ((vision.image_size // vision.patch_size) ** 2 + 1)
        return positions, positions
    return QWEN_VL_MAX_PATCHES, QWEN_VL_MAX_PATCHES // vision.spatial_merge_size ** 2


# Mllama (Llama 3.2 Vision) in the V0 encoder-decoder runner (worker/enc_dec_model_runner.py profile_run,
# 0.6.x-0.10.x): max_num_seqs dummy sequences, each with limit_mm_per_prompt["image"] (default 1) dummy
# 1024x1024 images (mllama.py dummy_image), all run through the vision encoder in one batch. Per image
# (MllamaVisionModel.forward): tiles x ((image/14)^2 + 1) positions padded to a multiple of 8 (L), an
# additive aspect-ratio mask [L, L] in the model dtype (_prepare_aspect_ratio_attention_mask; SDPA with a
# mask uses the memory-efficient kernel, which broadcasts it over heads), and the local transformer keeps
# the inputs of intermediate_layers_indices layers (5) for the projector. Peak = inside the MLP of a late
# local layer: mask + 5 saved states + residual + normed input (hidden) + fc1 and GELU outputs (intermediate).
# Check: vllm-pr12126 (Llama-3.2-11B-Vision, 128 seqs, H100, 0.6.6 PR branch) logs 36.63 GiB; this gives
# 128 x (6432^2 x 2 + 6432 x (7 x 1280 + 2 x 5120) x 2) B = 39.30 GiB (+7%; the stack / global-encoder phase
# would be higher still by this lifetime count, so the PR branch frees some of them - not modelled).
MLLAMA_DUMMY_IMAGE_SIDE = 1024
MLLAMA_STATES_AT_PEAK = 2  # residual + normed input beside the saved intermediate-layer inputs


# Qwen3-VL / Qwen3.5 (qwen3_vl.py, the Qwen3VLProcessingInfo both share). The checkpoints' preprocessor configs
# set longest_edge 16,777,216 px for images and 25,165,824 for videos (published preprocessor_config.json /
# video_preprocessor_config.json; consistent with the 151,250-token budget gpustack #3098 logs on 0.11.0).
QWEN3_VL_IMAGE_MAX_PIXELS = 16_777_216
QWEN3_VL_VIDEO_TOKENS = (12_288, 12_100)  # one dummy video's tokens: max_model_len >= 16200, below it
QWEN3_VL_VIDEO_TOKEN_FACTOR = 12.5  # 0.11.0-0.12.x get_max_video_tokens: video_soft_tokens x 12.5
QWEN3_VL_SHORT_CONTEXT = 16_200


@dataclass(frozen=True)
class EncoderProfile:
    peak_bytes: int  # the encoder forward's own peak
    cache_bytes: int  # the encoder outputs kept in the encoder cache through the text dummy run
    phase: str


def qwen3_vl_encoder(spec: ModelSpec, settings: EngineSettings, release: Release, dtype_bytes: int) -> EncoderProfile:
    """V1 profile_run for the Qwen3-VL tower (0.11.0+), by release:
    0.11.0-0.12.x profile one dummy video: its tokens x 12.5 set the encoder budget (153,600, or 151,250 below a
    16,200-token context), the video's 12,288 / 12,100 output tokens are scattered into a zeros tensor of budget rows
    (gpu_model_runner.py: output.new_zeros((encoder_budget, hidden))), 4 patches per token;
    0.13.0+ profile images of the largest size: longest_edge / (patch x merge)^2 = 16,384 tokens (65,536 patches),
    budget max(max_num_batched_tokens, 16,384), budget // 16,384 items, outputs kept unexpanded.
    Each output row is out_hidden x (1 + deepstack layers) wide. The forward keeps the fp32 pixel values
    ([patches, C x T x P x P]) and, per patch, the usual 3 hidden + 3 intermediate tensors of a ViT block."""
    vision = spec.vision
    merge = vision.spatial_merge_size ** 2
    width = vision.out_hidden_size * (1 + vision.deepstack_layers)
    if release["qwen3_vl_video_profile"]:
        tokens = QWEN3_VL_VIDEO_TOKENS[0 if settings.max_model_len >= QWEN3_VL_SHORT_CONTEXT else 1]
        budget = int(tokens * QWEN3_VL_VIDEO_TOKEN_FACTOR)
        items, patches, rows = 1, tokens * merge, max(budget, settings.max_num_batched_tokens)
        what = f"1 dummy video of {tokens:,} tokens, encoder cache {rows:,} rows"
    else:
        tokens = QWEN3_VL_IMAGE_MAX_PIXELS // (vision.patch_size * vision.spatial_merge_size) ** 2
        budget = max(settings.max_num_batched_tokens, tokens)
        items = max(1, budget // tokens)
        patches, rows = items * tokens * merge, items * tokens
        what = f"{items} image(s) of {tokens * merge:,} patches"
    pixel_bytes = vision.in_channels * vision.temporal_patch_size * vision.patch_size ** 2 * 4  # fp32 per patch
    tp = settings.tensor_parallel_size
    peak = patches * ((HIDDEN_TENSORS_AT_PEAK * vision.hidden_size
                       + INTERMEDIATE_TENSORS_AT_PEAK * vision.intermediate_size // tp) * dtype_bytes + pixel_bytes)
    return EncoderProfile(peak, rows * width * dtype_bytes, f"Qwen3-VL vision encoder ({what})")


# Whisper: one 30 s dummy audio per item (whisper.py dummy data: chunk_length x sampling_rate samples) ->
# [num_mel_bins, 3000] features -> max_source_positions (1500) encoder positions after conv2's stride 2.
WHISPER_FEATURE_FRAMES = 3000
# Alive at the encoder's peak, inside an encoder layer's MLP (whisper.py WhisperEncoderLayer): the caller's input,
# the residual and the normed input at d_model, fc1's and GELU's outputs at encoder_ffn_dim.
WHISPER_HIDDEN_AT_PEAK = 3
WHISPER_FFN_AT_PEAK = 2


def whisper_encoder(spec: ModelSpec, settings: EngineSettings, release: Release, dtype_bytes: int) -> EncoderProfile:
    """The encoder pass of the profile run. V0 (enc_dec_model_runner.py profile_run, 0.7.0-0.10.1): max_num_seqs
    dummy sequences, each with one dummy audio, encoded in one forward - max_num_seqs x 1500 encoder tokens, no cap.
    V1: the encoder budget's items - 1 in 0.10.2-0.12 (max_num_encoder_input_tokens = 1500), then
    min(max_num_seqs, max_num_batched_tokens // 1500) (at least 1) - whose outputs stay in the encoder cache while
    the decoder dummy run (no cross-attention over them) runs.
    Check: vllm#12095 (whisper-tiny, 8 GiB under WSL, 0.7.0-dev, fp8 KV -> xFormers) logs 7.09 GiB; this liveness
    count gives 3.14 GiB at 256 sequences (4.90 at the example script's 400): the gap is not in the Python source
    (xFormers builds no score matrix; docs/accuracy.md)."""
    encoder = spec.encoder
    positions = encoder.max_source_positions
    if settings.engine == "v0":
        items = settings.max_num_seqs
    elif release["encdec_encoder_tokens_override"]:
        items = 1
    else:
        items = max(1, min(settings.max_num_seqs, settings.max_num_batched_tokens // positions))
    tp = settings.tensor_parallel_size
    tokens = items * positions
    features = items * encoder.num_mel_bins * WHISPER_FEATURE_FRAMES * int(release["whisper_feature_copies_bytes"])
    peak = tokens * (WHISPER_HIDDEN_AT_PEAK * encoder.hidden_size
                     + WHISPER_FFN_AT_PEAK * encoder.intermediate_size // tp) * dtype_bytes + features
    cache = 0 if settings.engine == "v0" else tokens * encoder.hidden_size * dtype_bytes
    where = "V0 enc-dec profile: one per sequence" if settings.engine == "v0" else "V1 encoder budget"
    return EncoderProfile(peak, cache, f"Whisper encoder ({items} dummy audio item(s) of {positions} positions, {where})")


def mllama_tiles(vision, side: int = MLLAMA_DUMMY_IMAGE_SIDE) -> int:
    """Tiles of one side x side image (transformers MllamaImageProcessor get_optimal_tiled_canvas: the
    smallest upscaling canvas of at most max_num_tiles tiles, else the largest downscaling one)."""
    tile = vision.image_size
    best_up, best_down = None, None
    for rows in range(1, vision.max_num_tiles + 1):
        for cols in range(1, vision.max_num_tiles // rows + 1):
            scale = min(rows * tile / side, cols * tile / side)
            key = (scale, rows * cols)
            if scale >= 1:
                best_up = key if best_up is None or key < best_up else best_up
            elif best_down is None or scale > best_down[0]:
                best_down = key
    return (best_up or best_down)[1]


def mllama_v0_encoder(spec: ModelSpec, settings: EngineSettings, dtype_bytes: int) -> tuple[int, int, int, int]:
    """(vision-encoder peak bytes, cross-attention states kept for the text pass, images, tiles)."""
    vision = spec.vision
    images = settings.max_num_seqs  # x limit_mm_per_prompt["image"], which is not a setting here yet (default 1)
    tiles = mllama_tiles(vision)
    positions = (vision.image_size // vision.patch_size) ** 2 + 1
    padded = -(-positions // 8) * 8
    length = vision.max_num_tiles * padded  # the mask spans max_num_tiles (the batch's widest) tiles
    saved = max(0, vision.vision_output_dim // vision.hidden_size - 1) if vision.vision_output_dim else 5
    tp = settings.tensor_parallel_size
    per_image = (length * length * dtype_bytes
                 + length * ((saved + MLLAMA_STATES_AT_PEAK) * vision.hidden_size
                             + 2 * vision.intermediate_size // tp) * dtype_bytes)
    cross = images * tiles * positions * spec.hidden_size * dtype_bytes  # projected states, flattened
    return images * per_image, cross, images, tiles


@dataclass(frozen=True)
class ProfileEstimate:
    activation_peak_bytes: int
    forward_bytes: int
    sampler_bytes: int
    profile_tokens: int
    profile_requests: int
    peak_phase: str  # "forward" or "sampler"


def cublas_workspace(gpu: Gpu) -> int:
    return CUBLAS_WORKSPACE_SM90 if gpu.compute_capability == (9, 0) else CUBLAS_WORKSPACE_OTHER


def triton_sampler_rows(sm_count: int, requests: int) -> int:
    """Rows of the Triton top-k/top-p kernel's cached buffer: min(next_power_of_2(programs), SMs), one program
    per SM at most (topk_topp_triton.py apply_top_k_top_p_triton, 0.17.0+)."""
    programs = max(1, min(sm_count, requests))
    return min(1 << (programs - 1).bit_length(), sm_count)


def sampler_extras(spec: ModelSpec, requests: int, release: Release, dtype_bytes: int, gpu: Gpu | None) -> int:
    """What the Triton-era dummy sampler run holds beyond the bytes per logits element (SAMPLER_HIDDEN_COPIES)."""
    if gpu is None or not release["sampler_triton_buffer"] or requests < 8 or not gpu.sm_count:
        return 0
    from .allocator import block_overhead

    vocab = spec.padded_vocab_size
    rows = triton_sampler_rows(gpu.sm_count, requests)
    rounding = block_overhead(requests * vocab * dtype_bytes, 0) + 3 * block_overhead(requests * vocab * 4, 0)
    return (rows * vocab * TRITON_BUFFER_BYTES + SAMPLER_HIDDEN_COPIES * requests * spec.hidden_size * dtype_bytes
            + rounding)


# WorkspaceManager.get_simultaneous (v1/worker/workspace.py) aligns each view of the one buffer to 256 bytes
MOE_WORKSPACE_ALIGN = 256


def moe_workspace_bytes(spec: ModelSpec, settings: EngineSettings, release: Release, dtype_bytes: int) -> int:
    """The fused-MoE modular kernel's scratch, held by the worker's WorkspaceManager from the profile's forward on
    (release rule moe_workspace_persistent, 0.14+): TritonExperts.workspace_shapes (fused_moe.py 0.14.0-0.20.0,
    experts/triton_moe.py 0.25.0+) for M tokens of a chunk - workspace13 [M, topk, max(activation out, K)],
    workspace2 [M, topk, max(N, K)] (N = 2 x expert intermediate, gated; K = hidden or the latent width) - and the
    output [tokens, K], which shares workspace13 when one chunk covers the batch (modular_kernel.py
    _allocate_buffers). 0 where the release frees the caches with each call, and for quantized experts, whose
    kernels (per method and GPU) are not read here: e.g. 0.15's block-FP8 MoE on an RTX PRO 6000 logs the per-call
    caches of fused_experts(), not these shapes."""
    moe = spec.moe
    if moe is None or not release.get("moe_workspace_persistent") or settings.quantization or spec.quantization:
        return 0
    tokens = settings.max_num_batched_tokens
    moe_ranks = settings.tensor_parallel_size * settings.data_parallel_size
    inner = moe.expert_intermediate if settings.enable_expert_parallel else moe.expert_intermediate // moe_ranks
    width = moe.latent_size or spec.hidden_size
    n = 2 * inner if moe.gated else inner
    chunk_rule = int(release.get("moe_workspace_chunk_tokens") or 0)
    chunk = min(tokens, chunk_rule) if chunk_rule else tokens
    ws13 = chunk * moe.experts_per_token * max(inner, width)
    ws2 = chunk * moe.experts_per_token * max(n, width)
    output = tokens * width
    parts = (max(ws13, output), ws2) if chunk == tokens else (ws13, ws2, output)
    return sum(_round_up(part * dtype_bytes, MOE_WORKSPACE_ALIGN) for part in parts)


def activation_peak(spec: ModelSpec, settings: EngineSettings, release: Release, dtype_bytes: int, is_last_stage: bool,
                    gpu: Gpu | None = None) -> ProfileEstimate:
    """`gpu`: the card, for what the release sizes by it (the Triton sampler's rows, cuBLAS's workspace); None leaves
    those terms out."""
    tokens = settings.max_num_batched_tokens
    requests = min(settings.max_num_seqs, tokens)
    forward = _forward_bytes(spec, settings, release, dtype_bytes)
    sampler = _sampler_bytes(spec, settings, release, dtype_bytes, gpu, requests) if is_last_stage else 0
    peak = max(forward, sampler)
    phase = "forward" if forward >= sampler else "sampler"
    kept = moe_workspace_bytes(spec, settings, release, dtype_bytes) if sampler > forward else 0
    if kept:
        phase += f" (with the {kept / GIB:.2f} GiB MoE workspace the forward left allocated)"
    peak, phase = _with_encoder(spec, settings, release, dtype_bytes, is_last_stage, peak, phase)
    if release["budget_era"] == "V0-c":
        peak = int(peak * RESERVED_OVER_ALLOCATED_AT_PEAK)
    return ProfileEstimate(peak, forward, sampler, tokens, requests, phase)


def _forward_bytes(spec: ModelSpec, settings: EngineSettings, release: Release, dtype_bytes: int) -> int:
    """The dummy forward's live tensors at max_num_batched_tokens (the MoE layer's own where it is larger)."""
    tp, tokens, hidden = settings.tensor_parallel_size, settings.max_num_batched_tokens, spec.hidden_size
    forward = tokens * (HIDDEN_TENSORS_AT_PEAK * hidden
                        + INTERMEDIATE_TENSORS_AT_PEAK * (spec.intermediate_size // tp)) * dtype_bytes
    if spec.moe is None:
        return forward
    moe = spec.moe
    moe_ranks = tp * settings.data_parallel_size
    expert_intermediate = moe.expert_intermediate if settings.enable_expert_parallel else moe.expert_intermediate // moe_ranks
    chunk = min(tokens, FUSED_MOE_CHUNK_TOKENS)
    moe_forward = (tokens * HIDDEN_TENSORS_AT_PEAK * hidden
                   + chunk * moe.experts_per_token * (max(2 * expert_intermediate, hidden) + expert_intermediate)) * dtype_bytes
    workspace = moe_workspace_bytes(spec, settings, release, dtype_bytes)
    if workspace:
        moe_forward = tokens * HIDDEN_TENSORS_AT_PEAK * hidden * dtype_bytes + workspace
    # MoE models without dense layers never run the dense MLP of `intermediate_size`
    return moe_forward if not moe.dense_layers else max(forward, moe_forward)


def _sampler_bytes(spec: ModelSpec, settings: EngineSettings, release: Release, dtype_bytes: int, gpu: Gpu | None,
                   requests: int) -> int:
    """The last stage's sampler: the [T, hidden] output stays alive while the sampler runs on [R, vocab] logits;
    logits are gathered to the full vocabulary before sampling."""
    per_logit = int(release["sampler_bytes_per_logit"])
    if requests < 8 and per_logit == TRITON_SAMPLER_BYTES_PER_LOGIT:
        per_logit = SAMPLER_BYTES_PER_LOGIT  # the Triton path needs >= 8 requests; fewer use the sort
    sampler = requests * spec.padded_vocab_size * per_logit + settings.max_num_batched_tokens * spec.hidden_size * dtype_bytes
    if per_logit == TRITON_SAMPLER_BYTES_PER_LOGIT:
        sampler += sampler_extras(spec, requests, release, dtype_bytes, gpu)
    # the MoE scratch the forward left in the WorkspaceManager is still allocated while the sampler runs
    return sampler + moe_workspace_bytes(spec, settings, release, dtype_bytes)


def _with_encoder(spec: ModelSpec, settings: EngineSettings, release: Release, dtype_bytes: int,
                  is_last_stage: bool, peak: int, phase: str) -> tuple[int, str]:
    """The peak and its phase once an encoder's profile (Mllama's V0 enc-dec, Whisper / Qwen3-VL, a vision tower's
    dummy images) runs on a stage that holds it."""
    holds_encoder = settings.pipeline_parallel_size == 1 or not is_last_stage
    if spec.vision is not None and spec.vision.kind == "mllama" and settings.engine == "v0" and holds_encoder:
        encoder, cross, images, tiles = mllama_v0_encoder(spec, settings, dtype_bytes)
        if encoder > peak + cross:
            phase = f"Mllama vision encoder ({images} image(s) of {tiles} tile(s), V0 enc-dec profile)"
        return max(encoder, peak + cross), phase
    if (spec.encoder is not None or spec.vision is not None and spec.vision.kind == "qwen3_vl") and holds_encoder:
        encoder = (whisper_encoder if spec.encoder is not None else qwen3_vl_encoder)(spec, settings, release, dtype_bytes)
        if encoder.peak_bytes > peak + encoder.cache_bytes:
            phase = encoder.phase
        else:
            phase += f" + {encoder.cache_bytes / GIB:.2f} GiB encoder cache kept from the {encoder.phase}"
        return max(encoder.peak_bytes, peak + encoder.cache_bytes), phase
    if spec.vision is None or not holds_encoder:
        return peak, phase
    tokens, tp, vision = settings.max_num_batched_tokens, settings.tensor_parallel_size, spec.vision
    patches, item_tokens = vision_item(spec)
    items = max(1, max(tokens, item_tokens) // item_tokens)
    counts = (SIGLIP_HIDDEN_AT_PEAK, SIGLIP_INTERMEDIATE_AT_PEAK) if vision.kind == "siglip" else (
        HIDDEN_TENSORS_AT_PEAK, INTERMEDIATE_TENSORS_AT_PEAK)
    inputs = dummy_image_bytes(spec, settings, release, items, dtype_bytes)
    encoder = items * patches * (counts[0] * vision.hidden_size
                                 + counts[1] * vision.intermediate_size // tp) * dtype_bytes + inputs
    cache = items * item_tokens * spec.hidden_size * dtype_bytes  # encoder outputs kept for the text pass
    if encoder > peak + cache + inputs:
        phase = f"vision encoder ({items} image(s) of {patches:,} patches)"
    elif inputs:
        phase += f" + {inputs / GIB:.2f} GiB of dummy images and {cache / GIB:.2f} GiB of encoder outputs kept"
    return max(encoder, peak + cache + inputs), phase


def sampler_warmup_bytes(spec: ModelSpec, settings: EngineSettings, release: Release, dtype_bytes: int,
                         gpu: Gpu | None) -> int:
    """What the V1 worker's sampler warm-up allocates anew after the KV pool and the CUDA graphs
    (gpu_worker.py compile_or_warm_up_model, 0.9.0-0.33.0: _dummy_run(min(max_num_seqs, max_num_batched_tokens))
    then _dummy_sampler_run, "called after capture_model on purpose"): the sampler's [R, vocab] tensors, R tokens'
    hidden states and their last-token copies. The Triton kernel's rows and cuBLAS's workspace stay from the profile."""
    requests = min(settings.max_num_seqs, settings.max_num_batched_tokens)
    per_logit = int(release["sampler_bytes_per_logit"])
    if requests < 8 and per_logit == TRITON_SAMPLER_BYTES_PER_LOGIT:
        per_logit = SAMPLER_BYTES_PER_LOGIT
    extra = 0
    if per_logit == TRITON_SAMPLER_BYTES_PER_LOGIT:
        extra = sampler_extras(spec, requests, release, dtype_bytes, gpu) - persistent_sampler_bytes(
            spec, settings, release, gpu)
    return requests * spec.padded_vocab_size * per_logit + requests * spec.hidden_size * dtype_bytes + max(extra, 0)


def persistent_sampler_bytes(spec: ModelSpec, settings: EngineSettings, release: Release, gpu: Gpu | None) -> int:
    """The Triton top-k/top-p kernel's cached rows, kept from the profile run on (0.17+)."""
    requests = min(settings.max_num_seqs, settings.max_num_batched_tokens)
    if gpu is None or not release["sampler_triton_buffer"] or requests < 8 or not gpu.sm_count:
        return 0
    return triton_sampler_rows(gpu.sm_count, requests) * spec.padded_vocab_size * TRITON_BUFFER_BYTES


def profile_workspaces(gpu: Gpu | None, release: Release) -> tuple[int, str]:
    """(bytes, phrase) the profile's torch peak holds beside any phase: cuBLAS's workspace when the worker's first
    matmul is the profile run's (release rule cublas_workspace_in_peak)."""
    if gpu is None or not release["cublas_workspace_in_peak"]:
        return 0, ""
    size = cublas_workspace(gpu)
    return size, f" + cuBLAS workspace {size / MIB:.0f} MiB (the worker's first matmul)"


# FlashInfer's all-reduce + RMSNorm fusion (compilation/passes/fusion/allreduce_rms_fusion.py AllReduceFusionPass, on
# by default at -O2 from 0.17.0): its largest fused input per compute capability and TP size, in MB (the
# FI_ALLREDUCE_FUSION_MAX_SIZE_MB table, the same for sm90 and sm100 in 0.17.0-0.33.0).
FI_ALLREDUCE_MAX_SIZE_MB = {(9, 0): {2: 64, 4: 2, 8: 0.5}, (10, 0): {2: 64, 4: 32, 8: 1}}
# flashinfer comm/trtllm_ar.py trtllm_create_ipc_workspace_for_all_reduce_fusion (flashinfer-python 0.6.6, the
# release vLLM 0.19.0 pins): three symmetric-memory buffers (cuMem, outside torch) - data tp x tokens x hidden x 2 B,
# flags tp x 256 x 4 B, and three Lamport buffers of tp x tokens x hidden x 2 B (4 B for fp32 models; one buffer at
# most MAX_COMM_SIZE) - each a SymmDeviceMemory (comm/mnnvl.py _get_allocation_prop): its size + the 2,048 B signal
# pad, rounded up to the allocation and then the multicast granularity (even with multicast off). The multicast
# granularity is the driver's (cuMulticastGetGranularity RECOMMENDED), not in any source read here: 512 MiB on
# NVSwitch Hopper, which the logs agree with (2.07 GiB of non-torch at TP 2 on H100, about 2.1 at TP 4).
FI_AR_ALIGN = 2 * MIB
FI_AR_BARRIER_FLAGS = 256
FI_AR_MAX_COMM = 2147483647 & ~(FI_AR_ALIGN - 1)
FI_AR_SIGNAL_PAD = 2048
FI_AR_MULTICAST_GRANULARITY = 512 * MIB
# Multicast needs NVSwitch: PCIe cards and NVLink-bridge pairs have none
FI_AR_NO_MULTICAST = ("H100 PCIe", "H100 NVL")


def _round_up(value: int, step: int) -> int:
    return -(-value // step) * step


def fi_allreduce_workspace(spec: ModelSpec | None, settings, release: Release, gpu: Gpu) -> int:
    """Bytes of the FlashInfer all-reduce fusion workspace one rank allocates when the compiler builds the pass,
    i.e. inside the profile run (enable_allreduce_rms_fusion: TP > 1 on sm90 / sm100 with PP = DP = 1, compiled).
    0 where the release does not build it or its backend's size is not modelled."""
    tp = settings.tensor_parallel_size
    if (spec is None or release.get("fi_allreduce_fusion") != "trtllm" or getattr(settings, "enforce_eager", False)
            or getattr(settings, "pipeline_parallel_size", 1) != 1 or getattr(settings, "data_parallel_size", 1) != 1):
        return 0
    limit_mb = FI_ALLREDUCE_MAX_SIZE_MB.get(gpu.compute_capability, {}).get(tp)
    if limit_mb is None or gpu.short_name in FI_AR_NO_MULTICAST:
        return 0  # SymmDeviceMemory raises "Device does not support multicasting"; vLLM goes on without the fusion
    element = 4 if settings.dtype == "float32" else 2
    tokens = min(int(limit_mb * MIB) // (spec.hidden_size * element), settings.max_num_batched_tokens)
    data = tp * tokens * spec.hidden_size * 2
    lamport = min(tp * tokens * spec.hidden_size * element, FI_AR_MAX_COMM)
    return sum(_round_up(_round_up(size, FI_AR_ALIGN) + FI_AR_SIGNAL_PAD, FI_AR_MULTICAST_GRANULARITY)
               for size in (data, tp * FI_AR_BARRIER_FLAGS * 4, 3 * lamport))


def non_torch(gpu: Gpu, settings: EngineSettings, release: Release, spec: ModelSpec | None = None) -> tuple[int, int, str]:
    """(inside the budget, outside the budget, reason). Outside = what nvidia-smi sees beyond vLLM's numbers.
    `spec`: the model, for the terms sized by it (the FlashInfer all-reduce workspace); None leaves them out."""
    world = settings.tensor_parallel_size * settings.pipeline_parallel_size
    kernels = NON_TORCH_HOPPER_PLUS if gpu.compute_capability >= (9, 0) else NON_TORCH_OTHER
    if gpu.compute_capability >= (9, 0) and release.get("non_torch_after_graph_profile"):
        kernels = NON_TORCH_HOPPER_PLUS_FROM_0_18
    nccl = NCCL_PER_RANK if world > 1 else 0
    era = release["budget_era"]
    if era in ("V0-d", "V1-a"):
        others = GLOBAL_ERA_PER_EXTRA_RANK * (min(world, GPUS_PER_NODE) - 1)
        return CUDA_CONTEXT + kernels + nccl + others, 0, (
            f"{era}: everything non-torch on the GPU counts (CUDA context, kernels, NCCL, other ranks)"
        )
    inside = kernels
    outside = CUDA_CONTEXT
    reason = f"{era}: growth of non-torch memory during profiling (context outside the budget)"
    if nccl:
        if release["nccl_inside_budget"]:
            inside += nccl
        else:
            outside += nccl
    if settings.tensor_parallel_size > 1 and release.get("profile_lazy_nccl_communicator"):
        # the TP device group's own NCCL communicator, made by its first collective: the logits all-gather of the
        # profile's dummy sampler run (calibration.py; NVLS buffers on NVSwitch Hopper+ systems)
        lazy = NCCL_LAZY_COMMUNICATOR_HOPPER_PLUS if gpu.compute_capability >= (9, 0) else NCCL_PER_RANK
        inside += lazy
        reason += f"; + {lazy / GIB:.2f} GiB: the TP group's NCCL communicator, created by the profile's logits all-gather"
    workspace = fi_allreduce_workspace(spec, settings, release, gpu)
    if workspace:
        inside += workspace
        reason += (f"; + {workspace / MIB:.0f} MiB FlashInfer all-reduce fusion workspace (three symmetric-memory "
                   "buffers at the multicast granularity, built with the compiled graph)")
    return inside, outside, reason


def capture_sizes(settings: EngineSettings, release: Release) -> tuple[int, ...]:
    rule = release["capture_sizes"]
    seqs = settings.max_num_seqs
    if rule == "up-to-max-num-seqs":
        sizes = [1, 2, 4] + [8 * i for i in range(1, 33)]  # _BATCH_SIZES_TO_CAPTURE up to 256
        limit = next((size for size in sizes if size >= seqs), sizes[-1])
        return tuple(size for size in sizes if size <= limit)
    if rule == "step-8-to-512":
        top = 512
        sizes = [1, 2, 4] + list(range(8, top + 1, 8))
    elif rule == "step-8-to-twice-max-num-seqs":
        top = min(2 * seqs, 512)
        sizes = [1, 2, 4] + list(range(8, top + 1, 8))
    else:
        top = min(2 * seqs, 512)
        sizes = [1, 2, 4] + list(range(8, min(top, 248) + 1, 8)) + list(range(256, top + 1, 16))
    return tuple(size for size in sizes if size <= max(top, 1) and size <= settings.max_num_batched_tokens)


@dataclass(frozen=True)
class GraphEstimate:
    bytes: int  # the pool capture_model takes ("Graph capturing finished ... took", "(actual)")
    graphs: int
    largest: int
    reason: str
    estimate_bytes: int = -1  # profile_cudagraph_memory's estimate (0.18+), subtracted from 0.20; -1: = bytes

    def __post_init__(self) -> None:
        if self.estimate_bytes < 0:
            object.__setattr__(self, "estimate_bytes", self.bytes)


# profile_cudagraph_memory (gpu_model_runner.py 0.18.0-0.33.0) captures the first two graphs of each mode (largest
# first) and measures free memory around each: total = max over modes of the first capture + sum over modes of
# (graphs of the mode - 1) x max(the second capture, 1 MiB). The two measured captures are calibrated (Hopper+):
# the first as one amount, the second per decoder layer; the pool capture_model then takes is the estimate times a
# fitted ratio (calibration.py names the 0.19 H100 runs).
GRAPH_SECOND_CAPTURE_FLOOR = 1 * MIB


def graph_estimator_modelled(gpu: Gpu | None, settings: EngineSettings, release: Release) -> bool:
    return (gpu is not None and settings.engine == "v1" and gpu.compute_capability >= (9, 0)
            and bool(release["cuda_graph_estimated"]))


def graph_actual_ratio(gpu: Gpu | None, settings: EngineSettings, release: Release) -> float:
    """The pool capture_model takes over profile_cudagraph_memory's estimate, where the estimate is modelled (1.0
    elsewhere: the pool is modelled directly)."""
    return GRAPH_ACTUAL_OVER_ESTIMATE_HOPPER_PLUS if graph_estimator_modelled(gpu, settings, release) else 1.0


def cuda_graphs(num_layers: int, settings: EngineSettings, release: Release, drafter_layers: int = 0,
                gpu: Gpu | None = None) -> GraphEstimate:
    """`drafter_layers`: a speculative drafter's layers captured in the piecewise graphs (same pool, same figure)."""
    if settings.enforce_eager:
        return GraphEstimate(0, 0, 0, "--enforce-eager: no CUDA graphs")
    sizes = capture_sizes(settings, release)
    graphs = len(sizes)
    piecewise = graphs
    full = 0
    if settings.engine == "v1" and "FULL" in release["cuda_graph_modes"]:
        full = len([size for size in sizes if size <= settings.max_num_seqs])  # FULL decode graphs
        graphs += full
    largest = max(sizes) if sizes else 0
    drafter = f" + the drafter's {drafter_layers} layer(s) in the {piecewise} piecewise graphs" if drafter_layers else ""
    if graph_estimator_modelled(gpu, settings, release) and graphs:
        per_layer = GRAPH_SECOND_CAPTURE_PER_LAYER_HOPPER_PLUS
        seconds = [(piecewise, max((num_layers + drafter_layers) * per_layer, GRAPH_SECOND_CAPTURE_FLOOR))]
        if full:
            seconds.append((full, max(num_layers * per_layer, GRAPH_SECOND_CAPTURE_FLOOR)))
        estimate = GRAPH_FIRST_CAPTURE_HOPPER_PLUS + sum((count - 1) * second for count, second in seconds)
        actual = int(estimate * GRAPH_ACTUAL_OVER_ESTIMATE_HOPPER_PLUS)
        modes = " + ".join(f"({count} - 1) x {second / MIB:.2f} MiB" for count, second in seconds)
        return GraphEstimate(actual, graphs, largest,
                             f"{graphs} graphs, largest batch {largest}{drafter}; vLLM's estimate "
                             f"{GRAPH_FIRST_CAPTURE_HOPPER_PLUS / GIB:.2f} GiB first capture + {modes} = "
                             f"{estimate / GIB:.2f} GiB, the pool x {GRAPH_ACTUAL_OVER_ESTIMATE_HOPPER_PLUS:g} of it",
                             estimate)
    if settings.engine == "v0":
        per_layer = GRAPH_BYTES_PER_LAYER["v0"]
    elif "FULL" in release["cuda_graph_modes"]:
        per_layer = GRAPH_BYTES_PER_LAYER["v1-full-and-piecewise"]
    else:
        per_layer = GRAPH_BYTES_PER_LAYER["v1-piecewise"]
    total = graphs * num_layers * per_layer + piecewise * drafter_layers * per_layer
    return GraphEstimate(total, graphs, largest, f"{graphs} graphs, largest batch {largest}{drafter}")
