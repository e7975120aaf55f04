"""KV-cache layer kinds as types (kv_specs.py): each kind's blocks and bytes for one request."""
from __future__ import annotations

import pytest

from vram_detective.engines.vllm.kv_layers import AttentionLayer
from vram_detective.engines.vllm.kv_specs import (
    MLA,
    ChunkedLocal,
    CrossAttention,
    FullAttention,
    MambaState,
    RequestBound,
    SlidingWindow,
)

BOUND = RequestBound(in_flight=2048)


def test_full_attention_holds_the_whole_request_split_over_dcp_ranks():
    spec = FullAttention(page_bytes=65_536, block_size=16)
    assert spec.blocks_per_request(4096, BOUND) == 256
    assert spec.max_memory_bytes(4096, BOUND) == 256 * 65_536
    assert spec.blocks_per_request(4096, RequestBound(2048, context_parallel=4)) == 64
    assert MLA(18_432, 64).blocks_per_request(4097, BOUND) == 65


def test_windowed_specs_hold_the_window_plus_the_tokens_in_flight():
    # gpt-oss: window 128; 127 computed + 2048 in flight = 2175 tokens -> 136 blocks, +1 for the misaligned start
    assert SlidingWindow(2048, 16, 128).blocks_per_request(131_072, BOUND) == 137
    assert SlidingWindow(2048, 16, 128).blocks_per_request(1000, BOUND) == 64  # capped at the length, + 1
    # Llama 4 chunks of 8192: one chunk plus the tokens in flight, no +1
    assert ChunkedLocal(4096, 16, 8192).blocks_per_request(131_072, BOUND) == 640
    # Whisper: the encoder's 1500 tokens whatever the length
    assert CrossAttention(4096, 16, 1500).blocks_per_request(448, BOUND) == 94


def test_mamba_state_blocks_by_cache_mode():
    spec = MambaState(page_bytes=2_147_840, block_size=528)
    assert spec.blocks_per_request(4096, BOUND) == 1
    assert spec.blocks_per_request(4096, RequestBound(2048, mamba_cache_mode="align", speculative_blocks=2)) == 4
    assert spec.blocks_per_request(4096, RequestBound(2048, mamba_cache_mode="all")) == 8


def test_layers_build_their_specs_and_group_keys():
    assert AttentionLayer("sliding", 2048, 128).spec(16) == SlidingWindow(2048, 16, 128)
    assert AttentionLayer("mla", 18_432).spec(16) != FullAttention(18_432, 16)  # its own type, as in vLLM
    assert SlidingWindow(2048, 16, 128).type_key == ("sliding", 128, 16)
    assert SlidingWindow(2048, 16, 128).as_full() == FullAttention(2048, 16)
    with pytest.raises(ValueError, match="needs its window"):
        AttentionLayer("chunked_local", 4096)
