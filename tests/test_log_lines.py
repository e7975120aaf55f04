"""The memory lines each vLLM release prints, in that release's exact format (design/vllm-memory.md §2),
checked against the format strings of the released wheels and against real logs in dev.jsonl."""
from __future__ import annotations

import re

import pytest

from conftest import GIB, MIB, logged_message
from vram_detective.engines.vllm.logs.lines import LogFigures, format_gib, log_lines
from vram_detective.engines.vllm.releases import release

# Llama-3.1-8B bf16: 8,030,261,248 params x 2 B + 131072 x 128 x 2 B rotary cache = 16,094,076,928 B
LLAMA31_8B_WEIGHTS = 8_030_261_248 * 2 + 131072 * 128 * 2


def figures(**overrides) -> LogFigures:
    values = dict(
        total_bytes=int(23.58 * GIB), utilization=0.9, weights_bytes=LLAMA31_8B_WEIGHTS,
        activation_bytes=int(2.07 * GIB), non_torch_bytes=int(0.35 * GIB), context_bytes=int(0.35 * GIB),
        kv_bytes=1952 * 2 * MIB + MIB, num_gpu_blocks=1952, num_cpu_blocks=2048, kv_tokens=1952 * 16,
        max_concurrency=1952 * 16 / 20000, max_model_len=20000, graph_bytes=int(0.25 * GIB),
        graph_estimate_bytes=int(0.52 * GIB), graphs_captured=True,
    )
    values.update(overrides)
    return LogFigures(**values)


def lines_of(version, engine, **overrides) -> tuple[str, ...]:
    return log_lines(release(version, engine), figures(**overrides))


def only(lines, prefix) -> str:
    hits = [line for line in lines if line.startswith(prefix)]
    assert len(hits) == 1, (prefix, lines)
    return hits[0]


# --- format_gib ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("num_bytes, text", [
    (int(5.2 * GIB), "5.2"),
    (15 * GIB, "15.0"),  # trailing zero kept to one decimal: str(15.0)
    (LLAMA31_8B_WEIGHTS, "14.99"),  # 14.98878 -> 14.99
    (int(7.5 * GIB), "7.5"),
    (2898 * 2_359_296, "6.37"),
    (0, "0.0"),
    (-int(2.14 * GIB), "-2.14"),
])
def test_format_gib_is_str_of_round_2(num_bytes, text):
    assert format_gib(num_bytes) == text


# --- the weights line -----------------------------------------------------------------------------------


@pytest.mark.parametrize("version, engine, expected", [
    ((0, 4, 3), "v0", "Loading model weights took 14.9888 GB"),
    ((0, 6, 4), "v0", "Loading model weights took 14.9888 GB"),
    ((0, 7, 3), "v0", "Loading model weights took 14.9888 GB"),
    # 0.8.3+ (V0 model_runner.py and V1 gpu_model_runner.py): "%.4f GiB and %.6f seconds"
    ((0, 8, 3), "v1", "Model loading took 14.9888 GiB and ? seconds"),
    ((0, 8, 5), "v0", "Model loading took 14.9888 GiB and ? seconds"),
    ((0, 8, 5), "v1", "Model loading took 14.9888 GiB and ? seconds"),
    ((0, 11, 0), "v1", "Model loading took 14.9888 GiB and ? seconds"),
    ((0, 13, 0), "v1", "Model loading took 14.9888 GiB memory and ? seconds"),
    ((0, 15, 1), "v1", "Model loading took 14.99 GiB memory and ? seconds"),
    ((0, 33, 0), "v1", "Model loading took 14.99 GiB memory and ? seconds"),
])
def test_weights_line(version, engine, expected):
    assert lines_of(version, engine)[0] == expected


@pytest.mark.parametrize("version, engine", [((0, 8, 0), "v1"), ((0, 8, 2), "v1"), ((0, 8, 2), "v0")],
                         ids=["0.8.0-v1", "0.8.2-v1", "0.8.2-v0"])
def test_weights_line_080_to_082_still_says_gb(version, engine):
    """vllm 0.8.0 and 0.8.2 wheels: logger.info("Model loading took %.4f GB and %.6f seconds", ...) in both
    worker/model_runner.py and v1/worker/gpu_model_runner.py; GiB from 0.8.3. Real 0.8.1/0.8.2 logs in
    dev.jsonl print 'Model loading took 19.5904 GB and ...', 'Model loading took 3.2637 GB and ...'."""
    assert lines_of(version, engine)[0] == "Model loading took 14.9888 GB and ? seconds"


