"""Shared helpers: the real-log corpus (../shared/groundtruth/dev.jsonl), model specs from the
packaged catalog, and a way to pull one verbatim vLLM message out of a logged line."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from vram_detective.model.config import ModelSpec, parse_config
from vram_detective.model.sources import load_model

# Tests never reach the real Hugging Face Hub: model ids not in the catalog fall through to "unknown"
# (the Hub tests point HF_ENDPOINT at their own local server and unset this themselves).
os.environ.setdefault("HF_HUB_OFFLINE", "1")

SHARED = Path(__file__).resolve().parents[2] / "shared"
GROUNDTRUTH = SHARED / "groundtruth"
DEV = GROUNDTRUTH / "dev.jsonl"
SAFETENSORS_SIZES = SHARED / "models" / "safetensors_total_size.jsonl"

GIB = 1 << 30
MIB = 1 << 20


def spec_of(repo_id: str) -> ModelSpec:
    source = load_model(repo_id)
    return parse_config(source.config, name=source.repo_id)


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.fixture(scope="session")
def dev_cases() -> dict[str, dict]:
    if not DEV.is_file():
        pytest.skip(f"{DEV} is not present (shared ground truth not checked out)")
    return {case["id"]: case for case in _read_jsonl(DEV)}


@pytest.fixture(scope="session")
def checkpoint_sizes() -> list[dict]:
    if not SAFETENSORS_SIZES.is_file():
        pytest.skip(f"{SAFETENSORS_SIZES} is not present")
    return _read_jsonl(SAFETENSORS_SIZES)


def logged_message(case: dict, start: str, occurrence: int = 0) -> str:
    """The text of the `occurrence`-th logged line that contains `start`, from `start` on
    (drops the 'INFO 05-28 08:00:26 [file.py:123]' / '(EngineCore pid=..)' prefixes)."""
    hits = [line[line.index(start):].rstrip() for line in case["log"].splitlines() if start in line]
    assert len(hits) > occurrence, f"{case['id']}: no logged line with {start!r}"
    return hits[occurrence]
