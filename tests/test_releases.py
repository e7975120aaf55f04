"""The release table: every rule change takes effect exactly at its release, and the facts that move
the numbers most (design/vllm-memory.md §1.3, §5.3, §7) resolve the way vLLM's wheels have them."""
from __future__ import annotations

import copy

import pytest

from conftest import spec_of
from vram_detective.engines.vllm.releases import (
    NEWEST_KNOWN,
    OLDEST_SUPPORTED,
    RULE_CHANGES,
    UnsupportedReleaseError,
    release,
    resolve_version,
)
from vram_detective.engines.vllm.settings import (
    SettingsError,
    batch_defaults,
    derive_max_model_len,
    pick_engine,
    resolve_settings,
)
from vram_detective.hardware import find_gpu
from vram_detective.model.config import parse_config
from vram_detective.model.sources import load_model

ABSENT = object()


def _engines(change):
    return ("v0", "v1") if change.path is None else (change.path,)


def _just_before(version):
    """The newest possible release before `version` (0.8.0 -> 0.7.999, 0.6.5 -> 0.6.4)."""
    major, minor, patch = version
    return (major, minor, patch - 1) if patch else (major, minor - 1, 999)


def _value(version, engine, rule):
    try:
        return release(version, engine)[rule]
    except KeyError:
        return ABSENT


def _shadowed(change, engine):
    """Another row for the same rule, engine and release that is more specific (engine-specific
    over engine-agnostic) decides this engine's value instead."""
    return change.path is None and any(
        other.rule == change.rule and other.since == change.since and other.path == engine
        for other in RULE_CHANGES
    )


def _change_id(change):
    return f"{change.rule}@{'.'.join(map(str, change.since))}/{change.path or 'both'}"


@pytest.mark.parametrize("change", RULE_CHANGES, ids=[_change_id(c) for c in RULE_CHANGES])
def test_rule_change_takes_effect_at_its_release(change):
    engines = [engine for engine in _engines(change) if not _shadowed(change, engine)]
    assert engines, "row is shadowed for every engine it names"
    for engine in engines:
        assert _value(change.since, engine, change.rule) == change.value, engine
        if change.since == (0, 0, 0):
            continue  # the starting value: there is no release before it
        before = _value(_just_before(change.since), engine, change.rule)
        assert before != change.value, f"{engine}: {change.rule} already {change.value!r} before {change.since}"


def test_every_rule_resolves_from_the_first_release_of_each_engine():
    """Any release the tool accepts resolves every rule the plan reads: V0 from the oldest supported
    release, V1 from its alpha (0.6.4). Only the sm<80 fallback starts later (it exists from 0.8)."""
    rules = {change.rule for change in RULE_CHANGES} - {"v1_falls_back_below_sm80"}
    for version, engine in ((OLDEST_SUPPORTED, "v0"), ((0, 6, 4), "v1")):
        needed = rules - ({"v0_chunked_prefill_tokens"} if engine == "v1" else set())
        resolved = {name for name, _, _ in release(version, engine).rules}
        assert needed <= resolved, (version, engine, needed - resolved)


def test_rules_carry_their_source():
    for change in RULE_CHANGES:
        assert change.source.strip(), _change_id(change)
    assert "0.92" in release((0, 20, 0), "v1").source("default_gpu_memory_utilization")


# --- key facts --------------------------------------------------------------------------------


def test_default_gpu_memory_utilization_090_until_019_then_092():
    assert release((0, 19, 0))["default_gpu_memory_utilization"] == 0.90
    assert release((0, 19, 1))["default_gpu_memory_utilization"] == 0.90
    assert release((0, 20, 0))["default_gpu_memory_utilization"] == 0.92
    assert release((0, 33, 0))["default_gpu_memory_utilization"] == 0.92
    assert release((0, 6, 3))["default_gpu_memory_utilization"] == 0.90


def test_v1_is_the_default_engine_from_080():
    assert release((0, 7, 3)).engine == "v0"  # VLLM_USE_V1 defaults to '0' in 0.7.3
    assert release((0, 8, 0)).engine == "v1"
    assert release((0, 8, 5)).engine == "v1"
    assert release((0, 6, 4)).engine == "v0"


