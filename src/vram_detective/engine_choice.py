"""Which engine the inputs mean, the same on the command line, the web page and the library.

In order: the engine named (`--engine`, `engine=`; "llama.cpp" and "llama-cpp" are llama.cpp); else the
program of a pasted launch line (`vllm serve`, `python -m sglang.launch_server`, `sglang serve`,
`llama-server`, `python -m llama_cpp.server`, `ollama run`); else the model reference an engine claims (a
.gguf file: llama.cpp; an Ollama "name:tag": Ollama); else the engine whose flags were given (`-ngl`, `-c`,
`-ctk`: llama.cpp); else the default. A flag the chosen engine cannot read is bad input naming the engine
that has it, never ignored. Everything here asks the engines (their flags, `is_launch_line`,
`launch.claims_model`, `launch.foreign`): no engine is named."""
from __future__ import annotations

from .errors import BadInput


def canonical(name: str | None) -> str | None:
    """An engine name as users write it ("llama.cpp", "llama-cpp", "LlamaCpp", "vLLM") -> the registry's key."""
    if name is None:
        return None
    from .engines import ENGINES

    key = name.strip().lower()
    squashed = key.replace(".", "").replace("-", "").replace("_", "")
    for known in ENGINES:
        if squashed == known.replace(".", "").replace("-", "").replace("_", ""):
            return known
    return key


def _owners() -> dict[str, tuple[tuple[str, str], ...]]:
    """Each engine flag's option string -> ((engine, setting), ...) of the engines that have it."""
    from .engines import ENGINES, get_engine

    owners: dict[str, list[tuple[str, str]]] = {}
    for name in ENGINES:
        for flag in get_engine(name).launch.flags:
            for option in flag.names:
                owners.setdefault(option, []).append((name, flag.setting))
    return {option: tuple(found) for option, found in owners.items()}


def engine_options(words) -> list[str]:
    """The engine flags among command-line words (`--mem-fraction-static`, `-ngl`, `--flag=value`)."""
    owners = _owners()
    found = []
    for word in words:
        option = word.partition("=")[0] if word.startswith("--") else word
        if option in owners:
            found.append(option)
    return list(dict.fromkeys(found))


def reads(engine_name: str, option: str) -> bool:
    """Can `engine_name` take this flag: its own, or another engine's setting it reads as its own?"""
    from .engines import get_engine

    engine = get_engine(engine_name)
    if any(option in flag.names for flag in engine.launch.flags):
        return True
    return any(setting in engine.launch.foreign for _, setting in _owners()[option])


def check_options(engine_name: str, options) -> None:
    """BadInput for the first flag `engine_name` cannot read, naming the engine(s) that can."""
    from .engines import get_engine

    for option in options:
        if not reads(engine_name, option):
            labels = [get_engine(name).label for name, _ in _owners()[option]]
            keys = [name for name, _ in _owners()[option]]
            raise BadInput(f"{option} is {' and '.join(dict.fromkeys(labels))}'s flag, not "
                           f"{get_engine(engine_name).label}'s: use --engine {keys[0]} (or leave the flag out)")


def line_engine(words) -> str | None:
    """The engine whose program starts these words (None: no program, e.g. flags alone)."""
    from .engines import ENGINES, get_engine

    return next((name for name in ENGINES if words and get_engine(name).is_launch_line(list(words))), None)


def model_engine(model: str | None) -> str | None:
    from .engines import ENGINES, get_engine

    return next((name for name in ENGINES if model and get_engine(name).launch.claims_model(model)), None)


def choose(named: str | None, model: str | None = None, options=(), line_words=None) -> tuple[str, str | None]:
    """(the engine, how it was told when not named) for these inputs; BadInput when they disagree."""
    from .engines import DEFAULT_ENGINE, ENGINES, get_engine

    named = canonical(named)
    if named is not None and named not in ENGINES:
        get_engine(named)  # UnknownEngineError lists the known ones
    from_line = line_engine(line_words) if line_words else None
    if named is not None:
        if from_line is not None and from_line != named:
            raise BadInput(f"the launch line starts {get_engine(from_line).label}, not {get_engine(named).label}: "
                           f"use --engine {from_line} (or leave --engine out)")
        check_options(named, options)
        return named, None
    if from_line is not None:
        check_options(from_line, options)
        return from_line, None
    claimed = model_engine(model)
    if claimed is not None:
        check_options(claimed, options)
        return claimed, f"{get_engine(claimed).label}, from the model reference {model}"
    if not options or all(reads(DEFAULT_ENGINE, option) for option in options):
        return DEFAULT_ENGINE, None
    fitting = [name for name in ENGINES if all(reads(name, option) for option in options)]
    if not fitting:
        check_options(DEFAULT_ENGINE, options)  # names the engine of the first flag the default cannot read
    return fitting[0], f"{get_engine(fitting[0]).label}, from its flags ({', '.join(options)})"
