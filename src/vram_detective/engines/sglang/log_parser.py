"""Read the memory figures out of an SGLang server log, every format from 0.4.0 to the 2026 builds.

Keys follow groundtruth/SCHEMA.md's SGLang `observed` keys (sizes in GiB as printed: SGLang's "GB" is
GiB). A second "Load weight" pair is the speculative draft model's (`draft_` prefix); a second
"KV Cache is allocated" line is the draft's once a draft loaded (`draft_`), else the sliding-window pool's (`swa_`). Only rank 0's lines count
when ranks are tagged (TP0 / DP0 TP0).
"""
from __future__ import annotations

import math
import re

_NUM = r"(-?\d+(?:\.\d+)?)"
_RANK = re.compile(r"\b(?:TP|DP|PP|EP)(\d+)\b")

_SERVER_ARGS_KEYS = ("tp_size", "dp_size", "pp_size", "mem_fraction_static", "context_length", "chunked_prefill_size",
                     "max_prefill_tokens", "max_running_requests", "max_total_tokens", "cuda_graph_max_bs",
                     "page_size", "kv_cache_dtype", "attention_backend", "model_path", "dtype", "quantization")


def _join_wrapped(text: str) -> str:
    # authors wrap long lines: a continuation line starts with spaces and no timestamp
    return re.sub(r",\s*\n\s+(?=[A-Za-z])", ", ", text)


def _is_other_rank(line: str) -> bool:
    head = line.split("]")[0] if "]" in line else ""
    return any(int(number) != 0 for number in _RANK.findall(head))


def _get(pattern: str, line: str) -> float | None:
    """The number after `pattern`; None when absent or not finite (400 digits read as a float are inf: SGLang
    prints no such figure, and the token counts are ints)."""
    match = re.search(pattern, line)
    value = float(match.group(1)) if match else None
    return value if value is not None and math.isfinite(value) else None


def _put(out: dict, key: str, value) -> None:
    if value is not None and key not in out:
        out[key] = int(value) if isinstance(value, float) and key in _INT_KEYS else value


_INT_KEYS = {"kv_cache_tokens", "max_total_num_tokens", "max_running_requests", "max_prefill_tokens",
             "chunked_prefill_size", "context_len", "mamba_cache_size", "swa_kv_cache_tokens",
             "profiled_max_total_tokens", "draft_kv_cache_tokens"}


def _load_lines(line: str, out: dict) -> None:
    prefix = "draft_" if "load_end_avail_mem_gb" in out else ""
    if "Load weight begin" in line:
        _put(out, prefix + "load_begin_avail_mem_gb", _get(r"avail mem=" + _NUM, line))
    elif "Load weight end" in line:
        _put(out, prefix + "load_end_avail_mem_gb", _get(r"avail mem=" + _NUM, line))
        _put(out, prefix + "weights_mem_usage_gb", _get(r"mem usage=" + _NUM, line))


def _kv_line(line: str, out: dict) -> None:
    """The target's pool first; a line labelled 'SWA' (0.5.17+), or a second unlabelled one without a draft, is the
    sliding-window pool's; a later one once a draft model loaded is the draft's (its own pool before 0.5.14, its
    layers at the target's #tokens after)."""
    seen = "k_size_gb" in out or "kv_size_gb" in out
    if re.search(r"\bSWA KV Cache", line):
        prefix = "swa_"
    elif re.search(r"\bFull KV Cache", line) or not seen:
        prefix = ""
    else:
        prefix = "draft_" if "draft_load_end_avail_mem_gb" in out else "swa_"
    _put(out, prefix + "kv_cache_tokens", _get(r"#tokens: " + _NUM, line))
    _put(out, prefix + "k_size_gb", _get(r"\bK size: " + _NUM, line))
    _put(out, prefix + "v_size_gb", _get(r"\bV size: " + _NUM, line))
    _put(out, prefix + "kv_size_gb", _get(r"\bKV size: " + _NUM, line))


def _graph_lines(line: str, out: dict) -> None:
    lowered = line.lower()
    if "piecewise cuda graph" in lowered:
        prefix = "piecewise_cuda_graph_"
    elif kind := re.search(r"capture (target|draft) (\w+) cuda graph", lowered):
        # 2026 speculative builds: target decode -> decode_graph_, target verify -> target_verify_graph_
        role, stage_name = kind.groups()
        if role == "draft":
            prefix = f"draft_{stage_name}_graph_"
        else:
            prefix = "target_verify_graph_" if stage_name == "verify" else f"{stage_name}_graph_"
    else:
        prefix = "cuda_graph_"
    stage = "begin" if " begin" in lowered else "end"
    _put(out, f"{prefix}{stage}_avail_mem_gb", _get(r"avail mem=" + _NUM, line))
    if stage == "end":
        _put(out, prefix + "mem_usage_gb", _get(r"mem usage=" + _NUM, line))


def _scheduler_line(line: str, out: dict) -> None:
    for key in ("max_total_num_tokens", "chunked_prefill_size", "max_prefill_tokens", "max_running_requests",
                "context_len"):
        _put(out, key, _get(key + "=" + _NUM, line))
    _put(out, "available_gpu_mem_gb", _get(r"available_gpu_mem=" + _NUM, line))


