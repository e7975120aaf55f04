"""What Ollama's own log figures mean, in words (its estimate lines; the runner's figures are llama.cpp's, labelled
by engines/llamacpp/log_labels.py), and the GPU its log names (`inference compute ... description="NAME"`, else
the runner's llama.cpp lines)."""
from __future__ import annotations

import re

FIXED = {
    "ollama_available_bytes": "Ollama: GPU memory available", "ollama_memory_available_gib": "Ollama: memory available",
    "ollama_graph_full_mib": "Ollama's estimate: graph (all layers on the GPU)",
    "ollama_graph_partial_mib": "Ollama's estimate: graph (some layers on the CPU)",
    "ollama_layers_model": "Ollama: layers in the model", "ollama_layers_offload": "Ollama: layers it offloads",
    "ollama_layers_requested": "Ollama: layers requested (num_gpu)", "ollama_parallel": "Ollama: parallel requests",
    "ollama_required_allocations_gib": "Ollama's estimate: per-GPU allocations",
    "ollama_required_full_gib": "Ollama's estimate: all layers on the GPU",
    "ollama_required_partial_gib": "Ollama's estimate: what it offloads", "ollama_required_kv_gib": "Ollama's estimate: KV cache",
    "ollama_runner_settings": "Ollama: the runner's settings", "ollama_version": "Ollama release",
    "ollama_weights_nonrepeating_mib": "Ollama's estimate: weights outside the layers",
    "ollama_weights_repeating_gib": "Ollama's estimate: weights in the layers",
    "ollama_weights_total_gib": "Ollama's estimate: weights", "ollama_ps_name": "ollama ps: model",
    "ollama_ps_size_bytes": "ollama ps: size", "ollama_ps_gpu_percent": "ollama ps: share on the GPU (%)",
    "ollama_ps_gpu_bytes": "ollama ps: on the GPU", "ollama_ps_context": "ollama ps: context",
}
_DESCRIPTION = re.compile(r'inference compute.*?description="([^"]+)"')


def label(key: str) -> str | None:
    from ..llamacpp.log_labels import label as runner_label

    if key in FIXED:
        return FIXED[key]
    if key.startswith("ollama_"):
        return "Ollama: " + key.removeprefix("ollama_").replace("_", " ").removesuffix(" mib").removesuffix(" gib")
    return runner_label(key)


def gpus(text: str) -> tuple[str, ...]:
    from ..llamacpp.log_labels import gpus as runner_gpus

    return tuple(dict.fromkeys(_DESCRIPTION.findall(text))) or runner_gpus(text)
