"""The worst-case graph llama.cpp reserves its compute buffer for (llama-context.cpp graph_reserve: n_tokens =
min(n_ctx, n_ubatch) split over n_seqs equal sequences, every token an output, the whole KV cache of a stream), as
the tensors the graph allocator places (engines/llamacpp/graph.py, replayed by galloc.py).

Built for the dense decoder families whose builders share one layer shape (llama-model.cpp llm_build_llama,
llm_build_qwen2, llm_build_qwen3 at b6150; src/models/*.cpp at b11312): attn_norm, Q/K/V projections (+ bias,
+ per-head q/k norm), RoPE, the KV-cache stores and the attention of llama-graph.cpp build_attn / build_attn_mha,
the output projection, the residual, ffn_norm, the SwiGLU FFN (build_ffn LLM_FFN_SILU LLM_FFN_PAR), the residual,
and at the end output_norm and the logits. Weights and KV-cache tensors have their own buffers, so a weight is
left out of the sources (it never takes or frees compute bytes); the KV cache is an external leaf its views
point into. The graph generations differ in the rules of engines/llamacpp/releases.py `graph.*`.
"""
from __future__ import annotations

from dataclasses import dataclass

from .graph import F16, F32, I32, I64, Graph, Tensor

FAMILIES = frozenset({"llama", "qwen2", "qwen3", "phi3", "gemma2", "gemma3"})
KQ_MASK_PAD = 64  # ggml.h GGML_KQ_MASK_PAD at b6150


@dataclass(frozen=True)
class Dims:
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    n_vocab: int
    qkv_bias: bool
    qk_norm: bool
    # llm_build_phi3: one fused Q/K/V projection read through views, Q scaled by 1/sqrt(head_dim) after RoPE,
    # one fused gate+up projection (ggml_swiglu of one tensor), the FFN residual added as (residual, ffn_out)
    fused: bool = False
    # llm_build_gemma2_iswa / llm_build_gemma3_iswa: embeddings scaled, Q scaled after RoPE, post-attention and
    # post-FFN norms; Gemma 2 also soft-caps the scores (without flash attention) and the logits
    gemma: bool = False
    attn_softcap: bool = False
    final_softcap: bool = False
    swa_layers: frozenset = frozenset()  # layers on the sliding-window cache (llama_kv_cache_unified_iswa)


@dataclass(frozen=True)
class Reserve:
    """The reserve ubatch and the cache it attends (per stream)."""
    n_tokens: int
    n_stream: int
    n_kv: int
    flash_attn: bool
    generation: int  # 6150 or 11312: the graph generation (releases.py compute.cpu_graph)
    n_kv_swa: int = 0  # cells per stream of the sliding-window cache (iSWA models)
    # b11312, a quantized cache (llama-kv-cache.cpp attn_rot_k / attn_rot_v): the Hadamard matrices' sides
    rot_k: int = 0
    rot_v: int = 0


def _op(op: str, ne, *src, ttype: int = F32) -> Tensor:
    return Tensor(op, ttype, ne, src)


def _view(op: str, t: Tensor, ne) -> Tensor:
    return Tensor(op, t.type, ne, (t,), view_src=t)


def _input(ttype: int, ne) -> Tensor:
    t = Tensor("NONE", ttype, ne)
    t.input = True
    return t


def _norm(x: Tensor) -> Tensor:
    """build_norm LLM_NORM_RMS: ggml_rms_norm then ggml_mul by the weight (same shape, may run in place)."""
    return _op("MUL", x.ne, _op("RMS_NORM", x.ne, x))


def _proj(x: Tensor, rows: int) -> Tensor:
    return _op("MUL_MAT", (rows, x.ne[1], x.ne[2], x.ne[3]), x)


