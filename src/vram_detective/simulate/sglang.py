"""SGLang's scheduler over its token pool, on the same stepping as vllm.py; rules read from SGLang 0.5.23
(managers/scheduler.py get_next_batch_to_run / update_running_batch, managers/schedule_policy.py PrefillAdder,
mem_cache/prefill_budget.py PrefillBudget, managers/schedule_batch.py retract_decode,
managers/scheduler_components/new_token_ratio_tracker.py) and checked step for step against that code run on a CPU
(benchmarks/sglang_scheduler_conformance.py, docs/scheduler-conformance.md):

- the pool is max_total_num_tokens tokens in pages of page_size; the radix cache shares prefixes and evicts least
  recently used unreferenced pages (modelled with the block pool's LRU: a cached free page is free);
- a step is a prefill batch when one can be formed, else a decode step of every running request (a prefill batch
  runs alone: no mixed chunk by default);
- the prefill batch: the chunked request's next chunk first, then waiting requests in order while
  chunked_prefill_size, the rows (max_running_requests) and the memory budget allow. A request enters when
  extend + min(max_new - outputs, 4096) + page < free - offset, the offset being the running requests'
  min(max_new - outputs, 4096) x new_token_ratio and, for each request of this batch, one page plus its max_new
  (0 for a truncated chunk); a request that does not fit (or a full set of rows) closes admission until a request
  leaves the running batch, when requests are decoding (else the next step tries again);
- the ratio starts at 0.7 and decays by 0.7 x (1 - 0.14) / 600 per decode step down to 0.7 x 0.14;
- before a decode step, when the pool lacks a page for every running request, retract_decode takes back
  requests with the fewest output tokens (ties: the longest prompt), at least one and until the rest fit, to the
  back of the queue, and resets the ratio to (outputs + 20 n) / (max_new + 1) over the requests left.
"""
from __future__ import annotations

from .vllm import VllmSim, _Live


