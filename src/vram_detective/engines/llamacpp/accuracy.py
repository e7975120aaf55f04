"""llama.cpp / Ollama figures for a ground-truth case (groundtruth/SCHEMA.md's llama.cpp `observed` keys), for
scoring.py and benchmarks/llamacpp_accuracy.py: a case planned from its own fields, and the rows comparing each
buffer the log prints with the plan's.

A case is planned the way `explain` plans the same flags: the program (llama.cpp, or Ollama when the case runs
Ollama's own runner), the build (`engine_version`, else the `build: N` line; an Ollama release runs the build it
vendors), the settings in llama.cpp's names (the case's `settings`, then what the log's context and KV lines show),
the GGUF mix the quantizer writes for the case's `quant` (a file type llama.cpp's quantizer has: an Unsloth UD or
QAT mix has no stock per-tensor types, so its model buffers are not compared), and the free memory the log printed
per device. What a case lacks for a plan is its skip reason. The model's shape is resolved by the caller (the
case's `model_config`, else the model sources `explain` reads).

Per case: model buffer per device, KV buffer per device (exact), compute buffer per device, VRAM per device
(llama.cpp's own buffers on that GPU: model + KV + compute, the figures a log prints) and host RAM (host model
buffer + CPU KV + CUDA_Host compute + output buffer), where the log prints every part.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ...hardware import custom_gpu

MIB = 1024 * 1024
# every plan runs on a GPU large enough that no layer placement depends on its size: the log's own free memory
# per device (device_free_mib) is what sets a split or Ollama's layer count
PLAN_GPU_BYTES = 48 * 2**30

_HOST_KEYS = ("cpu_mapped_model_buffer_mib", "cpu_repack_model_buffer_mib", "cpu_model_buffer_mib",
              "cuda_host_model_buffer_mib", "cpu_kv_buffer_mib", "cuda_host_compute_buffer_mib", "cpu_compute_buffer_mib",
              "cuda_host_output_buffer_mib", "cpu_output_buffer_mib")
# settings a case records in llama.cpp's names that the plan takes as they are
_PASSED = ("n_ctx", "n_batch", "n_ubatch", "type_k", "type_v", "kv_unified", "split_mode", "tensor_split", "mmap",
           "override_tensor", "n_cpu_moe", "main_gpu", "gguf_mla_split", "embeddings", "swa_full", "repack",
           "gguf_order")
# a fork's own flags: its memory is not llama.cpp's
_FORK_KEYS = ("fork",)


@dataclass(frozen=True)
class CasePlan:
    """What a case is planned with: program, release, settings in that program's names, figure kinds left out."""
    engine: str  # "llamacpp" or "ollama"
    version: str  # "b5274" / "0.3.8"
    version_basis: str
    settings: dict
    not_compared: tuple[str, ...] = ()
    not_compared_why: str = ""


def _count(value) -> int | str | None:
    """-ngl as a case records it: 65, -1, "all (33/33)", "ollama auto (26)", "default (all, 49/49)", "all"."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    text = str(value)
    found = re.search(r"\((?:[^()]*\D)?(\d+)(?:/\d+)?\)", text) or re.fullmatch(r"\s*(-?\d+)\s*", text)
    if found:
        return int(found.group(1))
    return "all" if text.strip().lower().startswith("all") else None


def _flash(value) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "on" if value else "off"
    word = str(value).split()[0].lower()
    return {"true": "on", "enabled": "on", "on": "on", "false": "off", "disabled": "off", "off": "off",
            "auto": "auto"}.get(word)


def stock_mix(quant) -> str | None:
    """The llama.cpp quantizer mix a case's `quant` names (Q4_K_M, IQ4_XS, Q8_0); None for a mix it does not
    write (Unsloth UD-*, QAT, a description)."""
    from .quant_mix import BASE_TYPE

    name = str(quant or "").strip().upper()
    return name if name in BASE_TYPE else None


def _devices_free(observed: dict) -> tuple[int, ...]:
    """Free MiB per device as the log printed it (device_free_mib, device_free_mib_cuda<N>)."""
    free = {}
    for key, value in observed.items():
        found = re.fullmatch(r"device_free_mib(?:_cuda(\d+))?", key)
        if found and isinstance(value, (int, float)):
            free[int(found.group(1) or 0)] = int(value)
    return tuple(free[i] for i in sorted(free))


def _ollama_release(case: dict) -> str | None:
    """'ollama 0.3.8' in a llama.cpp case's engine_version; a case of the Ollama engine states its release bare."""
    text = f"{case.get('engine_version') or ''}"
    if str(case.get("engine") or "").lower() == "ollama":
        text = f"ollama {text}"
    found = re.search(r"ollama\s*~?\s*v?(\d+\.\d+(?:\.\d+)?)", text, re.I)
    return found.group(1) if found else None


