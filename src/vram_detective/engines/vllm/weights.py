"""The tensors one GPU rank holds, synthesized from a ModelSpec in vLLM's parameter layout.

vLLM fuses q/k/v into qkv_proj and gate/up into gate_up_proj, pads the vocabulary, shares the
embedding with lm_head when tied, and shards by tensor parallelism (column-parallel outputs,
row-parallel inputs, replicated norms and rotary caches) - vllm/model_executor/layers/linear.py,
vocab_parallel_embedding.py, design/vllm-memory.md §4 and §9.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...model.spec import ModelSpec
from ...model.dtypes import DTYPE_BYTES
from ...model.quantization import QuantConfig
from ..common.tensors import TensorGroup
from .dense_tensors import _dense
from .encoder_weights import _audio_encoder, _vision_tower
from .mixer_weights import _gated_attention, _hybrid_attention_layers, _mamba_mixers, _nemotron_h_mlps
from .moe_weights import _moe_layers
from .quant_kernels import KernelLayout, linear_tensors

ROLES = (
    "embedding", "attention", "mlp", "expert", "router", "norm", "lm_head", "quantization metadata",
    "rotary cache", "vocab padding", "position embedding", "lora", "vision", "encoder", "model buffers",
)


@dataclass(frozen=True)
class AllocationPlan:
    """The tensors as torch allocates them, in construction order (for the caching-allocator model):
    tensors before the layers, one layer's tensors (the rotary cache is built after `rope_after`
    of them, in layer 0), the layer count, and the tensors after the layers."""

    before_layers: tuple[int, ...]
    per_layer: tuple[int, ...]
    layers: int
    after_layers: tuple[int, ...]
    rope_after: int
    rope_staging_bytes: int  # the fp32 [max_position, rotary_dim] cat result freed after the cache is built
    some_layers: tuple[int, ...] = ()  # layer tensors only some layers have (MoE vs dense MLP layers)


@dataclass(frozen=True)
class LoraSlots:
    """--enable-lora: every supported layer pre-allocates stacked A/B tensors for max_loras adapters
    (vllm/lora/layers/*.py create_lora_weights); before 0.15 the vocabulary also grows by extra rows."""

    max_loras: int = 1  # LoRAConfig default
    max_rank: int = 16  # LoRAConfig default
    extra_vocab: int = 256  # lora_extra_vocab_size (0 once removed, 0.15)
    vocab_padding: int = 256  # lora_vocab_padding_size on CUDA: lm_head rows padded to it


@dataclass(frozen=True)
class Inventory:
    groups: tuple[TensorGroup, ...]
    parameters: int  # logical parameters held by this rank (weights, not metadata or buffers)
    allocations: AllocationPlan | None = None
    draft_parameters: int = 0  # of `parameters`, the speculative drafter's (its bytes are the "draft" role's)

    @property
    def total_bytes(self) -> int:
        return sum(group.bytes for group in self.groups)

    def bytes_by_role(self) -> dict[str, int]:
        totals = {role: 0 for role in ROLES}
        for group in self.groups:
            totals[group.role] = totals.get(group.role, 0) + group.bytes
        return totals


@dataclass(frozen=True)
class Shard:
    """Where one rank sits: tensor-parallel size, pipeline stage and the layers on it."""

    tensor_parallel_size: int = 1
    pipeline_stage: int = 0
    pipeline_parallel_size: int = 1
    expert_parallel: bool = False  # --enable-expert-parallel: experts split across the TP ranks
    remainder_to_last_stage: bool = False  # vLLM <= 0.7: uneven layers go to the last stage
    data_parallel_size: int = 1  # MoE experts are sharded across DP x TP (fused_moe/config.py)
    # another engine's own split of the layers over the stages (SGLang's get_pp_indices); () = vLLM's
    layer_counts: tuple[int, ...] = ()


    @property
    def is_first_stage(self) -> bool:
        return self.pipeline_stage == 0

    @property
    def is_last_stage(self) -> bool:
        return self.pipeline_stage == self.pipeline_parallel_size - 1


def pipeline_layer_counts(num_layers: int, stages: int, remainder_to_last: bool = False) -> tuple[int, ...]:
    """vLLM's get_pp_indices (vllm/distributed/utils.py): an even split; the remainder goes to the
    stages before the last one (partitions[-2], [-3], ... get +1) from 0.8.0, and all of it to the
    last stage before (0.7.x: end_layer = num_hidden_layers on the last rank)."""
    counts = [num_layers // stages] * stages
    if remainder_to_last:
        counts[-1] += num_layers % stages
        return tuple(counts)
    for extra in range(num_layers % stages):
        counts[-(extra + 2) % stages] += 1
    return tuple(counts)


# MRotaryEmbedding (rotary_embedding.py / rotary_embedding/mrope.py, every release with Qwen2-VL) builds
# cache_max_position_num = max_position_embeddings x 4 rows; 0.32.0 passes mrope_positions_factor, 1 for
# Qwen3-VL / Qwen3.5 unless video pruning is on (qwen3_vl.py mrope_positions_factor)
MROPE_POSITIONS_FACTOR = 4


def rotary_caches(spec: ModelSpec, mrope_positions_factor: int = MROPE_POSITIONS_FACTOR) -> tuple[tuple[str, int, int], ...]:
    """(label, rows, rotary_dim) of each distinct cos/sin cache vLLM builds (get_rope caches by key)."""
    if spec.rotary_dim is None:
        return ()
    scaling = spec.rope_scaling
    rows = spec.max_position_embeddings * (mrope_positions_factor if spec.mrope else 1)
    label = "rotary_emb.cos_sin_cache"
    if scaling is not None:
        original = scaling.original_max_position or spec.max_position_embeddings
        if scaling.kind in ("linear", "dynamic"):
            # LinearScaling / DynamicNTKScaling build max_position * factor rows
            rows = int(spec.max_position_embeddings * scaling.factor)
        elif scaling.kind == "yarn":
            rows = int(original * scaling.factor)  # YaRNScalingRotaryEmbedding: original * factor
        elif scaling.kind in ("longrope", "su"):
            # Phi3LongRoPEScaledRotaryEmbedding keeps a short and a long cache side by side
            rows = original + spec.max_position_embeddings
    caches = [(label, rows, spec.rotary_dim)]
    if spec.family == "gemma4" and spec.full_attention_shape is not None:
        # Gemma4RotaryEmbedding builds the full layers' ("proportional") table head_size wide, whatever the
        # partial rotary factor: a second [max_position, global_head_dim] cache (gemma4_rope.py)
        caches.append(("rotary_emb_global.cos_sin_cache", spec.max_position_embeddings, spec.full_attention_shape[0]))
    if spec.family == "gemma3":
        # Gemma 3: local layers use their own (unscaled) rope - a second cache of max_position rows
        caches.append(("rotary_emb_local.cos_sin_cache", spec.max_position_embeddings, spec.rotary_dim))
    return tuple(caches)


def build_inventory(
    spec: ModelSpec,
    dtype: str,
    shard: Shard = Shard(),
    quant: QuantConfig | None = None,
    kernel: KernelLayout | None = None,
    lora: LoraSlots | None = None,
    attention_buffers: tuple[str, ...] = (),
    mrope_positions_factor: int = MROPE_POSITIONS_FACTOR,
    batched_tokens: int = 0,
    mla_absorbed: bool = False,
) -> Inventory:
    """The tensor groups one rank holds after vLLM's weight processing. `batched_tokens` (max_num_batched_tokens)
    sizes buffers the model allocates at construction (Qwen3-VL's deepstack input buffers); 0 leaves them out.
    `mla_absorbed`: V0 0.7.1-0.7.3 MLA keeps matrix-absorbed copies of the attention weights (_mla_absorbed).
    The parts are added in vLLM's construction order (the allocator model replays it)."""
    rank = _Rank(spec, dtype, shard, quant, kernel, lora)
    if spec.mla is not None and spec.mla.indexer_topk and batched_tokens:
        # DeepseekV2Model.__init__ (V3.2): topk_indices_buffer int32 [max_num_batched_tokens, index_topk] on the GPU
        rank.add(_dense("topk_indices_buffer[buffer]", 1, (batched_tokens, spec.mla.indexer_topk), "int32",
                        "model buffers"), rank.before)
    if shard.is_first_stage:
        _first_stage_inputs(rank, batched_tokens)
    attention = _mla_layers(rank, mla_absorbed) if spec.mla is not None else _attention_layers(rank)
    if spec.encoder is not None:
        _cross_attention(rank)
    rank.rope_after = len(rank.per_layer)  # the attention module builds its rotary cache after its linears
    _qk_norms(rank, attention)
    _attention_extras(rank, attention_buffers)
    _mlp_layers(rank)
    norm_tensors = spec.norms_per_layer * (2 if spec.norm_bias else 1)
    rank.add(_dense(f"{rank.layer_pattern}.*_layernorm.weight", rank.layers * norm_tensors, (spec.hidden_size,), dtype,
                    "norm"), rank.per_layer, norm_tensors)
    rank.parameters += norm_tensors * spec.hidden_size * rank.layers
    if shard.is_last_stage:
        _last_stage_outputs(rank)
    if lora is not None:
        # adapter slots are buffers, not model parameters
        _lora_slots(spec, shard, lora, dtype, rank.layers, rank.layer_pattern, rank.groups, rank.per_layer,
                    first_stage=shard.is_first_stage, last_stage=shard.is_last_stage)
    staging = 0
    for index, (label, rows, width) in enumerate(rotary_caches(spec, mrope_positions_factor)):
        rank.groups.append(_dense(label, 1, (rows, width), spec.rotary_dtype or dtype, "rotary cache"))
        if index == 0:
            staging = rows * width * 4  # _compute_cos_sin_cache builds it in float32 before .to(dtype)
    allocations = AllocationPlan(tuple(rank.before), tuple(rank.per_layer), rank.layers, tuple(rank.after),
                                 rank.rope_after, staging, tuple(rank.some_layers))
    return Inventory(groups=tuple(rank.groups), parameters=rank.parameters, allocations=allocations)


class _Rank:
    """One rank's inventory while it is built: the tensor groups, the parameters counted so far and the
    allocation order (before the layers, in every layer, in some layers only, after the layers)."""

    def __init__(self, spec: ModelSpec, dtype: str, shard: Shard, quant: QuantConfig | None,
                 kernel: KernelLayout | None, lora: LoraSlots | None):
        self.spec, self.dtype, self.shard, self.quant, self.kernel, self.lora = spec, dtype, shard, quant, kernel, lora
        self.tp = shard.tensor_parallel_size
        counts = shard.layer_counts or pipeline_layer_counts(spec.num_layers, shard.pipeline_parallel_size,
                                                             shard.remainder_to_last_stage)
        self.layers = counts[shard.pipeline_stage]
        self.first_layer = sum(counts[: shard.pipeline_stage])
        self.layer_pattern = f"model.layers.{{{self.first_layer}..{self.first_layer + self.layers - 1}}}"
        self.groups: list[TensorGroup] = []
        self.parameters = 0
        self.before: list[int] = []
        self.per_layer: list[int] = []
        self.some_layers: list[int] = []
        self.after: list[int] = []
        self.rope_after = 0

    def add(self, group: TensorGroup, allocations: list[int], times: int = 1) -> None:
        """A group whose tensors are allocated `times` times in `allocations` (buffers: no parameters)."""
        self.groups.append(group)
        allocations.extend([group.bytes_each] * times)

    def linear(self, name: str, in_features: int, out_features: int, shards: int, role: str, bias: bool,
               row_parallel: bool, full_in: int, count: int | None = None, pattern: str | None = None,
               allocations: list[int] | None = None, quantizable: bool = True) -> None:
        """A (possibly quantized) linear layer on `count` layers (default: every layer of the stage)."""
        count = self.layers if count is None else count
        pattern = self.layer_pattern if pattern is None else pattern
        if allocations is None:
            allocations = self.per_layer if count == self.layers else self.some_layers
        repeat = 1 if allocations is self.per_layer else count
        if not count:
            return
        self.parameters += in_features * out_features * count
        module = name.rsplit(".", 1)[-1]
        quant, dtype = self.quant, self.dtype
        if quantizable and quant is not None and quant.converts(module):
            for tensor in linear_tensors(quant, self.kernel, in_features, out_features, shards, dtype, full_in):
                tensor_role = role if tensor.role == "weight" else "quantization metadata"
                self.groups.append(TensorGroup(f"{pattern}.{name}.{tensor.suffix}", count, tensor.shape,
                                               tensor.dtype, tensor.bytes, tensor_role))
                allocations += [tensor.bytes] * repeat
        else:
            self.add(_dense(f"{pattern}.{name}.weight", count, (out_features, in_features), dtype, role), allocations,
                     repeat)
        if bias:
            # row-parallel biases are replicated (added once after the all-reduce)
            width = out_features if not row_parallel else self.spec.hidden_size
            self.add(_dense(f"{pattern}.{name}.bias", count, (width,), dtype, role), allocations, repeat)
            self.parameters += width * count

    def vocab_table(self, name: str, role: str, allocations: list[int]) -> None:
        # VocabParallelEmbedding pads to 64; with LoRA the lm_head pads to lora_vocab_padding_size and
        # both tables carry the LoRA extra-vocabulary rows (llama.py <= 0.11)
        spec, lora, hidden = self.spec, self.lora, self.spec.hidden_size
        padding = lora.vocab_padding if lora and name == "lm_head" else 64
        shards = self.tp
        if spec.encoder is not None:
            padding, shards = 1, 1  # Whisper: a plain nn.Embedding, unpadded and replicated (whisper.py)
        extra_vocab = lora.extra_vocab if lora else 0
        padded = -(-(spec.vocab_size + extra_vocab) // padding) * padding
        vocab_rows = padded // shards
        # the padding rows sit at the end of the last shard; per rank they are shown as an even share
        padding_rows = (padded - spec.vocab_size) // shards
        real_rows = vocab_rows - padding_rows
        allocations.append(vocab_rows * hidden * DTYPE_BYTES[self.dtype])  # one tensor, padding included
        self.groups.append(_dense(f"{name}.weight", 1, (real_rows, hidden), self.dtype, role))
        if padding_rows:
            self.groups.append(_dense(f"{name}.weight[padding rows]", 1, (padding_rows, hidden), self.dtype,
                                      "vocab padding"))
        self.parameters += real_rows * hidden


@dataclass(frozen=True)
class _AttentionLayers:
    """Where this stage's (sliding / default) attention layers are, and how many Gemma 4 full-attention layers."""

    count: int
    pattern: str
    full_count: int = 0


def _first_stage_inputs(rank: _Rank, batched_tokens: int) -> None:
    """The first stage: vision tower, audio encoder, token embedding and learned positions."""
    spec, dtype, hidden = rank.spec, rank.dtype, rank.spec.hidden_size
    if spec.vision is not None:
        rank.parameters += _vision_tower(spec, rank.tp, rank.quant, rank.kernel, dtype, rank.groups, rank.before)
        if spec.vision.deepstack_layers and batched_tokens:
            # Qwen3VLForConditionalGeneration.__init__: deepstack_input_embeds, one zeros [max_num_batched_tokens,
            # text hidden] tensor per deepstack layer, on the GPU in the model dtype (qwen3_vl.py 0.11.0-0.33.0)
            rank.add(_dense("deepstack_input_embeds[buffer]", spec.vision.deepstack_layers, (batched_tokens, hidden),
                            dtype, "model buffers"), rank.before, spec.vision.deepstack_layers)
    if spec.encoder is not None:
        rank.parameters += _audio_encoder(spec, rank.tp, dtype, rank.groups, rank.before)
    rank.vocab_table("model.embed_tokens", "embedding", rank.before)
    if spec.learned_positions:
        rank.add(_dense("model.decoder.embed_positions.weight", 1, (spec.learned_positions, hidden), dtype,
                        "position embedding"), rank.before)
        rank.parameters += spec.learned_positions * hidden


def _mla_layers(rank: _Rank, mla_absorbed: bool) -> _AttentionLayers:
    spec = rank.spec
    _mla_attention(spec, rank.tp, rank.linear, rank.groups, rank.per_layer, rank.layers, rank.layer_pattern, rank.dtype)
    rank.parameters += _mla_norm_parameters(spec) * rank.layers
    if mla_absorbed:
        _mla_absorbed(spec, rank.tp, rank.quant, rank.dtype, rank.groups, rank.per_layer, rank.layers,
                      rank.layer_pattern)
    return _AttentionLayers(rank.layers, rank.layer_pattern)


def _attention_layers(rank: _Rank) -> _AttentionLayers:
    """qkv_proj / o_proj of the attention layers; hybrids (spec.hybrid) have attention on its own layers only
    and the Mamba mixers on the others."""
    spec, hidden = rank.spec, rank.spec.hidden_size
    count, pattern = _hybrid_attention_layers(spec, rank.first_layer, rank.layers, rank.layer_pattern)
    full_count = 0
    if spec.full_attention_shape is not None:
        full_count = _gemma4_full_attention(rank)
        count -= full_count
        pattern = "model.layers.{sliding}"
    q_rank = spec.num_attention_heads // rank.tp
    kv_rank = max(1, spec.num_kv_heads // rank.tp)  # KV heads replicated when tp > num_kv_heads
    qkv_out = (q_rank + 2 * kv_rank) * spec.head_dim
    if _gated_attention(spec):
        qkv_out += q_rank * spec.head_dim  # Qwen3NextAttention: q and its output gate in one projection
    rank.linear("self_attn.qkv_proj", hidden, qkv_out, 3, "attention", spec.qkv_bias, False, hidden, count=count,
                pattern=pattern)
    rank.linear("self_attn.o_proj", q_rank * spec.head_dim, hidden, 1, "attention", spec.o_bias, True, spec.q_size,
                count=count, pattern=pattern)
    if spec.hybrid is not None:
        # (called first: `linear` adds to `parameters` itself, which `+=` would overwrite)
        mixer_parameters = _mamba_mixers(spec, rank.tp, rank.dtype, rank.first_layer, rank.layers, rank.linear,
                                         rank.groups, rank.some_layers)
        rank.parameters += mixer_parameters
    return _AttentionLayers(count, pattern, full_count)


def _gemma4_full_attention(rank: _Rank) -> int:
    """Gemma 4: the full-attention layers have their own head_dim and KV heads (gemma4.py Gemma4Attention);
    returns how many are on this stage."""
    spec, hidden = rank.spec, rank.spec.hidden_size
    full_count = sum(1 for i in spec.full_attention_layers if rank.first_layer <= i < rank.first_layer + rank.layers)
    full_head, full_kv = spec.full_attention_shape
    q_rank, full_kv_rank = spec.num_attention_heads // rank.tp, max(1, full_kv // rank.tp)
    rank.linear("self_attn.qkv_proj", hidden, (q_rank + 2 * full_kv_rank) * full_head, 3, "attention", spec.qkv_bias,
                False, hidden, count=full_count, pattern="model.layers.{full}")
    rank.linear("self_attn.o_proj", q_rank * full_head, hidden, 1, "attention", spec.o_bias, True,
                spec.num_attention_heads * full_head, count=full_count, pattern="model.layers.{full}")
    return full_count


def _cross_attention(rank: _Rank) -> None:
    """Whisper decoder layers' cross-attention (WhisperCrossAttention): q_proj (column), kv_proj (fused K/V
    over the encoder states, QKVParallelLinear with no q heads), out_proj (row), all with biases."""
    spec, hidden = rank.spec, rank.spec.hidden_size
    q_rank, kv_rank = spec.num_attention_heads // rank.tp, max(1, spec.num_kv_heads // rank.tp)
    rank.linear("encoder_attn.q_proj", hidden, q_rank * spec.head_dim, 1, "attention", True, False, hidden)
    rank.linear("encoder_attn.kv_proj", hidden, 2 * kv_rank * spec.head_dim, 2, "attention", True, False, hidden)
    rank.linear("encoder_attn.out_proj", q_rank * spec.head_dim, hidden, 1, "attention", True, True, spec.q_size)


def _qk_norms(rank: _Rank, attention: _AttentionLayers) -> None:
    spec, dtype, head = rank.spec, rank.dtype, rank.spec.head_dim
    if not spec.qk_norm:
        return
    if spec.hybrid is not None and spec.mla is None:
        # hybrids (Qwen3-Next): q/k norms on the attention layers only
        if attention.count:
            for which in ("q", "k"):
                rank.groups.append(_dense(f"{attention.pattern}.self_attn.{which}_norm.weight", attention.count,
                                          (head,), dtype, "norm"))
            rank.some_layers.extend([head * DTYPE_BYTES[dtype]] * 2 * attention.count)
            rank.parameters += 2 * head * attention.count
    elif attention.full_count:
        # Gemma 4: q/k norms of each layer type's head_dim
        full_head = spec.full_attention_shape[0]
        for pattern, count, width in (("model.layers.{sliding}", rank.layers - attention.full_count, head),
                                      ("model.layers.{full}", attention.full_count, full_head)):
            if count:
                rank.groups.append(_dense(f"{pattern}.self_attn.{{q,k}}_norm.weight", 2 * count, (width,), dtype,
                                          "norm"))
                rank.some_layers.extend([width * DTYPE_BYTES[dtype]] * 2 * count)
                rank.parameters += 2 * width * count
    else:
        rank.per_layer += [head * DTYPE_BYTES[dtype]] * 2
        for which in ("q", "k"):
            rank.groups.append(_dense(f"{rank.layer_pattern}.self_attn.{which}_norm.weight", rank.layers, (head,),
                                      dtype, "norm"))
        rank.parameters += 2 * head * rank.layers


def _attention_extras(rank: _Rank, attention_buffers: tuple[str, ...]) -> None:
    if attention_buffers:
        # the attention layer's own fp32 scalars (_k_scale, _v_scale, ...: attention/layer.py), one
        # allocation each on the GPU whatever the checkpoint
        rank.groups.append(_dense(f"{rank.layer_pattern}.self_attn.attn.{{{','.join(attention_buffers)}}}",
                                  rank.layers * len(attention_buffers), (), "float32", "attention"))
        rank.per_layer.extend([4] * len(attention_buffers))
    if rank.spec.attention_sinks:
        # gpt-oss: one learned sink logit per attention head on this rank (bf16; gpt_oss.py)
        q_rank = rank.spec.num_attention_heads // rank.tp
        rank.add(_dense(f"{rank.layer_pattern}.self_attn.sinks", rank.layers, (q_rank,), rank.dtype, "attention"),
                 rank.per_layer)
        rank.parameters += q_rank * rank.layers


def _mlp_layers(rank: _Rank) -> None:
    """The MLP of every layer: Nemotron-H mixers, MoE (with the dense layers of an MoE model), gated or plain."""
    spec, hidden = rank.spec, rank.spec.hidden_size
    intermediate_rank = spec.intermediate_size // rank.tp
    if spec.family == "nemotron_h":
        # one mixer per layer: relu2 MLPs on "-" layers, non-gated MoE on "E" layers, nothing on the others
        # (called first: `linear` adds to `parameters` itself, which `+=` would overwrite)
        mlp_parameters = _nemotron_h_mlps(spec, rank.shard, rank.quant, rank.kernel, rank.dtype, rank.first_layer,
                                          rank.layers, rank.groups, rank.some_layers, rank.linear)
        rank.parameters += mlp_parameters
    elif spec.moe is not None:
        _moe_and_dense_layers(rank)
    elif spec.gated_mlp:
        rank.linear("mlp.gate_up_proj", hidden, 2 * intermediate_rank, 2, "mlp", spec.mlp_bias, False, hidden)
        rank.linear("mlp.down_proj", intermediate_rank, hidden, 1, "mlp", spec.mlp_bias, True, spec.intermediate_size)
    else:
        rank.linear("fc1", hidden, intermediate_rank, 1, "mlp", spec.mlp_bias, False, hidden)
        rank.linear("fc2", intermediate_rank, hidden, 1, "mlp", spec.mlp_bias, True, spec.intermediate_size)


def _moe_and_dense_layers(rank: _Rank) -> None:
    spec, hidden = rank.spec, rank.spec.hidden_size
    intermediate_rank = spec.intermediate_size // rank.tp
    moe_layers = [i for i in range(rank.first_layer, rank.first_layer + rank.layers) if i not in spec.moe.dense_layers]
    dense_count = rank.layers - len(moe_layers)
    moe_allocations = rank.per_layer if len(moe_layers) == rank.layers else []
    # (called first: the shared expert's `linear` calls add to `parameters`, which `+=` would overwrite)
    moe_parameters = _moe_layers(spec, rank.shard, rank.quant, rank.kernel, rank.dtype, len(moe_layers),
                                 rank.layer_pattern, rank.groups, moe_allocations, rank.linear)
    rank.parameters += moe_parameters
    if moe_allocations is not rank.per_layer:
        rank.some_layers.extend(moe_allocations * len(moe_layers))
    # dense MLP layers of an MoE model (DeepSeek's first_k_dense_replace) come first: allocate them up front
    rank.linear("mlp.gate_up_proj", hidden, 2 * intermediate_rank, 2, "mlp", False, False, hidden,
                count=dense_count, pattern="model.layers.{dense}")
    rank.linear("mlp.down_proj", intermediate_rank, hidden, 1, "mlp", False, True, spec.intermediate_size,
                count=dense_count, pattern="model.layers.{dense}")


def _last_stage_outputs(rank: _Rank) -> None:
    """The final norm and lm_head. Tied: lm_head is the embedding tensor - counted once, unless PP puts them on
    two stages."""
    spec, hidden, quant = rank.spec, rank.spec.hidden_size, rank.quant
    final_norms = 2 if spec.norm_bias else 1
    rank.add(_dense("model.norm.weight", final_norms, (hidden,), rank.dtype, "norm"), rank.after, final_norms)
    rank.parameters += final_norms * hidden
    if spec.tie_word_embeddings and rank.shard.is_first_stage:
        return
    if quant is not None and quant.converts("lm_head"):
        vocab_rows = spec.padded_vocab_size // rank.tp
        for tensor in linear_tensors(quant, rank.kernel, hidden, vocab_rows, 1, rank.dtype, hidden):
            rank.groups.append(TensorGroup(f"lm_head.{tensor.suffix}", 1, tensor.shape, tensor.dtype, tensor.bytes,
                                           "lm_head" if tensor.role == "weight" else "quantization metadata"))
            rank.after.append(tensor.bytes)
        rank.parameters += vocab_rows * hidden
    else:
        rank.vocab_table("lm_head", "lm_head", rank.after)


def _mla_attention(spec: ModelSpec, tp: int, linear, groups: list, per_layer: list, layers: int, pattern: str,
                   dtype: str) -> None:
    """DeepSeek V2/V3 attention (deepseek_v2.py): q via a low-rank pair (q_a replicated, q_b column-parallel)
    or a plain q_proj; kv_a_proj_with_mqa (replicated) to the latent + rope key; kv_b_proj (column-parallel)
    back to per-head nope keys and values; o_proj row-parallel; norms on the q and kv latents."""
    mla = spec.mla
    heads = spec.num_attention_heads // tp
    hidden = spec.hidden_size
    qk_head = mla.qk_nope_head_dim + mla.qk_rope_head_dim
    if mla.q_lora_rank:
        linear("self_attn.q_a_proj", hidden, mla.q_lora_rank, 1, "attention", False, False, hidden)
        groups.append(_dense(f"{pattern}.self_attn.q_a_layernorm.weight", layers, (mla.q_lora_rank,), dtype, "norm"))
        per_layer.append(groups[-1].bytes_each)
        linear("self_attn.q_b_proj", mla.q_lora_rank, heads * qk_head, 1, "attention", False, False, mla.q_lora_rank)
    else:
        linear("self_attn.q_proj", hidden, heads * qk_head, 1, "attention", False, False, hidden)
    linear("self_attn.kv_a_proj_with_mqa", hidden, mla.latent_dim, 1, "attention", False, False, hidden)
    groups.append(_dense(f"{pattern}.self_attn.kv_a_layernorm.weight", layers, (mla.kv_lora_rank,), dtype, "norm"))
    per_layer.append(groups[-1].bytes_each)
    linear("self_attn.kv_b_proj", mla.kv_lora_rank, heads * (mla.qk_nope_head_dim + mla.v_head_dim), 1, "attention",
           False, False, mla.kv_lora_rank)
    linear("self_attn.o_proj", heads * mla.v_head_dim, hidden, 1, "attention", False, True,
           spec.num_attention_heads * mla.v_head_dim)
    if mla.indexer_heads:
        # DeepSeek-V3.2 Indexer (deepseek_v2.py 0.11.0+), replicated: wq_b [heads x dim, q_lora] and wk [dim, hidden]
        # with the model's quant config, a LayerNorm k_norm (weight + bias), weights_proj [heads, hidden] unquantized
        # with ReplicatedLinear's default bias
        width = mla.indexer_heads * mla.indexer_head_dim
        linear("self_attn.indexer.wq_b", mla.q_lora_rank or hidden, width, 1, "attention", False, False,
               mla.q_lora_rank or hidden)
        linear("self_attn.indexer.wk", hidden, mla.indexer_head_dim, 1, "attention", False, False, hidden)
        linear("self_attn.indexer.weights_proj", hidden, mla.indexer_heads, 1, "attention", True, False, hidden,
               quantizable=False)
        groups.append(_dense(f"{pattern}.self_attn.indexer.k_norm.{{weight,bias}}", 2 * layers,
                             (mla.indexer_head_dim,), dtype, "norm"))
        per_layer.extend([groups[-1].bytes_each] * 2)


def _mla_absorbed(spec: ModelSpec, tp: int, quant: QuantConfig | None, dtype: str, groups: list, per_layer: list,
                  layers: int, pattern: str) -> None:
    """V0 MLA with VLLM_MLA_PERFORM_MATRIX_ABSORPTION (default on, 0.7.1-0.7.3; attention/backends/mla/utils.py
    process_weights_after_loading): per layer it keeps W_QR [q_in, heads x rope] (a copy, act dtype), W_Q_UK
    [q_in, heads x kv_lora] and W_UV_O [heads x kv_lora, hidden] (requantized to fp8 with block scales for fp8
    weights), beside the original projections; a quantized kv_b_proj is dequantized (eye matmul) and the copy stays
    alive through the W_UK / W_UV views. 0.8.0 dropped the absorption."""
    mla = spec.mla
    heads = spec.num_attention_heads // tp
    q_in = mla.q_lora_rank or spec.hidden_size
    fp8 = quant is not None and quant.method in ("fp8", "modelopt-fp8", "compressed-tensors") and quant.bits == 8 \
        and quant.converts("kv_b_proj")
    absorbed = ((q_in, heads * mla.kv_lora_rank), (heads * mla.kv_lora_rank, spec.hidden_size))
    groups.append(_dense(f"{pattern}.self_attn.impl.W_QR[absorbed]", layers, (q_in, heads * mla.qk_rope_head_dim),
                         dtype, "attention"))
    per_layer.append(groups[-1].bytes_each)
    for name, shape in zip(("W_Q_UK", "W_UV_O"), absorbed):
        if fp8:
            groups.append(_dense(f"{pattern}.self_attn.impl.{name}[absorbed, fp8]", layers, shape, "float8_e4m3fn",
                                 "attention"))
            per_layer.append(groups[-1].bytes_each)
            block = quant.weight_block or (128, 128)
            scales = (-(-shape[0] // block[0]), -(-shape[1] // block[1]))
            groups.append(_dense(f"{pattern}.self_attn.impl.{name}_scales", layers, scales, "float32",
                                 "quantization metadata"))
        else:
            groups.append(_dense(f"{pattern}.self_attn.impl.{name}[absorbed]", layers, shape, dtype, "attention"))
        per_layer.append(groups[-1].bytes_each)
    if quant is not None and quant.converts("kv_b_proj"):
        groups.append(_dense(f"{pattern}.self_attn.kv_b_proj[dequantized copy kept by W_UK / W_UV]", layers,
                             (mla.kv_lora_rank, heads * (mla.qk_nope_head_dim + mla.v_head_dim)), dtype, "attention"))
        per_layer.append(groups[-1].bytes_each)


def _mla_norm_parameters(spec: ModelSpec) -> int:
    # q_a / kv_a layernorms (+ DeepSeek-V3.2's indexer k_norm, weight and bias)
    return (spec.mla.q_lora_rank or 0) + spec.mla.kv_lora_rank + 2 * spec.mla.indexer_head_dim


def _lora_slots(spec: ModelSpec, shard: Shard, lora: LoraSlots, dtype: str, layers: int, pattern: str,
                groups: list, per_layer: list, first_stage: bool, last_stage: bool) -> None:
    """Stacked LoRA A/B tensors: A [max_loras, 1, rank, in] per output slice, B [max_loras, 1, out, rank]
    (base_linear.py; column-parallel shards B's output, row-parallel shards A's input)."""
    tp = shard.tensor_parallel_size
    loras, rank, hidden = lora.max_loras, lora.max_rank, spec.hidden_size
    if spec.moe is not None or spec.mla is not None:
        return  # LoRA on fused MoE / MLA layers is not sized yet
    q = spec.num_attention_heads // tp * spec.head_dim
    kv = max(1, spec.num_kv_heads // tp) * spec.head_dim
    intermediate = spec.intermediate_size // tp
    modules = [("self_attn.qkv_proj", hidden, (q, kv, kv)), ("self_attn.o_proj", q, (hidden,))]
    if spec.gated_mlp:
        modules += [("mlp.gate_up_proj", hidden, (intermediate, intermediate)), ("mlp.down_proj", intermediate, (hidden,))]
    else:
        modules += [("fc1", hidden, (intermediate,)), ("fc2", intermediate, (hidden,))]
    for name, in_features, slices in modules:
        groups.append(_dense(f"{pattern}.{name}.lora_a_stacked", layers * len(slices), (loras, 1, rank, in_features), dtype, "lora"))
        per_layer += [groups[-1].bytes_each] * len(slices)
        for width in slices:
            per_layer.append(loras * width * rank * DTYPE_BYTES[dtype])
        groups.append(TensorGroup(f"{pattern}.{name}.lora_b_stacked", layers, (loras, 1, sum(slices), rank), dtype,
                                  loras * sum(slices) * rank * DTYPE_BYTES[dtype], "lora"))
    if first_stage:
        # VocabParallelEmbeddingWithLoRA: extra-vocab embeddings, A over the whole vocabulary, B [H, rank]
        if lora.extra_vocab:
            groups.append(_dense("model.embed_tokens.embeddings_tensors", 1, (loras, lora.extra_vocab, hidden), dtype, "lora"))
        groups.append(_dense("model.embed_tokens.lora_a_stacked", 1, (loras, spec.vocab_size + lora.extra_vocab, rank), dtype, "lora"))
        groups.append(_dense("model.embed_tokens.lora_b_stacked", 1, (loras, 1, hidden, rank), dtype, "lora"))
    if last_stage:
        # LogitsProcessorWithLoRA: B padded to lora_vocab_padding_size rows (logits_processor.py)
        padded = -(-spec.vocab_size // lora.vocab_padding) * lora.vocab_padding
        groups.append(_dense("lm_head.lora_a_stacked", 1, (loras, 1, rank, hidden), dtype, "lora"))
        groups.append(_dense("lm_head.lora_b_stacked", 1, (loras, 1, padded, rank), dtype, "lora"))
        if lora.extra_vocab:
            groups.append(_dense("lm_head.embeddings_tensors", 1, (loras, lora.extra_vocab, hidden), dtype, "lora"))


def checkpoint_vs_gpu(table, spec, dtype: str | None = None, quant=None, kernel=None):
    """The report for a ModelSpec: builds the tp=1 inventory in `dtype` (default the spec's) with the
    quantization plan's config and kernel layout (weights_plan.plan_weights), then reconciles."""
    from ...model.checkpoint import reconcile

    dtype = dtype or spec.torch_dtype
    inventory = build_inventory(spec, dtype, quant=quant, kernel=kernel)
    return reconcile(table, inventory, spec.tie_word_embeddings, dtype)
