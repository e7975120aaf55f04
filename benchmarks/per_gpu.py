"""Per-GPU figures (the bars `explain` draws for several GPUs) against the real multi-GPU logs in groundtruth/.

  python benchmarks/per_gpu.py [--catalog-only]

- llama.cpp / Ollama: every case whose log prints buffers on two or more CUDA devices, planned as `score` plans
  it (engines/llamacpp/accuracy.py plan_case); each device's model / KV / compute buffer and their sum (what that
  GPU holds besides its CUDA context) predicted vs printed, in MiB.
- vLLM: every multi-GPU case whose log prints a figure from a worker other than rank 0 (`Worker_TP1`,
  `Worker_PP1`, `rank=3`), planned as `score` plans it (engines/vllm/scoring.py); that worker's "Model loading
  took" and "Available KV cache memory" beside the device's predicted weights and available KV; and the
  nvidia-smi rows a log carries (`| 14214MiB / 24564MiB |`) beside each device's predicted nvidia-smi figure.
- SGLang: the TP 2 case's TP0 figures beside GPU 0 and GPU 1 (SGLang logs print TP0 only).
Prints tables; asserts nothing (tests/test_per_gpu.py holds the checks)."""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

GIB, MIB = 1 << 30, 1 << 20
_DEVICE_KEY = re.compile(r"^cuda(\d+)_(model|kv|compute)_buffer_mib$")
_WORKER = (re.compile(r"Worker_TP(\d+)(?:_EP\d+)?(?:_PP(\d+))?"), re.compile(r"Worker_PP(\d+)"),
           re.compile(r"\brank=(\d+)"))
_SMI_ROW = re.compile(r"\|\s+(\d+)MiB\s*/\s*(\d+)MiB\s*\|")


