"""Read llama.cpp / Ollama log lines into the SCHEMA.md llama.cpp `observed` keys (sizes in MiB as printed).

Formats by era (releases.py log.* rows): llm_load_tensors / load_tensors buffer lines ("CUDA0 buffer size" in
mid-2024, "CUDA0 model buffer size" after); llama_kv_cache_init / llama_kv_cache_unified / llama_kv_cache
(+ the iSWA pair and llama_memory_recurrent "RS buffer"); llama_new_context_with_model / llama_context /
sched_reserve compute and output buffers; the 2026 automatic-fit lines; Ollama's memory.go estimate line.
Line prefixes (timestamps, journald, "[Info] - ") are ignored: patterns search inside the line.
"""
from __future__ import annotations

import math
import re

_NUM = r"(-?\d+(?:\.\d+)?)"
_DEVICE = re.compile(r"using device (CUDA\d+) \(.*\) - (\d+) MiB free")
_OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
_BUFFER = re.compile(r"(\w+)\s+(model |KV |RS |compute |output |LoRA )?buffer size =\s*" + _NUM + " MiB")
_KV_SELF = re.compile(r"KV self size\s*=\s*" + _NUM + r" MiB, (?:K \(\w+\):\s*" + _NUM + r" MiB, V \(\w+\):\s*"
                      + _NUM + r" MiB|c\^KV \(\w+\):\s*" + _NUM + " MiB)")
_KV_SIZE = re.compile(r"(llama_kv_cache\w*|llama_memory_recurrent): size =\s*" + _NUM
                      + r" MiB \(\s*(\d+) cells,\s*(\d+) layers,\s*[\d/ ]+seqs\)(?:, K \(\w+\):\s*" + _NUM
                      + r" MiB, V \(\w+\):\s*" + _NUM + " MiB)?")
_RS_PARTS = re.compile(r"R \(\w+\):\s*" + _NUM + r" MiB, S \(\w+\):\s*" + _NUM + " MiB")
_CLIP_SIZE = re.compile(r"clip_model_loader: model size:\s*" + _NUM + " MiB")
_KV_INIT = re.compile(r"kv_size = (\d+),.*n_layer = (\d+)")
_ISWA = re.compile(r"creating\s+(non-SWA|SWA) KV cache")
_GRAPH = re.compile(r"graph (nodes|splits)\s*=\s*(\d+)(?: \(with bs=(\d+)\))?")
_FILE = re.compile(r"file size\s*=\s*" + _NUM + " GiB")
_MODEL_SIZE = re.compile(r"model size\s*=\s*" + _NUM + " GiB")
_FIT_PROJ = re.compile(r"projected to use (\d+) MiB of device memory vs\. (\d+) MiB of free")
_BREAKDOWN = re.compile(r"\|\s+- (CUDA\d+|Host)\b[^|]*\|\s*(?:(\d+) = (\d+) \+ )?\(?\s*(\d+) =\s*(\d+) \+\s*(\d+) \+\s*(\d+)")
_FIT_DEV = re.compile(r"(\d+) layers \((\d+) overflowing\),\s*(\d+) MiB used,\s*(\d+) MiB free")
_FA_AUTO = re.compile(r"Flash Attention was auto, set to (\w+)")
_PROMPT_CACHE = re.compile(r"prompt cache is enabled, size limit: (\d+) MiB")
_OLLAMA = re.compile(r'memory\.([\w.]+)="\[?' + _NUM + r" (GiB|MiB)\]?")
_OLLAMA_AVAIL = re.compile(r"\bavailable=(\d{6,})\b")
_DEVICE_INFO = re.compile(r"- (CUDA\d+)\s*: .*\((\d+) MiB, (\d+) MiB free\)")


def _key(device: str) -> str:
    return device.lower()


def _num(text: str) -> float | int:
    value = float(text)
    return int(value) if value.is_integer() and "." not in text else value


def parse(log: str) -> dict:
    """Every figure the lines carry, keyed as SCHEMA.md's llama.cpp `observed`. A log holding several loads
    (a context sweep) is read for the first load's buffers."""
    out: dict = {}
    devices: list[tuple[str, int]] = []
    iswa = ""
    for line in log.splitlines():
        if m := _DEVICE.search(line):
            devices.append((m.group(1), int(m.group(2))))
        if m := _DEVICE_INFO.search(line):  # 2026 fork/common 'device_info' list: (total MiB, free MiB)
            out[f"device_total_mib_{_key(m.group(1))}"] = int(m.group(2))
            devices.append((m.group(1), int(m.group(3))))
        if m := _OFFLOADED.search(line):
            out["offloaded_layers"], out["total_layers"] = int(m.group(1)), int(m.group(2))
        if m := _ISWA.search(line):
            iswa = "kv_nonswa" if m.group(1) == "non-SWA" else "kv_swa"
        if iswa == "kv_swa" and (m := _BUFFER.search(line)) and (m.group(2) or "").strip() == "KV":
            _swa_kv_buffer(m, out)
            continue
        _buffer(line, out)
        _kv_lines(line, out, iswa)
        _misc(line, out)
    for device, free in devices:
        out.setdefault("device_free_mib", free)
        if len({d for d, _ in devices}) > 1:
            out[f"device_free_mib_{_key(device)}"] = free
    return {key: value for key, value in out.items() if _a_size(value)}


