"""`vram-detective compare MODEL --gpu X [--context N]`: the same model and GPU on every registered engine
at its defaults, side by side, and why their KV pools differ, term by term.

Each engine's Breakdown tree is its own budget split in its own words (vLLM: gpu_memory_utilization x total,
minus weights, activation peak, non-torch and CUDA graphs; SGLang: mem_fraction_static x free memory before
weights, minus weights only, everything else in the slack), so the comparison walks the trees, not the engines.
"""
from __future__ import annotations

import argparse
import math

from .engines import COMPARED_BY_DEFAULT as DEFAULT_ENGINES
from .units import GIB
from .term import HelpFormatter  # --help fitted to the terminal

EXAMPLES = """examples:
  vram-detective compare Qwen/Qwen3-8B --gpu 4090 --context 32k          # vLLM, SGLang, llama.cpp (Q4_K_M)
  vram-detective compare Qwen/Qwen3-8B --gpu 4090 --context 32k --gguf-type Q8_0 --engines vllm,llamacpp,ollama
  vram-detective compare Qwen/Qwen3-235B-A22B-FP8 --gpu H100 -tp 4
  vram-detective compare Qwen/Qwen3-235B-A22B-FP8 --gpu H100 -tp 4 --engine-version vllm=0.10.0 \\
      --engine-version sglang=0.4.10 --mem-fraction-static 0.93
  vram-detective compare Qwen/Qwen3-8B --gpu 4090 --max-model-len 16k --vllm-version 0.8.5   # explain's names
"""

DEFAULT_GGUF_TYPE = "Q4_K_M"  # what most llama.cpp users download; --gguf-type picks another mix


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "compare", help="the same model and GPU on each engine (vLLM, SGLang, llama.cpp), side by side, and why they differ",
        description=__doc__.splitlines()[0], epilog=EXAMPLES, formatter_class=HelpFormatter)
    parser.add_argument("model", help="catalog repo id, local model directory or .gguf file")
    parser.add_argument("--gpu", required=True, help='GPU name or alias ("RTX 4090", "H100")')
    parser.add_argument("--context", "--max-model-len", dest="context",
                        help="tokens per request for the concurrency row (32k or 32768; default: each engine's own "
                             "context length); --max-model-len is the same, as explain names it")
    parser.add_argument("-tp", "--tensor-parallel-size", dest="compare_tp", type=int, default=1, metavar="N",
                        help="GPUs the model is split over (each engine in its own terms: TP, llama.cpp's layer split)")
    parser.add_argument("--engines", dest="compare_engines", default=",".join(DEFAULT_ENGINES), metavar="LIST",
                        help=f"engines to set side by side (default: {','.join(DEFAULT_ENGINES)}; ollama too)")
    parser.add_argument("--engine-version", "--version", dest="compare_versions", action="append", default=[],
                        metavar="ENGINE=VERSION", help="an engine's release (default: each engine's newest); "
                        "repeatable; a bare VERSION with one engine in --engines; --version is the old name")
    parser.add_argument("--vllm-version", dest="compare_vllm_version", metavar="VERSION",
                        help="vLLM's release: the same as --engine-version vllm=VERSION")
    parser.add_argument("--gguf-type", dest="compare_gguf_type", type=str.upper, default=None, metavar="MIX",
                        help=f"llama.cpp / Ollama without a GGUF file: the quantization mix (default {DEFAULT_GGUF_TYPE})")
    parser.add_argument("--gpu-memory-utilization", dest="compare_util", type=float, metavar="VALUE", help="vLLM's budget fraction")
    parser.add_argument("--mem-fraction-static", dest="compare_mfs", type=float, metavar="VALUE", help="SGLang's budget fraction")
    from .engines.base import SPECULATION_METHODS

    parser.add_argument("--speculative", dest="compare_speculative", choices=SPECULATION_METHODS, metavar="METHOD",
                        help="speculative decoding on every engine, each in its own flags (vLLM --speculative-config, "
                             f"SGLang --speculative-algorithm ...): {', '.join(SPECULATION_METHODS)}; an engine "
                             "without it is listed as not sized, with the reason")
    parser.add_argument("--draft-model", dest="compare_draft_model", metavar="MODEL",
                        help="--speculative's draft checkpoint (an EAGLE head, a small model); none for ngram or a "
                             "model's own MTP layers")
    parser.add_argument("--draft-tokens", dest="compare_draft_tokens", type=int, default=3, metavar="N",
                        help="tokens the drafter proposes per step (default 3)")
    from .cli import add_output_arguments

    add_output_arguments(parser)


