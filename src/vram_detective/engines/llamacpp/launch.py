"""llama.cpp launch lines: llama-server / llama-cli flags (common/arg.cpp) and llama-cpp-python's server
(llama_cpp/server/settings.py ModelSettings, `python -m llama_cpp.server --n_gpu_layers ...`).

A pasted line becomes (model, settings) in the names settings.py resolves.
"""
from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from typing import Callable

_BINARIES = ("llama-server", "llama-cli", "llama-bench", "llama-sweep-bench", "llama-run", "server", "main")


class LaunchLineError(ValueError):
    pass


def _int_or_word(text: str):
    return text.lower() if text.lower() in ("auto", "all") else int(text)


def _on_off(text: str) -> str:
    value = text.lower()
    if value in ("on", "off", "auto", "1", "0", "true", "false", "enabled", "disabled"):
        return {"1": "on", "true": "on", "enabled": "on", "0": "off", "false": "off", "disabled": "off"}.get(value, value)
    raise ValueError(f"expected on, off or auto, not {text!r}")


def _split(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in text.replace("/", ",").split(",") if x.strip())


def _bool_word(text: str) -> bool:
    return text.lower() in ("1", "true", "yes", "on")


_PY_TYPES = {0: "f32", 1: "f16", 2: "q4_0", 3: "q4_1", 6: "q5_0", 7: "q5_1", 8: "q8_0", 20: "iq4_nl", 30: "bf16"}


def _py_type(text: str) -> str:
    """llama-cpp-python's --type_k / --type_v take the ggml type id."""
    if not text.isdigit():
        return text.lower()
    if int(text) not in _PY_TYPES:
        raise ValueError(f"ggml type id {text[:20]} is not a KV cache type (ids: {', '.join(map(str, _PY_TYPES))})")
    return _PY_TYPES[int(text)]


@dataclass(frozen=True)
class Flag:
    names: tuple[str, ...]
    setting: str
    parse: Callable[[str], object] | None  # None: a switch without a value
    help: str
    value: object = True  # what a switch sets
    optional_value: bool = False  # -fa: bare in old builds, on|off|auto in newer