def test_weights_line_015_drops_trailing_zero():
    assert lines_of((0, 15, 1), "v1", weights_bytes=int(5.2 * GIB))[0] == "Model loading took 5.2 GiB memory and ? seconds"
    assert lines_of((0, 31, 0), "v1", weights_bytes=15 * GIB)[0] == "Model loading took 15.0 GiB memory and ? seconds"


def test_weights_lines_match_real_logs(dev_cases):
    # #10517 (0.6.4, V0): Llama-3.1-8B
    assert lines_of((0, 6, 4), "v0")[0] == logged_message(dev_cases["vllm-10517-llama31-8b-3090-20k"], "Loading model")
    # 0.15.1 (V1): the same model, format_gib
    logged = logged_message(dev_cases["file34342936495-llama31-8b-a100-40g-gce-v0151-eager"], "Model loading took")
    assert logged.startswith(lines_of((0, 15, 1), "v1")[0].replace("? seconds", ""))


# --- the blocks line ----------------------------------------------------------------------------------------


def test_blocks_line_v0_up_to_06():
    for version in ((0, 4, 3), (0, 6, 4), (0, 6, 6)):
        assert "# GPU blocks: 1952, # CPU blocks: 2048" in lines_of(version, "v0"), version


def test_blocks_line_v0_070_to_072_prints_cuda_upper_case(dev_cases):
    """0.7.0 and 0.7.2 wheels: logger.info("# %s blocks: ...", current_platform.dispatch_key) -> "CUDA";
    0.7.3 switched to device_name ("cuda"). Real 0.7.2 log (#15196, version stated): '# CUDA blocks: 29055'."""
    assert logged_message(dev_cases["vllm-15196-dscoder-v2-lite-l40s-cpuoffload30"], "# ").startswith(
        "# CUDA blocks: 29055, # CPU blocks: 7767")
    for version in ((0, 7, 0), (0, 7, 2)):
        assert "# CUDA blocks: 1952, # CPU blocks: 2048" in lines_of(version, "v0"), version


def test_blocks_line_v0_073_to_010_prints_cuda_lower_case(dev_cases):
    for version in ((0, 7, 3), (0, 8, 5), (0, 9, 2), (0, 10, 2)):
        assert "# cuda blocks: 1952, # CPU blocks: 2048" in lines_of(version, "v0"), version
    logged = logged_message(dev_cases["mellea-pr416-small-model-h100-080"], "# cuda blocks")
    assert re.fullmatch(r"# cuda blocks: \d+, # CPU blocks: \d+", logged)


def test_blocks_line_v1():
    assert "# GPU blocks: 1952" in lines_of((0, 6, 4), "v1")
    assert "# GPU blocks: 1952" in lines_of((0, 7, 3), "v1")
    for version in ((0, 8, 5), (0, 21, 0), (0, 33, 0)):
        assert not any("blocks:" in line for line in lines_of(version, "v1")), version


# --- the concurrency line(s) -----------------------------------------------------------------------------------


def test_v0_concurrency_line_from_063(dev_cases):
    lines = lines_of((0, 6, 4), "v0")
    assert "Maximum concurrency for 20000 tokens per request: 1.56x" in lines
    assert lines[lines.index("# GPU blocks: 1952, # CPU blocks: 2048") + 1].startswith("Maximum concurrency")
    assert not any(line.startswith("Maximum concurrency") for line in lines_of((0, 6, 2), "v0"))
    # V0 never put thousands separators in it, even on 0.9/0.10 (mellea #416: 'for 8192 tokens')
    assert "Maximum concurrency for 32768 tokens per request: 1.00x" in lines_of(
        (0, 9, 2), "v0", max_model_len=32768, max_concurrency=1.0)
    assert logged_message(dev_cases["vllm-10517-llama31-8b-3090-20k"], "Maximum concurrency") == (
        "Maximum concurrency for 20000 tokens per request: 1.56x")