def _is_ollama(case: dict) -> bool:
    settings = case.get("settings") or {}
    words = " ".join(str(settings.get(k) or "") for k in ("wrapper", "frontend")) + " " + str(case.get("engine_version") or "")
    return "ollama" in words.lower() or str(case.get("engine") or "").lower() == "ollama"


def _build(case: dict) -> tuple[str | None, str]:
    """The llama.cpp build: the case's `engine_version` (bNNNN), else the log's `build: N` line."""
    from .log_parser import infer_build

    stated = re.fullmatch(r"\s*b?(\d{3,5})\s*", str(case.get("engine_version") or ""))
    if stated:
        return f"b{stated.group(1)}", case.get("engine_version_basis") or "stated"
    build = infer_build(case.get("log", ""))
    if build is not None:
        return f"b{build}", "printed by the log (build: N)"
    return None, ""


def _llamacpp_settings(case: dict) -> dict:
    """The case's settings in llama.cpp's names over what the log's lines show."""
    from .log_parser import log_settings

    settings = case.get("settings") or {}
    out = dict(log_settings(case.get("log", "")))
    out.pop("gguf_type", None)  # the file type line names the base type only (Q4_K - Medium): the quant names the mix
    out.update({key: settings[key] for key in _PASSED if settings.get(key) is not None})
    if isinstance(out.get("override_tensor"), str):
        out["override_tensor"] = (out["override_tensor"],)
    if isinstance(out.get("tensor_split"), str):
        out["tensor_split"] = tuple(float(x) for x in re.split(r"[,/]", out["tensor_split"]) if x.strip())
    for key in ("n_parallel", "n_seq_max"):
        if isinstance(settings.get(key), int):
            out["n_parallel"] = settings[key]
    ngl = _count(settings.get("n_gpu_layers"))
    if ngl is not None:
        out["n_gpu_layers"] = ngl
    flash = _flash(settings.get("flash_attn"))
    if flash is not None:
        out["flash_attn"] = flash
    free = _devices_free(case.get("observed") or {})
    if case.get("num_gpus"):
        out["num_gpus"] = int(case["num_gpus"])
    if len(free) > 1 and len(free) == out.get("num_gpus", len(free)):
        out["device_free_mib"], out["num_gpus"] = free, len(free)
    return out


