"""Per-buffer model weights as llama.cpp's load_tensors prints them ("CUDA0 model buffer size = X MiB").

Rules (src/llama-model.cpp llama_model::load_tensors, 0.3.16 tree = build ~6150; same in 0.3.8):
- the input layer (token_embd, ...) always stays on the CPU;
- -ngl N: repeating layers il >= n_layer - N go to GPU, the output layer counts as one more
  (act_gpu_layers = min(N, n_layer + 1)); a GPU layer's device is upper_bound(split points,
  (il - i_gpu_start) / act_gpu_layers), split points from --tensor-split or each device's free memory;
- a model without output.weight duplicates token_embd as the output (on the output device);
- -ot / --n-cpu-moe move matching tensors (experts) to CPU;
- CUDA buffers: per tensor, quantized rows padded to MATRIX_ROW_PADDING 512 elements (ggml-cuda.cu
  get_alloc_size), each tensor at 128-byte alignment; CPU/CUDA_Host buffers align tensors to 32 bytes;
  with mmap the CPU side is one CPU_Mapped buffer spanning the file range of its tensors.
"""
from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

from .ggml_types import is_quantized, row_size, tensor_nbytes

CUDA_ALIGNMENT = 128  # ggml-cuda.cu ggml_backend_cuda_buffer_type_get_alignment (llama-cpp-python 0.3.16)
HOST_ALIGNMENT = 32  # ggml-impl.h TENSOR_ALIGNMENT: the CPU / CUDA_Host buffers' alignment (0.3.16)
MATRIX_ROW_PADDING = 512  # ggml-cuda/common.cuh: a quantized matrix's last row padded to 512 elements (0.3.16)
_LAYER = re.compile(r"^blk\.(\d+)\.")
_EXPERTS = re.compile(r"\.ffn_(up|down|gate|gate_up)_exps\.")


@dataclass(frozen=True)
class GgufTensor:
    name: str
    type_name: str  # GGML type name ("Q4_K")
    ne: tuple[int, ...]  # ggml order: ne[0] is the row
    offset: int = 0  # absolute file offset of the data (for the mmap span)

    @property
    def nbytes(self) -> int:
        return tensor_nbytes(self.type_name, self.ne)


@dataclass(frozen=True)
class Placement:
    n_layer: int
    n_gpu_layers: int
    devices: tuple[str, ...] = ("CUDA0",)
    split: tuple[float, ...] = ()  # --tensor-split or free memory per device; () = equal
    mmap: bool = True
    cpu_overrides: tuple[str, ...] = ()  # -ot regexes sent to CPU
    n_cpu_moe: int = 0  # experts of layers [0, n_cpu_moe) stay on CPU
    output_first: bool = False  # newer builds: i_gpu_start = n_layer + 1 - N (releases ngl.output_first)
    input_pinned: bool = False  # without mmap, the input layer in CUDA_Host too (releases input.pinned_no_mmap)
    device_overrides: tuple[tuple[str, str], ...] = ()  # -ot regex=CUDA<N> (checked before cpu_overrides)
    repack_types: frozenset = frozenset()  # CPU-only: ggml types the CPU_REPACK buffer takes (releases cpu.repack_types)


def split_points(devices: int, split: tuple[float, ...]) -> list[float]:
    weights = list(split) if split and any(split) else [1.0] * devices
    total, points, running = sum(weights), [], 0.0
    for w in weights:
        running += w
        points.append(running / total)
    return points


def layer_devices(p: Placement) -> dict[int, str]:
    """Device of every offloaded layer index (n_layer = the output layer); layers absent stay on CPU."""
    i_gpu_start = max(p.n_layer + (1 if p.output_first else 0) - p.n_gpu_layers, 0)
    act = min(p.n_gpu_layers, p.n_layer + 1) if p.devices else 0
    points = split_points(len(p.devices), p.split)
    out = {}
    for il in range(p.n_layer + 1):
        if il < i_gpu_start or il - i_gpu_start >= act:
            continue
        idx = bisect.bisect_right(points, (il - i_gpu_start) / act)
        out[il] = p.devices[min(idx, len(p.devices) - 1)]
    return out


