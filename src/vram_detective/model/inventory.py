"""The tensors one GPU rank holds, synthesized from a ModelSpec in vLLM's parameter layout.

vLLM fuses q/k/v into qkv_proj and gate/up into gate_up_proj, pads the vocabulary, shares the
embedding with lm_head when tied, and shards by tensor parallelism (column-parallel outputs,
row-parallel inputs, replicated norms and rotary caches) - vllm/model_executor/layers/linear.py,
vocab_parallel_embedding.py, design/vllm-memory.md §4 and §9.
"""
from __future__ import annotations

from dataclasses import dataclass

from .config import ModelSpec
from .quantization import DTYPE_BYTES, KernelLayout, QuantConfig, linear_tensors

ROLES = (
    "embedding", "attention", "mlp", "norm", "lm_head", "quantization metadata", "rotary cache",
    "vocab padding", "position embedding",
)


@dataclass(frozen=True)
class TensorGroup:
    name: str  # pattern, e.g. "model.layers.{0..31}.self_attn.qkv_proj.qweight"
    count: int
    shape: tuple[int, ...]
    dtype: str
    bytes_each: int
    role: str

    @property
    def bytes(self) -> int:
        return self.count * self.bytes_each

    def to_dict(self) -> dict:
        return {"name": self.name, "count": self.count, "shape": list(self.shape), "dtype": self.dtype,
                "bytes": self.bytes, "role": self.role}


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

    @property
    def is_first_stage(self) -> bool:
        return self.pipeline_stage == 0

    @property
    def is_last_stage(self) -> bool:
        return self.pipeline_stage == self.pipeline_parallel_size - 1


