"""Without the GGUF file: the tensor table llama.cpp's quantizer writes for a file type (src/llama-quant.cpp
llama_tensor_get_type, 0.3.16 tree = build ~6150), for llama-style decoders (dense and MoE) from a ModelSpec.

Per-tensor rules modelled (ftypes Q4_0, Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M, Q6_K, Q8_0, IQ4_XS, F16, BF16):
- output.weight (or token_embd when the output is tied): Q6_K unless the mix is Q8_0 / 16-bit;
- attn_v: Q4_K_M / Q5_K_M -> Q6_K on use_more_bits layers (first 1/8, last 1/8, every third between);
  Q4_K_S -> Q5_K on the first 4; IQ4_XS -> Q5_K when n_gqa >= 4; 8-expert models -> Q8_0 (also attn_k);
- ffn_down (experts included, layer from the name): Q4_K_M / Q5_K_M -> Q6_K on use_more_bits layers;
  Q4_K_S -> Q5_K on the first 1/8; IQ4_XS -> Q5_K on the first 1/8 without an imatrix;
- attn_output: 8-expert models -> Q5_K for the 4-bit K / IQ mixes;
- attn_qkv (fused, Phi-3): Q4_K_M -> Q5_K, Q5_K_M -> Q6_K; attn_kv_b / attn_k_b / attn_v_b (MLA) take no
  attn_v bump (the rule matches the name "attn_v.weight" only), so they keep the mix's base type;
- 1-D tensors (norms, biases) and ffn_gate_inp stay F32; rows not a multiple of the block fall back
  (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, IQ4_XS -> IQ4_NL).
Layouts per family (the names and shapes convert_hf_to_gguf.py writes and src/llama-model.cpp load_tensors creates,
0.3.16 tree): llama-style q/k/v/gate/up/down; Phi-3 fused attn_qkv {n_embd, n_embd + 2 n_embd_gqa} and ffn_up
{n_embd, 2 n_ff} (gate and up, no ffn_gate); GLM-4 split q/k/v (biases optional), fused ffn_up {n_embd, 2 n_ff},
attn_post_norm and ffn_post_norm; Gemma 3 q/k norms plus attn_post_norm / ffn_post_norm, no output tensor
(token_embd takes the output's type: llama-quant.cpp !has_output); DeepSeek-V2 MLA: attn_q (Lite) or attn_q_a /
attn_q_a_norm / attn_q_b, attn_kv_a_mqa {n_embd, kv_lora + rope}, attn_kv_a_norm, then attn_kv_b {kv_lora, n_head
(nope + v)} in files converted before the MLA split, or attn_k_b {nope, kv_lora, n_head} and attn_v_b {kv_lora, v,
n_head} after it (convert_hf_to_gguf.py DeepseekV2Model.modify_tensors), the first n_layer_dense_lead layers dense.
Known gaps: Unsloth "UD" dynamic mixes and imatrix-chosen types are not the stock rules.
"""
from __future__ import annotations

from .ggml_types import ggml_type
from .weights import GgufTensor

BASE_TYPE = {"Q4_0": "Q4_0", "Q4_K_S": "Q4_K", "Q4_K_M": "Q4_K", "Q5_K_S": "Q5_K", "Q5_K_M": "Q5_K",
             "Q6_K": "Q6_K", "Q8_0": "Q8_0", "IQ4_XS": "IQ4_XS", "F16": "F16", "BF16": "BF16"}
_FALLBACK = {"Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0", "IQ4_XS": "IQ4_NL", "Q2_K": "IQ4_NL", "Q3_K": "IQ4_NL"}


def use_more_bits(i_layer: int, n_layer: int) -> bool:
    return i_layer < n_layer // 8 or i_layer >= 7 * n_layer // 8 or (i_layer - n_layer // 8) % 3 == 2


