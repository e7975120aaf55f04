"""`fit` prefers candidates whose margin covers the 90 % interval of the figure the verdict rests on (the KV pool
for vLLM and SGLang, a GPU's VRAM for llama.cpp), for every engine fit supports. The expected margins are worked
by hand from the plan's figures and the widths in data/intervals.json:
- the KV pool's figures (GiB, tokens, blocks, concurrency) are one term, kv_pool, counted once per case;
- vLLM 0.11.0 on one H100 is era V1-c, data-center, one GPU: kv_pool ±4.13 % (n=11);
- SGLang scores the pool's token count only: kv_pool ±4.93 % (* | *, n=4), on the pool in GiB as on its tokens;
- llama.cpp: a GPU's VRAM ±0.43 % (vram_mib, * | *, n=7);
- vLLM 0.33.0 on a data-center GPU is era V1-e: kv_cache_gib ±70.25 % (n=7), wider than any spare pool below."""
from __future__ import annotations

import json

import pytest

from vram_detective import api
from vram_detective.cli import main

GIB = 2**30
MIB = 2**20


def run(capsys, *args: str, code: int = 0) -> str:
    returned = main(["fit", *args])
    captured = capsys.readouterr()
    assert returned == code, captured.err
    return captured.out


# --- vLLM --------------------------------------------------------------------------------------------------


def test_vllm_ranks_the_covering_fp8_pool_before_the_borderline_bf16_one(capsys):
    args = ("Qwen/Qwen3-8B", "--gpu", "H100", "--vllm-version", "0.11.0", "--context", "32k", "--concurrency", "11")
    data = json.loads(run(capsys, *args, "--json"))
    # the plan: 50.149 GiB of pool either way; bf16 holds 22,823 blocks = 365,168 tokens (11.144 requests of
    # 32,768), fp8 twice that (22.288 requests)
    plain = api.explain("Qwen/Qwen3-8B", "H100", vllm_version="0.11.0", max_model_len=32768)
    assert plain.kv_cache_bytes / GIB == pytest.approx(50.1492, abs=1e-4) and plain.kv_cache_tokens == 365_168
    # bf16: 50.1492 x (1 - 11 / 11.14404) = 0.648 GiB to spare, inside 0.0413 x 50.1492 = 2.071 GiB: borderline
    # fp8:  50.1492 x (1 - 11 / 22.28809) = 25.399 GiB: covers
    first = data["candidates"][0]
    assert first["command"] == "vllm serve Qwen/Qwen3-8B --max-model-len 32768 --kv-cache-dtype fp8"
    assert first["covers_interval"] is True and first["margin_gib"] == pytest.approx(25.3987, abs=1e-3)
    assert first["interval"]["figure"] == "kv_cache_gib" and first["interval"]["error_gib"] == pytest.approx(2.0712, abs=1e-3)
    assert first["interval"]["basis"] == "V1-c | data-center (> 32 GB) | 1 GPU (n=11)"
    bf16 = [c for c in data["candidates"] if c["settings"].get("kv_cache_dtype", "auto") == "auto"
            and c["model"] == "Qwen/Qwen3-8B"]
    assert bf16, "the cheaper bf16 candidate is still listed"
    for candidate in bf16:
        assert candidate["covers_interval"] is False and candidate["margin_gib"] == pytest.approx(0.6482, abs=1e-3)
        assert candidate["margin"].startswith("borderline: +0.65 GiB beyond 11 requests of 32,768 tokens")
    covering = [c["covers_interval"] for c in data["candidates"]]
    assert covering == sorted(covering, reverse=True)  # every covering candidate before every borderline one
    # the launch line is exact: explaining it gives the candidate's pool
    again = api.explain("Qwen/Qwen3-8B", "H100", vllm_version="0.11.0", max_model_len=32768, kv_cache_dtype="fp8")
    assert again.kv_cache_tokens == first["kv_cache_tokens"] == 730_336

    text = run(capsys, *args)
    assert "\n  vllm serve Qwen/Qwen3-8B --max-model-len 32768 --kv-cache-dtype fp8\n" in text
    assert "margin: starts, 25.40 GiB to spare beyond 11 requests of 32,768 tokens (error of the profile terms " \
           "±2.07 GiB): covers the KV pool's 90% interval" in text
    assert "+0.65 GiB borderline" in text
    assert "borderline: +0.65 GiB beyond 11 requests of 32,768 tokens, within the error of the profile terms " \
           "(±2.07 GiB at 90%)" in text


def test_vllm_says_when_no_candidate_covers_and_shows_the_best_borderline_one(capsys):
    args = ("Qwen/Qwen3-8B", "--gpu", "H100", "--vllm-version", "0.33.0", "--context", "32k", "--concurrency", "10")
    data = json.loads(run(capsys, *args, "--json", "--top", "3"))
    assert [c["covers_interval"] for c in data["candidates"]] == [False, False, False]
    best = data["candidates"][0]
    assert best["command"] == "vllm serve Qwen/Qwen3-8B --max-model-len 32768"  # the order without the margin
    pool = best["kv_cache_gib"]
    assert best["interval"]["error_gib"] == pytest.approx(0.7017 * pool, abs=2e-3)
    assert best["margin_gib"] == pytest.approx(pool * (1 - 10 / best["max_concurrency"]), abs=2e-3)
    text = run(capsys, *args)
    assert "\nNo candidate's margin covers the 90% interval of its KV pool; the best borderline one:\n" \
           "Best: Qwen/Qwen3-8B" in text


# --- SGLang ------------------------------------------------------------------------------------------------


