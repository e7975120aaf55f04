"""The KV cache as llama.cpp allocates it (src/llama-kv-cache-unified.cpp constructor, llama-model.cpp
create_memory, llama-kv-cache-unified-iswa.cpp, llama-memory-recurrent.cpp; 0.3.16 tree = build ~6150).

Per attention layer: K = row_size(type_k, n_embd_k_gqa) x cells x streams, V likewise with type_v; a layer's
K/V sit on the device that holds the layer (CPU when not offloaded or with --no-kv-offload).
"""
from __future__ import annotations

from dataclasses import dataclass

from .ggml_types import row_size
from .releases import rule

MIB = 1024 * 1024


@dataclass(frozen=True)
class KvLayer:
    """One attention layer's cache row widths (n_head_kv x head size) and whether it is a sliding layer."""

    n_embd_k: int
    n_embd_v: int
    swa: bool = False


@dataclass(frozen=True)
class KvSettings:
    n_ctx: int
    n_seq_max: int = 1
    kv_unified: bool | None = None  # None: the build's default (releases kv.unified_default)
    type_k: str = "f16"
    type_v: str = "f16"
    flash_attn: bool = False
    n_ubatch: int = 512
    n_swa: int = 0
    swa_full: bool = False
    build: int | None = None


@dataclass(frozen=True)
class KvCache:
    cells: int  # per stream, as the size line prints them
    streams: int
    layers: int
    k_bytes: int
    v_bytes: int
    per_device: tuple[tuple[str, int], ...]  # ("CUDA0", bytes), ... in first-layer order

    @property
    def total_bytes(self) -> int:
        return self.k_bytes + self.v_bytes


