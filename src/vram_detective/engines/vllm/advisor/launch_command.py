"""The exact launch line for a set of settings: `vllm serve MODEL --flag value ...` or the Python form
`LLM(model=..., flag=value, ...)`, with only the settings that differ from what that release would pick
by itself (so the line is short and still reproduces the same prediction through `explain -- <line>`)."""
from __future__ import annotations

import shlex

# settings the launch line never carries (they are the tool's, or say which engine path runs)
_NOT_FLAGS = ("entrypoint", "engine")
# the order flags are printed in
_ORDER = ("tensor_parallel_size", "pipeline_parallel_size", "quantization", "dtype", "gpu_memory_utilization",
          "max_model_len", "max_num_seqs", "max_num_batched_tokens", "kv_cache_dtype", "block_size", "enforce_eager")


def _number(value) -> str:
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        if value.is_integer():
            return str(int(value))
        text = format(value, "g")
        return text if float(text) == value else repr(value)
    return str(value)


def _ordered(settings: dict) -> list[tuple[str, object]]:
    keys = [key for key in _ORDER if key in settings] + sorted(key for key in settings if key not in _ORDER)
    return [(key, settings[key]) for key in keys if key not in _NOT_FLAGS and settings[key] is not None]


def _flag_names() -> dict[str, str]:
    from ..engine import ENGINE

    return ENGINE.levers.flag_names()


def serve_command(model: str, settings: dict, *, engine_env: str | None = None) -> str:
    """`vllm serve MODEL ...`; `engine_env` is e.g. "VLLM_USE_V1=0" when the engine is not the release's default."""
    names = _flag_names()
    words = ([engine_env] if engine_env else []) + ["vllm", "serve", model]
    for key, value in _ordered(settings):
        if isinstance(value, bool):
            if value:
                words.append(names[key])
            elif key == "enable_chunked_prefill":
                words.append("--no-enable-chunked-prefill")
            continue
        words += [names[key], _number(value)]
    return " ".join(shlex.quote(word) if word != engine_env else word for word in words)


def python_command(model: str, settings: dict) -> str:
    """`LLM(model="...", ...)` with vLLM's keyword names."""
    arguments = [f"model={model!r}"]
    for key, value in _ordered(settings):
        arguments.append(f"{key}={value!r}" if isinstance(value, (str, bool)) else f"{key}={_number(value)}")
    return "from vllm import LLM\nllm = LLM(" + ", ".join(arguments) + ")"


def _comparable(settings) -> tuple:
    """Everything a resolved EngineSettings holds that changes the prediction (not what was given or why)."""
    skip = {"given", "reasons", "entrypoint"}
    return tuple((name, getattr(settings, name)) for name in settings.__dataclass_fields__ if name not in skip)


def minimal_settings(spec, gpu, version, settings: dict, *, entrypoint: str = "serve") -> dict:
    """`settings` without the entries the release would pick by itself (same resolved settings)."""
    from ..engine import ENGINE

    resolve_settings = ENGINE.resolve_settings
    settings = {key: value for key, value in settings.items() if value is not None and key != "entrypoint"}
    target, _ = resolve_settings(dict(settings, entrypoint=entrypoint), spec, gpu, version)
    wanted = _comparable(target)
    out = dict(settings)
    for key in list(settings):
        if key == "engine":
            continue
        trial = {k: v for k, v in out.items() if k != key}
        try:
            resolved, _ = resolve_settings(dict(trial, entrypoint=entrypoint), spec, gpu, version)
        except ValueError:
            continue
        if _comparable(resolved) == wanted:
            out = trial
    return out


def engine_env(spec, gpu, version, settings: dict) -> str | None:
    """The environment switch that selects the engine when it is not the release's default one."""
    from ..engine import ENGINE

    return ENGINE.levers.path_switch(spec, gpu, version, settings)
