"""Drive SGLang's own scheduler pieces over traces on a CPU (run inside a virtual environment with that SGLang
release and CPU torch; benchmarks/scheduler_conformance.py --engine sglang starts it).

Reads {"traces": [...]} (the trace format of simulate/stepwise.py) on stdin and prints {"version", "series":
{name: [row, ...] | {"error": text}}}. What runs is SGLang's: `Scheduler.get_next_batch_to_run` and
`update_running_batch` (managers/scheduler.py; bound to a Scheduler built without a model worker: only the
attributes those methods read are set), `PrefillAdder` (managers/schedule_policy.py: new_token_ratio,
rem_total_tokens, chunked prefill), `ScheduleBatch` (managers/schedule_batch.py: init_new, prepare_for_extend /
_decode, check_decode_mem, retract_decode, filter_batch, merge_batch), `NewTokenRatioTracker`, the default tree
cache (`UnifiedRadixCache` with one full component, mem_cache/unified_radix_cache.py; disabled when prefix
caching is off), `PagedTokenToKVPoolAllocator` (page_size = the trace's block_size) and `ReqToTokenPool`
(max_running_requests rows), all on the CPU. What stands in for the model worker: every forward samples token 7
(not an EOS id, so every request emits exactly max_new_tokens, its output length; not ignore_eos, which with the
radix cache off takes add_one_req_ignore_eos instead of the new-token-ratio path), and a batch's results are applied
the way `process_batch_result_prefill` / `_decode` apply them (output appended, `update_finish_state`,
`release_kv_cache` when finished, `checkpoint_kv_cache` after a finished prefill, a middle chunk's counter
decremented). The loop is `event_loop_normal` (no overlap scheduling). At page_size 1 the allocator is the paged
one with pages of one token (SGLang builds TokenToKVPoolAllocator there: the same free count, other indices).

A row a step (one forward: a prefill batch or a decode batch): [pages in use (the pool less its free pages
less the tree's evictable pages), running requests (holding KV after the step), waiting requests, retracted
request indexes, prefix-hit tokens of the requests admitted, finished request indexes].
"""
from __future__ import annotations

import json
import logging
import sys
import warnings
from array import array
from types import SimpleNamespace as NS

warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)

OUTPUT_TOKEN = 7


def _install_server_args():
    """SGLang's config bags (get_schedule(), get_memory(), ...) as its tests publish them: ServerArgs with
    defaults (schedule_policy fcfs, schedule_conservativeness 1.0)."""
    from sglang.srt.runtime_context import get_context

    get_context().override_server_args(disable_overlap_schedule=True, pp_max_micro_batch_size=1 << 16).install()


def _token_ids(trace: dict) -> list[array]:
    """A request's prompt: its shared prefix's tokens (the same ids in every request of that prefix), then its
    own tokens (ids no other request has)."""
    out = []
    for index, (prompt, _, prefix, prefix_tokens) in enumerate(trace["requests"]):
        shared = [1_000_000 * (prefix + 1) + k for k in range(prefix_tokens)] if prefix >= 0 else []
        own = [100_000_000 + 100_000 * index + k for k in range(prompt - len(shared))]
        out.append(array("q", shared + own))
    return out


