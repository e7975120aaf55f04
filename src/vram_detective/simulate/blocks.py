"""vLLM's block pool with prefix caching (v1/core/block_pool.py, 0.11.0): free blocks in one LRU queue
(allocation takes from the front; a freed block goes to the back, a request's blocks tail first so its
last blocks are evicted first); a full block keeps its hash while free and can be hit again until it is
taken for new data (then its hash is evicted)."""
from __future__ import annotations

from collections import OrderedDict


class BlockPool:
    __slots__ = ("free", "cached", "key", "ref", "caching", "size")

    def __init__(self, num_blocks: int, reserved: int, caching: bool):
        self.size = num_blocks
        self.free: OrderedDict[int, None] = OrderedDict.fromkeys(range(reserved, num_blocks))
        self.cached: dict[object, int] = {}
        self.key: list[object] = [None] * num_blocks
        self.ref = [0] * num_blocks
        self.caching = caching

    @property
    def num_free(self) -> int:
        return len(self.free)

    @property
    def used(self) -> int:
        return self.size - len(self.free)

    def take(self, count: int) -> list[int]:
        """`count` new blocks (the caller checked num_free); evicts the hashes they held."""
        out = []
        free, key, ref = self.free, self.key, self.ref
        for _ in range(count):
            block = free.popitem(last=False)[0]
            old = key[block]
            if old is not None:
                del self.cached[old]
                key[block] = None
            ref[block] = 1
            out.append(block)
        return out

    def touch(self, block: int) -> None:
        """A prefix-cache hit: the block is shared (and leaves the free queue if it was free)."""
        if self.ref[block] == 0:
            del self.free[block]
        self.ref[block] += 1

    def release(self, blocks) -> None:
        """Blocks in eviction order (callers pass a request's blocks tail first)."""
        ref, free = self.ref, self.free
        for block in blocks:
            ref[block] -= 1
            if ref[block] == 0:
                free[block] = None

    def cache(self, block: int, key: object) -> None:
        if self.caching and self.key[block] is None and key not in self.cached:
            self.cached[key] = block
            self.key[block] = key

    def lookup(self, key: object) -> int | None:
        return self.cached.get(key)
