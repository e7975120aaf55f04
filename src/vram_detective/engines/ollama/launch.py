"""Ollama's settings on the command line and in pasted lines. Ollama takes no memory flags itself: its
knobs are Modelfile PARAMETERs (num_ctx, num_gpu, num_batch; api/types.go Options) and server environment
variables (OLLAMA_NUM_PARALLEL, OLLAMA_FLASH_ATTENTION, OLLAMA_KV_CACHE_TYPE, OLLAMA_CONTEXT_LENGTH;
envconfig/config.go). Here they are flags named after them, and a pasted
`OLLAMA_KV_CACHE_TYPE=q8_0 ollama run qwen2.5:7b` line reads the variables and the model name."""
from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from typing import Callable


class LaunchLineError(ValueError):
    pass


def _on_off(text: str) -> bool:
    return str(text).lower() in ("1", "true", "on", "yes")


@dataclass(frozen=True)
class Flag:
    names: tuple[str, ...]
    setting: str
    parse: Callable[[str], object] | None
    help: str
    value: object = True


FLAGS: tuple[Flag, ...] = (
    Flag(("--num-ctx",), "num_ctx", int, "PARAMETER num_ctx / OLLAMA_CONTEXT_LENGTH: context per request"),
    Flag(("--num-parallel",), "num_parallel", int, "OLLAMA_NUM_PARALLEL: requests served at once"),
    Flag(("--num-gpu",), "num_gpu", int, "PARAMETER num_gpu: layers on the GPU (default: Ollama's estimate)"),
    Flag(("--num-batch",), "num_batch", int, "PARAMETER num_batch"),
    Flag(("--kv-cache-type",), "kv_cache_type", str.lower, "OLLAMA_KV_CACHE_TYPE: f16 | q8_0 | q4_0"),
    Flag(("--flash-attention",), "flash_attention", _on_off, "OLLAMA_FLASH_ATTENTION: 1 | 0"),
    Flag(("--num-gpus",), "num_gpus", int, "CUDA_VISIBLE_DEVICES=0,1,...: the GPUs Ollama may place layers on"),
)
def _device_count(text: str) -> int:
    """CUDA_VISIBLE_DEVICES=0,1 -> 2 GPUs (the ids, or GPU-uuids, CUDA enumerates; the GPUs are one kind here)."""
    count = len([word for word in str(text).split(",") if word.strip()])
    if not count:
        raise ValueError("names no GPU")
    return count


# server environment -> setting
ENVIRONMENT = {"OLLAMA_NUM_PARALLEL": ("num_parallel", int), "OLLAMA_FLASH_ATTENTION": ("flash_attention", _on_off),
               "OLLAMA_KV_CACHE_TYPE": ("kv_cache_type", str.lower), "OLLAMA_CONTEXT_LENGTH": ("num_ctx", int),
               "CUDA_VISIBLE_DEVICES": ("num_gpus", _device_count)}


@dataclass(frozen=True)
class ParsedLaunch:
    model: str | None
    settings: dict
    binary: str = "ollama"
    ignored: tuple[str, ...] = ()


def parse_flag_value(flag: Flag, raw: str) -> object:
    return flag.value if flag.parse is None else flag.parse(raw)


def _start(words: list[str]) -> int:
    """Index of the `ollama` program after any VAR=value prefixes (and `env`); -1 when absent."""
    for i, word in enumerate(words):
        if os.path.basename(word).removesuffix(".exe") == "ollama":
            return i
        if word != "env" and "=" not in word:
            return -1
    return -1


def is_launch_line(words: list[str] | str) -> bool:
    if isinstance(words, str):
        words = shlex.split(words)
    return _start(words) >= 0


def parse_launch_line(words: list[str] | str) -> ParsedLaunch:
    """`[VAR=value ...] ollama run|serve [NAME]`: the model name and the settings the variables set."""
    if isinstance(words, str):
        words = shlex.split(words)
    start = _start(words)
    if start < 0:
        raise LaunchLineError("not an Ollama line (ollama run NAME, ollama serve)")
    settings = {}
    for word in words[:start]:
        name, _, value = word.partition("=")
        if name in ENVIRONMENT:
            key, parse = ENVIRONMENT[name]
            try:
                settings[key] = parse(value)
            except ValueError as error:
                raise LaunchLineError(f"{word}: {error}") from None
    rest = words[start + 1:]
    model = rest[1] if len(rest) > 1 and rest[0] == "run" and not rest[1].startswith("-") else None
    ignored = tuple(rest[2:] if model else rest[1:])
    return ParsedLaunch(model, settings, "ollama", ignored)


def run_line(model: str, settings: dict) -> str:
    """`VAR=value ... ollama run MODEL`, the line parse_launch_line reads back: each setting a server variable sets
    (ENVIRONMENT) in front; the Modelfile PARAMETERs (num_gpu, num_batch) and anything else as one remark at the
    end (`/set parameter` in the session is their place)."""
    variables = {setting: name for name, (setting, _) in ENVIRONMENT.items()}
    words, remarks = [], []
    for setting, value in settings.items():
        if setting == "num_gpus":
            words.append("CUDA_VISIBLE_DEVICES=" + ",".join(str(i) for i in range(int(value))))
        elif setting in variables:
            words.append(f"{variables[setting]}={('1' if value else '0') if isinstance(value, bool) else value}")
        elif setting in ("num_gpu", "num_batch"):
            remarks.append(f"/set parameter {setting} {value}")
        else:
            remarks.append(f"{setting}={value}")
    return " ".join(words + ["ollama", "run", shlex.quote(model)]) + (f"  # {'; '.join(remarks)}" if remarks else "")
