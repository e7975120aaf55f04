"""The log parser, era by era: every sample below is written in the exact format of the vLLM release named
(the format strings are in /tmp/engine-src/vllm-VERSION, design/vllm-memory.md §2); plus worker prefixes,
several ranks, several runs, ANSI colours, glued records, garbage and streaming."""
from __future__ import annotations

import io
import tracemalloc

import pytest

from vram_detective.engines.vllm.logs.eras import (
    FormatMarkers, engine_from_markers, era_from_markers, infer_engine_from_log, infer_version_from_log,
)
from vram_detective.engines.vllm.logs.reader import (
    MAX_LINE_CHARS, LineReader, LogInputError, observed_from_log, parse_stream, parse_text,
)


def observed(text: str) -> dict:
    return parse_text(text).first.observed()


# --- one sample per era ----------------------------------------------------------------------------------------

V02_BLOCKS = """\
INFO 12-15 09:46:21 llm_engine.py:72] Initializing an LLM engine with config: model='TheBloke/CodeLlama-13B-Instruct-fp16', tokenizer='TheBloke/CodeLlama-13B-Instruct-fp16', tokenizer_mode=auto, revision=None, tokenizer_revision=None, trust_remote_code=False, dtype=torch.float16, max_seq_len=16384, download_dir=None, load_format=auto, tensor_parallel_size=2, quantization=None, seed=0)
INFO 12-15 09:47:52 llm_engine.py:207] # GPU blocks: 1464, # CPU blocks: 1310
"""

V04_WEIGHTS = """\
INFO 07-11 10:01:48 llm_engine.py:161] Initializing an LLM engine (v0.4.3) with config: model='/data/Qwen1.5-14B-Chat-GPTQ-int4', speculative_config=None, tokenizer='/data/Qwen1.5-14B-Chat-GPTQ-int4', skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, rope_scaling=None, rope_theta=None, tokenizer_revision=None, trust_remote_code=True, dtype=torch.float16, max_seq_len=4096, download_dir=None, load_format=LoadFormat.AUTO, tensor_parallel_size=1, disable_custom_all_reduce=False, quantization=gptq_marlin, enforce_eager=False, kv_cache_dtype=auto, quantization_param_path=None, device_config=cuda, decoding_config=DecodingConfig(guided_decoding_backend='outlines'), seed=0, served_model_name=/data/Qwen1.5-14B-Chat-GPTQ-int4)
INFO 07-11 10:12:28 model_runner.py:146] Loading model weights took 9.2497 GB
INFO 07-11 10:12:30 gpu_executor.py:83] # GPU blocks: 76, # CPU blocks: 327
"""

V063_CONCURRENCY = """\
INFO 10-07 09:54:29 model_runner.py:1060] Loading model weights took 12.5523 GB
INFO 10-07 09:55:00 gpu_executor.py:122] # GPU blocks: 20186, # CPU blocks: 512
INFO 10-07 09:55:00 gpu_executor.py:126] Maximum concurrency for 4096 tokens per request: 78.85x
INFO 10-07 09:55:09 model_runner.py:1511] Graph capturing finished in 8 secs.
"""

V064_PROFILE = """\
INFO 12-16 02:38:24 model_runner.py:1077] Loading model weights took 38.5260 GB
INFO 12-16 02:38:40 worker.py:232] Memory profiling results: total_gpu_memory=47.74GiB initial_memory_usage=42.62GiB peak_torch_memory=40.87GiB memory_usage_post_profile=42.63GiB non_torch_memory=4.09GiB kv_cache_size=0.39GiB gpu_memory_utilization=0.95
INFO 12-16 02:38:41 gpu_executor.py:113] # GPU blocks: 80, # CPU blocks: 819
INFO 12-16 02:38:41 gpu_executor.py:117] Maximum concurrency for 8192 tokens per request: 0.16x
ERROR 12-16 02:38:41 engine.py:366] The model's max seq len (8192) is larger than the maximum number of tokens that can be stored in KV cache (1280). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.
"""

# 0.6.5-0.10 V0: one logger call with "\n"; vLLM's formatter repeats the prefix with "\r\n"
V07_PROFILE = (
    "INFO 03-29 15:52:45 [model_runner.py:1146] Model loading took 3.2637 GB and 18.052839 seconds\n"
    "INFO 03-29 15:53:07 [worker.py:267] Memory profiling takes 21.11 seconds\r\n"
    "INFO 03-29 15:53:07 [worker.py:267] the current vLLM instance can use total_gpu_memory (7.65GiB) x "
    "gpu_memory_utilization (0.90) = 6.89GiB\r\n"
    "INFO 03-29 15:53:07 [worker.py:267] model weights take 3.26GiB; non_torch_memory takes 0.02GiB; PyTorch "
    "activation peak memory takes 1.22GiB; the rest of the memory reserved for KV Cache is 2.38GiB.\n"
    "INFO 03-29 15:53:07 [executor_base.py:111] # cuda blocks: 1395, # CPU blocks: 2340\n"
    "INFO 03-29 15:53:07 [executor_base.py:116] Maximum concurrency for 10000 tokens per request: 2.23x\n"
    "INFO 03-29 15:53:19 [model_runner.py:1671] Graph capturing finished in 2 secs, took 0.13 GiB\n"
    "INFO 03-29 15:53:19 [llm_engine.py:428] init engine (profile, create kv cache, warmup model) took 15.13 seconds\n"
)

