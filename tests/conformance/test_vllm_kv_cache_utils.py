"""vLLM's own KV-cache unit tests, as this project's expectations.

Inputs and expected numbers were read from tests/v1/core/test_kv_cache_utils.py (test_kv_cache_planning.py
in 0.33.0) of each release in _adapter.RELEASES (`engine-tests vllm X`); each case lists the releases whose
suite asserts it. The pytest id is `<engine test>[<part>]@vllm-<release>`. Cases not modelled:
NOT_TRANSLATED.md.
"""
from __future__ import annotations

import pytest

from . import _adapter as a
from ._adapter import full, mamba, sliding

GIB = 1 << 30
PAGE = full().page_bytes  # 16 x 2 x 64 x 4 x 2 = 16 KiB: the tests' mem_per_block_per_layer
NULL_BLOCK = (0, 29, 0)  # from here the startup check and auto-fit keep one block out (BlockPool's null block)
STRIDED = (0, 11, 0)  # groups are layers[i::n] from here (consecutive runs before)
PADDED = (0, 24, 0)  # non-divisible attention pages padded (backends indexing KV by block stride until 0.28)
ANY_BACKEND_PADS = (0, 29, 0)  # every non-MLA attention page padded, whatever the backend
MAMBA_PADDED = (0, 26, 0)  # Mamba pages padded to a larger page
NO_BLOCK_STRIDE = "ROCM_ATTN"  # a backend whose spec has indexes_kv_by_block_stride False (0.24-0.28)

CASES: list[a.Case] = []
case = a.registrar(CASES)


# --- test_estimate_max_model_len: Qwen1.5-7B shaped, 32 layers x 32 KV heads x 128, fp16, 8 GiB ------------

QWEN15_7B = {f"layer_{i}": full(num_kv_heads=32, head_size=128, dtype_bytes=2) for i in range(32)}


@case("test_estimate_max_model_len", "16385->16384", a.RELEASES)
def _(version):
    assert a.estimate_max_model_len(QWEN15_7B, 8 * GIB, version=version, max_model_len=16385,
                                    max_num_batched_tokens=32768) == 16384


@case("test_estimate_max_model_len", "16383->16383", a.RELEASES)
def _(version):
    assert a.estimate_max_model_len(QWEN15_7B, 8 * GIB, version=version, max_model_len=16383,
                                    max_num_batched_tokens=32768) == 16383


# --- test_get_max_concurrency_for_kv_cache_config: L = 16384, 1024 batched tokens, window 1024 --------------

def _concurrency(specs, blocks, version):
    first = a.plan(specs, 1, version=version, max_model_len=16384, max_num_batched_tokens=1024)
    return a.plan(specs, blocks * first.plan.block_bytes, version=version, max_model_len=16384,
                  max_num_batched_tokens=1024).plan


WIDE = dict(num_kv_heads=32, head_size=128, dtype_bytes=2)


@case("test_get_max_concurrency_for_kv_cache_config", "full", a.RELEASES)
def _(version):
    specs = {f"layer_{i}": full(**WIDE) for i in range(32)}
    assert _concurrency(specs, int(1024 * 1.5), version).max_concurrency == 1.5


@case("test_get_max_concurrency_for_kv_cache_config", "sliding", a.RELEASES)
def _(version):
    specs = {f"layer_{i}": sliding(1024, **WIDE) for i in range(32)}
    assert _concurrency(specs, 129 * 3, version).max_concurrency == 3


@case("test_get_max_concurrency_for_kv_cache_config", "hybrid", a.RELEASES)
def _(version):
    specs = {**{f"layer_{i}": full(**WIDE) for i in range(32)},
             **{f"layer_{i}": sliding(1024, **WIDE) for i in range(32, 64)}}
    assert _concurrency(specs, (1024 + 129) * 3, version).max_concurrency == 3


@case("test_get_max_concurrency_for_kv_cache_config", "hybrid-tokens", a.since((0, 24, 0)))
def _(version):
    specs = {**{f"layer_{i}": full(**WIDE) for i in range(32)},
             **{f"layer_{i}": sliding(1024, **WIDE) for i in range(32, 64)}}
    assert _concurrency(specs, (1024 + 129) * 3, version).kv_cache_tokens == 3 * 16384


