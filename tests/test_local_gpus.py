"""`--gpu auto` / explain without --gpu on a machine with GPUs: fake `nvidia-smi` and `rocm-smi` programs on PATH
print what the real ones print, and the engines see the free memory they would find."""
from __future__ import annotations

import json
import os
import stat
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from vram_detective import api
from vram_detective.cli import main
from vram_detective.hardware import GIB, MIB, find_gpu
from vram_detective.local_gpus import (apple_unified_memory, catalog_gpu, parse_nvidia_smi_csv,
                                       parse_rocm_smi_json)

ROOT = Path(__file__).resolve().parents[1]
# two RTX 4090s with 1.2 GiB in use by other processes (1229 MiB); free + used + the driver's reserve = total
TWO_4090 = "NVIDIA GeForce RTX 4090, 24564, 1229, 22969\nNVIDIA GeForce RTX 4090, 24564, 1229, 22969\n"


def _program(directory: Path, name: str, stdout: str, expect_args: str) -> None:
    """An executable that prints `stdout` when called with exactly `expect_args` (else fails like a wrong query)."""
    path = directory / name
    path.write_text("#!/bin/sh\nPATH=/usr/bin:/bin\n"
                    f'if [ "$*" != "{expect_args}" ]; then echo "unexpected arguments: $*" >&2; exit 6; fi\n'
                    f"cat <<'EOF'\n{stdout}EOF\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


@pytest.fixture
def fake_path(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # only the fakes: no real vendor tool is reached
    monkeypatch.delenv("VRAM_DETECTIVE_NO_PROBE", raising=False)
    return tmp_path


def _nvidia_smi(directory: Path, text: str) -> None:
    _program(directory, "nvidia-smi", text,
             "--query-gpu=name,memory.total,memory.used,memory.free --format=csv,noheader,nounits")


def test_two_4090s_with_memory_in_use_answer_without_gpu(fake_path, capsys):
    _nvidia_smi(fake_path, TWO_4090)
    assert main(["explain", "Qwen/Qwen3-8B", "--max-model-len", "16384"]) == 0
    out = capsys.readouterr().out
    line = ("GPU 0: NVIDIA GeForce RTX 4090, 23.65 GiB as CUDA reports it, 1.20 GiB in use by other processes, "
            "22.45 GiB free before the engine loads (RTX 4090)")
    assert line in " ".join(out.split())
    assert "GPU 1 (22.45 GiB free): as GPU 0" in out
    assert "all 2 GPUs (--tensor-parallel-size 2): starts" in out


def test_json_per_gpu_free_memory_is_the_cuda_total_less_what_others_hold(fake_path, capsys):
    _nvidia_smi(fake_path, TWO_4090)
    assert main(["explain", "Qwen/Qwen3-8B", "--gpu", "auto", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    card = find_gpu("RTX 4090")
    assert [m["free_before_load_bytes"] for m in out["machine"]] == [card.cuda_total_bytes - 1229 * MIB] * 2
    assert [m["used_bytes"] for m in out["machine"]] == [1229 * MIB] * 2
    assert [p["gpu_index"] for p in out["per_gpu"]] == [0, 1]
    assert out["all_gpus"]["flags"] == "--tensor-parallel-size 2"
    # vLLM sizes from total x utilization (the others' memory only matters to its startup check), so one GPU
    # here answers as the catalog card does
    alone = api.explain("Qwen/Qwen3-8B", "RTX 4090")
    assert out["per_gpu"][0]["kv_cache_tokens"] == alone.kv_cache_tokens


def test_vllm_v1_refuses_when_free_memory_is_below_its_budget(fake_path, capsys):
    _nvidia_smi(fake_path, "NVIDIA GeForce RTX 4090, 24564, 3072, 21126\n")
    assert main(["explain", "Qwen/Qwen3-8B", "--max-model-len", "8192"]) == 1
    captured = capsys.readouterr()
    assert ("Free memory on device (20.65/23.65 GiB) on startup is less than desired GPU memory utilization "
            "(0.92, 21.76 GiB)") in " ".join((captured.out + captured.err).split())
    # 0.9.0 took its snapshot without the check (gpu_worker.py); V0 never had it
    assert main(["explain", "Qwen/Qwen3-8B", "--max-model-len", "8192", "--engine-version", "0.9.0"]) == 0
    capsys.readouterr()
    assert main(["explain", "Qwen/Qwen3-8B", "--max-model-len", "8192", "--engine-version", "0.6.3"]) == 0


def test_vllm_v1_before_0_9_1_reads_what_others_hold_as_non_torch_memory():
    """0.9.0's determine_available_memory: non-torch = (total - free) - torch allocated, every process on the
    device: the KV budget loses exactly what others hold; 0.9.1 measures from its init snapshot (and checks)."""
    card = find_gpu("RTX 4090")
    busy = replace(card, in_use_bytes=GIB)
    for version, lost in (("0.8.5", GIB), ("0.9.0", GIB), ("0.9.1", 0)):
        idle = api.explain("Qwen/Qwen3-8B", card, engine_version=version, max_model_len=8192)
        loaded = api.explain("Qwen/Qwen3-8B", busy, engine_version=version, max_model_len=8192)
        assert idle.kv_cache_bytes - loaded.kv_cache_bytes == lost, version


def test_sglang_pool_loses_mem_fraction_static_times_what_others_hold():
    card = find_gpu("RTX 4090")
    busy = replace(card, in_use_bytes=GIB // 2)
    idle = api.explain("Qwen/Qwen3-8B", card, engine="sglang", max_model_len=8192)
    loaded = api.explain("Qwen/Qwen3-8B", busy, engine="sglang", max_model_len=8192)
    fraction = idle.settings["mem_fraction_static"] if isinstance(idle.settings, dict) else None
    fraction = fraction or next(s.value for s in idle.settings if s.name == "mem_fraction_static")
    # rest = mem_fraction_static x free_before - weights: the pool shrinks by fraction x 0.5 GiB (to a cell)
    cell = idle.kv_bytes_per_token
    assert abs((idle.kv_cache_bytes - loaded.kv_cache_bytes) - float(fraction) * GIB / 2) <= 2 * cell


def test_llamacpp_splits_over_the_devices_by_free_memory(fake_path, capsys):
    _nvidia_smi(fake_path, "NVIDIA GeForce RTX 4090, 24564, 8192, 16006\nNVIDIA GeForce RTX 4090, 24564, 1229, 22969\n")
    assert main(["explain", "Qwen/Qwen3-8B", "--engine", "llamacpp", "--gguf-type", "Q4_K_M", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    card = find_gpu("RTX 4090")
    frees = [(card.cuda_total_bytes - used * MIB) // MIB for used in (8192, 1229)]
    assert out["all_gpus"]["flags"] == f"-ts {frees[0]},{frees[1]}"


def test_gpu_auto_without_any_gpu_is_one_line_exit_2(fake_path, capsys):
    assert main(["explain", "Qwen/Qwen3-8B", "--gpu", "auto"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--gpu auto found no GPU here" in err


def test_no_gpu_here_keeps_the_common_gpu_table(fake_path, capsys):
    assert main(["explain", "Qwen/Qwen3-8B", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["gpus"]
    assert "RTX 4090" in [row["gpu"] for row in rows]


def test_the_real_nvidia_smi_capture_with_header_and_units():
    # groundtruth/dev.jsonl holds an L40S capture of `nvidia-smi --query-gpu=... --format=csv`
    capture = next(line for raw in (ROOT / "groundtruth" / "dev.jsonl").read_text().splitlines()
                   for line in [json.loads(raw).get("log") or ""] if "memory.total, driver_version" in line)
    table = capture[capture.index("index, name, compute_cap"):]
    (gpu,) = parse_nvidia_smi_csv(table)
    assert (gpu.index, gpu.name, gpu.total_bytes, gpu.used_bytes, gpu.free_bytes) == (
        0, "NVIDIA L40S", 46068 * MIB, 0, 45460 * MIB)
    card, _ = catalog_gpu(gpu)
    assert card.short_name == "L40S" and card.in_use_bytes == 0


def test_one_name_two_sizes_is_told_apart_by_the_total():
    ten, twelve = parse_nvidia_smi_csv("NVIDIA GeForce RTX 3080, 10240, 500, 9400\n"
                                       "NVIDIA GeForce RTX 3080, 12288, 500, 11400\n")
    assert catalog_gpu(ten)[0].short_name == "RTX 3080 10GB"
    assert catalog_gpu(twelve)[0].short_name == "RTX 3080 12GB"


def test_a_card_not_in_the_catalog_takes_its_own_total_less_the_driver_reserve():
    (gpu,) = parse_nvidia_smi_csv("NVIDIA Imaginary X1, 20000, 0, 19600\n")
    card, note = catalog_gpu(gpu)
    assert card.name == "NVIDIA Imaginary X1" and card.cuda_total_bytes < 20000 * MIB
    assert "not in the catalog" in note
    # the reserve is the catalog's median gap (nvidia-smi total - CUDA total), e.g. the 4090's 0.34 GiB
    assert 0.2 * GIB < 20000 * MIB - card.cuda_total_bytes < 0.8 * GIB


def test_nvidia_smi_unreadable_total_is_bad_input(fake_path, capsys):
    _nvidia_smi(fake_path, "NVIDIA GB10, [N/A], [N/A], [N/A]\n")
    assert main(["explain", "Qwen/Qwen3-8B"]) == 2
    assert "reports no memory total for 'NVIDIA GB10'" in capsys.readouterr().err


# rocm-smi 5.2.3 (Debian's rocm-smi): json.dumps(JSON_DATA), card keys 'card0'.., values as printed strings
MI300X_MEMINFO = json.dumps({"card0": {"VRAM Total Memory (B)": str(196592 * MIB),
                                       "VRAM Total Used Memory (B)": str(512 * MIB)}})
MI300X_NAMES = json.dumps({"card0": {"Card series": "AMD Instinct MI300X", "Card model": "0x74a1",
                                     "Card vendor": "Advanced Micro Devices, Inc. [AMD/ATI]", "Card SKU": "M3000100"}})


def test_rocm_smi_json(fake_path, capsys):
    _program(fake_path, "rocm-smi", MI300X_MEMINFO + "\n", "--showmeminfo vram --json")
    (gpu,) = parse_rocm_smi_json(MI300X_MEMINFO, MI300X_NAMES)
    assert (gpu.name, gpu.total_bytes, gpu.used_bytes, gpu.vendor) == ("AMD Instinct MI300X", 196592 * MIB, 512 * MIB,
                                                                        "amd")
    assert catalog_gpu(gpu)[0].short_name == "MI300X"
    assert main(["explain", "Qwen/Qwen3-8B", "--json"]) == 0  # the names query fails: the card keeps its key
    machine = json.loads(capsys.readouterr().out)["machine"]
    assert machine[0]["source"] == "rocm-smi" and machine[0]["used_bytes"] == 512 * MIB


def test_apple_working_set():
    assert apple_unified_memory(64 * GIB, 0).total_bytes == 48 * GIB  # 3/4 above 36 GiB
    assert apple_unified_memory(16 * GIB, 0).total_bytes == 16 * GIB * 2 // 3
    assert apple_unified_memory(64 * GIB, 57344).total_bytes == 56 * GIB  # iogpu.wired_limit_mb set


def test_probe_off_switch(fake_path, monkeypatch, capsys):
    _nvidia_smi(fake_path, TWO_4090)
    monkeypatch.setenv("VRAM_DETECTIVE_NO_PROBE", "1")
    assert main(["explain", "Qwen/Qwen3-8B", "--json"]) == 0
    assert "gpus" in json.loads(capsys.readouterr().out)
    assert os.environ["PATH"] == str(fake_path)


def test_gpu_3080_lists_both_cards_and_exits_2(capsys):
    assert main(["explain", "Qwen/Qwen3-8B", "--gpu", "3080"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "'3080' is several cards: RTX 3080 10GB (9.77 GiB) or RTX 3080 12GB (11.77 GiB)" in err


def test_gpu_auto_on_one_card_commands(fake_path, capsys):
    _nvidia_smi(fake_path, "NVIDIA GeForce RTX 4090, 24564, 3072, 21126\n")
    gpu = api.resolve_gpu("auto", None)
    assert gpu.short_name == "RTX 4090" and gpu.in_use_bytes == 3072 * MIB
    # whatif's baseline on this machine: vLLM V1 refuses (21.76 GiB asked, 20.65 GiB free)
    assert main(["whatif", "Qwen/Qwen3-8B", "--gpu", "auto", "--max-model-len", "8192", "--json"]) == 1
    assert main(["explain", "Qwen/Qwen3-8B", "--gpu", "auto", "--gpu-memory-utilization", "0.85", "--max-model-len",
                 "8192", "--json"]) == 0


def test_this_machine_answer_writes_the_html_report(fake_path, tmp_path, capsys):
    _nvidia_smi(fake_path, TWO_4090)
    report = tmp_path / "report.html"
    assert main(["explain", "Qwen/Qwen3-8B", "--max-model-len", "16384", "--html", str(report)]) == 0
    assert "NVIDIA GeForce RTX 4090" in report.read_text()


def test_nvml_when_nvidia_ml_py_is_installed(fake_path, monkeypatch, capsys):
    """NVML first (the [nvml] extra): a stand-in `pynvml` module answering as nvidia-ml-py's functions do (names as
    bytes from old releases; c_nvmlMemory_v2_t's total / reserved / free / used)."""
    (fake_path / "pynvml.py").write_text(
        "from types import SimpleNamespace\n"
        "nvmlMemory_v2 = 0x02000028\n"
        "def nvmlInit(): pass\n"
        "def nvmlShutdown(): pass\n"
        "def nvmlDeviceGetCount(): return 1\n"
        "def nvmlDeviceGetHandleByIndex(i): return i\n"
        "def nvmlDeviceGetName(handle): return b'NVIDIA H100 80GB HBM3'\n"
        "def nvmlDeviceGetMemoryInfo(handle, version=None):\n"
        "    assert version == nvmlMemory_v2\n"
        "    mib = 1 << 20\n"
        "    return SimpleNamespace(version=version, total=81559 * mib, reserved=528 * mib, free=79031 * mib,\n"
        "                           used=2000 * mib)\n")
    monkeypatch.syspath_prepend(str(fake_path))
    try:
        assert main(["explain", "Qwen/Qwen3-8B", "--json"]) == 0
    finally:
        sys.modules.pop("pynvml", None)  # the stand-in leaves with this test
    (machine,) = json.loads(capsys.readouterr().out)["machine"]
    assert (machine["source"], machine["catalog_gpu"], machine["used_bytes"]) == ("NVML", "H100 SXM", 2000 * MIB)


def test_apple_silicon_through_sysctl(fake_path, monkeypatch):
    from vram_detective import local_gpus

    for name, answers in (("sysctl", {"-n hw.memsize": str(64 << 30), "-n iogpu.wired_limit_mb": "0"}),):
        lines = "\n".join(f'  "{args}") echo {value};;' for args, value in answers.items())
        path = fake_path / name
        path.write_text(f'#!/bin/sh\ncase "$*" in\n{lines}\n  *) exit 1;;\nesac\n')
        path.chmod(0o755)
    monkeypatch.setattr(local_gpus.sys, "platform", "darwin")
    (device,) = local_gpus.probe()
    assert (device.vendor, device.source, device.total_bytes) == ("apple", "sysctl", 48 << 30)
    gpu, _ = local_gpus.catalog_gpu(device)
    assert gpu.vendor == "apple" and gpu.unified_memory and gpu.cuda_total_bytes == 48 << 30