V070_CUDA_BLOCKS = """\
INFO 03-13 01:31:55 model_runner.py:1115] Loading model weights took 0.8008 GB
INFO 03-13 01:31:59 executor_base.py:110] # CUDA blocks: 29055, # CPU blocks: 7767
"""

V1_ALPHA = """\
INFO 01-30 03:18:12 gpu_model_runner.py:848] Loading model weights took 67.7229 GB
INFO 01-30 03:19:14 kv_cache_utils.py:395] # GPU blocks: 1381
INFO 01-30 03:19:14 kv_cache_utils.py:398] Maximum concurrency for 2048 tokens per request: 10.79x
"""

V080_V1 = """\
INFO 04-24 16:33:00 [gpu_model_runner.py:1316] Model loading took 14.9889 GB and 3.652170 seconds
INFO 04-24 16:33:13 [kv_cache_utils.py:634] GPU KV cache size: 158,656 tokens
INFO 04-24 16:33:13 [kv_cache_utils.py:637] Maximum concurrency for 32,768 tokens per request: 4.84x
"""

V0102_V1 = """\
(EngineCore_DP0 pid=3021) INFO 09-23 18:12:05 [core.py:76] Initializing a V1 LLM engine (v0.10.2) with config: model='llava-hf/llava-v1.6-mistral-7b-hf', speculative_config=None, tokenizer='llava-hf/llava-v1.6-mistral-7b-hf', skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, tokenizer_revision=None, trust_remote_code=False, dtype=torch.float16, max_seq_len=4096, download_dir=None, load_format=auto, tensor_parallel_size=1, pipeline_parallel_size=1, data_parallel_size=1, disable_custom_all_reduce=False, quantization=None, enforce_eager=False, kv_cache_dtype=auto, device_config=cuda, decoding_config=DecodingConfig(backend='auto'), observability_config=ObservabilityConfig(), seed=0, served_model_name=llava-hf/llava-v1.6-mistral-7b-hf, enable_prefix_caching=True, chunked_prefill_enabled=True, use_async_output_proc=True, pooler_config=None, compilation_config={"level":3}
(EngineCore_DP0 pid=3021) INFO 09-23 18:12:21 [gpu_model_runner.py:2392] Model loading took 14.0786 GiB and 10.247948 seconds
(EngineCore_DP0 pid=3021) DEBUG 09-23 18:12:33 [gpu_worker.py:284] Initial free memory: 78.66 GiB; Requested memory: 0.90 (util), 71.27 GiB
(EngineCore_DP0 pid=3021) DEBUG 09-23 18:12:33 [gpu_worker.py:291] Free memory after profiling: 62.18 GiB (total), 54.78 GiB (within requested)
(EngineCore_DP0 pid=3021) DEBUG 09-23 18:12:33 [gpu_worker.py:297] Memory profiling takes 10.12 seconds. Total non KV cache memory: 16.12GiB; torch peak memory increase: 1.97GiB; non-torch forward increase memory: 0.07GiB; weights memory: 14.08GiB.
(EngineCore_DP0 pid=3021) INFO 09-23 18:12:33 [gpu_worker.py:298] Available KV cache memory: 55.15 GiB
(EngineCore_DP0 pid=3021) INFO 09-23 18:12:34 [kv_cache_utils.py:864] GPU KV cache size: 451,744 tokens
(EngineCore_DP0 pid=3021) INFO 09-23 18:12:34 [kv_cache_utils.py:868] Maximum concurrency for 4,096 tokens per request: 110.29x
(EngineCore_DP0 pid=3021) INFO 09-23 18:12:39 [gpu_model_runner.py:3118] Graph capturing finished in 5 secs, took 0.67 GiB
(EngineCore_DP0 pid=3021) INFO 09-23 18:12:39 [gpu_worker.py:391] Free memory on device (78.66/79.19 GiB) on startup. Desired GPU memory utilization is (0.9, 71.27 GiB). Actual usage is 14.08 GiB for weight, 1.97 GiB for peak activation, 0.07 GiB for non-torch memory, and 0.67 GiB for CUDAGraph memory. Replace gpu_memory_utilization config with `--kv-cache-memory=58333988249` to fit into requested memory, or `--kv-cache-memory=66273897472` to fully utilize gpu memory. Current kv cache memory in use is 59212694937 bytes.
(EngineCore_DP0 pid=3021) INFO 09-23 18:12:40 [core.py:218] init engine (profile, create kv cache, warmup model) took 28.81 seconds
"""

