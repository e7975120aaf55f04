"""The KV step of plan.py: the attention layers one rank holds with their page size (dense, MLA and its
indexer, hybrids, encoder-decoder, the drafter's), V0's Mamba cache, and plan_kv_groups called with the
release's settings."""
from __future__ import annotations

from ...hardware import Gpu
from ...model.dtypes import DTYPE_BYTES
from ...model.spec import ModelSpec
from . import kv_cache, kv_dtypes, kv_groups, kv_layers, kv_mamba, speculative
from .releases import Release, release as release_rules
from .settings import EngineSettings, StartupRefusal, resolve_settings
from .weights import pipeline_layer_counts


def attention_layers(spec: ModelSpec, settings: EngineSettings, release: Release,
                     layer_counts: tuple[int, ...]) -> tuple[list[kv_layers.AttentionLayer], list[tuple[int, ...]]]:
    """The model's attention layers with this rank's page size, and each pipeline stage's layer indices."""
    if spec.hybrid is not None and spec.mixer is not None:
        return _hybrid_layers(spec, settings, release, layer_counts)
    layout = kv_cache.kv_layout(spec, settings.tensor_parallel_size, 1, settings.block_size,
                                settings.kv_cache_dtype_bytes, release, settings.kv_cache_dtype)
    if spec.encoder is not None:
        return _encoder_decoder_layers(spec, settings, release, layout.page_bytes, layer_counts)
    try:
        kinds = (kv_layers.layer_kinds(spec.attention_facts, version=release.version) if spec.attention_facts
                 else [("full", None)] * spec.num_layers)
    except kv_layers.SlidingWindowRefusal as error:
        raise StartupRefusal(str(error)) from None
    full_page = layout.page_bytes
    if spec.full_attention_shape is not None:
        # Gemma 4: full layers of global_head_dim x num_global_key_value_heads (a page of their own size)
        full_head, full_kv = spec.full_attention_shape
        full_page = kv_cache.KvLayout(settings.block_size, max(1, full_kv // settings.tensor_parallel_size), full_head,
                                      settings.kv_cache_dtype_bytes, 1).page_bytes
    # TurboQuant's boundary layers keep a model-dtype page (kv_cache_dtype_skip_layers; kv_dtypes.py)
    boundary = set(kv_dtypes.boundary_layers(settings.kv_cache_dtype, spec.num_layers, spec.hybrid is not None))
    model_page = kv_cache.KvLayout(settings.block_size, layout.kv_heads_per_rank, spec.head_dim,
                                   DTYPE_BYTES[settings.dtype], 1).page_bytes
    layers = []
    for index, (kind, window) in enumerate(kinds[: spec.num_layers]):
        if kind == "mla" and not kv_cache.mla_latent(spec, release):
            kind = "full"  # DeepSeek before MLA backends (or with MLA disabled): per-head K and V
        page = model_page if index in boundary else (full_page if kind == "full" else layout.page_bytes)
        layers.append(kv_layers.AttentionLayer(kind, page, window))
    workers, start = [], 0
    for count in layer_counts:
        workers.append(tuple(range(start, start + count)))
        start += count
    if spec.mla is not None and spec.mla.indexer_heads:
        # DeepSeek-V3.2: each layer's DeepseekV32IndexerCache is its own MLAAttentionSpec (one uint8 vector of
        # index_head_dim + scales per token), grouped with the latent caches
        page = settings.block_size * kv_cache.indexer_entry_bytes(spec.mla.indexer_head_dim)
        count = len(layers)
        layers += [kv_layers.AttentionLayer("mla", page)] * count
        workers = [indices + tuple(count + i for i in indices) for indices in workers]
    # speculative decoding: the drafter's attention layers join the KV-cache spec on the last stage
    draft_layers = speculative.draft_attention_layers(spec, settings, release)
    if draft_layers:
        workers[-1] += tuple(range(len(layers), len(layers) + len(draft_layers)))
        layers.extend(draft_layers)
    return layers, workers


def _hybrid_layers(spec: ModelSpec, settings: EngineSettings, release: Release,
                   layer_counts: tuple[int, ...]) -> tuple[list[kv_layers.AttentionLayer], list[tuple[int, ...]]]:
    """Mamba / linear-attention hybrids: attention layers plus one "mamba" state layer per mixer."""
    from ...model.spec import UnsupportedArchitectureError

    if settings.engine == "v1" and not kv_layers.rule(release.version, "v1_mamba"):
        raise UnsupportedArchitectureError(
            f"{spec.architecture} in the V1 engine before 0.10.1 is not sized "
            f"({kv_layers.rule_source(release.version, 'v1_mamba')})")
    # V0: the Mamba layers' states live in the model's own MambaCacheManager (v0_mamba_cache below),
    # outside the KV blocks; plan_kv_groups counts the attention layers only
    layers, per_layer = kv_mamba.hybrid_attention_layers(
        spec.mixer, settings.tensor_parallel_size, settings.block_size, settings.kv_cache_dtype_bytes,
        settings.dtype)
    workers, start = [], 0
    for count in layer_counts:
        workers.append(tuple(i for entries in per_layer[start:start + count] for i in entries))
        start += count
    return layers, workers


def _encoder_decoder_layers(spec: ModelSpec, settings: EngineSettings, release: Release, page_bytes: int,
                            layer_counts: tuple[int, ...]) -> tuple[list[kv_layers.AttentionLayer], list[tuple[int, ...]]]:
    """Whisper's KV layers. V0 (worker/cache_engine.py + enc_dec_model_runner.py): CacheEngine sizes a block as
    get_num_layers_by_block_type(attention) = hf_text_config.num_hidden_layers layers - WhisperConfig maps
    num_hidden_layers to encoder_layers - and each decoder layer's self- and cross-attention share its layer's
    cache (cross K/V of the encoder tokens sit in the same pool through cross block tables).
    V1 (0.10.2+, gpu_model_runner.get_kv_cache_spec): a FullAttentionSpec per decoder self-attention layer and a
    CrossAttentionSpec per cross-attention layer (kind "cross": max_num_encoder_input_tokens per request); the
    encoder's own attention keeps no cache."""
    if settings.engine == "v0":
        n = spec.encoder.num_layers
        return [kv_layers.AttentionLayer("full", page_bytes)] * n, [tuple(range(n))] * len(layer_counts)
    # CrossAttentionSpec.max_memory_usage_bytes reads max_num_encoder_input_tokens: set to the encoder length
    # (1500) for encoder-decoder models in 0.10.2-0.12, left at max_num_batched_tokens from 0.13 (config/vllm.py)
    tokens = spec.encoder.max_source_positions if release["encdec_encoder_tokens_override"] \
        else settings.max_num_batched_tokens
    layers = [kv_layers.AttentionLayer("full", page_bytes)] * spec.num_layers
    layers += [kv_layers.AttentionLayer("cross", page_bytes, tokens)] * spec.num_layers
    workers, start = [], 0
    for count in layer_counts:
        workers.append(tuple(range(start, start + count))
                       + tuple(range(spec.num_layers + start, spec.num_layers + start + count)))
        start += count
    return layers, workers


def v0_mamba_cache(spec: ModelSpec, settings: EngineSettings, release: Release, first_layer: int,
                   count: int) -> tuple[int, str]:
    """(bytes, reason) of V0's MambaCacheManager on a rank holding layers [first_layer, first_layer + count):
    conv and ssm states [mamba_layers, batch, *shape] in the model dtype (the model passes
    lm_head.weight.dtype, 0.6-0.10), built by the first forward - the profile run - and kept, so it sits in the
    profiled peak and comes out of the KV budget. (0, "") for non-hybrids and V1."""
    if settings.engine != "v0" or spec.hybrid is None or spec.mixer is None:
        return 0, ""
    from .mamba_state import mamba_state, v0_mamba_batch, v0_mamba_cache_bytes

    mamba_layers = sum(1 for kind in spec.hybrid.layers[first_layer:first_layer + count] if "mamba" in kind)
    if not mamba_layers:
        return 0, ""
    state = mamba_state(spec.mixer, settings.tensor_parallel_size, settings.dtype,
                        mamba_cache_dtype=settings.dtype, mamba_ssm_cache_dtype=settings.dtype)
    batch = v0_mamba_batch(settings.max_num_seqs, settings.enforce_eager, release.version)
    cache = v0_mamba_cache_bytes(state, mamba_layers, settings.max_num_seqs, batch)
    shapes = " + ".join("x".join(map(str, shape)) for shape in state.shapes)
    return cache, (f"MambaCacheManager: {mamba_layers} Mamba layers x {batch} request slots (max_num_seqs "
                   f"{settings.max_num_seqs}{', CUDA-graph padded' if batch != settings.max_num_seqs else ''}) x "
                   f"{state.page_bytes} B ({shapes} in {settings.dtype}); allocated by the profile run's forward, "
                   "so vLLM logs it inside the activation peak")


def plan_kv(layers, workers, budgets, settings: EngineSettings, release: Release) -> kv_groups.KvGroupPlan:
    return kv_groups.plan_kv_groups(
        layers, budgets, settings.block_size, settings.max_model_len, settings.max_num_batched_tokens,
        settings.max_num_seqs, release.version, release.engine,
        disable_hybrid_kv_cache_manager=settings.disable_hybrid_kv_cache_manager,
        num_gpu_blocks_override=settings.num_gpu_blocks_override, worker_layers=workers,
        pipeline_parallel_size=settings.pipeline_parallel_size,
        mamba_cache_mode=settings.mamba_cache_mode, mamba_chunk_size=settings.mamba_chunk_size,
        decode_context_parallel_size=settings.decode_context_parallel_size,
    )


def kv_plan_for_budget(spec: ModelSpec, gpu: Gpu, user_settings: dict, version, available_bytes: int) -> kv_groups.KvGroupPlan:
    """Blocks, tokens and concurrency for a given KV budget on every worker (the scorer's logged-budget check)."""
    settings, release = resolve_settings(user_settings, spec, gpu, release_rules, version)
    layer_counts = pipeline_layer_counts(spec.num_layers, settings.pipeline_parallel_size, bool(release["pp_remainder_to_last"]))
    layers, workers = attention_layers(spec, settings, release, layer_counts)
    return plan_kv(layers, workers, [available_bytes] * len(workers), settings, release)