def pick_type(name: str, layer: int, n_layer: int, ftype: str, n_gqa: int, n_expert: int,
              has_imatrix: bool = True) -> str:
    """The stock quantizer's type for one 2-D weight."""
    base = BASE_TYPE[ftype]
    if ftype in ("F16", "BF16"):
        return base
    if name == "output.weight":
        return "Q8_0" if base == "Q8_0" else "Q6_K"
    if "attn_v.weight" in name:
        if n_expert == 8:
            return "Q8_0"
        if ftype == "IQ4_XS" and n_gqa >= 4:
            return "Q5_K"
        if ftype in ("Q4_K_M", "Q5_K_M") and use_more_bits(layer, n_layer):
            return "Q6_K"
        if ftype == "Q4_K_S" and layer < 4:
            return "Q5_K"
        return base
    if "attn_k.weight" in name and n_expert == 8:
        return "Q8_0"
    if "ffn_down" in name:
        if ftype in ("Q4_K_M", "Q5_K_M") and use_more_bits(layer, n_layer):
            return "Q6_K"
        if ftype in ("Q4_K_S", "IQ4_XS") and layer < n_layer // 8 and (ftype == "Q4_K_S" or not has_imatrix):
            return "Q5_K"
        return base
    if "attn_qkv.weight" in name and ftype in ("Q4_K_M", "Q5_K_M"):
        return "Q5_K" if ftype == "Q4_K_M" else "Q6_K"
    if "attn_output.weight" in name and n_expert == 8 and ftype in ("Q4_K_S", "Q4_K_M", "IQ4_XS"):
        return "Q5_K"
    return base


def _fit(type_name: str, ne0: int) -> str:
    while ne0 % ggml_type(type_name).blck_size and type_name in _FALLBACK:
        type_name = _FALLBACK[type_name]
    return type_name


def _attention_rows(spec, mla_split: bool) -> list[tuple[str, tuple[int, ...]]]:
    h, hd = spec.hidden_size, spec.head_dim
    q, kv = spec.num_attention_heads * hd, spec.num_kv_heads * hd
    if spec.mla is not None:  # llama-model.cpp LLM_ARCH_DEEPSEEK2
        m, n_head = spec.mla, spec.num_attention_heads
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        rows = [("attn_kv_a_norm.weight", (m.kv_lora_rank,)),
                ("attn_kv_a_mqa.weight", (h, m.kv_lora_rank + m.qk_rope_head_dim))]
        if m.q_lora_rank:
            rows += [("attn_q_a_norm.weight", (m.q_lora_rank,)), ("attn_q_a.weight", (h, m.q_lora_rank)),
                     ("attn_q_b.weight", (m.q_lora_rank, n_head * qk))]
        else:
            rows.append(("attn_q.weight", (h, n_head * qk)))
        if mla_split:
            rows += [("attn_k_b.weight", (m.qk_nope_head_dim, m.kv_lora_rank, n_head)),
                     ("attn_v_b.weight", (m.kv_lora_rank, m.v_head_dim, n_head))]
        else:
            rows.append(("attn_kv_b.weight", (m.kv_lora_rank, n_head * (m.qk_nope_head_dim + m.v_head_dim))))
        return rows + [("attn_output.weight", (n_head * m.v_head_dim, h))]
    if spec.family == "phi3":  # LLM_ARCH_PHI3: one fused attn_qkv
        return [("attn_qkv.weight", (h, q + 2 * kv)), ("attn_output.weight", (q, h))]
    rows = [("attn_q.weight", (h, q)), ("attn_k.weight", (h, kv)), ("attn_v.weight", (h, kv)),
            ("attn_output.weight", (q, h))]
    if spec.qkv_bias:
        rows += [("attn_q.bias", (q,)), ("attn_k.bias", (kv,)), ("attn_v.bias", (kv,))]
    if spec.qk_norm:
        rows += [("attn_q_norm.weight", (hd,)), ("attn_k_norm.weight", (hd,))]
    return rows


def _ffn_rows(spec, il: int) -> list[tuple[str, tuple[int, ...]]]:
    h, moe = spec.hidden_size, spec.moe
    if moe is not None and il not in moe.dense_layers:
        e, f = moe.num_experts, moe.expert_intermediate
        rows = [("ffn_gate_inp.weight", (h, e)), ("ffn_gate_exps.weight", (h, f, e)),
                ("ffn_up_exps.weight", (h, f, e)), ("ffn_down_exps.weight", (f, h, e))]
        if moe.shared_intermediate:
            s = moe.shared_intermediate
            rows += [("ffn_gate_shexp.weight", (h, s)), ("ffn_up_shexp.weight", (h, s)), ("ffn_down_shexp.weight", (s, h))]
        return rows
    f = spec.intermediate_size
    if spec.family in FUSED_GATE_UP:  # gate and up in one ffn_up of 2 n_ff rows
        return [("ffn_up.weight", (h, 2 * f)), ("ffn_down.weight", (f, h))]
    return [("ffn_gate.weight", (h, f)), ("ffn_up.weight", (h, f)), ("ffn_down.weight", (f, h))]


