"""`vram-detective explain MODEL --tensors`: the tensor groups each rank holds, as a table and in --json."""
from __future__ import annotations

import json

from vram_detective import cli
from vram_detective.engines.vllm.weights import TensorGroup
from vram_detective.render import render_tensors


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_json_lists_the_groups_and_they_add_up(capsys):
    code, out, _ = run(capsys, "explain", "Qwen/Qwen2.5-7B-Instruct-AWQ", "--gpu", "RTX 4090", "--vllm-version", "0.26.0",
                       "--max-model-len", "8192", "--tensors", "--json")
    assert code == 0
    data = json.loads(out)
    tensors = data["tensors"]
    names = {t["name"] for t in tensors}
    assert "model.layers.{0..27}.self_attn.qkv_proj.qweight" in names
    assert {t["role"] for t in tensors} >= {"embedding", "attention", "mlp", "quantization metadata", "rotary cache"}
    assert all(set(t) == {"name", "count", "shape", "dtype", "bytes", "role"} for t in tensors)
    # the groups are the weights without the caching allocator's block rounding (a few MiB here)
    listed = sum(t["bytes"] for t in tensors)
    assert 0 <= data["weights_gib"] * 2**30 - listed < 0.1 * 2**30


def test_text_table_per_pipeline_stage(capsys):
    code, out, _ = run(capsys, "explain", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "A100-80G", "-pp", "2",
                       "--max-model-len", "8192", "--tensors")
    assert code == 0
    assert "pipeline stage 0" in out and "pipeline stage 1" in out
    assert "tensor (per rank)" in out and "lm_head.weight" in out


def test_markdown_and_no_gpu(capsys):
    code, out, _ = run(capsys, "explain", "Qwen/Qwen3-8B", "--gpu", "H100", "--tensors", "--markdown")
    assert code == 0 and "| tensor (per rank) |" in out
    code, _, err = run(capsys, "explain", "Qwen/Qwen3-8B", "--tensors")
    assert code == 2 and "--tensors needs a GPU" in err


def test_render_tensors_by_hand():
    groups = [TensorGroup("model.layers.{0..1}.mlp.down_proj.weight", 2, (4096, 14336), "bfloat16", 4096 * 14336 * 2, "mlp"),
              TensorGroup("model.norm.weight", 1, (4096,), "bfloat16", 8192, "norm")]
    text = render_tensors(groups, title="t")
    assert text.splitlines()[0] == "t"
    assert "224.00 MiB" in text  # 2 tensors x 4096 x 14336 x 2 B = 234,881,024 B
    assert "234,889,216 B" in text  # total with the norm: + 4096 x 2 B = 8,192 B
