"""llama.cpp server slots (tools/server/server.cpp, as llama-cpp-python 0.3.16 vendors it): -np slots, each
with n_ctx / np cells (or all n_ctx shared with --kv-unified); a request waits for a free slot; a slot
keeps its last prompt's cells and reuses the common prefix (cache_prompt); when a slot's context is full,
context shift drops half of the tokens after n_keep (= 0 here) and generation continues; without context
shift the request stops there. Nothing is ever preempted. With --kv-unified (servers that give a slot all of
n_ctx) the slots draw on one pool of n_ctx cells: when a step needs more cells than are free, llama_decode finds
no KV slot even at batch 1 and the server fails every slot's request with "Context size has been exceeded."
(server.cpp update_slots, 0.3.16 tree: ret == 1 at n_batch == 1). Steps touch every slot (np is small)."""
from __future__ import annotations

from collections import deque

from .result import Recorder


class LlamacppSim:
    def __init__(self, pool, rules, cost, arrivals, rec: Recorder):
        self.pool, self.cost, self.arrivals, self.rec = pool, cost, arrivals, rec
        self.slot_ctx = pool.num_blocks if pool.unified_kv else pool.num_blocks // pool.max_num_seqs
        # req, cells, out, key, kept, serial (the request's number: a shift or a cut counts once per request)
        self.slots: list[list] = [[None, 0, 0, None, 0, 0] for _ in range(pool.max_num_seqs)]
        self.serial = 0
        self.waiting: deque = deque()
        self.now = 0.0
        self.shifts = 0
        self.errors = 0  # requests failed when the unified pool ran out
        self.rejected = 0  # requests refused because a slot holds no cell (n_ctx below -np)

    def _used(self) -> int:
        return sum(slot[1] for slot in self.slots)

    def _admit(self) -> int:
        if self.slot_ctx < 1:  # n_ctx / np rounds to 0 cells: no slot can hold a token, every request fails
            while self.waiting:
                self.rejected += 1
                self.arrivals.finished(self.waiting.popleft(), self.now)
            return 0
        tokens = 0
        for slot in self.slots:
            if slot[0] is None and self.waiting:
                req = self.waiting.popleft()
                reuse = min(slot[4], req.prefix_tokens) if slot[3] == req.prefix_id and req.prefix_id else 0
                prompt = min(req.prompt_tokens, self.slot_ctx - 1)  # the server truncates a too-long prompt
                self.serial += 1
                if prompt < req.prompt_tokens:  # the slot could not hold it: counted as short of memory
                    self.rec.preempt(self.now, self.serial, f"prompt over the slot's {self.slot_ctx} cells",
                                     "prompt truncated")
                self.rec.hit_tokens += reuse
                self.rec.prompt_tokens += prompt
                slot[:] = [req, prompt, 0, req.prefix_id, reuse, self.serial]
                tokens += prompt - reuse
        return tokens

    def _decode(self) -> int:
        busy = 0
        for index, slot in enumerate(self.slots):
            req = slot[0]
            if req is None:
                continue
            busy += 1
            slot[2] += 1
            slot[1] += 1
            limit = self.slot_ctx  # a slot shifts at its own n_ctx (all of n_ctx with --kv-unified)
            if slot[1] >= limit and slot[2] < req.output_tokens:
                if not self.pool.context_shift:
                    slot[2] = req.output_tokens
                else:
                    slot[1] -= slot[1] // 2  # n_discard = (n_past - n_keep) / 2
                    self.rec.preempt(self.now, slot[5], f"slot {index} full at {limit} cells", "context shift")
            if slot[2] >= req.output_tokens:
                self.rec.finished += 1
                self.arrivals.finished(req, self.now)
                slot[:] = [None, 0, 0, slot[3], min(slot[1], req.prefix_tokens), 0]  # cells kept for cache_prompt
        return busy

    def run(self) -> float:
        rec = self.rec
        while True:
            while self.arrivals.heap and self.arrivals.heap[0][0] <= self.now:
                self.waiting.append(self.arrivals.pop())
                rec.arrived += 1
            busy = any(slot[0] is not None for slot in self.slots)
            if not busy and not self.waiting:
                t = self.arrivals.next_time()
                if t is None:
                    return self.now
                self.now = max(self.now, t)
                continue
            prefill = self._admit()
            decodes = self._decode()
            rec.request_steps += decodes
            self.now += self.cost.step_s(prefill, decodes)
            if self.pool.unified_kv and self._used() > self.pool.num_blocks:
                self._fail_every_slot()
            rec.state(self.now, self._used(), decodes, len(self.waiting))
            rec.tick()

    def _fail_every_slot(self) -> None:
        """The unified pool ran out: every slot's request fails and the slot is released; its cells are reused
        (trimmed to the common prefix) by the slot's next request."""
        for slot in self.slots:
            if slot[0] is not None:
                self.errors += 1
                self.arrivals.finished(slot[0], self.now)
                slot[:] = [None, 0, 0, slot[3], 0, 0]
