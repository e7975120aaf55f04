"""Fuzz `api.explain`: random catalog model x GPU x vLLM release x flags (sane and hostile values).

    PYTHONPATH=src python3 benchmarks/fuzz.py [--cases 100000] [--seed 17] [--show 5]

Every case must end in a Breakdown or in one of the project's own errors (an engine refusal, or a ValueError /
LookupError subclass defined in vram_detective); anything else is counted as unexpected and the first few are
printed with their arguments. For each Breakdown the invariants of tests/test_hostile_explain.py are checked:
weights > 0, KV >= 0 when it starts, each pipeline rank's column adds up to its budget, and (one case in 20)
the same answer twice. Prints the counts, the slowest case and the process's peak memory.
"""
from __future__ import annotations

import argparse
import collections
import random
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from vram_detective import api  # noqa: E402
from vram_detective.engines.vllm.releases import NEWEST_KNOWN, NOTABLE_RELEASES  # noqa: E402
from vram_detective.hardware import all_gpus  # noqa: E402
from vram_detective.model.sources import catalog_entries  # noqa: E402
from vram_detective.render import to_json  # noqa: E402

# sane values of each flag, then the hostile ones (picked one time in ten)
FLAGS = {
    "tensor_parallel_size": ([1, 1, 2, 4, 8], [3, 0, -2, 1 << 40]),
    "pipeline_parallel_size": ([1, 1, 2, 3, 4], [8, 0, 1 << 40]),
    "data_parallel_size": ([1, 2, 4], [0, -1]),
    "gpu_memory_utilization": ([0.5, 0.8, 0.9, 0.95, 1.0], [0.0, 1.5, -0.1, float("nan"), float("inf"), 1e-9]),
    "max_model_len": ([512, 4096, 32768, 131072, -1], [1 << 20, 0, 1, (1 << 63) - 1, 10 ** 30]),
    "max_num_seqs": ([1, 8, 256, 851, 1024], [0, -7, 1 << 31, (1 << 63) - 1, 10 ** 30]),
    "max_num_batched_tokens": ([512, 2048, 8192, 65536], [0, 1, 7, 1 << 40, 10 ** 30]),
    "block_size": ([16, 16, 32, 64, 128], [8, 1, 0, 7, 1 << 40]),
    "kv_cache_dtype": (["auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16", "float16", "int8_per_token_head",
                        "int4_per_token_head", "fp8_per_token_head", "nvfp4", "turboquant_k8v4",
                        "turboquant_4bit_nc"], ["bogus", ""]),
    "dtype": (["auto", "half", "bfloat16", "float16", "float32", "float"], ["bogus"]),
    "enforce_eager": ([True, False], []),
    "swap_space": ([0.0, 4.0, 16.0], [-1.0, float("nan"), float("inf"), 1e30]),
    "cpu_offload_gb": ([0.0, 1.0, 4.0, 64.0], [-1.0, float("nan"), float("inf"), 1e30]),
    "kv_cache_memory_bytes": ([1 << 30, 8 << 30, 60 << 30], [1, 0, -5, 1 << 62, 10 ** 30]),
    "num_gpu_blocks_override": ([100, 10_000, 1 << 20], [1, 0, -3, 1 << 62, 10 ** 30]),
    "enable_expert_parallel": ([True, False], []),
    "enable_chunked_prefill": ([True, False], []),
    "enable_prefix_caching": ([True, False], []),
    "enable_lora": ([True], []),
    "max_loras": ([1, 4], [0, 1 << 40]),
    "max_lora_rank": ([8, 16, 64, 512], [0, 1 << 40]),
    "decode_context_parallel_size": ([1, 2, 4], [3, 0]),
    "speculative_config": (['{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}',
                            '{"method": "mtp", "num_speculative_tokens": 1}',
                            '{"method": "eagle", "model": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B", '
                            '"num_speculative_tokens": 5}'],
                           ['{"num_speculative_tokens": 1e999}', '[]', '{"method": "ngram", "num_speculative_tokens": -1}',
                            '{"method": "ngram", "num_speculative_tokens": 2.5}']),
    "entrypoint": (["serve", "llm"], ["bogus"]),
    "engine": (["v0", "v1", None], []),
    "disable_hybrid_kv_cache_manager": ([True, False], []),
}
HOSTILE_ONE_IN = 10


