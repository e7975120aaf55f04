"""vLLM's block pool (v1/core/block_pool.py, 0.11.0), kept in runs of blocks rather than block by block. Free
blocks wait in one LRU queue: allocation takes from the front; a freed block goes to the back, a request's blocks
tail first so its last blocks are evicted first; a full block keeps its hash while free and can be hit again until
it is taken for new data (then its hash is evicted); a prefix-cache hit revives a free block (vLLM removes it from
the middle of the queue). Whole runs move by list slices. Several KV-cache groups (V1's hybrid manager: sliding
windows beside full attention) share the one queue and pool: each group's hashes form their own chains (owner
key (owner, group)) and a request holds one table per group (vllm.py; a window's skipped blocks leave the front
of its group's table).

Block ids are never observable, only which hashes are cached, the free count and the eviction order, so a
block is named by what it holds: a cached block is a position of its owner's chain (the owner is what its
prefix stands for: a shared system prefix, a session, a request; the position its index in the prompt), any
other block is anonymous (fresh; or, where duplicates are not kept (V0), a duplicate of a hash another block
already holds; V1 keeps a duplicate as a cached copy in an extra chain of the same owner). A chain keeps, per
position, ref: -1 not cached, 0 cached and free (in the queue), n held by n requests; and qpos: the stamp of
the queue entry that holds it while free. The queue is a list of entries [chain, lo, hi, stamp] (positions
hi - 1 down to lo, the order a request frees them) or [None, 0, count, 0] (anonymous blocks), read from a head
index; a hit on a free position sets its qpos to -1, so the entry it sat in skips it (as vLLM removes the block
from the middle of its queue). A request holds a table of [chain, lo, hi] / [None, 0, count] runs over its
first `keys` blocks plus an anonymous tail. A chain with no cached position is dropped: memory is bounded by
the live requests and the pool's cached blocks.
"""
from __future__ import annotations

NONE = [-1]
_NO_RUN = (0, 0, 0)  # an empty table's last run: neither a chain's nor anonymous


class Chain:
    __slots__ = ("owner", "ref", "qpos", "count")

    def __init__(self, owner: object):
        self.owner = owner
        self.ref: list[int] = []
        self.qpos: list[int] = []
        self.count = 0  # cached positions

    def grow(self, stop: int) -> None:
        more = stop - len(self.ref) + 32  # a decode's blocks come one by one: grow a few at a time
        self.ref += NONE * more
        self.qpos += NONE * more


