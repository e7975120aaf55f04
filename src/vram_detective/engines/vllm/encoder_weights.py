"""The encoders of multimodal checkpoints as one rank of vLLM holds them: each vision tower's layout
(InternViT, Mllama, Llama 4, Qwen2/2.5/3-VL, Gemma 4, CLIP, SigLIP) with its projector, and Whisper's audio
encoder (weights.py adds them to the text model's inventory)."""
from __future__ import annotations

from ...model.quantization import QuantConfig
from ...model.spec import ModelSpec
from ..common.tensors import TensorGroup
from .dense_tensors import _add_dense, _dense
from .quant_kernels import KernelLayout, linear_tensors


def _audio_encoder(spec: ModelSpec, tp: int, dtype: str, groups: list, allocations: list) -> int:
    """Whisper's encoder (WhisperEncoder, whisper.py 0.7.0+), on the first stage: conv1 [h, mel, 3] and
    conv2 [h, h, 3] with biases and the [max_source_positions, h] position table (sinusoids copied in),
    replicated; encoder_layers layers of qkv_proj / out_proj / fc1 / fc2 (tensor-parallel, biases; row-parallel
    biases replicated) and self_attn_layer_norm / final_layer_norm (weight + bias); the final layer_norm.
    Left unquantized here (the linears would follow the checkpoint's quantization_config)."""
    e = spec.encoder
    h, n = e.hidden_size, e.num_layers
    h_rank, i_rank = h // tp, e.intermediate_size // tp
    return _add_dense(groups, allocations, "model.encoder", 1, [
        ("conv1.weight", (h, e.num_mel_bins, 3), dtype), ("conv1.bias", (h,), dtype),
        ("conv2.weight", (h, h, 3), dtype), ("conv2.bias", (h,), dtype),
        ("embed_positions.weight", (e.max_source_positions, h), dtype),
    ], "encoder") + _add_dense(groups, allocations, f"model.encoder.layers.{{0..{n - 1}}}", n, [
        ("self_attn.qkv_proj.weight", (3 * h_rank, h), dtype), ("self_attn.qkv_proj.bias", (3 * h_rank,), dtype),
        ("self_attn.out_proj.weight", (h, h_rank), dtype), ("self_attn.out_proj.bias", (h,), dtype),
        ("fc1.weight", (i_rank, h), dtype), ("fc1.bias", (i_rank,), dtype),
        ("fc2.weight", (h, i_rank), dtype), ("fc2.bias", (h,), dtype),
        ("self_attn_layer_norm.weight", (h,), dtype), ("self_attn_layer_norm.bias", (h,), dtype),
        ("final_layer_norm.weight", (h,), dtype), ("final_layer_norm.bias", (h,), dtype),
    ], "encoder") + _add_dense(groups, allocations, "model.encoder", 1, [
        ("layer_norm.weight", (h,), dtype), ("layer_norm.bias", (h,), dtype),
    ], "encoder")


def _vision_tower(spec: ModelSpec, tp: int, quant: QuantConfig | None, kernel: KernelLayout | None, dtype: str,
                  groups: list, allocations: list) -> int:
    """Vision encoder + projector (qwen2_vl.py / qwen2_5_vl.py / siglip.py + gemma3_mm.py): patch
    embedding and norms replicated, attention and MLP linears tensor-parallel like the text layers.
    Their linears are quantized only by FP8 methods (Qwen2.5-VL's _maybe_ignore_quant_config drops
    GPTQ/AWQ for the vision tower; AWQ/GPTQ checkpoints list it in modules_to_not_convert).
    One function per tower kind (_TOWERS); returns the tower's parameters."""
    tower = _Tower(spec, tp, quant, kernel, dtype, groups, allocations)
    _TOWERS.get(spec.vision.kind, _qwen2_vl_vision)(tower)
    return tower.parameters


