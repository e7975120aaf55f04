"""What the tool infers from a log, and how sure it says it is; reconciliation and nvidia-smi explanations."""
from __future__ import annotations

from vram_detective.engines.vllm.logs.infer import (
    catalog_match, find_candidates, infer_gpu, infer_release, infer_run, infer_utilization,
)
from vram_detective.engines.vllm.logs.reader import parse_text
from vram_detective.engines.vllm.logs.reconcile import anomalies, explain_nvidia_smi, least_utilization, reconcile, what_ifs
from vram_detective.intervals import safe_room
from vram_detective.hardware import find_gpu


def run_of(text: str):
    parsed = parse_text(text)
    return parsed, parsed.first


def test_catalog_match_reads_paths_and_cache_folders():
    assert catalog_match("Qwen/Qwen2.5-7B-Instruct-AWQ") == ("Qwen/Qwen2.5-7B-Instruct-AWQ", "repo id")
    assert catalog_match("/data/Qwen/Qwen2.5-7B-Instruct")[0] == "Qwen/Qwen2.5-7B-Instruct"
    assert catalog_match("/home/me/models/Meta-Llama-3.1-8B-Instruct")[0] == "meta-llama/Llama-3.1-8B-Instruct"
    assert catalog_match("/root/.cache/huggingface/hub/models--Qwen--Qwen3-8B/snapshots/abc")[0] == "Qwen/Qwen3-8B"
    assert catalog_match("/models") is None and catalog_match("Gemma-3-27b") is None


def test_release_from_banner_beats_the_format_and_the_format_says_how_sure():
    _, run = run_of("(APIServer pid=1) INFO 05-01 10:00:00 [api_server.py:1081] vLLM API server version 0.8.5\n"
                    "INFO 05-01 10:00:30 [gpu_model_runner.py:1316] Model loading took 14.9889 GiB and 3.65 seconds\n")
    version, engine = infer_release(run)
    assert (version.value, version.confidence) == ("0.8.5", "printed")
    assert engine.value == "v1"
    _, run = run_of("Loading model weights took 5.2048 GB\n# GPU blocks: 4556\n")
    version, engine = infer_release(run)
    assert (version.value, version.confidence, engine.value, engine.confidence) == ("0.7.0", "low", "v1", "low")
    assert "quoted without its CPU blocks" in version.basis
    _, run = run_of("INFO 02-11 10:17:54 [executor_base.py:113] # cuda blocks: 36184, # CPU blocks: 2340\n")
    version, engine = infer_release(run)
    assert (version.value, version.confidence, engine.value) == ("0.7.3", "medium", "v0")
    _, run = run_of("(Worker_TP0 pid=1) INFO 05-09 10:37:04 [gpu_worker.py:475] CUDA graph memory profiling is enabled "
                    "(default since v0.21.0). The current --gpu-memory-utilization=0.9200 is equivalent to "
                    "--gpu-memory-utilization=0.9143 without CUDA graph memory profiling.\n"
                    "(Worker_TP0 pid=1) INFO 05-09 10:37:04 [gpu_worker.py:460] Available KV cache memory: 11.06 GiB\n")
    version, _ = infer_release(run)
    assert version.value == "0.21.0" and version.confidence == "medium"
    assert run.setting("gpu_memory_utilization") == 0.92


def test_gpu_from_name_total_and_nvidia_smi_total():
    _, run = run_of("(VllmWorkerProcess pid=507) WARNING 04-12 08:21:11 [fused_moe.py:659] Using default MoE config. "
                    "Config file not found at .../configs/E=256,N=14336,device_name=NVIDIA_GeForce_RTX_3090.json\n"
                    "Loading model weights took 21.2 GB\n")
    gpu = infer_gpu(run, run.observed())
    assert gpu.value.name == "NVIDIA GeForce RTX 3090" and gpu.confidence == "printed"
    _, run = run_of("the current vLLM instance can use total_gpu_memory (23.65GiB) x gpu_memory_utilization (0.50) = "
                    "11.82GiB\n")
    gpu = infer_gpu(run, run.observed())
    # 23.65 GiB is the RTX 4090 and the RTX 4090 D (the same memory): the common one, low, with the other named
    assert gpu.value.name == "NVIDIA GeForce RTX 4090" and gpu.confidence == "low"
    assert "NVIDIA GeForce RTX 4090 D" in gpu.alternatives
    _, run = run_of("the current vLLM instance can use total_gpu_memory (14.74GiB) x gpu_memory_utilization (0.90) = "
                    "13.27GiB\n")
    gpu = infer_gpu(run, run.observed())
    assert gpu.value.name == "Tesla T4" and round(gpu.value.cuda_total_gib, 2) == 14.74  # the logged total is used
    _, run = run_of("Loading model weights took 5.2048 GB\n")
    gpu = infer_gpu(run, {"nvidia_smi_total_mib": 81559})
    assert gpu.value.name == "NVIDIA H100 80GB HBM3" and "81559" in gpu.basis


