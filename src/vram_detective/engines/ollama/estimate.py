"""Ollama's own memory estimate and layer-offload decision (llm/memory.go EstimateGPULayers and
fs/ggml GraphSize of the llama.cpp-runner era), the figures its "offload to cuda" line prints.

- kv[i] = num_ctx x (head_k + head_v) x n_head_kv x bytes per element (f16 2, q8_0 1, q4_0 0.5), where num_ctx
  is already multiplied by num_parallel;
- graph (full / partial offload) by architecture: llama and qwen2 formulas; others fall back to
  partial = GQA x kv_total / 6, full = partial;
- each GPU starts at its minimum memory (457 MiB on CUDA) plus one layer's size as a buffer; layers (weights
  + their KV) are placed while free > overhead + allocation + max(graph full, partial) + layer; the output
  layer (output_norm + output, or token_embd when tied) last; the graph is added to every GPU used;
- memory.weights.total sums the layers' sizes with their KV (so it exceeds the file) and `repeating` is that
  minus the output layer — quirks of that era's memory.go, reproduced because its log prints them.
Checked on the dev T4 case: graph full 560.0 MiB, partial 677.5 MiB, kv 1.0 GiB, weights 4.7 / 4.3 GiB /
411.0 MiB, required 6.2 GiB, all 33 layers: every printed figure.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..llamacpp.weights import GgufTensor

MIB = 1024 * 1024
_BLK = re.compile(r"^blk\.(\d+)\.")
KV_BYTES = {"f16": 2.0, "q8_0": 1.0, "q4_0": 0.5}
ARCH_OF_FAMILY = {"mistral": "llama", "llama": "llama", "qwen2": "qwen2"}


@dataclass(frozen=True)
class ModelShape:
    arch: str  # GGUF general.architecture
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_k: int
    head_v: int
    n_vocab: int


@dataclass(frozen=True)
class OllamaEstimate:
    layers_requested: int
    layers_model: int  # block count + 1 (the output layer)
    layers_offload: int
    allocations: tuple[int, ...]  # bytes per GPU
    required_full: int  # everything (memory.required.full)
    required_partial: int  # what goes on the GPUs (memory.required.partial)
    kv: int
    weights_total: int
    weights_repeating: int
    weights_nonrepeating: int
    graph_full: int
    graph_partial: int
    available: tuple[int, ...]

    @property
    def fully_loaded(self) -> bool:
        return self.layers_offload >= self.layers_model


def shape_of(spec) -> ModelShape:
    return ModelShape(ARCH_OF_FAMILY.get(spec.family, spec.family), spec.num_layers, spec.hidden_size,
                      spec.num_attention_heads, spec.num_kv_heads, spec.head_dim, spec.head_dim, spec.vocab_size)


def graph_size(m: ModelShape, context: int, batch: int, kv_total: int) -> tuple[int, int]:
    """(partial, full) graph estimate in bytes (fs/ggml/ggml.go GraphSize of the llama.cpp-runner era)."""
    e, h, hkv, v, c, b = m.n_embd, m.n_head, m.n_head_kv, m.n_vocab, context, batch
    if m.arch == "llama":
        full = max(4 * b * (1 + 4 * e + c * (1 + h)), 4 * b * (e + v))
        partial = 4 * b * e + max(
            4 * b * (1 + e + max(c, e)) + e * e * 9 // 16 + 4 * c * (b * h + m.head_k * hkv),
            4 * b * (e + v) + e * v * 105 // 128)
        return partial, full
    if m.arch == "qwen2":
        full = max(4 * b * (e + v), 4 * b * (1 + 2 * e + c + c * h))
        partial = max(4 * b * (e + v) + e * v * 105 // 128, 4 * (b * (1 + 2 * e + c * (1 + h)) + e * (1 + c)))
        return partial, full
    partial = (h // max(hkv, 1)) * kv_total // 6
    return partial, partial


def _groups(tensors: list[GgufTensor]) -> tuple[dict[int, int], int]:
    """Bytes per repeating layer, and the output layer's bytes (output_norm + output, else token_embd)."""
    layers: dict[int, int] = {}
    named = {t.name: t.nbytes for t in tensors}
    for t in tensors:
        if m := _BLK.match(t.name):
            layers[int(m.group(1))] = layers.get(int(m.group(1)), 0) + t.nbytes
    output = named.get("output_norm.weight", 0) + named.get("output.weight", named.get("token_embd.weight", 0))
    return layers, output