def _versions(pairs: list[str], engines: tuple[str, ...] = (), vllm_version: str | None = None) -> dict[str, str]:
    """{engine: release} from --engine-version ENGINE=VERSION (or a bare VERSION when one engine is compared)
    and --vllm-version VERSION (vllm=VERSION, as every other command spells it)."""
    from .engines import ENGINES

    out: dict[str, str] = {}
    for pair in [*pairs, *((f"vllm={vllm_version}",) if vllm_version else ())]:
        name, equals, version = pair.partition("=")
        if not equals and len(engines) == 1 and pair:
            name, version = engines[0], pair
        if name not in ENGINES or not version:
            raise ValueError(f"--engine-version takes ENGINE=VERSION with ENGINE one of {', '.join(ENGINES)} (a bare "
                             f"VERSION only with one engine in --engines): {pair!r}")
        if out.get(name, version) != version:
            raise ValueError(f"two releases given for {name}: {out[name]} and {version}")
        out[name] = version
    return out


def _speculation(args):
    """--speculative METHOD [--draft-model M] [--draft-tokens N] as one Speculation; None without --speculative."""
    from .engines.base import speculation_from

    return speculation_from(args.compare_speculative, args.compare_draft_model, args.compare_draft_tokens)


def _has_setting(engine: str, setting: str) -> bool:
    from .engines import get_engine

    return any(flag.setting == setting for flag in get_engine(engine).launch.flags)


def _engines(text: str) -> tuple[str, ...]:
    from .engines import ENGINES

    names = tuple(dict.fromkeys(name.strip().lower() for name in text.split(",") if name.strip()))
    unknown = [name for name in names if name not in ENGINES]
    if unknown or not names:
        raise ValueError(f"--engines takes names among {', '.join(ENGINES)}: {text!r}")
    return names


def compare(model: str, gpu: str, *, context: int | None = None, tp: int = 1, versions: dict | None = None,
            settings: dict | None = None, engines: tuple[str, ...] = DEFAULT_ENGINES,
            skipped: list | None = None) -> list:
    """One Breakdown per engine; each engine names the common knobs (context, GPUs) its own way
    (engines.base.common_settings). An engine that cannot size this model goes to `skipped` (name, why)."""
    from . import api
    from .engines import get_engine
    from .engines.base import common_settings
    from .errors import EngineRefused

    out = []
    for name in engines:
        engine = get_engine(name)
        values = {**common_settings(engine, context=context, gpus=tp), **((settings or {}).get(name, {}))}
        try:
            out.append(api.explain(model, gpu, engine=name, engine_version=(versions or {}).get(name), **values))
        except (ValueError, EngineRefused) as error:
            if skipped is None:
                raise
            skipped.append((engine.label, str(error).splitlines()[0]))
    return out


def _g(value: int) -> str:
    return f"{value / GIB:.2f} GiB"


def _per_gpu(values: list, single, text) -> str:
    """One GPU's figure; with several, "x each" when they agree, else each GPU's in order ("2.04 / 2.31 GiB")."""
    if not values:
        return text(single)
    if len(set(values)) == 1:
        return f"{text(values[0])} each"
    if len(values) > 4:
        return f"{text(min(values))} - {text(max(values))}"
    return " / ".join(text(v).split(" ")[0] for v in values[:-1]) + " / " + text(values[-1])


