"""PyTorch's caching allocator during model loading: what `memory_allocated` counts beyond the bytes
the tensors ask for (vLLM's weights figure is an allocated-bytes delta, so this is in it).

Rules of c10/cuda/CUDACachingAllocator.cpp (native backend, no expandable segments), as used in
docs/research-weights-by-release.md to reproduce six logged weights figures exactly:
- every request is rounded up to 512 B;
- requests above 1 MiB come from the large pool: a new segment is 20 MiB below 10 MiB, otherwise the
  request rounded up to 2 MiB;
- a large block is split only when the rest is more than 1 MiB and (with max_split_size set) the
  request is below max_split_size; an unsplit block is counted whole.
vLLM 0.21+ loads with max_split_size_mb=20 (release rule load_max_split_mib), so every tensor of 20 MiB
or more is counted up to its 2 MiB-rounded segment, and the float32 staging block of the rotary cache
is reused whole by the first tensor it can hold.
"""
from __future__ import annotations

from ...units import MIB, round_up
from .weights import AllocationPlan

# c10/cuda/CUDACachingAllocator.cpp (PyTorch 2.x) constants of the same names:
MIN_BLOCK = 512  # kMinBlockSize
SMALL_REQUEST = 1 * MIB  # kSmallSize: larger requests use the large pool
MIN_LARGE_ALLOC = 10 * MIB  # kMinLargeAlloc: below it a large segment is kLargeBuffer (20 MiB)
ROUND_LARGE = 2 * MIB  # kRoundLarge
LARGE_BUFFER = 20 * MIB  # kLargeBuffer; also the slack a >= max_split request may waste on a cached block


def block_overhead(size: int, max_split: int) -> int:
    """Bytes counted beyond `size` when it gets a fresh block."""
    rounded = round_up(size, MIN_BLOCK)
    extra = rounded - size
    if rounded <= SMALL_REQUEST or rounded < MIN_LARGE_ALLOC:
        return extra  # small pool, or carved out of a 20 MiB segment and split
    rest = round_up(rounded, ROUND_LARGE) - rounded
    unsplittable = bool(max_split) and rounded >= max_split
    if unsplittable or rest <= SMALL_REQUEST:
        return extra + rest
    return extra


def load_overhead(plan: AllocationPlan | None, max_split_mib: int, offloaded_bytes: int = 0) -> int:
    """Bytes counted beyond the tensors themselves; layer tensors moved to the CPU by --cpu-offload-gb
    no longer count (their share of the layers' rounding is dropped)."""
    if plan is None:
        return 0
    max_split = max_split_mib * MIB
    overhead = sum(block_overhead(size, max_split) for size in plan.before_layers + plan.after_layers)
    per_layer = [block_overhead(size, max_split) for size in plan.per_layer]
    layer_overhead = sum(per_layer) * plan.layers + sum(block_overhead(size, max_split) for size in plan.some_layers)
    layer_bytes = sum(plan.per_layer) * plan.layers + sum(plan.some_layers)
    if offloaded_bytes and layer_bytes:
        return overhead + int(layer_overhead * max(0.0, 1 - offloaded_bytes / layer_bytes))
    overhead += layer_overhead
    staging = plan.rope_staging_bytes
    if not max_split or staging < max_split or plan.layers == 0:
        return overhead
    # The freed float32 staging block is taken whole by the first later tensor of at least
    # max_split bytes that it holds with less than 20 MiB to spare (layer 0 after the attention
    # module, then the following layers).
    # every layer repeats the same tensors, so layer 0's rest and one more layer cover every candidate
    order = list(range(plan.rope_after, len(plan.per_layer))) + (list(range(len(plan.per_layer))) if plan.layers > 1 else [])
    for index in order:
        size = round_up(plan.per_layer[index], MIN_BLOCK)
        if max_split <= size <= staging < size + LARGE_BUFFER:
            return overhead - per_layer[index] + (staging - plan.per_layer[index])
    return overhead


def cpu_offloaded_bytes(plan: AllocationPlan | None, limit_bytes: int) -> int:
    """--cpu-offload-gb: models/utils.py maybe_offload_to_cpu moves the parameters of the decoder layers,
    one tensor at a time in layer order, to pinned CPU memory until the limit is reached (the tensor that
    crosses it still moves). Embeddings, lm_head and buffers stay on the GPU."""
    if plan is None or limit_bytes <= 0 or not plan.layers:
        return 0
    # layers differ only in which MLP they carry: spread those tensors evenly over the layers
    per_layer_total = sum(plan.per_layer) + sum(plan.some_layers) // plan.layers
    if not per_layer_total:
        return 0
    everything = sum(plan.per_layer) * plan.layers + sum(plan.some_layers)
    whole_layers = min(plan.layers, limit_bytes // per_layer_total)
    if whole_layers == plan.layers:
        return everything
    return min(everything, max(whole_layers * per_layer_total, limit_bytes))


def offloaded_layer_bytes(plan: AllocationPlan | None) -> int:
    """During a forward, an offloaded layer's parameters are copied back to the GPU for that layer
    (maybe_offload_to_cpu's forward wrapper): one layer's weights sit on top of the activations."""
    if plan is None or not plan.layers:
        return 0
    return sum(plan.per_layer) + -(-sum(plan.some_layers) // plan.layers)
