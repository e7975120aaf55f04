"""SGLang's memory rules, release by release, in one table.

Each row says: from this release on, this rule has this value. A release's rules are the last value of
every rule at or before it. Sources are the released wheels (`shared/tools/engine-src sglang VERSION`);
"since X" means present in the X wheel and absent in the previous wheel inspected. Wheels read: 0.4.0-0.4.10,
0.5.1-0.5.23 (0.5.0 was never published). All paths are under python/sglang/srt/. Where the memory defaults live:
server_args.py _handle_gpu_memory_settings up to 0.5.18, arg_groups/memory_hook.py handle_gpu_memory_settings from
0.5.19; pool sizing: model_executor/model_runner_kv_cache_mixin.py + pool_configurator.py up to 0.5.15,
mem_cache/kv_cache_configurator.py + model_executor/pool_configurator.py from 0.5.16.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ...units import format_version, parse_version
from ..common.rules import ReleaseWindow, Rule, UnsupportedReleaseError, changes, rows_in_force  # noqa: F401

Version = tuple[int, int, int]

OLDEST_SUPPORTED: Version = (0, 4, 0)
NEWEST_KNOWN: Version = (0, 5, 23)
WINDOW = ReleaseWindow("SGLang", OLDEST_SUPPORTED, NEWEST_KNOWN, 3, format_version)
INF = float("inf")


def _v(text: str) -> Version:
    return parse_version(text)


def _added(since: str, architecture: str, model_file: str) -> tuple[Rule[bool], Rule[bool]]:
    """serves_<architecture>: False until the release whose srt/models/ first registers it (EntryClass)."""
    rule = f"serves_{architecture}"
    return (Rule(_v("0.4.0"), rule, False, f"not in srt/models/ before {since}"),
            Rule(_v(since), rule, True, f"srt/models/{model_file} {since}"))


_GEMMA_SWA = ("Gemma2ForCausalLM", "Gemma3ForCausalLM", "Gemma3ForConditionalGeneration", "Gemma3nForCausalLM",
              "Gemma3nForConditionalGeneration")
_SWA_0_5_8 = ("Llama4ForConditionalGeneration", "GptOssForCausalLM", "MiMoV2FlashForCausalLM")
_SWA_0_5_11 = _SWA_0_5_8 + ("Step3p5ForCausalLM", "Gemma4ForCausalLM", "Gemma4ForConditionalGeneration", "MiMoV2ForCausalLM")

_EXTRA_BUFFER_0_5_14 = ("Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration", "Qwen3NextForCausalLM",
                       "InternS2PreviewForConditionalGeneration", "MiniCPMV4_6ForConditionalGeneration",
                       "BailingMoeV2_5ForCausalLM", "FalconH1ForCausalLM", "GraniteMoeHybridForCausalLM",
                       "NemotronHForCausalLM", "NemotronHPuzzleForCausalLM")

_DEEPSEEK_MTP = ("DeepseekV3ForCausalLM", "DeepseekV2ForCausalLM")

# Tier tables are ((upper bound in MiB of nvidia-smi memory.total, exclusive), value) rows, first match wins.
# fmt: off
RULE_CHANGES: tuple[Rule, ...] = (
    # --- Default --mem-fraction-static (server_args.py) ---
    Rule(_v("0.4.0"), "mfs_scheme", "tp_table", "server_args.py 0.4.0 __post_init__: by tp_size only"),
    Rule(_v("0.4.6"), "mfs_scheme", "tp_table_boost", "0.4.6.post2: tp*pp table up to 80 GiB, 0.88 above, then the >96 GiB boost"),
    Rule(_v("0.4.8"), "mfs_scheme", "reserved_tiers", "0.4.8: mfs = round((gpu_mem - reserved) / gpu_mem, 3), reserved by tier"),
    Rule(_v("0.5.3"), "mfs_scheme", "reserved_formula", "0.5.3 _handle_gpu_memory_settings: 512 + prefill*1.5 + bs*2 + tp*pp/8 GiB"),
    # (minimum parallel size, fraction), first match wins
    Rule(_v("0.4.0"), "mfs_tp_table", ((16, 0.79), (8, 0.81), (4, 0.85), (2, 0.87), (1, 0.88)), "server_args.py 0.4.0-0.4.7"),
    # (upper bound MiB, base GiB, GiB per tp*pp rank)
    Rule(_v("0.4.8"), "mfs_reserved_tiers", (
        (20 * 1024, 2.8, 0.1), (35 * 1024, 2.8, 0.1), (90 * 1024, 9.5, 0.5), (100 * 1024, 12.0, 0.5),
        (160 * 1024, 12.0, 0.5), (INF, 32.0, 0.0)), "server_args.py 0.4.8-0.5.2 reserved_mem by gpu_mem tier"),
    Rule(_v("0.4.8"), "reserved_dp_attention", "flat_4g", "0.4.8: +4 GiB with --enable-dp-attention"),
    Rule(_v("0.5.3"), "reserved_dp_attention", "per_bs", "0.5.3: + bs*dp*3 MiB, + bs*dp*1.5 more when bs > 300"),
    Rule(_v("0.4.0"), "reserved_floor_mib", 0, "no floor"),
    Rule(_v("0.5.3"), "reserved_floor_mib", 10 * 1024, "0.5.3: reserved >= 10 GiB when gpu_mem > 60 GiB"),
    # speculative reserve in MiB: (EAGLE-like, STANDALONE, NGRAM)
    Rule(_v("0.4.8"), "reserved_speculative_mib", (2048, 2048, 2048), "0.4.8: +2 GiB for any speculative algorithm"),
    Rule(_v("0.5.2"), "reserved_speculative_mib", (2048, 6144, 2048), "0.5.2: STANDALONE draft +6 GiB"),
    Rule(_v("0.5.3"), "reserved_speculative_mib", (2048, 6144, 0), "0.5.3 _handle_gpu_memory_settings: NGRAM reserves nothing"),
    Rule(_v("0.5.10"), "reserved_speculative_mib", (4096, 6144, 0), "0.5.10: EAGLE draft and graphs +4 GiB"),
    Rule(_v("0.5.14"), "reserved_speculative_mib", (0, 0, 0),
               "0.5.14 _handle_gpu_memory_settings: no speculative reserve; the draft's KV rides in the cell (draft_kv_in_cell)"),
    Rule(_v("0.4.0"), "piecewise_graph_reserve", "none", "no piecewise CUDA graphs"),
    Rule(_v("0.5.8"), "piecewise_graph_reserve", "opt_in", "0.5.8: +8 MiB per piecewise size with --enable-piecewise-cuda-graph"),
    Rule(_v("0.5.10"), "piecewise_graph_reserve", "default_on", "0.5.10: on unless --disable-piecewise-cuda-graph; MLA +1.5 GiB"),
    Rule(_v("0.4.8"), "mfs_multimodal_adjust", False, "0.4.8: no VLM adjustment"),
    Rule(_v("0.4.10"), "mfs_multimodal_adjust", True, "0.4.10 adjust_mem_fraction_for_vlm: x 0.95 x ViT-size factor"),
    # the decode-graph term bs*2 (and the DP-attention padding) is skipped when decode graphs are off
    Rule(_v("0.4.0"), "graph_reserve_skips_disabled", False, "bs*2 reserved even with --disable-cuda-graph"),
    Rule(_v("0.5.15"), "graph_reserve_skips_disabled", True,
               "0.5.15 _handle_gpu_memory_settings: only when the decode backend is not disabled (and not PD prefill)"),
    # piecewise prefill graph sizes stop at --context-length when it is given
    Rule(_v("0.4.0"), "piecewise_tokens_context_clamp", False, "no clamp"),
    Rule(_v("0.5.13"), "piecewise_tokens_context_clamp", True, "0.5.13 server_args.py: max tokens = min(., context_length)"),
    Rule(_v("0.5.17"), "piecewise_tokens_context_clamp", False, "0.5.17 server_args.py: clamp removed"),
    # SGLANG_ENABLE_POST_CAPTURE_KV_SIZING=1 (off by default in every release read): pool sized after graph capture,
    # reserve = base + tp*pp/8 GiB (not modelled: the env flag is not a setting)
    Rule(_v("0.4.0"), "post_capture_reserve_base_mib", None, "no post-capture KV sizing"),
    Rule(_v("0.5.16"), "post_capture_reserve_base_mib", 512, "0.5.16 server_args.py post_capture_kv_sizing_planned (env opt-in)"),
    Rule(_v("0.5.18"), "post_capture_reserve_base_mib", 1536, "0.5.18 _handle_gpu_memory_settings: 1536 + tp*pp/8 GiB"),

    # --- chunked_prefill_size default (server_args.py) ---
    Rule(_v("0.4.0"), "chunked_prefill_tiers", ((25_000, 2048), (INF, 8192)), "server_args.py 0.4.0: gpu_mem < 25000 MB -> 2048"),
    Rule(_v("0.4.8"), "chunked_prefill_tiers", ((35 * 1024, 2048), (160 * 1024, 8192), (INF, 16384)), "0.4.8: 35 GiB / 160 GiB tiers"),
    Rule(_v("0.5.3"), "chunked_prefill_tiers", ((35 * 1024, 2048), (60 * 1024, 4096), (160 * 1024, 8192), (INF, 16384)),
               "0.5.3 _handle_gpu_memory_settings: A100-40G / L40 tier of 4096"),
    Rule(_v("0.5.20"), "chunked_prefill_tiers", ((20 * 1024, 2048), (60 * 1024, 4096), (160 * 1024, 8192), (INF, 16384)),
               "0.5.20 arg_groups/memory_hook.py: 20-35 GiB (RTX 5090 / 4090) tier 2048 -> 4096"),
    Rule(_v("0.4.0"), "chunked_prefill_disaggregation", None, "no PD disaggregation"),
    Rule(_v("0.4.6"), "chunked_prefill_disaggregation", 16384, "0.4.6.post2: 16384 with --disaggregation-mode above 25000 MB"),
    Rule(_v("0.4.8"), "chunked_prefill_disaggregation", None, "0.4.8: the tier decides"),

    # --- cuda_graph_max_bs default: tier rows (upper MiB, bs when tp < 4, bs when tp >= 4); None = runner default ---
    Rule(_v("0.4.0"), "cuda_graph_max_bs_tiers", ((25_000, 8, 8), (INF, 160, 160)), "server_args.py 0.4.0"),
    Rule(_v("0.4.1"), "cuda_graph_max_bs_tiers", ((25_000, 8, 80), (INF, 160, 160)), "0.4.1: 80 for tp >= 4 on < 25000 MB"),
    Rule(_v("0.4.6"), "cuda_graph_max_bs_tiers", ((25_000, 8, 80), (INF, None, None)), "0.4.6.post2: left to cuda_graph_runner"),
    Rule(_v("0.4.8"), "cuda_graph_max_bs_tiers", ((35 * 1024, 8, 80), (INF, None, None)), "0.4.8: 35 GiB threshold"),
    Rule(_v("0.5.3"), "cuda_graph_max_bs_tiers", (
        (20 * 1024, 8, 8), (35 * 1024, 16, 80), (60 * 1024, 32, 160), (90 * 1024, 256, 512), (160 * 1024, 256, 512),
        (INF, 512, 512)), "0.5.3 _handle_gpu_memory_settings"),
    Rule(_v("0.5.5"), "cuda_graph_max_bs_tiers", (
        (20 * 1024, 8, 8), (35 * 1024, 24, 80), (60 * 1024, 32, 160), (90 * 1024, 256, 512), (160 * 1024, 256, 512),
        (INF, 512, 512)), "0.5.5: 24 for tp < 4 on 20-35 GiB"),
    Rule(_v("0.5.20"), "cuda_graph_max_bs_tiers", (
        (20 * 1024, 8, 8), (35 * 1024, 48, 160), (60 * 1024, 32, 160), (90 * 1024, 256, 512), (160 * 1024, 256, 512),
        (INF, 512, 512)), "0.5.20 arg_groups/memory_hook.py: 48 / 160 on 20-35 GiB"),
    Rule(_v("0.4.0"), "graph_bs_capped_by_requests", False, "default max bs independent of --max-running-requests"),
    Rule(_v("0.5.22"), "graph_bs_capped_by_requests", True,
               "0.5.22 arg_groups/memory_hook.py: a default decode max_bs above --max-running-requests drops to it"),
    # cuda_graph_runner.get_batch_sizes_to_capture when server_args leaves it None (0.4.6-0.5.2): 160,
    # 256 above 90 GiB, 512 above 160,000 MiB
    Rule(_v("0.4.0"), "cuda_graph_runner_max_bs", ((90 * 1024 + 1, 160), (160_000 + 1, 256), (INF, 512)),
               "cuda_graph_runner.py 0.4.8 get_batch_sizes_to_capture"),

    # --- Pool sizing (model_runner.py profile_max_num_token; model_runner_kv_cache_mixin.py from 0.5.x) ---
    # rest_GiB = avail_after_weights - avail_before_weights * (1 - mfs); "before" = min free over ranks after dist init
    Rule(_v("0.4.0"), "pool_budget", "rest_after_load", "model_runner.py 0.4.0 profile_max_num_token(total_gpu_memory)"),
    Rule(_v("0.4.0"), "avail_all_reduce_min", True, "utils.py get_available_gpu_memory(distributed=tp>1): MIN over ranks"),
    # --- Pipeline parallelism (stages.py) ---
    # distributed/utils.py get_pp_indices: an even split, the remainder (num_layers % pp) on ...
    Rule(_v("0.4.0"), "pp_remainder_layers", "last_stage", "distributed/utils.py <= 0.5.5: the last partition takes them all"),
    Rule(_v("0.5.6"), "pp_remainder_layers", "last_stages", "distributed/utils.py 0.5.6: the last N partitions one each"),
    # whose free memory the pool's rest is taken from: get_available_gpu_memory's MIN all_reduce
    Rule(_v("0.4.0"), "pp_free_min", "with_tp", "model_runner.py 0.4.6.post2: distributed=tp_size > 1, default "
         "(world) group: with --tp 1 each stage reads its own free memory"),
    Rule(_v("0.4.7"), "pp_free_min", "world", "model_runner.py 0.4.7: distributed=world_size > 1, the world's cpu_group "
         "(every TP rank of every stage; 0.5.23 kv_cache_configurator.py _profile_available_bytes the same)"),
    # max_total_num_tokens: each stage's own (its own layers in the cell) or the minimum over the stages
    Rule(_v("0.4.0"), "pp_tokens_min", False, "model_runner.py <= 0.5.1: each stage keeps the tokens of its own cell"),
    # speculative decoding under PP: refused by server_args.py (the assertion's words), or the draft on the last stage
    Rule(_v("0.4.0"), "pp_speculative", "Pipeline parallelism is not compatible with overlap schedule, speculative "
         "decoding, mixed chunked prefill.", "server_args.py 0.4.6.post2-0.5.10: pp_size > 1 asserts no speculative algorithm"),
    Rule(_v("0.5.11"), "pp_speculative", "Pipeline parallelism is not compatible with overlap schedule, speculative "
         "decoding", "server_args.py 0.5.11-0.5.18: the same assertion, shorter"),
    Rule(_v("0.5.19"), "pp_speculative", "last_stage", "speculative/eagle_worker_v2.py 0.5.19: only the last PP stage "
         "hosts the draft worker (its weights, KV layers and graphs); the other stages' workers are proxies"),
    # a stage whose layers hold no KV (a hybrid's Mamba-only stage): max_total_num_tokens = rest // 0
    Rule(_v("0.4.0"), "pp_zero_kv_cell", "crash", "model_runner.py <= 0.5.16: rest // cell_size, a ZeroDivisionError"),
    Rule(_v("0.5.17"), "pp_zero_kv_cell", "unbounded", "0.5.17 pool_configurator.py _zero_kv_max_tokens: int64 max when "
         "a hybrid's full-attention layers are on another stage, else --max-total-tokens or context_len"),
    # a hybrid's Mamba / GDN state under PP: what the slots are charged, what a stage allocates
    Rule(_v("0.4.0"), "pp_mamba_state", "whole_model", "memory_pool.py <= 0.5.9 MambaPool: every mamba layer on "
         "every stage (num_mamba_layers = len(cache_params.layers))"),
    Rule(_v("0.5.10"), "pp_mamba_state", "own_layers", "0.5.10 model_runner_kv_cache_mixin.py: the pool holds the "
         "stage's own mamba_layer_ids; the slots still charged mamba_cache_per_req of every layer"),
    Rule(_v("0.5.17"), "pp_mamba_state", "largest_stage", "0.5.17 kv_cache_configurator.py _handle_max_mamba_cache: "
         "charged the largest stage's share (pp_layer_scale), the same slots on every rank"),
    Rule(_v("0.5.2"), "pp_tokens_min", True, "model_runner.py 0.5.2 init_memory_pool: all_reduce MIN over the world "
         "group when pp_size > 1 (0.5.23 kv_cache_configurator.py _apply_token_constraints the same)"),
    Rule(_v("0.4.0"), "mha_cell", "kv_heads_x_head_dim_x2", "model_runner.py 0.4.0: heads/tp * head_dim * layers * 2 * dtype"),
    Rule(_v("0.5.3"), "mha_cell", "head_dim_plus_v_head_dim", "0.5.3: heads/attn_tp * (head_dim + v_head_dim) * layers * dtype"),
    # EAGLE / STANDALONE (and MTP, an EAGLE variant): the draft's KV layers share the target's token count
    Rule(_v("0.4.0"), "draft_kv_in_cell", False, "draft KV paid from the speculative reserve in the fraction"),
    Rule(_v("0.5.14"), "draft_kv_in_cell", True,
               "0.5.14 pool_configurator.py DefaultPoolConfigurator: cell x (1 + draft_layers / layers)"),
    # before 0.5.14 the draft worker builds its own pool after the target's (out of the slack):
    # draft_runner_cache_size = target tokens + max_num_reqs x (steps x topk + draft tokens) + 100
    Rule(_v("0.4.0"), "draft_pool", "none", "no speculative decoding before 0.4.3"),
    Rule(_v("0.4.3"), "draft_pool", "separate", "model_runner.py 0.4.3-0.5.13 init_memory_pool: is_draft_worker -> "
               "draft_runner_cache_size tokens x the draft's layers (num_nextn_predict_layers for MTP)"),
    Rule(_v("0.5.14"), "draft_pool", "in_cell", "0.5.14 pool_configurator.py: one pool, cell x (1 + draft / target layers)"),
    # where the draft worker's weights are paid (draft.py)
    Rule(_v("0.4.0"), "draft_weights_in", "slack", "scheduler.py 0.4.3-0.5.13: the draft worker loads after the target's "
         "pool is built: its weights come out of the slack"),
    Rule(_v("0.5.14"), "draft_weights_in", "pool", "0.5.14 scheduler.py init_memory_pools after maybe_init_draft_worker; "
         "0.5.17 kv_cache_configurator.py _profile_available_bytes: loaded weights (target + draft) charged to the budget"),
    # (steps, topk, draft tokens) when --speculative-num-steps etc. are unset: (default, ((architectures, value), ...))
    Rule(_v("0.4.3"), "speculative_defaults", ((5, 8, 64), ()), "server_args.py 0.4.3 fields: 5 steps, topk 8, 64 tokens"),
    Rule(_v("0.4.4"), "speculative_defaults", ((5, 4, 8), ()), "0.4.4 fields: 5, 4, 8"),
    Rule(_v("0.4.5"), "speculative_defaults", ((5, 4, 8), ((_DEEPSEEK_MTP, (3, 1, 4)),)),
               "0.4.5 auto_choose_speculative_params: DeepSeek V2/V3 (3, 1, 4), others (5, 4, 8)"),
    Rule(_v("0.5.3"), "speculative_defaults", ((5, 4, 8), ((_DEEPSEEK_MTP + ("DeepseekV32ForCausalLM", "GptOssForCausalLM",
                                                                                  "BailingMoeForCausalLM"), (3, 1, 4)),)),
               "0.5.3 auto_choose_speculative_params (STANDALONE (3, 1, 4))"),
    Rule(_v("0.5.8"), "speculative_defaults", ((3, 1, 4), (
        (("LlamaForCausalLM", "Grok1ForCausalLM", "Grok1VForCausalLM"), (5, 4, 8)),)),
               "0.5.8 auto_choose_speculative_params: (3, 1, 4) for every model but Llama and Grok-1 (0.5.14: speculative_hook.py)"),
    Rule(_v("0.4.0"), "speculative_standalone_defaults", None, "no STANDALONE drafts"),
    Rule(_v("0.5.2"), "speculative_standalone_defaults", (3, 1, 4),
               "0.5.2 auto_choose_speculative_params: STANDALONE (3, 1, 4) whatever the model"),
    Rule(_v("0.4.0"), "dsv4_compressed_pool", False, "no DeepSeek-V4 pool"),
    Rule(_v("0.5.12"), "dsv4_compressed_pool", True,
               "0.5.12 pool_configurator.py DSV4PoolConfigurator: full/swa/c4/c128 split (not modelled)"),
    Rule(_v("0.4.0"), "swa_chunk_cap_pool", False, "SWA pool = ratio x full pool"),
    Rule(_v("0.5.14"), "swa_chunk_cap_pool", True, "0.5.14 SWAChunkCapPoolConfigurator: with --max-running-requests and "
               "--disable-radix-cache the SWA pool is sized per request, the rest goes to full (not modelled)"),
    Rule(_v("0.4.0"), "dsa_indexer_cell", False, "no DSA (NSA) indexer cache"),
    Rule(_v("0.5.4"), "dsa_indexer_cell", True, "model_runner.py 0.5.4 profile_max_num_token: + (index_head_dim + "
               "index_head_dim // 128 x 4) x layers bytes (NSATokenToKVPool's uint8 fp8 key + fp32 scale buffer); 0.5.3 "
               "allocated it beyond the estimate"),
    Rule(_v("0.4.0"), "mla_cell", "latent", "(kv_lora_rank + qk_rope_head_dim) * layers * dtype, every release"),
    Rule(_v("0.4.0"), "tokens_page_aligned", False, "no paged allocator"),
    Rule(_v("0.4.4"), "tokens_page_aligned", True, "0.4.4: max_total_num_tokens // page_size * page_size"),
    # extra token rows each K/V buffer holds beyond #tokens (slot 0 is the padding slot)
    Rule(_v("0.4.0"), "kv_buffer_extra_tokens", "one", "memory_pool.py 0.4.0: (size + 1, heads, head_dim)"),
    Rule(_v("0.4.4"), "kv_buffer_extra_tokens", "page_size", "memory_pool.py 0.4.4: (size + page_size, heads, head_dim)"),
    Rule(_v("0.4.0"), "page_size_default", 1, "page_size default 1 (0.4.4 field; 0.4.10+ None resolved to 1)"),
    # attention backends that force a page size (server_args.py)
    Rule(_v("0.4.0"), "backend_page_size", (), "no forced page size"),
    Rule(_v("0.4.6"), "backend_page_size", (("flashmla", 64), ("cutlass_mla", 128)), "0.4.6.post2 FlashMLA 64, Cutlass MLA 128"),
    Rule(_v("0.5.1"), "backend_page_size", (("flashmla", 64), ("cutlass_mla", 128), ("trtllm_mla", 64), ("trtllm_mha", 64)),
               "0.5.1: TensorRT-LLM MHA/MLA 16/32/64, None -> 64"),
    # max_running_requests: req pool = clamp(tokens / context_len * 512, 2048, 4096); logged min(tokens // 2, pool)
    Rule(_v("0.4.0"), "req_pool_plus_one", True, "model_runner.py 0.4.0-0.4.6: ReqToTokenPool(size=max_num_reqs + 1)"),
    Rule(_v("0.4.7"), "req_pool_plus_one", False, "0.4.7: ReqToTokenPool(size=max_num_reqs)"),
    # --max-running-requests given: capped by the request-pool estimate, from 0.5.14 by tokens // 2
    Rule(_v("0.4.0"), "user_requests_cap", "req_pool", "model_runner.py: min(user // dp, clamp(tokens/ctx*512))"),
    Rule(_v("0.5.14"), "user_requests_cap", "half_tokens",
               "0.5.14 model_runner_kv_cache_mixin.py _resolve_max_num_reqs: min(user // dp, tokens // 2)"),
    Rule(_v("0.4.0"), "req_pool_bounds", (2048, 4096, 512), "model_runner.py init_memory_pool: (floor, cap, x per context)"),
    # hybrid linear-attention (Mamba / GDN) models
    Rule(_v("0.4.0"), "mamba_requests_per_slot", 1, "0.5.2: max_num_reqs <= max_mamba_cache_size"),
    Rule(_v("0.5.4"), "mamba_requests_per_slot", 3, "0.5.4 MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO = 3"),
    Rule(_v("0.4.0"), "mamba_full_memory_ratio", None, "no ratio split"),
    Rule(_v("0.5.4"), "mamba_full_memory_ratio", 0.9, "0.5.4 handle_max_mamba_cache: mamba : KV = 0.9 : 1 of rest"),
    Rule(_v("0.4.0"), "mamba_pool", None, "no recurrent-state pool"),
    Rule(_v("0.5.2"), "mamba_pool", "fixed", "model_runner.py 0.5.2 (is_hybrid_gdn): max_mamba_cache_size = "
               "(--max-running-requests or 512) // dp x 2 x KV dtype bytes, taken off rest"),
    Rule(_v("0.5.4"), "mamba_pool", "ratio", "0.5.4 handle_max_mamba_cache: --max-mamba-cache-size, else the "
               "mamba_full_memory_ratio split (0.5.16+: mem_cache/kv_cache_configurator.py, same split)"),
    Rule(_v("0.4.0"), "mamba_pool_families", (), "no hybrid linear-attention models"),
    Rule(_v("0.5.2"), "mamba_pool_families", ("qwen3_next",), "0.5.2 configs/qwen3_next.py hybrid_gdn_params"),
    Rule(_v("0.5.4"), "mamba_pool_families", ("qwen3_next", "nemotron_h", "falcon_h1"),
               "0.5.4 model_runner.py mambaish_config = mamba2_config (NemotronH, FalconH1) or hybrid_gdn_config"),
    Rule(_v("0.4.0"), "mamba_conv_dtype", "bfloat16", "configs/mamba_utils.py CONV_DTYPE (0.5.9+: SGLANG_MAMBA_CONV_DTYPE)"),
    Rule(_v("0.4.0"), "mamba_ssm_dtype_default", "float32", "server_args.py 0.5.2 mamba_ssm_dtype = 'float32'"),
    Rule(_v("0.4.0"), "mamba_ssm_dtype_from_config", False, "SSM dtype from --mamba-ssm-dtype only"),
    Rule(_v("0.5.9"), "mamba_ssm_dtype_from_config", True,
               "0.5.9 configs/mamba_utils.py mamba2_state_dtype: config (text_config).mamba_ssm_dtype, else float32"),
    # requests per Mamba slot (_calculate_mamba_ratio): 3, + 2 with the extra_buffer radix strategy under the overlap
    # scheduler (MAMBA_CACHE_V2_ADDITIONAL_RATIO_OVERLAP); 'auto' resolves to extra_buffer from 0.5.14 for these
    # architectures (triton linear-attention backend, the default) while overlap stays on (speculative v2 keeps it)
    Rule(_v("0.4.0"), "mamba_extra_buffer_archs", (), "0.5.13.post1 server_args.py: mamba_scheduler_strategy 'auto' -> no_buffer"),
    Rule(_v("0.5.14"), "mamba_extra_buffer_archs", _EXTRA_BUFFER_0_5_14,
         "0.5.14 server_args.py _handle_mamba_radix_cache: auto -> extra_buffer with overlap (_support_mamba_cache_extra_buffer)"),
    Rule(_v("0.5.17"), "mamba_extra_buffer_archs", _EXTRA_BUFFER_0_5_14 + ("KimiLinearForCausalLM",),
         "0.5.17 arg_groups/overrides.py _MAMBA_EXTRA_BUFFER_ARCHS"),
    Rule(_v("0.5.23"), "mamba_extra_buffer_archs", _EXTRA_BUFFER_0_5_14 + (
        "KimiLinearForCausalLM", "Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM", "Qwen4ExpForConditionalGeneration",
        "MiniCPMV4_7ForConditionalGeneration"), "0.5.23 arg_groups/overrides.py _MAMBA_EXTRA_BUFFER_ARCHS (0.5.18-0.5.22 not read)"),
    Rule(_v("0.4.0"), "mamba_extra_buffer_requests", 2, "MAMBA_CACHE_V2_ADDITIONAL_RATIO_OVERLAP = 2 (0.5.13.post1-0.5.23)"),
    # the joint solve counts the pool's padding row on both buffers from 0.5.17
    Rule(_v("0.4.0"), "mamba_spec_padding_rows", False, "0.5.13-0.5.16: slots = budget // (per_req x (1 + D / ratio))"),
    Rule(_v("0.5.17"), "mamba_spec_padding_rows", True, "0.5.17 kv_cache_configurator.py _handle_max_mamba_cache: "
         "(K + 1) per_req + (K / ratio + 1) D per_req = budget; intermediate (capped + 1) x D; state (K + 1) rows"),
    # the intermediate conv windows of the draft tokens (memory_pool.py MambaPool, speculative): one [dim, K-1]
    # window per draft token, or one shared [dim, D + K - 2] window per slot for a linear draft chain (topk <= 1)
    Rule(_v("0.4.0"), "mamba_conv_window_dedup", False, "0.5.13.post1 memory_pool.py: [layers, rows, D, dim, K-1]"),
    Rule(_v("0.5.14"), "mamba_conv_window_dedup", True, "0.5.14 memory_pool.py conv_window_dedup_enabled (CUDA, topk <= 1)"),
    Rule(_v("0.4.0"), "mamba_spec_intermediate", "minus_requests", "0.5.4: rest -= per_req * max_running_requests * draft_tokens"),
    Rule(_v("0.5.13"), "mamba_spec_intermediate", "joint_solve",
               "0.5.13 handle_max_mamba_cache: slots = budget // (per_req * (1 + D / ratio))"),
    Rule(_v("0.4.10"), "swa_full_tokens_ratio", 0.8, "0.4.10 server_args swa_full_tokens_ratio = 0.8"),
    # hybrid SWA: which architectures get a full pool and a sliding-window pool (unless --disable-hybrid-swa-memory)
    Rule(_v("0.4.0"), "hybrid_swa_archs", (), "one pool for every layer"),
    Rule(_v("0.4.10"), "hybrid_swa_archs", _GEMMA_SWA,
               "model_runner.py 0.4.10: models defining get_attention_sliding_window_size (gemma2/3/3n), Llama 4 excepted"),
    Rule(_v("0.5.1"), "hybrid_swa_archs", _GEMMA_SWA + ("GptOssForCausalLM",), "0.5.1 gpt_oss.py defines it too"),
    Rule(_v("0.5.7"), "hybrid_swa_archs", ("MiMoV2FlashForCausalLM",),
               "0.5.7 model_config.py is_hybrid_model: MiMo-V2 always, Llama 4 only with --hybrid-kvcache-ratio; the "
               "get_attention_sliding_window_size path is gone (Gemma 2/3 one pool)"),
    Rule(_v("0.5.8"), "hybrid_swa_archs", _SWA_0_5_8, "0.5.8 model_config.py is_hybrid_swa_model"),
    Rule(_v("0.5.9"), "hybrid_swa_archs", _SWA_0_5_8 + ("Step3p5ForCausalLM",), "0.5.9 is_hybrid_swa_model"),
    Rule(_v("0.5.11"), "hybrid_swa_archs", _SWA_0_5_11, "0.5.11 is_hybrid_swa_model: + Gemma 4, MiMo-V2"),
    Rule(_v("0.5.13"), "hybrid_swa_archs", _SWA_0_5_11 + ("Gemma4UnifiedForConditionalGeneration", "LagunaForCausalLM"),
               "0.5.12-0.5.13 is_hybrid_swa_model (DeepSeek-V4 has its own configurator)"),
    Rule(_v("0.5.21"), "hybrid_swa_archs", _SWA_0_5_11 + ("Gemma4UnifiedForConditionalGeneration", "LagunaForCausalLM",
                                                                  "DiffusionGemmaForBlockDiffusion"),
               "0.5.21 is_hybrid_swa_model: + DiffusionGemmaForBlockDiffusion"),
    # how rest is split between the two pools (r = swa_full_tokens_ratio, F/S = full/SWA bytes per token and layer)
    Rule(_v("0.4.0"), "hybrid_swa_split", None, "no split"),
    Rule(_v("0.4.10"), "hybrid_swa_split", "layers", "model_runner.py 0.4.10 set_num_token_hybrid: tokens x layers = "
               "full x (r x n_swa + n_full), swa = int(full x r) (0.5.8 kv_cache_mixin: both then paged; 0.4.10 page_size 1)"),
    Rule(_v("0.5.9"), "hybrid_swa_split", "memory", "0.5.9 kv_cache_mixin set_num_tokens_hybrid_swa: capacity = rest // "
               "(F n_full + S n_swa); full = int(capacity x that / (F n_full + r S n_swa)), swa = int(full x r), then paged"),
    Rule(_v("0.5.10"), "hybrid_swa_split", "memory_paged", "0.5.10 _resolve_hybrid_swa_tokens: full paged first, "
               "swa = paged(int(full x r))"),
    Rule(_v("0.5.13"), "hybrid_swa_split", "cell", "0.5.13 pool_configurator.py HybridSWAPoolConfigurator: cell = "
               "F n_full + r S n_swa, full = paged(rest // cell), swa = paged(int(full x r))"),
    # which pool memory_pool.py allocates (and logs) first
    Rule(_v("0.4.10"), "swa_pool_first", True, "memory_pool.py SWAKVPool 0.4.10-0.5.16: swa_kv_pool, then full_kv_pool"),
    Rule(_v("0.5.17"), "swa_pool_first", False, "0.5.17 swa_memory_pool.py: full_kv_pool first"),
    # context_len: first of these config keys, x rope factor unless llama3 / original_max_position_embeddings
    Rule(_v("0.4.0"), "context_length_keys",
               ("max_sequence_length", "seq_length", "max_seq_len", "model_max_length", "max_position_embeddings"),
               "hf_transformers_utils.py CONTEXT_LENGTH_KEYS"),

    # --- CUDA graphs (cuda_graph_runner.py get_batch_sizes_to_capture; server_args.py from 0.5.3) ---
    # batch sizes captured by default: (first sizes, (start, stop, step) ranges); bigger GPUs add ranges
    # with speculative decoding (fewer padded sizes; server_args.py _generate_decode_cuda_graph_batch_sizes from 0.5.x)
    Rule(_v("0.4.0"), "capture_bs_list_speculative", None, "cuda_graph_runner.py 0.4.3: the same list as without a draft"),
    Rule(_v("0.4.10"), "capture_bs_list_speculative", (tuple(range(1, 9)), ((10, 33, 2), (40, 64, 8), (80, 161, 16))),
         "cuda_graph_runner.py 0.4.10: 'speculative decoding requires more cuda graph memory, we capture less' (0.4.4-0.4.9 not read)"),
    Rule(_v("0.5.3"), "capture_bs_list_speculative", (tuple(range(1, 9)), ((10, 33, 2), (40, 64, 4), (72, 257, 8), (272, 4097, 16))),
         "server_args.py 0.5.3 spec decoding case"),
    Rule(_v("0.5.8"), "capture_bs_list_speculative", (tuple(range(1, 9)), ((10, 33, 2), (40, 65, 4), (72, 257, 8), (272, 4097, 16))),
         "server_args.py 0.5.8 (0.5.4-0.5.7 not read): range(40, 65, 4); same in 0.5.13.post1-0.5.17"),
    Rule(_v("0.4.0"), "capture_bs_list", ((1, 2, 4), ((8, 161, 8),)), "cuda_graph_runner.py 0.4.0: [1, 2, 4] + [8 .. 160 step 8]"),
    Rule(_v("0.4.6"), "capture_bs_list", ((1, 2, 4, 8), ((16, 161, 8),)), "0.4.6.post2: [1, 2, 4, 8] + range(16, 161, 8)"),
    Rule(_v("0.5.3"), "capture_bs_list", ((1, 2, 4, 8, 12), ((16, 257, 8), (272, 512, 16), (512, 4097, 32))),
               "server_args.py 0.5.3 _generate_cuda_graph_batch_sizes (0.5.10: same list)"),
    # (GPU MiB above which, range) added by the runner when cuda_graph_bs is unset (0.4.6-0.5.2)
    Rule(_v("0.4.0"), "capture_bs_big_gpu", (), "no extra sizes"),
    Rule(_v("0.4.6"), "capture_bs_big_gpu", ((90 * 1024, (160, 257, 8)), (160_000, (256, 513, 16))),
               "cuda_graph_runner.py 0.4.6.post2: H200-class + range(160, 257, 8), B200-class + range(256, 513, 16)"),
    Rule(_v("0.5.3"), "capture_bs_big_gpu", (), "0.5.3: the list runs up to cuda_graph_max_bs itself"),
    # weights: SGLang's layers are ports of vLLM's (layers/linear.py QKVParallelLinear and MergedColumnParallelLinear
    # fuse q/k/v and gate/up; layers/vocab_parallel_embedding.py pads the vocabulary to 64 and shards it by TP), so one
    # rank holds what vLLM's inventory of this release lists for the same model and TP/PP
    Rule(_v("0.4.0"), "weights_layout_vllm", "0.8.5", "layers/linear.py, vocab_parallel_embedding.py 0.4.0-0.5.11"),

    # --- Log formats ---
    Rule(_v("0.4.0"), "log_kv_line", "none", "memory_pool.py 0.4.0: no KV line"),
    Rule(_v("0.4.1"), "log_kv_line", "sizes", "0.4.1: 'KV Cache is allocated. K size: X GB, V size: Y GB.'"),
    Rule(_v("0.4.4"), "log_kv_line", "tokens", "0.4.4: 'KV Cache is allocated. #tokens: N, K size: ..., V size: ...'"),
    Rule(_v("0.5.13"), "log_kv_line", "dtype_tokens",
               "0.5.13 memory_pool.py: 'KV Cache is allocated. dtype: torch.bfloat16, #tokens: N, K size: ..., V size: ...'"),
    Rule(_v("0.4.0"), "log_mamba_line", "none", "no Mamba pool"),
    Rule(_v("0.5.2"), "log_mamba_line", "sizes", "0.5.2 memory_pool.py MambaPool: 'Mamba Cache is allocated. "
               "conv_state size: XGB, ssm_state size: YGB'"),
    Rule(_v("0.5.4"), "log_mamba_line", "slots_sizes", "0.5.4: 'Mamba Cache is allocated. max_mamba_cache_size: N, "
               "conv_state size: XGB, ssm_state size: YGB'"),
    Rule(_v("0.4.0"), "log_kv_swa_labels", False, "the two SWA pools print the same 'KV Cache is allocated' line"),
    Rule(_v("0.5.17"), "log_kv_swa_labels", True, "0.5.17 swa_memory_pool.py allocation_label: 'Full KV Cache is "
               "allocated', 'SWA KV Cache is allocated' (memory_pool.py _finalize_allocation_log)"),
    Rule(_v("0.4.0"), "log_load_end", "avail", "0.4.0: 'Load weight end. type=T, dtype=D, avail mem=X GB'"),
    Rule(_v("0.4.4"), "log_load_end", "avail_usage", "0.4.4: '..., avail mem=X GB, mem usage=Y GB.'"),
    Rule(_v("0.5.9"), "log_load_end", "elapsed", "0.5.9: 'Load weight end. elapsed=T s, type=..., avail mem=..., mem usage=...'"),
    Rule(_v("0.5.10"), "log_load_end", "elapsed_quant",
               "0.5.10 model_runner.py: dtype= dropped; 'type=T, [quant=Q, fmt=F, ]avail mem=..., mem usage=...'"),
    Rule(_v("0.4.0"), "log_init_dist", "none", "no line"),
    Rule(_v("0.4.4"), "log_init_dist", "usage", "0.4.4: 'Init torch distributed ends. mem usage=X GB'"),
    Rule(_v("0.5.9"), "log_init_dist", "elapsed", "0.5.9: 'Init torch distributed ends. elapsed=T s, mem usage=X GB'"),
    Rule(_v("0.4.0"), "log_graph_end", "elapsed", "cuda_graph_runner.py 0.4.0: 'Capture cuda graph end. Time elapsed: T s'"),
    Rule(_v("0.4.4"), "log_graph_end", "avail_usage", "0.4.4: '... T s. avail mem=A GB. mem usage=U GB.'"),
    Rule(_v("0.4.6"), "log_graph_end", "usage_avail", "0.4.6.post2: '... T s. mem usage=U GB. avail mem=A GB.'"),
    Rule(_v("0.5.14"), "log_graph_end", "phase_backend", "0.5.14 model_runner.py: 'Capture target decode CUDA graph end. "
               "elapsed=T s, mem usage=U GB, avail mem=A GB.' (begin: 'backend=full, num_tokens_per_bs=1, bs=[..], avail mem=')"),
    Rule(_v("0.5.16"), "log_graph_end", "phase_backend_per_req",
               "0.5.16 cuda_graph_setup.py: begin line says num_tokens_per_req= (was num_tokens_per_bs=)"),
    Rule(_v("0.4.0"), "log_graph_begin_avail", False, "'Capture cuda graph begin. This can take up to several minutes.'"),
    Rule(_v("0.4.4"), "log_graph_begin_avail", True, "0.4.4: '... several minutes. avail mem=X GB'"),
    Rule(_v("0.4.0"), "log_scheduler_chunked", False, "scheduler 0.4.0-0.4.1: no chunked_prefill_size"),
    Rule(_v("0.4.2"), "log_scheduler_chunked", True, "0.4.2: chunked_prefill_size= after max_total_num_tokens="),
    Rule(_v("0.4.0"), "log_scheduler_available", False, "no available_gpu_mem"),
    Rule(_v("0.4.7"), "log_scheduler_available", True, "scheduler.py 0.4.7: ', available_gpu_mem=X GB'"),
    Rule(_v("0.4.0"), "refusal", "Not enough memory. Please try to increase --mem-fraction-static.",
               "model_runner.py init_memory_pool when max_total_num_tokens <= 0"),
    Rule(_v("0.4.0"), "refusal_no_rest", None, "rest <= 0 ends in the 'Not enough memory' refusal"),
    # a hybrid (Mamba / linear attention) model whose slots come out <= 0: no check up to 0.5.12 (the pools are
    # built for no request: said in this tool's words); 0.5.13.post1 model_runner_kv_cache_mixin.py (0.5.23
    # kv_cache_configurator.py) raises
    Rule(_v("0.4.0"), "refusal_no_mamba_slot", "max_mamba_cache_size {slots}: no request's Mamba state fits, so no "
         "request can run (this release does not check; 0.5.13.post1+ refuses here)",
         "no check: the pools are built for no request (this tool's words, the engine prints none)"),
    Rule(_v("0.5.13.post1"), "refusal_no_mamba_slot", "RuntimeError: Not enough GPU memory for hybrid "
         "(mamba/linear-attention) state cache. Computed max_mamba_cache_size={slots} (total_rest_memory={rest:.2f} GB"
         ", ...). Try: (1) reduce --max-running-requests, (2) increase --mem-fraction-static, (3) reduce "
         "--speculative-num-draft-tokens, or (4) use GPUs with more memory.",
         "0.5.13.post1 model_runner_kv_cache_mixin.py: max_mamba_cache_size <= 0"),
    Rule(_v("0.5.14"), "refusal_no_rest", "Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static={mfs}.",
               "0.5.14 model_runner_kv_cache_mixin.py _profile_available_bytes: ValueError when rest <= 0"),
    # --- Model registry: the first release (of 0.4.0-0.5.23 read) whose srt/models/ registers an architecture;
    # architectures without a row are served by every modelled release (ChatGLM, DeepSeek-V2, Gemma 2, InternLM2,
    # Llama, Mistral, Mixtral, Mllama, Phi-3 (llama.py), Qwen2, Qwen2-VL, Grok-1: 0.4.0) ---
    *_added("0.4.1", "DeepseekV3ForCausalLM", "deepseek_v2.py"),
    *_added("0.4.4", "Qwen2_5_VLForConditionalGeneration", "qwen2_5_vl.py"),
    *_added("0.4.5", "Gemma3ForCausalLM", "gemma3_causal.py"),
    *_added("0.4.5", "Gemma3ForConditionalGeneration", "gemma3_mm.py"),
    *_added("0.4.5", "Llama4ForConditionalGeneration", "mllama4.py"),
    *_added("0.4.6.post2", "Qwen3ForCausalLM", "qwen3.py (0.4.5 lacks it)"),
    *_added("0.4.6.post2", "Qwen3MoeForCausalLM", "qwen3_moe.py (0.4.5 lacks it)"),
    *_added("0.4.7", "InternVLChatModel", "internvl.py"),
    *_added("0.4.7", "LlavaForConditionalGeneration", "llava.py"),
    *_added("0.4.10", "Glm4MoeForCausalLM", "glm4_moe.py"),
    *_added("0.5.1", "GptOssForCausalLM", "gpt_oss.py"),
    *_added("0.5.2", "OPTForCausalLM", "opt.py"),
    *_added("0.5.2", "Qwen3NextForCausalLM", "qwen3_next.py"),
    *_added("0.5.3", "DeepseekV32ForCausalLM", "deepseek_v2.py (NSA indexer)"),
    *_added("0.5.3", "Qwen3VLForConditionalGeneration", "qwen3_vl.py"),
    *_added("0.5.3", "Qwen3VLMoeForConditionalGeneration", "qwen3_vl_moe.py"),
    *_added("0.5.4", "NemotronHForCausalLM", "nemotron_h.py"),
    *_added("0.5.9", "Qwen3_5ForConditionalGeneration", "qwen3_5.py"),
    *_added("0.5.9", "Qwen3_5MoeForConditionalGeneration", "qwen3_5.py"),
    *_added("0.5.10", "WhisperForConditionalGeneration", "whisper.py"),
    *_added("0.5.11", "Gemma4ForConditionalGeneration", "gemma4_mm.py"),
    *_added("0.5.12", "DeepseekV4ForCausalLM", "deepseek_v4.py"),
    *_added("0.5.19", "BailingMoeV3ForCausalLM", "bailing_moe_v3.py"),
    *_added("0.5.21", "DiffusionGemmaForBlockDiffusion", "gemma4_diffusion.py"),

    # --- scheduler (simulate): the scheduler and radix-cache rules `vram-detective simulate` follows (issue 18),
    # read by simulate/rules.py; the simulator models 0.5.11's scheduler for every release, checked step for step
    # against 0.5.23's own code (benchmarks/sglang_scheduler_conformance.py)
    Rule(_v("0.4.0"), "scheduler_prefix_caching", True, "mem_cache/radix_cache.py 0.5.11: radix cache on"),
    Rule(_v("0.4.0"), "scheduler_chunked_prefill", True, "managers/schedule_policy.py 0.5.11: PrefillAdder"),
    Rule(_v("0.4.0"), "scheduler_mixed_prefill_decode", False, "managers/scheduler.py 0.5.11: prefill batch first"),
    Rule(_v("0.4.0"), "scheduler_reserved_blocks", 0, "mem_cache/allocator.py 0.5.11"),
    Rule(_v("0.4.0"), "scheduler_admission_watermark", 0.0, "admission reserves new_token_ratio instead"),
    Rule(_v("0.4.0"), "scheduler_preemption", "retract", "managers/schedule_batch.py 0.5.11: retract_decode"),
    Rule(_v("0.4.0"), "scheduler_victim", "fewest_outputs",
               "managers/schedule_batch.py 0.5.11: sort by (len(output_ids), -len(input)) desc, pop the last"),
    Rule(_v("0.4.0"), "scheduler_sliding_window_frees", False, "token pool: full attention"),
    Rule(_v("0.4.0"), "scheduler_new_token_ratio", (0.7, 0.14, 600),
               "environ.py 0.5.11: SGLANG_INIT_NEW_TOKEN_RATIO, _MIN_NEW_TOKEN_RATIO_FACTOR, _DECAY_STEPS"),
    Rule(_v("0.4.0"), "scheduler_retract_decode_steps", 20, "environ.py 0.5.11: SGLANG_RETRACT_DECODE_STEPS"),
    Rule(_v("0.4.0"), "scheduler_clip_max_new_tokens", 4096, "managers/schedule_policy.py 0.5.11: CLIP_MAX_NEW_TOKENS"),
    Rule(_v("0.4.0"), "scheduler_swaps_duplicates", True,
               "mem_cache/radix_cache.py 0.5.23 _insert_cache: a prefix already in the tree frees the request's copy"),
    Rule(_v("0.4.0"), "scheduler_caches_decodes", False,
               "mem_cache/common.py 0.5.23: decoded tokens enter the tree at release_kv_cache(checkpoint=True) when the "
               "request finishes; retract_decode releases with checkpoint=False"),
)
# fmt: on


@dataclass(frozen=True)
class Rules:
    """The resolved rules of one SGLang release."""

    version: Version
    rules: tuple[tuple[str, object, str], ...]  # (rule, value, source)

    @property
    def label(self) -> str:
        return format_version(self.version)

    def __getitem__(self, rule: str) -> object:
        for name, value, _ in self.rules:
            if name == rule:
                return value
        raise KeyError(rule)

    def source(self, rule: str) -> str:
        for name, _, source in self.rules:
            if name == rule:
                return source
        raise KeyError(rule)

    def at_least(self, text: str) -> bool:
        return self.version >= parse_version(text)




# the releases people run most, oldest first (the CLI lists them)
NOTABLE_RELEASES = ("0.4.0", "0.4.3", "0.4.6.post2", "0.4.10", "0.5.2", "0.5.5", "0.5.8", "0.5.10", "0.5.11")


def is_modelled(version: Version) -> bool:
    return tuple(version) >= OLDEST_SUPPORTED


def rule_at(version, rule: str, path=None, default=None):
    """One rule's value at a release (`path` is vLLM's V0/V1 and means nothing here)."""
    try:
        return rules(version)[rule]
    except KeyError:
        return default


def first_release(test) -> Version | None:
    """The oldest release (of those a rule row starts at) whose rules pass test(rules)."""
    for since in changes(RULE_CHANGES):
        if test(rules(since)):
            return since
    return None


def resolve_version(text: str | Version | None) -> Version:
    if isinstance(text, tuple):
        return WINDOW.check(text)
    if text is None or text in ("", "latest", "newest"):
        return NEWEST_KNOWN
    return WINDOW.check(parse_version(text), text)


@lru_cache(maxsize=128)
def _rules_for(version: Version) -> tuple[tuple[str, object, str], ...]:
    resolved = rows_in_force(RULE_CHANGES, version)
    return tuple((name, row.value, row.source) for name, row in sorted(resolved.items()))


def rules(version: str | Version | None = None) -> Rules:
    """The rules of an SGLang release ('0.4.6.post2', '0.5.2rc2', (0, 5, 3) or None for the newest known)."""
    resolved = resolve_version(version)
    return Rules(version=resolved, rules=_rules_for(resolved))


def tier_value(table, gpu_mem_mib: float):
    """The row of a tier table whose upper bound (exclusive) the GPU's memory is under."""
    for row in table:
        if gpu_mem_mib < row[0]:
            return row[1:] if len(row) > 2 else row[1]
    raise ValueError(f"no tier for {gpu_mem_mib} MiB")


def first_release_serving(architecture: str, version) -> Version | None:
    """When `version` predates `architecture` (rule serves_<architecture>): the first release that registers it;
    None when `version` serves it (architectures without the rule are served by every modelled release)."""
    rule = f"serves_{architecture}"
    if rule_at(version, rule, default=True):
        return None
    return first_release(lambda later: later[rule])


def era(version: str, variant: str = "") -> str:
    """SGLang's release era: its X.Y (what `score`'s tables and the intervals group cases by)."""
    return "SGLang " + ".".join(str(version).split(".")[:2])
