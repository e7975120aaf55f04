"""Measure, on the GPU it finds, the terms vLLM's memory profile cannot be read from source for, and write them
as data engines/vllm/calibration.py reads (`probe_readings`). PyTorch and nvidia-ml-py only (no vLLM); under
five minutes on an H200.

    python3 benchmarks/gpu_probe.py [--out FILE]      # default: $OUT/gpu_probe.json, else ./gpu_probe.json

What it measures (each a difference of two readings, so it is the figure itself, not the card's state):
- the CUDA context: NVML used memory after the first CUDA call minus before, less what PyTorch reserved;
- cuBLAS / cuBLASLt: allocator bytes (workspaces) and non-torch bytes (lazily loaded kernels, handles) that the
  first fp16/bf16 matmul and the first bias-fused linear add;
- the caching allocator's rounding: reserved and allocated bytes for request sizes around its block limits;
- the CUDA-graph pool of a small decoder (pure PyTorch layers) captured at vLLM's V1 capture sizes, largest
  first into one shared pool as vLLM does: pool bytes per graph and per layer;
- the sampler's and the logits' peak at the dummy-run shapes (num_reqs x vocab fp32 logits, softmax + sort for
  top-k/top-p): peak bytes per logits element;
- what vLLM's "Graph capturing finished ..., took X GiB" reports when a forward ran between the pool and the
  capture (0.10.2+ kernel_warmup: FlashInfer autotune runs max_num_batched_tokens through the model on sm90+
  when FlashInfer is installed): capture_model measures free memory, and the first torch.cuda.graph empties
  the allocator's cache, so the logged figure would be the pool minus the cache released (negative when the
  cache is larger, as file28022205292's -0.88 GiB). Read: free-memory delta, pool, cache released.

The bookkeeping (everything but the readings) is pure and tested on CPU: tests/test_gpu_probe.py.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

MIB = 1 << 20
# vLLM V1's capture sizes (engines/vllm/profile.py capture_sizes, rule "step-16-above-256" of 0.12+; max_num_seqs 256)
CAPTURE_SIZES = tuple([1, 2, 4] + list(range(8, 249, 8)) + list(range(256, 513, 16)))
ALLOCATION_SIZES = (1, 511, 512, 513, MIB - 1, MIB + 1, 10 * MIB + 1, 20 * MIB + 1, 64 * MIB + 1)
# the dummy sampler run's shapes: max_num_seqs requests x a vocabulary (Llama 3, Qwen 2/3)
SAMPLER_SHAPES = ((256, 128256), (1024, 151936))
SMALL_DECODER = {"hidden": 2048, "heads": 16, "intermediate": 8192, "layers": 8}


# --- bookkeeping (pure; tested on CPU) ---------------------------------------------------------------------------

def context_bytes(nvml_before: int, nvml_after: int, torch_reserved: int) -> int:
    """The CUDA context: what the device lost to the first CUDA call beyond what PyTorch's allocator holds."""
    return nvml_after - nvml_before - torch_reserved


def split_growth(nvml_delta: int, reserved_delta: int, allocated_delta: int) -> dict:
    """A step's growth: in the allocator (a workspace is allocated there) and outside it (kernels, handles)."""
    return {"allocator_reserved_bytes": reserved_delta, "allocator_allocated_bytes": allocated_delta,
            "non_torch_bytes": nvml_delta - reserved_delta}


def rounding_table(records: list[tuple[int, int, int]]) -> list[dict]:
    """(requested, allocated delta, reserved delta) -> rows with the rounding the allocator applied."""
    return [{"requested": size, "allocated": allocated, "reserved": reserved,
             "allocated_over_requested": round(allocated / size, 4) if size else None}
            for size, allocated, reserved in records]


def graph_pool(records: list[tuple[int, int]], layers: int) -> dict:
    """(capture size, pool reserved bytes after capturing it), captured largest first: the total pool, bytes per
    graph and per graph and layer (the unit GRAPH_BYTES_PER_LAYER_* are fitted in)."""
    if not records:
        return {"graphs": 0, "pool_bytes": 0, "bytes_per_graph": 0, "bytes_per_graph_and_layer": 0}
    total = max(reserved for _, reserved in records)
    graphs = len(records)
    return {"graphs": graphs, "largest": max(size for size, _ in records), "pool_bytes": total,
            "bytes_per_graph": total / graphs, "bytes_per_graph_and_layer": total / graphs / layers,
            "after_each": [{"size": size, "pool_bytes": reserved} for size, reserved in records]}