def _ollama_settings(case: dict) -> dict:
    """An Ollama runner case in Ollama's names: its knobs from the log, free memory and OS from the case."""
    from ..ollama.log_parser import log_settings

    settings, observed = case.get("settings") or {}, case.get("observed") or {}
    out = dict(log_settings(case.get("log", "")))
    out.pop("gguf_type", None)
    free = _devices_free(observed)
    if not free and observed.get("ollama_available_bytes"):
        free = (int(observed["ollama_available_bytes"]) // MIB,)
    if free:
        out["gpu_free_mib"] = list(free)
    flash = _flash(settings.get("flash_attn"))
    if flash is not None and "flash_attention" not in out:
        out["flash_attention"] = flash == "on"
    if flash == "on" and settings.get("type_k") and settings.get("type_k") == settings.get("type_v") \
            and str(settings["type_k"]).lower() != "f16":
        out["kv_cache_type"] = str(settings["type_k"]).lower()
    ngl = _count(settings.get("n_gpu_layers"))
    if isinstance(ngl, int):  # the layer count Ollama chose, as the log printed it: the buffers follow from it
        out["num_gpu"] = ngl
    if "windows" in str(settings.get("frontend") or "").lower():
        out["os"] = "windows"
    return out


def plan_case(case: dict, file_at_hand: bool = False) -> CasePlan | str:
    """The plan of one llama.cpp / Ollama case from its own fields, or why it cannot be planned. With the GGUF file
    at hand (`file_at_hand`) its header gives every tensor's type: no quantizer mix is needed."""
    from .. import get_engine

    settings = case.get("settings") or {}
    fork = next((str(settings[key]) for key in _FORK_KEYS if settings.get(key)), None)
    if fork:
        return f"{fork}: a fork's memory is not llama.cpp's"
    supplied = case.get("plan_settings") or {}
    mix = stock_mix(supplied.get("gguf_type") or settings.get("quant"))
    not_compared, why = (), ""
    if file_at_hand:
        mix = mix or "Q4_K_M"  # unused: the header's tensor types are the weights
    elif mix is None:
        if not settings.get("quant"):
            return "quantization not stated (no `quant`)"
        # the buffers that do not hold weights are still the build's arithmetic
        mix, not_compared = "Q4_K_M", ("model", "vram", "host")
        why = f"{settings['quant']}: not a mix llama.cpp's quantizer writes, so the model buffers are not derivable"
    ollama = _ollama_release(case) if _is_ollama(case) else None
    build, basis = _build(case)
    if ollama is not None:
        vendored = get_engine("ollama").releases.rule_at(get_engine("ollama").releases.resolve(ollama), "llamacpp_build")
        if build is None and _spawns_llama_server(ollama):
            # a release that spawns its bundled llama-server runs llama.cpp with the settings its log prints
            build, basis = f"b{vendored}", f"the build Ollama {ollama} vendors"
            ollama = None
    if ollama is not None:
        plan = {**_ollama_settings(case), "gguf_type": mix, **supplied}
        return CasePlan("ollama", ollama, case.get("engine_version_basis") or "stated", plan, not_compared, why)
    if build is None:
        return "llama.cpp build not stated and not printed by the log"
    plan = {**_llamacpp_settings(case), "gguf_type": mix, **supplied}
    return CasePlan("llamacpp", build, basis, plan, not_compared, why)


def _spawns_llama_server(release: str) -> bool:
    from .. import get_engine

    releases = get_engine("ollama").releases
    return releases.rule_at(releases.resolve(release), "runner") == "llama-server"


def predict(spec, plan: CasePlan, gguf_checkpoint=None) -> dict:
    """The figures the plan prints (SCHEMA.md keys, MiB), plus vram_/host_ totals; `explain`'s path (api.explain_spec)."""
    from ...api import explain_spec

    b = explain_spec(spec, custom_gpu(PLAN_GPU_BYTES), plan.engine, plan.version, plan.settings, gguf_checkpoint)
    out = {f.key: f.value for f in b.engine_figures if f.schema}
    out["vram_with_context_cuda0_mib"] = b.figure("vram_cuda0_bytes", 0) / MIB
    return out


def _devices(figures: dict) -> list[str]:
    return sorted({m.group(1) for k in figures if (m := re.match(r"(cuda\d+)_model_buffer_mib$", k))})


def compare(case: dict, spec, plan: CasePlan, gguf_checkpoint=None) -> list[tuple[str, str, float, float]]:
    """(kind, figure, predicted, observed) for each figure the log prints and the plan has (MiB)."""
    obs, pred = case["observed"], predict(spec, plan, gguf_checkpoint)
    rows = []
    for key, value in obs.items():
        m = re.match(r"(cuda\d+|cpu_mapped|cpu_repack|cpu|cuda_host)_(model|kv|rs|compute|output)_buffer_mib$", key)
        if m and key in pred:
            rows.append((m.group(2), key, pred[key], value))
    for dev in _devices(obs):
        parts = [f"{dev}_{k}_buffer_mib" for k in ("model", "kv", "compute")]
        if all(p in obs for p in parts):
            rows.append(("vram", f"{dev} VRAM", sum(pred.get(p, 0) for p in parts), sum(obs[p] for p in parts)))
    host = [k for k in _HOST_KEYS if k in obs]
    # every part of host RAM printed: a GPU build's CUDA_Host compute buffer, or a CPU-only build's CPU one
    if any("model" in k for k in host) and ("cuda_host_compute_buffer_mib" in obs or "cpu_compute_buffer_mib" in obs):
        rows.append(("host", "host RAM", sum(pred.get(k, 0) for k in host), sum(obs[k] for k in host)))
    return [row for row in rows if row[0] not in plan.not_compared]
