"""The regexes the vLLM log reader runs, each with the handler that takes its match and the literals a line needs
before it is tried. Every pattern runs in time linear in the line (numbers are bounded: at most 15 integer and
20 fraction digits; benchmarks/hostile.py)."""
from __future__ import annotations

import re
from dataclasses import dataclass

# --- figure patterns -----------------------------------------------------------------------------------------

# Numbers start where a digit run starts ((?<!\d): tried once per run, not at every digit) and have bounded
# lengths; a longer run is no figure at all
_N = r"(?<!\d)(-?\d{1,15}(?:\.\d{1,20})?)"
_COUNT = r"(?<!\d)(\d{1,15})(?![\d.])"
_TOKENS = r"(?<!\d)(\d{1,3}(?:,\d{3}){1,5}|\d{1,15})(?![\d.])"


def _float(text: str) -> float:
    return float(text)


def _tokens(text: str) -> int:
    return int(text.replace(",", ""))


@dataclass(frozen=True)
class Pattern:
    """One regex the reader runs, the `_on_<name>` handler that takes its match, and the literals a line needs
    (any of them) before the regex is tried: a substring test is far cheaper than a regex search."""

    name: str
    regex: re.Pattern
    keywords: tuple[str, ...]


def _p(name: str, regex: str, *keywords: str) -> Pattern:
    return Pattern(name, re.compile(regex), keywords)