def logged_capture(free_before: int, free_after: int, cached_before: int, cached_after: int) -> dict:
    """vLLM's logged graph memory (free memory lost across the capture) beside the cache the capture released
    (reserved-but-unallocated bytes before minus after): pool = logged + released."""
    logged = free_before - free_after
    released = cached_before - cached_after
    return {"logged_bytes": logged, "cache_released_bytes": released, "pool_bytes": logged + released}


def per_logit(peak_bytes: int, requests: int, vocab: int) -> float:
    return peak_bytes / (requests * vocab)


def build_report(device: dict, readings: dict) -> dict:
    """The JSON the calibration reads: the card, driver and PyTorch version beside every reading."""
    missing = [key for key in ("name", "driver", "torch", "total_bytes") if key not in device]
    if missing:
        raise ValueError(f"device description lacks {', '.join(missing)}")
    return {"format": "vram-detective gpu_probe 1", "device": device, "readings": readings,
            "taken": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def default_out() -> Path:
    return Path(os.environ["OUT"]) / "gpu_probe.json" if os.environ.get("OUT") else Path("gpu_probe.json")


# --- readings (GPU) ----------------------------------------------------------------------------------------------

def _nvml_used(pynvml, handle) -> int:
    return int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)


def _step(torch, pynvml, handle, action) -> dict:
    torch.cuda.synchronize()
    before = (_nvml_used(pynvml, handle), torch.cuda.memory_reserved(), torch.cuda.memory_allocated())
    action()
    torch.cuda.synchronize()
    after = (_nvml_used(pynvml, handle), torch.cuda.memory_reserved(), torch.cuda.memory_allocated())
    return split_growth(after[0] - before[0], after[1] - before[1], after[2] - before[2])


def _decoder(torch, spec: dict, dtype):
    nn = torch.nn

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            h, i = spec["hidden"], spec["intermediate"]
            self.norm1, self.norm2 = nn.RMSNorm(h), nn.RMSNorm(h)
            self.qkv, self.o = nn.Linear(h, 3 * h, bias=False), nn.Linear(h, h, bias=False)
            self.up, self.down = nn.Linear(h, 2 * i, bias=False), nn.Linear(i, h, bias=False)

        def forward(self, x):
            q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
            shape = (x.shape[0], spec["heads"], -1)
            attn = torch.nn.functional.scaled_dot_product_attention(
                q.reshape(shape).unsqueeze(2), k.reshape(shape).unsqueeze(2), v.reshape(shape).unsqueeze(2))
            x = x + self.o(attn.reshape(x.shape))
            gate, up = self.up(self.norm2(x)).chunk(2, dim=-1)
            return x + self.down(torch.nn.functional.silu(gate) * up)

    return nn.Sequential(*[Layer() for _ in range(spec["layers"])]).to("cuda", dtype)


def _capture_one(torch, model, spec: dict, size: int, pool):
    """One graph of `size` tokens into the shared `pool`, warmed up outside the graph as vLLM's capture does;
    the graph and its static input are returned so that they stay alive."""
    static = torch.zeros(size, spec["hidden"], device="cuda", dtype=torch.bfloat16)
    model(static)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        model(static)
    return graph, static


def read_graph_pool(torch, spec: dict = SMALL_DECODER, sizes=CAPTURE_SIZES) -> dict:
    model = _decoder(torch, spec, torch.bfloat16)
    pool = torch.cuda.graph_pool_handle()
    base = torch.cuda.memory_reserved()
    graphs, records = [], []
    with torch.inference_mode():
        for size in sorted(sizes, reverse=True):  # vLLM captures the largest batch first, one shared pool
            graphs.append(_capture_one(torch, model, spec, size, pool))
            torch.cuda.synchronize()
            records.append((size, torch.cuda.memory_reserved() - base))
    return graph_pool(records, spec["layers"])


