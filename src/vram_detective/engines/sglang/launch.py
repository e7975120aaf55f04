"""Read an SGLang launch line: `python -m sglang.launch_server --model-path M --tp 2 ...` or `sglang serve ...`.

Flag names and aliases are server_args.py add_cli_args' (--tp / --tp-size / --tensor-parallel-size, ...).
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the settings (and their rule table) load when a line is parsed, not with the flag table
    from .settings import SGLangSettings

# other engines' names for SGLang's settings (api.explain and `compare` pass them through; engine_choice.py lets
# their flags through for SGLang)
ALIASES = {"tensor_parallel_size": "tp_size", "pipeline_parallel_size": "pp_size", "data_parallel_size": "dp_size",
           "max_model_len": "context_length", "max_num_seqs": "max_running_requests"}

# flag -> (setting, type); bool flags take no value
_ALIASES = {
    "--model-path": "model_path", "--model": "model_path",
    "--tp": "tp_size", "--tp-size": "tp_size", "--tensor-parallel-size": "tp_size",
    "--dp": "dp_size", "--dp-size": "dp_size", "--data-parallel-size": "dp_size",
    "--pp": "pp_size", "--pp-size": "pp_size", "--pipeline-parallel-size": "pp_size",
    "--mem-fraction-static": "mem_fraction_static", "--mem-frac": "mem_fraction_static",
    "--context-length": "context_length", "--chunked-prefill-size": "chunked_prefill_size",
    "--max-prefill-tokens": "max_prefill_tokens", "--max-running-requests": "max_running_requests",
    "--max-total-tokens": "max_total_tokens", "--cuda-graph-max-bs": "cuda_graph_max_bs",
    "--page-size": "page_size", "--kv-cache-dtype": "kv_cache_dtype", "--dtype": "dtype",
    "--attention-backend": "attention_backend", "--speculative-algorithm": "speculative_algorithm",
    "--speculative-algo": "speculative_algorithm", "--disaggregation-mode": "disaggregation_mode",
    "--max-mamba-cache-size": "max_mamba_cache_size", "--mamba-ssm-dtype": "mamba_ssm_dtype",
    "--quantization": "quantization",
    "--speculative-draft-model-path": "speculative_draft_model_path",
    "--speculative-draft-model": "speculative_draft_model_path",
    "--speculative-num-steps": "speculative_num_steps", "--speculative-eagle-topk": "speculative_eagle_topk",
    "--speculative-num-draft-tokens": "speculative_num_draft_tokens",
}
_FLAGS = {"--enable-dp-attention": "enable_dp_attention", "--disable-cuda-graph": "disable_cuda_graph",
          "--enable-piecewise-cuda-graph": "enable_piecewise_cuda_graph",
          "--disable-piecewise-cuda-graph": "disable_piecewise_cuda_graph"}
_INTS = {"tp_size", "dp_size", "pp_size", "context_length", "chunked_prefill_size", "max_prefill_tokens",
         "max_running_requests", "max_total_tokens", "cuda_graph_max_bs", "page_size", "max_mamba_cache_size",
         "speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens"}


@dataclass(frozen=True)
class SGLangLaunch:
    entrypoint: str  # "launch_server" or "sglang serve"
    settings: SGLangSettings
    unknown_flags: tuple[str, ...]


def _entrypoint(tokens: list[str]) -> tuple[str, int]:
    for index, token in enumerate(tokens):
        if token.endswith("sglang.launch_server") or token.endswith("launch_server.py"):
            return "launch_server", index + 1
        if token.endswith("sglang") and index + 1 < len(tokens) and tokens[index + 1] == "serve":
            return "sglang serve", index + 2
    raise ValueError("not an SGLang launch line (python -m sglang.launch_server ... or sglang serve ...)")


def _value(setting: str, raw: str):
    if setting in _INTS:
        return int(raw)
    if setting == "mem_fraction_static":
        return float(raw)
    return raw


# environment variables read as settings: assignments before the launcher (`SGLANG_PP_LAYER_PARTITION=20,16 python -m
# sglang.launch_server ...`); distributed/utils.py get_pp_indices reads it (os.getenv)
ENVIRONMENT = {"SGLANG_PP_LAYER_PARTITION": "pp_layer_partition"}


def _environment(tokens: list[str]) -> dict:
    out = {}
    for token in tokens:
        name, equals, value = token.partition("=")
        if equals and name in ENVIRONMENT:
            out[ENVIRONMENT[name]] = value
    return out


def parse_launch(command: str) -> SGLangLaunch:
    tokens = shlex.split(command.replace("\\\n", " "))
    entrypoint, start = _entrypoint(tokens)
    values: dict = _environment(tokens[: start - (2 if entrypoint == "sglang serve" else 1)])
    unknown: list[str] = []
    index = start
    while index < len(tokens):
        token = tokens[index]
        flag, _, inline = token.partition("=")
        if flag in _FLAGS:
            values[_FLAGS[flag]] = True
        elif flag in _ALIASES:
            raw = inline if inline else tokens[index + 1] if index + 1 < len(tokens) else ""
            index += 0 if inline else 1
            values[_ALIASES[flag]] = _value(_ALIASES[flag], raw)
        elif token.startswith("--"):
            unknown.append(flag)
        index += 1
    from .settings import from_values

    return SGLangLaunch(entrypoint, from_values(values), tuple(unknown))


class LaunchLineError(ValueError):
    """A pasted line that is not an SGLang launch line, or a flag value SGLang would reject."""


@dataclass(frozen=True)
class Flag:
    setting: str
    names: tuple[str, ...]
    parse: object  # callable str -> value
    help: str


def _switch(_: str) -> bool:
    return True


def _parser_for(setting: str):
    if setting in _INTS:
        return int
    return float if setting == "mem_fraction_static" else str


def _flags() -> tuple[Flag, ...]:
    by_setting: dict[str, list[str]] = {}
    for name, setting in _ALIASES.items():
        by_setting.setdefault(setting, []).append(name)
    out = [Flag(setting, tuple(names), _parser_for(setting), f"SGLang's {names[0]}")
           for setting, names in by_setting.items() if setting != "model_path"]
    out += [Flag(setting, (name,), _switch, f"SGLang's {name}") for name, setting in _FLAGS.items()]
    return tuple(out)


FLAGS = _flags()


def parse_flag_value(flag: Flag, raw: str):
    try:
        return flag.parse(raw)
    except ValueError:
        raise LaunchLineError(f"{flag.names[0]}: not a valid value: {raw!r}") from None


@dataclass(frozen=True)
class ParsedLine:
    """What the CLI needs from a pasted line: the model and the settings given (snake_case names)."""

    model: str | None
    settings: dict
    entrypoint: str
    unknown_flags: tuple[str, ...]

    @property
    def ignored(self) -> tuple[str, ...]:
        """The flags the prediction does not read (as every engine's parsed line names them)."""
        return self.unknown_flags


def is_sglang_line(words: list[str]) -> bool:
    try:
        _entrypoint(list(words))
        return True
    except ValueError:
        return False


def parse_launch_words(words: list[str]) -> ParsedLine:
    try:
        launch = parse_launch(shlex.join(words))
    except ValueError as error:
        raise LaunchLineError(str(error)) from None
    from .settings import SETTING_NAMES

    # in the settings' own order (`given` is a set: its order changes with the interpreter's hash seed)
    values = {name: getattr(launch.settings, name) for name in SETTING_NAMES if name in launch.settings.given}
    model = values.pop("model_path", None)
    return ParsedLine(model, values, launch.entrypoint, launch.unknown_flags)