def tensor_layer(name: str, n_layer: int) -> int | None:
    """Layer index; n_layer for the output layer; None for the input layer."""
    m = _LAYER.match(name)
    if m:
        return int(m.group(1))
    return n_layer if name.startswith("output") else None


def cuda_alloc_size(t: GgufTensor) -> int:
    size = t.nbytes
    if is_quantized(t.type_name) and t.ne[0] % MATRIX_ROW_PADDING:
        size += row_size(t.type_name, MATRIX_ROW_PADDING - t.ne[0] % MATRIX_ROW_PADDING)
    return size


def _align(n: int, a: int) -> int:
    return -(-n // a) * a


def _on_cpu_by_override(t: GgufTensor, p: Placement) -> bool:
    if any(re.search(rx, t.name) for rx in p.cpu_overrides):
        return True
    layer = _LAYER.match(t.name)
    return bool(layer and int(layer.group(1)) < p.n_cpu_moe and _EXPERTS.search(t.name))


def _device_override(t: GgufTensor, p: Placement) -> str | None:
    """-ot regex=CUDA1: the first matching pattern's device, for any tensor (llama-model.cpp create_tensor
    applies tensor_buft_overrides before the layer's buffer list; an input-layer tensor moves too)."""
    for rx, device in p.device_overrides:
        if re.search(rx, t.name):
            return device
    return None


def assign(tensors: list[GgufTensor], p: Placement) -> list[tuple[GgufTensor, str]]:
    """(tensor, buffer) pairs: a device name, 'CPU' (input layer / overrides) or 'HOST' (CPU-side layers)."""
    devices = layer_devices(p)
    pairs = []
    for t in tensors:
        layer = tensor_layer(t.name, p.n_layer)
        if p.device_overrides and (target := _device_override(t, p)) is not None:
            pairs.append((t, target))
        elif layer is None:
            pairs.append((t, "CPU"))
        elif layer in devices and not _on_cpu_by_override(t, p):
            pairs.append((t, devices[layer]))
        else:
            pairs.append((t, "CPU" if layer in devices else "HOST"))
    names = {t.name for t in tensors}
    if "output.weight" not in names and p.n_layer in devices:
        embd = next((t for t in tensors if t.name == "token_embd.weight"), None)
        if embd is not None:  # TENSOR_DUPLICATED: a second copy for the output device
            pairs.append((embd, devices[p.n_layer]))
    return pairs


REPACK_ROWS = 8  # ggml-cpu/repack.cpp: the x86 AVX2 kernels interleave 8 rows (ne[1] % 8 == 0; 0.3.16, 0.3.36)


def is_repacked(t: GgufTensor, p: Placement) -> bool:
    """A CPU-side weight the CPU_REPACK buffer takes: its type has an AVX2 repack kernel and its rows come in
    eights (ggml_repack_get_optimal_repack_type), and it feeds a MUL_MAT / MUL_MAT_ID (extra_buffer_type
    supports_op: 2-D or 3-D; the input embedding feeds GET_ROWS and stays in CPU_Mapped / CPU)."""
    return (t.type_name in p.repack_types and len(t.ne) in (2, 3) and t.ne[1] % REPACK_ROWS == 0
            and tensor_layer(t.name, p.n_layer) is not None)


def model_buffers(tensors: list[GgufTensor], p: Placement) -> dict[str, int]:
    """Bytes per printed buffer name: 'CUDA0', ..., 'CPU_Mapped' (mmap) or 'CPU' / 'CUDA_Host' (no mmap),
    'CPU_REPACK' (a CPU-only build's repacked weights: a copy; with mmap the mapped span still covers them
    when they lie between mapped tensors, llama-model.cpp load_tensors maps first..last of the CPU buffer's)."""
    out: dict[str, int] = {}
    host: list[GgufTensor] = []
    for t, where in assign(tensors, p):
        if where in ("CPU", "HOST") and p.repack_types and is_repacked(t, p):
            out["CPU_REPACK"] = out.get("CPU_REPACK", 0) + _align(t.nbytes, HOST_ALIGNMENT)
        elif where in ("CPU", "HOST"):
            if p.mmap:
                host.append(t)
                continue
            # without mmap, CPU-side layers prefer pinned CUDA_Host memory; input and overrides use CPU
            pinned = where == "HOST" or (p.input_pinned and tensor_layer(t.name, p.n_layer) is None)
            name = "CUDA_Host" if pinned and p.devices and p.n_gpu_layers > 0 else "CPU"
            out[name] = out.get(name, 0) + _align(t.nbytes, HOST_ALIGNMENT)
        else:
            out[where] = out.get(where, 0) + _align(cuda_alloc_size(t), CUDA_ALIGNMENT)
    if host:
        out["CPU_Mapped"] = max(t.offset + t.nbytes for t in host) - min(t.offset for t in host)
    return out


ROW_ROUNDING = 128  # ggml-cuda.cu get_row_rounding: mmq_y rows on Volta and newer


def row_split(t: GgufTensor, points: list[float], devices: tuple[str, ...]) -> dict[str, int]:
    """Bytes per device of a 2-D weight in the CUDA split buffer (-sm row; ggml-cuda.cu get_row_split and
    the split buffer's get_alloc_size): rows [n x start_i, n x start_(i+1)) rounded down to ROW_ROUNDING,
    the last device takes the rest; each part padded to MATRIX_ROW_PADDING columns like a CUDA tensor."""
    nrows = t.ne[1] if len(t.ne) > 1 else 1
    starts = [0.0] + points[:-1]
    out: dict[str, int] = {}
    for i, device in enumerate(devices):
        low = 0 if i == 0 else int(nrows * starts[i]) // ROW_ROUNDING * ROW_ROUNDING
        high = nrows if i == len(devices) - 1 else int(nrows * starts[i + 1]) // ROW_ROUNDING * ROW_ROUNDING
        if high <= low:
            continue
        size = row_size(t.type_name, t.ne[0]) * (high - low)
        if is_quantized(t.type_name) and t.ne[0] % MATRIX_ROW_PADDING:
            size += row_size(t.type_name, MATRIX_ROW_PADDING - t.ne[0] % MATRIX_ROW_PADDING)
        out[device] = out.get(device, 0) + size
    return out


def is_row_split(t: GgufTensor, p: Placement) -> bool:
    """Tensors the CUDA split buffer takes: 2-D matrices of the layers and the output (ggml-cuda.cu
    supports_op refuses 3-D expert stacks in a split buffer; norms and biases are not matmul weights)."""
    return len(t.ne) == 2 and t.ne[1] > 1 and tensor_layer(t.name, p.n_layer) is not None


def row_split_buffers(pairs, gpus: tuple[str, ...], split: tuple[float, ...], p: Placement):
    """-sm row: ({buffer: bytes} changes to the model buffers, split bytes per GPU). Each GPU-side 2-D weight
    leaves its device's buffer for that device's split buffer ("CUDA0_Split", ggml-cuda.cu
    ggml_backend_cuda_split_buffer_type), whose alloc size is the parts of every GPU, each padded."""
    points = split_points(len(gpus), split)
    changes: dict[str, int] = {}
    parts: dict[str, int] = {}
    for t, where in pairs:
        if where.startswith("CUDA") and where[4:].isdigit() and is_row_split(t, p):
            pieces = row_split(t, points, gpus)
            changes[where] = changes.get(where, 0) - _align(cuda_alloc_size(t), CUDA_ALIGNMENT)
            changes[f"{where}_Split"] = changes.get(f"{where}_Split", 0) + _align(sum(pieces.values()), CUDA_ALIGNMENT)
            for device, size in pieces.items():
                parts[device] = parts.get(device, 0) + size
    return changes, parts


def read_gguf_tensors(path: str) -> tuple[dict, list[GgufTensor]]:
    """Metadata (scalars only) and tensor table of a local GGUF, via the gguf package's reader."""
    from gguf import GGUFReader

    reader = GGUFReader(path)
    meta = {}
    for field in reader.fields.values():
        if len(field.data) == 1 and not field.name.startswith("tokenizer."):
            value = field.parts[field.data[0]]
            meta[field.name] = value.tobytes().decode() if field.types and field.types[0].name == "STRING" \
                else value.tolist()[0]
    tensors = [GgufTensor(t.name, t.tensor_type.name, tuple(int(x) for x in t.shape), int(t.data_offset))
               for t in reader.tensors]
    return meta, tensors
