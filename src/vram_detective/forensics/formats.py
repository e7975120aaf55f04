"""Which vLLM release and engine path a log's *format* points to (design/vllm-memory.md §2).

Two ways in: a whole log text (`infer_version_from_log`, `infer_engine_from_log`, used by the scorer),
or the set of format markers the streaming parser collected line by line (`era_from_markers`,
`engine_from_markers`), which give the same answers without holding the text. Light module: `re` and units only.
"""
from __future__ import annotations

import re

from ..engines import get_engine
from ..units import format_version, parse_version

# Log formats that pin an era, most specific first: (marker name, pattern on one line, release it points to).
LINE_ERAS = (
    ("kv-one-line", re.compile(r"GPU KV cache size: [\d,]+ tokens, Maximum concurrency"), "0.28.0"),
    ("weights-format-gib", re.compile(r"Model loading took \d+\.\d{1,2} GiB memory"), "0.15.0"),
    ("weights-gib-memory", re.compile(r"Model loading took \d+\.\d{4} GiB memory"), "0.12.0"),
    ("available-kv", re.compile(r"Available KV cache memory"), "0.9.1"),
    ("kv-tokens", re.compile(r"GPU KV cache size: [\d,]+ tokens"), "0.8.0"),
    ("weights-gib-and", re.compile(r"Model loading took \d+\.\d+ GiB and"), "0.8.3"),
    ("weights-gb-and", re.compile(r"Model loading took \d+\.\d+ GB and"), "0.8.0"),
    ("cuda-blocks-lower", re.compile(r"# cuda blocks"), "0.7.3"),
    ("cuda-blocks-upper", re.compile(r"# CUDA blocks"), "0.7.0"),
    # V1 alpha/beta (0.6.4-0.7.x) prints the V0 weights line but no CPU blocks (a two-line marker, below)
    ("v1-alpha-blocks", None, "0.7.0"),
    ("profiling-takes", re.compile(r"Memory profiling takes|the current vLLM instance can use"), "0.6.5"),
    ("profiling-results", re.compile(r"Memory profiling results: total_gpu_memory"), "0.6.4"),
    ("weights-gb", re.compile(r"Loading model weights took [\d.]+ GB"), "0.6.3"),
)
_WEIGHTS_V0 = re.compile(r"Loading model weights took")
_BLOCKS_WITHOUT_CPU = re.compile(r"# GPU blocks: \d+(?!\d|, # CPU)")

# The same table over a whole text (the scorer's original form; kept byte for byte).
_LOG_ERAS = (
    (re.compile(r"GPU KV cache size: [\d,]+ tokens, Maximum concurrency"), "0.28.0"),
    (re.compile(r"Model loading took \d+\.\d{1,2} GiB memory"), "0.15.0"),
    (re.compile(r"Model loading took \d+\.\d{4} GiB memory"), "0.12.0"),
    (re.compile(r"Available KV cache memory"), "0.9.1"),
    (re.compile(r"GPU KV cache size: [\d,]+ tokens"), "0.8.0"),
    (re.compile(r"Model loading took \d+\.\d+ GiB and"), "0.8.3"),
    (re.compile(r"Model loading took \d+\.\d+ GB and"), "0.8.0"),
    (re.compile(r"# cuda blocks"), "0.7.3"),
    (re.compile(r"# CUDA blocks"), "0.7.0"),
    (re.compile(r"Loading model weights took[\s\S]*# GPU blocks: \d+(?!\d|, # CPU)"), "0.7.0"),
    (re.compile(r"Memory profiling takes|the current vLLM instance can use"), "0.6.5"),
    (re.compile(r"Memory profiling results: total_gpu_memory"), "0.6.4"),
    (re.compile(r"Loading model weights took [\d.]+ GB"), "0.6.3"),
)