# Order matters only within one record. The formats `explain` prints (formats.py) name the patterns that read
# them back (LogFormat.read_by); the rest are lines only read (banners, settings, errors).
# fmt: off
PATTERNS: tuple[Pattern, ...] = (
    # identity first: a banner or config line after figures starts the next run before its figures land
    _p("config_line", r"Initializing (?:an?|a V[01]) LLM engine(?: \(v(?P<version>[^)\s]+)\))? with config:?(?P<body>.*)",
       "LLM engine"),
    _p("non_default_args", r"non-default args: (?P<body>\{.*)",
       "non-default args"),
    _p("server_banner", r"vLLM(?: API)? server version v?(?P<version>\d+\.\d+[\w.+-]*)(?:, serving model (?P<model>\S+))?",
       "server version"),
    _p("logo_version", r"█\s+version\s+v?(?P<version>\d+\.\d+[\w.+-]*)(?:.*?\bmodel\s+(?P<model>\S+))?",
       "version"),
    _p("logo_model", r"█\s+model\s+(?P<model>\S+)",
       "█"),
    _p("logo_version", r"^version\s+v?(?P<version>\d+\.\d+[\w.+-]*)(?:.*?\bmodel\s+(?P<model>\S+))?",
       "version"),
    _p("stated_version", r"\bvLLM(?: [Vv]ersion)?:?\s+v?(?P<version>\d+\.\d+(?:\.\d+)?(?:[.\w+-]*\w)?)",
       "vLLM"),
    _p("docker_version", r"vllm-openai:v(?P<version>\d+\.\d+(?:\.\d+)?(?:[.\w+-]*\w)?)",
       "vllm-openai:"),
    _p("wheel_version", r"\bvllm-(?P<version>\d+\.\d+\.\d+[\w.+]*?)(?:\.cu\d+)?-cp\d",
       "vllm-"),
    _p("launch_command", r"(?:vllm serve|python3? -m vllm\.entrypoints\.[\w.]+|-m vllm\.entrypoints\.[\w.]+)\s.*",
       "vllm serve", "-m vllm"),
    # weights
    _p("weights_line", r"model weights took " + _N + r" ?(GB|GiB|MB|MiB)\b",
       "weights took"),
    _p("model_loading", r"Model loading took:?\**\s*" + _N + r" ?(GiB|GB)(?! for)(?P<rest>.*)",
       "loading took"),
    _p("weights_summary", r"model weights take\s+" + _N + r"\s*GiB",
       "weights take"),
    # V0 0.6.4.x
    _p("profiling_results", r"Memory profiling results:?(?P<body>.*)",
       "profiling results"),
    # V0 0.6.5-0.10 (three lines, or the one-per-line table of the #10511 dev build)
    _p("total_gpu_memory", r"total_gpu_memory\s*(?:[=:(]\s*|\s)" + _N + r"\s*GiB",
       "total_gpu_memory"),
    _p("utilization_printed", r"gpu_memory_utilization\s*(?:\(\s*|=\s*|\s+)" + _N + r"\b",
       "gpu_memory_utilization"),
    _p("requested_v0", r"the current vLLM instance can use(?:.*?=\s*|\s+)" + _N + r"\s*GiB",
       "instance can use"),
    _p("non_torch_summary", r"non_torch_memory(?:\s+takes)?\s+" + _N + r"\s*GiB",
       "non_torch_memory"),
    _p("activation_summary", r"PyTorch activation peak memory(?:\s+takes)?\s+" + _N + r"\s*GiB",
       "activation peak memory"),
    _p("kv_summary", r"(?:KV Cache is|available_kv_cache_memory)\s+" + _N + r"\s*GiB",
       "KV Cache is", "available_kv_cache_memory"),
    _p("profiling_takes", r"Memory profiling takes " + _N + r" seconds",
       "profiling takes"),
    # V1 DEBUG profile summary (0.9.1-0.26; 0.27+ 'total consumed')
    _p("debug_non_kv", r"Total non KV cache memory: " + _N + r"\s*GiB",
       "non KV cache memory"),
    _p("debug_activation", r"torch peak memory increase: " + _N + r"\s*GiB",
       "peak memory increase"),
    _p("debug_non_torch", r"non-torch forward increase memory: " + _N + r"\s*GiB",
       "forward increase"),
    _p("debug_consumed", r"total consumed \(from mem_get_info\): " + _N + r"\s*GiB",
       "total consumed"),
    _p("debug_weights", r"weights memory: " + _N + r"\s*GiB",
       "weights memory:"),
    _p("debug_requested", r"Initial free memory:? " + _N + r" ?GiB[;,] Requested memory: " + _N + r" \(util\), " + _N + r" ?GiB",
       "Requested memory"),
    _p("kv_memory_bytes", r"Initial free memory " + _N + r" ?GiB, reserved " + _N + r" ?GiB memory for KV Cache",
       "memory for KV Cache"),
    # V1 budget
    _p("available_kv", r"Available KV cache memory:?\**\s*" + _N + r" ?GiB",
       "Available KV cache memory"),
    _p("free_on_startup", r"Free memory on device(?: [\w:]+)?:?\**\s*\(?" + _N + r"/" + _N + r" GiB\)? on startup(?P<rest>.*)",
       "Free memory on device"),
    _p("desired_utilization", r"Desired GPU memory utilization is \(" + _N + r", " + _N + r" GiB\)",
       "Desired GPU memory"),
    _p("suggest_weights", r"Actual usage is " + _N + r" GiB for weight\b",
       "GiB for "),
    _p("suggest_consumed", r"" + _N + r" GiB for consumed memory",
       "GiB for "),
    _p("suggest_activation", r"" + _N + r" GiB for peak activation",
       "GiB for "),
    _p("suggest_non_torch", r"" + _N + r" GiB for non-torch memory",
       "GiB for "),
    _p("suggest_graphs", r"" + _N + r" GiB for CUDAGraph memory",
       "GiB for "),
    _p("kv_in_use", r"Current kv cache memory in use is " + _N + r" ?(GiB|bytes)",
       "memory in use"),
    _p("suggest_fit", r"--kv-cache-memory=(\d{1,15})`?(?: \(" + _N + r" GiB\))? to fit into requested memory",
       "--kv-cache-memory="),
    _p("suggest_full", r"--kv-cache-memory=(\d{1,15})`?(?: \(" + _N + r" GiB\))? to fully utilize",
       "--kv-cache-memory="),
    # blocks, tokens, concurrency
    _p("blocks", r"(?:#\s*)?(?:GPU|CUDA|cuda|gpu) blocks: " + _COUNT + r"(?:, # CPU blocks: " + _COUNT + r")?",
       "blocks: "),
    _p("blocks_override", r"Overriding num_gpu_blocks=(\d{1,15}) with num_gpu_blocks_override=(\d{1,15})",
       "num_gpu_blocks_override"),
    _p("kv_tokens", r"GPU KV cache size: " + _TOKENS + r" tokens",
       "KV cache size"),
    _p("concurrency", r"Maximum concurrency for " + _TOKENS + r" tokens per request: " + _N + r"x",
       "Maximum concurrency"),
    # CUDA graphs
    _p("graph_capture", r"Graph capturing finished in " + _N + r" secs?(?:, took " + _N + r" GiB)?",
       "Graph capturing finished"),
    _p("graph_pool", r"CUDA graph pool memory: " + _N + r" GiB \(actual\), " + _N + r" GiB \(estimated\)",
       "graph pool memory"),
    _p("graph_estimate", r"Estimated CUDA graph memory: " + _N + r" GiB total",
       "Estimated CUDA graph"),
    _p("graph_hint", r"--gpu-memory-utilization=" + _N + r" is equivalent to --gpu-memory-utilization=" + _N,
       "is equivalent to"),
    _p("graph_hint_old", r"increase --gpu-memory-utilization from " + _N + r" to " + _N,
       "increase --gpu-memory-utilization"),
    _p("graph_hint_018", r"In v0\.19, CUDA graph memory profiling will be enabled",
       "In v0.19"),
    _p("graph_hint_021", r"default since v0\.21\.0",
       "default since v0.21"),
    # errors
    _p("no_kv_error", r"No available memory for the cache blocks",
       "No available memory"),
    _p("v0_fit_error", r"max seq len \((\d{1,15})\) is larger than the maximum number of tokens that can be stored in KV cache " r"\((\d{1,15})\)",
       "max seq len"),
    _p("v1_fit_error", r"To serve at least one request with the models?'s? max seq len \((\d{1,15})\),? \(?" + _N + r" ?(GiB|GB) KV cache is needed, which is larger than the available KV cache memory \(" + _N + r" ?(GiB|GB)\)",
       "max seq len"),
    _p("estimated_max_len", r"estimated maximum model length is (\d{1,15})",
       "estimated maximum model length"),
    _p("oom", r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory",
       "out of memory", "OutOfMemoryError"),
    _p("oom_allocate", r"Tried to allocate " + _N + r" ?(GiB|MiB)",
       "Tried to allocate"),
    _p("failure", r"EngineCore failed to start|Engine core initialization failed|EngineCore hit an exception|" r"WorkerProc hit an exception|Failed to load model|Traceback \(most recent call last\)",
       "EngineCore", "WorkerProc", "Failed to load", "Engine core", "Traceback"),
    _p("success", r"init engine \(profile, create kv cache, warmup model\) took|Application startup complete|" r"Starting vLLM API server|Uvicorn running on|Available routes are",
       "init engine", "startup complete", "Starting vLLM API", "Uvicorn running", "Available routes"),
    _p("starting_model", r"Starting to load model (?P<model>\S+?)(?:\.\.\.)?$",
       "Starting to load model"),
    _p("max_model_len_line", r"Using max model len (\d{1,15})",
       "Using max model len"),
    _p("chunked_prefill", r"Chunked prefill is enabled with max_num_batched_tokens=(\d{1,15})",
       "Chunked prefill is enabled"),
    _p("block_size_line", r"(?:Forcing kv cache block size to|Setting attention block size to|Setting kv cache block size to) " r"(\d{1,15})",
       "block size to"),
    _p("device_name", r"device_name=(NVIDIA_[\w-]+?)(?:,|\.json|$)",
       "device_name="),
    _p("reader_ranks", r"local_reader_ranks=\[([\d, ]+)\]",
       "local_reader_ranks="),
    _p("gpu_type", r"GPU type:\s*(.+?)\s*$",
       "GPU type"),
    _p("lora_on", r"\benable_lora=True|Using PunicaWrapper",
       "enable_lora=True", "PunicaWrapper"),
    _p("max_loras", r"\bmax_loras=(\d{1,15})",
       "max_loras="),
    _p("max_lora_rank", r"\bmax_lora_rank=(\d{1,15})",
       "max_lora_rank="),
    _p("speculative_on", r"Detected MTP model|Loading drafter model|speculative_config=(?!None)\S",
       "MTP model", "drafter model", "speculative_config="),
    _p("encoder_cache", r"Encoder cache will be initialized with a budget of (\d{1,15}) tokens",
       "Encoder cache"),
    _p("padding_layers", r"Add (\d{1,15}) padding layers",
       "padding layers"),
    _p("backend", r"Using (\S+) attention backend|Using (\S+) backend\b",
       "backend"),
    _p("fp8_kv", r"Using FP8 KV cache|fp8_ds_mla KV cache format",
       "FP8 KV cache", "fp8_ds_mla"),
)
# fmt: on



