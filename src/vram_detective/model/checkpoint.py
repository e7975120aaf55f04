"""The tensors a checkpoint really stores (from safetensors headers or a GGUF tensor table), and how they
compare with the tensors vLLM holds on the GPU (inventory.build_inventory's synthesized layout).

The checkpoint is the truth for every stored shape and dtype; vLLM then fuses q/k/v and gate/up, pads the
vocabulary, drops what it rebuilds (stored rotary inv_freq, a tied lm_head), adds buffers (the rotary
cos/sin cache) and repacks quantized layouts. `reconcile` lines the two up per vLLM parameter and per role.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

# GGML storage types vLLM keeps as raw blocks on the GPU (everything but the plain float/int types).
GGUF_PLAIN_TYPES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16", "F64": "float64",
                    "I8": "int8", "I16": "int16", "I32": "int32", "I64": "int64"}

QUANT_SUFFIXES = (
    "qweight", "qzeros", "scales", "g_idx", "weight_scale", "weight_scale_inv", "weight_scale_2", "input_scale",
    "weight_zero_point", "weight_packed", "weight_shape", "weight_g_idx", "input_zero_point", "SCB", "absmax",
    "quant_map", "nested_absmax", "nested_quant_map", "quant_state", "k_scale", "v_scale", "blocks",
)
# suffixes that carry the weight itself in a quantized checkpoint
_WEIGHT_SUFFIXES = ("weight", "qweight", "weight_packed", "blocks")


@dataclass(frozen=True)
class CheckpointTensor:
    name: str  # as stored in the checkpoint (GGUF: "blk.0.attn_q.weight")
    shape: tuple[int, ...]  # logical shape, Hugging Face order ([out, in] for linears; GGUF dims reversed)
    dtype: str  # torch-style ("bfloat16", "int32", "float8_e4m3fn") or a GGML type name ("Q4_K", "Q8_0")
    nbytes: int  # bytes as stored (GGUF: whole blocks)
    file: str = ""
    hf_name: str = ""  # the Hugging Face name it corresponds to (GGUF); "" = same as name

    @property
    def numel(self) -> int:
        count = 1
        for dim in self.shape:
            count *= dim
        return count

    @property
    def key_name(self) -> str:
        return self.hf_name or self.name

    @property
    def gguf_quantized(self) -> bool:
        return self.dtype.isupper() and self.dtype not in GGUF_PLAIN_TYPES


@dataclass(frozen=True)
class CheckpointTable:
    """Every tensor of a checkpoint, from headers only (no tensor data was read)."""

    format: str  # "safetensors" or "gguf"
    tensors: tuple[CheckpointTensor, ...]
    files: tuple[str, ...]
    header_bytes: int  # bytes of headers read to learn this table
    metadata: dict = field(default_factory=dict, compare=False)

    @property
    def total_bytes(self) -> int:
        return sum(tensor.nbytes for tensor in self.tensors)

    @property
    def parameters(self) -> int:
        return sum(tensor.numel for tensor in self.tensors)

    def bytes_by_dtype(self) -> dict[str, int]:
        totals: dict[str, int] = {}
        for tensor in self.tensors:
            totals[tensor.dtype] = totals.get(tensor.dtype, 0) + tensor.nbytes
        return dict(sorted(totals.items(), key=lambda item: -item[1]))

    def bytes_by_role(self) -> dict[str, int]:
        totals: dict[str, int] = {}
        for tensor in self.tensors:
            role = vllm_key(tensor.key_name)[1]
            totals[role] = totals.get(role, 0) + tensor.nbytes
        return totals

    def to_dict(self, with_tensors: bool = False) -> dict:
        out = {"format": self.format, "files": list(self.files), "tensors": len(self.tensors),
               "bytes": self.total_bytes, "parameters": self.parameters, "header_bytes": self.header_bytes,
               "bytes_by_dtype": self.bytes_by_dtype(), "bytes_by_role": self.bytes_by_role()}
        if with_tensors:
            out["tensor_table"] = [{"name": t.name, "shape": list(t.shape), "dtype": t.dtype, "bytes": t.nbytes,
                                    "file": t.file} for t in self.tensors]
        return out


def table_from_safetensors(headers: list, files: list[str] | None = None) -> CheckpointTable:
    """One table from the SafetensorsHeader of every shard (safetensors_headers.read_header / hub.py)."""
    tensors = []
    for header, name in zip(headers, files or [h.source for h in headers]):
        for entry in header.tensors:
            tensors.append(CheckpointTensor(entry.name, entry.shape, entry.dtype, entry.nbytes, name))
    metadata = {}
    for header in headers:
        metadata.update(header.metadata)
    return CheckpointTable("safetensors", tuple(tensors), tuple(files or [h.source for h in headers]),
                           sum(8 + h.header_bytes for h in headers), metadata)


# --- Hugging Face names -> vLLM's parameter names ---------------------------------------------------------

_PREFIXES = (
    ("model.language_model.", "model."), ("language_model.model.", "model."), ("language_model.lm_head.", "lm_head."),
    ("model.decoder.", "model."), ("transformer.", "model."),
)
_VISION = re.compile(r"^(model\.)?(visual|vision_tower|vision_model|multi_modal_projector|mm_projector|vision)\.")
_LAYER = re.compile(r"^model\.layers\.\d+\.")
_EXPERT = re.compile(r"^(mlp|block_sparse_moe)\.experts\.\d+\.(w1|w2|w3|gate_proj|up_proj|down_proj)\.(\w+)$")
_NORM = re.compile(r"^(input_layernorm|post_attention_layernorm|pre_feedforward_layernorm|post_feedforward_layernorm|"
                   r"self_attn_layer_norm|final_layer_norm|ln_1|ln_2|attention_norm|ffn_norm)\.(weight|bias)$")


def vllm_key(name: str) -> tuple[str, str]:
    """(vLLM parameter key with layer indices collapsed to '*', role) for a stored tensor name."""
    for old, new in _PREFIXES:
        if name.startswith(old):
            name = new + name[len(old):]
            break
    if _VISION.match(name):
        return "vision.*", "vision"
    if "rotary_emb.inv_freq" in name or name.startswith("rope_freqs") or name.endswith(".rotary_emb.inv_freq"):
        return re.sub(r"\.layers\.\d+\.", ".layers.*.", name), "rotary cache"
    suffix = name.rsplit(".", 1)[-1]
    if name.startswith("model.embed_tokens.") or name in ("model.embed_in.weight", "model.wte.weight"):
        return "model.embed_tokens.weight", "embedding" if suffix in _WEIGHT_SUFFIXES else "quantization metadata"
    if name.startswith("model.embed_positions."):
        return "model.decoder.embed_positions.weight", "position embedding"
    if name.startswith("lm_head."):
        return f"lm_head.{suffix}", "lm_head" if suffix in _WEIGHT_SUFFIXES else "quantization metadata"
    if name in ("model.norm.weight", "model.norm.bias", "model.final_layer_norm.weight", "model.final_layer_norm.bias"):
        return "model.norm.weight", "norm"
    match = _LAYER.match(name)
    if not match:
        return name, _role_by_words(name)
    rest = name[match.end():]
    metadata = suffix in QUANT_SUFFIXES and suffix not in _WEIGHT_SUFFIXES
    if _NORM.match(rest):
        return "model.layers.*.*_layernorm.weight", "norm"
    if rest.endswith("_norm.weight") or rest.endswith("_layernorm.weight"):
        return "model.layers.*." + rest, "norm"
    expert = _EXPERT.match(rest)
    if expert:
        fused = "w2" if expert.group(2) in ("w2", "down_proj") else "w13"
        stored = expert.group(3)
        return f"model.layers.*.mlp.experts.{fused}_{stored}", "quantization metadata" if metadata else "expert"
    rest = re.sub(r"^block_sparse_moe\.gate\.", "mlp.gate.", rest)
    if rest.startswith("mlp.gate.") or rest.startswith("mlp.router.") or rest.startswith("mlp.shared_expert_gate."):
        return "model.layers.*." + rest, "router"
    rest = re.sub(r"\.(q_proj|k_proj|v_proj)\.", ".qkv_proj.", rest)
    rest = re.sub(r"\.(gate_proj|up_proj)\.", ".gate_up_proj.", rest)
    role = _role_by_words(rest)
    return "model.layers.*." + rest, "quantization metadata" if metadata else role


def _role_by_words(name: str) -> str:
    if "norm" in name:
        return "norm"
    if "attn" in name or "attention" in name:
        return "attention"
    if "expert" in name:
        return "expert"
    if "mlp" in name or "fc1" in name or "fc2" in name or "ffn" in name:
        return "mlp"
    if "embed" in name:
        return "embedding"
    return "other"


def _inventory_key(group_name: str) -> str:
    name = re.sub(r"^model\.layers\.\{[^}]*\}\.", "model.layers.*.", group_name)
    if name.startswith("vision."):
        return "vision.*"
    return name


# --- reconciliation ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReconciledRow:
    key: str  # vLLM parameter, layers collapsed ("model.layers.*.self_attn.qkv_proj.weight")
    role: str
    status: str  # match | cast | repacked | gguf | dropped | added | mismatch | unmatched
    checkpoint_bytes: int
    gpu_bytes: int
    checkpoint_dtype: str = ""
    gpu_dtype: str = ""
    checkpoint_numel: int = 0
    gpu_numel: int = 0
    checkpoint_tensors: int = 0
    note: str = ""

    def to_dict(self) -> dict:
        return {"key": self.key, "role": self.role, "status": self.status, "checkpoint_bytes": self.checkpoint_bytes,
                "gpu_bytes": self.gpu_bytes, "checkpoint_dtype": self.checkpoint_dtype, "gpu_dtype": self.gpu_dtype,
                "checkpoint_numel": self.checkpoint_numel, "gpu_numel": self.gpu_numel,
                "checkpoint_tensors": self.checkpoint_tensors, "note": self.note}


@dataclass(frozen=True)
class CheckpointReport:
    """Checkpoint (whole model, as stored) vs GPU (one copy of the model as vLLM holds it: tp=1, pp=1)."""

    format: str
    rows: tuple[ReconciledRow, ...]
    by_role: dict  # role -> (checkpoint bytes, GPU bytes)
    checkpoint_bytes: int
    gpu_bytes: int

    @property
    def matched_bytes(self) -> int:
        return sum(row.gpu_bytes for row in self.rows if row.status in ("match", "gguf"))

    def rows_with(self, *statuses: str) -> tuple[ReconciledRow, ...]:
        return tuple(row for row in self.rows if row.status in statuses)

    @property
    def dropped(self) -> tuple[ReconciledRow, ...]:
        return self.rows_with("dropped")

    @property
    def added(self) -> tuple[ReconciledRow, ...]:
        return self.rows_with("added")

    @property
    def mismatches(self) -> tuple[ReconciledRow, ...]:
        """Shapes where the config-synthesized layout disagrees with the stored tensors (not repacking)."""
        return self.rows_with("mismatch", "unmatched")

    def to_dict(self) -> dict:
        return {"format": self.format, "checkpoint_bytes": self.checkpoint_bytes, "gpu_bytes": self.gpu_bytes,
                "matched_bytes": self.matched_bytes,
                "by_role": {role: {"checkpoint_bytes": c, "gpu_bytes": g} for role, (c, g) in self.by_role.items()},
                "rows": [row.to_dict() for row in self.rows]}

    def summary_lines(self) -> list[str]:
        """Plain text, one line each: the totals, then every row that is not an exact match."""
        gib = 1 << 30
        lines = [f"checkpoint {self.checkpoint_bytes / gib:.3f} GiB ({self.format}) -> GPU {self.gpu_bytes / gib:.3f} GiB "
                 f"(one copy, before sharding); {self.matched_bytes / gib:.3f} GiB byte-identical"]
        for row in self.rows:
            if row.status == "match":
                continue
            lines.append(f"  {row.status:<9} {row.key}: {row.checkpoint_bytes:,} -> {row.gpu_bytes:,} bytes"
                         + (f" ({row.note})" if row.note else ""))
        return lines


@dataclass
class _Side:
    bytes: int = 0
    numel: int = 0
    tensors: int = 0
    dtypes: dict = field(default_factory=dict)  # dtype -> bytes
    role: str = ""
    names: list = field(default_factory=list)

    def add(self, nbytes: int, numel: int, dtype: str, role: str, name: str, count: int = 1) -> None:
        self.bytes += nbytes
        self.numel += numel
        self.tensors += count
        self.dtypes[dtype] = self.dtypes.get(dtype, 0) + nbytes
        self.role = self.role or role
        self.names.append(name)

    @property
    def dtype(self) -> str:
        return "+".join(sorted(self.dtypes, key=lambda d: -self.dtypes[d]))


def reconcile(table: CheckpointTable, inventory, tie_word_embeddings: bool = False, dtype: str | None = None) -> CheckpointReport:
    """Line the stored tensors up with an Inventory built for tp=1, pp=1 (the whole model on one GPU).

    For GGUF tables every block-quantized tensor stays on the GPU as stored (vLLM's GGUF linear and
    embedding methods keep the raw blocks), so its GPU bytes are the file's bytes; norms and other plain
    tensors are cast to the model dtype like any checkpoint's."""
    checkpoint, gpu = _sides(table, inventory)
    rows: list[ReconciledRow] = []
    gguf_embedding = False
    for key, ck in checkpoint.items():
        if key in gpu:
            row = _paired_row(table, key, ck, gpu.pop(key))
            if row.status == "gguf" and key == "model.embed_tokens.weight":
                gguf_embedding = True
            rows.append(row)
        else:
            rows.append(_stored_only_row(key, ck, tie_word_embeddings))
    for key, g in gpu.items():
        if g.role == "vocab padding" and gguf_embedding and key.startswith("model.embed_tokens"):
            continue  # a GGUF embedding is materialized with the stored rows (no padding rows)
        rows.append(_added_row(key, g, checkpoint))

    by_role: dict[str, list[int]] = {}
    for row in rows:
        pair = by_role.setdefault(row.role, [0, 0])
        pair[0] += row.checkpoint_bytes
        pair[1] += row.gpu_bytes
    return CheckpointReport(table.format, tuple(rows), {role: tuple(pair) for role, pair in by_role.items()},
                            table.total_bytes, sum(row.gpu_bytes for row in rows))


