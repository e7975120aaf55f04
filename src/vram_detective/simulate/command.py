"""`vram-detective simulate MODEL --gpu X [engine flags] --workload SPEC`: the predicted KV pool at work
under a request workload (issue 18), and the smallest pool that serves it (simulate/fit.py).

register() only builds the argparse parser (the CLI must start fast); run() imports the rest.
Exit codes: 0 fine, 1 the engine would refuse to start, 2 bad input (one line on stderr).
"""
from __future__ import annotations

import argparse
import sys
from ..term import HelpFormatter  # --help fitted to the terminal

EXIT_REFUSED = 1
EXIT_BAD_INPUT = 2

EXAMPLES = """workloads (--workload SPEC):
  chat      4 system prompts (~400 tokens), 1-4 turns of ~250 tokens, answers ~300 tokens
  rag       3 long system prompts (~1.5K tokens) + ~3K retrieved tokens, answers ~250
  longdoc   50 documents (~20K tokens, popular ones asked often), ~60-token questions, answers ~400
  agent     tool definitions (~3K tokens), 5-20 turns each adding ~800 tokens of tool output, answers ~150
  options after a colon, comma-separated:
    rate=R        Poisson arrivals of R sessions a second (default 2)
    duration=S    seconds of arrivals (default 600)
    burst=N,period=S   N sessions at once every S seconds
    users=N,think=S    closed loop: N users, each sending its next turn S seconds after the last answer
    requests=N    stop after N requests
  trace:FILE.jsonl  one request a line: {"timestamp": s, "prompt_tokens": n, "output_tokens": n,
                    optional "prefix_id", "prefix_tokens" (a shared system prompt), "session"}

The point is memory, not latency: step times come from a simple per-token cost model (decode reads the
weights once; prefill at 45% of the card's BF16 peak), which only decides how many requests overlap.

examples:
  vram-detective simulate Qwen/Qwen2.5-7B-Instruct-AWQ --gpu "RTX 4090" --max-model-len 32k \\
      --workload chat:rate=2,duration=300
  vram-detective simulate Qwen/Qwen3-8B --gpu H100 --workload agent:users=32 --json
  vram-detective simulate Qwen/Qwen3-8B --gpu H100 --engine sglang --workload rag:burst=40,period=30 --csv out.csv
  vram-detective simulate Qwen/Qwen3-8B --gpu L4 --workload trace:requests.jsonl --preemption-budget 0
"""


def register(subparsers) -> None:
    from ..cli import _add_vllm_flags, add_model_arguments

    parser = subparsers.add_parser(
        "simulate", help="run a request workload against the predicted KV pool: occupancy, preemptions, "
                         "and the smallest pool that serves it",
        description=__doc__.splitlines()[0], epilog=EXAMPLES, formatter_class=HelpFormatter)
    add_model_arguments(parser)
    run_group = parser.add_argument_group("the workload")
    run_group.add_argument("--workload", required=True, metavar="SPEC",
                           help="chat | rag | longdoc | agent [:options] or trace:FILE.jsonl (see below)")
    run_group.add_argument("--seed", type=int, default=0, help="random seed of the workload (default 0)")
    run_group.add_argument("--preemption-budget", type=float, default=0.01, metavar="FRACTION",
                           help="fraction of requests the smallest pool may preempt (llama.cpp, Ollama: whose "
                                "slot may overflow; default 0.01: none at the 99th percentile)")
    run_group.add_argument("--cost", default=None, metavar="decode=S,seq=S,prefill=TOK_PER_S",
                           help="step cost model (default: from the card's bandwidth and the weights)")
    run_group.add_argument("--max-requests", type=int, default=None, metavar="N",
                           help="the most requests one run may simulate (default 100,000: larger runs take minutes)")
    run_group.add_argument("--max-tokens", type=int, default=None, metavar="N",
                           help="the most prompt + output tokens one run may simulate (default 2,000,000,000)")
    run_group.add_argument("--log", metavar="FILE",
                           help="an engine log of this traffic: compare the KV cache usage it printed while serving "
                                "(vLLM's 'GPU KV cache usage: X%%', SGLang's 'token usage: U') with the simulation")
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="machine-readable output")
    output.add_argument("--csv", metavar="FILE", help="also write the occupancy series as CSV to FILE")
    _add_vllm_flags(parser)


