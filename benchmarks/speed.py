"""How fast `explain` is: as a whole process (what a user waits for) and in-process (the library).

    python benchmarks/speed.py [--runs 20]
Goals: process <= 0.5 s, in-process <= 5 ms (median).
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

    print(f"{'measurement':<58} {'median':>10} {'goal':>8}")
    print(f"{'whole process: vram-detective explain ... --json':<58} {statistics.median(process_times) * 1000:>8.0f} ms {'500 ms':>8}")
    for model, seconds in in_process.items():
        print(f"{'in-process explain: ' + model:<58} {seconds * 1000:>8.2f} ms {'5 ms':>8}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