def _sides(table: CheckpointTable, inventory) -> tuple[dict[str, _Side], dict[str, _Side]]:
    """The stored tensors and the inventory's groups, each summed under vLLM's parameter names."""
    checkpoint: dict[str, _Side] = {}
    for tensor in table.tensors:
        key, role = vllm_key(tensor.key_name)
        checkpoint.setdefault(key, _Side()).add(tensor.nbytes, tensor.numel, tensor.dtype, role, tensor.name)
    gpu: dict[str, _Side] = {}
    for group in inventory.groups:
        key = _inventory_key(group.name)
        numel = 1
        for dim in group.shape:
            numel *= dim
        if group.role in ("vocab padding", "rotary cache"):
            key = group.name
        gpu.setdefault(key, _Side()).add(group.bytes, numel * group.count, group.dtype, group.role, group.name, group.count)
    return checkpoint, gpu


def _paired_row(table: CheckpointTable, key: str, ck: _Side, g: _Side) -> ReconciledRow:
    """A parameter both stored and held on the GPU: how the stored bytes became the GPU's."""
    gguf = table.format == "gguf" and any(_is_gguf_block_type(d) for d in ck.dtypes)
    if gguf:
        status, gpu_bytes = "gguf", ck.bytes
        note = f"vLLM keeps the {ck.dtype} blocks as stored"
    elif ck.numel == g.numel and ck.bytes == g.bytes:
        status, gpu_bytes, note = "match", g.bytes, ""
    elif ck.numel == g.numel:
        status, gpu_bytes, note = "cast", g.bytes, f"stored {ck.dtype}, loaded as {g.dtype}"
    elif ck.role == "vision" or g.role == "vision":
        status, gpu_bytes, note = "repacked", g.bytes, "vision tower: fused and cast by vLLM"
    elif _quantized(ck, g, key):
        status, gpu_bytes, note = "repacked", g.bytes, f"{ck.dtype} {ck.numel:,} elements -> {g.dtype} {g.numel:,}"
    else:
        status, gpu_bytes = "mismatch", g.bytes
        note = f"checkpoint stores {ck.numel:,} elements, the config implies {g.numel:,}"
    return ReconciledRow(key, g.role or ck.role, status, ck.bytes, gpu_bytes, ck.dtype, g.dtype,
                         ck.numel, g.numel, ck.tensors, note)


