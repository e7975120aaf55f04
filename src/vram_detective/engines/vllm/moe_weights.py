"""The mixture-of-experts layers as one rank of vLLM holds them (weights.py builds the rest): the experts in
the kernel's layout, sharded by TP or EP, the router and the shared experts."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ...model.quantization import QuantConfig
from ...model.spec import ModelSpec
from ..common.tensors import TensorGroup
from .dense_tensors import _dense
from .quant_kernels import KernelLayout, expert_tensors

if TYPE_CHECKING:
    from .weights import Shard


def _moe_layers(spec: ModelSpec, shard: Shard, quant: QuantConfig | None, kernel: KernelLayout | None, dtype: str,
                count: int, pattern: str, groups: list, per_layer: list, linear, module: str = "mlp") -> int:
    """Router, experts and shared experts of the MoE layers on this rank; returns their parameters.

    Without expert parallelism every rank holds every expert with intermediate/tp columns; with it each
    rank holds experts/tp whole experts (fused_moe/config.py; design notes §9)."""
    moe = spec.moe
    if not count:
        return 0
    tp = shard.tensor_parallel_size
    moe_ranks = tp * shard.data_parallel_size  # TP is flattened across DP for the experts
    hidden = spec.hidden_size
    if moe.latent_size:
        # Nemotron-H latent MoE: replicated fc1_latent_proj / fc2_latent_proj (quantizable, bias = mlp_bias);
        # the experts see the latent width
        bias = spec.mlp_bias
        latent = moe.latent_size
        linear(f"{module}.fc1_latent_proj", hidden, latent, 1, "expert", bias, False, hidden, count=count,
               pattern=pattern)
        linear(f"{module}.fc2_latent_proj", latent, hidden, 1, "expert", bias, False, latent, count=count,
               pattern=pattern)
        hidden = latent
    if shard.expert_parallel:
        local_experts, intermediate = -(-moe.num_experts // moe_ranks), moe.expert_intermediate
    else:
        local_experts, intermediate = moe.num_experts, moe.expert_intermediate // moe_ranks
    parameters = _moe_router(spec, dtype, count, pattern, module, groups, per_layer)
    for tensor in expert_tensors(quant, kernel, local_experts, hidden, intermediate, dtype, gated=moe.gated):
        role = "expert" if tensor.role == "weight" else "quantization metadata"
        groups.append(TensorGroup(f"{pattern}.{module}.experts.{tensor.suffix}", count, tensor.shape, tensor.dtype,
                                  tensor.bytes, role))
        per_layer.append(tensor.bytes)
    parameters += local_experts * (3 if moe.gated else 2) * hidden * intermediate * count
    if moe.expert_bias and not (quant is not None and quant.method == "mxfp4" and quant.converts("experts")):
        # (MXFP4's expert_tensors returns the biases itself, padded like the weights)
        groups.append(_dense(f"{pattern}.{module}.experts.w13_bias", count, (local_experts, 2 * intermediate), dtype, "expert"))
        groups.append(_dense(f"{pattern}.{module}.experts.w2_bias", count, (local_experts, hidden), dtype, "expert"))
        per_layer += [groups[-2].bytes_each, groups[-1].bytes_each]
        parameters += local_experts * (2 * intermediate + hidden) * count
    parameters += _moe_shared_experts(spec, dtype, count, pattern, module, tp, groups, per_layer, linear)
    return parameters


def _moe_router(spec: ModelSpec, dtype: str, count: int, pattern: str, module: str, groups: list,
                per_layer: list) -> int:
    """The MoE router (gate, and its biases where the model has them); returns its parameters."""
    moe = spec.moe
    parameters = 0
    router_in = spec.hidden_size
    # the router is a ReplicatedLinear built without a quant config in every MoE model file
    groups.append(_dense(f"{pattern}.{module}.gate.weight", count, (moe.num_experts, router_in), moe.router_dtype or dtype,
                         "router"))
    per_layer.append(groups[-1].bytes_each)
    parameters += moe.num_experts * router_in * count
    if moe.router_bias:
        groups.append(_dense(f"{pattern}.{module}.router.bias", count, (moe.num_experts,), dtype, "router"))
        per_layer.append(groups[-1].bytes_each)
        parameters += moe.num_experts * count
    if moe.score_correction_bias:
        groups.append(_dense(f"{pattern}.{module}.gate.e_score_correction_bias", count, (moe.num_experts,), "float32", "router"))
        per_layer.append(groups[-1].bytes_each)
        parameters += moe.num_experts * count
    return parameters


def _moe_shared_experts(spec: ModelSpec, dtype: str, count: int, pattern: str, module: str, tp: int, groups: list,
                        per_layer: list, linear) -> int:
    """The shared experts (split over TP like a dense MLP) and their gate; returns the gate's parameters (the
    linears count their own through `linear`)."""
    moe = spec.moe
    parameters = 0
    hidden = spec.hidden_size  # the shared expert sees the full width
    if moe.shared_intermediate and not moe.shared_gated:
        # Nemotron-H: shared_experts is a NemotronHMLP (up_proj + down_proj, bias = mlp_bias)
        shared = moe.shared_intermediate // tp
        bias = spec.mlp_bias
        linear(f"{module}.shared_experts.up_proj", hidden, shared, 1, "mlp", bias, False, hidden, count=count,
               pattern=pattern)
        linear(f"{module}.shared_experts.down_proj", shared, hidden, 1, "mlp", bias, True, moe.shared_intermediate,
               count=count, pattern=pattern)
    elif moe.shared_intermediate:
        shared = moe.shared_intermediate // tp
        linear("mlp.shared_expert.gate_up_proj", hidden, 2 * shared, 2, "mlp", False, False, hidden, count=count)
        linear("mlp.shared_expert.down_proj", shared, hidden, 1, "mlp", False, True, moe.shared_intermediate, count=count)
    if moe.shared_expert_gate:
        groups.append(_dense(f"{pattern}.{module}.shared_expert_gate.weight", count, (1, hidden), dtype, "router"))
        per_layer.append(groups[-1].bytes_each)
        parameters += hidden * count
    return parameters
