"""Drives vLLM's own V1 Scheduler and KVCacheManager on a CPU over traces, one step at a time, and prints each
step's series as JSON. Runs inside a virtual environment with that vLLM release installed (scheduler_conformance.py
starts it); imports nothing of this project.

The scheduler is built the way vLLM's unit tests build it (tests/v1/core/utils.py create_scheduler): a
SchedulerConfig, a ModelConfig of a local config.json (no tokenizer), a CacheConfig, a KVCacheConfig with the
trace's groups (a FullAttentionSpec, a SlidingWindowSpec), DeviceConfig(device="cpu"). The model runner is
replaced by its output: a request whose scheduled tokens reach its last token samples one token (its own id,
so no two requests' generated blocks share a hash); a partial prefill samples nothing.

    python vllm_scheduler_driver.py MODEL_DIR < traces.json > series.json

Input: {"traces": [trace, ...]}; a trace: {"name", "num_blocks", "block_size", "max_num_seqs",
"max_num_batched_tokens", "max_model_len", "prefix_caching", "groups": [["full", null] | ["sliding", W]],
"requests": [[prompt, output, prefix (int or -1), prefix_tokens], ...]}.
Output: {"version", "series": {name: [[used, running, waiting, preempted ids, hit tokens, finished ids,
queries, query hits], ...]}} - one row a step; ids are the requests' indexes in the trace.
"""
from __future__ import annotations

import dataclasses
import inspect
import json
import sys

MAX_STEPS = 200_000


def _kwargs(cls, **values):
    """The values `cls`'s constructor (a dataclass or a plain class) takes, by name."""
    names = set(inspect.signature(cls).parameters)
    if dataclasses.is_dataclass(cls):
        names |= {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in values.items() if k in names}


def _spec(kind: str, window, block_size: int):
    import torch
    from vllm.v1 import kv_cache_interface as kv

    common = dict(block_size=block_size, num_kv_heads=1, head_size=1, dtype=torch.float32, use_mla=False)
    if kind == "sliding":
        return kv.SlidingWindowSpec(**_kwargs(kv.SlidingWindowSpec, sliding_window=window, **common))
    return kv.FullAttentionSpec(**_kwargs(kv.FullAttentionSpec, **common))


def _kv_config(trace: dict):
    from vllm.v1 import kv_cache_interface as kv

    groups = [kv.KVCacheGroupSpec(**_kwargs(kv.KVCacheGroupSpec, layer_names=[f"layer{i}"],
                                            kv_cache_spec=_spec(kind, window, trace["block_size"])))
              for i, (kind, window) in enumerate(trace["groups"])]
    return kv.KVCacheConfig(**_kwargs(kv.KVCacheConfig, num_blocks=trace["num_blocks"], kv_cache_tensors=[],
                                      tensors={}, kv_cache_groups=groups))


def build_scheduler(trace: dict, model_dir: str):
    from vllm.config import CacheConfig, DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.v1.core.sched.scheduler import Scheduler

    scheduler_config = SchedulerConfig(**_kwargs(
        SchedulerConfig, max_num_seqs=trace["max_num_seqs"], max_num_batched_tokens=trace["max_num_batched_tokens"],
        max_model_len=trace["max_model_len"], enable_chunked_prefill=True, long_prefill_token_threshold=0,
        is_encoder_decoder=False))
    model_config = ModelConfig(**_kwargs(ModelConfig, model=model_dir, tokenizer=model_dir, trust_remote_code=False,
                                         task="auto", tokenizer_mode="auto", disable_async_output_proc=True,
                                         use_async_output_proc=False,
                                         dtype="float16", seed=42, skip_tokenizer_init=True,
                                         max_model_len=trace["max_model_len"]))
    cache_config = CacheConfig(**_kwargs(CacheConfig, block_size=trace["block_size"], gpu_memory_utilization=0.9,
                                         swap_space=0, cache_dtype="auto",
                                         enable_prefix_caching=bool(trace["prefix_caching"])))
    config = VllmConfig(**_kwargs(VllmConfig, scheduler_config=scheduler_config, model_config=model_config,
                                  cache_config=cache_config, device_config=DeviceConfig(device="cpu")))
    cache_config.num_gpu_blocks = trace["num_blocks"]
    if trace.get("async_scheduling") and hasattr(scheduler_config, "async_scheduling"):
        # two batches in flight: from 0.26.0 VllmConfig.max_in_flight_tokens doubles, the admission cap of a
        # sliding window with it; the synchronous Scheduler reads the flag for nothing else here (KV connectors,
        # pipeline parallelism: neither is used). Set after VllmConfig's checks, which turn it off on a CPU.
        scheduler_config.async_scheduling = True
    structured = None
    try:
        from vllm.v1.structured_output import StructuredOutputManager
        structured = StructuredOutputManager(config)
    except ImportError:
        pass
    return Scheduler(**_kwargs(Scheduler, vllm_config=config, kv_cache_config=_kv_config(trace), log_stats=True,
                               structured_output_manager=structured, block_size=trace["block_size"]))


def _prompt(index: int, prompt: int, prefix: int, prefix_tokens: int) -> list[int]:
    """A shared prefix's tokens are the prefix's own id; the rest of the prompt is the request's own id."""
    head = [10 + prefix] * prefix_tokens if prefix >= 0 else []
    return head + [100_000 + index] * (prompt - len(head))


