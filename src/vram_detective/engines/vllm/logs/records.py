"""One line of a vLLM log as records: cleaned (ANSI colours, "[repeated Nx across cluster]"), split where several
records were glued onto one line, the worker prefix read into a rank; and the config line and the non-default
args dict read into settings (bounded work on a hostile line)."""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from .runs import SETTING_KEYS, SourceInfo

# --- line cleaning and record splitting ----------------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
# (?<!\s) and (?<=\S): a whitespace run is tried from its start only (linear time on long blank runs)
_REPEATED = re.compile(r"(?<!\s)\s*\[repeated \d{1,12}x across cluster\]")
_PREFIX = re.compile(r"\((?P<label>[A-Za-z][^()]*?)(?<=\S)\s+pid=(?P<pid>\d{1,12})(?:,\s*ip=(?P<ip>[^()\s]+))?\)")
_LEVEL_TIME = re.compile(r"\b(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+\d\d-\d\d\s+\d\d:\d\d:\d\d(?:[.,]\d+)?")
_HEADER = re.compile(
    r"\b(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+(?:\d\d-\d\d\s+\d\d:\d\d:\d\d(?:[.,]\d+)?\s+)?"
    r"(?:\[[\w./\\-]+\.py:\d+\]|[\w./\\-]+\.py:\d+\])\s?"
)
def _clean(line: str) -> str:
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    if "[repeated" in line:
        line = _REPEATED.sub("", line)
    return line.replace("\t", "    ").rstrip()


_LEVEL_WORDS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
# the bulk of a long serving log: request and throughput lines never carry a startup figure
_NOISE = ("throughput:", 'HTTP/1.1"', "Received request", "Finished request", "Added request", "Aborted request",
          "prefix cache hit rate", "Prefix cache hit rate")


def _split_records(line: str) -> list[str]:
    """Several log records glued on one line (Ray's aggregated output, excerpts) -> one string each."""
    if line.count("pid=") <= 1:
        levels = [line.find(word) for word in _LEVEL_WORDS if word in line]
        if not levels or (len(levels) == 1 and sum(line.count(w) for w in _LEVEL_WORDS) == 1
                          and not any(ch.isdigit() for ch in _PREFIX.sub("", line[:levels[0]]))):
            return [line]
    prefixes = list(_PREFIX.finditer(line))
    cuts = [m.start() for m in prefixes]
    prefix_ends = [m.end() for m in prefixes]
    for match in _LEVEL_TIME.finditer(line):
        start = match.start()
        # a level right after a prefix (maybe with "[Stage-1]" between) belongs to that prefix
        if any(0 <= start - end <= 40 and re.fullmatch(r"\s*(?:\[[^\]]*\]\s*)*", line[end:start]) for end in prefix_ends):
            continue
        cuts.append(start)
    cuts = sorted(set(c for c in cuts if c > 0))
    if not cuts:
        return [line]
    pieces, last = [], 0
    for cut in cuts:
        if line[last:cut].strip():
            pieces.append(line[last:cut])
        last = cut
    pieces.append(line[last:])
    return pieces


@dataclass
class _Record:
    text: str  # the whole record, cleaned
    message: str  # after the level / file:line header (or the whole record)
    level: str | None
    prefix: re.Match | None


def _record(text: str) -> _Record:
    prefix = _PREFIX.search(text)
    header = _HEADER.search(text)
    if header is not None:
        message = text[header.end():]
        level = header.group("level")
    else:
        level_time = _LEVEL_TIME.search(text)
        level = level_time.group("level") if level_time else None
        message = text[prefix.end():] if prefix else (text[level_time.end():] if level_time else text)
    if prefix is not None and header is not None and prefix.start() > header.start():
        prefix = None  # a "(... pid=...)" inside the message is not this record's prefix
    return _Record(text, message.strip(), level, prefix)