# --- test_get_kv_cache_config(_one_worker): max_model_len 16 ----------------------------------------------

def _one(specs, memory, version, **kw):
    return a.plan(specs, memory, version=version, max_model_len=16, **kw)


@case("test_get_kv_cache_config_one_worker", "all-full", a.RELEASES)
def _(version):
    r = _one({"layer_1": full(), "layer_2": full()}, PAGE * 2 * 32, version)
    assert (r.plan.num_blocks, r.groups()) == (32, [["layer_1", "layer_2"]])


@case("test_get_kv_cache_config_one_worker", "all-sliding", a.RELEASES)
def _(version):
    r = _one({"layer_1": sliding(), "layer_2": sliding()}, PAGE * 2 * 32, version)
    assert (r.plan.num_blocks, r.groups()) == (32, [["layer_1", "layer_2"]])


@case("test_get_kv_cache_config_one_worker", "hybrid-manager-disabled", a.RELEASES)
def _(version):
    r = _one({"layer_1": full(), "layer_2": sliding()}, PAGE * 2 * 32, version, disable_hybrid_kv_cache_manager=True)
    assert (r.plan.num_blocks, r.groups(), r.plan.groups[0].kind) == (32, [["layer_1", "layer_2"]], "full")


@case("test_get_kv_cache_config_one_worker", "full+sliding", a.RELEASES)
def _(version):
    r = _one({"layer_1": full(), "layer_2": sliding()}, PAGE * 2 * 32, version)
    assert (r.plan.num_blocks, r.groups()) == (64, [["layer_1"], ["layer_2"]])


@case("test_get_kv_cache_config_one_worker", "2full+4sliding", a.RELEASES)
def _(version):
    specs = {"layer_1": full(), "layer_2": full(), **{f"layer_{i}": sliding() for i in range(3, 7)}}
    r = _one(specs, PAGE * 2 * 32, version)
    sliding_groups = [["layer_3", "layer_5"], ["layer_4", "layer_6"]] if version >= STRIDED else \
        [["layer_3", "layer_4"], ["layer_5", "layer_6"]]
    assert (r.plan.num_blocks, r.groups()) == (32, [["layer_1", "layer_2"], *sliding_groups])


@case("test_get_kv_cache_config_one_worker", "3full+7sliding-padded", a.RELEASES)
def _(version):
    specs = {**{f"layer_{i}": full() for i in range(1, 4)}, **{f"layer_{i}": sliding() for i in range(4, 11)}}
    r = _one(specs, PAGE * 3 * 32, version)
    sliding_groups = ([["layer_4", "layer_7", "layer_10"], ["layer_5", "layer_8"], ["layer_6", "layer_9"]]
                      if version >= STRIDED else
                      [["layer_4", "layer_5", "layer_6"], ["layer_7", "layer_8", "layer_9"], ["layer_10"]])
    assert (r.plan.num_blocks, r.groups()) == (32, [["layer_1", "layer_2", "layer_3"], *sliding_groups])
    assert r.plan.padding_layers == 2  # "pad to 3 full + 9 sliding"


@case("test_get_kv_cache_config_one_worker", "6full+5sliding", a.since((0, 14, 0)))
def _(version):
    specs = {**{f"layer_{i}": full() for i in range(1, 7)}, **{f"layer_{i}": sliding() for i in range(7, 12)}}
    r = _one(specs, PAGE * 6 * 32, version)
    assert (r.plan.num_blocks, r.groups()) == (32, [[f"layer_{i}" for i in range(1, 7)],
                                                    [f"layer_{i}" for i in range(7, 12)]])


@case("test_get_kv_cache_config_one_worker", "same-type-different-head", a.since((0, 14, 0)))
def _(version):
    r = _one({"layer_1": full(head_size=128), "layer_2": full(head_size=64)}, PAGE * 3 * 32, version)
    assert (r.plan.num_blocks, r.groups()) == (32, [["layer_1", "layer_2"]])


@case("test_get_kv_cache_config_one_worker", "aligned-by-block-size", a.since((0, 14, 0)))
def _(version):
    r = _one({"layer_1": full(head_size=64), "layer_2": sliding(head_size=32)}, PAGE * 32, version)
    assert (r.plan.num_blocks, r.groups()) == (32, [["layer_1"], ["layer_2"]])
    assert [g.block_size for g in r.plan.groups] == [16, 32]


