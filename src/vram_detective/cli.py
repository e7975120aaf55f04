"""Command line: a thin layer over vram_detective.api. Exit codes: 0 fine, 1 vLLM would refuse to
start, 2 bad input (one line on stderr, never a traceback)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .engines import DEFAULT_ENGINE, ENGINES

EXIT_REFUSED = 1
EXIT_BAD_INPUT = 2

VLLM_PATHS = ("v0", "v1")  # vLLM's engine paths (--vllm-engine; `--engine v0|v1` before there were engines)

EXAMPLES = """examples:
  vram-detective explain Qwen/Qwen2.5-7B-Instruct-AWQ --gpu "RTX 4090" \\
      --max-model-len 32k
  vram-detective explain meta-llama/Llama-3.1-70B-Instruct --gpu H100 -tp 4 \\
      --vllm-version 0.8.5
  vram-detective explain --gpu 4090 -- vllm serve Qwen/Qwen3-8B \\
      --gpu-memory-utilization 0.8 --max-num-seqs 64
  vram-detective explain Qwen/Qwen3-8B     # no --gpu: the common GPUs
  vram-detective explain --gpu H100 -- python -m sglang.launch_server \\
      --model-path Qwen/Qwen3-8B --tp 2
  vram-detective explain ./model-Q4_K_M.gguf --gpu 4090 -c 32768   # llama.cpp
  vram-detective compare Qwen/Qwen3-8B --gpu 4090 --context 32k
  vram-detective score groundtruth/dev.jsonl --json
"""


from .errors import BadInput  # noqa: E402 - the project's error base (errors.py)
from .term import HelpFormatter  # --help fitted to the terminal


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr (exit 2), not the whole usage block."""

    def error(self, message: str):
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _add_vllm_flags(parser: argparse.ArgumentParser) -> None:
    """Each engine's own flags (vLLM's first); a flag name an earlier engine took is that engine's (vLLM's
    --tensor-parallel-size, --dtype, --kv-cache-dtype, --quantization also set SGLang's settings), the flag's
    other names stay the later engine's own (SGLang's --tp and --pp-size)."""
    from dataclasses import replace

    from .engines import get_engine

    for name in ENGINES:
        engine = get_engine(name)
        flags = []
        for flag in engine.launch.flags:
            names = tuple(option for option in flag.names if option not in parser._option_string_actions)
            if names:
                flags.append(replace(flag, names=names) if names != flag.names else flag)
        _add_engine_flags(parser.add_argument_group(f"{engine.label} settings ({engine.label}'s own flag names)"),
                          flags, engine.launch.parse_value)


def _add_engine_flags(group, flags, parse_flag_value) -> None:
    for flag in flags:
        if flag.setting == "model":
            continue  # the model is the positional argument (llama.cpp's -m)
        if getattr(flag, "optional_value", False):  # llama.cpp's -fa: bare in old builds, on|off|auto later
            group.add_argument(*flag.names, dest=flag.setting, nargs="?", const=flag.value, default=None,
                               metavar="VALUE", help=flag.help,
                               type=lambda raw, flag=flag: _parse_or_bad(flag, raw, parse_flag_value))
        elif flag.parse is None:  # a switch that sets its own value (llama.cpp's --no-mmap sets mmap=False)
            group.add_argument(*flag.names, dest=flag.setting, action="store_const", const=flag.value, default=None,
                               help=flag.help)
        elif flag.parse.__name__ in ("_bool", "_switch"):
            group.add_argument(*flag.names, dest=flag.setting, action="store_true", default=None, help=flag.help)
            if flag.setting == "enable_prefix_caching":
                group.add_argument("--no-enable-prefix-caching", dest=flag.setting, action="store_false",
                                   help="prefix caching off")
        else:
            group.add_argument(*flag.names, dest=flag.setting, default=None, metavar="VALUE", help=flag.help,
                               type=lambda raw, flag=flag: _parse_or_bad(flag, raw, parse_flag_value))