def test_tensor_parallel_from_worker_prefixes():
    parsed, run = run_of(
        "(Worker_TP0 pid=1) INFO 05-07 05:30:52 [gpu_worker.py:460] Available KV cache memory: 10.55 GiB\n"
        "(Worker_TP3 pid=4) INFO 05-07 05:30:52 [gpu_worker.py:460] Available KV cache memory: 10.57 GiB\n")
    inference = infer_run(run, run.observed(), log_markers=parsed.markers, search_candidates=False)
    tp = inference.settings["tensor_parallel_size"]
    assert (tp.value, tp.confidence) == (4, "medium")


def test_candidates_for_an_unnamed_tp2_run_check_the_kv_figures():
    parsed, run = run_of(
        "INFO 04-02 10:20:45 model_runner.py:1116] Loading model weights took 30.7098 GB\n"
        "(VllmWorkerProcess pid=3) INFO 04-02 10:20:50 model_runner.py:1116] Loading model weights took 30.7098 GB\n"
        "INFO 04-02 10:20:55 worker.py:266] the current vLLM instance can use total_gpu_memory (44.42GiB) x "
        "gpu_memory_utilization (0.90) = 39.98GiB\n"
        "INFO 04-02 10:20:55 worker.py:266] model weights take 30.71GiB; non_torch_memory takes 0.30GiB; PyTorch "
        "activation peak memory takes 1.26GiB; the rest of the memory reserved for KV Cache is 7.71GiB.\n"
        "INFO 04-02 10:20:55 executor_base.py:108] # CUDA blocks: 3947, # CPU blocks: 2048\n")
    inference = infer_run(run, run.observed(), log_markers=parsed.markers)
    best = inference.candidates[0]
    assert (best.model, best.tensor_parallel_size, best.kv_consistent) == ("Qwen/Qwen2.5-32B-Instruct", 2, True)
    assert all(c.kv_bytes_per_token == 131072 for c in inference.candidates)
    assert len(best.kv_checks) == 2  # blocks from the logged KV pool, CPU blocks from the 4 GiB swap
    assert inference.candidates_searched < 400


def test_candidates_reject_a_kv_mismatch():
    # Llama-3.1-8B weights but 36 KiB per token: no 8B Llama has that, the KV check rejects them
    parsed, run = run_of("Model loading took 14.9889 GiB and 3.6 seconds\nAvailable KV cache memory: 10.0 GiB\n"
                         "GPU KV cache size: 291,271 tokens\n")
    inference = infer_run(run, run.observed(), log_markers=parsed.markers)
    assert inference.candidates == []
    parsed, run = run_of("Model loading took 14.9889 GiB and 3.6 seconds\nAvailable KV cache memory: 10.0 GiB\n"
                         "GPU KV cache size: 81,920 tokens\n")
    found = find_candidates(run.observed(), infer_run(run, run.observed(), log_markers=parsed.markers,
                                                      search_candidates=False), "0.9.2")
    # every candidate has an 8B Llama's KV shapes (32 layers x 8 KV heads x 128: 2 MiB blocks) and weights within
    # half a percent: the 8B Llamas, the R1 distill onto one, InternVL2-8B (InternLM2-7B + a 0.3 B tower)
    assert found and all(c.kv_consistent and abs(c.weights_gib - 14.9889) < 0.005 * 14.9889 for c in found)
    assert all("2,097,152 B per block" in " ".join(c.kv_checks) for c in found)
    assert any(c.model.startswith("meta-llama/Llama-3.1-8B") for c in found)


def test_utilization_from_budget_and_from_blocks():
    parsed, run = run_of("Desired GPU memory utilization is (0.92, 72.91 GiB).\nFree memory on device (78.84/79.25 "
                         "GiB) on startup.\nAvailable KV cache memory: 56.21 GiB\n")
    # printed by vLLM: no inference needed
    assert run.setting("gpu_memory_utilization") == 0.92
    observed = {"total_gpu_memory_gib": 79.25, "requested_memory_gib": 72.91}
    inference = infer_run(run, observed, search_candidates=False)
    util = infer_utilization(observed, None, inference)
    assert (util.value, util.confidence) == (0.92, "high")


