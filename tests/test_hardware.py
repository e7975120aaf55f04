import json
from pathlib import Path

import pytest

from vram_detective import hardware
from vram_detective.hardware import (
    GIB,
    Gpu,
    UnknownGpuError,
    all_gpus,
    common_gpus,
    custom_gpu,
    find_gpu,
    lookup_keys,
    normalize_gpu_key,
    parse_memory_size,
)

from conftest import DEV, read_jsonl
from conftest import OBSERVED_GPUS as OBSERVED
DATA = Path(hardware.__file__).with_name("data") / "gpus.json"

# Observed GPUs deliberately left out of the catalog, with the reason.
NOT_CATALOGED = {
    "NVIDIA A40-48Q": "vGPU profile inside a VM, not a physical card",
    "Orin (nvgpu)": "Jetson AGX Orin module: unified memory shared with the CPU, not modelled as a card",
}
# Single readings left out of the comparison with the catalog, with the reason.
READINGS_NOT_COMPARED = {
    ("NVIDIA GeForce RTX 4060", 8.0): "a WSL figure (WSL reports the full 8.00 GiB); the catalog's total is derived",
    ("NVIDIA GeForce RTX 2080 Ti", 22528): "a 22 GB memory-modded card (stock: 11264 MiB), not a product",
    ("NVIDIA GeForce RTX 3070", 7.64): "llama.cpp, OS and driver not shown; the Linux TensorFlow reading is 7.79",
    ("NVIDIA A10", 22.2): "llama.cpp, OS not shown; the catalog's 22.07 is a vLLM reading (driver spread 0.13)",
}
# Catalog totals that real readings contradict: kept so that score results do not move in this change.
CATALOG_GAPS = [
    ("NVIDIA A40", 44.35, "catalog 44.47 is derived (46068 MiB - 0.52 GiB); PyTorch on Linux read 44.35"),
    ("NVIDIA B200", 178.35, "catalog 178.47 is derived (183359 MiB - 0.59 GiB); PyTorch read 178.35 (and 178.36)"),
]


def _by_name():
    return {g.name: g for g in all_gpus()}


def _catalog_entries(smi_name):
    """Catalog entries nvidia-smi prints as `smi_name` (a name can cover two memory sizes, e.g. RTX 3080)."""
    entries = json.loads(DATA.read_text(encoding="utf-8"))
    return [e for e in entries if e.get("nvidia_smi_name", e["name"]) == smi_name]


def _smi_total(entry, ecc):
    """The nvidia-smi total in the reading's ECC state: the catalog's total is the card's default state."""
    return (entry.get("nvidia_smi_total_mib_by_ecc") or {}).get(ecc, entry["nvidia_smi_total_mib"])


def _is_wsl(record):
    # WSL/Windows report the full board memory, not the Linux driver's total (readings: `os`; cases: the tag).
    return record.get("os") == "windows" or "wsl" in record.get("tags", ())


# --- lookup --------------------------------------------------------------------------------

EXPECTED = {
    "H100": "NVIDIA H100 80GB HBM3",
    "H100-SXM": "NVIDIA H100 80GB HBM3",
    "h100 80gb hbm3": "NVIDIA H100 80GB HBM3",
    "H100-80G": "NVIDIA H100 80GB HBM3",
    "H100 PCIe": "NVIDIA H100 PCIe",
    "H100 NVL": "NVIDIA H100 NVL",
    "A100": "NVIDIA A100-SXM4-80GB",
    "A100-80G": "NVIDIA A100-SXM4-80GB",
    "A100 80GB": "NVIDIA A100-SXM4-80GB",
    "A100-40G": "NVIDIA A100-SXM4-40GB",
    "A100 40GB": "NVIDIA A100-SXM4-40GB",
    "A100 PCIe": "NVIDIA A100 80GB PCIe",
    "A100-PCIE-40GB": "NVIDIA A100-PCIE-40GB",
    "NVIDIA A100-SXM4-80GB": "NVIDIA A100-SXM4-80GB",
    "A800": "NVIDIA A800-SXM4-80GB",
    "3090": "NVIDIA GeForce RTX 3090",
    "3090 Ti": "NVIDIA GeForce RTX 3090 Ti",
    "4080": "NVIDIA GeForce RTX 4080",
    "4090": "NVIDIA GeForce RTX 4090",
    "5090": "NVIDIA GeForce RTX 5090",
    "5090D": "NVIDIA GeForce RTX 5090 D",
    "5070 Ti": "NVIDIA GeForce RTX 5070 Ti",
    "L40S": "NVIDIA L40S",
    "L40": "NVIDIA L40",
    "L20": "NVIDIA L20",
    "L4": "NVIDIA L4",
    "A10": "NVIDIA A10",
    "A10G": "NVIDIA A10G",
    "A40": "NVIDIA A40",
    "T4": "Tesla T4",
    "V100": "Tesla V100-SXM2-16GB",
    "V100 32GB": "Tesla V100-SXM2-32GB",
    "A5000": "NVIDIA RTX A5000",
    "A6000": "NVIDIA RTX A6000",
    "RTX 6000 Ada": "NVIDIA RTX 6000 Ada Generation",
    "H800": "NVIDIA H800",
    "H20": "NVIDIA H20",
    "H200": "NVIDIA H200",
    "GH200": "NVIDIA GH200 480GB",
    "B200": "NVIDIA B200",
    "RTX PRO 6000": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
    "RTX PRO 6000 Workstation": "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
    "DGX Spark": "NVIDIA GB10",
    "GB10": "NVIDIA GB10",
    "MI300X": "AMD Instinct MI300X",
    "MI300": "AMD Instinct MI300X",
}


