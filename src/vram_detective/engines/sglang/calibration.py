"""Calibration: SGLang's constants fitted to logged figures rather than read from its source.

Same shape as engines/vllm/calibration.py: each record says how it was fitted; the ground-truth cases
(groundtruth/dev-sglang.jsonl) it was fitted on are named in scripts/calibration_cases.json, and
`scripts/refit_sglang_calibration.py` recomputes every value from those cases and reports the error on the cases
held out.
"""
from __future__ import annotations

from ..vllm.calibration import Fitted

LOAD_OVERHEAD = Fitted(
    "LOAD_OVERHEAD", 0.05, "GiB",
    "free memory that 'Load weight end. mem usage' counts beyond the weight tensors: kernel modules loaded lazily by "
    "the first copies onto the GPU and the rotary cache's float32 staging blocks (the tensors' own segments are "
    "allocator.py's)",
    "median over the cases of logged mem usage minus the tensors one rank holds and their segments (0.01-0.12 GiB)", 0.01)

CUDA_CONTEXT = Fitted(
    "CUDA_CONTEXT", 0.52, "GiB",
    "CUDA context, torch and NCCL/custom all-reduce set up before 'Load weight begin' (total - avail at load begin)",
    "median over the cases of the catalog's CUDA total minus the logged free memory before weights "
    "(logged load begin, else load end + mem usage): 0.31-0.90 GiB", 0.01)

INIT_DIST = Fitted(
    "INIT_DIST", 0.11, "GiB",
    "the part of CUDA_CONTEXT taken by init_torch_distributed (NCCL communicators, custom all-reduce buffers): "
    "'Init torch distributed ends. mem usage' (model_runner.py: free memory before minus after, rank 0); the rest "
    "of CUDA_CONTEXT is the CUDA context and torch before it",
    "median over the startup cases that print the line of its logged mem usage (0.09-0.13 GiB)", 0.01)

BACKEND_INIT = Fitted(
    "BACKEND_INIT", 0.64, "GiB",
    "taken between 'Memory pool end' and 'Capture cuda graph begin': cuBLAS init, the attention backend's workspace "
    "buffers and the kernels they load",
    "median over the cases of logged memory-pool-end avail minus graph-capture-begin avail (0.63-1.12 GiB)", 0.01)

GRAPH_PER_LAYER_BS = Fitted(
    "GRAPH_PER_LAYER_BS", 1.0, "MiB",
    "decode CUDA graphs: memory per captured batch size and decoder layer (graph nodes, their private pool)",
    "median over the cases of logged graph mem usage / (captured batch sizes x layers) (0.33-1.14 MiB)", 0.1)

PIECEWISE_PER_SIZE = Fitted(
    "PIECEWISE_PER_SIZE", 32.0, "MiB",
    "piecewise (prefill) CUDA graphs of 0.5.8+: memory per captured token count",
    "the one case's logged piecewise mem usage / its captured token counts (2.32 GiB / 74)", 1.0)

ALL = (LOAD_OVERHEAD, CUDA_CONTEXT, INIT_DIST, BACKEND_INIT, GRAPH_PER_LAYER_BS, PIECEWISE_PER_SIZE)