def rows(breakdowns: list, context: int | None) -> list[tuple[str, ...]]:
    """The side-by-side table: one column per engine."""
    def concurrency(b) -> str:
        length = context or b.max_model_len
        # rounded down: 32,736 tokens for 32,768-token requests is not one whole request
        return f"{math.floor(b.kv_cache_tokens * 100 / length) / 100:.2f}x at {length:,}"

    def weights(b) -> str:
        mix = next((s.value for s in b.settings if s.name == "gguf_type"), None)
        return _per_gpu([d.weights_bytes for d in b.devices], b.weights_bytes, _g) + (f" ({mix})" if mix else "")

    def used(b) -> str:  # a refused start never reaches its steady state: no nvidia-smi figure to show
        if b.failure is not None:
            return "- (refuses)"
        return _per_gpu([d.nvidia_smi_used_mib for d in b.devices], b.nvidia_smi_used_mib, lambda v: f"{v:,} MiB")

    graphs = [b.figure("cuda_graph_bytes") or 0 for b in breakdowns]
    return [
        ("", *(f"{b.engine_label} {b.engine_version}" for b in breakdowns)),
        ("starts", *("no: refuses" if b.failure is not None else "yes" for b in breakdowns)),
        ("budget", *(_g(b.components.bytes) for b in breakdowns)),  # what each budget is: under the table
        ("weights per GPU", *(weights(b) for b in breakdowns)),
        ("KV pool", *(_g(b.kv_cache_bytes) for b in breakdowns)),
        ("KV bytes per token", *(f"{b.kv_bytes_per_token:,} B" for b in breakdowns)),
        ("KV tokens", *(f"{b.kv_cache_tokens:,}" for b in breakdowns)),
        ("concurrency", *(concurrency(b) for b in breakdowns)),
        ("CUDA graphs", *(_g(value) for value in graphs)),
        ("host RAM", *(_g(b.figure("host_ram_bytes")) if b.figure("host_ram_bytes") is not None else "-"
                       for b in breakdowns)),
        ("nvidia-smi used", *(used(b) for b in breakdowns)),
    ]


def _budget_lines(b) -> list[str]:
    """A budget split (vLLM, SGLang: budget - terms = KV pool) or a sum of per-device buffers (llama.cpp)."""
    lines = [f"{b.engine_label}: {b.components.label} = {_g(b.components.bytes)}"]
    split = any(child.key == "kv_cache" for child in b.components.children)
    if split:
        lines += [f"    {'-' if child.key != 'kv_cache' else '='} {child.label}: {_g(child.bytes)}"
                  for child in b.components.children]
    for child in () if split else b.components.children:
        lines.append(f"    + {child.label}: {_g(child.bytes)}"
                     + "".join(f", {part.label} {_g(part.bytes)}" for part in child.children))
    outside = ", ".join(f"{child.label} {_g(child.bytes)}" for child in b.outside_budget.children if child.bytes)
    lines.append(f"    {'outside the budget' if split else b.outside_budget.label}: {outside}")
    return lines


def _weights_why(first, other) -> str:
    mix = next((s.value for s in other.settings if s.name == "gguf_type"), None)
    if mix:
        return f"{other.engine_label} holds the {mix} mix, {first.engine_label} the checkpoint as stored"
    return f"{other.engine_label} counts free memory, {first.engine_label} allocated bytes"


def _pair_lines(first, other) -> list[str]:
    """What one engine's figures come to against the first engine's."""
    inside = lambda b: b.components.bytes - b.weights_bytes - b.kv_cache_bytes  # noqa: E731
    return [
        "",
        f"budget: {other.engine_label} {_g(other.components.bytes)} vs {first.engine_label} "
        f"{_g(first.components.bytes)} ({(other.components.bytes - first.components.bytes) / GIB:+.2f} GiB)",
        f"weights: {(other.weights_bytes - first.weights_bytes) / GIB:+.2f} GiB ({_weights_why(first, other)})",
        f"reserved inside the budget besides weights and KV: {first.engine_label} {_g(max(inside(first), 0))}, "
        f"{other.engine_label} {_g(max(inside(other), 0))} (what one engine keeps out of its budget the other subtracts in it)",
        f"KV bytes per token: {first.kv_bytes_per_token:,} vs {other.kv_bytes_per_token:,} B",
        f"so the pool: {_g(first.kv_cache_bytes)} -> {_g(other.kv_cache_bytes)}, tokens {first.kv_cache_tokens:,} -> "
        f"{other.kv_cache_tokens:,} ({other.kv_cache_tokens / max(first.kv_cache_tokens, 1):.2f}x)",
    ]


