"""Simulated request-steps per second, in-process (issue 18's goal: >= 1 M/s), on a pool of one full-attention
group and on a multi-group pool like gpt-oss's (18 sliding-window layers of 128 tokens beside 18 full ones,
vLLM V1's hybrid manager). Prints, asserts nothing.

    PYTHONPATH=src python3 benchmarks/simulate.py
"""
from __future__ import annotations

import time
from dataclasses import replace

from vram_detective.simulate import KvGroup, PoolSpec, cost_for, parse_workload, simulate

POOL = PoolSpec("vllm", "0.11.0", "v1", num_blocks=23266, block_size=16, block_bytes=2359296, max_num_seqs=1024,
                max_num_batched_tokens=8192, max_model_len=16384)
MULTI = replace(POOL, groups=(KvGroup("sliding", 128, 18), KvGroup("full", None, 18)))
COST = cost_for("H100", 16 * 2**30)
CASES = ("chat:rate=20,duration=600", "rag:rate=5,duration=600", "longdoc:rate=1,duration=600",
         "agent:users=64,duration=600")


def table(pool: PoolSpec) -> tuple[float, float]:
    """One line a workload; returns (request-steps, seconds) over all of them."""
    total_steps = total_s = 0.0
    for spec in CASES:
        start = time.perf_counter()
        result = simulate(pool, parse_workload(spec), seed=0, cost=COST)
        elapsed = time.perf_counter() - start
        total_steps += result.request_steps
        total_s += elapsed
        print(f"{spec:32} {result.requests:6} requests {result.request_steps:>10,} request-steps "
              f"{elapsed:6.2f} s  {result.request_steps / elapsed / 1e6:5.2f} M/s  peak {result.peak_blocks} blocks")
    return total_steps, total_s


def main() -> None:
    total_steps, total_s = table(POOL)
    print(f"overall: {total_steps / total_s / 1e6:.2f} M simulated request-steps per second")
    print("\nmulti-group pool: sliding (window 128) x 18 + full x 18")
    steps, seconds = table(MULTI)
    print(f"overall (multi-group): {steps / seconds / 1e6:.2f} M simulated request-steps per second")


if __name__ == "__main__":
    main()
