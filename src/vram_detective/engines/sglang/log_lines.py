"""The memory lines SGLang would print for a prediction, in the format of the chosen release (releases.py)."""
from __future__ import annotations

from dataclasses import dataclass

from .pool import PoolPrediction
from .releases import rules


@dataclass(frozen=True)
class LogInputs:
    """What the lines print besides the pool (all GiB); None: the line is left out."""

    architecture: str = "Model"
    dtype: str = "torch.bfloat16"
    mla: bool = False
    chunked_prefill_size: int = 8192
    max_prefill_tokens: int = 16384
    init_dist_usage_gib: float | None = None
    graph_begin_avail_gib: float | None = None
    graph_usage_gib: float | None = None
    available_gpu_mem_gib: float | None = None
    draft_weights_gib: float = 0.0  # 0.5.14+: the draft worker loads before the pools (its own Load weight pair)
    graph_batch_sizes: tuple[int, ...] = ()
    verify_tokens: int = 0  # speculative decoding: the target captures verify graphs of D tokens a request

    @classmethod
    def of(cls, spec, st) -> "LogInputs":
        """From a plan's Startup (plan.py)."""
        from ...units import GIB
        from .calibration import INIT_DIST

        graph_begin = st.pool.mem_pool_end_avail_gib - st.backend_init / GIB
        dtype = "torch.float16" if st.settings.dtype in ("float16", "half") else f"torch.{spec.torch_dtype}"
        graphs = None if st.settings.disable_cuda_graph else st.decode_graphs / GIB
        verify = st.settings.speculative_num_draft_tokens or 0 if st.settings.speculative_algorithm else 0
        return cls(spec.architecture, dtype, spec.mla is not None, st.settings.chunked_prefill_size,
                   st.settings.max_prefill_tokens, INIT_DIST.bytes / GIB, graph_begin, graphs, st.available_after_graphs / GIB,
                   0.0 if st.draft_in_slack else st.draft_weights / GIB, tuple(st.graph_batch_sizes), verify)


def _load_end(r, before: float, after: float, architecture: str, dtype: str) -> str:
    head = f"Load weight end. type={architecture}, dtype={dtype}, avail mem={after:.2f} GB"
    if r["log_load_end"] == "avail":
        return head
    if r["log_load_end"] == "elapsed":
        head = f"Load weight end. elapsed=T s, type={architecture}, dtype={dtype}, avail mem={after:.2f} GB"
    if r["log_load_end"] == "elapsed_quant":  # 0.5.10+: no dtype (quant= fields only for quantized checkpoints)
        head = f"Load weight end. elapsed=T s, type={architecture}, avail mem={after:.2f} GB"
    return f"{head}, mem usage={before - after:.2f} GB."


def _load_lines(r, p: PoolPrediction, inputs: LogInputs) -> list[str]:
    """The target's Load weight pair, then (0.5.14+) the draft worker's, both before the pools."""
    draft = inputs.draft_weights_gib
    target_after = p.avail_after_weights_gib + draft
    lines = [f"Load weight begin. avail mem={p.avail_before_weights_gib:.2f} GB",
             _load_end(r, p.avail_before_weights_gib, target_after, inputs.architecture, inputs.dtype)]
    if draft:
        lines += [f"Load weight begin. avail mem={target_after:.2f} GB",
                  _load_end(r, target_after, p.avail_after_weights_gib, inputs.architecture + " (draft)", inputs.dtype)]
    return lines


def _kv_line(r, tokens: int, k: float, v: float, mla: bool, kv_dtype: str = "torch.bfloat16", label: str = "") -> str | None:
    if r["log_kv_line"] == "none":
        return None
    sizes = f"KV size: {k:.2f} GB" if mla else f"K size: {k:.2f} GB, V size: {v:.2f} GB"
    if r["log_kv_line"] == "sizes":
        return f"{label}KV Cache is allocated. {sizes}."
    if r["log_kv_line"] == "dtype_tokens":  # 0.5.13+
        return f"{label}KV Cache is allocated. dtype: {kv_dtype}, #tokens: {tokens}, {sizes}"
    return f"{label}KV Cache is allocated. #tokens: {tokens}, {sizes}"


def _kv_lines(r, p: PoolPrediction, mla: bool, kv_dtype: str) -> list[str | None]:
    """One line per pool: hybrid SWA models print the SWA pool's first up to 0.5.16 (rule swa_pool_first), labelled
    'Full' / 'SWA' from 0.5.17 (log_kv_swa_labels)."""
    if p.swa_tokens is None:
        return [_kv_line(r, p.max_total_num_tokens, p.k_size_gib, p.v_size_gib, mla, kv_dtype)] + _draft_kv(r, p, mla, kv_dtype)
    labels = ("Full ", "SWA ") if r["log_kv_swa_labels"] else ("", "")
    full = _kv_line(r, p.max_total_num_tokens, p.k_size_gib, p.v_size_gib, mla, kv_dtype, labels[0])
    swa = _kv_line(r, p.swa_tokens, p.swa_k_gib, p.swa_v_gib, mla, kv_dtype, labels[1])
    return [swa, full] if r["swa_pool_first"] else [full, swa]


