"""Issue 31: what benchmarks/fuzz.py found over fit, compare, logs and score - each a bug (exit 3) or a broken
invariant on ordinary bad input, reproduced through the library call the command line and the web API share."""
from __future__ import annotations

import pytest

from vram_detective import errors, library


@pytest.mark.parametrize("target, message", [
    ({"concurrency": float("inf")}, "--concurrency must be a positive number of requests, got inf"),  # OverflowError
    ({"context": "1", "concurrency": 1e308}, "--concurrency 1e+308 x 1 tokens is more than any GPU's KV cache holds"),
    ({"gpus": 1 << 40}, "--gpus must be from 1 to 65,536, got 1099511627776"),
    ({"top": -1}, "--top must be at least 1, got -1"),
])
def test_fit_targets_are_checked_for_every_caller_as_the_command_line_checks_them(target, message):
    with pytest.raises(errors.BadInput) as raised:
        library.fit("Qwen/Qwen2.5-3B-Instruct-AWQ", "A100 80GB", engine="vllm", **target)
    assert str(raised.value).startswith(message)


def test_fit_a_one_token_context_has_no_shorter_context_to_offer():
    # was IndexError (the nearest answer's context ladder was [0])
    answer = library.fit("Qwen/QwQ-32B-AWQ", "RTX 3070 Ti", engine="vllm", engine_version="0.27.0", context="1",
                         concurrency=0.5, top=1)
    data = answer.to_dict()
    assert data["target"]["context"] == 1
    assert all(near.get("relaxed") != "context" for near in data.get("nearest") or [])


def test_logs_an_sglang_figure_of_400_digits_is_not_read():
    # was exit 3 (OverflowError: int(inf)): a number no engine prints is left out, the rest of the line is read
    line = f"[2025-07-17 07:41:58] KV Cache is allocated. #tokens: {'9' * 400}, K size: 1.42 GB, V size: 1.42 GB\n"
    report = library.logs(line).to_dict()
    assert report["engine"] == "sglang"
    assert report["observed"].get("k_size_gb") == 1.42 and "kv_cache_tokens" not in report["observed"]


def test_logs_beside_an_nvidia_smi_reading_of_0_mib():
    # was exit 3 (ZeroDivisionError in the what-if cause of the nvidia-smi row)
    smi = "index, name, memory.used [MiB], memory.total [MiB]\n0, NVIDIA GeForce RTX 4090, 0 MiB, 24564 MiB\n"
    report = library.logs("Model loading took 7.61 GiB memory and 8.219576 seconds\n", nvidia_smi=smi, gpu="RTX 4090")
    run = report.to_dict()["runs"][0]
    assert run["observed"]["weights_gib"] == 7.61
    assert run["nvidia_smi_breakdown"]["used_mib"] == 0


def _card_gib(name: str) -> float:
    from vram_detective.hardware import find_gpu

    return find_gpu(name).cuda_total_bytes / 2**30


def test_fit_candidates_intervals_stay_on_the_card():
    # the KV pool's interval of a candidate reached 86.2 GiB on a 64 GiB MI250 (explain clips; the sweep did not)
    answer = library.fit("Qwen/Qwen2.5-3B-Instruct", "MI250", engine="vllm", engine_version="0.30.0",
                         context="32k").to_dict()
    interval = answer["candidates"][0]["interval"]
    assert interval["figure"] == "kv_cache_gib"
    assert interval["low"] <= interval["value"] <= interval["high"] <= _card_gib("MI250")


def test_nvidia_smi_interval_of_a_card_without_a_listed_nvidia_smi_total_stays_on_the_card():
    # GB10 (unified memory) lists no nvidia-smi total: its 'used' interval reached 148,456 MiB of 124,611
    from vram_detective import api

    b = api.explain("Qwen/Qwen3.5-27B", "GB10", engine="vllm", engine_version="0.33.0", max_model_len=4096)
    used = next(item for item in b.intervals if item.key == "nvidia_smi_used_mib")
    assert used.low <= used.value <= used.high <= _card_gib("GB10") * 1024


def test_llamacpp_fit_a_memory_ceiling_above_the_card_is_the_card():
    # 17,526 MiB was listed as fitting an 11 GiB GTX 1080 Ti ("2.88 GiB to spare") under --max-gpu-memory 20GiB
    from vram_detective.hardware import find_gpu

    card_mib = find_gpu("GTX 1080 Ti").cuda_total_bytes / 2**20
    answer = library.fit("deepseek-ai/DeepSeek-V3", "GTX 1080 Ti", engine="llamacpp", engine_version="b11312",
                         context="4k", concurrency=8, max_gpu_memory="20GiB", top=1, gguf_type="Q5_K_M").to_dict()
    most_layers = answer["answers"][0]
    assert most_layers["command"] is not None
    assert 0 < most_layers["vram_per_gpu_mib"]["CUDA0"] <= card_mib


