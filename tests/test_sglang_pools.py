"""SGLang's pools beyond the plain KV pool: the Mamba / GDN state pool of hybrid linear-attention models and
context_len from the ModelSpec (engines/sglang/pool.py), worked from the release source and the dev logs."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from vram_detective.api import model_spec
from vram_detective.engines.sglang.log_lines import log_lines
from vram_detective.engines.sglang.log_parser import parse_log
from vram_detective.engines.sglang.pool import (cell_size, context_len, mamba_slots, mamba_state, predict_pool, swa_layout,
                                                swa_tokens)
from vram_detective.engines.sglang.releases import rules
from vram_detective.engines.sglang.settings import from_values
from vram_detective.model.config import parse_config
from vram_detective.model.sources import load_model
from vram_detective.units import GIB, MIB

CASES_PATH = Path(__file__).resolve().parents[1] / "groundtruth" / "dev-sglang.jsonl"
BY_ID = {case["id"]: case for case in map(json.loads, CASES_PATH.read_text().splitlines())}
QWEN35_9B = BY_ID["sglang-qwen35-9b-tp2-24g-nop2p-mfs08-262k"]


def _qwen35_9b():
    """Qwen3.5-9B is not in the catalog: the 27B's config with the 9B's text sizes (32 layers, every 4th full
    attention, 16 key / 32 value GDN heads of 128, 4 KV heads of 256). The log's own figures confirm the shapes
    that size the pools: ssm 4.38 GB, conv 0.10 GB for 187 rows, K 2.50 GB for 327311 rows at TP 2."""
    config = copy.deepcopy(load_model("Qwen/Qwen3.5-27B", source="catalog").config)
    config["text_config"].update(hidden_size=4096, num_hidden_layers=32, linear_num_value_heads=32,
                                 num_attention_heads=16, intermediate_size=12288)
    return parse_config(config, "Qwen/Qwen3.5-9B")


def test_gdn_state_per_request_from_mamba_utils():
    # TP 2, 24 GDN layers: conv (2 x 16 x 128 + 32 x 128) / 2 = 4096 channels x (4 - 1) x bf16 = 24 KiB,
    # ssm (32 / 2) x 128 x 128 x fp32 = 1 MiB; per request (24 KiB + 1 MiB) x 24 = 24.5625 MiB
    state = mamba_state(_qwen35_9b(), 2, rules("0.5.10"))
    assert (state.conv_bytes, state.ssm_bytes) == (24 * 24 * 1024, 24 * MIB)
    assert state.per_request == 25_755_648
    # the pool holds size + 1 rows: 187 x 24 MiB = 4.383 GiB prints "ssm_state size: 4.38GB", 0.10 GB conv
    assert round(187 * state.ssm_bytes / GIB, 2) == QWEN35_9B["observed"]["mamba_ssm_state_gb"]
    assert round(187 * state.conv_bytes / GIB, 2) == QWEN35_9B["observed"]["mamba_conv_state_gb"]


def test_ssm_dtype_follows_the_config_from_0_5_9():
    spec = _qwen35_9b()
    assert spec.mixer.ssm_dtype == "float32"
    bf16 = spec.__class__(**{**spec.__dict__, "mixer": spec.mixer.__class__(
        **{**spec.mixer.__dict__, "ssm_dtype": "bfloat16"})})
    assert mamba_state(bf16, 2, rules("0.5.9")).ssm_bytes == 12 * MIB  # config's bfloat16 read
    assert mamba_state(bf16, 2, rules("0.5.8")).ssm_bytes == 24 * MIB  # --mamba-ssm-dtype float32 only
    assert mamba_state(spec, 2, rules("0.5.1")) is None  # no GDN state pool before 0.5.2


def test_ratio_split_worked_example():
    # rest 9.5 GiB, 0.9 : 1 -> mamba budget 4.5 GiB // 24.5625 MiB = 187 slots, KV gets 9.5 - 187 x 24.5625 MiB
    per_req = 25_755_648
    slots, kv_rest = mamba_slots(9.5, per_req, rules("0.5.10"))
    assert slots == 187 and kv_rest == pytest.approx(9.5 - 187 * per_req / GIB)
    assert mamba_slots(9.5, per_req, rules("0.5.10"), max_mamba_cache_size=64)[0] == 64
    # 0.5.2: (--max-running-requests or 512) x 2 x bf16 bytes, whatever the memory
    assert mamba_slots(9.5, per_req, rules("0.5.2"))[0] == 2048
    assert mamba_slots(9.5, per_req, rules("0.5.2"), max_running_requests=16)[0] == 64


def test_speculative_intermediate_states_per_release():
    per_req, rest = 25_755_648, 9.5
    # 0.5.4-0.5.12: max_running_requests x D states come off rest before the split:
    # (9.5 - 64 x 24.5625 MiB = 7.965 GiB) x 0.9 / 1.9 = 3.773 GiB // 24.5625 MiB = 157
    slots, _ = mamba_slots(rest, per_req, rules("0.5.10"), max_running_requests=16, draft_tokens=4)
    assert slots == 157
    # 0.5.13 joint solve: budget // (per_req x (1 + D / 3)), then min(16, slots // 3) x D states off rest
    slots, kv_rest = mamba_slots(rest, per_req, rules("0.5.13"), max_running_requests=16, draft_tokens=4)
    # 4.5 GiB // (24.5625 MiB x 7 / 3 = 57.3 MiB) = 80
    assert slots == 80
    assert kv_rest == pytest.approx(rest - (16 * 4 + 80) * per_req / GIB)


def test_qwen35_9b_pool_from_the_logged_memory():
    """The log's own free memory (22.93 before, 14.08 after weights, mfs 0.8) gives 187 slots and 328,2xx tokens;
    SGLang logged 186 and 327,310. Both follow exactly when the pool's free-memory figures (the MIN over the two
    TP ranks, utils.py get_available_gpu_memory(distributed=True)) are 48 MiB under rank 0's printed ones: the
    second 24 GiB card (no P2P to the first) has that much less free, and rank 0 prints only its own."""
    spec, observed = _qwen35_9b(), QWEN35_9B["observed"]
    settings = from_values({"tp_size": 2, "mem_fraction_static": 0.8, "page_size": 1})
    weights = int(round((observed["load_begin_avail_mem_gb"] - observed["load_end_avail_mem_gb"]) * GIB))
    as_printed = predict_pool(int(observed["load_begin_avail_mem_gb"] * GIB), weights, spec, settings, "0.5.10")
    assert (as_printed.mamba_slots, as_printed.max_total_num_tokens) == (187, 328_234)
    rank1 = predict_pool(int((observed["load_begin_avail_mem_gb"] - 48 / 1024) * GIB), weights, spec, settings, "0.5.10")
    assert rank1.mamba_slots == observed["mamba_cache_size"] == 186
    assert abs(rank1.max_total_num_tokens - observed["kv_cache_tokens"]) < 40
    assert rank1.max_running_requests == observed["max_running_requests"] == 62  # 186 // 3
    assert rank1.context_len == observed["context_len"] == 262144
    assert cell_size(spec, 2).bytes_per_token == 8 * 2 * 256 * 2 * 2  # 8 full-attention layers, 2 KV heads a rank


def test_context_len_reads_the_spec():
    r = rules("0.5.10")
    # HF Gemma3TextConfig's max_position_embeddings 131072 x the linear factor 8 (get_context_length applies it)
    assert context_len(model_spec("google/gemma-3-27b-it"), r) == 1_048_576
    assert context_len(model_spec("meta-llama/Llama-3.1-8B-Instruct"), r) == 131072  # llama3 rope: no factor
    assert context_len(model_spec("Qwen/Qwen3-8B"), r) == 40960
    assert context_len(model_spec("Qwen/Qwen3-8B"), r, 2048) == 2048


@pytest.mark.parametrize("architecture,asked,first", [
    ("Qwen3ForCausalLM", "0.4.5", (0, 4, 6)),  # qwen3.py first in 0.4.6.post2's srt/models/
    ("Qwen3_5ForConditionalGeneration", "0.5.8", (0, 5, 9)),
    ("GptOssForCausalLM", "0.4.10", (0, 5, 1)),
    ("DeepseekV32ForCausalLM", "0.5.2", (0, 5, 3)),
    ("DiffusionGemmaForBlockDiffusion", "0.5.20", (0, 5, 21)),
    ("Qwen3ForCausalLM", "0.4.7", None),  # served
    ("LlamaForCausalLM", "0.4.0", None),  # no row: every modelled release
])
def test_first_release_serving(architecture, asked, first):
    from vram_detective.engines import get_engine

    assert get_engine("sglang").first_release_serving(architecture, rules(asked).version) == first


def test_predicted_log_prints_the_distributed_init_line():
    from vram_detective.engines import get_engine
    from vram_detective.hardware import find_gpu

    plan = get_engine("sglang").plan(model_spec("Qwen/Qwen3-8B"), find_gpu("H100"), {}, rules("0.5.10").version)
    # INIT_DIST (calibration: median of the logged 0.09 / 0.13 GiB), the 0.5.9+ format with elapsed=
    assert plan.log_lines[0] == "Init torch distributed ends. elapsed=T s, mem usage=0.11 GB"
    assert plan.log_lines[1].startswith("Load weight begin. avail mem=")


def test_diffusiongemma_swa_pools_from_the_logged_memory():
    """The log (no labels, 'dtype:' in the KV line: a 0.5.13-0.5.16 build with DiffusionGemma added) prints the SWA
    pool first: 56,320 tokens x 25 sliding layers x 8 KV heads x 256 = K 5.40 GB; then the full pool, 70,656 tokens x
    5 full layers x 2 KV heads x 512 (global_head_dim) = K 0.68 GB. Its ratio 56,320 / 70,656 is
    swa_full_tokens_ratio 0.8 after paging to 256 (no --max-running-requests / --disable-radix-cache, so 0.5.14's
    SWARequestCapPoolConfigurator does not apply): rest = 62.35 - 111.53 x 0.45 = 12.16 GiB, cell = 5 x 4096
    + 0.8 x 25 x 8192 = 184,320 B, 12.16 GiB // 184,320 = 70,846 -> 70,656 full, int(70,656 x 0.8) = 56,524 -> 56,320."""
    observed = BY_ID["sglang-diffusiongemma-26b-a4b-spark-mfs055-nograph"]["observed"]
    before = observed["load_end_avail_mem_gb"] + observed["weights_mem_usage_gb"]
    settings = from_values({"mem_fraction_static": 0.55, "page_size": 256})
    spec = model_spec("google/gemma-4-26B-A4B-it")  # diffusiongemma's base (not in the catalog): same attention
    pool = predict_pool(int(before * GIB), int(observed["weights_mem_usage_gb"] * GIB), spec, settings, "0.5.16")
    # the parser keys the lines by order: the first (kv_cache_tokens) is the SWA pool in this release's order
    assert (pool.swa_tokens, pool.max_total_num_tokens) == (observed["kv_cache_tokens"], observed["swa_kv_cache_tokens"])
    assert (round(pool.swa_k_gib, 2), round(pool.k_size_gib, 2)) == (observed["k_size_gb"], observed["swa_k_size_gb"])
    lines = [line for line in log_lines(pool, "0.5.16") if "KV Cache" in line]
    assert [parse_log(line)["kv_cache_tokens"] for line in lines] == [56320, 70656]
    # 0.5.17+: the full pool first, labelled
    assert [line.split(" KV")[0] for line in log_lines(pool, "0.5.17") if "KV Cache" in line] == ["Full", "SWA"]


