"""How a quantized linear layer is stored on the GPU, per rank, after vLLM's post-load repacking.

K = input features and N = output features of the layer *on this rank*; g = group size.
Layouts follow vLLM's create_weights() of each method (vllm/model_executor/layers/quantization/
awq.py, awq_marlin.py, gptq.py, gptq_marlin.py, fp8.py, modelopt.py; 0.4-0.33) and
design/vllm-memory.md §8.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class QuantConfig:
    method: str  # "awq", "gptq", "fp8", "modelopt-fp8"
    bits: int
    group_size: int  # -1: one group over the whole input (channelwise)
    zero_point: bool = False  # asymmetric (stores zero points)
    desc_act: bool = False  # GPTQ act-order: g_idx is meaningful
    weight_block: tuple[int, int] | None = None  # FP8 block quantization (n, k)
    static_input_scale: bool = False
    not_converted: tuple[str, ...] = ()  # module-name fragments kept in 16 bit
    lm_head_quantized: bool = False
    serialized: bool = True  # False: quantized online at load (--quantization fp8 on a 16-bit checkpoint)

    @property
    def nominal_bits(self) -> int:
        return self.bits

    def converts(self, module_name: str) -> bool:
        """Is this linear module quantized? (embeddings and norms never reach this question)"""
        if module_name == "lm_head":
            return self.lm_head_quantized
        return not any(fragment and fragment in module_name for fragment in self.not_converted)

    def describe(self) -> str:
        if self.method in ("awq", "gptq"):
            group = "channelwise" if self.group_size == -1 else f"group {self.group_size}"
            extra = ", act-order" if self.desc_act else ""
            zero = "asymmetric" if self.zero_point else "symmetric"
            return f"{self.method.upper()} {self.bits}-bit, {group}, {zero}{extra}"
        if self.weight_block:
            return f"FP8 block {self.weight_block[0]}x{self.weight_block[1]} scales"
        if not self.serialized:
            return "FP8 online (quantized at load from the 16-bit checkpoint, per-tensor scales)"
        return "FP8 per-tensor scales"


class QuantizationError(ValueError):
    pass


class UnsupportedOnGpuError(QuantizationError):
    """The engine itself refuses this format on this GPU (a startup refusal, not a tool limitation)."""


ONLINE_FP8 = QuantConfig(method="fp8", bits=8, group_size=-1, serialized=False)


def parse_quantization_config(raw: dict | None) -> QuantConfig | None:
    if not raw:
        return None
    method = str(raw.get("quant_method") or raw.get("quant_algo") or "").lower()
    if method == "awq":
        return QuantConfig(
            method="awq",
            bits=int(raw.get("bits", raw.get("w_bit", 4))),
            group_size=int(raw.get("group_size", raw.get("q_group_size", 128))),
            zero_point=bool(raw.get("zero_point", True)),
            not_converted=tuple(raw.get("modules_to_not_convert") or ()),
        )
    if method == "gptq":
        return QuantConfig(
            method="gptq",
            bits=int(raw.get("bits", 4)),
            group_size=int(raw.get("group_size", 128)),
            zero_point=not bool(raw.get("sym", True)),
            desc_act=bool(raw.get("desc_act", False)),
            lm_head_quantized=bool(raw.get("lm_head", False)),
            not_converted=tuple(raw.get("modules_to_not_convert") or ()),
        )
    if method == "fp8":
        block = raw.get("weight_block_size")
        return QuantConfig(
            method="fp8",
            bits=8,
            group_size=-1,
            weight_block=(int(block[0]), int(block[1])) if block else None,
            static_input_scale=raw.get("activation_scheme") == "static",
            not_converted=tuple(raw.get("ignored_layers") or raw.get("modules_to_not_convert") or ()),
            lm_head_quantized=False,
        )
    if method in ("modelopt", "modelopt-fp8"):
        algo = str(raw.get("quant_algo") or "FP8").upper()
        if algo != "FP8":
            raise QuantizationError(f"ModelOpt {algo} checkpoints are not sized yet (FP8 only for now)")
        return QuantConfig(
            method="modelopt-fp8",
            bits=8,
            group_size=-1,
            static_input_scale=True,  # ModelOpt FP8 stores static input scales (modelopt.py)
            not_converted=tuple(raw.get("exclude_modules") or ()),
        )
    raise QuantizationError(f"quantization method {method or '(none)'!r} is not sized yet")


@dataclass(frozen=True)
class StoredTensor:
    suffix: str  # "qweight", "scales", ...
    shape: tuple[int, ...]
    dtype: str
    bytes: int
    role: str  # "weight" or "quantization metadata"


DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "int32": 4, "int64": 8, "float8_e4m3fn": 1, "int8": 1, "uint8": 1}


def _tensor(suffix: str, shape: tuple[int, ...], dtype: str, role: str = "quantization metadata") -> StoredTensor:
    count = 1
    for dim in shape:
        count *= dim
    return StoredTensor(suffix, shape, dtype, count * DTYPE_BYTES[dtype], role)


@dataclass(frozen=True)
class KernelLayout:
    """What the chosen vLLM kernel keeps per linear layer (design notes §8 and
    docs/research-weights-by-release.md, read from each release's quantization/*.py)."""

    kernel: str  # awq, awq_marlin, gptq, gptq_marlin, machete, fp8, fp8_marlin
    keeps_zeros: bool = True  # zero points stay on the GPU (int32 packed, or fp16 for Machete AWQ)
    fp16_zeros: bool = False  # Machete (sm90) AWQ: zero points as fp16 [K/g, N] with scales applied
    keeps_g_idx: bool = False  # g_idx (+ sort indices on Marlin) kept even without act-order
    per_output_workspace: bool = False  # Marlin workspace int32 [N/64*16] per layer (<= 0.8.x)


def kernel_for(quant: QuantConfig, capability: tuple[int, int], rules) -> KernelLayout:
    """The vLLM method that ends up holding the weights; `rules` is the release's rule table
    (awq_marlin_since, gptq_marlin_layout, machete_*, marlin_workspace)."""
    sm = capability[0] * 10 + capability[1]
    per_output_workspace = rules["marlin_workspace"] == "per-output"
    if quant.method == "awq":
        # awq_marlin needs sm80, 4/8 bit, group in {-1,32,64,128} (awq_marlin.py is_awq_marlin_compatible)
        marlin_ok = rules["awq_marlin_auto"] and sm >= 80 and quant.bits in (4, 8) and quant.group_size in (-1, 32, 64, 128)
        if not marlin_ok:
            return KernelLayout("awq")
        if sm == 90 and rules["machete_awq"]:
            # choose_mp_linear_kernel picks Machete first on sm90 (kernels/linear/__init__.py, 0.19+)
            return KernelLayout("machete", fp16_zeros=True)
        return KernelLayout("awq_marlin", per_output_workspace=per_output_workspace)
    if quant.method == "gptq":
        layout = rules["gptq_marlin_layout"]
        marlin_ok = layout != "none" and sm >= 80 and quant.bits in (4, 8) and not quant.zero_point \
            and quant.group_size in (-1, 32, 64, 128)
        if not marlin_ok:
            return KernelLayout("gptq", keeps_g_idx=True)
        if sm == 90 and rules["machete_gptq"]:
            # Machete never empties qzeros or g_idx (machete.py, 0.6.2+)
            return KernelLayout("machete", keeps_g_idx=rules["gptq_g_idx_parameter"])
        return KernelLayout(
            "gptq_marlin",
            keeps_zeros=layout == "zeros-kept",  # 0.6.0-0.6.1 allocate qzeros and keep them
            keeps_g_idx=layout == "lazy-repack",  # 0.4.2-0.5.1 repack at first forward: g_idx + sort kept
            per_output_workspace=per_output_workspace,
        )
    if quant.method in ("fp8", "modelopt-fp8"):
        if sm < 80:
            raise UnsupportedOnGpuError("FP8 weights need compute capability 8.0 or newer (vLLM Fp8Config.get_min_capability)")
        # sm80-86 have no FP8 tensor cores: vLLM runs FP8 weights through the Marlin weight-only kernel
        return KernelLayout("fp8_marlin" if sm < 89 else "fp8")
    raise QuantizationError(f"no kernel for {quant.method}")


def linear_tensors(
    quant: QuantConfig,
    layout: KernelLayout,
    in_features: int,
    out_features: int,
    shards: int,
    activation_dtype: str,
    full_in_features: int,
) -> tuple[StoredTensor, ...]:
    """Tensors of one quantized linear layer on one rank.

    `shards`: logical outputs fused in this layer (3 for qkv, 2 for gate_up) - per-shard scales.
    `full_in_features`: K before tensor-parallel splitting (act-order scales are replicated).
    """
    k, n = in_features, out_features
    kernel = layout.kernel
    scale_dtype = activation_dtype if activation_dtype != "float32" else "float16"
    if quant.method in ("awq", "gptq"):
        group = k if quant.group_size == -1 else quant.group_size
        groups = -(-k // group)
        packed_weight_bytes = k * n * quant.bits // 8
        pack = 32 // quant.bits if 32 % quant.bits == 0 else 0
        packed_zero_bytes = groups * n * quant.bits // 8
        tensors = [StoredTensor("qweight", (k * quant.bits // 32, n), "int32", packed_weight_bytes, "weight")]
        if kernel == "awq":
            # awq.py: qweight int32 [K, N/pack], qzeros int32 [K/g, N/pack], scales fp16 [K/g, N]
            tensors = [StoredTensor("qweight", (k, n // pack), "int32", packed_weight_bytes, "weight"),
                       StoredTensor("qzeros", (groups, n // pack), "int32", packed_zero_bytes, "quantization metadata"),
                       _tensor("scales", (groups, n), "float16")]
        elif kernel == "gptq":
            # gptq.py (exllama): qweight [K/pack, N], qzeros [K/g, N/pack], scales [K/g, N], g_idx [K]
            tensors += [StoredTensor("qzeros", (groups, n * quant.bits // 32), "int32", packed_zero_bytes, "quantization metadata"),
                        _tensor("scales", (groups, n), "float16"), _tensor("g_idx", (k,), "int32")]
        elif kernel == "machete":
            # machete.py: prepacked qweight (same bytes); AWQ zero points become fp16 [K/g, N] (scales applied);
            # GPTQ keeps its int32 qzeros and g_idx
            tensors.append(_tensor("scales", (groups, n), scale_dtype))
            if layout.fp16_zeros:
                tensors.append(_tensor("qzeros", (groups, n), scale_dtype))
            else:
                tensors.append(StoredTensor("qzeros", (groups, n * quant.bits // 32), "int32", packed_zero_bytes, "quantization metadata"))
                if layout.keeps_g_idx or quant.desc_act:
                    tensors.append(_tensor("g_idx", (k,), "int32"))
        else:
            # Marlin (awq_marlin.py / gptq_marlin.py / kernels mixed_precision/marlin.py): repacked qweight,
            # permuted scales; AWQ zero points stay int32 [K/g, N/pack]; GPTQ zero points are emptied for
            # symmetric checkpoints; g_idx and its sort indices stay only with act-order. With act-order the
            # scales of row-parallel layers cover the full K on every rank (marlin_repeat_scales_on_all_ranks).
            scale_groups = groups
            if quant.desc_act and quant.group_size != -1 and full_in_features != k:
                scale_groups = -(-full_in_features // group)
            tensors = [StoredTensor("qweight", (k // 16, n * 16 // pack), "int32", packed_weight_bytes, "weight"),
                       _tensor("scales", (scale_groups, n), scale_dtype)]
            if kernel == "awq_marlin" or (kernel == "gptq_marlin" and layout.keeps_zeros):
                tensors.append(StoredTensor("qzeros", (groups, n // pack), "int32", packed_zero_bytes, "quantization metadata"))
            if quant.desc_act or layout.keeps_g_idx:
                tensors += [_tensor("g_idx", (k,), "int32"), _tensor("g_idx_sort_indices", (k,), "int32")]
            if layout.per_output_workspace:
                tensors.append(_tensor("workspace", (n // 64 * 16,), "int32"))
        return tuple(tensors)
    if quant.method in ("fp8", "modelopt-fp8"):
        if kernel == "fp8_marlin":
            # Marlin FP8 (sm80-86): weight repacked as int32 (same bytes), scales channelwise in the
            # activation dtype (marlin_utils_fp8.py prepare_fp8_layer_for_marlin).
            return (
                StoredTensor("weight", (k // 16, n * 16 // 4), "int32", k * n, "weight"),
                _tensor("weight_scale", (n,), scale_dtype),
            )
        tensors = [StoredTensor("weight", (n, k), "float8_e4m3fn", k * n, "weight")]
        if quant.weight_block:
            block_n, block_k = quant.weight_block
            tensors.append(_tensor("weight_scale_inv", (-(-n // block_n), -(-k // block_k)), "float32"))
        else:
            tensors.append(_tensor("weight_scale", (shards if quant.serialized else 1,), "float32"))
            if quant.static_input_scale:
                tensors.append(_tensor("input_scale", (shards,), "float32"))
        return tuple(tensors)
    raise QuantizationError(f"no layout for {quant.method}")


def expert_tensors(
    quant: QuantConfig | None,
    layout: KernelLayout | None,
    num_experts: int,
    hidden: int,
    intermediate: int,
    activation_dtype: str,
) -> tuple[StoredTensor, ...]:
    """The fused-MoE tensors of one layer on one rank: w13 (gate and up, [E, 2*I, H]) and w2 ([E, H, I]).

    `num_experts` are the experts on this rank and `intermediate` their intermediate size on this rank
    (vllm/model_executor/layers/fused_moe/layer.py FusedMoE.create_weights, every release).
    """
    e, h, i = num_experts, hidden, intermediate
    if quant is None or not quant.converts("experts"):
        return (
            _tensor("w13_weight", (e, 2 * i, h), activation_dtype, "weight"),
            _tensor("w2_weight", (e, h, i), activation_dtype, "weight"),
        )
    if quant.method in ("fp8", "modelopt-fp8"):
        # Fp8MoEMethod.create_weights (fp8.py): fp8 weights; block scales [E, 2I/bn, H/bk] and
        # [E, H/bn, I/bk], else per-expert scales w13 [E, 2] (one per shard, merged after load) and w2 [E]
        tensors = [
            StoredTensor("w13_weight", (e, 2 * i, h), "float8_e4m3fn", e * 2 * i * h, "weight"),
            StoredTensor("w2_weight", (e, h, i), "float8_e4m3fn", e * h * i, "weight"),
        ]
        if quant.weight_block:
            block_n, block_k = quant.weight_block
            tensors += [
                _tensor("w13_weight_scale_inv", (e, -(-2 * i // block_n), -(-h // block_k)), "float32"),
                _tensor("w2_weight_scale_inv", (e, -(-h // block_n), -(-i // block_k)), "float32"),
            ]
        else:
            tensors += [_tensor("w13_weight_scale", (e, 2), "float32"), _tensor("w2_weight_scale", (e,), "float32")]
            if quant.static_input_scale:
                tensors += [_tensor("w13_input_scale", (e,), "float32"), _tensor("w2_input_scale", (e,), "float32")]
        return tuple(tensors)
    raise QuantizationError(f"{quant.method} mixture-of-experts weights are not sized yet")
