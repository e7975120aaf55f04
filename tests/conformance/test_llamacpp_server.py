"""llama.cpp's server unit tests (tools/server/tests/unit in 0.3.16, examples/server/tests/unit in 0.3.8, as
vendored by llama-cpp-python) where they assert a context size, as this project's expectations on its KV cache
cells (engines/llamacpp/kv_cache.stream_cells).

The presets (tests/utils.py ServerPreset) start llama-server with --ctx-size and --parallel; test_basic asserts
that /props and /slots report n_ctx / n_slots per slot, test_ctx_shift states the same split (256 / 2 = 128)
for its truncation numbers. The cache behind those slots holds n_ctx cells: one stream shared by every slot
in 0.3.8, one stream of n_ctx / n_slots cells per slot in 0.3.16 (kv_unified off by default). Flash attention
is off in both (padding 32). The pytest id is `<engine test>[<part>]@llamacpp-<llama-cpp-python release>`.
"""
from __future__ import annotations

import pytest

from vram_detective.engines.llamacpp.kv_cache import KvSettings, stream_cells

BUILD = {"0.3.8": 4880, "0.3.16": 6150}  # the llama.cpp builds vendored (engines/llamacpp/releases.py anchors)

# (engine test, part, release, --ctx-size, --parallel, slot n_ctx asserted)
CASES = (
    ("test_server_props", "tinyllama2", "0.3.8", 256, 2, 128),
    ("test_server_props", "tinyllama2", "0.3.16", 512, 2, 256),
    ("test_server_slots", "tinyllama2", "0.3.8", 256, 2, 128),
    ("test_server_slots", "tinyllama2", "0.3.16", 512, 2, 256),
    ("test_ctx_shift_enabled", "slot-context", "0.3.8", 256, 2, 128),
    ("test_ctx_shift_enabled", "slot-context", "0.3.16", 256, 2, 128),
)


@pytest.mark.parametrize("n_ctx,n_slots,slot_ctx,release",
                         [pytest.param(c[3], c[4], c[5], c[2], id=f"{c[0]}[{c[1]}]@llamacpp-{c[2]}") for c in CASES])
def test_slot_context(n_ctx, n_slots, slot_ctx, release):
    cells, streams = stream_cells(KvSettings(n_ctx, n_seq_max=n_slots, build=BUILD[release]))
    assert cells * streams == n_ctx
    assert cells * streams // n_slots == slot_ctx


@pytest.mark.parametrize("n_ctx,n_slots,slot_ctx", [
    pytest.param(c[3], c[4], c[5], id=f"{c[0]}[{c[1]}:stream]@llamacpp-0.3.16") for c in CASES if c[2] == "0.3.16"])
def test_slot_is_a_stream(n_ctx, n_slots, slot_ctx):
    """0.3.16: each slot's context is its own KV stream (n_seq_max streams of the slot's cells)."""
    assert stream_cells(KvSettings(n_ctx, n_seq_max=n_slots, build=BUILD["0.3.16"])) == (slot_ctx, n_slots)
