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


# [ \t], not \s: a \s* at every line start runs over all the blank lines after it (quadratic on 100 MB of
# CRLF blank lines); ps's header is one line
_PS_HEADER = re.compile(r"^[ \t]*NAME[ \t]+ID[ \t]+SIZE[ \t]+PROCESSOR\b", re.MULTILINE)


def is_ollama_log(text: str) -> bool:
    """Ollama's server log (its estimate line, its paths), or `ollama ps` output."""
    return ("memory.required" in text or "ollama" in text.lower() or "offload to cuda" in text
            or _PS_HEADER.search(text) is not None)


def ps_figures(text: str) -> dict:
    """The first running model of `ollama ps` output as observed figures (SIZE in bytes as ps rounds it)."""
    from .ps import parse_ps

    rows = parse_ps(text)
    if not rows:
        return {}
    row = rows[0]
    out = {"ollama_ps_name": row.name, "ollama_ps_size_bytes": row.size_bytes, "ollama_ps_gpu_percent": row.gpu_percent,
           "ollama_ps_gpu_bytes": row.gpu_bytes}
    if row.context is not None:
        out["ollama_ps_context"] = row.context
    return out


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
    """llama.cpp's figures plus Ollama's: ollama_* estimate keys (SCHEMA.md), layers.* and the runner's flags;
    `ollama ps` output gives its ollama_ps_* figures."""
    out = parse_llamacpp(log)
    if _PS_HEADER.search(log):
        out.update(ps_figures(log))
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


def log_settings(log: str) -> dict:
    """The settings the log shows, in Ollama's names: num_ctx per request (the runner's n_ctx over its
    parallel slots), num_parallel, num_gpu when a layer count was requested, the KV type and flash attention,
    and the file's quantization mix (gguf_type)."""
    from ..llamacpp.log_parser import log_settings as llamacpp_settings

    parsed = parse(log)
    cpp = {**llamacpp_settings(log), **parsed.get("ollama_runner_settings", {})}
    known = parsed.get("ollama_parallel") or cpp.get("n_parallel")
    parallel = int(known or 1)
    out: dict = {"num_parallel": parallel} if known else {}
    if cpp.get("n_ctx"):
        out["num_ctx"] = int(cpp["n_ctx"]) // parallel
    if parsed.get("ollama_layers_requested", -1) >= 0:
        out["num_gpu"] = parsed["ollama_layers_requested"]
    if cpp.get("type_k") not in (None, "f16"):
        out["kv_cache_type"] = cpp["type_k"]
    if cpp.get("flash_attn") in ("on", "off"):
        out["flash_attention"] = cpp["flash_attn"] == "on"
    if cpp.get("gguf_type"):
        out["gguf_type"] = cpp["gguf_type"]
    return out


def findings(parsed: dict) -> dict | None:
    """reconcile() as a report section, with `ollama ps` beside the allocation when it was given."""
    rows = [{"figure": d.figure, "values": [d.ollama_mib, d.llamacpp_mib], "delta": d.delta_mib, "why": d.why}
            for d in reconcile(parsed)]
    if "ollama_ps_size_bytes" in parsed:
        allocated = sum(v for k, v in parsed.items() if re.fullmatch(r"\w+_(model|kv|compute|output)_buffer_mib", k))
        size = parsed["ollama_ps_size_bytes"] / 2**20
        rows.append({"figure": "ollama ps SIZE", "values": [round(size, 2), round(allocated, 2) if allocated else None],
                     "delta": round(size - allocated, 2) if allocated else None,
                     "why": "ps prints Ollama's estimate of the model's size (decimal GB, rounded), not the buffers "
                            f"llama.cpp allocated; {parsed['ollama_ps_gpu_percent']}% of it on the GPU"})
    if not rows:
        return None
    return {"title": "Ollama's estimate vs llama.cpp's allocation (MiB)", "columns": ["Ollama", "llama.cpp"],
            "rows": rows}
