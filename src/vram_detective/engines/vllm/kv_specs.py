"""KV-cache layer kinds as types, one class per kind, as vLLM's v1/kv_cache_interface.py has them
(FullAttentionSpec, SlidingWindowSpec, ChunkedLocalAttentionSpec, MLAAttentionSpec, MambaSpec,
CrossAttentionSpec).

A spec is one layer's cache on one rank as a release creates it: the bytes of one block (its page) at its
block size, and what one request of L tokens holds (max_memory_usage_bytes // page_size_bytes). Which
specs a release creates, and how it groups them, is kv_groups.py's part.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from ...units import ceil_div


@dataclass(frozen=True)
class RequestBound:
    """What a spec's per-request bound reads besides the spec itself (the release's scheduler settings)."""

    in_flight: int  # X: tokens in flight next to a window (max_num_batched_tokens; x batches from 0.26)
    context_parallel: int = 1  # dcp (x pcp from 0.12) dividing full-attention lengths
    mamba_cache_mode: str = "none"  # "none", "align", "all"
    speculative_blocks: int = 0  # MambaSpec.num_speculative_blocks


@dataclass(frozen=True)
class KvSpec:
    page_bytes: int  # one block of this layer on this rank (K+V, the MLA latent, or a Mamba state)
    block_size: int  # tokens per block

    kind: ClassVar[str] = ""
    windowed: ClassVar[bool] = False  # sliding / chunked: allocated as full attention when the hybrid manager is off
    needs_span: ClassVar[bool] = False  # built with a token span (window, chunk, encoder tokens)
    v1_rule: ClassVar[str | None] = None  # rule that says V1 creates this spec (else it is full attention)
    recurrent: ClassVar[bool] = False  # one state per request, sized apart from the tokens (Mamba)

    @property
    def span(self) -> int | None:
        """The window, chunk or encoder tokens of the spec; None for full attention, MLA and Mamba."""
        return None

    @property
    def type_key(self) -> tuple[str, int | None, int]:
        """Layers of one key share a type when grouped (same kind, span and block size)."""
        return self.kind, self.span, self.block_size

    def blocks_per_request(self, tokens: int, bound: RequestBound) -> int:
        raise NotImplementedError

    def max_memory_bytes(self, tokens: int, bound: RequestBound) -> int:
        """KVCacheSpec.max_memory_usage_bytes for one request of `tokens` tokens."""
        return self.blocks_per_request(tokens, bound) * self.page_bytes

    def resized(self, page_bytes: int, block_size: int) -> KvSpec:
        return replace(self, page_bytes=page_bytes, block_size=block_size)

    def as_full(self) -> FullAttention:
        return FullAttention(self.page_bytes, self.block_size)

    @classmethod
    def of(cls, page_bytes: int, block_size: int, span: int | None = None) -> KvSpec:
        return cls(page_bytes, block_size)


@dataclass(frozen=True)
class FullAttention(KvSpec):
    kind: ClassVar[str] = "full"

    def blocks_per_request(self, tokens: int, bound: RequestBound) -> int:
        if bound.context_parallel > 1:
            tokens = ceil_div(tokens, bound.context_parallel)  # each DCP rank keeps L / dcp tokens
        return ceil_div(tokens, self.block_size)


@dataclass(frozen=True)
class MLA(FullAttention):
    """MLAAttentionSpec: full attention over one latent per token (a page of its own size)."""

    kind: ClassVar[str] = "mla"


@dataclass(frozen=True)
class SlidingWindow(KvSpec):
    window: int

    kind: ClassVar[str] = "sliding"
    windowed: ClassVar[bool] = True
    needs_span: ClassVar[bool] = True
    v1_rule: ClassVar[str | None] = "v1_sliding_spec"

    @property
    def span(self) -> int | None:
        return self.window

    def blocks_per_request(self, tokens: int, bound: RequestBound) -> int:
        # window-1 computed tokens plus the in-flight ones, capped at the length, +1 because the window
        # need not start at a block boundary (SlidingWindowSpec, every V1 release since 0.8.3)
        return ceil_div(min(self.window - 1 + bound.in_flight, tokens), self.block_size) + 1

    @classmethod
    def of(cls, page_bytes: int, block_size: int, span: int | None = None) -> KvSpec:
        return cls(page_bytes, block_size, int(span or 0))


@dataclass(frozen=True)
class ChunkedLocal(KvSpec):
    """Llama 4 local layers: attention within chunks of `chunk` tokens."""

    chunk: int

    kind: ClassVar[str] = "chunked_local"
    windowed: ClassVar[bool] = True
    needs_span: ClassVar[bool] = True
    v1_rule: ClassVar[str | None] = "v1_chunked_spec"

    @property
    def span(self) -> int | None:
        return self.chunk

    def blocks_per_request(self, tokens: int, bound: RequestBound) -> int:
        # ChunkedLocalAttentionSpec (0.10.1+): one chunk plus the in-flight tokens, no +1
        return ceil_div(min(self.chunk + bound.in_flight, tokens), self.block_size)

    @classmethod
    def of(cls, page_bytes: int, block_size: int, span: int | None = None) -> KvSpec:
        return cls(page_bytes, block_size, int(span or 0))


@dataclass(frozen=True)
class CrossAttention(KvSpec):
    """An encoder-decoder cross-attention layer (V1 CrossAttentionSpec from 0.10.2): it caches the
    encoder's tokens (max_num_encoder_input_tokens, Whisper's max_source_positions)."""

    encoder_tokens: int

    kind: ClassVar[str] = "cross"
    needs_span: ClassVar[bool] = True

    @property
    def span(self) -> int | None:
        return self.encoder_tokens

    def blocks_per_request(self, tokens: int, bound: RequestBound) -> int:
        # CrossAttentionSpec.max_memory_usage_bytes (0.10.2+): cdiv(max encoder length, block) pages,
        # whatever max_model_len
        return ceil_div(self.encoder_tokens, self.block_size)

    @classmethod
    def of(cls, page_bytes: int, block_size: int, span: int | None = None) -> KvSpec:
        return cls(page_bytes, block_size, int(span or 0))


@dataclass(frozen=True)
class MambaState(KvSpec):
    """MambaSpec: a Mamba / linear-attention layer's recurrent state; the page is the state (padded to
    the attention page by the release), independent of the block size."""

    kind: ClassVar[str] = "mamba"
    recurrent: ClassVar[bool] = True

    def blocks_per_request(self, tokens: int, bound: RequestBound) -> int:
        # one state per request (+ speculative blocks); "align" keeps 2, "all" one per block
        if bound.mamba_cache_mode == "all":
            return ceil_div(tokens, self.block_size)
        return (2 if bound.mamba_cache_mode == "align" else 1) + bound.speculative_blocks


SPEC_TYPES: dict[str, type[KvSpec]] = {
    cls.kind: cls for cls in (FullAttention, SlidingWindow, ChunkedLocal, MLA, MambaState, CrossAttention)
}
KINDS = tuple(SPEC_TYPES)  # ("full", "sliding", "chunked_local", "mla", "mamba", "cross")
