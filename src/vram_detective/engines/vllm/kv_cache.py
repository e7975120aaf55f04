"""From available KV bytes to blocks, tokens and concurrency (design/vllm-memory.md §3).

One attention layer's page per rank (KvLayout), the single-group arithmetic (every layer full
attention with one shape) and the startup fit messages. The plan sizes each layer's page here and
groups layers of mixed kinds in kv_groups.py.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...model.spec import ModelSpec
from ...units import GIB, ceil_div
from .releases import Release


@dataclass(frozen=True)
class KvLayout:
    """Per rank: one layer's page (one block of one layer) and the layers sharing a block id."""

    block_size: int
    kv_heads_per_rank: int
    head_dim: int
    dtype_bytes: int
    num_layers: int
    kv_tensors: int = 2  # K and V; MLA stores one latent (MLAAttentionSpec, no factor 2)
    slot_bytes: int = 0  # packed formats (kv_dtypes.py): bytes per token and KV head, K and V together

    @property
    def page_bytes(self) -> int:
        # FullAttentionSpec.page_size_bytes: K and V, block_size tokens (kv_cache_interface.py);
        # V0 CacheEngine.get_cache_block_size is the same product over the stage's layers.
        if self.slot_bytes:
            return self.block_size * self.kv_heads_per_rank * self.slot_bytes  # state_content_bytes (0.28+)
        return self.kv_tensors * self.block_size * self.kv_heads_per_rank * self.head_dim * self.dtype_bytes

    @property
    def block_bytes(self) -> int:
        return self.page_bytes * self.num_layers

    @property
    def bytes_per_token(self) -> int:
        return self.block_bytes // self.block_size


# DeepSeek's fp8_ds_mla token: 512 fp8 latent values + 4 fp32 scales + 64 bf16 rope values (flashmla_sparse.py)
FP8_DS_MLA_BYTES = 512 + 4 * 4 + 64 * 2
# DeepSeek-V3.2's indexer key cache: index_head_dim fp8 values + one fp32 scale per 128 (deepseek_v2.py Indexer)
def indexer_entry_bytes(head_dim: int) -> int:
    return head_dim + head_dim // 128 * 4


def mla_latent(spec: ModelSpec, release: Release | None) -> bool:
    """Does this release serve the model's MLA as MLA (one latent per token)? Not before the MLA backends (0.7.1),
    and in 0.7.1-0.7.2 only for unquantized, FP8 and compressed-tensors checkpoints (config.py use_mla: "MLA is not
    supported with awq_marlin quantization. Disabling MLA.")."""
    if spec.mla is None:
        return False
    if release is None:
        return True
    if not release["mla_latent_kv"]:
        return False
    allowed = release["mla_quantizations"]
    return spec.quantization is None or allowed == "any" or spec.quantization.method in allowed