@pytest.mark.parametrize("query,name", sorted(EXPECTED.items()))
def test_alias_resolves_to_intended_card(query, name):
    assert find_gpu(query).name == name


@pytest.mark.parametrize("query", ["rtx4090", "RTX 4090", "4090", "rtx-4090", "RTX_4090", "  Rtx 4090 ",
                                   "NVIDIA GeForce RTX 4090", "geforce rtx 4090"])
def test_lookup_ignores_case_spaces_dashes_underscores(query):
    assert find_gpu(query).short_name == "RTX 4090"


def test_every_name_short_name_alias_and_default_resolves_to_its_own_card():
    for gpu in all_gpus():
        for text in (gpu.short_name, *gpu.aliases, *gpu.default_for):
            assert find_gpu(text) is gpu, (text, gpu.name)
        if gpu.name not in SEVERAL_CARDS:
            assert find_gpu(gpu.name) is gpu, gpu.name


# names nvidia-smi gives cards of two sizes: asked for, they list both and pick neither (exit 2 on the CLI)
SEVERAL_CARDS = {"NVIDIA GeForce RTX 3080": ("RTX 3080 10GB", "RTX 3080 12GB"),
                 "NVIDIA GeForce RTX 4060 Ti": ("RTX 4060 Ti 16GB", "RTX 4060 Ti 8GB")}


@pytest.mark.parametrize("query", ["3080", "RTX 3080", "NVIDIA GeForce RTX 3080", "rtx-3080", "4060 Ti",
                                   "NVIDIA GeForce RTX 4060 Ti"])
def test_a_name_of_two_sizes_is_never_picked_silently(query):
    from vram_detective.hardware import AmbiguousGpuError

    with pytest.raises(AmbiguousGpuError) as error:
        find_gpu(query)
    cards = next(cards for name, cards in SEVERAL_CARDS.items() if query.replace(" ", "").replace("-", "").lower()
                 in name.replace(" ", "").lower())
    assert all(f'--gpu "{card}"' in str(error.value) for card in cards)
    assert find_gpu("3080 Ti").short_name == "RTX 3080 Ti" and find_gpu("3080 12GB").short_name == "RTX 3080 12GB"


def test_the_cards_people_ask_about_are_in_the_catalog():
    expected = {"RTX 4090 Laptop": 16, "RTX 4080 Laptop": 12, "RTX 4070 Laptop": 8, "RTX 4090 D": 24,
                "GTX 1080 Ti": 11, "MI210": 64, "MI250": 64, "MI250X": 64, "MI300X": 192, "MI325X": 256,
                "7900 XTX": 24, "M2 Ultra 192GB": 192 * 3 / 4, "M4 Pro 24GB": 16, "M4 Max 128GB": 96}
    for query, gib in expected.items():
        gpu = find_gpu(query)
        # CUDA/ROCm totals sit a little under the nominal size; Apple's is the default Metal working set
        assert gib - 0.75 <= gpu.cuda_total_gib <= gib, (query, gpu.cuda_total_gib)
        assert gpu.source.startswith(("vendor spec", "cuda total")), query
    assert not find_gpu("7900 XTX").supports_fp8 and find_gpu("MI325X").supports_fp8
    assert find_gpu("M4 Max 128GB").unified_memory and find_gpu("M4 Max 128GB").vendor == "apple"


