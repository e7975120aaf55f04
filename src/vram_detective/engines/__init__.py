"""The engine registry: `get_engine("vllm")`. Engine modules are imported on first use only, so the
command line starts without the planners."""
from __future__ import annotations

from functools import lru_cache
from importlib import import_module

from ..errors import NotFound

# name -> "module:attribute" of the object implementing engines/base.py's Engine
ENGINES = {
    "vllm": "vram_detective.engines.vllm.engine:ENGINE",
    "sglang": "vram_detective.engines.sglang.engine:ENGINE",
    "llamacpp": "vram_detective.engines.llamacpp.engine:ENGINE",
    "ollama": "vram_detective.engines.ollama.engine:ENGINE",
}

DEFAULT_ENGINE = "vllm"
# the engines `compare` puts side by side when none are named (Ollama runs llama.cpp underneath: its column
# would repeat llama.cpp's at another default context)
COMPARED_BY_DEFAULT = ("vllm", "sglang", "llamacpp")
# `--engine v0|v1` / `engine="v0"` from before there were engines: vLLM's V0/V1 path, accepted at the edges only
LEGACY_PATH_ENGINE = "vllm"


class UnknownEngineError(NotFound):
    pass


@lru_cache(maxsize=None)
def get_engine(name: str | None = None):
    """The engine called `name` (default: vLLM); UnknownEngineError lists the known ones."""
    key = (name or DEFAULT_ENGINE).lower()
    if key not in ENGINES:
        raise UnknownEngineError(f"unknown engine {name!r} (known: {', '.join(ENGINES)})")
    module, attribute = ENGINES[key].split(":")
    return getattr(import_module(module), attribute)