def kv_layout(spec: ModelSpec, tensor_parallel_size: int, num_layers: int, block_size: int, dtype_bytes: int,
              release: Release | None = None, kv_cache_dtype: str = "") -> KvLayout:
    """One attention layer's page per rank; `kv_cache_dtype` names a packed format (kv_dtypes.py) when it is one."""
    from . import kv_dtypes

    if kv_dtypes.is_packed(kv_cache_dtype) and not mla_latent(spec, release):
        return KvLayout(block_size, max(1, spec.num_kv_heads // tensor_parallel_size), spec.head_dim, 1, num_layers,
                        slot_bytes=kv_dtypes.slot_bytes(kv_cache_dtype, spec.head_dim))
    if kv_cache_dtype == "fp8_ds_mla" and spec.mla is not None:
        # MLAAttentionSpec with cache_dtype_str fp8_ds_mla: block_size x 656 (kv_cache_interface.py 0.11+)
        return KvLayout(block_size, 1, spec.mla.latent_dim, 1, num_layers, kv_tensors=1, slot_bytes=FP8_DS_MLA_BYTES)
    if mla_latent(spec, release):
        # MLA: one latent of kv_lora_rank + rope dims per token, the same on every TP rank (§3.2, §9);
        # V0 0.7.1-0.7.3 pads each token's entry to 256 bytes (576 x 2 B -> 1280 B)
        width = spec.mla.latent_dim
        align = release["mla_entry_align_bytes"] if release is not None else 0
        if align:
            width = -(-width * dtype_bytes // align) * align // dtype_bytes
        return KvLayout(block_size, 1, width, dtype_bytes, num_layers, kv_tensors=1)
    # KV heads per rank: max(1, kv_heads // tp) - replicated when tp exceeds the KV heads (§9)
    return KvLayout(block_size, max(1, spec.num_kv_heads // tensor_parallel_size), spec.head_dim, dtype_bytes, num_layers)


def num_blocks(available_bytes: int, layout: KvLayout) -> int:
    if available_bytes <= 0:
        return 0
    return int(available_bytes // layout.block_bytes)


def largest_fitting_max_model_len(available_bytes: int, layout: KvLayout) -> int:
    """estimate_max_model_len for one full-attention group: whole blocks times the block size."""
    return max(0, num_blocks(available_bytes, layout)) * layout.block_size


def usable_for_fit(available_bytes: int, layout: KvLayout, release: Release) -> int:
    """Bytes the "one full request must fit" check may use: 0.33 keeps the null block out of it."""
    return available_bytes - layout.block_bytes if release["null_block_in_fit_check"] else available_bytes


def fit_failure(available_bytes: int, blocks: int, layout: KvLayout, max_model_len: int, release: Release) -> str | None:
    """The error that release raises when one max_model_len request does not fit, else None."""
    if release.engine == "v0":
        # vllm/worker/worker.py raise_if_cache_size_invalid
        if blocks <= 0:
            return "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine."
        max_seq_len = layout.block_size * blocks
        if max_model_len > max_seq_len:
            return (
                f"The model's max seq len ({max_model_len}) is larger than the maximum number of tokens that can be "
                f"stored in KV cache ({max_seq_len}). Try increasing `gpu_memory_utilization` or decreasing "
                "`max_model_len` when initializing the engine."
            )
        return None
    # vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory (0.8+), worded per release
    if available_bytes <= 0:
        return "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine."
    needed = ceil_div(max_model_len, layout.block_size) * layout.block_bytes
    usable = usable_for_fit(available_bytes, layout, release)
    if needed <= usable:
        return None
    return v1_fit_message(str(release["kv_fit_message"]), max_model_len, needed, available_bytes,
                           largest_fitting_max_model_len(usable, layout))


_TRY = "Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."


def v1_fit_message(style: str, max_model_len: int, needed: int, available: int, estimate: int) -> str:
    from .logs.lines import format_gib

    subject = "model's" if style == "model-s" else "models's"
    head = f"To serve at least one request with the {subject} max seq len ({max_model_len}), "
    if style in ("gb", "gib"):
        unit = "GB" if style == "gb" else "GiB"
        return (f"{head}({needed / GIB:.2f} {unit} KV cache is needed, which is larger than the available KV cache "
                f"memory ({available / GIB:.2f} {unit}). {_TRY}")
    if style == "gib-cut-estimate":
        cut = " Based on the available memory," if estimate > 0 else ""
        return (f"{head}({needed / GIB:.2f} GiB KV cache is needed, which is larger than the available KV cache "
                f"memory ({available / GIB:.2f} GiB).{cut}  {_TRY}")
    estimate_text = f"Based on the available memory, the estimated maximum model length is {estimate}." if estimate > 0 else ""
    if style == "gib-estimate":
        return (f"{head}({needed / GIB:.2f} GiB KV cache is needed, which is larger than the available KV cache "
                f"memory ({available / GIB:.2f} GiB). {estimate_text} {_TRY}")
    try_text = _TRY if style == "format-gib" else (
        "Try increasing `gpu_memory_utilization` (which also controls CPU memory on the CPU backend) or decreasing "
        "`max_model_len` when initializing the engine.")
    return (f"{head}({format_gib(needed)} GiB KV cache is needed, which is larger than the available KV cache memory "
            f"({format_gib(available)} GiB). {estimate_text + ' ' if estimate_text else ''}{try_text} See "
            "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.")

