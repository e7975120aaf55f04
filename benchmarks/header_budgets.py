"""What real checkpoints need from a header, measured on the catalog, next to the parsing budgets
(model/gguf_source.py, model/safetensors_headers.py, model/hub.py), and what a hostile header at each budget
costs to refuse (time and peak memory of this process).

    PYTHONPATH=src python3 benchmarks/header_budgets.py
"""
from __future__ import annotations

import json
import resource
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from vram_detective import api  # noqa: E402
from vram_detective.engines.llamacpp.quant_mix import quantized_tensors  # noqa: E402
from vram_detective.model import gguf_source, hub_ranges, safetensors_headers  # noqa: E402
from vram_detective.model.sources import catalog_entries  # noqa: E402


def catalog_needs() -> dict:
    """The largest vocabulary and the most tensors llama.cpp's GGUF of a catalog model holds."""
    best = {"vocabulary": (0, ""), "GGUF tensors (Q4_K_M)": (0, "")}
    for entry in catalog_entries():
        try:
            spec = api.model_spec(entry.repo_id)
            tensors = len(quantized_tensors(spec, "Q4_K_M"))
        except Exception:  # noqa: BLE001 - architectures llama.cpp does not build are left out
            continue
        for key, value in (("vocabulary", spec.vocab_size), ("GGUF tensors (Q4_K_M)", tensors)):
            if value > best[key][0]:
                best[key] = (value, entry.repo_id)
    return best


def _s(text: str) -> bytes:
    return struct.pack("<Q", len(text.encode())) + text.encode()


def hostile_files(folder: Path) -> dict[str, Path]:
    strings = gguf_source.MAX_VALUES + 1
    files = {
        f"GGUF: {strings:,} empty token strings": b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + _s("tokenizer.ggml.tokens")
        + struct.pack("<IIQ", 9, 8, strings) + struct.pack("<Q", 0) * strings,
        f"GGUF: {strings - 3:,} empty strings (at the budget)": b"GGUF" + struct.pack("<IQQ", 3, 0, 1)
        + _s("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, strings - 3) + struct.pack("<Q", 0) * (strings - 3),
        f"GGUF: {gguf_source.MAX_TENSORS + 1:,} tensors claimed": b"GGUF" + struct.pack("<IQQ", 3, gguf_source.MAX_TENSORS + 1, 0)
        + b"\0" * (32 * (gguf_source.MAX_TENSORS + 1)),
        f"safetensors: {safetensors_headers.MAX_HEADER_TENSORS + 1:,} tiny entries": None,
    }
    out = {}
    for index, (label, data) in enumerate(files.items()):
        path = folder / f"{index}.{'gguf' if label.startswith('GGUF') else 'safetensors'}"
        if data is None:
            entries = ",".join(f'"t{i}":{{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}'
                               for i in range(safetensors_headers.MAX_HEADER_TENSORS + 1))
            blob = ("{" + entries + "}").encode()
            data = struct.pack("<Q", len(blob)) + blob
        path.write_bytes(data)
        out[label] = path
    return out


def main() -> int:
    needs = catalog_needs()
    rows = [
        ("vocabulary (tokens)", needs["vocabulary"], gguf_source.MAX_ARRAY_ITEMS, "GGUF items in one array"),
        ("GGUF tensors (Q4_K_M)", needs["GGUF tensors (Q4_K_M)"], gguf_source.MAX_TENSORS, "GGUF tensor entries"),
    ]
    print(f"{'real need (catalog)':<28} {'largest':>10}  {'model':<34} {'budget':>12}  {'x':>6}  budget on")
    for label, (value, model), budget, what in rows:
        print(f"{label:<28} {value:>10,}  {model:<34} {budget:>12,}  {budget / value:>6.1f}  {what}")
    print(f"other budgets: GGUF header {gguf_source.MAX_GGUF_HEADER_BYTES:,} B, {gguf_source.MAX_VALUES:,} strings and "
          f"array items, {gguf_source.MAX_KEYS:,} keys, tensor names under {gguf_source.MAX_TENSOR_NAME} B; "
          f"safetensors header {safetensors_headers.MAX_HEADER_BYTES:,} B and {safetensors_headers.MAX_HEADER_TENSORS:,} "
          f"entries; a Hub repository's headers {hub_ranges.MAX_REPO_HEADER_BYTES:,} B in all")
    print()
    print(f"{'hostile file':<44} {'size MB':>8} {'seconds':>8}  message")
    with tempfile.TemporaryDirectory() as folder:
        for label, path in hostile_files(Path(folder)).items():
            began = time.perf_counter()
            try:
                (gguf_source.read_local if path.suffix == ".gguf" else safetensors_headers.read_header)(path)
                message = "accepted (within the budgets)"
            except ValueError as error:
                message = str(error).split(": ", 1)[1][:60]
            took = time.perf_counter() - began
            print(f"{label:<44} {path.stat().st_size / 1e6:>8.1f} {took:>8.2f}  {message}")
    print(f"peak memory (max RSS) of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
