"""Model shapes of llama.cpp dev cases for tests that plan them: each case's own `model_config`
(groundtruth/SCHEMA.md's supplementary fields, merged from scripts/case_supplements.json)."""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from vram_detective.model.config import parse_config

CASES = Path(__file__).resolve().parents[1] / "groundtruth" / "dev-llamacpp.jsonl"

LLAMA31_8B = "llamacpp-ollama-llama31-8b-q4_0-t4-kaggle-8k-np4"
QWEN3_30B = "llamacpp-b5622-qwen3-30b-a3b-q4km-4090-5090-experts-cpu"
QWEN36_27B = "llamacpp-qwen36-27b-udq4kxl-5090-131k-q8kv"
GLM4_32B = "llamacpp-glm-z1-32b-iq4xs-3090ti-32k-fa"
DSCODER_V2_LITE = "llamacpp-ollama-0.32-dscoder-v2-lite-q5km-16g-ctx8192"


@lru_cache(maxsize=None)
def case_spec(case_id: str):
    """The ModelSpec of a dev case's model_config."""
    for line in CASES.read_text(encoding="utf-8").splitlines():
        case = json.loads(line)
        if case["id"] == case_id:
            config = case["model_config"]
            return parse_config(config, config["architectures"][0])
    raise KeyError(case_id)
