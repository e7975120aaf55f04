"""GGUF files: metadata and tensor table (never the tensor data), mapped to a Hugging Face-style config.

Local files are read with the `gguf` package's GGUFReader when it is installed (it memory-maps the file;
the tensor data pages are never touched); otherwise, and for the Hub (where only a prefix of the file is
fetched by range reads), with the small parser below, which works on a bytes prefix and says how many
more bytes it needs. Both give the same table (tests/test_sources_gguf.py).

vLLM keeps GGUF weights quantized in their block formats on the GPU (embedding included), so every
tensor's bytes are its stored bytes: blocks of `block` elements take `type_size` bytes each.
"""
from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path

from .checkpoint import CheckpointTable, CheckpointTensor, GGUF_PLAIN_TYPES
from .config import ConfigError, UnsupportedArchitectureError

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32  # GGUF_DEFAULT_ALIGNMENT (ggml gguf.h) when general.alignment is absent
MAX_GGUF_HEADER_BYTES = 512 * 1024 * 1024  # metadata + tensor infos; tokenizers take a few MB
MAX_ARRAY_ITEMS = 50_000_000
MAX_TENSORS = 10_000_000

# ggml type id -> (name, elements per block, bytes per block)   (ggml/include/ggml.h, gguf-py constants.py)
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20), 6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 36), 10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74), 18: ("IQ3_XXS", 256, 98), 19: ("IQ1_S", 256, 50),
    20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110), 22: ("IQ2_S", 256, 82), 23: ("IQ4_XS", 256, 136),
    24: ("I8", 1, 1), 25: ("I16", 1, 2), 26: ("I32", 1, 4), 27: ("I64", 1, 8), 28: ("F64", 1, 8),
    29: ("IQ1_M", 256, 56), 30: ("BF16", 1, 2), 34: ("TQ1_0", 256, 54), 35: ("TQ2_0", 256, 66),
    39: ("MXFP4", 32, 17),
}

# GGUF metadata value types: id -> struct format (None: string / array)
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


class GGUFError(ValueError):
    """A GGUF file that cannot be read; one line naming the file."""


class UnknownGGMLTypeError(GGUFError):
    pass


class NeedMoreBytes(Exception):
    """The prefix ends inside the header: fetch at least `needed` bytes in all."""

    def __init__(self, needed: int):
        super().__init__(needed)
        self.needed = needed


@dataclass(frozen=True)
class GGUFHeader:
    source: str
    version: int
    metadata: dict  # key -> value (arrays of strings/numbers as lists; big tokenizer arrays as their length)
    tensors: tuple[CheckpointTensor, ...]
    header_bytes: int  # bytes up to the (aligned) start of the tensor data


def tensor_bytes(type_id: int, numel: int, name: str, source: str) -> tuple[str, int]:
    if type_id not in GGML_TYPES:
        raise UnknownGGMLTypeError(f"{source}: tensor {name!r} has GGML type {type_id}, which this tool does not know")
    type_name, block, size = GGML_TYPES[type_id]
    if numel % block:
        raise GGUFError(f"{source}: tensor {name!r} ({type_name}) has {numel} elements, not whole {block}-element blocks")
    return type_name, numel // block * size


# Tokenizer arrays are only counted (their length is all a config needs).
_COUNT_ONLY = ("tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type", "tokenizer.ggml.merges",
               "tokenizer.ggml.added_tokens")


