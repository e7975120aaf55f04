"""`vram-detective whatif` and `vram-detective fit` (plug-in commands of cli.py).

register() only builds argparse parsers (the CLI must start fast); run() imports the rest.
Exit codes: 0 fine, 1 the target cannot be met / the baseline would not start, 2 bad input (one line).
"""
from __future__ import annotations

import argparse
import sys
import time
from ..term import HelpFormatter  # --help fitted to the terminal

EXIT_INFEASIBLE = 1
EXIT_BAD_INPUT = 2

WHATIF_EXAMPLES = """examples:
  vram-detective whatif Qwen/Qwen2.5-7B-Instruct-AWQ --gpu "RTX 4090" --max-model-len 32k
  vram-detective whatif meta-llama/Llama-3.1-8B-Instruct --gpu 3090 --vllm-version 0.6.4 --json
  vram-detective whatif Qwen/Qwen3-8B --gpu 4090 --engine llamacpp --gguf-type Q4_K_M -c 8192
"""

FIT_EXAMPLES = """examples:
  vram-detective fit Qwen/Qwen2.5-7B-Instruct-AWQ --gpu "RTX 4090" --max-gpu-memory 12GiB
  vram-detective fit meta-llama/Llama-3.1-70B-Instruct --gpu H100 --context 32k --concurrency 16
  vram-detective fit Qwen/Qwen3-32B --gpu "RTX 4090" --gpus 2 --context 128k      # what it takes
  vram-detective fit Qwen/Qwen3-8B --gpu L4 --context 16k --concurrency 8 --entrypoint llm --json
  vram-detective fit Qwen/Qwen3-8B --gpu "H100 SXM" --engine sglang --context 32k --concurrency 4
"""


def _common(parser: argparse.ArgumentParser) -> None:
    from ..cli import add_model_arguments, add_output_arguments

    add_model_arguments(parser)
    add_output_arguments(parser)
    from ..deploy import add_emit_argument

    add_emit_argument(parser)


def register(subparsers) -> None:
    from ..cli import _add_vllm_flags

    whatif = subparsers.add_parser(
        "whatif", help="what every lever (utilization, context, batch, fp8 KV, graphs, offload, quantization, TP/PP) changes",
        description="Predict the baseline (MODEL on a GPU with the engine flags given), then every lever of the "
                    "engine one at a time, each with its launch line: vLLM's utilization, context, batch, fp8 KV, "
                    "graphs, offload, quantization and TP/PP (the change in weights, KV pool, tokens, concurrency and "
                    "nvidia-smi, and what each costs); SGLang's mem-fraction-static, running requests, chunked "
                    "prefill, graphs, fp8 KV, page size and TP; llama.cpp's -ngl, -c, -np, KV types, flash "
                    "attention, batches, experts on the CPU and mmap; Ollama's num_ctx, parallel slots, KV type, "
                    "flash attention and num_gpu; and the model's other checkpoints or quantization mixes.",
        epilog=WHATIF_EXAMPLES, formatter_class=HelpFormatter)
    _common(whatif)
    whatif.add_argument("--no-checkpoints", action="store_true", help="leave out the catalog's other checkpoints")
    _add_vllm_flags(whatif)

    fit = subparsers.add_parser(
        "fit", help="the settings (and checkpoint) that meet a memory / concurrency / context target",
        description="Search the engine's settings for the configurations that meet the target, best first, each "
                    "with its exact launch line; when nothing meets it, what comes nearest. vLLM: its settings and "
                    "the catalog's bf16 / FP8 / AWQ / GPTQ variants of MODEL, with what binds each; SGLang: TP, KV "
                    "dtype and mem-fraction-static; llama.cpp: the most layers on the GPU at the context and the "
                    "largest context with every layer on it. Ollama picks its layers itself: fit is not offered "
                    "for it. Engine flags given here are kept as they are (pinned).",
        epilog=FIT_EXAMPLES, formatter_class=HelpFormatter)
    _common(fit)
    target = fit.add_argument_group("the target")
    target.add_argument("--gpus", type=int, default=1, help="GPUs available (tensor x pipeline parallel up to this; default 1)")
    target.add_argument("--max-gpu-memory", default=None,
                        help="memory nvidia-smi may show per GPU, e.g. 12GiB (default: the whole GPU)")
    target.add_argument("--context", default=None, help="tokens per request, e.g. 32k (default: the longest that fits)")
    target.add_argument("--concurrency", type=float, default=None, help="requests of --context tokens at once (default 1)")
    target.add_argument("--same-checkpoint", action="store_true", help="do not consider other checkpoints of the model")
    target.add_argument("--workload", metavar="SPEC", default=None,
                        help="size the KV pool for a request workload instead of the worst case: the cheapest pool "
                             "setting that serves it without preemption, found by simulation (e.g. "
                             "chat:rate=2,duration=300 or trace:FILE.jsonl; see `vram-detective simulate --help`)")
    target.add_argument("--preemption-budget", type=float, default=0.01, metavar="FRACTION",
                        help="with --workload: the share of requests that may be preempted (default 0.01)")
    target.add_argument("--seed", type=int, default=0, help="with --workload: the workload's random seed")
    target.add_argument("--top", type=int, default=5, help="candidates to list (default 5)")
    _add_vllm_flags(fit)


