"""Calibration: the constants fitted to logged figures rather than read from vLLM's source.

Engine rules (the release table, tensor inventories, allocator rounding, liveness counts) cite the engine file
they come from and stay in their modules. The few numbers below were fitted to real startup logs of the ground
truth (groundtruth/dev.jsonl, dev-vllm-more.jsonl): each record says what it stands for and how it was fitted;
the cases it was fitted on are named in scripts/calibration_cases.json (case data stays out of the product), and
`scripts/refit_calibration.py` recomputes each value from them (and reports its error on the held-out cases).

The split of the dev cases: a case is a fit case when calibration_cases.json names it for some record; every other
case is held out. Cases whose fields lack what a fit needs but whose notes state it are completed there too
(`vllm_case_assumptions`), for the refit only.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...units import GIB, MIB

UNIT_BYTES = {"GiB": GIB, "MiB": MIB}


@dataclass(frozen=True)
class Fitted:
    name: str
    value: float
    unit: str  # "GiB" / "MiB" (sizes; `bytes` converts), "x" (a ratio), "B/logit"
    models: str  # what the constant stands for
    method: str  # how the value follows from its cases (scripts/calibration_cases.json names them)
    rounding: float = 0.0  # the fitted value is a multiple of this; 0 for a choice among `choices`
    choices: tuple[float, ...] = ()  # a discrete fit picks one of these
    refit_note: str = ""  # why today's refit differs from the shipped value, when it does

    def __post_init__(self):
        if not isinstance(self.method, str) or not isinstance(self.rounding, (int, float)):
            raise TypeError(f"{self.name}: Fitted(name, value, unit, models, method, rounding, ...): the cases it "
                            "was fitted on live in scripts/calibration_cases.json")

    @property
    def bytes(self) -> int:
        return int(self.value * UNIT_BYTES[self.unit])


_NON_TORCH = "non_torch_memory logged at TP=1 outside the global eras (V0-d, V1-a), where it is the kernel term alone"

NON_TORCH_HOPPER_PLUS = Fitted(
    "NON_TORCH_HOPPER_PLUS", 0.14, "GiB",
    "non-torch memory that grows during profiling on one Hopper+ GPU (lazily loaded kernels, cuBLAS/cuBLASLt handles)",
    f"median over the cases of the {_NON_TORCH} (Hopper logs of 0.12-0.16 GiB)", 0.01)

NON_TORCH_OTHER = Fitted(
    "NON_TORCH_OTHER", 0.05, "GiB", "the same on GPUs before Hopper (and on GPUs a case does not name)",
    f"median over the cases of the {_NON_TORCH} (logs of 0.02-0.08 GiB)", 0.01)

NCCL_PER_RANK = Fitted(
    "NCCL_PER_RANK", 0.15, "GiB",
    "NCCL communicators + custom all-reduce buffers per multi-GPU rank, when they land inside the budget",
    "median over the cases of the logged non_torch_memory at TP>1 (V0, V1 0.9.1-0.10.2) minus the modelled kernel "
    "term of the GPU", 0.01)

NON_TORCH_HOPPER_PLUS_FROM_0_18 = Fitted(
    "NON_TORCH_HOPPER_PLUS_FROM_0_18", 0.25, "GiB",
    "non-torch growth on one Hopper+ GPU from 0.18, where vLLM reads it after profile_cudagraph_memory's captures "
    "(gpu_worker.py determine_available_memory 0.18.0): kernels, cuBLAS/cuBLASLt handles, graph-capture residue",
    "median over the cases of the logged non_torch_memory at TP=1 (0.19.0 logs on H100 of 0.25 GiB)", 0.01)

NCCL_LAZY_COMMUNICATOR_HOPPER_PLUS = Fitted(
    "NCCL_LAZY_COMMUNICATOR_HOPPER_PLUS", 0.32, "GiB",
    "the TP device group's NCCL communicator on Hopper+ (NVSwitch servers, cuMem and NVLS on from 0.11), created "
    "lazily by the profile run's logits all-gather (0.11-0.24)",
    "median over the cases of the logged non_torch_memory at TP>1 minus the modelled rest (the 0.18+ Hopper term and "
    "the FlashInfer all-reduce workspace)", 0.01)

CUDA_CONTEXT = Fitted(
    "CUDA_CONTEXT", 0.30, "GiB",
    "CUDA context of the vLLM worker (counted by the global eras V0-d / V1-a, outside the budget otherwise)",
    "median over the cases of the logged non_torch_memory at TP=1 in V0-d minus the modelled kernel term", 0.01)

GLOBAL_ERA_PER_EXTRA_RANK = Fitted(
    "GLOBAL_ERA_PER_EXTRA_RANK", 0.76, "GiB",
    "other local ranks' contexts / P2P mappings on each GPU in the global eras (V0-d, V1-a), per extra rank",
    "median over the cases of (logged non_torch_memory - the modelled context, kernels and NCCL) / extra local "
    "ranks (one observation: an estimate)", 0.01,
    refit_note="the refit gives 0.73: 0.76 matches (5.68 - 0.35) / 7, the 3090's logged TP=1 figure (#10517) "
               "taken as the rest, where the modelled rest of an H200 at TP 8 is 0.59 GiB (context 0.30 + Hopper kernels 0.14 + "
               "NCCL 0.15); kept at 0.76 until the model is rescored")

# Graph pool per captured graph and per decoder layer (piecewise graphs keep one piece per layer); vLLM itself only
# measures it. Logged figure: "Graph capturing finished ... took" / "CUDAGraph memory", else the 0.18+ estimate line.
_GRAPHS = ("median over the cases of the logged CUDA-graph memory / (graphs x layers the tool counts for the case), "
           "in MiB")

GRAPH_BYTES_PER_LAYER_V0 = Fitted(
    "GRAPH_BYTES_PER_LAYER_V0", 0.14, "MiB", "V0 decode graphs: pool bytes per graph and decoder layer",
    _GRAPHS, 0.01)
# (issue 14 refit: 0.13 -> 0.14, the rounding of 0.13 GiB / (35 x 28) = 0.136 MiB; no held-out case has V0 graphs)


GRAPH_BYTES_PER_LAYER_V1_PIECEWISE = Fitted(
    "GRAPH_BYTES_PER_LAYER_V1_PIECEWISE", 0.30, "MiB", "V1 piecewise-only graphs (<= 0.10): per graph and layer",
    _GRAPHS, 0.01)

GRAPH_BYTES_PER_LAYER_V1_FULL_AND_PIECEWISE = Fitted(
    "GRAPH_BYTES_PER_LAYER_V1_FULL_AND_PIECEWISE", 0.17, "MiB",
    "V1 FULL_AND_PIECEWISE graphs (0.11+): per graph and layer",
    _GRAPHS, 0.01)

# vLLM's own CUDA-graph estimate (0.18+, profile.py cuda_graphs) on Hopper+: its two measured captures and the pool
# the real capture takes over it (fit cases: some of the 0.19 H100 runs, the others held out).
GRAPH_FIRST_CAPTURE_HOPPER_PLUS = Fitted(
    "GRAPH_FIRST_CAPTURE_HOPPER_PLUS", 0.37, "GiB",
    "profile_cudagraph_memory's first capture (the largest batch: its warm-up and graph pool, driver memory)",
    "median over the cases of the logged 'Estimated CUDA graph memory' minus the modelled second captures", 0.01)

GRAPH_SECOND_CAPTURE_PER_LAYER_HOPPER_PLUS = Fitted(
    "GRAPH_SECOND_CAPTURE_PER_LAYER_HOPPER_PLUS", 0.11, "MiB",
    "profile_cudagraph_memory's second capture of a mode (what one more graph adds), per decoder layer",
    "median over the cases of (the logged estimate - the first capture) / (sum over modes of graphs - 1) / layers",
    0.01)

GRAPH_ACTUAL_OVER_ESTIMATE_HOPPER_PLUS = Fitted(
    "GRAPH_ACTUAL_OVER_ESTIMATE_HOPPER_PLUS", 1.30, "x",
    "the pool capture_model takes ('CUDA graph pool memory: X GiB (actual)') over the estimate",
    "median over the cases of the logged actual pool over the modelled estimate", 0.01)

RESERVED_OVER_ALLOCATED_AT_PEAK = Fitted(
    "RESERVED_OVER_ALLOCATED_AT_PEAK", 1.30, "x",
    "V0-c (<= 0.6.3) measures the profile with free memory, i.e. reserved bytes: the caching allocator's segments "
    "around the activation peak over the allocated-bytes model",
    "median over the cases of the activation peak the logged GPU blocks imply (KV budget of the logged blocks + "
    "half a block) over the allocated-bytes model of the peak", 0.05)
# (issue 14 refit: 1.25 -> 1.30 once the allocated-bytes model gave 3.375 GiB for both fit cases; error of the KV
# budget of the logged blocks on the held-out cases 5.7 % / 10.2 % (median / p90) -> 1.3 % / 1.3 %)


SAMPLER_BYTES_PER_LOGIT_FROM_0_28 = Fitted(
    "SAMPLER_BYTES_PER_LOGIT_FROM_0_28", 39, "B/logit",
    "the sampler footprint of the profile run from 0.28 (FlashInfer sampler by default, not modelled tensor by "
    "tensor): the sort path's 39 or the Triton path's 14 bytes per logits element",
    "the modelled footprint whose activation peak is closest to the logged one (median relative error)",
    choices=(39, 14))

RECORDS: tuple[Fitted, ...] = (
    NON_TORCH_HOPPER_PLUS, NON_TORCH_OTHER, NCCL_PER_RANK, CUDA_CONTEXT, GLOBAL_ERA_PER_EXTRA_RANK,
    NON_TORCH_HOPPER_PLUS_FROM_0_18, NCCL_LAZY_COMMUNICATOR_HOPPER_PLUS,
    GRAPH_FIRST_CAPTURE_HOPPER_PLUS, GRAPH_SECOND_CAPTURE_PER_LAYER_HOPPER_PLUS, GRAPH_ACTUAL_OVER_ESTIMATE_HOPPER_PLUS,
    GRAPH_BYTES_PER_LAYER_V0, GRAPH_BYTES_PER_LAYER_V1_PIECEWISE, GRAPH_BYTES_PER_LAYER_V1_FULL_AND_PIECEWISE,
    RESERVED_OVER_ALLOCATED_AT_PEAK, SAMPLER_BYTES_PER_LOGIT_FROM_0_28,
)

def probe_readings(report: dict) -> dict[str, tuple[float, str, str]]:
    """benchmarks/gpu_probe.py's JSON -> {record name: (measured value in the record's unit, unit, what)}: the
    measured counterparts of the fitted records, for scripts/refit_calibration.py to set beside them."""
    if report.get("format") != "vram-detective gpu_probe 1":
        raise ValueError("not a gpu_probe report (format 'vram-detective gpu_probe 1')")
    device, readings = report["device"], report["readings"]
    hopper = tuple(int(part) for part in str(device.get("compute_capability", "0.0")).split(".")) >= (9, 0)
    kernels = sum(readings[step]["non_torch_bytes"] for step in ("first_fp16_matmul", "first_bf16_linear_with_bias")
                  if step in readings)
    on = f"{device['name']}, driver {device['driver']}, torch {device['torch']}"
    out = {"CUDA_CONTEXT": (readings["cuda_context_bytes"] / GIB, "GiB", f"CUDA context on {on}"),
           ("NON_TORCH_HOPPER_PLUS" if hopper else "NON_TORCH_OTHER"): (
               kernels / GIB, "GiB", f"non-torch growth of the first matmuls (kernels, cuBLAS/cuBLASLt) on {on}")}
    pool = readings.get("graph_pool", {})
    if pool.get("graphs"):
        out["GRAPH_BYTES_PER_LAYER_V1_PIECEWISE"] = (
            pool["bytes_per_graph_and_layer"] / MIB, "MiB",
            f"{pool['graphs']} graphs of a {pool.get('decoder', {}).get('layers', '?')}-layer decoder, one pool, on {on}")
    if readings.get("sampler"):
        out["SAMPLER_BYTES_PER_LOGIT_FROM_0_28"] = (
            max(row["bytes_per_logit"] for row in readings["sampler"]), "B/logit",
            f"softmax + sort peak at the dummy sampler shapes on {on}")
    return out