def pipeline_layer_counts(num_layers: int, stages: int) -> tuple[int, ...]:
    """vLLM's get_pp_indices: even split; the remainder goes to the stages before the last one
    (partitions[-2], [-3], ... get +1) - vllm/distributed/utils.py."""
    counts = [num_layers // stages] * stages
    for extra in range(num_layers % stages):
        counts[-(extra + 2) % stages] += 1
    return tuple(counts)


def _dense(name: str, count: int, shape: tuple[int, ...], dtype: str, role: str) -> TensorGroup:
    size = 1
    for dim in shape:
        size *= dim
    return TensorGroup(name, count, shape, dtype, size * DTYPE_BYTES[dtype], role)


def rotary_caches(spec: ModelSpec) -> tuple[tuple[str, int, int], ...]:
    """(label, rows, rotary_dim) of each distinct cos/sin cache vLLM builds (get_rope caches by key)."""
    if spec.rotary_dim is None:
        return ()
    scaling = spec.rope_scaling
    rows = spec.max_position_embeddings
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
) -> Inventory:
    tp = shard.tensor_parallel_size
    layers = pipeline_layer_counts(spec.num_layers, shard.pipeline_parallel_size)[shard.pipeline_stage]
    first_layer = sum(pipeline_layer_counts(spec.num_layers, shard.pipeline_parallel_size)[: shard.pipeline_stage])
    layer_pattern = f"model.layers.{{{first_layer}..{first_layer + layers - 1}}}"
    hidden = spec.hidden_size
    groups: list[TensorGroup] = []
    parameters = 0
    before: list[int] = []
    per_layer: list[int] = []
    after: list[int] = []
    rope_after = 0

    vocab_rows = spec.padded_vocab_size // tp
    # the padding rows sit at the end of the last shard; per rank they are shown as an even share
    padding_rows = (spec.padded_vocab_size - spec.vocab_size) // tp
    real_rows = vocab_rows - padding_rows

    def vocab_table(name: str, role: str, allocations: list[int]) -> None:
        nonlocal parameters
        allocations.append(vocab_rows * hidden * DTYPE_BYTES[dtype])  # one tensor, padding included
        groups.append(_dense(f"{name}.weight", 1, (real_rows, hidden), dtype, role))
        if padding_rows:
            groups.append(_dense(f"{name}.weight[padding rows]", 1, (padding_rows, hidden), dtype, "vocab padding"))
        parameters += real_rows * hidden

    if shard.is_first_stage:
        vocab_table("model.embed_tokens", "embedding", before)
        if spec.learned_positions:
            groups.append(_dense("model.decoder.embed_positions.weight", 1, (spec.learned_positions, hidden), dtype, "position embedding"))
            before.append(groups[-1].bytes_each)
            parameters += spec.learned_positions * hidden

    q_rank = spec.num_attention_heads // tp
    kv_rank = max(1, spec.num_kv_heads // tp)  # KV heads replicated when tp > num_kv_heads
    head = spec.head_dim

    def linear(name: str, in_features: int, out_features: int, shards: int, role: str, bias: bool,
               row_parallel: bool, full_in: int) -> None:
        nonlocal parameters
        parameters += in_features * out_features * layers
        module = name.rsplit(".", 1)[-1]
        if quant is not None and quant.converts(module):
            for tensor in linear_tensors(quant, kernel, in_features, out_features, shards, dtype, full_in):
                tensor_role = role if tensor.role == "weight" else "quantization metadata"
                groups.append(TensorGroup(f"{layer_pattern}.{name}.{tensor.suffix}", layers, tensor.shape,
                                          tensor.dtype, tensor.bytes, tensor_role))
                per_layer.append(tensor.bytes)
        else:
            groups.append(_dense(f"{layer_pattern}.{name}.weight", layers, (out_features, in_features), dtype, role))
            per_layer.append(groups[-1].bytes_each)
        if bias:
            # row-parallel biases are replicated (added once after the all-reduce)
            groups.append(_dense(f"{layer_pattern}.{name}.bias", layers, (out_features if not row_parallel else hidden,), dtype, role))
            per_layer.append(groups[-1].bytes_each)
            parameters += (out_features if not row_parallel else hidden) * layers

    qkv_out = (q_rank + 2 * kv_rank) * head
    linear("self_attn.qkv_proj", hidden, qkv_out, 3, "attention", spec.qkv_bias, False, hidden)
    linear("self_attn.o_proj", q_rank * head, hidden, 1, "attention", spec.o_bias, True, spec.q_size)
    rope_after = len(per_layer)  # the attention module builds its rotary cache after its linears
    if spec.qk_norm:
        per_layer += [head * DTYPE_BYTES[dtype]] * 2
        groups.append(_dense(f"{layer_pattern}.self_attn.q_norm.weight", layers, (head,), dtype, "norm"))
        groups.append(_dense(f"{layer_pattern}.self_attn.k_norm.weight", layers, (head,), dtype, "norm"))
        parameters += 2 * head * layers
    intermediate_rank = spec.intermediate_size // tp
    if spec.gated_mlp:
        linear("mlp.gate_up_proj", hidden, 2 * intermediate_rank, 2, "mlp", spec.mlp_bias, False, hidden)
        linear("mlp.down_proj", intermediate_rank, hidden, 1, "mlp", spec.mlp_bias, True, spec.intermediate_size)
    else:
        linear("fc1", hidden, intermediate_rank, 1, "mlp", spec.mlp_bias, False, hidden)
        linear("fc2", intermediate_rank, hidden, 1, "mlp", spec.mlp_bias, True, spec.intermediate_size)
    norm_tensors = spec.norms_per_layer * (2 if spec.norm_bias else 1)
    groups.append(_dense(f"{layer_pattern}.*_layernorm.weight", layers * norm_tensors, (hidden,), dtype, "norm"))
    per_layer += [groups[-1].bytes_each] * norm_tensors
    parameters += norm_tensors * hidden * layers

    if shard.is_last_stage:
        final_norms = 2 if spec.norm_bias else 1
        groups.append(_dense("model.norm.weight", final_norms, (hidden,), dtype, "norm"))
        after += [groups[-1].bytes_each] * final_norms
        parameters += final_norms * hidden
        # Tied: lm_head is the embedding tensor - counted once, unless PP puts them on two stages.
        if not spec.tie_word_embeddings or not shard.is_first_stage:
            if quant is not None and quant.converts("lm_head"):
                for tensor in linear_tensors(quant, kernel, hidden, vocab_rows, 1, dtype, hidden):
                    groups.append(TensorGroup(f"lm_head.{tensor.suffix}", 1, tensor.shape, tensor.dtype, tensor.bytes,
                                              "lm_head" if tensor.role == "weight" else "quantization metadata"))
                    after.append(tensor.bytes)
                parameters += vocab_rows * hidden
            else:
                vocab_table("lm_head", "lm_head", after)

    staging = 0
    for index, (label, rows, width) in enumerate(rotary_caches(spec)):
        groups.append(_dense(label, 1, (rows, width), dtype, "rotary cache"))
        if index == 0:
            staging = rows * width * 4  # _compute_cos_sin_cache builds it in float32 before .to(dtype)
    allocations = AllocationPlan(tuple(before), tuple(per_layer), layers, tuple(after), rope_after, staging)
    return Inventory(groups=tuple(groups), parameters=parameters, allocations=allocations)