V012_WEIGHTS = """\
(EngineCore_DP0 pid=614224) INFO 01-16 15:54:00 [gpu_model_runner.py:3659] Model loading took 1.9148 GiB memory and 1.154851 seconds
(EngineCore_DP0 pid=614224) INFO 01-16 15:54:08 [gpu_worker.py:375] Available KV cache memory: 25.39 GiB
"""

V015_FORMAT_GIB = """\
(EngineCore_DP0 pid=10479) INFO 02-06 03:33:32 [gpu_model_runner.py:4130] Model loading took 15.0 GiB memory and 6.720924 seconds
(EngineCore_DP0 pid=10479) INFO 02-06 03:33:33 [gpu_worker.py:356] Available KV cache memory: 19.3 GiB
(EngineCore_DP0 pid=10479) INFO 02-06 03:33:33 [kv_cache_utils.py:1307] GPU KV cache size: 157,936 tokens
(EngineCore_DP0 pid=10479) INFO 02-06 03:33:33 [kv_cache_utils.py:1312] Maximum concurrency for 131,072 tokens per request: 1.20x
"""

V018_ESTIMATE = """\
(EngineCore_DP0 pid=387) INFO 03-08 16:44:28 [gpu_model_runner.py:5651] Estimated CUDA graph memory: 0.26 GiB total
(EngineCore_DP0 pid=387) INFO 03-08 16:44:29 [gpu_worker.py:456] Available KV cache memory: 17.36 GiB
(EngineCore_DP0 pid=387) INFO 03-08 16:44:29 [gpu_worker.py:490] In v0.19, CUDA graph memory profiling will be enabled by default (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1), which more accurately accounts for CUDA graph memory during KV cache allocation. To try it now, set VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1 and increase --gpu-memory-utilization from 0.7000 to 0.7021 to maintain the same effective KV cache size.
"""

V021_GRAPHS = """\
(EngineCore pid=4108) INFO 05-28 08:00:24 [gpu_model_runner.py:6063] Profiling CUDA graph memory: PIECEWISE=51 (largest=512), FULL=35 (largest=256)
(EngineCore pid=4108) INFO 05-28 08:00:25 [gpu_model_runner.py:6142] Estimated CUDA graph memory: 0.52 GiB total
(EngineCore pid=4108) INFO 05-28 08:00:26 [gpu_worker.py:462] Available KV cache memory: 6.37 GiB
(EngineCore pid=4108) INFO 05-28 08:00:26 [gpu_worker.py:477] CUDA graph memory profiling is enabled (default since v0.21.0). The current --gpu-memory-utilization=0.9764 is equivalent to --gpu-memory-utilization=0.9543 without CUDA graph memory profiling. To maintain the same effective KV cache size as before, increase --gpu-memory-utilization to 0.9984. To disable, set VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0.
(EngineCore pid=4108) INFO 05-28 08:00:26 [kv_cache_utils.py:1710] GPU KV cache size: 46,368 tokens
(EngineCore pid=4108) INFO 05-28 08:00:26 [kv_cache_utils.py:1711] Maximum concurrency for 16,384 tokens per request: 2.83x
(EngineCore pid=4108) INFO 05-28 08:00:31 [gpu_model_runner.py:6243] Graph capturing finished in 5 secs, took 0.49 GiB
(EngineCore pid=4108) INFO 05-28 08:00:31 [gpu_worker.py:621] CUDA graph pool memory: 0.49 GiB (actual), 0.52 GiB (estimated), difference: 0.03 GiB (6.1%).
"""

V027_CONSUMED = """\
(EngineCore pid=326) DEBUG 10-06 17:00:30 [gpu_worker.py:552] Initial free memory: 78.84 GiB; Requested memory: 0.920000 (util), 72.91 GiB
(EngineCore pid=326) DEBUG 10-06 17:00:30 [gpu_worker.py:570] Memory profiling takes 8.01 seconds. Total non KV cache memory: 16.7GiB; torch peak memory increase: 1.44GiB; total consumed (from mem_get_info): 15.26GiB; weights memory: 15.0GiB.
(EngineCore pid=326) INFO 10-06 17:00:33 [gpu_worker.py:692] Available KV cache memory: 56.21 GiB
(EngineCore pid=326) INFO 10-06 17:00:41 [gpu_worker.py:955] Free memory on device (78.84/79.25 GiB) on startup. Desired GPU memory utilization is (0.92, 72.91 GiB). Actual usage is 15.26 GiB for consumed memory (weights + non-torch), 1.44 GiB for peak activation, and 0.23 GiB for CUDAGraph memory. Replace gpu_memory_utilization config with `--kv-cache-memory=58015735603` (54.03 GiB) to fit into requested memory, or `--kv-cache-memory=64596447232` (60.16 GiB) to fully utilize gpu memory. Current kv cache memory in use is 56.21 GiB.
"""