def add_model_arguments(parser: argparse.ArgumentParser, model_optional: bool = False,
                        gpu_help: str = 'GPU name or alias ("RTX 4090", "4090", "H100", "A100-80G")') -> None:
    """The model, GPU, release and model-source options every prediction command takes."""
    parser.add_argument("model", nargs="?" if model_optional else None,
                        help="a local model directory or .gguf file, or a Hugging Face repo id (catalog or Hub)")
    parser.add_argument("--gpu", help=gpu_help)
    parser.add_argument("--gpu-memory", help="total memory of a GPU not in the catalog, as CUDA reports it (e.g. 23.65GiB)")
    parser.add_argument("--engine", dest="engine_name", choices=tuple(ENGINES) + VLLM_PATHS, default=None,
                        metavar="{" + ",".join(ENGINES) + "}", type=_engine_word,
                        help=f"inference engine to predict ({', '.join(ENGINES)}; llama.cpp and llama-cpp work too; "
                             f"default: from the inputs: a .gguf file or llama.cpp flags mean llamacpp, an Ollama "
                             f"name:tag ollama, a pasted line its program, else {DEFAULT_ENGINE}); "
                             "the old `--engine v0|v1` still means --vllm-engine")
    parser.add_argument("--engine-version", "--vllm-version", dest="engine_version", metavar="VERSION",
                        help="engine release to reproduce (default: the engine's newest modelled release; an "
                             "unmodelled one is refused with the known range); "
                             "--vllm-version is the old name")
    parser.add_argument("--entrypoint", choices=("serve", "llm"), default=None,
                        help="`vllm serve` (default) or the `LLM` class: changes batch-size defaults")
    parser.add_argument("--vllm-engine", dest="vllm_path", choices=VLLM_PATHS, default=None,
                        help="force vLLM's V0 or V1 engine path (default: the release's)")
    sources = parser.add_argument_group("where the model comes from")
    sources.add_argument("--source", choices=("catalog", "local", "hub", "gguf"), default=None,
                         help="force one source (default: local path, then the catalog, then the Hugging Face Hub)")
    sources.add_argument("--revision", default=None, help="Hub revision (branch, tag or commit)")
    sources.add_argument("--hf-token", default=None, help="Hub token (default: HF_TOKEN or the saved login)")
    sources.add_argument("--gguf-file", default=None, help="which .gguf file of a GGUF repository or directory")
    sources.add_argument("--gguf-type", dest="gguf_type", type=str.upper, default=None, metavar="MIX",
                         help="llama.cpp / Ollama without a GGUF file: size the model as llama.cpp's quantizer "
                              "mixes it (Q4_K_M, Q5_K_M, Q6_K, Q8_0, IQ4_XS, ...)")


def add_output_arguments(parser: argparse.ArgumentParser, markdown: bool = True) -> None:
    """--json, --markdown, --wide (tables at their full width, whatever the terminal) and --verbose."""
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="machine-readable output")
    if markdown:
        output.add_argument("--markdown", action="store_true", help="Markdown tables")
    parser.add_argument("--wide", action="store_true", help="print tables at full width instead of fitting the terminal")
    parser.add_argument("--verbose", action="store_true", help="also show where each figure comes from (rules, sources)")


def _engine_word(text: str) -> str:
    from .engine_choice import canonical

    return canonical(text)


def _parse_or_bad(flag, raw, parse_flag_value):
    try:
        return parse_flag_value(flag, raw)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def build_parser(build: tuple[str, ...] | None = None) -> argparse.ArgumentParser:
    """The whole command line. `build`: the commands whose own parsers are built (None: every one); the
    others are listed by name and summary only, so that a command imports what it uses (`_main` builds
    the named command's)."""
    from . import __version__

    parser = _Parser(
        prog="vram-detective",
        description="Predict and explain the GPU memory an inference engine (vLLM, SGLang, llama.cpp,\n"
                    "Ollama) takes at startup, byte by byte, without a GPU.",
        epilog=EXAMPLES, formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"vram-detective {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    wanted = {name for name, module, _ in COMMANDS if build is None or name in build
              or module is not None and module in {COMMAND_MODULES.get(named) for named in build}}
    for name, module, summary in COMMANDS:
        if name in commands.choices:
            continue  # registered by its module along with an earlier command (fit with whatif)
        if name not in wanted:
            commands.add_parser(name, help=summary)
        elif module is None:
            _OWN_PARSERS[name](commands.add_parser(name, help=summary, **_OWN_PARSER_TEXTS.get(name, {})))
        else:
            import importlib

            importlib.import_module(module).register(commands)  # each module's register(subparsers)
    return parser