def parse_cost(text: str):
    from .cost import CostModel

    import math

    names = {"decode": "decode_step_s", "seq": "per_seq_s", "prefill": "prefill_tokens_per_s"}
    values = {}
    for item in filter(None, text.split(",")):
        key, _, value = item.partition("=")
        if key not in names:
            raise ValueError(f"--cost takes decode=, seq=, prefill= (got {key[:40]!r})")
        try:
            number = float(value)
        except ValueError:
            raise ValueError(f"--cost {key}={value[:40]!r} is not a number of seconds") from None
        # a step takes time (decode > 0) and prefill runs at a finite positive speed: else a step takes 0 s
        # (or infinite) and the simulated clock never moves
        low_ok = number >= 0 if key == "seq" else number > 0
        if not (low_ok and math.isfinite(number) and number <= 1e9):
            raise ValueError(f"--cost {key} must be a finite number {'>= 0' if key == 'seq' else '> 0'} "
                             f"(at most 1e9), got {value[:40]}")
        values[names[key]] = number
    return CostModel(**values)


def run(args) -> int:
    try:
        return _run(args)  # a refusal, bad input or a bug: errors.py's policy, the same for every command
    except BrokenPipeError:
        return 0


def _run(args) -> int:
    import json

    from .. import api, cli
    from ..hardware import parse_memory_size
    from . import parse_workload, to_csv
    from .fit import default_cost

    if args.gpu is None and args.gpu_memory is None:
        raise ValueError("simulate needs a GPU (--gpu NAME or --gpu-memory SIZE)")
    if not 0 <= args.preemption_budget < 1:
        raise ValueError(f"--preemption-budget is a fraction in [0, 1), got {args.preemption_budget}")
    from .workloads import MAX_REQUESTS, MAX_TOKENS, size

    limits = _limits(args, MAX_REQUESTS, MAX_TOKENS)
    workload = parse_workload(args.workload, limits[0])
    requests = size(workload, args.seed, *limits)
    if requests > PROGRESS_REQUESTS:
        print(f"simulate: {requests:,} requests; the smallest-pool search runs them about 10 times, this takes "
              f"a while", file=sys.stderr, flush=True)
    logged = _logged_usage(args.log) if args.log else None
    settings = cli._settings_from(args, {})
    options = cli._engine_options(args, settings)
    gpu_memory = parse_memory_size(args.gpu_memory) if args.gpu_memory else None
    source = cli._source_options(args)

    def predict(extra: dict):
        return api.explain(args.model, args.gpu, gpu_memory=gpu_memory, **source, **{**options, **extra})

    b = predict({})
    if b.failure is not None:
        print(f"{b.engine_label} would refuse to start: {b.failure.message.splitlines()[0]}", file=sys.stderr)
        return EXIT_REFUSED
    cost = parse_cost(args.cost) if args.cost else default_cost(b)
    pinned = {k: v for k, v in settings.items() if k != "engine"}
    result, fit = simulate_and_fit(predict, b, workload, pinned=pinned, seed=args.seed,
                                   budget=args.preemption_budget, cost=cost)
    if args.csv:
        with open(args.csv, "w", encoding="utf-8", newline="") as handle:
            handle.write(to_csv(result))
    compared = compare_with_log(result, logged) if logged else None
    if args.json:
        out = report_dict(b, args.workload, args.seed, cost, result, fit)
        print(json.dumps(out | ({"log": compared} if compared else {}), indent=1, default=str))
    else:
        from .report import report_text

        print(report_text(b, args.workload, args.seed, result, fit))
        if compared:
            print("\n".join(compared_lines(compared)))
    return 0


