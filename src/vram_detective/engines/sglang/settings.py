"""SGLang's server settings with the defaults of a release filled in (server_args.py), marking which were given.

The GPU's memory is nvidia-smi's memory.total in MiB, the minimum over the GPUs (utils.py
get_nvgpu_memory_capacity), which is what every default tier compares against.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

from .releases import Rules, rules, tier_value

DEFAULT_MAX_PREFILL_TOKENS = 16384  # ServerArgs.max_prefill_tokens, every release read


@dataclass(frozen=True)
class SGLangSettings:
    tp_size: int = 1
    pp_size: int = 1
    dp_size: int = 1
    enable_dp_attention: bool = False
    mem_fraction_static: float | None = None
    chunked_prefill_size: int | None = None
    max_prefill_tokens: int = DEFAULT_MAX_PREFILL_TOKENS
    cuda_graph_max_bs: int | None = None
    max_running_requests: int | None = None
    max_total_tokens: int | None = None
    page_size: int | None = None
    context_length: int | None = None
    kv_cache_dtype: str = "auto"
    dtype: str = "auto"
    quantization: str | None = None
    attention_backend: str | None = None
    disable_cuda_graph: bool = False
    enable_piecewise_cuda_graph: bool = False  # 0.5.8-0.5.9 opt-in
    disable_piecewise_cuda_graph: bool = False  # 0.5.10+ opt-out
    speculative_algorithm: str | None = None  # EAGLE, EAGLE3, NEXTN (MTP), STANDALONE, NGRAM
    speculative_draft_model_path: str | None = None
    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None
    disaggregation_mode: str = "null"
    max_mamba_cache_size: int | None = None
    mamba_ssm_dtype: str | None = None  # --mamba-ssm-dtype (0.5.2+): over the config's mamba_ssm_dtype
    pp_layer_partition: str | None = None  # SGLANG_PP_LAYER_PARTITION: layers per pipeline stage ("20,16"), an env var
    model_path: str | None = None
    given: frozenset[str] = field(default_factory=frozenset)  # names set by the user, not by a default

    def is_given(self, name: str) -> bool:
        return name in self.given


SETTING_NAMES = tuple(f.name for f in fields(SGLangSettings) if f.name != "given")


def from_values(values: dict) -> SGLangSettings:
    """Settings from user values (snake_case SGLang names); unknown keys are ignored, None means unset."""
    known = {key: value for key, value in values.items() if key in SETTING_NAMES and value is not None}
    return SGLangSettings(**known, given=frozenset(known))


def _parallel_table_fraction(table, parallel: int) -> float:
    for minimum, fraction in table:
        if parallel >= minimum:
            return fraction
    return table[-1][1]


def _fraction_tp_table(s: SGLangSettings, r: Rules, gpu_mem: float) -> float:
    if r["mfs_scheme"] == "tp_table":
        return _parallel_table_fraction(r["mfs_tp_table"], s.tp_size)
    # 0.4.6-0.4.7: tp*pp table up to 80 GiB, 0.88 above; above 96 GiB the fraction grows toward 18 GiB free
    fraction = _parallel_table_fraction(r["mfs_tp_table"], s.tp_size * s.pp_size) if gpu_mem <= 81920 else 0.88
    if gpu_mem > 96 * 1024:
        fraction = min(fraction + 48 * 1024 * (1 - fraction) / gpu_mem, (gpu_mem - 18 * 1024) / gpu_mem)
    return fraction


def _speculative_reserve(s: SGLangSettings, r: Rules) -> float:
    if s.speculative_algorithm is None:
        return 0.0
    eagle, standalone, ngram = r["reserved_speculative_mib"]
    return {"STANDALONE": standalone, "NGRAM": ngram}.get(s.speculative_algorithm.upper(), eagle)


def piecewise_graph_tokens(max_tokens: int) -> list[int]:
    """Token sizes of the piecewise prefill graphs (server_args.py 0.5.8 _generate_piecewise_cuda_graph_tokens)."""
    sizes = (list(range(4, 33, 4)) + list(range(48, 257, 16)) + list(range(288, 513, 32))
             + list(range(576, 1025, 64)) + list(range(1280, 4097, 256)) + list(range(4608, max_tokens + 1, 512)))
    return [size for size in sizes if size <= max_tokens]


def piecewise_enabled(s: SGLangSettings, r: Rules) -> bool:
    scheme = r["piecewise_graph_reserve"]
    if scheme == "opt_in":
        return s.enable_piecewise_cuda_graph
    return scheme == "default_on" and not s.disable_piecewise_cuda_graph and not s.disable_cuda_graph


def _piecewise_max_tokens(s: SGLangSettings, r: Rules, use_mla: bool) -> int:
    tokens = s.chunked_prefill_size if not use_mla else 2048
    if r["piecewise_tokens_context_clamp"] and s.context_length is not None:
        tokens = min(tokens, s.context_length)  # 0.5.13-0.5.16
    return tokens


def reserved_mib(s: SGLangSettings, r: Rules, gpu_mem: float, use_mla: bool = False) -> float:
    """The MiB the default fraction leaves for activations and graphs (0.4.8+ schemes)."""
    if r["mfs_scheme"] == "reserved_tiers":
        base, per_rank = tier_value(r["mfs_reserved_tiers"], gpu_mem)
        reserved = (base + s.tp_size * s.pp_size * per_rank) * 1024
        return reserved + (4096 if s.enable_dp_attention else 0) + _speculative_reserve(s, r)
    prefill = s.chunked_prefill_size if s.chunked_prefill_size and s.chunked_prefill_size > 0 else s.max_prefill_tokens
    decode_graphs = not (r["graph_reserve_skips_disabled"] and s.disable_cuda_graph)
    graphs = s.cuda_graph_max_bs * 2 if decode_graphs else 0
    reserved = 512 + max(prefill, 2048) * 1.5 + graphs + s.tp_size * s.pp_size / 8 * 1024
    if s.enable_dp_attention:
        reserved += s.cuda_graph_max_bs * s.dp_size * 3
        if s.cuda_graph_max_bs > 300:
            reserved += s.cuda_graph_max_bs * s.dp_size * 1.5
    if piecewise_enabled(s, r):
        if use_mla and r["piecewise_graph_reserve"] == "default_on":
            reserved += 1.5 * 1024
        else:
            reserved += len(piecewise_graph_tokens(_piecewise_max_tokens(s, r, use_mla))) * 8
    if gpu_mem > 60 * 1024:
        reserved = max(reserved, r["reserved_floor_mib"])
    return reserved + _speculative_reserve(s, r)


def _chunked_prefill(s: SGLangSettings, r: Rules, gpu_mem: float) -> int:
    disaggregated = r["chunked_prefill_disaggregation"]
    if disaggregated and s.disaggregation_mode != "null" and gpu_mem >= 25_000:
        return disaggregated
    return tier_value(r["chunked_prefill_tiers"], gpu_mem)


def _cuda_graph_max_bs(s: SGLangSettings, r: Rules, gpu_mem: float) -> int:
    small_tp, large_tp = tier_value(r["cuda_graph_max_bs_tiers"], gpu_mem)
    value = small_tp if s.tp_size < 4 else large_tp
    value = value if value is not None else tier_value(r["cuda_graph_runner_max_bs"], gpu_mem)
    if r["graph_bs_capped_by_requests"] and s.max_running_requests is not None:
        value = min(value, s.max_running_requests)  # 0.5.22+
    return value


def _page_size(s: SGLangSettings, r: Rules) -> int:
    forced = dict(r["backend_page_size"]).get(s.attention_backend or "")
    if forced and (s.page_size is None or s.attention_backend in ("flashmla", "cutlass_mla")):
        return forced
    return s.page_size if s.page_size is not None else r["page_size_default"]


def speculative_params(s: SGLangSettings, r: Rules, architecture: str = "") -> tuple[int, int, int] | None:
    """(num_steps, eagle_topk, num_draft_tokens): the given ones, the rest from the release's defaults
    (auto_choose_speculative_params fills all three when any is unset); None without speculative decoding."""
    if s.speculative_algorithm is None or s.speculative_algorithm.upper() == "NGRAM":
        return None
    default, by_arch = r["speculative_defaults"] if r["draft_pool"] != "none" else ((0, 0, 0), ())
    if s.speculative_algorithm.upper() == "STANDALONE" and r["speculative_standalone_defaults"]:
        default = r["speculative_standalone_defaults"]
    else:
        default = next((value for archs, value in by_arch if architecture in archs), default)
    given = (s.speculative_num_steps, s.speculative_eagle_topk, s.speculative_num_draft_tokens)
    return tuple(value if value is not None else fallback for value, fallback in zip(given, default))


def resolve(s: SGLangSettings, version: str | tuple | None, gpu_mem_mib: float, use_mla: bool = False,
            architecture: str = "") -> SGLangSettings:
    """Fill in a release's defaults for a GPU of `gpu_mem_mib` (nvidia-smi memory.total, MiB)."""
    r = rules(version)
    params = speculative_params(s, r, architecture)
    if params is not None:
        s = replace(s, speculative_num_steps=params[0], speculative_eagle_topk=params[1],
                    speculative_num_draft_tokens=params[2])
    if s.enable_dp_attention and not s.is_given("dp_size"):
        s = replace(s, dp_size=s.tp_size)
    s = replace(s, page_size=_page_size(s, r))
    if s.chunked_prefill_size is None:
        s = replace(s, chunked_prefill_size=_chunked_prefill(s, r, gpu_mem_mib))
    if s.cuda_graph_max_bs is None:
        s = replace(s, cuda_graph_max_bs=_cuda_graph_max_bs(s, r, gpu_mem_mib))
    if s.mem_fraction_static is None:
        if r["mfs_scheme"] in ("tp_table", "tp_table_boost"):
            fraction = _fraction_tp_table(s, r, gpu_mem_mib)
        else:
            fraction = round((gpu_mem_mib - reserved_mib(s, r, gpu_mem_mib, use_mla)) / gpu_mem_mib, 3)
        s = replace(s, mem_fraction_static=fraction)
    if s.enable_dp_attention and r["mfs_scheme"] in ("tp_table", "tp_table_boost", "reserved_tiers"):
        # 0.4.x: DP attention halves the prefill chunk and caps graphs at 96 (server_args.py 0.4.0)
        if not s.is_given("chunked_prefill_size"):
            s = replace(s, chunked_prefill_size=s.chunked_prefill_size // 2)
        s = replace(s, cuda_graph_max_bs=min(s.cuda_graph_max_bs, 96))
    return s
