"""How an engine runs as a server in a container: its image at a release, port, health and metrics endpoints,
the command line that reproduces a prediction's settings, the environment, and /dev/shm. Each engine fills one
`Deployment` (engines/<engine>/deploy.py, reached as `engine.deployment`); deploy/ writes the files from it."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Callable


@dataclass(frozen=True)
class Deployment:
    image: Callable[[str], str]  # release label ("0.10.2", "b7342") -> the engine's image at that release
    port: int
    health_path: str  # answers 200 once the model is loaded (the readiness probe)
    metrics_path: str | None  # Prometheus text (`watch`); None when the engine has none
    argv: Callable[[str, dict], list[str]]  # (model reference in the container, settings) -> the server's command
    gpus: Callable[[dict], int]  # GPUs the settings use (tensor x pipeline x data parallel)
    env: Callable[[dict], dict] = field(default=lambda settings: {})  # settings the engine reads from variables
    shm_bytes: int = 0  # /dev/shm the workers need (0: the container's default is enough)
    shm_source: str = ""
    model_in_file: bool = False  # the model is a file mounted into the container (llama.cpp's GGUF)
    model_store: str = ""  # where the server keeps downloaded models (a volume keeps them across restarts)
    hub_token: bool = False  # reads HF_TOKEN for gated Hugging Face repos
    helm: Callable[..., dict] | None = None  # (model, settings, release, gpus, vendor) -> values of the common chart
    helm_chart: str = ""  # the chart those values are for
    unset_settings: tuple[str, ...] = ()  # settings that are the tool's own, never a flag (vLLM's entrypoint)
    notes: Callable[[dict], list] = field(default=lambda settings: [])  # settings no flag or variable carries


def flag_words(flags, settings: dict, skip: tuple[str, ...] = (), false_flags: dict | None = None) -> list[str]:
    """The engine's own flags for the given settings, in the engine's flag order: a True switch alone, a False
    one by its negative flag when it has one (`false_flags`), lists comma-joined, dicts as JSON."""
    words: list[str] = []
    done: set[str] = set()
    false_flags = false_flags or {}
    for flag in flags:
        name, value = flag.setting, settings.get(flag.setting)
        if name in done or name in skip or value is None or name == "model":
            continue
        switch = flag.parse is None or getattr(flag.parse, "__name__", "") in ("_bool", "_switch")
        if switch and flag.parse is None:
            if value == flag.value:  # llama.cpp's --no-mmap sets mmap=False: printed when the value is that
                words.append(flag.names[0])
                done.add(name)
            continue
        done.add(name)
        if switch:
            if value is True:
                words.append(flag.names[0])
            elif name in false_flags:
                words.append(false_flags[name])
            continue
        words += [flag.names[0], _text(value)]
    return words


def _text(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":"))
    if isinstance(value, (list, tuple)):
        return ",".join(_text(item) for item in value)
    if isinstance(value, float):
        return format(value, "g") if float(format(value, "g")) == value else repr(value)
    return str(value)