@case("test_get_kv_cache_config_one_worker", "head64+head96-raises", a.since((0, 14, 0), (0, 19, 0)))
def _(version):
    with pytest.raises(NotImplementedError):
        _one({"layer_1": full(head_size=64), "layer_2": sliding(head_size=96)}, PAGE * 2 * 32, version)


@case("test_get_kv_cache_config_one_worker", "head64+head96-padded", a.since(PADDED))
def _(version):
    r = _one({"layer_1": full(head_size=64), "layer_2": sliding(head_size=96)}, PAGE * 2 * 32, version)
    assert r.plan.num_blocks == 42  # 1 MiB // the 24 KiB padded page
    assert [g.block_size for g in r.plan.groups] == [16, 16]  # padded, not re-blocked


@case("test_get_kv_cache_config_one_worker", "num_gpu_blocks_override", a.RELEASES)
def _(version):
    r = _one({"layer_1": full(), "layer_2": full()}, PAGE * 2 * 32, version, num_gpu_blocks_override=16)
    assert r.plan.num_blocks == 16


MIMO_TARGET = full(num_kv_heads=1, head_size=192, dtype_bytes=2)  # 12 KiB page
MIMO_DRAFT = sliding(1024, num_kv_heads=1, head_size=128, dtype_bytes=2)  # 8 KiB page, 3:2


@case("test_unify_kv_cache_page_size_uses_padding_for_non_divisible_sizes", "head192+head128",
      a.since(PADDED))
def _(version):
    # the draft keeps its block size, its page becomes the target's
    r = _one({"target_attn": MIMO_TARGET, "draft_attn": MIMO_DRAFT}, MIMO_TARGET.page_bytes * 64, version)
    assert [g.block_size for g in r.plan.groups] == [16, 16]
    assert r.plan.block_bytes == MIMO_TARGET.page_bytes


@case("test_unify_kv_cache_page_size_padding_requires_backend_support", "draft-backend-declines",
      a.since(PADDED, (0, 28, 0)))
def _(version):
    # the engine test marks the draft's spec indexes_kv_by_block_stride=False; here the backend says so
    with pytest.raises(NotImplementedError):
        _one({"target_attn": MIMO_TARGET, "draft_attn": MIMO_DRAFT}, MIMO_TARGET.page_bytes * 64, version,
             attention_backend=NO_BLOCK_STRIDE)


# --- test_unify_kv_cache_spec_page_size_mamba (0.26+; vLLM issue 43626) -------------------------------------
# new_mamba_spec(): a 16 KiB state; a draft layer of 4 KV heads has a 32 KiB page. The tool sizes the Mamba
# block itself (the platform step) from the first attention layer; mamba_cache_mode "align" keeps the
# MambaSpec block at the attention block (16), as the engine helper's spec has it.

DRAFT_32K = full(num_kv_heads=4)


def _mamba(specs, version):
    return a.plan(specs, DRAFT_32K.page_bytes * 64, version=version, max_model_len=16, mamba_cache_mode="align")


@case("test_unify_kv_cache_spec_page_size_mamba", "main+draft", a.since(MAMBA_PADDED))
def _(version):
    r = _mamba({"mamba_layer": mamba(), "main_attn_layer": full(), "draft_attn_layer": DRAFT_32K}, version)
    by_layer = {names[0]: g for names, g in zip(r.groups(), r.plan.groups)}
    assert r.plan.block_bytes == 32768  # one padded Mamba page, one re-blocked main page, the draft's
    assert by_layer["mamba_layer"].block_size == 16  # padded, block unchanged
    assert by_layer["main_attn_layer"].block_size == 32  # 2 x 16 KiB by block size
    assert by_layer["draft_attn_layer"].block_size == 16


@case("test_unify_kv_cache_spec_page_size_mamba", "prepadded-mamba", a.since(MAMBA_PADDED))
def _(version):
    r = _mamba({"mamba_layer": mamba(shapes=((2, 256), (3, 32, 32))), "draft_attn_layer": DRAFT_32K}, version)
    assert r.plan.block_bytes == 32768


