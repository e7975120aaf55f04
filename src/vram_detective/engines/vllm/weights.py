"""The tensors one GPU rank holds, synthesized from a ModelSpec in vLLM's parameter layout.

vLLM fuses q/k/v into qkv_proj and gate/up into gate_up_proj, pads the vocabulary, shares the
embedding with lm_head when tied, and shards by tensor parallelism (column-parallel outputs,
row-parallel inputs, replicated norms and rotary caches) - vllm/model_executor/layers/linear.py,
vocab_parallel_embedding.py, design/vllm-memory.md §4 and §9.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...model.config import ModelSpec
from ...model.dtypes import DTYPE_BYTES
from ...model.quantization import QuantConfig
from ..common.tensors import TensorGroup
from .quant_kernels import KernelLayout, expert_tensors, linear_tensors

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


def _dense(name: str, count: int, shape: tuple[int, ...], dtype: str, role: str) -> TensorGroup:
    size = 1
    for dim in shape:
        size *= dim
    return TensorGroup(name, count, shape, dtype, size * DTYPE_BYTES[dtype], role)


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
        counts = pipeline_layer_counts(spec.num_layers, shard.pipeline_parallel_size, shard.remainder_to_last_stage)
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


def _hybrid_attention_layers(spec: ModelSpec, first_layer: int, layers: int, pattern: str) -> tuple[int, str]:
    """(attention layers on this stage, their name pattern): all of them unless the model is a hybrid."""
    if spec.hybrid is None:
        return layers, pattern
    mine = [i for i in range(first_layer, first_layer + layers) if "attention" in spec.hybrid.layers[i]]
    return len(mine), "model.layers.{" + ",".join(map(str, mine)) + "}"


def _mamba_mixers(spec: ModelSpec, tp: int, dtype: str, first_layer: int, layers: int, linear, groups: list,
                  allocations: list) -> int:
    """Mamba2 mixer weights of a hybrid's Mamba layers on one rank (mamba_mixer2.py MambaMixer2, 0.10-0.18):
    in_proj [hidden -> (2 x intermediate + 2 x groups' x state + heads) / tp], conv1d [conv_dim / tp, kernel]
    (+ bias), A (float32), D, dt_bias [heads / tp], gated RMSNorm [intermediate / tp], out_proj
    [intermediate / tp -> hidden]; groups' = n_groups extended to a multiple of tp when it does not divide.
    Returns the parameter count."""
    mixer = spec.mixer
    mine = [i for i in range(first_layer, first_layer + layers) if "mamba" in spec.hybrid.layers[i]]
    count = len(mine)
    if not count:
        return 0
    if spec.hybrid.mixer == "gated_delta_net":
        return _gated_delta_net(spec, tp, dtype, mine, linear, groups, allocations)
    if spec.hybrid.mixer == "mamba1":
        return _mamba1(spec, tp, dtype, mine, linear, groups, allocations)
    if spec.hybrid.mixer == "linear_attention":
        return _lightning_attention(spec, tp, dtype, mine, linear, groups, allocations)
    # NemotronHMambaDecoderLayer names the module "mixer" (MambaMixer2 of mamba_num_heads x mamba_head_dim)
    module = "mixer" if spec.family == "nemotron_h" else "mamba"
    pattern = "model.layers.{" + ",".join(map(str, mine)) + "}." + module
    hidden = spec.hidden_size
    heads, state, n_groups, kernel = mixer.heads, mixer.d_state, mixer.n_groups, mixer.conv_kernel
    intermediate = mixer.intermediate
    groups_rank = n_groups + (0 if n_groups % tp == 0 else tp - n_groups)
    conv_dim = intermediate + 2 * groups_rank * state
    proj_bias = mixer.proj_bias
    linear("in_proj", hidden, (intermediate + conv_dim + heads) // tp, 5, "attention", proj_bias, False, hidden,
           count=count, pattern=pattern)
    linear("out_proj", intermediate // tp, hidden, 1, "attention", proj_bias, True, intermediate,
           count=count, pattern=pattern)
    parameters = 0
    dense = [("conv1d.weight", (conv_dim // tp, kernel), dtype)]
    if mixer.conv_bias:
        dense.append(("conv1d.bias", (conv_dim // tp,), dtype))
    dense += [("A", (heads // tp,), "float32"), ("D", (heads // tp,), dtype), ("dt_bias", (heads // tp,), dtype)]
    if mixer.rms_norm:
        # Mixer2RMSNormGated registers its weight only with use_rms_norm (Falcon-H1: config.mamba_rms_norm)
        dense.append(("norm.weight", (intermediate // tp,), dtype))
    parameters += _add_dense(groups, allocations, pattern, count, dense, "attention")
    return parameters


def _nemotron_h_mlps(spec: ModelSpec, shard: Shard, quant: QuantConfig | None, kernel: KernelLayout | None,
                     dtype: str, first_layer: int, layers: int, groups: list, allocations: list, linear) -> int:
    """Nemotron-H MLP ("-") and MoE ("E") layers on this stage (nemotron_h.py 0.10.2-0.33). NemotronHMLP is
    up_proj [hidden -> I / tp] + down_proj [I / tp -> hidden] (relu2, no gate; bias = mlp_bias), I =
    intermediate_size or its mlp_index-th entry when it is a list. Returns the parameters `linear` does not
    count itself."""
    pattern = spec.mixer.override_pattern
    tp = shard.tensor_parallel_size
    hidden = spec.hidden_size
    sizes = spec.mixer.mlp_sizes
    bias = spec.mlp_bias
    by_size: dict[int, list[int]] = {}
    for index in range(first_layer, first_layer + layers):
        if pattern[index] == "-":
            mlp_index = pattern[: index + 1].count("-") - 1
            size = sizes[mlp_index] if len(sizes) > 1 else sizes[0]
            by_size.setdefault(size, []).append(index)
    for size, mine in by_size.items():
        names = "model.layers.{" + ",".join(map(str, mine)) + "}.mixer"
        linear("up_proj", hidden, size // tp, 1, "mlp", bias, False, hidden, count=len(mine), pattern=names,
               allocations=allocations)
        linear("down_proj", size // tp, hidden, 1, "mlp", bias, True, size, count=len(mine), pattern=names,
               allocations=allocations)
    moe_layers = [i for i in range(first_layer, first_layer + layers) if pattern[i] == "E"]
    if not moe_layers or spec.moe is None:
        return 0
    names = "model.layers.{" + ",".join(map(str, moe_layers)) + "}"
    one_layer: list[int] = []
    parameters = _moe_layers(spec, shard, quant, kernel, dtype, len(moe_layers), names, groups, one_layer, linear,
                             module="mixer")
    allocations.extend(one_layer * len(moe_layers))
    return parameters


def _add_dense(groups: list, allocations: list, pattern: str, count: int,
               entries: list[tuple[str, tuple[int, ...], str]], role: str) -> int:
    """Plain (never quantized) tensors of `count` layers: (name, shape, dtype) each; returns their parameters."""
    parameters = 0
    for name, shape, tensor_dtype in entries:
        groups.append(_dense(f"{pattern}.{name}", count, shape, tensor_dtype, role))
        allocations.extend([groups[-1].bytes_each] * count)
        size = 1
        for dim in shape:
            size *= dim
        parameters += size * count
    return parameters


def _mamba1(spec: ModelSpec, tp: int, dtype: str, mine: list[int], linear, groups: list, allocations: list) -> int:
    """Jamba's Mamba1 mixer (layers/mamba/mamba_mixer.py MambaMixer, 0.10-0.19; built without a quant config,
    so never quantized): in_proj [hidden -> 2 x intermediate / tp], conv1d [intermediate / tp, 1, kernel]
    (+ bias), x_proj row-parallel [intermediate / tp -> dt_rank + 2 x d_state], dt_proj [dt_rank ->
    intermediate / tp] + bias, A float32 [intermediate / tp, d_state], D [intermediate / tp], out_proj
    [intermediate / tp -> hidden], RMSNorms on dt (dt_rank), B and C (d_state). Returns the parameters not
    counted by `linear`."""
    mixer = spec.mixer
    count = len(mine)
    pattern = "model.layers.{" + ",".join(map(str, mine)) + "}.mamba"
    hidden = spec.hidden_size
    intermediate = mixer.intermediate
    state, kernel, dt_rank = mixer.d_state, mixer.conv_kernel, mixer.dt_rank
    proj_bias = mixer.proj_bias
    rank = intermediate // tp
    linear("in_proj", hidden, 2 * rank, 2, "attention", proj_bias, False, hidden, count=count, pattern=pattern,
           quantizable=False)
    linear("x_proj", rank, dt_rank + 2 * state, 1, "attention", False, True, intermediate, count=count,
           pattern=pattern, quantizable=False)
    linear("dt_proj", dt_rank, rank, 1, "attention", True, False, dt_rank, count=count, pattern=pattern,
           quantizable=False)
    linear("out_proj", rank, hidden, 1, "attention", proj_bias, True, intermediate, count=count, pattern=pattern,
           quantizable=False)
    dense = [("conv1d.weight", (rank, 1, kernel), dtype)]
    if mixer.conv_bias:
        dense.append(("conv1d.bias", (rank,), dtype))
    dense += [("A", (rank, state), "float32"), ("D", (rank,), dtype), ("dt_layernorm.weight", (dt_rank,), dtype),
              ("b_layernorm.weight", (state,), dtype), ("c_layernorm.weight", (state,), dtype)]
    parameters = _add_dense(groups, allocations, pattern, count, dense, "attention")
    return parameters


def _lightning_attention(spec: ModelSpec, tp: int, dtype: str, mine: list[int], linear, groups: list,
                         allocations: list) -> int:
    """MiniMax-Text-01 lightning attention (layers/mamba/linear_attn.py MiniMaxText01LinearAttention, 0.10-0.19):
    qkv_proj [hidden -> 3 x heads x head_dim / tp], output_gate [hidden -> heads x head_dim / tp], out_proj
    [heads x head_dim / tp -> hidden], RMSNorm over heads x head_dim / tp (the fp32 slope_rate buffer of
    `heads` values is left out). Returns the parameters not counted by `linear`."""
    count = len(mine)
    pattern = "model.layers.{" + ",".join(map(str, mine)) + "}.self_attn"
    hidden = spec.hidden_size
    inner = spec.num_attention_heads * spec.head_dim
    linear("qkv_proj", hidden, 3 * inner // tp, 1, "attention", False, False, hidden, count=count, pattern=pattern)
    linear("output_gate", hidden, inner // tp, 1, "attention", False, False, hidden, count=count, pattern=pattern)
    linear("out_proj", inner // tp, hidden, 1, "attention", False, True, inner, count=count, pattern=pattern)
    groups.append(_dense(f"{pattern}.norm.weight", count, (inner // tp,), dtype, "norm"))
    allocations.extend([groups[-1].bytes_each] * count)
    return inner // tp * count


def _gated_attention(spec: ModelSpec) -> bool:
    """Qwen3-Next / Qwen3.5 full-attention layers: qkv_proj carries 2 x heads query rows (the second half
    gates the output; attn_output_gate, default True in qwen3_next.py)."""
    if spec.family != "qwen3_next":
        return False
    return spec.mixer.attn_output_gate if spec.mixer is not None else True


def _gated_delta_net(spec: ModelSpec, tp: int, dtype: str, mine: list[int], linear, groups: list,
                     allocations: list) -> int:
    """GatedDeltaNet mixer weights (layers/mamba/gdn_linear_attn.py, 0.11-0.19) on one rank:
    in_proj_qkvz [hidden -> (2 key + 2 value) / tp], in_proj_ba [hidden -> 2 v_heads / tp],
    conv1d [conv_dim / tp, 1, kernel] without bias (conv_dim = 2 key + value), dt_bias [v_heads / tp],
    A_log float32 [v_heads / tp], gated RMSNorm [head_v_dim] (replicated), out_proj [value / tp -> hidden];
    key = k_heads x k_dim, value = v_heads x v_dim. Returns the parameters not counted by `linear`."""
    mixer = spec.mixer
    count = len(mine)
    pattern = "model.layers.{" + ",".join(map(str, mine)) + "}.linear_attn"
    hidden = spec.hidden_size
    k_heads, v_heads = mixer.key_heads, mixer.value_heads
    k_dim, v_dim = mixer.key_head_dim, mixer.value_head_dim
    kernel = mixer.conv_kernel
    key, value = k_heads * k_dim, v_heads * v_dim
    conv_dim = 2 * key + value
    linear("in_proj_qkvz", hidden, (2 * key + 2 * value) // tp, 4, "attention", False, False, hidden,
           count=count, pattern=pattern)
    linear("in_proj_ba", hidden, 2 * v_heads // tp, 2, "attention", False, False, hidden,
           count=count, pattern=pattern)
    linear("out_proj", value // tp, hidden, 1, "attention", False, True, value, count=count, pattern=pattern)
    return _add_dense(groups, allocations, pattern, count,
                      [("conv1d.weight", (conv_dim // tp, 1, kernel), dtype), ("dt_bias", (v_heads // tp,), dtype),
                       ("A_log", (v_heads // tp,), "float32"), ("norm.weight", (v_dim,), dtype)], "attention")


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


def _moe_layers(spec: ModelSpec, shard: Shard, quant: QuantConfig | None, kernel: KernelLayout | None, dtype: str,
                count: int, pattern: str, groups: list, per_layer: list, linear, module: str = "mlp") -> int:
    """Router, experts and shared experts of the MoE layers on this rank; returns their parameters.

    Without expert parallelism every rank holds every expert with intermediate/tp columns; with it each
    rank holds experts/tp whole experts (fused_moe/config.py; design notes §9)."""
    moe = spec.moe
    if not count:
        return 0
    tp = shard.tensor_parallel_size
    moe_ranks = tp * shard.data_parallel_size  # TP is flattened across DP for the experts
    hidden = spec.hidden_size
    if moe.latent_size:
        # Nemotron-H latent MoE: replicated fc1_latent_proj / fc2_latent_proj (quantizable, bias = mlp_bias);
        # the experts see the latent width
        bias = spec.mlp_bias
        latent = moe.latent_size
        linear(f"{module}.fc1_latent_proj", hidden, latent, 1, "expert", bias, False, hidden, count=count,
               pattern=pattern)
        linear(f"{module}.fc2_latent_proj", latent, hidden, 1, "expert", bias, False, latent, count=count,
               pattern=pattern)
        hidden = latent
    if shard.expert_parallel:
        local_experts, intermediate = -(-moe.num_experts // moe_ranks), moe.expert_intermediate
    else:
        local_experts, intermediate = moe.num_experts, moe.expert_intermediate // moe_ranks
    parameters = _moe_router(spec, dtype, count, pattern, module, groups, per_layer)
    for tensor in expert_tensors(quant, kernel, local_experts, hidden, intermediate, dtype, gated=moe.gated):
        role = "expert" if tensor.role == "weight" else "quantization metadata"
        groups.append(TensorGroup(f"{pattern}.{module}.experts.{tensor.suffix}", count, tensor.shape, tensor.dtype,
                                  tensor.bytes, role))
        per_layer.append(tensor.bytes)
    parameters += local_experts * (3 if moe.gated else 2) * hidden * intermediate * count
    if moe.expert_bias and not (quant is not None and quant.method == "mxfp4" and quant.converts("experts")):
        # (MXFP4's expert_tensors returns the biases itself, padded like the weights)
        groups.append(_dense(f"{pattern}.{module}.experts.w13_bias", count, (local_experts, 2 * intermediate), dtype, "expert"))
        groups.append(_dense(f"{pattern}.{module}.experts.w2_bias", count, (local_experts, hidden), dtype, "expert"))
        per_layer += [groups[-2].bytes_each, groups[-1].bytes_each]
        parameters += local_experts * (2 * intermediate + hidden) * count
    parameters += _moe_shared_experts(spec, dtype, count, pattern, module, tp, groups, per_layer, linear)
    return parameters


def _moe_router(spec: ModelSpec, dtype: str, count: int, pattern: str, module: str, groups: list,
                per_layer: list) -> int:
    """The MoE router (gate, and its biases where the model has them); returns its parameters."""
    moe = spec.moe
    parameters = 0
    router_in = spec.hidden_size
    # the router is a ReplicatedLinear built without a quant config in every MoE model file
    groups.append(_dense(f"{pattern}.{module}.gate.weight", count, (moe.num_experts, router_in), moe.router_dtype or dtype,
                         "router"))
    per_layer.append(groups[-1].bytes_each)
    parameters += moe.num_experts * router_in * count
    if moe.router_bias:
        groups.append(_dense(f"{pattern}.{module}.router.bias", count, (moe.num_experts,), dtype, "router"))
        per_layer.append(groups[-1].bytes_each)
        parameters += moe.num_experts * count
    if moe.score_correction_bias:
        groups.append(_dense(f"{pattern}.{module}.gate.e_score_correction_bias", count, (moe.num_experts,), "float32", "router"))
        per_layer.append(groups[-1].bytes_each)
        parameters += moe.num_experts * count
    return parameters


def _moe_shared_experts(spec: ModelSpec, dtype: str, count: int, pattern: str, module: str, tp: int, groups: list,
                        per_layer: list, linear) -> int:
    """The shared experts (split over TP like a dense MLP) and their gate; returns the gate's parameters (the
    linears count their own through `linear`)."""
    moe = spec.moe
    parameters = 0
    hidden = spec.hidden_size  # the shared expert sees the full width
    if moe.shared_intermediate and not moe.shared_gated:
        # Nemotron-H: shared_experts is a NemotronHMLP (up_proj + down_proj, bias = mlp_bias)
        shared = moe.shared_intermediate // tp
        bias = spec.mlp_bias
        linear(f"{module}.shared_experts.up_proj", hidden, shared, 1, "mlp", bias, False, hidden, count=count,
               pattern=pattern)
        linear(f"{module}.shared_experts.down_proj", shared, hidden, 1, "mlp", bias, True, moe.shared_intermediate,
               count=count, pattern=pattern)
    elif moe.shared_intermediate:
        shared = moe.shared_intermediate // tp
        linear("mlp.shared_expert.gate_up_proj", hidden, 2 * shared, 2, "mlp", False, False, hidden, count=count)
        linear("mlp.shared_expert.down_proj", shared, hidden, 1, "mlp", False, True, moe.shared_intermediate, count=count)
    if moe.shared_expert_gate:
        groups.append(_dense(f"{pattern}.{module}.shared_expert_gate.weight", count, (1, hidden), dtype, "router"))
        per_layer.append(groups[-1].bytes_each)
        parameters += hidden * count
    return parameters


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


def _audio_encoder(spec: ModelSpec, tp: int, dtype: str, groups: list, allocations: list) -> int:
    """Whisper's encoder (WhisperEncoder, whisper.py 0.7.0+), on the first stage: conv1 [h, mel, 3] and
    conv2 [h, h, 3] with biases and the [max_source_positions, h] position table (sinusoids copied in),
    replicated; encoder_layers layers of qkv_proj / out_proj / fc1 / fc2 (tensor-parallel, biases; row-parallel
    biases replicated) and self_attn_layer_norm / final_layer_norm (weight + bias); the final layer_norm.
    Left unquantized here (the linears would follow the checkpoint's quantization_config)."""
    e = spec.encoder
    h, n = e.hidden_size, e.num_layers
    h_rank, i_rank = h // tp, e.intermediate_size // tp
    return _add_dense(groups, allocations, "model.encoder", 1, [
        ("conv1.weight", (h, e.num_mel_bins, 3), dtype), ("conv1.bias", (h,), dtype),
        ("conv2.weight", (h, h, 3), dtype), ("conv2.bias", (h,), dtype),
        ("embed_positions.weight", (e.max_source_positions, h), dtype),
    ], "encoder") + _add_dense(groups, allocations, f"model.encoder.layers.{{0..{n - 1}}}", n, [
        ("self_attn.qkv_proj.weight", (3 * h_rank, h), dtype), ("self_attn.qkv_proj.bias", (3 * h_rank,), dtype),
        ("self_attn.out_proj.weight", (h, h_rank), dtype), ("self_attn.out_proj.bias", (h,), dtype),
        ("fc1.weight", (i_rank, h), dtype), ("fc1.bias", (i_rank,), dtype),
        ("fc2.weight", (h, i_rank), dtype), ("fc2.bias", (h,), dtype),
        ("self_attn_layer_norm.weight", (h,), dtype), ("self_attn_layer_norm.bias", (h,), dtype),
        ("final_layer_norm.weight", (h,), dtype), ("final_layer_norm.bias", (h,), dtype),
    ], "encoder") + _add_dense(groups, allocations, "model.encoder", 1, [
        ("layer_norm.weight", (h,), dtype), ("layer_norm.bias", (h,), dtype),
    ], "encoder")


def _vision_tower(spec: ModelSpec, tp: int, quant: QuantConfig | None, kernel: KernelLayout | None, dtype: str,
                  groups: list, allocations: list) -> int:
    """Vision encoder + projector (qwen2_vl.py / qwen2_5_vl.py / siglip.py + gemma3_mm.py): patch
    embedding and norms replicated, attention and MLP linears tensor-parallel like the text layers.
    Their linears are quantized only by FP8 methods (Qwen2.5-VL's _maybe_ignore_quant_config drops
    GPTQ/AWQ for the vision tower; AWQ/GPTQ checkpoints list it in modules_to_not_convert).
    One function per tower kind (_TOWERS); returns the tower's parameters."""
    tower = _Tower(spec, tp, quant, kernel, dtype, groups, allocations)
    _TOWERS.get(spec.vision.kind, _qwen2_vl_vision)(tower)
    return tower.parameters


class _Tower:
    """A vision tower while it is built: its tensor groups go to `groups` / `allocations` under "vision."."""

    def __init__(self, spec: ModelSpec, tp: int, quant: QuantConfig | None, kernel: KernelLayout | None, dtype: str,
                 groups: list, allocations: list):
        self.spec, self.v, self.tp, self.quant, self.kernel, self.dtype = spec, spec.vision, tp, quant, kernel, dtype
        self.groups, self.allocations = groups, allocations
        self.parameters = 0
        v = spec.vision
        # (Llama 4 builds its tower and projector with quant_config=None: bf16 whatever the checkpoint, mllama4.py;
        # Qwen3-VL passes its quant_config on, so the checkpoint's ignore list decides - is_layer_skipped's exact names)
        self.quantize = quant is not None and quant.method in ("fp8", "modelopt-fp8") and v.kind != "llama4"
        if v.kind == "qwen3_vl":
            # the list may name the checkpoint's "model.visual." modules or vLLM's mapped "visual." ones
            self.quantize = quant is not None and all(quant.converts(name) for name in (
                "visual.blocks.0.attn.qkv", "model.visual.blocks.0.attn.qkv"))

    def dense(self, name: str, count: int, shape: tuple[int, ...]) -> None:
        self.parameters += _add_dense(self.groups, self.allocations, "vision", count, [(name, shape, self.dtype)],
                                      "vision")

    def linear(self, name: str, count: int, in_features: int, out_features: int, bias: bool, shards: int = 1) -> None:
        if self.quantize:
            for tensor in linear_tensors(self.quant, self.kernel, in_features, out_features, shards, self.dtype,
                                         in_features):
                self.groups.append(TensorGroup(f"vision.{name}.{tensor.suffix}", count, tensor.shape, tensor.dtype,
                                               tensor.bytes,
                                               "vision" if tensor.role == "weight" else "quantization metadata"))
                self.allocations.extend([tensor.bytes] * count)
            self.parameters += in_features * out_features * count
        else:
            self.dense(f"{name}.weight", count, (out_features, in_features))
        if bias:
            self.dense(f"{name}.bias", count, (out_features,))

    def encoder_layers(self, prefix: str, norms: str = "layer_norm{1,2}", qkv: str = "self_attn.qkv_proj",
                       out: str = "self_attn.out_proj", fc1: str = "mlp.fc1", fc2: str = "mlp.fc2") -> None:
        # One ViT block layout under each tower's names (clip.py, siglip.py, mllama4.py, qwen3_vl.py): two
        # LayerNorms (weight + bias), fused qkv with bias, the output projection and a two-linear MLP with
        # biases, row-parallel biases kept whole
        h, i, n, tp = self.v.hidden_size, self.v.intermediate_size, self.v.num_layers, self.tp
        self.dense(f"{prefix}.{norms}.{{weight,bias}}", 4 * n, (h,))
        self.linear(f"{prefix}.{qkv}", n, h, 3 * h // tp, True, 3)
        self.linear(f"{prefix}.{out}", n, h // tp, h, False)
        self.dense(f"{prefix}.{out}.bias", n, (h,))
        self.linear(f"{prefix}.{fc1}", n, h, i // tp, True)
        self.linear(f"{prefix}.{fc2}", n, i // tp, h, False)
        self.dense(f"{prefix}.{fc2}.bias", n, (h,))


def _intern_vit(t: _Tower) -> None:
    v = t.v
    h, i, n = v.hidden_size, v.intermediate_size, v.num_layers
    tp = t.tp
    # InternVL (intern_vit.py, internvl.py): class embedding, Conv2d patch embedding with bias, a
    # [(image/patch)^2 + 1, h] position table, select_layer layers of norm1/norm2 (LayerNorm w+b or RMSNorm),
    # qkv (+bias) / proj (+bias) / fc1 / fc2 with biases, layer scales ls1/ls2 [h] (+ q_norm/k_norm [h]);
    # no post norm; mlp1 = LayerNorm(h x merge^2) + Linear(h x merge^2, text) + Linear(text, text), biases.
    # qkv/proj are plain nn.Linear (replicated) in 0.5.x and parallel linears later: shown sharded.
    positions = (v.image_size // v.patch_size) ** 2 + 1
    norm = 1 if v.rms_norm else 2
    t.dense("vision_model.embeddings.class_embedding", 1, (h,))
    t.dense("vision_model.embeddings.patch_embedding.weight", 1, (h, v.in_channels, v.patch_size, v.patch_size))
    t.dense("vision_model.embeddings.patch_embedding.bias", 1, (h,))
    t.dense("vision_model.embeddings.position_embedding", 1, (positions, h))
    t.dense("vision_model.encoder.layers.*.norm{1,2}", 2 * norm * n, (h,))
    t.linear("vision_model.encoder.layers.*.attn.qkv", n, h, 3 * h // tp, v.qkv_bias, 3)
    t.linear("vision_model.encoder.layers.*.attn.proj", n, h // tp, h, False)
    t.dense("vision_model.encoder.layers.*.attn.proj.bias", n, (h,))
    if v.qk_norm:
        t.dense("vision_model.encoder.layers.*.attn.{q,k}_norm.weight", 2 * n, (h // tp,))
    t.linear("vision_model.encoder.layers.*.mlp.fc1", n, h, i // tp, True)
    t.linear("vision_model.encoder.layers.*.mlp.fc2", n, i // tp, h, False)
    t.dense("vision_model.encoder.layers.*.mlp.fc2.bias", n, (h,))
    t.dense("vision_model.encoder.layers.*.ls{1,2}", 2 * n, (h,))
    merged = h * v.spatial_merge_size ** 2
    text = v.out_hidden_size
    t.dense("mlp1.0.{weight,bias}", 2, (merged,))
    t.linear("mlp1.1", 1, merged, text // tp, True)
    t.linear("mlp1.3", 1, text // tp, text, False)
    t.dense("mlp1.3.bias", 1, (text,))


def _mllama_vision(t: _Tower) -> None:
    spec = t.spec
    v = t.v
    h, i, n = v.hidden_size, v.intermediate_size, v.num_layers
    tp = t.tp
    dtype = t.dtype
    # Llama 3.2 Vision (mllama.py): patch conv as a bias-free ColumnParallelLinear, class embedding,
    # gated position embedding [(image/patch)^2 + 1, h] + tile table [aspect ratios + 1, tiles x positions x h],
    # pre/post tile embeddings [aspect ratios + 1, tiles x h] with gates, layernorm_pre/post, a local encoder
    # and a gated global one (bias-free qkv/o, CLIPMLP fc1/fc2 with biases), the [output_dim, text hidden]
    # projector with bias; in the text model the cross-attention layers' q_norm/k_norm and tanh gates and
    # the 8 extra embedding rows (VocabParallelEmbedding(vocab_size + 8)). Those text extras are listed
    # here, on the first stage, whatever the pipeline split.
    positions = (v.image_size // v.patch_size) ** 2 + 1
    ratios = v.aspect_ratios + 1
    t.linear("vision_model.patch_embedding._linear", 1, v.in_channels * v.patch_size * v.patch_size, h // tp, False)
    t.dense("vision_model.class_embedding", 1, (h,))
    t.dense("vision_model.gated_positional_embedding.embedding", 1, (positions, h))
    t.dense("vision_model.gated_positional_embedding.tile_embedding.weight", 1, (ratios, v.max_num_tiles * positions * h))
    t.dense("vision_model.{pre,post}_tile_positional_embedding.embedding.weight", 2, (ratios, v.max_num_tiles * h))
    t.dense("vision_model.{gated_positional_embedding,pre_tile_positional_embedding,post_tile_positional_embedding}.gate", 3, (1,))
    t.dense("vision_model.layernorm_{pre,post}.{weight,bias}", 4, (h,))
    layers = n + v.global_layers
    t.dense("vision_model.{transformer,global_transformer}.layers.*.{input,post_attention}_layernorm.{weight,bias}", 4 * layers, (h,))
    t.linear("vision_model.{transformer,global_transformer}.layers.*.self_attn.qkv_proj", layers, h, 3 * h // tp, False, 3)
    t.linear("vision_model.{transformer,global_transformer}.layers.*.self_attn.o_proj", layers, h // tp, h, False)
    t.linear("vision_model.{transformer,global_transformer}.layers.*.mlp.fc1", layers, h, i // tp, True)
    t.linear("vision_model.{transformer,global_transformer}.layers.*.mlp.fc2", layers, i // tp, h, False)
    t.dense("vision_model.{transformer,global_transformer}.layers.*.mlp.fc2.bias", layers, (h,))
    t.dense("vision_model.global_transformer.layers.*.gate_{attn,ffn}", 2 * v.global_layers, (1,))
    t.linear("multi_modal_projector", 1, v.vision_output_dim, v.out_hidden_size // tp, True)
    cross = len(v.cross_attention_layers)
    if cross:
        t.dense("language_model.model.layers.{cross}.cross_attn.{q,k}_norm.weight", 2 * cross, (spec.head_dim,))
        t.dense("language_model.model.layers.{cross}.cross_attn_{attn,mlp}_gate", 2 * cross, (1,))
    # embed_tokens has vocab_size + 8 rows padded to 64: the rows beyond the text vocabulary's own padding
    extra_rows = (-(-(spec.vocab_size + 8) // 64) * 64 - spec.padded_vocab_size) // tp
    if extra_rows:
        t.groups.append(_dense("language_model.model.embed_tokens.weight[+8 image rows, padded]", 1,
                               (extra_rows, spec.hidden_size), dtype, "embedding"))
        t.allocations.append(t.groups[-1].bytes_each)
        t.parameters += 8 * spec.hidden_size // tp


def _llama4_vision(t: _Tower) -> None:
    v = t.v
    h, i = v.hidden_size, v.intermediate_size
    tp = t.tp
    # Llama 4 (mllama4.py 0.8.3+, built with quant_config=None): Llama4UnfoldConvolution = a bias-free
    # ColumnParallelLinear [c*p*p -> h], class embedding, (image/patch)^2 + 1 learned positions, LayerNorm
    # pre/post (weight + bias), encoder layers (qkv / o_proj / fc1 / fc2 with biases, row-parallel biases whole,
    # two LayerNorms), the pixel-shuffle adapter MLP [intermediate -> projector_input -> projector_output]
    # (biases only with multi_modal_projector_bias) and multi_modal_projector.linear_1 [vision_output_dim ->
    # text hidden], no bias. The vision rotary cache is a [positions, 1, head_dim / 2] complex64 buffer.
    positions = (v.image_size // v.patch_size) ** 2 + 1
    adapter_in, adapter_out = v.adapter_dims
    t.linear("vision_model.patch_embedding.linear", 1, v.in_channels * v.patch_size * v.patch_size, h // tp, False)
    t.dense("vision_model.class_embedding", 1, (h,))
    t.dense("vision_model.positional_embedding_vlm", 1, (positions, h))
    t.dense("vision_model.layernorm_{pre,post}.{weight,bias}", 4, (h,))
    t.encoder_layers("vision_model.model.layers.*", norms="{input,post_attention}_layernorm", out="self_attn.o_proj")
    t.linear("vision_model.vision_adapter.mlp.fc1", 1, i, adapter_in // tp, v.adapter_bias)
    t.linear("vision_model.vision_adapter.mlp.fc2", 1, adapter_in // tp, adapter_out, False)
    if v.adapter_bias:
        t.dense("vision_model.vision_adapter.mlp.fc2.bias", 1, (adapter_out,))
    t.linear("multi_modal_projector.linear_1", 1, v.vision_output_dim, v.out_hidden_size // tp, False)
    if v.num_heads:
        # complex64 = two float32 per entry; get_rope caches one instance for every encoder layer
        t.groups.append(_dense("vision_model.rotary_emb.cos_sin_cache[complex64 as float32 pairs]", 1,
                               (positions, 2 * (h // v.num_heads // 2)), "float32", "rotary cache"))
        t.allocations.append(t.groups[-1].bytes_each)


def _qwen3_vl_vision(t: _Tower) -> None:
    v = t.v
    h = v.hidden_size
    tp = t.tp
    # Qwen3_VisionTransformer (qwen3_vl.py 0.11.0+, shared by Qwen3-VL, Qwen3-VL-MoE and Qwen3.5): Conv3d
    # patch embedding with bias and a learned position table (replicated), blocks of two LayerNorms (weight +
    # bias), fused qkv and proj, linear_fc1 / linear_fc2 - every linear with a bias, row-parallel biases whole -,
    # the merger (LayerNorm over hidden, fc1 [4h -> 4h], fc2 [4h -> out]) and one merger per deepstack layer
    # (its LayerNorm after the 2x2 shuffle, over 4h). Linears follow the checkpoint's ignore list (no
    # _maybe_ignore_quant_config here): FP8 releases keep the tower in bf16 by listing it.
    merged = h * v.spatial_merge_size ** 2
    t.dense("visual.patch_embed.proj.weight", 1, (h, v.in_channels, v.temporal_patch_size, v.patch_size, v.patch_size))
    t.dense("visual.patch_embed.proj.bias", 1, (h,))
    t.dense("visual.pos_embed.weight", 1, (v.position_embeddings, h))
    t.encoder_layers("visual.blocks.*", norms="norm{1,2}", qkv="attn.qkv", out="attn.proj", fc1="mlp.linear_fc1",
                   fc2="mlp.linear_fc2")
    mergers = 1 + v.deepstack_layers
    t.dense("visual.merger.norm.{weight,bias}", 2, (h,))
    if v.deepstack_layers:
        t.dense("visual.deepstack_merger_list.*.norm.{weight,bias}", 2 * v.deepstack_layers, (merged,))
    t.linear("visual.{merger,deepstack_merger_list.*}.linear_fc1", mergers, merged, merged // tp, True)
    t.linear("visual.{merger,deepstack_merger_list.*}.linear_fc2", mergers, merged // tp, v.out_hidden_size, False)
    t.dense("visual.{merger,deepstack_merger_list.*}.linear_fc2.bias", mergers, (v.out_hidden_size,))


def _gemma4_vision(t: _Tower) -> None:
    v = t.v
    h, i, n = v.hidden_size, v.intermediate_size, v.num_layers
    # Gemma 4 (gemma4_mm.py): the HF Gemma4VisionModel (modeling_gemma4.py) built by AutoModel.from_config -
    # plain, replicated linears, never quantized for the 31B / 26B towers - and embed_vision's projection:
    # patch input_proj [h, 3 x p x p], a [2, position_embedding_size, h] position table, per layer q/k/v/o of
    # heads x head_dim, q/k norms [head_dim], four norms [h], gate / up / down MLP
    width = v.num_heads * v.head_dim
    t.dense("vision_tower.patch_embedder.input_proj.weight", 1, (h, 3 * v.patch_size * v.patch_size))
    t.dense("vision_tower.position_embedding_table", 1, (2, v.position_embeddings, h))
    t.dense("vision_tower.encoder.layers.*.self_attn.{q,k,v}_proj.linear.weight", 3 * n, (width, h))
    t.dense("vision_tower.encoder.layers.*.self_attn.o_proj.linear.weight", n, (h, width))
    t.dense("vision_tower.encoder.layers.*.self_attn.{q,k}_norm.weight", 2 * n, (v.head_dim,))
    t.dense("vision_tower.encoder.layers.*.*_layernorm.weight", 4 * n, (h,))
    t.dense("vision_tower.encoder.layers.*.mlp.{gate,up}_proj.linear.weight", 2 * n, (i, h))
    t.dense("vision_tower.encoder.layers.*.mlp.down_proj.linear.weight", n, (h, i))
    t.dense("embed_vision.embedding_projection.weight", 1, (v.out_hidden_size, h))


def _clip_vision(t: _Tower) -> None:
    v = t.v
    h = v.hidden_size
    tp = t.tp
    # LLaVA / LLaVA-NeXT (vllm/model_executor/models/clip.py, llava.py, llava_next.py): CLIP embeddings
    # (class token, bias-free patch conv, (image/patch)^2 + 1 positions), pre_layrnorm, only the layers
    # up to vision_feature_layer, post_layernorm only when all are built, then the 2-layer GELU projector
    positions = (v.image_size // v.patch_size) ** 2 + 1
    t.dense("vision_tower.embeddings.class_embedding", 1, (h,))
    t.dense("vision_tower.embeddings.patch_embedding.weight", 1, (h, v.in_channels, v.patch_size, v.patch_size))
    t.dense("vision_tower.embeddings.position_embedding.weight", 1, (positions, h))
    t.groups.append(_dense("vision.vision_tower.embeddings.position_ids[buffer]", 1, (1, positions), "int64", "vision"))
    t.allocations.append(t.groups[-1].bytes_each)
    t.dense("vision_tower.pre_layrnorm.{weight,bias}", 2, (h,))
    t.encoder_layers("vision_tower.encoder.layers.*")
    if v.post_norm:
        t.dense("vision_tower.post_layernorm.{weight,bias}", 2, (h,))
    text = v.out_hidden_size
    t.linear("multi_modal_projector.linear_1", 1, h, text // tp, v.projector_bias)
    t.linear("multi_modal_projector.linear_2", 1, text // tp, text, False)
    if v.projector_bias:
        t.dense("multi_modal_projector.linear_2.bias", 1, (text,))
    if v.image_newline:
        t.dense("image_newline", 1, (text,))


def _siglip_vision(t: _Tower) -> None:
    v = t.v
    h = v.hidden_size
    t.dense("embeddings.patch_embedding.weight", 1, (h, v.in_channels, v.patch_size, v.patch_size))
    t.dense("embeddings.patch_embedding.bias", 1, (h,))
    t.dense("embeddings.position_embedding.weight", 1, ((v.image_size // v.patch_size) ** 2, h))
    t.encoder_layers("encoder.layers.*")
    t.dense("post_layernorm.{weight,bias}", 2, (h,))
    # Gemma 3 projector: a plain [vision hidden, text hidden] parameter and a soft-embedding RMSNorm
    t.dense("multi_modal_projector.mm_input_projection_weight", 1, (h, v.out_hidden_size))
    t.dense("multi_modal_projector.mm_soft_emb_norm.weight", 1, (h,))


def _qwen2_vl_vision(t: _Tower) -> None:
    """Qwen2-VL / Qwen2.5-VL (qwen2_vl.py, qwen2_5_vl.py): the other kinds."""
    v = t.v
    h, i, n = v.hidden_size, v.intermediate_size, v.num_layers
    tp = t.tp
    patch = v.in_channels * v.temporal_patch_size * v.patch_size * v.patch_size
    t.dense("patch_embed.proj.weight", 1, (h, patch))
    norm_tensors = 2 if v.kind == "qwen2_5_vl" else 4  # RMSNorm weights vs LayerNorm weight + bias
    t.dense("blocks.*.norm{1,2}", norm_tensors * n, (h,))
    t.linear("blocks.*.attn.qkv", n, h, 3 * h // tp, True, 3)
    t.linear("blocks.*.attn.proj", n, h // tp, h, False)
    t.dense("blocks.*.attn.proj.bias", n, (h,))
    if v.kind == "qwen2_5_vl":
        t.linear("blocks.*.mlp.gate_up_proj", n, h, 2 * i // tp, True, 2)
        t.linear("blocks.*.mlp.down_proj", n, i // tp, h, False)
    else:
        t.linear("blocks.*.mlp.fc1", n, h, i // tp, True)
        t.linear("blocks.*.mlp.fc2", n, i // tp, h, False)
    t.dense("blocks.*.mlp.down.bias", n, (h,))
    merged = h * v.spatial_merge_size ** 2
    t.dense("merger.ln_q", 1 if v.kind == "qwen2_5_vl" else 2, (h,))
    t.linear("merger.mlp.0", 1, merged, merged // tp, True)
    t.linear("merger.mlp.2", 1, merged // tp, v.out_hidden_size, False)
    t.dense("merger.mlp.2.bias", 1, (v.out_hidden_size,))


_TOWERS = {
    "intern_vit": _intern_vit,
    "mllama": _mllama_vision,
    "llama4": _llama4_vision,
    "qwen3_vl": _qwen3_vl_vision,
    "gemma4_vision": _gemma4_vision,
    "clip": _clip_vision,
    "clip_anyres": _clip_vision,
    "siglip": _siglip_vision,
}


def checkpoint_vs_gpu(table, spec, dtype: str | None = None, quant=None, kernel=None):
    """The report for a ModelSpec: builds the tp=1 inventory in `dtype` (default the spec's) with the
    quantization plan's config and kernel layout (plan.plan_weights), then reconciles."""
    from ...model.checkpoint import reconcile

    dtype = dtype or spec.torch_dtype
    inventory = build_inventory(spec, dtype, quant=quant, kernel=kernel)
    return reconcile(table, inventory, spec.tie_word_embeddings, dtype)
