"""One rule table: vLLM release knowledge lives in engines/vllm/releases.py, and code elsewhere asks it by rule name
instead of comparing versions itself."""
from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import pytest

from vram_detective.engines.vllm import kv_dtypes
from vram_detective.engines.vllm.releases import first_release, first_release_serving, release, rule_at

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "vram_detective"

# Modules allowed to compare versions: the table itself and the version parser.
ALLOWED = {"engines/vllm/releases.py", "engines/sglang/releases.py", "engines/llamacpp/releases.py",
           "engines/ollama/releases.py", "units.py"}

_OP = r"(?:<=|>=|<|>)"
_VERSION_TUPLE = r"\(\s*0\s*,\s*\d+\s*(?:,\s*\d+\s*)?\)"  # (0, 6) or (0, 6, 4): GPU capabilities start at 3
_PARSED = r"parse_version\s*\((?:[^()]|\([^()]*\))*\)"
_INLINE = re.compile(
    rf"{_OP}\s*{_VERSION_TUPLE}|{_VERSION_TUPLE}\s*{_OP}|{_PARSED}\s*{_OP}|{_OP}\s*{_PARSED}|\.\s*at_least\s*\("
)


def inline_comparisons(source: str) -> list[int]:
    """Line numbers of the logical lines that compare a version inline (comments and strings ignored; tokens are
    joined with spaces, so the patterns allow them)."""
    found, code, start = [], [], None
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type in (tokenize.NEWLINE, tokenize.ENDMARKER):
            if start is not None and _INLINE.search(" ".join(code)):
                found.append(start)
            code, start = [], None
        elif token.type not in (tokenize.COMMENT, tokenize.STRING, tokenize.NL, tokenize.INDENT, tokenize.DEDENT):
            start = token.start[0] if start is None else start
            code.append(token.string)
    return found


def test_the_scanner_finds_inline_version_comparisons():
    source = (
        "if version < (0, 6, 4):\n    pass\n"
        "ok = compute_capability < (8, 0)  # a GPU, not a release\n"
        "text = 'version >= (0, 8, 0)'\n"
        "late = (0, 10,\n        1) <= version\n"
        "new = parse_version(str(x)) >= other\n"
        "chunked = release.at_least('0.5.0')\n"
    )
    assert inline_comparisons(source) == [1, 5, 7, 8]


def test_version_comparisons_live_only_in_the_release_table():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative in ALLOWED:
            continue
        offenders += [f"{relative}:{line}" for line in inline_comparisons(path.read_text(encoding="utf-8"))]
    assert not offenders, "compare versions through a named rule in the engine's releases.py: " + ", ".join(offenders)


# --- a few rules on both sides of their boundary ---------------------------------------------------------


def test_llama4_is_served_from_083():
    # models/registry.py lists Llama4ForCausalLM (llama4.py) from 0.8.3; 0.8.2 refuses the architecture
    assert rule_at((0, 8, 2), "serves_Llama4ForCausalLM") is False
    assert rule_at((0, 8, 3), "serves_Llama4ForCausalLM") is True
    first = first_release(lambda later: later["serves_Llama4ForCausalLM"])
    assert (first.label, first.source("serves_Llama4ForCausalLM")) == ("0.8.3", "llama4.py")
    newer = first_release_serving("Llama4ForCausalLM", (0, 8, 2))
    assert (newer[0].label, newer[1]) == ("0.8.3", "llama4.py")
    assert first_release_serving("Llama4ForCausalLM", (0, 8, 3)) is None
    # architectures present in the oldest modelled release have no row: every release serves them
    assert first_release_serving("LlamaForCausalLM", (0, 3, 0)) is None


