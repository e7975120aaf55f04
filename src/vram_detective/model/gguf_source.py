"""GGUF files: metadata and tensor table (never the tensor data), mapped to a Hugging Face-style config.

Local files and the Hub (where only a prefix of the file is fetched by range reads) are read with the small
parser below, which works on a bytes prefix and says how many more bytes it needs. Every count and length
it reads is checked against the bytes that remain before anything is allocated, so a 300-byte file that
claims 2^40 tokens fails at once (the `gguf` package's GGUFReader would try to build them; it is used only
by the tests, to check this parser's table).

vLLM keeps GGUF weights quantized in their block formats on the GPU (embedding included), so every
tensor's bytes are its stored bytes: blocks of `block` elements take `type_size` bytes each.
"""
from __future__ import annotations

import math
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path

from ..errors import NotFound
from .checkpoint import CheckpointTable, CheckpointTensor, GGUF_PLAIN_TYPES
from .spec import ConfigError, UnsupportedArchitectureError

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32  # GGUF_DEFAULT_ALIGNMENT (ggml gguf.h) when general.alignment is absent
# Budgets on what one header may hold, well above what real files have (benchmarks/header_budgets.py measures
# the catalog: the largest vocabulary is 262,208 tokens (google/gemma-3-27b-it), the most tensors a GGUF of a
# catalog model holds is 1,647 (zai-org/GLM-4.5); llama.cpp's writers put under 100 keys in a file). A hostile
# header is refused with one line before it costs seconds or hundreds of MiB (issue 31: 50 M empty strings took
# 38 s / 784 MiB, 2 M tensor entries 58 s / 708 MiB, 5 M keys 24 s / 601 MiB).
MAX_GGUF_HEADER_BYTES = 64 * 1024 * 1024  # metadata + tensor infos; a 262k-token tokenizer with merges is ~15 MB
MAX_ARRAY_ITEMS = 1 << 22  # 16x the largest vocabulary
MAX_VALUES = 1 << 20  # strings and kept array items in the whole header: Llama 3's 128,256 tokens + 280,147 merges
MAX_KEYS = 1 << 16
MAX_TENSORS = 1 << 16  # 40x the most tensors a catalog model's GGUF has
MAX_TENSOR_NAME = 64  # GGML_MAX_NAME (ggml.h): gguf.cpp refuses a tensor name of 64 bytes or more
MAX_KEPT_ITEMS = 1 << 16  # longer arrays are only counted (per-layer arrays are what a config needs)
MAX_ARRAY_DEPTH = 2  # an array of arrays at most (ggml's gguf.cpp reads no deeper)
MAX_DIMS = 4  # GGML_MAX_DIMS (ggml.h): gguf_init_from_file refuses more
MAX_ELEMENTS = (1 << 63) - 1  # INT64_MAX: gguf.cpp refuses shapes whose element count overflows int64

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

    def __init__(self, data: bytes, source: str, file_size: int | None, deadline=None):
        self.view = memoryview(data)
        self.source = source
        self.file_size = file_size
        self.offset = 0
        self.values = 0
        self.deadline = deadline  # called every few thousand items: raises once the caller's time is up

    def counted(self) -> None:
        """One more value read one at a time: refused past the header's budget; the deadline checked now and then."""
        self.values += 1
        if self.values > MAX_VALUES:
            raise GGUFError(f"{self.source}: GGUF header holds over {MAX_VALUES:,} strings and array items (a real "
                            "tokenizer's are under 500,000): corrupt or hostile file?")
        if self.deadline is not None and not self.values & 0xFFF:
            self.deadline()

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
        self.counted()
        return bytes(self.take(length)).decode("utf-8", errors="replace")

    def skip_strings(self, count: int) -> None:
        """Step over `count` strings (a tokenizer array only counted) without building them."""
        view, unpack_from, end = self.view, struct.unpack_from, len(self.view)
        limit = (self.file_size if self.file_size is not None else MAX_GGUF_HEADER_BYTES)
        for _ in range(count):
            offset = self.offset
            if offset + 8 > end:
                self.take(8)  # raises: more bytes needed, or the file ends
            (length,) = unpack_from("<Q", view, offset)
            if length > MAX_GGUF_HEADER_BYTES or offset + 8 + length > min(end, limit):
                self.offset = offset + 8
                self.take(length)  # raises the right error: header limit, more bytes, or the end of the file
            self.offset = offset + 8 + length
            self.values += 1
            if not self.values & 0xFFF:
                self.values -= 1
                self.counted()

    def fits(self, count: int, each: int, what: str) -> None:
        """`count` items of at least `each` bytes must fit in what the file (or the header limit) still holds."""
        room = (self.file_size if self.file_size is not None else MAX_GGUF_HEADER_BYTES) - self.offset
        if count * each > room:
            raise GGUFError(f"{self.source}: GGUF {what} claims {count:,} items, more than the {max(room, 0):,} "
                            "bytes left can hold: corrupt file?")

    def value(self, type_id: int, keep: bool = True, depth: int = 0):
        """One metadata value; with keep=False an array is skipped and only its length returned."""
        if type_id in _SCALARS:
            return self.unpack(_SCALARS[type_id])
        if type_id == _STRING:
            return self.string()
        if type_id == _ARRAY:
            return self.array(keep, depth)
        raise GGUFError(f"{self.source}: unknown GGUF metadata value type {type_id}")

    def array(self, keep: bool, depth: int = 0):
        if depth >= MAX_ARRAY_DEPTH:
            raise GGUFError(f"{self.source}: GGUF arrays nested over {MAX_ARRAY_DEPTH} deep: corrupt file?")
        item_type, count = self.unpack("<I"), self.unpack("<Q")
        if count > MAX_ARRAY_ITEMS:
            raise GGUFError(f"{self.source}: GGUF array of {count:,} items: corrupt file?")
        if item_type not in _SCALARS and item_type not in (_STRING, _ARRAY):
            raise GGUFError(f"{self.source}: unknown GGUF metadata value type {item_type}")
        self.fits(count, struct.calcsize(_SCALARS[item_type]) if item_type in _SCALARS else 8, "array")
        if (keep or item_type == _STRING) and self.values + count > MAX_VALUES:  # refused before it is read
            self.values += count
            self.counted()
        keep = keep and count <= MAX_KEPT_ITEMS
        if item_type in _SCALARS:
            code = _SCALARS[item_type]
            raw = self.take(struct.calcsize(code) * count)
            if not keep:
                return count
            self.values += count - 1  # built in one call, counted as they would be one by one
            self.counted()
            return list(struct.unpack(f"<{count}{code[1]}", raw))
        if item_type == _STRING and not keep:
            started, before = self.offset, self.values
            try:
                self.skip_strings(count)
            except NeedMoreBytes as more:
                done = max(self.values - before, 1)  # ask for the rest at the average string size seen so far
                rest = (self.offset - started) * (count - done) // done
                raise NeedMoreBytes(max(more.needed, self.offset + rest)) from None
            return count
        started = self.offset
        items = []
        for index in range(count):
            try:
                items.append(self.value(item_type, keep, depth + 1))
            except NeedMoreBytes as more:
                if index == 0:
                    raise
                # ask for the rest of the array at once, at the average item size seen so far
                estimate = self.offset + (self.offset - started) * (count - index) // index
                raise NeedMoreBytes(max(more.needed, estimate)) from None
        return items if keep else count

    def tensor(self) -> tuple[CheckpointTensor, int]:
        """One tensor info: name, dims (GGUF lists them innermost first), type; and where its data ends."""
        name = self.string()
        if len(name.encode()) >= MAX_TENSOR_NAME:
            raise GGUFError(f"{self.source}: tensor name {name[:80]!r} is {len(name.encode())} bytes (llama.cpp takes "
                            f"under {MAX_TENSOR_NAME}): corrupt file?")
        n_dims = self.unpack("<I")
        if not 1 <= n_dims <= MAX_DIMS:
            raise GGUFError(f"{self.source}: tensor {name!r} has {n_dims} dimensions (1 to {MAX_DIMS}): corrupt file?")
        dims = [self.unpack("<Q") for _ in range(n_dims)]
        type_id = self.unpack("<I")
        data_offset = self.unpack("<Q")
        numel = 1
        for dim in dims:
            numel *= dim
            if dim > MAX_ELEMENTS or numel > MAX_ELEMENTS:
                raise GGUFError(f"{self.source}: tensor {name!r} has shape {dims}: more elements than int64 holds, "
                                "corrupt file?")
        type_name, nbytes = tensor_bytes(type_id, numel, name, self.source)
        return CheckpointTensor(name, tuple(reversed(dims)), type_name, nbytes, self.source), data_offset


