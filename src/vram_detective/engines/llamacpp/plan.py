"""The whole llama.cpp startup prediction, per device: model buffers (weights.py), KV buffers (kv_cache.py),
compute buffers (compute.py), the CUDA_Host output buffer, the per-GPU CUDA context (calibration.py), and the
totals: VRAM per GPU and host RAM. `layout()` is the pure numbers; `breakdown()` dresses them for renderers.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from . import compute as cmp
from .calibration import CUDA_CONTEXT_BYTES
from .kv_cache import (NO_STATE, KvCache, KvSettings, RecurrentState, gated_delta_state, kv_cache, mamba_state,
                       mla_layers, recurrent_state, swa_cells, uniform_layers)
from .mmproj import ProjectorBuffers, projector_buffers, read_projector
from .quant_mix import quantized_tensors
from .releases import rule
from .settings import ALL_LAYERS, LlamaCppSettings, SettingsError, check, flash_attention
from .weights import GgufTensor, Placement, assign, layer_devices, model_buffers, row_split_buffers

MIB = 1024 * 1024
HOST_MODEL_BUFFERS = ("CPU_Mapped", "CPU_REPACK", "CPU", "CUDA_Host")
OP_OFFLOAD_MIN_BATCH = 32  # ggml-cuda.cu offload_op: batches this large run CPU-weight matmuls on the GPU


@dataclass(frozen=True)
class Layout:
    settings: LlamaCppSettings
    flash_attn: bool
    n_ctx: int  # as requested (0 resolved to the model's), before padding
    n_ubatch: int
    offloaded: int  # layers on GPUs, the output layer counted (llama.cpp's "offloaded N/M")
    total_layers: int  # n_layer + 1
    devices: tuple[str, ...]
    model: dict  # buffer name -> bytes ("CUDA0", "CPU_Mapped", "CPU", "CUDA_Host")
    kv: KvCache
    kv_by_device: dict  # "CUDA0" / "CPU" -> bytes
    compute: dict  # "CUDA0" ... -> bytes; "CUDA_Host" or "CPU" for the host side
    output: tuple[str, int]  # (buffer, bytes)
    context: dict  # device -> CUDA context bytes
    source: str  # where the tensor table came from
    rs: RecurrentState = NO_STATE  # recurrent / hybrid models' conv + SSM state (llama_memory_recurrent)
    row_split: dict = field(default_factory=dict)  # -sm row: the CUDA_Split buffer's part per GPU
    projector: ProjectorBuffers | None = None  # --mmproj: the vision tower's weights and compute (mmproj.py)

    def _projector_on(self, device: str) -> int:
        p = self.projector
        return p.weights + p.compute if p is not None and p.device == device else 0

    @property
    def rs_by_device(self) -> dict:
        return dict(self.rs.per_device)

    def vram(self, device: str) -> int:
        return (self.model.get(device, 0) + self.kv_by_device.get(device, 0) + self.compute.get(device, 0)
                + self.context.get(device, 0) + self.rs_by_device.get(device, 0) + self.row_split.get(device, 0)
                + self._projector_on(device))

    @property
    def split_buffers(self) -> int:
        """The split buffers' total (-sm row), counted per GPU in row_split."""
        return sum(v for k, v in self.model.items() if k.endswith("_Split"))

    @property
    def host(self) -> int:
        return (sum(self.model.get(name, 0) for name in HOST_MODEL_BUFFERS) + self.kv_by_device.get("CPU", 0)
                + self.rs_by_device.get("CPU", 0) + self._projector_on("CPU")
                + sum(v for k, v in self.compute.items() if not k.startswith("CUDA") or k == "CUDA_Host")
                + self.output[1])


