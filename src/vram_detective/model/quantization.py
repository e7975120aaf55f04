"""The quantization scheme as a checkpoint stores it: its quantization_config (or ModelOpt
hf_quant_config.json) parsed into a QuantConfig - method, bits, group size, zero points, act-order,
block scales, the modules kept in 16 bit - and the StoredTensor record kernels describe tensors with.
How an engine holds these weights on the GPU (kernel choice, repacking) lives with the engine
(engines/vllm/quant_kernels.py). Field names follow the checkpoint formats (AutoAWQ, AutoGPTQ,
compressed-tensors, ModelOpt, bitsandbytes, FBGEMM FP8, MXFP4) as vLLM's *Config.from_config reads them.
"""
from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass

# compressed-tensors schemes (compressed_tensors.py _get_scheme_from_parts)
CT_SCHEMES = ("wNa16", "w8a8-int8", "w8a8-fp8", "w8a16-fp8", "nvfp4", "nvfp4a16")


@dataclass(frozen=True)
class QuantConfig:
    # "awq", "gptq", "fp8", "modelopt-fp8", "modelopt-fp4", "compressed-tensors", "bitsandbytes",
    # "mxfp4", "fbgemm-fp8"
    method: str
    bits: int
    group_size: int  # -1: one group over the whole input (channelwise)
    zero_point: bool = False  # asymmetric (stores zero points)
    desc_act: bool = False  # GPTQ act-order / compressed-tensors actorder "group": g_idx is meaningful
    weight_block: tuple[int, int] | None = None  # FP8 block quantization (n, k)
    static_input_scale: bool = False
    not_converted: tuple[str, ...] = ()  # modules kept in 16 bit (matched per `ignore_style`)
    lm_head_quantized: bool = False
    serialized: bool = True  # False: quantized online at load (--quantization fp8 / bitsandbytes on a 16-bit checkpoint)
    # --- added for compressed-tensors, bitsandbytes, NVFP4, MXFP4, FBGEMM (all defaulted) ---
    scheme: str = ""  # compressed-tensors: one of CT_SCHEMES; bitsandbytes: "nf4", "fp4" or "int8"
    weight_strategy: str = ""  # compressed-tensors weights: "tensor", "channel", "group", "block"
    double_quant: bool = False  # bitsandbytes: absmax double-quantized (bnb_4bit_use_double_quant)
    input_symmetric: bool = True  # compressed-tensors int8 activations: False -> zero point + azp_adj
    ignore_style: str = "substring"  # how `not_converted` matches: substring | exact | modelopt | bnb
    kv_cache_scales: bool = False  # the checkpoint carries k/v scales for an FP8 KV cache
    experts_only: bool = False  # MXFP4 (gpt-oss): only the fused experts are quantized

    @property
    def nominal_bits(self) -> int:
        return self.bits

    def converts(self, module_name: str) -> bool:
        """Is this linear module quantized? (embeddings and norms never reach this question)

        `module_name` is the short name engines/vllm/weights.py passes: qkv_proj, o_proj, gate_up_proj, down_proj,
        fc1, fc2, lm_head, experts (fused MoE)."""
        if self.experts_only:
            # Mxfp4Config.get_quant_method: FusedMoE -> Mxfp4MoEMethod; every linear layer of a
            # gpt-oss checkpoint is listed as not converted (or built without the quant config)
            return module_name == "experts"
        if module_name == "lm_head":
            return self.lm_head_quantized
        if self.ignore_style == "substring":
            return not any(fragment and fragment in module_name for fragment in self.not_converted)
        names = _candidate_names(module_name)
        return not any(_ignored(pattern, name, self.ignore_style) for pattern in self.not_converted for name in names)

    def describe(self) -> str:
        if self.method in ("awq", "gptq"):
            group = "channelwise" if self.group_size == -1 else f"group {self.group_size}"
            extra = ", act-order" if self.desc_act else ""
            zero = "asymmetric" if self.zero_point else "symmetric"
            return f"{self.method.upper()} {self.bits}-bit, {group}, {zero}{extra}"
        if self.method == "compressed-tensors":
            if self.scheme == "wNa16":
                group = "channelwise" if self.group_size == -1 else f"group {self.group_size}"
                extra = ", act-order" if self.desc_act else ""
                zero = "asymmetric" if self.zero_point else "symmetric"
                return f"compressed-tensors W{self.bits}A16 (pack-quantized), {group}, {zero}{extra}"
            if self.scheme in ("nvfp4", "nvfp4a16"):
                return f"compressed-tensors NVFP4 ({'W4A4' if self.scheme == 'nvfp4' else 'W4A16'}), group 16 fp8 scales"
            kind = {"w8a8-int8": "W8A8 INT8", "w8a8-fp8": "W8A8 FP8", "w8a16-fp8": "W8A16 FP8"}[self.scheme]
            strategy = f"block {self.weight_block[0]}x{self.weight_block[1]}" if self.weight_block else \
                f"per-{self.weight_strategy or 'channel'}"
            activations = "static" if self.static_input_scale else "dynamic"
            return f"compressed-tensors {kind}, {strategy} weight scales, {activations} activation scales"
        if self.method == "bitsandbytes":
            if self.scheme == "int8":
                return "bitsandbytes 8-bit (LLM.int8)"
            online = " (quantized at load from the 16-bit checkpoint)" if not self.serialized else ""
            nested = ", double quantization" if self.double_quant else ""
            return f"bitsandbytes 4-bit {self.scheme}, blocks of 64{nested}{online}"
        if self.method == "modelopt-fp4":
            return f"ModelOpt NVFP4 (fp4 e2m1, fp8 scales per {self.group_size} values)"
        if self.method == "mxfp4":
            return "MXFP4 experts (fp4 e2m1, e8m0 scales per 32 values); attention, router, embeddings in 16 bit"
        if self.method == "fbgemm-fp8":
            return "FBGEMM FP8 per-channel scales"
        if self.weight_block:
            return f"FP8 block {self.weight_block[0]}x{self.weight_block[1]} scales"
        if not self.serialized:
            return "FP8 online (quantized at load from the 16-bit checkpoint, per-tensor scales)"
        return "FP8 per-tensor scales"


