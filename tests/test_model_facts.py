"""Engines read what a checkpoint is from the ModelSpec's facts (model/attention.py, model/hybrid.py
MixerFacts, model/draft.py), never the raw config.json; model/ knows nothing of any engine."""
from __future__ import annotations

import re
from pathlib import Path

from vram_detective.api import model_spec

SRC = Path(__file__).resolve().parents[1] / "src" / "vram_detective"


def _files_with(pattern: str, root: Path) -> set[str]:
    return {str(path.relative_to(SRC)) for path in sorted(root.rglob("*.py")) if re.search(pattern, path.read_text())}


def test_engines_do_not_read_the_raw_config():
    assert not _files_with(r"source_config", SRC / "engines")


def test_model_imports_no_engine():
    assert not _files_with(r"from \.\.engines|from vram_detective\.engines|import engines", SRC / "model")


def test_facts_of_catalog_models():
    gemma = model_spec("google/gemma-3-1b-it").attention_facts
    assert gemma.model_type == "gemma3_text" and gemma.window == 512 and gemma.sliding_window_pattern == 6
    assert [kind for kind, _ in gemma.layers[:6]] == ["sliding"] * 5 + ["full"]
    scout = model_spec("meta-llama/Llama-4-Scout-17B-16E-Instruct").attention_facts
    assert scout.attention_chunk_size == 8192 and scout.layers[:4] == (("chunked_local", 8192),) * 3 + (("full", None),)
    qwen = model_spec("Qwen/Qwen2.5-7B-Instruct").attention_facts
    assert (qwen.max_window_layers_rule, qwen.use_sliding_window, qwen.max_window_layers) == (True, False, 28)
    assert model_spec("deepseek-ai/DeepSeek-V3").attention_facts.mla_latent == 512 + 64
    assert model_spec("deepseek-ai/DeepSeek-V3").draft.mtp_layers == 1
    nemotron = model_spec("nvidia/Nemotron-H-8B-Base-8K").mixer
    assert (nemotron.kind, nemotron.heads, nemotron.head_dim, nemotron.intermediate) == ("mamba2", 128, 64, 8192)
    assert nemotron.override_pattern.count("*") == 4 and nemotron.ssm_dtype is None
    jamba = model_spec("ai21labs/Jamba-v0.1").mixer
    assert (jamba.kind, jamba.intermediate, jamba.d_state, jamba.conv_kernel, jamba.dt_rank) == ("mamba1", 8192, 16, 4, 256)