def test_v1_07x_logs_blocks_and_plain_concurrency(dev_cases):
    """v1/core/kv_cache_utils.py of the 0.7.2 and 0.7.3 wheels logs '# GPU blocks: %d' and then
    'Maximum concurrency for %s tokens per request: %.2fx'; #12569 (V1, 0.7.1 dev) shows both."""
    case = dev_cases["vllm-pr12569-llama31-70b-w8a8-v1"]
    assert logged_message(case, "# GPU blocks") == "# GPU blocks: 1381"
    logged = logged_message(case, "Maximum concurrency")
    lines = lines_of((0, 7, 3), "v1", num_gpu_blocks=1381, kv_tokens=1381 * 16, max_model_len=2048,
                     max_concurrency=1381 * 16 / 2048)
    assert "# GPU blocks: 1381" in lines
    assert logged == "Maximum concurrency for 2048 tokens per request: 10.79x"  # 22096 / 2048
    assert logged in lines


def test_v1_two_line_kv_size_and_concurrency_08_to_027():
    for version in ((0, 8, 5), (0, 9, 2), (0, 21, 0), (0, 27, 0)):
        lines = lines_of(version, "v1", kv_tokens=46368, max_model_len=16384, max_concurrency=2898 / 1024)
        index = lines.index("GPU KV cache size: 46,368 tokens")
        assert lines[index + 1] == "Maximum concurrency for 16,384 tokens per request: 2.83x", version


def test_v1_one_line_from_028():
    for version in ((0, 28, 0), (0, 33, 0)):
        lines = lines_of(version, "v1", kv_tokens=460496, max_model_len=131072, max_concurrency=28781 / 8192)
        assert "GPU KV cache size: 460,496 tokens, Maximum concurrency for 131,072 tokens per request: 3.51x" in lines
        assert not any(line.startswith("Maximum concurrency") for line in lines), version


# --- the profiling summary (V0) ------------------------------------------------------------------------------------


def test_v0d_memory_profiling_results_line(dev_cases):
    # worker.py of 0.6.4.post1: total, initial = total - free before profiling (weights + context),
    # peak torch (allocated peak including weights), usage after profiling (torch-allocated weights +
    # non-torch), non-torch, KV, utilization.
    f = figures(total_bytes=int(23.58 * GIB), weights_bytes=LLAMA31_8B_WEIGHTS, context_bytes=int(0.35 * GIB),
                activation_bytes=int(2.07 * GIB), non_torch_bytes=int(0.36 * GIB), kv_bytes=int(3.81 * GIB))
    line = only(log_lines(release((0, 6, 4), "v0"), f), "Memory profiling results")
    assert line == (
        "Memory profiling results: total_gpu_memory=23.58GiB initial_memory_usage=15.34GiB "  # 14.9888 + 0.35
        "peak_torch_memory=17.06GiB "  # 14.9888 + 2.07
        "memory_usage_post_profile=15.35GiB "  # 14.9888 + 0.36
        "non_torch_memory=0.36GiB kv_cache_size=3.81GiB gpu_memory_utilization=0.90"
    )
    shape = re.sub(r"\d+\.\d\d", "N", line)
    logged = logged_message(dev_cases["vllm-10517-llama31-8b-3090-20k"], "Memory profiling results")
    assert re.sub(r"\d+\.\d\d", "N", logged) == shape
    assert not any("Memory profiling" in line for line in lines_of((0, 6, 3), "v0"))


def test_v0e_three_profiling_lines_match_15815(dev_cases):
    """#15815 (Qwen2.5-32B TP 2 on L40S, V0): total 44.42 GiB x 0.90, weights 30.7098 GiB, non-torch 0.30,
    activation 1.26 -> KV = 39.978 - 30.7098 - 0.30 - 1.26 = 7.708 GiB."""
    case = dev_cases["vllm-15815-qwen25-32b-2xl40s"]
    total, weights = int(44.42 * GIB), int(30.7098 * GIB)
    non_torch, activation = int(0.30 * GIB), int(1.26 * GIB)
    kv = int(total * 0.9) - weights - non_torch - activation
    lines = log_lines(release((0, 7, 3), "v0"), figures(
        total_bytes=total, weights_bytes=weights, non_torch_bytes=non_torch, activation_bytes=activation,
        kv_bytes=kv, num_gpu_blocks=3947, max_model_len=10000, max_concurrency=3947 * 16 / 10000))
    assert lines[0] == logged_message(case, "Loading model weights took")
    assert lines[1] == "Memory profiling takes ? seconds"
    assert lines[2] == logged_message(case, "the current vLLM instance can use")
    assert lines[3] == logged_message(case, "model weights take")
    for version in ((0, 6, 5), (0, 6, 6), (0, 10, 2)):
        assert "Memory profiling takes ? seconds" in lines_of(version, "v0"), version


