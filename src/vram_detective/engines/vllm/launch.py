"""vLLM's command-line flags -> snake_case settings, shared by `explain`'s own flags and a pasted
`vllm serve ...` / `python -m vllm.entrypoints.openai.api_server ...` line."""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from ...hardware import parse_memory_size
from ...units import parse_token_count


def _bool(_: str) -> bool:
    return True


def _fraction(text: str) -> float:
    value = float(text)
    if not 0 < value <= 1:
        raise ValueError(f"must be in (0, 1], got {text}")
    return value


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(f"must be a positive integer, got {text}")
    return value


def _tokens(text: str) -> int:
    value = parse_token_count(text)
    if value < 1 and value != -1:
        raise ValueError(f"must be a positive token count, got {text}")
    return value


_HUMAN_INT = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def _bytes(text: str) -> int:
    """--kv-cache-memory-bytes in vLLM's own unit: a bare number is bytes, one-letter suffixes as vLLM's
    human_readable_int reads them (k/m/g/t powers of 1000, K/M/G/T of 1024, utils/argparse_utils.py
    0.29.0); "8GiB", "8GB", "8192MiB" (this tool's spellings) still work."""
    raw = str(text).strip()
    if raw.isdigit():
        value = int(raw)
    elif (match := _HUMAN_INT.fullmatch(raw)) is not None:
        number, suffix = match.groups()
        if suffix in _BINARY and "." in number:
            raise ValueError(f"decimals are not allowed with binary suffixes like {suffix} (vLLM); "
                             f"did you mean {number}{suffix.lower()}?")
        value = int(float(number) * _DECIMAL[suffix]) if suffix in _DECIMAL else int(number) * _BINARY[suffix]
    else:
        value = parse_memory_size(raw)
    if value <= 0:
        raise ValueError(f"must be a positive number of bytes, got {text}")
    return value


def _json_object(text: str) -> str:
    """--speculative-config: kept as the JSON text, checked to be one object."""
    import json

    if not isinstance(json.loads(text), dict):
        raise ValueError("must be a JSON object")
    return text


@dataclass(frozen=True)
class Flag:
    setting: str
    names: tuple[str, ...]
    parse: object  # callable str -> value; _bool marks a switch without a value
    help: str


FLAGS: tuple[Flag, ...] = (
    Flag("tensor_parallel_size", ("--tensor-parallel-size", "-tp"), _positive_int, "GPUs per tensor-parallel group"),
    Flag("pipeline_parallel_size", ("--pipeline-parallel-size", "-pp"), _positive_int, "pipeline stages"),
    Flag("data_parallel_size", ("--data-parallel-size", "-dp"), _positive_int,
         "engine replicas (each sizes its own KV cache; MoE experts are sharded across DP x TP)"),
    Flag("gpu_memory_utilization", ("--gpu-memory-utilization",), _fraction, "fraction of GPU memory vLLM may use"),
    Flag("max_model_len", ("--max-model-len",), _tokens, "context length, e.g. 32768 or 32k"),
    Flag("max_num_seqs", ("--max-num-seqs",), _positive_int, "maximum concurrent sequences"),
    Flag("max_num_batched_tokens", ("--max-num-batched-tokens",), _tokens, "tokens per scheduler step"),
    Flag("block_size", ("--block-size",), _positive_int, "tokens per KV-cache block"),
    Flag("kv_cache_dtype", ("--kv-cache-dtype",), str,
         "auto, fp8, fp8_e4m3, fp8_e5m2, bfloat16, float16; packed (0.20+): turboquant_k8v4, turboquant_4bit_nc, "
         "turboquant_k3v4_nc, turboquant_3bit_nc, int8/fp8/int4_per_token_head, nvfp4"),
    Flag("dtype", ("--dtype",), str, "auto, half, float16, bfloat16, float, float32"),
    Flag("quantization", ("--quantization", "-q"), str, "awq, awq_marlin, gptq, gptq_marlin, marlin, fp8, modelopt"),
    Flag("enforce_eager", ("--enforce-eager",), _bool, "no CUDA graphs"),
    Flag("swap_space", ("--swap-space",), float, "CPU swap space per GPU in GiB, a plain number as in vLLM (V0)"),
    Flag("kv_cache_memory_bytes", ("--kv-cache-memory-bytes", "--kv-cache-memory"), _bytes,
         "fixed KV-cache size in bytes as vLLM reads it (8589934592, 8G = 8 GiB, 8g = 8e9; 8GiB also works; "
         "vLLM 0.10.2+, skips the utilization rule)"),
    Flag("num_gpu_blocks_override", ("--num-gpu-blocks-override",), _positive_int, "force the number of GPU blocks"),
    Flag("enable_chunked_prefill", ("--enable-chunked-prefill",), _bool, "chunked prefill (V0; V1 always chunks)"),
    Flag("enable_prefix_caching", ("--enable-prefix-caching",), _bool,
         "prefix caching (Mamba hybrids on V1: sets the Mamba cache mode; default per release)"),
    Flag("enable_expert_parallel", ("--enable-expert-parallel",), _bool, "MoE: whole experts split across the TP ranks"),
    Flag("cpu_offload_gb", ("--cpu-offload-gb",), float,
         "GiB of layer weights kept in CPU memory per GPU, a plain number as in vLLM"),
    Flag("enable_lora", ("--enable-lora",), _bool, "pre-allocate LoRA adapter slots"),
    Flag("max_loras", ("--max-loras",), _positive_int, "LoRA adapters served at once (default 1)"),
    Flag("max_lora_rank", ("--max-lora-rank",), _positive_int, "largest LoRA rank (default 16)"),
    Flag("speculative_config", ("--speculative-config",), _json_object,
         'speculative decoding, e.g. \'{"method": "eagle", "model": "...", "num_speculative_tokens": 3}\''),
    Flag("speculative_model", ("--speculative-model",), str, "draft model or [ngram] (vLLM 0.4-0.9 flag)"),
    Flag("num_speculative_tokens", ("--num-speculative-tokens",), _positive_int,
         "tokens proposed per step (vLLM 0.4-0.9 flag)"),
    Flag("speculative_draft_tensor_parallel_size", ("--speculative-draft-tensor-parallel-size", "-spec-draft-tp"),
         _positive_int, "the draft model's TP size (V0)"),
    Flag("decode_context_parallel_size", ("--decode-context-parallel-size", "-dcp"), _positive_int,
         "decode context parallel: each TP rank keeps 1/dcp of every sequence's KV (vLLM 0.10.2+)"),
    Flag("disable_hybrid_kv_cache_manager", ("--disable-hybrid-kv-cache-manager",), _bool,
         "allocate sliding-window / chunked-local layers as full attention (V1 0.9.1+)"),
    Flag("max_cpu_loras", ("--max-cpu-loras",), _positive_int,
         "LoRA adapters cached in CPU memory (no GPU memory; must be >= --max-loras)"),
)

