"""The GPUs of this machine (`--gpu auto`): what each reports, and the free memory an engine will find there.

Sources, first found wins: NVML through nvidia-ml-py (the `[nvml]` extra), `nvidia-smi --query-gpu=...`,
`rocm-smi --showmeminfo vram --json` (AMD), and on Apple Silicon `sysctl hw.memsize` with the Metal
working-set limit. Probing runs programs with a short timeout and never raises on a machine without them.

Memory other processes already hold counts as the engines count it: vLLM and SGLang read
torch.cuda.mem_get_info() when they start (vLLM: MemorySnapshot in vllm/v1/worker/gpu_worker.py; SGLang:
get_available_gpu_memory before the weights load), so what nvidia-smi shows as used is gone before the load.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, replace

from .hardware import GIB, MIB, Gpu, all_gpus, custom_gpu, normalize_gpu_key

__all__ = ["LocalGpu", "probe", "parse_nvidia_smi_csv", "parse_rocm_smi_json", "catalog_gpu", "machine_gpus"]

NVIDIA_SMI_QUERY = ("--query-gpu=name,memory.total,memory.used,memory.free", "--format=csv,noheader,nounits")
PROBE_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class LocalGpu:
    """One device as its vendor tool printed it (bytes)."""

    index: int
    name: str
    total_bytes: int  # nvidia-smi / NVML / rocm-smi total (nvidia-smi's "Total", not CUDA's)
    used_bytes: int  # held by other processes (and the driver) before the engine starts
    free_bytes: int
    vendor: str  # "nvidia", "amd", "apple"
    source: str  # the program (or library) that reported it


class ProbeError(ValueError):
    """A vendor tool printed something this reader does not understand (one line)."""


QUERY_FIELDS = ("name", "memory.total", "memory.used", "memory.free")


def parse_nvidia_smi_csv(text: str) -> list[LocalGpu]:
    """`nvidia-smi --query-gpu=name,memory.total,memory.used,memory.free --format=csv,noheader,nounits`: one
    line per GPU, fields joined by ", ", memory in MiB, e.g. `NVIDIA GeForce RTX 4090, 24564, 1229, 22969`
    (nvidia-smi --help-query-gpu). With a header line (`--format=csv`) the fields are read by name and units
    ("45460 MiB") are dropped, as in the capture in groundtruth/dev.jsonl: `index, name, compute_cap,
    memory.free, memory.used, memory.total, driver_version` / `0, NVIDIA L40S, 8.9, 45460 MiB, 0 MiB, 46068 MiB,
    595.91.07`. Recent drivers leave the driver's reserve out of both used and free (45460 + 0 < 46068 there).
    A field the driver cannot read prints `[N/A]` (GH200/GB10 unified memory) or `[Not Supported]`."""
    lines = [raw.strip() for raw in text.splitlines() if raw.strip()]
    fields = QUERY_FIELDS
    if lines and "memory.total" in lines[0]:
        fields = tuple(part.strip().split(" [")[0] for part in lines[0].split(","))
        lines = lines[1:]
    if not set(QUERY_FIELDS) <= set(fields):
        raise ProbeError(f"nvidia-smi printed no {', '.join(sorted(set(QUERY_FIELDS) - set(fields)))} column")
    gpus = []
    for line in lines:
        parts = [part.strip() for part in line.split(",")]
        if len(parts) != len(fields):
            raise ProbeError(f"nvidia-smi printed an unexpected line: {line[:80]!r}")
        row = dict(zip(fields, parts))
        total, used, free = (_mib(row[key]) for key in QUERY_FIELDS[1:])
        if total is None:
            raise ProbeError(f"nvidia-smi reports no memory total for {row['name']!r} ({row['memory.total']}): "
                             "pass --gpu or --gpu-memory")
        used = used if used is not None else total - (free if free is not None else total)
        free = free if free is not None else total - used
        index = int(row["index"]) if row.get("index", "").isdigit() else len(gpus)
        gpus.append(LocalGpu(index, row["name"], total, used, free, "nvidia", "nvidia-smi"))
    return gpus


def _mib(text: str) -> int | None:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(?:\s*MiB)?", text)
    return int(float(match.group(1)) * MIB) if match else None


def parse_rocm_smi_json(meminfo: str, names: str | None = None) -> list[LocalGpu]:
    """`rocm-smi --showmeminfo vram --json`: {"card0": {"VRAM Total Memory (B)": "...", "VRAM Total Used
    Memory (B)": "..."}} in bytes as strings (rocm_smi.py 5.2.3, Debian's rocm-smi: showMemInfo prints
    '%s Total Memory (B)' and '%s Total Used Memory (B)' with the type upper-cased; with --json, printLog's
    "name: value" lands in JSON_DATA['card' + N][name] = value.strip(), dumped by json.dumps);
    `--showproductname --json` names each card ('Card series', 'Card model', 'Card vendor', 'Card SKU';
    read case-insensitively)."""
    try:
        memory = json.loads(meminfo)
        labels = json.loads(names) if names else {}
    except json.JSONDecodeError as error:
        raise ProbeError(f"rocm-smi printed no JSON ({error.msg})") from None
    gpus = []
    for card in sorted((key for key in memory if key.startswith("card")), key=lambda key: int(key[4:] or 0)):
        fields = {key.lower(): value for key, value in memory[card].items()}
        total = int(fields.get("vram total memory (b)", 0))
        used = int(fields.get("vram total used memory (b)", 0))
        if total <= 0:
            raise ProbeError(f"rocm-smi reports no VRAM total for {card}")
        label = {key.lower(): value for key, value in labels.get(card, {}).items()}
        name = label.get("card series") or label.get("card model") or card
        gpus.append(LocalGpu(len(gpus), str(name), total, used, total - used, "amd", "rocm-smi"))
    return gpus


def apple_unified_memory(memsize: int, wired_limit_mb: int) -> LocalGpu:
    """Apple Silicon: llama.cpp's Metal backend offers the device's recommendedMaxWorkingSetSize
    (ggml-metal's device memory query). `sysctl iogpu.wired_limit_mb`, when set (not 0), is that limit;
    otherwise macOS's default, which this tool takes as 2/3 of RAM up to 36 GiB and 3/4 above (an estimate:
    Metal reports the exact figure, and Python has no way to ask it without PyObjC)."""
    if wired_limit_mb > 0:
        limit = wired_limit_mb * MIB
    else:
        limit = memsize * 2 // 3 if memsize <= 36 * GIB else memsize * 3 // 4
    return LocalGpu(0, "Apple Silicon (unified memory)", limit, 0, limit, "apple", "sysctl")


def _run(program: str, *args: str) -> str | None:
    path = shutil.which(program)
    if path is None:
        return None
    try:
        done = subprocess.run([path, *args], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def _nvml() -> list[LocalGpu] | None:
    try:
        import pynvml  # nvidia-ml-py, the [nvml] extra
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no driver: fall back to the programs
        return None
    try:
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = pynvml.nvmlDeviceGetName(handle)
            info = _memory_info(pynvml, handle)
            gpus.append(LocalGpu(index, name.decode() if isinstance(name, bytes) else str(name), int(info.total),
                                 int(info.used), int(info.free), "nvidia", "NVML"))
        return gpus
    finally:
        pynvml.nvmlShutdown()


def _memory_info(pynvml, handle):
    """NVML's v2 memory info (used without the driver's reserve, as nvidia-smi prints it: pynvml
    c_nvmlMemory_v2_t total / reserved / free / used); v1 (total / free / used with the reserve) on old drivers."""
    version = getattr(pynvml, "nvmlMemory_v2", None)
    if version is not None:
        try:
            return pynvml.nvmlDeviceGetMemoryInfo(handle, version=version)
        except Exception:  # noqa: BLE001 - NVMLError_FunctionNotFound on drivers before v2
            pass
    return pynvml.nvmlDeviceGetMemoryInfo(handle)


def probe() -> list[LocalGpu]:
    """This machine's GPUs (empty when there are none, or no vendor tool is installed)."""
    found = _nvml()
    if found:
        return found
    text = _run("nvidia-smi", *NVIDIA_SMI_QUERY)
    if text and text.strip():
        return parse_nvidia_smi_csv(text)
    meminfo = _run("rocm-smi", "--showmeminfo", "vram", "--json")
    if meminfo and meminfo.strip():
        return parse_rocm_smi_json(meminfo, _run("rocm-smi", "--showproductname", "--json"))
    if sys.platform == "darwin":
        memsize = _run("sysctl", "-n", "hw.memsize")
        if memsize and memsize.strip().isdigit():
            wired = (_run("sysctl", "-n", "iogpu.wired_limit_mb") or "0").strip()
            return [apple_unified_memory(int(memsize), int(wired) if wired.isdigit() else 0)]
    return []


