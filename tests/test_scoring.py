"""The scorer and its log parsers, run on the real startup logs of shared/groundtruth/dev.jsonl."""
from __future__ import annotations

import json

import pytest

from conftest import DEV, GIB
from vram_detective.engines.vllm.logs.eras import infer_engine_from_log, infer_version_from_log
from vram_detective.scoring import load_cases, score_cases


def test_load_cases_reads_every_line(dev_cases):
    cases = load_cases(str(DEV))
    lines = [line for line in DEV.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert len(cases) == len(lines) == len(dev_cases)
    assert [case["id"] for case in cases] == [json.loads(line)["id"] for line in lines]


def test_load_cases_names_the_bad_line(tmp_path):
    path = tmp_path / "cases.jsonl"
    path.write_text('{"id": "a"}\n\n{"id": "b",\n')
    with pytest.raises(ValueError, match=r"cases\.jsonl:3"):
        load_cases(str(path))


# --- which release printed a log -------------------------------------------------------------------------


@pytest.mark.parametrize("case_id, era", [
    # one-line 'GPU KV cache size: N tokens, Maximum concurrency ...' (0.28+)
    ("file70682754770-llama31-8b-a100-80-v0310", "0.28.0"),
    # 'Model loading took 14.99 GiB memory' through format_gib (0.15+)
    ("file34342936495-llama31-8b-a100-40g-gce-v0151-eager", "0.15.0"),
    # 'Model loading took 1.9148 GiB memory' (0.12-0.13)
    ("file45405743641-gemma3-1b-it-v0130-nocudagraph", "0.12.0"),
    # 'Available KV cache memory: 6.51 GiB' (V1 0.9.1+)
    ("lmcache-1739-qwen3-14b-single-gpu", "0.9.1"),
    # 'GPU KV cache size: 158,656 tokens' and 'Model loading took 14.9889 GiB and' (V1 0.8.x)
    ("vllm-pr17122-llama31-8b-l40s", "0.8.0"),
    # 'Memory profiling results: total_gpu_memory=...' (V0 0.6.4.x)
    ("vllm-10517-llama31-8b-3090-20k", "0.6.4"),
    # three profiling lines without a blocks line (V0 0.6.5+)
    ("file57908690698-llama-8b-h100-book-v06x", "0.6.5"),
    # '# CUDA blocks: 29055' (dispatch_key, the 0.7.0-0.7.2 wheels; #15196 states 0.7.2)
    ("vllm-15196-dscoder-v2-lite-l40s-cpuoffload30", "0.7.0"),
    # '# cuda blocks: 36184' (device_name, from the 0.7.3 wheel on)
    ("mellea-pr416-small-model-h100-080", "0.7.3"),
    # 'Model loading took 3.2637 GB and 18.052839 seconds' (the 0.8.0-0.8.2 wheels)
    ("file3594054945-llama32-3b-q8gguf-rtx4070-8gb", "0.8.0"),
])
def test_infer_version_from_real_logs(dev_cases, case_id, era):
    assert infer_version_from_log(dev_cases[case_id]["log"]) == era


def test_infer_version_without_memory_lines():
    assert infer_version_from_log("") is None
    assert infer_version_from_log("INFO api_server.py] vLLM API server version 0.6.3") is None


def test_infer_engine_agrees_with_every_log_whose_engine_path_is_known(dev_cases):
    """Most cases record the engine path V0/V1 (`engine_path`, read off the worker files in the log); the
    parser must agree wherever it gives an answer. V1 prints 'Memory profiling takes ...' too, at
    DEBUG level (gpu_worker.py 0.9.1-0.26), so that line alone does not mean V0."""
    checked, wrong = 0, []
    for case in dev_cases.values():
        noted = case.get("engine_path")
        inferred = infer_engine_from_log(case.get("log", ""))
        if noted and inferred:
            checked += 1
            if inferred != noted:
                wrong.append((case["id"], noted, inferred))
    assert checked >= 50
    assert wrong == []


def test_infer_engine_examples(dev_cases):
    assert infer_engine_from_log(dev_cases["vllm-10517-llama31-8b-3090-20k"]["log"]) == "v0"
    assert infer_engine_from_log(dev_cases["lmcache-3430-qwen3-8b-a5000-v0210"]["log"]) == "v1"
    assert infer_engine_from_log("") is None


# --- scoring ------------------------------------------------------------------------------------------------------


def test_score_one_real_case(dev_cases):
    case = dev_cases["vllm-10517-llama31-8b-3090-20k"]
    report = score_cases([case])["vllm"]
    assert (report["cases"], report["scored"], report["skipped"]) == (1, 1, [])
    entry = report["per_case"][0]
    assert entry["id"] == case["id"] and entry["vllm_version"] == "0.6.4"
    figures = entry["figures"]
    weights = figures["weights_gib"]
    # 16,094,076,928 B = 14.98878 GiB against the logged 14.9888
    assert weights["observed"] == 14.9888 and weights["predicted"] == 14.9888
    assert weights["rel_err"] == pytest.approx(abs(16_094_076_928 / GIB - 14.9888) / 14.9888)
    # an exact count: its interval is the printed integer's rounding (intervals.py)
    assert figures["num_cpu_blocks"] == {"observed": 2048, "predicted": 2048, "rel_err": 0.0,
                                         "interval_90": [2047.5, 2048.5], "inside": True}
    # the logged KV budget 3.81 GiB is [3.805, 3.815) GiB: 1948 .. 1953 blocks of 2 MiB; 1952 is inside
    blocks = figures["blocks_from_logged_budget"]
    assert blocks["interval"] == [1948, 1953] and blocks["rel_err"] == 0.0
    concurrency = figures["concurrency_from_logged_budget"]
    assert concurrency["interval"] == pytest.approx([1948 * 16 / 20000, 1953 * 16 / 20000])
    assert concurrency["rel_err"] == 0.0
    # every reported error is |predicted - observed| / observed of the unrounded prediction
    for name in ("kv_cache_gib", "num_gpu_blocks", "max_concurrency"):
        figure = figures[name]
        assert figure["rel_err"] == pytest.approx(abs(figure["predicted"] - figure["observed"]) / figure["observed"],
                                                  abs=1e-4), name
    assert report["figures"]["weights_gib"]["n"] == 1


def test_score_tokens_from_the_logged_budget_qwen3_8b(dev_cases):
    # 6.37 GiB -> [6.365, 6.375) GiB / 2,359,296 B = 2896 .. 2901 blocks -> 46,336 .. 46,416 tokens (0.21 rule:
    # int(blocks / 1024 x 16384) = blocks x 16); the logged 46,368 is inside
    entry = score_cases([dev_cases["lmcache-3430-qwen3-8b-a5000-v0210"]])["vllm"]["per_case"][0]
    tokens = entry["figures"]["tokens_from_logged_budget"]
    assert tokens["interval"] == [2896 * 16, 2901 * 16]
    assert tokens["rel_err"] == 0.0


def test_score_skips_with_reasons(dev_cases):
    speculative = dict(dev_cases["file54377340947-mistral7b-v02-lora-rtxpro6000-runpod"], id="speculative-variant")
    speculative["settings"] = dict(speculative["settings"], speculative_config={"num_speculative_tokens": 3})
    cases = [
        dev_cases["seed-int4-7b-rtx4090"],  # model not named
        speculative,  # speculative decoding is not modelled yet
        dev_cases["vllm-44376-dsv4-flash-gh200-tp2-fail"],  # not in the catalog
    ]
    report = score_cases(cases)["vllm"]
    assert report["scored"] == 0
    reasons = {skip["id"]: skip["reason"] for skip in report["skipped"]}
    assert reasons["seed-int4-7b-rtx4090"] == "model not named in the case"
    assert "speculative" in reasons["speculative-variant"]
    assert reasons["vllm-44376-dsv4-flash-gh200-tp2-fail"].endswith("not in the catalog")


def test_lora_case_weights_include_the_adapter_slots(dev_cases):
    # Mistral-7B with --enable-lora (0.13-0.14): 13.49 GiB of weights + ~86 MiB of rank-16 slots
    # (32 layers x (A: 7 slices x 16 x in + B: 16 x out) x 2 B + vocabulary LoRA) -> logged 13.58
    report = score_cases([dev_cases["file54377340947-mistral7b-v02-lora-rtxpro6000-runpod"]])["vllm"]
    weights = report["per_case"][0]["figures"]["weights_gib"]
    assert weights["rel_err"] < 0.001


def test_score_whole_dev_set(dev_cases):
    report = score_cases(list(dev_cases.values()))["vllm"]
    assert report["cases"] == len(dev_cases)
    assert report["scored"] + len(report["skipped"]) == len(dev_cases)
    assert report["scored"] >= 30
    # separately reported tags never enter the main summary
    separate = {c["id"] for c in dev_cases.values() if set(c.get("tags", [])) & {"non-nvidia", "approximate", "shared-gpu"}}
    main_ids = {entry["id"] for entry in report["per_case"] if not entry["separate"]}
    assert not main_ids & separate
    counted = sum(len([f for f in entry["figures"] if f == "weights_gib"]) for entry in report["per_case"]
                  if not entry["separate"])
    assert report["figures"]["weights_gib"]["n"] == counted
    agreement = report["startup_failed_agreement"]
    assert 0 < agreement["agree"] <= agreement["n"]