def estimate(tensors: list[GgufTensor], m: ModelShape, free: list[int], context: int, batch: int = 512,
             kv_type: str = "f16", num_gpu: int = -1, minimum: int = 457 * MIB, overhead: int = 0) -> OllamaEstimate:
    """Where Ollama decides to put the layers, and the figures it logs."""
    layers, output = _groups(tensors)
    per_kv = int(context * (m.head_k + m.head_v) * m.n_head_kv * KV_BYTES.get(kv_type, 2.0))
    kv = [per_kv] * m.n_layer
    graph_partial, graph_full = graph_size(m, context, batch, sum(kv))
    graph = max(graph_partial, graph_full)
    layer_size = layers.get(0, 0)
    alloc = [0] * len(free)
    space = [i for i, f in enumerate(free) if f >= overhead + graph + minimum + 2 * layer_size]
    for i in space:
        alloc[i] += minimum + layer_size
    counts, placed, overflow, weights = [0] * len(free), 0, 0, 0
    for il in range(m.n_layer):
        size = layers.get(il, 0) + kv[il]
        weights += size
        if 0 <= num_gpu <= placed:
            overflow += size
            continue
        placed, space, fitted = _place(space, free, alloc, counts, il, size, graph, overhead, placed)
        overflow += 0 if fitted else size
    if output and (num_gpu < 0 or placed < num_gpu):
        placed, space, fitted = _place(space, free, alloc, counts, placed, output, graph, overhead, placed)
        overflow += 0 if fitted else output
    full = placed >= m.n_layer + 1
    for i, n in enumerate(counts):
        alloc[i] += (graph_full if full else graph_partial) if n > 0 else 0
    partial_total = sum(alloc)
    return OllamaEstimate(num_gpu, m.n_layer + 1, placed, tuple(alloc), partial_total + overflow, partial_total,
                          sum(kv), weights, weights - output, output, graph_full, graph_partial,
                          tuple(free))


def _place(space, free, alloc, counts, index, size, graph, overhead, placed):
    """Try the GPUs with space (round robin by index); a GPU that cannot take it leaves the list."""
    space = list(space)
    while space:
        g = space[index % len(space)]
        if free[g] > overhead + alloc[g] + graph + size:
            alloc[g] += size
            counts[g] += 1
            return placed + 1, space, True
        space.remove(g)
    return placed, space, False


def human_bytes2(n: int) -> str:
    """format.HumanBytes2: binary units, one decimal."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def log_line(e: OllamaEstimate) -> str:
    """The 'offload to cuda' line of server.go / memory.go for this estimate."""
    gib = ", ".join(human_bytes2(a) for a in e.available)
    allocs = ", ".join(human_bytes2(a) for a in e.allocations)
    return (f'msg="offload to cuda" layers.requested={e.layers_requested} layers.model={e.layers_model} '
            f'layers.offload={e.layers_offload} layers.split="" memory.available="[{gib}]" memory.gpu_overhead="0 B" '
            f'memory.required.full="{human_bytes2(e.required_full)}" memory.required.partial="{human_bytes2(e.required_partial)}" '
            f'memory.required.kv="{human_bytes2(e.kv)}" memory.required.allocations="[{allocs}]" '
            f'memory.weights.total="{human_bytes2(e.weights_total)}" memory.weights.repeating="{human_bytes2(e.weights_repeating)}" '
            f'memory.weights.nonrepeating="{human_bytes2(e.weights_nonrepeating)}" '
            f'memory.graph.full="{human_bytes2(e.graph_full)}" memory.graph.partial="{human_bytes2(e.graph_partial)}"')
