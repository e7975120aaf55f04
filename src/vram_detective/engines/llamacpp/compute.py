"""Compute buffers (llama-context.cpp graph_reserve -> ggml_backend_sched_reserve on the worst-case graph:
n_ubatch tokens against the whole KV). A CPU-only build of a modelled family and build gets the graph itself
replayed through ggml-alloc (cpu_graph_bytes: graph_llm.py + galloc.py, exact); everything else a documented
APPROXIMATION of the graph allocator's peak, not a graph walk. Fitted on four full-offload dev cases (named in scripts/calibration_cases.json, `llamacpp`
COMPUTE_BUFFERS; errors in benchmarks/llamacpp_accuracy.py).

- CUDA_Host compute (inputs kept on the host): the f32 KQ mask n_kv x n_ubatch plus the token embeddings
  n_ubatch x n_embd, f32 (exact on 7 of the 9 dev cases that print it at full offload).
- GPU compute: the larger of the attention step and the logits step. Without flash attention the KQ scores
  n_head x n_kv x n_ubatch f32 are live (soft_max runs in place); with it they are not. The logits step holds
  n_vocab x n_ubatch f32 (every token is an output in the reserve graph) with the normed hidden state.
  Around either peak: n_ubatch x (n_embd + n_ff) f32 of activations.
- CUDA_Host output buffer (llama-context.cpp output_reserve): (n_vocab [+ n_embd with embeddings]) x
  max(n_seq_max, 1) x 4 bytes.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

MIB = 1024 * 1024


@dataclass(frozen=True)
class GraphShape:
    n_embd: int
    n_head: int
    n_ff: int  # the dense FFN width (MoE: the active experts' width x experts per token)
    n_vocab: int


def host_compute_bytes(n_kv: int, n_ubatch: int, n_embd: int) -> int:
    return n_kv * n_ubatch * 4 + n_ubatch * n_embd * 4


def gpu_compute_bytes(g: GraphShape, n_kv: int, n_ubatch: int, flash_attn: bool) -> int:
    activations = n_ubatch * (g.n_embd + g.n_ff) * 4
    attention = (0 if flash_attn else g.n_head * n_kv * n_ubatch * 4) + activations
    logits = g.n_vocab * n_ubatch * 4 + activations
    return max(attention, logits)


def cpu_compute_bytes(g: GraphShape, n_kv: int, n_ubatch: int, flash_attn: bool, hidden_rows: int = 2) -> int:
    """A CPU-only build's compute buffer: ggml_backend_sched_reserve on one CPU backend allocates the whole
    worst-case graph (n_ubatch tokens, every token an output, n_kv cells of one stream) with ggml-alloc's
    reuse, so the buffer is the larger of two peaks (llama-context.cpp graph_reserve, 0.3.16 / 0.3.36 trees):
    - logits: the n_vocab x n_ubatch f32 output beside `hidden_rows` n_ubatch x n_embd f32 tensors of the
      last hidden state (normed and scaled by output_norm: 2 measured at b6150, 3 at b11312; releases
      compute.cpu_logits_hidden_rows);
    - attention without flash attention: the KQ scores n_head x n_kv x n_ubatch f32 (soft_max runs in place)
      and the f32 KQ mask n_kv x n_ubatch, with the layer's live activations (calibration
      CPU_ATTENTION_ACTIVATIONS x n_ubatch x n_embd f32). With flash attention no score matrix is kept.
    The rows count is where the allocator left the final hidden state: ggml_dyn_tallocr_alloc puts the logits
    (no hole fits them) at the end of the highest live tensor, and with flash attention the f16 mask kept across
    the layers moves it: the families cpu_graph_bytes models get the allocator replayed instead; this closed form
    is for the others (within ~1 % on the real Gemma 2/3 and Phi-3 loads)."""
    from .calibration import CPU_ATTENTION_ACTIVATIONS

    logits = g.n_vocab * n_ubatch * 4 + hidden_rows * n_ubatch * g.n_embd * 4
    if flash_attn:
        return logits
    attention = (g.n_head + 1) * n_kv * n_ubatch * 4 + round(CPU_ATTENTION_ACTIVATIONS * n_ubatch * g.n_embd * 4)
    return max(logits, attention)


def cpu_graph_bytes(spec, cells: int, streams: int, n_ubatch: int, flash_attn: bool, type_k: str, type_v: str,
                    generation: int | None, swa_layers: frozenset = frozenset(), swa_cells: int = 0) -> int | None:
    """A CPU-only build's compute buffer as ggml-alloc reserves it for the worst-case graph (llama-context.cpp
    graph_reserve: n_ubatch tokens as `streams` equal sequences, every one an output, `cells` KV cells per
    stream, `swa_cells` on the sliding-window cache of `swa_layers`), replayed over the graph the build
    constructs (graph_llm.py) by galloc.py. None where that graph is not modelled: other families, MoE models,
    builds before b6150 (releases compute.cpu_graph), an f32 cache (cast before flash attention)."""
    from .graph_llm import FAMILIES, Reserve

    if (generation is None or spec.family not in FAMILIES or spec.moe is not None or spec.mla is not None
            or spec.hybrid is not None or not spec.gated_mlp or spec.o_bias or spec.mlp_bias
            or spec.attention_sinks or "f32" in (type_k, type_v)):
        return None
    # llama-kv-cache.cpp (0.3.36 tree) attn_rot_k / attn_rot_v: a quantized cache with head_dim % 64 == 0 gets
    # Hadamard rotations, K's side the largest power of two (>= 64) dividing head_dim, V's 64
    rot_k = rot_v = 0
    if generation >= 11312 and spec.head_dim % 64 == 0:
        if type_k not in ("f16", "bf16"):
            rot_k = max(n for n in (64, 128, 256, 512, 1024) if spec.head_dim % n == 0)
        if type_v not in ("f16", "bf16"):
            rot_v = 64

    n_tokens = -(-n_ubatch // streams) * streams if generation >= 11312 else n_ubatch // streams * streams
    dims = graph_dims(spec, swa_layers)
    return _replayed(dims, Reserve(n_tokens, streams, cells, flash_attn, generation, swa_cells or cells, rot_k, rot_v))


def graph_dims(spec, swa_layers: frozenset = frozenset()):
    """The layer shape graph_llm.py builds for `spec` (its family's builder)."""
    from .graph_llm import Dims

    gemma2 = spec.family == "gemma2"
    # Gemma 3's builder soft-caps the logits only when the GGUF carries final_logit_softcapping (0.3.36 tree
    # src/models/gemma3.cpp); Gemma 3's configs leave it null, so only Gemma 2 (llm_build_gemma2_iswa) caps them
    return Dims(spec.num_layers, spec.hidden_size, spec.num_attention_heads, spec.num_kv_heads, spec.head_dim,
                spec.intermediate_size, spec.vocab_size, spec.qkv_bias, spec.qk_norm, spec.family == "phi3",
                spec.family.startswith("gemma"), gemma2, gemma2, frozenset(swa_layers))


@lru_cache(maxsize=64)
def _replayed(dims, reserve) -> int:
    """(sweeps ask for the same graph again and again: a replay costs ~10-40 ms)"""
    from . import galloc
    from .graph_llm import reserve_graph

    return galloc.reserve(reserve_graph(dims, reserve), free_extra_space=reserve.generation >= 11312)


def output_buffer_bytes(n_vocab: int, n_seq_max: int, n_embd: int = 0, embeddings: bool = False) -> int:
    return (n_vocab + (n_embd if embeddings else 0)) * max(n_seq_max, 1) * 4