def _explain_parser(explain: argparse.ArgumentParser) -> None:
    add_model_arguments(explain, model_optional=True,
                        gpu_help='GPU name or alias ("RTX 4090", "4090", "H100", "A100-80G"), or "auto": this machine\'s GPUs '
                                 '(nvidia-smi, rocm-smi, Apple Silicon; the default where GPUs are found; else a '
                                 'table of common GPUs)')
    explain.add_argument("--tensors", action="store_true",
                         help="also list the tensor groups each rank holds (name, count, shape, dtype, bytes, role)")
    _add_vllm_flags(explain)
    add_output_arguments(explain)
    explain.add_argument("--html", metavar="FILE",
                         help="also write a self-contained HTML report (verdict, bars, tables; inline SVG and CSS)")
    from .deploy import add_emit_argument  # deploy/command.py and files.py load only for --emit

    add_emit_argument(explain)


def _score_parser(score: argparse.ArgumentParser) -> None:
    score.add_argument("cases", nargs="?", default=None,
                       help="JSONL file of ground-truth cases (groundtruth/SCHEMA.md; default: every groundtruth/dev*.jsonl "
                            "of the checkout, or of the installed package's share/vram-detective/groundtruth)")
    add_output_arguments(score)
    score.add_argument("--from-logs", action="store_true", help="re-read each case's figures from its raw log text")
    score.add_argument("--catalog-only", action="store_true",
                       help="resolve models from the built-in catalog only (no Hugging Face cache or Hub: reproducible)")


def _models_parser(models: argparse.ArgumentParser) -> None:
    models.add_argument("filter", nargs="*", help="words every listed model contains (repo id or architecture)")
    add_output_arguments(models)


def _gpus_parser(gpus: argparse.ArgumentParser) -> None:
    gpus.add_argument("filter", nargs="*", help="a name or a memory size (16GB: the cards of about that size)")
    add_output_arguments(gpus)


_OWN_PARSERS = {"explain": _explain_parser, "score": _score_parser, "models": _models_parser, "gpus": _gpus_parser}
_OWN_PARSER_TEXTS = {"explain": {
    "description": "Predict an engine's startup memory for MODEL on a GPU: vLLM unless --engine, a\n"
                   ".gguf file, an Ollama tag, llama.cpp flags or a pasted line say otherwise. A\n"
                   "pasted launch line may follow `--`; the tool's own options (--gpu,\n"
                   "--engine-version, output) go before the `--`.",
    "epilog": EXAMPLES, "formatter_class": HelpFormatter}}

# Every command in --help's order: (name, the module whose register(subparsers) builds its parser and whose
# run(args) answers it (None: this file), its one-line summary). The summary is listed here so that --help
# names every command without importing them; a test checks it is the one the module registers.
COMMANDS = (
    ("explain", None, "where every GiB goes for a model on a GPU, and what the engine will print"),
    ("score", None, "accuracy against real engine logs (ground-truth JSONL; default: the ground truth shipped with "
                    "the tool, every engine)"),
    ("logs", "vram_detective.forensics.command", "read a real vLLM, SGLang, llama.cpp or Ollama log (and "
                                                 "nvidia-smi): who took the memory, and why"),
    ("whatif", "vram_detective.advisor.command", "what every lever (utilization, context, batch, fp8 KV, graphs, "
                                                 "offload, quantization, TP/PP) changes"),
    ("fit", "vram_detective.advisor.command", "the settings (and checkpoint) that meet a memory / concurrency / "
                                              "context target"),
    ("compare", "vram_detective.compare", "the same model and GPU on each engine (vLLM, SGLang, llama.cpp), side "
                                          "by side, and why they differ"),
    ("serve", "vram_detective.web.command", "a local web page: the memory bar, live levers, log forensics, fit "
                                            "(needs the [web] extra)"),
    ("simulate", "vram_detective.simulate.command", "run a request workload against the predicted KV pool: "
                                                    "occupancy, preemptions, and the smallest pool that serves it"),
    ("watch", "vram_detective.watch.command", "a running engine's /metrics beside the prediction, and a "
                                              "simulation of its traffic"),
    ("models", None, "list the built-in model catalog (optionally filtered: models llama)"),
    ("gpus", None, "list the GPU catalog (optionally filtered: gpus 16GB, gpus 4090)"),
)
# Commands that live in their own modules: register(subparsers) (argparse only) and run(args) -> exit code.
PLUGIN_COMMANDS = COMMAND_MODULES = {name: module for name, module, _ in COMMANDS if module is not None}


