"""`vram-detective simulate` on a real catalog model, and fit --workload's solver on a hand-checked trace."""
import json
import re

import pytest

from vram_detective.api import explain
from vram_detective.cli import main
from vram_detective.simulate import CostModel, Request, Workload
from vram_detective.simulate.fit import fit_pool, verdict_line

MODEL = "Qwen/Qwen2.5-7B-Instruct-AWQ"
STEP = CostModel(decode_step_s=1.0, per_seq_s=0.0, prefill_tokens_per_s=1e12)  # one second a step
ARGS = ["simulate", MODEL, "--gpu", "RTX 4090", "--max-model-len", "32k", "--engine-version", "0.33.0", "--workload",
        "chat:rate=1,duration=20"]


def test_the_command_prints_the_verdict_first_then_the_plot_and_figures(capsys):
    assert main(ARGS) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{MODEL} on NVIDIA GeForce RTX 4090, vLLM 0.33.0 V1")
    first = next(i for i, line in enumerate(out) if line.startswith("verdict: "))
    assert first <= 2  # after the one- or two-line heading
    verdict = " ".join(line.strip() for line in out[first:out.index("", first)])
    assert verdict == ("verdict: your traffic peaks at 0.6 GiB of the 14.6 GiB pool; a pool of 0.6 GiB "
                       "(--gpu-memory-utilization 0.38 on this card) serves it with no preemption at the 99th percentile")
    assert any(line.startswith("pool  |") and line.endswith("| 14.6 GiB") for line in out)
    assert all(len(line) <= 80 for line in out)
    labels = [line[:16].strip() for line in out]
    for label in ("blocks in use", "requests", "at once (peak)", "preemptions", "prefix cache", "KV cache usage",
                  "swap to CPU", "smallest pool"):
        assert label in labels
    # both hit rates (per admission; vLLM's counter, every lookup) and the usage as vLLM prints it (no null block)
    cache = out[labels.index("prefix cache") + 1]
    assert "of prompt tokens hit" in out[labels.index("prefix cache")] and "engine's own counter" in cache
    assert "peak " in out[labels.index("KV cache usage")] and "%" in out[labels.index("KV cache usage")]
    assert any("17,092 blocks of 16 token(s)" in line for line in out)  # explain's num_gpu_blocks at 32k
    assert out[-2].startswith("note: memory, not latency")


def test_the_command_json_and_csv(capsys, tmp_path):
    csv = tmp_path / "series.csv"
    assert main(ARGS + ["--csv", str(csv)]) == 0
    assert csv.read_text().splitlines()[0] == "time_s,blocks_max,blocks_mean,bytes_max,running_max,waiting_max"
    capsys.readouterr()
    assert main(ARGS + ["--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    result, fit = out["result"], out["fit"]
    assert result["pool_blocks"] == 17092 and result["block_size"] == 16
    assert result["finished"] == result["requests"] > 0 and result["preemptions"] == 0
    assert fit["lever"] == "gpu_memory_utilization" and fit["feasible"]
    assert result["peak_blocks"] <= fit["needed_blocks"] * 2 and fit["needed_blocks"] < result["pool_blocks"]


def test_the_command_refuses_bad_workloads(capsys):
    assert main(ARGS[:-1] + ["chat:speed=3"]) == 2
    assert "unknown workload option 'speed'" in capsys.readouterr().err


# Two requests at t=0, each 60 prompt tokens and 20 outputs, blocks of 16, no prefix caching: the last decode
# step computes token 79, so each ends on ceil(79/16) = 5 blocks. With 11 blocks (the null block + 10) both
# run to the end; with 10 the second one is preempted at 64 tokens; with 8 the second waits at admission
# (60 tokens = 4 blocks, 3 free). The fewest blocks serving both without preemption or waiting: 11.
TRACE = Workload("trace", trace=(Request(0.0, 60, 20), Request(0.0, 60, 20)), duration=10.0)


def predict(**pinned):
    return lambda extra: explain(MODEL, "RTX 4090", max_model_len=128, enable_prefix_caching=False,
                                 **{**pinned, **extra})


def test_fit_workload_exact_pool_with_kv_cache_memory_bytes():
    fit = fit_pool(predict(kv_cache_memory_bytes=10**9), TRACE, pinned={"kv_cache_memory_bytes": 10**9},
                   budget=0.0, cost=STEP)
    block = 57344 * 16  # 28 layers x 4 KV heads x 128 x 2 (K, V) x 2 bytes x 16 tokens
    assert fit.needed_blocks == 11 and fit.needed_bytes == 11 * block
    assert (fit.lever.flag, fit.value) == ("--kv-cache-memory-bytes", 11 * block)
    assert fit.breakdown.figure("num_gpu_blocks") == 11
    assert fit.result.preemptions == 0 and fit.result.held_back_requests == 0 and fit.result.finished == 2


def test_fit_workload_cheapest_gpu_memory_utilization():
    fit = fit_pool(predict(), TRACE, budget=0.0, cost=STEP)
    assert fit.needed_blocks == 11 and fit.lever.setting == "gpu_memory_utilization"
    # the cheapest utilization on the 0.01 grid: the pool starts there and not one step lower
    assert fit.value == 0.31
    assert fit.breakdown.figure("num_gpu_blocks") >= 11
    below = predict()({"gpu_memory_utilization": 0.30})
    assert below.failure is not None  # "No available memory for the cache blocks"
    assert "a pool of 0.0 GiB (--gpu-memory-utilization 0.31 on this card) serves it with no preemption" in \
        verdict_line(fit.result, fit)


# 10 blocks: the second request is preempted at 64 tokens, then waits to come back (65 tokens = 5 blocks, 4 free)
@pytest.mark.parametrize("blocks, preempted, held", [(10, 1, 1), (8, 0, 1)])
def test_the_trace_below_eleven_blocks(blocks, preempted, held):
    from vram_detective.simulate import PoolSpec, simulate

    pool = PoolSpec("vllm", "0.11.0", "v1", num_blocks=blocks, block_size=16, block_bytes=1, max_num_seqs=8,
                    max_num_batched_tokens=2048, max_model_len=128, prefix_caching=False)
    result = simulate(pool, TRACE, cost=STEP)
    assert (result.preempted_requests, result.held_back_requests, result.finished) == (preempted, held, 2)


def test_sglang_words_a_shortfall_as_sglang_does_retract_never_preempt(capsys):
    """Issue 27: SGLang retracts requests when its pool is full ("KV cache pool is full. Retract requests.",
    managers/scheduler.py 0.5.23); its simulation says so in the verdict, the plot line and the figures."""
    args = ["simulate", "Qwen/Qwen3-8B", "--gpu", "4090", "--engine", "sglang", "--engine-version", "0.5.23",
            "--context-length", "8192", "--workload", "chat:rate=20,requests=400"]
    assert main(args) == 0
    out = capsys.readouterr().out
    verdict = " ".join(out[out.index("verdict: "):].split("\n\n")[0].split())
    assert re.fullmatch(r"verdict: your traffic fills the 1\.0 GiB pool and \d+ of 400 requests \(\d+\.\d%\) are "
                        r"retracted; .*", verdict), verdict
    assert re.search(r"\n\S.* \d+ retraction\(s\), prefix hits", out)
    assert re.search(r"\nretractions +\d+ of \d+ request\(s\)", out)
    assert "preempt" not in out.lower()
