"""Refit SGLang's calibration constants (src/vram_detective/engines/sglang/calibration.py) from the ground truth.

    python scripts/refit_sglang_calibration.py                 # shipped vs refit value, error on fit / held-out cases
    python scripts/refit_sglang_calibration.py --groundtruth F # another dev-sglang.jsonl

Each constant is one term of a figure the logs print; a case's estimate is that figure minus what the tool models
around the term (weights: logged mem usage minus the tensors and allocator segments of one rank; context: the
catalog's CUDA total minus the logged free memory before weights; distributed init: its logged mem usage; backend: memory-pool-end minus graph-begin
avail; graphs: logged graph memory over (captured batch sizes x layers); piecewise: over its token counts). The
refit is the median estimate over the cases scripts/calibration_cases.json names for the record, rounded to its step. The error is |estimate - value|
in the record's unit on the fitted cases and on the others that print the figure (held out).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

sys.path.insert(0, str(ROOT / "scripts"))
import calibration_cases  # noqa: E402
from vram_detective.api import model_spec  # noqa: E402
from vram_detective.engines.sglang import accuracy, calibration  # noqa: E402
from vram_detective.engines.sglang.plan import startup  # noqa: E402
from vram_detective.hardware import UnknownGpuError, custom_gpu, find_gpu  # noqa: E402
from vram_detective.units import GIB, MIB  # noqa: E402

DEFAULT_CASES = ROOT / "groundtruth" / "dev-sglang.jsonl"
# cases whose GPU is not named but whose notes name it (for the context term only)
NOTED_GPU = {"sglang-qwen3-8b-b200-clean-startup-ref": "B200", "sglang-llama31-8b-docs-notebook-80g": "H100",
             "sglang-pr4760-llama31-8b-fa3-80g": "H100"}
UNIT = {"GiB": GIB, "MiB": MIB}


def _startup(case: dict):
    if accuracy.unmodelled(case) or not case.get("model"):
        return None
    try:
        spec = model_spec(case["model"])
        name = case.get("gpu") or NOTED_GPU.get(case["id"])
        gpu = find_gpu(name) if name else custom_gpu(80 * GIB, name="nominal", compute_capability=(9, 0))
        return spec, gpu, name is not None, startup(spec, gpu, accuracy.user_settings(case), case.get("engine_version"))
    except (LookupError, ValueError, UnknownGpuError):
        return None


def estimates(case: dict) -> dict[str, float]:
    """Each constant's estimate from one case, in bytes (graphs: per unit)."""
    found = _startup(case)
    if found is None:
        return {}
    spec, gpu, gpu_known, st = found
    observed, out = case["observed"], {}
    logged = accuracy.logged_weights(observed)
    if logged is not None:
        out["LOAD_OVERHEAD"] = logged * GIB - st.weights_tensors - st.segments
    before = accuracy.logged_free_before(observed)
    if before is not None and gpu_known:
        out["CUDA_CONTEXT"] = gpu.cuda_total_bytes - before * GIB
    if observed.get("init_dist_mem_usage_gb") is not None:
        out["INIT_DIST"] = observed["init_dist_mem_usage_gb"] * GIB
    begin = observed.get("cuda_graph_begin_avail_mem_gb")
    if begin is not None and "mem_pool_end_avail_mem_gb" in observed:
        out["BACKEND_INIT"] = (observed["mem_pool_end_avail_mem_gb"] - begin) * GIB
    if observed.get("cuda_graph_mem_usage_gb") and st.graph_batch_sizes:
        units = len(st.graph_batch_sizes) * spec.num_layers // st.settings.pp_size
        out["GRAPH_PER_LAYER_BS"] = observed["cuda_graph_mem_usage_gb"] * GIB / units
    if observed.get("piecewise_cuda_graph_mem_usage_gb") and st.piecewise_sizes:
        out["PIECEWISE_PER_SIZE"] = observed["piecewise_cuda_graph_mem_usage_gb"] * GIB / st.piecewise_sizes
    return out


def _round(value: float, step: float) -> float:
    return round(round(value / step) * step, 6) if step else value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groundtruth", default=str(DEFAULT_CASES))
    args = parser.parse_args()
    cases = [json.loads(line) for line in Path(args.groundtruth).read_text().splitlines() if line.strip()]
    per_case = {case["id"]: estimates(case) for case in cases}
    for record in calibration.ALL:
        unit = UNIT[record.unit]
        fit = [per_case[i][record.name] / unit for i in calibration_cases.fitted_on("sglang", record) if record.name in per_case.get(i, {})]
        held = {i: e[record.name] / unit for i, e in per_case.items() if record.name in e and i not in calibration_cases.fitted_on("sglang", record)}
        refit = _round(statistics.median(fit), record.rounding) if fit else float("nan")
        print(f"{record.name}: shipped {record.value} {record.unit}, refit {refit} (from {len(fit)} cases)")
        print(f"  fit cases     : " + ", ".join(f"{v:.3f}" for v in fit))
        errors = [abs(v - record.value) for v in held.values()]
        print(f"  held out ({len(held)}): " + ", ".join(f"{i[:32]} {v:.3f}" for i, v in held.items())
              + (f"; median |error| {statistics.median(errors):.3f} {record.unit}" if errors else ""))


if __name__ == "__main__":
    main()
