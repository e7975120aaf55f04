"""`whatif` and `fit` for any engine: the one dispatch the command line, the web API and the library share.

Each engine answers with its own advisor, declared on the interface (`engine.levers.answers`, in
engines/<engine>/): vLLM's vectorized sweep over its settings and the catalog's checkpoints, SGLang's loop over
its plan, llama.cpp's layer and context solvers (Ollama's levers on top of them). No engine is named here: an
engine that declares an advisor gets it on every surface; one that declares none is answered NotOffered."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..errors import NotOffered


@dataclass(frozen=True)
class Target:
    """What `fit` solves for (all optional): tokens per request, requests of that length at once, the memory
    nvidia-smi may show per GPU (bytes), the GPUs available, and how many candidates to list."""

    context: int | None = None
    context_text: str | None = None  # as the user wrote it ("32k"), for the target's sentence
    concurrency: float | None = None
    max_gpu_memory: int | None = None
    max_gpu_memory_text: str | None = None
    gpus: int = 1
    top: int = 5
    same_checkpoint: bool = False


@dataclass(frozen=True)
class AdvisorAnswer:
    """One whatif / fit answer: `data` is what `--json` prints and /api answers, `ok` whether the baseline
    starts (whatif) or a candidate meets the target (fit): exit 0, else 1."""

    command: str
    engine: str
    data: Any
    ok: bool
    text: Callable[[int | None, bool], str]  # (columns, markdown) -> the terminal listing
    wrapped: bool = False  # True: `text` fits the columns itself; False: one line per candidate, to be wrapped

    def to_dict(self) -> dict:
        from ..library import envelope

        return envelope(self.command, self.engine, self.data)


# the figures every engine's what-if row has (schema 2); a row's other figures are the engine's own, nested under
# its name: vLLM's block counts, SGLang's request cap, llama.cpp's layers and buffers
COMMON_ROW_KEYS = ("lever", "change", "model", "settings", "cost", "starts", "refused", "note", "weights_gib",
                   "kv_pool_gib", "kv_cache_gib", "kv_cache_tokens", "max_concurrency", "nvidia_smi_used_mib", "delta",
                   "figures", "command")


def nested_row(row: dict, engine_name: str) -> dict:
    """A what-if row with the engine's own figures under the engine's name (after the common ones)."""
    own = {key: value for key, value in row.items() if key not in COMMON_ROW_KEYS}
    common = {key: value for key, value in row.items() if key in COMMON_ROW_KEYS}
    return {**common, engine_name: own} if own else common


def whatif(model: str, gpu, engine, version: str | None, settings: dict, sources: dict, *,
           checkpoints: bool = True) -> AdvisorAnswer:
    """The baseline, then each lever of the engine one at a time."""
    return _advisor(engine, "whatif").whatif(model, gpu, engine, version, settings, sources, checkpoints=checkpoints)


def fit(model: str, gpu, engine, version: str | None, settings: dict, sources: dict, target: Target,
        *, progress: Callable | None = None) -> AdvisorAnswer:
    """The settings (and, where the engine searches them, the checkpoints) that meet `target`, best first."""
    return _advisor(engine, "fit").fit(model, gpu, engine, version, settings, sources, target, progress=progress)


def _advisor(engine, command: str):
    """The engine's own advisor (engines/<engine>/advisor), or the plain answer that it has none."""
    if engine.levers.answers is None:
        raise NotOffered(f"{command}: {engine.label} has no levers modelled")
    return engine.levers.answers()
