"""vLLM's block pool with prefix caching (v1/core/block_pool.py, 0.11.0): free blocks in one LRU queue
(allocation takes from the front; a freed block goes to the back, a request's blocks tail first so its
last blocks are evicted first); a full block keeps its hash while free and can be hit again until it is
taken for new data (then its hash is evicted).

A block's hash is (owner, index): the owner is what the block's prefix stands for (a shared system prefix,
a session, a request), the index its position x the number of groups + its group, an integer; hashes are
kept per owner, so a lookup is one integer key and an owner's entry goes when its last block is evicted.
Without prefix caching block ids are never looked at: the free queue is a plain list (a stack).
"""
from __future__ import annotations

from collections import OrderedDict, deque
from itertools import islice


class BlockPool:
    __slots__ = ("free", "cached", "key", "ref", "caching", "size")

    def __init__(self, num_blocks: int, reserved: int, caching: bool):
        self.size = num_blocks
        self.caching = caching
        if caching:
            self.free: OrderedDict[int, None] | list[int] = OrderedDict.fromkeys(range(reserved, num_blocks))
        else:
            self.free = list(range(num_blocks - 1, reserved - 1, -1))
        self.cached: dict[object, dict[int, int]] = {}  # owner -> {index: block}
        self.key: list[tuple | None] = [None] * num_blocks  # (owner, index) of a block holding a hash
        self.ref = [0] * num_blocks

    @property
    def num_free(self) -> int:
        return len(self.free)

    @property
    def used(self) -> int:
        return self.size - len(self.free)

    def take(self, count: int) -> list[int]:
        """`count` new blocks (the caller checked num_free); evicts the hashes they held."""
        free = self.free
        if not self.caching:
            out = free[len(free) - count:]
            del free[len(free) - count:]
            return out
        out = list(islice(free, count))  # the front of the queue, then out of it: C calls, not one per block
        deque(map(free.pop, out), 0)
        key, ref, cached = self.key, self.ref, self.cached
        for block in out:
            old = key[block]
            if old is not None:
                hashes = cached[old[0]]
                del hashes[old[1]]
                if not hashes:
                    del cached[old[0]]
                key[block] = None
            ref[block] = 1
        return out

    def touch(self, block: int) -> None:
        """A prefix-cache hit: the block is shared (and leaves the free queue if it was free)."""
        if self.ref[block] == 0:
            del self.free[block]
        self.ref[block] += 1

    def release(self, blocks) -> None:
        """Blocks in eviction order (callers pass a request's blocks tail first)."""
        free = self.free
        if not self.caching:
            free.extend(blocks)
            return
        ref = self.ref
        for block in blocks:
            ref[block] -= 1
            if ref[block] == 0:
                free[block] = None

    def cache(self, block: int, owner: object, index: int) -> None:
        if self.key[block] is None:
            hashes = self.cached.get(owner)
            if hashes is None:
                hashes = self.cached[owner] = {}
            if index not in hashes:
                hashes[index] = block
                self.key[block] = (owner, index)

    def lookup(self, owner: object, index: int) -> int | None:
        hashes = self.cached.get(owner)
        return hashes.get(index) if hashes is not None else None