def _command_named(own: list[str]) -> tuple[str, ...]:
    """The command the words name: the first word that is not an option (the tool's own take no value)."""
    return tuple(word for word in own if not word.startswith("-"))[:1]


# The tool's own switches are not vLLM flags: found after `--` they still mean the tool's output.
_OWN_SWITCHES_AFTER_DASHES = ("--json", "--markdown")


def _split_launch_line(argv: list[str]) -> tuple[list[str], list[str] | None]:
    if "--" in argv:
        cut = argv.index("--")
        launch = argv[cut + 1:]
        own = argv[:cut] + [word for word in launch if word in _OWN_SWITCHES_AFTER_DASHES]
        return own, [word for word in launch if word not in _OWN_SWITCHES_AFTER_DASHES]
    return argv, None


def normalize_engine_args(args: argparse.Namespace, own: list[str] = ()) -> None:
    """`--engine v0|v1` (the old spelling) -> --vllm-engine; args.engine_name is then the engine the inputs
    mean (engine_choice.py: named, else the model reference, else the flags given); a pasted line decides in
    _apply_launch_line. `own`: the words before `--` (the flags given)."""
    from .engine_choice import choose, engine_options

    name = getattr(args, "engine_name", None)
    if name in VLLM_PATHS:
        if args.vllm_path and args.vllm_path != name:
            raise BadInput(f"two vLLM engine paths given: --engine {name} and --vllm-engine {args.vllm_path}")
        args.vllm_path, args.engine_name = name, None
    if hasattr(args, "engine_name"):
        args.engine_given = args.engine_name is not None
        args.engine_options = engine_options(own)
        named = args.engine_name or _engine_of_own_options(own)
        args.engine_given = named is not None
        args.engine_name, note = choose(named, getattr(args, "model", None), args.engine_options)
        if note:
            args.input_notes = [*getattr(args, "input_notes", ()), f"engine: {note}"]


def _engine_of_own_options(own) -> str | None:
    """The tool's options spelled with an engine's name (`--vllm-version`, `--vllm-engine`) name that engine."""
    return next((name for word in own if word.startswith("--") and word not in ("--engine", "--engine-version")
                 for name in ENGINES if word[2:].startswith(name + "-")), None)


def docker_launch(words: list[str]) -> tuple[list[str], str | None]:
    """A pasted line as the engine's own words: one quoted string is split; `docker run ... IMAGE ARGS` keeps
    what follows an engine's image (vllm/vllm-openai runs `vllm serve`), its tag giving the release."""
    import shlex

    from .engines import get_engine

    if len(words) == 1 and " " in words[0]:
        words = shlex.split(words[0])
    if len(words) < 3 or words[0] != "docker" or words[1] != "run":
        return words, None
    for index, word in enumerate(words[2:], start=2):
        image, _, tag = word.partition(":")
        name = image.rsplit("/", 1)[-1]
        engine = next((engine for engine in ENGINES if engine in name), None)
        if not word.startswith("-") and engine is not None:
            rest = words[index + 1:]
            tag = tag[1:] if tag.startswith("v") else tag
            tag = tag if tag[:1].isdigit() else None  # "latest", "nightly": the newest release
            entrypoint = get_engine(engine).launch.image_entrypoint
            if entrypoint and (not rest or rest[0].startswith("-")):
                rest = [*entrypoint, *rest]
            return rest, tag
    raise BadInput("a `docker run` line without an engine image (vllm/vllm-openai:TAG, lmsysorg/sglang:TAG)")