def test_v0_is_gone_from_011():
    assert release((0, 10, 2), "v1")["v0_available"] is True
    assert release((0, 11, 0), "v1")["v0_available"] is False
    with pytest.raises(SettingsError):
        pick_engine(release((0, 11, 0)), find_gpu("H100"), "v0")


def test_v1_falls_back_to_v0_below_sm80_in_08_and_09_only():
    t4, a10 = find_gpu("T4"), find_gpu("A10G")
    assert pick_engine(release((0, 8, 5)), t4, None)[0] == "v0"
    assert pick_engine(release((0, 9, 2)), t4, None)[0] == "v0"
    assert pick_engine(release((0, 8, 5)), a10, None)[0] == "v1"
    assert pick_engine(release((0, 10, 2)), t4, None)[0] == "v1"


@pytest.mark.parametrize("version, era", [
    ((0, 6, 3), "V0-c"), ((0, 6, 4), "V0-d"), ((0, 6, 6), "V0-e"), ((0, 7, 3), "V0-f"), ((0, 8, 5), "V1-a"),
    ((0, 9, 2), "V1-b"), ((0, 11, 0), "V1-c"), ((0, 20, 0), "V1-d"), ((0, 27, 0), "V1-e"),
    ((0, 4, 3), "V0-c"), ((0, 10, 2), "V1-b"), ((0, 19, 0), "V1-c"), ((0, 26, 0), "V1-d"), ((0, 33, 0), "V1-e"),
])
def test_budget_era_of_the_default_engine(version, era):
    assert release(version)["budget_era"] == era


def test_budget_era_of_v0_on_v1_releases():
    # V0 kept the MemorySnapshot formula (V0-f) until it was removed
    assert release((0, 9, 2), "v0")["budget_era"] == "V0-f"
    assert release((0, 6, 4), "v1")["budget_era"] == "V1-0"


def test_request_memory_ceil_from_015():
    assert release((0, 13, 0))["request_memory_ceil"] is False
    assert release((0, 15, 1))["request_memory_ceil"] is True


def test_cuda_graphs_subtracted_from_020_only_on_v1():
    assert release((0, 19, 0))["cuda_graph_subtracted"] is False
    assert release((0, 19, 0))["cuda_graph_estimated"] is True  # 0.18/0.19 estimate but do not subtract
    assert release((0, 20, 0))["cuda_graph_subtracted"] is True
    assert release((0, 10, 2), "v0")["cuda_graph_subtracted"] is False


def test_nccl_leaves_the_budget_at_011():
    assert release((0, 10, 2), "v1")["nccl_inside_budget"] is True
    assert release((0, 11, 0), "v1")["nccl_inside_budget"] is False
    assert release((0, 10, 2), "v0")["nccl_inside_budget"] is True


# --- batch-size defaults (vllm-memory.md §5.3; arg_utils.py _set_default_args_v1) -----------------


@pytest.mark.parametrize("version, gpu, entrypoint, expected", [
    # V1 0.8.x: >= 70 GiB -> LLM 16384 / serve 8192 tokens, 1024 seqs (A100 included)
    ((0, 8, 5), "H100", "serve", (8192, 1024)),
    ((0, 8, 5), "H100", "llm", (16384, 1024)),
    ((0, 8, 5), "A100 80GB", "serve", (8192, 1024)),
    ((0, 8, 5), "RTX 4090", "serve", (2048, 256)),
    ((0, 8, 5), "RTX 4090", "llm", (8192, 256)),
    # 0.9+: #17885 keeps A100 on the small defaults
    ((0, 9, 2), "A100 80GB", "serve", (2048, 256)),
    ((0, 9, 2), "A100 80GB", "llm", (8192, 256)),
    ((0, 9, 2), "H100", "serve", (8192, 1024)),
    ((0, 27, 0), "B200", "serve", (8192, 1024)),
    # 0.28+: >= 160 GiB (B200) -> 16384 for serve too; H200 (139.8 GiB) unchanged
    ((0, 28, 0), "B200", "serve", (16384, 1024)),
    ((0, 28, 0), "B200", "llm", (16384, 1024)),
    ((0, 28, 0), "H200", "serve", (8192, 1024)),
    ((0, 28, 0), "A100 80GB", "serve", (2048, 256)),
])
def test_v1_batch_defaults(version, gpu, entrypoint, expected):
    tokens, seqs, _ = batch_defaults(release(version, "v1"), "v1", find_gpu(gpu), entrypoint, 8192, True)
    assert (tokens, seqs) == expected