class Progress:
    """A one-line progress bar on stderr, only on a terminal and only once a sweep takes a moment."""

    def __init__(self, stream=None, delay: float = 0.3):
        self.stream = stream or sys.stderr
        self.delay = delay
        self.shown = False

    def __call__(self, done: int, total: int, started: float, stage: str) -> None:
        if not (hasattr(self.stream, "isatty") and self.stream.isatty()):
            return
        if done >= total:
            if self.shown:
                self.stream.write("\r\033[K")
                self.stream.flush()
                self.shown = False
            return
        if time.perf_counter() - started < self.delay:
            return
        width = 30
        filled = int(width * done / max(total, 1))
        self.stream.write(f"\r{stage or 'sweep'} [{'#' * filled}{'.' * (width - filled)}] {done}/{total} families")
        self.stream.flush()
        self.shown = True


def _columns(args):
    from ..term import args_width

    return args_width(args)


def _fitted(text: str, args) -> str:
    """An engine's own listing, each line wrapped to the terminal (its continuation indented)."""
    from ..term import wrap

    columns, out = _columns(args), []
    for line in text.splitlines():
        cut = line.rfind("  ", 0, (columns or len(line)) + 1)
        if columns is None or len(line) <= columns or cut <= len(line) - len(line.lstrip()):
            out += wrap(line.strip(), columns, line[: len(line) - len(line.lstrip())], "      ")
        else:  # the columns that fit on the line, the rest (a launch line) wrapped under it
            out += [line[:cut].rstrip()] + wrap(line[cut:].strip(), columns, "      ", "        ")
    return "\n".join(out)


def _settings(args) -> dict:
    from ..engines import get_engine

    flags = get_engine(getattr(args, "engine_name", None)).launch.flags
    out = {flag.setting: getattr(args, flag.setting) for flag in flags
           if flag.setting != "model" and getattr(args, flag.setting, None) is not None}  # the model is positional
    # other engines' flags the engine reads as its own (--max-model-len for a context length), as explain passes them
    out.update({name: getattr(args, name) for name in sorted(get_engine(getattr(args, "engine_name", None)).launch.foreign)
                if name not in out and getattr(args, name, None) is not None})
    if args.vllm_path:
        out["engine"] = args.vllm_path
    if getattr(args, "gguf_type", None):
        if not get_engine(getattr(args, "engine_name", None)).gguf_mixes:
            raise ValueError("--gguf-type sizes a llama.cpp quantization mix: it goes with --engine llamacpp or ollama")
        out["gguf_type"] = args.gguf_type  # llama.cpp / Ollama without a GGUF file
    return out


def _sources(args) -> dict:
    return {"source": args.source, "revision": args.revision, "hf_token": args.hf_token, "gguf_file": args.gguf_file}


def _gpu(args):
    from .. import api
    from ..hardware import parse_memory_size

    memory = parse_memory_size(args.gpu_memory) if args.gpu_memory else None
    if args.gpu is None and memory is None:
        raise ValueError(f"{args.command} needs a GPU (--gpu NAME or --gpu-memory SIZE)")
    return api.resolve_gpu(args.gpu, memory)


def run(args) -> int:
    import json

    try:
        if getattr(args, "emit", None):
            from ..deploy.command import emit_advisor

            return emit_advisor(args)  # deploy/command.py: the deployment of the answer
        if args.command == "fit" and getattr(args, "workload", None):
            return _run_fit_workload(args, json)
        answer = answer_for(args)
    except BrokenPipeError:  # a refusal, bad input or a bug: errors.py's policy, the same for every command
        return 0
    if args.json:
        print(json.dumps(answer.to_dict(), indent=2, default=str))
    else:
        text = answer.text(_columns(args), getattr(args, "markdown", False))
        print(text if answer.wrapped else _fitted(text, args))
    return 0 if answer.ok else EXIT_INFEASIBLE


