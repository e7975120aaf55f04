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


def _outcome(work) -> str:
    try:
        return "ok " + str(work())[:70]
    except Exception as error:  # the row shows what escaped, whatever it is
        return f"{type(error).__name__}: {str(error).splitlines()[0][:70] if str(error) else ''}"


def timed(label: str, work) -> None:
    """Seconds of one plain run, then the peak of a second run under tracemalloc (which slows Python)."""
    started = time.perf_counter()
    what = _outcome(work)
    seconds = time.perf_counter() - started
    tracemalloc.start()
    _outcome(work)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"{seconds:8.3f} s {peak / 2**20:8.1f} MiB  {label:<48} {what}")


def log_rows() -> None:
    from vram_detective.engines.vllm.logs.reader import MAX_LINE_CHARS, parse_stream

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


def throughput_rows() -> None:
    """`logs` lines per second on a large log made of the real dev logs' lines repeated (dense in figure lines:
    every startup line group), read as `logs` reads it (streaming.parse_stream_bounded). The keyword prefilter
    (one trie regex for the gate, one substring list naming the patterns to try) took LogParser.feed from
    22,700 to 26,200 dense lines/s (best of 3, interleaved, on a shared 2-core machine; ~200,000 noise
    lines/s either way); outputs identical. Most of what is left is per record: splitting, the header and
    prefix regexes, format markers and the handlers."""
    import json

    from vram_detective.forensics.streaming import parse_stream_bounded

    root = Path(__file__).resolve().parents[1]
    logs = []
    for name in ("dev.jsonl", "dev-vllm-more.jsonl"):
        for line in (root / "groundtruth" / name).read_text(encoding="utf-8").splitlines():
            text = json.loads(line).get("log")
            if text:
                logs.append(text.rstrip("\n") + "\n")
    text = "".join(logs)
    rounds = max(1, (30_000 if QUICK else 300_000) // text.count("\n"))
    data = (text * rounds).encode()
    lines = data.count(b"\n")
    started = time.perf_counter()
    bounded = parse_stream_bounded(io.BytesIO(data), "dev-logs.log")
    seconds = time.perf_counter() - started
    runs = bounded.earlier.count + len(bounded.parsed.runs)
    print(f"-- logs throughput\n{seconds:8.3f} s  {lines / seconds:10,.0f} lines/s  {lines:,} lines of the dev logs "
          f"x {rounds} ({len(data) / 1e6:.1f} MB, {runs:,} startups, {seconds / runs * 1e3:.2f} ms per startup)")


def file_rows() -> None:
    from vram_detective.forensics.nvidia_smi import parse_file as parse_smi
    from vram_detective.model.gguf_source import read_local
    from vram_detective.model.safetensors_headers import read_header
    from vram_detective.model.sources import load_model

    print("-- files")
    work = Path(tempfile.mkdtemp(prefix="hostile-"))
    s = lambda text: struct.pack("<Q", len(text)) + text.encode()  # noqa: E731
    for count in (50_000_000 - 1, 2 ** 40):
        data = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + s("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, count)
        path = work / f"tokens-{count}.gguf"
        path.write_bytes(data + b"\0" * (300 - len(data)))
        timed(f"300-byte GGUF claiming {count:,} tokens", lambda path=path: read_local(path))
    blob = b"[" * 90_000_000
    (work / "deep.safetensors").write_bytes(struct.pack("<Q", len(blob)) + blob)
    timed("90 MB safetensors header of '['", lambda: read_header(work / "deep.safetensors"))
    model = work / "model"
    model.mkdir()
    (model / "config.json").write_text('{"a": "' + "x" * 50_000_000 + '"}')
    timed("50 MB config.json", lambda: load_model(str(model)))
    (model / "config.json").write_text('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")
    timed("config.json nested 100,000 deep", lambda: load_model(str(model)))
    (model / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    (model / "model.safetensors.index.json").write_text('{"weight_map": {"a": "/etc/passwd"}}')
    timed("index naming /etc/passwd", lambda: load_model(str(model)))
    os.mkfifo(work / "fifo.gguf")
    timed("a FIFO as a .gguf", lambda: read_local(work / "fifo.gguf"))
    os.mkfifo(work / "smi.txt")
    timed("a FIFO as --nvidia-smi", lambda: parse_smi(str(work / "smi.txt")))
    smi = work / "smi-neg.txt"
    smi.write_text("NVIDIA-SMI 535\n|  -10240MiB / 81920MiB |\n")
    timed("nvidia-smi -10240MiB", lambda: parse_smi(str(smi)))


def hub_rows() -> None:
    try:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
        from test_hostile_hub import _Server
        from vram_detective.model.hub import fetch
    except ImportError as error:
        print(f"-- Hub rows skipped ({error})")
        return
    print("-- Hub (a local server)")
    os.environ["HF_HOME"] = tempfile.mkdtemp(prefix="hostile-hf-")
    for label, kwargs, deadline in (("model info sha '../../x/PWNED'", {"sha": "../../x/PWNED"}, 10),
                                    ("1 byte every 0.5 s, deadline 3 s", {"trickle": True}, 3),
                                    ("redirect loop", {"loop": True}, 10)):
        server = _Server(**kwargs)
        os.environ["HF_ENDPOINT"] = server.endpoint
        timed(label, lambda deadline=deadline: fetch("org/m", deadline=deadline))
        server.stop()


def stdin_rows() -> None:
    """`logs -` peak memory (a child process's max RSS) on large inputs: 300 MB of mixed engines (the dev logs
    repeated) and 100 MB of random bytes (issue 30: 818 MiB and 1.1 GiB before; the target is <= 64 MiB)."""
    import json
    import subprocess

    root = Path(__file__).resolve().parents[1]
    logs = []
    for name in ("dev-llamacpp.jsonl", "dev.jsonl", "dev-sglang.jsonl", "dev-vllm-more.jsonl"):
        for line in (root / "groundtruth" / name).read_text(encoding="utf-8").splitlines():
            text = json.loads(line).get("log")
            if text:
                logs.append(text.rstrip("\n") + "\n")
    unit = "".join(logs).encode()
    work = Path(tempfile.mkdtemp(prefix="hostile-stdin-"))
    mixed, noise = work / "mixed.log", work / "random.bin"
    with open(mixed, "wb") as out:
        for _ in range((30 if QUICK else 300) * 10**6 // len(unit) + 1):
            out.write(unit)
    with open(noise, "wb") as out:
        for _ in range(10 if QUICK else 100):
            out.write(os.urandom(10**6))
    print("-- logs on standard input (child process)")
    for label, path in ((f"{mixed.stat().st_size / 1e6:.0f} MB of mixed engines", mixed),
                        (f"{noise.stat().st_size / 1e6:.0f} MB of random bytes", noise)):
        started = time.perf_counter()
        with open(path, "rb") as stdin:
            child = subprocess.Popen([sys.executable, "-m", "vram_detective", "logs", "-", "--json"], stdin=stdin,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     env={**os.environ, "PYTHONPATH": str(root / "src")})
            err = child.stderr.read().decode(errors="replace").strip()
            _, status, usage = os.wait4(child.pid, 0)
        print(f"{time.perf_counter() - started:8.3f} s {usage.ru_maxrss / 1024:8.1f} MiB  {label:<48} "
              f"exit {os.waitstatus_to_exitcode(status)} {err[:60]}")


def main() -> None:
    stdin_rows()
    throughput_rows()
    log_rows()
    file_rows()
    hub_rows()


if __name__ == "__main__":
    main()
