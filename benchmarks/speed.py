"""How fast the commands answer, as whole processes (what a user waits for), against a bare Python start.

    python benchmarks/speed.py [--runs 10] [--json] [--only explain,whatif] [--library] [--src OTHER/src]

Each command runs as `python -m vram_detective ...` from this checkout's src/ (from cached bytecode, as an
installed tool runs). Its CPU time (user + system of the child, from os.wait4) is paired with a bare
`python -c pass` run just before it; the table shows the median of the per-pair ratios, so a busy machine
(2 shared cores here) moves both halves of a pair alike. CPU time, not wall time, for the same reason.
`fit` and `score` are judged in absolute CPU seconds, `serve` in wall seconds from the start of the process
to the answer of its first request over loopback (a server's start is what a user waits for).
The last column, from one `python -X importtime` run per command: milliseconds spent importing and the
number of the tool's own modules imported (a count that does not depend on the machine's load).

Goals (issue 28): explain <= 4x bare, whatif <= 6x, fit 70B / H100 / 32k x 16 <= 0.5 s, score on every
dev file <= 1.5 s, serve's first answer <= 1 s after start.
--library adds the in-process figures: explain per call, and the advisor's vectorized sweep (configurations
per second on one core).
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
TOOL = [sys.executable, "-m", "vram_detective"]

# (name, the command's words after `vram-detective`, goal, unit): unit "x" = paired ratio to a bare start,
# "s" = absolute CPU seconds
COMMANDS = (
    ("explain (catalog model)", ["explain", "Qwen/Qwen2.5-7B-Instruct-AWQ", "--gpu", "RTX 4090", "--max-model-len", "32k"],
     4.0, "x"),
    ("explain (pasted launch line)", ["explain", "--gpu", "4090", "--", "vllm", "serve", "Qwen/Qwen3-8B",
                                      "--gpu-memory-utilization", "0.8", "--max-num-seqs", "64"], 4.0, "x"),
    ("explain (GGUF header)", ["explain", "{gguf}", "--gpu", "4090", "-c", "32768"], 4.0, "x"),
    ("explain --json (catalog model)", ["explain", "Qwen/Qwen2.5-7B-Instruct-AWQ", "--gpu", "RTX 4090",
                                        "--max-model-len", "32k", "--json"], 4.0, "x"),
    ("whatif", ["whatif", "Qwen/Qwen2.5-7B-Instruct-AWQ", "--gpu", "RTX 4090", "--max-model-len", "32k"], 6.0, "x"),
    ("fit 70B / H100 / 32k x 16", ["fit", "meta-llama/Llama-3.1-70B-Instruct", "--gpu", "H100", "--context", "32k",
                                   "--concurrency", "16"], 0.5, "s"),
    ("compare", ["compare", "Qwen/Qwen3-8B", "--gpu", "4090", "--context", "32k"], None, "x"),
    ("logs (10 MB log)", ["logs", "{log}"], None, "x"),
    ("simulate chat", ["simulate", "Qwen/Qwen3-8B", "--gpu", "4090", "--workload", "chat"], None, "x"),
    ("score (every dev file)", ["score"], 1.5, "s"),
    ("models", ["models"], None, "x"),
    ("--help", ["--help"], None, "x"),
)
SERVE_GOAL = 1.0


def child_cpu(argv: list[str], env: dict) -> tuple[float, int]:
    """(user + system CPU seconds of the child process, its exit status)."""
    process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_utime + usage.ru_stime, process.returncode


def paired(argv: list[str], env: dict, runs: int) -> dict:
    """Median over `runs` pairs (bare start, then the command) of the command's CPU time and of the ratio."""
    bare = [sys.executable, "-c", "pass"]
    child_cpu(bare, env)
    _, status = child_cpu(argv, env)  # the first run writes bytecode: not counted
    if status not in (0, 1):  # 1: the engine would refuse to start, still an answer
        raise SystemExit(f"exit {status}: {' '.join(argv)}")
    ratios, seconds, bares = [], [], []
    for _ in range(runs):
        base, _ = child_cpu(bare, env)
        spent, _ = child_cpu(argv, env)
        ratios.append(spent / base)
        seconds.append(spent)
        bares.append(base)
    return {"ratio": statistics.median(ratios), "cpu_s": statistics.median(seconds), "bare_s": statistics.median(bares)}