def answer_for(args):
    """The whatif / fit answer for the parsed command line (advisor/answers.py: the web API's dispatch too)."""
    from ..engines import get_engine
    from . import answers

    engine = get_engine(args.engine_name)
    settings = _settings(args)
    if args.entrypoint:
        settings["entrypoint"] = args.entrypoint
    if args.command == "whatif":
        return answers.whatif(args.model, _gpu(args), engine, args.engine_version, settings, _sources(args),
                              checkpoints=not args.no_checkpoints)
    if args.top < 1:
        raise ValueError("--top must be at least 1")
    if engine.levers.advisor == "sweep" and engine.levers.numpy_or_none() is None:
        print("vram-detective: note: numpy is not installed, the sweep runs in pure Python (slower); "
              "pip install 'vram-detective[advisor]'", file=sys.stderr)
    return answers.fit(args.model, _gpu(args), engine, args.engine_version, settings, _sources(args),
                       fit_target(args.context, args.concurrency, args.max_gpu_memory, args.gpus, args.top,
                                  args.same_checkpoint), progress=Progress())


def fit_target(context, concurrency, max_gpu_memory, gpus=1, top=5, same_checkpoint=False):
    """answers.Target from the texts a user gives (`32k`, `12GiB`), as the CLI and the web API read them."""
    from ..hardware import parse_memory_size
    from ..units import parse_token_count
    from .answers import Target

    from argparse import Namespace

    from ..input_checks import check_arguments

    tokens = parse_token_count(context) if context else None
    if tokens is not None and tokens < 1:
        raise ValueError(f"--context must be a positive token count, got {context}")
    ceiling = parse_memory_size(max_gpu_memory) if max_gpu_memory else None
    concurrency = float(concurrency) if concurrency not in (None, "") else None
    gpus, top = int(gpus if gpus is not None else 1), int(top if top is not None else 5)
    # the command line's checks for every caller (the library's fit too): a finite, positive concurrency the KV
    # cache could hold, 1..MAX_GPUS GPUs, at least one candidate
    check_arguments(Namespace(concurrency=concurrency, context=context, gpus=gpus, top=top))
    return Target(tokens, str(context) if context else None, concurrency, ceiling,
                  str(max_gpu_memory) if max_gpu_memory else None, gpus, top, same_checkpoint)


def _run_fit_workload(args, json) -> int:
    """fit --workload: the cheapest setting of the engine's pool lever that serves the simulated workload, with
    the engine's launch line at that setting."""
    from ..engines import get_engine
    from ..simulate.fit import fit_workload
    from ..simulate.workloads import parse_workload

    if not 0 <= args.preemption_budget < 1:
        raise ValueError("--preemption-budget is a fraction of the requests, from 0 to below 1")
    engine, settings = get_engine(args.engine_name), _settings(args)
    found = fit_workload(args.model, _gpu(args), parse_workload(args.workload), engine=engine.name,
                         engine_version=args.engine_version, settings=settings, seed=args.seed,
                         budget=args.preemption_budget, **_sources(args))
    line = engine.launch_line(args.model, {**settings, found.lever.setting: found.value}) if found.feasible else None
    if args.json:
        print(json.dumps(dict(found.to_dict(), command=line), indent=2, default=str))
    else:
        print("\n".join(workload_fit_lines(found, line, _columns(args))))
    return 0 if found.feasible else EXIT_INFEASIBLE


def workload_fit_lines(found, line: str | None, columns: int | None) -> list[str]:
    """The verdict wrapped to the terminal, the lever's setting, and the launch line continued as a shell reads
    it (' \\' at each break)."""
    from ..simulate.fit import verdict_line
    from ..term import wrap

    if not found.feasible:
        return wrap(f"no setting serves this workload: {found.reason}", columns, "", "  ")
    out = wrap(verdict_line(found.result, found), columns, "", "  ")
    out.append(f"  {found.lever.text(found.value)}  ({found.simulations} simulations)")
    return out + _shell_lines(line, columns, "  ")


def _shell_lines(line: str, columns: int | None, lead: str) -> list[str]:
    """A launch line within `columns`: broken between words (a flag kept with its value), each break ' \\'."""
    from ..term import continued_command

    if columns is None or len(lead + line) <= columns:
        return [lead + line]
    return continued_command(line, lead, columns)
