"""SGLang's pipeline stages: which decoder layers each PP rank builds, and the model one stage sizes.

distributed/utils.py get_pp_indices (read in 0.4.6.post2, 0.5.5.post3, 0.5.6, 0.5.23) splits num_hidden_layers
evenly; the remainder went all to the last stage up to 0.5.5 and one each to the last `remainder` stages from 0.5.6
(rule pp_remainder_layers). SGLANG_PP_LAYER_PARTITION ("a,b,c") overrides the split when pp_size > 1: one count
per stage, adding up to the layers. make_layers builds the rank's own [start, end) layers (PPMissingLayer
elsewhere); the first stage holds the embedding, the last the final norm and the lm_head (its own ParallelLMHead
even when tied: qwen2.py / qwen3.py tie only when pp world_size == 1) - vLLM's inventory places them the same way.
"""
from __future__ import annotations

from dataclasses import replace

from ...model.spec import ModelSpec
from .releases import Rules


class PartitionError(ValueError):
    """SGLANG_PP_LAYER_PARTITION that SGLang rejects (its own ValueError messages)."""


def layer_counts(num_layers: int, pp_size: int, r: Rules, partition: str | None = None) -> tuple[int, ...]:
    """Layers each stage holds, stage 0 first."""
    if pp_size <= 1:
        return (num_layers,)  # a singleton PP group ignores the partition (0.5.23)
    if partition is not None:
        return _given_partition(partition, num_layers, pp_size)
    base, remainder = divmod(num_layers, pp_size)
    counts = [base] * pp_size
    if r["pp_remainder_layers"] == "last_stage":
        counts[-1] += remainder
    else:
        for stage in range(pp_size - remainder, pp_size):
            counts[stage] += 1
    return tuple(counts)


def _given_partition(text: str, num_layers: int, pp_size: int) -> tuple[int, ...]:
    try:
        counts = tuple(int(part) for part in str(text).split(","))
    except ValueError:
        raise PartitionError(f"Invalid partition string: {text}") from None
    if len(counts) != pp_size:
        raise PartitionError(f"len(partitions)={len(counts)} does not match pp_size={pp_size}.")
    if sum(counts) != num_layers:
        raise PartitionError(f"sum(partitions)={sum(counts)} does not match num_hidden_layers={num_layers}.")
    return counts


def layer_ranges(counts: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    """(start, end) of each stage's layers."""
    out, start = [], 0
    for count in counts:
        out.append((start, start + count))
        start += count
    return tuple(out)


def stage_spec(spec: ModelSpec, start: int, end: int, own_mamba: bool = True) -> ModelSpec:
    """The model as one stage sizes its pools: only its own layers (their attention kinds, hybrid mixers and
    sliding windows) - model_runner.py num_effective_layers = end_layer - start_layer in the cell size, a hybrid's
    full-attention layers in [start, end) (0.5.8 model_runner_kv_cache_mixin.py). `own_mamba` False: the Mamba
    state of every layer (rule pp_mamba_state whole_model)."""
    if (start, end) == (0, spec.num_layers):
        return spec
    changes = {"num_layers": end - start}
    if spec.hybrid is not None:
        changes["hybrid"] = replace(spec.hybrid, layers=spec.hybrid.layers[start:end])
    if spec.mixer is not None and own_mamba:
        changes["mixer"] = replace(spec.mixer, layers=spec.mixer.layers[start:end])
    facts = spec.attention_facts
    if facts is not None and len(facts.layers) == spec.num_layers:
        types = facts.layer_types[start:end] if len(facts.layer_types) == spec.num_layers else facts.layer_types
        changes["attention_facts"] = replace(facts, layers=facts.layers[start:end], num_layers=end - start,
                                             layer_types=types)
    return replace(spec, **changes)