def releases() -> list[str]:
    minors = [f"0.{minor}.{patch}" for minor in range(3, NEWEST_KNOWN[1] + 1) for patch in (0, 1, 2)]
    return list(NOTABLE_RELEASES) * 6 + minors + [None, None, "9.9", "0.2.0", "0.34.0"]


def random_case(rng: random.Random, models: list[str], gpus: list[str], versions: list) -> dict:
    case = {"model": rng.choice(models), "gpu": rng.choice(gpus), "vllm_version": rng.choice(versions)}
    for key in rng.sample(sorted(FLAGS), rng.randint(0, 6)):
        sane, hostile = FLAGS[key]
        case[key] = rng.choice(hostile if hostile and rng.randrange(HOSTILE_ONE_IN) == 0 else sane)
    if case.get("engine") is None:
        case.pop("engine", None)
    return case


def ours(error: BaseException) -> bool:
    """One of the project's own errors: an engine refusal, or a ValueError / LookupError it defines."""
    return isinstance(error, api.REFUSALS) or (
        type(error).__module__.startswith("vram_detective") and isinstance(error, (ValueError, LookupError)))


def violations(case: dict, b) -> list[str]:
    """The invariants every Breakdown keeps."""
    found = []
    if b.weights_bytes <= 0:
        found.append(f"weights {b.weights_bytes} <= 0")
    if b.failure is None and (b.kv_cache_bytes < 0 or b.kv_cache_tokens < 0):
        found.append(f"starts with KV {b.kv_cache_bytes} B / {b.kv_cache_tokens} tokens")
    if "kv_cache_memory_bytes" not in case:
        for r in b.per_rank:
            parts = r.weights_bytes + r.activation_peak_bytes + r.non_torch_bytes + r.other_budgeted_bytes
            if parts + r.kv_pool_bytes + r.kv_unused_bytes != r.budget_bytes or parts + r.kv_cache_bytes != r.budget_bytes:
                found.append(f"rank {r.rank}: parts {parts + r.kv_cache_bytes} != budget {r.budget_bytes}")
    return found


def run_case(case: dict):
    settings = {key: value for key, value in case.items() if key not in ("model", "gpu", "vllm_version")}
    return api.explain(case["model"], case["gpu"], vllm_version=case["vllm_version"], **settings)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--show", type=int, default=5, help="unexpected errors / violations to print in full")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    models = [entry.repo_id for entry in catalog_entries()]
    gpus = [gpu.short_name for gpu in all_gpus()]
    versions = releases()
    counts: collections.Counter = collections.Counter()
    unexpected: collections.Counter = collections.Counter()
    shown = 0
    worst = (0.0, None)
    started = time.perf_counter()
    for index in range(args.cases):
        case = random_case(rng, models, gpus, versions)
        began = time.perf_counter()
        try:
            breakdown = run_case(case)
            problems = violations(case, breakdown)
            if not problems and index % 20 == 0 and to_json(run_case(case)) != to_json(breakdown):
                problems = ["not deterministic"]
            counts["starts" if breakdown.failure is None else "refuses (startup failure)"] += 1
            if problems:
                counts["invariant violations"] += 1
                if shown < args.show:
                    shown += 1
                    print(f"violation: {problems[0]}\n  {case}")
        except Exception as error:  # noqa: BLE001 - the fuzz counts whatever escapes
            if ours(error):
                counts["refused at configuration" if isinstance(error, api.REFUSALS) else "project errors"] += 1
            else:
                counts["unexpected exceptions"] += 1
                unexpected[f"{type(error).__name__}: {str(error)[:90]}"] += 1
                if shown < args.show:
                    shown += 1
                    print(f"unexpected {type(error).__name__}: {str(error)[:200]}\n  {case}")
        elapsed = time.perf_counter() - began
        if elapsed > worst[0]:
            worst = (elapsed, case)
    total = time.perf_counter() - started
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"cases: {args.cases:,} in {total:.1f} s ({args.cases / total:,.0f}/s), seed {args.seed}")
    for key in ("starts", "refuses (startup failure)", "refused at configuration", "project errors",
                "unexpected exceptions", "invariant violations"):
        print(f"  {key:<28} {counts[key]:>8,}")
    for message, count in unexpected.most_common(20):
        print(f"    {count:>6,}  {message}")
    print(f"worst case: {worst[0] * 1000:.1f} ms  {worst[1]}")
    print(f"peak memory (max RSS): {peak_mib:.0f} MiB")
    return 1 if counts["unexpected exceptions"] or counts["invariant violations"] else 0


if __name__ == "__main__":
    sys.exit(main())
