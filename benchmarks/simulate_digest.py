"""One sha256 over the results of 65 short simulations: every engine path the simulator has (vLLM V1 with one
group and with sliding-window groups beside a full one (gpt-oss-like, windows that do and do not end on a block
boundary; prefix caching on and off; a large pool and small ones that preempt), V1 without prefix caching, V0 recompute and swap, SGLang, llama.cpp), every
built-in workload shape plus a JSONL trace, small pools that force preemption, seeds 0 and 1. A speed change to
the simulator must leave it unchanged. Takes well under a minute. Prints, asserts nothing.

    PYTHONPATH=src python3 benchmarks/simulate_digest.py [-v]     (-v: one line a run, to find the one that moved)
"""
from __future__ import annotations

import hashlib
import json
import random
import sys
from dataclasses import replace

from vram_detective.simulate import KvGroup, PoolSpec, Workload, cost_for, parse_workload, simulate, to_json
from vram_detective.simulate.workloads import parse_trace

V1 = PoolSpec("vllm", "0.11.0", "v1", num_blocks=23266, block_size=16, block_bytes=2359296, max_num_seqs=1024,
              max_num_batched_tokens=8192, max_model_len=16384)
SMALL = replace(V1, num_blocks=3000)  # small enough to preempt under chat and agent
GPT_OSS = (KvGroup("sliding", 128, 18), KvGroup("full", None, 18))
POOLS = {
    "v1": V1,
    "v1-small": SMALL,
    "v1-nocache": replace(SMALL, prefix_caching=False),
    "v1-sliding": replace(SMALL, groups=(KvGroup("sliding", 1024, 5), KvGroup("full", None, 1))),
    # V0 without chunked prefill: a prompt must fit one step's budget
    "v0-recompute": replace(SMALL, variant="v0", version="0.6.3", num_cpu_blocks=2000, max_num_batched_tokens=16384),
    "v0-swap": replace(SMALL, variant="v0", version="0.6.3", num_cpu_blocks=2000, max_num_batched_tokens=16384,
                       preemption_mode="swap"),
    "sglang": PoolSpec("sglang", "0.5.11", "", num_blocks=40000, block_size=1, block_bytes=100, max_num_seqs=256,
                       max_num_batched_tokens=8192, max_model_len=16384),
    "sglang-noradix": PoolSpec("sglang", "0.5.11", "", num_blocks=40000, block_size=1, block_bytes=100,
                               max_num_seqs=256, max_num_batched_tokens=8192, max_model_len=16384,
                               prefix_caching=False),
    "v1-gptoss": replace(SMALL, groups=GPT_OSS),
    "v1-gptoss-nocache": replace(SMALL, groups=GPT_OSS, prefix_caching=False),
    "v1-gptoss-large": replace(V1, groups=GPT_OSS),
    "v1-3groups": replace(SMALL, groups=(KvGroup("sliding", 100, 2), KvGroup("sliding", 1000, 3), KvGroup("full"))),
    "llamacpp": PoolSpec("llamacpp", "b7342", "", num_blocks=32768, block_size=1, block_bytes=100, max_num_seqs=4,
                         max_num_batched_tokens=2048, max_model_len=8192),
}
SPECS = ("chat:rate=20,duration=60", "rag:rate=5,duration=60", "longdoc:rate=1,duration=60",
         "agent:users=64,duration=60", "trace")
SLOW = {"chat:rate=20,duration=60": "chat:rate=1,duration=60", "rag:rate=5,duration=60": "rag:rate=0.5,duration=60"}
COST = cost_for("H100", 16 * 2**30)


def trace_lines(seed: int = 7, count: int = 600) -> list[str]:
    """A JSONL trace with shared prefixes, multi-turn sessions and a burst."""
    rng = random.Random(seed)
    lines, t = [], 0.0
    for n in range(count):
        t += 0.0 if n % 97 < 20 else rng.expovariate(8.0)
        session = f"s{rng.randrange(60)}"
        row = {"timestamp": 1000.0 + t, "prompt_tokens": rng.randint(20, 6000), "output_tokens": rng.randint(1, 900),
               "session": session}
        if n % 3:
            row.update(prefix_id=f"p{n % 5}", prefix_tokens=min([0, 300, 1024, 2000, 4096][n % 5], row["prompt_tokens"]))
        lines.append(json.dumps(row))
    return lines


def workload(spec: str, engine: str) -> Workload:
    if spec == "trace":
        return Workload("trace", trace=parse_trace(trace_lines()), duration=60.0)
    return parse_workload(SLOW.get(spec, spec) if engine == "llamacpp" else spec)


def main() -> None:
    verbose = "-v" in sys.argv[1:]
    total = hashlib.sha256()
    for p_index, (name, pool) in enumerate(POOLS.items()):
        for s_index, spec in enumerate(SPECS):
            seed = (p_index + s_index) % 2
            result = simulate(pool, workload(spec, pool.engine), seed=seed, cost=COST)
            text = to_json(result)
            total.update(text.encode())
            if verbose:
                print(f"{name:17} {spec:28} seed {seed} {result.request_steps:>9} steps peak {result.peak_blocks:>6} "
                      f"preempt {result.preemptions:>5} hits {result.prefix_hit_tokens:>9} "
                      f"{hashlib.sha256(text.encode()).hexdigest()[:16]}", flush=True)
    print(total.hexdigest())


if __name__ == "__main__":
    main()
