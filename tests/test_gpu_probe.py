"""benchmarks/gpu_probe.py's bookkeeping on recorded-looking numbers (no GPU needed), and the calibration's
reading of its report."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from vram_detective.engines.vllm import calibration
from vram_detective.engines.vllm.profile import capture_sizes
from types import SimpleNamespace

from vram_detective.engines.vllm.releases import release

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import gpu_probe  # noqa: E402

MIB = 1 << 20
H200 = {"name": "NVIDIA H200", "total_bytes": 150_109_880_320, "compute_capability": "9.0",
        "driver": "570.124.06", "torch": "2.7.1+cu126", "cuda": "12.6"}


def _report() -> dict:
    readings = {
        "cuda_context_bytes": gpu_probe.context_bytes(0, 534 * MIB, 2 * MIB),
        "first_fp16_matmul": gpu_probe.split_growth(40 * MIB, 32 * MIB, 0),
        "first_bf16_linear_with_bias": gpu_probe.split_growth(10 * MIB, 2 * MIB, 0),
        "graph_pool": gpu_probe.graph_pool([(512, 200 * MIB), (504, 200 * MIB), (1, 204 * MIB)], layers=8),
        "sampler": [{"requests": 256, "vocab": 128256, "bytes_per_logit": 12.0},
                    {"requests": 1024, "vocab": 151936, "bytes_per_logit": 16.5}],
    }
    return gpu_probe.build_report(H200, readings)


def test_readings_are_differences_split_inside_and_outside_the_allocator():
    assert gpu_probe.context_bytes(1000 * MIB, 1534 * MIB, 2 * MIB) == 532 * MIB
    assert gpu_probe.split_growth(40 * MIB, 32 * MIB, 0) == {
        "allocator_reserved_bytes": 32 * MIB, "allocator_allocated_bytes": 0, "non_torch_bytes": 8 * MIB}
    rows = gpu_probe.rounding_table([(513, 1024, 2 * MIB), (MIB + 1, MIB + 512, 20 * MIB)])
    assert rows[0] == {"requested": 513, "allocated": 1024, "reserved": 2 * MIB, "allocated_over_requested": 1.9961}


def test_graph_pool_per_graph_and_layer():
    pool = gpu_probe.graph_pool([(512, 200 * MIB), (504, 200 * MIB), (1, 204 * MIB)], layers=8)
    assert pool["graphs"] == 3 and pool["largest"] == 512 and pool["pool_bytes"] == 204 * MIB
    assert pool["bytes_per_graph_and_layer"] == pytest.approx(204 * MIB / 24)
    assert gpu_probe.graph_pool([], 8)["graphs"] == 0
    assert gpu_probe.per_logit(39 * 256 * 1000, 256, 1000) == 39.0


def test_logged_capture_is_the_pool_less_the_cache_it_released():
    # file28022205292 logs -0.88 GiB: a 1.42 GiB pool with 2.30 GiB of cached activations released
    gib = 1 << 30
    reading = gpu_probe.logged_capture(free_before=int(10.00 * gib), free_after=int(10.88 * gib),
                                       cached_before=int(2.30 * gib), cached_after=0)
    assert reading["logged_bytes"] == int(10.00 * gib) - int(10.88 * gib)
    assert reading["pool_bytes"] == int(10.00 * gib) - int(10.88 * gib) + int(2.30 * gib)
    assert round(reading["pool_bytes"] / gib, 2) == 1.42


def test_the_probe_captures_vllms_own_sizes():
    # capture_sizes reads only these two settings (V1 0.12+, max_num_seqs 256: the default of the probe)
    settings = SimpleNamespace(max_num_seqs=256, max_num_batched_tokens=8192)
    assert gpu_probe.CAPTURE_SIZES == capture_sizes(settings, release((0, 12, 0), "v1"))
    assert len(gpu_probe.CAPTURE_SIZES) == 51 and gpu_probe.CAPTURE_SIZES[-1] == 512


def test_report_needs_card_driver_and_torch(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="driver, torch"):
        gpu_probe.build_report({"name": "x", "total_bytes": 1}, {})
    monkeypatch.setenv("OUT", str(tmp_path))
    assert gpu_probe.default_out() == tmp_path / "gpu_probe.json"
    monkeypatch.delenv("OUT")
    assert gpu_probe.default_out() == Path("gpu_probe.json")
    path = tmp_path / "probe.json"
    path.write_text(json.dumps(_report()))
    assert json.loads(path.read_text())["device"]["driver"] == "570.124.06"


def test_calibration_reads_the_probe_as_its_records():
    readings = calibration.probe_readings(_report())
    assert readings["CUDA_CONTEXT"][0] == pytest.approx(532 / 1024) and readings["CUDA_CONTEXT"][1] == "GiB"
    # Hopper: the kernels' growth (8 + 8 MiB outside the allocator) stands for NON_TORCH_HOPPER_PLUS
    assert readings["NON_TORCH_HOPPER_PLUS"][0] == pytest.approx(16 / 1024)
    assert readings["GRAPH_BYTES_PER_LAYER_V1_PIECEWISE"][0] == pytest.approx(204 / 24)
    assert readings["SAMPLER_BYTES_PER_LOGIT_FROM_0_28"][0] == 16.5
    assert set(readings) <= {record.name for record in calibration.RECORDS}
    with pytest.raises(ValueError, match="not a gpu_probe report"):
        calibration.probe_readings({"format": "other"})
