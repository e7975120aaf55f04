"""Ollama's defaults by version (the one rule table for Ollama versions). Anchors: the dev logs (0.3.x with the
vendored llama.cpp 1e6f655 runner; the 2025/2026 Windows runner with llama_kv_cache lines; 0.32.13 spawning
llama-server) and Ollama's docs/FAQ by release. Rows marked approximate are bracketed, not pinned to the PR."""
from __future__ import annotations

from ..common.rules import ReleaseWindow, Rule, UnsupportedReleaseError, rule_names, value_at  # noqa: F401

Version = tuple[int, ...]


RULES: tuple[Rule, ...] = (
    Rule((0, 0, 0), "num_ctx", 2048, "api/types.go DefaultOptions NumCtx 2048 (0.3.x; dev T4 log 4x2048)"),
    Rule((0, 6, 6), "num_ctx", 4096, "default context 4096 (docs/faq.md 'How can I specify the context window')",
               True),
    Rule((0, 15, 0), "num_ctx", "by VRAM",
               "context by VRAM: < 24 GiB 4096, 24-48 GiB 32768, >= 48 GiB 262144 (docs context-length)", True),
    Rule((0, 0, 0), "num_parallel", 1, "one request at a time before OLLAMA_NUM_PARALLEL"),
    Rule((0, 2, 0), "num_parallel", "auto",
               "envconfig: 4 when memory allows, else 1 (dev T4 log: n_ctx 8192 = 4 x 2048)", True),
    Rule((0, 6, 0), "num_parallel", 1, "OLLAMA_NUM_PARALLEL defaults to 1 (docs/faq.md)", True),
    Rule((0, 0, 0), "flash_attn", "off", "OLLAMA_FLASH_ATTENTION unset = off (envconfig/config.go)"),
    Rule((0, 12, 0), "flash_attn", "auto",
               "flash attention on where the model and GPU support it; 0.32.13 passes --flash-attn auto", True),
    Rule((0, 0, 0), "kv_cache_type", False, "no OLLAMA_KV_CACHE_TYPE: f16 cache"),
    Rule((0, 5, 0), "kv_cache_type", True,
               "OLLAMA_KV_CACHE_TYPE f16 | q8_0 | q4_0, honoured only with flash attention", True),
    Rule((0, 0, 0), "runner", "runner", "ollama runner process linking llama.cpp (llm/server.go)"),
    Rule((0, 32, 0), "runner", "llama-server",
               "'using llama-server for model' (dev 0.32.13 log): upstream llama-server lines", True),
    Rule((0, 0, 0), "minimum_memory_mib", 457, "gpu/gpu.go cudaMinimumMemory = 457 MiB (0.3.x)"),
    Rule((0, 0, 0), "weights_include_kv", True,
               "llm/memory.go adds kv[i] to each layer's size before summing memory.weights (dev T4 log: "
               "weights.total 4.7 GiB for a 4.33 GiB file with 1.0 GiB KV)"),
    Rule((0, 0, 0), "n_batch", 512, "api/types.go NumBatch 512"),
    Rule((0, 0, 0), "embeddings", True, "runner started with --embedding (dev T4 log: output buffer "
               "2.02 MiB = (n_vocab + n_embd) x 4 seqs x 4 B)"),
    Rule((0, 32, 0), "embeddings", False, "llama-server without --embedding (dev 0.32.13 log)", True),
    Rule((0, 0, 0), "no_mmap_on_windows_cuda", True,
               "llm/server.go: Windows + CUDA runs --no-mmap (dev Windows logs: CUDA_Host model buffer)"),
    # the llama.cpp build each Ollama line vendors (its log formats and rules follow that build)
    Rule((0, 0, 0), "llamacpp_build", 3600, "ollama 0.3.x vendors llama.cpp 1e6f655 (Aug 2024)", True),
    Rule((0, 5, 0), "llamacpp_build", 4400, "ollama 0.5.x (Dec 2024) llama.cpp sync", True),
    Rule((0, 6, 0), "llamacpp_build", 4880, "ollama 0.6.x (spring 2025) llama.cpp sync", True),
    Rule((0, 12, 0), "llamacpp_build", 6700, "llama_kv_cache era (dev Windows logs, late 2025)", True),
    Rule((0, 32, 0), "llamacpp_build", 7342, "llama-server with sched_reserve lines (dev 0.32.13 log)", True),
)
NEWEST: Version = (0, 32, 13)
WINDOW = ReleaseWindow("Ollama", (0, 3, 0), NEWEST, 3, lambda version: ".".join(map(str, version)))
KNOWN = ("0.3.8", "0.5.7", "0.6.8", "0.12.0", "0.32.13")


def parse_version(text: str | None) -> Version:
    if text is None or str(text).lower() in ("", "latest"):
        return NEWEST
    raw = str(text).lower().removeprefix("v").split("-")[0]
    try:
        parts = tuple(int(x) for x in raw.split("."))
    except ValueError:
        raise ValueError(f"Ollama version {text!r}: expected like 0.6.8") from None
    return (parts + (0, 0, 0))[:3]


def rule(name: str, version: Version):
    return value_at(RULES, name, tuple(version))


def rules_at(version: Version, path=None) -> dict:
    return {name: rule(name, version) for name in rule_names(RULES)}


def default_num_ctx(version: Version, vram_bytes: int) -> int:
    value = rule("num_ctx", version)
    if value != "by VRAM":
        return int(value)
    gib = vram_bytes / 2**30
    return 4096 if gib < 24 else 32768 if gib < 48 else 262144


def default_num_parallel(version: Version, fits_four: bool = True) -> int:
    value = rule("num_parallel", version)
    return (4 if fits_four else 1) if value == "auto" else int(value)


_MISSING = object()


def rule_at(version: Version, name: str, path=None, default=_MISSING):
    try:
        return rule(name, version)
    except KeyError:
        if default is _MISSING:
            raise
        return default


def resolve_version(text: str | None) -> Version:
    """A version users name ('0.6.8', 'latest', None) -> (0, 6, 8); UnsupportedReleaseError (a ValueError)
    outside the modelled versions."""
    return WINDOW.check(parse_version(text), None if text in (None, "", "latest") else str(text))


def first_release(test):
    for text in KNOWN:
        if test(rules_at(parse_version(text))):
            return parse_version(text)
    return None


def is_modelled(version: Version) -> bool:
    return tuple(version) >= WINDOW.oldest


def era(version: str, variant: str = "") -> str:
    """One era for every Ollama release (its cases are few): what `score`'s tables and the intervals group by."""
    return "Ollama"