def read_capture_after_forward(torch, spec: dict = SMALL_DECODER, tokens: int = 8192,
                               sizes=CAPTURE_SIZES[-8:]) -> dict:
    """A forward of `tokens` (its activations stay cached), then a capture measured as vLLM's capture_model does."""
    model = _decoder(torch, spec, torch.bfloat16)
    with torch.inference_mode():
        model(torch.zeros(tokens, spec["hidden"], device="cuda", dtype=torch.bfloat16))
        torch.cuda.synchronize()
        cached = torch.cuda.memory_reserved() - torch.cuda.memory_allocated()
        free_before = torch.cuda.mem_get_info()[0]
        pool, graphs = torch.cuda.graph_pool_handle(), []
        for size in sorted(sizes, reverse=True):  # the first torch.cuda.graph empties the cache
            graphs.append(_capture_one(torch, model, spec, size, pool))
        torch.cuda.synchronize()
        after = logged_capture(free_before, torch.cuda.mem_get_info()[0], cached,
                               torch.cuda.memory_reserved() - torch.cuda.memory_allocated())
    return after | {"forward_tokens": tokens, "graphs": len(graphs)}


def read_sampler(torch, shapes=SAMPLER_SHAPES) -> list[dict]:
    out = []
    for requests, vocab in shapes:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        start = torch.cuda.memory_allocated()
        logits = torch.randn(requests, vocab, device="cuda", dtype=torch.float32)
        logits_peak = torch.cuda.max_memory_allocated() - start
        probs = torch.softmax(logits, dim=-1)
        ordered, index = probs.sort(dim=-1, descending=True)  # the top-k/top-p sort path
        ordered.cumsum(dim=-1)
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - start
        out.append({"requests": requests, "vocab": vocab, "logits_bytes": logits_peak, "sampler_peak_bytes": peak,
                    "bytes_per_logit": round(per_logit(peak, requests, vocab), 3)})
        del logits, probs, ordered, index
    return out


def read_all(torch, pynvml) -> tuple[dict, dict]:
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    before = _nvml_used(pynvml, handle)
    torch.cuda.init()
    torch.empty(1, device="cuda")
    torch.cuda.synchronize()
    readings = {"cuda_context_bytes": context_bytes(before, _nvml_used(pynvml, handle), torch.cuda.memory_reserved())}
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    readings["first_fp16_matmul"] = _step(torch, pynvml, handle, lambda: a @ a)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    readings["first_bf16_linear_with_bias"] = _step(torch, pynvml, handle,
                                                    lambda: torch.nn.functional.linear(b, b, bias))
    records = []
    for size in ALLOCATION_SIZES:
        torch.cuda.empty_cache()
        reserved, allocated = torch.cuda.memory_reserved(), torch.cuda.memory_allocated()
        block = torch.empty(size, dtype=torch.uint8, device="cuda")
        records.append((size, torch.cuda.memory_allocated() - allocated, torch.cuda.memory_reserved() - reserved))
        del block
    readings["allocator_rounding"] = rounding_table(records)
    readings["graph_pool"] = read_graph_pool(torch)
    readings["graph_pool"]["decoder"] = SMALL_DECODER
    readings["sampler"] = read_sampler(torch)
    torch.cuda.empty_cache()
    readings["capture_after_cached_forward"] = read_capture_after_forward(torch)
    properties = torch.cuda.get_device_properties(0)
    device = {"name": properties.name, "total_bytes": int(properties.total_memory),
              "compute_capability": f"{properties.major}.{properties.minor}",
              "driver": pynvml.nvmlSystemGetDriverVersion(), "torch": torch.__version__, "cuda": torch.version.cuda}
    return device, readings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=None, help="JSON file to write (default $OUT/gpu_probe.json)")
    args = parser.parse_args(argv)
    import pynvml
    import torch

    if not torch.cuda.is_available():
        print("no CUDA device: nothing to measure", file=sys.stderr)
        return 2
    device, readings = read_all(torch, pynvml)
    report = build_report(device, readings)
    out = args.out or default_out()
    out.write_text(json.dumps(report, indent=1, default=str) + "\n")
    print(f"wrote {out}: context {readings['cuda_context_bytes'] / MIB:.0f} MiB, graph pool "
          f"{readings['graph_pool']['bytes_per_graph_and_layer'] / MIB:.3f} MiB per graph and layer")
    return 0


if __name__ == "__main__":
    sys.exit(main())