def tensors_from_checkpoint(table) -> list[GgufTensor]:
    """A CheckpointTable (model/gguf_source.py, HF-order shapes) as ggml tensors with file offsets laid end to
    end at the GGUF alignment (the mmap span only needs their relative positions)."""
    out, offset = [], 0
    for t in table.tensors:
        tensor = GgufTensor(t.name, t.dtype, tuple(reversed(t.shape)) or (1,), offset)
        out.append(tensor)
        offset += -(-tensor.nbytes // 32) * 32
    return out


def model_tensors(spec, s: LlamaCppSettings, gguf_checkpoint=None) -> tuple[list[GgufTensor], str]:
    if gguf_checkpoint is not None:
        return tensors_from_checkpoint(gguf_checkpoint), "GGUF header"
    tensors = quantized_tensors(spec, s.gguf_type, mla_split=s.gguf_mla_split, order=s.gguf_order)
    return tensors, f"llama-quant.cpp stock {s.gguf_type} mix (no file)"


def placement(spec, s: LlamaCppSettings) -> Placement:
    """Where layers go: split over the GPUs by layer (-sm layer; -sm row since the backend-registry loader,
    each GPU's matrices then in its split buffer), or all on one GPU (-sm none: the main GPU; -sm row in
    older builds, releases split_row.layers_on_main)."""
    n_layer = spec.num_layers
    single = s.split_mode == "none" or (s.split_mode == "row" and rule("split_row.layers_on_main", s.build))
    if s.num_gpus == 0:  # a CPU-only build (or -dev none): no device, every layer on the CPU backend
        devices, split = (), ()
    elif single or s.num_gpus <= 1:
        devices = (f"CUDA{s.main_gpu if s.split_mode != 'layer' else 0}",)
        split: tuple = ()
    else:
        devices = tuple(f"CUDA{i}" for i in range(s.num_gpus))
        split = _split(s)
    # CPU_REPACK only without a GPU host buffer: make_cpu_buft_list puts the GPU's host buffer type before the
    # CPU extra buffer types (llama-model.cpp, 0.3.16 and 0.3.36 trees); --no-repack drops them
    repack = rule("cpu.repack_types", s.build) if s.repack and not devices else frozenset()
    return Placement(n_layer, min(s.n_gpu_layers, n_layer + 1), devices, split, s.mmap, s.cpu_overrides,
                     min(s.n_cpu_moe, n_layer), rule("ngl.output_first", s.build),
                     rule("input.pinned_no_mmap", s.build), s.device_overrides, repack)


def _split(s: LlamaCppSettings) -> tuple[float, ...]:
    return s.tensor_split or tuple(float(x) for x in s.device_free_mib)


def row_split(s: LlamaCppSettings, p: Placement, pairs, model: dict) -> dict:
    """-sm row over several GPUs: the 2-D weights of the GPU layers move to split buffers whose rows spread
    over every GPU by -ts (cumulative fractions; without -ts ggml-cuda splits by each card's total memory,
    taken equal here unless free memory per device is given). Updates `model`; returns the rows per GPU."""
    if s.split_mode != "row" or s.num_gpus <= 1 or not p.devices:
        return {}
    gpus = tuple(f"CUDA{i}" for i in range(s.num_gpus))
    changes, parts = row_split_buffers(pairs, gpus, _split(s), p)
    for name, delta in changes.items():
        model[name] = model.get(name, 0) + delta
    return parts


def swa_layer_set(spec, build: int | None = None) -> frozenset[int]:
    """Sliding-window layers by the family's pattern (Gemma 2 alternates, Gemma 3 keeps every 6th global), for
    the architectures whose window that build applies (releases kv.swa_families: Phi-3's is disabled)."""
    pattern, n = spec.sliding_window_pattern, spec.num_layers
    if not spec.sliding_window or not pattern or spec.family not in rule("kv.swa_families", build):
        return frozenset()
    if pattern == "all":
        return frozenset(range(n))
    if pattern == "alternate":
        return frozenset(il for il in range(n) if il % 2 == 0)
    if ":" in pattern:
        local, glob = (int(x) for x in pattern.split(":"))
        return frozenset(il for il in range(n) if (il + 1) % (local + glob))
    return frozenset()


def kv_layers(spec, build: int, tensors=None):
    """tensors: the file's table, when known (an MLA file without attn_k_b caches full per-head K and V)."""
    if spec.mla is not None:
        m = spec.mla
        split = tensors is None or any(".attn_k_b." in t.name for t in tensors)
        return mla_layers(spec.num_layers, m.kv_lora_rank, m.qk_rope_head_dim, spec.num_attention_heads,
                          m.qk_nope_head_dim, m.v_head_dim, build, split)
    return uniform_layers(spec.num_layers, spec.num_kv_heads, spec.head_dim, swa_layers=swa_layer_set(spec, build))


def attention_layer_ids(spec) -> list[int]:
    """Layers holding attention KV: all of them, or a hybrid's attention layers (llama_memory_hybrid gives the
    KV cache only layers that are not recurrent, llama-memory-hybrid.cpp filter_attn)."""
    if spec.hybrid is None:
        return list(range(spec.num_layers))
    return [il for il, kind in enumerate(spec.hybrid.layers) if "attention" in kind]


def recurrent_layer_ids(spec) -> list[int]:
    return [] if spec.hybrid is None else [il for il, kind in enumerate(spec.hybrid.layers) if "mamba" in kind]


def state_widths(spec) -> tuple[int, int]:
    """(n_embd_r, n_embd_s) per recurrent layer from the mixer (llama-hparams.cpp n_embd_r / n_embd_s)."""
    m = spec.mixer
    if m is None or m.problem:
        raise SettingsError(f"{spec.name}: the recurrent state needs the mixer sizes ({m.problem if m else 'none'})")
    if m.kind == "gated_delta_net":
        return gated_delta_state(m.conv_kernel, m.key_heads, m.key_head_dim, m.value_heads, m.value_head_dim)
    if m.kind == "mamba1":
        return mamba_state(m.conv_kernel, m.intermediate, m.d_state)
    if m.kind == "mamba2":
        return mamba_state(m.conv_kernel, m.intermediate, m.d_state, m.n_groups)
    raise SettingsError(f"{spec.name}: llama.cpp has no {m.kind} ({m.family}) architecture")


def recurrent(spec, s: LlamaCppSettings, lay: dict) -> RecurrentState:
    """The RS buffers: each recurrent layer's rows on its device, CPU when the layer is not offloaded or with
    --no-kv-offload (create_memory passes offload_kqv as llama_memory_recurrent's `offload`)."""
    ids = recurrent_layer_ids(spec)
    if not ids:
        return NO_STATE
    r, st = state_widths(spec)
    devices = [lay.get(il, "CPU") if s.kv_offload else "CPU" for il in ids]
    return recurrent_state(len(ids), r, st, s.n_parallel, devices)


def kv_settings(spec, s: LlamaCppSettings, fa: bool, n_ctx: int) -> KvSettings:
    n_swa = spec.sliding_window or 0 if swa_layer_set(spec, s.build) else 0
    return KvSettings(n_ctx, s.n_parallel, s.kv_unified, s.type_k, s.type_v, fa, s.n_ubatch, n_swa, s.swa_full,
                      s.build)


def graph_shape(spec) -> cmp.GraphShape:
    moe = spec.moe
    n_ff = spec.intermediate_size if moe is None else (
        moe.expert_intermediate * moe.experts_per_token + moe.shared_intermediate)
    return cmp.GraphShape(spec.hidden_size, spec.num_attention_heads, n_ff, spec.vocab_size)


def _compute(spec, lay_devices: dict, p: Placement, pairs, n_kv: int, n_ubatch: int, fa: bool,
             build: int | None = None, streams: int = 1, kv_types: tuple[str, str] = ("f16", "f16"),
             swa: tuple = (frozenset(), 0)) -> dict:
    """Per backend: every GPU holding layers runs the attention step; the output's GPU also the logits step.
    Without the output on a GPU, the main GPU runs the offloaded logits matmul on a copy of the host-side
    output weight (op offload, n_ubatch >= 32; fitted on the 4060-laptop -ngl 20 case)."""
    g = graph_shape(spec)
    out: dict = {}
    act = n_ubatch * (g.n_embd + g.n_ff) * 4
    attention = (0 if fa else g.n_head * n_kv * n_ubatch * 4) + act
    logits = g.n_vocab * n_ubatch * 4 + act
    output_device = lay_devices.get(p.n_layer)
    for device in dict.fromkeys(lay_devices.values()):
        out[device] = max(attention, logits) if device == output_device else attention
    if p.devices and output_device is None and n_ubatch >= OP_OFFLOAD_MIN_BATCH:
        host_out = max((t.nbytes for t, where in pairs if where in ("HOST", "CPU") and t.name != "token_embd.weight"
                        and len(t.ne) > 1), default=0)
        main = p.devices[0]
        out[main] = max(out.get(main, 0), host_out + g.n_vocab * n_ubatch * 4)
    if not p.devices:  # a CPU-only build: one backend, one graph allocation (compute.cpu_graph_bytes replays it)
        exact = cmp.cpu_graph_bytes(spec, n_kv, streams, n_ubatch, fa, kv_types[0], kv_types[1],
                                    rule("compute.cpu_graph", build), *swa)
        if exact is not None:
            return {"CPU": exact}
        return {"CPU": cmp.cpu_compute_bytes(g, n_kv, n_ubatch, fa, rule("compute.cpu_logits_hidden_rows", build))}
    out["CUDA_Host"] = cmp.host_compute_bytes(n_kv, n_ubatch, g.n_embd)
    if not lay_devices:  # -ngl 0 in a GPU build: the graph on the CPU backend beside the host inputs
        out["CPU"] = max(attention, logits)
    return out


def layout(spec, s: LlamaCppSettings, gguf_checkpoint=None) -> Layout:
    check(s, spec)
    fa = flash_attention(s, spec)
    tensors, source = model_tensors(spec, s, gguf_checkpoint)
    p = placement(spec, s)
    lay = layer_devices(p) if s.n_gpu_layers > 0 else {}
    n_ctx = s.n_ctx or spec.max_position_embeddings
    kvs = kv_settings(spec, s, fa, n_ctx)
    ids = attention_layer_ids(spec)
    devices_kv = [lay.get(il, "CPU") if s.kv_offload else "CPU" for il in ids]
    all_layers = kv_layers(spec, s.build, tensors)
    kv = kv_cache([all_layers[il] for il in ids], devices_kv, kvs)
    n_ubatch = min(s.n_ubatch, s.n_batch, n_ctx)
    pairs = assign(tensors, p)
    swa_ids = swa_layer_set(spec, s.build)
    swa = (swa_ids, swa_cells(kvs, kv.cells) if swa_ids else 0)
    compute = _compute(spec, lay, p, pairs, kv.cells, n_ubatch, fa, s.build, kv.streams, (s.type_k, s.type_v), swa)
    vocab = spec.vocab_size
    out_bytes = cmp.output_buffer_bytes(vocab, s.n_parallel, spec.hidden_size, s.embeddings)
    output = ("CUDA_Host" if p.devices and lay else "CPU", out_bytes)
    model = model_buffers(tensors, p) if lay else _cpu_only(tensors, p)
    rows = row_split(s, p, pairs, model) if lay else {}
    extra = [d for d in model if d[4:].isdigit()] + list(rows)
    devices = tuple(sorted(dict.fromkeys([*p.devices, *extra]), key=lambda d: int(d[4:])))
    proj = projector_buffers(read_projector(s.mmproj), s.mmproj_offload, bool(p.devices)) if s.mmproj else None
    if proj is not None and proj.device != "CPU" and proj.device not in devices:
        devices = tuple(sorted((*devices, proj.device), key=lambda d: int(d[4:])))
    used = dict.fromkeys([*lay.values()] + list(p.devices[:1]) + extra + ([proj.device] if proj and proj.device != "CPU" else []))
    return Layout(s, fa, n_ctx, n_ubatch, len(lay), spec.num_layers + 1, devices, model, kv, dict(kv.per_device),
                  compute, output, {d: CUDA_CONTEXT_BYTES for d in used}, source, recurrent(spec, s, lay), rows,
                  proj)


def _cpu_only(tensors, p: Placement) -> dict:
    """-ngl 0: every tensor on the host (one CPU_Mapped span with mmap)."""
    return model_buffers(tensors, Placement(p.n_layer, 0, (), mmap=p.mmap, repack_types=p.repack_types))


def n_gpu_layers_text(s: LlamaCppSettings, n_layer: int) -> str:
    return "all" if s.n_gpu_layers >= min(ALL_LAYERS, n_layer + 1) else str(s.n_gpu_layers)


def kv_prefix(build: int) -> str:
    return rule("log.kv_cache", build)
