"""Issue 30/31: logs on standard input with millions of bare "\r" or blank CRLF lines. A run of blank lines is
read in one step (LineReader's collapse_blank) while line numbers stay exact, and the Ollama detector no longer
scans every blank line after each one (a \\s* at every line start: quadratic, 200,000 CRLF lines > 300 s)."""
from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

from vram_detective.engines.ollama.log_parser import _PS_HEADER, is_ollama_log
from vram_detective.engines.vllm.logs.reader import parse_stream
from vram_detective.textlog import LineReader

SRC = str(Path(__file__).resolve().parents[1] / "src")
WEIGHTS = b"INFO 05-01 10:00:00 worker.py:1 Loading model weights took 5.2048 GB\n"


def test_a_run_of_blank_lines_is_one_step_and_the_line_numbers_stay_exact():
    data = b"\r" * 1_000_000 + WEIGHTS + b"\r\n" * 1000 + b"# GPU blocks: 4556, # CPU blocks: 2048\n"
    lines = list(LineReader(io.BytesIO(data), collapse_blank=True))
    # one "" a run in each read (the 8 KiB sniff, then 1 MiB chunks), not a million
    assert lines == ["", "", WEIGHTS.decode().strip(), "", "# GPU blocks: 4556, # CPU blocks: 2048"]
    parsed = parse_stream(io.BytesIO(data), "stdin")
    figures = {figure.key: figure for figure in parsed.first.figures}
    assert figures["weights_gib"].line == 1_000_001 and figures["weights_gib"].value == 5.2048
    assert figures["num_gpu_blocks"].line == 1_000_001 + 1000 + 1 and figures["num_gpu_blocks"].value == 4556


def test_every_line_is_still_yielded_without_the_option():
    assert list(LineReader(io.BytesIO(b"a\r\r\n\nb\n"))) == ["a", "", "", "b"]
    assert list(LineReader(io.BytesIO(b"a\r\r\n\nb\n"), collapse_blank=True)) == ["a", "", "b"]


def test_the_ollama_ps_header_is_one_line():
    assert _PS_HEADER.search("\r\n\r\n  NAME   ID   SIZE   PROCESSOR   UNTIL\n") is not None
    # \s spanned line breaks: a NAME at the end of one line and ID on the next read as the header
    assert _PS_HEADER.search("NAME\nID\nSIZE\nPROCESSOR\n") is None
    assert not is_ollama_log("\r\n" * 200_000)


def test_standard_input_of_blank_lines_is_one_line_answer():
    done = subprocess.run([sys.executable, "-m", "vram_detective", "logs", "-"], input=b"\r\n" * 2_000_000,
                          capture_output=True, env=dict(os.environ, PYTHONPATH=SRC), timeout=300)
    assert done.returncode == 2
    assert done.stderr.decode().strip().splitlines() == ["vram-detective: error: standard input is empty"]
