"""vLLM's log formats as one table (engines/vllm/logs/formats.py): each row's template is what `explain` prints,
its marker tells the era, and the reader patterns it names read the printed figures back."""
from __future__ import annotations

import re

import pytest

from conftest import GIB
from vram_detective.engines.vllm.logs import eras, reader
from vram_detective.engines.vllm.logs.formats import ERA_ORDER, FORMATS, era_rows, formats_at, release_of, row_until
from vram_detective.engines.vllm.logs.lines import LogFigures, _fields, log_lines
from vram_detective.engines.vllm.releases import release

FIGURES = LogFigures(
    total_bytes=int(23.58 * GIB), utilization=0.9, weights_bytes=int(14.9888 * GIB), activation_bytes=int(1.2 * GIB),
    non_torch_bytes=int(0.35 * GIB), context_bytes=int(0.3 * GIB), kv_bytes=int(4.5 * GIB), num_gpu_blocks=2304,
    num_cpu_blocks=2048, kv_tokens=36_864, max_concurrency=4.5, max_model_len=8192, graph_bytes=int(0.25 * GIB),
    graph_estimate_bytes=int(0.5 * GIB), graphs_captured=True)
PRINTED = [row for row in FORMATS if row.value.template]
PATTERN_NAMES = {pattern.name for pattern in reader.PATTERNS}


def _rendered(row) -> list[str]:
    """The row's lines with a real duration where explain prints '?' (as the engine prints them)."""
    return [line.format(**dict(_fields(FIGURES), seconds="7.25")) for line in row.value.lines]


@pytest.mark.parametrize("row", PRINTED, ids=lambda row: f"{row.rule}-{'.'.join(map(str, row.since))}-{row.path}")
def test_each_printed_format_is_read_back_by_the_patterns_it_names(row):
    assert row.value.read_by and set(row.value.read_by) <= PATTERN_NAMES
    lines = _rendered(row)
    for name in row.value.read_by:
        patterns = [p.regex for p in reader.PATTERNS if p.name == name]
        assert any(p.search(line) for p in patterns for line in lines), (name, lines)
    if row.value.marker:
        assert any(re.search(row.value.marker, line) for line in lines)


def test_era_order_names_every_marked_row_once():
    marked = [row.value.era for row in FORMATS if row.value.marker]
    assert sorted(marked) == sorted(ERA_ORDER) and len(set(ERA_ORDER)) == len(ERA_ORDER) == 13
    assert [row.value.era for row in era_rows()] == list(ERA_ORDER)


@pytest.mark.parametrize("version, path, era, inferred", [
    ((0, 6, 3), "v0", "weights-gb", "0.6.3"),
    ((0, 6, 4), "v0", "profiling-results", "0.6.4"),
    ((0, 7, 0), "v0", "cuda-blocks-upper", "0.7.0"),
    ((0, 7, 3), "v0", "cuda-blocks-lower", "0.7.3"),
    ((0, 8, 1), "v1", "kv-tokens", "0.8.0"),
    ((0, 9, 1), "v1", "available-kv", "0.9.1"),
    ((0, 12, 0), "v1", "weights-gib-memory", "0.12.0"),
    ((0, 15, 1), "v1", "weights-format-gib", "0.15.0"),
    ((0, 28, 0), "v1", "kv-one-line", "0.28.0"),
    ((0, 33, 0), "v1", "kv-one-line", "0.28.0"),
])
def test_the_lines_a_release_prints_point_back_to_its_era(version, path, era, inferred):
    """Printed from the table, read back through the same table: the whole text and the streamed lines agree."""
    text = "\n".join(log_lines(release(version, path), FIGURES))
    parsed = reader.parse_text(text)
    assert eras.era_from_markers(parsed.markers) == (inferred, era)
    assert eras.infer_version_from_log(text) == inferred
    assert eras.infer_engine_from_log(text) == path == eras.engine_from_markers(parsed.markers)
    assert parsed.first.observed()["num_gpu_blocks" if version < (0, 8, 0) else "kv_cache_tokens"] in (2304, 36_864)


def test_a_row_holds_until_the_next_row_of_its_line():
    assert formats_at((0, 8, 2), "v1")["weights"].era == "weights-gb-and"
    assert formats_at((0, 8, 3), "v1")["weights"].era == "weights-gib-and"
    assert formats_at((0, 12, 0), "v0")["weights"].era == "weights-gib-and"  # the V1-only row leaves V0 as it was
    assert formats_at((0, 8, 0), "v1")["blocks"].template is None
    assert release_of(next(row for row in FORMATS if row.value.era == "v1-alpha-blocks")) == "0.7.0"
    by_era = {row.value.era: row for row in FORMATS if row.value.era}
    assert row_until(by_era["weights-gb"]) == (0, 8, 0) and row_until(by_era["weights-gib-memory"]) == (0, 15, 0)
    assert row_until(by_era["kv-tokens"]) == (0, 28, 0) and row_until(by_era["kv-one-line"]) is None