def catalog_gpu(device: LocalGpu) -> tuple[Gpu, str]:
    """The catalog card this device is (its name, and its total where one name is several cards: the RTX 3080
    10 GB and 12 GB print the same name), carrying the memory other processes hold; with a note."""
    key = normalize_gpu_key(device.name)
    named = [gpu for gpu in all_gpus()
             if key in {normalize_gpu_key(n) for n in (gpu.name, gpu.nvidia_smi_name or gpu.name, gpu.short_name,
                                                       *gpu.aliases)}]
    total_mib = device.total_bytes / MIB
    sized = [gpu for gpu in named if gpu.nvidia_smi_total_mib is None or abs(gpu.nvidia_smi_total_mib - total_mib) < 256]
    if device.vendor == "amd" and not sized:
        sized = [gpu for gpu in named if abs(gpu.cuda_total_bytes - device.total_bytes) < GIB // 2]
    if sized:
        gpu = min(sized, key=lambda g: abs((g.nvidia_smi_total_mib or total_mib) - total_mib))
        note = f"GPU {device.index}: {device.name} ({device.source}) is the catalog's {gpu.short_name}"
    else:
        # Not in the catalog: nvidia-smi's total less the driver's share, which CUDA does not report as total
        reserve = _typical_reserve() if device.vendor == "nvidia" else 0
        gpu = custom_gpu(device.total_bytes - reserve, name=device.name)
        if device.vendor != "nvidia":  # ROCm's nominal capability / Apple's unified memory, as the catalog has them
            gpu = replace(gpu, vendor=device.vendor, unified_memory=device.vendor == "apple",
                          compute_capability=(9, 0) if device.vendor == "amd" else (0, 0))
        note = (f"GPU {device.index}: {device.name} is not in the catalog: took {device.source}'s total "
                f"{device.total_bytes / GIB:.2f} GiB less {reserve / GIB:.2f} GiB the driver keeps")
    return replace(gpu, in_use_bytes=min(device.used_bytes, gpu.cuda_total_bytes)), note


def _typical_reserve() -> int:
    """The median gap between nvidia-smi's total and CUDA's total over the catalog's cards that have both."""
    gaps = sorted(g.nvidia_smi_total_mib * MIB - g.cuda_total_bytes for g in all_gpus()
                  if g.vendor == "nvidia" and g.nvidia_smi_total_mib and not g.unified_memory)
    return gaps[len(gaps) // 2]


def machine_gpus(devices: list[LocalGpu] | None = None) -> list[tuple[LocalGpu, Gpu, str]]:
    """Each local device with the card it is and a note (probing when `devices` is None)."""
    devices = probe() if devices is None else devices
    return [(device, *catalog_gpu(device)) for device in devices]


def disabled() -> bool:
    """VRAM_DETECTIVE_NO_PROBE=1: never read the local GPUs (explain without --gpu prints the common table)."""
    return os.environ.get("VRAM_DETECTIVE_NO_PROBE", "") not in ("", "0")


def this_machine_gpu() -> Gpu:
    """`--gpu auto` where one card is asked for (whatif, fit, simulate, compare, the library): the first local GPU
    as the engine will find it; ValueError (bad input) on a machine without one."""
    found = machine_gpus()
    if not found:
        raise ValueError("--gpu auto found no GPU here (no NVML, nvidia-smi, rocm-smi or Apple Silicon): pass --gpu NAME")
    return found[0][1]
