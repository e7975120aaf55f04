"""The Mamba / linear-attention mixers of hybrid models as one rank of vLLM holds them (weights.py builds the
rest of the layer): Mamba1 / Mamba2 mixers, lightning and gated (GatedDeltaNet) attention, Nemotron-H's MLPs."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ...model.quantization import QuantConfig
from ...model.spec import ModelSpec
from .dense_tensors import _add_dense, _dense
from .moe_weights import _moe_layers
from .quant_kernels import KernelLayout

if TYPE_CHECKING:
    from .weights import Shard


def _hybrid_attention_layers(spec: ModelSpec, first_layer: int, layers: int, pattern: str) -> tuple[int, str]:
    """(attention layers on this stage, their name pattern): all of them unless the model is a hybrid."""
    if spec.hybrid is None:
        return layers, pattern
    mine = [i for i in range(first_layer, first_layer + layers) if "attention" in spec.hybrid.layers[i]]
    return len(mine), "model.layers.{" + ",".join(map(str, mine)) + "}"


def _mamba_mixers(spec: ModelSpec, tp: int, dtype: str, first_layer: int, layers: int, linear, groups: list,
                  allocations: list) -> int:
    """Mamba2 mixer weights of a hybrid's Mamba layers on one rank (mamba_mixer2.py MambaMixer2, 0.10-0.18):
    in_proj [hidden -> (2 x intermediate + 2 x groups' x state + heads) / tp], conv1d [conv_dim / tp, kernel]
    (+ bias), A (float32), D, dt_bias [heads / tp], gated RMSNorm [intermediate / tp], out_proj
    [intermediate / tp -> hidden]; groups' = n_groups extended to a multiple of tp when it does not divide.
    Returns the parameter count."""
    mixer = spec.mixer
    mine = [i for i in range(first_layer, first_layer + layers) if "mamba" in spec.hybrid.layers[i]]
    count = len(mine)
    if not count:
        return 0
    if spec.hybrid.mixer == "gated_delta_net":
        return _gated_delta_net(spec, tp, dtype, mine, linear, groups, allocations)
    if spec.hybrid.mixer == "mamba1":
        return _mamba1(spec, tp, dtype, mine, linear, groups, allocations)
    if spec.hybrid.mixer == "linear_attention":
        return _lightning_attention(spec, tp, dtype, mine, linear, groups, allocations)
    # NemotronHMambaDecoderLayer names the module "mixer" (MambaMixer2 of mamba_num_heads x mamba_head_dim)
    module = "mixer" if spec.family == "nemotron_h" else "mamba"
    pattern = "model.layers.{" + ",".join(map(str, mine)) + "}." + module
    hidden = spec.hidden_size
    heads, state, n_groups, kernel = mixer.heads, mixer.d_state, mixer.n_groups, mixer.conv_kernel
    intermediate = mixer.intermediate
    groups_rank = n_groups + (0 if n_groups % tp == 0 else tp - n_groups)
    conv_dim = intermediate + 2 * groups_rank * state
    proj_bias = mixer.proj_bias
    linear("in_proj", hidden, (intermediate + conv_dim + heads) // tp, 5, "attention", proj_bias, False, hidden,
           count=count, pattern=pattern)
    linear("out_proj", intermediate // tp, hidden, 1, "attention", proj_bias, True, intermediate,
           count=count, pattern=pattern)
    parameters = 0
    dense = [("conv1d.weight", (conv_dim // tp, kernel), dtype)]
    if mixer.conv_bias:
        dense.append(("conv1d.bias", (conv_dim // tp,), dtype))
    dense += [("A", (heads // tp,), "float32"), ("D", (heads // tp,), dtype), ("dt_bias", (heads // tp,), dtype)]
    if mixer.rms_norm:
        # Mixer2RMSNormGated registers its weight only with use_rms_norm (Falcon-H1: config.mamba_rms_norm)
        dense.append(("norm.weight", (intermediate // tp,), dtype))
    parameters += _add_dense(groups, allocations, pattern, count, dense, "attention")
    return parameters


def _nemotron_h_mlps(spec: ModelSpec, shard: Shard, quant: QuantConfig | None, kernel: KernelLayout | None,
                     dtype: str, first_layer: int, layers: int, groups: list, allocations: list, linear) -> int:
    """Nemotron-H MLP ("-") and MoE ("E") layers on this stage (nemotron_h.py 0.10.2-0.33). NemotronHMLP is
    up_proj [hidden -> I / tp] + down_proj [I / tp -> hidden] (relu2, no gate; bias = mlp_bias), I =
    intermediate_size or its mlp_index-th entry when it is a list. Returns the parameters `linear` does not
    count itself."""
    pattern = spec.mixer.override_pattern
    tp = shard.tensor_parallel_size
    hidden = spec.hidden_size
    sizes = spec.mixer.mlp_sizes
    bias = spec.mlp_bias
    by_size: dict[int, list[int]] = {}
    for index in range(first_layer, first_layer + layers):
        if pattern[index] == "-":
            mlp_index = pattern[: index + 1].count("-") - 1
            size = sizes[mlp_index] if len(sizes) > 1 else sizes[0]
            by_size.setdefault(size, []).append(index)
    for size, mine in by_size.items():
        names = "model.layers.{" + ",".join(map(str, mine)) + "}.mixer"
        linear("up_proj", hidden, size // tp, 1, "mlp", bias, False, hidden, count=len(mine), pattern=names,
               allocations=allocations)
        linear("down_proj", size // tp, hidden, 1, "mlp", bias, True, size, count=len(mine), pattern=names,
               allocations=allocations)
    moe_layers = [i for i in range(first_layer, first_layer + layers) if pattern[i] == "E"]
    if not moe_layers or spec.moe is None:
        return 0
    names = "model.layers.{" + ",".join(map(str, moe_layers)) + "}"
    one_layer: list[int] = []
    parameters = _moe_layers(spec, shard, quant, kernel, dtype, len(moe_layers), names, groups, one_layer, linear,
                             module="mixer")
    allocations.extend(one_layer * len(moe_layers))
    return parameters


def _mamba1(spec: ModelSpec, tp: int, dtype: str, mine: list[int], linear, groups: list, allocations: list) -> int:
    """Jamba's Mamba1 mixer (layers/mamba/mamba_mixer.py MambaMixer, 0.10-0.19; built without a quant config,
    so never quantized): in_proj [hidden -> 2 x intermediate / tp], conv1d [intermediate / tp, 1, kernel]
    (+ bias), x_proj row-parallel [intermediate / tp -> dt_rank + 2 x d_state], dt_proj [dt_rank ->
    intermediate / tp] + bias, A float32 [intermediate / tp, d_state], D [intermediate / tp], out_proj
    [intermediate / tp -> hidden], RMSNorms on dt (dt_rank), B and C (d_state). Returns the parameters not
    counted by `linear`."""
    mixer = spec.mixer
    count = len(mine)
    pattern = "model.layers.{" + ",".join(map(str, mine)) + "}.mamba"
    hidden = spec.hidden_size
    intermediate = mixer.intermediate
    state, kernel, dt_rank = mixer.d_state, mixer.conv_kernel, mixer.dt_rank
    proj_bias = mixer.proj_bias
    rank = intermediate // tp
    linear("in_proj", hidden, 2 * rank, 2, "attention", proj_bias, False, hidden, count=count, pattern=pattern,
           quantizable=False)
    linear("x_proj", rank, dt_rank + 2 * state, 1, "attention", False, True, intermediate, count=count,
           pattern=pattern, quantizable=False)
    linear("dt_proj", dt_rank, rank, 1, "attention", True, False, dt_rank, count=count, pattern=pattern,
           quantizable=False)
    linear("out_proj", rank, hidden, 1, "attention", proj_bias, True, intermediate, count=count, pattern=pattern,
           quantizable=False)
    dense = [("conv1d.weight", (rank, 1, kernel), dtype)]
    if mixer.conv_bias:
        dense.append(("conv1d.bias", (rank,), dtype))
    dense += [("A", (rank, state), "float32"), ("D", (rank,), dtype), ("dt_layernorm.weight", (dt_rank,), dtype),
              ("b_layernorm.weight", (state,), dtype), ("c_layernorm.weight", (state,), dtype)]
    parameters = _add_dense(groups, allocations, pattern, count, dense, "attention")
    return parameters


def _lightning_attention(spec: ModelSpec, tp: int, dtype: str, mine: list[int], linear, groups: list,
                         allocations: list) -> int:
    """MiniMax-Text-01 lightning attention (layers/mamba/linear_attn.py MiniMaxText01LinearAttention, 0.10-0.19):
    qkv_proj [hidden -> 3 x heads x head_dim / tp], output_gate [hidden -> heads x head_dim / tp], out_proj
    [heads x head_dim / tp -> hidden], RMSNorm over heads x head_dim / tp (the fp32 slope_rate buffer of
    `heads` values is left out). Returns the parameters not counted by `linear`."""
    count = len(mine)
    pattern = "model.layers.{" + ",".join(map(str, mine)) + "}.self_attn"
    hidden = spec.hidden_size
    inner = spec.num_attention_heads * spec.head_dim
    linear("qkv_proj", hidden, 3 * inner // tp, 1, "attention", False, False, hidden, count=count, pattern=pattern)
    linear("output_gate", hidden, inner // tp, 1, "attention", False, False, hidden, count=count, pattern=pattern)
    linear("out_proj", inner // tp, hidden, 1, "attention", False, True, inner, count=count, pattern=pattern)
    groups.append(_dense(f"{pattern}.norm.weight", count, (inner // tp,), dtype, "norm"))
    allocations.extend([groups[-1].bytes_each] * count)
    return inner // tp * count


def _gated_attention(spec: ModelSpec) -> bool:
    """Qwen3-Next / Qwen3.5 full-attention layers: qkv_proj carries 2 x heads query rows (the second half
    gates the output; attn_output_gate, default True in qwen3_next.py)."""
    if spec.family != "qwen3_next":
        return False
    return spec.mixer.attn_output_gate if spec.mixer is not None else True


def _gated_delta_net(spec: ModelSpec, tp: int, dtype: str, mine: list[int], linear, groups: list,
                     allocations: list) -> int:
    """GatedDeltaNet mixer weights (layers/mamba/gdn_linear_attn.py, 0.11-0.19) on one rank:
    in_proj_qkvz [hidden -> (2 key + 2 value) / tp], in_proj_ba [hidden -> 2 v_heads / tp],
    conv1d [conv_dim / tp, 1, kernel] without bias (conv_dim = 2 key + value), dt_bias [v_heads / tp],
    A_log float32 [v_heads / tp], gated RMSNorm [head_v_dim] (replicated), out_proj [value / tp -> hidden];
    key = k_heads x k_dim, value = v_heads x v_dim. Returns the parameters not counted by `linear`."""
    mixer = spec.mixer
    count = len(mine)
    pattern = "model.layers.{" + ",".join(map(str, mine)) + "}.linear_attn"
    hidden = spec.hidden_size
    k_heads, v_heads = mixer.key_heads, mixer.value_heads
    k_dim, v_dim = mixer.key_head_dim, mixer.value_head_dim
    kernel = mixer.conv_kernel
    key, value = k_heads * k_dim, v_heads * v_dim
    conv_dim = 2 * key + value
    linear("in_proj_qkvz", hidden, (2 * key + 2 * value) // tp, 4, "attention", False, False, hidden,
           count=count, pattern=pattern)
    linear("in_proj_ba", hidden, 2 * v_heads // tp, 2, "attention", False, False, hidden,
           count=count, pattern=pattern)
    linear("out_proj", value // tp, hidden, 1, "attention", False, True, value, count=count, pattern=pattern)
    return _add_dense(groups, allocations, pattern, count,
                      [("conv1d.weight", (conv_dim // tp, 1, kernel), dtype), ("dt_bias", (v_heads // tp,), dtype),
                       ("A_log", (v_heads // tp,), "float32"), ("norm.weight", (v_dim,), dtype)], "attention")
