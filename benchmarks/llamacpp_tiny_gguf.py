"""Small GGUF files llama.cpp loads, written with the gguf package: a tiny llama (Q8_0 / Q4_0 / F16 mix), a
tiny Qwen3-MoE, a tiny Gemma 3 (sliding-window layers, tied output) and a tiny CLIP vision projector.

    python3 benchmarks/llamacpp_tiny_gguf.py OUT_DIR        (writes tiny-llama.gguf, tiny-moe.gguf, ...)

Used by benchmarks/llamacpp_gpu_groundtruth.sh (real llama.cpp runs on a GPU machine) and by the tests. The
vocabulary is a SentencePiece-style list (<unk>, <s>, </s>, 256 byte tokens, then plain words), enough for
llama.cpp's tokenizer to load and encode any prompt by byte fallback. Weights are random (seeded): only
shapes and types matter for memory.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

VOCAB = 4096
N_EMBD, N_FF, N_HEAD, N_HEAD_KV, HEAD_DIM, N_LAYER = 512, 1408, 8, 2, 64, 6  # 1408 % 512: CUDA row padding
N_EXPERT, N_EXPERT_USED, N_FF_EXP = 8, 2, 256
SWA = 128


def _rng():
    return np.random.default_rng(0)


def _vocab(w) -> None:
    import gguf

    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]
    tokens += [f"\u2581w{i}" for i in range(VOCAB - len(tokens))]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL] + [gguf.TokenType.BYTE] * 256
    types += [gguf.TokenType.NORMAL] * (VOCAB - len(types))
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * VOCAB)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)


def _tensor(w, name: str, shape: tuple[int, ...], qtype: str = "F32") -> None:
    """shape in numpy order (rows last = ggml ne[0]); qtype F32, F16, Q8_0 or Q4_0."""
    import gguf

    data = (_rng().standard_normal(shape) * 0.02).astype(np.float32)
    if qtype == "F32":
        w.add_tensor(name, data)
    elif qtype == "F16":
        w.add_tensor(name, data.astype(np.float16))
    else:
        kind = gguf.GGMLQuantizationType[qtype]
        w.add_tensor(name, gguf.quants.quantize(data, kind), raw_dtype=kind)


def _common(w, arch: str, n_layer: int) -> None:
    w.add_context_length(8192)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(10000.0)
    w.add_file_type(7)  # MOSTLY_Q8_0
    _vocab(w)


def _attention(w, il: int, qtype: str, norms: bool = False) -> None:
    _tensor(w, f"blk.{il}.attn_norm.weight", (N_EMBD,))
    _tensor(w, f"blk.{il}.attn_q.weight", (N_HEAD * HEAD_DIM, N_EMBD), qtype)
    _tensor(w, f"blk.{il}.attn_k.weight", (N_HEAD_KV * HEAD_DIM, N_EMBD), qtype)
    _tensor(w, f"blk.{il}.attn_v.weight", (N_HEAD_KV * HEAD_DIM, N_EMBD), qtype)
    _tensor(w, f"blk.{il}.attn_output.weight", (N_EMBD, N_HEAD * HEAD_DIM), qtype)
    if norms:
        _tensor(w, f"blk.{il}.attn_q_norm.weight", (HEAD_DIM,))
        _tensor(w, f"blk.{il}.attn_k_norm.weight", (HEAD_DIM,))


def _finish(w) -> None:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_llama(path: Path) -> Path:
    import gguf

    w = gguf.GGUFWriter(str(path), "llama")
    _common(w, "llama", N_LAYER)
    w.add_rope_dimension_count(HEAD_DIM)
    _tensor(w, "token_embd.weight", (VOCAB, N_EMBD), "Q8_0")
    for il in range(N_LAYER):
        _attention(w, il, "Q4_0" if il % 2 else "Q8_0")
        _tensor(w, f"blk.{il}.ffn_norm.weight", (N_EMBD,))
        _tensor(w, f"blk.{il}.ffn_gate.weight", (N_FF, N_EMBD), "Q8_0")
        _tensor(w, f"blk.{il}.ffn_up.weight", (N_FF, N_EMBD), "Q8_0")
        _tensor(w, f"blk.{il}.ffn_down.weight", (N_EMBD, N_FF), "F16")
    _tensor(w, "output_norm.weight", (N_EMBD,))
    _tensor(w, "output.weight", (VOCAB, N_EMBD), "Q8_0")
    _finish(w)
    return path


def write_moe(path: Path) -> Path:
    import gguf

    w = gguf.GGUFWriter(str(path), "qwen3moe")
    _common(w, "qwen3moe", N_LAYER)
    w.add_expert_count(N_EXPERT)
    w.add_expert_used_count(N_EXPERT_USED)
    w.add_expert_feed_forward_length(N_FF_EXP)
    _tensor(w, "token_embd.weight", (VOCAB, N_EMBD), "Q8_0")
    for il in range(N_LAYER):
        _attention(w, il, "Q8_0", norms=True)
        _tensor(w, f"blk.{il}.ffn_norm.weight", (N_EMBD,))
        _tensor(w, f"blk.{il}.ffn_gate_inp.weight", (N_EXPERT, N_EMBD))
        _tensor(w, f"blk.{il}.ffn_gate_exps.weight", (N_EXPERT, N_FF_EXP, N_EMBD), "Q8_0")
        _tensor(w, f"blk.{il}.ffn_up_exps.weight", (N_EXPERT, N_FF_EXP, N_EMBD), "Q8_0")
        _tensor(w, f"blk.{il}.ffn_down_exps.weight", (N_EXPERT, N_EMBD, N_FF_EXP), "Q8_0")
    _tensor(w, "output_norm.weight", (N_EMBD,))
    _tensor(w, "output.weight", (VOCAB, N_EMBD), "Q8_0")
    _finish(w)
    return path


def write_gemma3(path: Path) -> Path:
    """Gemma 3: llama.cpp's gemma3 keeps every 6th layer global (sliding window pattern 6); no output.weight
    (the embedding is duplicated for the output device)."""
    import gguf

    w = gguf.GGUFWriter(str(path), "gemma3")
    _common(w, "gemma3", N_LAYER)
    w.add_sliding_window(SWA)
    _tensor(w, "token_embd.weight", (VOCAB, N_EMBD), "Q8_0")
    for il in range(N_LAYER):
        _attention(w, il, "Q8_0", norms=True)
        _tensor(w, f"blk.{il}.post_attention_norm.weight", (N_EMBD,))
        _tensor(w, f"blk.{il}.ffn_norm.weight", (N_EMBD,))
        _tensor(w, f"blk.{il}.ffn_gate.weight", (N_FF, N_EMBD), "Q8_0")
        _tensor(w, f"blk.{il}.ffn_up.weight", (N_FF, N_EMBD), "Q8_0")
        _tensor(w, f"blk.{il}.ffn_down.weight", (N_EMBD, N_FF), "Q8_0")
        _tensor(w, f"blk.{il}.post_ffw_norm.weight", (N_EMBD,))
    _tensor(w, "output_norm.weight", (N_EMBD,))
    _finish(w)
    return path


def write_mmproj(path: Path, image_size: int = 224, patch: int = 14, n_embd: int = 256, n_ff: int = 1024,
                 n_head: int = 4, n_layer: int = 2, proj_dim: int = N_EMBD) -> Path:
    """A CLIP vision tower with an MLP projector (clip.cpp PROJECTOR_TYPE_MLP, LLaVA layout)."""
    import gguf

    w = gguf.GGUFWriter(str(path), "clip")
    w.add_string("clip.projector_type", "mlp")
    w.add_bool("clip.has_vision_encoder", True)
    w.add_bool("clip.has_llava_projector", True)
    for key, value in (("image_size", image_size), ("patch_size", patch), ("embedding_length", n_embd),
                       ("feed_forward_length", n_ff), ("attention.head_count", n_head), ("block_count", n_layer),
                       ("projection_dim", proj_dim)):
        w.add_uint32(f"clip.vision.{key}", value)
    w.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-5)
    w.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    w.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])
    w.add_bool("clip.use_gelu", True)
    n_pos = (image_size // patch) ** 2 + 1
    _tensor(w, "v.class_embd", (n_embd,))
    _tensor(w, "v.patch_embd.weight", (n_embd, 3, patch, patch), "F16")
    _tensor(w, "v.position_embd.weight", (n_pos, n_embd), "F16")
    _tensor(w, "v.pre_ln.weight", (n_embd,))
    _tensor(w, "v.pre_ln.bias", (n_embd,))
    for il in range(n_layer):
        for part in ("attn_q", "attn_k", "attn_v", "attn_out"):
            _tensor(w, f"v.blk.{il}.{part}.weight", (n_embd, n_embd), "Q8_0")
            _tensor(w, f"v.blk.{il}.{part}.bias", (n_embd,))
        for part in ("ln1", "ln2"):
            _tensor(w, f"v.blk.{il}.{part}.weight", (n_embd,))
            _tensor(w, f"v.blk.{il}.{part}.bias", (n_embd,))
        _tensor(w, f"v.blk.{il}.ffn_up.weight", (n_ff, n_embd), "Q8_0")
        _tensor(w, f"v.blk.{il}.ffn_up.bias", (n_ff,))
        _tensor(w, f"v.blk.{il}.ffn_down.weight", (n_embd, n_ff), "Q8_0")
        _tensor(w, f"v.blk.{il}.ffn_down.bias", (n_embd,))
    _tensor(w, "mm.0.weight", (proj_dim, n_embd), "F16")
    _tensor(w, "mm.0.bias", (proj_dim,))
    _tensor(w, "mm.2.weight", (proj_dim, proj_dim), "F16")
    _tensor(w, "mm.2.bias", (proj_dim,))
    _finish(w)
    return path


WRITERS = {"tiny-llama.gguf": write_llama, "tiny-moe.gguf": write_moe, "tiny-gemma3.gguf": write_gemma3,
           "tiny-mmproj.gguf": write_mmproj}


def write_all(out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    return [writer(out / name) for name, writer in WRITERS.items()]


if __name__ == "__main__":
    for written in write_all(Path(sys.argv[1] if len(sys.argv) > 1 else ".")):
        print(written)
