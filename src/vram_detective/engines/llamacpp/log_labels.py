"""What llama.cpp's log figures mean, in words (`logs` shows these instead of the keys), the devices its log
names, and what GPU 0 held by its own printed buffers (the answer's bar). The lines as llama.cpp prints them
(groundtruth/dev-llamacpp.jsonl): "CUDA0 model buffer size = N MiB" (one per backend buffer: model, KV, compute,
output, recurrent state, LoRA), "using device CUDA0 (NAME) - N MiB free" and ggml-cuda's "Device 0: NAME,
compute capability ..." lines."""
from __future__ import annotations

import re

_DEVICE = re.compile(r"^(cuda\d+|cpu_mapped|cpu_repack|cpu|cuda_host)_")
_BUFFER = re.compile(r"^(cuda\d+|cpu_mapped|cpu_repack|cpu|cuda_host)_(model|kv|compute|output|rs|lora)_buffer_mib$")
_KINDS = {"model": "weights buffer", "kv": "KV cache buffer", "compute": "compute buffer", "output": "output buffer",
          "rs": "recurrent-state buffer", "lora": "LoRA buffer"}
FIXED = {
    "offloaded_layers": "layers offloaded to the GPU", "total_layers": "layers in the model",
    "kv_size_mib": "KV cache", "kv_cells": "KV cache cells (tokens)", "kv_layers": "layers with a KV cache",
    "k_mib": "K cache", "v_mib": "V cache", "ckv_mib": "compressed KV cache (MLA)",
    "kv_swa_cells": "sliding-window KV cells", "kv_swa_layers": "sliding-window KV layers",
    "kv_swa_size_mib": "sliding-window KV cache", "kv_nonswa_cells": "full-attention KV cells",
    "kv_nonswa_layers": "full-attention KV layers", "kv_nonswa_size_mib": "full-attention KV cache",
    "rs_cells": "recurrent-state cells", "rs_size_mib": "recurrent state", "r_mib": "recurrent state R",
    "s_mib": "recurrent state S", "graph_nodes": "compute graph nodes", "graph_splits": "compute graph splits",
    "file_size_gib": "GGUF file size", "model_size_gib": "model size", "device_free_mib": "GPU free at load",
    "device_total_mib": "GPU total", "flash_attn_resolved": "flash attention (as resolved)",
    "prompt_cache_limit_mib": "prompt cache limit", "host_model_mib": "host: weights", "host_compute_mib":
    "host: compute", "host_self_mib": "host: total", "startup_failed": "start failed",
    "fit_layers_on_gpu": "auto-fit: layers on the GPU", "fit_overflowing_layers": "auto-fit: layers that overflow",
    "fit_free_device_mib": "auto-fit: free on the device", "fit_projected_device_mib": "auto-fit: projected use",
    "fit_free_after_mib": "auto-fit: free after", "fit_model_mib": "auto-fit: weights",
    "fit_context_mib": "auto-fit: context (KV)", "fit_compute_mib": "auto-fit: compute", "fit_self_mib": "auto-fit: total",
}
_FIT_PARTS = {"model": "weights", "context": "context (KV)", "compute": "compute", "self": "total"}


def _device(name: str) -> str:
    return {"cpu_mapped": "CPU (memory-mapped)", "cpu_repack": "CPU (repacked)", "cpu": "CPU",
            "cuda_host": "CUDA host (pinned RAM)"}.get(name, name.upper())


def label(key: str) -> str | None:
    """The key in words (no unit: the value carries it); None for a key this table does not know."""
    if key in FIXED:
        return FIXED[key]
    if m := _BUFFER.match(key):
        return f"{_KINDS[m[2]]} on {_device(m[1])}"
    if m := re.match(r"^device_(free|total)_mib_(cuda\d+)$", key):
        return f"{m[2].upper()} {'free at load' if m[1] == 'free' else 'total'}"
    if m := re.match(r"^graph_splits_bs(\d+)$", key):
        return f"compute graph splits (batch {m[1]})"
    if m := re.match(r"^fit_breakdown_(cuda\d+)_(model|context|compute|self)_mib$", key):
        return f"auto-fit: {m[1].upper()} {_FIT_PARTS[m[2]]}"
    return None


_USING = re.compile(r"using device (CUDA\d+|ROCm\d+|Vulkan\d+|Metal)\s*\(([^)]+)\)")
_GGML_DEVICE = re.compile(r"^\s*(?:\[\w+\] - )?Device (\d+): ([^,]+), compute capability", re.M)


def gpus(text: str) -> tuple[str, ...]:
    """The devices the log names, GPU 0 first (the `using device` lines, else ggml-cuda's device list)."""
    found: dict[str, str] = {}
    for device, name in _USING.findall(text):
        found.setdefault(device.upper(), name.strip())
    if not found:
        for index, name in _GGML_DEVICE.findall(text):
            found.setdefault(f"CUDA{index}", name.strip())
    return tuple(found[key] for key in sorted(found, key=lambda k: int(re.sub(r"\D", "", k) or 0)))


def memory(observed: dict) -> dict:
    """What GPU 0 (CUDA0) held by its printed buffers, in GiB: weights, KV cache (with recurrent state) and the
    rest (compute, LoRA, output); with buffers printed on several GPUs, `devices`: each GPU's the same way (its
    own bar); empty when the log printed no CUDA0 buffer."""
    out = _device_memory(observed, 0)
    if not out:
        return {}
    indices = sorted({int(m.group(1)) for key in observed if (m := _CUDA_BUFFER.match(key))})
    if len(indices) > 1:
        out["devices"] = [dict(_device_memory(observed, i), name=f"GPU {i}", device=f"CUDA{i}") for i in indices]
    return out


_CUDA_BUFFER = re.compile(r"^cuda(\d+)_(?:model|kv|rs|compute|output|lora)_buffer_mib$")


def _device_memory(observed: dict, index: int) -> dict:
    mib = {kind: observed.get(f"cuda{index}_{kind}_buffer_mib") for kind in _KINDS}
    if all(value is None for value in mib.values()):
        return {}
    kv = (mib["kv"] or 0) + (mib["rs"] or 0)
    other = sum(mib[kind] or 0 for kind in ("compute", "output", "lora"))
    total = observed.get(f"device_total_mib_cuda{index}") or (observed.get("device_total_mib") if not index else 0)
    return {"weights_gib": (mib["model"] or 0) / 1024, "kv_gib": kv / 1024, "other_gib": other / 1024,
            "total_gib": (total or 0) / 1024 or None}
