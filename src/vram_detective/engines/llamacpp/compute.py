"""Compute buffers (llama-context.cpp graph_reserve -> ggml_backend_sched_reserve on the worst-case graph:
n_ubatch tokens against the whole KV). A documented APPROXIMATION of the graph allocator's peak, not a graph
walk. Fitted on four full-offload dev cases (named in scripts/calibration_cases.json, `llamacpp`
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
    (no hole fits them) at the end of the highest live tensor. With flash attention the f16 mask kept across the
    layers moves it (1-3 rows in most loads, 10-32 MiB in some Qwen ones; tests/test_llamacpp_cpu_groundtruth.py
    keeps that gap as a strict xfail): an exact figure needs the allocator replayed over the graph."""
    from .calibration import CPU_ATTENTION_ACTIVATIONS

    logits = g.n_vocab * n_ubatch * 4 + hidden_rows * n_ubatch * g.n_embd * 4
    if flash_attn:
        return logits
    attention = (g.n_head + 1) * n_kv * n_ubatch * 4 + round(CPU_ATTENTION_ACTIVATIONS * n_ubatch * g.n_embd * 4)
    return max(logits, attention)


def output_buffer_bytes(n_vocab: int, n_seq_max: int, n_embd: int = 0, embeddings: bool = False) -> int:
    return (n_vocab + (n_embd if embeddings else 0)) * max(n_seq_max, 1) * 4