V028_ONE_LINE = """\
(EngineCore pid=326) INFO 10-06 17:00:11 [model_runner.py:407] Model loading took 15.0 GiB memory and 5.420225 seconds
(EngineCore pid=326) INFO 10-06 17:00:33 [kv_cache_utils.py:2464] GPU KV cache size: 460,496 tokens, Maximum concurrency for 131,072 tokens per request: 3.51x
"""


@pytest.mark.parametrize("text, expected, era", [
    (V02_BLOCKS, {"num_gpu_blocks": 1464, "num_cpu_blocks": 1310}, None),
    (V04_WEIGHTS, {"weights_gib": 9.2497, "num_gpu_blocks": 76, "num_cpu_blocks": 327}, "0.6.3"),
    (V063_CONCURRENCY, {"weights_gib": 12.5523, "num_gpu_blocks": 20186, "num_cpu_blocks": 512, "max_concurrency": 78.85,
                        "max_concurrency_tokens": 4096, "startup_failed": False}, "0.6.3"),
    (V064_PROFILE, {"total_gpu_memory_gib": 47.74, "weights_gib": 38.526, "non_torch_gib": 4.09, "kv_cache_gib": 0.39,
                    "num_gpu_blocks": 80, "num_cpu_blocks": 819, "kv_cache_tokens": 1280, "max_concurrency": 0.16,
                    "max_concurrency_tokens": 8192, "startup_failed": True}, "0.6.4"),
    (V07_PROFILE, {"total_gpu_memory_gib": 7.65, "requested_memory_gib": 6.89, "weights_gib": 3.2637,
                   "non_torch_gib": 0.02, "activation_peak_gib": 1.22, "kv_cache_gib": 2.38, "num_gpu_blocks": 1395,
                   "num_cpu_blocks": 2340, "max_concurrency": 2.23, "max_concurrency_tokens": 10000,
                   "cuda_graph_gib": 0.13, "startup_failed": False}, "0.8.0"),
    (V070_CUDA_BLOCKS, {"weights_gib": 0.8008, "num_gpu_blocks": 29055, "num_cpu_blocks": 7767}, "0.7.0"),
    (V1_ALPHA, {"weights_gib": 67.7229, "num_gpu_blocks": 1381, "max_concurrency": 10.79,
                "max_concurrency_tokens": 2048}, "0.7.0"),
    (V080_V1, {"weights_gib": 14.9889, "kv_cache_tokens": 158656, "max_concurrency": 4.84,
               "max_concurrency_tokens": 32768}, "0.8.0"),
    (V0102_V1, {"total_gpu_memory_gib": 79.19, "requested_memory_gib": 71.27, "weights_gib": 14.0786,
                "non_torch_gib": 0.07, "activation_peak_gib": 1.97, "kv_cache_gib": 55.15, "kv_cache_tokens": 451744,
                "max_concurrency": 110.29, "max_concurrency_tokens": 4096, "cuda_graph_gib": 0.67,
                "startup_failed": False}, "0.9.1"),
    (V012_WEIGHTS, {"weights_gib": 1.9148, "kv_cache_gib": 25.39}, "0.12.0"),
    (V015_FORMAT_GIB, {"weights_gib": 15.0, "kv_cache_gib": 19.3, "kv_cache_tokens": 157936, "max_concurrency": 1.2,
                       "max_concurrency_tokens": 131072}, "0.15.0"),
    (V018_ESTIMATE, {"kv_cache_gib": 17.36, "cuda_graph_estimate_gib": 0.26}, "0.9.1"),
    (V021_GRAPHS, {"kv_cache_gib": 6.37, "kv_cache_tokens": 46368, "max_concurrency": 2.83,
                   "max_concurrency_tokens": 16384, "cuda_graph_gib": 0.49, "cuda_graph_estimate_gib": 0.52,
                   "startup_failed": False}, "0.9.1"),
    (V027_CONSUMED, {"total_gpu_memory_gib": 79.25, "requested_memory_gib": 72.91, "weights_gib": 15.0,
                     "activation_peak_gib": 1.44, "kv_cache_gib": 56.21, "cuda_graph_gib": 0.23}, "0.9.1"),
    (V028_ONE_LINE, {"weights_gib": 15.0, "kv_cache_tokens": 460496, "max_concurrency": 3.51,
                     "max_concurrency_tokens": 131072}, "0.28.0"),
])
def test_each_era_reads_every_figure(text, expected, era):
    parsed = parse_text(text)
    assert parsed.first.observed() == expected
    # the streaming markers give the scorer's whole-text answer
    found = era_from_markers(parsed.markers)
    assert (found[0] if found else None) == era == infer_version_from_log(text)
    assert engine_from_markers(parsed.markers) == infer_engine_from_log(text)