def parse_prefix(data: bytes, source: str, file_size: int | None = None, deadline=None) -> GGUFHeader:
    """Parse metadata and tensor infos from the first bytes of a GGUF file; NeedMoreBytes when short.
    `deadline` (no argument) is called every few thousand items and raises once the caller's time is up."""
    cursor = _Cursor(data, source, file_size, deadline)
    if bytes(cursor.take(4)) != GGUF_MAGIC:
        raise GGUFError(f"{source}: not a GGUF file (bad magic)")
    version = cursor.unpack("<I")
    if version not in (2, 3):
        raise GGUFError(f"{source}: GGUF version {version} is not supported (2 and 3 are)")
    tensor_count, kv_count = cursor.unpack("<Q"), cursor.unpack("<Q")
    if tensor_count > MAX_TENSORS or kv_count > MAX_KEYS:
        raise GGUFError(f"{source}: GGUF header claims {tensor_count:,} tensors and {kv_count:,} keys (real files: "
                        f"under {MAX_TENSORS:,} and {MAX_KEYS:,}): corrupt or hostile file?")
    cursor.fits(kv_count, 12, "key list")  # a key: its length (8 bytes), its value type (4)
    cursor.fits(tensor_count, 24, "tensor list")  # a tensor info: name length, dimension count, type, offset
    metadata: dict = {}
    for _ in range(kv_count):
        key = cursor.string()
        type_id = cursor.unpack("<I")
        metadata[key] = cursor.value(type_id, keep=key not in _COUNT_ONLY)
    infos = [cursor.tensor() for _ in range(tensor_count)]
    tensors = tuple(tensor for tensor, _ in infos)
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT) or DEFAULT_ALIGNMENT
    if (not isinstance(alignment, int) or isinstance(alignment, bool) or not 1 <= alignment <= 1 << 20
            or alignment & (alignment - 1)):
        raise GGUFError(f"{source}: GGUF general.alignment {alignment!r} is not a power of two: corrupt file?")
    data_end = _check_offsets(infos, alignment, source)
    end = -(-cursor.offset // alignment) * alignment
    if file_size is not None and end + data_end > file_size:
        raise GGUFError(f"{source}: truncated GGUF file: its tensors end at byte {end + data_end:,} but the file has "
                        f"{file_size:,}")
    return GGUFHeader(source, version, metadata, tensors, end)


def _check_offsets(infos: list, alignment: int, source: str) -> int:
    """gguf.cpp's rule: each tensor's data starts where the previous ones end, each padded to the alignment.
    Returns where the tensor data ends (relative to its start)."""
    running = 0
    for tensor, offset in infos:
        if offset != running:
            raise GGUFError(f"{source}: tensor {tensor.key_name!r} starts at data offset {offset:,}, expected "
                            f"{running:,}: corrupt file?")
        running += -(-tensor.nbytes // alignment) * alignment
    return running


def read_local(path: str | os.PathLike) -> GGUFHeader:
    """Metadata + tensor table of a local .gguf file: the prefix parser over growing reads (never the data)."""
    return _read_prefix_from_file(Path(path))


def _read_prefix_from_file(path: Path) -> GGUFHeader:
    from ..units import open_regular_file

    with open_regular_file(path, "the GGUF file") as handle:
        size = os.fstat(handle.fileno()).st_size
        want = min(size, 1 << 20)
        data = handle.read(want)
        while True:
            try:
                return parse_prefix(data, str(path), size)
            except NeedMoreBytes as more:
                want = min(size, max(more.needed, 2 * len(data)))
                data += handle.read(want - len(data))
                if len(data) < want:  # the file shrank while it was read
                    raise GGUFError(f"{path}: truncated GGUF file") from None


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


class AmbiguousGGUFError(NotFound):
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
    if not isinstance(arch, str) or arch not in GGUF_ARCHITECTURES:
        raise UnsupportedArchitectureError(
            f"{source}: GGUF architecture {arch!r} is not sized yet (known: {', '.join(GGUF_ARCHITECTURES)})"
        )
    architecture, model_type = GGUF_ARCHITECTURES[arch]
    get = _arch_getter(metadata, arch, source)
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


def _arch_getter(metadata: dict, arch: str, source: str):
    """get(key, default): metadata "<arch>.<key>"; per-layer lists (head_count_kv, feed_forward_length) give
    their largest value."""
    def get(key: str, default=None):
        value = metadata.get(f"{arch}.{key}", default)
        if isinstance(value, list):
            if not all(isinstance(item, (int, float)) and not isinstance(item, bool) for item in value):
                raise ConfigError(f"{source}: GGUF {arch}.{key} is an array of non-numbers: corrupt file?")
            value = max(value) if value else default
        if value is not None and value is not default and not isinstance(value, (int, float, str)):
            raise ConfigError(f"{source}: GGUF {arch}.{key} has a value of the wrong type: corrupt file?")
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{source}: GGUF {arch}.{key} is {value}: corrupt file?")
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
    for key, (low, high) in _GGUF_COUNTS.items():
        value = get(key)
        if value is not None and (isinstance(value, str) or not low <= value <= high):
            raise ConfigError(f"{source}: GGUF {arch}.{key} is {value!r} (a count from {low} to {high:,}): corrupt file?")


# counts a model's metadata gives, as (lowest, highest): the upper bounds are far beyond any model (a bound
# keeps a corrupt 2^32 - 1 from sizing per-layer lists of four billion entries); dense models may write 0 experts
_GGUF_COUNTS = {"block_count": (1, 100_000), "embedding_length": (1, 1 << 24), "attention.head_count": (1, 1 << 16),
                "attention.head_count_kv": (1, 1 << 16), "feed_forward_length": (1, 1 << 26),
                "context_length": (1, 1 << 34), "attention.key_length": (1, 1 << 16), "vocab_size": (1, 1 << 26),
                "expert_count": (0, 1 << 16), "expert_used_count": (0, 1 << 16)}


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