FLAGS: tuple[Flag, ...] = (
    Flag(("-m", "--model"), "model", str, "GGUF file"),
    Flag(("-ngl", "--n-gpu-layers", "--gpu-layers", "--n_gpu_layers"), "n_gpu_layers", _int_or_word,
         "layers on the GPU (the output layer counts as one; all / auto / -1 per build)"),
    Flag(("-c", "--ctx-size", "--n_ctx"), "n_ctx", int, "context size (0 = the model's)"),
    Flag(("-np", "--parallel"), "n_parallel", _int_or_word, "parallel sequences (slots)"),
    Flag(("-b", "--batch-size", "--n_batch"), "n_batch", int, "logical batch"),
    Flag(("-ub", "--ubatch-size", "--n_ubatch"), "n_ubatch", int, "physical batch (compute buffer size)"),
    Flag(("-ctk", "--cache-type-k"), "type_k", str.lower, "K cache type"),
    Flag(("-ctv", "--cache-type-v"), "type_v", str.lower, "V cache type (quantized needs flash attention)"),
    Flag(("--type_k",), "type_k", _py_type, "K cache type (llama-cpp-python: ggml type id)"),
    Flag(("--type_v",), "type_v", _py_type, "V cache type (llama-cpp-python: ggml type id)"),
    Flag(("-fa", "--flash-attn", "--flash_attn"), "flash_attn", _on_off, "flash attention on|off|auto",
         value="on", optional_value=True),
    Flag(("-ts", "--tensor-split", "--tensor_split"), "tensor_split", _split, "layer split per GPU, e.g. 3,1"),
    Flag(("-dev", "--device"), "num_gpus", lambda t: 0 if t.strip().lower() == "none" else len([d for d in t.split(",") if d.strip()]),
         "devices to use, e.g. CUDA0,CUDA1 (their count here; none = the CPU only)"),
    Flag(("-sm", "--split-mode", "--split_mode"), "split_mode", lambda t: {"0": "none", "1": "layer", "2": "row"}.get(t, t),
         "none | layer | row"),
    Flag(("-mg", "--main-gpu", "--main_gpu"), "main_gpu", int, "main GPU"),
    Flag(("-ot", "--override-tensor"), "override_tensor", lambda t: tuple(t.split(",")),
         "regex=BUFFER (e.g. exps=CPU)"),
    Flag(("--n-cpu-moe", "-ncmoe"), "n_cpu_moe", int, "keep the experts of the first N layers on the CPU"),
    Flag(("--cpu-moe", "-cmoe"), "cpu_moe", None, "keep every expert on the CPU"),
    Flag(("--no-mmap",), "mmap", None, "read the file into memory instead of mapping it", value=False),
    Flag(("-nr", "--no-repack"), "repack", None, "no CPU_REPACK buffer (weights used as stored)", value=False),
    Flag(("--use_mmap",), "mmap", _bool_word, "llama-cpp-python: mmap on/off"),
    Flag(("--kv-unified", "-kvu"), "kv_unified", None, "one KV stream for all sequences"),
    Flag(("--no-kv-unified",), "kv_unified", None, "a KV stream per sequence", value=False),
    Flag(("--swa-full",), "swa_full", None, "full-size SWA cache"),
    Flag(("--no-kv-offload", "-nkvo"), "kv_offload", None, "keep the KV cache on the CPU", value=False),
    Flag(("--offload_kqv",), "kv_offload", _bool_word, "llama-cpp-python: KV on the GPU"),
    Flag(("--embedding", "--embeddings"), "embeddings", None, "embeddings output"),
    Flag(("--mmproj", "-mm", "--clip_model_path"), "mmproj", str, "vision projector GGUF (CLIP / SigLIP tower)"),
    Flag(("--no-mmproj-offload",), "mmproj_offload", None, "keep the projector on the CPU", value=False),
)
_BY_NAME = {name: flag for flag in FLAGS for name in flag.names}


@dataclass(frozen=True)
class ParsedLaunch:
    model: str | None
    settings: dict
    binary: str
    ignored: tuple[str, ...] = ()


def parse_flag_value(flag: Flag, raw: str) -> object:
    if flag.parse is None:
        return flag.value
    return flag.parse(raw)


def _start(words: list[str]) -> tuple[int, str]:
    """(index after the program, its name): llama-server ..., ./build/bin/llama-cli ..., python -m llama_cpp.server."""
    for i, word in enumerate(words[:4]):
        base = os.path.basename(word)
        if base in _BINARIES or base.removesuffix(".exe") in _BINARIES:
            return i + 1, base.removesuffix(".exe")
        if word == "llama_cpp.server" and i > 0 and words[i - 1] == "-m":
            return i + 1, "llama_cpp.server"
    return -1, ""


def is_launch_line(words: list[str] | str) -> bool:
    """Do these words start a llama.cpp program (llama-server, llama-cli, python -m llama_cpp.server)?"""
    if isinstance(words, str):
        words = shlex.split(words)
    return _start(words)[0] >= 0


def _value(words: list[str], i: int, flag: Flag, inline: str | None) -> tuple[object, int]:
    if flag.parse is None:
        return flag.value, i + 1
    if inline is not None:
        return flag.parse(inline), i + 1
    nxt = words[i + 1] if i + 1 < len(words) else None
    if flag.optional_value and (nxt is None or nxt.startswith("-") or nxt.lower() not in
                                ("on", "off", "auto", "1", "0", "true", "false")):
        return flag.value, i + 1
    if nxt is None:
        raise LaunchLineError(f"{words[i]} needs a value")
    return flag.parse(nxt), i + 2