def test_config_line_and_non_default_args_become_settings():
    run = parse_text(V04_WEIGHTS).first
    assert run.model[0] == "/data/Qwen1.5-14B-Chat-GPTQ-int4"
    assert run.version[:2] == ("0.4.3", "config line")
    assert {name: run.setting(name) for name in ("dtype", "max_model_len", "tensor_parallel_size", "quantization",
                                                   "enforce_eager", "kv_cache_dtype")} == {
        "dtype": "float16", "max_model_len": 4096, "tensor_parallel_size": 1, "quantization": "gptq_marlin",
        "enforce_eager": False, "kv_cache_dtype": "auto"}
    v1 = parse_text(V0102_V1).first
    assert v1.engine_hint == "v1"
    assert v1.setting("enable_prefix_caching") is True and v1.setting("enable_chunked_prefill") is True
    assert v1.setting("gpu_memory_utilization") == 0.9
    args = parse_text(
        "(APIServer pid=1) INFO 07-06 22:50:34 [api_utils.py:273] non-default args: {'model_tag': "
        "'Qwen/Qwen3-8B', 'dtype': 'bfloat16', 'max_model_len': 131072, 'quantization': 'modelopt', "
        "'kv_cache_dtype': 'fp8', 'enable_prefix_caching': True, 'limit_mm_per_prompt': {'image': 2, 'audio': 0}, "
        "'max_num_batched_tokens': 8192, 'max_num_seqs': 1, 'speculative_config': {'method': 'mtp', "
        "'num_speculative_tokens': 3}, 'gpu_memory_utilization': 0.85}\n"
        "(EngineCore pid=107) INFO 07-06 22:52:09 [gpu_worker.py:508] Available KV cache memory: 5.98 GiB\n").first
    assert args.model[0] == "Qwen/Qwen3-8B"
    assert args.setting("entrypoint") == "serve"
    assert args.setting("speculative_config") == {"method": "mtp", "num_speculative_tokens": 3}
    assert (args.setting("max_model_len"), args.setting("max_num_seqs"), args.setting("gpu_memory_utilization")) == (
        131072, 1, 0.85)


def test_version_banners():
    assert parse_text("(APIServer pid=90) INFO 11-28 11:45:51 [api_server.py:1977] vLLM API server version 0.11.2\n"
                      "Available KV cache memory: 8.99 GiB\n").first.version[:2] == ("0.11.2", "server banner")
    logo = ("\x1b[1;36m(APIServer pid=1)\x1b[0;0m INFO 08-07 21:32:22 [api_utils.py:339] \n"
            "\x1b[1;36m(APIServer pid=1)\x1b[0;0m INFO 08-07 21:32:22 [api_utils.py:339]  \x1b[93m▄▄\x1b[0m "
            "\x1b[94m▄█\x1b[0m \x1b[97;1m█     █     █ ▀▄▀ █\x1b[0m  version \x1b[97;1m0.25.0\x1b[0m\n"
            "\x1b[1;36m(APIServer pid=1)\x1b[0;0m INFO 08-07 21:32:22 [api_utils.py:339]   \x1b[93m█\x1b[0m"
            "\x1b[94m▄█▀\x1b[0m \x1b[97;1m█     █     █     █\x1b[0m  model   \x1b[97;1mQwen/Qwen3-8B\x1b[0m\n"
            "(EngineCore pid=2) INFO 08-07 21:33:00 [gpu_worker.py:460] Available KV cache memory: 6.0 GiB\n")
    run = parse_text(logo).first
    assert run.version[:2] == ("0.25.0", "version banner")
    assert run.model[0] == "Qwen/Qwen3-8B"
    assert run.observed() == {"kv_cache_gib": 6.0}