def compare_report(model: str, gpu: str, *, context: int | None = None, tp: int = 1, engines=None,
                   versions: dict | None = None, settings: dict | None = None, gguf_type: str | None = None,
                   speculation=None) -> dict:
    """What `compare --json` prints (and, under "breakdowns", the predictions themselves): an engine that sizes
    llama.cpp's quantization mixes gets `gguf_type` (default Q4_K_M) for a model that is not a GGUF file;
    `speculation` (engines.base.Speculation) goes to each engine in its own flags, or the engine is skipped
    with its reason."""
    from dataclasses import asdict

    from .engines import get_engine
    from .errors import NotOffered
    from .render import to_json

    engines = tuple(engines or DEFAULT_ENGINES)
    settings = {name: dict((settings or {}).get(name, {})) for name in engines}
    skipped: list = []
    sized = []
    for name in engines:
        engine = get_engine(name)
        if engine.gguf_mixes and not model.endswith(".gguf"):
            settings[name]["gguf_type"] = gguf_type or DEFAULT_GGUF_TYPE
        if speculation is not None:
            try:
                settings[name].update(engine.speculative_settings(speculation))
            except NotOffered as error:
                skipped.append((engine.label, str(error)))
                continue
        sized.append(name)
    breakdowns = compare(model, gpu, context=context, tp=tp, versions=versions, settings=settings, engines=tuple(sized),
                         skipped=skipped)
    if not breakdowns:
        raise ValueError("no engine could size this model: " + "; ".join(f"{n}: {w}" for n, w in skipped))
    return {"model": model, "gpu": breakdowns[0].gpu_name, "context": context,
            "speculation": asdict(speculation) if speculation is not None else None,
            "engines": [to_json(b) for b in breakdowns], "why": why(breakdowns),
            "skipped": [{"engine": n, "why": w} for n, w in skipped], "breakdowns": breakdowns}


def why(breakdowns: list) -> list[str]:
    """The budget of each engine term by term, then what each engine's differences from the first come to."""
    lines = [line for b in breakdowns for line in _budget_lines(b)]
    for other in breakdowns[1:]:
        lines += _pair_lines(breakdowns[0], other)
    return lines


def run(args) -> int:
    import json

    from .units import parse_token_count

    context = parse_token_count(args.context) if args.context else None
    engines = _engines(args.compare_engines)
    settings: dict = {name: {} for name in engines}
    for setting, value in (("gpu_memory_utilization", args.compare_util), ("mem_fraction_static", args.compare_mfs)):
        for name in settings:  # --util / --mfs: each is one engine's own knob, given to the engine that has it
            if value is not None and _has_setting(name, setting):
                settings[name][setting] = value
    speculation = _speculation(args)
    report = compare_report(args.model, args.gpu, context=context, tp=args.compare_tp, engines=engines,
                            versions=_versions(args.compare_versions, engines, args.compare_vllm_version),
                            settings=settings, gguf_type=args.compare_gguf_type, speculation=speculation)
    breakdowns = report.pop("breakdowns")
    table = rows(breakdowns, context)
    if args.json:
        from .library import envelope

        print(json.dumps(envelope("compare", None, report), indent=2, default=str))
        return 0
    from .term import args_width, paragraph, table as fitted

    columns = args_width(args)
    drafting = "" if speculation is None else (
        f", speculative decoding {speculation.method} ({speculation.tokens} draft tokens"
        + (f", draft {speculation.draft_model})" if speculation.draft_model else ")"))
    print("\n".join(paragraph([f"{args.model} on {breakdowns[0].gpu_name}, TP {args.compare_tp}{drafting}, each "
                               "engine at its defaults" + (" otherwise" if drafting else "")], columns)))
    if getattr(args, "markdown", False):
        from .listing import _markdown

        print("\n".join(_markdown(table[0], table[1:], "l" * len(table[0]))))
    else:
        print("\n".join(fitted(table[0], table[1:], "l" * len(table[0]), columns, under=False)))
    print("\nWhy they differ, term by term:")
    print("\n".join(paragraph([f"  {line}" for line in why(breakdowns)], columns, "    ")))
    for item in report["skipped"]:
        label, reason = item["engine"], item["why"]
        print("\n".join(paragraph([f"  {label}: not sized ({reason})"], columns, "    ")))
    refusals = [f"  {b.engine_label} {b.engine_version} would refuse to start: {b.failure.message}"
                for b in breakdowns if b.failure is not None]
    if refusals:  # under the table, wrapped: the column's figures are what it sized before refusing
        print("\n" + "\n".join(paragraph(refusals, columns, "    ")))
    return 0