def _draft_kv(r, p: PoolPrediction, mla: bool, kv_dtype: str) -> list[str | None]:
    """The draft worker's own 'KV Cache is allocated' line (its pool: the target's #tokens from 0.5.14)."""
    if not p.draft_kv_tokens:
        return []
    half = p.draft_kv_gib if mla else p.draft_kv_gib / 2
    return [_kv_line(r, p.draft_kv_tokens, half, 0.0 if mla else half, mla, kv_dtype)]


def _mamba_line(r, p: PoolPrediction) -> str | None:
    if p.mamba_slots is None:
        return None
    slots = f"max_mamba_cache_size: {p.mamba_slots}, " if r["log_mamba_line"] == "slots_sizes" else ""
    line = (f"Mamba Cache is allocated. {slots}conv_state size: {p.mamba_conv_gib:.2f}GB, "
            f"ssm_state size: {p.mamba_ssm_gib:.2f}GB")
    if p.mamba_intermediate_ssm_gib:  # memory_pool.py MambaPool with speculative decoding
        line += (f" intermediate_ssm_state_cache size: {p.mamba_intermediate_ssm_gib:.2f}GB "
                 f"intermediate_conv_window_cache size: {p.mamba_conv_window_gib:.2f}GB")
    return line


def _init_dist_line(r, inputs: LogInputs) -> str | None:
    if r["log_init_dist"] == "none" or inputs.init_dist_usage_gib is None:
        return None
    elapsed = "elapsed=T s, " if r["log_init_dist"] == "elapsed" else ""
    return f"Init torch distributed ends. {elapsed}mem usage={inputs.init_dist_usage_gib:.2f} GB"


def _graph_lines(r, inputs: LogInputs) -> list[str]:
    if inputs.graph_usage_gib is None or inputs.graph_begin_avail_gib is None:
        return []
    begin = "Capture cuda graph begin. This can take up to several minutes."
    if r["log_graph_begin_avail"]:
        begin += f" avail mem={inputs.graph_begin_avail_gib:.2f} GB"
    after = inputs.graph_begin_avail_gib - inputs.graph_usage_gib
    if str(r["log_graph_end"]).startswith("phase_backend"):  # 0.5.14+: one pair per captured phase
        per = "num_tokens_per_req" if r["log_graph_end"] == "phase_backend_per_req" else "num_tokens_per_bs"
        # cuda_graph_setup.py: a speculative target captures 'verify' graphs of the draft tokens a request
        phase, tokens = ("verify", inputs.verify_tokens) if inputs.verify_tokens else ("decode", 1)
        sizes = f"bs={list(inputs.graph_batch_sizes)}, " if inputs.graph_batch_sizes else ""
        return [f"Capture target {phase} CUDA graph begin. backend=full, {per}={tokens}, {sizes}"
                f"avail mem={inputs.graph_begin_avail_gib:.2f} GB",
                f"Capture target {phase} CUDA graph end. elapsed=T s, mem usage={inputs.graph_usage_gib:.2f} GB, "
                f"avail mem={after:.2f} GB."]
    end = {"elapsed": "Capture cuda graph end. Time elapsed: T s",
           "avail_usage": f"Capture cuda graph end. Time elapsed: T s. avail mem={after:.2f} GB. "
                          f"mem usage={inputs.graph_usage_gib:.2f} GB.",
           "usage_avail": f"Capture cuda graph end. Time elapsed: T s. mem usage={inputs.graph_usage_gib:.2f} GB. "
                          f"avail mem={after:.2f} GB."}[str(r["log_graph_end"])]
    return [begin, end]


def _scheduler_line(r, p: PoolPrediction, inputs: LogInputs) -> str:
    parts = [f"max_total_num_tokens={p.max_total_num_tokens}"]
    if r["log_scheduler_chunked"]:
        parts.append(f"chunked_prefill_size={inputs.chunked_prefill_size}")
    parts += [f"max_prefill_tokens={inputs.max_prefill_tokens}", f"max_running_requests={p.max_running_requests}",
              f"context_len={p.context_len}"]
    if r["log_scheduler_available"] and inputs.available_gpu_mem_gib is not None:
        parts.append(f"available_gpu_mem={inputs.available_gpu_mem_gib:.2f} GB")
    return ", ".join(parts)


def _refusal(r, p: PoolPrediction) -> str:
    if r["refusal_no_rest"] is None or p.rest_gib > 0:
        return f"RuntimeError: {r['refusal']}"
    # 0.5.14+: weights left no rest: a ValueError naming the fraction (rest = after - before x (1 - mfs))
    mfs = 1 - (p.avail_after_weights_gib - p.rest_gib) / p.avail_before_weights_gib
    return "ValueError: " + r["refusal_no_rest"].format(mfs=round(mfs, 3))


def log_lines(p: PoolPrediction, version=None, inputs: LogInputs | None = None, **figures) -> list[str]:
    """Rank 0's memory lines for a prediction (no timestamps; 'T' for times). `figures` are LogInputs' fields."""
    r = rules(version)
    inputs = inputs or LogInputs(**figures)
    head = [_init_dist_line(r, inputs), *_load_lines(r, p, inputs)]
    if p.max_total_num_tokens <= 0:
        lines = head + [_refusal(r, p)]
    else:
        lines = head + [_mamba_line(r, p), *_kv_lines(r, p, inputs.mla, inputs.dtype),
                        f"Memory pool end. avail mem={p.mem_pool_end_avail_gib:.2f} GB",
                        *_graph_lines(r, inputs), _scheduler_line(r, p, inputs)]
    return [line for line in lines if line is not None]