@case("test_unify_kv_cache_spec_page_size_mamba", "odd-mamba", a.since(MAMBA_PADDED))
def _(version):
    r = _mamba({"mamba_layer": mamba(shapes=((6144,),)), "draft_attn_layer": DRAFT_32K}, version)
    assert r.plan.block_bytes == 32768  # 24 KiB state padded though 32 KiB is no multiple of it


# part 4 calls unify_kv_cache_spec_page_size on two full-attention specs, which get_kv_cache_configs would put in
# one uniform-type group without unifying; here the 32 KiB draft layer slides, so the pages are unified.
# new_kv_cache_spec(block_size=24) is a 24 KiB page; 3 KV heads at block 16 give the same page.
ATTN_24K = full(num_kv_heads=3)
DRAFT_32K_SLIDING = sliding(1024, num_kv_heads=4)


@case("test_unify_kv_cache_spec_page_size_mamba", "attention-24k+32k-raises", a.since(MAMBA_PADDED, (0, 28, 0)))
def _(version):
    # the helper's spec has indexes_kv_by_block_stride False until 0.28
    with pytest.raises(NotImplementedError):
        _one({"attn_layer": ATTN_24K, "draft_attn_layer": DRAFT_32K_SLIDING}, DRAFT_32K.page_bytes * 64, version,
             attention_backend=NO_BLOCK_STRIDE)


@case("test_unify_kv_cache_spec_page_size_mamba", "attention-24k+32k-padded", a.since(ANY_BACKEND_PADS))
def _(version):
    r = _one({"attn_layer": ATTN_24K, "draft_attn_layer": DRAFT_32K_SLIDING}, DRAFT_32K.page_bytes * 64, version,
             attention_backend=NO_BLOCK_STRIDE)
    assert r.plan.block_bytes == 32768 and [g.block_size for g in r.plan.groups] == [16, 16]


@case("test_unify_kv_cache_spec_page_size_mamba", "uniform", a.since(MAMBA_PADDED))
def _(version):
    r = _mamba({"mamba_layer": mamba(), "attn_layer": full()}, version)
    assert r.plan.block_bytes == 16384 and [g.block_size for g in r.plan.groups] == [16, 16]


# --- test_get_kv_cache_configs_multiple_workers (0.11+): max_model_len 16, 10 blocks ------------------------

def _workers(workers, memory, version):
    return a.plan(workers, memory, version=version, max_model_len=16)


@case("test_get_kv_cache_configs_multiple_workers", "same", a.since(STRIDED))
def _(version):
    both = {"layer1": full(), "layer2": full()}
    assert _workers([both, both], [PAGE * 2 * 10] * 2, version).plan.num_blocks == 10


@case("test_get_kv_cache_configs_multiple_workers", "tp-smallest-memory", a.since(STRIDED))
def _(version):
    both = {"layer1": full(), "layer2": full()}
    assert _workers([both, both], [PAGE * 2 * 10, PAGE * 2 * 20], version).plan.num_blocks == 10


@case("test_get_kv_cache_configs_multiple_workers", "pp", a.since(STRIDED))
def _(version):
    r = _workers([{"layer1": full()}, {"layer2": full(), "layer3": full()}], [PAGE * 2 * 10] * 2, version)
    assert r.plan.num_blocks == 10 and r.groups() == [["layer1"]]


@case("test_get_kv_cache_configs_multiple_workers", "tp+pp", a.since(STRIDED))
def _(version):
    first, last = {"layer1": full(), "layer2": full()}, {"layer3": full()}
    assert _workers([first, first, last, last], [PAGE * 2 * 10] * 4, version).plan.num_blocks == 10


@case("test_get_kv_cache_configs_multiple_workers", "hybrid+pp", a.since(STRIDED))
def _(version):
    r = _workers([{"layer1": full(), "layer2": full()}, {"layer3": sliding(), "layer4": sliding()}],
                 [PAGE * 2 * 10] * 2, version)
    assert r.plan.num_blocks == 10 and r.groups() == [["layer1", "layer2"], []]


@case("test_get_kv_cache_configs_multiple_workers", "similar-group-sizes", a.since(STRIDED))
def _(version):
    r = _workers([{"layer1": full(), "layer2": sliding(), "layer3": sliding()},
                  {"layer4": full(), "layer5": sliding(), "layer6": sliding()}], [PAGE * 10] * 2, version)
    assert r.plan.num_blocks == 10 and r.groups() == [["layer1"], ["layer2"], ["layer3"]]