def test_v0_batch_defaults():
    gpu = find_gpu("A100 80GB")
    # no chunked prefill: max(max_model_len, 2048) tokens, 256 sequences
    assert batch_defaults(release((0, 6, 3), "v0"), "v0", gpu, "serve", 1024, False)[:2] == (2048, 256)
    assert batch_defaults(release((0, 6, 3), "v0"), "v0", gpu, "serve", 20000, False)[:2] == (20000, 256)
    # chunked prefill: 512 up to 0.6.4.x, 2048 from 0.6.5
    assert batch_defaults(release((0, 6, 4), "v0"), "v0", gpu, "serve", 65536, True)[:2] == (512, 256)
    assert batch_defaults(release((0, 6, 5), "v0"), "v0", gpu, "serve", 65536, True)[:2] == (2048, 256)


def test_v1_011_caps_batched_tokens_at_seqs_times_len():
    spec = spec_of("Qwen/Qwen3-0.6B")
    h100 = find_gpu("H100")
    settings, _ = resolve_settings({"max_num_seqs": 2, "max_model_len": 1024}, spec, h100, release, (0, 11, 0))
    assert settings.max_num_batched_tokens == 2 * 1024
    settings, _ = resolve_settings({"max_num_seqs": 2, "max_model_len": 1024}, spec, h100, release, (0, 10, 2))
    assert settings.max_num_batched_tokens == 8192


# --- max_model_len -----------------------------------------------------------------------------------


