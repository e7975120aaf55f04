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
from .cost import CostModel
from .pool import PoolSpec
from .result import Recorder, SimulationResult
from .rules import EngineRules
from .runs import RunPool


class _Live:
    __slots__ = ("n", "req", "prompt", "tokens", "computed", "skip", "c0", "d0", "epoch", "keys", "decoding",
                 "table", "nblocks", "order")

    def __init__(self, n: int, req, groups: int):
        """groups: 0 on the one-group path (table: that group's runs), else one table of runs per group."""
        self.n, self.req = n, req
        self.prompt = self.tokens = req.prompt_tokens
        self.computed = 0
        self.c0 = self.d0 = 0
        self.epoch = 0
        self.keys = 0  # blocks already hashed into the prefix cache
        self.decoding = False
        # runs (runs.py) of the first `keys` blocks; a group whose window freed its first skip[g] blocks keeps
        # the runs of blocks skip[g] .. keys - 1; the rest of the nblocks blocks are anonymous
        self.table: list = [[] for _ in range(groups)] if groups else []
        self.skip = [0] * groups
        self.nblocks = 0  # every group holds (or has freed) the same number of blocks
        self.order = 0  # its place in the running list (admission order): decodes are scheduled in this order


class VllmSim:
    def __init__(self, pool: PoolSpec, rules: EngineRules, cost: CostModel, arrivals: Arrivals, rec: Recorder):
        self.pool, self.rules, self.cost, self.arrivals, self.rec = pool, rules, cost, arrivals, rec
        caching = rules.prefix_caching if pool.prefix_caching is None else bool(pool.prefix_caching)
        self.chunked = rules.chunked_prefill if pool.chunked_prefill is None else bool(pool.chunked_prefill)
        self.mixed = rules.mixed_prefill_decode or self.chunked
        # swapping to CPU blocks is V0's (engine path "v0"), asked for with preemption_mode swap
        self.swap = pool.variant == "v0" and pool.preemption_mode == "swap"
        self.bs = pool.block_size
        self.windows = [g.window if (g.window and rules.sliding_window_frees) else 0 for g in pool.groups]
        # one group with nothing to free early: the fast path; else a table of runs per group, the groups' hashes
        # kept apart by owner keys (owner, group)
        self.simple = len(self.windows) == 1 and not self.windows[0]
        self.ngroups = 0 if self.simple else len(self.windows)
        self.slides = [(g, window - 1) for g, window in enumerate(self.windows) if window]
        self.slides_all = [(g, window) for g, window in enumerate(self.windows) if window]
        self.blocks = RunPool(pool.num_blocks, rules.reserved_blocks, caching, rules.free_uncached_first,
                              rules.keeps_duplicates, rules.swaps_duplicates)
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
        self.admitted = 0  # admissions so far: a request's place in the running order
        # the waiting head failed to allocate: retried at the next step that is not skipped (vLLM retries every
        # step; a skipped step changes no block, so its retry would fail the same way); lookup: its tokens and
        # hit then, counted again on every skipped step as vLLM's prefix-cache counter counts every retry
        self.blocked = False
        self.lookup: tuple[int, int] | None = None
        self.hash_at_schedule = rules.hash_at_schedule
        self.any_preemption_stops = rules.no_admission_after_preemption == "any"
        self.fits_prompt = rules.admission_fits_prompt
        self.admission_caps = self._admission_caps(pool, rules.admission_caps_window)
        self.counts_preempted = rules.lookup_counts_preempted
        self.counts_retries = rules.lookup_counts_retries
        self.lookup_in_blocks = rules.lookup_in_blocks
        self.caches_decodes = rules.caches_decodes  # a block a decode fills is cached then, not at the finish

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

    def _hits(self, r: _Live):
        """The request's prefix-cache hit, at most tokens - 1: one group, the runs of cached blocks from its
        start; several groups, (hit blocks, runs per group, first held block per group) or ()."""
        if not self.blocks.caching:
            return []
        spans = self._spans(r, 0, (r.tokens - 1) // self.bs)
        if self.simple:
            return self.blocks.hits(spans)
        return self._hybrid_hits(spans)

    def _hybrid_hits(self, spans) -> tuple:
        """HybridKVCacheCoordinator.find_longest_cache_hit (v1/core/kv_cache_coordinator.py, 0.11.0): the full
        groups' longest prefix of cached blocks first; within it a sliding-window group
        (SlidingWindowManager.find_longest_cache_hit) needs only the cdiv(window - 1, block) cached blocks before
        the hit point, scanning down from the top (the blocks before them are the null block: neither held nor
        needed), or else the cached blocks from block 0. Several windows: repeated until the hit stops
        shrinking (one window: once)."""
        pool, reach = self.blocks, spans[-1][2]
        for g, window in enumerate(self.windows):
            if not window:
                runs = pool.hits([((owner, g), first, min(stop, reach)) for owner, first, stop in spans
                                  if first < reach])
                reach = runs[-1][2] if runs else 0
                if not reach:
                    return ()
        starts = [0] * self.ngroups
        while True:
            top = reach
            for g, window in self.slides_all:
                starts[g], reach = self._window_hit(spans, g, window, reach)
                if not reach:
                    return ()
            if reach == top:
                break
        hits = [pool.hits([((owner, g), max(first, starts[g]), min(stop, reach)) for owner, first, stop in spans
                           if first < reach and stop > starts[g]]) for g in range(self.ngroups)]
        return reach, hits, starts

    def _window_hit(self, spans, g: int, window: int, reach: int) -> tuple[int, int]:
        """(first held block, hit blocks) of sliding group g below `reach` (_hybrid_hits)."""
        refs = []
        for owner, first, stop in spans:
            if first >= reach:
                break
            stop = min(stop, reach)
            refs += self.blocks.refs((owner, g), first, stop)
        need = -(-(window - 1) // self.bs)
        top = reach
        while top > 0:  # runs of cached blocks from the top down: the first one of `need` blocks is the hit
            try:
                low = top - refs[top - 1::-1].index(-1)
            except ValueError:
                low = 0
            if top - low >= need:
                return top - need, top
            if low == 0:
                return 0, top
            top = low - 1
        return 0, 0

    def _allocate(self, r: _Live, upto: int, hits=(), watermark: int = 0) -> bool:
        """allocate_slots: blocks for `upto` tokens in every group, or False when the pool lacks them."""
        target = -(-upto // self.bs)
        if self.simple:
            return self._allocate_runs(r, target, hits, watermark)
        pool = self.blocks
        hit, runs_by_group, starts = hits if hits else (0, (), ())
        fresh = self.ngroups * (target - r.nblocks - hit)
        if fresh + (sum(map(pool.revived, runs_by_group)) if hits else 0) > pool.nfree - watermark:
            return False
        if hits:  # every group's hits are touched before any group takes new blocks (v1/core/kv_cache_manager.py
            for table, runs in zip(r.table, runs_by_group):  # allocate_slots, 0.11.0): a take cannot evict a
                pool.touch(runs)  # later group's hit
                table += runs
            r.skip = list(starts)  # a window's blocks before its hit are the null block
            r.nblocks += hit
        if fresh > 0:  # group by group from the front of the one queue: one take
            pool.take(fresh)
            r.nblocks = target
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

    def _fits(self, r: _Live, hits) -> bool:
        """KVCacheManager.can_fit_full_sequence (v1/core/kv_cache_manager.py, 0.19.0): the blocks of the whole
        prompt, less the hit, plus the free blocks the hit revives, fit the free blocks (the admission gate of
        scheduler_reserve_full_isl); from 0.21.0 a sliding group counts at most its admission cap."""
        pool, need = self.blocks, -(-r.tokens // self.bs)
        if self.simple:
            return need - self._hit_blocks(hits) + (pool.revived(hits) if hits else 0) <= pool.nfree
        hit, runs_by_group, _ = hits if hits else (0, (), ())
        wanted = sum(max(min(need, cap) - hit, 0) for cap in self.admission_caps)
        return wanted + sum(map(pool.revived, runs_by_group)) <= pool.nfree

    def _admission_caps(self, pool, caps_window: bool) -> list[int]:
        """Per group, the most blocks the whole-prompt gate counts: a sliding window's group from 0.21.0
        (kv_cache_interface.py SlidingWindowSpec.max_admission_blocks_per_request: cdiv(min(window - 1 +
        in-flight tokens, max_model_len), block) + 1). The in-flight tokens are max_num_batched_tokens, from 0.26.0
        VllmConfig.max_in_flight_tokens = max_concurrent_batches x max_num_batched_tokens (sched/scheduler.py
        0.26.0-0.33.0 hands it to the KVCacheManager): the pool's in_flight_tokens, set by whoever built it."""
        big = 1 << 62
        if not caps_window:
            return [big] * len(self.windows)
        longest = pool.max_model_len or big
        in_flight = pool.in_flight_tokens or pool.max_num_batched_tokens
        return [-(-min(window - 1 + in_flight, longest) // self.bs) + 1
                if window else big for window in self.windows]

    def _hit_blocks(self, hits) -> int:
        if self.simple:
            return sum(hi - lo for _, lo, hi in hits)
        return hits[0] if hits else 0

    def _skip_window(self, r: _Live, computed: int) -> None:
        """SlidingWindowManager.remove_skipped_blocks (v1/core/single_type_kv_cache_manager.py, 0.11.0): blocks
        wholly before computed - window + 1 are freed, the last first."""
        for g, window in enumerate(self.windows):
            if window:
                skipped = min(max(0, computed - window + 1) // self.bs, r.nblocks)
                if skipped > r.skip[g]:
                    self._free_front(r, g, skipped)

    def _free_front(self, r: _Live, g: int, stop: int) -> None:
        """Frees group g's blocks skip[g] .. stop - 1: the table's first runs, then anonymous blocks past them."""
        start, table = r.skip[g], r.table[g]
        if stop == start + 1 and r.keys > start:  # a decode's one block: the table's first position
            self.blocks.release_first(table)
            r.skip[g] = stop
            return
        hashed = min(stop, max(start, r.keys))
        n, front = hashed - start, []
        while n > 0:
            run = table[0]
            size = run[2] - run[1]
            if size <= n:
                front.append(table.pop(0))
                n -= size
            elif run[0] is None:
                front.append([None, 0, n])
                run[2] -= n
                n = 0
            else:
                front.append([run[0], run[1], run[1] + n])
                run[1] += n
                n = 0
        self.blocks.release(front, stop - hashed)
        r.skip[g] = stop

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
        full = min(computed // self.bs, r.nblocks)
        if full <= r.keys:
            return
        for g, table in enumerate(r.table):  # a window's freed blocks are gone: not hashed
            first = max(r.keys, r.skip[g])
            if first < full:
                for owner, lo, hi in self._spans(r, first, full):
                    pool.cache(table, (owner, g), lo, hi)
        r.keys = full

    def _free(self, r: _Live) -> None:
        if self.simple:
            self.blocks.release(r.table, r.nblocks - r.keys)
            r.table = []
        else:  # group by group, each tail first
            for g, table in enumerate(r.table):
                self.blocks.release(table, r.nblocks - max(r.skip[g], r.keys))
            r.table = [[] for _ in r.table]
            r.skip = [0] * self.ngroups
        r.nblocks = 0
        r.keys = 0
        self.blocked = False

    # --- decode events ------------------------------------------------------------------------------
    def _computed(self, r: _Live) -> int:
        return r.c0 + (self.dstep - r.d0)

    def _next_event(self, r: _Live) -> None:
        """The next decode step at which r needs a block, frees a window block or finishes."""
        c = r.c0 + (self.dstep - r.d0)
        held = r.nblocks
        until = min(held * self.bs - c, r.prompt + r.req.output_tokens - 2 - c)
        for g, window in enumerate(self.windows):
            if window:
                skipped = max(0, c - window + 1) // self.bs
                until = 0 if skipped > r.skip[g] else min(until, (skipped + 1) * self.bs + window - 1 - c)
        heapq.heappush(self.events, (self.dstep + max(until, 0), r.order, r.epoch, r))

    def _start_decode(self, r: _Live) -> None:
        """The window's out-of-window blocks are freed by the next step's allocate_slots (its first decode event:
        SlidingWindowManager.remove_skipped_blocks, v1/core/single_type_kv_cache_manager.py 0.11.0), in running
        order among the step's other allocations."""
        r.c0, r.d0 = r.computed, self.dstep
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
        if self.hash_at_schedule:  # its last allocate_slots hashed every full block of what it had computed
            self._cache_full(victim, victim.computed)
        held = victim.nblocks if self.simple else sum(victim.nblocks - skip for skip in victim.skip)
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
        """Allocate for r, preempting the newest running requests until it fits; False if r itself went. A
        request that preempts itself with nothing else running can never be served by this pool (vLLM's
        startup check keeps such pools from existing): it is refused instead of coming back forever."""
        while not self._allocate(r, upto):
            if self._preempt(cause) is r:
                if not self.running:
                    self._refuse_preempted(r)
                return False
        return True

    def _refuse_preempted(self, r: _Live) -> None:
        if self.swapped and self.swapped[-1] is r:
            self.swapped.pop()
            self.cpu_free += r.keys
        elif self.waiting and self.waiting[0] is r:
            self.waiting.popleft()
        self._reject(r)

    def _decode_events(self) -> list[_Live]:
        """The decoding requests with something to do at this decode step; returns those finishing. Several
        groups: a window's skipped blocks freed, the filled block hashed in every group, new blocks taken (one
        take for all groups), the next event inlined."""
        if self.simple:
            return self._decode_events_one_group()
        finishing = []
        events, dstep, bs, pool, groups = self.events, self.dstep, self.bs, self.blocks, self.ngroups
        slides, pop, replace = self.slides, heapq.heappop, heapq.heapreplace
        while events and events[0][0] <= dstep:  # the event stays on top until handled (nothing here pushes)
            _, _, epoch, r = events[0]
            if epoch != r.epoch or not r.decoding:
                pop(events)
                continue
            c = r.c0 + dstep - r.d0
            nblocks, left = r.nblocks, r.prompt + r.req.output_tokens - 2 - c
            until = left
            for g, reach in slides:  # reach: window - 1
                skipped = (c - reach) // bs if c > reach else 0
                until_skip = (skipped + 1) * bs + reach - c  # the window's next skipped block
                if until_skip < until:
                    until = until_skip
                if skipped > nblocks:
                    skipped = nblocks
                skip = r.skip
                if skipped > skip[g]:
                    if skipped == skip[g] + 1 and r.keys > skip[g]:  # one hashed block: _free_front's first case
                        pool.release_first(r.table[g])
                        skip[g] = skipped
                    else:
                        self._free_front(r, g, skipped)
            if c + 1 > nblocks * bs:
                if pool.caching and nblocks > r.keys:
                    i = r.keys
                    if nblocks == i + 1:  # the one block this request filled, in every group still holding it
                        req = r.req
                        owner = req.prefix_id if i < req.prefix_tokens // bs else (req.session or r.n)
                        pool.cache_ones(r.table, r.skip, owner, i)
                        r.keys = i + 1
                    else:
                        self._cache_full(r, c)
                need = -(-(c + 1) // bs) - nblocks
                if need == 1 and groups <= pool.nfree:  # a block in each group, group by group
                    pool.take_ones(groups)
                    r.nblocks = nblocks + 1
                elif need * groups <= pool.nfree:
                    pool.take(need * groups)
                    r.nblocks = nblocks + need
                elif not self._grow(r, c + 1, f"decode of request {r.n} needed a block at {c + 1} tokens"):
                    pop(events)
                    continue
            if left <= 0:
                pop(events)
                finishing.append(r)
            else:
                until_block = r.nblocks * bs - c
                if until_block < until:
                    until = until_block
                replace(events, (dstep + (until if until > 0 else 0), r.order, r.epoch, r))  # pop and push in one
        return finishing

    def _decode_events_one_group(self) -> list[_Live]:
        """_decode_events for one full-attention group (no window to free; the pool in runs), with the common
        event, new blocks taken from the free queue, and the next event inlined."""
        finishing = []
        events, dstep, bs, pool = self.events, self.dstep, self.bs, self.blocks
        caching, pop, push = pool.caching and self.caches_decodes, heapq.heappop, heapq.heappush
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
                    pool.take_ones(1)
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
                push(events, (dstep + max(min(until, left), 0), r.order, r.epoch, r))
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
            if self.hash_at_schedule:
                self._cache_full(r, r.computed + n)
            scheduled.append((r, n))
            budget -= n
        return scheduled, budget, preempted

    # --- admission ----------------------------------------------------------------------------------
    def _admit(self, budget: int) -> list[tuple[_Live, int]]:
        """Waiting requests in order while the budget, max_num_seqs and the pool allow."""
        scheduled, rec = [], self.rec
        self.blocked, self.lookup = False, None
        while self.waiting and budget > 0 and len(self.running) < self.pool.max_num_seqs:
            r = self.waiting[0]
            hits = self._hits(r) if r.computed == 0 else []
            hit = self._hit_blocks(hits) * self.bs
            looked = r.computed == 0 and self.blocks.caching and (self.counts_preempted or r.n not in rec.preempted)
            if looked:  # vLLM's counter (tokens; 0.8.5: the lookup's full blocks, the last one left out)
                query, found = ((r.tokens - 1) // self.bs, hit // self.bs) if self.lookup_in_blocks else (r.tokens, hit)
            if looked and self.counts_retries:  # every lookup (get_computed_blocks, 0.11.0)
                rec.lookup_queries += query
                rec.lookup_hits += found
            n = r.tokens - hit
            if not self.chunked and n > budget:
                self.blocked = n > self.pool.max_num_batched_tokens  # never fits one step
                break
            n = min(n, budget)
            if (self.fits_prompt and not self._fits(r, hits)) or not self._allocate(r, hit + n, hits, self.watermark):
                self.blocked = True
                self.lookup = (query, found) if looked and self.counts_retries else None
                rec.held.add(r.n)  # waits for blocks, not for the step budget or max_num_seqs
                break
            self.waiting.popleft()
            if looked and not self.counts_retries:  # counted at admission (Scheduler.schedule, 0.27.0)
                rec.lookup_queries += query
                rec.lookup_hits += found
            r.computed, r.keys = hit, hit // self.bs
            self.admitted += 1
            r.order = self.admitted
            if self.hash_at_schedule:  # KVCacheManager.allocate_slots -> cache_blocks (0.11.0): the next request
                self._cache_full(r, hit + n)  # of this very step already hits these blocks
            rec.hit_tokens += hit
            rec.prompt_tokens += r.tokens
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
            self.admitted += 1
            r.order = self.admitted
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
            self.waiting.append(_Live(self.number, arrivals.pop(), self.ngroups))
            self.number += 1
            self.rec.arrived += 1

    def _step(self) -> None:
        """One scheduler step; a call whose callee has nothing to do (no prefill, nothing swapped, no admission
        possible) is skipped: most steps only decode."""
        heap = self.arrivals.heap
        if heap and heap[0][0] <= self.now:
            self._arrive()
        scheduled: list[tuple[_Live, int]] = []
        finishing: list[_Live] = []
        decodes = 0
        rec = self.rec
        if not self.mixed and not self.swapped:
            scheduled = self._admit(self.pool.max_num_batched_tokens)  # V0: a step of prompts only, when one fits
        if not scheduled:
            before = rec.preemption_count
            finishing = self._decode_events()
            decodes = self.decoding
            if self.prefilling or self.swapped or self.waiting:
                by_decode = self.any_preemption_stops and rec.preemption_count != before
                scheduled = self._schedule(self.pool.max_num_batched_tokens - decodes, by_decode)
        if scheduled:
            self.now += self.cost.step_s(sum([n for _, n in scheduled]), decodes)
            rec.request_steps += decodes + len(scheduled)
        else:
            self.now += self.cost.step_s(0, decodes)
            rec.request_steps += decodes
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
        state = (self.blocks.size - self.blocks.nfree, len(self.running), len(self.waiting) + len(self.swapped))
        if state != rec.last:
            rec.state(self.now, *state)

    def _schedule(self, budget: int, preempted: bool) -> list[tuple[_Live, int]]:
        """The step's prefills, swap-ins and admissions after its decodes (budget: the tokens they left). A step
        whose prefills preempted admits nothing; on vLLM V1 a step whose decodes preempted neither
        (`preempted`; rules.no_admission_after_preemption)."""
        scheduled = []
        if self.prefilling:
            scheduled, budget, by_prefill = self._prefills(budget)
            preempted |= by_prefill
        if self.swapped:
            self._swap_in()
        if not preempted and self.mixed and not self.swapped and self.waiting:
            scheduled += self._admit(budget)
        return scheduled

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
        k = self.events[0][0] - self.dstep
        if k <= 0:  # the next step has an event (most steps that are not skipped)
            return
        can_admit = self.waiting and not self.blocked and len(self.running) < self.pool.max_num_seqs
        if can_admit:
            return
        dt = self.cost.step_s(0, self.decoding)
        t = self.arrivals.next_time()
        if t is not None and len(self.running) < self.pool.max_num_seqs and not self.blocked:
            k = min(k, int((t - self.now) / dt))
        if k > 0:
            self.now += k * dt
            self.dstep += k
            self.rec.request_steps += k * self.decoding
            if self.lookup and len(self.running) < self.pool.max_num_seqs \
                    and self.decoding < self.pool.max_num_batched_tokens:  # the blocked head's k failed retries
                self.rec.lookup_queries += k * self.lookup[0]
                self.rec.lookup_hits += k * self.lookup[1]

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
            self.rec.tick()