def test_vllm_device_name_form_resolves():
    # vLLM's fused-MoE config files use the device name with underscores.
    assert find_gpu("NVIDIA_H800").name == "NVIDIA H800"
    assert find_gpu("NVIDIA_A800-SXM4-80GB").name == "NVIDIA A800-SXM4-80GB"


def test_h20_and_h200_are_distinct():
    assert find_gpu("H20").cuda_total_gib == pytest.approx(95.22, abs=0.005)
    assert find_gpu("H200").cuda_total_gib == pytest.approx(139.81, abs=0.005)


def test_ambiguous_short_forms_are_owned_by_default_for():
    owners = {}
    for gpu in all_gpus():
        for short in gpu.default_for:
            owners[normalize_gpu_key(short)] = gpu.name
    assert owners[normalize_gpu_key("A100")] == "NVIDIA A100-SXM4-80GB"
    assert owners[normalize_gpu_key("H100")] == "NVIDIA H100 80GB HBM3"


def test_unknown_gpu_message_suggests_and_is_one_line():
    with pytest.raises(UnknownGpuError) as info:
        find_gpu("RTX 9999")
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith("unknown GPU 'RTX 9999'; did you mean: ")
    assert "RTX 4090" in msg and "RTX 5090" in msg
    assert "--gpu-memory" in msg and "GiB" in msg


def test_unknown_gpu_without_close_match():
    with pytest.raises(UnknownGpuError, match=r"unknown GPU 'qqqq'.*--gpu-memory"):
        find_gpu("qqqq")
    with pytest.raises(ValueError):  # UnknownGpuError is a ValueError
        find_gpu("")


# --- values --------------------------------------------------------------------------------

def test_known_totals():
    assert find_gpu("4090").cuda_total_gib == pytest.approx(23.65, abs=0.005)
    assert find_gpu("3090").cuda_total_gib == pytest.approx(23.58, abs=0.005)
    assert find_gpu("H100").cuda_total_gib == pytest.approx(79.19, abs=0.005)
    assert find_gpu("H100").nvidia_smi_total_mib == 81559
    assert find_gpu("A100").cuda_total_bytes == int(round(79.25 * GIB))
    assert find_gpu("GB10").nvidia_smi_total_mib is None
    assert find_gpu("GB10").unified_memory


def test_cuda_total_is_below_nvidia_smi_total():
    # The driver reserves ~0.2-0.75 GiB that cudaMemGetInfo does not report (smallest observed: RTX 3080
    # 10240 MiB vs 9.77 GiB = 0.23, RTX 2080 Ti 11264 MiB vs 10.76 GiB = 0.24, both Linux readings).
    for gpu in all_gpus():
        if gpu.nvidia_smi_total_mib is None:
            continue
        gap = gpu.nvidia_smi_total_mib / 1024 - gpu.cuda_total_gib
        limit = (0.0, 0.1) if gpu.vendor == "amd" else (0.2, 0.8)
        assert limit[0] <= gap <= limit[1], (gpu.name, gap)


def test_observed_totals_match_catalog():
    checked = 0
    for rec in read_jsonl(OBSERVED):
        entries = _catalog_entries(rec["gpu"])
        if not entries:
            continue
        total, smi = rec["total_gpu_memory_gib"], rec["nvidia_smi_total_mib"]
        if total is not None and not _is_wsl(rec) and (rec["gpu"], total) not in READINGS_NOT_COMPARED:
            if (rec["gpu"], total) not in {(name, value) for name, value, _ in CATALOG_GAPS}:
                assert any(abs(e["cuda_total_gib"] - total) <= 0.1 for e in entries), rec
                checked += 1
        if smi is not None and (rec["gpu"], smi) not in READINGS_NOT_COMPARED:
            assert smi in {_smi_total(e, rec.get("ecc")) for e in entries}, rec
            checked += 1
    assert checked >= 80