_MOST_MIB = 1 << 40  # a figure past this is no buffer size (a 400-digit number reads as infinity)


def _a_size(value) -> bool:
    """Is a printed figure a number a buffer could be (finite, not absurd)? Others are not read."""
    return not isinstance(value, (int, float)) or isinstance(value, bool) or (
        abs(value) < _MOST_MIB and math.isfinite(value))  # (a huge int would not convert to float)


def _swa_kv_buffer(m: re.Match, out: dict) -> None:
    """iSWA (Gemma 2/3, gpt-oss): the SWA cache's KV buffer line follows the full cache's on the same device;
    the device's KV figure is both (kept apart too as <device>_kv_swa_buffer_mib). Once per device: a
    sweep's later loads are not added."""
    device, value = _key(m.group(1)), float(m.group(3))
    if f"{device}_kv_swa_buffer_mib" in out:
        return
    out[f"{device}_kv_swa_buffer_mib"] = value
    key = f"{device}_kv_buffer_mib"
    out[key] = round(out.get(key, 0.0) + value, 2)


def _buffer(line: str, out: dict) -> None:
    m = _BUFFER.search(line)
    if m and "alloc_compute_meta" in line:  # clip.cpp: the vision projector's graph
        out.setdefault(f"mmproj_{_key(m.group(1))}_compute_buffer_mib", float(m.group(3)))
        return
    if m2 := _CLIP_SIZE.search(line):
        out.setdefault("mmproj_model_size_mib", float(m2.group(1)))
    if not m or "ctx size" in line:
        return
    kind = (m.group(2) or "").strip().lower()
    if not kind:  # mid-2024 'llm_load_tensors: CUDA0 buffer size' (the model buffer)
        kind = "model"
    out.setdefault(f"{_key(m.group(1))}_{kind}_buffer_mib", float(m.group(3)))


def _kv_lines(line: str, out: dict, iswa: str) -> None:
    if m := _KV_SELF.search(line):
        out["kv_size_mib"] = float(m.group(1))
        if m.group(4):
            out["ckv_mib"] = float(m.group(4))
        else:
            out["k_mib"], out["v_mib"] = float(m.group(2)), float(m.group(3))
    if m := _KV_SIZE.search(line):
        if m.group(1) == "llama_memory_recurrent":
            out["rs_size_mib"], out["rs_cells"] = float(m.group(2)), int(m.group(3))
            if rs := _RS_PARTS.search(line):
                out["r_mib"], out["s_mib"] = float(rs.group(1)), float(rs.group(2))
            return
        prefix = iswa or "kv"
        size_key = "kv_size_mib" if prefix == "kv" else f"{prefix}_size_mib"
        out[size_key], out[f"{prefix}_cells"], out[f"{prefix}_layers"] = (
            float(m.group(2)), int(m.group(3)), int(m.group(4)))
        if m.group(5):
            out[f"{'' if prefix == 'kv' else prefix + '_'}k_mib"] = float(m.group(5))
            out[f"{'' if prefix == 'kv' else prefix + '_'}v_mib"] = float(m.group(6))
    if m := _KV_INIT.search(line):
        out["kv_cells"], out["kv_layers"] = int(m.group(1)), int(m.group(2))


def _misc(line: str, out: dict) -> None:
    if m := _GRAPH.search(line):
        key = f"graph_{m.group(1)}" + (f"_bs{m.group(3)}" if m.group(3) else "")
        out[key] = int(m.group(2))
    for pattern, key in ((_FILE, "file_size_gib"), (_MODEL_SIZE, "model_size_gib")):
        if m := pattern.search(line):
            out[key] = float(m.group(1))
    if m := _FIT_PROJ.search(line):
        out["fit_projected_device_mib"], out["fit_free_device_mib"] = int(m.group(1)), int(m.group(2))
    if m := _BREAKDOWN.search(line):
        _breakdown(m, out)
    if m := _FIT_DEV.search(line):
        out["fit_layers_on_gpu"], out["fit_overflowing_layers"] = int(m.group(1)), int(m.group(2))
        out["fit_free_after_mib"] = int(m.group(4))
    if m := _FA_AUTO.search(line):
        out["flash_attn_resolved"] = m.group(1)
    if m := _PROMPT_CACHE.search(line):
        out["prompt_cache_limit_mib"] = int(m.group(1))
    _ollama(line, out)


