"""Hostile inputs, timed: each must fail (or pass) with one line, in bounded time and memory.

    PYTHONPATH=src python3 benchmarks/hostile.py [--quick]

Prints one row per input: seconds, peak traced memory (tracemalloc, MiB) and what came back (the figures
read, or the error's class and first words). Nothing is asserted here (tests/test_hostile_*.py assert the
behaviour); the figures show how far from the limits each input stays. No network: the Hub rows use a local
server on 127.0.0.1.
"""
from __future__ import annotations

import io
import os
import struct
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

QUICK = "--quick" in sys.argv


def timed(label: str, work) -> None:
    tracemalloc.start()
    started = time.perf_counter()
    try:
        outcome = work()
        what = "ok " + str(outcome)[:70]
    except Exception as error:  # the row shows what escaped, whatever it is
        what = f"{type(error).__name__}: {str(error).splitlines()[0][:70] if str(error) else ''}"
    seconds = time.perf_counter() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"{seconds:8.3f} s {peak / 2**20:8.1f} MiB  {label:<48} {what}")


def log_rows() -> None:
    from vram_detective.forensics.parser import MAX_LINE_CHARS, parse_stream

    def parse(line: str):
        return lambda: parse_stream(io.BytesIO(line.encode()), "hostile.log").first.observed()

    digits = "1" * 40_000
    print(f"-- logs (lines are cut at MAX_LINE_CHARS = {MAX_LINE_CHARS:,} characters)")
    timed("40,000 digits + ' GiB for weight, x GiB for peak'", parse(digits + " GiB for weight, x GiB for peak activation\n"))
    timed("1 MiB of digits + ' GiB for peak activation'", parse("1" * (1 << 20) + " GiB for peak activation\n"))
    units = ["1", "1.", " ", "(a ", "(a" + " " * 50, "INFO 01-01 00:00:00 ", "'max_model_len': [", "NVIDIA ",
             "| 0 a ", "/", "a.", "A.", "GiB for ", "[repeated", "x" * 40 + ":", "1 MiB / "]
    for unit in units:
        body = unit * (MAX_LINE_CHARS // len(unit) + 1)
        timed(f"line of {unit!r} x {len(body) // len(unit):,}",
              parse("Loading model weights took 5.2 GB\nnon-default args: {" + body + " GiB for peak activation\n"))
    if not QUICK:
        timed("500 lines of 40,000 digits + ' GiB for peak activation'",
              parse((digits + " GiB for peak activation\n") * 500))


def main() -> None:
    log_rows()
    for name in ("gguf_rows", "safetensors_rows", "local_rows", "hub_rows", "smi_rows"):
        rows = globals().get(name)
        if rows is not None:
            rows()


if __name__ == "__main__":
    main()