def test_reconcile_names_a_cause_for_every_gap():
    from vram_detective import api

    parsed, run = run_of("Loading model weights took 5.2048 GB\n# GPU blocks: 4556\n")
    inference = infer_run(run, run.observed(), log_markers=parsed.markers, gpu="RTX 4090")
    rec = reconcile(run.observed(), inference, "Qwen/Qwen2.5-7B-Instruct-AWQ", "catalog", run)
    rows = {row.key: row for row in rec.rows}
    assert rows["weights_gib"].agrees and not rows["num_gpu_blocks"].agrees
    assert "917,504 B = 3.89 GiB" in rows["num_gpu_blocks"].cause
    util = infer_utilization(run.observed(), rec.prediction, inference)
    assert 0.3 < util.value < 0.7 and util.confidence == "low"
    u, breakdown = least_utilization("Qwen/Qwen2.5-7B-Instruct-AWQ", find_gpu("RTX 4090"), "0.7.0",
                                     {"max_model_len": 32768, "engine": "v1"}, "catalog")
    assert breakdown.failure is None and breakdown.kv_cache_tokens >= 32768 and safe_room(breakdown).covers
    lower = api.explain("Qwen/Qwen2.5-7B-Instruct-AWQ", "RTX 4090", vllm_version="0.7.0", engine="v1",
                        max_model_len=32768, gpu_memory_utilization=round(u - 0.01, 2))
    # the least utilization is the least with room beyond the KV pool's error (explain's and fit's margin)
    assert lower.failure is not None or not safe_room(lower).covers
    shrink = what_ifs("Qwen/Qwen2.5-7B-Instruct-AWQ", find_gpu("RTX 4090"), "0.7.0",
                      {"max_model_len": 32768, "engine": "v1"}, util.value, "catalog", 10240)
    assert shrink["baseline"]["current_nvidia_smi_mib"] == 10240
    assert [row["saving_mib"] for row in shrink["scenarios"]] == sorted(
        (row["saving_mib"] for row in shrink["scenarios"]), reverse=True)


def test_nvidia_smi_breakdown_and_anomalies():
    from vram_detective.forensics.nvidia_smi import parse_nvidia_smi

    parsed, run = run_of("Free memory on device (20.27/31.4 GiB) on startup. Desired GPU memory utilization is (0.6, "
                         "18.84 GiB). Actual usage is 15.03 GiB for consumed memory (weights + non-torch), 1.59 GiB "
                         "for peak activation, and 0.09 GiB for CUDAGraph memory. Current kv cache memory in use is "
                         "1.9 GiB.\nModel loading took 14.8 GiB memory and 20.1 seconds\n")
    smi = parse_nvidia_smi("index, name, memory.used [MiB], memory.total [MiB]\n0, NVIDIA GeForce RTX 5090, 29100 MiB, "
                           "32607 MiB\n")
    observed = dict(run.observed(), nvidia_smi_used_mib=29100, nvidia_smi_total_mib=32607)
    inference = infer_run(run, observed, smi=smi, search_candidates=False)
    explanation = explain_nvidia_smi(observed, inference, None, smi, run)
    assert explanation.used_mib == 29100 and [part[0] for part in explanation.parts][:2] == ["model weights",
                                                                                            "KV cache pool"]
    flags = anomalies(observed, run.extras(), inference, None, explanation, smi, run)
    assert any("already in use when vLLM started" in text for text in flags)
    assert any("above gpu_memory_utilization x total" in text for text in flags)
    assert any("unaccounted" in text for text in flags)


def test_a_count_below_one_is_not_taken_as_a_setting():
    """benchmarks/fuzz.py (seed 23): a mutated non-default args line with max_num_batched_tokens -12 was reported as
    that run's setting; vLLM refuses counts below 1, so the log's number is not what the engine ran with."""
    from vram_detective import library

    log = ("INFO 05-28 08:00:26 [config.py:1] non-default args: {'model': 'Qwen/Qwen3-8B', "
           "'max_num_batched_tokens': -12, 'max_num_seqs': 0, 'tensor_parallel_size': 2}\n"
           "INFO 05-28 08:00:27 [gpu_model_runner.py:1] Model loading took 15.27 GiB and 3.1 seconds\n")
    settings = library.logs(log).to_dict()["runs"][0]["settings"]
    assert "max_num_batched_tokens" not in settings and "max_num_seqs" not in settings
    assert settings["tensor_parallel_size"] == 2
