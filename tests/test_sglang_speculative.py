"""SGLang speculative decoding (EAGLE / EAGLE3 / NEXTN-MTP / STANDALONE): the release's default steps, top-k and draft
tokens, the draft's KV layers, and where the draft KV lives (its own pool before 0.5.14, the target's cell after)."""
from __future__ import annotations

import pytest

from vram_detective.api import model_spec
from vram_detective.engines.sglang.launch import parse_launch_words
from vram_detective.engines.sglang.pool import cell_size, draft_layers, draft_pool_tokens, predict_pool
from vram_detective.engines.sglang.releases import rules
from vram_detective.engines.sglang.settings import from_values, speculative_params
from vram_detective.units import GIB


@pytest.mark.parametrize("version,architecture,algorithm,expected", [
    ("0.4.3", "LlamaForCausalLM", "EAGLE", (5, 8, 64)),  # server_args.py 0.4.3 field defaults
    ("0.4.4", "LlamaForCausalLM", "EAGLE", (5, 4, 8)),
    ("0.4.10", "DeepseekV3ForCausalLM", "NEXTN", (3, 1, 4)),  # auto_choose_speculative_params
    ("0.4.10", "Qwen3ForCausalLM", "EAGLE3", (5, 4, 8)),
    ("0.5.8", "Qwen3ForCausalLM", "EAGLE3", (3, 1, 4)),  # 0.5.8: (3, 1, 4) for all but Llama / Grok-1
    ("0.5.8", "LlamaForCausalLM", "EAGLE", (5, 4, 8)),
    ("0.5.3", "LlamaForCausalLM", "STANDALONE", (3, 1, 4)),
])
def test_speculative_defaults_per_release(version, architecture, algorithm, expected):
    settings = from_values({"speculative_algorithm": algorithm})
    assert speculative_params(settings, rules(version), architecture) == expected
    # a given value is kept, the others still come from the defaults
    given = from_values({"speculative_algorithm": algorithm, "speculative_num_steps": 2})
    assert speculative_params(given, rules(version), architecture) == (2,) + expected[1:]


def test_draft_layers():
    v3 = model_spec("deepseek-ai/DeepSeek-V3")
    assert draft_layers(v3, "NEXTN") == 1  # num_nextn_predict_layers
    assert draft_layers(v3, "EAGLE") == 1  # one decoder layer in the EAGLE head
    assert draft_layers(v3, "STANDALONE") is None  # a separate model: its own config
    assert draft_layers(v3, None) == 0


