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
    assert pool.draft_kv_gib == 0.0
    # 0.5.13: the target's pool keeps its own cell (the draft's comes from the fraction's speculative reserve) ...
    before = predict_pool(free, weights, spec, settings, "0.5.13")
    assert before.max_total_num_tokens == int(55.2 * GIB) // 131072 == 452_198
    # ... and the draft worker's pool is built after it, for max_num_reqs = the request pool (452,198 / 131,072 x 512
    # = 1,766 -> the 2,048 floor): 452,198 + 2,048 x (3 x 1 + 4) + 100 = 466,634 tokens of one 4,096 B layer
    assert before.draft_kv_tokens == draft_pool_tokens(452_198, 2048, 3, 1, 4) == 466_634
    assert before.draft_kv_gib == pytest.approx((466_634 + 1) * 4096 / GIB)  # + the padding slot


def test_launch_line_speculative_flags():
    line = parse_launch_words(["python", "-m", "sglang.launch_server", "--model-path", "meta-llama/Llama-3.1-8B-Instruct",
                               "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "jamesliu1/eagle3",
                               "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                               "--speculative-num-draft-tokens", "4"])
    assert line.settings == {"speculative_algorithm": "EAGLE3", "speculative_draft_model_path": "jamesliu1/eagle3",
                             "speculative_num_steps": 3, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4}
    assert line.unknown_flags == ()
