"""A llama.cpp Layout (plan.py) as the engine-neutral Breakdown: one tree per GPU (model, KV, compute,
CUDA context) plus the host tree, and every printed figure as an EngineFigure under its SCHEMA.md name."""
from __future__ import annotations

import re

from ...breakdown import Breakdown, Component, DeviceFigures, EngineFigure, Setting
from .log_lines import log_lines
from .plan import HOST_MODEL_BUFFERS, Layout
from .releases import rule

MIB = 1024 * 1024
_SOURCE = "llama.cpp src/llama-model.cpp load_tensors, llama-kv-cache*.cpp, llama-context.cpp (build {build})"
_HOST_KEYS = {"CPU_Mapped": "cpu_mapped", "CPU": "cpu", "CUDA_Host": "cuda_host"}


def _mib(n: int) -> float:
    return round(n / MIB, 2)


def figures(lay: Layout) -> dict:
    """The figures the build prints for this layout, keyed and rounded as its log lines show them (MiB)."""
    # a CPU-only build prints no "offloaded N/M layers" line (load_tensors: llama_supports_gpu_offload())
    out: dict = {"offloaded_layers": lay.offloaded, "total_layers": lay.total_layers} if lay.devices else {}
    mapped = rule("log.mapped_buffer_name", lay.settings.build)
    split_name = rule("log.split_buffer_name", lay.settings.build)
    for name, value in lay.model.items():
        name = mapped if name == "CPU_Mapped" else name
        name = split_name if name.endswith("_Split") and split_name else name
        key = f"{_HOST_KEYS.get(name, name.lower())}_model_buffer_mib"
        out[key] = round(out.get(key, 0) + _mib(value), 2)
    for name, value in lay.kv_by_device.items():
        out[f"{name.lower()}_kv_buffer_mib"] = _mib(value)
    kv = lay.kv
    out.update(kv_size_mib=_mib(kv.total_bytes), k_mib=_mib(kv.k_bytes), v_mib=_mib(kv.v_bytes), kv_cells=kv.cells,
               kv_layers=kv.layers, kv_streams=kv.streams, n_seq_max=lay.settings.n_parallel,
               type_k=lay.settings.type_k, type_v=lay.settings.type_v)
    if lay.rs.layers:
        for name, value in lay.rs.per_device:
            out[f"{name.lower()}_rs_buffer_mib"] = _mib(value)
        out.update(rs_size_mib=_mib(lay.rs.total_bytes), r_mib=_mib(lay.rs.r_bytes), s_mib=_mib(lay.rs.s_bytes),
                   rs_cells=lay.rs.cells, rs_layers=lay.total_layers - 1)
    if lay.projector is not None:
        out["mmproj_model_buffer_mib"] = _mib(lay.projector.weights)
        out["mmproj_model_size_mib"] = _mib(lay.projector.stored)
        out[f"mmproj_{lay.projector.device.lower()}_compute_buffer_mib"] = _mib(lay.projector.compute)
    out["kv_padding"] = 256 if lay.flash_attn else rule("kv.padding_no_fa", lay.settings.build)
    if rule("log.kv_cache", lay.settings.build) == "llama_kv_cache_init":
        del out["kv_cells"], out["kv_layers"]  # that era prints neither
    for name, value in lay.compute.items():
        out[f"{_HOST_KEYS.get(name, name.lower())}_compute_buffer_mib"] = _mib(value)
    out[f"{_HOST_KEYS[lay.output[0]]}_output_buffer_mib"] = _mib(lay.output[1])
    return out


