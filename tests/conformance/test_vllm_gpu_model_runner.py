"""vLLM's model-runner tests on KV sharing, as this project's expectations.

Read from tests/v1/worker/test_gpu_model_runner.py of each release in _adapter.RELEASES (`engine-tests vllm X`;
the same five tests and numbers from 0.9.2 to 0.33.0). Two Attention layers of 8 heads x 64 in float16 at
block 16 (a 32 KiB page); a layer with kv_sharing_target_layer_name gets no KVCacheSpec and, after
initialize_kv_cache, sits in its target's group. The tensor identity checks (`id(layer_1_kv) == id(layer_0_kv)`)
need real tensors: NOT_TRANSLATED.md.
"""
from __future__ import annotations

from dataclasses import replace

import pytest

from . import _adapter as a
from ._adapter import full

GIB = 1 << 30
LAYER_0, LAYER_1 = "model.layers.0.self_attn.attn", "model.layers.1.self_attn.attn"
ATTENTION = full(num_kv_heads=8, head_size=64, dtype_bytes=2)  # Attention(num_heads=8, head_size=64), fp16
MAX_MODEL_LEN = 3_000_000  # set high "to test max context length estimation"

CASES: list[a.Case] = []
case = a.registrar(CASES)


def _two(shares: str | None = None, first_shares: str | None = None) -> dict[str, a.Spec]:
    """Layers 0 and 1; `shares` / `first_shares`: their kv_sharing_target_layer_name."""
    return {LAYER_0: replace(ATTENTION, shares=first_shares), LAYER_1: replace(ATTENTION, shares=shares)}


def _configs(specs, version):
    return a.plan(specs, 20 * GIB, version=version, max_model_len=MAX_MODEL_LEN, max_num_batched_tokens=512)


def _estimate(specs, version):
    return a.estimate_max_model_len(specs, 5 * GIB, version=version, max_model_len=MAX_MODEL_LEN,
                                    max_num_batched_tokens=512)


@case("test_init_kv_cache_without_kv_sharing", "blocks", a.RELEASES)
def _(version):
    r = _configs(_two(), version)
    assert r.plan.num_blocks == 327680  # 20 GiB / 32 KiB / 2 layers
    assert r.plan.pool_bytes == 20 * GIB  # one tensor of all the memory (kv_cache_tensors[0].size)
    assert r.groups() == [[LAYER_0, LAYER_1]]


@case("test_init_kv_cache_without_kv_sharing", "estimate", a.RELEASES)
def _(version):
    assert _estimate(_two(), version) == 1310720


@case("test_init_kv_cache_with_kv_sharing_valid", "blocks", a.RELEASES)
def _(version):
    r = _configs(_two(shares=LAYER_0), version)
    assert r.plan.num_blocks == 655360  # 20 GiB / 32 KiB: twice as many
    assert r.plan.pool_bytes == 20 * GIB
    assert r.groups() == [[LAYER_0, LAYER_1]]  # layer 1 joins layer 0's group after initialize_kv_cache
    assert r.plan.groups[0].layer_indices == (0,)  # only layer 0 has a KVCacheSpec


@case("test_init_kv_cache_with_kv_sharing_valid", "estimate", a.RELEASES)
def _(version):
    assert _estimate(_two(shares=LAYER_0), version) == 2 * 1310720


@case("test_init_kv_cache_with_kv_sharing_invalid_target_layer_order", "raises", a.RELEASES)
def _(version):
    with pytest.raises(ValueError, match="must come before the current layer"):
        _configs(_two(first_shares=LAYER_1), version)


@case("test_init_kv_cache_with_kv_sharing_target_layer_not_exist", "raises", a.RELEASES)
def _(version):
    with pytest.raises(ValueError, match="is not a valid Attention layer in the model"):
        _configs(_two(shares="model.layers.0.cross_attn.attn"), version)


@case("test_init_kv_cache_with_kv_sharing_target_same_as_current", "raises", a.RELEASES)
def _(version):
    with pytest.raises(ValueError, match="cannot be the same as the current layer"):
        _configs(_two(shares=LAYER_1), version)


@pytest.mark.parametrize(("engine_case", "version"), list(a.params(CASES)))
def test_vllm_expectation(engine_case: a.Case, version):
    engine_case.check(version)