def test_swa_split_per_release_worked_example():
    # Gemma 3 27B, TP 1, bf16: F = S = 16 heads x (128 + 128) x 2 B = 8192 B a layer; 10 full, 52 sliding layers
    layout = swa_layout(model_spec("google/gemma-3-27b-it"), 1, "auto", rules("0.4.10"))
    assert (layout.full_layers, layout.swa_layers, layout.full_per_token, layout.swa_per_token) == (10, 52, 8192, 8192)
    rest = 10 * GIB
    # 0.4.10: capacity 10 GiB // (62 x 8192) = 21,140; x 62 layers / (0.8 x 52 + 10) = 25,400.8 -> 25,400; swa 20,320
    assert swa_tokens(rest, layout, rules("0.4.10"), 1) == (25400, 20320)
    # 0.5.7: Gemma 3 is no hybrid SWA model any more (one pool); 0.5.11+ Gemma 4 is
    assert swa_layout(model_spec("google/gemma-3-27b-it"), 1, "auto", rules("0.5.7")) is None
    assert swa_layout(model_spec("google/gemma-4-26B-A4B-it"), 1, "auto", rules("0.5.10")) is None
    # 0.5.13 cell: 10 GiB // (10 x 8192 + 0.8 x 52 x 8192 = 422,707.2) = 25,401 (one more than the layer-count split)
    assert swa_tokens(rest, layout, rules("0.5.13"), 1) == (25401, 20320)
    # paging: 0.5.9 takes swa from the unpaged full (25,401 x 0.8 = 20,320.8), 0.5.10+ from the paged one
    assert swa_tokens(rest, layout, rules("0.5.9"), 64) == (25344, 20288)
    assert swa_tokens(rest, layout, rules("0.5.10"), 64) == (25344, 20224)


@pytest.mark.parametrize("version, words", [
    ("0.5.23", "RuntimeError: Not enough GPU memory for hybrid (mamba/linear-attention) state cache. "
               "Computed max_mamba_cache_size=-1"),  # 0.5.13.post1+ checks the slots
    ("0.5.12", "max_mamba_cache_size 0: no request's Mamba state fits, so no request can run"),  # no check yet
])
def test_a_hybrid_with_no_mamba_slot_does_not_start(version, words):
    """benchmarks/fuzz.py (seed 29): Nemotron-H-8B on a 20 GB card leaves the Mamba pool -1 slots; the answer said
    'starts' with a -32,784-byte request pool (and -97 MiB of state at -2 slots)."""
    from vram_detective.api import explain

    b = explain("nvidia/Nemotron-H-8B-Base-8K", "RTX 4000 Ada", engine="sglang", engine_version=version,
                max_running_requests=1024)
    assert b.failure is not None and words in b.failure.message

    def parts(component):
        return [component] + [inner for child in component.children for inner in parts(child)]

    assert min(part.bytes for part in parts(b.components) + parts(b.outside_budget)) >= 0