def test_draft_kv_in_the_cell_from_0_5_14():
    # Llama-3.1-8B bf16: 8 KV heads x 128 x 2 (K, V) x 2 B x 32 layers = 131,072 B; an EAGLE head adds 1/32
    spec = model_spec("meta-llama/Llama-3.1-8B-Instruct")
    assert cell_size(spec, 1).bytes_per_token == 131072
    settings = from_values({"mem_fraction_static": 0.9, "speculative_algorithm": "EAGLE", "speculative_num_steps": 3,
                            "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4, "page_size": 1})
    free, weights = 78 * GIB, 15 * GIB  # rest = 63 - 78 x 0.1 = 55.2 GiB
    pool = predict_pool(free, weights, spec, settings, "0.5.14")
    assert pool.max_total_num_tokens == int(55.2 * GIB) // 135168 == 438_495
    # the draft's pool holds as many tokens, one 4,096 B layer each, inside the budget; the target's K is its own
    assert pool.draft_in_budget and pool.draft_kv_tokens == 438_495
    assert pool.draft_kv_gib == pytest.approx((438_495 + 1) * 4096 / GIB)
    assert pool.k_size_gib == pytest.approx((438_495 + 1) * 65536 / GIB)
    # 0.5.13: the target's pool keeps its own cell (the draft's comes from the fraction's speculative reserve) ...
    before = predict_pool(free, weights, spec, settings, "0.5.13")
    assert before.max_total_num_tokens == int(55.2 * GIB) // 131072 == 452_198
    # ... and the draft worker's pool is built after it, for max_num_reqs = the request pool (452,198 / 131,072 x 512
    # = 1,766 -> the 2,048 floor): 452,198 + 2,048 x (3 x 1 + 4) + 100 = 466,634 tokens of one 4,096 B layer
    assert before.draft_kv_tokens == draft_pool_tokens(452_198, 2048, 3, 1, 4) == 466_634
    assert before.draft_kv_gib == pytest.approx((466_634 + 1) * 4096 / GIB)  # + the padding slot
    assert not before.draft_in_budget


def test_draft_kv_and_graphs_in_the_plan():
    from vram_detective.api import explain

    # 0.5.14: the draft's KV line follows the target's, with its #tokens; 0.5.13: its own pool's larger #tokens
    args = dict(engine="sglang", speculative_algorithm="EAGLE", speculative_num_steps=3, speculative_eagle_topk=1,
                speculative_num_draft_tokens=4, max_running_requests=8)
    new = explain("meta-llama/Llama-3.1-8B-Instruct", "H100", engine_version="0.5.14", **args)
    kv_lines = [line for line in new.log_lines if line.startswith("KV Cache is allocated")]
    tokens = new.kv_cache_tokens
    assert len(kv_lines) == 2 and all(f"#tokens: {tokens}," in line for line in kv_lines)
    assert new.figure("draft_kv_tokens") == tokens
    # K of the draft's one layer is 1/32 of the target's 32
    assert new.figure("draft_k_size_bytes") == pytest.approx(new.figure("k_size_bytes") / 32, rel=1e-3)
    old = explain("meta-llama/Llama-3.1-8B-Instruct", "H100", engine_version="0.5.13", **args)
    assert old.figure("draft_kv_tokens") > old.kv_cache_tokens
    # --max-running-requests 8 cuts the speculative capture list (1..8) at 8; the draft's graphs add (3 steps + the
    # extend pass) x its one layer to the target's 32 layer passes per batch size
    from vram_detective.engines.sglang import calibration
    graphs = new.figure("cuda_graph_bytes")
    plain = explain("meta-llama/Llama-3.1-8B-Instruct", "H100", engine="sglang", engine_version="0.5.14",
                    max_running_requests=8)
    per = calibration.GRAPH_PER_LAYER_BS.bytes
    assert graphs - plain.figure("cuda_graph_bytes") == 8 * (32 + 4) * per - 4 * 32 * per  # 8 sizes vs [1, 2, 4, 8]


def test_launch_line_speculative_flags():
    line = parse_launch_words(["python", "-m", "sglang.launch_server", "--model-path", "meta-llama/Llama-3.1-8B-Instruct",
                               "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "jamesliu1/eagle3",
                               "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                               "--speculative-num-draft-tokens", "4"])
    assert line.settings == {"speculative_algorithm": "EAGLE3", "speculative_draft_model_path": "jamesliu1/eagle3",
                             "speculative_num_steps": 3, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4}
    assert line.unknown_flags == ()


# --- MLA + DSA indexer, DP attention, FP8 block MoE weights (same module: the cell and the weights beside the pool) ---

def test_dsa_indexer_rides_in_the_mla_cell_from_0_5_4():
    from dataclasses import replace

    v3 = model_spec("deepseek-ai/DeepSeek-V3")
    v32 = replace(v3, mla=replace(v3.mla, indexer_heads=64, indexer_head_dim=128, indexer_topk=2048))
    # latent (512 + 64) x 61 layers x bf16 = 70,272 B on every rank; indexer (128 fp8 + 128 // 128 x 4 B scale) x 61
    assert cell_size(v3, 8, "auto", rules("0.5.4")).bytes_per_token == 70272
    assert cell_size(v32, 8, "auto", rules("0.5.4")).bytes_per_token == 70272 + 132 * 61 == 78324
    assert cell_size(v32, 8, "auto", rules("0.5.3")).bytes_per_token == 70272  # 0.5.3: not in the estimate
    # fp8 KV: the latent in one byte, the indexer unchanged; "KV size" prints the latent only
    fp8 = cell_size(v32, 8, "fp8_e4m3", rules("0.5.4"))
    assert (fp8.bytes_per_token, fp8.k_bytes_per_token) == (576 * 61 + 132 * 61, 576 * 61)


def test_dp_attention_shards_kv_heads_by_attention_tp():
    from vram_detective.engines.sglang.pool import attention_tp

    # Qwen3-235B: 4 KV heads. TP 8: one head a rank (replicated past 4); TP 8 DP 4 (attn TP 2): 2 heads a rank
    spec = model_spec("Qwen/Qwen3-235B-A22B-FP8")
    dp = from_values({"tp_size": 8, "dp_size": 4, "enable_dp_attention": True})
    assert attention_tp(dp) == 2 and attention_tp(from_values({"tp_size": 8})) == 8
    assert cell_size(spec, attention_tp(dp)).bytes_per_token == 2 * 128 * 2 * 2 * 94 == 96256


def test_fp8_block_moe_weights_are_vllms_tensors():
    """layers/quantization/fp8.py 0.4.10 Fp8MoEMethod.create_weights: w13 (E, 2I, H) and w2 (E, H, I) in fp8,
    w13_weight_scale_inv (E, 2 ceil(I/128), ceil(H/128)) and w2's (E, ceil(H/128), ceil(I/128)) in fp32, and
    process_weights_after_loading returns at once for block quant on CUDA: vLLM's layout. Qwen3-235B-A22B-FP8 at TP 4
    (I = 1536 / 4 = 384) holds 55.1 GiB a rank in both engines."""
    from vram_detective.engines.sglang.plan import rank_inventories, resolve_settings
    from vram_detective.hardware import find_gpu

    spec, gpu = model_spec("Qwen/Qwen3-235B-A22B-FP8"), find_gpu("H100")
    s, r = resolve_settings({"tp_size": 4, "mem_fraction_static": 0.93}, spec, gpu, "0.4.10")
    _, inventory = rank_inventories(spec, gpu, s, r)[0]
    E, I, H, layers = 128, 384, 4096, 94
    moe = E * 3 * I * H + 4 * E * 3 * (I // 128) * (H // 128) + E * H * 2  # fp8 w13 + w2, fp32 scales, bf16 router
    attention = 2304 * H + H * 2048 + 4 * (18 * 32 + 32 * 16) + 2 * 128 * 2 + 2 * H * 2  # qkv, o, scales, norms
    embeddings = 151936 // 4 * H * 2 * 2 + H * 2  # embed_tokens + lm_head shards, final norm
    assert inventory.total_bytes == pytest.approx(layers * (moe + attention) + embeddings, abs=16 << 20)


@pytest.mark.xfail(strict=True, reason="vllm#21348 (SGLang: 'KV Cache is allocated. #tokens: 367404, K size: 8.23 GB'): "
                   "at mem_fraction_static 0.93 on 4x H100 the pool is predicted 394,954 tokens (17.70 GiB, +1.23 GiB). "
                   "The weights are vLLM's tensors (test above); the issue gives neither SGLang's fraction, release nor "
                   "'Load weight' lines, so the gap (free memory before weights on 4x H100 with NCCL, or the settings) "
                   "cannot be placed")
def test_vllm_21348_sglang_pool():
    from vram_detective.engines import get_engine
    from vram_detective.hardware import find_gpu

    plan = get_engine("sglang").plan(model_spec("Qwen/Qwen3-235B-A22B-FP8"), find_gpu("H100"),
                                     {"tp_size": 4, "mem_fraction_static": 0.93}, rules("0.4.10").version)
    assert plan.kv_cache_tokens == 367404


def _eagle3_head(tmp_path):
    # an EAGLE3 head for Llama-3.1-8B as its checkpoints ship it: one decoder layer, a 32,000-token draft vocabulary
    import json

    head = tmp_path / "eagle3-head"
    head.mkdir()
    (head / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 4096,
        "intermediate_size": 14336, "num_hidden_layers": 1, "num_attention_heads": 32, "num_key_value_heads": 8,
        "head_dim": 128, "vocab_size": 128256, "draft_vocab_size": 32000, "max_position_embeddings": 131072,
        "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "torch_dtype": "bfloat16", "tie_word_embeddings": False}))
    return str(head)


def test_separate_eagle3_head_is_sized_from_its_config(tmp_path):
    from vram_detective.api import explain

    path = _eagle3_head(tmp_path)
    b = explain("meta-llama/Llama-3.1-8B-Instruct", "H100", engine="sglang", engine_version="0.5.17",
                speculative_algorithm="EAGLE3", speculative_draft_model_path=path, speculative_num_steps=3,
                speculative_eagle_topk=1, speculative_num_draft_tokens=4)
    draft = next(c for c in b.components.children if c.key == "draft_weights")
    # by hand, bf16: attention 2 x 4096^2 + 2 x 1024 x 4096 = 41.9 M, its qkv's second input half (4096 + 2 x 1024)
    # x 4096 = 25.2 M, MLP 3 x 14336 x 4096 = 176.2 M, fc 3 x 4096 x 4096 = 50.3 M, lm_head 32,000 x 4096 = 131.1 M:
    # 424.7 M parameters (~849 MB) + d2t int64 x 32,000; the embedding is the target's (eagle_worker_v2 set_embed)
    assert draft.bytes == pytest.approx(2 * 424_689_664 + 8 * 32_000, rel=0.002)
    # its one layer rides in the cell (0.5.14+): K of the draft is 1/32 of the target's
    assert b.figure("draft_k_size_bytes") == pytest.approx(b.figure("k_size_bytes") / 32, rel=1e-3)
    # without its config the head is sized as one decoder layer of the target's shape (its lm_head taken as the
    # target's, so shared), as vLLM sizes it, and says so
    unknown = explain("meta-llama/Llama-3.1-8B-Instruct", "H100", engine="sglang", engine_version="0.5.17",
                      speculative_algorithm="EAGLE3", speculative_draft_model_path=str(tmp_path / "missing"))
    guessed = next(c for c in unknown.components.children if c.key == "draft_weights")
    assert guessed.bytes < draft.bytes  # no lm_head of its own
    assert any("config.json was not found" in note for note in unknown.notes)


def test_log_parser_reads_the_draft_and_its_mamba_states():
    from vram_detective.engines.sglang.log_parser import parse_log

    # 0.5.17's lines for a hybrid target with an MTP draft: the draft worker's Load weight pair before the pools,
    # the Mamba line with the draft tokens' caches, the target's KV line, then the draft's (same #tokens)
    text = "\n".join([
        "[2026-08-15 10:00:00] Load weight begin. avail mem=78.73 GB",
        "[2026-08-15 10:01:00] Load weight end. elapsed=60.1 s, type=Qwen3_5ForConditionalGeneration, avail mem=27.58 GB, "
        "mem usage=51.15 GB.",
        "[2026-08-15 10:01:01] Load weight begin. avail mem=27.58 GB",
        "[2026-08-15 10:01:05] Load weight end. elapsed=4.1 s, type=Qwen3_5ForCausalLMMTP, avail mem=26.80 GB, "
        "mem usage=0.78 GB.",
        "[2026-08-15 10:01:06] Mamba Cache is allocated. max_mamba_cache_size: 43, conv_state size: 0.12GB, ssm_state "
        "size: 3.09GB intermediate_ssm_state_cache size: 2.11GB intermediate_conv_window_cache size: 0.04GB ",
        "[2026-08-15 10:01:06] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 171008, K size: 5.22 GB, V size: 5.22 GB",
        "[2026-08-15 10:01:06] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 171008, K size: 0.33 GB, V size: 0.33 GB",
    ])
    found = parse_log(text)
    assert found["weights_mem_usage_gb"] == 51.15 and found["draft_weights_mem_usage_gb"] == 0.78
    assert (found["mamba_cache_size"], found["mamba_ssm_state_gb"], found["mamba_intermediate_ssm_state_gb"],
            found["mamba_conv_window_gb"]) == (43, 3.09, 2.11, 0.04)
    assert (found["k_size_gb"], found["draft_k_size_gb"], found["draft_kv_cache_tokens"]) == (5.22, 0.33, 171008)
    assert "swa_k_size_gb" not in found
    # without a draft, a second unlabelled line is still the sliding-window pool's
    plain = parse_log("KV Cache is allocated. #tokens: 1000, K size: 1.00 GB, V size: 1.00 GB\n"
                      "KV Cache is allocated. #tokens: 800, K size: 0.20 GB, V size: 0.20 GB")
    assert plain["swa_k_size_gb"] == 0.2 and "draft_k_size_gb" not in plain


def test_plan_prints_the_draft_workers_load_lines_from_0_5_14():
    from vram_detective.api import explain

    # Qwen3.5-27B's MTP layer (mtp_num_hidden_layers 1) as the NEXTN draft: the draft worker's pair follows the
    # target's, before the pools; the target's 'Load weight end' is its own weights only
    b = explain("Qwen/Qwen3.5-27B", "H200", engine="sglang", engine_version="0.5.17", speculative_algorithm="NEXTN")
    loads = [line for line in b.log_lines if line.startswith("Load weight")]
    assert len(loads) == 4 and loads[3].index("Load weight end") < 1
    draft = b.figure("draft_weights_bytes")
    assert 0.5 * GIB < draft < GIB and f"mem usage={draft / GIB:.2f} GB." in loads[3]
    target_after = loads[1].split("avail mem=")[1].split(" GB")[0]
    assert loads[2] == f"Load weight begin. avail mem={target_after} GB"
    assert b.log_lines.index(loads[3]) < next(i for i, line in enumerate(b.log_lines) if line.startswith("KV Cache"))


@pytest.mark.parametrize("algorithm", ["EAGLE", "EAGLE3"])
def test_an_eagle_head_of_unknown_config_is_sized_alike_on_both_engines(algorithm):
    """A head whose config.json is neither local nor in the catalog: vLLM sized it as one decoder layer of the
    target's shape and said nothing, SGLang left its weights unsized; both now size it the same way and say so."""
    from vram_detective.api import explain

    head = "nosuch/eagle-head"
    vllm = explain("Qwen/Qwen3-8B", "H100", speculative_config={"method": algorithm.lower(), "model": head,
                                                               "num_speculative_tokens": 3})
    sglang = explain("Qwen/Qwen3-8B", "H100", engine="sglang", speculative_algorithm=algorithm,
                     speculative_draft_model_path=head)
    from vram_detective.render import to_json

    drafted = {step.key: step.bytes for step in vllm.weights_explained}["draft"]
    assert drafted > 0 and abs(to_json(sglang)["sglang"]["draft_weights_gib"] - drafted / GIB) < 1e-4
    for breakdown in (vllm, sglang):
        assert any(f"{head}'s config.json was not found" in note and "one decoder layer of the target's shape" in note
                   for note in breakdown.notes)