class _Builder:
    def __init__(self, d: Dims, r: Reserve):
        self.d, self.r, self.g = d, r, Graph()
        self.new_graph = r.generation >= 11312
        self.strided: set[int] = set()  # views whose rows are not contiguous (ggml_is_contiguous false)

    def inputs(self) -> Tensor:
        d, r, g = self.d, self.r, self.g
        t = r.n_tokens
        tokens = _input(I32, (t,))
        embd = _op("GET_ROWS", (d.n_embd, t), tokens)
        g.expand(embd)
        if self.new_graph:  # build_inp_embd: the vector-embeddings input beside the tokens (ggml_build_forward_select)
            g.expand(_input(F32, (d.n_embd, t)))
        self.pos = _input(I32, (t,))
        self.sets = {False: self.attn_inputs(r.n_kv)}
        if d.swa_layers:  # build_attn_inp_kv_unified_iswa: the base cache's inputs, then the SWA cache's
            self.sets[True] = self.attn_inputs(r.n_kv_swa)
        self.out_ids = _input(I32, (t,))
        self.cache_k = Tensor("NONE", F16, (1,), external=True)
        self.cache_v = Tensor("NONE", F16, (1,), external=True)
        return embd

    def attn_inputs(self, n_kv: int) -> tuple:
        """(k_idxs, v_idxs, mask, n_kv, flash attention) of one cache (build_attn_inp_kv_unified_impl)."""
        d, r, t = self.d, self.r, self.r.n_tokens
        # build_attn_mha b6150: flash attention only when n_kv % 256 == 0; b11312: whenever enabled
        fa = r.flash_attn and (self.new_graph or n_kv % 256 == 0)
        k_idxs = _input(I64, (t,))
        v_idxs = _input(I64, (t if r.flash_attn else t * d.n_head_kv * d.head_dim,))  # v_trans without FA
        per = t // r.n_stream
        if self.new_graph:  # build_attn_inp_kq_mask: f16 with flash attention, rows unpadded
            mask = _input(F16 if r.flash_attn else F32, (n_kv, per, 1, r.n_stream))
        else:  # f32 rows padded to GGML_KQ_MASK_PAD, cast to f16 for flash attention (once, for every layer)
            mask = _input(F32, (n_kv, -(-per // KQ_MASK_PAD) * KQ_MASK_PAD, 1, r.n_stream))
            if r.flash_attn:
                cast = Tensor("CPY", F16, mask.ne, (mask,))
                cast.src = (mask, cast)  # ggml_cast: src[1] is the result itself
                mask = cast
        rot_k = _input(F32, (r.rot_k, r.rot_k)) if r.rot_k else None  # build_input_k_rot / build_input_v_rot
        rot_v = _input(F32, (r.rot_v, r.rot_v)) if r.rot_v else None
        return k_idxs, v_idxs, mask, n_kv, fa, rot_k, rot_v

    def hadamard(self, x: Tensor, rot: Tensor) -> Tensor:
        """llama-impl.h llama_mul_mat_hadamard: rows of rot's side (a copy when x is strided) times rot."""
        n = rot.ne[0]
        rows = x.ne[0] * x.ne[1] * x.ne[2] * x.ne[3] // n
        res = _op("CONT", (n, rows), x) if id(x) in self.strided else _view("RESHAPE", x, (n, rows))
        return _view("RESHAPE", _op("MUL_MAT", (n, rows), rot, res), x.ne)

    def qkv(self, cur: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        d, t = self.d, self.r.n_tokens
        if d.fused:
            return self.fused_qkv(cur)
        out = []
        for heads, roped in ((d.n_head, True), (d.n_head_kv, True), (d.n_head_kv, False)):
            x = _proj(cur, heads * d.head_dim)
            if d.qkv_bias:
                x = _op("ADD", x.ne, x)
            x = _view("RESHAPE", x, (d.head_dim, heads, t))
            if d.qk_norm and roped:
                x = _norm(x)
            if roped:
                x = _op("ROPE", x.ne, x, self.pos)
            if d.gemma and not out:  # Q scaled by 1/sqrt(query_pre_attn_scalar)
                x = _op("SCALE", x.ne, x)
            out.append(x)
        return out[0], out[1], out[2]

    def fused_qkv(self, cur: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """llm_build_phi3: wqkv, Q and K as 3-d views of it, roped (Q then scaled); V a contiguous copy of its
        2-d view at b6150, a 3-d view at b11312 (cpy_v makes the copy there when V is stored transposed)."""
        d, t = self.d, self.r.n_tokens
        kv_rows = d.n_head_kv * d.head_dim
        wqkv = _proj(cur, d.n_head * d.head_dim + 2 * kv_rows)
        q = _view("VIEW", wqkv, (d.head_dim, d.n_head, t))
        q = _op("SCALE", q.ne, _op("ROPE", q.ne, q, self.pos))
        k = _view("VIEW", wqkv, (d.head_dim, d.n_head_kv, t))
        k = _op("ROPE", k.ne, k, self.pos)
        if self.new_graph:
            v = _view("VIEW", wqkv, (d.head_dim, d.n_head_kv, t))
            self.strided.add(id(v))
        else:
            v = _view("RESHAPE", _op("CONT", (kv_rows, t), _view("VIEW", wqkv, (kv_rows, t))), (d.head_dim, d.n_head_kv, t))
        return q, k, v

    def store(self, k: Tensor, v: Tensor, k_idxs: Tensor, v_idxs: Tensor, fa: bool) -> None:
        """build_attn's KV-cache stores (llama-kv-cache cpy_k / cpy_v with set_rows): views, no bytes."""
        d, t, g = self.d, self.r.n_tokens, self.g
        rows = d.n_head_kv * d.head_dim
        k2 = _view("VIEW" if self.new_graph else "RESHAPE", k, (rows, t))
        ks = (k2, k_idxs, self.cache_k) if self.new_graph else (k2, k_idxs)
        g.expand(Tensor("SET_ROWS", F16, (rows, t), ks, view_src=self.cache_k))
        if fa:
            v2 = _view("VIEW" if self.new_graph else "RESHAPE", v, (rows, t))
        elif id(v) in self.strided:  # cpy_v: a V that is a strided view is copied (ggml_cont_2d)
            v2 = _view("RESHAPE", _op("CONT", (rows, t), v), (1, rows * t))
        else:
            v2 = _view("RESHAPE", _view("RESHAPE", v, (rows, t)), (1, rows * t))
        dest = _view("RESHAPE", self.cache_v, (1, rows * t)) if self.new_graph and not fa else self.cache_v
        vs = (v2, v_idxs, dest) if self.new_graph else (v2, v_idxs)
        g.expand(Tensor("SET_ROWS", F16, v2.ne, vs, view_src=self.cache_v))

    def attention(self, q: Tensor, k: Tensor, v: Tensor, swa: bool) -> Tensor:
        d, r, g = self.d, self.r, self.g
        k_idxs, v_idxs, mask, nkv, fa, rot_k, rot_v = self.sets[swa]
        if rot_k is not None:
            q, k = self.hadamard(q, rot_k), self.hadamard(k, rot_k)
        if rot_v is not None:
            v = self.hadamard(v, rot_v)
        # build_attn expands q, k, v (b6150; the iSWA variant still at b11312), q, v, k (b11312)
        for x in ((q, v, k) if self.new_graph and not d.swa_layers else (q, k, v)):
            g.expand(x)
        self.store(k, v, k_idxs, v_idxs, fa)
        per, ns = r.n_tokens // r.n_stream, r.n_stream
        qv = _view("PERMUTE", _view("VIEW" if self.new_graph else "RESHAPE", q, (d.head_dim, d.n_head, per, ns)),
                   (d.head_dim, per, d.n_head, ns))
        kv = _view("PERMUTE", _view("VIEW", self.cache_k, (d.head_dim, d.n_head_kv, nkv, ns)),
                   (d.head_dim, nkv, d.n_head_kv, ns))
        if fa:
            vv = _view("PERMUTE", _view("VIEW", self.cache_v, (d.head_dim, d.n_head_kv, nkv, ns)),
                       (d.head_dim, nkv, d.n_head_kv, ns))
            out = _op("FLASH_ATTN_EXT", (d.head_dim, d.n_head, per, ns), qv, kv, vv, mask)
            out = _view("RESHAPE", out, (d.head_dim * d.n_head, r.n_tokens))
            return self.hadamard(out, rot_v) if rot_v is not None else out
        vv = _view("PERMUTE", _view("VIEW", self.cache_v, (nkv, d.n_head_kv, d.head_dim, ns)),
                   (nkv, d.head_dim, d.n_head_kv, ns))
        kq = _op("MUL_MAT", (nkv, per, d.n_head, ns), kv, qv)
        if d.attn_softcap:  # build_attn_mha: scale, tanh, scale (each in place)
            kq = _op("SCALE", kq.ne, _op("UNARY", kq.ne, _op("SCALE", kq.ne, kq)))
        kq = _op("SOFT_MAX", kq.ne, kq, mask)
        kqv = _op("MUL_MAT", (d.head_dim, per, d.n_head, ns), vv, kq)
        out = _op("CONT", (d.head_dim * d.n_head, r.n_tokens), _view("PERMUTE", kqv, (d.head_dim, d.n_head, per, ns)))
        return self.hadamard(out, rot_v) if rot_v is not None else out

    def layer(self, inp: Tensor, il: int, last: bool) -> Tensor:
        d = self.d
        cur = _norm(inp)
        cur = _proj(self.attention(*self.qkv(cur), il in d.swa_layers), d.n_embd)
        if last:  # the last layer keeps the output rows only (inp_out_ids, every token here)
            cur = _op("GET_ROWS", cur.ne, cur, self.out_ids)
            inp = _op("GET_ROWS", inp.ne, inp, self.out_ids)
        if d.gemma:
            cur = _norm(cur)  # post_attention_norm
        ffn_inp = _op("ADD", cur.ne, cur, inp)
        cur = _norm(ffn_inp)
        if d.fused:
            up = _proj(cur, 2 * d.n_ff)
            cur = _proj(_op("GLU", (d.n_ff, up.ne[1]), up), d.n_embd)
            return _op("ADD", cur.ne, ffn_inp, cur)
        gate, up = _proj(cur, d.n_ff), _proj(cur, d.n_ff)
        cur = _proj(_op("GLU", gate.ne, gate, up), d.n_embd)  # SwiGLU, GeGLU for Gemma
        if d.gemma:
            cur = _norm(cur)  # post_ffw_norm
        return _op("ADD", cur.ne, cur, ffn_inp)

    def build(self) -> Graph:
        d = self.d
        cur = self.inputs()
        if d.gemma:
            cur = _op("SCALE", cur.ne, cur)  # inp_scaled: x sqrt(n_embd)
        for il in range(d.n_layer):
            cur = self.layer(cur, il, il == d.n_layer - 1)
        norm = _norm(cur)
        logits = _proj(norm, d.n_vocab)
        if d.final_softcap:  # final_logit_softcapping: scale, tanh, scale (in place)
            logits = _op("SCALE", logits.ne, _op("UNARY", logits.ne, _op("SCALE", logits.ne, logits)))
        if self.new_graph:  # res->t_embd / t_logits are graph outputs (never freed, never reused in place)
            norm.output = logits.output = True
        self.g.expand(logits)
        return self.g


def reserve_graph(d: Dims, r: Reserve) -> Graph:
    return _Builder(d, r).build()