def _device_tree(lay: Layout, device: str, source: str) -> Component:
    parts = (("model", "model buffer", lay.model.get(device, 0), "weights of the layers placed here"),
             ("row_split", "split-buffer rows", lay.row_split.get(device, 0), "-sm row: this GPU's rows of the matrices"),
             ("kv", "KV buffer", lay.kv_by_device.get(device, 0), f"{lay.kv.cells} cells x this GPU's layers"),
             ("rs", "RS buffer (recurrent state)", lay.rs_by_device.get(device, 0),
              f"{lay.rs.cells} cells x this GPU's recurrent layers, f32 conv + SSM state"),
             ("compute", "compute buffer", lay.compute.get(device, 0), f"worst-case graph, n_ubatch {lay.n_ubatch}"),
             ("mmproj", "vision projector (--mmproj)", lay._projector_on(device),
              "CLIP tower weights as stored + its warm-up image graph"),
             ("context", "CUDA context + cuBLAS", lay.context.get(device, 0), "fitted (calibration.py)"))
    children = tuple(Component(f"{device}.{key}", label, n, reason, source) for key, label, n, reason in parts if n)
    return Component(device, f"{device} VRAM", lay.vram(device), "", source, children)


def _host_tree(lay: Layout, source: str) -> Component:
    rows = [(f"host.model.{n}", f"{n} model buffer", lay.model[n]) for n in HOST_MODEL_BUFFERS if n in lay.model]
    rows += [("host.kv", "CPU KV buffer", lay.kv_by_device.get("CPU", 0))]
    rows += [("host.rs", "CPU RS buffer", lay.rs_by_device.get("CPU", 0))]
    rows += [("host.mmproj", "vision projector (--no-mmproj-offload)", lay._projector_on("CPU"))]
    rows += [(f"host.compute.{k}", f"{k} compute buffer", v) for k, v in lay.compute.items()
             if not k.startswith("CUDA") or k == "CUDA_Host"]
    rows += [("host.output", f"{lay.output[0]} output buffer", lay.output[1])]
    children = tuple(Component(key, label, n, "", source) for key, label, n in rows if n)
    return Component("host", "host RAM (mapped file pages included)", lay.host, "", source, children)


def layer_split(spec, lay: Layout) -> dict[str, int]:
    """Layers per device as -ngl / -ts place them (the output layer counted, as llama.cpp counts it)."""
    from .plan import placement
    from .weights import layer_devices

    on_gpu = layer_devices(placement(spec, lay.settings)) if lay.offloaded else {}
    out: dict[str, int] = {}
    for device in on_gpu.values():
        out[device] = out.get(device, 0) + 1
    out["CPU"] = lay.total_layers - len(on_gpu)
    return out


def _split_text(spec, lay: Layout) -> str:
    from .plan import n_gpu_layers_text

    split = layer_split(spec, lay)
    where = ", ".join(f"{d} {n}" for d, n in split.items() if n)
    return f"{lay.offloaded}/{lay.total_layers} (-ngl {n_gpu_layers_text(lay.settings, spec.num_layers)}: {where})"


def _engine_figures(spec, lay: Layout) -> tuple[EngineFigure, ...]:
    out = [EngineFigure("layers_on_gpu", lay.offloaded, "layers on the GPU (output layer counted)",
                        _split_text(spec, lay))]
    out += [EngineFigure(f"vram_{d.lower()}_bytes", lay.vram(d), f"VRAM {d}", f"{lay.vram(d) / MIB:,.0f} MiB")
            for d in lay.devices]
    out.append(EngineFigure("host_ram_bytes", lay.host, "host RAM", f"{lay.host / MIB:,.0f} MiB"))
    out.append(EngineFigure("flash_attn", lay.flash_attn, "flash attention", "on" if lay.flash_attn else "off"))
    for key, value in figures(lay).items():
        if key.endswith("_mib") or key in ("offloaded_layers", "total_layers", "kv_cells", "kv_layers"):
            out.append(EngineFigure(key, value, "", "", (key,)))
    return tuple(out)


def _gpu_name(device: str, index: int) -> str:
    """"GPU 1" for CUDA1 (llama.cpp numbers its CUDA devices as CUDA enumerates them, ggml-cuda.cu
    ggml_backend_cuda_reg_get_device); the position when the name has no number."""
    number = re.search(r"(\d+)$", device)
    return f"GPU {number.group(1) if number else index}"