# `python -m vram_detective WORDS` that writes sys.modules' names at exit: the engine registry imports with
# importlib, whose imports `-X importtime` does not list
_LISTING_RUN = ("import atexit, runpy, sys\n"
                "listing = sys.argv.pop(1)\n"
                "atexit.register(lambda: open(listing, 'w').write('\\n'.join(sorted(sys.modules))))\n"
                "sys.argv[0] = 'vram-detective'\n"
                "runpy.run_module('vram_detective', run_name='__main__', alter_sys=True)\n")


def import_totals(argv: list[str], env: dict) -> dict:
    """One `python -X importtime` run: milliseconds importing (the sum of each import's own time), and the
    modules loaded at exit, all and the tool's own."""
    with tempfile.NamedTemporaryFile("r", suffix=".txt") as listing:
        run = subprocess.run([argv[0], "-X", "importtime", "-c", _LISTING_RUN, listing.name, *argv[3:]], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        modules = listing.read().split()
    total_us = 0
    for line in run.stderr.splitlines():
        if line.startswith("import time:") and "self [us]" not in line:
            total_us += int(line[len("import time:"):].split("|")[0])
    own = [name for name in modules if name.split(".")[0] == "vram_detective"]
    return {"import_ms": total_us / 1000, "modules": len(modules), "own_modules": len(own)}


def serve_first_answer(env: dict, runs: int) -> dict:
    """Seconds from starting `serve` to the answer of its first /api/explain request (loopback): wall time,
    and the server's CPU time up to then (from /proc, where there is one: the figure a loaded machine moves
    least)."""
    walls, cpus = [], []
    for _ in range(runs):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        url = (f"http://127.0.0.1:{port}/api/explain?model=Qwen/Qwen2.5-7B-Instruct-AWQ&gpu=RTX%204090"
               f"&max_model_len=32768")
        started = time.perf_counter()
        server = subprocess.Popen([*TOOL, "serve", "--port", str(port)], env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        try:
            while True:
                try:
                    with urllib.request.urlopen(url, timeout=30) as answer:
                        answer.read()
                        if answer.status != 200:
                            raise SystemExit(f"serve answered {answer.status}")
                    break
                except (ConnectionError, urllib.error.URLError):
                    if server.poll() is not None:
                        raise SystemExit("serve exited before answering") from None
                    time.sleep(0.005)
            walls.append(time.perf_counter() - started)
            cpus.append(_process_cpu(server.pid))
        finally:
            server.terminate()
            server.wait()
    cpu = [value for value in cpus if value is not None]
    return {"wall_s": statistics.median(walls), "cpu_s": statistics.median(cpu) if cpu else None}


def _process_cpu(pid: int) -> float | None:
    """User + system CPU seconds a running process has used (Linux /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# Llama-3.1-8B as llama.cpp's Q4_K_M mix stores it: (name, shape as GGUF lists it (fastest dimension first),
# GGML type id). Q4_K = 12, Q6_K = 14, F32 = 0.
def _llama8b_tensors() -> list[tuple[str, tuple[int, ...], int]]:
    hidden, ffn, kv, vocab = 4096, 14336, 1024, 128256
    tensors = [("token_embd.weight", (hidden, vocab), 12)]
    for layer in range(32):
        block = f"blk.{layer}."
        tensors += [(block + "attn_norm.weight", (hidden,), 0), (block + "ffn_norm.weight", (hidden,), 0),
                    (block + "attn_q.weight", (hidden, hidden), 12), (block + "attn_k.weight", (hidden, kv), 12),
                    (block + "attn_v.weight", (hidden, kv), 14 if layer % 2 == 0 else 12),
                    (block + "attn_output.weight", (hidden, hidden), 12),
                    (block + "ffn_gate.weight", (hidden, ffn), 12), (block + "ffn_up.weight", (hidden, ffn), 12),
                    (block + "ffn_down.weight", (ffn, hidden), 14 if layer % 2 == 0 else 12)]
    return tensors + [("output_norm.weight", (hidden,), 0), ("output.weight", (hidden, vocab), 14)]


def write_gguf_header(path: Path) -> None:
    """A GGUF v3 file with Llama-3.1-8B's metadata and tensor table; the data region is a hole (sparse file),
    so the file has the real size without taking the disk space."""
    block_bytes = {0: (1, 4), 12: (256, 144), 14: (256, 210)}

    def text(value: str) -> bytes:
        raw = value.encode()
        return struct.pack("<Q", len(raw)) + raw

    metadata = [("general.architecture", 8, text("llama")), ("general.name", 8, text("Llama 3.1 8B Instruct")),
                ("general.file_type", 4, struct.pack("<I", 15)),
                ("llama.block_count", 4, struct.pack("<I", 32)), ("llama.context_length", 4, struct.pack("<I", 131072)),
                ("llama.embedding_length", 4, struct.pack("<I", 4096)),
                ("llama.feed_forward_length", 4, struct.pack("<I", 14336)),
                ("llama.attention.head_count", 4, struct.pack("<I", 32)),
                ("llama.attention.head_count_kv", 4, struct.pack("<I", 8)),
                ("llama.rope.dimension_count", 4, struct.pack("<I", 128)),
                ("llama.rope.freq_base", 6, struct.pack("<f", 500000.0)),
                ("llama.attention.layer_norm_rms_epsilon", 6, struct.pack("<f", 1e-5)),
                ("llama.vocab_size", 4, struct.pack("<I", 128256))]
    tensors = _llama8b_tensors()
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(metadata)))
    for key, kind, value in metadata:
        out += text(key) + struct.pack("<I", kind) + value
    offset = 0
    for name, shape, kind in tensors:
        out += text(name) + struct.pack("<I", len(shape)) + struct.pack(f"<{len(shape)}Q", *shape)
        out += struct.pack("<IQ", kind, offset)
        elements = 1
        for size in shape:
            elements *= size
        block, size = block_bytes[kind]
        offset += -(-(elements // block * size) // 32) * 32
    out += b"\0" * (-len(out) % 32)
    with open(path, "wb") as handle:
        handle.write(out)
        handle.truncate(len(out) + offset)


# vLLM 0.10.2's serving line (v1/metrics/loggers.py LoggingStatLogger.log) and uvicorn's access line
METRICS = ("(APIServer pid=2811) INFO 09-23 {h:02d}:{m:02d}:{s:02d} [loggers.py:123] Engine 000: Avg prompt throughput: "
           "812.3 tokens/s, Avg generation throughput: 95.1 tokens/s, Running: {running} reqs, Waiting: 0 reqs, "
           "GPU KV cache usage: {usage:.1f}%, Prefix cache hit rate: 41.0%")
ACCESS = '(APIServer pid=2811) INFO:     127.0.0.1:{port} - "POST /v1/chat/completions HTTP/1.1" 200 OK'


def write_long_log(path: Path, size: int = 10 << 20) -> None:
    """A 10 MB vLLM log: a real startup from the ground truth (0.10.2, llava 1.6 on an H100), then hours of
    serving: the engine's periodic KV-usage line between request lines."""
    case = next(json.loads(line) for line in (ROOT / "groundtruth" / "dev.jsonl").open()
                if json.loads(line)["id"] == "file34680831065-llava16-mistral7b-h100-v0102")
    lines, step = [case["log"]], 0
    written = len(case["log"])
    while written < size:
        step += 1
        seconds = 18 * 3600 + 13 * 60 + step * 10
        line = METRICS.format(h=seconds // 3600 % 24, m=seconds // 60 % 60, s=seconds % 60, running=step % 37,
                              usage=(step * 7) % 1000 / 10)
        lines += [line] + [ACCESS.format(port=40000 + (step * 13 + k) % 20000) for k in range(step % 5)]
        written += len(line) + 1 + (step % 5) * (len(ACCESS) + 1)
    path.write_text("\n".join(lines) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10, help="pairs per command (default 10)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--only", default=None, help="comma-separated words: only commands whose name has one")
    parser.add_argument("--library", action="store_true", help="also the in-process figures (explain, sweep)")
    parser.add_argument("--src", type=Path, default=SRC,
                        help="the tool's source tree to time (default: this checkout's src/; another checkout's "
                             "src/ gives its 'before' table)")
    args = parser.parse_args()
    env = dict(os.environ, PYTHONPATH=str(args.src.resolve()), COLUMNS="100")
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed tool runs from compiled bytecode
    only = [word.strip() for word in args.only.split(",")] if args.only else None
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        files = {"gguf": Path(scratch) / "Llama-3.1-8B-Instruct-Q4_K_M.gguf", "log": Path(scratch) / "vllm-serving.log"}
        write_gguf_header(files["gguf"])
        write_long_log(files["log"])
        for name, words, goal, unit in COMMANDS:
            if only and not any(word in name for word in only):
                continue
            argv = TOOL + [word.format(**files) if word.startswith("{") else word for word in words]
            row = {"command": name, "goal": goal, "unit": unit, **paired(argv, env, args.runs),
                   **import_totals(argv, env)}
            rows.append(row)
            if not args.json:
                print(_row_text(row) if len(rows) > 1 else _header() + "\n" + _row_text(row), flush=True)
        if not only or any("serve" in word for word in only):
            row = {"command": "serve: 1st /api/explain answer, wall", "goal": SERVE_GOAL, "unit": "wall s",
                   **serve_first_answer(env, max(3, args.runs // 2))}
            rows.append(row)
            if not args.json:
                print(_row_text(row))
    load = os.getloadavg()
    extra = library_figures(args.runs, args.src) if args.library else {}
    if args.json:
        print(json.dumps({"runs": args.runs, "load_average": load, "python": sys.version.split()[0], "rows": rows,
                          **extra}, indent=2))
    else:
        print(f"\nload average (1, 5, 15 min) at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
              f"{os.cpu_count()} CPUs; {args.runs} pairs per command")
        for label, value in extra.items():
            print(f"{label}: {value}")
    return 0


def _header() -> str:
    return (f"{'command':<34} {'CPU s':>7} {'bare s':>7} {'ratio':>7} {'goal':>8} {'held':>5} "
            f"{'import ms':>9} {'modules':>8} {'own':>4}")


def _row_text(row: dict) -> str:
    if row["unit"] == "wall s":
        held = "yes" if row["wall_s"] <= row["goal"] else "NO"
        cpu = "" if row["cpu_s"] is None else f"(CPU {row['cpu_s']:.2f} s)"
        return f"{row['command']:<34} {row['wall_s']:>7.3f} {'':>7} {'':>7} {row['goal']:>6.1f} s {held:>5}  {cpu}"
    value = row["ratio"] if row["unit"] == "x" else row["cpu_s"]
    goal = "" if row["goal"] is None else (f"{row['goal']:.1f}x" if row["unit"] == "x" else f"{row['goal']:.1f} s")
    held = "" if row["goal"] is None else ("yes" if value <= row["goal"] else "NO")
    return (f"{row['command']:<34} {row['cpu_s']:>7.3f} {row['bare_s']:>7.3f} {row['ratio']:>6.1f}x {goal:>8} "
            f"{held:>5} {row['import_ms']:>9.0f} {row['modules']:>8} {row['own_modules']:>4}")


LIBRARY_CASES = (
    ("Qwen/Qwen2.5-7B-Instruct-AWQ", {"gpu": "RTX 4090", "max_model_len": 32768}),
    ("meta-llama/Llama-3.1-70B-Instruct", {"gpu": "H100", "tensor_parallel_size": 4, "vllm_version": "0.8.5"}),
    ("Qwen/Qwen3-8B", {"gpu": "A100-80G", "gpu_memory_utilization": 0.8, "max_num_seqs": 64}),
)


def library_figures(runs: int, src: Path = SRC) -> dict:
    """In-process: explain per call (median, warm: goal 5 ms), and the advisor's vectorized sweep in
    configurations per second on one core (goal 100,000), counting the engine pieces it computes first."""
    sys.path.insert(0, str(src.resolve()))
    import vram_detective.api as api

    out = {}
    for model, options in LIBRARY_CASES:
        options = dict(options)
        gpu = options.pop("gpu")
        version = options.pop("vllm_version", None)
        api.explain(model, gpu, vllm_version=version, **options)  # warm the config cache once
        times = []
        for _ in range(runs):
            started = time.perf_counter()
            api.explain(model, gpu, vllm_version=version, **options)
            times.append(time.perf_counter() - started)
        out[f"in-process explain: {model} (ms)"] = round(statistics.median(times) * 1000, 3)
    for label, rate in sweep_throughput(runs):
        out[f"{label} (per second)"] = round(rate)
    return out


SWEEP_CASES = (("Qwen/Qwen3-8B", "H100", None), ("google/gemma-3-27b-it", "H100", "0.26.0"),
               ("openai/gpt-oss-20b", "H100", None))


def sweep_throughput(runs: int) -> list[tuple[str, float]]:
    """Configurations per second of the fast path: utilization x max_model_len x max_num_seqs x
    max_num_batched_tokens, from a new family (engine pieces computed first) and once they are known."""
    from vram_detective.engines.vllm import sweep

    if sweep.numpy_or_none() is None:
        return [("advisor sweep (numpy missing: pure Python)", 0.0)]
    utilizations = [round(0.30 + 0.01 * k, 2) for k in range(69)]
    seqs = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
    tokens = [256, 512, 1024, 2048, 4096, 8192, 16384, 32768]
    out = []
    for model, gpu, version in SWEEP_CASES:
        cold, warm = [], []
        for _ in range(max(3, runs // 4)):
            sweep._KV_CACHE.clear()
            started = time.perf_counter()
            fast = sweep.FastPath(model, gpu, vllm_version=version)
            lengths = [length for length in (1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
                       if length <= fast.derived_max_model_len]
            grid = fast.grid(utilizations, lengths, seqs, tokens)
            cold.append(len(grid) / (time.perf_counter() - started))
            started = time.perf_counter()
            grid = fast.grid(utilizations, lengths, seqs, tokens)
            warm.append(len(grid) / (time.perf_counter() - started))
        out.append((f"advisor sweep, new family: {model} ({len(grid):,})", statistics.median(cold)))
        out.append((f"advisor sweep, pieces known: {model}", statistics.median(warm)))
    from vram_detective.engines.vllm.advisor.search import Target, fit

    rates = []
    for _ in range(max(3, runs // 4)):
        sweep._KV_CACHE.clear()
        result = fit("Qwen/Qwen2.5-7B-Instruct-AWQ", "RTX 4090", Target(max_gpu_memory=12 << 30))
        rates.append(result.searched / result.seconds)
    out.append((f"fit end to end (AWQ 7B, 4090, 12GiB: {result.searched:,} configs)", statistics.median(rates)))
    return out


if __name__ == "__main__":
    sys.exit(main())
