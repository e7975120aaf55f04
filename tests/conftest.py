"""Shared helpers: the real-log corpus (groundtruth/dev.jsonl, this repo's copy of shared/groundtruth made by
scripts/sync_groundtruth.py), model specs from the packaged catalog, and a way to pull one verbatim vLLM message out of a logged line."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from vram_detective.model.config import parse_config
from vram_detective.model.spec import ModelSpec
from vram_detective.model.sources import load_model

# Tests never reach the real Hugging Face Hub: model ids not in the catalog fall through to "unknown"
# (the Hub tests point HF_ENDPOINT at their own local server and unset this themselves).
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# nor the machine's GPUs: `explain` without --gpu answers for the GPUs it finds (local_gpus.py), so on a machine
# with nvidia-smi the common-GPU table tests would change; the --gpu auto tests unset this with fake tools on PATH
os.environ.setdefault("VRAM_DETECTIVE_NO_PROBE", "1")

# the ground truth lives in the repo (groundtruth/, synced from shared/ by scripts/sync_groundtruth.py): a fresh
# clone has it, so a missing file is an error, never a skip
GROUNDTRUTH = Path(__file__).resolve().parents[1] / "groundtruth"
DEV = GROUNDTRUTH / "dev.jsonl"
OBSERVED_GPUS = GROUNDTRUTH / "gpus" / "observed.jsonl"
MODELS = GROUNDTRUTH / "models"
SAFETENSORS_SIZES = MODELS / "safetensors_total_size.jsonl"

GIB = 1 << 30
MIB = 1 << 20
# the project's end-to-end accuracy target (docs/accuracy.md: KV GiB median within 5 %); a test comparing a
# prediction with a logged figure is not looser than this: a wider miss is a strict xfail with the values
TARGET = 0.05


def spec_of(repo_id: str) -> ModelSpec:
    source = load_model(repo_id)
    return parse_config(source.config, name=source.repo_id)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.fixture(scope="session")
def dev_cases() -> dict[str, dict]:
    return {case["id"]: case for case in read_jsonl(DEV)}


@pytest.fixture(scope="session")
def checkpoint_sizes() -> list[dict]:
    return read_jsonl(SAFETENSORS_SIZES)


def logged_message(case: dict, start: str, occurrence: int = 0) -> str:
    """The text of the `occurrence`-th logged line that contains `start`, from `start` on
    (drops the 'INFO 05-28 08:00:26 [file.py:123]' / '(EngineCore pid=..)' prefixes)."""
    hits = [line[line.index(start):].rstrip() for line in case["log"].splitlines() if start in line]
    assert len(hits) > occurrence, f"{case['id']}: no logged line with {start!r}"
    return hits[occurrence]