@pytest.mark.parametrize("kv_cache_dtype, before, since", [
    ("turboquant_k8v4", (0, 19, 1), "0.20.0"), ("nvfp4", (0, 20, 2), "0.21.0"), ("int4_per_token_head", (0, 24, 0), "0.25.0"),
])
def test_packed_kv_dtypes_arrive_with_their_release(kv_cache_dtype, before, since):
    # config/cache.py CacheDType: TurboQuant and per-token-head int8/fp8 in 0.20.0, nvfp4 usable from 0.21.0,
    # int4_per_token_head in 0.25.0
    assert kv_cache_dtype not in rule_at(before, "packed_kv_dtypes")
    first = tuple(int(part) for part in since.split("."))
    assert kv_cache_dtype in rule_at(first, "packed_kv_dtypes")
    common = dict(mla=False, sinks=False, sliding=False, hybrid=False, compute_capability=(10, 0), dtype="bfloat16")
    assert kv_dtypes.refusal(kv_cache_dtype, before, **common) == (
        f"--kv-cache-dtype {kv_cache_dtype} does not exist before vLLM {since}")
    assert kv_dtypes.refusal(kv_cache_dtype, first, **common) is None


def test_nvfp4_kv_is_sm100_only_from_025_to_031():
    # the FLASHINFER backend refuses nvfp4 KV off SM100 in 0.25-0.31 only
    assert [rule_at(v, "nvfp4_kv_sm100_only") for v in ((0, 24, 0), (0, 25, 0), (0, 31, 0), (0, 32, 0))] == [
        False, True, True, False]
    common = dict(mla=False, sinks=False, sliding=False, hybrid=False, compute_capability=(9, 0), dtype="bfloat16")
    assert kv_dtypes.refusal("nvfp4", (0, 24, 0), **common) is None
    assert "SM100 only in 0.25-0.31" in kv_dtypes.refusal("nvfp4", (0, 25, 0), **common)
    assert kv_dtypes.refusal("nvfp4", (0, 32, 0), **common) is None


def test_draft_models_on_v1():
    # 0.8-0.9: V1 falls back to V0 for a draft model (_is_v1_supported_oracle); 0.10-0.14: V1 refuses it
    # (config/speculative.py); 0.15.0 takes it
    assert rule_at((0, 9, 2), "v1_draft_model_falls_back_to_v0") is True
    assert rule_at((0, 10, 0), "v1_draft_model_falls_back_to_v0") is False
    assert rule_at((0, 14, 1), "v1_draft_model") is False
    assert rule_at((0, 15, 0), "v1_draft_model") is True


def test_eagle_proposer_buffers_gain_inputs_embeds_in_0101():
    assert release((0, 10, 0), "v1")["proposer_hidden_buffers"] == 1  # hidden_states
    assert release((0, 10, 1), "v1")["proposer_hidden_buffers"] == 2  # hidden_states + inputs_embeds


def test_v0_mamba_slots_per_release():
    # jamba.py forward (0.6.0-0.6.4.post1), jamba.py __init__ (0.6.5-0.7.2), mamba_cache.py (0.7.3+)
    assert [rule_at(v, "v0_mamba_batch") for v in ((0, 6, 4), (0, 6, 5), (0, 7, 2), (0, 7, 3))] == [
        "graph-batch", "capture-capped", "capture-capped", "max-num-seqs"]


def test_engine_specific_rules_need_the_engine():
    # the auto-fit flag exists on V1 only (0.15+)
    with pytest.raises(ValueError):
        rule_at((0, 15, 0), "max_model_len_auto_fit")
    assert rule_at((0, 15, 0), "max_model_len_auto_fit", "v1") is True
    assert rule_at((0, 15, 0), "max_model_len_auto_fit", "v0") is False
    assert rule_at((0, 14, 0), "max_model_len_auto_fit", "v1") is False


def test_a_release_older_than_the_architecture_refuses_it():
    from vram_detective.api import explain
    from vram_detective.engines.vllm.settings import StartupRefusal

    # models/registry.py gains Qwen3VLForConditionalGeneration (qwen3_vl.py) in 0.11.0
    with pytest.raises(StartupRefusal, match=r"\(qwen3_vl\.py first appears in vLLM 0\.11\.0\)"):
        explain("Qwen/Qwen3-VL-8B-Instruct", "H100", vllm_version="0.10.2")
    assert explain("Qwen/Qwen3-VL-8B-Instruct", "H100", vllm_version="0.11.0").vllm_version == "0.11.0"
