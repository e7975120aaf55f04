"""SGLang pool accuracy on groundtruth/dev-sglang.jsonl: weights and #tokens end to end vs logged.

Weights are a STAND-IN: vLLM's weights figure (api.explain(..., vllm_version=...).weights_bytes) until the
SGLang weights path is wired. Free memory before weights comes from the log's 'Load weight begin' when
printed, else from logged end + logged usage. Run: PYTHONPATH=src python3 benchmarks/sglang_accuracy.py
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from vram_detective.api import explain
from vram_detective.engines.sglang.pool import cell_size, predict_pool, tokens_from_logged_memory
from vram_detective.engines.sglang.settings import from_values, resolve
from vram_detective.model.config import parse_config
from vram_detective.model.sources import load_model
from vram_detective.units import GIB

CASES = Path(sys.argv[1] if len(sys.argv) > 1 else "/work/shared/groundtruth/dev-sglang.jsonl")
GPU_MIB = {"NVIDIA L4": 23034, "NVIDIA GeForce RTX 3090": 24576, "NVIDIA GeForce RTX 4090": 24564,
           "NVIDIA H100 80GB HBM3": 81559, "NVIDIA GeForce RTX 4070 Ti SUPER": 16376,
           "NVIDIA GeForce RTX 5080": 16303}


def _row(case: dict) -> str | None:
    observed, settings_in = case["observed"], case["settings"]
    logged = observed.get("kv_cache_tokens", observed.get("max_total_num_tokens"))
    begin = observed.get("load_begin_avail_mem_gb")
    if begin is None and "weights_mem_usage_gb" in observed and "load_end_avail_mem_gb" in observed:
        begin = observed["load_end_avail_mem_gb"] + observed["weights_mem_usage_gb"]
    if not case.get("model") or logged is None or begin is None:
        return None
    try:
        spec = parse_config(load_model(case["model"], source="catalog").config, case["model"])
        weights = explain(case["model"], "H100", vllm_version="0.8.5", source="catalog",
                          tensor_parallel_size=settings_in.get("tp_size", 1)).weights_bytes
    except Exception as error:  # noqa: BLE001 - a benchmark reports and goes on
        return f"{case['id'][:44]:44}  skipped: {type(error).__name__}"
    gpu_mib = GPU_MIB.get(case.get("gpu") or "", round(begin * 1024 + 600))
    values = {key: settings_in.get(key) for key in ("tp_size", "mem_fraction_static", "page_size", "context_length")}
    settings = resolve(from_values(values), case["engine_version"], gpu_mib)
    prediction = predict_pool(int(begin * GIB), weights, spec, settings, case["engine_version"])
    logged_weights = observed.get("weights_mem_usage_gb", begin - observed.get("load_end_avail_mem_gb", begin))
    line = (f"{case['id'][:44]:44} mfs={settings.mem_fraction_static:<6} W {weights / GIB:6.2f} vs {logged_weights:6.2f}"
            f"  tokens {prediction.max_total_num_tokens:>9} vs {logged:>9} ({prediction.max_total_num_tokens / logged - 1:+.1%})")
    if "load_end_avail_mem_gb" in observed:
        found = tokens_from_logged_memory(begin, observed["load_end_avail_mem_gb"], settings.mem_fraction_static,
                                          cell_size(spec, settings.tp_size).bytes_per_token, case["engine_version"],
                                          settings.page_size)
        line += f"  from-log {found.estimate:>9} {'in' if logged in found else 'OUT'}"
    return line


def main() -> None:
    for case in map(json.loads, CASES.read_text().splitlines()):
        row = _row(case)
        if row:
            print(row)


if __name__ == "__main__":
    main()