def _stored_only_row(key: str, ck: _Side, tie_word_embeddings: bool) -> ReconciledRow:
    """A stored tensor the GPU layout does not hold: dropped by vLLM, or unmatched."""
    if ck.role == "rotary cache":
        note = "vLLM rebuilds rotary embeddings (cos/sin cache); the stored tensor is skipped"
        return ReconciledRow(key, ck.role, "dropped", ck.bytes, 0, ck.dtype, "", ck.numel, 0, ck.tensors, note)
    if key.startswith("lm_head.") and tie_word_embeddings:
        return ReconciledRow(key, "lm_head", "dropped", ck.bytes, 0, ck.dtype, "", ck.numel, 0, ck.tensors,
                             "tied to embed_tokens: vLLM shares the embedding and skips the stored copy")
    return ReconciledRow(key, ck.role, "unmatched", ck.bytes, 0, ck.dtype, "", ck.numel, 0, ck.tensors,
                         "stored, but not in the layout synthesized from the config")


def _added_row(key: str, g: _Side, checkpoint: dict[str, _Side]) -> ReconciledRow:
    """A GPU tensor with nothing stored under its name: built at load time, or missing from the checkpoint."""
    if g.role == "vocab padding":
        note = "vocabulary padded to a multiple of 64 (VocabParallelEmbedding)"
    elif g.role == "rotary cache":
        note = "[max_position, rotary_dim] cos/sin cache built at load time"
    elif g.role == "quantization metadata":
        note = "created by the kernel's layout (not stored)"
    elif key.startswith("lm_head.") and not any(k.startswith("lm_head.") for k in checkpoint):
        note = "lm_head not stored (tied in the checkpoint)"
    else:
        note = "not found under this name in the checkpoint"
    return ReconciledRow(key, g.role, "added", 0, g.bytes, "", g.dtype, 0, g.numel, 0, note)


