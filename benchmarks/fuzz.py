"""Fuzz every engine and command: random catalog model x GPU x engine x release x flags (sane and hostile
values) through `api.explain` (vLLM, SGLang, llama.cpp, Ollama), `whatif` (one round of four in WHATIF_ONE_IN),
`simulate` with a random JSONL trace (one round in TRACE_ONE_IN, hostile rows included), fit / compare / logs /
score (one case in FIT_ONE_IN ...: benchmarks/fuzz_commands.py, with their invariants), and with --web SECONDS
the JSON API of a real `vram-detective serve` on loopback (random parameters for every endpoint and engine).

    PYTHONPATH=src python3 benchmarks/fuzz.py [--cases 100000] [--seed 17] [--show 5] [--engines all]
    PYTHONPATH=src python3 benchmarks/fuzz.py --cases 0 --web 120

Every case must end in an answer or in one of the project's own errors, classified as the front ends do
(errors.kind: refused / bad input); a bug (exit 3, HTTP 500) is counted as unexpected and the first few are
printed with their arguments. Invariants of every start: weights > 0, no negative figure anywhere in the
breakdown tree, a node's children add up to it (within rounding: a block's bytes or 1 MiB), tokens = blocks x
block size (vLLM), each pipeline rank's column adds up to its budget (vLLM), and (one case in 20) the same
answer twice. Prints the counts per engine and command, the slowest case and the process's peak memory.
"""
from __future__ import annotations

import argparse
import collections
import random
import re
import resource
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from vram_detective import api, errors  # noqa: E402
from vram_detective.engines import get_engine  # noqa: E402
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
BIG = [1 << 40, (1 << 63) - 1, 10 ** 30]
ENGINE_FLAGS = {
    "sglang": {
        "tp_size": ([1, 1, 2, 4, 8], [0, -1, 3, *BIG]), "mem_fraction_static": ([0.7, 0.8, 0.85, 0.9], [0.0, 1.5, -1.0, float("nan")]),
        "context_length": ([2048, 8192, 32768, 131072], [0, -2, 1, *BIG]),
        "chunked_prefill_size": ([2048, 4096, 8192, -1], [0, -5, 1, *BIG]),
        "max_running_requests": ([8, 64, 256, 1024], [0, -1, *BIG]), "max_total_tokens": ([100_000, 1_000_000], [0, -1, *BIG]),
        "cuda_graph_max_bs": ([8, 32, 160, 256], [0, -1, *BIG]), "page_size": ([1, 16, 64], [0, -3, *BIG]),
        "kv_cache_dtype": (["auto", "fp8_e5m2", "fp8_e4m3"], ["bogus"]), "disable_cuda_graph": ([True, False], []),
        "speculative_algorithm": (["EAGLE", "NGRAM", None], ["BOGUS"]),
        "speculative_num_draft_tokens": ([4, 8, 16], [0, 256, *BIG]), "speculative_num_steps": ([1, 3, 5], [0, -1, *BIG]),
        "speculative_eagle_topk": ([1, 4, 8], [0, *BIG]), "enable_dp_attention": ([True, False], []),
        "dp_size": ([1, 2], [0, -1, *BIG]), "pp_size": ([1, 2], [0, *BIG]),
    },
    "llamacpp": {
        "n_ctx": ([0, 4096, 32768, 131072], [-1, *BIG]), "n_parallel": ([1, 2, 4, -1, "auto"], [0, -7, *BIG]),
        "n_batch": ([512, 2048, 4096], [0, -5, *BIG]), "n_ubatch": ([128, 512, 1024], [0, -1, *BIG]),
        "n_gpu_layers": ([0, 10, 99, -1, "all"], [-9, *BIG]), "type_k": (["f16", "q8_0", "q4_0"], ["bogus"]),
        "type_v": (["f16", "q8_0", "q4_0"], ["bogus"]), "flash_attn": (["auto", "on", "off"], ["maybe"]),
        "gguf_type": (["Q4_K_M", "Q8_0", "Q5_K_M"], ["Q9"]), "kv_offload": ([True, False], []),
        "mmap": ([True, False], []), "num_gpus": ([1, 2], [0, *BIG]), "tensor_split": ([(1.0, 1.0), (3.0, 1.0)], [(-1.0,), (float("nan"),)]),
        "kv_unified": ([True, False], []), "n_cpu_moe": ([0, 4], [-1, *BIG]),
    },
    "ollama": {
        "num_ctx": ([2048, 4096, 8192, 32768], [-1, *BIG]), "num_parallel": ([1, 2, 4], [-2, *BIG]),
        "num_gpu": ([0, 10, 999, -1], [-5, *BIG]), "num_batch": ([256, 512], [0, -2, *BIG]),
        "kv_cache_type": (["f16", "q8_0", "q4_0"], ["bogus"]), "flash_attention": ([True, False], []),
    },
}
WHATIF_ONE_IN = 150  # rounds of four cases (one an engine)
TRACE_ONE_IN = 25
ENGINES = ("vllm", "sglang", "llamacpp", "ollama")