# Representative full module names for the short names engines/vllm/weights.py asks about. The layer index is
# one no ignore list names, so "model.layers.0.mlp" style entries (one layer kept in 16 bit) are not
# applied to every layer; regexes over "\d+" and "*" wildcards still match.
_LAYER = "model.layers.99999"
_CANDIDATES = {
    # fused modules: vLLM checks the unfused shard names (compressed_tensors/utils.py should_ignore_layer,
    # utils/quant_utils.py is_layer_skipped with packed_modules_mapping)
    "qkv_proj": (f"{_LAYER}.self_attn.q_proj", f"{_LAYER}.self_attn.k_proj", f"{_LAYER}.self_attn.v_proj",
                 f"{_LAYER}.self_attn.qkv_proj"),
    "o_proj": (f"{_LAYER}.self_attn.o_proj",),
    "gate_up_proj": (f"{_LAYER}.mlp.gate_proj", f"{_LAYER}.mlp.up_proj", f"{_LAYER}.mlp.gate_up_proj"),
    "down_proj": (f"{_LAYER}.mlp.down_proj",),
    "fc1": ("model.decoder.layers.99999.fc1",),
    "fc2": ("model.decoder.layers.99999.fc2",),
    "lm_head": ("lm_head",),
    "experts": (f"{_LAYER}.mlp.experts", f"{_LAYER}.mlp.experts.0.gate_proj", f"{_LAYER}.mlp.experts.0.up_proj",
                f"{_LAYER}.mlp.experts.0.down_proj"),
}


def _candidate_names(module_name: str) -> tuple[str, ...]:
    return _CANDIDATES.get(module_name, (f"{_LAYER}.{module_name}", module_name))


def _ignored(pattern: str, name: str, style: str) -> bool:
    """Does one ignore-list entry cover this module? `re:` entries are regexes (re.match, as
    compressed-tensors' _is_equal_or_regex_match); otherwise per style:
    exact: the full name (compressed-tensors `ignore`);
    modelopt: exact, fnmatch wildcard, or substring (modelopt.py is_layer_excluded);
    bnb: a whole dotted component or a dotted prefix (bitsandbytes.py is_layer_skipped_bnb)."""
    if not pattern:
        return False
    if pattern.startswith("re:"):
        return re.match(pattern[3:], name) is not None
    if style == "exact":
        return name == pattern
    if style == "bnb":
        components = name.split(".")
        return pattern in components or any(".".join(components[: i + 1]) == pattern for i in range(len(components)))
    # modelopt / glob
    if any(char in pattern for char in "*?["):
        return fnmatch.fnmatchcase(name, pattern) or fnmatch.fnmatchcase(name, pattern + ".*")
    return name == pattern or pattern in name


