"""Read nvidia-smi output: the default table, `--query-gpu=... --format=csv` (with or without units),
`--query-compute-apps` CSV, `-q` text and `-q -x` XML; and spot nvidia-smi readings quoted inside a log.

Every reading comes back as GPUs (index, name, used / total / reserved MiB) and processes (GPU,
pid, name, used MiB). Memory in nvidia-smi is MiB (2^20 bytes).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

MAX_SMI_BYTES = 16 << 20


class SmiInputError(ValueError):
    """Not nvidia-smi output in a format this reader knows."""


class SmiValueError(SmiInputError):
    """A reading no GPU can show: negative memory, or more used than the GPU has."""


@dataclass(frozen=True)
class SmiGpu:
    index: int | None
    name: str | None
    used_mib: int | None
    total_mib: int | None
    reserved_mib: int | None = None
    free_mib: int | None = None
    bus_id: str | None = None


@dataclass(frozen=True)
class SmiProcess:
    gpu_index: int | None
    pid: int | None
    name: str
    used_mib: int | None
    type: str | None = None


@dataclass(frozen=True)
class SmiReading:
    format: str  # "table", "csv", "xml", "query-text", "log excerpt"
    gpus: tuple[SmiGpu, ...]
    processes: tuple[SmiProcess, ...] = ()
    driver_version: str | None = None
    cuda_version: str | None = None

    def gpu(self, index: int | None = 0) -> SmiGpu | None:
        for gpu in self.gpus:
            if gpu.index == index:
                return gpu
        return self.gpus[0] if self.gpus else None

    def processes_on(self, index: int | None) -> list[SmiProcess]:
        return [p for p in self.processes if p.gpu_index in (index, None)]

    def to_dict(self) -> dict:
        return {
            "format": self.format, "driver_version": self.driver_version, "cuda_version": self.cuda_version,
            "gpus": [{k: v for k, v in g.__dict__.items() if v is not None} for g in self.gpus],
            "processes": [{k: v for k, v in p.__dict__.items() if v is not None} for p in self.processes],
        }


def _mib(text: str | None) -> int | None:
    if text is None:
        return None
    text = text.strip()
    match = re.match(r"(-?)(\d[\d,]{0,15})(?:\.\d{1,9})?\s*(MiB|GiB|KiB|MB|GB)?$", text)
    if match is None:
        return None
    if match.group(1):
        raise SmiValueError(f"nvidia-smi shows a negative memory figure ({text}): not a reading a GPU gives")
    value = int(match.group(2).replace(",", ""))
    unit = match.group(3) or "MiB"
    return {"MiB": value, "MB": value, "GiB": value * 1024, "GB": value * 1024, "KiB": value // 1024}[unit]


# --- whole outputs ------------------------------------------------------------------------------------------------

def parse_nvidia_smi(text: str) -> SmiReading:
    """One reading from nvidia-smi output in any of its formats; refused (SmiValueError, one line) when a GPU
    shows a negative figure or more memory used than it has."""
    reading = _parse_any(text)
    _checked_gpus(list(reading.gpus))
    return reading


def _parse_any(text: str) -> SmiReading:
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    stripped = text.strip()
    if not stripped:
        raise SmiInputError("the nvidia-smi input is empty")
    if stripped.startswith("<?xml") or "<nvidia_smi_log" in stripped[:4096]:
        return _parse_xml(stripped)
    if "FB Memory Usage" in text:
        return _parse_query_text(text)
    if _TABLE_MEM.search(text) or "NVIDIA-SMI" in text:
        return _parse_table(text)
    first = stripped.splitlines()[0]
    if "," in first:
        return _parse_csv(stripped)
    raise SmiInputError("not nvidia-smi output (expected the default table, --query-gpu CSV, or -q -x XML)")


def parse_file(path: str) -> SmiReading:
    from ..units import open_regular_file

    with open_regular_file(path, "the nvidia-smi file") as stream:
        data = stream.read(min(os.fstat(stream.fileno()).st_size, MAX_SMI_BYTES) + 1)
    if len(data) > MAX_SMI_BYTES:
        raise SmiInputError(f"{path} is larger than 16 MiB: not nvidia-smi output")
    if b"\x00" in data[:8192]:
        raise SmiInputError(f"{path} is not nvidia-smi output (binary data)")
    try:
        return parse_nvidia_smi(data.decode("utf-8", errors="replace"))
    except SmiInputError as error:
        raise SmiInputError(f"{path}: {error}") from None


_TABLE_GPU = re.compile(r"^\|\s+(\d{1,9})\s+(.+?)(?<=\S)\s+(On|Off)\s*\|\s*([0-9A-Fa-f:.]+)?")
# (?<!\d): a digit run is tried from its start only (linear time); the sign is read so that it can be refused
_TABLE_MEM = re.compile(r"(?<!\d)(-?\d{1,12})\s*MiB\s*/\s*(-?\d{1,12})\s*MiB")
_TABLE_PROC = re.compile(
    r"^\|\s+(\d{1,9}|N/A)\s+(?:(?:N/A|\d{1,9})\s+(?:N/A|\d{1,9})\s+)?(\d{1,12})\s+(C\+G|M\+C|C|G|M)\s+(.+?)(?<=\S)\s+"
    r"(\d{1,12}|N/A)\s*(MiB)?\s*\|$")


def _parse_table(text: str) -> SmiReading:
    gpus: list[SmiGpu] = []
    processes: list[SmiProcess] = []
    driver = re.search(r"Driver Version:\s*([\d.]+)", text)
    cuda = re.search(r"CUDA Version:\s*([\d.]+)", text)
    pending: tuple[int, str, str | None] | None = None
    in_processes = False
    for line in text.splitlines():
        if "Processes:" in line:
            in_processes = True
            continue
        if in_processes:
            match = _TABLE_PROC.match(line.strip())
            if match:
                gpu = None if match.group(1) == "N/A" else int(match.group(1))
                used = None if match.group(5) == "N/A" else int(match.group(5))
                processes.append(SmiProcess(gpu, int(match.group(2)), match.group(4).strip(), used, match.group(3)))
            continue
        match = _TABLE_GPU.match(line.strip())
        if match and "MiB" not in line:
            pending = (int(match.group(1)), match.group(2).strip(), match.group(4))
            continue
        memory = _TABLE_MEM.search(line)
        if memory:
            index, name, bus = pending if pending else (len(gpus), None, None)
            used, total = _checked(int(memory.group(1)), int(memory.group(2)), index)
            gpus.append(SmiGpu(index, name, used, total, bus_id=bus))
            pending = None
    if not gpus:
        raise SmiInputError("an nvidia-smi table without a memory row ('used MiB / total MiB')")
    return SmiReading("table", tuple(gpus), tuple(processes), driver.group(1) if driver else None,
                      cuda.group(1) if cuda else None)


def _checked(used: int | None, total: int | None, index) -> tuple[int | None, int | None]:
    """(used, total) of one GPU, refused when no GPU could show them."""
    for value in (used, total):
        if value is not None and value < 0:
            raise SmiValueError(f"nvidia-smi shows GPU {index} with {value:,} MiB: a negative memory figure is no reading")
    if used is not None and total is not None and used > total:
        raise SmiValueError(f"nvidia-smi shows GPU {index} using {used:,} MiB of {total:,} MiB: more than it has")
    return used, total


def _checked_gpus(gpus: list[SmiGpu]) -> list[SmiGpu]:
    for gpu in gpus:
        _checked(gpu.used_mib, gpu.total_mib, gpu.index)
    return gpus


def _unit_suffix_cut(field: str) -> str:
    """'memory.used [MiB]' -> 'memory.used': a trailing bracketed unit cut off (string tests, linear time)."""
    if field.endswith("]") and "[" in field:
        return field[:field.index("[")].rstrip()
    return field


def _split_csv(line: str) -> list[str]:
    return [field.strip() for field in line.split(",")]


def _parse_csv(text: str) -> SmiReading:
    lines = [line for line in text.splitlines() if line.strip()]
    header = _split_csv(lines[0])
    has_header = any(re.match(r"[a-z_]+(\.[a-z_]+)*$", _unit_suffix_cut(field)) and not re.match(r"\d", field)
                     for field in header) and not any(re.match(r"^\d+(\s*MiB)?$", field) for field in header)
    if not has_header:
        return _parse_csv_without_header(lines)
    names = [_unit_suffix_cut(field).strip().lower() for field in header]
    gpus, processes = [], []
    for line in lines[1:]:
        fields = _split_csv(line)
        if len(fields) != len(names):
            continue
        row = dict(zip(names, fields))
        if "used_gpu_memory" in row or "used_memory" in row or "process_name" in row:
            processes.append(SmiProcess(_int_or_none(row.get("gpu_index") or row.get("index")),
                                        _int_or_none(row.get("pid")), row.get("process_name", "?"),
                                        _mib(row.get("used_gpu_memory") or row.get("used_memory"))))
            continue
        gpus.append(SmiGpu(_int_or_none(row.get("index")), row.get("name"), _mib(row.get("memory.used")),
                           _mib(row.get("memory.total")), _mib(row.get("memory.reserved")), _mib(row.get("memory.free")),
                           row.get("pci.bus_id")))
    if not gpus and not processes:
        raise SmiInputError("a CSV without GPU rows (use --query-gpu=index,name,memory.used,memory.total --format=csv)")
    return SmiReading("csv", tuple(gpus), tuple(processes))


def _parse_csv_without_header(lines: list[str]) -> SmiReading:
    """`--format=csv,noheader`: only the common orders can be read (memory columns: used then total)."""
    gpus = []
    for number, line in enumerate(lines):
        fields = _split_csv(line)
        memory = [(i, _mib(f)) for i, f in enumerate(fields) if re.match(r"^\d+(\s*MiB)?$", f) and _mib(f) is not None]
        names = [f for f in fields if re.search(r"[A-Za-z]{2}", f) and "MiB" not in f]
        index = memory[0][1] if memory and memory[0][0] == 0 and len(memory) >= 3 else None
        values = [v for i, v in memory if not (index is not None and i == 0)]
        if len(values) == 2 and values[0] <= values[1]:
            gpus.append(SmiGpu(index if index is not None else number, names[0] if names else None, values[0], values[1]))
        elif len(values) == 3 and values[0] + values[1] <= values[2] + 1:
            # memory.free, memory.used, memory.total is not distinguishable from used, free, total: refuse
            raise SmiInputError("a CSV without a header and three memory columns is ambiguous; add the header "
                                "(--format=csv)")
        else:
            raise SmiInputError("a CSV without a header: expected memory.used, memory.total (or add the header)")
    return SmiReading("csv", tuple(gpus))


def _int_or_none(text: str | None) -> int | None:
    try:
        return int(str(text).strip())
    except (TypeError, ValueError):
        return None


def _parse_xml(text: str) -> SmiReading:
    import xml.etree.ElementTree as ElementTree

    if "<!ENTITY" in text:
        raise SmiInputError("XML with entity declarations is not nvidia-smi output")
    try:
        root = ElementTree.fromstring(text)
    except ElementTree.ParseError as error:
        raise SmiInputError(f"not valid nvidia-smi XML ({error})") from None
    if root.tag != "nvidia_smi_log":
        raise SmiInputError(f"XML root is <{root.tag}>, not <nvidia_smi_log>")
    gpus, processes = [], []
    for number, gpu in enumerate(root.findall("gpu")):
        index = _int_or_none(gpu.findtext("minor_number"))
        index = number if index is None else index
        memory = gpu.find("fb_memory_usage")
        gpus.append(SmiGpu(
            index, (gpu.findtext("product_name") or "").strip() or None,
            _mib(memory.findtext("used")) if memory is not None else None,
            _mib(memory.findtext("total")) if memory is not None else None,
            _mib(memory.findtext("reserved")) if memory is not None else None,
            _mib(memory.findtext("free")) if memory is not None else None,
            gpu.get("id"),
        ))
        for process in gpu.findall("processes/process_info"):
            processes.append(SmiProcess(index, _int_or_none(process.findtext("pid")),
                                        (process.findtext("process_name") or "?").strip(),
                                        _mib(process.findtext("used_memory")), (process.findtext("type") or None)))
    if not gpus:
        raise SmiInputError("nvidia-smi XML without <gpu> elements")
    return SmiReading("xml", tuple(gpus), tuple(processes), root.findtext("driver_version"), root.findtext("cuda_version"))


def _parse_query_text(text: str) -> SmiReading:
    """`nvidia-smi -q`: sections by indentation ('FB Memory Usage' / 'Processes')."""
    gpus, processes = [], []
    driver = re.search(r"Driver Version\s*:\s*(\S+)", text)
    cuda = re.search(r"CUDA Version\s*:\s*(\S+)", text)
    current: dict | None = None
    section = None
    process: dict | None = None

    def close_gpu():
        if current is not None:
            gpus.append(SmiGpu(current.get("minor", len(gpus)), current.get("name"), current.get("used"),
                               current.get("total"), current.get("reserved"), current.get("free"), current.get("bus")))

    for raw in text.splitlines():
        line = raw.rstrip()
        gpu_header = re.match(r"^GPU ([0-9A-Fa-f:.]+)\s*$", line)
        if gpu_header:
            close_gpu()
            current, section, process = {"bus": gpu_header.group(1)}, None, None
            continue
        if current is None:
            continue
        before, colon, after = line.partition(":")  # (a regex here was quadratic on long blank lines)
        if not colon or not before:
            section = line.strip()
            continue
        key, value = before.strip(), after.strip()
        if key == "Product Name":
            current["name"] = value
        elif key == "Minor Number":
            current["minor"] = _int_or_none(value)
        elif section == "FB Memory Usage" and key in ("Total", "Used", "Free", "Reserved"):
            current[key.lower()] = _mib(value)
        elif section == "Processes":
            if key == "Process ID":
                process = {"pid": _int_or_none(value)}
                processes.append(process)
            elif process is not None and key == "Type":
                process["type"] = value
            elif process is not None and key == "Name":
                process["name"] = value
            elif process is not None and key == "Used GPU Memory":
                process["used"] = _mib(value)
                process["gpu"] = current.get("minor", len(gpus))
    close_gpu()
    if not gpus:
        raise SmiInputError("nvidia-smi -q output without a GPU section")
    return SmiReading("query-text", tuple(gpus), tuple(
        SmiProcess(p.get("gpu"), p.get("pid"), p.get("name", "?"), p.get("used"), p.get("type")) for p in processes),
        driver.group(1) if driver else None, cuda.group(1) if cuda else None)


# --- readings quoted inside a log ---------------------------------------------------------------------------------

_PROSE_USED = re.compile(r"\((\d[\d,]{0,15})\s*MiB used\)")
_PROCESS_BARE = re.compile(r"^\s*(\S+)\s+(\d{1,12})\s*MiB\s*$")  # the name must hold python, vllm, VLLM or /
_PROCESS_NAME = re.compile(r"python|vllm|VLLM|/")
_NAME_TOTAL = re.compile(r"(?:^|\b(?P<index>\d{1,9}):\s*)?(?P<name>(?:NVIDIA|Tesla|Quadro)\b[\w .()-]*?)(?<![,\s])[,\s]+"
                         r"(?P<total>\d{1,3}(?:,\d{3})+|\d{4,6})\s?MiB\b(?!\s*/)")
IDLE_MIB = 100  # a reading below this was taken while vLLM was not running


class LineScanner:
    """Finds nvidia-smi figures in the lines of a log: table rows, `--query-gpu` CSV rows (after their header),
    process rows, 'used MiB / total MiB' in prose, and a GPU name followed by its total."""

    def __init__(self) -> None:
        self._csv_names: list[str] | None = None
        self._gpu_row: tuple[int, str] | None = None
        self._in_processes = False

    def feed(self, line: str) -> list[dict]:
        found: list[dict] = []
        stripped = line.strip()
        if (self._csv_names is None and "MiB" not in line and "memory." not in line and not stripped.startswith("|")
                and "Processes:" not in line):
            return found
        if "Processes:" in line:
            self._in_processes = True
        if self._csv_names is not None:
            fields = _split_csv(stripped)
            if len(fields) == len(self._csv_names) and "," in stripped:
                row = dict(zip(self._csv_names, fields))
                used, total = _mib(row.get("memory.used")), _mib(row.get("memory.total"))
                if used is not None or total is not None:
                    found.append({"type": "gpu", "index": _int_or_none(row.get("index")), "name": row.get("name"),
                                  "used_mib": used, "total_mib": total, "basis": "nvidia-smi CSV row"})
                    return found
            self._csv_names = None
        if "," in stripped and ("memory.used" in stripped or "memory.total" in stripped):
            self._csv_names = [_unit_suffix_cut(f).strip().lower() for f in _split_csv(stripped)]
            return found
        table_gpu = _TABLE_GPU.match(stripped)
        if table_gpu and "MiB" not in stripped:
            self._gpu_row = (int(table_gpu.group(1)), table_gpu.group(2).strip())
            return found
        process = _TABLE_PROC.match(stripped)
        if process:
            used = None if process.group(5) == "N/A" else int(process.group(5))
            found.append({"type": "process", "gpu_index": None if process.group(1) == "N/A" else int(process.group(1)),
                          "pid": int(process.group(2)), "name": process.group(4).strip(), "used_mib": used,
                          "basis": "nvidia-smi process row"})
            return found
        memories = list(_TABLE_MEM.finditer(line))
        if memories:
            for number, memory in enumerate(memories):
                index, name = self._gpu_row if (self._gpu_row and number == 0) else (None, None)
                if int(memory.group(1)) < 0 or not 0 <= int(memory.group(1)) <= int(memory.group(2)):
                    continue  # no GPU shows this (a negative figure, or more used than it has): not a reading
                found.append({"type": "gpu", "index": index, "name": name, "used_mib": int(memory.group(1)),
                              "total_mib": int(memory.group(2)), "basis": "'used MiB / total MiB'"})
            self._gpu_row = None
            return found
        prose = _PROSE_USED.search(line)
        if prose and re.search(r"nvidia-smi|memory", line, re.IGNORECASE):
            found.append({"type": "gpu", "index": None, "name": None, "used_mib": int(prose.group(1).replace(",", "")),
                          "total_mib": None, "basis": "'(N MiB used)'"})
            return found
        bare = _PROCESS_BARE.match(line)
        if bare and _PROCESS_NAME.search(bare.group(1)):
            found.append({"type": "process", "gpu_index": None, "pid": None, "name": bare.group(1),
                          "used_mib": int(bare.group(2)), "basis": "process list entry"})
            return found
        for match in _NAME_TOTAL.finditer(line):
            found.append({"type": "gpu", "index": _int_or_none(match.group("index")),
                          "name": match.group("name").strip(), "used_mib": None,
                          "total_mib": int(match.group("total").replace(",", "")), "basis": "GPU name and total"})
        return found


def reading_from_log_items(gpus: list[dict], processes: list[dict]) -> SmiReading | None:
    """The nvidia-smi figures a log quoted, as one reading (idle readings below IDLE_MIB are left out)."""
    if not gpus and not processes:
        return None
    out_gpus = []
    for item in gpus:
        used = item.get("used_mib")
        if used is not None and used < IDLE_MIB:
            used = None
        out_gpus.append(SmiGpu(item.get("index"), item.get("name"), used, item.get("total_mib")))
    out_processes = [SmiProcess(p.get("gpu_index"), p.get("pid"), p.get("name", "?"), p.get("used_mib"), p.get("type"))
                     for p in processes]
    return SmiReading("log excerpt", tuple(out_gpus), tuple(out_processes))


@dataclass
class SmiFigures:
    used_mib: int | None = None
    total_mib: int | None = None
    basis: list[str] = field(default_factory=list)


def observed_smi(gpus: list[dict], processes: list[dict]) -> SmiFigures:
    """nvidia_smi_used_mib / nvidia_smi_total_mib of GPU 0 (or the first GPU quoted) from log items."""
    out = SmiFigures()
    ordered = [item for item in gpus if item.get("index") == 0] + [item for item in gpus if item.get("index") != 0]
    for item in ordered:
        used = item.get("used_mib")
        if out.used_mib is None and used is not None and used >= IDLE_MIB:
            out.used_mib = used
            out.basis.append(item.get("basis", ""))
            if item.get("total_mib") is not None:
                out.total_mib = item["total_mib"]
    if out.total_mib is None:
        for item in ordered:
            if item.get("total_mib") is not None:
                out.total_mib = item["total_mib"]
                break
    if out.used_mib is None:
        for process in processes:
            name = str(process.get("name", ""))
            if process.get("used_mib") and re.search(r"python|vllm|VLLM", name):
                out.used_mib = process["used_mib"]
                out.basis.append("the vLLM process's entry in the process list")
                break
    return out
