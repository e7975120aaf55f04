"""--decode-context-parallel-size / -dcp: the flag, the releases that have it, and what it does to the KV pool."""
import pytest

from vram_detective import explain
from vram_detective.engines.vllm.launch import parse_launch_line
from vram_detective.engines.vllm.settings import SettingsError, StartupRefusal

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def test_launch_line_reads_both_spellings():
    assert parse_launch_line("vllm serve m -tp 4 -dcp 2").settings == {"tensor_parallel_size": 4,
                                                                     "decode_context_parallel_size": 2}
    line = parse_launch_line("vllm serve m --decode-context-parallel-size=4")
    assert line.settings["decode_context_parallel_size"] == 4 and not line.ignored


def test_dcp_multiplies_kv_tokens_not_blocks():
    # 0.11.0 (get_kv_cache_config_from_groups): the same pages per rank, each rank keeps 1/dcp of every
    # sequence -> tokens x dcp; the dcp ranks are the TP ranks (no extra GPUs, same weights per rank)
    base = explain(MODEL, "H100", vllm_version="0.11.0", tensor_parallel_size=2, max_model_len=32768)
    dcp = explain(MODEL, "H100", vllm_version="0.11.0", tensor_parallel_size=2, max_model_len=32768,
                  decode_context_parallel_size=2)
    assert dcp.num_gpu_blocks == base.num_gpu_blocks and dcp.weights_bytes == base.weights_bytes
    assert dcp.kv_cache_tokens == 2 * base.kv_cache_tokens
    assert "Multiplying the GPU KV cache size by the dcp_world_size 2." in dcp.log_lines


def test_dcp_exists_from_0_10_2_and_divides_tp():
    with pytest.raises(SettingsError, match="0.10.2"):
        explain(MODEL, "H100", vllm_version="0.10.1", tensor_parallel_size=2, decode_context_parallel_size=2)
    with pytest.raises(StartupRefusal, match="must be divisible by"):
        explain(MODEL, "H100", vllm_version="0.11.0", tensor_parallel_size=2, decode_context_parallel_size=4)
    # dcp 1 is the default everywhere
    assert explain(MODEL, "H100", vllm_version="0.6.4", decode_context_parallel_size=1).num_gpu_blocks > 0