def flag_notes(engine_name: str, ignored) -> list[str]:
    """The pasted flags the prediction leaves out (launch_flags.py: a misspelt flag is bad input, exit 2)."""
    from .launch_flags import ignored_notes

    return ignored_notes(engine_name, ignored)


def release_text(engine_name: str, text: str | None) -> tuple[str | None, str | None]:
    """(the release to use, a note) for --engine-version: "0.6" is the newest 0.6.x the tool knows; a release
    after the newest modelled one is bad input with the known range."""
    from .engines import get_engine

    if not text or text in ("latest", "newest"):
        return text, None
    releases = get_engine(engine_name).releases
    try:
        version, newest = releases.resolve(text), releases.resolve(None)
    except ValueError as error:
        text = str(error)
        raise BadInput(text if "known" in text else f"{text}; known: {releases.oldest} .. {releases.newest}") from None
    note = None
    if text.count(".") == 1 and text.replace(".", "").isdigit():  # a release line, not a release
        line = [known for known in (*releases.known, releases.newest) if known.startswith(text + ".")]
        if line:
            picked = max(line, key=releases.resolve)
            note = f"--engine-version {text} read as {picked}, the newest {text}.x release it knows"
            text, version = picked, releases.resolve(picked)
    if version > newest:
        raise BadInput(f"{get_engine(engine_name).label} {text} is newer than the newest modelled release "
                       f"({releases.newest}); known: {releases.oldest} .. {releases.newest}")
    return text, note


def input_notes(args: argparse.Namespace) -> None:
    """Resolve the release and say how ambiguous inputs were read (explain: under its verdict; the other
    commands: before their output; never with --json, never on stderr, where an error is one line)."""
    from .hardware import gpu_choice_note, memory_note, parse_memory_size

    notes = list(getattr(args, "input_notes", ()))  # how the engine was read from the inputs
    if getattr(args, "engine_version", None) and hasattr(args, "engine_name"):
        args.engine_version, note = release_text(args.engine_name, args.engine_version)
        notes.append(note)
    notes.append(gpu_choice_note(getattr(args, "gpu", None)))
    if getattr(args, "gpu_memory", None):
        notes.append(memory_note(args.gpu_memory, parse_memory_size(args.gpu_memory)))
    args.input_notes = [note for note in notes if note]
    if args.input_notes and args.command != "explain" and not getattr(args, "json", False):
        from .term import args_width, paragraph

        print("\n".join(paragraph([f"note: {note}" for note in args.input_notes], args_width(args))))


def _launch_engine(args: argparse.Namespace, words: list[str]) -> str:
    """The engine a pasted line belongs to: its program's (`python -m sglang.launch_server ...`, `llama-server`,
    `ollama run`), which --engine, when given, must agree with; a flags-only line is the chosen engine's."""
    from .engine_choice import choose

    named = args.engine_name if getattr(args, "engine_given", False) else None
    chosen, _ = choose(named, args.model, getattr(args, "engine_options", ()), words)
    return chosen if named is not None or chosen != DEFAULT_ENGINE else args.engine_name


def _settings_from(args: argparse.Namespace, launch_settings: dict) -> dict:
    from .engines import get_engine

    settings = dict(launch_settings)
    names = [args.engine_name] + [name for name in ENGINES if name != args.engine_name]
    for flag in (flag for name in names for flag in get_engine(name).launch.flags if flag.setting != "model"):
        value = getattr(args, flag.setting, None)
        if value is not None:
            settings[flag.setting] = value  # the tool's own flags win over the pasted line
    if args.entrypoint:
        settings["entrypoint"] = args.entrypoint
    if args.vllm_path:
        settings["engine"] = args.vllm_path
    if getattr(args, "gguf_type", None):
        engine = get_engine(args.engine_name)
        if not engine.gguf_mixes:  # an engine that sizes llama.cpp's quantization mixes
            raise BadInput(f"--gguf-type sizes a llama.cpp quantization mix: it goes with --engine llamacpp or "
                           f"ollama, not {engine.label}")
        settings["gguf_type"] = args.gguf_type
    return settings