def _qwen25_with_yarn():
    # Qwen2.5 model cards: rope_scaling {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
    config = copy.deepcopy(load_model("Qwen/Qwen2.5-7B-Instruct").config)
    config["rope_scaling"] = {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
    return parse_config(config, "Qwen/Qwen2.5-7B-Instruct+yarn")


def test_yarn_scales_max_len_until_029_and_not_from_030():
    spec = _qwen25_with_yarn()
    assert derive_max_model_len(spec, release((0, 8, 5)))[0] == 131072  # original 32768 x 4
    assert derive_max_model_len(spec, release((0, 29, 0)))[0] == 131072
    assert derive_max_model_len(spec, release((0, 30, 0)))[0] == 32768  # yarn left unscaled (0.31 wheel)
    assert derive_max_model_len(spec, release((0, 33, 0)))[0] == 32768


def test_linear_rope_scales_max_len_in_every_release():
    config = copy.deepcopy(load_model("meta-llama/Llama-2-7b-hf").config)
    config["rope_scaling"] = {"type": "linear", "factor": 2.0}
    spec = parse_config(config)
    for version in ((0, 4, 3), (0, 29, 0), (0, 33, 0)):
        assert derive_max_model_len(spec, release(version))[0] == 8192


def test_no_length_key_falls_back_to_2048():
    config = copy.deepcopy(load_model("meta-llama/Llama-2-7b-hf").config)
    del config["max_position_embeddings"]
    assert derive_max_model_len(parse_config(config), release((0, 33, 0)))[0] == 2048


# --- V0 chunked prefill --------------------------------------------------------------------------------


def test_v0_chunked_prefill_turns_on_above_32k():
    spec = spec_of("meta-llama/Llama-3.1-8B-Instruct")
    gpu = find_gpu("A100 80GB")
    above, _ = resolve_settings({"max_model_len": 32769}, spec, gpu, release, (0, 6, 4))
    assert above.engine == "v0" and above.enable_chunked_prefill is True
    assert above.max_num_batched_tokens == 512  # chunked default of 0.6.4
    later, _ = resolve_settings({"max_model_len": 65536}, spec, gpu, release, (0, 6, 6))
    assert later.enable_chunked_prefill is True and later.max_num_batched_tokens == 2048
    at_32k, _ = resolve_settings({"max_model_len": 32768}, spec, gpu, release, (0, 6, 4))
    assert at_32k.enable_chunked_prefill is False  # use_long_context = max_model_len > 32768
    assert at_32k.max_num_batched_tokens == 32768


def test_v0_chunked_prefill_stays_off_with_a_sliding_window():
    spec = spec_of("microsoft/Phi-3.5-mini-instruct")  # sliding_window 262144 in config
    settings, _ = resolve_settings({"max_model_len": 65536}, spec, find_gpu("A100 80GB"), release, (0, 6, 4))
    assert settings.enable_chunked_prefill is False
    assert settings.max_num_batched_tokens == 65536


def test_v1_always_chunks():
    spec = spec_of("Qwen/Qwen3-8B")
    settings, _ = resolve_settings({"enable_chunked_prefill": False}, spec, find_gpu("H100"), release, (0, 9, 2))
    assert settings.engine == "v1" and settings.enable_chunked_prefill is True


# --- version strings --------------------------------------------------------------------------------------


def test_resolve_version():
    assert resolve_version(None) == NEWEST_KNOWN
    assert resolve_version("latest") == NEWEST_KNOWN
    assert resolve_version("0.6.4.post1") == (0, 6, 4)
    assert resolve_version("v0.20.2rc1.dev9+g01d4d1ad3") == (0, 20, 2)
    assert resolve_version("0.8") == (0, 8, 0)
    with pytest.raises(UnsupportedReleaseError):
        resolve_version("0.2.7")
    assert OLDEST_SUPPORTED == (0, 3, 0)


def test_unknown_engine_path_is_refused():
    with pytest.raises(ValueError):
        release((0, 8, 5), "v2")


def test_budget_uses_ceil_of_u_times_total_from_015():
    """request_memory = math.ceil(T * u) in 0.15+ (vllm/v1/worker/utils.py), the float product before."""
    from vram_detective import explain

    total = 25_386_352_640  # an RTX 4090 as cudaMemGetInfo reports it (23.64 GiB)
    # 25,386,352,640 x 0.93 = 23,609,307,955.2
    for version, budget in (("0.13.0", 23_609_307_955), ("0.15.1", 23_609_307_956)):
        b = explain("Qwen/Qwen3-0.6B", gpu_memory=total, vllm_version=version, gpu_memory_utilization=0.93)
        assert b.budget_bytes == budget, version


def test_bf16_checkpoint_on_a_t4_refused_until_090_then_served_in_fp16():
    """0.8.x worker.py _check_if_gpu_supports_dtype refuses bf16 below sm80; config.py 0.9.0 falls back to
    current_platform.supported_dtypes[0] (fp16 on sm60-75) before _resolve_auto_dtype (0.9.1) takes over."""
    from vram_detective.engines.vllm.settings import StartupRefusal, resolve_dtype

    t4, spec = find_gpu("T4"), spec_of("meta-llama/Llama-3.2-3B-Instruct")
    with pytest.raises(StartupRefusal, match="Bfloat16 is only supported"):
        resolve_dtype("auto", spec, t4, release((0, 8, 5), "v0"))
    assert resolve_dtype("auto", spec, t4, release((0, 9, 0), "v0"))[0] == "float16"
    assert resolve_dtype("auto", spec, t4, release((0, 9, 1), "v0"))[0] == "float16"
    assert resolve_dtype("auto", spec, find_gpu("A10G"), release((0, 9, 0)))[0] == "bfloat16"
    with pytest.raises(StartupRefusal):  # a dtype the user names is never replaced
        resolve_dtype("bfloat16", spec, t4, release((0, 9, 0), "v0"))