def devices(spec, lay: Layout, trees: tuple[Component, ...], total: int) -> tuple[DeviceFigures, ...]:
    """One entry per GPU the layers are split over (-ts / -sm / -mg, -dev): its own buffers, its own nvidia-smi
    figure (its buffers and its CUDA context); () with one GPU, unless it is not GPU 0 (-sm none -mg 1: the model
    on GPU 1 alone), which the answer then names."""
    if not lay.devices or (len(lay.devices) == 1 and _gpu_name(lay.devices[0], 0) == "GPU 0"):
        return ()
    layers = layer_split(spec, lay) if lay.offloaded else {}
    out = []
    for index, (device, tree) in enumerate(zip(lay.devices, trees)):
        role = f"{device}: {layers.get(device, 0)} layers" + (", rows split (-sm row)" if lay.row_split else "")
        out.append(DeviceFigures(
            _gpu_name(device, index), role, total, lay.model.get(device, 0) + lay.row_split.get(device, 0),
            lay.kv_by_device.get(device, 0) + lay.rs_by_device.get(device, 0), round(lay.vram(device) / MIB),
            tree.children))
    return tuple(out)


def to_breakdown(spec, gpu, lay: Layout, version_text: str, label: str = "llama.cpp", name: str = "llamacpp",
                 notes: tuple[str, ...] = (), settings: tuple[Setting, ...] = ()) -> Breakdown:
    s = lay.settings
    source = _SOURCE.format(build=s.build)
    devices_trees = tuple(_device_tree(lay, d, source) for d in lay.devices)
    tree = Component("vram", "VRAM on the GPUs", sum(d.bytes for d in devices_trees), "", source, devices_trees)
    first = lay.devices[0] if lay.devices else "CUDA0"
    kv_tokens = lay.kv.cells * lay.kv.streams
    return Breakdown(
        model=spec.name, gpu_name=gpu.name, total_gpu_bytes=gpu.cuda_total_bytes, engine_name=name,
        engine_label=label, engine_version=version_text, engine_variant="", settings=settings,
        components=tree, weights_bytes=sum(lay.model.get(d, 0) + lay.row_split.get(d, 0) for d in lay.devices),
        kv_cache_bytes=lay.kv.total_bytes, kv_bytes_per_token=lay.kv.total_bytes // max(kv_tokens, 1),
        kv_cache_tokens=kv_tokens, max_concurrency=kv_tokens / max(lay.n_ctx, 1), max_model_len=lay.n_ctx,
        nvidia_smi_used_mib=round(lay.vram(first) / MIB), outside_budget=_host_tree(lay, source),
        log_lines=log_lines((s.build,), figures(lay)), engine_figures=_engine_figures(spec, lay),
        notes=(f"model buffers from the {lay.source}",) + notes,
        devices=devices(spec, lay, devices_trees, gpu.cuda_total_bytes))


class GgufReport:
    """A GGUF checkpoint's stored tensors (its header) beside the buffers llama.cpp places them in."""

    def __init__(self, table, lay: Layout):
        self.table, self.layout = table, lay

    def to_dict(self) -> dict:
        return {"format": self.table.format, "tensors": len(self.table.tensors),
                "stored_mib": _mib(self.table.total_bytes),
                "stored_by_type_mib": {k: _mib(v) for k, v in self.table.bytes_by_dtype().items()},
                "model_buffers_mib": {k: _mib(v) for k, v in self.layout.model.items()}}

    def summary_lines(self) -> list[str]:
        types = ", ".join(f"{k} {v / MIB:,.0f} MiB" for k, v in self.table.bytes_by_dtype().items())
        placed = ", ".join(f"{k} {v / MIB:,.2f} MiB" for k, v in self.layout.model.items())
        return [f"GGUF header: {len(self.table.tensors)} tensors, {self.table.total_bytes / MIB:,.2f} MiB stored ({types})",
                f"model buffers: {placed} (CUDA rows padded to 512 columns; token_embd kept on the host)"]
