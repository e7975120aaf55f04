"""The memory lines SGLang would print for a prediction, in the format of the chosen release (releases.py)."""
from __future__ import annotations

from .pool import PoolPrediction
from .releases import rules


def _load_end(r, p: PoolPrediction, architecture: str, dtype: str) -> str:
    head = f"Load weight end. type={architecture}, dtype={dtype}, avail mem={p.avail_after_weights_gib:.2f} GB"
    usage = p.avail_before_weights_gib - p.avail_after_weights_gib
    if r["log_load_end"] == "avail":
        return head
    if r["log_load_end"] == "elapsed":
        head = f"Load weight end. elapsed=T s, type={architecture}, avail mem={p.avail_after_weights_gib:.2f} GB"
    return f"{head}, mem usage={usage:.2f} GB."


def _kv_line(r, p: PoolPrediction, mla: bool) -> str | None:
    if r["log_kv_line"] == "none":
        return None
    sizes = (f"KV size: {p.k_size_gib:.2f} GB" if mla
             else f"K size: {p.k_size_gib:.2f} GB, V size: {p.v_size_gib:.2f} GB")
    if r["log_kv_line"] == "sizes":
        return f"KV Cache is allocated. {sizes}."
    return f"KV Cache is allocated. #tokens: {p.max_total_num_tokens}, {sizes}"


def _scheduler_line(r, p: PoolPrediction, chunked_prefill_size: int, max_prefill_tokens: int) -> str:
    parts = [f"max_total_num_tokens={p.max_total_num_tokens}"]
    if r["log_scheduler_chunked"]:
        parts.append(f"chunked_prefill_size={chunked_prefill_size}")
    parts += [f"max_prefill_tokens={max_prefill_tokens}", f"max_running_requests={p.max_running_requests}",
              f"context_len={p.context_len}"]
    if r["log_scheduler_available"]:
        parts.append("available_gpu_mem=? GB")  # after graphs: not predicted here
    return ", ".join(parts)


def log_lines(p: PoolPrediction, version=None, *, architecture: str = "Model", dtype: str = "torch.bfloat16",
              mla: bool = False, chunked_prefill_size: int = 8192, max_prefill_tokens: int = 16384) -> list[str]:
    """Rank 0's memory lines for a prediction (no timestamps, figures the prediction does not hold omitted)."""
    r = rules(version)
    if p.max_total_num_tokens <= 0:
        return [f"Load weight begin. avail mem={p.avail_before_weights_gib:.2f} GB",
                _load_end(r, p, architecture, dtype), f"RuntimeError: {r['refusal']}"]
    lines = [f"Load weight begin. avail mem={p.avail_before_weights_gib:.2f} GB", _load_end(r, p, architecture, dtype),
             _kv_line(r, p, mla), f"Memory pool end. avail mem={p.mem_pool_end_avail_gib:.2f} GB",
             _scheduler_line(r, p, chunked_prefill_size, max_prefill_tokens)]
    return [line for line in lines if line is not None]