class _Cursor:
    """Reads GGUF values from the bytes of a file's start; NeedMoreBytes when they run out before the file does."""

    def __init__(self, data: bytes, source: str, file_size: int | None):
        self.view = memoryview(data)
        self.source = source
        self.file_size = file_size
        self.offset = 0

    def take(self, count: int) -> memoryview:
        offset, source = self.offset, self.source
        if count < 0 or offset + count > MAX_GGUF_HEADER_BYTES:
            raise GGUFError(f"{source}: GGUF header larger than {MAX_GGUF_HEADER_BYTES:,} bytes: corrupt file?")
        if offset + count > len(self.view):
            if self.file_size is not None and offset + count > self.file_size:
                raise GGUFError(f"{source}: truncated GGUF file (header runs past the end of the file)")
            raise NeedMoreBytes(offset + count)
        self.offset = offset + count
        return self.view[offset:offset + count]

    def unpack(self, fmt: str):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        length = self.unpack("<Q")
        if length > MAX_GGUF_HEADER_BYTES:
            raise GGUFError(f"{self.source}: GGUF string of {length:,} bytes: corrupt file?")
        return bytes(self.take(length)).decode("utf-8", errors="replace")

    def value(self, type_id: int, keep: bool = True):
        """One metadata value; with keep=False an array is skipped and only its length returned."""
        if type_id in _SCALARS:
            return self.unpack(_SCALARS[type_id])
        if type_id == _STRING:
            return self.string()
        if type_id == _ARRAY:
            return self.array(keep)
        raise GGUFError(f"{self.source}: unknown GGUF metadata value type {type_id}")

    def array(self, keep: bool):
        item_type, count = self.unpack("<I"), self.unpack("<Q")
        if count > MAX_ARRAY_ITEMS:
            raise GGUFError(f"{self.source}: GGUF array of {count:,} items: corrupt file?")
        if item_type in _SCALARS and not keep:
            self.take(struct.calcsize(_SCALARS[item_type]) * count)
            return count
        started = self.offset
        items = []
        for index in range(count):
            try:
                items.append(self.value(item_type, keep))
            except NeedMoreBytes as more:
                if index == 0:
                    raise
                # ask for the rest of the array at once, at the average item size seen so far
                estimate = self.offset + (self.offset - started) * (count - index) // index
                raise NeedMoreBytes(max(more.needed, estimate)) from None
        return items if keep else count

    def tensor(self) -> CheckpointTensor:
        """One tensor info: name, dims (GGUF lists them innermost first), type, data offset."""
        name = self.string()
        n_dims = self.unpack("<I")
        if n_dims > 8:
            raise GGUFError(f"{self.source}: tensor {name!r} has {n_dims} dimensions: corrupt file?")
        dims = [self.unpack("<Q") for _ in range(n_dims)]
        type_id = self.unpack("<I")
        self.unpack("<Q")  # data offset
        numel = 1
        for dim in dims:
            numel *= dim
        type_name, nbytes = tensor_bytes(type_id, numel, name, self.source)
        return CheckpointTensor(name, tuple(reversed(dims)), type_name, nbytes, self.source)


