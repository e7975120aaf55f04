"""How a quantized linear layer is stored on the GPU, per rank, after vLLM's post-load repacking: the
kernel each release picks per GPU (kernel_for) and the tensors it keeps (linear_tensors, expert_tensors).
The scheme as the checkpoint stores it is model/quantization.py.

K = input features and N = output features of the layer *on this rank*; g = group size.
Layouts follow vLLM's create_weights() / process_weights_after_loading() of each method
(vllm/model_executor/layers/quantization/awq.py, awq_marlin.py, gptq.py, gptq_marlin.py, fp8.py,
fbgemm_fp8.py, modelopt.py, bitsandbytes.py, mxfp4.py, compressed_tensors/; 0.4-0.33) and
design/vllm-memory.md §8. Paths below are relative to vllm/model_executor/layers/quantization/.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...errors import EngineRefused
from ...model.dtypes import DTYPE_BYTES
from ...model.quantization import QuantConfig, QuantizationError, StoredTensor
from ...units import ceil_div, round_up


class UnsupportedOnGpuError(EngineRefused, QuantizationError):
    """The engine itself refuses this format on this GPU (a startup refusal, not a tool limitation)."""

    engine_label = "vLLM"


class UnsupportedInReleaseError(UnsupportedOnGpuError):
    """The chosen vLLM release has no such quantization method (a startup refusal of that release)."""


ONLINE_FP8 = QuantConfig(method="fp8", bits=8, group_size=-1, serialized=False)
# `--quantization bitsandbytes` on a 16-bit checkpoint: every linear layer is quantized while loading
# with quantize_4bit(compress_statistics=True, quant_type="nf4") (model_loader bitsandbytes_loader.py
# _unquantized_generator; loader.py BitsAndBytesModelLoader <= 0.8.x); lm_head and embeddings stay.
ONLINE_BNB = QuantConfig(method="bitsandbytes", bits=4, group_size=64, serialized=False, scheme="nf4",
                         double_quant=True, ignore_style="bnb")


def _tensor(suffix: str, shape: tuple[int, ...], dtype: str, role: str = "quantization metadata") -> StoredTensor:
    count = 1
    for dim in shape:
        count *= dim
    return StoredTensor(suffix, shape, dtype, count * DTYPE_BYTES[dtype], role)


def _packed(suffix: str, shape: tuple[int, ...], dtype: str, num_bytes: int, role: str = "weight") -> StoredTensor:
    """A tensor whose bytes are not shape x dtype width (sub-byte values packed into int32/uint8)."""
    return StoredTensor(suffix, shape, dtype, num_bytes, role)


@dataclass(frozen=True)
class KernelLayout:
    """What the chosen vLLM kernel keeps per linear layer (design notes §8 and
    docs/research-weights-by-release.md, read from each release's quantization/*.py)."""

    # awq, awq_marlin, gptq, gptq_marlin, machete, fp8, fp8_marlin, int8, fp4, fp4_marlin, bitsandbytes,
    # fbgemm_fp8, mxfp4
    kernel: str
    keeps_zeros: bool = True  # zero points stay on the GPU (int32 packed, or fp16 for Machete AWQ)
    fp16_zeros: bool = False  # Machete (sm90) AWQ: zero points as fp16 [K/g, N] with scales applied
    keeps_g_idx: bool = False  # g_idx (+ sort indices on Marlin) kept even without act-order
    per_output_workspace: bool = False  # Marlin workspace int32 [N/64*16] per layer (<= 0.8.x)
    # --- fused-MoE path and format details (defaulted) ---
    moe_kernel: str = ""  # mxfp4: marlin | triton | flashinfer-trtllm
    moe_rule: str = ""  # compressed-tensors WNA16 experts: marlin | triton-when-many-experts | marlin-when-supported
    pad_intermediate: int = 1  # mxfp4: expert intermediate size rounded up to this (per rank)
    pad_hidden: int = 1  # mxfp4: expert hidden size rounded up to this
    bnb_dequantized: bool = False  # bitsandbytes: double-quantized absmax expanded to fp32 at load (0.9.2+)
    note: str = ""  # the path assumed and why, for the explanation


def _rule(rules, name: str):
    """A release rule (engines/vllm/releases.py); `rules` is that release's rule set."""
    return rules[name]


def kernel_for(quant: QuantConfig, capability: tuple[int, int], rules) -> KernelLayout:
    """The vLLM method that ends up holding the weights; `rules` is the release's rule table
    (awq_marlin_since, gptq_marlin_layout, machete_*, marlin_workspace, and the rules in _RULE_FALLBACKS)."""
    sm = capability[0] * 10 + capability[1]
    if quant.method == "awq":
        return _awq_kernel(quant, sm, rules)
    if quant.method == "gptq":
        return _gptq_kernel(quant, sm, rules)
    if quant.method in ("fp8", "modelopt-fp8"):
        if sm < 80:
            raise UnsupportedOnGpuError("FP8 weights need compute capability 8.0 or newer (vLLM Fp8Config.get_min_capability)")
        # sm80-86 have no FP8 tensor cores: vLLM runs FP8 weights through the Marlin weight-only kernel
        return KernelLayout("fp8_marlin" if sm < 89 else "fp8")
    if quant.method == "compressed-tensors":
        return _ct_kernel(quant, sm, rules)
    if quant.method == "bitsandbytes":
        return _bnb_kernel(sm, rules)
    if quant.method == "modelopt-fp4":
        if not _rule(rules, "modelopt_nvfp4_available"):
            raise UnsupportedInReleaseError("this vLLM release has no ModelOpt NVFP4 support (modelopt.py from 0.8.0)")
        return _fp4_kernel(sm, rules, "ModelOptNvFp4Config")
    if quant.method == "mxfp4":
        return _mxfp4_kernel(sm, rules)
    if quant.method == "fbgemm-fp8":
        if sm < 80:
            raise UnsupportedOnGpuError("FBGEMM FP8 needs compute capability 8.0 or newer (FBGEMMFp8Config.get_min_capability)")
        # fbgemm_fp8.py: use_marlin below sm89 (no FP8 tensor cores)
        return KernelLayout("fp8_marlin" if sm < 89 else "fbgemm_fp8")
    raise QuantizationError(f"no kernel for {quant.method}")


def _awq_kernel(quant: QuantConfig, sm: int, rules) -> KernelLayout:
    per_output_workspace = rules["marlin_workspace"] == "per-output"
    # awq_marlin needs sm80, 4/8 bit, group in {-1,32,64,128} (awq_marlin.py is_awq_marlin_compatible)
    marlin_ok = rules["awq_marlin_auto"] and sm >= 80 and quant.bits in (4, 8) and quant.group_size in (-1, 32, 64, 128)
    if not marlin_ok:
        return KernelLayout("awq")
    moe_rule = str(_rule(rules, "awq_moe"))
    if sm == 90 and rules["machete_awq"]:
        # choose_mp_linear_kernel picks Machete first on sm90 (kernels/linear/__init__.py, 0.19+)
        return KernelLayout("machete", fp16_zeros=True, moe_rule=moe_rule)
    return KernelLayout("awq_marlin", per_output_workspace=per_output_workspace, moe_rule=moe_rule)


def _gptq_kernel(quant: QuantConfig, sm: int, rules) -> KernelLayout:
    per_output_workspace = rules["marlin_workspace"] == "per-output"
    layout = rules["gptq_marlin_layout"]
    marlin_ok = layout != "none" and sm >= 80 and quant.bits in (4, 8) and not quant.zero_point \
        and quant.group_size in (-1, 32, 64, 128)
    if not marlin_ok:
        return KernelLayout("gptq", keeps_g_idx=True)
    moe_rule = f"{_rule(rules, 'gptq_moe')}:zeros{_rule(rules, 'gptq_moe_zeros_bytes')}"
    if sm == 90 and rules["machete_gptq"]:
        # Machete never empties qzeros or g_idx (machete.py, 0.6.2+)
        return KernelLayout("machete", keeps_g_idx=rules["gptq_g_idx_parameter"], moe_rule=moe_rule)
    return KernelLayout(
        "gptq_marlin",
        moe_rule=moe_rule,
        keeps_zeros=layout == "zeros-kept",  # 0.6.0-0.6.1 allocate qzeros and keep them
        keeps_g_idx=layout == "lazy-repack",  # 0.4.2-0.5.1 repack at first forward: g_idx + sort kept
        per_output_workspace=per_output_workspace,
    )


def _bnb_kernel(sm: int, rules) -> KernelLayout:
    if not _rule(rules, "bnb_available"):
        raise UnsupportedInReleaseError(
            "this vLLM release has no bitsandbytes quantization (bitsandbytes.py exists in 0.5.0-0.27.x)")
    if sm < 70:
        raise UnsupportedOnGpuError("bitsandbytes needs compute capability 7.0 or newer (BitsAndBytesConfig.get_min_capability)")
    dequantized = bool(_rule(rules, "bnb_dequantizes_double_quant"))
    note = "bitsandbytes kernels; " + ("double-quantized absmax expanded to fp32 at load (dequantize_dq, 0.9.2+)"
                                       if dequantized else "absmax kept as stored (uint8 + nested fp32 when double-quantized)")
    return KernelLayout("bitsandbytes", bnb_dequantized=dequantized, note=note)


def _ct_kernel(quant: QuantConfig, sm: int, rules) -> KernelLayout:
    moe_rule = str(_rule(rules, "ct_moe_wna16"))
    scheme = quant.scheme
    if scheme not in tuple(_rule(rules, "ct_schemes")):
        raise UnsupportedInReleaseError(f"this vLLM release has no compressed-tensors {scheme} scheme "
                                        "(compressed_tensors/schemes/)")
    if scheme == "wNa16":
        minimum = int(_rule(rules, "ct_wna16_min_capability"))
        if sm < minimum:
            raise UnsupportedOnGpuError(
                f"compressed-tensors W{quant.bits}A16 needs compute capability {minimum / 10:.1f} or newer "
                "(CompressedTensorsWNA16.get_min_capability)")
        per_output_workspace = rules["marlin_workspace"] == "per-output"
        # choose_mp_linear_kernel (kernels/mixed_precision/__init__.py, 0.6.2+): Machete first on sm90 -
        # symmetric only until it took zero points with AWQ (0.19); act-order goes to Marlin here (Machete
        # keeps g_idx + an int32 [K] permutation instead: the same bytes)
        machete = sm == 90 and rules["machete_gptq"] and not quant.desc_act and quant.group_size in (-1, 64, 128) \
            and (not quant.zero_point or rules["machete_awq"])
        if machete:
            return KernelLayout("machete", fp16_zeros=quant.zero_point, moe_rule=moe_rule,
                                note="Machete (sm90): scales [K/g, N], zero points as fp16 [K/g, N]")
        return KernelLayout("gptq_marlin", keeps_zeros=quant.zero_point, per_output_workspace=per_output_workspace,
                            moe_rule=moe_rule, note="Marlin: repacked weight, permuted scales")
    if scheme == "w8a8-int8":
        if sm < 75:
            raise UnsupportedOnGpuError("compressed-tensors W8A8 INT8 needs compute capability 7.5 or newer")
        return KernelLayout("int8", moe_rule=moe_rule, note="CUTLASS int8 scaled_mm: weight transposed in place")
    if scheme in ("w8a8-fp8", "w8a16-fp8"):
        if sm < 80:
            raise UnsupportedOnGpuError("compressed-tensors FP8 needs compute capability 8.0 or newer")
        # _get_scheme_from_parts: W8A8Fp8 needs sm89, else CompressedTensorsW8A16Fp8 (Marlin weight-only)
        if scheme == "w8a16-fp8" or sm < 89:
            return KernelLayout("fp8_marlin", moe_rule=moe_rule, note="no FP8 tensor cores below sm89: Marlin FP8 weight-only")
        return KernelLayout("fp8", moe_rule=moe_rule)
    if scheme in ("nvfp4", "nvfp4a16"):
        layout = _fp4_kernel(sm, rules, "CompressedTensorsW4A4Fp4")
        if scheme == "nvfp4a16" and layout.kernel == "fp4":
            layout = KernelLayout("fp4_marlin", note="W4A16 FP4 always runs on Marlin (CompressedTensorsW4A16Fp4)")
        return layout
    raise QuantizationError(f"no kernel for compressed-tensors {scheme}")


def _fp4_kernel(sm: int, rules, owner: str) -> KernelLayout:
    if sm >= 100:
        return KernelLayout("fp4", note="native FP4 GEMM (CUTLASS/FlashInfer): fp8 block scales swizzled, padded to "
                                        "[round_up(N,128), round_up(K/16,4)]")
    minimum = int(_rule(rules, "nvfp4_min_capability"))
    if sm < minimum:
        raise UnsupportedOnGpuError(f"NVFP4 needs compute capability {minimum / 10:.1f} or newer in this release "
                                    f"({owner}.get_min_capability)")
    return KernelLayout("fp4_marlin", note="no FP4 tensor cores below sm100: Marlin FP4 weight-only "
                                           "(marlin_utils_fp4.py prepare_fp4_layer_for_marlin)")


def _mxfp4_kernel(sm: int, rules) -> KernelLayout:
    if not _rule(rules, "mxfp4_available"):
        raise UnsupportedInReleaseError("this vLLM release has no mxfp4 quantization (mxfp4.py from 0.10.1)")
    if sm < 80:
        raise UnsupportedOnGpuError("MXFP4 needs compute capability 8.0 or newer (Mxfp4Config.get_min_capability)")
    if sm // 10 == 10:
        # Blackwell with FlashInfer: TRT-LLM MXFP4 x BF16 MoE (mxfp4.py 0.10.1 _should_use_flashinfer_mxfp4_bf16;
        # fused_moe/oracle/mxfp4.py 0.19+ priority list): I' and H' rounded up to 256, biases fp32
        return KernelLayout("mxfp4", moe_kernel="flashinfer-trtllm", pad_intermediate=256, pad_hidden=256,
                            note="MXFP4 experts on FlashInfer TRT-LLM (sm100): I' = H' = x256, fp32 biases")
    if sm == 90 and _rule(rules, "mxfp4_sm90_backend") == "triton":
        # triton_kernels matmul_ogs: I' rounded to 64, H unpadded; Hopper swizzle copies the scales
        # (HopperMXScaleLayout pads rows to 256) while the loaded scale parameters stay (mxfp4.py 0.12+)
        return KernelLayout("mxfp4", moe_kernel="triton", pad_intermediate=64, pad_hidden=1,
                            note="MXFP4 experts on triton_kernels (sm90): I' = x64, swizzled scale copies, fp32 biases")
    return KernelLayout("mxfp4", moe_kernel="marlin", pad_intermediate=128, pad_hidden=256,
                        note="MXFP4 experts on Marlin FP4 weight-only: I' = x128, H' = x256, bf16 biases")


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
        return _awq_gptq_linear(quant, layout, k, n, scale_dtype, full_in_features)
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
    if quant.method == "compressed-tensors":
        return _ct_linear(quant, layout, k, n, shards, scale_dtype, full_in_features)
    if quant.method == "bitsandbytes":
        return _bnb_linear(quant, layout, k, n, shards)
    if quant.method == "modelopt-fp4":
        return _fp4_linear(layout, k, n, quant.group_size, scale_dtype, modelopt=True)
    if quant.method == "fbgemm-fp8":
        if kernel == "fp8_marlin":
            return (StoredTensor("weight", (k // 16, n * 16 // 4), "int32", k * n, "weight"),
                    _tensor("weight_scale", (n,), scale_dtype))
        # fbgemm_fp8.py create_weights: fp8 [N, K] (transposed view after load), fp32 [N, 1] scales and
        # the activation-scale upper bound as a one-element fp32 parameter
        return (StoredTensor("weight", (n, k), "float8_e4m3fn", k * n, "weight"),
                _tensor("weight_scale", (n, 1), "float32"), _tensor("input_scale_ub", (), "float32"))
    if quant.method == "mxfp4":
        raise QuantizationError("MXFP4 checkpoints keep every linear layer in 16 bit (only the experts are MXFP4)")
    raise QuantizationError(f"no layout for {quant.method}")


def _awq_gptq_linear(quant: QuantConfig, layout: KernelLayout, k: int, n: int, scale_dtype: str,
                     full_in_features: int) -> tuple[StoredTensor, ...]:
    """AWQ / GPTQ linear layers on the plain, Machete or Marlin kernel."""
    kernel = layout.kernel
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


def _ct_linear(quant: QuantConfig, layout: KernelLayout, k: int, n: int, shards: int, scale_dtype: str,
               full_in: int) -> tuple[StoredTensor, ...]:
    scheme = quant.scheme
    if scheme == "wNa16":
        return _ct_wna16_linear(quant, layout, k, n, scale_dtype, full_in)
    if scheme == "w8a8-int8":
        return _ct_int8_linear(quant, k, n, shards)
    if scheme in ("w8a8-fp8", "w8a16-fp8"):
        return _ct_fp8_linear(quant, layout, k, n, scale_dtype)
    if scheme in ("nvfp4", "nvfp4a16"):
        return _fp4_linear(layout, k, n, 16, scale_dtype, modelopt=False)
    raise QuantizationError(f"no layout for compressed-tensors {scheme}")


def _ct_wna16_linear(quant: QuantConfig, layout: KernelLayout, k: int, n: int, scale_dtype: str,
                     full_in: int) -> tuple[StoredTensor, ...]:
    kernel = layout.kernel
    # compressed_tensors_wNa16.py create_weights: weight_packed int32 [N, K/pack], weight_scale
    # [N, K/g] (act dtype; [N, 1] channelwise), weight_zero_point int32 [N/pack, K/g] when asymmetric,
    # weight_g_idx int32 [K] with actorder "group", weight_shape int64 [2] (never freed)
    pack = 32 // quant.bits
    group = k if quant.group_size == -1 else quant.group_size
    groups = ceil_div(k, group)
    scale_groups = groups
    if quant.desc_act and quant.group_size != -1 and full_in != k:
        scale_groups = ceil_div(full_in, group)  # marlin_repeat_scales_on_all_ranks: full K on row-parallel ranks
    tensors = [_packed("weight_packed", (k // 16, n * 16 // pack), "int32", k * n * quant.bits // 8)]
    if kernel == "machete":
        # machete.py (0.8.5, 0.33): machete_prepack_B (same bytes); scales [K/g, N]; zero points with the
        # scales pre-applied, in the activation dtype (0.19+)
        tensors.append(_tensor("weight_scale", (groups, n), scale_dtype))
        if quant.zero_point:
            tensors.append(_tensor("weight_zero_point", (groups, n), scale_dtype))
    else:
        # kernels/mixed_precision/marlin.py: gptq_marlin_repack, marlin_permute_scales, marlin_zero_points
        # (int32 [K/g, N/pack]); g_idx sorted + g_idx_sort_indices with act-order, else empty
        tensors.append(_tensor("weight_scale", (scale_groups, n), scale_dtype))
        if quant.zero_point:
            tensors.append(_packed("weight_zero_point", (groups, n // pack), "int32", groups * n * quant.bits // 8,
                                   "quantization metadata"))
        if quant.desc_act:
            tensors += [_tensor("weight_g_idx", (k,), "int32"), _tensor("g_idx_sort_indices", (k,), "int32")]
        if layout.per_output_workspace:
            tensors.append(_tensor("workspace", (n // 64 * 16,), "int32"))
    tensors.append(_tensor("weight_shape", (2,), "int64"))
    return tuple(tensors)


def _ct_int8_linear(quant: QuantConfig, k: int, n: int, shards: int) -> tuple[StoredTensor, ...]:
    # compressed_tensors_w8a8_int8.py + kernels/scaled_mm/cutlass.py: int8 [N, K] (transposed in place),
    # per-channel fp32 [N, 1]; per-tensor scales of fused layers become per-channel (convert_to_channelwise);
    # static input scale -> one fp32 scalar; asymmetric activations add the int32 zero point and
    # azp_adj int32 [1, N]
    tensors = [_tensor("weight", (n, k), "int8", "weight")]
    if quant.weight_strategy == "channel" or shards > 1:
        tensors.append(_tensor("weight_scale", (n, 1), "float32"))
    else:
        tensors.append(_tensor("weight_scale", (1,), "float32"))
    if quant.static_input_scale:
        tensors.append(_tensor("input_scale", (), "float32"))
        if not quant.input_symmetric:
            tensors.append(_tensor("input_zero_point", (), "int32"))
    if not quant.input_symmetric:
        tensors.append(_tensor("azp_adj", (1, n), "int32"))
    return tuple(tensors)


def _ct_fp8_linear(quant: QuantConfig, layout: KernelLayout, k: int, n: int, scale_dtype: str) -> tuple[StoredTensor, ...]:
    kernel = layout.kernel
    if kernel == "fp8_marlin":
        # CompressedTensorsW8A16Fp8 -> prepare_fp8_layer_for_marlin: int32 repack (same bytes), scales in
        # the activation dtype: per output channel, or per 128-block of K for block scales
        scale_rows = ceil_div(k, quant.weight_block[1]) if quant.weight_block else 1
        return (_packed("weight", (k // 16, n * 16 // 4), "int32", k * n),
                _tensor("weight_scale", (scale_rows, n) if quant.weight_block else (n,), scale_dtype))
    # compressed_tensors_w8a8_fp8.py: fp8 [N, K]; channel scales fp32 [N, 1]; block scales fp32
    # [N/bn, K/bk]; per-tensor scales of fused layers requantized to one max scale
    # (requantize_with_max_scale); static input scales -> one fp32 scalar
    tensors = [_tensor("weight", (n, k), "float8_e4m3fn", "weight")]
    if quant.weight_block:
        block_n, block_k = quant.weight_block
        tensors.append(_tensor("weight_scale", (ceil_div(n, block_n), ceil_div(k, block_k)), "float32"))
    elif quant.weight_strategy == "channel":
        tensors.append(_tensor("weight_scale", (n, 1), "float32"))
    else:
        tensors.append(_tensor("weight_scale", (), "float32"))
    if quant.static_input_scale:
        tensors.append(_tensor("input_scale", (), "float32"))
    return tuple(tensors)


def _fp4_linear(layout: KernelLayout, k: int, n: int, group: int, scale_dtype: str, modelopt: bool) -> tuple[StoredTensor, ...]:
    """NVFP4: two e2m1 values per byte, an fp8-e4m3 scale per `group` (16) values, fp32 global scales.
    modelopt.py ModelOptNvFp4LinearMethod (0.8+) / compressed_tensors_w4a4_nvfp4.py."""
    weight = "weight" if modelopt else "weight_packed"
    if layout.kernel == "fp4_marlin":
        # prepare_fp4_layer_for_marlin (utils/marlin_utils_fp4.py 0.9+): gptq_marlin_repack (same bytes);
        # scales permuted and kept one byte each (nvfp4_marlin_process_scales) [K/16, N]; the global scale
        # in the activation dtype; ModelOpt also keeps input_scale_inv (alpha and input_scale deleted)
        tensors = [_packed(weight, (k // 16, n * 16 // 8), "int32", k * n // 2),
                   _tensor("weight_scale", (ceil_div(k, group), n), "float8_e4m3fn"),
                   _tensor("weight_scale_2" if modelopt else "weight_global_scale", (), scale_dtype)]
        if modelopt:
            tensors.append(_tensor("input_scale_inv", (), "float32"))
        return tuple(tensors)
    # native FP4 GEMM: swizzle_blockscale pads the scale rows to 128 and the scale columns to 4
    tensors = [_packed(weight, (n, k // 2), "uint8", k * n // 2),
               _tensor("weight_scale", (round_up(n, 128), round_up(ceil_div(k, group), 4)), "float8_e4m3fn")]
    if modelopt:
        # input_scale and weight_scale_2 reduced to one max each; alpha and 1/input_scale precomputed
        tensors += [_tensor(name, (), "float32") for name in ("input_scale", "weight_scale_2", "alpha", "input_scale_inv")]
    else:
        tensors += [_tensor(name, (), "float32") for name in ("weight_global_scale", "input_global_scale", "alpha")]
    return tuple(tensors)


def _bnb_linear(quant: QuantConfig, layout: KernelLayout, k: int, n: int, shards: int) -> tuple[StoredTensor, ...]:
    """bitsandbytes.py create_weights + the loader's quant states (model_loader/bitsandbytes_loader.py;
    loader.py BitsAndBytesModelLoader <= 0.8.x). One QuantState per checkpoint tensor (q, k, v / gate, up)."""
    if quant.scheme == "int8":
        # Int8Params [N, K]; the per-row SCB scales stay on the CPU in the quant-state dict until the first
        # forward moves them (_apply_8bit_weight), so they are not in the load figure
        return (_tensor("weight", (n, k), "int8", "weight"),)
    elements = k * n
    # create_qweight_for_4bit: uint8 [K*N/2, 1] (two 4-bit values per byte for a 16-bit model)
    tensors = [_packed("weight", (elements // 2, 1), "uint8", elements // 2)]
    blocks = ceil_div(elements, quant.group_size)  # one absmax per 64 values
    nested = quant.double_quant or not quant.serialized  # in-flight: quantize_4bit(compress_statistics=True)
    if nested and not layout.bnb_dequantized:
        # QuantState.from_dict / quantize_4bit: uint8 absmax, its fp32 absmax per 256 blocks, an fp32 offset;
        # a checkpoint also brings its nested_quant_map [256] per tensor (in-flight shares one cached map)
        tensors.append(_tensor("weight.absmax", (blocks,), "uint8"))
        tensors.append(_tensor("weight.nested_absmax", (shards * ceil_div(ceil_div(blocks, shards), 256),), "float32"))
        tensors.append(_tensor("weight.nested_offset", (shards,), "float32"))
        if quant.serialized:
            tensors.append(_tensor("weight.nested_quant_map", (shards, 256), "float32"))
    else:
        # plain fp32 absmax, or the double-quantized one expanded at load (dequantize_dq, 0.9.2+)
        tensors.append(_tensor("weight.absmax", (blocks,), "float32"))
    tensors.append(_tensor("weight.quant_map", (shards, 16), "float32"))  # the nf4/fp4 code table per state
    return tuple(tensors)


def expert_tensors(
    quant: QuantConfig | None,
    layout: KernelLayout | None,
    num_experts: int,
    hidden: int,
    intermediate: int,
    activation_dtype: str,
    gated: bool = True,
) -> tuple[StoredTensor, ...]:
    """The fused-MoE tensors of one layer on one rank: w13 (gate and up, [E, 2*I, H]) and w2 ([E, H, I]).

    `gated=False` is FusedMoE(is_act_and_mul=False) (Nemotron-H relu2 experts): w13 holds the up projection
    only, [E, I, H], and every w13 scale / packing follows its I rows (w13_num_shards = 1 in the
    ModelOpt / compressed-tensors methods, 0.12+).

    `num_experts` are the experts on this rank and `intermediate` their intermediate size on this rank
    (vllm/model_executor/layers/fused_moe/layer.py FusedMoE.create_weights, every release).
    MXFP4 returns the expert biases too (w13_bias / w2_bias, padded and possibly fp32): the caller must not
    add its own for that method.
    """
    e, h, i = num_experts, hidden, intermediate
    s = 2 if gated else 1  # w13 shards: gate + up, or up only
    if quant is None or not quant.converts("experts"):
        return (
            _tensor("w13_weight", (e, s * i, h), activation_dtype, "weight"),
            _tensor("w2_weight", (e, h, i), activation_dtype, "weight"),
        )
    scale_dtype = activation_dtype if activation_dtype != "float32" else "float16"
    if quant.method in ("fp8", "modelopt-fp8"):
        return _fp8_experts(quant, e, h, i, s)
    if quant.method == "compressed-tensors":
        return _ct_experts(quant, layout, e, h, i, activation_dtype, scale_dtype, s)
    if quant.method == "mxfp4":
        return _mxfp4_experts(layout, e, h, i, activation_dtype, s)
    if quant.method == "modelopt-fp4":
        return _fp4_experts(layout, e, h, i, scale_dtype, modelopt=True, shards=s)
    if quant.method in ("awq", "gptq"):
        return _wna16_experts(quant, layout, e, h, i, activation_dtype, s)
    if quant.method == "bitsandbytes":
        return _bnb_experts(quant, layout, e, h, i, s)
    raise QuantizationError(f"{quant.method} mixture-of-experts weights are not sized yet")


def _fp8_experts(quant: QuantConfig, e: int, h: int, i: int, s: int) -> tuple[StoredTensor, ...]:
    # Fp8MoEMethod.create_weights (fp8.py): fp8 weights; block scales [E, 2I/bn, H/bk] and
    # [E, H/bn, I/bk], else per-expert scales w13 [E, 2] (one per shard, merged after load) and w2 [E]
    tensors = [
        StoredTensor("w13_weight", (e, s * i, h), "float8_e4m3fn", e * s * i * h, "weight"),
        StoredTensor("w2_weight", (e, h, i), "float8_e4m3fn", e * h * i, "weight"),
    ]
    if quant.weight_block:
        block_n, block_k = quant.weight_block
        tensors += [
            _tensor("w13_weight_scale_inv", (e, -(-s * i // block_n), -(-h // block_k)), "float32"),
            _tensor("w2_weight_scale_inv", (e, -(-h // block_n), -(-i // block_k)), "float32"),
        ]
    else:
        tensors += [_tensor("w13_weight_scale", (e, s), "float32"), _tensor("w2_weight_scale", (e,), "float32")]
        if quant.static_input_scale:
            tensors += [_tensor("w13_input_scale", (e,), "float32"), _tensor("w2_input_scale", (e,), "float32")]
    return tuple(tensors)


def _bnb_experts(quant: QuantConfig, layout: KernelLayout | None, e: int, h: int, i: int,
                 s: int) -> tuple[StoredTensor, ...]:
    # BitsAndBytesMoEMethod (bitsandbytes.py 0.10+): flattened uint8 experts, absmax fused per w13 / w2
    tensors = []
    for name, elements, shards in (("w13_weight", e * s * i * h, s * e), ("w2_weight", e * h * i, e)):
        for tensor in _bnb_linear(quant, layout or KernelLayout("bitsandbytes"), elements, 1, shards):
            tensors.append(StoredTensor(tensor.suffix.replace("weight", name, 1), tensor.shape, tensor.dtype,
                                        tensor.bytes, tensor.role))
    return tuple(tensors)


def _ct_experts(quant: QuantConfig, layout: KernelLayout | None, e: int, h: int, i: int, activation_dtype: str,
                scale_dtype: str, s: int = 2) -> tuple[StoredTensor, ...]:
    scheme = quant.scheme
    if scheme == "wNa16":
        bits, g = quant.bits, quant.group_size
        rule = (layout.moe_rule if layout and layout.moe_rule else "marlin-when-supported")
        marlin_supported = h % 128 == 0 and i % max(64, g) == 0 and g in (-1, 32, 64, 128)
        if rule == "marlin":
            marlin = True
        elif rule == "triton-when-many-experts":
            # compressed_tensors_moe.py 0.8.4-0.8.5 get_moe_method
            marlin = not ((e >= 16 or activation_dtype != "float16") and not quant.desc_act and g != -1)
        else:
            marlin = marlin_supported or g == -1 or quant.desc_act  # the Triton method takes neither
        g13 = 1 if g == -1 else h // g
        g2 = 1 if g == -1 else max(1, i // g)
        tensors = [
            _packed("w13_weight_packed", (e, h * bits // 32, s * i), "int32", e * s * i * h * bits // 8),
            _packed("w2_weight_packed", (e, i * bits // 32, h), "int32", e * h * i * bits // 8),
            _tensor("w13_weight_scale", (e, g13, s * i), scale_dtype),
            _tensor("w2_weight_scale", (e, g2, h), scale_dtype),
        ]
        if quant.zero_point:
            pack = 32 // bits
            tensors += [_tensor("w13_weight_zero_point", (e, g13, s * i // pack), "int32"),
                        _tensor("w2_weight_zero_point", (e, g2, h // pack), "int32")]
        # w13/w2_weight_shape: torch.empty(E, 2) in the default (model) dtype, never freed
        tensors += [_tensor("w13_weight_shape", (e, 2), activation_dtype), _tensor("w2_weight_shape", (e, 2), activation_dtype)]
        if not marlin or quant.desc_act:
            # CompressedTensorsWNA16MoEMethod (moe_wna16 Triton) never frees the g_idx and sort-index
            # parameters it creates; the Marlin method keeps them only with act-order
            tensors += [_tensor("w13_weight_g_idx", (e, h), "int32"), _tensor("w2_weight_g_idx", (e, i), "int32"),
                        _tensor("w13_g_idx_sort_indices", (e, h), "int32"), _tensor("w2_g_idx_sort_indices", (e, i), "int32")]
        return tuple(tensors)
    if scheme in ("w8a8-fp8", "w8a16-fp8", "w8a8-int8"):
        # CompressedTensorsW8A8Fp8MoEMethod / W8A8Int8MoEMethod: 8-bit experts; channel scales fp32
        # [E, 2I, 1] / [E, H, 1], block scales [E, 2I/bn, H/bk], per-tensor [E, 2] -> [E] after load
        dtype = "int8" if scheme == "w8a8-int8" else "float8_e4m3fn"
        tensors = [_tensor("w13_weight", (e, s * i, h), dtype, "weight"), _tensor("w2_weight", (e, h, i), dtype, "weight")]
        if quant.weight_block:
            bn, bk = quant.weight_block
            tensors += [_tensor("w13_weight_scale", (e, ceil_div(s * i, bn), ceil_div(h, bk)), "float32"),
                        _tensor("w2_weight_scale", (e, ceil_div(h, bn), ceil_div(i, bk)), "float32")]
        elif quant.weight_strategy == "channel":
            tensors += [_tensor("w13_weight_scale", (e, s * i, 1), "float32"), _tensor("w2_weight_scale", (e, h, 1), "float32")]
        else:
            tensors += [_tensor("w13_weight_scale", (e,), "float32"), _tensor("w2_weight_scale", (e,), "float32")]
        if quant.static_input_scale:
            tensors += [_tensor("w13_input_scale", (e,), "float32"), _tensor("w2_input_scale", (e,), "float32")]
        return tuple(tensors)
    if scheme in ("nvfp4", "nvfp4a16"):
        return _fp4_experts(layout, e, h, i, scale_dtype, modelopt=False, shards=s)
    raise QuantizationError(f"compressed-tensors {scheme} mixture-of-experts weights are not sized yet")


def _wna16_experts(quant: QuantConfig, layout: KernelLayout | None, e: int, h: int, i: int, activation_dtype: str,
                   s: int = 2) -> tuple[StoredTensor, ...]:
    """AWQ / GPTQ experts. The method per release (layout.moe_rule from the release table): none before 0.6.3 (AWQ)
    / 0.6.1 (GPTQ) - FusedMoE asserts -; Marlin (AWQMoEMethod / GPTQMarlinMoEMethod, renamed AWQMarlinMoEMethod,
    AutoAWQMoEMethod, AutoGPTQMoEMethod later) until 0.7.2; MoeWNA16Method when the rank has more than 32 experts in
    0.7.3-0.8.4; from 0.8.5 whenever check_moe_marlin_supports_layer fails (H % 128, I % max(64, g), g in
    {-1, 32, 64, 128}). The plain awq / gptq kernels (no Marlin) have no MoE method before 0.9.2 / 0.10.1.
    Marlin keeps packed int32 weights (same bytes after the repack), scales in the model dtype and zero points:
    AWQ int32 [E, H/g, 2I/8] / [E, I/g, H/8]; GPTQ allocates qzeros in the params dtype and never frees them (int32
    from 0.27), symmetric or not; act-order adds g_idx + sort indices int32 [E, H] / [E, I] each.
    MoeWNA16 (Triton) keeps uint8 weights, scales [E, N, K/g'] and uint8 zeros only with zero points, g' = g halved
    until it divides both I and H (the loaded scales are repeat_interleaved)."""
    rule, _, zeros_rule = (layout.moe_rule if layout is not None else "").partition(":zeros")
    kernel = layout.kernel if layout is not None else quant.method
    bits, g = quant.bits, quant.group_size
    if rule in ("", "none") or kernel in ("awq", "gptq") and rule != "marlin-when-supported":
        first = "0.6.3" if quant.method == "awq" else "0.6.1"
        raise QuantizationError(f"{quant.method.upper()} mixture-of-experts layers need vLLM's Marlin MoE method "
                                f"({quant.method}_marlin, from {first}, on compute capability 8.0+): FusedMoE "
                                "asserts a quant method otherwise")
    marlin_shapes = h % 128 == 0 and i % max(64, g) == 0 and g in (-1, 32, 64, 128)
    if rule == "wna16-above-32-experts":
        wna16 = e > 32
    elif rule == "marlin-when-supported":
        wna16 = not marlin_shapes or kernel in ("awq", "gptq")
    else:
        wna16 = False
    g13 = 1 if g == -1 else h // g
    g2 = 1 if g == -1 else max(1, i // g)
    scale_dtype = activation_dtype if activation_dtype != "float32" else "float16"
    if wna16:
        reduced = h if g == -1 else g
        while reduced > 1 and (i % reduced or h % reduced):
            reduced //= 2  # moe_wna16.py: while I % g or H % g: g //= 2
        tensors = [_packed("w13_qweight", (e, s * i, h * bits // 8), "uint8", e * s * i * h * bits // 8),
                   _packed("w2_qweight", (e, h, i * bits // 8), "uint8", e * h * i * bits // 8),
                   _tensor("w13_scales", (e, s * i, h // reduced), scale_dtype),
                   _tensor("w2_scales", (e, h, i // reduced), scale_dtype)]
        if quant.zero_point:
            tensors += [_tensor("w13_qzeros", (e, s * i * bits // 8, h // reduced), "uint8"),
                        _tensor("w2_qzeros", (e, h * bits // 8, i // reduced), "uint8")]
        return tuple(tensors)
    pack = 32 // bits
    tensors = [_packed("w13_qweight", (e, h // 16, s * i * bits // 2), "int32", e * s * i * h * bits // 8),
               _packed("w2_qweight", (e, i // 16, h * bits // 2), "int32", e * h * i * bits // 8),
               _tensor("w13_scales", (e, g13, s * i), scale_dtype),
               _tensor("w2_scales", (e, g2, h), scale_dtype)]
    if quant.method == "awq":
        tensors += [_tensor("w13_qzeros", (e, g13, s * i // pack), "int32"),
                    _tensor("w2_qzeros", (e, g2, h // pack), "int32")]
    else:
        zeros_dtype = "int32" if zeros_rule == "4" else scale_dtype
        tensors += [_tensor("w13_qzeros", (e, g13, s * i // pack), zeros_dtype),
                    _tensor("w2_qzeros", (e, g2, h // pack), zeros_dtype)]
        if quant.desc_act:
            tensors += [_tensor("w13_g_idx", (e, h), "int32"), _tensor("w2_g_idx", (e, i), "int32"),
                        _tensor("w13_g_idx_sort_indices", (e, h), "int32"),
                        _tensor("w2_g_idx_sort_indices", (e, i), "int32")]
    return tuple(tensors)


def _fp4_experts(layout: KernelLayout | None, e: int, h: int, i: int, scale_dtype: str, modelopt: bool,
                 shards: int = 2) -> tuple[StoredTensor, ...]:
    """NVFP4 experts (ModelOptNvFp4FusedMoE, CompressedTensorsW4A4Nvfp4MoEMethod): uint8 [E, 2I, H/2] and
    [E, H, I/2], fp8 scales per 16 values, fp32 per-expert global scales (approximate: the per-expert
    scalar vectors differ a little by release and backend)."""
    suffix = "weight" if modelopt else "weight_packed"
    s = shards
    tensors = [_packed(f"w13_{suffix}", (e, s * i, h // 2), "uint8", e * s * i * h // 2),
               _packed(f"w2_{suffix}", (e, h, i // 2), "uint8", e * h * i // 2)]
    if layout is not None and layout.kernel == "fp4_marlin":
        tensors += [_tensor("w13_weight_scale", (e, ceil_div(h, 16), s * i), "float8_e4m3fn"),
                    _tensor("w2_weight_scale", (e, ceil_div(i, 16), h), "float8_e4m3fn"),
                    _tensor("w13_weight_scale_2", (e,), scale_dtype), _tensor("w2_weight_scale_2", (e,), scale_dtype)]
        return tuple(tensors)
    tensors += [_tensor("w13_weight_scale", (e, round_up(s * i, 128), round_up(ceil_div(h, 16), 4)), "float8_e4m3fn"),
                _tensor("w2_weight_scale", (e, round_up(h, 128), round_up(ceil_div(i, 16), 4)), "float8_e4m3fn")]
    tensors += [_tensor(name, (e,), "float32") for name in
                ("w13_weight_scale_2", "w2_weight_scale_2", "w13_input_scale", "w2_input_scale", "g1_alphas", "g2_alphas")]
    return tuple(tensors)


def _mxfp4_experts(layout: KernelLayout | None, e: int, h: int, i: int, activation_dtype: str,
                   s: int = 2) -> tuple[StoredTensor, ...]:
    """gpt-oss experts (mxfp4.py Mxfp4MoEMethod.create_weights, 0.10.1-0.33): w13 uint8 [E, 2I', H'/2],
    scales uint8 [E, 2I', H'/32], bias [E, 2I']; w2 uint8 [E, H', I'/2], scales [E, H', I'/32], bias [E, H'],
    with I' and H' rounded up per backend (mxfp4_round_up_hidden_size_and_intermediate_size in 0.19+)."""
    backend = layout.moe_kernel if layout is not None and layout.moe_kernel else "marlin"
    pad_i = layout.pad_intermediate if layout is not None and layout.moe_kernel else 128
    pad_h = layout.pad_hidden if layout is not None and layout.moe_kernel else 256
    ip, hp = round_up(i, pad_i), round_up(h, pad_h)
    weights = [_packed("w13_weight", (e, s * ip, hp // 2), "uint8", e * s * ip * hp // 2),
               _packed("w2_weight", (e, hp, ip // 2), "uint8", e * hp * ip // 2)]
    scales = [_tensor("w13_weight_scale", (e, s * ip, hp // 32), "uint8"),
              _tensor("w2_weight_scale", (e, hp, ip // 32), "uint8")]
    if backend == "marlin":
        # prepare_moe_fp4_layer_for_marlin (utils/marlin_utils_fp4.py): int32 repack (same bytes), scales
        # permuted back to one e8m0 byte each, biases in the activation dtype (+ an int32 [#SMs*4] workspace)
        weights = [_packed("w13_weight", (e, hp // 16, s * ip * 2), "int32", e * s * ip * hp // 2),
                   _packed("w2_weight", (e, ip // 16, hp * 2), "int32", e * hp * ip // 2)]
        scales = [_tensor("w13_weight_scale", (e, hp // 32, s * ip), "float8_e8m0fnu"),
                  _tensor("w2_weight_scale", (e, ip // 32, hp), "float8_e8m0fnu")]
        biases = [_tensor("w13_bias", (e, s * ip), activation_dtype, "weight"),
                  _tensor("w2_bias", (e, hp), activation_dtype, "weight")]
        return tuple(weights + scales + biases)
    biases = [_tensor("w13_bias", (e, s * ip), "float32", "weight"), _tensor("w2_bias", (e, hp), "float32", "weight")]
    if backend == "triton":
        # _swizzle_mxfp4 (utils/mxfp4_utils.py) with Hopper layouts: the values are re-laid out (the loaded
        # parameters deleted), the scales copied into HopperMXScaleLayout (rows padded to 2*num_warps*2*8 =
        # 256, columns to 2) while layer.w13/w2_weight_scale stay registered
        swizzled = [_tensor("w13_precision_config.weight_scale", (e, round_up(s * ip, 256), round_up(h // 32, 2)), "uint8"),
                    _tensor("w2_precision_config.weight_scale", (e, round_up(h, 256), round_up(ip // 32, 2)), "uint8")]
        return tuple(weights + scales + swizzled + biases)
    # flashinfer-trtllm (sm100): shuffled in place (same bytes), scales viewed as fp8, biases fp32,
    # gemm1 alpha / beta / clamp limit fp32 [E]
    extras = [_tensor(name, (e,), "float32") for name in ("gemm1_alpha", "gemm1_beta", "gemm1_clamp_limit")]
    return tuple(weights + scales + biases + extras)


def kv_scale_tensors(quant: QuantConfig | None = None, rules=None) -> tuple[StoredTensor, ...]:
    """The fp32 scalars every attention layer keeps on the GPU for (FP8) KV-cache quantization.

    A checkpoint's k_scale / v_scale (and q_scale / prob_scale) parameters are created by
    BaseKVCacheMethod.create_weights and deleted in its process_weights_after_loading in every release read
    (quantization/kv_cache.py 0.5.4-0.33): the loaded values are copied into the attention layer's own
    buffers, which exist with or without a quantized checkpoint (attention/layer.py). So the bytes do not
    depend on `quant`; the buffer set depends on the release (`rules`, rule attention_scale_buffers); with
    no rules, the two KV scales."""
    if rules is None:
        names: tuple[str, ...] = ("_k_scale", "_v_scale")
    else:
        names = tuple(_rule(rules, "attention_scale_buffers"))
    return tuple(_tensor(name, (), "float32") for name in names)