def test_ecc_state_of_a_reading_picks_the_total():
    # the same RTX 6000 Ada prints 49140 MiB with ECC off (its default) and 46068 MiB with ECC on
    rtx6000 = _catalog_entries("NVIDIA RTX 6000 Ada Generation")[0]
    assert (_smi_total(rtx6000, "off"), _smi_total(rtx6000, "on"), _smi_total(rtx6000, None)) == (49140, 46068, 49140)
    l40 = _catalog_entries("NVIDIA L40")[0]
    assert (_smi_total(l40, "on"), _smi_total(l40, "off"), _smi_total(l40, None)) == (46068, 49140, 46068)
    readings = [(r["gpu"], r["nvidia_smi_total_mib"], r.get("ecc")) for r in read_jsonl(OBSERVED)]
    assert ("NVIDIA RTX 6000 Ada Generation", 46068, "on") in readings
    assert ("NVIDIA L40", 49140, "off") in readings


@pytest.mark.parametrize("name, observed", [
    pytest.param(name, observed, marks=pytest.mark.xfail(strict=True, reason=f"observed {observed} GiB: {reason}"))
    for name, observed, reason in CATALOG_GAPS])
def test_catalog_cuda_total_matches_the_reading(name, observed):
    assert abs(find_gpu(name).cuda_total_gib - observed) <= 0.1


def test_every_observed_gpu_is_cataloged_or_excluded_on_purpose():
    names = {rec["gpu"] for rec in read_jsonl(OBSERVED)}
    smi_names = {e.get("nvidia_smi_name", e["name"]) for e in json.loads(DATA.read_text(encoding="utf-8"))}
    missing = names - smi_names
    assert missing == set(NOT_CATALOGED), missing


def test_groundtruth_totals_within_driver_spread():
    # Totals shift a little with the driver (T4: 14.56-14.74), hence 0.2 GiB here.
    by_name = _by_name()
    checked = 0
    for rec in read_jsonl(DEV):
        total = (rec.get("observed") or {}).get("total_gpu_memory_gib")
        gpu = by_name.get(rec.get("gpu") or "")
        if total is None or gpu is None or _is_wsl(rec):
            continue
        assert abs(gpu.cuda_total_gib - total) <= 0.2, (rec["id"], gpu.cuda_total_gib, total)
        checked += 1
    assert checked >= 20


# --- capabilities --------------------------------------------------------------------------

def test_capability_flags():
    t4, v100, a100, rtx3090 = find_gpu("T4"), find_gpu("V100"), find_gpu("A100"), find_gpu("3090")
    assert not t4.supports_bf16 and not t4.supports_fp8
    assert not v100.supports_bf16
    assert a100.supports_bf16 and not a100.supports_fp8
    assert rtx3090.supports_bf16 and not rtx3090.supports_fp8
    for fp8 in ("4090", "L40S", "L4", "H100", "H200", "B200", "5090", "GB10", "MI300X"):
        assert find_gpu(fp8).supports_fp8, fp8
        assert find_gpu(fp8).supports_bf16, fp8


def test_is_a100():
    assert find_gpu("A100").is_a100
    assert find_gpu("A100-PCIE-40GB").is_a100
    assert not find_gpu("A800").is_a100
    assert not find_gpu("H100").is_a100


def test_common_gpus_are_the_summary_set():
    assert {g.short_name for g in common_gpus()} == {
        "T4", "L4", "A10G", "RTX 3090", "RTX 4090", "RTX 5090", "L40S",
        "A100 40GB", "A100 80GB", "H100 SXM", "H200", "B200",
    }


def test_custom_gpu():
    gpu = custom_gpu(parse_memory_size("23.65GiB"))
    assert gpu.cuda_total_gib == pytest.approx(23.65)
    assert gpu.nvidia_smi_total_mib is None
    assert gpu.compute_capability == (9, 0) and gpu.supports_fp8
    assert gpu.name == "custom GPU" and not gpu.common
    old = custom_gpu(16 * GIB, name="my T4", compute_capability=(7, 5))
    assert old.name == "my T4" and not old.supports_bf16
    with pytest.raises(ValueError):
        custom_gpu(0)


# --- parse_memory_size ---------------------------------------------------------------------

@pytest.mark.parametrize("text,expected", [
    ("23.65GiB", int(round(23.65 * GIB))),
    ("24GB", 24 * 10**9),
    ("24G", 24 * GIB),
    ("24g", 24 * GIB),
    ("24576MiB", 24 * GIB),
    ("80 GiB", 80 * GIB),
    ("80", 80 * GIB),
    ("23.65", int(round(23.65 * GIB))),
    ("81,920 MiB", 80 * GIB),
    ("1.5TiB", 1536 * GIB),
    ("512M", 512 * 2**20),
    ("1e3 MB", 10**9),
    ("1073741824B", GIB),
])
def test_parse_memory_size(text, expected):
    assert parse_memory_size(text) == expected