def _cases(name: str) -> list[dict]:
    with open(ROOT / "groundtruth" / name, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _table(headers: tuple[str, ...], rows: list[tuple]) -> str:
    from vram_detective.term import table

    return "\n".join(table(headers, rows, "l" + "r" * (len(headers) - 1), None))


def llamacpp_rows(catalog_only: bool) -> tuple[list[tuple], list[str]]:
    from vram_detective import scoring
    from vram_detective.api import explain_spec
    from vram_detective.engines.llamacpp import accuracy
    from vram_detective.hardware import custom_gpu

    rows, skipped = [], []
    for case in _cases("dev-llamacpp.jsonl"):
        observed = case.get("observed") or {}
        devices = sorted({int(m.group(1)) for key in observed if (m := _DEVICE_KEY.match(key))})
        if len(devices) < 2:
            continue
        model = scoring.case_model(case, catalog_only)
        plan = accuracy.plan_case(case, file_at_hand=not isinstance(model, str) and model.gguf is not None)
        if isinstance(plan, str) or isinstance(model, str):
            skipped.append(f"{case['id']}: {plan if isinstance(plan, str) else model}")
            continue
        try:
            b = explain_spec(model.spec, custom_gpu(accuracy.PLAN_GPU_BYTES), plan.engine, plan.version, plan.settings,
                             model.gguf)
        except Exception as error:  # noqa: BLE001 - a benchmark reports every case, planned or not
            skipped.append(f"{case['id']}: {error}")
            continue
        by_name = {d.role.split(":")[0]: d for d in b.devices}
        for index in devices:
            device = by_name.get(f"CUDA{index}")
            parts = {p.key.split(".")[-1]: p.bytes / MIB for p in device.parts} if device else {}
            for kind in ("model", "kv", "compute"):
                if kind in plan.not_compared:
                    continue
                seen = observed.get(f"cuda{index}_{kind}_buffer_mib")
                if seen is None:
                    continue
                rows.append((case["id"][:44], f"GPU {index}", kind, f"{seen:,.1f}", _mib(parts.get(kind)),
                             _error(parts.get(kind), seen)))
            printed = [observed.get(f"cuda{index}_{k}_buffer_mib") for k in ("model", "kv", "compute")]
            if None not in printed and "model" not in plan.not_compared:
                predicted = sum(parts.get(k, 0.0) for k in ("model", "kv", "compute")) if device else None
                rows.append((case["id"][:44], f"GPU {index}", "sum", f"{sum(printed):,.1f}", _mib(predicted),
                             _error(predicted, sum(printed))))
    return rows, skipped


def _mib(value) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _error(predicted, observed) -> str:
    if predicted is None or not observed:
        return "-"
    return f"{(predicted - observed) / observed * 100:+.1f}%"


def _worker(line: str, tp: int) -> int | None:
    """The global rank a vLLM worker line comes from (TP rank + PP stage x TP), None for an unnamed one."""
    found = _WORKER[0].search(line)
    if found:
        return int(found.group(1)) + int(found.group(2) or 0) * tp
    found = _WORKER[1].search(line)
    if found:
        return int(found.group(1)) * tp
    found = _WORKER[2].search(line)
    return int(found.group(1)) if found else None


def vllm_rows(catalog_only: bool) -> tuple[list[tuple], list[tuple], list[str]]:
    from vram_detective.engines.vllm import scoring as vllm_scoring

    figures = (("weights", re.compile(r"Model loading took ([\d.]+) ?GiB")),
               ("available KV", re.compile(r"Available KV cache memory: ([\d.]+) GiB")))
    rows, smi_rows, skipped = [], [], []
    for name in ("dev.jsonl", "dev-vllm-modern.jsonl", "dev-vllm-more.jsonl"):
        for case in _cases(name):
            if (case.get("num_gpus") or 1) < 2 or case.get("engine") not in (None, "vllm"):
                continue
            log = case.get("log", "")
            smi = [(int(a), int(b)) for a, b in _SMI_ROW.findall(log)]
            lines = [line for line in log.splitlines() if any(p.search(line) for _, p in figures)]
            if not smi and not any(_worker(line, 1) not in (None, 0) for line in lines):
                continue
            prediction, why = vllm_scoring._predict(case, catalog_only)
            b = prediction.breakdown if prediction is not None else None
            if b is None or not b.devices:
                skipped.append(f"{case['id']}: {why or (prediction and prediction.refusal) or 'no per-GPU plan'}")
                continue
            tp = int(b.setting("tensor_parallel_size"))
            stages = {r.pipeline_stage: r for r in b.per_rank}
            for line in lines:
                rank = _worker(line, tp)
                if rank is None or rank >= len(b.devices):
                    continue
                device, stage = b.devices[rank], rank // tp
                for label, pattern in figures:
                    found = pattern.search(line)
                    if not found:
                        continue
                    seen = float(found.group(1))
                    if label == "weights":
                        predicted = device.weights_bytes / GIB
                    else:
                        predicted = (stages[stage].kv_cache_bytes if stage in stages else b.kv_cache_bytes) / GIB
                    rows.append((case["id"][:44], device.name, device.role, label, f"{seen:.2f}", f"{predicted:.2f}",
                                 _error(predicted, seen)))
            for index, (used, total) in enumerate(smi[: len(b.devices)]):
                device = b.devices[index]
                smi_rows.append((case["id"][:44], device.name, f"{used:,}", f"{device.nvidia_smi_used_mib:,}",
                                 _error(device.nvidia_smi_used_mib, used), f"{total:,}"))
    return rows, smi_rows, skipped


def sglang_rows(catalog_only: bool) -> list[tuple]:
    from vram_detective import scoring
    from vram_detective.api import explain_spec
    from vram_detective.engines.sglang import scoring as sglang_scoring

    rows = []
    for case in _cases("dev-sglang.jsonl"):
        if (case.get("num_gpus") or 1) < 2:
            continue
        model = scoring.sizable_case_model(case, catalog_only)
        inputs = sglang_scoring.case_inputs(case, model) if not isinstance(model, str) else model
        if isinstance(inputs, str):
            continue
        b = explain_spec(model.spec, inputs.device, "sglang", ".".join(map(str, inputs.version)), inputs.settings)
        observed = case["observed"]
        for device in b.devices:
            rows.append((case["id"][:44], device.name, "weights GB", f"{observed.get('weights_mem_usage_gb', 0):.2f}",
                         f"{device.weights_bytes / GIB:.2f}"))
            if "nvidia_smi_used_mib" in observed:
                rows.append((case["id"][:44], device.name, "nvidia-smi MiB", f"{observed['nvidia_smi_used_mib']:,}",
                             f"{device.nvidia_smi_used_mib:,}"))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--catalog-only", action="store_true", help="models from the built-in catalog only")
    args = parser.parse_args(argv)
    rows, skipped = llamacpp_rows(args.catalog_only)
    print("llama.cpp / Ollama: each GPU's buffers, printed vs predicted (MiB)")
    print(_table(("case", "GPU", "buffer", "printed", "predicted", "error"), rows))
    for line in skipped:
        print(f"  not planned: {line}")
    rows, smi_rows, skipped = vllm_rows(args.catalog_only)
    print("\nvLLM: figures printed by each worker vs that GPU's prediction (GiB)")
    print(_table(("case", "GPU", "rank", "figure", "printed", "predicted", "error"), rows))
    if smi_rows:
        print("\nvLLM: nvidia-smi rows in the logs vs each GPU's predicted nvidia-smi (MiB)")
        print(_table(("case", "GPU", "printed", "predicted", "error", "card"), smi_rows))
    for line in skipped:
        print(f"  not planned: {line}")
    print("\nSGLang: TP0's printed figures vs each GPU's prediction")
    print(_table(("case", "GPU", "figure", "printed (TP0)", "predicted"), sglang_rows(args.catalog_only)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