class _Tower:
    """A vision tower while it is built: its tensor groups go to `groups` / `allocations` under "vision."."""

    def __init__(self, spec: ModelSpec, tp: int, quant: QuantConfig | None, kernel: KernelLayout | None, dtype: str,
                 groups: list, allocations: list):
        self.spec, self.v, self.tp, self.quant, self.kernel, self.dtype = spec, spec.vision, tp, quant, kernel, dtype
        self.groups, self.allocations = groups, allocations
        self.parameters = 0
        v = spec.vision
        # (Llama 4 builds its tower and projector with quant_config=None: bf16 whatever the checkpoint, mllama4.py;
        # Qwen3-VL passes its quant_config on, so the checkpoint's ignore list decides - is_layer_skipped's exact names)
        self.quantize = quant is not None and quant.method in ("fp8", "modelopt-fp8") and v.kind != "llama4"
        if v.kind == "qwen3_vl":
            # the list may name the checkpoint's "model.visual." modules or vLLM's mapped "visual." ones
            self.quantize = quant is not None and all(quant.converts(name) for name in (
                "visual.blocks.0.attn.qkv", "model.visual.blocks.0.attn.qkv"))

    def dense(self, name: str, count: int, shape: tuple[int, ...]) -> None:
        self.parameters += _add_dense(self.groups, self.allocations, "vision", count, [(name, shape, self.dtype)],
                                      "vision")

    def linear(self, name: str, count: int, in_features: int, out_features: int, bias: bool, shards: int = 1) -> None:
        if self.quantize:
            for tensor in linear_tensors(self.quant, self.kernel, in_features, out_features, shards, self.dtype,
                                         in_features):
                self.groups.append(TensorGroup(f"vision.{name}.{tensor.suffix}", count, tensor.shape, tensor.dtype,
                                               tensor.bytes,
                                               "vision" if tensor.role == "weight" else "quantization metadata"))
                self.allocations.extend([tensor.bytes] * count)
            self.parameters += in_features * out_features * count
        else:
            self.dense(f"{name}.weight", count, (out_features, in_features))
        if bias:
            self.dense(f"{name}.bias", count, (out_features,))

    def encoder_layers(self, prefix: str, norms: str = "layer_norm{1,2}", qkv: str = "self_attn.qkv_proj",
                       out: str = "self_attn.out_proj", fc1: str = "mlp.fc1", fc2: str = "mlp.fc2") -> None:
        # One ViT block layout under each tower's names (clip.py, siglip.py, mllama4.py, qwen3_vl.py): two
        # LayerNorms (weight + bias), fused qkv with bias, the output projection and a two-linear MLP with
        # biases, row-parallel biases kept whole
        h, i, n, tp = self.v.hidden_size, self.v.intermediate_size, self.v.num_layers, self.tp
        self.dense(f"{prefix}.{norms}.{{weight,bias}}", 4 * n, (h,))
        self.linear(f"{prefix}.{qkv}", n, h, 3 * h // tp, True, 3)
        self.linear(f"{prefix}.{out}", n, h // tp, h, False)
        self.dense(f"{prefix}.{out}.bias", n, (h,))
        self.linear(f"{prefix}.{fc1}", n, h, i // tp, True)
        self.linear(f"{prefix}.{fc2}", n, i // tp, h, False)
        self.dense(f"{prefix}.{fc2}.bias", n, (h,))


def _intern_vit(t: _Tower) -> None:
    v = t.v
    h, i, n = v.hidden_size, v.intermediate_size, v.num_layers
    tp = t.tp
    # InternVL (intern_vit.py, internvl.py): class embedding, Conv2d patch embedding with bias, a
    # [(image/patch)^2 + 1, h] position table, select_layer layers of norm1/norm2 (LayerNorm w+b or RMSNorm),
    # qkv (+bias) / proj (+bias) / fc1 / fc2 with biases, layer scales ls1/ls2 [h] (+ q_norm/k_norm [h]);
    # no post norm; mlp1 = LayerNorm(h x merge^2) + Linear(h x merge^2, text) + Linear(text, text), biases.
    # qkv/proj are plain nn.Linear (replicated) in 0.5.x and parallel linears later: shown sharded.
    positions = (v.image_size // v.patch_size) ** 2 + 1
    norm = 1 if v.rms_norm else 2
    t.dense("vision_model.embeddings.class_embedding", 1, (h,))
    t.dense("vision_model.embeddings.patch_embedding.weight", 1, (h, v.in_channels, v.patch_size, v.patch_size))
    t.dense("vision_model.embeddings.patch_embedding.bias", 1, (h,))
    t.dense("vision_model.embeddings.position_embedding", 1, (positions, h))
    t.dense("vision_model.encoder.layers.*.norm{1,2}", 2 * norm * n, (h,))
    t.linear("vision_model.encoder.layers.*.attn.qkv", n, h, 3 * h // tp, v.qkv_bias, 3)
    t.linear("vision_model.encoder.layers.*.attn.proj", n, h // tp, h, False)
    t.dense("vision_model.encoder.layers.*.attn.proj.bias", n, (h,))
    if v.qk_norm:
        t.dense("vision_model.encoder.layers.*.attn.{q,k}_norm.weight", 2 * n, (h // tp,))
    t.linear("vision_model.encoder.layers.*.mlp.fc1", n, h, i // tp, True)
    t.linear("vision_model.encoder.layers.*.mlp.fc2", n, i // tp, h, False)
    t.dense("vision_model.encoder.layers.*.mlp.fc2.bias", n, (h,))
    t.dense("vision_model.encoder.layers.*.ls{1,2}", 2 * n, (h,))
    merged = h * v.spatial_merge_size ** 2
    text = v.out_hidden_size
    t.dense("mlp1.0.{weight,bias}", 2, (merged,))
    t.linear("mlp1.1", 1, merged, text // tp, True)
    t.linear("mlp1.3", 1, text // tp, text, False)
    t.dense("mlp1.3.bias", 1, (text,))


def _mllama_vision(t: _Tower) -> None:
    spec = t.spec
    v = t.v
    h, i, n = v.hidden_size, v.intermediate_size, v.num_layers
    tp = t.tp
    dtype = t.dtype
    # Llama 3.2 Vision (mllama.py): patch conv as a bias-free ColumnParallelLinear, class embedding,
    # gated position embedding [(image/patch)^2 + 1, h] + tile table [aspect ratios + 1, tiles x positions x h],
    # pre/post tile embeddings [aspect ratios + 1, tiles x h] with gates, layernorm_pre/post, a local encoder
    # and a gated global one (bias-free qkv/o, CLIPMLP fc1/fc2 with biases), the [output_dim, text hidden]
    # projector with bias; in the text model the cross-attention layers' q_norm/k_norm and tanh gates and
    # the 8 extra embedding rows (VocabParallelEmbedding(vocab_size + 8)). Those text extras are listed
    # here, on the first stage, whatever the pipeline split.
    positions = (v.image_size // v.patch_size) ** 2 + 1
    ratios = v.aspect_ratios + 1
    t.linear("vision_model.patch_embedding._linear", 1, v.in_channels * v.patch_size * v.patch_size, h // tp, False)
    t.dense("vision_model.class_embedding", 1, (h,))
    t.dense("vision_model.gated_positional_embedding.embedding", 1, (positions, h))
    t.dense("vision_model.gated_positional_embedding.tile_embedding.weight", 1, (ratios, v.max_num_tiles * positions * h))
    t.dense("vision_model.{pre,post}_tile_positional_embedding.embedding.weight", 2, (ratios, v.max_num_tiles * h))
    t.dense("vision_model.{gated_positional_embedding,pre_tile_positional_embedding,post_tile_positional_embedding}.gate", 3, (1,))
    t.dense("vision_model.layernorm_{pre,post}.{weight,bias}", 4, (h,))
    layers = n + v.global_layers
    t.dense("vision_model.{transformer,global_transformer}.layers.*.{input,post_attention}_layernorm.{weight,bias}", 4 * layers, (h,))
    t.linear("vision_model.{transformer,global_transformer}.layers.*.self_attn.qkv_proj", layers, h, 3 * h // tp, False, 3)
    t.linear("vision_model.{transformer,global_transformer}.layers.*.self_attn.o_proj", layers, h // tp, h, False)
    t.linear("vision_model.{transformer,global_transformer}.layers.*.mlp.fc1", layers, h, i // tp, True)
    t.linear("vision_model.{transformer,global_transformer}.layers.*.mlp.fc2", layers, i // tp, h, False)
    t.dense("vision_model.{transformer,global_transformer}.layers.*.mlp.fc2.bias", layers, (h,))
    t.dense("vision_model.global_transformer.layers.*.gate_{attn,ffn}", 2 * v.global_layers, (1,))
    t.linear("multi_modal_projector", 1, v.vision_output_dim, v.out_hidden_size // tp, True)
    cross = len(v.cross_attention_layers)
    if cross:
        t.dense("language_model.model.layers.{cross}.cross_attn.{q,k}_norm.weight", 2 * cross, (spec.head_dim,))
        t.dense("language_model.model.layers.{cross}.cross_attn_{attn,mlp}_gate", 2 * cross, (1,))
    # embed_tokens has vocab_size + 8 rows padded to 64: the rows beyond the text vocabulary's own padding
    extra_rows = (-(-(spec.vocab_size + 8) // 64) * 64 - spec.padded_vocab_size) // tp
    if extra_rows:
        t.groups.append(_dense("language_model.model.embed_tokens.weight[+8 image rows, padded]", 1,
                               (extra_rows, spec.hidden_size), dtype, "embedding"))
        t.allocations.append(t.groups[-1].bytes_each)
        t.parameters += 8 * spec.hidden_size // tp


def _llama4_vision(t: _Tower) -> None:
    v = t.v
    h, i = v.hidden_size, v.intermediate_size
    tp = t.tp
    # Llama 4 (mllama4.py 0.8.3+, built with quant_config=None): Llama4UnfoldConvolution = a bias-free
    # ColumnParallelLinear [c*p*p -> h], class embedding, (image/patch)^2 + 1 learned positions, LayerNorm
    # pre/post (weight + bias), encoder layers (qkv / o_proj / fc1 / fc2 with biases, row-parallel biases whole,
    # two LayerNorms), the pixel-shuffle adapter MLP [intermediate -> projector_input -> projector_output]
    # (biases only with multi_modal_projector_bias) and multi_modal_projector.linear_1 [vision_output_dim ->
    # text hidden], no bias. The vision rotary cache is a [positions, 1, head_dim / 2] complex64 buffer.
    positions = (v.image_size // v.patch_size) ** 2 + 1
    adapter_in, adapter_out = v.adapter_dims
    t.linear("vision_model.patch_embedding.linear", 1, v.in_channels * v.patch_size * v.patch_size, h // tp, False)
    t.dense("vision_model.class_embedding", 1, (h,))
    t.dense("vision_model.positional_embedding_vlm", 1, (positions, h))
    t.dense("vision_model.layernorm_{pre,post}.{weight,bias}", 4, (h,))
    t.encoder_layers("vision_model.model.layers.*", norms="{input,post_attention}_layernorm", out="self_attn.o_proj")
    t.linear("vision_model.vision_adapter.mlp.fc1", 1, i, adapter_in // tp, v.adapter_bias)
    t.linear("vision_model.vision_adapter.mlp.fc2", 1, adapter_in // tp, adapter_out, False)
    if v.adapter_bias:
        t.dense("vision_model.vision_adapter.mlp.fc2.bias", 1, (adapter_out,))
    t.linear("multi_modal_projector.linear_1", 1, v.vision_output_dim, v.out_hidden_size // tp, False)
    if v.num_heads:
        # complex64 = two float32 per entry; get_rope caches one instance for every encoder layer
        t.groups.append(_dense("vision_model.rotary_emb.cos_sin_cache[complex64 as float32 pairs]", 1,
                               (positions, 2 * (h // v.num_heads // 2)), "float32", "rotary cache"))
        t.allocations.append(t.groups[-1].bytes_each)


def _qwen3_vl_vision(t: _Tower) -> None:
    v = t.v
    h = v.hidden_size
    tp = t.tp
    # Qwen3_VisionTransformer (qwen3_vl.py 0.11.0+, shared by Qwen3-VL, Qwen3-VL-MoE and Qwen3.5): Conv3d
    # patch embedding with bias and a learned position table (replicated), blocks of two LayerNorms (weight +
    # bias), fused qkv and proj, linear_fc1 / linear_fc2 - every linear with a bias, row-parallel biases whole -,
    # the merger (LayerNorm over hidden, fc1 [4h -> 4h], fc2 [4h -> out]) and one merger per deepstack layer
    # (its LayerNorm after the 2x2 shuffle, over 4h). Linears follow the checkpoint's ignore list (no
    # _maybe_ignore_quant_config here): FP8 releases keep the tower in bf16 by listing it.
    merged = h * v.spatial_merge_size ** 2
    t.dense("visual.patch_embed.proj.weight", 1, (h, v.in_channels, v.temporal_patch_size, v.patch_size, v.patch_size))
    t.dense("visual.patch_embed.proj.bias", 1, (h,))
    t.dense("visual.pos_embed.weight", 1, (v.position_embeddings, h))
    t.encoder_layers("visual.blocks.*", norms="norm{1,2}", qkv="attn.qkv", out="attn.proj", fc1="mlp.linear_fc1",
                   fc2="mlp.linear_fc2")
    mergers = 1 + v.deepstack_layers
    t.dense("visual.merger.norm.{weight,bias}", 2, (h,))
    if v.deepstack_layers:
        t.dense("visual.deepstack_merger_list.*.norm.{weight,bias}", 2 * v.deepstack_layers, (merged,))
    t.linear("visual.{merger,deepstack_merger_list.*}.linear_fc1", mergers, merged, merged // tp, True)
    t.linear("visual.{merger,deepstack_merger_list.*}.linear_fc2", mergers, merged // tp, v.out_hidden_size, False)
    t.dense("visual.{merger,deepstack_merger_list.*}.linear_fc2.bias", mergers, (v.out_hidden_size,))


def _gemma4_vision(t: _Tower) -> None:
    v = t.v
    h, i, n = v.hidden_size, v.intermediate_size, v.num_layers
    # Gemma 4 (gemma4_mm.py): the HF Gemma4VisionModel (modeling_gemma4.py) built by AutoModel.from_config -
    # plain, replicated linears, never quantized for the 31B / 26B towers - and embed_vision's projection:
    # patch input_proj [h, 3 x p x p], a [2, position_embedding_size, h] position table, per layer q/k/v/o of
    # heads x head_dim, q/k norms [head_dim], four norms [h], gate / up / down MLP
    width = v.num_heads * v.head_dim
    t.dense("vision_tower.patch_embedder.input_proj.weight", 1, (h, 3 * v.patch_size * v.patch_size))
    t.dense("vision_tower.position_embedding_table", 1, (2, v.position_embeddings, h))
    t.dense("vision_tower.encoder.layers.*.self_attn.{q,k,v}_proj.linear.weight", 3 * n, (width, h))
    t.dense("vision_tower.encoder.layers.*.self_attn.o_proj.linear.weight", n, (h, width))
    t.dense("vision_tower.encoder.layers.*.self_attn.{q,k}_norm.weight", 2 * n, (v.head_dim,))
    t.dense("vision_tower.encoder.layers.*.*_layernorm.weight", 4 * n, (h,))
    t.dense("vision_tower.encoder.layers.*.mlp.{gate,up}_proj.linear.weight", 2 * n, (i, h))
    t.dense("vision_tower.encoder.layers.*.mlp.down_proj.linear.weight", n, (h, i))
    t.dense("embed_vision.embedding_projection.weight", 1, (v.out_hidden_size, h))


def _clip_vision(t: _Tower) -> None:
    v = t.v
    h = v.hidden_size
    tp = t.tp
    # LLaVA / LLaVA-NeXT (vllm/model_executor/models/clip.py, llava.py, llava_next.py): CLIP embeddings
    # (class token, bias-free patch conv, (image/patch)^2 + 1 positions), pre_layrnorm, only the layers
    # up to vision_feature_layer, post_layernorm only when all are built, then the 2-layer GELU projector
    positions = (v.image_size // v.patch_size) ** 2 + 1
    t.dense("vision_tower.embeddings.class_embedding", 1, (h,))
    t.dense("vision_tower.embeddings.patch_embedding.weight", 1, (h, v.in_channels, v.patch_size, v.patch_size))
    t.dense("vision_tower.embeddings.position_embedding.weight", 1, (positions, h))
    t.groups.append(_dense("vision.vision_tower.embeddings.position_ids[buffer]", 1, (1, positions), "int64", "vision"))
    t.allocations.append(t.groups[-1].bytes_each)
    t.dense("vision_tower.pre_layrnorm.{weight,bias}", 2, (h,))
    t.encoder_layers("vision_tower.encoder.layers.*")
    if v.post_norm:
        t.dense("vision_tower.post_layernorm.{weight,bias}", 2, (h,))
    text = v.out_hidden_size
    t.linear("multi_modal_projector.linear_1", 1, h, text // tp, v.projector_bias)
    t.linear("multi_modal_projector.linear_2", 1, text // tp, text, False)
    if v.projector_bias:
        t.dense("multi_modal_projector.linear_2.bias", 1, (text,))
    if v.image_newline:
        t.dense("image_newline", 1, (text,))


def _siglip_vision(t: _Tower) -> None:
    v = t.v
    h = v.hidden_size
    t.dense("embeddings.patch_embedding.weight", 1, (h, v.in_channels, v.patch_size, v.patch_size))
    t.dense("embeddings.patch_embedding.bias", 1, (h,))
    t.dense("embeddings.position_embedding.weight", 1, ((v.image_size // v.patch_size) ** 2, h))
    t.encoder_layers("encoder.layers.*")
    t.dense("post_layernorm.{weight,bias}", 2, (h,))
    # Gemma 3 projector: a plain [vision hidden, text hidden] parameter and a soft-embedding RMSNorm
    t.dense("multi_modal_projector.mm_input_projection_weight", 1, (h, v.out_hidden_size))
    t.dense("multi_modal_projector.mm_soft_emb_norm.weight", 1, (h,))


def _qwen2_vl_vision(t: _Tower) -> None:
    """Qwen2-VL / Qwen2.5-VL (qwen2_vl.py, qwen2_5_vl.py): the other kinds."""
    v = t.v
    h, i, n = v.hidden_size, v.intermediate_size, v.num_layers
    tp = t.tp
    patch = v.in_channels * v.temporal_patch_size * v.patch_size * v.patch_size
    t.dense("patch_embed.proj.weight", 1, (h, patch))
    norm_tensors = 2 if v.kind == "qwen2_5_vl" else 4  # RMSNorm weights vs LayerNorm weight + bias
    t.dense("blocks.*.norm{1,2}", norm_tensors * n, (h,))
    t.linear("blocks.*.attn.qkv", n, h, 3 * h // tp, True, 3)
    t.linear("blocks.*.attn.proj", n, h // tp, h, False)
    t.dense("blocks.*.attn.proj.bias", n, (h,))
    if v.kind == "qwen2_5_vl":
        t.linear("blocks.*.mlp.gate_up_proj", n, h, 2 * i // tp, True, 2)
        t.linear("blocks.*.mlp.down_proj", n, i // tp, h, False)
    else:
        t.linear("blocks.*.mlp.fc1", n, h, i // tp, True)
        t.linear("blocks.*.mlp.fc2", n, i // tp, h, False)
    t.dense("blocks.*.mlp.down.bias", n, (h,))
    merged = h * v.spatial_merge_size ** 2
    t.dense("merger.ln_q", 1 if v.kind == "qwen2_5_vl" else 2, (h,))
    t.linear("merger.mlp.0", 1, merged, merged // tp, True)
    t.linear("merger.mlp.2", 1, merged // tp, v.out_hidden_size, False)
    t.dense("merger.mlp.2.bias", 1, (v.out_hidden_size,))


_TOWERS = {
    "intern_vit": _intern_vit,
    "mllama": _mllama_vision,
    "llama4": _llama4_vision,
    "qwen3_vl": _qwen3_vl_vision,
    "gemma4_vision": _gemma4_vision,
    "clip": _clip_vision,
    "clip_anyres": _clip_vision,
    "siglip": _siglip_vision,
}