class _Run:
    """One trace through SGLang's scheduler."""

    def __init__(self, trace: dict):
        import torch
        from sglang.srt.managers.schedule_batch import ScheduleBatch
        from sglang.srt.managers.schedule_policy import SchedulePolicy
        from sglang.srt.managers.scheduler import Scheduler
        from sglang.srt.managers.scheduler_components.new_token_ratio_tracker import NewTokenRatioTracker
        from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator
        from sglang.srt.mem_cache.cache_init_params import CacheInitParams
        from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
        from sglang.srt.mem_cache.unified_cache.components import ComponentType
        from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
        from sglang.srt.disaggregation.utils import DisaggregationMode
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        page, seqs = trace["block_size"], trace["max_num_seqs"]
        self.size = trace["num_blocks"] * page
        self.page = page
        self.req_rows = ReqToTokenPool(size=seqs, max_context_len=trace["max_model_len"] + 8, device="cpu",
                                   enable_memory_saver=False)
        self.alloc = PagedTokenToKVPoolAllocator(self.size, page, torch.float16, "cpu", None, False)
        self.tree = UnifiedRadixCache(CacheInitParams(
            disable=not trace["prefix_caching"], req_to_token_pool=self.req_rows, token_to_kv_pool_allocator=self.alloc,
            page_size=page, tree_components=(ComponentType.FULL,)))

        class Driver(Scheduler):
            def __init__(self):  # no model worker: the attributes the scheduling methods read are set below
                pass

            def _add_request_to_queue(self, req, is_retracted=False):  # DisaggregationMode.NULL's branch
                self.waiting_queue.append(req)

            def process_pending_chunked_abort(self):
                pass

            def _process_hicache_events(self):
                pass

        d = self.sched = Driver()
        budget = trace["max_num_batched_tokens"]
        d.__dict__.update(
            waiting_queue=[], running_batch=ScheduleBatch(reqs=[], batch_is_full=False), last_batch=None,
            chunked_req=None, page_size=page, tree_cache=self.tree, token_to_kv_pool_allocator=self.alloc,
            req_to_token_pool=self.req_rows, new_token_ratio_tracker=NewTokenRatioTracker.from_config(),
            policy=SchedulePolicy("fcfs", self.tree, False, False, False), chunked_prefill_size=budget,
            max_prefill_tokens=budget, max_running_requests=seqs, max_prefill_bs=0, is_mixed_chunk=False,
            enable_priority_preemption=False, priority_scheduling_preemption_threshold=0, is_hybrid_swa=False,
            enable_lora=False, enable_hicache_storage=False, enable_lmcache=False, enable_hisparse=False,
            enable_overlap=False, enable_hierarchical_cache=False, enable_unified_cache_external_linker=False,
            enable_priority_scheduling=False, dllm_config=None, prefill_delayer=None, min_free_slots_delayer=None,
            dynamic_chunk_sizer=None, truncation_align_size=None, processed_tokens_counter=0,
            spec_algorithm=SpeculativeAlgorithm.NONE, hisparse_coordinator=None, require_mlp_sync=False,
            model_config=NS(is_encoder_decoder=False, vocab_size=1 << 30),
            grammar_manager=NS(has_waiting_grammars=lambda: False),
            tp_worker=NS(model_runner=NS(attn_backend=None, prefill_aware_swa=False)),
            dp_attn_adapter=NS(maybe_prepare_mlp_sync_batch=lambda b, need_sync=False: b,
                               maybe_convert_decode_to_extend=lambda b: b),
            ngram_embedding_manager=NS(prepare_for_forward=lambda b, chunked_req=None: b),
            result_queue=[], enable_skip_finishing_decode=False, decode_offload_manager=None, forward_ct=0,
            beam_coordinator=NS(pending_member_rows=lambda b: 0, retire_group=lambda r: None),
            load_inquirer=NS(_get_num_pending_tokens=lambda chunk_deduct=0: 0),
            metrics_reporter=NS(num_retracted_reqs=0, enable_metrics=False), scheduler_stage_metrics=None,
            prefill_decode_interval=0, _prefill_decode_interval_remaining=0, prefill_decode_interval_min_bs=0,
            disaggregation_mode=DisaggregationMode.NULL)
        self.requests = self._requests(trace)
        for req in self.requests:
            d._add_request_to_queue(req)

    @staticmethod
    def _requests(trace: dict) -> list:
        from sglang.srt.managers.schedule_batch import Req
        from sglang.srt.sampling.sampling_params import SamplingParams

        reqs = []
        for index, ids in enumerate(_token_ids(trace)):
            params = SamplingParams(max_new_tokens=trace["requests"][index][1])
            params.normalize(None)
            req = Req(f"r{index}", "", ids, params, vocab_size=1 << 30)
            req.number = index
            reqs.append(req)
        return reqs

    def used_pages(self) -> int:
        return (self.size - self.alloc.available_size() - self.tree.evictable_size()) // self.page

    def _apply(self, batch, finished: list[int]) -> None:
        """process_batch_result_prefill / _decode, the parts that touch the pool."""
        from sglang.srt.mem_cache.common import checkpoint_kv_cache, release_kv_cache

        extend = batch.forward_mode.is_extend()
        for req in batch.reqs:
            if req.is_retracted or (req.finished() and req.inflight_middle_chunks <= 0):
                continue
            if extend and req.inflight_middle_chunks > 0:
                req.inflight_middle_chunks -= 1
                continue
            req.output_ids.append(OUTPUT_TOKEN)
            req.update_finish_state(1) if not extend else req.update_finish_state()
            if req.finished():
                release_kv_cache(req, self.tree, checkpoint=True)
                finished.append(req.number)
            elif extend:
                checkpoint_kv_cache(req, self.tree)

    def step(self) -> list | None:
        """One loop of event_loop_normal; None when it ran no batch."""
        d = self.sched
        waiting_before = {id(r) for r in d.waiting_queue}
        plan = d.get_next_batch_to_run(running_batch=d.running_batch, last_batch=d.last_batch)
        d.running_batch, batch = plan.running_batch, plan.batch_to_run
        d.last_batch = batch
        if batch is None:
            d.new_token_ratio_tracker.reset()  # on_idle
            return None
        retracted = sorted(r.number for r in d.waiting_queue if id(r) not in waiting_before)
        hits = 0
        if batch.forward_mode.is_extend():
            hits = sum(r.prefix_len for r in batch.reqs if id(r) in waiting_before)
        finished: list[int] = []
        self._apply(batch, finished)
        holding = {id(r) for r in d.running_batch.reqs if not r.finished()}
        if batch is not d.running_batch:
            holding |= {id(r) for r in batch.reqs if not r.finished() and not r.is_retracted}
        return [self.used_pages(), len(holding), len(d.waiting_queue), retracted, hits, sorted(finished)]

    def rows(self, max_steps: int) -> list[list]:
        rows: list[list] = []
        idle = 0
        while len(rows) < max_steps:
            row = self.step()
            if row is None:
                idle += 1
                if not self.sched.waiting_queue or idle > 2:
                    break
                continue
            idle = 0
            rows.append(row)
        return rows


def main() -> None:
    import sglang

    traces = json.load(sys.stdin)["traces"]
    _install_server_args()
    series: dict[str, object] = {}
    for trace in traces:
        try:
            series[trace["name"]] = _Run(trace).rows(200_000)
        except Exception as error:  # the real scheduler could not run this trace: reported, not compared
            series[trace["name"]] = {"error": f"{type(error).__name__}: {error}"[:500]}
    json.dump({"version": sglang.__version__, "series": series}, sys.stdout, separators=(",", ":"))


if __name__ == "__main__":
    main()
