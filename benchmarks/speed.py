"""How fast `explain` is: as a whole process (what a user waits for) and in-process (the library).

    python benchmarks/speed.py [--runs 20]
Goals: process <= 0.5 s, in-process <= 5 ms (median); the advisor's sweep >= 100,000 configurations per
second on one core (engines/vllm/sweep.py, numpy), counting the engine pieces it computes first.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

CASES = (
    ("Qwen/Qwen2.5-7B-Instruct-AWQ", {"gpu": "RTX 4090", "max_model_len": 32768}),
    ("meta-llama/Llama-3.1-70B-Instruct", {"gpu": "H100", "tensor_parallel_size": 4, "vllm_version": "0.8.5"}),
    ("Qwen/Qwen3-8B", {"gpu": "A100-80G", "gpu_memory_utilization": 0.8, "max_num_seqs": 64}),
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    # an installed tool runs from compiled bytecode (pip writes it); let the source tree cache it too, so
    # the timing is not dominated by recompiling every module on each start
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    command = [sys.executable, "-m", "vram_detective", "explain", "Qwen/Qwen2.5-7B-Instruct-AWQ", "--gpu", "RTX 4090",
               "--max-model-len", "32k", "--json"]
    process_times = []
    for _ in range(max(3, args.runs // 4)):
        started = time.perf_counter()
        subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)
        process_times.append(time.perf_counter() - started)

    import vram_detective.api as api

    in_process = {}
    for model, options in CASES:
        options = dict(options)
        gpu = options.pop("gpu")
        version = options.pop("vllm_version", None)
        api.explain(model, gpu, vllm_version=version, **options)  # warm the config cache once
        times = []
        for _ in range(args.runs):
            started = time.perf_counter()
            api.explain(model, gpu, vllm_version=version, **options)
            times.append(time.perf_counter() - started)
        in_process[model] = statistics.median(times)

    sweep = sweep_throughput(args.runs)

    print(f"{'measurement':<58} {'median':>10} {'goal':>8}")
    print(f"{'whole process: vram-detective explain ... --json':<58} {statistics.median(process_times) * 1000:>8.0f} ms {'500 ms':>8}")
    for model, seconds in in_process.items():
        print(f"{'in-process explain: ' + model:<58} {seconds * 1000:>8.2f} ms {'5 ms':>8}")
    for label, rate in sweep:
        print(f"{label:<58} {rate:>8,.0f}/s {'100,000':>8}")
    return 0


SWEEP_CASES = (("Qwen/Qwen3-8B", "H100", None), ("google/gemma-3-27b-it", "H100", "0.26.0"),
               ("openai/gpt-oss-20b", "H100", None))


def sweep_throughput(runs: int) -> list[tuple[str, float]]:
    """Configurations per second of the fast path: utilization x max_model_len x max_num_seqs x
    max_num_batched_tokens, from a new family (engine pieces computed first) and once they are known."""
    from vram_detective.engines.vllm import sweep

    if sweep.numpy_or_none() is None:
        return [("advisor sweep (numpy missing: pure Python)", 0.0)]
    utilizations = [round(0.30 + 0.01 * k, 2) for k in range(69)]
    seqs = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
    tokens = [256, 512, 1024, 2048, 4096, 8192, 16384, 32768]
    out = []
    for model, gpu, version in SWEEP_CASES:
        cold, warm = [], []
        for _ in range(max(3, runs // 4)):
            sweep._KV_CACHE.clear()
            started = time.perf_counter()
            fast = sweep.FastPath(model, gpu, vllm_version=version)
            lengths = [length for length in (1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
                       if length <= fast.derived_max_model_len]
            grid = fast.grid(utilizations, lengths, seqs, tokens)
            cold.append(len(grid) / (time.perf_counter() - started))
            started = time.perf_counter()
            grid = fast.grid(utilizations, lengths, seqs, tokens)
            warm.append(len(grid) / (time.perf_counter() - started))
        out.append((f"advisor sweep, new family: {model} ({len(grid):,})", statistics.median(cold)))
        out.append((f"advisor sweep, pieces known: {model}", statistics.median(warm)))
    from vram_detective.advisor.search import Target, fit

    rates = []
    for _ in range(max(3, runs // 4)):
        sweep._KV_CACHE.clear()
        result = fit("Qwen/Qwen2.5-7B-Instruct-AWQ", "RTX 4090", Target(max_gpu_memory=12 << 30))
        rates.append(result.searched / result.seconds)
    out.append((f"fit end to end (AWQ 7B, 4090, 12GiB: {result.searched:,} configs)", statistics.median(rates)))
    return out


if __name__ == "__main__":
    sys.exit(main())
