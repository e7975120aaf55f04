"""The one table of llama.cpp rules that change by build number (the `bNNNN` release tag / "build: NNNN").

Anchors: builds printed in the dev logs (b5274, b5622, b7342) and llama-cpp-python's vendored trees
(0.2.90 -> llama.cpp@1d1ccce, Aug 2024; 0.3.2 -> @74d73dc, Nov 2024; 0.3.8 -> @7841fc7, Mar 2025;
0.3.16 -> @4227c9b, Aug 2025: CHANGELOG.md of llama-cpp-python). Build numbers of rule changes between
anchors are the nearest known build; rows marked `approximate` are bracketed by anchors but not pinned to
the exact pull request (the tags carry no history here). Comparisons against build numbers happen only in
this module.
"""
from __future__ import annotations

from ..common.rules import ReleaseWindow, Rule, UnsupportedReleaseError, rule_names as _names, value_at  # noqa: F401

Version = tuple[int]  # (build,)


RULES: tuple[Rule, ...] = (
    # --- log line prefixes ---------------------------------------------------------------------------------
    Rule((0,), "log.load_tensors", "llm_load_tensors", "src/llama.cpp llm_load_tensors (0.2.90 tree)"),
    Rule((4400,), "log.load_tensors", "load_tensors",
               "src/llama-model.cpp llama_model::load_tensors (0.3.8 tree; absent in 0.3.2)", True),
    Rule((0,), "log.model_buffer_word", "buffer", "'CUDA0 buffer size' (ollama 0.3.x, commit 1e6f655)"),
    Rule((3700,), "log.model_buffer_word", "model buffer", "'CUDA0 model buffer size' (0.3.2 tree)", True),
    Rule((0,), "log.mapped_buffer_name", "CPU", "mmap'd host buffer printed as 'CPU' (0.2.90 tree; ollama 0.3 logs)"),
    Rule((4000,), "log.mapped_buffer_name", "CPU_Mapped",
               "ggml-backend.cpp ggml_backend_cpu_buffer_from_ptr named CPU_Mapped (0.3.2 tree)", True),
    Rule((0,), "log.split_buffer_name", "CUDA_Split", "ggml-cuda.cu split buffer type named GGML_CUDA_NAME \"_Split\""),
    Rule((4000,), "log.split_buffer_name", "",
               "ggml-cuda.cu ggml_backend_cuda_split_buffer_type: one per main device, 'CUDA<N>_Split' (0.3.16)", True),
    Rule((0,), "log.kv_cache", "llama_kv_cache_init", "src/llama.cpp llama_kv_cache_init (0.2.90 tree)"),
    Rule((4880,), "log.kv_cache", "llama_kv_cache_unified",
               "src/llama-kv-cache.cpp llama_kv_cache_unified (llama_context refactor; b5274 log)", True),
    Rule((6700,), "log.kv_cache", "llama_kv_cache",
               "src/llama-kv-cache.cpp renamed from -unified (b7342 log; 0.3.16 still unified)", True),
    Rule((0,), "log.context", "llama_new_context_with_model", "src/llama.cpp (0.2.90, 0.3.2 trees)"),
    Rule((4880,), "log.context", "llama_context", "src/llama-context.cpp (0.3.8 tree)", True),
    Rule((0,), "log.compute_buffer", "context", "compute buffer lines under the context prefix (log.context)"),
    Rule((7600,), "log.compute_buffer", "sched_reserve",
               "compute buffer lines printed by sched_reserve (2026 logs)", True),
    Rule((0,), "log.kv_size_line", "KV self size", "'KV self size = X MiB, K (f16): a, V (f16): b' (b5274)"),
    Rule((5400,), "log.kv_size_line", "size (cells, layers, seqs)",
               "llama-kv-cache-unified.cpp 'size = X MiB (N cells, L layers, s seqs)' (b5622 log)", True),
    Rule((6050,), "log.kv_size_line", "size (cells, layers, s/S seqs)",
               "llama-kv-cache-unified.cpp '%2u/%u seqs' = n_seq_max/n_stream (0.3.16 tree)", True),
    # --- context / KV rules ----------------------------------------------------------------------------------
    Rule((0,), "kv.padding_fa", 256, "llama_kv_cache(_unified)::get_padding: FA kernels need 256 (0.2.90..0.3.16)"),
    Rule((0,), "kv.padding_no_fa", 32, "llama_kv_cache(_unified)::get_padding: 32 without FA (0.2.90..0.3.16)"),
    Rule((7000,), "kv.padding_no_fa", 256, "n_ctx padded to 256 regardless of FA (late 2025)", True),
    Rule((0,), "kv.streams", False,
               "one KV stream shared by all sequences (0.3.8 tree: n_ctx cells for all n_seq_max)"),
    Rule((6050,), "kv.streams", True,
               "llama-model.cpp create_memory: !kv_unified -> n_seq_max streams of pad(n_ctx/n_seq_max) (0.3.16)",
               True),
    Rule((0,), "kv.iswa", False, "gemma3 SWA layers still get full n_ctx cells (LlamaSharp ~b4900-b5100 log)"),
    Rule((5370,), "kv.iswa", True,
               "llama-kv-cache-unified-iswa.cpp: SWA layers hold min(n_ctx, pad(n_swa*S + n_ubatch)) (PR 13194)",
               True),
    # which architectures' sliding window shrinks the KV cache (llama-model.cpp load_hparams: swa_type and
    # set_swa_pattern per LLM_ARCH_*, 0.3.16 tree; models/<arch>.cpp load_arch_hparams in the 0.3.36 tree).
    # Phi-3 reads phi3.attention.sliding_window and drops it ("Phi SWA is currently disabled", PR 13676; both
    # trees): the cache keeps n_ctx cells on every layer. LLM_ARCH_LLAMA (Llama, Mistral, Mixtral) never reads
    # a window. Project families: gemma2 (pattern 2), gemma3 (6), gpt_oss (openai-moe, 2), llama4 (chunked, 4),
    # gemma4 (models/gemma4.cpp, 0.3.36 tree).
    Rule((0,), "kv.swa_families", frozenset({"gemma2", "gemma3", "gpt_oss", "llama4", "gemma4"}),
         "llama-model.cpp load_hparams (0.3.16) / src/models/*.cpp (0.3.36): phi3 SWA disabled, llama none"),
    Rule((0,), "kv.mla_latent", False, "deepseek2 caches full per-head K (192) and V (128) (0.3.8 tree)"),
    Rule((5170,), "kv.mla_latent", True,
               "llama-model.cpp deepseek2: K = kv_lora_rank + rope (576), V = kv_lora_rank (512), 1 KV head, "
               "for GGUFs carrying attn_k_b/attn_v_b (May 2025 DSV3 log)", True),
    Rule((0,), "kv.unified_default", True, "one stream (no kv_unified switch yet)"),
    Rule((6050,), "kv.unified_default", False, "common.h kv_unified = false (0.3.16 tree)", True),
    Rule((6700,), "kv.unified_default", "server: true when -np auto",
               "llama-server 'setting n_parallel = 4 and kv_unified = true' (b7342 log)", True),
    # --- flash attention / offload / output -------------------------------------------------------------
    Rule((0,), "flash_attn.default", "off", "common.h flash_attn = false (0.2.90..0.3.16)"),
    Rule((6325,), "flash_attn.default", "auto",
               "llama_flash_attn_type AUTO, resolved at context creation ('Flash Attention was auto, set to "
               "enabled', b7342 log)", True),
    Rule((0,), "ngl.output_layer_counted", True,
               "llama-model.cpp load_tensors: act_gpu_layers = min(ngl, n_layer + 1); output on GPU iff ngl > n_layer"),
    Rule((0,), "ngl.output_first", False,
               "llama-model.cpp load_tensors: i_gpu_start = n_layer - ngl (0.2.90, 0.3.8, 0.3.16 trees)"),
    Rule((6700,), "ngl.output_first", True,
               "i_gpu_start = n_layer + 1 - ngl: the output layer takes the first of N (Windows ollama log, "
               "-ngl 26 of 37: KV of 25 layers on CUDA0)", True),
    Rule((0,), "input.pinned_no_mmap", False, "input layer (token_embd) in the CPU buffer without mmap"),
    Rule((6700,), "input.pinned_no_mmap", True,
               "without mmap the input layer takes the GPU's host buffer type first in make_cpu_buft_list "
               "(Windows ollama log: CUDA_Host 934.54 MiB holds token_embd with the CPU layers)", True),
    Rule((0,), "split_row.layers_on_main", True,
               "src/llama.cpp llm_load_tensors: -sm row gives every GPU layer {split buffer, main GPU} (0.2.90 "
               "tree): layers, norms and KV on the main GPU"),
    Rule((4000,), "split_row.layers_on_main", False,
               "llama-model.cpp load_tensors: -sm row splits layers by -ts like -sm layer, each GPU's buffer list "
               "led by its split buffer 'CUDA<N>_Split' (backend-registry loader; 0.3.2 / 0.3.16 trees)", True),
    Rule((0,), "ngl.minus_one", "none", "-ngl -1 offloads 0 layers (early-2025 log: 'offloaded 0/65')"),
    Rule((6500,), "ngl.minus_one", "all", "-ngl -1 / auto / all = every layer (late 2025)", True),
    Rule((0,), "ngl.default", 0, "llama_model_default_params n_gpu_layers = 0 (0.3.16 tree)"),
    Rule((7000,), "ngl.default", "all", "default offloads every layer ('default (all, 49/49)', b7342 log)", True),
    Rule((0,), "output.includes_embd", "when embeddings on",
               "llama-context.cpp output_reserve: (n_vocab + n_embd if embeddings) x max(n_outputs, n_seq_max) x 4"),
    Rule((0,), "kv.swa_cells_per_seq", True,
               "iSWA: n_swa x n_seq_max when unified, n_swa per stream otherwise (0.3.16 tree)"),
    Rule((0,), "fit.params", False, "no automatic fitting"),
    Rule((7400,), "fit.params", True, "common_params_fit / memory breakdown print (2026 logs)", True),
    Rule((0,), "ctx.default", 0, "common.h n_ctx = 0: the model's n_ctx_train (0.2.90 tree)"),
    Rule((3900,), "ctx.default", 4096, "common.h n_ctx = 4096 (0.3.8 and 0.3.16 trees)", True),
    Rule((7400,), "ctx.default", 0,
         "common.h n_ctx = 0 'context the model was trained with', fit_params = true (0.3.36 tree; with the "
         "automatic fit, fit.params)", True),
    Rule((0,), "server.n_parallel_default", 1, "common.h n_parallel = 1 (0.2.90..0.3.16)"),
    Rule((6700,), "server.n_parallel_default", 4,
               "llama-server -np auto: 'setting n_parallel = 4 and kv_unified = true' (b7342 log)", True),
    Rule((0,), "mla.fa_needs_equal_heads", True,
               "ggml-cuda fattn.cu: K and V head sizes must match (MLA 576/512 excepted), else FA auto -> off"),
    # CPU weight repacking (ggml-cpu/repack.cpp ggml_repack_get_optimal_repack_type) on an x86-64 CPU with AVX2,
    # the CPU variant a GGML_NATIVE=OFF build and the AVX2 variant of the all-variants packages run; the
    # buffer "CPU_REPACK" (named CPU_AARCH64 in early builds: not modelled before b5000)
    Rule((0,), "cpu.repack_types", frozenset(), "no extra CPU buffer type before the AVX2 Q4_0 8x8 repack"),
    Rule((5000,), "cpu.repack_types", frozenset({"Q4_0", "Q4_K", "IQ4_NL"}),
         "repack.cpp (0.3.16 tree): Q4_0 8x8, Q4_K 8x8, IQ4_NL 8x8 with AVX2 (Q2_K needs AVX512)", True),
    Rule((6300,), "cpu.repack_types", frozenset({"Q4_0", "Q4_K", "IQ4_NL", "MXFP4"}),
         "repack.cpp (0.3.36 tree): + MXFP4 8x8 with AVX2 (Q5_K / Q6_K / Q8_0 repack only on ARM)", True),
    # a CPU-only build's compute buffer at the logits step (compute.cpu_compute_bytes): n_ubatch x n_embd f32
    # tensors live beside the logits. Measured on real CPU loads: 2 at b6150 (llama-cpp-python 0.3.16), 3 at
    # b11312 (0.3.36: one more hidden-state tensor live at that step; the graph change was not pinned in the
    # source); the change lies between the two anchors and is put at the newer one
    Rule((0,), "compute.cpu_logits_hidden_rows", 2, "groundtruth/cpu/llamacpp_b6150.jsonl: logits + 2 x ub x n_embd"),
    Rule((11312,), "compute.cpu_logits_hidden_rows", 3,
         "groundtruth/cpu/llamacpp_b11312.jsonl: logits + 3 x ub x n_embd (0.3.36 tree)", True),
    # the graph a CPU-only build reserves its compute buffer for, replayed through ggml-alloc (compute.py
    # cpu_graph_bytes, graph_llm.py, galloc.py): None = not modelled (the closed form above); 6150 = the b6150
    # graph (set_rows KV stores, f32 KQ mask padded to 64 and cast to f16 for flash attention, which needs
    # n_kv % 256 == 0, q/k/v expanded in that order); 11312 = the 0.3.36 tree's (q/v/k order, views for the stores,
    # an f16 unpadded mask, the embeddings input beside the tokens, output-flagged result_norm/result_output,
    # ggml_gallocr_free_extra_space). Builds between the two anchors take the older graph (the changes are not
    # pinned to their pull requests here).
    Rule((0,), "compute.cpu_graph", None, "set_rows KV stores (the reserve graph modelled) start at b6150"),
    Rule((6150,), "compute.cpu_graph", 6150,
         "llama-graph.cpp build_attn / build_attn_mha, llama-kv-cache-unified.cpp cpy_k/cpy_v, ggml-alloc.c (0.3.16 tree)",
         True),
    Rule((11312,), "compute.cpu_graph", 11312,
         "llama-graph.cpp build_inp_embd / build_attn_inp_kq_mask / build_attn, ggml-alloc.c (0.3.36 tree)", True),
    Rule((0,), "moe.n_cpu_moe", False, "expert placement only by -ot"),
    Rule((6200,), "moe.n_cpu_moe", True, "--n-cpu-moe N keeps the experts of the first N layers on CPU", True),
    # --- scheduler (simulate): the server's slot rules `vram-detective simulate` follows (issue 18), read by
    # simulate/rules.py (tools/server/server.cpp as llama-cpp-python 0.3.16 vendors it)
    Rule((0,), "scheduler_prefix_caching", True, "tools/server/server.cpp (0.3.16 tree): cache_prompt per slot"),
    Rule((0,), "scheduler_chunked_prefill", True, "server: the prompt is decoded in n_batch chunks"),
    Rule((0,), "scheduler_mixed_prefill_decode", True, "server: one batch for all slots"),
    Rule((0,), "scheduler_reserved_blocks", 0, "cells, no reserved block"),
    Rule((0,), "scheduler_admission_watermark", 0.0, "a free slot admits"),
    Rule((0,), "scheduler_preemption", "none", "server: a full slot shifts its context, nothing preempts"),
    Rule((0,), "scheduler_victim", "none", "server: nothing preempts"),
    Rule((0,), "scheduler_sliding_window_frees", False, "SWA cells kept per slot"),
)


