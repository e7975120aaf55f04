"""Issues 30 and 31, values checked at the edge, through the command line (a subprocess running this tree's
src/, bounded by a timeout): simulate traces and workloads, every engine's whole-number flags, and inputs that
ended in an internal error (exit 3) or an impossible answer reported as a start (exit 0)."""
from __future__ import annotations

import json

import pytest

from test_hostile_regressions import _cli

QWEN = ("Qwen/Qwen3-8B", "--gpu", "H100")


def _trace(tmp_path, *rows, raw: str = "") -> str:
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows) + raw)
    return f"trace:{path}"


GOOD = {"timestamp": 1, "prompt_tokens": 100, "output_tokens": 20}


@pytest.mark.parametrize("row, words", [
    ('{"timestamp": -Infinity, "prompt_tokens": 10, "output_tokens": 5}', "timestamp must be finite"),  # ran 60 s+
    ('{"timestamp": NaN, "prompt_tokens": 10, "output_tokens": 5}', "timestamp must be finite"),
    ('{"timestamp": 0, "prompt_tokens": -1000000000000, "output_tokens": 5}',
     "prompt_tokens must be a whole number from 1"),  # was "list index out of range"
    ('{"timestamp": 0, "prompt_tokens": 1e300, "output_tokens": 5}', "prompt_tokens must be a whole number"),
    ('{"timestamp": 0, "prompt_tokens": true, "output_tokens": 5}', "prompt_tokens must be a whole number"),
    ('{"timestamp": 0, "prompt_tokens": 10, "output_tokens": 5, "prefix_tokens": 11}', "prefix_tokens 11 is more"),
    ("[" * 5000 + "]" * 5000, "nested deeper than"),  # was exit 3 (RecursionError)
    ('"just a string"', "not an object"),
])
def test_a_bad_trace_line_is_one_line_and_exit_2(tmp_path, row, words):
    outcome = _cli("simulate", *QWEN, "--workload", _trace(tmp_path, GOOD, raw=row + "\n"), timeout=30)
    assert outcome.code == 2, outcome.err
    assert words in outcome.one_line() and "trace.jsonl:2" in outcome.one_line()


def test_a_trace_over_the_request_limit_is_refused_with_the_flag(tmp_path):
    rows = "".join(json.dumps({"timestamp": i, "prompt_tokens": 10, "output_tokens": 2}) + "\n" for i in range(120))
    path = tmp_path / "t.jsonl"
    path.write_text(rows)
    outcome = _cli("simulate", *QWEN, "--workload", f"trace:{path}", "--max-requests", "100", timeout=30)
    assert outcome.code == 2
    assert "more than 100 requests" in outcome.one_line() and "--max-requests" in outcome.one_line()
    assert _cli("simulate", *QWEN, "--workload", f"trace:{path}", "--max-requests", "120", "--json",
                timeout=60).code == 0


def test_a_large_open_loop_is_refused_before_it_runs():
    """rate x duration past the default cap (100,000 requests) was minutes of silent work."""
    outcome = _cli("simulate", *QWEN, "--workload", "chat:rate=1000,duration=1000", timeout=30)
    assert outcome.code == 2
    assert "more than 100,000 requests" in outcome.one_line()


@pytest.mark.parametrize("workload, extra, words", [
    ("chat:burst=inf", (), "workload option burst must be from 0 to"),
    ("chat:rate=nan", (), "workload option rate must be from 0 to"),
    ("chat:users=-3", (), "workload option users must be from 0 to"),
    ("chat:requests=3", ("--cost", "decode=0,seq=0,prefill=0"), "--cost decode must be a finite number > 0"),
    ("chat:requests=3", ("--cost", "decode=0.01,prefill=inf"), "--cost prefill must be a finite number > 0"),
])
def test_workload_and_cost_values_are_checked(workload, extra, words):
    outcome = _cli("simulate", *QWEN, "--workload", workload, *extra, timeout=30)
    assert outcome.code == 2, outcome.err
    assert words in outcome.one_line()


def test_sglang_without_chunked_prefill_simulates():
    """--chunked-prefill-size -1 turns chunking off in SGLang; the simulator spun forever on it."""
    outcome = _cli("simulate", *QWEN, "--engine", "sglang", "--chunked-prefill-size", "-1",
                   "--workload", "chat:requests=2", "--json", timeout=60)
    assert outcome.code == 0, outcome.err
    assert json.loads(outcome.out)["result"]["finished"] == 2


@pytest.mark.parametrize("engine, flags, words", [
    ("sglang", ("--context-length", "0"), "--context-length must be from 1"),  # was ZeroDivisionError, exit 3
    ("sglang", ("--context-length", "-2"), "--context-length must be from 1"),  # was a start with negative KV
    ("sglang", ("--chunked-prefill-size", "1000000000000"), "--chunked-prefill-size must be from 1"),  # hung
    ("sglang", ("--chunked-prefill-size", "-5"), "or 0 or -1"),
    ("sglang", ("--max-running-requests", "0"), "--max-running-requests must be from 1"),
    ("sglang", ("--page-size", "0"), "--page-size must be from 1"),
    ("sglang", ("--mem-fraction-static", "5"), "--mem-fraction-static must be a fraction"),
    ("sglang", ("--kv-cache-dtype", "bogus"), "not a KV cache dtype"),  # KeyError, 266 of 100,000 fuzz cases
    ("llamacpp", ("-np", "0"), "-np/--parallel must be from 1"),  # was ZeroDivisionError
    ("llamacpp", ("-b", "-5"), "-b/--batch-size must be from 1"),
    ("llamacpp", ("-ub", "-1"), "-ub/--ubatch-size must be from 1"),
    ("llamacpp", ("-c", "-4096"), "-c/--ctx-size must be from 0"),
    ("llamacpp", ("-c", "9" * 40), "-c/--ctx-size must be from 0 to 4,294,967,296, got a 40-digit number"),
    ("ollama", ("--num-parallel", "-2"), "--num-parallel must be from 0"),  # was -2.5 GiB of KV, exit 0
    ("ollama", ("--num-batch", "-2"), "--num-batch must be from 1"),
    ("ollama", ("--num-ctx", "-1"), "--num-ctx must be from 0"),
])
def test_engine_counts_out_of_range_are_exit_2_naming_the_flag(engine, flags, words):
    outcome = _cli("explain", *QWEN, "--engine", engine, *flags, timeout=60)
    assert outcome.code == 2, outcome.err
    assert words in outcome.one_line()


def test_sglang_speculative_draft_tokens_on_a_hybrid_model_is_answered():
    """Qwen3-Next with EAGLE and 256 draft tokens was a TypeError (exit 3): SGLang's answer is that it does not
    fit one H100 (exit 1), with the reason."""
    outcome = _cli("explain", "Qwen/Qwen3-Next-80B-A3B-Instruct", "--gpu", "H100", "--engine", "sglang",
                   "--speculative-algorithm", "EAGLE", "--speculative-num-draft-tokens", "256", timeout=60)
    assert outcome.code in (0, 1), outcome.err
    assert "internal error" not in outcome.err