@pytest.mark.parametrize("concurrency, slots", [(0.5, 1), (2.5, 3)])
def test_llamacpp_fit_a_fractional_concurrency_takes_whole_slots_rounded_up(concurrency, slots):
    # 0.5 was "-np/--parallel must be from 1 ..." (bad input for a target the command line takes); 2.5 took 2 slots
    answer = library.fit("Qwen/Qwen3-8B", "RTX 4090", engine="llamacpp", context="8k", concurrency=concurrency)
    command = answer.to_dict()["answers"][0]["command"]
    assert f" -np {slots}" in command if slots > 1 else " -np " not in command  # one slot: llama-server's default


def test_vllm_fit_never_offers_a_candidate_that_explain_refuses():
    # a pinned 60 GiB --kv-cache-memory-bytes on a 16 GiB card: the sweep listed it as feasible (exit 0) while
    # explain, on the candidate's own settings, runs out of memory
    answer = library.fit("Qwen/Qwen3.5-27B", "RTX 4070 Ti SUPER", engine="vllm", context="128k", concurrency=4, gpus=4,
                         gpu_memory_utilization=1.0, kv_cache_memory_bytes=60 << 30)
    data = answer.to_dict()
    assert not answer.ok and data["candidates"] == []
    assert any(note.startswith("left out vllm serve Qwen/Qwen3.5-27B") and "CUDA out of memory" in note
               for note in data["notes"])


def test_logs_nvidia_smi_parts_never_count_a_predicted_shortfall_as_a_pool():
    # gpt-oss-120b predicted on an RTX 4090 has no KV pool (its weights do not fit): the nvidia-smi breakdown
    # listed "KV cache pool -60.48 GiB (predicted)"
    smi = "index, name, memory.used [MiB], memory.total [MiB]\n0, NVIDIA H100 80GB HBM3, 24564 MiB, 81559 MiB\n"
    report = library.logs("vllm serve openai/gpt-oss-120b --gpu-memory-utilization 0.9 --max-num-seqs 2048\n",
                          nvidia_smi=smi, gpu="RTX 4090").to_dict()
    parts = report["runs"][0]["nvidia_smi_breakdown"]["parts"]
    assert [part["what"] for part in parts if part["gib"] < 0] == []
    assert "KV cache pool" not in [part["what"] for part in parts]


def test_logs_a_projected_nvidia_smi_reading_is_never_below_zero():
    # a reading of 3 MiB (nvidia-smi of another moment) less --enforce-eager's 526 MiB saving was -523 MiB
    smi = "index, name, memory.used [MiB], memory.total [MiB]\n0, NVIDIA GeForce RTX 4090, 3 MiB, 24564 MiB\n"
    log = "vllm serve Qwen/Qwen3-8B --max-model-len 32768\nModel loading took 15.27 GiB memory and 5.1 seconds\n"
    scenarios = library.logs(log, nvidia_smi=smi, gpu="RTX 4090").to_dict()["runs"][0]["what_if"]["scenarios"]
    assert scenarios and all(row["projected_nvidia_smi_mib"] >= 0 for row in scenarios)
    assert [row["projected_nvidia_smi_mib"] for row in scenarios if row["flags"] == "--enforce-eager"] == [0]


def test_logs_the_memory_bar_draws_no_negative_weights():
    # "Model loading took -12 GiB" (a mutated line) was drawn as a -12 GiB weights part of the answer's bar;
    # a negative KV figure was already drawn from the prediction
    smi = "index, name, memory.used [MiB], memory.total [MiB]\n0, NVIDIA GeForce RTX 4090, 20000 MiB, 24564 MiB\n"
    log = "vllm serve Qwen/Qwen3-8B --max-model-len 8192\nModel loading took -12 GiB memory and 5.1 seconds\n"
    run = library.logs(log, nvidia_smi=smi, gpu="RTX 4090").to_dict()["runs"][0]
    assert run["observed"]["weights_gib"] == -12.0  # the report still says what the log printed
    assert run["answer"]["weights_gib"] > 0 and run["answer"]["sources"]["weights"] == "predicted"