def _mamba_line(line: str, out: dict) -> None:
    _put(out, "mamba_cache_size", _get(r"max_mamba_cache_size: " + _NUM, line))
    _put(out, "mamba_conv_state_gb", _get(r"conv_state size: " + _NUM, line))
    _put(out, "mamba_ssm_state_gb", _get(r"(?<!intermediate_)ssm_state size: " + _NUM, line))
    # speculative decoding: the draft tokens' states for target verify (memory_pool.py MambaPool)
    _put(out, "mamba_intermediate_ssm_state_gb", _get(r"intermediate_ssm_state_cache size: " + _NUM, line))
    _put(out, "mamba_conv_window_gb", _get(r"intermediate_conv_window_cache size: " + _NUM, line))


def _nvidia_smi(text: str, out: dict) -> None:
    """nvidia-smi output pasted next to the log: the table, a markdown copy, or --query CSV."""
    table = re.search(r"\|\s*(\d+)MiB\s*/\s*(\d+)MiB\s*\|", text)
    markdown = re.search(r"\|\s*0\s*\|\s*`(\d+) MiB`\s*\|\s*`(\d+) MiB`", text)
    used_total = table or markdown
    if used_total:
        _put(out, "nvidia_smi_used_mib", int(used_total.group(1)))
        _put(out, "nvidia_smi_total_mib", int(used_total.group(2)))
    csv_used = re.search(r"memory\.used \[MiB\].*\n\s*0,\s*(\d+) MiB", text)
    if csv_used:
        _put(out, "nvidia_smi_used_mib", int(csv_used.group(1)))
    process = (re.search(r"\|\s+\d+\s+N/A\s+N/A\s+\d+\s+C\s+\S+\s+(\d+)MiB\s*\|", text)
               or re.search(r"--query-compute-apps=pid,used_memory.*\n\s*\d+,\s*(\d+) MiB", text))
    if process:
        _put(out, "nvidia_smi_process_mib", int(process.group(1)))


def parse_server_args(text: str) -> dict:
    """Settings from a `server_args=ServerArgs(...)` dump (or an author's 'server_args ... k=v' excerpt)."""
    found: dict = {}
    # only the dump's own lines: the scheduler line also prints chunked_prefill_size=... (figures, not settings)
    text = "\n".join(line for line in text.splitlines() if "server_args" in line.lower())
    for key in _SERVER_ARGS_KEYS:
        match = re.search(r"\b" + key + r"=('[^']*'|[^,\s)]+)", text)
        if not match:
            continue
        raw = match.group(1).strip("'")
        if raw == "None":
            continue
        try:
            found[key] = int(raw) if re.fullmatch(r"-?\d+", raw) else float(raw) if re.fullmatch(r"-?\d+\.\d*", raw) else raw
        except ValueError:
            found[key] = raw
    return found


def parse_log(text: str) -> dict:
    """The figures an SGLang log printed, keyed like SCHEMA.md's SGLang `observed`."""
    out: dict = {}
    for line in _join_wrapped(text).splitlines():
        if _is_other_rank(line):
            continue
        if "Init torch distributed ends" in line:
            _put(out, "init_dist_mem_usage_gb", _get(r"mem usage=" + _NUM, line))
        elif "Load weight" in line:
            _load_lines(line, out)
        elif "KV Cache is allocated" in line:
            _kv_line(line, out)
        elif "Mamba Cache is allocated" in line:
            _mamba_line(line, out)
        elif "Memory pool end" in line:
            _put(out, "mem_pool_end_avail_mem_gb", _get(r"avail mem=" + _NUM, line))
        elif re.search(r"(?i)capture .*cuda graph (begin|end)", line):
            _graph_lines(line, out)
        elif "max_total_num_tokens=" in line:
            _scheduler_line(line, out)
        elif "is larger than the profiled value" in line:
            _put(out, "profiled_max_total_tokens", _get(r"profiled value " + _NUM, line))
        if ("Not enough memory" in line or "leave no GPU memory for the KV cache" in line
                or "RuntimeError" in line and "mem-fraction-static" in line):
            out["startup_failed"] = True
    _nvidia_smi(text, out)
    return out


# (a line format the log shows, the rule and value that release table gives it)
_FORMAT_RULES = (
    (r"Load weight end\. elapsed=", "log_load_end", "elapsed"),
    (r"Load weight end\. type=.*mem usage=", "log_load_end", "avail_usage"),
    (r"KV Cache is allocated\. #tokens:", "log_kv_line", "tokens"),
    (r"KV Cache is allocated\. K size:", "log_kv_line", "sizes"),
    (r"available_gpu_mem=", "log_scheduler_available", True),
    (r"max_total_num_tokens=\d+, chunked_prefill_size=", "log_scheduler_chunked", True),
    (r"Capture cuda graph end\. Time elapsed: [\d.]+ s\. mem usage=", "log_graph_end", "usage_avail"),
    (r"Capture cuda graph end\. Time elapsed: [\d.]+ s\. avail mem=", "log_graph_end", "avail_usage"),
)


def infer_version(text: str):
    """The oldest release (releases.py) whose line formats are the ones this log prints; None when no line tells."""
    from .releases import first_release

    shown = [(rule, value) for pattern, rule, value in _FORMAT_RULES if re.search(pattern, text)]
    if not shown:
        return None
    return first_release(lambda r: all(r[rule] == value for rule, value in shown))
