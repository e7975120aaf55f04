"""`explain` for this machine (`--gpu auto`, or no --gpu where GPUs are found): each local GPU as the engine
will find it (the memory other processes hold already gone), then what all of them together would serve."""
from __future__ import annotations

import json
import sys

from .hardware import GIB


def wants_local(args) -> bool:
    """--gpu auto, or no GPU given at all on a machine whose GPUs can be read (VRAM_DETECTIVE_NO_PROBE=1 off)."""
    from .local_gpus import disabled

    if (args.gpu or "").strip().lower() == "auto":
        return True
    return args.gpu is None and not args.gpu_memory and not disabled()


def local_machine(args):
    """[(LocalGpu, Gpu, note)] of this machine; BadInput for --gpu auto on a machine without one."""
    from .errors import BadInput
    from .local_gpus import ProbeError, machine_gpus

    try:
        found = machine_gpus()
    except ProbeError as error:
        raise BadInput(str(error)) from None
    if not found and (args.gpu or "").strip().lower() == "auto":
        raise BadInput("--gpu auto found no GPU here (no NVML, nvidia-smi, rocm-smi or Apple Silicon): pass --gpu NAME")
    return found


def device_lines(found) -> list[str]:
    lines = [f"this machine: {len(found)} GPU{'s' if len(found) > 1 else ''} ({found[0][0].source})"]
    for device, gpu, note in found:
        lines.append(f"GPU {device.index}: {device.name}, {gpu.cuda_total_bytes / GIB:.2f} GiB as CUDA reports it, "
                     f"{gpu.in_use_bytes / GIB:.2f} GiB in use by other processes, {gpu.free_bytes / GIB:.2f} GiB "
                     f"free before the engine loads ({gpu.short_name})")
    return lines


def explain_here(args, model: str, settings: dict, found) -> int:
    """Each device alone (the engine's settings as given), and with several devices the split over all."""
    from . import api
    from .cli import EXIT_REFUSED, _engine_options, _print_explain, _source_options
    from .engines import get_engine
    from .engines.base import machine_settings

    engine = get_engine(args.engine_name)
    refusals = (*api.REFUSALS, *engine.refusals)
    per_gpu = []
    for device, gpu, _ in found:
        alone = dict(machine_settings(engine, (gpu.free_bytes,)), **settings)
        try:
            per_gpu.append((device, gpu, api.explain(model, gpu, **_engine_options(args, alone), **_source_options(args))))
        except refusals as error:
            per_gpu.append((device, gpu, error))
    if getattr(args, "emit", None):
        from .deploy.command import emit

        device, gpu, first = per_gpu[0]
        if isinstance(first, Exception):
            print(f"{engine.label} would refuse to start on GPU {device.index}: {first}", file=sys.stderr)
            return 1
        return emit(args, model, dict(machine_settings(engine, (gpu.free_bytes,)), **settings), first, gpu.vendor)
    together = _all_devices(args, model, settings, found, engine, refusals) if len(found) > 1 else None
    if args.json:
        print(json.dumps(_json(found, per_gpu, together), indent=2, default=str))
        return _exit(per_gpu, together)
    args.input_notes = [*getattr(args, "input_notes", ()), *device_lines(found)]
    first = per_gpu[0]
    if isinstance(first[2], Exception):
        print(f"{engine.label} would refuse to start on GPU {first[0].index}: {first[2]}", file=sys.stderr)
    else:
        args.gpu = first[1].short_name
        if getattr(args, "html", None):
            from .cli import _write_text
            from .web.report import html_report

            _write_text(args.html, html_report(first[2]))
        _print_explain(args, model, None, settings, first[2], None, [])
    for number, (device, gpu, result) in enumerate(per_gpu[1:], start=1):
        twin = next((d for d, g, _ in per_gpu[:number] if g == gpu), None)  # same card, same memory in use
        print(f"GPU {device.index} ({gpu.free_bytes / GIB:.2f} GiB free): "
              + (f"as GPU {twin.index}" if twin is not None else _one_line(result)))
    if together is not None:
        flags, result = together
        print(f"all {len(found)} GPUs{(' (' + flags + ')') if flags else ''}: {_one_line(result)}")
    return EXIT_REFUSED if _exit(per_gpu, together) else 0


def _all_devices(args, model, settings, found, engine, refusals):
    """The model over every local device: tensor parallel for vLLM / SGLang, llama.cpp's split by free memory;
    on the device with the least free memory (every rank gets the same budget); None when the user set it."""
    from . import api
    from .cli import _engine_options, _source_options
    from .engines.base import machine_settings

    frees = tuple(gpu.free_bytes for _, gpu, _ in found)
    extra = machine_settings(engine, frees)
    if not extra or any(key in settings for key in extra):
        return None
    gpu = min((gpu for _, gpu, _ in found), key=lambda g: g.free_bytes)
    try:
        result = api.explain(model, gpu, **_engine_options(args, dict(settings, **extra)), **_source_options(args))
    except refusals as error:
        result = error
    return _flags(engine, extra), result


def _flags(engine, settings: dict) -> str:
    try:
        names = engine.levers.flag_names()
    except Exception:  # noqa: BLE001 - an engine without flag names
        names = {}
    words = []
    for key, value in settings.items():
        if key in names and not names[key].startswith("PARAMETER"):
            text = ",".join(str(v) for v in value) if isinstance(value, (tuple, list)) else str(value)
            words.append(f"{names[key]} {text}")
    return " ".join(words)


def _one_line(result) -> str:
    if isinstance(result, Exception):
        return f"would not start: {result}"
    if result.failure is not None:
        return f"would not start: {result.failure.message}"
    return (f"starts; weights {result.weights_bytes / GIB:.2f} GiB per GPU, KV pool {result.kv_cache_bytes / GIB:.2f} GiB, "
            f"{result.kv_cache_tokens:,} tokens, {result.max_concurrency:.2f} requests of {result.max_model_len:,}")


def _exit(per_gpu, together) -> bool:
    """Refused (exit 1) when the first GPU refuses and the split over all (if any) does too."""
    def refused(result):
        return isinstance(result, Exception) or result.failure is not None
    return refused(per_gpu[0][2]) and (together is None or refused(together[1]))


def _json(found, per_gpu, together) -> dict:
    from .render import to_json

    def answer(result):
        return {"starts": False, "why": str(result)} if isinstance(result, Exception) else to_json(result)
    out = {"machine": [{"index": d.index, "name": d.name, "source": d.source, "reported_total_bytes": d.total_bytes,
                        "used_bytes": d.used_bytes, "cuda_total_bytes": g.cuda_total_bytes,
                        "free_before_load_bytes": g.free_bytes, "catalog_gpu": g.short_name, "note": note}
                       for d, g, note in found],
           "per_gpu": [dict(answer(result), gpu_index=device.index) for device, _, result in per_gpu]}
    if together is not None:
        out["all_gpus"] = dict(answer(together[1]), flags=together[0])
    return out