class RunPool:
    __slots__ = ("queue", "head", "nfree", "size", "cached", "caching", "stamp", "uncached_first", "keep_dups",
                 "dups", "swap_dups")

    def __init__(self, num_blocks: int, reserved: int, caching: bool, uncached_first: bool = False,
                 keep_duplicates: bool = False, swap_duplicates: bool = False):
        self.size = num_blocks
        self.caching = caching
        self.uncached_first = uncached_first  # rules.free_uncached_first: anonymous blocks freed to the front
        self.nfree = num_blocks - reserved
        self.queue: list[list] = [[None, 0, self.nfree, 0]]
        self.head = 0
        self.cached: dict[object, Chain] = {}
        self.stamp = 0
        # rules.keeps_duplicates: a block filled with a hash another block holds is a cached copy too (kept in
        # extra chains per owner, oldest first); a lookup takes the oldest cached copy of each position
        self.keep_dups = keep_duplicates
        self.dups: dict[object, list[Chain]] = {}
        # rules.swaps_duplicates: a block filled with a hash another block holds is freed and the request holds
        # the cached block instead (SGLang's radix insert frees the duplicate KV)
        self.swap_dups = swap_duplicates

    @property
    def num_free(self) -> int:
        return self.nfree

    @property
    def used(self) -> int:
        return self.size - self.nfree

    # --- lookups and hits -----------------------------------------------------------------------------
    def hits(self, spans) -> list[list]:
        """The cached runs at the start of (owner, first, stop) spans, up to the first position not cached."""
        out = []
        cached = self.cached
        for owner, first, stop in spans:
            chain = cached.get(owner)
            if chain is None:
                break
            seg = chain.ref[first:stop]
            try:
                end = first + seg.index(-1)
            except ValueError:
                end = first + len(seg)
            if end > first:
                out.append([chain, first, end])
            if end < stop:
                if owner not in self.dups:
                    break
                end = self._copy_hits(out, chain, owner, end, stop)
                if end < stop:
                    break
        return out

    def _copy_hits(self, out: list[list], chain: Chain, owner: object, pos: int, stop: int) -> int:
        """hits() past the first position the owner's first chain misses: each position's oldest cached copy
        (BlockHashToBlockMap.get_one_block, v1/core/block_pool.py 0.11.0). Returns where the hit stops."""
        copies = [chain] + self.dups[owner]
        while pos < stop:
            for copy in copies:
                if len(copy.ref) > pos and copy.ref[pos] >= 0:
                    break
            else:
                return pos
            _append(out, copy, pos, pos + 1)
            pos += 1
        return pos

    def refs(self, owner: object, first: int, stop: int) -> list[int]:
        """The ref of each position in [first, stop) of owner's oldest cached copy (-1: none cached)."""
        chain = self.cached.get(owner)
        seg = chain.ref[first:stop] if chain is not None else []
        seg += NONE * (stop - first - len(seg))
        dups = self.dups.get(owner)
        if dups and -1 in seg:
            for i, v in enumerate(seg):
                if v == -1:
                    for copy in dups:
                        if len(copy.ref) > first + i and copy.ref[first + i] >= 0:
                            seg[i] = copy.ref[first + i]
                            break
        return seg

    def _drop(self, chain: Chain) -> None:
        """A chain with no cached position left: forgotten; an owner's next copy becomes its first chain."""
        owner, cached = chain.owner, self.cached
        dups = self.dups.get(owner)
        if cached.get(owner) is chain:
            if dups:
                cached[owner] = dups.pop(0)
            else:
                del cached[owner]
        elif dups and chain in dups:
            dups.remove(chain)
        if dups is not None and not dups:
            del self.dups[owner]

    def _cache_copy(self, table: list[list], owner: object, lo: int, hi: int) -> None:
        """Positions [lo, hi) that another block already holds: a cached copy in the owner's first extra chain
        free there (vLLM 0.8.5-0.33.0 block_pool.py: "we currently don't de-duplicate the blocks")."""
        dups = self.dups.setdefault(owner, [])
        for copy in dups:
            if len(copy.ref) < hi:
                copy.grow(hi)
            if copy.ref[lo:hi].count(-1) == hi - lo:
                break
        else:
            copy = Chain(owner)
            copy.grow(hi)
            dups.append(copy)
        copy.ref[lo:hi] = [1] * (hi - lo)
        copy.count += hi - lo
        _append(table, copy, lo, hi)

    @staticmethod
    def revived(hits: list[list]) -> int:
        """Hit blocks that are free now (taking them shrinks the free count)."""
        return sum(chain.ref[lo:hi].count(0) for chain, lo, hi in hits)

    def touch(self, hits: list[list]) -> None:
        for chain, lo, hi in hits:
            ref, n = chain.ref, hi - lo
            seg = ref[lo:hi]
            zeros = seg.count(0)
            if zeros:
                chain.qpos[lo:hi] = NONE * n  # out of the queue: their entries skip them
                self.nfree -= zeros
            first = seg[0]
            ref[lo:hi] = [first + 1] * n if seg.count(first) == n else [v + 1 for v in seg]

    # --- allocation -------------------------------------------------------------------------------------
    def take(self, count: int) -> None:
        """`count` new blocks from the front of the queue (the caller checked num_free); evicts their hashes."""
        self.nfree -= count
        if not self.caching:
            return
        queue, head, cached = self.queue, self.head, self.cached
        while count:
            entry = queue[head]
            chain, lo, hi, stamp = entry
            if hi - lo == 1 and chain is not None:  # one block (a window's freed block): _evict inlined
                if chain.qpos[lo] == stamp:
                    chain.ref[lo] = -1
                    chain.count -= 1
                    count -= 1
                    if not chain.count:
                        self._drop(chain)
                head += 1
                continue
            if chain is None:
                if hi > count:
                    entry[2] = hi - count
                    break
                count -= hi
                head += 1
                continue
            qpos = chain.qpos
            k = min(count, hi - lo)
            if qpos[hi - k:hi].count(stamp) == k:  # the top k positions are all still free: evict them
                self._evict(chain, hi - k, hi)
                count -= k
                if hi - k > lo:
                    entry[2] = hi - k
                    break
                head += 1
                continue
            # some positions were hit since (revived): found with list.index, not position by position
            seg, ref = qpos[lo:hi], chain.ref
            free = seg.count(stamp)
            if free > count:  # the top `count` free positions go, the entry keeps the rest
                rev, p = seg[::-1], -1
                for _ in range(count):
                    p = rev.index(stamp, p + 1)
                    ref[hi - 1 - p] = -1
                chain.count -= count
                entry[2] = hi - 1 - p
                break
            p = -1
            for _ in range(free):  # every free position goes: the entry is spent
                p = seg.index(stamp, p + 1)
                ref[lo + p] = -1
            if free:
                count -= free
                chain.count -= free
                if not chain.count:
                    self._drop(chain)
            head += 1
        if head > 4096 and 2 * head > len(queue):  # drop the consumed front now and then
            del queue[:head]
            head = 0
        self.head = head

    def take_ones(self, n: int) -> None:
        """take(n) block by block for a decode (its new block in each group), without take's loop while the front
        entry's top block is free."""
        if not self.caching:
            self.nfree -= n
            return
        queue = self.queue
        for _ in range(n):
            entry = queue[self.head]
            chain, lo, hi, stamp = entry
            if chain is None:
                if hi > 1:
                    entry[2] = hi - 1
                    self.nfree -= 1
                    continue
            elif chain.qpos[hi - 1] == stamp:
                if hi - 1 > lo and chain.count > 1:
                    chain.ref[hi - 1] = -1
                    chain.count -= 1
                    entry[2] = hi - 1
                    self.nfree -= 1
                    continue
                if hi - 1 == lo:  # the entry's only block (a window's freed block)
                    self._evict(chain, lo, hi)
                    head = self.head = self.head + 1
                    self.nfree -= 1
                    if head > 4096 and 2 * head > len(queue):  # take's compaction
                        del queue[:head]
                        self.head = 0
                    continue
            self.take(1)

    def _evict(self, chain: Chain, lo: int, hi: int) -> None:
        chain.ref[lo:hi] = NONE * (hi - lo)
        chain.count -= hi - lo
        if not chain.count:
            self._drop(chain)

    def cache_ones(self, tables: list[list[list]], skips: list[int], owner: object, i: int) -> None:
        """cache(tables[g], (owner, g), i, i + 1) in every group g whose window still holds block i: the block a
        decode filled."""
        cached = self.cached
        for g, table in enumerate(tables):
            if skips[g] > i:
                continue
            key = (owner, g)
            chain = cached.get(key)
            if chain is None:
                chain = cached[key] = Chain(key)
            ref = chain.ref
            if len(ref) <= i:
                chain.grow(i + 1)
            last = table[-1] if table else _NO_RUN
            if ref[i] == -1:
                ref[i] = 1
                chain.count += 1
                if last[0] is chain and last[2] == i:
                    last[2] = i + 1
                else:
                    table.append([chain, i, i + 1])
            elif self.keep_dups:
                self._cache_copy(table, key, i, i + 1)
            elif last[0] is None:
                last[2] += 1
            else:
                table.append([None, 0, 1])

    def cache(self, table: list[list], owner: object, first: int, stop: int) -> None:
        """A request's fresh full blocks at positions [first, stop) get their hashes, except where another
        block already holds one (that block stays anonymous); the runs go to the end of its table."""
        chain = self.cached.get(owner)
        if chain is None:
            chain = self.cached[owner] = Chain(owner)
        ref, n = chain.ref, stop - first
        if len(ref) < stop:
            chain.grow(stop)
        if n == 1:  # a decode filled a block
            if ref[first] == -1:
                ref[first] = 1
                chain.count += 1
                _append(table, chain, first, stop)
            elif self.keep_dups:
                self._cache_copy(table, owner, first, stop)
            elif self.swap_dups:
                self._swap_copy(table, chain, first, stop)
            else:
                _append(table, None, 0, 1)
            return
        seg = ref[first:stop]
        if seg.count(-1) == n:
            ref[first:stop] = [1] * n
            chain.count += n
            _append(table, chain, first, stop)
            return
        new = [v == -1 for v in seg]  # stretches of new hashes and of duplicates, found by list.index
        i = 0
        while i < n:
            fresh = new[i]
            try:
                j = new.index(not fresh, i)
            except ValueError:
                j = n
            if fresh:
                ref[first + i:first + j] = [1] * (j - i)
                chain.count += j - i
                _append(table, chain, first + i, first + j)
            elif self.keep_dups:
                self._cache_copy(table, owner, first + i, first + j)
            elif self.swap_dups:
                self._swap_copy(table, chain, first + i, first + j)
            else:
                _append(table, None, 0, j - i)
            i = j

    def _swap_copy(self, table: list[list], chain: Chain, lo: int, hi: int) -> None:
        """Positions [lo, hi) another block already holds: the request's own blocks go back to the free queue
        and it holds the cached ones (a free one is revived). SGLang 0.5.23 mem_cache/radix_cache.py
        _insert_cache: free_segment(kv_indices[cache_protected_len:prefix_len]), the row rewritten to the tree's
        indices."""
        self.touch([[chain, lo, hi]])
        _append(table, chain, lo, hi)
        self._free_anonymous(hi - lo)

    # --- release ----------------------------------------------------------------------------------------
    def release(self, table: list[list], tail: int) -> None:
        """A request's blocks, tail first: the anonymous tail, then its runs from the last; blocks no other
        request holds go to the back of the queue."""
        if not self.caching:
            self.nfree += tail + sum(hi - lo for _, lo, hi in table)
            return
        queue = self.queue
        stamp = self.stamp = self.stamp + 1
        if tail:
            self._free_anonymous(tail)
        for chain, lo, hi in reversed(table):
            n = hi - lo
            if chain is None:
                self._free_anonymous(n)
                continue
            ref = chain.ref
            seg = ref[lo:hi]
            first = seg[0]
            if seg.count(first) == n:
                ref[lo:hi] = [first - 1] * n
                if first == 1:
                    chain.qpos[lo:hi] = [stamp] * n
                    queue.append([chain, lo, hi, stamp])
                    self.nfree += n
                continue
            seg = [v - 1 for v in seg]
            ref[lo:hi] = seg
            if 0 not in seg:  # every position still held by another request (a shared prefix)
                continue
            zero, runs, a = [not v for v in seg], [], -1  # runs of positions no one holds now
            while True:
                try:
                    a = zero.index(True, a + 1)
                except ValueError:
                    break
                try:
                    b = zero.index(False, a)
                except ValueError:
                    b = n
                runs.append((lo + a, lo + b))
                a = b
            qpos = chain.qpos
            for a, b in reversed(runs):  # from the top
                qpos[a:b] = [stamp] * (b - a)
                queue.append([chain, a, b, stamp])
                self.nfree += b - a

    def release_first(self, table: list[list]) -> None:
        """release() of a request table's first block alone (a sliding window's one skipped block)."""
        run = table[0]
        chain, lo, hi = run
        if hi - lo == 1:
            del table[0]
        elif chain is None:
            run[2] = hi - 1
        else:
            run[1] = lo + 1
        if not self.caching:
            self.nfree += 1
        elif chain is None:
            self._free_anonymous(1)
        else:
            ref = chain.ref
            ref[lo] -= 1
            if not ref[lo]:
                stamp = self.stamp = self.stamp + 1
                chain.qpos[lo] = stamp
                self.queue.append([chain, lo, lo + 1, stamp])
                self.nfree += 1

    def _free_anonymous(self, n: int) -> None:
        queue = self.queue
        if self.uncached_first:  # to the front; anonymous blocks are alike, so their order among them is moot
            head = self.head
            if len(queue) > head and queue[head][0] is None:
                queue[head][2] += n
            elif head:
                head = self.head = head - 1
                queue[head] = [None, 0, n, 0]
            else:
                queue.insert(0, [None, 0, n, 0])
            self.nfree += n
            return
        if len(queue) > self.head and queue[-1][0] is None:  # the last entry is still in the queue
            queue[-1][2] += n
        else:
            queue.append([None, 0, n, 0])
        self.nfree += n


def _append(table: list[list], chain: Chain | None, lo: int, hi: int) -> None:
    """Appends a run to a request's table, merging it with the last one when they continue each other."""
    if table:
        last = table[-1]
        if last[0] is chain and (chain is None or last[2] == lo):
            last[2] += hi - lo
            return
    table.append([chain, lo, hi])