# What each era marker means, in words (for the inferred-release explanation).
ERA_EVIDENCE = {
    "kv-one-line": "'GPU KV cache size: N tokens, Maximum concurrency ...' on one line (0.28+)",
    "weights-format-gib": "'Model loading took X GiB memory' with format_gib's 1-2 decimals (0.15+)",
    "weights-gib-memory": "'Model loading took X.XXXX GiB memory' (0.12-0.13)",
    "available-kv": "'Available KV cache memory' (V1, 0.9.1+)",
    "kv-tokens": "'GPU KV cache size: N tokens' (V1, 0.8+)",
    "weights-gib-and": "'Model loading took X GiB and ... seconds' (0.8.3-0.11)",
    "weights-gb-and": "'Model loading took X GB and ... seconds' (0.8.0-0.8.2)",
    "cuda-blocks-lower": "'# cuda blocks' (V0, 0.7.3-0.10)",
    "cuda-blocks-upper": "'# CUDA blocks' (V0, 0.7.0-0.7.2)",
    "v1-alpha-blocks": "'Loading model weights took' then '# GPU blocks' without CPU blocks (V1 alpha, 0.6.4-0.7.x)",
    "profiling-takes": "the three-line 'Memory profiling takes ...' summary (V0, 0.6.5+)",
    "profiling-results": "'Memory profiling results: total_gpu_memory=...' (V0, 0.6.4.x)",
    "weights-gb": "'Loading model weights took X GB' (V0, 0.4-0.7)",
}


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
    match = re.fullmatch(r"(\d+)\.(\d+)\.x\b.*", version.strip())
    if not match:
        return version
    stated = parse_version(version)
    best = stated
    for pattern, plain, quantized in FEATURE_MINIMUMS:
        minimum = get_engine("vllm").releases.first_release(quantized if other_quantization else plain).version
        if minimum[:2] == stated[:2] and pattern.search(log or ""):
            best = max(best, minimum)
    return format_version(best)


def infer_version_from_log(log: str) -> str | None:
    for pattern, version in _LOG_ERAS:
        if pattern.search(log or ""):
            return version
    return None


_V0_MARKERS = re.compile(r"# CPU blocks|# cuda blocks|# CUDA blocks|Memory profiling takes|non_torch_memory|Memory profiling results")
_V1_MARKERS = re.compile(r"GPU KV cache size|Available KV cache memory|EngineCore|gpu_model_runner\.py|gpu_worker\.py"
                         r"|Loading model weights took[\s\S]*# GPU blocks: \d+(?!\d|, # CPU)")
_V1_LINE_MARKERS = re.compile(r"GPU KV cache size|Available KV cache memory|EngineCore|gpu_model_runner\.py|gpu_worker\.py")


def infer_engine_from_log(log: str) -> str | None:
    """The engine path a log shows: V0 prints CPU swap blocks and the profiling summary, V1 does not."""
    # V1 markers first: V1 also prints "Memory profiling takes ..." at DEBUG level (0.9.1-0.26)
    if _V1_MARKERS.search(log or ""):
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
        self._weights_v0_seen = False

    def _engine(self, engine: str, evidence: str) -> None:
        self.engine.add(engine)
        self.engine_evidence.setdefault(engine, evidence)

    def feed(self, line: str) -> None:
        if "took" in line or "KV cache" in line or "blocks" in line or "Memory profiling" in line \
                or "instance can use" in line:
            for name, pattern, _ in LINE_ERAS:
                if pattern is not None and name not in self.eras and pattern.search(line):
                    self.eras.add(name)
        if "v1" in self.engine and not ("blocks" in line or "took" in line):
            return  # V1 already shown (it wins over V0); only the era markers above still matter
        if self._weights_v0_seen and _BLOCKS_WITHOUT_CPU.search(line):
            self.eras.add("v1-alpha-blocks")
            self._engine("v1", "'# GPU blocks' without CPU blocks after 'Loading model weights took'")
        if _WEIGHTS_V0.search(line):
            self._weights_v0_seen = True
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
        self._weights_v0_seen = self._weights_v0_seen or other._weights_v0_seen


def era_from_markers(markers: FormatMarkers) -> tuple[str, str] | None:
    """(release, marker name) of the most specific era marker seen, like infer_version_from_log."""
    for name, _, version in LINE_ERAS:
        if name in markers.eras:
            return version, name
    return None


def engine_from_markers(markers: FormatMarkers) -> str | None:
    if "v1" in markers.engine:
        return "v1"
    if "v0" in markers.engine:
        return "v0"
    return None