class SglangSim(VllmSim):
    def __init__(self, *args):
        super().__init__(*args)
        init, factor, steps = self.rules.new_token_ratio
        self.ratio, self.min_ratio = init, init * factor
        self.decay = (init - self.min_ratio) / steps
        self.full = False  # ScheduleBatch.batch_is_full: admission closed until a request leaves

    # --- what a request has produced and still reserves ------------------------------------------------
    def _generated(self, r: _Live) -> int:
        return (r.c0 + self.dstep - r.d0 + 1 - r.prompt) if r.decoding else r.tokens - r.prompt

    def _offset(self) -> float:
        """PrefillAdder.__init__: the running requests' min(max_new - outputs, CLIP_MAX_NEW_TOKENS) x ratio, in
        tokens (the request still prefilling a chunk is not in the running batch)."""
        clip, ratio = self.rules.clip_max_new_tokens, self.ratio
        return sum(min(r.req.output_tokens - self._generated(r), clip) * ratio
                   for r in self.running.values() if r.decoding)

    # --- retraction --------------------------------------------------------------------------------------
    def _preempt(self, cause: str) -> _Live:
        """retract_decode's victim: sorted by (len(output_ids), -len(origin_input_ids)) descending, the last
        popped; it goes to the back of the waiting queue (Scheduler._add_request_to_queue)."""
        def order(r: _Live):
            return self._generated(r), -r.prompt
        victim = min(self.running.values(), key=order)
        self.running[victim.n] = self.running.pop(victim.n)  # the base class preempts the last one
        victim = super()._preempt(cause)
        self.rec.preemptions[-1:] = [p.__class__(p.time_s, p.request, p.cause, "retract")
                                     for p in self.rec.preemptions[-1:] if p.request == victim.n]
        if self.waiting and self.waiting[0] is victim:
            self.waiting.popleft()
            self.waiting.append(victim)
        self.full = False
        return victim

    def _decode_need(self) -> int:
        """new_tokens_required_next_decode: a page for every running request whose last page is full."""
        if self.bs == 1:
            return self.decoding
        bs, dstep = self.bs, self.dstep
        return sum(1 for r in self.running.values()
                   if r.decoding and r.c0 + dstep - r.d0 + 1 > r.nblocks * bs)

    def _retract(self) -> None:
        """update_running_batch: check_decode_mem (free + evictable pages cover the step), else retract_decode:
        at least one request, then until the rest fit, always keeping one; the ratio re-estimated."""
        if self.decoding <= self.blocks.nfree or self._decode_need() <= self.blocks.nfree:
            self.ratio = max(self.min_ratio, self.ratio - self.decay)
            return
        while len(self.running) > 1:
            self._preempt("decode out of KV cache (retract_decode)")
            if self._decode_need() <= self.blocks.nfree:
                break
        self._reset_ratio()

    def _reset_ratio(self) -> None:
        decoded = sum(self._generated(r) for r in self.running.values())
        wanted = sum(r.req.output_tokens for r in self.running.values())
        steps = self.rules.retract_decode_steps
        self.ratio = min(1.0, (decoded + steps * len(self.running)) / (wanted + 1))

    # --- the prefill batch ---------------------------------------------------------------------------------
    def _chunk(self, budget: int, offset: float) -> tuple[list, int, float]:
        """PrefillAdder.add_chunked_req: the chunked request's next chunk, min(budget, remaining) (the whole
        budget when nothing remains), with a page and, on its last chunk, its max_new reserved."""
        r = next(iter(self.prefilling.values()))
        self._cache_full(r, r.computed)  # get_next_batch_to_run: stash_chunked_request inserts its last chunk
        room = min(budget, int(self.blocks.nfree * self.bs - offset))
        n = min(r.tokens - r.computed, room if room > 0 else budget)
        if not self._grow(r, r.computed + n, f"prefill of request {r.n} needed tokens"):
            return [], budget, offset
        last = r.computed + n >= r.tokens
        clip = self.rules.clip_max_new_tokens
        offset += self.bs + (min(r.req.output_tokens, clip) if last else 0)
        return [(r, n)], budget - n, offset

    def _admit(self, budget: int, offset: float = 0.0) -> list[tuple[_Live, int]]:
        """The waiting requests in order (schedule_policy fcfs) while the budget, the rows and the memory budget
        allow (PrefillAdder.add_one_req / _select_prefill_admission, PrefillBudget.check_prefill / reserve)."""
        scheduled, rec, pool, bs = [], self.rec, self.blocks, self.bs
        clip = self.rules.clip_max_new_tokens
        while self.waiting and budget > 0 and not self.full:
            if len(self.running) >= self.pool.max_num_seqs:  # no free row: get_num_allocatable_reqs
                self.full = self._closes()
                break
            r = self.waiting[0]
            hits = self._hits(r)
            hit = self._hit_blocks(hits) * bs
            extend = r.tokens - hit
            max_new = min(max(r.req.output_tokens - (r.tokens - r.prompt), 0), clip)
            revived = pool.revived(hits) if hits else 0  # the matched prefix is locked: no longer evictable
            if not extend + max_new + bs < (pool.nfree - revived) * bs - offset:
                self.full = self._closes()
                rec.held.add(r.n)
                break
            n = extend if extend <= budget else budget // bs * bs
            if n <= 0 or not self._allocate(r, hit + n, hits):
                break
            self.waiting.popleft()
            offset += bs + (min(r.req.output_tokens, clip) if n == extend else 0)  # reserve: max_new_tokens
            r.computed, r.keys = hit, hit // bs
            self.admitted += 1
            r.order = r.n
            rec.hit_tokens += hit
            rec.prompt_tokens += r.tokens
            self.running[r.n] = self.prefilling[r.n] = r
            scheduled.append((r, n))
            budget -= n
            if pool.nfree * bs - offset <= 0:  # budget_state: NO_TOKEN
                self.full = self._closes()
                break
        return scheduled

    def _closes(self) -> bool:
        """batch_is_full is set on the running batch; an empty one is replaced by this prefill batch at the next
        step (get_next_batch_to_run: running_batch = last_batch), so the flag lasts only while requests decode."""
        return self.decoding > 0

    def _prefill_batch(self) -> list[tuple[_Live, int]]:
        budget, offset = self.pool.max_num_batched_tokens, self._offset()
        scheduled = []
        if self.prefilling:
            scheduled, budget, offset = self._chunk(budget, offset)
        if budget > 0 and self.waiting and not self.full:
            scheduled += self._admit(budget, offset)
        return scheduled

    # --- the step -------------------------------------------------------------------------------------------
    def _step(self) -> None:
        """Scheduler.get_next_batch_to_run: a prefill batch if one can be formed, else a decode step."""
        heap = self.arrivals.heap
        if heap and heap[0][0] <= self.now:
            self._arrive()
        if not self.running:
            self.full = False
        rec = self.rec
        scheduled = self._prefill_batch() if self.prefilling or (self.waiting and not self.full) else []
        finishing, decodes = [], 0
        if scheduled:
            self.now += self.cost.step_s(sum([n for _, n in scheduled]), 0)
            rec.request_steps += len(scheduled)
            for r, n in scheduled:
                self._prefilled(r, n)
        elif self.decoding:
            self._retract()
            finishing = self._decode_events()
            decodes = self.decoding
            self.now += self.cost.step_s(0, decodes)
            rec.request_steps += decodes
            self.dstep += 1
            for r in finishing:
                if r.decoding:
                    self._finish(r)
        elif self.waiting and not self.running:
            self._reject(self.waiting.popleft())
        state = (self.blocks.size - self.blocks.nfree, len(self.running), len(self.waiting))
        if state != rec.last:
            rec.state(self.now, *state)

    def _prefilled(self, r: _Live, n: int) -> None:
        """A middle chunk is not inserted into the tree after its step (process_batch_result_prefill only counts
        it down) but at the next step's start (_chunk)."""
        if r.computed + n < r.tokens:
            r.computed += n
            return
        super()._prefilled(r, n)

    def _finish(self, r: _Live) -> None:
        super()._finish(r)
        self.full = False

    def _fast_forward(self) -> None:
        """Decode steps that touch no request: skipped only while no prefill batch can be formed and no decode
        can lack a page."""
        if self.prefilling or (self.waiting and not self.full) or self.decoding > self.blocks.nfree:
            return
        before = self.dstep
        super()._fast_forward()
        if self.dstep != before:  # the ratio decays on every decode step skipped
            self.ratio = max(self.min_ratio, self.ratio - (self.dstep - before) * self.decay)
