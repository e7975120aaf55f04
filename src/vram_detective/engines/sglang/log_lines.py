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
        head = (f"Load weight end. elapsed=T s, type={architecture}, dtype={dtype}, "
                f"avail mem={p.avail_after_weights_gib:.2f} GB")
    if r["log_load_end"] == "elapsed_quant":  # 0.5.10+: no dtype (quant= fields only for quantized checkpoints)
        head = f"Load weight end. elapsed=T s, type={architecture}, avail mem={p.avail_after_weights_gib:.2f} GB"
    return f"{head}, mem usage={usage:.2f} GB."


def _kv_line(r, p: PoolPrediction, mla: bool, kv_dtype: str = "torch.bfloat16") -> str | None:
    if r["log_kv_line"] == "none":
        return None
    sizes = (f"KV size: {p.k_size_gib:.2f} GB" if mla
             else f"K size: {p.k_size_gib:.2f} GB, V size: {p.v_size_gib:.2f} GB")
    if r["log_kv_line"] == "sizes":
        return f"KV Cache is allocated. {sizes}."
    if r["log_kv_line"] == "dtype_tokens":  # 0.5.13+
        return f"KV Cache is allocated. dtype: {kv_dtype}, #tokens: {p.max_total_num_tokens}, {sizes}"
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


def _refusal(r, p: PoolPrediction) -> str:
    if r["refusal_no_rest"] is None or p.rest_gib > 0:
        return f"RuntimeError: {r['refusal']}"
    # 0.5.14+: weights left no rest: a ValueError naming the fraction (rest = after - before x (1 - mfs))
    mfs = 1 - (p.avail_after_weights_gib - p.rest_gib) / p.avail_before_weights_gib
    return "ValueError: " + r["refusal_no_rest"].format(mfs=round(mfs, 3))


def log_lines(p: PoolPrediction, version=None, *, architecture: str = "Model", dtype: str = "torch.bfloat16",
              mla: bool = False, chunked_prefill_size: int = 8192, max_prefill_tokens: int = 16384) -> list[str]:
    """Rank 0's memory lines for a prediction (no timestamps, figures the prediction does not hold omitted)."""
    r = rules(version)
    if p.max_total_num_tokens <= 0:
        return [f"Load weight begin. avail mem={p.avail_before_weights_gib:.2f} GB",
                _load_end(r, p, architecture, dtype), _refusal(r, p)]
    lines = [f"Load weight begin. avail mem={p.avail_before_weights_gib:.2f} GB", _load_end(r, p, architecture, dtype),
             _kv_line(r, p, mla, dtype), f"Memory pool end. avail mem={p.mem_pool_end_avail_gib:.2f} GB",
             _scheduler_line(r, p, chunked_prefill_size, max_prefill_tokens)]
    return [line for line in lines if line is not None]
