"""Size flags take vLLM's own unit when no suffix is given: --kv-cache-memory-bytes is bytes
(human_readable_int: 8G = 8 GiB, 8g = 8e9), --swap-space and --cpu-offload-gb are GiB (floats)."""
from __future__ import annotations

import json

import pytest

from vram_detective.cli import main
from vram_detective.engines.vllm.launch import LaunchLineError, parse_launch_line

GIB = 1 << 30

# 72 MiB = 32 blocks of Qwen3-8B (36 layers x 8 KV heads x 128 x bf16 x 16 tokens = 2,359,296 B per block)
QWEN3_8B_32_BLOCKS = "75497472"


@pytest.mark.parametrize(("raw", "expected"), [
    ("75497472", 75_497_472), ("8G", 8 * GIB), ("8g", 8 * 10**9), ("25.6k", 25_600), ("1K", 1024),
    ("8GiB", 8 * GIB), ("8GB", 8 * 10**9), ("8192MiB", 8 * GIB),
])
def test_kv_cache_memory_bytes_in_vllm_units(raw, expected):
    assert parse_launch_line(f"vllm serve m --kv-cache-memory-bytes {raw}").settings["kv_cache_memory_bytes"] == expected
    assert parse_launch_line(f"vllm serve m --kv-cache-memory={raw}").settings["kv_cache_memory_bytes"] == expected


@pytest.mark.parametrize("raw", ["1.5G", "0", "-8", "lots"])
def test_kv_cache_memory_bytes_refusals(raw):
    with pytest.raises(LaunchLineError):
        parse_launch_line(["vllm", "serve", "m", "--kv-cache-memory-bytes", raw])


def test_swap_space_and_cpu_offload_are_gib():
    settings = parse_launch_line("vllm serve m --swap-space 4 --cpu-offload-gb 2.5").settings
    assert settings["swap_space"] == 4.0 and settings["cpu_offload_gb"] == 2.5


def _explain_json(capsys, *argv: str) -> dict:
    assert main(["explain", "Qwen/Qwen3-8B", "--gpu", "H100", "--json", *argv]) in (0, 1)
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("where", ["flag", "pasted"])
def test_bare_kv_cache_memory_is_bytes(capsys, where):
    """The issue's command printed 549,755,813,888 tokens (75497472 read as GiB); 72 MiB holds 512 tokens."""
    own = ["--vllm-version", "0.28.0"]
    line = ["--kv-cache-memory-bytes", QWEN3_8B_32_BLOCKS, "--max-model-len", "512"]
    argv = own + line if where == "flag" else own + ["--", "vllm", "serve", "Qwen/Qwen3-8B", *line]
    out = _explain_json(capsys, *argv)
    assert out["kv_cache_tokens"] == 512