def parse_launch_line(words: list[str] | str) -> ParsedLaunch:
    """The model and settings of a pasted llama.cpp line; unknown flags are listed in `ignored`."""
    if isinstance(words, str):
        words = shlex.split(words)
    start, binary = _start(words)
    if start < 0:
        raise LaunchLineError("not a llama.cpp launch line (llama-server, llama-cli or python -m llama_cpp.server)")
    settings: dict = {}
    ignored: list[str] = []
    i = start
    while i < len(words):
        word = words[i]
        name, inline = (word.split("=", 1) + [None])[:2] if word.startswith("--") and "=" in word else (word, None)
        flag = _BY_NAME.get(name)
        if flag is None:
            ignored.append(word)
            i += 1
            continue
        try:
            value, i = _value(words, i, flag, inline)
        except (ValueError, KeyError) as error:
            raise LaunchLineError(f"{word}: {error}") from None
        if flag.setting == "override_tensor":
            value = settings.get("override_tensor", ()) + value
        settings[flag.setting] = value
    model = settings.pop("model", None)
    if binary == "llama_cpp.server":
        settings = python_server_settings(settings)
    return ParsedLaunch(model, settings, binary, tuple(ignored))


# llama-cpp-python's server (llama_cpp/server/settings.py ModelSettings, 0.3.16 and 0.3.36 alike): n_ctx 2048,
# n_batch 512, n_ubatch 512, flash_attn False (0.3.36 passes LLAMA_FLASH_ATTN_TYPE_DISABLED, not llama.cpp's
# AUTO), n_gpu_layers 0, one sequence. It has no swa_full setting and Llama.__init__ sets context_params.swa_full
# only when given, so llama_context_default_params' swa_full = true holds (src/llama-context.cpp, both trees):
# Gemma's SWA layers get the full context.
PYTHON_SERVER_DEFAULTS = {"n_ctx": 2048, "n_batch": 512, "n_ubatch": 512, "flash_attn": "off", "n_gpu_layers": 0,
                          "n_parallel": 1, "swa_full": True}


def python_server_settings(given: dict) -> dict:
    """A `python -m llama_cpp.server` line's settings: the package's defaults under the flags given, with
    Llama.__init__'s clamps n_batch = min(n_ctx, n_batch), n_ubatch = min(n_batch, n_ubatch) (n_ctx 0: the
    model's, clamped later) and --n_gpu_layers -1 = every layer (llama.py: 0x7FFFFFFF, any build)."""
    out = {**PYTHON_SERVER_DEFAULTS, **given}
    if out["n_ctx"]:
        out["n_batch"] = min(out["n_ctx"], out["n_batch"])
    out["n_ubatch"] = min(out["n_batch"], out["n_ubatch"])
    if out["n_gpu_layers"] == -1:
        out["n_gpu_layers"] = "all"
    return out


def _flag_text(value) -> str:
    """A value as its flag takes it: a list as comma-separated items (-ts 1,1; -ot a=CPU,b=CPU), 1.0 as 1."""
    if isinstance(value, (tuple, list)):
        return ",".join(f"{item:g}" if isinstance(item, float) else str(item) for item in value)
    return str(value)


def server_line(flags, model: str, settings: dict) -> str:
    """`llama-server -m MODEL ...` with each setting as its flag (a switch alone, else flag and value); the
    settings no flag carries are kept as a `# name=value` remark at the end (where the shell reads no further)."""
    words, remarks = ["llama-server", "-m", shlex.quote(model)], []
    for setting, value in settings.items():
        named = [flag for flag in flags if flag.setting == setting]
        switch = next((flag for flag in named if flag.parse is None and flag.value == value), None)
        if switch is not None:
            words.append(switch.names[0])
        elif named and named[0].parse is not None:
            words += [named[0].names[0], shlex.quote(_flag_text(value))]
        else:
            remarks.append(f"{setting}={value}")
    return " ".join(words) + (f"  # {' '.join(remarks)}" if remarks else "")