def rule(name: str, build: int | None):
    """The value of `name` at `build` (None: the newest row)."""
    return value_at(RULES, name, None if build is None else (build,))


def rule_names() -> tuple[str, ...]:
    return _names(RULES)


# --- the Releases part of engines/base.py ------------------------------------------------------------------
KNOWN_BUILDS: tuple[str, ...] = ("b3600", "b4400", "b5274", "b5622", "b6150", "b7342", "b11312")
OLDEST_BUILD = 3000  # the mid-2024 log formats are the oldest modelled
# The newest modelled build: llama-cpp-python 0.3.36 vendors llama.cpp@0c1e57098 (2026-10-01, its CHANGELOG).
# Build numbers are git commit counts; the sdist's submodule is a shallow clone (rev-list --count gives 1) and
# no tag history is at hand offline, so the number is the estimate from the commit date (b7342 = Dec 2025,
# ~13 builds a day): the rules of that tree hold from here up.
NEWEST_BUILD = 11312


def _window() -> ReleaseWindow:
    """The modelled builds, read from OLDEST_BUILD and NEWEST_BUILD when asked."""
    return ReleaseWindow("llama.cpp build", (OLDEST_BUILD,), (NEWEST_BUILD,), 1, lambda version: f"b{version[0]}")


def resolve_build(text: str | None) -> tuple[int]:
    """'b5274' / '5274' / 'latest' / None -> (5274,); UnsupportedReleaseError (a ValueError) outside the modelled
    builds, OLDEST_BUILD to NEWEST_BUILD (the one value to move when newer builds are read)."""
    if text is None or str(text).strip().lower() in ("", "latest", "newest"):
        return (NEWEST_BUILD,)
    raw = str(text).strip().lower().removeprefix("b")
    if not raw.isdigit():
        raise ValueError(f"llama.cpp build {text!r}: expected a build number like b5274")
    return _window().check((int(raw),), f"b{int(raw)}")


def rules_at(version, path=None) -> dict:
    """Every rule's value at that build (path: unused, the Releases signature)."""
    return {name: rule(name, version[0]) for name in rule_names()}


_MISSING = object()


def rule_at(version, name: str, path=None, default=_MISSING):
    try:
        return rule(name, version[0])
    except KeyError:
        if default is _MISSING:
            raise
        return default


def first_release(test):
    """The oldest anchored build whose rules pass test(rules), as (build,); None when none does."""
    for text in KNOWN_BUILDS:
        version = resolve_build(text)
        if test(rules_at(version)):
            return version
    return None


def is_modelled(version) -> bool:
    return version[0] >= OLDEST_BUILD


def era(version: str, variant: str = "") -> str:
    """llama.cpp's era: the thousand of its build (b5274 -> 'llama.cpp b5xxx'; `score`'s tables and the intervals
    group cases by it)."""
    digits = "".join(char for char in str(version) if char.isdecimal())
    return f"llama.cpp b{digits[:1]}xxx" if digits else "llama.cpp"