@pytest.mark.parametrize("text", ["", "abc", "GiB", "24 parsecs", "-1GiB", "0", "0GiB", "nan", "inf", "1,5GiB",
                                  "24GiB extra", "2..4G"])
def test_parse_memory_size_rejects_junk(text):
    with pytest.raises(ValueError) as info:
        parse_memory_size(text)
    assert "\n" not in str(info.value)
    assert repr(text) in str(info.value)


# --- data file -----------------------------------------------------------------------------

REQUIRED = {
    "name": str, "short_name": str, "aliases": list, "cuda_total_gib": (int, float),
    "nvidia_smi_total_mib": (int, type(None)), "compute_capability": list, "vendor": str,
    "memory_type": str, "common": bool, "source": str,
}


def test_json_schema():
    entries = json.loads(DATA.read_text(encoding="utf-8"))
    assert len(entries) == len(all_gpus()) >= 35
    for e in entries:
        for key, typ in REQUIRED.items():
            assert key in e and isinstance(e[key], typ), (e.get("name"), key)
        assert e["vendor"] in {"nvidia", "amd", "apple"}
        assert len(e["compute_capability"]) == 2 and all(isinstance(x, int) for x in e["compute_capability"])
        assert 1 < e["cuda_total_gib"] < 1024
        assert e["source"].startswith(("cuda total", "nvidia-smi", "vendor spec")), e["name"]
        # A null nvidia-smi total must be explained (unified memory).
        if e["nvidia_smi_total_mib"] is None:
            assert e.get("unified_memory") and e.get("notes")
        if e["vendor"] == "amd":  # nominal: gfx90a 9.0, gfx942 9.4, gfx1100 11.0 (the notes say which)
            gfx = {(9, 0): "gfx90a", (9, 4): "gfx942", (11, 0): "gfx1100"}[tuple(e["compute_capability"])]
            assert gfx in e["notes"] or e["name"] == "AMD Instinct MI300X", e["name"]


def test_sources_cite_observations_or_say_derived():
    for gpu in all_gpus():
        src = gpu.source
        assert "observed" in src or "vendor spec" in src, gpu.name
        assert "derived" in src or "observed" in src, gpu.name


def test_names_and_lookup_keys_unique_across_cards():
    gpus = all_gpus()
    assert len({g.name for g in gpus}) == len(gpus)
    assert len({g.short_name for g in gpus}) == len(gpus)
    owner = {}
    for gpu in gpus:
        for key in lookup_keys(gpu):
            assert owner.setdefault(key, gpu.name) == gpu.name, key


def test_required_cards_present():
    names = set(_by_name())
    for name in [
        "Tesla T4", "Tesla V100-SXM2-16GB", "Tesla V100-SXM2-32GB", "NVIDIA A10", "NVIDIA A10G", "NVIDIA L4",
        "NVIDIA L20", "NVIDIA L40", "NVIDIA L40S", "NVIDIA A40", "NVIDIA RTX A5000", "NVIDIA RTX A6000",
        "NVIDIA RTX 6000 Ada Generation", "NVIDIA GeForce RTX 3090", "NVIDIA GeForce RTX 3090 Ti",
        "NVIDIA GeForce RTX 4080", "NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 5070 Ti",
        "NVIDIA GeForce RTX 5090", "NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB", "NVIDIA A100-SXM4-80GB",
        "NVIDIA A100 80GB PCIe", "NVIDIA A800-SXM4-80GB", "NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe",
        "NVIDIA H100 NVL", "NVIDIA H800", "NVIDIA H20", "NVIDIA H200", "NVIDIA GH200 480GB", "NVIDIA B200",
        "NVIDIA RTX PRO 6000 Blackwell Server Edition", "NVIDIA GB10", "AMD Instinct MI300X",
    ]:
        assert name in names, name


def test_gpu_is_frozen_and_cached():
    gpu = find_gpu("4090")
    assert isinstance(gpu, Gpu)
    with pytest.raises(AttributeError):
        gpu.cuda_total_bytes = 0  # type: ignore[misc]
    assert all_gpus() is all_gpus()