class QuantizationError(ValueError):
    pass


def parse_quantization_config(raw: dict | None) -> QuantConfig | None:
    if not raw:
        return None
    if isinstance(raw.get("quantization"), dict) and not raw.get("quant_method"):
        # a ModelOpt hf_quant_config.json as a whole: {"producer": ..., "quantization": {...}}
        raw = {"quant_method": "modelopt", **raw["quantization"]}
    method = str(raw.get("quant_method") or raw.get("quant_algo") or "").lower()
    parser = _PARSERS.get(method)
    if parser is None:
        raise QuantizationError(f"quantization method {method or '(none)'!r} is not sized yet")
    return parser(raw, method)


def _awq(raw: dict, method: str) -> QuantConfig:
    return QuantConfig(
        method="awq",
        bits=int(raw.get("bits", raw.get("w_bit", 4))),
        group_size=int(raw.get("group_size", raw.get("q_group_size", 128))),
        zero_point=bool(raw.get("zero_point", True)),
        not_converted=tuple(raw.get("modules_to_not_convert") or ()),
    )


def _gptq(raw: dict, method: str) -> QuantConfig:
    return QuantConfig(
        method="gptq",
        bits=int(raw.get("bits", 4)),
        group_size=int(raw.get("group_size", 128)),
        zero_point=not bool(raw.get("sym", True)),
        desc_act=bool(raw.get("desc_act", False)),
        lm_head_quantized=bool(raw.get("lm_head", False)),
        not_converted=tuple(raw.get("modules_to_not_convert") or ()),
    )


def _fp8(raw: dict, method: str) -> QuantConfig:
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


def _modelopt(raw: dict, method: str) -> QuantConfig:
    algo = str(raw.get("quant_algo") or ("NVFP4" if "fp4" in method else "FP8")).upper()
    kv_scales = str(raw.get("kv_cache_quant_algo") or "").upper() == "FP8"
    if algo == "FP8":
        return QuantConfig(
            method="modelopt-fp8",
            bits=8,
            group_size=-1,
            static_input_scale=True,  # ModelOpt FP8 stores static input scales (modelopt.py)
            not_converted=tuple(raw.get("exclude_modules") or ()),
            kv_cache_scales=kv_scales,
        )
    if algo == "NVFP4":
        # ModelOptNvFp4Config.from_config (modelopt.py 0.8+): group_size 16, exclude_modules
        return QuantConfig(
            method="modelopt-fp4",
            bits=4,
            group_size=int(raw.get("group_size") or 16),
            static_input_scale=True,
            not_converted=tuple(raw.get("exclude_modules") or ()),
            ignore_style="modelopt",
            kv_cache_scales=kv_scales,
        )
    raise QuantizationError(f"ModelOpt {algo} checkpoints are not sized yet (FP8 and NVFP4 only)")


def _bitsandbytes(raw: dict, method: str) -> QuantConfig:
    # BitsAndBytesConfig.from_config (bitsandbytes.py): defaults load_in_4bit, quant type fp4,
    # no double quantization, blocksize 64 (bitsandbytes.functional.quantize_4bit)
    eight_bit = bool(raw.get("load_in_8bit") or raw.get("_load_in_8bit"))
    return QuantConfig(
        method="bitsandbytes",
        bits=8 if eight_bit else 4,
        group_size=-1 if eight_bit else 64,
        scheme="int8" if eight_bit else str(raw.get("bnb_4bit_quant_type") or "fp4").lower(),
        double_quant=bool(raw.get("bnb_4bit_use_double_quant", False)) and not eight_bit,
        not_converted=tuple(raw.get("llm_int8_skip_modules") or ()),
        ignore_style="bnb",
    )


def _mxfp4(raw: dict, method: str) -> QuantConfig:
    # Mxfp4Config (mxfp4.py 0.10.1+): experts in MXFP4 (fp4 e2m1 + e8m0 scale per 32 values)
    return QuantConfig(
        method="mxfp4",
        bits=4,
        group_size=32,
        not_converted=tuple(raw.get("modules_to_not_convert") or ()),
        ignore_style="modelopt",
        experts_only=True,
    )


