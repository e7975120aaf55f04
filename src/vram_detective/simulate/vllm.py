"""vLLM's scheduler over its block pool, step by step (V1: v1/core/sched/scheduler.py schedule(),
v1/core/kv_cache_manager.py allocate_slots / get_computed_blocks; V0: core/scheduler.py, block_manager.py;
release differences in rules.py).

Each step: the running requests first (a decode takes one token of the max_num_batched_tokens budget and
a new block when its last one is full; when the pool has no block the newest running request is
preempted), then, if nothing was preempted, waiting requests in order while the budget, max_num_seqs and
the pool allow (prefix-cache hits first; the prompt chunked to the budget). Decodes run in lockstep: a
decoding request is only touched when it needs a block, leaves a sliding window's block behind or
finishes (a heap of those steps), so a step costs its events, not its batch size.
"""
from __future__ import annotations

import heapq
from collections import deque

from .arrivals import Arrivals
from .blocks import BlockPool
from .cost import CostModel
from .pool import PoolSpec
from .result import Recorder, SimulationResult
from .rules import EngineRules
from .runs import RunPool


class _Live:
    __slots__ = ("n", "req", "prompt", "tokens", "computed", "blocks", "c0", "d0", "epoch", "keys", "decoding",
                 "table", "nblocks")

    def __init__(self, n: int, req, groups: int):
        self.n, self.req = n, req
        self.prompt = self.tokens = req.prompt_tokens
        self.computed = 0
        self.blocks: list[list] = [[] for _ in range(groups)]
        self.c0 = self.d0 = 0
        self.epoch = 0
        self.keys = 0  # blocks already hashed into the prefix cache
        self.decoding = False
        self.table: list[list] = []  # one group in runs (runs.py): the runs of its first `keys` blocks
        self.nblocks = 0


def _cached_run(get, first: int, stop: int, out: list[int]) -> bool:
    """Appends the blocks of indexes first, first + 1, ... up to the first one not cached; True when all of
    [first, stop) are. Looked up in growing chunks: a long prompt's lookups stop near its first miss."""
    step = 32
    while first < stop:
        end = min(first + step, stop)
        found = list(map(get, range(first, end)))
        if None in found:
            out += found[:found.index(None)]
            return False
        out += found
        first, step = end, step * 2
    return True