@pytest.mark.parametrize("line, expected", [
    ("ValueError: To serve at least one request with the models's max seq len (116160), (4.43 GB KV cache is needed, "
     "which is larger than the available KV cache memory (3.48 GB). Try increasing `gpu_memory_utilization` or "
     "decreasing `max_model_len` when initializing the engine.", {"kv_cache_gib": 3.48, "startup_failed": True}),
    ("ValueError: To serve at least one request with the model's max seq len (30000), (6.66 GiB KV cache is needed, "
     "which is larger than the available KV cache memory (5.44 GiB). Based on the available memory, the estimated "
     "maximum model length is 13528. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
     "initializing the engine.", {"kv_cache_gib": 5.44, "startup_failed": True}),
    ("ERROR 06-12 08:12:23 worker.py:487] ValueError: No available memory for the cache blocks. Try increasing "
     "`gpu_memory_utilization` when initializing the engine.", {"startup_failed": True}),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.95 GiB. GPU 0 has a total capacity of 23.55 GiB "
     "of which 1.20 GiB is free.", {"startup_failed": True}),
    ("(EngineCore_DP0 pid=9) ValueError: Free memory on device cuda:0 (20.1/79.25 GiB) on startup is less than desired "
     "GPU memory utilization (0.92, 72.91 GiB). Decrease GPU memory utilization or reduce GPU memory used by other "
     "processes.", {"total_gpu_memory_gib": 79.25, "requested_memory_gib": 72.91, "startup_failed": True}),
])
def test_errors_mark_a_failed_start(line, expected):
    run = parse_text(line).first
    assert run.observed() == expected
    assert run.failure_message()


def test_an_error_level_line_that_is_not_a_failure():
    text = ("(EngineCore pid=9011) ERROR 03-27 12:18:33 [fa_utils.py:145] Cannot use FA version 2 is not supported due "
            "to FA2 is only supported on devices with compute capability >= 8\n" + V015_FORMAT_GIB)
    assert "startup_failed" not in observed(text)


def test_v0_zero_blocks_implies_the_failure_vllm_raises():
    text = ("INFO 01-15 11:06:48 executor_base.py:95] # CUDA blocks: 0, # CPU blocks: 87381\n"
            "INFO 01-15 11:06:48 executor_base.py:100] Maximum concurrency for 448 tokens per request: 0.00x\n")
    assert observed(text)["startup_failed"] is True


# --- prefixes, ranks, runs ---------------------------------------------------------------------------------------

TP2_V0 = """\
INFO 04-02 10:20:45 model_runner.py:1116] Loading model weights took 30.7098 GB
(VllmWorkerProcess pid=3280379) INFO 04-02 10:20:50 model_runner.py:1116] Loading model weights took 30.7098 GB
(VllmWorkerProcess pid=3280379) INFO 04-02 10:20:54 worker.py:266] the current vLLM instance can use total_gpu_memory (44.42GiB) x gpu_memory_utilization (0.90) = 39.98GiB
(VllmWorkerProcess pid=3280379) INFO 04-02 10:20:54 worker.py:266] model weights take 30.71GiB; non_torch_memory takes 0.35GiB; PyTorch activation peak memory takes 1.26GiB; the rest of the memory reserved for KV Cache is 7.66GiB.
INFO 04-02 10:20:55 worker.py:266] model weights take 30.71GiB; non_torch_memory takes 0.30GiB; PyTorch activation peak memory takes 1.26GiB; the rest of the memory reserved for KV Cache is 7.71GiB.
INFO 04-02 10:20:55 executor_base.py:108] # CUDA blocks: 3947, # CPU blocks: 2048
"""

TP4_V1 = """\
(VllmWorker TP1 pid=2012385) INFO 08-11 07:28:40 [gpu_model_runner.py:1936] Model loading took 4.1242 GiB and 2.365848 seconds
(VllmWorker TP2 pid=2012389) INFO 08-11 07:28:40 [gpu_model_runner.py:1936] Model loading took 4.1250 GiB and 2.433053 seconds
(VllmWorker TP0 pid=2012384) INFO 08-11 07:28:40 [gpu_model_runner.py:1936] Model loading took 4.5000 GiB and 2.141106 seconds
(VllmWorker TP3 pid=2012390) INFO 08-11 07:28:41 [gpu_model_runner.py:1936] Model loading took 4.1242 GiB and 2.441106 seconds
(VllmWorker TP1 pid=2012385) INFO 08-11 07:28:45 [gpu_worker.py:276] Available KV cache memory: 20.31 GiB
(VllmWorker TP0 pid=2012384) INFO 08-11 07:28:45 [gpu_worker.py:276] Available KV cache memory: 19.92 GiB
(EngineCore_0 pid=2012300) INFO 08-11 07:28:46 [kv_cache_utils.py:849] GPU KV cache size: 1,234,560 tokens
"""