def _fbgemm_fp8(raw: dict, method: str) -> QuantConfig:
    # FBGEMMFp8Config (fbgemm_fp8.py): fp8 weights, per-channel fp32 scales, modules_to_not_convert
    return QuantConfig(
        method="fbgemm-fp8",
        bits=8,
        group_size=-1,
        not_converted=tuple(raw.get("modules_to_not_convert") or ()),
        ignore_style="exact",
    )


# quant_method (or ModelOpt's quant_algo) as the checkpoint writes it -> its parser
_PARSERS = {
    "awq": _awq, "gptq": _gptq, "fp8": _fp8,
    "modelopt": _modelopt, "modelopt-fp8": _modelopt, "modelopt_fp4": _modelopt, "modelopt-fp4": _modelopt,
    "compressed-tensors": lambda raw, method: _parse_compressed_tensors(raw),
    "bitsandbytes": _bitsandbytes, "mxfp4": _mxfp4, "fbgemm_fp8": _fbgemm_fp8,
}


def _parse_compressed_tensors(raw: dict) -> QuantConfig:
    """compressed-tensors (llm-compressor) checkpoints: the scheme of the config group that targets the
    linear layers (compressed_tensors.py CompressedTensorsConfig.from_config / _get_scheme_from_parts)."""
    groups = raw.get("config_groups") or {}
    if not groups:
        raise QuantizationError("compressed-tensors config without config_groups")
    chosen = None
    for group in groups.values():
        if "Linear" in (group.get("targets") or ()):
            chosen = group
            break
    chosen = chosen or next(iter(groups.values()))
    weights = chosen.get("weights") or {}
    inputs = chosen.get("input_activations")
    fmt = str(chosen.get("format") or raw.get("format") or "").lower()
    bits = int(weights.get("num_bits", 8))
    kind = str(weights.get("type") or "int").lower()
    strategy = str(weights.get("strategy") or "tensor").lower()
    symmetric = weights.get("symmetric", True) is not False
    actorder = weights.get("actorder")
    group_size = int(weights.get("group_size") or -1) if strategy in ("group", "tensor_group") else -1
    block = weights.get("block_structure")
    if isinstance(block, str):  # older configs: "128x128"
        block = [int(part) for part in block.lower().split("x")]
    if inputs and kind == "float" and bits == 4:
        scheme = "nvfp4"
    elif kind == "float" and bits == 4:
        scheme = "nvfp4a16"
    elif inputs is None and kind == "int" and bits in (4, 8) and strategy in ("group", "channel"):
        scheme = "wNa16"  # CompressedTensorsWNA16 (pack-quantized), Marlin / Machete kernels
        if fmt and fmt not in ("pack-quantized", "marlin-24"):
            raise QuantizationError(f"compressed-tensors weight-only {fmt} is not a format vLLM loads (pack-quantized only)")
    elif inputs is None and kind == "float" and bits == 8:
        scheme = "w8a16-fp8"
    elif inputs and kind == "float" and bits == 8:
        scheme = "w8a8-fp8"
    elif inputs and kind == "int" and bits == 8:
        scheme = "w8a8-int8"
    else:
        raise QuantizationError(
            f"compressed-tensors {kind}{bits} weights with {'no' if not inputs else inputs.get('num_bits')}-bit "
            "activations are not sized yet")
    static_inputs = bool(inputs) and not inputs.get("dynamic", False) and scheme not in ("nvfp4",)
    kv_scheme = raw.get("kv_cache_scheme")
    return QuantConfig(
        method="compressed-tensors",
        bits=bits,
        group_size=group_size,
        zero_point=not symmetric,
        desc_act=actorder in (True, "group", "dynamic") and scheme == "wNa16",
        weight_block=(int(block[0]), int(block[1])) if strategy == "block" and block else None,
        static_input_scale=static_inputs,
        not_converted=tuple(raw.get("ignore") or ()),
        scheme=scheme,
        weight_strategy=strategy,
        input_symmetric=not inputs or inputs.get("symmetric", True) is not False,
        ignore_style="exact",
        kv_cache_scales=bool(kv_scheme),
    )


@dataclass(frozen=True)
class StoredTensor:
    suffix: str  # "qweight", "scales", ...
    shape: tuple[int, ...]
    dtype: str
    bytes: int
    role: str  # "weight" or "quantization metadata"