class VllmSim:
    def __init__(self, pool: PoolSpec, rules: EngineRules, cost: CostModel, arrivals: Arrivals, rec: Recorder):
        self.pool, self.rules, self.cost, self.arrivals, self.rec = pool, rules, cost, arrivals, rec
        caching = rules.prefix_caching if pool.prefix_caching is None else bool(pool.prefix_caching)
        self.chunked = rules.chunked_prefill if pool.chunked_prefill is None else bool(pool.chunked_prefill)
        self.mixed = rules.mixed_prefill_decode or self.chunked
        self.swap = rules.engine == "vllm" and pool.variant == "v0" and pool.preemption_mode == "swap"
        self.bs = pool.block_size
        self.windows = [g.window if (g.window and rules.sliding_window_frees) else 0 for g in pool.groups]
        # one group with nothing to free early: the pool in runs (runs.py), else block by block (blocks.py)
        self.simple = len(self.windows) == 1 and not self.windows[0]
        self.blocks = (RunPool if self.simple else BlockPool)(pool.num_blocks, rules.reserved_blocks, caching)
        self.watermark = int(rules.admission_watermark * pool.num_blocks)
        self.running: dict[int, _Live] = {}  # admission order: the last one is preempted first
        self.prefilling: dict[int, _Live] = {}
        self.decoding = 0
        self.waiting: deque[_Live] = deque()
        self.swapped: deque[_Live] = deque()
        self.cpu_free = pool.num_cpu_blocks
        self.events: list = []  # (decode step, request number, epoch, live)
        self.now = 0.0
        self.dstep = 0  # decode clock: advances on steps that decode
        self.number = 0
        self.blocked = False  # the waiting head failed to allocate; retried after a free

    # --- allocation -------------------------------------------------------------------------------
    def _spans(self, r: _Live, start: int, stop: int) -> tuple[tuple[object, int, int], ...]:
        """Block i's hash stands for its whole prefix: the shared system prefix's id while the block lies
        inside it, else the session's (whose later turns re-send these tokens) or the request's own.
        Returns (owner, first, stop) runs of block indexes over [start, stop)."""
        req = r.req
        inside = req.prefix_tokens // self.bs  # blocks i with (i + 1) x block_size <= prefix_tokens
        own = req.session or r.n
        if inside <= start:
            return ((own, start, stop),)
        if inside >= stop:
            return ((req.prefix_id, start, stop),)
        return ((req.prefix_id, start, inside), (own, inside, stop))

    def _hits(self, r: _Live) -> list[list[int]]:
        """The longest run of cached blocks at the start of the request (all groups), at most tokens - 1."""
        if not self.blocks.caching:
            return []
        if self.simple:
            return self.blocks.hits(self._spans(r, 0, (r.tokens - 1) // self.bs))
        groups = len(self.pool.groups)
        hits: list[list[int]] = [[] for _ in range(groups)]
        cached = self.blocks.cached
        for owner, first, stop in self._spans(r, 0, (r.tokens - 1) // self.bs):
            hashes = cached.get(owner)
            if hashes is None:
                break
            get = hashes.get
            if groups == 1:
                if _cached_run(get, first, stop, hits[0]):
                    continue
                break
            for i in range(first, stop):
                row = [get(i * groups + g) for g in range(groups)]
                if None in row:
                    break
                for g, block in enumerate(row):
                    hits[g].append(block)
            if len(hits[0]) < stop:
                break
        return hits if hits and hits[0] else []

    def _allocate(self, r: _Live, upto: int, hits: list[list[int]] = (), watermark: int = 0) -> bool:
        """allocate_slots: blocks for `upto` tokens in every group, or False when the pool lacks them."""
        target = -(-upto // self.bs)
        if self.simple:
            return self._allocate_runs(r, target, hits, watermark)
        fresh = sum(target - len(b) - (len(hits[g]) if hits else 0) for g, b in enumerate(r.blocks))
        pool = self.blocks
        ref = pool.ref
        revived = sum(list(map(ref.__getitem__, group)).count(0) for group in hits) if hits else 0
        if fresh + revived > pool.num_free - watermark:
            return False
        if hits:  # every group's hits are touched before any group takes new blocks (v1/core/kv_cache_manager.py
            for g, group in enumerate(r.blocks):  # allocate_slots, 0.11.0): a take cannot evict a later group's hit
                pool.touch(hits[g])
                group.extend(hits[g])
        for group in r.blocks:
            if target > len(group):
                group.extend(pool.take(target - len(group)))
        return True

    def _allocate_runs(self, r: _Live, target: int, hits: list[list], watermark: int) -> bool:
        """_allocate on the pool in runs: the same rule (fresh blocks plus the free blocks the hits revive must
        fit the free count less the watermark), the hits' runs first in the request's table."""
        pool = self.blocks
        hit = sum(hi - lo for _, lo, hi in hits) if hits else 0
        fresh = target - r.nblocks - hit
        if fresh + (pool.revived(hits) if hits else 0) > pool.nfree - watermark:
            return False
        if hits:
            pool.touch(hits)
            r.table += hits
            r.nblocks += hit
        if fresh > 0:
            pool.take(fresh)
            r.nblocks += fresh
        return True

    def _hit_blocks(self, hits: list) -> int:
        if self.simple:
            return sum(hi - lo for _, lo, hi in hits)
        return len(hits[0]) if hits else 0

    def _skip_window(self, r: _Live, computed: int) -> None:
        """SlidingWindowManager.remove_skipped_blocks: blocks wholly before computed - window + 1 are freed."""
        for g, window in enumerate(self.windows):
            if not window:
                continue
            group = r.blocks[g]
            skipped = max(0, computed - window + 1) // self.bs
            freed = [group[i] for i in range(min(skipped, len(group))) if group[i] is not None]
            if freed:
                for i in range(min(skipped, len(group))):
                    group[i] = None
                self.blocks.release(freed[::-1])

    def _cache_full(self, r: _Live, computed: int) -> None:
        pool = self.blocks
        if not pool.caching:
            return
        if self.simple:
            full = min(computed // self.bs, r.nblocks)
            if full > r.keys:
                for owner, first, stop in self._spans(r, r.keys, full):
                    pool.cache(r.table, owner, first, stop)
                r.keys = full
            return
        full = min(computed // self.bs, len(r.blocks[0]))
        if full <= r.keys:
            return
        if full == r.keys + 1 and len(r.blocks) == 1:  # a decode filled one block: no spans, no loops
            i, req, block = r.keys, r.req, r.blocks[0][r.keys]
            owner = req.prefix_id if i < req.prefix_tokens // self.bs else (req.session or r.n)
            if block is not None and pool.key[block] is None:
                pool.cache(block, owner, i)
            r.keys = full
            return
        groups = len(r.blocks)
        key, indexes, cached = pool.key, pool.index, pool.cached  # BlockPool.cache, inlined: the hot loop
        for owner, first, stop in self._spans(r, r.keys, full):
            hashes = cached.get(owner)
            if groups == 1:  # the common case without the index arithmetic
                for index, block in zip(range(first, stop), r.blocks[0][first:stop]):
                    if block is not None and key[block] is None:
                        if hashes is None:
                            hashes = cached[owner] = {}
                        if index not in hashes:
                            hashes[index] = block
                            key[block] = hashes
                            indexes[block] = index
                continue
            for g, group in enumerate(r.blocks):
                for i in range(first, stop):
                    block = group[i]
                    if block is not None and key[block] is None:
                        if hashes is None:
                            hashes = cached[owner] = {}
                        index = i * groups + g
                        if index not in hashes:
                            hashes[index] = block
                            key[block] = hashes
                            indexes[block] = index
        r.keys = full

    def _free(self, r: _Live) -> None:
        if self.simple:
            self.blocks.release(r.table, r.nblocks - r.keys)
            r.table, r.nblocks = [], 0
        else:
            for group, window in zip(r.blocks, self.windows):
                self.blocks.release([b for b in reversed(group) if b is not None] if window else group[::-1])
            r.blocks = [[] for _ in r.blocks]
        r.keys = 0
        self.blocked = False

    # --- decode events ------------------------------------------------------------------------------
    def _computed(self, r: _Live) -> int:
        return r.c0 + (self.dstep - r.d0)

    def _next_event(self, r: _Live) -> None:
        """The next decode step at which r needs a block, frees a window block or finishes."""
        c = r.c0 + (self.dstep - r.d0)
        held = r.nblocks if self.simple else len(r.blocks[0])
        until = min(held * self.bs - c, r.prompt + r.req.output_tokens - 2 - c)
        for g, window in enumerate(self.windows):
            if window:
                skipped = max(0, c - window + 1) // self.bs
                until = min(until, (skipped + 1) * self.bs + window - 1 - c)
        heapq.heappush(self.events, (self.dstep + max(until, 0), r.n, r.epoch, r))

    def _start_decode(self, r: _Live) -> None:
        r.c0, r.d0 = r.computed, self.dstep
        self._skip_window(r, r.computed)  # vLLM: at the next step's allocate_slots, before any other allocation
        r.decoding = True
        self.decoding += 1
        self._next_event(r)

    def _stop_decode(self, r: _Live) -> None:
        """Materialize a decoding request (preempted or finishing) and drop its pending events."""
        r.computed = self._computed(r)
        r.tokens = r.computed + 1
        r.epoch += 1
        r.decoding = False
        self.decoding -= 1


    def _preempt(self, cause: str) -> _Live:
        """Preempt the newest running request: recompute (blocks freed, computed = 0) or, on V0 asked to
        swap, its blocks copied to the CPU pool when it has room."""
        victim = self.running.popitem()[1]
        if victim.decoding:
            self._stop_decode(victim)
        self.prefilling.pop(victim.n, None)
        held = victim.nblocks if self.simple else sum(len(group) - group.count(None) for group in victim.blocks)
        if self.swap and held <= self.cpu_free:
            self.cpu_free -= held
            self.rec.swap_out += held * self.pool.block_bytes
            self._free(victim)
            victim.keys = held  # remembers its CPU blocks
            self.swapped.append(victim)
            mode = "swap"
        else:
            self._free(victim)
            victim.computed = 0
            self.waiting.appendleft(victim)
            mode = "recompute"
        self.rec.preempt(self.now, victim.n, cause, mode)
        return victim

    def _grow(self, r: _Live, upto: int, cause: str) -> bool:
        """Allocate for r, preempting the newest running requests until it fits; False if r itself went."""
        while not self._allocate(r, upto):
            if self._preempt(cause) is r:
                return False
        return True

    def _decode_events(self) -> list[_Live]:
        """The decoding requests with something to do at this decode step; returns those finishing."""
        if self.simple:
            return self._decode_events_one_group()
        finishing = []
        events = self.events
        while events and events[0][0] <= self.dstep:
            _, _, epoch, r = heapq.heappop(events)
            if epoch != r.epoch or not r.decoding:
                continue
            c = self._computed(r)
            self._skip_window(r, c)
            if c + 1 > len(r.blocks[0]) * self.bs:
                self._cache_full(r, c)
                if not self._grow(r, c + 1, f"decode of request {r.n} needed a block at {c + 1} tokens"):
                    continue
            if c + 2 - r.prompt >= r.req.output_tokens:
                finishing.append(r)
            else:
                self._next_event(r)
        return finishing

    def _decode_events_one_group(self) -> list[_Live]:
        """_decode_events for one full-attention group (no window to free; the pool in runs), with the common
        event, new blocks taken from the free queue, and the next event inlined."""
        finishing = []
        events, dstep, bs, pool = self.events, self.dstep, self.bs, self.blocks
        caching, pop, push = pool.caching, heapq.heappop, heapq.heappush
        while events and events[0][0] <= dstep:
            _, _, epoch, r = pop(events)
            if epoch != r.epoch or not r.decoding:
                continue
            c = r.c0 + dstep - r.d0
            if c + 1 > r.nblocks * bs:  # then c // bs >= nblocks: every held block is full
                if caching and r.nblocks > r.keys:
                    i, req = r.keys, r.req
                    if r.nblocks == i + 1:  # the one block this request filled: _cache_full without spans
                        owner = req.prefix_id if i < req.prefix_tokens // bs else (req.session or r.n)
                        pool.cache(r.table, owner, i, i + 1)
                        r.keys = i + 1
                    else:
                        self._cache_full(r, c)
                need = -(-(c + 1) // bs) - r.nblocks
                if need == 1 and pool.nfree:
                    pool.take_one()
                    r.nblocks += 1
                elif need <= pool.nfree:
                    pool.take(need)
                    r.nblocks += need
                elif not self._grow(r, c + 1, f"decode of request {r.n} needed a block at {c + 1} tokens"):
                    continue
            left = r.prompt + r.req.output_tokens - 2 - c
            if left <= 0:
                finishing.append(r)
            else:
                until = r.nblocks * bs - c
                push(events, (dstep + max(min(until, left), 0), r.n, r.epoch, r))
        return finishing

    def _prefills(self, budget: int) -> tuple[list[tuple[_Live, int]], int, bool]:
        scheduled, preempted = [], False
        for r in list(self.prefilling.values()):
            if budget <= 0:
                break
            if r.n not in self.prefilling:
                continue  # preempted by an earlier one this step
            n = min(r.tokens - r.computed, budget)
            self._skip_window(r, r.computed)
            before = self.rec.preemption_count
            if not self._grow(r, r.computed + n, f"prefill of request {r.n} needed blocks"):
                preempted = True
                continue
            preempted |= self.rec.preemption_count != before
            scheduled.append((r, n))
            budget -= n
        return scheduled, budget, preempted

    # --- admission ----------------------------------------------------------------------------------
    def _admit(self, budget: int) -> list[tuple[_Live, int]]:
        """Waiting requests in order while the budget, max_num_seqs and the pool allow."""
        scheduled = []
        while self.waiting and budget > 0 and len(self.running) < self.pool.max_num_seqs and not self.blocked:
            r = self.waiting[0]
            hits = self._hits(r) if r.computed == 0 else []
            hit = self._hit_blocks(hits) * self.bs
            n = r.tokens - hit
            if not self.chunked and n > budget:
                self.blocked = n > self.pool.max_num_batched_tokens  # never fits one step
                break
            n = min(n, budget)
            if not self._allocate(r, hit + n, hits, self.watermark):
                self.blocked = True
                self.rec.held.add(r.n)  # waits for blocks, not for the step budget or max_num_seqs
                break
            self.waiting.popleft()
            r.computed, r.keys = hit, hit // self.bs
            self.rec.hit_tokens += hit
            self.rec.prompt_tokens += r.tokens
            self.running[r.n] = self.prefilling[r.n] = r
            scheduled.append((r, n))
            budget -= n
        return scheduled

    def _swap_in(self) -> None:
        """V0: swapped requests come back (before any new admission) when the pool has their blocks."""
        while self.swapped and len(self.running) < self.pool.max_num_seqs:
            r = self.swapped[0]
            if not self._allocate(r, r.computed + 1, (), self.watermark):
                return
            self.swapped.popleft()
            self.cpu_free += r.keys
            self.rec.swap_in += r.keys * self.pool.block_bytes
            r.keys = 0
            self.running[r.n] = r
            self._start_decode(r)

    def _finish(self, r: _Live) -> None:
        if r.decoding:
            self._stop_decode(r)
        self._cache_full(r, r.computed)
        del self.running[r.n]
        self._free(r)
        self.rec.finished += 1
        self.arrivals.finished(r.req, self.now)

    # --- the step -----------------------------------------------------------------------------------
    def _arrive(self) -> None:
        arrivals = self.arrivals
        while arrivals.heap and arrivals.heap[0][0] <= self.now:
            self.waiting.append(_Live(self.number, arrivals.pop(), len(self.pool.groups)))
            self.number += 1
            self.rec.arrived += 1

    def _step(self) -> None:
        self._arrive()
        budget = self.pool.max_num_batched_tokens
        scheduled: list[tuple[_Live, int]] = []
        finishing: list[_Live] = []
        decodes = 0
        if not self.mixed and not self.swapped:
            scheduled = self._admit(budget)  # V0: a step of prompts only, when one fits
        if not scheduled:
            finishing = self._decode_events()
            decodes = self.decoding
            scheduled, budget, preempted = self._prefills(budget - decodes)
            self._swap_in()
            if not preempted and self.mixed and not self.swapped:
                scheduled += self._admit(budget)
        self.now += self.cost.step_s(sum(n for _, n in scheduled), decodes)
        self.rec.request_steps += decodes + len(scheduled)
        if decodes:
            self.dstep += 1
        for r, n in scheduled:
            if r.n in self.prefilling:
                self._prefilled(r, n)
        for r in finishing:
            if r.decoding:
                self._finish(r)
        if not self.running and self.blocked and self.waiting:
            self._reject(self.waiting.popleft())
        self.rec.state(self.now, self.blocks.used, len(self.running), len(self.waiting) + len(self.swapped))

    def _prefilled(self, r: _Live, n: int) -> None:
        r.computed += n
        self._cache_full(r, r.computed)
        if r.computed < r.tokens:
            return
        del self.prefilling[r.n]
        r.tokens += 1  # the step samples a token
        if r.tokens - r.prompt >= r.req.output_tokens:
            self._finish(r)
        else:
            self._start_decode(r)

    def _reject(self, r: _Live) -> None:
        """A request the empty pool cannot hold (vLLM refuses it at admission)."""
        self.rejected += 1
        self.blocked = False
        self.arrivals.finished(r.req, self.now)

    def _fast_forward(self) -> None:
        """Steps that only decode and touch no request: jump over them at once."""
        if self.prefilling or self.swapped or not self.events or not self.decoding:
            return
        can_admit = self.waiting and not self.blocked and len(self.running) < self.pool.max_num_seqs
        if can_admit:
            return
        k = self.events[0][0] - self.dstep
        dt = self.cost.step_s(0, self.decoding)
        t = self.arrivals.next_time()
        if t is not None and len(self.running) < self.pool.max_num_seqs and not self.blocked:
            k = min(k, int((t - self.now) / dt))
        if k > 0:
            self.now += k * dt
            self.dstep += k
            self.rec.request_steps += k * self.decoding

    def run(self) -> float:
        self.rejected = 0
        while True:
            if not self.running and not self.waiting and not self.swapped:
                t = self.arrivals.next_time()
                if t is None:
                    return self.now
                self.now = max(self.now, t)
            self._fast_forward()
            self._step()