def make_requests(trace: dict) -> list:
    from vllm.sampling_params import SamplingParams
    from vllm.v1.request import Request

    hasher = None
    params = inspect.signature(Request).parameters
    if "block_hasher" in params:  # 0.10.2 on: the request hashes its own blocks
        from vllm.v1.core import kv_cache_utils as kcu
        try:
            from vllm.utils.hashing import sha256
        except ImportError:
            from vllm.utils import sha256
        if hasattr(kcu, "init_none_hash"):
            kcu.init_none_hash(sha256)
        hasher = kcu.get_request_block_hasher(trace["block_size"], sha256)
    requests = []
    for index, (prompt, output, prefix, prefix_tokens) in enumerate(trace["requests"]):
        sampling = SamplingParams(ignore_eos=True, max_tokens=output, min_tokens=output)
        values = dict(request_id=str(index), prompt_token_ids=_prompt(index, prompt, prefix, prefix_tokens),
                      prompt=None, multi_modal_inputs=None, multi_modal_hashes=None, multi_modal_placeholders=None,
                      mm_features=None, sampling_params=sampling, pooling_params=None, eos_token_id=None,
                      arrival_time=float(index) * 1e-6, lora_request=None, block_hasher=hasher)
        requests.append(Request(**{k: v for k, v in values.items() if k in params}))
    return requests


def _output(scheduled: dict, scheduler) -> object:
    """The model runner's output for a step: one token for each request whose scheduled tokens reach its end."""
    from vllm.v1.outputs import ModelRunnerOutput

    ids, sampled = list(scheduled), []
    for req_id in ids:
        request = scheduler.requests[req_id]
        done = request.num_computed_tokens >= request.num_tokens
        sampled.append([200_000 + int(req_id)] if done else [])
    values = dict(req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)}, sampled_token_ids=sampled,
                  spec_token_ids=None, logprobs=None, prompt_logprobs_dict={}, pooler_output=[],
                  finished_sending=None, finished_recving=None, num_nans_in_logits=None)
    if dataclasses.is_dataclass(ModelRunnerOutput):
        fields = dataclasses.fields(ModelRunnerOutput)
        names = {f.name for f in fields}
        required = {f.name for f in fields if f.default is dataclasses.MISSING
                    and f.default_factory is dataclasses.MISSING}
        return ModelRunnerOutput(**{k: v for k, v in values.items() if k in names and (k in required or v)})
    return ModelRunnerOutput(**{k: v for k, v in values.items() if k in inspect.signature(ModelRunnerOutput).parameters})


def run_trace(trace: dict, model_dir: str) -> list[list]:
    scheduler = build_scheduler(trace, model_dir)
    manager = scheduler.kv_cache_manager
    pool = manager.block_pool
    for request in make_requests(trace):
        scheduler.add_request(request)
    totals = [0, 0]  # vLLM's prefix-cache counter, read where the scheduler reads (and resets) it
    make_stats = getattr(manager, "make_prefix_cache_stats", None)

    def counted():
        stats = make_stats()
        if stats is not None:
            totals[0] += stats.queries
            totals[1] += stats.hits
        return stats

    if make_stats is not None:
        manager.make_prefix_cache_stats = counted
    rows = []
    while scheduler.get_num_unfinished_requests() and len(rows) < MAX_STEPS:
        seen = list(totals)
        waiting = {r.request_id for r in scheduler.waiting}
        before = {rid: r.num_computed_tokens for rid, r in scheduler.requests.items()}
        out = scheduler.schedule()
        scheduled = out.num_scheduled_tokens
        advanced = any(scheduler.requests[r].num_computed_tokens != before[r] for r in scheduled)
        if not advanced:  # releases that advance num_computed_tokens in update_from_output
            for req_id, n in scheduled.items():
                scheduler.requests[req_id].num_computed_tokens += n
        hits = sum(scheduler.requests[r].num_computed_tokens - n for r, n in scheduled.items() if r in waiting)
        now_waiting = {r.request_id for r in scheduler.waiting}
        preempted = sorted(int(r) for r in now_waiting - waiting)
        output = _output(scheduled, scheduler)
        if not advanced:
            for req_id, n in scheduled.items():
                scheduler.requests[req_id].num_computed_tokens -= n
        unfinished = set(scheduler.requests)
        scheduler.update_from_output(out, output)
        finished = sorted(int(r) for r in unfinished - set(scheduler.requests))
        if make_stats is not None:
            counted()
        queries, qhits = totals[0] - seen[0], totals[1] - seen[1]
        used = pool.num_gpu_blocks - pool.get_num_free_blocks()
        rows.append([used, len(scheduler.running), len(scheduler.waiting), preempted, hits, finished, queries, qhits])
    return rows


def main() -> None:
    import logging
    import os

    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    logging.disable(logging.WARNING)
    model_dir = sys.argv[1]
    traces = json.load(sys.stdin)["traces"]
    import vllm

    series = {}
    for trace in traces:
        try:
            series[trace["name"]] = run_trace(trace, model_dir)
        except Exception as error:  # a trace the release cannot run: said, the others go on
            if os.environ.get("DRIVER_DEBUG"):
                raise
            series[trace["name"]] = {"error": f"{type(error).__name__}: {error}"}
    json.dump({"version": vllm.__version__, "series": series}, sys.stdout, separators=(",", ":"))


if __name__ == "__main__":
    main()
