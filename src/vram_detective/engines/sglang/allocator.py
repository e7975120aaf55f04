"""What SGLang's weights figure counts beyond the tensors: PyTorch's caching allocator keeps whole segments.

SGLang's "Load weight end. mem usage" is a difference of free device memory (torch.cuda.mem_get_info after
empty_cache, utils.py get_available_gpu_memory), so it counts every *reserved* segment in full, where vLLM's
figure counts allocated blocks (engines/vllm/allocator.py). Rules of c10/cuda/CUDACachingAllocator.cpp
(native backend, no expandable segments), the same constants as vLLM's model:
- requests are rounded up to 512 B; those up to 1 MiB share 2 MiB segments (small pool);
- a larger request takes the best-fitting free block of an existing segment, else a new segment: 20 MiB
  below 10 MiB, otherwise the request rounded up to 2 MiB; the rest of a block stays free for later requests
  only when it is more than 1 MiB.
The tensors are allocated in construction order (weights.AllocationPlan); empty_cache returns no segment
that still holds a tensor, so the reserved total is what the figure shows.
"""
from __future__ import annotations

import bisect
from functools import lru_cache

from ...units import MIB, round_up
from ..vllm.allocator import LARGE_BUFFER, MIN_BLOCK, MIN_LARGE_ALLOC, ROUND_LARGE, SMALL_REQUEST

SMALL_SEGMENT = 2 * MIB  # kSmallBuffer


@lru_cache(maxsize=256)
def reserved_bytes(sizes: tuple[int, ...]) -> int:
    """Bytes of the segments a sequence of allocations leaves reserved."""
    small = sum(round_up(size, MIN_BLOCK) for size in sizes if round_up(size, MIN_BLOCK) <= SMALL_REQUEST)
    reserved = round_up(small, SMALL_SEGMENT)
    free: list[int] = []  # sorted sizes of free large blocks
    for size in sizes:
        rounded = round_up(size, MIN_BLOCK)
        if rounded <= SMALL_REQUEST:
            continue
        index = bisect.bisect_left(free, rounded)
        if index < len(free):
            block = free.pop(index)
        else:
            block = LARGE_BUFFER if rounded < MIN_LARGE_ALLOC else round_up(rounded, ROUND_LARGE)
            reserved += block
        if block - rounded > SMALL_REQUEST:
            bisect.insort(free, block - rounded)
    return reserved


def segment_overhead(plan) -> int:
    """Reserved bytes beyond the tensors of an AllocationPlan (0 without one)."""
    if plan is None:
        return 0
    layers = tuple(plan.per_layer) * plan.layers + tuple(plan.some_layers)
    sizes = tuple(plan.before_layers) + layers + tuple(plan.after_layers)
    return max(reserved_bytes(sizes) - sum(sizes), 0)
