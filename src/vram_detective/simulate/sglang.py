"""SGLang's scheduler over its token pool (managers/scheduler.py, managers/schedule_policy.py,
managers/schedule_batch.py, mem_cache/radix_cache.py; 0.5.11), on the same stepping as vllm.py:

- the pool is max_total_num_tokens tokens in pages of page_size; the radix cache shares prefixes at page
  granularity and evicts least-recently-used unreferenced pages (modelled with the block pool's LRU);
- admission (PrefillAdder): a request enters when its input plus min(max_new_tokens, 4096) fits in the
  free + evictable tokens minus what the running requests still reserve: (max_new - generated) x
  new_token_ratio; the ratio starts at 0.7 and decays to 0.7 x 0.14 over 600 decode steps;
- a prefill batch runs before decoding (chunked to chunked_prefill_size), up to max_running_requests;
- when a decode step lacks tokens, retract_decode takes back requests with the fewest output tokens
  (ties: the longest input) until the step fits, and resets new_token_ratio from what is left.
"""
from __future__ import annotations

from .vllm import VllmSim, _Live


class SglangSim(VllmSim):
    def __init__(self, *args):
        super().__init__(*args)
        init, factor, steps = self.rules.new_token_ratio
        self.ratio, self.min_ratio = init, init * factor
        self.decay = (init - self.min_ratio) / steps

    def _preempt(self, cause: str) -> _Live:
        # retract_decode: sort by (len(output_ids), -len(input)) descending, pop the last
        def order(r: _Live):
            out = (r.c0 + self.dstep - r.d0 + 1 - r.prompt) if r.decoding else r.tokens - r.prompt
            return out, -r.prompt
        victim = min(self.running.values(), key=order)
        self.running[victim.n] = self.running.pop(victim.n)  # the base class preempts the last one
        victim = super()._preempt(cause)
        self.rec.preemptions[-1:] = [p.__class__(p.time_s, p.request, p.cause, "retract")
                                     for p in self.rec.preemptions[-1:] if p.request == victim.n]
        self._reset_ratio()
        return victim

    def _reset_ratio(self) -> None:
        decoded = sum(r.tokens - r.prompt for r in self.running.values())
        wanted = sum(r.req.output_tokens for r in self.running.values())
        steps = self.rules.retract_decode_steps
        self.ratio = min(1.0, (decoded + steps * len(self.running)) / (wanted + 1))

    def _reserved(self) -> int:
        clip = self.rules.clip_max_new_tokens
        left = 0
        for r in self.running.values():
            generated = (r.c0 + self.dstep - r.d0 + 1 - r.prompt) if r.decoding else r.tokens - r.prompt
            left += max(0, min(r.req.output_tokens, clip) - generated)
        return int(left * self.ratio) // self.bs

    def _admit(self, budget: int):
        if self.blocked:  # retried after a free only (vLLM's base class retries every step)
            return []
        if self.waiting:
            r = self.waiting[0]
            need = -(-(r.tokens + min(r.req.output_tokens, self.rules.clip_max_new_tokens)) // self.bs)
            if need >= self.blocks.num_free - self._reserved():
                self.blocked = True
                self.rec.held.add(r.n)
                return []
        admitted = super()._admit(budget)
        for r, _ in admitted:  # decodes are stepped in arrival order (the base class: vLLM's running order)
            r.order = r.n
        return admitted

    def _step(self) -> None:
        if self.decoding:
            self.ratio = max(self.min_ratio, self.ratio - self.decay)
        super()._step()