def _checkpoint_report(model: str, args: argparse.Namespace, gpu_memory: int | None, settings: dict):
    """The checkpoint-vs-GPU reconciliation when the model came with real tensor headers (local or Hub)."""
    from . import api
    from .engines import get_engine

    engine = get_engine(args.engine_name)
    options = _source_options(args)
    spec, checkpoint = api.model_and_checkpoint(model, engine.name, options["source"], options["revision"],
                                                options["hf_token"], options["gguf_file"])
    if checkpoint is None:
        return None
    device = api.resolve_gpu(args.gpu, gpu_memory)
    return engine.checkpoint_report(spec, device, dict(settings), engine.releases.resolve(args.engine_version),
                                    checkpoint)


def _engine_options(args: argparse.Namespace, settings: dict) -> dict:
    """api.explain's engine, release and settings keywords (vLLM's path travels as `vllm_engine`)."""
    out = {key: value for key, value in settings.items() if key != "engine"}
    return dict(out, engine=args.engine_name, engine_version=args.engine_version, vllm_engine=settings.get("engine"))


def _write_text(path: str, text: str) -> None:
    """Write a report the user named, and say so on stderr (stdout stays the answer, --json included)."""
    try:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
    except OSError as error:
        raise BadInput(f"cannot write {path}: {error.strerror or error}") from None
    print(f"wrote {path}", file=sys.stderr)


def _source_options(args: argparse.Namespace) -> dict:
    return {"source": args.source, "revision": args.revision, "hf_token": args.hf_token, "gguf_file": args.gguf_file}


def cmd_explain(args: argparse.Namespace, launch_words: list[str] | None) -> int:
    from . import api
    from .engines import get_engine
    from .hardware import parse_memory_size

    launch_settings: dict = {}
    model = args.model
    if launch_words:
        model, launch_settings = _apply_launch_line(args, launch_words, model)
    if not model:
        raise BadInput("no model given (a catalog repo id, a local directory, or a launch line after --)")
    settings = _settings_from(args, launch_settings)
    gpu_memory = parse_memory_size(args.gpu_memory) if args.gpu_memory else None

    if gpu_memory is None and (args.gpu is None or args.gpu.strip().lower() == "auto"):
        from .machine import explain_here, local_machine, wants_local

        found = local_machine(args) if wants_local(args) else []
        if found and not args.tensors:
            return explain_here(args, model, settings, found)  # machine.py: this machine's GPUs (--gpu auto)
        if found:
            args.gpu = found[0][1].short_name
    if getattr(args, "emit", None) and args.gpu is None and gpu_memory is None:
        raise BadInput("--emit needs a GPU (--gpu NAME, --gpu auto or --gpu-memory SIZE): the deployment is for one")
    if args.tensors and args.gpu is None and gpu_memory is None:
        raise BadInput("--tensors needs a GPU (--gpu or --gpu-memory): the stored layout depends on it")
    if args.gpu is None and gpu_memory is None:
        return _explain_common_gpus(args, model, settings)

    breakdown = api.explain(model, args.gpu, gpu_memory=gpu_memory, **_engine_options(args, settings),
                            **_source_options(args))  # a refusal: errors.EngineRefused, exit 1 (errors.py)
    if getattr(args, "emit", None):
        from .deploy.command import emit

        return emit(args, model, settings, breakdown)
    if args.html:
        from .web.report import html_report

        _write_text(args.html, html_report(breakdown))
    stages = tensor_groups(model, args.gpu, gpu_memory, args.engine_version, settings, _source_options(args),
                           engine=args.engine_name) if args.tensors else []
    report = _checkpoint_report(model, args, gpu_memory, settings)
    _print_explain(args, model, gpu_memory, settings, breakdown, report, stages)
    return EXIT_REFUSED if breakdown.failure is not None else 0


