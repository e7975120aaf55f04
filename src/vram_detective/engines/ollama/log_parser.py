"""Ollama's server log: its own estimate line ("offload to cuda" layers.* / memory.*), the scheduler's
"available=... required=..." line, the runner command it starts, and the llama.cpp lines of the runner
(engines/llamacpp/log_parser.py). `reconcile` sets Ollama's estimate beside llama.cpp's allocation."""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..llamacpp.log_parser import parse as parse_llamacpp

_LAYERS = re.compile(r"layers\.(requested|model|offload)=(-?\d+)")
_SPLIT = re.compile(r'layers\.split="?([\d,]*)"?')
_CMD = re.compile(r'msg="starting (?:llama server|llama-server)" cmd="([^"]*)"')
_SCHED = re.compile(r'\bparallel=(\d+)')
_OLLAMA_VERSION = re.compile(r'msg="?(?:starting ollama|Listening on)[^\n]*version=v?(\d+\.\d+\.\d+)')
_RUNNER_FLAGS = {"--ctx-size": "n_ctx", "-c": "n_ctx", "--batch-size": "n_batch", "-b": "n_batch",
                 "-ub": "n_ubatch", "--ubatch-size": "n_ubatch", "--n-gpu-layers": "n_gpu_layers", "-ngl": "n_gpu_layers",
                 "--parallel": "n_parallel", "-np": "n_parallel", "--flash-attn": "flash_attn", "-fa": "flash_attn",
                 "--cache-type-k": "type_k", "--cache-type-v": "type_v", "--kv-cache-type": "type_k"}
_RUNNER_SWITCHES = {"--no-mmap": ("mmap", False), "--embedding": ("embeddings", True)}


def is_ollama_log(text: str) -> bool:
    return "memory.required" in text or "ollama" in text.lower() or "offload to cuda" in text


def runner_settings(cmd: str) -> dict:
    """The llama.cpp settings of the runner command Ollama logs (--ctx-size 8192 --parallel 4 ...)."""
    words, out, i = cmd.split(), {}, 0
    while i < len(words):
        word = words[i]
        if word in _RUNNER_SWITCHES:
            key, value = _RUNNER_SWITCHES[word]
            out[key] = value
        elif word in _RUNNER_FLAGS and i + 1 < len(words):
            value = words[i + 1]
            out[_RUNNER_FLAGS[word]] = int(value) if value.lstrip("-").isdigit() else value
            i += 1
        i += 1
    return out


def parse(log: str) -> dict:
    """llama.cpp's figures plus Ollama's: ollama_* estimate keys (SCHEMA.md), layers.* and the runner's flags."""
    out = parse_llamacpp(log)
    for line in log.splitlines():
        if "offload to" in line:
            for name, value in _LAYERS.findall(line):
                out[f"ollama_layers_{name}"] = int(value)
        if m := _CMD.search(line):
            out["ollama_runner_settings"] = runner_settings(m.group(1))
        if "new model will fit" in line or "msg=\"new model" in line:
            if m := _SCHED.search(line):
                out["ollama_parallel"] = int(m.group(1))
        if m := _OLLAMA_VERSION.search(line):
            out["ollama_version"] = m.group(1)
    return out


@dataclass(frozen=True)
class Difference:
    figure: str
    ollama_mib: float
    llamacpp_mib: float
    why: str

    @property
    def delta_mib(self) -> float:
        return round(self.ollama_mib - self.llamacpp_mib, 2)


def _gpu_sum(parsed: dict, kind: str) -> float:
    return sum(v for k, v in parsed.items() if re.fullmatch(rf"cuda\d+_{kind}_buffer_mib", k))


def reconcile(parsed: dict) -> list[Difference]:
    """Where Ollama's estimate and llama.cpp's allocation differ, and why (figures in MiB; Ollama's GiB
    figures carry one decimal, so +-51 MiB of a difference can be its rounding)."""
    def est(key: str) -> float | None:
        if f"ollama_{key}_mib" in parsed:
            return parsed[f"ollama_{key}_mib"]
        return parsed[f"ollama_{key}_gib"] * 1024 if f"ollama_{key}_gib" in parsed else None

    out = []
    kv, weights, graph_full = est("required_kv"), est("weights_total"), est("graph_full")
    gpu_kv, gpu_model, gpu_compute = _gpu_sum(parsed, "kv"), _gpu_sum(parsed, "model"), _gpu_sum(parsed, "compute")
    if kv is not None and "kv_size_mib" in parsed:
        out.append(Difference("KV cache", kv, parsed["kv_size_mib"],
                              "Ollama: num_ctx x parallel x (K + V) per layer, as llama.cpp allocates it"))
    if weights is not None and gpu_model:
        host = sum(parsed.get(k, 0) for k in ("cpu_model_buffer_mib", "cpu_mapped_model_buffer_mib",
                                               "cuda_host_model_buffer_mib"))
        out.append(Difference("weights", weights, gpu_model + host,
                              "memory.weights.total counts every layer's KV with its weights (memory.go adds kv[i] "
                              "to the layer size); llama.cpp's model buffers hold weights only"))
    if graph_full is not None and gpu_compute:
        full = parsed.get("offloaded_layers") == parsed.get("total_layers")
        graph = graph_full if full else est("graph_partial") or graph_full
        out.append(Difference("graph" if full else "graph (partial)", graph, gpu_compute,
                              "Ollama's GraphSize formula for the architecture vs the scheduler's reserve of the "
                              "worst-case graph"))
    required = est("required_full")
    if required is not None and gpu_model:
        out.append(Difference("required on GPU", required, gpu_model + gpu_kv + gpu_compute,
                              "Ollama adds 457 MiB of minimum CUDA memory and one layer as a buffer, and counts the "
                              "output layer that llama.cpp may keep in host memory"))
    return out