_BY_NAME = {name: flag for flag in FLAGS for name in flag.names}
_NEGATIONS = {"--no-enable-chunked-prefill": "enable_chunked_prefill", "--no-enforce-eager": "enforce_eager",
              "--no-enable-prefix-caching": "enable_prefix_caching"}
# Launch-line flags that take no value (so the next word is not swallowed as theirs).
_SWITCHES = {
    "--trust-remote-code", "--disable-log-requests",
    "--disable-log-stats", "--enable-auto-tool-choice",
    "--disable-custom-all-reduce", "--enable-reasoning", "--async-scheduling", "--headless",
}


class LaunchLineError(ValueError):
    pass


@dataclass(frozen=True)
class LaunchLine:
    model: str | None
    settings: dict
    ignored: tuple[str, ...]  # flags that do not change memory (or are not modelled yet)


def parse_flag_value(flag: Flag, raw: str):
    try:
        return flag.parse(raw)
    except ValueError as error:
        shown = raw if len(str(raw)) <= 40 else f"{str(raw)[:20]}… ({len(str(raw))} characters)"
        raise LaunchLineError(f"{flag.names[0]} {shown}: {error}") from None


def parse_launch_line(words: list[str] | str) -> LaunchLine:
    """Understand `vllm serve MODEL --flag value ...` and `python -m vllm.entrypoints.* --model MODEL ...`."""
    if isinstance(words, str):
        words = shlex.split(words)
    words = [word for word in words if word != "\\"]
    settings: dict = {}
    index, model = _launcher(words, settings)
    ignored: list[str] = []
    while index < len(words):
        word = words[index]
        index += 1
        if not word.startswith("-"):
            if model is None:
                model = word
                continue
            raise LaunchLineError(f"unexpected word {word!r} in the launch line")
        name, has_inline, inline = word.partition("=")
        name = name.replace("_", "-") if name.startswith("--") else name
        if name == "--model":
            model = inline if has_inline else (words[index] if index < len(words) else None)
            index += 0 if has_inline else 1
            continue
        if name in _NEGATIONS:
            settings[_NEGATIONS[name]] = False
            continue
        flag = _BY_NAME.get(name)
        if flag is None:
            ignored.append(name)
            takes_value = not has_inline and name not in _SWITCHES and index < len(words) and not words[index].startswith("-")
            index += 1 if takes_value else 0
            continue
        if flag.parse is _bool:
            settings[flag.setting] = True if not has_inline else inline.lower() not in ("false", "0", "no")
            continue
        if has_inline:
            raw = inline
        elif index < len(words):
            raw = words[index]
            index += 1
        else:
            raise LaunchLineError(f"{name} needs a value")
        settings[flag.setting] = parse_flag_value(flag, raw)
    return LaunchLine(model, settings, tuple(ignored))


def is_launch_line(words: list[str] | str) -> bool:
    """Do these words start vLLM (`vllm serve`, a path ending in vllm, `python -m vllm.entrypoints...`), after
    any VAR=value words?"""
    if isinstance(words, str):
        words = shlex.split(words)
    index = 0
    while index < len(words) and "=" in words[index] and not words[index].startswith("-"):
        index += 1
    program = words[index:index + 3]
    if program and program[0].endswith("vllm"):
        return True
    return (len(program) == 3 and program[0].startswith("python") and program[1] == "-m"
            and program[2].startswith("vllm."))


def _launcher(words: list[str], settings: dict) -> tuple[int, str | None]:
    """Skip the environment assignments and the launcher (`vllm serve [MODEL]`, `python -m MODULE`): the index
    of the first flag, and the model `vllm serve` names (else None)."""
    index = 0
    model = None
    # environment assignments before the launcher; VLLM_USE_V1 picks the engine path (envs.py)
    while index < len(words) and "=" in words[index] and not words[index].startswith("-"):
        name, _, value = words[index].partition("=")
        if name == "VLLM_USE_V1" and value in ("0", "1"):
            settings["engine"] = "v1" if value == "1" else "v0"
        index += 1
    if index < len(words) and words[index].endswith("vllm"):
        index += 1
        if index < len(words) and words[index] == "serve":
            index += 1
            if index < len(words) and not words[index].startswith("-"):
                model = words[index]
                index += 1
    elif index < len(words) and words[index].startswith("python"):
        index += 1
        if index + 1 < len(words) and words[index] == "-m":
            index += 2
    return index, model
