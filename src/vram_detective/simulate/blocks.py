"""vLLM's block pool with prefix caching (v1/core/block_pool.py, 0.11.0), block by block: the pool of several
KV groups or of a sliding window, whose blocks are freed one by one (one full-attention group: runs.py).
Free blocks in one LRU queue (allocation takes from the front; a freed block goes to the back, a request's
blocks tail first so its last blocks are evicted first); a full block keeps its hash while free and can be
hit again until it is taken for new data (then its hash is evicted).

A block's hash is (owner, index): the owner is what the block's prefix stands for (a shared system prefix,
a session, a request), the index its position x the number of groups + its group, an integer; hashes are
kept per owner, so a lookup is one integer key; a block remembers its owner's table and its index (two
lists, not a tuple: a tuple holding a dict stays tracked by the garbage collector).
Speed: the queue is a plain list read from a head index (a request's blocks move as one slice); a hit
on a free block (vLLM removes it from the middle of the queue) only counts a stale entry for that block,
skipped when it reaches the head; a block's stale entries always precede its live one.
Without prefix caching block ids are never looked at: the free queue is a plain list (a stack).
"""
from __future__ import annotations


class BlockPool:
    __slots__ = ("free", "head", "stale", "nstale", "nfree", "cached", "key", "index", "ref", "caching", "size")

    def __init__(self, num_blocks: int, reserved: int, caching: bool):
        self.size = num_blocks
        self.caching = caching
        if caching:
            self.free = list(range(reserved, num_blocks))  # the queue is free[head:]
        else:
            self.free = list(range(num_blocks - 1, reserved - 1, -1))
        self.head = 0
        self.nfree = num_blocks - reserved
        self.stale = [0] * num_blocks  # entries of the block in the queue that a hit made stale
        self.nstale = 0
        self.cached: dict[object, dict[int, int]] = {}  # owner -> {index: block}
        self.key: list[dict | None] = [None] * num_blocks  # the owner's table of a block holding a hash
        self.index = [0] * num_blocks  # and its index there
        self.ref = [0] * num_blocks

    @property
    def num_free(self) -> int:
        return self.nfree if self.caching else len(self.free)

    @property
    def used(self) -> int:
        return self.size - self.num_free

    def take(self, count: int) -> list[int]:
        """`count` new blocks (the caller checked num_free); evicts the hashes they held."""
        free = self.free
        if not self.caching:
            out = free[len(free) - count:]
            del free[len(free) - count:]
            return out
        head = self.head
        if not self.nstale:
            out = free[head:head + count]
            head += count
        else:
            out, stale, skipped = [], self.stale, 0
            append, left = out.append, count
            while left:
                block = free[head]
                head += 1
                if stale[block]:
                    stale[block] -= 1
                    skipped += 1
                else:
                    append(block)
                    left -= 1
            self.nstale -= skipped
        self._advance(head)
        self.nfree -= count
        key, index, ref = self.key, self.index, self.ref
        for block in out:
            hashes = key[block]
            if hashes is not None:
                del hashes[index[block]]
                key[block] = None
            ref[block] = 1
        return out

    def _advance(self, head: int) -> None:
        if head > 4096 and 2 * head > len(self.free):  # drop the consumed front now and then
            del self.free[:head]
            head = 0
        self.head = head

    def touch(self, blocks: list[int]) -> None:
        """Prefix-cache hits: the blocks are shared (and leave the free queue if they were free)."""
        ref, stale, revived = self.ref, self.stale, 0
        for block in blocks:
            n = ref[block]
            if not n:
                stale[block] += 1
                revived += 1
            ref[block] = n + 1
        self.nstale += revived
        self.nfree -= revived

    def release(self, blocks: list[int]) -> None:
        """Distinct blocks in eviction order (callers pass a request's blocks tail first)."""
        free = self.free
        if not self.caching:
            free.extend(blocks)
            return
        ref = self.ref
        before = len(free)
        append = free.append
        for block in blocks:
            n = ref[block] - 1
            ref[block] = n
            if not n:
                append(block)
        self.nfree += len(free) - before

    def cache(self, block: int, owner: object, index: int) -> None:
        if self.key[block] is None:
            hashes = self.cached.get(owner)
            if hashes is None:
                hashes = self.cached[owner] = {}
            if index not in hashes:
                hashes[index] = block
                self.key[block] = hashes
                self.index[block] = index