def _breakdown(m: re.Match, out: dict) -> None:
    """common_memory_breakdown_print: total = free + (self = model + context + compute) + unaccounted."""
    if m.group(1) == "Host":
        out["host_self_mib"], out["host_model_mib"] = int(m.group(4)), int(m.group(5))
        out["host_compute_mib"] = int(m.group(7))
        return
    dev = _key(m.group(1))
    if m.group(2):
        out.setdefault("device_total_mib", int(m.group(2)))
        out[f"device_total_mib_{dev}"] = int(m.group(2))
        out.setdefault("device_free_mib", int(m.group(3)))
    for i, part in enumerate(("self", "model", "context", "compute")):
        out.setdefault(f"fit_{part}_mib", int(m.group(4 + i)))
        out[f"fit_breakdown_{dev}_{part}_mib"] = int(m.group(4 + i))


def _ollama(line: str, out: dict) -> None:
    if m := _OLLAMA_AVAIL.search(line):
        out.setdefault("ollama_available_bytes", int(m.group(1)))
    if "memory." not in line:
        return
    for name, value, unit in _OLLAMA.findall(line):
        if name == "available":
            out["ollama_memory_available_gib" if unit == "GiB" else "ollama_memory_available_mib"] = float(value)
            continue
        out[f"ollama_{name.replace('.', '_')}_{unit.lower()}"] = float(value)


# --- the settings and build a log shows (llama_context / llama_new_context_with_model lines, the KV init line,
# print_info's file type, "build: N (commit)") in llama.cpp's setting names
_BUILD = re.compile(r"^\s*(?:[\w|:. -]*\|\s*)?build: (\d+) \(")
_CTX_LINE = re.compile(r"(?:llama_context|llama_new_context_with_model):\s+(n_ctx|n_batch|n_ubatch|n_seq_max|flash_attn)"
                       r"\s*=\s*(\w+)")
_KV_TYPES = re.compile(r"type_k = '(\w+)', type_v = '(\w+)'")
_KV_TYPES_SIZE = re.compile(r"K \((\w+)\):.*V \((\w+)\):")
_FTYPE = re.compile(r"(?:file type|model ftype)\s*=\s*(\w+)(?: - (Small|Medium|Large))?")
_FLASH_WORDS = {"1": "on", "0": "off", "enabled": "on", "disabled": "off", "auto": "auto", "true": "on", "false": "off"}


def infer_build(log: str) -> int | None:
    """The build number llama.cpp prints at startup ("build: 5274 (d541533a) with ..."); None when absent."""
    for line in log.splitlines():
        if m := _BUILD.search(line):
            return int(m.group(1))
    return None


def log_settings(log: str) -> dict:
    """The settings the context and KV lines show, in llama.cpp's names (n_ctx, n_batch, n_ubatch, n_parallel,
    flash_attn, type_k, type_v, n_gpu_layers from "offloaded N/M", gguf_type from the file type)."""
    out: dict = {}
    for line in log.splitlines():
        if m := _CTX_LINE.search(line):
            name, value = m.groups()
            if name == "flash_attn":
                out.setdefault("flash_attn", _FLASH_WORDS.get(value.lower(), value.lower()))
            else:
                out.setdefault("n_parallel" if name == "n_seq_max" else name, int(value))
        if (m := _KV_TYPES.search(line)) or (m := _KV_TYPES_SIZE.search(line)):
            out.setdefault("type_k", m.group(1).lower())
            out.setdefault("type_v", m.group(2).lower())
        if m := _OFFLOADED.search(line):
            out.setdefault("n_gpu_layers", int(m.group(1)))
        if m := _FTYPE.search(line):
            mix = m.group(1).upper() + ("_" + m.group(2)[0] if m.group(2) else "")
            out.setdefault("gguf_type", mix)
    if "n_gpu_layers" not in out and _cpu_only(log):
        out.update(n_gpu_layers=0, num_gpus=0)
    free = {device: mib for device, mib in ((m.group(1), int(m.group(2))) for m in map(_DEVICE.search, log.splitlines())
                                             if m)}
    if len(free) > 1:  # several devices: layers split by free memory unless -ts was given (not in the log)
        out["num_gpus"], out["device_free_mib"] = len(free), tuple(free.values())
    return out


def _cpu_only(log: str) -> bool:
    """A CPU-only build's load: llama.cpp prints "offloaded N/M layers" only when the build supports GPU
    offload (llama-model.cpp load_tensors: llama_supports_gpu_offload(), 0.3.16 and 0.3.36 trees), so buffers
    printed without that line and without a GPU buffer mean every layer on the CPU (not full offload)."""
    buffers = [m.group(1) for m in map(_BUFFER.search, log.splitlines()) if m]
    return bool(buffers) and all(not name.startswith(("CUDA", "ROCm", "Metal", "Vulkan", "SYCL")) for name in buffers)
