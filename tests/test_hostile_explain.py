"""Issue 17, keep it that way: random catalog model x GPU x vLLM release x flags through api.explain (hypothesis,
bounded examples). Only the project's own errors may escape; a Breakdown has weights > 0, KV >= 0 when it
starts, the same answer twice, and each pipeline rank's column adds up to its own budget.
benchmarks/fuzz.py runs the same checks on 100,000+ cases."""
from __future__ import annotations

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

from vram_detective import api  # noqa: E402
from vram_detective.engines.vllm.releases import NOTABLE_RELEASES  # noqa: E402
from vram_detective.hardware import all_gpus  # noqa: E402
from vram_detective.model.sources import catalog_entries  # noqa: E402
from vram_detective.render import to_json  # noqa: E402

BOUNDED = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MODELS = sorted(entry.repo_id for entry in catalog_entries())
GPUS = sorted(gpu.short_name for gpu in all_gpus())
FLAGS = {
    "tensor_parallel_size": st.sampled_from([1, 2, 4, 8, 3, 0, 1 << 40]),
    "pipeline_parallel_size": st.sampled_from([1, 2, 3, 4, 0]),
    "gpu_memory_utilization": st.sampled_from([0.5, 0.9, 1.0]) | st.floats(allow_nan=True, allow_infinity=True),
    "max_model_len": st.sampled_from([512, 4096, 131072, -1]) | st.integers(-2, 1 << 70),
    "max_num_seqs": st.integers(-2, 1 << 70),
    "max_num_batched_tokens": st.sampled_from([2048, 8192]) | st.integers(-2, 1 << 70),
    "block_size": st.sampled_from([16, 32, 64, 0, 7]),
    "kv_cache_dtype": st.sampled_from(["auto", "fp8", "bfloat16", "int8_per_token_head", "int4_per_token_head",
                                       "fp8_per_token_head", "nvfp4", "turboquant_k8v4", "bogus"]),
    "enforce_eager": st.booleans(),
    "swap_space": st.floats(allow_nan=True, allow_infinity=True),
    "cpu_offload_gb": st.sampled_from([0.0, 4.0]) | st.floats(allow_nan=True, allow_infinity=True),
    "kv_cache_memory_bytes": st.integers(-2, 1 << 70),
    "num_gpu_blocks_override": st.integers(-2, 1 << 70),
    "enable_expert_parallel": st.booleans(),
    "enable_lora": st.booleans(),
    "max_loras": st.integers(-1, 1 << 40),
    "engine": st.sampled_from(["v0", "v1"]),
}


def _ours(error: BaseException) -> bool:
    return isinstance(error, api.REFUSALS) or (
        type(error).__module__.startswith("vram_detective") and isinstance(error, (ValueError, LookupError)))


@st.composite
def cases(draw):
    chosen = draw(st.lists(st.sampled_from(sorted(FLAGS)), max_size=5, unique=True))
    return (draw(st.sampled_from(MODELS)), draw(st.sampled_from(GPUS)),
            draw(st.sampled_from(list(NOTABLE_RELEASES) + ["9.9", "0.2.0"])),
            {key: draw(FLAGS[key]) for key in chosen})


def _explain(model, gpu, version, flags):
    return api.explain(model, gpu, vllm_version=version, **flags)


@BOUNDED
@given(cases())
def test_random_setups_end_in_a_breakdown_or_the_projects_own_error(case):
    model, gpu, version, flags = case
    try:
        b = _explain(model, gpu, version, flags)
    except Exception as error:  # noqa: BLE001 - the property is about what escapes
        assert _ours(error), f"{type(error).__name__}: {error}"
        return
    assert b.weights_bytes > 0
    if b.failure is None:
        assert b.kv_cache_bytes >= 0 and b.kv_cache_tokens >= 0
    assert to_json(_explain(model, gpu, version, flags)) == to_json(b)
    if "kv_cache_memory_bytes" not in flags:
        for rank in b.per_rank:
            parts = rank.weights_bytes + rank.activation_peak_bytes + rank.non_torch_bytes + rank.other_budgeted_bytes
            assert parts + rank.kv_pool_bytes + rank.kv_unused_bytes == rank.budget_bytes
            assert parts + rank.kv_cache_bytes == rank.budget_bytes


def test_each_pipeline_rank_adds_up_on_its_own():
    """The issue's example: rank 0's tree showed its weights with the pool another stage's block count sets."""
    b = api.explain("unsloth/Llama-3.2-3B-Instruct", "H100 NVL", vllm_version="0.11.2", tensor_parallel_size=2,
                    pipeline_parallel_size=4, max_num_seqs=851, kv_cache_dtype="bfloat16")
    # (each rank's budget holds the TP group's NCCL communicator made in the profile run, 0.11-0.24)
    assert [r.num_blocks_own for r in b.per_rank] == [383_236, 384_955, 384_955, 365_995]
    assert {r.kv_pool_bytes for r in b.per_rank} == {365_995 * 229_376}
    # the smallest stage leaves less than one block; the others what their larger counts would have held
    assert [r.kv_unused_bytes >= 229_376 for r in b.per_rank] == [True, True, True, False]
    for rank in b.per_rank:
        assert (rank.weights_bytes + rank.activation_peak_bytes + rank.non_torch_bytes + rank.kv_pool_bytes
                + rank.kv_unused_bytes) == rank.budget_bytes
    budget = b.components
    assert sum(child.bytes for child in budget.children) == budget.bytes  # rank 0's tree, unused KV included
    assert [child.key for child in budget.children][-2:] == ["kv_cache", "kv_unused"]
