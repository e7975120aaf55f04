"""`ollama ps` output (cmd/cmd.go ListRunningHandler): NAME, ID, SIZE ("6.0 GB", decimal units as
format.HumanBytes prints them), PROCESSOR ("100% GPU", "100% CPU", "48%/52% CPU/GPU"), CONTEXT (newer),
UNTIL."""
from __future__ import annotations

import re
from dataclasses import dataclass

_UNITS = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*(B|KB|MB|GB|TB)\b")
_PROC_ONE = re.compile(r"(\d+)%\s+(GPU|CPU)")
_PROC_SPLIT = re.compile(r"(\d+)%/(\d+)%\s+CPU/GPU")


@dataclass(frozen=True)
class RunningModel:
    name: str
    id: str
    size_bytes: int
    gpu_percent: int
    cpu_percent: int
    context: int | None
    until: str

    @property
    def gpu_bytes(self) -> int:
        """The part Ollama placed on the GPU(s), as ps computes its percentage (SizeVRAM / Size)."""
        return round(self.size_bytes * self.gpu_percent / 100)


def _processor(text: str) -> tuple[int, int]:
    if m := _PROC_SPLIT.search(text):
        return int(m.group(2)), int(m.group(1))
    if m := _PROC_ONE.search(text):
        pct = int(m.group(1))
        return (pct, 100 - pct) if m.group(2) == "GPU" else (100 - pct, pct)
    raise ValueError(f"no PROCESSOR figure in {text!r}")


def _columns(header: str) -> list[tuple[str, int]]:
    return [(m.group(0), m.start()) for m in re.finditer(r"\S+", header)]


def parse_ps(text: str) -> list[RunningModel]:
    """Every row of an `ollama ps` table (columns found from the header's positions)."""
    lines = [line for line in text.splitlines() if line.strip()]
    header = next((i for i, line in enumerate(lines) if line.split()[:1] == ["NAME"] and "SIZE" in line), None)
    if header is None:
        raise ValueError("not `ollama ps` output: no NAME ... SIZE header")
    cols = _columns(lines[header])
    out = []
    for line in lines[header + 1:]:
        cells = {}
        for j, (name, start) in enumerate(cols):
            end = cols[j + 1][1] if j + 1 < len(cols) else len(line)
            cells[name] = line[start:end].strip()
        size = _SIZE.search(cells.get("SIZE", ""))
        if not size:
            continue
        gpu, cpu = _processor(cells.get("PROCESSOR", ""))
        ctx = cells.get("CONTEXT", "")
        out.append(RunningModel(cells["NAME"], cells.get("ID", ""), round(float(size.group(1)) * _UNITS[size.group(2)]),
                                gpu, cpu, int(ctx) if ctx.isdigit() else None, cells.get("UNTIL", "")))
    return out
