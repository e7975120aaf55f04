"""Which vLLM release and engine path a log's *format* points to (the markers of formats.py's rows).

Two ways in: a whole log text (`infer_version_from_log`, `infer_engine_from_log`, used by the scorer), or the
set of format markers the streaming reader collected line by line (`era_from_markers`, `engine_from_markers`),
which give the same answers without holding the text. Light module: `re` and units only.
"""
from __future__ import annotations

import re
from functools import lru_cache

from ....units import format_version, parse_version
from .formats import era_rows, release_of


@lru_cache(maxsize=1)
def _line_eras() -> tuple[tuple[str, re.Pattern | None, str], ...]:
    """(marker name, pattern on one line or None for a marker over two lines, release), most specific first."""
    return tuple((row.value.era, None if row.value.after else re.compile(row.value.marker), release_of(row))
                 for row in era_rows())


@lru_cache(maxsize=1)
def _text_eras() -> tuple[tuple[re.Pattern, str], ...]:
    """The same markers over a whole text (a two-line marker: its first line, anything, then its own)."""
    return tuple((re.compile(_text_marker(row.value)), release_of(row)) for row in era_rows())


def _text_marker(fmt) -> str:
    return f"{fmt.after}[\\s\\S]*{fmt.marker}" if fmt.after else fmt.marker


@lru_cache(maxsize=1)
def _two_line_markers():
    """(first line, second line, marker name, engine path) of the markers that span two lines."""
    return tuple((re.compile(row.value.after), re.compile(row.value.marker), row.value.era, row.path)
                 for row in era_rows() if row.value.after)


def era_evidence() -> dict[str, str]:
    """Each era marker in words (for the inferred-release explanation)."""
    return {row.value.era: row.value.evidence for row in era_rows()}


def era_ranges() -> dict[str, str]:
    """The releases that print each era marker's format, in words."""
    return {row.value.era: row.value.printed_by for row in era_rows()}


# Words one of the era markers needs: a line without any is not tried against them (cheap substring test).
_ERA_WORDS = ("took", "KV cache", "blocks", "Memory profiling", "instance can use")


def _mla(release) -> bool:
    return bool(release["mla_latent_kv"])


def _mla_for_any_quantization(release) -> bool:
    return _mla(release) and release["mla_quantizations"] == "any"


# Lines that need a later patch release than a stated "0.7.x" implies (the scorer reads "x" as the first patch):
# (line, the rules of the first release that prints it, the same when the checkpoint is quantized by a method
# other than FP8 / compressed-tensors)
FEATURE_MINIMUMS = (
    # the MLA attention backends (rule mla_latent_kv); a quantized DeepSeek keeps MLA only where rule
    # mla_quantizations says "any" (config.py use_mla)
    (re.compile(r"Using \w+ MLA backend"), _mla, _mla_for_any_quantization),
)


def refine_wildcard_version(version: str, log: str, other_quantization: bool = False) -> str:
    """'0.7.x' with a line only 0.7.1+ prints -> '0.7.1'; any other version text is returned as it is."""
    from ..releases import first_release

    match = re.fullmatch(r"(\d+)\.(\d+)\.x\b.*", version.strip())
    if not match:
        return version
    stated = parse_version(version)
    best = stated
    for pattern, plain, quantized in FEATURE_MINIMUMS:
        minimum = first_release(quantized if other_quantization else plain).version
        if minimum[:2] == stated[:2] and pattern.search(log or ""):
            best = max(best, minimum)
    return format_version(best)


def infer_version_from_log(log: str) -> str | None:
    for pattern, version in _text_eras():
        if pattern.search(log or ""):
            return version
    return None


_V0_MARKERS = re.compile(r"# CPU blocks|# cuda blocks|# CUDA blocks|Memory profiling takes|non_torch_memory|Memory profiling results")
_V1_LINE_MARKERS = re.compile(r"GPU KV cache size|Available KV cache memory|EngineCore|gpu_model_runner\.py|gpu_worker\.py")


@lru_cache(maxsize=1)
def _v1_markers() -> re.Pattern:
    """V1's line markers, and over a whole text the two-line markers of V1 rows."""
    two_line = [_text_marker(row.value) for row in era_rows() if row.value.after and row.path == "v1"]
    return re.compile("|".join([_V1_LINE_MARKERS.pattern] + two_line))


def infer_engine_from_log(log: str) -> str | None:
    """The engine path a log shows: V0 prints CPU swap blocks and the profiling summary, V1 does not."""
    # V1 markers first: V1 also prints "Memory profiling takes ..." at DEBUG level (0.9.1-0.26)
    if _v1_markers().search(log or ""):
        return "v1"
    if _V0_MARKERS.search(log or ""):
        return "v0"
    return None


class FormatMarkers:
    """Collects, line by line, the markers the two functions above look for in a whole text."""

    def __init__(self) -> None:
        self.eras: set[str] = set()
        self.engine: set[str] = set()
        self.engine_evidence: dict[str, str] = {}  # engine -> the first text that showed it
        self._first_lines_seen: set[str] = set()  # two-line markers whose first line was seen

    def _engine(self, engine: str, evidence: str) -> None:
        self.engine.add(engine)
        self.engine_evidence.setdefault(engine, evidence)

    def feed(self, line: str) -> None:
        if any(word in line for word in _ERA_WORDS):
            for name, pattern, _ in _line_eras():
                if pattern is not None and name not in self.eras and pattern.search(line):
                    self.eras.add(name)
        if "v1" in self.engine and not ("blocks" in line or "took" in line):
            return  # V1 already shown (it wins over V0); only the era markers above still matter
        for first, second, name, path in _two_line_markers():
            if name in self._first_lines_seen and second.search(line):
                self.eras.add(name)
                self._engine(path, f"{_quoted(second)} without CPU blocks after {_quoted(first)}")
            if first.search(line):
                self._first_lines_seen.add(name)
        v1 = _V1_LINE_MARKERS.search(line)
        if v1:
            self._engine("v1", repr(v1.group(0)))
        v0 = _V0_MARKERS.search(line)
        if v0:
            self._engine("v0", repr(v0.group(0)))

    def merge(self, other: "FormatMarkers") -> None:
        self.eras |= other.eras
        self.engine |= other.engine
        for engine, evidence in other.engine_evidence.items():
            self.engine_evidence.setdefault(engine, evidence)
        self._first_lines_seen |= other._first_lines_seen


def _quoted(pattern: re.Pattern) -> str:
    """A marker's literal head in quotes: '# GPU blocks' of r'# GPU blocks: \\d+(?!...)'."""
    return "'" + re.split(r"[:\\(\[]", pattern.pattern)[0].rstrip() + "'"


def era_from_markers(markers: FormatMarkers) -> tuple[str, str] | None:
    """(release, marker name) of the most specific era marker seen, like infer_version_from_log."""
    for name, _, version in _line_eras():
        if name in markers.eras:
            return version, name
    return None


def engine_from_markers(markers: FormatMarkers) -> str | None:
    if "v1" in markers.engine:
        return "v1"
    if "v0" in markers.engine:
        return "v0"
    return None
