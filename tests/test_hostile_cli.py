"""Issue 17, the command line: every error is one line on stderr with its exit code (1 the engine would refuse,
2 bad input, 3 a bug: "please report"), never a traceback; impossible setups are refused as vLLM would."""
from __future__ import annotations

import json
import struct

import pytest

from vram_detective.cli import main
from vram_detective.errors import EXIT_BAD_INPUT, EXIT_BUG, EXIT_REFUSED, EngineRefused, NotFound, run_guarded

QWEN = ("explain", "Qwen/Qwen3-8B", "--gpu", "H100")


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as stop:  # argparse's own usage errors (one line too: cli._Parser)
        code = stop.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize("argv, words", [
    # numbers too big to convert (were OverflowError tracebacks)
    (QWEN + ("--max-model-len", "9" * 400), "400 digits"),
    (QWEN + ("--cpu-offload-gb", "inf"), "--cpu-offload-gb inf: more GiB than vLLM can count"),
    (("fit", "Qwen/Qwen3-8B", "--gpu", "H100", "--context", "4k", "--concurrency", "1e308"),
     "more than any GPU's KV cache holds"),
    (QWEN + ("--speculative-config", '{"method": "ngram", "num_speculative_tokens": 1e999, "prompt_lookup_max": 3}'),
     "num_speculative_tokens must be a whole number, got inf"),
    # "must be a positive amount" for an amount that is positive
    (("explain", "Qwen/Qwen3-8B", "--gpu-memory", "1e300GiB"), "more than any GPU holds"),
    # impossible setups that were reported as starting
    (QWEN + ("--num-gpu-blocks-override", "99999999999999999999"), "does not fit in a 64-bit integer"),
    (QWEN + ("--kv-cache-memory-bytes", "1e20"), "more than any GPU holds"),
    (QWEN + ("--vllm-version", "9.9"), "newer than the newest modelled release (known releases: 0.3.0 to 0."),
    (QWEN + ("--cpu-offload-gb", "-1"), "--cpu-offload-gb must be non-negative"),
    (QWEN + ("--swap-space", "nan"), "--swap-space must be non-negative"),
    (("fit", "Qwen/Qwen3-8B", "--gpu", "H100", "-tp", "2", "--gpus", "1", "--context", "4k"),
     "-tp 2 x -pp 1 needs 2 GPUs but --gpus is 1"),
    (("fit", "Qwen/Qwen3-8B", "--gpu", "H100", "--context", "4k", "--concurrency", "nan"), "positive number"),
])
def test_hostile_flags_are_one_line_and_exit_2(capsys, argv, words):
    code, out, err = _run(capsys, *argv)
    assert code == EXIT_BAD_INPUT
    assert words in _one_line(err)
    assert len(_one_line(err)) < 500  # a 400-digit value is not echoed whole


def test_a_gguf_with_no_kv_heads_is_bad_input(tmp_path, capsys):
    def text(value: str) -> bytes:
        return struct.pack("<Q", len(value)) + value.encode()

    def entry(key: str, kind: int, packed: bytes) -> bytes:
        return text(key) + struct.pack("<I", kind) + packed

    metadata = [entry("general.architecture", 8, text("llama"))] + [
        entry(f"llama.{key}", 4, struct.pack("<I", value)) for key, value in (
            ("block_count", 2), ("embedding_length", 256), ("attention.head_count", 4),
            ("attention.head_count_kv", 0), ("feed_forward_length", 512), ("vocab_size", 1000))]
    path = tmp_path / "m.gguf"
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, len(metadata)) + b"".join(metadata) + b"\0" * 64)
    code, _, err = _run(capsys, "explain", str(path), "--gpu", "H100")
    assert code == EXIT_BAD_INPUT
    assert "head_count_kv is 0" in _one_line(err)


@pytest.mark.parametrize("argv, words", [
    # a pool the GPU cannot hold: vLLM takes the size as given and torch's allocation fails
    (QWEN + ("--num-gpu-blocks-override", "99999999999999"), "CUDA out of memory. Tried to allocate 219726562500.00 GiB"),
    (QWEN + ("--kv-cache-memory-bytes", "70GiB"), "Tried to allocate 70.00 GiB for the KV cache (31,857 blocks)"),
    # vLLM's own KV layout refusal (kv_cache_utils.py unify_kv_cache_spec_page_size), was a NotImplementedError
    (("explain", "google/gemma-4-31B-it", "--gpu", "H100", "--vllm-version", "0.20.0", "--kv-cache-dtype",
      "int8_per_token_head"), "The page size of the layer is not divisible by the maximum page size"),
    (("explain", "google/gemma-4-31B-it", "--gpu", "H100", "--vllm-version", "0.20.0", "--kv-cache-dtype",
      "int4_per_token_head"), "int4_per_token_head does not exist before vLLM 0.25.0"),
])
def test_setups_vllm_refuses_exit_1_with_its_reason(capsys, argv, words):
    code, out, err = _run(capsys, *argv)
    assert code == EXIT_REFUSED
    assert words in out + err  # a refusal at configuration goes to stderr, a startup failure in the table


def test_a_pool_that_fits_still_starts(capsys):
    code, out, _ = _run(capsys, *QWEN, "--kv-cache-memory-bytes", "60GiB", "--json")
    assert code == 0
    assert json.loads(out)["kv_cache_tokens"] == 436_896


def test_an_unexpected_exception_is_one_line_asking_for_a_report(capsys):
    def broken(argv):
        return 1 // 0

    assert run_guarded(broken, []) == EXIT_BUG
    line = _one_line(capsys.readouterr().err)
    assert line.startswith("vram-detective: internal error (ZeroDivisionError: integer division or modulo by zero)")
    assert "please report" in line


def test_a_lookup_failing_inside_the_tool_is_a_bug_not_bad_input(capsys):
    """Issue 23: a bare KeyError / IndexError escaping a command is the tool's own lookup failing (exit 3);
    only a lookup of something the user named (errors.NotFound: model, GPU, engine) is bad input."""
    def missing(argv):
        raise KeyError("max_position_embeddings")

    assert run_guarded(missing, []) == EXIT_BUG
    assert _one_line(capsys.readouterr().err).startswith(
        "vram-detective: internal error (KeyError: 'max_position_embeddings')")

    def out_of_range(argv):
        return [][0]

    assert run_guarded(out_of_range, []) == EXIT_BUG
    assert "IndexError" in _one_line(capsys.readouterr().err)

    def unknown(argv):
        raise NotFound("unknown model 'nobody/nothing'")

    assert run_guarded(unknown, []) == EXIT_BAD_INPUT
    assert _one_line(capsys.readouterr().err).endswith("vram-detective: error: unknown model 'nobody/nothing'")


def test_any_engines_refusal_is_exit_1_with_the_engines_words(capsys):
    class Refusal(EngineRefused, RuntimeError):
        engine_label = "SGLang"

    def refuses(argv):
        raise Refusal("Not enough memory. Please try to increase --mem-fraction-static.")

    assert run_guarded(refuses, []) == EXIT_REFUSED
    assert _one_line(capsys.readouterr().err) == ("SGLang would refuse to start: Not enough memory. Please try to "
                                                  "increase --mem-fraction-static.")