def releases() -> list[str]:
    minors = [f"0.{minor}.{patch}" for minor in range(3, NEWEST_KNOWN[1] + 1) for patch in (0, 1, 2)]
    return list(NOTABLE_RELEASES) * 6 + minors + [None, None, "9.9", "0.2.0", "0.34.0"]


def random_case(rng: random.Random, models: list[str], gpus: list[str], versions: list, engine: str = "vllm") -> dict:
    if engine != "vllm":
        known = list(get_engine(engine).releases.known)
        case = {"model": rng.choice(models), "gpu": rng.choice(gpus), "engine": engine,
                "engine_version": rng.choice(known + [None, None] + (["9.9", "0.0.1"] if rng.randrange(20) == 0 else []))}
        table = ENGINE_FLAGS[engine]
        for key in rng.sample(sorted(table), rng.randint(0, 5)):
            sane, hostile = table[key]
            case[key] = rng.choice(hostile if hostile and rng.randrange(HOSTILE_ONE_IN) == 0 else sane)
        return {key: value for key, value in case.items() if value is not None or key == "engine_version"}
    case = {"model": rng.choice(models), "gpu": rng.choice(gpus), "vllm_version": rng.choice(versions)}
    for key in rng.sample(sorted(FLAGS), rng.randint(0, 6)):
        sane, hostile = FLAGS[key]
        case[key] = rng.choice(hostile if hostile and rng.randrange(HOSTILE_ONE_IN) == 0 else sane)
    if case.get("engine") is None:
        case.pop("engine", None)
    return case


def cause(message: str) -> str:
    """A violation or error grouped by what went wrong: the figures in its message replaced by N."""
    return re.sub(r"-?\d[\d,.]*", "N", message)


def ours(error: BaseException) -> bool:
    """One of the project's own errors, as every front end classifies it (errors.kind): a refusal or bad
    input; a bug is anything else (exit 3 / HTTP 500)."""
    return errors.kind(error) != errors.BUG


def _tree_problems(node, found: list[str], slack: int) -> None:
    if node.bytes < 0:
        found.append(f"{node.key} is {node.bytes} B")
    if node.children:
        total = sum(child.bytes for child in node.children)
        if abs(total - node.bytes) > slack:
            found.append(f"{node.key}: children add up to {total / 2**30:.3f} GiB, not {node.bytes / 2**30:.3f} GiB")
        for child in node.children:
            _tree_problems(child, found, slack)