def _is_gguf_block_type(dtype: str) -> bool:
    return dtype.isupper() and dtype not in GGUF_PLAIN_TYPES


def _quantized(ck: _Side, g: _Side, key: str) -> bool:
    suffix = key.rsplit(".", 1)[-1]
    plain = {"bfloat16", "float16", "float32"}
    return (suffix in QUANT_SUFFIXES or suffix.startswith(("w13_", "w2_")) and suffix not in ("w13_weight", "w2_weight")
            or any(d not in plain for d in ck.dtypes) or any(d not in plain for d in g.dtypes))


def gguf_weight_bytes(table: CheckpointTable, dtype: str) -> dict[str, int]:
    """Weights by role as vLLM holds a GGUF checkpoint (whole model, before sharding): block-quantized tensors
    as stored (embedding included), plain tensors (norms, F16/F32 linears) in the model dtype; the tied
    lm_head is the embedding. Rotary caches and vocabulary padding are not included (inventory has them)."""
    from .dtypes import DTYPE_BYTES

    totals: dict[str, int] = {}
    for tensor in table.tensors:
        key, role = vllm_key(tensor.key_name)
        if role == "rotary cache":
            continue  # rope_freqs: vLLM computes its own
        if tensor.gguf_quantized:
            amount = tensor.nbytes
        else:
            amount = tensor.numel * DTYPE_BYTES.get(dtype, 2)
        totals[role] = totals.get(role, 0) + amount
    return totals