PROGRESS_REQUESTS = 20_000  # a run this large takes tens of seconds: say so before starting


def _limits(args, max_requests: int, max_tokens: int) -> tuple[int, int]:
    requests = args.max_requests if getattr(args, "max_requests", None) is not None else max_requests
    tokens = args.max_tokens if getattr(args, "max_tokens", None) is not None else max_tokens
    if not 1 <= requests <= 1 << 40 or not 1 <= tokens <= 1 << 50:
        raise ValueError(f"--max-requests and --max-tokens must be positive (got {requests}, {tokens})")
    return requests, tokens


def _logged_usage(path: str) -> dict:
    from ..forensics.serving import read_serving_file

    logged = read_serving_file(path).to_dict()
    if logged is None:
        raise ValueError(f"{path}: no periodic stats lines to compare with (vLLM prints 'GPU KV cache usage: X%' "
                         f"every 10 s while serving unless --disable-log-stats; SGLang 'token usage: U')")
    return logged


def compare_with_log(result, logged: dict) -> dict:
    """The pool usage a real log printed beside the simulated one (both as shares of each one's own pool)."""
    simulated = {"peak_usage_pct": round(result.engine_usage_pct(result.peak_blocks), 1),
                 "p99_usage_pct": round(result.engine_usage_pct(result.p99_blocks), 1),
                 "max_running": result.peak_running, "max_waiting": result.peak_waiting,
                 "preemptions": result.preemptions,
                 "prefix_cache_hit_rate_pct": round(100 * result.engine_hit_rate, 1) if result.lookup_queries else None}
    return {"logged": logged, "simulated": simulated,
            "peak_gap_pct_points": round(simulated["peak_usage_pct"] - logged["peak_usage_pct"], 1)}


def _cell(value) -> str:
    return f"{'-' if value is None else value:>10}"


def compared_lines(compared: dict) -> list[str]:
    logged, simulated = compared["logged"], compared["simulated"]
    rows = (("KV cache usage, peak %", "peak_usage_pct"), ("KV cache usage, p99 %", "p99_usage_pct"),
            ("running requests, max", "max_running"), ("waiting requests, max", "max_waiting"),
            ("preemptions", "preemptions"), ("prefix cache hit rate % (engine's counter)", "prefix_cache_hit_rate_pct"))
    title = f"against the log ({logged['samples']:,} stats lines)"
    lines = ["", f"{title:<42} {'logged':>10} {'simulated':>10}"]
    lines += [f"  {label:<40} {_cell(logged.get(key))} {_cell(simulated.get(key))}" for label, key in rows]
    lines.append("  (the log's traffic is what --workload must describe: the comparison is only as good as that)")
    return lines


def simulate_and_fit(predict, b, workload, *, pinned: dict, seed: int, budget: float, cost):
    """The workload on the predicted pool, and the cheapest pool setting that serves it (fit.py);
    `predict(extra settings) -> Breakdown`, `b` its prediction with none. What the command and the web page run."""
    from . import pool_from_breakdown, simulate
    from .fit import fit_pool

    result = simulate(pool_from_breakdown(b), workload, seed=seed, cost=cost)
    fit = fit_pool(predict, workload, pinned=pinned, seed=seed, budget=budget, cost=cost, baseline=(b, result))
    return result, fit


def report_dict(b, workload: str, seed: int, cost, result, fit) -> dict:
    """What `simulate --json` prints (`workload`: the spec as given)."""
    from .fit import verdict_line

    from ..library import SCHEMA_VERSION

    return {"schema_version": SCHEMA_VERSION, "command": "simulate", "model": b.model, "gpu": b.gpu_name,
            "engine": b.engine_name, "version": b.engine_version,
            "workload": workload, "seed": seed, "cost": cost.__dict__, "verdict": verdict_line(result, fit),
            "result": result.to_dict(), "fit": fit.to_dict()}