def vllm_logged_tokens(b, case: dict, blocks: int, size: int) -> int:
    """The "GPU KV cache size: N tokens" a vLLM release logs, by its rule kv_tokens_rule: blocks x block size (V0,
    V1 <= 0.9.0); blocks // groups x block size, x dcp (0.9.1-0.20.0); int(max_concurrency x max_model_len) from
    0.20.1 (v1/core/kv_cache_utils.py _report_kv_cache_config, 0.20.1: "num_tokens = int(max_concurrency *
    max_model_len)"), which is blocks x block size only when max_model_len is whole blocks."""
    from vram_detective.engines.vllm.releases import parse_version, rule_at

    version, engine = parse_version(b.engine_version), b.engine_variant.lower()
    tokens_rule = rule_at(version, "kv_tokens_rule", engine)
    dcp = int(case.get("decode_context_parallel_size") or 1)
    if b.per_rank and engine == "v1" and not rule_at(version, "log_after_min", "v1") \
            and case.get("num_gpu_blocks_override") is None:
        blocks = b.per_rank[0].num_blocks_own  # <= 0.11.0: each worker logs its own blocks before the minimum
    # the group count is in the KV pool's reason ("...; 2 group(s): 13 full, 13 sliding_window (window 4096)")
    reason = b.components.find("kv_cache").reason
    found = re.search(r"(\d+) group\(s\)", reason)
    groups = int(found.group(1)) if found else 1
    if tokens_rule == "concurrency":
        if groups > 1 or dcp > 1 or "window" in reason:  # they change the blocks a request takes
            return int(b.max_concurrency * b.max_model_len)
        per_request = -(-b.max_model_len // size)  # one full-attention group: cdiv(max_model_len, block size)
        return int(blocks / per_request * b.max_model_len)
    if tokens_rule == "blocks":
        return blocks * size
    if "mamba" in reason:  # // groups x the smallest group's block size: a Mamba group's is not in the Breakdown
        return b.kv_cache_tokens
    if groups > 1:  # // groups x the smallest group's block size, which divides the one the Breakdown names
        per_group = blocks // groups
        smallest = b.kv_cache_tokens // per_group if per_group else 0
        return b.kv_cache_tokens if per_group and smallest and not b.kv_cache_tokens % per_group \
            and not size % smallest else per_group * size
    tokens = blocks * size
    if dcp > 1 and (rule_at(version, "context_parallel_kv", engine) or "dcp-uniform") != "dcp-uniform" or (
            dcp > 1 and groups == 1 and rule_at(version, "context_parallel_kv", engine) is not None):
        tokens *= dcp
    return tokens


def violations(case: dict, b) -> list[str]:
    """The invariants every Breakdown keeps."""
    found = []
    gpu_weights_may_be_zero = case.get("engine") in ("llamacpp", "ollama")  # -ngl 0: every layer on the CPU
    if b.weights_bytes <= 0 and not (gpu_weights_may_be_zero and b.weights_bytes == 0):
        found.append(f"weights {b.weights_bytes} <= 0")
    if b.failure is None and (b.kv_cache_bytes < 0 or b.kv_cache_tokens < 0):
        found.append(f"starts with KV {b.kv_cache_bytes} B / {b.kv_cache_tokens} tokens")
    if b.failure is None:
        blocks, size = b.figure("num_gpu_blocks"), b.figure("block_size")
        # rounding: a pool is whole blocks (what is left of the budget is below one block) and SGLang's figures
        # are rounded to MiB per term; 0.05 % of the budget covers both
        slack = max(1 << 20, b.kv_cache_bytes // blocks if blocks else 0, b.components.bytes // 2000)
        _tree_problems(b.components, found, slack)
        if b.outside_budget is not None:
            _tree_problems(b.outside_budget, found, slack)
        if case.get("engine", "vllm") in ("vllm", "v0", "v1") and blocks and size:
            expected = vllm_logged_tokens(b, case, blocks, size)
            if b.kv_cache_tokens not in (expected, None):
                found.append(f"tokens {b.kv_cache_tokens} != {expected} (blocks {blocks} x block size {size} "
                             f"by the release's rule)")
    if case.get("engine", "vllm") in ("vllm", "v0", "v1") and "kv_cache_memory_bytes" not in case:
        for r in b.per_rank:
            parts = r.weights_bytes + r.activation_peak_bytes + r.non_torch_bytes + r.other_budgeted_bytes
            if parts + r.kv_pool_bytes + r.kv_unused_bytes != r.budget_bytes or parts + r.kv_cache_bytes != r.budget_bytes:
                found.append(f"rank {r.rank}: parts {parts + r.kv_cache_bytes} != budget {r.budget_bytes}")
    return found


def run_case(case: dict):
    settings = {key: value for key, value in case.items() if key not in ("model", "gpu", "vllm_version")}
    if "vllm_version" in case:
        settings["vllm_version"] = case["vllm_version"]
    return api.explain(case["model"], case["gpu"], **settings)


def run_whatif(case: dict):
    from vram_detective.web import service

    engine = case.get("engine", "vllm")
    settings = {k: v for k, v in case.items() if k not in ("model", "gpu", "vllm_version", "engine", "engine_version")}
    request = service.Request(case["model"], None, case["gpu"], None, engine,
                              case.get("engine_version", case.get("vllm_version")), settings)
    return service.whatif_json(request)


TRACE_VALUES = [0, 1, 5, 100, 2.5, -1, -1e12, 1e300, float("nan"), float("inf"), float("-inf"), True, "x", None, [1]]


def random_trace(rng: random.Random) -> list[str]:
    """JSONL lines: mostly sane requests, one in ten with a hostile value, a malformed line now and then."""
    import json

    lines, t = [], 0.0
    for _ in range(rng.randint(1, 40)):
        t += rng.expovariate(2.0)
        row = {"timestamp": t, "prompt_tokens": rng.randint(1, 4000), "output_tokens": rng.randint(0, 800)}
        if rng.randrange(3) == 0:
            row["prefix_id"], row["prefix_tokens"] = "p", rng.randint(0, row["prompt_tokens"])
        if rng.randrange(10) == 0:
            row[rng.choice(["timestamp", "prompt_tokens", "output_tokens", "prefix_tokens"])] = rng.choice(TRACE_VALUES)
        line = json.dumps(row)
        if rng.randrange(40) == 0:
            line = rng.choice(["[" * 300 + "]" * 300, "{", "[]", '"x"', line[: len(line) // 2]])
        lines.append(line)
    return lines


def run_trace(rng: random.Random, breakdown) -> object:
    from vram_detective.simulate import pool_from_breakdown, simulate
    from vram_detective.simulate.workloads import Workload, parse_trace

    requests = parse_trace(random_trace(rng), "fuzz")
    return simulate(pool_from_breakdown(breakdown), Workload("trace", trace=requests), seed=0)


# one case in N is another command's (the rest are explain's): fit runs ~0.1-0.5 s a case, logs ~0.3 s
FIT_ONE_IN, COMPARE_ONE_IN, LOGS_ONE_IN, SCORE_ONE_IN = 400, 400, 200, 800
RELAUNCH_ONE_IN = 3  # a fit candidate's launch line explained again (one candidate in N)
# a case spending more CPU than this is a hang (stopped by SIGPROF: CPU seconds of the process, so a loaded
# machine's waiting is not counted): seconds per command
BOUND = {"explain": 10.0, "whatif": 30.0, "simulate trace": 20.0, "fit": 60.0, "compare": 30.0, "logs": 20.0,
         "score": 30.0}


class Hang(BaseException):
    """A case over its command's CPU-time bound (BaseException: no `except Exception` of the tool swallows it)."""


def _alarm(signum, frame):
    raise Hang()


def main() -> int:
    import fuzz_commands as more

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--show", type=int, default=5, help="unexpected errors / violations to print in full")
    parser.add_argument("--engines", default="all", help="comma-separated engines (default all four)")
    parser.add_argument("--commands", default="all", help="comma-separated: explain,fit,compare,logs,score (whatif "
                                                          "and simulate traces ride on explain's cases)")
    parser.add_argument("--web", type=float, default=0, metavar="SECONDS", help="also fuzz a real server's JSON API")
    parser.add_argument("--seconds", type=float, default=0, help="stop the in-process cases after this long (0: none)")
    args = parser.parse_args()
    signal.signal(signal.SIGPROF, _alarm)
    rng = random.Random(args.seed)
    engines = ENGINES if args.engines == "all" else tuple(args.engines.split(","))
    commands = ("explain", "fit", "compare", "logs", "score") if args.commands == "all" else args.commands.split(",")
    inputs = {"models": [entry.repo_id for entry in catalog_entries()], "gpus": [gpu.short_name for gpu in all_gpus()],
              "versions": releases(), "logs": more.real_logs(), "cases": more.real_cases()}
    state = Tally(args.show)
    started = time.perf_counter()
    done = 0
    for index in range(args.cases):
        if args.seconds and time.perf_counter() - started > args.seconds:
            break
        done += 1
        if index and index % 5000 == 0:
            print(f"... {index:,} cases, {time.perf_counter() - started:,.0f} s", file=sys.stderr, flush=True)
        engine = engines[index % len(engines)]
        command = pick_command(index, commands)
        if command == "explain":
            explain_case(rng, index, engine, inputs, state)
        else:  # an engine drawn (fit's case indices would all land on one engine)
            other_case(rng, command, rng.choice(engines), inputs, state, more)
        if (index // len(ENGINES)) % WHATIF_ONE_IN == 0:  # its own case: another command's index still gets one
            case = random_case(rng, inputs["models"], inputs["gpus"], inputs["versions"], engine)
            attempt("whatif", engine, lambda: run_whatif(case), lambda _: [], case, state)
    total = time.perf_counter() - started
    if args.web:
        from fuzz_web import fuzz_web

        fuzz_web(args.web, rng, inputs["models"], inputs["gpus"], state.counts, state.bad)
    print(f"cases: {done:,} in {total:.1f} s ({done / max(total, 1e-9):,.0f}/s), seed {args.seed}")
    return state.report()


def pick_command(index: int, commands) -> str:
    """The command of case `index`: one in FIT_ONE_IN is fit's, and so on; explain's otherwise."""
    for name, one_in, offset in (("fit", FIT_ONE_IN, 1), ("compare", COMPARE_ONE_IN, 2), ("logs", LOGS_ONE_IN, 3),
                                 ("score", SCORE_ONE_IN, 4)):
        if name in commands and index % one_in == offset % one_in:
            return name
    if "explain" in commands:
        return "explain"
    others = [name for name in commands if name != "explain"]
    return others[index % len(others)]


class Tally:
    """The counts per (command, engine, outcome), the unexpected ones grouped by cause, the slowest case of each
    command."""

    def __init__(self, show: int):
        self.counts: collections.Counter = collections.Counter()
        self.unexpected: collections.Counter = collections.Counter()
        self.examples: dict = {}
        self.worst: dict = {}
        self.show = show

    def bad(self, kind: str, what: str, case) -> None:
        self.counts[kind] += 1
        grouped = cause(what)
        self.unexpected[grouped] += 1
        self.examples.setdefault(grouped, (what, case))
        if self.show > 0:
            self.show -= 1
            print(f"{kind}: {what}\n  {case}", flush=True)

    def timed(self, command: str, engine: str, seconds: float, cpu: float, case) -> None:
        if cpu > self.worst.get(command, (0.0,))[0]:
            self.worst[command] = (cpu, seconds, engine, case)

    def report(self) -> int:
        for key in sorted(key for key in self.counts if isinstance(key, tuple)):
            key3 = key if len(key) == 3 else (key[0], "", key[1])
            print(f"  {key3[0]:<15} {key3[1]:<29} {key3[2]:<27} {self.counts[key]:>8,}")
        for key in ("unexpected exceptions", "invariant violations", "hangs", "web 500", "web hangs"):
            print(f"  {key:<72} {self.counts[key]:>8,}")
        for message, count in self.unexpected.most_common(20):
            print(f"    {count:>6,}  {message}")
            print(f"            e.g. {self.examples[message][0]}  {str(self.examples[message][1])[:400]}")
        for command, (cpu, seconds, engine, case) in sorted(self.worst.items()):
            print(f"worst {command} ({engine}): {cpu * 1000:,.0f} ms CPU ({seconds * 1000:,.0f} ms wall)  {str(case)[:300]}")
        print(f"peak memory (max RSS): {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
        keys = ("unexpected exceptions", "invariant violations", "hangs", "web 500", "web hangs")
        return 1 if any(self.counts[key] for key in keys) else 0


def bounded(command: str, work):
    """work() under its command's time bound: Hang when over it."""
    signal.setitimer(signal.ITIMER_PROF, BOUND[command])
    try:
        return work()
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)


def attempt(command: str, engine: str, work, check, case, state: Tally, engine_of=None):
    """Run one case of `command`: its outcome counted, a bug / violation / hang reported; the answer or None."""
    began, cpu = time.perf_counter(), time.process_time()
    answer = None
    try:
        answer = bounded(command, work)
        problems = check(answer)
        engine = engine_of(answer) if engine_of else engine
        state.counts[(command, engine, outcome(answer))] += 1
        if problems:
            state.bad("invariant violations", f"{command} {engine}: {problems[0][:120]}", case)
    except Hang:
        state.counts[(command, engine, "hang")] += 1
        state.bad("hangs", f"{command} {engine}: over {BOUND[command]:g} s", case)
    except Exception as error:  # noqa: BLE001 - the fuzz counts whatever escapes
        if ours(error):
            state.counts[(command, engine, errors.kind(error))] += 1
        else:
            state.counts[(command, engine, "BUG (exit 3)")] += 1
            state.bad("unexpected exceptions", f"{command} {engine}: {type(error).__name__}: {str(error)[:80]}", case)
    state.timed(command, engine, time.perf_counter() - began, time.process_time() - cpu, case)
    return answer


def outcome(answer) -> str:
    failure = getattr(answer, "failure", None)
    if failure is not None:
        return "refuses (startup failure)"
    if getattr(answer, "ok", True) is False:
        return "answers, not met (exit 1)"
    return "starts" if hasattr(answer, "components") else "answers"


def explain_case(rng: random.Random, index: int, engine: str, inputs: dict, state: Tally) -> None:
    case = random_case(rng, inputs["models"], inputs["gpus"], inputs["versions"], engine)

    def check(breakdown) -> list[str]:
        problems = violations(case, breakdown)
        if not problems and index % 20 == 0 and to_json(run_case(case)) != to_json(breakdown):
            problems = ["not deterministic"]
        return problems

    breakdown = attempt("explain", engine, lambda: run_case(case), check, case, state)
    rounds = index // len(ENGINES)  # one round of cases gives each engine one: every engine gets its share below
    if breakdown is not None and breakdown.failure is None and engine != "ollama" and rounds % TRACE_ONE_IN == 0:
        attempt("simulate trace", engine, lambda: run_trace(rng, breakdown), lambda _: [], case, state)


def other_case(rng: random.Random, command: str, engine: str, inputs: dict, state: Tally, more) -> None:
    """A fit, compare, logs or score case (benchmarks/fuzz_commands.py) with its invariants."""
    if command == "fit":
        flags = ENGINE_FLAGS.get(engine) or {key: FLAGS[key] for key in FLAGS if key != "engine"}
        call = more.random_fit(rng, inputs["models"], inputs["gpus"], engine, flags)
        attempt("fit", engine, lambda: more.run_fit(call).to_dict(),
                lambda answer: more.fit_problems(call, answer, RELAUNCH_ONE_IN, rng), call, state)
    elif command == "compare":
        call = more.random_compare(rng, inputs["models"], inputs["gpus"])
        attempt("compare", "+".join(sorted(call["engines"])) if len(call["engines"]) < 4 else "all",
                lambda: more.run_compare(call).to_dict(), lambda answer: more.compare_problems(call, answer),
                call, state)
    elif command == "logs":
        call = more.random_logs(rng, inputs["logs"])
        attempt("logs", "-", lambda: more.run_logs(call).to_dict(), more.logs_problems,
                {k: (v[:200] + f"... ({len(v):,} chars)" if isinstance(v, str) and len(v) > 200 else v)
                 for k, v in call.items()}, state, engine_of=lambda answer: str(answer.get("engine") or "-"))
    else:
        call = more.random_score(rng, inputs["cases"])
        attempt("score", "-", lambda: more.run_score(call), lambda answer: more.negatives(answer),
                {"text": call["text"][:300], "from_logs": call["from_logs"]}, state)


if __name__ == "__main__":
    sys.exit(main())
