"""Issue 23: one refusal type for every engine (exit 1 everywhere, with the engine's words), exit 3 for a bug
inside the tool, and the bugs that hid behind the old mapping (each a behaviour test)."""
from __future__ import annotations

import json

import pytest

from vram_detective import api
from vram_detective.cli import main
from vram_detective.errors import EngineRefused, http_status, kind

# llama.cpp refuses a quantized V cache without flash attention (llama-context.cpp, every modelled build)
LLAMACPP_REFUSING = ["Qwen/Qwen3-8B", "--engine", "llamacpp", "--gpu", "4090", "-c", "8192", "-ctv", "q8_0",
                     "-fa", "off"]
REFUSAL_TEXT = "llama.cpp would refuse to start: V cache quantization (q8_0) requires flash_attn"


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("command, extra", [("explain", ()), ("whatif", ()), ("fit", ("--context", "8k")),
                                            ("simulate", ("--workload", "chat:rate=1,duration=20"))])
def test_a_llamacpp_refusal_is_exit_1_with_its_words_on_every_command(capsys, command, extra):
    code, out, err = _run(capsys, command, *LLAMACPP_REFUSING, *extra)
    assert (code, err.strip()) == (1, REFUSAL_TEXT)
    assert out == ""  # not "nothing fits" (fit) nor a table: the refusal is the answer


def test_the_library_raises_the_same_refusal_type_for_every_engine():
    with pytest.raises(EngineRefused) as caught:
        api.explain("Qwen/Qwen3-8B", "4090", engine="llamacpp", n_ctx=8192, type_v="q8_0", flash_attn="off")
    assert caught.value.sentence() == REFUSAL_TEXT
    assert (kind(caught.value), http_status(caught.value)) == ("refused", 422)


def test_a_lookup_failing_inside_the_tool_is_not_bad_input():
    assert kind(KeyError("rule")) == "bug" and kind(IndexError("list index out of range")) == "bug"
    assert http_status(IndexError()) == 500


def test_simulate_llamacpp_runs_and_answers(capsys):
    """Was: IndexError in series.Histogram.set (a pool of fewer cells than slots: n_ctx / np = 0 cells), shown
    as exit 2 'list index out of range'. Now a pool too small for one cell per slot refuses its requests."""
    code, out, err = _run(capsys, "simulate", "Qwen/Qwen3-8B", "--engine", "llamacpp", "--gpu", "4090",
                          "--workload", "chat:rate=1,duration=30", "--json")
    assert (code, err) == (0, "")
    report = json.loads(out)
    assert report["engine"] == "llamacpp" and report["result"]["requests"] > 0
    assert report["result"]["finished"] == report["result"]["requests"]
    assert report["fit"]["lever"] == "n_ctx" and report["verdict"].startswith("your traffic ")


def test_the_llamacpp_simulator_refuses_requests_when_a_slot_holds_no_cell():
    from vram_detective.simulate import parse_workload, pool_from_breakdown, simulate

    b = api.explain("Qwen/Qwen3-8B", "4090", engine="llamacpp", n_ctx=4096, n_parallel=4)
    pool = pool_from_breakdown(b).with_blocks(2)  # 2 cells over 4 slots: 0 cells each
    result = simulate(pool, parse_workload("chat:rate=1,duration=10"))
    assert result.finished == 0 and result.requests > 0 and result.peak_blocks == 0
    assert any("refused" in note for note in result.notes)


def test_sglang_simulate_verdict_does_not_contradict_itself(capsys):
    """Was: 'peaks at 5.0 GiB of the 50.0 GiB pool; no --mem-fraction-static value gives a pool of 35330
    blocks' (the search started at 0.99, where SGLang refuses for lack of room for CUDA graphs)."""
    code, out, _ = _run(capsys, "simulate", "Qwen/Qwen3-8B", "--engine", "sglang", "--gpu", "H100",
                        "--workload", "chat:rate=1,duration=60", "--json")
    report = json.loads(out)
    fit = report["fit"]
    assert code == 0 and fit["feasible"] is True and "no --mem-fraction-static" not in report["verdict"]
    assert 0.05 < fit["value"] < 0.95 and fit["pool_bytes"] >= fit["needed_bytes"]
    assert f"--mem-fraction-static {fit['value']}" in report["verdict"]


@pytest.mark.parametrize("engine, extra", [("llamacpp", ()), ("ollama", ("--gguf-type", "Q4_K_M"))])
def test_explain_tensors_for_gguf_engines(capsys, engine, extra):
    """Was: exit 3 ('list' object has no attribute 'groups')."""
    code, out, err = _run(capsys, "explain", "Qwen/Qwen3-8B", "--engine", engine, *extra, "--gpu", "4090",
                          "--tensors", "--json")
    assert (code, err) == (0, "")
    groups = {group["name"]: group for group in json.loads(out)["tensors"]}
    assert groups["blk.{0..35}.attn_q.weight"] == {"name": "blk.{0..35}.attn_q.weight", "count": 36,
                                                   "shape": [4096, 4096], "dtype": "Q4_K",
                                                   "bytes": 36 * 4096 * 4096 // 256 * 144, "role": "attention"}
    assert groups["output.weight"]["role"] == "lm_head"
    assert groups["blk.{0..35}.attn_output.weight"]["role"] == "attention"