def _pp_sharding(version, asymmetric):
    """max_model_len 512: 512 // 16 + 1 blocks of memory per stage, each stage validated on its own."""
    blocks = 512 // 16 + 1
    memory = [PAGE * blocks, PAGE * blocks * (2 if asymmetric else 1)]
    r = a.plan([{"layer1": full()}, {"layer2": full()}], memory, version=version, max_model_len=512)
    assert r.plan.fits and r.plan.num_blocks == blocks


case("test_get_kv_cache_configs_pp_sharding", "symmetric", a.since((0, 19, 0)))(lambda v: _pp_sharding(v, False))
case("test_get_kv_cache_configs_pp_sharding", "asymmetric", a.since((0, 19, 0)))(lambda v: _pp_sharding(v, True))


# --- auto-fit (max_model_len = -1): the estimate becomes max_model_len -----------------------------------

TWO_FULL = {"layer_1": full(), "layer_2": full()}


@case("test_auto_fit_max_model_len", "plenty", a.since((0, 14, 0)))
def _(version):
    assert a.plan(TWO_FULL, PAGE * 2 * 1024, version=version, max_model_len=1024).plan.estimated_max_model_len == 1024


@case("test_auto_fit_max_model_len", "limited", a.since((0, 14, 0)))
def _(version):
    estimate = a.plan(TWO_FULL, PAGE * 2 * 32, version=version, max_model_len=1024).plan.estimated_max_model_len
    assert 0 < estimate < 1024


@case("test_auto_fit_max_model_len_with_hybrid", "mamba-gamma2", a.since((0, 19, 0)))
def _(version):
    gamma = 2
    memory = PAGE * (1024 // 16 + 1 + gamma + (1 if version >= NULL_BLOCK else 0))
    r = a.plan({"layer_1": mamba(), "layer_2": full()}, memory, version=version, max_model_len=8192,
               mamba_speculative_blocks=gamma)
    assert r.plan.estimated_max_model_len == 1024


@case("test_auto_fit_max_model_len_respects_num_gpu_blocks_override", "override32", a.since((0, 24, 0)))
def _(version):
    r = a.plan(TWO_FULL, PAGE * 2 * 1024, version=version, max_model_len=16384, num_gpu_blocks_override=32)
    assert 0 < r.plan.estimated_max_model_len <= 32 * 16


@case("test_check_enough_kv_cache_memory_respects_num_gpu_blocks_override", "override32", a.since((0, 24, 0)))
def _(version):
    r = a.plan(TWO_FULL, PAGE * 2 * 1024, version=version, max_model_len=16384, num_gpu_blocks_override=32)
    assert not r.plan.fits


# --- the null block BlockPool holds back (0.29+) ------------------------------------------------------------

@case("test_kv_cache_reserves_null_block_for_max_model_len", "override", a.since(NULL_BLOCK))
def _(version):
    r = a.plan({"layer1": full()}, PAGE * 1024, version=version, max_model_len=512, num_gpu_blocks_override=32)
    assert not r.plan.fits


@case("test_kv_cache_reserves_null_block_for_max_model_len", "memory", a.since(NULL_BLOCK))
def _(version):
    assert not a.plan({"layer1": full()}, PAGE * 32, version=version, max_model_len=512).plan.fits


@case("test_auto_fit_max_model_len_reserves_null_block", "64-blocks", a.since(NULL_BLOCK))
def _(version):
    r = a.plan({"layer1": full()}, PAGE * 64, version=version, max_model_len=1024)
    assert r.plan.estimated_max_model_len == 63 * 16


@case("test_check_enough_kv_cache_memory_reserves_null_block", "32-and-33-blocks", a.since(NULL_BLOCK))
def _(version):
    assert not a.plan({"layer1": full()}, PAGE * 32, version=version, max_model_len=512).plan.fits
    assert a.plan({"layer1": full()}, PAGE * 33, version=version, max_model_len=512).plan.fits


@pytest.mark.parametrize(("engine_case", "version"), list(a.params(CASES)))
def test_vllm_expectation(engine_case: a.Case, version):
    engine_case.check(version)
