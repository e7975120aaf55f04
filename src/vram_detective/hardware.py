"""GPU catalog: the device total each card reports to CUDA, plus lookup and size parsing.

The total that matters for vLLM is cudaMemGetInfo's (torch.cuda.mem_get_info), which is
~0.3-0.75 GiB below nvidia-smi's "Total" because the driver reserves memory. Catalog data
lives in data/gpus.json, each entry with its provenance.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib.resources import files

GIB = 1 << 30
MIB = 1 << 20

__all__ = [
    "GIB",
    "Gpu",
    "UnknownGpuError",
    "AmbiguousGpuError",
    "all_gpus",
    "common_gpus",
    "find_gpu",
    "custom_gpu",
    "parse_memory_size",
    "normalize_gpu_key",
    "lookup_keys",
]


@dataclass(frozen=True)
class Gpu:
    name: str
    short_name: str
    aliases: tuple[str, ...]
    cuda_total_bytes: int
    nvidia_smi_total_mib: int | None
    compute_capability: tuple[int, int]
    vendor: str
    memory_type: str
    common: bool
    source: str
    # Short forms this card wins when several cards could match (e.g. "A100").
    default_for: tuple[str, ...] = ()
    # GH200/GB10: vLLM 0.33 sizes memory from psutil on these.
    unified_memory: bool = False
    notes: str = ""
    # Memory other processes already hold on this device when the engine starts (`--gpu auto` reads it from
    # nvidia-smi / NVML / rocm-smi); 0 for a catalog card. Engines that size from free memory subtract it.
    in_use_bytes: int = 0
    # the name nvidia-smi prints when it is not `name` (the RTX 3080 12GB prints "NVIDIA GeForce RTX 3080")
    nvidia_smi_name: str = ""

    @property
    def free_bytes(self) -> int:
        """What torch.cuda.mem_get_info() returns as free before the engine loads anything."""
        return self.cuda_total_bytes - self.in_use_bytes

    @property
    def cuda_total_gib(self) -> float:
        return self.cuda_total_bytes / GIB

    @property
    def supports_bf16(self) -> bool:
        if self.vendor == "amd":
            return True
        return self.compute_capability >= (8, 0)

    @property
    def supports_fp8(self) -> bool:
        if self.vendor == "amd":
            # gfx942/gfx950 (MI300, MI325X, MI350): 9.4+; RDNA3 (gfx1100, nominal 11.0) has no FP8
            return (9, 4) <= self.compute_capability < (10, 0)
        if self.vendor == "apple":
            return False
        return self.compute_capability >= (8, 9)

    @property
    def sm_count(self) -> int:
        """Streaming multiprocessors (compute units on AMD); 0 when the catalog does not know the card (a card sized
        by hand keeps its catalog name, and with it the count)."""
        if self.short_name in SM_COUNTS:
            return SM_COUNTS[self.short_name]
        known = _catalog()[1].get(normalize_gpu_key(self.name))
        return SM_COUNTS.get(known.short_name, 0) if known is not None else 0

    @property
    def is_a100(self) -> bool:
        # vLLM keeps the smaller default batch sizes on A100 (#17885).
        return "A100" in self.name.upper()


# Streaming multiprocessors per card (vendor specifications; AMD: compute units), by catalog short name. Kernels
# that size per-program buffers by the SM count (vLLM's Triton top-k/top-p sampler) read it.
SM_COUNTS = {
    "T4": 40, "V100 16GB": 80, "V100 32GB": 80, "A10": 72, "A10G": 80, "A30": 56, "L4": 58, "L20": 92, "L40": 142,
    "L40S": 142, "A40": 84, "RTX A5000": 64, "RTX A6000": 84, "RTX 6000 Ada": 142, "RTX A4000": 48,
    "RTX A4500": 56, "RTX 4000 Ada": 48, "RTX 5000 Ada": 100, "RTX 3090": 82, "RTX 3090 Ti": 84,
    "RTX 4070 Laptop": 36, "RTX 4080": 76, "RTX 4090": 128, "RTX 5070 Ti": 70, "RTX 5090": 170, "RTX 5090 D": 170,
    "RTX 2080 Ti": 68, "TITAN RTX": 72, "RTX 3060": 28, "RTX 3060 Ti": 38, "RTX 3070": 46, "RTX 3070 Ti": 48,
    "RTX 3080": 68, "RTX 3080 12GB": 70, "RTX 3080 Ti": 80, "RTX 4060 Ti": 34, "RTX 4060 Ti 8GB": 34,
    "RTX 4060": 24, "RTX 4070": 46, "RTX 4070 SUPER": 56, "RTX 4070 Ti": 60, "RTX 4070 Ti SUPER": 66,
    "RTX 4080 SUPER": 80, "RTX 5060 Ti": 36, "RTX 5070": 48, "RTX 5080": 84, "A100 40GB": 108,
    "A100 40GB PCIe": 108, "A100 80GB": 108, "A100 80GB PCIe": 108, "A800 80GB": 108, "H100 SXM": 132,
    "H100 PCIe": 114, "H100 NVL": 132, "H800": 132, "H20": 78, "H200": 132, "GH200": 132, "B200": 148,
    "RTX PRO 6000 Server": 188, "RTX PRO 6000 Workstation": 188, "GB10": 48, "MI300X": 304,
}


class UnknownGpuError(ValueError):
    """A GPU name that is not in the catalog (message is one line, with suggestions)."""


# Vendor/brand words that nvidia-smi prints but users usually omit.
_BRAND_WORDS = frozenset({"nvidia", "geforce", "tesla", "amd", "instinct"})
_SEPARATORS = re.compile(r"[\s\-_]+")
_GB_SUFFIX = re.compile(r"(\d)gi?b$")


def normalize_gpu_key(text: str) -> str:
    """Lookup key: lower case, no spaces/dashes/underscores, no brand words, "80GB" == "80G"."""
    tokens = [t for t in _SEPARATORS.split(text.strip().lower()) if t]
    while len(tokens) > 1 and tokens[0] in _BRAND_WORDS:
        tokens.pop(0)
    return "".join(_GB_SUFFIX.sub(r"\1g", t) for t in tokens)


def _gpu_from_entry(entry: dict) -> Gpu:
    smi = entry.get("nvidia_smi_total_mib")
    return Gpu(
        name=entry["name"],
        short_name=entry["short_name"],
        aliases=tuple(entry.get("aliases", ())),
        cuda_total_bytes=int(round(float(entry["cuda_total_gib"]) * GIB)),
        nvidia_smi_total_mib=int(smi) if smi is not None else None,
        compute_capability=(int(entry["compute_capability"][0]), int(entry["compute_capability"][1])),
        vendor=entry["vendor"],
        memory_type=entry["memory_type"],
        common=bool(entry["common"]),
        source=entry["source"],
        default_for=tuple(entry.get("default_for", ())),
        unified_memory=bool(entry.get("unified_memory", False)),
        notes=entry.get("notes", ""),
        nvidia_smi_name=entry.get("nvidia_smi_name", ""),
    )


def lookup_keys(gpu: Gpu) -> tuple[str, ...]:
    """Every normalized key that resolves to this card."""
    names = (gpu.name, gpu.short_name, *gpu.aliases, *gpu.default_for)
    return tuple(dict.fromkeys(normalize_gpu_key(n) for n in names))


class AmbiguousGpuError(UnknownGpuError):
    """A name that is several cards of different sizes (RTX 3080: 10 or 12 GB): never picked silently."""


def _shared_name_keys(name: str) -> tuple[str, ...]:
    """The keys a name nvidia-smi gives several cards answers to: "NVIDIA GeForce RTX 3080" -> rtx3080, 3080."""
    tokens = [t for t in _SEPARATORS.split(name.strip().lower()) if t]
    while len(tokens) > 1 and tokens[0] in _BRAND_WORDS:
        tokens.pop(0)
    return tuple("".join(tokens[i:]) for i in range(len(tokens)) if i == 0 or tokens[i][:1].isdigit())


@lru_cache(maxsize=1)
def _ambiguous() -> dict[str, tuple[Gpu, ...]]:
    """Keys that are several cards: a card nvidia-smi names like another (nvidia_smi_name) shares the bare name."""
    out: dict[str, tuple[Gpu, ...]] = {}
    for gpu in all_gpus():
        if gpu.nvidia_smi_name and gpu.nvidia_smi_name != gpu.name:
            cards = tuple(g for g in all_gpus() if gpu.nvidia_smi_name in (g.name, g.nvidia_smi_name))
            for key in _shared_name_keys(gpu.nvidia_smi_name):
                out[key] = cards
    return out


@lru_cache(maxsize=1)
def _catalog() -> tuple[tuple[Gpu, ...], dict[str, Gpu]]:
    raw = (files("vram_detective") / "data" / "gpus.json").read_text(encoding="utf-8")
    gpus = tuple(_gpu_from_entry(e) for e in json.loads(raw))
    index: dict[str, Gpu] = {}
    for gpu in gpus:
        for key in lookup_keys(gpu):
            other = index.setdefault(key, gpu)
            if other is not gpu:
                # A data bug: an ambiguous key must be owned by one card via default_for.
                raise ValueError(f"gpus.json: key {key!r} matches both {other.name!r} and {gpu.name!r}")
    return gpus, index


def all_gpus() -> tuple[Gpu, ...]:
    return _catalog()[0]


def common_gpus() -> tuple[Gpu, ...]:
    return tuple(g for g in all_gpus() if g.common)


def _suggestions(key: str, limit: int = 3) -> list[Gpu]:
    import difflib  # only needed on the error path; keeps import cheap

    _, index = _catalog()
    found: list[Gpu] = []
    for match in difflib.get_close_matches(key, list(index), n=20, cutoff=0.5):
        gpu = index[match]
        if gpu not in found:
            found.append(gpu)
        if len(found) == limit:
            break
    return found


def find_gpu(query: str) -> Gpu:
    """Resolve a GPU name or alias (case, spaces, dashes and underscores don't matter)."""
    key = normalize_gpu_key(query or "")
    several = _ambiguous().get(key)
    if several:
        sizes = " or ".join(f"{g.short_name} ({g.cuda_total_gib:.2f} GiB)" for g in several)
        asks = " or ".join(f'--gpu "{g.short_name}"' for g in several)
        raise AmbiguousGpuError(f"{query!r} is several cards: {sizes}; pass {asks}")
    gpu = _catalog()[1].get(key) if key else None
    if gpu is not None:
        return gpu
    near = _suggestions(key) if key else []
    if near:
        hint = ", ".join(g.short_name for g in near)
        raise UnknownGpuError(f"unknown GPU {query!r}; did you mean: {hint}? {_MEMORY_HINT}")
    raise UnknownGpuError(f"unknown GPU {query!r}; {_MEMORY_HINT}")


# Never another card's size: an unknown card's total is its own (nvidia-smi's total less the driver's share).
_MEMORY_HINT = ("(for a card not listed, pass --gpu-memory with its total as CUDA reports it: "
                "torch.cuda.mem_get_info()[1], about 0.3-0.6 GiB below nvidia-smi's total)")


def gpu_choice_note(query: str | None) -> str | None:
    """When a short name fits several cards (A100: 40 or 80 GB): which one it took and how to ask for another."""
    if not query:
        return None
    key = normalize_gpu_key(query)
    gpu = _catalog()[1].get(key)
    if gpu is None or key not in {normalize_gpu_key(name) for name in gpu.default_for}:
        return None
    others = [g for g in all_gpus() if g is not gpu and key in normalize_gpu_key(g.name + g.short_name)
              and g.cuda_total_bytes != gpu.cuda_total_bytes]
    if not others:
        others = [g for g in all_gpus() if g is not gpu and normalize_gpu_key(g.short_name).startswith(key)]
    if not others:
        return None
    names = " or ".join(f'--gpu "{g.short_name}"' for g in others[:3])
    return (f"{query!r} is several cards: took the {gpu.short_name} ({gpu.name}, {gpu.cuda_total_gib:.2f} GiB); "
            f"for another pass {names}")


def memory_note(text: str, total_bytes: int) -> str:
    """How --gpu-memory was read: 16GB is 16 x 10^9 bytes = 14.90 GiB, the unit CUDA and vLLM print."""
    return f"--gpu-memory {text} read as {total_bytes / GIB:.2f} GiB ({total_bytes:,} bytes) as CUDA reports it"


def custom_gpu(
    total_bytes: int, name: str = "custom GPU", compute_capability: tuple[int, int] = (9, 0)
) -> Gpu:
    """A GPU known only by its CUDA total (for --gpu-memory)."""
    if total_bytes <= 0:
        raise ValueError(f"GPU memory must be positive, got {total_bytes} bytes")
    return Gpu(
        name=name,
        short_name=name,
        aliases=(),
        cuda_total_bytes=int(total_bytes),
        nvidia_smi_total_mib=None,
        compute_capability=(int(compute_capability[0]), int(compute_capability[1])),
        vendor="nvidia",
        memory_type="unknown",
        common=False,
        source="user-supplied total (--gpu-memory)",
    )


_UNITS = {
    "": GIB,  # a bare number means GiB
    "b": 1,
    "k": 1 << 10, "kib": 1 << 10, "kb": 10**3,
    "m": MIB, "mib": MIB, "mb": 10**6,
    "g": GIB, "gib": GIB, "gb": 10**9,
    "t": 1 << 40, "tib": 1 << 40, "tb": 10**12,
}
_SIZE = re.compile(r"^\s*((?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*([a-zA-Z]*)\s*$")
# No GPU (nor a KV cache on one) comes near a pebibyte; a larger size is a typo, and bounding it keeps every
# figure derived from it a finite integer.
MAX_MEMORY_BYTES = 1 << 50
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")


def parse_memory_size(text: str) -> int:
    """Bytes from "23.65GiB", "24GB" (10^9), "24G" (GiB), "24576MiB", "80 GiB", or a bare number (GiB)."""
    raw = str(text)
    match = _SIZE.match(_THOUSANDS.sub("", raw))
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _UNITS:
        raise ValueError(
            f"invalid memory size {raw!r}: expected a number with an optional unit, e.g. 23.65GiB, 24GB, 24576MiB"
        )
    result = float(match.group(1)) * _UNITS[unit]
    if result <= 0:
        raise ValueError(f"invalid memory size {raw!r}: must be a positive amount")
    if not math.isfinite(result) or result > MAX_MEMORY_BYTES:
        raise ValueError(f"invalid memory size {raw!r}: more than any GPU holds (at most {MAX_MEMORY_BYTES >> 40} TiB "
                         "here)")
    return int(round(result))