def test_sglang_ranks_the_covering_fp8_pool_first(capsys):
    args = ("Qwen/Qwen3-8B", "--gpu", "4090", "--engine", "sglang", "--engine-version", "0.5.11", "--context", "28672")
    rows = json.loads(run(capsys, *args, "--json"))["candidates"]
    # the plan: a 3.9478 GiB pool of 28,746 tokens (bf16, 1.0026 requests of 28,672) or 57,493 (fp8)
    # error 0.0493 x 3.9478 = 0.1946 GiB; bf16 spare 3.9478 x (1 - 28,672 / 28,746) = 0.0102, fp8 1.9790
    assert [row["settings"].get("kv_cache_dtype", "auto") for row in rows] == ["fp8_e4m3", "auto"]
    assert [row["covers_interval"] for row in rows] == [True, False]
    assert [row["margin_gib"] for row in rows] == [pytest.approx(1.9790, abs=1e-3), pytest.approx(0.0102, abs=1e-3)]
    assert rows[1]["interval"]["figure"] == "kv_cache_gib" and rows[1]["interval"]["value"] == pytest.approx(3.9478, abs=1e-4)
    assert rows[1]["interval"]["error_gib"] == pytest.approx(0.1946, abs=1e-3)
    text = run(capsys, *args)
    assert text.endswith("\n  python -m sglang.launch_server --model-path Qwen/Qwen3-8B --tp 1 --kv-cache-dtype fp8_e4m3 "
                         "--context-length 28672\n")
    assert "margin +10 MiB borderline\n    borderline: +0.01 GiB beyond one 28,672-token request" in text


def test_sglang_none_covers(capsys):
    text = run(capsys, "Qwen/Qwen3-8B", "--gpu", "4090", "--engine", "sglang", "--engine-version", "0.5.11",
               "--context", "8k", "--concurrency", "7")
    # fp8: 57,493 tokens hold 7.018 requests of 8,192: 3.9478 x (1 - 7 / 7.0183) = 0.0102 GiB, within 0.1946
    assert "within the error of the profile terms (±0.19 GiB at 90%)" in text
    assert "No candidate's margin covers the 90% interval of its KV pool; the best borderline one:\n  python -m " \
           "sglang.launch_server --model-path Qwen/Qwen3-8B --tp 1 --kv-cache-dtype fp8_e4m3 --context-length 8192" in text


def test_an_sglang_prediction_now_states_its_margin():
    b = api.explain("Qwen/Qwen3-8B", "H100", engine="sglang", engine_version="0.5.11")
    assert b.verdict_margin.startswith("starts, ") and "GiB to spare" in b.verdict_margin


# --- llama.cpp ---------------------------------------------------------------------------------------------


def test_llamacpp_largest_context_comes_with_the_context_whose_margin_covers(capsys):
    args = ("Qwen/Qwen3-8B", "--engine", "llamacpp", "--gguf-type", "Q8_0", "--gpu", "3060", "--context", "32k")
    answers = json.loads(run(capsys, *args, "--json"))["answers"]
    total_mib = api.resolve_gpu("3060", None).cuda_total_bytes / MIB  # 12,042.24 MiB
    for answer in answers:
        vram = answer["vram_per_gpu_mib"]["CUDA0"]
        assert answer["margin_gib"] == pytest.approx((total_mib - vram) / 1024, abs=1e-3)
        assert answer["interval"]["figure"] == "vram_mib"
        assert answer["interval"]["error_gib"] == pytest.approx(0.0043 * vram / 1024, abs=1e-4)
    layers, covering, borderline = answers
    # 34 layers: 11,941 MiB, 0.10 GiB under the budget, beyond 0.0043 x 11,941 MiB = 0.05 GiB: one answer
    assert layers["command"].startswith("llama-server -m Qwen3-8B-Q8_0.gguf -ngl 34 -c 32768")
    assert layers["covers_interval"] is True
    # every layer at -c 26,368 leaves 0.03 GiB (within 0.05): -c 26,112 (0.07 GiB) comes first, the other after
    assert covering["command"].startswith("llama-server -m Qwen3-8B-Q8_0.gguf -ngl all -c 26112 ")
    assert borderline["command"].startswith("llama-server -m Qwen3-8B-Q8_0.gguf -ngl all -c 26368 ")
    assert (covering["covers_interval"], borderline["covers_interval"]) == (True, False)
    assert covering["question"] == borderline["question"]
    text = run(capsys, *args)
    assert "-c 26368 with all layers on the GPU; VRAM CUDA0 12,011 MiB, host RAM 692 MiB, margin +31 MiB borderline" in text
    assert "borderline: +0.03 GiB under the GPU's budget, within the error of its VRAM figure (±0.05 GiB at 90%)" in text


def test_llamacpp_none_covers(capsys):
    # -ngl 0 at -c 32768 takes 1,232.08 MiB: 2.9 MiB under a 1,235 MiB budget, within 0.0043 x 1,232 = 5.3 MiB
    args = ("Qwen/Qwen3-8B", "--engine", "llamacpp", "--gguf-type", "Q8_0", "--gpu", "3060", "--context", "32k",
            "--max-gpu-memory", "1235MiB")
    answers = json.loads(run(capsys, *args, "--json"))["answers"]
    assert len(answers) == 2 and answers[0]["command"].startswith("llama-server -m Qwen3-8B-Q8_0.gguf -ngl 0 ")
    assert answers[0]["covers_interval"] is False
    assert answers[0]["margin_gib"] == pytest.approx((1235 - 1232.08) / 1024, abs=1e-4)
    assert answers[0]["interval"]["error_gib"] == pytest.approx(0.0043 * 1232.08 / 1024, abs=1e-4)
    text = run(capsys, *args)
    assert "  the most layers on the GPU at -c 32768:\n    no answer's margin covers the 90% interval of the GPU's " \
           "VRAM; the borderline one:\n    0/37 layers" in text
