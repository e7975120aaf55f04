"""Ollama's `whatif`: its own knobs (Modelfile PARAMETERs and server variables) through llama.cpp's rows
(engines/llamacpp/advisor.py), each with the Ollama line that sets it. `fit` is not offered: Ollama picks the
GPU layers itself (its estimate), so there is nothing for `fit` to set. Reached through the engine interface
(`Levers.answers`; advisor/answers.py dispatches)."""
from __future__ import annotations

# Ollama's knobs (Modelfile PARAMETERs and server variables)
OLLAMA_LEVERS = (
    ("num_ctx halved", lambda r: {"num_ctx": max(r["num_ctx"] // 2, 256)}),
    ("num_ctx doubled", lambda r: {"num_ctx": r["num_ctx"] * 2}),
    ("OLLAMA_NUM_PARALLEL=1", lambda r: {"num_parallel": 1}),
    ("OLLAMA_NUM_PARALLEL=4", lambda r: {"num_parallel": 4}),
    ("OLLAMA_KV_CACHE_TYPE=q8_0 (+ flash attention)", lambda r: {"kv_cache_type": "q8_0", "flash_attention": True}),
    ("OLLAMA_FLASH_ATTENTION=0", lambda r: {"flash_attention": False}),
    ("num_gpu half the layers", lambda r: {"num_gpu": max(r["layers"] // 2, 0)}),
)


def ollama_line(model: str, settings: dict) -> str:
    """The server variables and the run line; Modelfile PARAMETERs as `/set parameter` (their only place)."""
    env = {"num_parallel": "OLLAMA_NUM_PARALLEL", "kv_cache_type": "OLLAMA_KV_CACHE_TYPE",
           "flash_attention": "OLLAMA_FLASH_ATTENTION"}
    words = [f"{env[k]}={int(v) if isinstance(v, bool) else v}" for k, v in settings.items() if k in env]
    words += ["ollama", "run", model]
    params = [f"/set parameter {k} {v}" for k, v in settings.items() if k in ("num_ctx", "num_gpu", "num_batch")]
    tag = f"  (its {settings['gguf_type']} tag)" if "gguf_type" in settings else ""
    return " ".join(words) + tag + (f"  then {'; '.join(params)}" if params else "")


def _line(engine, settings: dict, version, model: str) -> str:
    return ollama_line(model, settings)


def whatif(model: str, gpu, engine, version, settings: dict, sources: dict, *, checkpoints: bool = True):
    """The baseline, then each of Ollama's knobs alone and the model's other quantization mixes."""
    from ...advisor.answers import AdvisorAnswer, nested_row
    from ..llamacpp.advisor import whatif_rows, whatif_text

    pins = {key: value for key, value in settings.items() if key != "engine"}
    rows = whatif_rows(model, gpu, version, pins, sources, engine, OLLAMA_LEVERS, _line)
    return AdvisorAnswer("whatif", engine.name, [nested_row(row.to_dict(), engine.name) for row in rows],
                         rows[0].breakdown.failure is None,
                         lambda columns, markdown: whatif_text(rows))


def fit(model: str, gpu, engine, version, settings: dict, sources: dict, target, *, progress=None):
    from ...errors import NotOffered

    raise NotOffered(f"fit --engine {engine.name}: {engine.label} picks the layers itself (its estimate); use "
                     f"`whatif --engine {engine.name}`, or `fit` with an engine whose layers you set")
