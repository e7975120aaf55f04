"""Vision projectors (`--mmproj FILE.gguf`): the CLIP / SigLIP tower and projector as stored, and its compute
buffer (tools/mtmd/clip.cpp, llama-cpp-python 0.3.16 tree = build ~6150).

- clip_init picks the first GPU backend (CUDA0, whatever -mg says), or the CPU with --no-mmproj-offload;
  load_tensors allocates every tensor of the file in that backend's default buffer type
  (ggml_backend_alloc_ctx_tensors_from_buft): on CUDA the same per-tensor size as a model buffer (quantized
  rows padded to 512 columns, 128-byte alignment), on the CPU 32-byte alignment.
- alloc_compute_meta reserves the graph of one warm-up image of warmup_image_size pixels a side (image_size,
  or 8 patches for Pixtral / Qwen2-VL / Qwen2.5-VL, whose image_size is capped at 1024): the compute buffer.
  The vision attention has no flash path in this tree, so its peak holds the f32 KQ scores n_head x n_pos x
  n_pos; around it n_pos x (n_embd + n_ff) f32 of activations. A documented APPROXIMATION like compute.py,
  not checked against a log (no dev case carries an mmproj).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from .weights import CUDA_ALIGNMENT, HOST_ALIGNMENT, GgufTensor, cuda_alloc_size

# projector types whose warm-up image is 8 x 8 patches (clip.cpp clip_model_loader::load_hparams)
SMALL_WARMUP = ("pixtral", "qwen2vl_merger", "qwen2.5vl_merger")


@dataclass(frozen=True)
class Projector:
    path: str
    projector_type: str
    tensors: tuple[GgufTensor, ...]
    image_size: int
    patch_size: int
    n_embd: int
    n_ff: int
    n_head: int
    has_cls: bool  # CLIP keeps a class token (v.class_embd); SigLIP does not

    @property
    def stored_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)

    @property
    def warmup_size(self) -> int:
        return self.patch_size * 8 if self.projector_type in SMALL_WARMUP else self.image_size

    @property
    def n_pos(self) -> int:
        return (self.warmup_size // self.patch_size) ** 2 + (1 if self.has_cls else 0)


class ProjectorError(ValueError):
    """An --mmproj file that is not a CLIP vision projector GGUF."""


def projector_from_header(header, path: str) -> Projector:
    meta = header.metadata

    def need(key):
        value = meta.get(f"clip.vision.{key}")
        if value is None:
            raise ProjectorError(f"{path}: not a vision projector (no clip.vision.{key} in its GGUF metadata)")
        return int(value)

    tensors, offset = [], 0
    for t in header.tensors:
        tensor = GgufTensor(t.name, t.dtype, tuple(reversed(t.shape)) or (1,), offset)
        tensors.append(tensor)
        offset += -(-tensor.nbytes // 32) * 32
    kind = str(meta.get("clip.projector_type") or meta.get("clip.vision.projector_type") or "mlp").lower()
    return Projector(path, kind, tuple(tensors), need("image_size"), need("patch_size"), need("embedding_length"),
                     need("feed_forward_length"), need("attention.head_count"),
                     any(t.name == "v.class_embd" for t in tensors))


@lru_cache(maxsize=8)
def read_projector(path: str) -> Projector:
    from ...model.gguf_source import read_local
    from ...read_policy import check

    check(path, "--mmproj")  # before anything looks at the path: on the server, only under --allow-local-models

    return projector_from_header(read_local(path), path)


def weights_bytes(p: Projector, on_gpu: bool) -> int:
    if on_gpu:
        return sum(-(-cuda_alloc_size(t) // CUDA_ALIGNMENT) * CUDA_ALIGNMENT for t in p.tensors)
    return sum(-(-t.nbytes // HOST_ALIGNMENT) * HOST_ALIGNMENT for t in p.tensors)


def compute_bytes(p: Projector) -> int:
    n = p.n_pos
    return p.n_head * n * n * 4 + n * (p.n_embd + p.n_ff) * 4


@dataclass(frozen=True)
class ProjectorBuffers:
    device: str  # "CUDA0" or "CPU"
    weights: int  # the buffer (padded, aligned)
    compute: int
    stored: int = 0  # the tensors' bytes as clip.cpp's "model size" line sums them


def projector_buffers(p: Projector, offload: bool, has_gpu: bool) -> ProjectorBuffers:
    on_gpu = offload and has_gpu
    return ProjectorBuffers("CUDA0" if on_gpu else "CPU", weights_bytes(p, on_gpu), compute_bytes(p), p.stored_bytes)