def test_v1_prints_no_v0_profiling_lines():
    for version in ((0, 8, 5), (0, 10, 2)):
        assert not any("profiling" in line.lower() for line in lines_of(version, "v1")), version


# --- available KV and graph estimate (V1) ------------------------------------------------------------------------------


def test_available_kv_line_two_decimals_from_091_format_gib_from_015(dev_cases):
    assert not any(line.startswith("Available KV") for line in lines_of((0, 9, 0), "v1"))
    assert "Available KV cache memory: 6.90 GiB" in lines_of((0, 9, 1), "v1", kv_bytes=int(6.9 * GIB))
    assert "Available KV cache memory: 6.90 GiB" in lines_of((0, 13, 0), "v1", kv_bytes=int(6.9 * GIB))
    assert "Available KV cache memory: 6.9 GiB" in lines_of((0, 15, 1), "v1", kv_bytes=int(6.9 * GIB))
    assert "Available KV cache memory: 8.0 GiB" in lines_of((0, 26, 0), "v1", kv_bytes=8 * GIB)
    # real logs: 0.18 '6.9 GiB', 0.26 '8.0 GiB', 0.10/0.11 '2.30 GiB'
    assert logged_message(dev_cases["vllm-pr39559-qwen35-gguf-override512"], "Available KV") == (
        "Available KV cache memory: 6.9 GiB")
    assert logged_message(dev_cases["file57428438798-qwen25-7b-awq-rtx4080-wsl-v0260"], "Available KV") == (
        "Available KV cache memory: 8.0 GiB")
    assert logged_message(dev_cases["vllm-28228-kimi-linear-tp2-120k"], "Available KV") == (
        "Available KV cache memory: 2.30 GiB")
    assert not any(line.startswith("Available KV") for line in lines_of((0, 9, 2), "v0"))


def test_graph_lines():
    assert lines_of((0, 5, 4), "v0")[-1] == "Graph capturing finished in ? secs."
    assert lines_of((0, 6, 4), "v0")[-1] == "Graph capturing finished in ? secs, took 0.25 GiB"
    assert not any(line.startswith("Graph capturing") for line in lines_of((0, 6, 4), "v0", graphs_captured=False))
    assert "Estimated CUDA graph memory: 0.52 GiB total" in lines_of((0, 18, 0), "v1")
    assert not any(line.startswith("Estimated CUDA graph") for line in lines_of((0, 15, 1), "v1"))
    assert not any(line.startswith("Estimated CUDA graph") for line in lines_of((0, 18, 0), "v1", graphs_captured=False))


# --- whole blocks of a real log ---------------------------------------------------------------------------------------


def test_reproduces_the_kv_lines_of_lmcache_3430(dev_cases):
    case = dev_cases["lmcache-3430-qwen3-8b-a5000-v0210"]
    lines = lines_of((0, 21, 0), "v1", kv_bytes=2898 * 2_359_296, num_gpu_blocks=2898, kv_tokens=46368,
                     max_model_len=16384, max_concurrency=2898 / 1024, graph_estimate_bytes=int(0.52 * GIB))
    expected = [logged_message(case, start) for start in (
        "Estimated CUDA graph memory", "Available KV cache memory", "GPU KV cache size", "Maximum concurrency")]
    positions = [lines.index(line) for line in expected]
    assert positions == sorted(positions)  # same order as the log


def test_reproduces_the_one_line_form_of_031(dev_cases):
    case = dev_cases["file70682754770-llama31-8b-a100-80-v0310"]
    lines = lines_of((0, 31, 0), "v1", kv_bytes=28781 * 2 * MIB + MIB, num_gpu_blocks=28781, kv_tokens=460496,
                     max_model_len=131072, max_concurrency=28781 / 8192)
    assert logged_message(case, "Available KV cache memory") in lines
    assert logged_message(case, "GPU KV cache size") in lines