_ERROR_WORDS = re.compile(r"error|exception|fail|out of memory", re.IGNORECASE)
_EXCEPTION_LINE = re.compile(r"(?:\w*\.)*[A-Z]\w*(?:Error|Exception):\s")  # (\w*\.)*: one way to split dots

_MATCHERS = [(p.regex, p.name, p.keywords) for p in PATTERNS]
# a line without any of these carries nothing the parser reads
_GATE_WORDS = tuple(dict.fromkeys(
    ("GiB", " GB", "blocks", "took", "Error", "ERROR", "rror:", "xception", "MiB", "|", "memory.")
    + tuple(word for p in PATTERNS for word in p.keywords)
    + ("Processes:", "NVIDIA", "Tesla", "Quadro")))


def _any_of(words) -> re.Pattern:
    """A regex that finds whether any of `words` occurs, as a trie (one branch per next character), so each
    position tries a few characters: 2-3x cheaper than a Python loop of substring tests over ~100 words."""
    trie: dict = {}
    for word in words:
        node = trie
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}

    def build(node: dict) -> str:
        if "" in node:  # a word ends here: enough to say one occurs
            return ""
        branches = [re.escape(char) + build(child) for char, child in sorted(node.items())]
        return branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"

    return re.compile(build(trie))


_GATE = _any_of(_GATE_WORDS)
_ALL_KEYWORDS = tuple(dict.fromkeys(word for p in PATTERNS for word in p.keywords))
# keyword -> the indices in _MATCHERS of the patterns it admits, in _MATCHERS order
_MATCHERS_OF: dict[str, tuple[int, ...]] = {
    word: tuple(index for index, (_, _, words) in enumerate(_MATCHERS) if word in words) for word in _ALL_KEYWORDS}