def test_several_ranks_keep_their_own_figures_and_rank0_wins():
    run = parse_text(TP2_V0).first
    ranks = run.per_rank()
    assert ranks["rank 0"]["kv_cache_gib"] == 7.71 and ranks["worker pid 3280379"]["kv_cache_gib"] == 7.66
    assert ranks["worker pid 3280379"]["non_torch_gib"] == 0.35
    got = run.observed()
    assert (got["kv_cache_gib"], got["non_torch_gib"], got["weights_gib"]) == (7.71, 0.3, 30.7098)
    assert got["total_gpu_memory_gib"] == 44.42  # only the worker printed it
    v1 = parse_text(TP4_V1).first
    assert set(v1.per_rank()) == {"rank 0", "TP1", "TP2", "TP3"}
    assert v1.observed()["weights_gib"] == 4.5 and v1.observed()["kv_cache_gib"] == 19.92
    assert v1.per_rank()["TP1"] == {"weights_gib": 4.1242, "kv_cache_gib": 20.31}


def test_ray_lines_glued_together_and_repeated_markers():
    text = ("(RayWorkerWrapper pid=5057, ip=10.0.0.5) Cache shape torch.Size([163840, 64]) [repeated 30x across cluster] "
            "(RayWorkerWrapper pid=5849, ip=10.0.0.12) INFO 01-21 00:46:19 model_runner.py:1099] Loading model weights "
            "took 18.9152 GB [repeated 7x across cluster] (RayWorkerWrapper pid=5148, ip=10.0.0.13) INFO 01-21 "
            "00:46:25 model_runner.py:1099] Loading model weights took 21.4118 GB [repeated 8x across cluster]\n")
    run = parse_text(text).first
    assert len(parse_text(text).runs) == 1
    assert run.per_rank() == {"Ray worker pid 5849 (10.0.0.12)": {"weights_gib": 18.9152},
                              "Ray worker pid 5148 (10.0.0.13)": {"weights_gib": 21.4118}}
    # no rank 0 line: the largest per-GPU weights (the pipeline stage that binds)
    assert run.observed() == {"weights_gib": 21.4118}


def test_two_starts_in_one_file_are_two_runs():
    text = V07_PROFILE + "INFO 03-29 16:10:00 [api_server.py:1081] vLLM API server version 0.7.3\n" + V07_PROFILE.replace(
        "0.90", "0.80").replace("2.38GiB", "1.61GiB").replace("# cuda blocks: 1395", "# cuda blocks: 944")
    parsed = parse_text(text)
    assert len(parsed.runs) == 2
    assert parsed.runs[0].observed()["num_gpu_blocks"] == 1395
    assert parsed.runs[1].observed()["num_gpu_blocks"] == 944
    assert parsed.runs[1].observed()["kv_cache_gib"] == 1.61
    assert parsed.runs[1].setting("gpu_memory_utilization") == 0.8
    assert parsed.runs[1].version[0] == "0.7.3"
    assert parsed.runs[1].first_line > parsed.runs[0].last_line


def test_per_worker_kv_size_lines_of_one_engine_are_one_run():
    # V1 <= 0.11 logs the KV size once per worker from the engine process, without a prefix
    text = ("INFO 04-27 02:51:57 [kv_cache_utils.py:634] GPU KV cache size: 335,360 tokens INFO 04-27 02:51:57 "
            "[kv_cache_utils.py:637] Maximum concurrency for 138 tokens per request: 2430.14x INFO 04-27 02:51:57 "
            "[kv_cache_utils.py:634] GPU KV cache size: 335,168 tokens\n")
    parsed = parse_text(text)
    assert len(parsed.runs) == 1
    assert parsed.first.observed() == {"kv_cache_tokens": 335360, "max_concurrency": 2430.14,
                                       "max_concurrency_tokens": 138}


def test_timestamps_ansi_docker_and_wrapper_prefixes():
    text = ("vllm-1  | 2025-05-05T15:24:32.123Z \x1b[32mINFO\x1b[0m 05-05 15:24:32 [model_runner.py:1146] Model loading "
            "took 6.0160 GB and 533.851791 seconds\n"
            "vLLM STDOUT: INFO 05-05 15:25:32 [executor_base.py:111] # cuda blocks: 3637, # CPU blocks: 1170\r\n")
    assert observed(text) == {"weights_gib": 6.016, "num_gpu_blocks": 3637, "num_cpu_blocks": 1170}


def test_truncated_numbers_are_not_read():
    text = "# cuda blocks: 364... (cut in excerpt)\nLoading model weights took 25.0[...]\n"
    with pytest.raises(LogInputError):
        parse_stream(io.BytesIO(text.encode()))
    assert observed(text) == {}


def test_nvidia_smi_quoted_in_a_log():
    text = (V015_FORMAT_GIB + "|   0  NVIDIA L40S                    On  |   00000000:56:00.0 Off |                    0 |\n"
            "| N/A   58C    P0            259W /  350W |   45241MiB /  46068MiB |     95%      Default |\n")
    got = observed(text)
    assert (got["nvidia_smi_used_mib"], got["nvidia_smi_total_mib"]) == (45241, 46068)
    csv = (V015_FORMAT_GIB + "index, name, memory.used [MiB], memory.total [MiB]\n0, NVIDIA A100-SXM4-40GB, 36125 MiB, "
           "40960 MiB\n")
    assert observed(csv)["nvidia_smi_used_mib"] == 36125
    idle = V015_FORMAT_GIB + "index, name, memory.used [MiB], memory.total [MiB]\n0, NVIDIA L40S, 0 MiB, 46068 MiB\n"
    assert "nvidia_smi_used_mib" not in observed(idle)  # read while nothing ran: not this run's footprint


