"""The memory lines a llama.cpp build prints at startup, from figures keyed as SCHEMA.md's llama.cpp
`observed` (MiB). Prefixes and wording by build come from releases.py (log.* rows); log_parser.py reads
these lines back (tests check the round trip)."""
from __future__ import annotations

from .releases import rule

_HOST_MODEL = (("cpu_mapped", "CPU_Mapped"), ("cpu_repack", "CPU_REPACK"), ("cpu", "CPU"), ("cuda_host", "CUDA_Host"))


def _devices(figures: dict, kind: str) -> list[tuple[str, float]]:
    found = []
    for key, value in figures.items():
        if key.startswith("cuda") and key.endswith(f"_{kind}_buffer_mib") and key[4:5].isdigit():
            found.append((f"CUDA{key[4:].split('_')[0]}", value))
    return sorted(found)


def _model_lines(build: int, figures: dict) -> list[str]:
    prefix, word = rule("log.load_tensors", build), rule("log.model_buffer_word", build)
    out = []
    if "offloaded_layers" in figures:
        out.append(f"{prefix}: offloaded {figures['offloaded_layers']}/{figures['total_layers']} layers to GPU")
    for name, value in _devices(figures, "model"):
        out.append(f"{prefix}: {name:>12} {word} size = {value:8.2f} MiB")
    for key, name in _HOST_MODEL:
        if f"{key}_model_buffer_mib" in figures:
            out.append(f"{prefix}: {name:>12} {word} size = {figures[f'{key}_model_buffer_mib']:8.2f} MiB")
    return out


def _kv_lines(build: int, figures: dict) -> list[str]:
    kv = rule("log.kv_cache", build)
    out = []
    for name, value in _devices(figures, "kv"):
        out.append(f"{kv}: {name:>10} KV buffer size = {value:8.2f} MiB")
    if "cpu_kv_buffer_mib" in figures:
        out.append(f"{kv}: {'CPU':>10} KV buffer size = {figures['cpu_kv_buffer_mib']:8.2f} MiB")
    if "kv_size_mib" not in figures:
        return out
    size, k, v = figures["kv_size_mib"], figures.get("k_mib", 0.0), figures.get("v_mib", 0.0)
    tk, tv = figures.get("type_k", "f16"), figures.get("type_v", "f16")
    style = rule("log.kv_size_line", build)
    if style == "KV self size":
        if kv != "llama_kv_cache_init" and "kv_cells" in figures:
            out.insert(0, f"{kv}: kv_size = {figures['kv_cells']}, type_k = '{tk}', type_v = '{tv}', "
                          f"n_layer = {figures.get('kv_layers', 0)}, can_shift = 1, padding = {figures.get('kv_padding', 32)}")
        ctx = rule("log.context", build)
        ctx = ctx if ctx == "llama_new_context_with_model" else kv  # printed by the KV cache after the refactor
        out.append(f"{ctx}: KV self size  = {size:7.2f} MiB, K ({tk}): {k:7.2f} MiB, V ({tv}): {v:7.2f} MiB")
    else:
        seqs = (f"{figures.get('n_seq_max', 1):2d}/{figures.get('kv_streams', 1)} seqs"
                if style.endswith("s/S seqs)") else f"{figures.get('n_seq_max', 1)} seqs")
        out.append(f"{kv}: size = {size:7.2f} MiB ({figures.get('kv_cells', 0):6d} cells, "
                   f"{figures.get('kv_layers', 0):3d} layers, {seqs}), K ({tk}): {k:7.2f} MiB, V ({tv}): {v:7.2f} MiB")
    return out


def _rs_lines(figures: dict) -> list[str]:
    """llama_memory_recurrent's buffer and size lines (llama-memory-recurrent.cpp, printed after the KV's; the
    layer count is the model's n_layer, recurrent or not)."""
    if "rs_size_mib" not in figures:
        return []
    out = [f"llama_memory_recurrent: {name:>10} RS buffer size = {value:8.2f} MiB" for name, value in _devices(figures, "rs")]
    if "cpu_rs_buffer_mib" in figures:
        out.append(f"llama_memory_recurrent: {'CPU':>10} RS buffer size = {figures['cpu_rs_buffer_mib']:8.2f} MiB")
    cells = figures.get("rs_cells", 1)
    out.append(f"llama_memory_recurrent: size = {figures['rs_size_mib']:7.2f} MiB ({cells:6d} cells, "
               f"{figures.get('rs_layers', 0):3d} layers, {cells:2d} seqs), R (f32): {figures.get('r_mib', 0.0):7.2f} MiB, "
               f"S (f32): {figures.get('s_mib', 0.0):7.2f} MiB")
    return out


def _context_lines(build: int, figures: dict) -> list[str]:
    ctx, comp = rule("log.context", build), rule("log.compute_buffer", build)
    comp_prefix = ctx if comp == "context" else comp
    out = []
    for key, name in (("cuda_host", "CUDA_Host"), ("cpu", "CPU")):
        if f"{key}_output_buffer_mib" in figures:
            out.append(f"{ctx}: {name:>10}  output buffer size = {figures[f'{key}_output_buffer_mib']:8.2f} MiB")
    for name, value in _devices(figures, "compute"):
        out.append(f"{comp_prefix}: {name:>10} compute buffer size = {value:8.2f} MiB")
    for key, name in (("cuda_host", "CUDA_Host"), ("cpu", "CPU")):
        if f"{key}_compute_buffer_mib" in figures:
            out.append(f"{comp_prefix}: {name:>10} compute buffer size = {figures[f'{key}_compute_buffer_mib']:8.2f} MiB")
    return out


def _clip_lines(figures: dict) -> list[str]:
    """tools/mtmd/clip.cpp (llama-server loads the projector after the context): stored size, compute buffer."""
    out = []
    if "mmproj_model_size_mib" in figures:
        out.append(f"clip_model_loader: model size:         {figures['mmproj_model_size_mib']:.2f} MiB")
    for key, name in (("mmproj_cuda0_compute_buffer_mib", "CUDA0"), ("mmproj_cpu_compute_buffer_mib", "CPU")):
        if key in figures:
            out.append(f"alloc_compute_meta: {name:>10} compute buffer size = {figures[key]:8.2f} MiB")
    return out


def log_lines(release, figures: dict) -> tuple[str, ...]:
    """What build `release` ((build,) or an int) prints for these figures, in its order: tensors, output,
    KV, compute (the KV lines precede the output buffer before the llama_context refactor)."""
    build = release[0] if isinstance(release, tuple) else int(release)
    context = _context_lines(build, figures)
    output = [line for line in context if "output buffer" in line]
    rest = [line for line in context if "output buffer" not in line]
    if rule("log.context", build) == "llama_context":
        return tuple(_model_lines(build, figures) + output + _kv_lines(build, figures) + _rs_lines(figures) + rest
                     + _clip_lines(figures))
    return tuple(_model_lines(build, figures) + _kv_lines(build, figures) + _rs_lines(figures) + output + rest
                 + _clip_lines(figures))