def _apply_launch_line(args: argparse.Namespace, launch_words: list[str], model: str | None) -> tuple[str | None, dict]:
    """Read a pasted launch line (after `--`) into args: its engine, release, notes; returns (model, its settings)."""
    from .engines import get_engine

    launch_words, image_release = docker_launch(launch_words)
    args.engine_name = _launch_engine(args, launch_words)
    line = get_engine(args.engine_name).launch.parse(launch_words)
    if image_release and not args.engine_version:
        args.engine_version, note = release_text(args.engine_name, image_release)
        args.input_notes = [*getattr(args, "input_notes", ()), f"release {args.engine_version} from the image tag"]
    args.input_notes = [*getattr(args, "input_notes", ()), *flag_notes(args.engine_name, getattr(line, "ignored", ()))]
    if line.model and model and line.model != model:
        raise BadInput(f"two models given: {model} and {line.model} (in the launch line)")
    return model or line.model, line.settings


def _explain_common_gpus(args: argparse.Namespace, model: str, settings: dict) -> int:
    """explain without a GPU: one row per common GPU (fits or not, and why)."""
    from . import api
    from .hardware import common_gpus
    from .render import render_gpu_summary

    rows = []
    for gpu in common_gpus():
        try:
            b = api.explain(model, gpu, **_engine_options(args, settings), **_source_options(args))
            rows.append({"gpu": gpu.short_name, "total_gib": gpu.cuda_total_gib, "weights_gib": b.weights_bytes / 2**30,
                         "kv_cache_gib": max(0.0, b.kv_cache_bytes / 2**30), "kv_cache_tokens": b.kv_cache_tokens,
                         "max_concurrency": b.max_concurrency, "starts": b.failure is None,
                         "why": b.failure.message if b.failure else "",
                         "largest_fitting_max_model_len": b.failure.largest_fitting_max_model_len if b.failure else None})
        except api.REFUSALS as error:
            rows.append({"gpu": gpu.short_name, "total_gib": gpu.cuda_total_gib, "starts": False, "why": str(error)})
    if args.json:
        print(json.dumps({"model": model, "gpus": rows}, indent=2))
    else:
        from .term import args_width

        print(render_gpu_summary(rows, markdown=args.markdown, columns=args_width(args)))
    return 0


def _print_explain(args: argparse.Namespace, model: str, gpu_memory: int | None, settings: dict, breakdown, report,
                   stages) -> None:
    """Print explain's answer for one GPU: JSON, Markdown or text, then the tensor groups if asked."""
    from .engines import get_engine
    from .render import render_markdown, render_text, to_json

    if args.json:
        out = to_json(breakdown)
        if report is not None:
            out["checkpoint_vs_gpu"] = report.to_dict()
        if args.tensors:
            out["tensors"] = [dict(group.to_dict(), **({"pipeline_stage": stage, "first_rank": rank} if len(stages) > 1 else {}))
                              for stage, rank, groups in stages for group in groups]
        print(json.dumps(out, indent=2, default=str))
    elif args.markdown:
        print(render_markdown(breakdown))
    else:
        from .term import args_width

        print(render_text(breakdown, sys.stdout, columns=args_width(args), verbose=args.verbose,
                          smallest=_smallest(model, args, gpu_memory, settings, breakdown),
                          fit_hint=_fit_hint(model, args, breakdown), input_notes=getattr(args, "input_notes", ())))
        if report is not None:
            print(f"\nCheckpoint (its real tensor headers) vs what {get_engine(args.engine_name).label} holds on one GPU:")
            print("\n".join(f"  {line}" for line in report.summary_lines()))
    if args.tensors and not args.json:
        from .render import render_tensors

        for stage, rank, groups in stages:
            title = "Tensors on each GPU" + (f" of pipeline stage {stage} (ranks {rank}..)" if len(stages) > 1 else "")
            print()
            print(render_tensors(groups, title=title, markdown=args.markdown))


def _smallest(model: str, args: argparse.Namespace, gpu_memory: int | None, settings: dict, breakdown):
    """The least budget fraction that still serves one full-length request (summary.smallest_footprint)."""
    from . import api
    from .engines import get_engine
    from .summary import smallest_footprint

    def explain(name, value):
        trial = dict(settings, **{name: value})
        return api.explain(model, args.gpu, gpu_memory=gpu_memory, **_engine_options(args, trial),
                           **_source_options(args))

    # the budget's flag as the engine's launch line spells it (the parser read them: no advisor import)
    flags = {flag.setting: flag.names[0] for flag in get_engine(args.engine_name).launch.flags}
    return smallest_footprint(breakdown, explain, flags)