def parse_prefix(data: bytes, source: str, file_size: int | None = None) -> GGUFHeader:
    """Parse metadata and tensor infos from the first bytes of a GGUF file; NeedMoreBytes when short."""
    cursor = _Cursor(data, source, file_size)
    if bytes(cursor.take(4)) != GGUF_MAGIC:
        raise GGUFError(f"{source}: not a GGUF file (bad magic)")
    version = cursor.unpack("<I")
    if version not in (2, 3):
        raise GGUFError(f"{source}: GGUF version {version} is not supported (2 and 3 are)")
    tensor_count, kv_count = cursor.unpack("<Q"), cursor.unpack("<Q")
    if tensor_count > MAX_TENSORS or kv_count > MAX_ARRAY_ITEMS:
        raise GGUFError(f"{source}: GGUF header claims {tensor_count:,} tensors and {kv_count:,} keys: corrupt file?")
    metadata: dict = {}
    for _ in range(kv_count):
        key = cursor.string()
        type_id = cursor.unpack("<I")
        metadata[key] = cursor.value(type_id, keep=key not in _COUNT_ONLY)
    tensors = tuple(cursor.tensor() for _ in range(tensor_count))
    alignment = int(metadata.get("general.alignment", DEFAULT_ALIGNMENT) or DEFAULT_ALIGNMENT)
    end = -(-cursor.offset // alignment) * alignment
    return GGUFHeader(source, version, metadata, tensors, end)


def read_local(path: str | os.PathLike) -> GGUFHeader:
    """Metadata + tensor table of a local .gguf file (GGUFReader when the gguf package is installed)."""
    path = Path(path)
    try:
        import gguf  # noqa: F401
    except ImportError:
        return _read_prefix_from_file(path)
    return _read_with_gguf(path)


def _read_prefix_from_file(path: Path) -> GGUFHeader:
    size = path.stat().st_size
    want = min(size, 1 << 20)
    with open(path, "rb") as handle:
        data = handle.read(want)
        while True:
            try:
                return parse_prefix(data, str(path), size)
            except NeedMoreBytes as more:
                want = min(size, max(more.needed, 2 * len(data)))
                data += handle.read(want - len(data))


def _read_with_gguf(path: Path) -> GGUFHeader:
    from gguf import GGUFReader, GGUFValueType

    try:
        reader = GGUFReader(str(path))
    except (ValueError, KeyError, IndexError, struct.error) as error:
        raise GGUFError(f"{path}: not a readable GGUF file ({error})") from None
    metadata: dict = {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        types = field.types
        if not types:
            continue
        if types[0] == GGUFValueType.ARRAY:
            if key in _COUNT_ONLY:
                metadata[key] = len(field.data)
            elif len(types) > 1 and types[1] == GGUFValueType.STRING:
                metadata[key] = [bytes(field.parts[i]).decode("utf-8", errors="replace") for i in field.data]
            else:
                metadata[key] = [field.parts[i][0].item() for i in field.data]
        elif types[0] == GGUFValueType.STRING:
            metadata[key] = bytes(field.parts[field.data[0]]).decode("utf-8", errors="replace")
        else:
            metadata[key] = field.parts[field.data[0]][0].item()
    tensors = []
    for tensor in reader.tensors:
        numel = int(tensor.n_elements)
        type_name, nbytes = tensor_bytes(int(tensor.tensor_type), numel, tensor.name, str(path))
        tensors.append(CheckpointTensor(tensor.name, tuple(int(d) for d in reversed(tensor.shape.tolist())), type_name,
                                        nbytes, str(path)))
    version = int(reader.fields["GGUF.version"].parts[-1][0])
    return GGUFHeader(str(path), version, metadata, tuple(tensors), int(reader.data_offset))


# --- split files ----------------------------------------------------------------------------------------

_SPLIT = re.compile(r"^(?P<stem>.*)-(?P<index>\d{5})-of-(?P<total>\d{5})\.gguf$")


def split_group(name: str) -> tuple[str, int, int] | None:
    match = _SPLIT.match(Path(name).name)
    if not match:
        return None
    return match.group("stem"), int(match.group("index")), int(match.group("total"))


def choose_gguf(names: list[str], wanted: str | None, where: str) -> list[str]:
    """The file(s) of one GGUF model among `names`: the one asked for (and its split siblings), or the only
    model there. Raises AmbiguousGGUFError listing the choices."""
    ggufs = sorted(n for n in names if n.endswith(".gguf"))
    if wanted:
        matches = [n for n in ggufs if n == wanted or Path(n).name == Path(wanted).name]
        if not matches:
            from .sources import UnknownModelError

            raise UnknownModelError(f"{where}: no GGUF file {wanted!r} (there: {', '.join(Path(n).name for n in ggufs) or 'none'})")
        chosen = matches[0]
    else:
        models = {}
        for name in ggufs:
            group = split_group(name)
            models.setdefault(group[0] if group else name, name)
        if not models:
            from .sources import UnknownModelError

            raise UnknownModelError(f"{where}: no config.json, safetensors or GGUF files")
        if len(models) > 1:
            raise AmbiguousGGUFError(
                f"{where} holds {len(models)} GGUF models; pick one with --gguf-file "
                f"({', '.join(Path(models[m]).name for m in sorted(models))})"
            )
        chosen = next(iter(models.values()))
    group = split_group(chosen)
    if group is None:
        return [chosen]
    stem, _, total = group
    parts = sorted(n for n in ggufs if (split_group(n) or ("",))[0] == stem)
    if len(parts) != total:
        raise GGUFError(f"{where}: split GGUF {Path(chosen).name} has {len(parts)} of its {total} parts")
    return parts


class AmbiguousGGUFError(LookupError):
    pass


# --- GGUF metadata -> Hugging Face config ---------------------------------------------------------------

GGUF_ARCHITECTURES = {
    "llama": ("LlamaForCausalLM", "llama"), "mistral": ("MistralForCausalLM", "mistral"),
    "qwen2": ("Qwen2ForCausalLM", "qwen2"), "qwen3": ("Qwen3ForCausalLM", "qwen3"),
    "qwen2moe": ("Qwen2MoeForCausalLM", "qwen2_moe"), "qwen3moe": ("Qwen3MoeForCausalLM", "qwen3_moe"),
    "gemma": ("GemmaForCausalLM", "gemma"), "gemma2": ("Gemma2ForCausalLM", "gemma2"),
    "gemma3": ("Gemma3ForCausalLM", "gemma3_text"), "phi3": ("Phi3ForCausalLM", "phi3"),
}


def gguf_config(metadata: dict, tensors: tuple[CheckpointTensor, ...], source: str) -> dict:
    """An HF-style config.json from GGUF metadata, so that parse_config can size the model."""
    arch = metadata.get("general.architecture")
    if arch not in GGUF_ARCHITECTURES:
        raise UnsupportedArchitectureError(
            f"{source}: GGUF architecture {arch!r} is not sized yet (known: {', '.join(GGUF_ARCHITECTURES)})"
        )
    architecture, model_type = GGUF_ARCHITECTURES[arch]
    get = _arch_getter(metadata, arch)
    _check_required(get, arch, source)
    names = {t.name: t for t in tensors}
    hidden = int(get("embedding_length"))
    heads = int(get("attention.head_count"))
    config: dict = {
        "architectures": [architecture],
        "model_type": model_type,
        "hidden_size": hidden,
        "num_hidden_layers": int(get("block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(get("attention.head_count_kv", heads)),
        "max_position_embeddings": int(get("context_length", 2048)),
    }
    if get("feed_forward_length") is not None:
        config["intermediate_size"] = int(get("feed_forward_length"))
    config.update(_attention_keys(get, hidden, heads))
    embedding = names.get("token_embd.weight")
    vocab = get("vocab_size") or (embedding.shape[0] if embedding else None) or metadata.get("tokenizer.ggml.tokens")
    if not vocab:
        raise ConfigError(f"{source}: GGUF metadata lacks {arch}.vocab_size and there is no token_embd.weight")
    config["vocab_size"] = int(vocab)
    # a GGUF without output.weight ties lm_head to the embedding (llama.cpp and vLLM's loader alike)
    config["tie_word_embeddings"] = "output.weight" not in names
    if get("expert_count"):
        config.update(_expert_keys(get, config.get("intermediate_size")))
    if arch not in ("qwen2", "qwen2moe") and "blk.0.attn_q.bias" in names:
        config["attention_bias"] = True  # (Qwen2 has q/k/v biases by family)
    # no torch_dtype: vLLM reads GGUF configs through transformers, which leaves it unset (vLLM treats it as
    # float32 and picks its default half dtype); the file's type is kept for reference
    if metadata.get("general.file_type") is not None:
        config["gguf_file_type"] = metadata["general.file_type"]
    return config


def _arch_getter(metadata: dict, arch: str):
    """get(key, default): metadata "<arch>.<key>"; per-layer lists (head_count_kv, feed_forward_length) give
    their largest value."""
    def get(key: str, default=None):
        value = metadata.get(f"{arch}.{key}", default)
        if isinstance(value, list):
            value = max(value) if value else default
        return value

    return get


def _check_required(get, arch: str, source: str) -> None:
    required = {"block_count": "num_hidden_layers", "embedding_length": "hidden_size",
                "attention.head_count": "num_attention_heads"}
    if get("feed_forward_length") is None and not get("expert_count"):
        required["feed_forward_length"] = "intermediate_size"
    missing = [f"{arch}.{key}" for key in required if get(key) is None]
    if missing:
        raise ConfigError(f"{source}: GGUF metadata lacks {', '.join(missing)}: cannot size the model")


def _attention_keys(get, hidden: int, heads: int) -> dict:
    """head_dim, partial rotary factor, RoPE base and scaling, RMS norm epsilon, sliding window - those given."""
    config: dict = {}
    head_dim = get("attention.key_length")
    if head_dim is not None:
        config["head_dim"] = int(head_dim)
    rope_dims = get("rope.dimension_count")
    effective_head = int(head_dim or hidden // heads)
    if rope_dims and int(rope_dims) != effective_head:
        config["partial_rotary_factor"] = int(rope_dims) / effective_head
    if get("rope.freq_base") is not None:
        config["rope_theta"] = float(get("rope.freq_base"))
    if get("attention.layer_norm_rms_epsilon") is not None:
        config["rms_norm_eps"] = float(get("attention.layer_norm_rms_epsilon"))
    if get("attention.sliding_window"):
        config["sliding_window"] = int(get("attention.sliding_window"))
    scaling = get("rope.scaling.type")
    if scaling and scaling != "none":
        config["rope_scaling"] = {"rope_type": scaling, "factor": float(get("rope.scaling.factor", 1.0))}
        if get("rope.scaling.original_context_length"):
            config["rope_scaling"]["original_max_position_embeddings"] = int(get("rope.scaling.original_context_length"))
    return config


def _expert_keys(get, intermediate_size: int | None) -> dict:
    """The MoE keys; intermediate_size falls back to the experts' width when the file names no dense one."""
    config = {"num_experts": int(get("expert_count")), "num_experts_per_tok": int(get("expert_used_count", 2))}
    if get("expert_feed_forward_length"):
        config["moe_intermediate_size"] = int(get("expert_feed_forward_length"))
    if intermediate_size is None:
        config["intermediate_size"] = config.get("moe_intermediate_size", 0)
    if get("expert_shared_feed_forward_length"):
        config["shared_expert_intermediate_size"] = int(get("expert_shared_feed_forward_length"))
    return config


# GGUF tensor names -> Hugging Face names (llama.cpp's tensor_mapping, the subset of the families above)
_GGUF_LAYER = {
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm", "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj", "attn_qkv": "self_attn.qkv_proj",
    "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
    "post_attention_norm": "post_attention_layernorm", "post_ffw_norm": "post_feedforward_layernorm",
    "ffn_gate_inp": "mlp.gate", "ffn_gate_exps": "mlp.experts.gate_exps", "ffn_up_exps": "mlp.experts.up_exps",
    "ffn_down_exps": "mlp.experts.down_exps", "ffn_gate_shexp": "mlp.shared_expert.gate_proj",
    "ffn_up_shexp": "mlp.shared_expert.up_proj", "ffn_down_shexp": "mlp.shared_expert.down_proj",
    "ffn_gate_inp_shexp": "mlp.shared_expert_gate",
}
_GGUF_GLOBAL = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
                "output.weight": "lm_head.weight", "rope_freqs.weight": "model.rotary_emb.inv_freq"}


def hf_name(name: str) -> str:
    if name in _GGUF_GLOBAL:
        return _GGUF_GLOBAL[name]
    match = re.match(r"^blk\.(\d+)\.(\w+)\.(weight|bias)$", name)
    if not match or match.group(2) not in _GGUF_LAYER:
        return name
    layer, part, kind = match.groups()
    target = _GGUF_LAYER[part]
    if target.startswith("mlp.experts."):
        # stacked [experts, ...] tensors: vLLM's fused w13 (gate + up) and w2 (down)
        fused = "w2" if part == "ffn_down_exps" else "w13"
        return f"model.layers.{layer}.mlp.experts.{fused}_weight"
    return f"model.layers.{layer}.{target}.{kind}"


def gguf_table(headers: list[GGUFHeader], files: list[str]) -> CheckpointTable:
    tensors = []
    for header, name in zip(headers, files):
        for tensor in header.tensors:
            tensors.append(CheckpointTensor(tensor.name, tensor.shape, tensor.dtype, tensor.nbytes, name,
                                            hf_name(tensor.name)))
    metadata = {k: v for k, v in headers[0].metadata.items() if k.startswith("general.")}
    return CheckpointTable("gguf", tuple(tensors), tuple(files), sum(h.header_bytes for h in headers), metadata)


def load_gguf(paths: list[Path], where: str) -> tuple[dict, CheckpointTable]:
    """(HF-style config, tensor table) of a local GGUF model (one file, or all parts of a split one)."""
    headers = [read_local(path) for path in paths]
    table = gguf_table(headers, [str(p) for p in paths])
    return gguf_config(headers[0].metadata, table.tensors, where), table


def is_plain(type_name: str) -> bool:
    return type_name in GGUF_PLAIN_TYPES