FUSED_GATE_UP = ("phi3", "glm4")  # llama-model.cpp LLM_ARCH_PHI3 / LLM_ARCH_GLM4 ffn_up {n_embd, 2 n_ff}
# post_attention_norm + post_ffw_norm per layer (llama-arch.cpp LLM_TENSOR_ATTN_POST_NORM / FFN_POST_NORM names;
# LLM_ARCH_GLM4, LLM_ARCH_GEMMA2, LLM_ARCH_GEMMA3)
POST_NORMS = ("glm4", "gemma2", "gemma3")


def _layer_shapes(spec, il: int, mla_split: bool = True) -> list[tuple[str, tuple[int, ...]]]:
    h = spec.hidden_size
    rows = [("attn_norm.weight", (h,)), *_attention_rows(spec, mla_split), ("ffn_norm.weight", (h,))]
    if spec.family in POST_NORMS:
        rows += [("post_attention_norm.weight", (h,)), ("post_ffw_norm.weight", (h,))]
    rows += _ffn_rows(spec, il)
    return [(f"blk.{il}.{n}", ne) for n, ne in rows]


def _typed(name: str, ne: tuple[int, ...], layer: int, spec, ftype: str, has_imatrix: bool) -> GgufTensor:
    if len(ne) == 1 or "ffn_gate_inp" in name:
        return GgufTensor(name, "F32", ne)
    n_expert = spec.moe.num_experts if spec.moe else 0
    n_gqa = spec.num_attention_heads // max(spec.num_kv_heads, 1)
    chosen = pick_type(name, layer, spec.num_layers, ftype, n_gqa, n_expert, has_imatrix)
    return GgufTensor(name, _fit(chosen, ne[0]), ne)


def loader_order(t) -> tuple[int, str]:
    """llama_model_quantize writes the tensors in llama_model_loader's weights_map order
    (llama-model-loader.h weight_name_comparer, 0.3.16 and 0.3.36 trees): non-layer tensors first (layer -1),
    then by block number, names in byte order within one; the mmap span's ends follow from it."""
    layer = t.name.split(".")[1] if t.name.startswith("blk.") else ""
    return (int(layer) if layer.isdigit() else -1, t.name)


def quantized_tensors(spec, ftype: str, has_imatrix: bool = True, mla_split: bool = True,
                      order: str = "quantize") -> list[GgufTensor]:
    """The tensor table (in the order llama-quantize writes it, loader_order; offsets laid end to end).
    mla_split: an MLA model's file carries attn_k_b / attn_v_b (converted since the split) or attn_kv_b.
    order "convert": a file in convert_hf_to_gguf's order (token_embd, layers, output_norm, output), as the
    quantizers before the sorted weights_map kept it (2023 files)."""
    h, vocab = spec.hidden_size, spec.vocab_size
    out = [_typed("token_embd.weight", (h, vocab), 0, spec, ftype, has_imatrix)]
    if spec.tie_word_embeddings:  # no output tensor: the embedding takes the output's type
        out[0] = GgufTensor("token_embd.weight", _fit(pick_type("output.weight", 0, 1, ftype, 1, 0), h), (h, vocab))
    for il in range(spec.num_layers):
        out += [_typed(n, ne, il, spec, ftype, has_imatrix) for n, ne in _layer_shapes(spec, il, mla_split)]
    out.append(GgufTensor("output_norm.weight", "F32", (h,)))
    if not spec.tie_word_embeddings:
        out.append(_typed("output.weight", (h, vocab), spec.num_layers, spec, ftype, has_imatrix))
    laid, offset = [], 0
    for t in (out if order == "convert" else sorted(out, key=loader_order)):
        laid.append(GgufTensor(t.name, t.type_name, t.ne, offset))
        offset += -(-t.nbytes // 32) * 32  # GGUF aligns each tensor's data to general.alignment (32)
    return laid