def _fit_hint(model: str, args: argparse.Namespace, breakdown) -> str | None:
    """`vram-detective fit ...` for the same model, GPU and context, when the start would be refused."""
    if breakdown.failure is None:
        return None
    gpu = f'--gpu "{args.gpu}"' if args.gpu else f"--gpu-memory {args.gpu_memory}"
    engine = f" --engine {args.engine_name}" if args.engine_name != DEFAULT_ENGINE else ""
    return f"vram-detective fit {model} {gpu}{engine} --context {breakdown.max_model_len}"


def tensor_groups(model: str, gpu: str | None, gpu_memory: int | None, vllm_version: str | None,
                  settings: dict, source_options: dict | None = None, engine: str = DEFAULT_ENGINE) -> list[tuple[int, int, list]]:
    """(pipeline stage, its first rank, tensor groups per rank) exactly as the plan builds them. All
    tensor-parallel ranks of a stage hold the same groups (vocabulary padding shown as an even share)."""
    from . import api
    from .engines import get_engine

    runner = get_engine(engine)
    options = source_options or {}
    spec, _ = api.model_and_checkpoint(model, runner.name, options.get("source"), options.get("revision"),
                                       options.get("hf_token"), options.get("gguf_file"))
    device = api.resolve_gpu(gpu, gpu_memory)
    tp = int(settings.get("tensor_parallel_size") or settings.get("tp_size") or 1)
    return [(stage, stage * tp, list(inventory.groups))
            for stage, inventory in runner.rank_inventories(spec, device, dict(settings),
                                                            runner.releases.resolve(vllm_version))]


def cmd_models(args: argparse.Namespace) -> int:
    from .listing import model_rows, models_text

    rows = model_rows(args.filter)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    from .term import args_width

    print(models_text(rows, args.filter, markdown=args.markdown, columns=args_width(args)))
    return 0


def cmd_gpus(args: argparse.Namespace) -> int:
    from .listing import gpu_rows, gpus_text

    rows = gpu_rows(args.filter)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    from .term import args_width

    print(gpus_text(rows, args.filter, markdown=args.markdown, columns=args_width(args), verbose=args.verbose))
    return 0


def cmd_score(args: argparse.Namespace) -> int:
    from .scoring import format_summary, read_cases, score_cases, shipped_case_files

    paths = [args.cases] if args.cases else shipped_case_files()
    cases, unreadable = [], []
    for path in paths:
        found, bad = read_cases(path)
        cases += found
        unreadable += [dict(entry, file=str(path)) for entry in bad]
    report = score_cases(cases, from_logs=args.from_logs, catalog_only=args.catalog_only, unreadable=unreadable)
    if args.json:
        from .library import envelope

        print(json.dumps(envelope("score", None, report), indent=2))
    elif args.markdown:
        print("```\n" + format_summary(report) + "\n```")
    else:
        from .term import args_width, paragraph

        print("\n".join(paragraph(format_summary(report).splitlines(), args_width(args), "    ")))
    return 0


def main(argv: list[str] | None = None) -> int:
    """The command line under errors.py's exit-code policy (1 refusal, 2 bad input, 3 a bug: one line each)."""
    from .errors import run_guarded

    return run_guarded(_main, argv)


def _main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    own, launch_words = _split_launch_line(argv)
    parser = build_parser(_command_named(own))
    args = parser.parse_args(own)
    if args.command is None:
        parser.print_help()
        return EXIT_BAD_INPUT
    try:
        normalize_engine_args(args, own)
        from .input_checks import check_arguments

        check_arguments(args)  # input_checks.py: values argparse cannot refuse (one line, exit 2)
        input_notes(args)
        if args.command == "explain":
            return cmd_explain(args, launch_words)
        if launch_words is not None:
            raise BadInput("a launch line after -- only goes with `explain`")
        if args.command in PLUGIN_COMMANDS:
            import importlib

            return importlib.import_module(PLUGIN_COMMANDS[args.command]).run(args)
        if args.command == "models":
            return cmd_models(args)
        if args.command == "gpus":
            return cmd_gpus(args)
        return cmd_score(args)
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