def test_launch_command_in_the_log():
    text = ("$ vllm serve Qwen/Qwen2.5-7B-Instruct-AWQ --max-model-len 32k --gpu-memory-utilization 0.5 \\\n"
            "    --tensor-parallel-size 1 --enforce-eager\n" + V015_FORMAT_GIB)
    run = parse_text(text).first
    assert run.model[:2] == ("Qwen/Qwen2.5-7B-Instruct-AWQ", "launch command")
    assert (run.setting("max_model_len"), run.setting("gpu_memory_utilization"), run.setting("enforce_eager")) == (
        131072, 0.5, True)  # the concurrency line's value wins over the command's
    assert run.settings["gpu_memory_utilization"].basis == "launch command"


# --- input handling ---------------------------------------------------------------------------------------------

def test_binary_and_empty_input_are_one_clear_error():
    with pytest.raises(LogInputError, match="binary"):
        parse_stream(io.BytesIO(b"\x00\x01\x02garbage" * 100), "x.bin")
    with pytest.raises(LogInputError, match="binary"):
        parse_stream(io.BytesIO(b"\x1f\x8b\x08\x00" + bytes(range(256)) * 10), "x.log.gz")
    with pytest.raises(LogInputError, match="empty"):
        parse_stream(io.BytesIO(b""), "empty.log")
    with pytest.raises(LogInputError, match="empty"):
        parse_stream(io.BytesIO(b"\n \n\t\n"), "blank.log")
    with pytest.raises(LogInputError, match="no vLLM memory lines"):
        parse_stream(io.BytesIO(b"hello\nworld\n"), "notes.txt")


def test_invalid_utf8_inside_a_text_log_is_tolerated():
    data = b"Loading model weights took 5.2048 GB\n\xff\xfe stray bytes \xc3\n# GPU blocks: 4556\n"
    assert parse_stream(io.BytesIO(data)).first.observed() == {"weights_gib": 5.2048, "num_gpu_blocks": 4556}


class _HugeStream:
    """A 1 GiB log that is generated as it is read: one endless line without a newline, then two real lines."""

    def __init__(self, size: int = 1 << 30) -> None:
        self.left = size
        self.block = b"x" * (1 << 20)
        self.tail = b"\nLoading model weights took 5.2048 GB\n# GPU blocks: 4556\n"

    def read(self, size: int = -1) -> bytes:
        if self.left > 0:
            piece = self.block[:min(size, self.left)]
            self.left -= len(piece)
            return piece
        piece, self.tail = self.tail[:size], self.tail[size:]
        return piece


def test_a_1_gib_log_is_streamed_not_loaded():
    tracemalloc.start()
    try:
        parsed = parse_stream(_HugeStream(), "huge.log")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert parsed.bytes_read > 1 << 30
    assert parsed.truncated_lines == 1
    assert parsed.first.observed() == {"weights_gib": 5.2048, "num_gpu_blocks": 4556}
    assert peak < 64 << 20, f"peak {peak / 2**20:.0f} MiB"


def test_line_reader_handles_crlf_cr_and_chunk_boundaries():
    data = ("a\r\nb\rc\n" + ("é" * 999 + "\n") * 700 + "last").encode()
    lines = list(LineReader(io.BytesIO(data)))
    assert lines[:3] == ["a", "b", "c"] and lines[-1] == "last"
    assert lines[3:703] == ["é" * 999] * 700  # one multi-byte character is split across the 1 MiB chunks
    long = b"y" * (MAX_LINE_CHARS + 10) + b"\nz\n"
    reader = LineReader(io.BytesIO(long))
    assert [len(line) for line in reader] == [MAX_LINE_CHARS, 1] and reader.truncated == 1


def test_observed_from_log_is_the_first_run():
    assert observed_from_log(V02_BLOCKS + V02_BLOCKS.replace("1464", "112")) == {"num_gpu_blocks": 1464,
                                                                                  "num_cpu_blocks": 1310}


def test_format_markers_match_the_whole_text_functions_line_by_line():
    markers = FormatMarkers()
    for line in (V1_ALPHA + V07_PROFILE).splitlines():
        markers.feed(line)
    assert era_from_markers(markers)[0] == infer_version_from_log(V1_ALPHA + V07_PROFILE)
