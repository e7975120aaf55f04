"""`vram-detective compare MODEL --gpu X [--context N]`: the same model and GPU on every registered engine
at its defaults, side by side, and why their KV pools differ, term by term.

Each engine's Breakdown tree is its own budget split in its own words (vLLM: gpu_memory_utilization x total,
minus weights, activation peak, non-torch and CUDA graphs; SGLang: mem_fraction_static x free memory before
weights, minus weights only, everything else in the slack), so the comparison walks the trees, not the engines.
"""
from __future__ import annotations

import argparse

from .units import GIB

EXAMPLES = """examples:
  vram-detective compare Qwen/Qwen3-8B --gpu 4090 --context 32k
  vram-detective compare Qwen/Qwen3-235B-A22B-FP8 --gpu H100 -tp 4
  vram-detective compare Qwen/Qwen3-235B-A22B-FP8 --gpu H100 -tp 4 --version vllm=0.10.0 --version sglang=0.4.10 \\
      --mem-fraction-static 0.93
"""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "compare", help="the same model and GPU on each engine (vLLM, SGLang), side by side, and why they differ",
        description=__doc__.splitlines()[0], epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="catalog repo id or local model directory")
    parser.add_argument("--gpu", required=True, help='GPU name or alias ("RTX 4090", "H100")')
    parser.add_argument("--context", help="tokens per request for the concurrency row (32k or 32768; default: "
                                          "each engine's own context length)")
    parser.add_argument("-tp", "--tensor-parallel-size", dest="compare_tp", type=int, default=1, metavar="N")
    parser.add_argument("--version", dest="compare_versions", action="append", default=[], metavar="ENGINE=VERSION",
                        help="an engine's release (default: each engine's newest); repeatable")
    parser.add_argument("--gpu-memory-utilization", dest="compare_util", type=float, help="vLLM's budget fraction")
    parser.add_argument("--mem-fraction-static", dest="compare_mfs", type=float, help="SGLang's budget fraction")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _versions(pairs: list[str]) -> dict[str, str]:
    from .engines import ENGINES

    out = {}
    for pair in pairs:
        name, _, version = pair.partition("=")
        if name not in ENGINES or not version:
            raise ValueError(f"--version takes ENGINE=VERSION with ENGINE one of {', '.join(ENGINES)}: {pair!r}")
        out[name] = version
    return out


def compare(model: str, gpu: str, *, context: int | None = None, tp: int = 1, versions: dict | None = None,
            settings: dict | None = None) -> list:
    """One Breakdown per registered engine (vLLM's names; each engine reads them as its own)."""
    from . import api
    from .engines import ENGINES

    out = []
    for name in (name for name in ENGINES if name in ("vllm", "sglang")):  # engines that read vLLM's names
        values = {"tensor_parallel_size": tp, **((settings or {}).get(name, {}))}
        if context:
            values["max_model_len"] = context
        out.append(api.explain(model, gpu, engine=name, engine_version=(versions or {}).get(name), **values))
    return out


def _g(value: int) -> str:
    return f"{value / GIB:.2f} GiB"


def rows(breakdowns: list, context: int | None) -> list[tuple[str, ...]]:
    """The side-by-side table: one column per engine."""
    def concurrency(b) -> str:
        length = context or b.max_model_len
        return f"{b.kv_cache_tokens / length:.2f}x at {length:,}"

    graphs = [b.figure("cuda_graph_bytes") or 0 for b in breakdowns]
    return [
        ("", *(f"{b.engine_label} {b.engine_version}" for b in breakdowns)),
        ("budget", *(f"{_g(b.components.bytes)} ({b.components.label})" for b in breakdowns)),
        ("weights per GPU", *(_g(b.weights_bytes) for b in breakdowns)),
        ("KV pool", *(_g(b.kv_cache_bytes) for b in breakdowns)),
        ("KV bytes per token", *(f"{b.kv_bytes_per_token:,} B" for b in breakdowns)),
        ("KV tokens", *(f"{b.kv_cache_tokens:,}" for b in breakdowns)),
        ("concurrency", *(concurrency(b) for b in breakdowns)),
        ("CUDA graphs", *(_g(value) for value in graphs)),
        ("nvidia-smi used", *(f"{b.nvidia_smi_used_mib:,} MiB" for b in breakdowns)),
    ]


def why(breakdowns: list) -> list[str]:
    """The budget of each engine term by term, then what the differences come to."""
    lines = []
    for b in breakdowns:
        lines.append(f"{b.engine_label}: {b.components.label} = {_g(b.components.bytes)}")
        lines += [f"    {'-' if child.key != 'kv_cache' else '='} {child.label}: {_g(child.bytes)}"
                  for child in b.components.children]
        outside = ", ".join(f"{child.label} {_g(child.bytes)}" for child in b.outside_budget.children if child.bytes)
        lines.append(f"    outside the budget: {outside}")
    if len(breakdowns) < 2:
        return lines
    first, second = breakdowns[0], breakdowns[1]
    inside = lambda b: b.components.bytes - b.weights_bytes - b.kv_cache_bytes  # noqa: E731
    lines += [
        "",
        f"budget: {second.engine_label} {_g(second.components.bytes)} vs {first.engine_label} "
        f"{_g(first.components.bytes)} ({(second.components.bytes - first.components.bytes) / GIB:+.2f} GiB)",
        f"weights: {(second.weights_bytes - first.weights_bytes) / GIB:+.2f} GiB ({second.engine_label} counts free "
        f"memory, {first.engine_label} allocated bytes)",
        f"reserved inside the budget besides weights and KV: {first.engine_label} {_g(max(inside(first), 0))}, "
        f"{second.engine_label} {_g(max(inside(second), 0))} (what one engine keeps out of its budget the other subtracts in it)",
        f"KV bytes per token: {first.kv_bytes_per_token:,} vs {second.kv_bytes_per_token:,} B",
        f"so the pool: {_g(first.kv_cache_bytes)} -> {_g(second.kv_cache_bytes)}, tokens {first.kv_cache_tokens:,} -> "
        f"{second.kv_cache_tokens:,} ({second.kv_cache_tokens / max(first.kv_cache_tokens, 1):.2f}x)",
    ]
    return lines


def run(args) -> int:
    import json
    import sys

    from .units import parse_token_count

    context = parse_token_count(args.context) if args.context else None
    settings = {"vllm": {}, "sglang": {}}
    if args.compare_util is not None:
        settings["vllm"]["gpu_memory_utilization"] = args.compare_util
    if args.compare_mfs is not None:
        settings["sglang"]["mem_fraction_static"] = args.compare_mfs
    breakdowns = compare(args.model, args.gpu, context=context, tp=args.compare_tp,
                         versions=_versions(args.compare_versions), settings=settings)
    table = rows(breakdowns, context)
    if args.json:
        from .render import to_json

        print(json.dumps({"model": args.model, "gpu": breakdowns[0].gpu_name, "context": context,
                          "engines": [to_json(b) for b in breakdowns], "why": why(breakdowns)}, indent=2, default=str))
        return 0
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    print(f"{args.model} on {breakdowns[0].gpu_name}, TP {args.compare_tp}, each engine at its defaults")
    for row in table:
        print("  " + "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
    print("\nWhy they differ, term by term:")
    print("\n".join(f"  {line}" for line in why(breakdowns)))
    for b in breakdowns:
        if b.failure is not None:
            print(f"  {b.engine_label} would refuse to start: {b.failure.message}", file=sys.stderr)
    return 0