def pad(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def padding(settings: KvSettings) -> int:
    return rule("kv.padding_fa" if settings.flash_attn else "kv.padding_no_fa", settings.build)


def unified(settings: KvSettings) -> bool:
    if not rule("kv.streams", settings.build):
        return True  # one stream for every sequence before the kv_unified switch existed
    if settings.kv_unified is not None:
        return settings.kv_unified
    return rule("kv.unified_default", settings.build) is True


def stream_cells(settings: KvSettings) -> tuple[int, int]:
    """(cells per stream, streams): create_memory pads n_ctx (or n_ctx / n_seq_max per stream) to `padding`."""
    n_pad = padding(settings)
    if unified(settings):
        return pad(settings.n_ctx, n_pad), 1
    per_stream = -(-settings.n_ctx // settings.n_seq_max)
    return pad(per_stream, n_pad), settings.n_seq_max


def swa_cells(settings: KvSettings, base_cells: int) -> int:
    """iSWA: sliding layers hold min(base, pad(n_swa x seqs-per-stream + n_ubatch)) unless --swa-full."""
    if settings.swa_full or not rule("kv.iswa", settings.build) or settings.n_swa <= 0:
        return base_cells
    seqs = settings.n_seq_max if unified(settings) else 1
    return min(base_cells, pad(settings.n_swa * seqs + settings.n_ubatch, padding(settings)))


def kv_cache(layers: list[KvLayer], devices: list[str], settings: KvSettings, swa: bool | None = None) -> KvCache:
    """The cache of `layers` (devices[i] holds layer i). swa: None = all given layers with their base/SWA size
    merged; True / False = only the sliding / only the full layers (iSWA prints one size line per cache)."""
    cells, streams = stream_cells(settings)
    sliding_cells = swa_cells(settings, cells)
    k_total = v_total = 0
    per_device: dict[str, int] = {}
    count = 0
    for layer, device in zip(layers, devices):
        if swa is not None and layer.swa != swa:
            continue
        n_cells = sliding_cells if layer.swa else cells
        k = row_size(settings.type_k, layer.n_embd_k) * n_cells * streams
        v = row_size(settings.type_v, layer.n_embd_v) * n_cells * streams
        k_total, v_total, count = k_total + k, v_total + v, count + 1
        per_device[device] = per_device.get(device, 0) + k + v
    shown = sliding_cells if swa else cells
    return KvCache(shown, streams, count, k_total, v_total, tuple(per_device.items()))


def uniform_layers(n_layer: int, n_head_kv: int, head_k: int, head_v: int | None = None,
                   swa_layers: frozenset[int] = frozenset()) -> list[KvLayer]:
    head_v = head_k if head_v is None else head_v
    return [KvLayer(n_head_kv * head_k, n_head_kv * head_v, il in swa_layers) for il in range(n_layer)]


def mla_layers(n_layer: int, kv_lora_rank: int, rope_dim: int, n_head: int, nope_dim: int, v_head_dim: int,
               build: int | None, file_has_kv_b_split: bool = True) -> list[KvLayer]:
    """DeepSeek-2/3: the latent (kv_lora_rank + rope, one KV head) once the build and the file support it,
    otherwise full per-head K (nope + rope) and V (releases kv.mla_latent)."""
    if rule("kv.mla_latent", build) and file_has_kv_b_split:
        return [KvLayer(kv_lora_rank + rope_dim, kv_lora_rank)] * n_layer
    return [KvLayer(n_head * (nope_dim + rope_dim), n_head * v_head_dim)] * n_layer


def layer_devices(n_layer: int, gpu_layers: dict[int, str], kv_offload: bool = True) -> list[str]:
    """The device of each layer's KV: the layer's device, CPU when not offloaded or with --no-kv-offload."""
    return [gpu_layers.get(il, "CPU") if kv_offload else "CPU" for il in range(n_layer)]


@dataclass(frozen=True)
class RecurrentState:
    """llama_memory_recurrent's buffers: `cells` state slots, the conv (r) and SSM/WKV (s) f32 rows of each
    recurrent layer, on that layer's device (src/llama-memory-recurrent.cpp constructor)."""

    cells: int
    layers: int  # recurrent layers holding state
    r_bytes: int
    s_bytes: int
    per_device: tuple[tuple[str, int], ...] = ()

    @property
    def total_bytes(self) -> int:
        return self.r_bytes + self.s_bytes


NO_STATE = RecurrentState(0, 0, 0, 0)


def recurrent_state(n_recurrent_layers: int, n_embd_r: int, n_embd_s: int, n_seq_max: int,
                    devices: list[str] | None = None) -> RecurrentState:
    """llama-memory-recurrent.cpp: max(1, n_seq_max) cells of f32 conv (r) and SSM (s) state per recurrent
    layer (create_memory passes type_r = type_s = F32 and mem_size = max(1, n_seq_max)); devices[i] holds
    recurrent layer i's rows (the layer's device, CPU without offload)."""
    cells = max(1, n_seq_max)
    per_layer = (n_embd_r + n_embd_s) * 4 * cells
    per_device: dict[str, int] = {}
    for device in devices or ["CPU"] * n_recurrent_layers:
        per_device[device] = per_device.get(device, 0) + per_layer
    return RecurrentState(cells, n_recurrent_layers, n_embd_r * 4 * cells * n_recurrent_layers,
                          n_embd_s * 4 * cells * n_recurrent_layers, tuple(per_device.items()))


def gated_delta_state(conv_kernel: int, n_k_heads: int, head_k: int, n_v_heads: int, head_v: int) -> tuple[int, int]:
    """(n_embd_r, n_embd_s) of a gated-delta-net layer (qwen3next/qwen35): conv keeps kernel-1 columns of
    q, k, v; the SSM state is head_k x head_v per value head."""
    conv_dim = 2 * n_k_heads * head_k + n_v_heads * head_v
    return (conv_kernel - 1) * conv_dim, head_k * head_v * n_v_heads


def mamba_state(conv_kernel: int, d_inner: int, d_state: int, n_group: int = 0) -> tuple[int, int]:
    """(n_embd_r, n_embd_s) of a Mamba layer (llama-hparams.cpp n_embd_r / n_embd_s): conv keeps kernel-1
    columns of x (Mamba2: plus B and C, 2 x n_group x d_state); the SSM state is d_state x d_inner."""
    return (conv_kernel - 1) * (d_inner + 2 * n_group * d_state), d_state * d_inner


def rwkv_state(n_embd: int, head_size: int, token_shift_count: int = 2) -> tuple[int, int]:
    """(n_embd_r, n_embd_s) of an RWKV6/7 layer (llama-hparams.cpp): token_shift_count x n_embd of shifted
    tokens, and the WKV state n_embd x head_size."""
    return token_shift_count * n_embd, n_embd * head_size