def _source_of(record: _Record) -> SourceInfo:
    if record.prefix is None:
        return SourceInfo("", "rank 0", "main", True)
    label = record.prefix.group("label").strip()
    pid = record.prefix.group("pid")
    ip = record.prefix.group("ip")
    tp = _int(re.search(r"TP(\d{1,9})", label))
    pp = _int(re.search(r"PP(\d{1,9})", label))
    dp = _int(re.search(r"DP(\d{1,9})|EngineCore_(\d{1,9})", label))
    rank = _int(re.search(r"rank[= ](\d{1,9})", label))
    lowered = label.lower()
    if lowered.startswith("apiserver") or lowered.startswith("api_server"):
        return SourceInfo(label, "rank 0", "api", True, pids={pid})
    if lowered.startswith("enginecore"):
        if dp:
            return SourceInfo(label, f"DP{dp}", "engine", False, dp=dp, pids={pid})
        return SourceInfo(label, "rank 0", "engine", True, dp=dp, pids={pid})
    if tp is not None or pp is not None:
        parts = []
        if dp:
            parts.append(f"DP{dp}")
        if pp is not None:
            parts.append(f"PP{pp}")
        parts.append(f"TP{tp if tp is not None else 0}")
        is0 = not tp and not pp and not dp
        name = "rank 0" if is0 else " ".join(parts)
        return SourceInfo(label, name, "worker", is0, tp=tp, pp=pp, dp=dp, pids={pid})
    if rank is not None:
        return SourceInfo(label, "rank 0" if rank == 0 else f"rank {rank}", "worker", rank == 0, rank=rank, pids={pid})
    where = f" ({ip})" if ip else ""
    kind = "Ray worker" if "ray" in lowered else "worker"
    return SourceInfo(label, f"{kind} pid {pid}{where}", "worker", None, pids={pid}, ips={ip} if ip else set())


def _int(match: re.Match | None) -> int | None:
    if match is None:
        return None
    for group in match.groups():
        if group is not None:
            return int(group)
    return None


# --- config line and non-default args ------------------------------------------------------------------------

_CONFIG_FIELDS = (
    ("dtype", r"\bdtype=(?:torch\.)?(\w+)", str),
    ("max_model_len", r"\bmax_seq_len=(\d{1,15})", int),
    ("tensor_parallel_size", r"\btensor_parallel_size=(\d{1,15})", int),
    ("pipeline_parallel_size", r"\bpipeline_parallel_size=(\d{1,15})", int),
    ("data_parallel_size", r"\bdata_parallel_size=(\d{1,15})", int),
    ("quantization", r"\bquantization=([\w-]+)", str),
    ("enforce_eager", r"\benforce_eager=(True|False)", bool),
    ("kv_cache_dtype", r"\bkv_cache_dtype=(\w+)", str),
    ("enable_prefix_caching", r"\benable_prefix_caching=(True|False)", bool),
    ("enable_chunked_prefill", r"\b(?:chunked_prefill_enabled|enable_chunked_prefill)=(True|False)", bool),
)


def _config_settings(body: str) -> dict:
    out = {}
    for name, pattern, kind in _CONFIG_FIELDS:
        match = re.search(pattern, body)
        if match is None:
            continue
        raw = match.group(1)
        if kind is bool:
            out[name] = raw == "True"
        elif kind is int:
            out[name] = int(raw)
        elif raw != "None":
            out[name] = raw
    spec = re.search(r"\bspeculative_config=(None|\w+\()", body)
    if spec and spec.group(1) != "None":
        out["speculative_config"] = "set"
    return out


# the keys whose values a non-default-args line is read for; only these are scanned and evaluated, each over at
# most _MAX_VALUE_CHARS, at most _MAX_VALUES times (bounded work on a hostile line)
_DICT_KEYS = frozenset(SETTING_KEYS) | {"model", "model_tag"}
_MAX_VALUE_CHARS = 4096
_MAX_VALUES = 64


def _python_dict_items(body: str) -> dict:
    """Key/value pairs of a printed Python dict, tolerating '...' elisions and a cut end (the keys in _DICT_KEYS)."""
    out = {}
    budget = _MAX_VALUES
    for match in re.finditer(r"'(\w+)':\s*", body):
        if match.group(1) not in _DICT_KEYS:
            continue
        budget -= 1
        if budget < 0:
            break
        start = match.end()
        value_text = _literal_prefix(body, start)
        if value_text is None:
            continue
        try:
            out[match.group(1)] = ast.literal_eval(value_text)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            continue
    return out


def _literal_prefix(text: str, start: int) -> str | None:
    """The Python literal starting at text[start] (balanced brackets and quotes), or None."""
    depth, index, quote = 0, start, None
    cut = len(text) > start + _MAX_VALUE_CHARS  # a value this long is no setting: not read
    text = text[:start + _MAX_VALUE_CHARS]
    while index < len(text):
        char = text[index]
        if quote:
            if char == "\\":
                index += 2
                continue
            if char == quote:
                quote = None
                if depth == 0:
                    return text[start:index + 1]
        elif char in "'\"":
            quote = char
        elif char in "{[(":
            depth += 1
        elif char in "}])":
            if depth == 0:
                return text[start:index].strip() or None
            depth -= 1
            if depth == 0:
                return text[start:index + 1]
        elif char == "," and depth == 0:
            return text[start:index].strip() or None
        index += 1
    return text[start:].strip() or None if depth == 0 and not quote and not cut else None
