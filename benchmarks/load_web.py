"""Load test of `vram-detective serve` (issue 30): CLIENTS clients on loopback for SECONDS, CLIENTS - 5 sending
cheap catalog explains (each waits THINK_S between requests, as a page's user does) and 5 sending the
pathological requests (SGLang chunked_prefill_size=-1, a NaN trace, a Hub fetch from a server trickling one byte
every 0.5 s) once each (`once`) or over and over with no pause (`repeat`); `cheap` is the baseline with the same
cheap clients and no pathological one. The pathological clients run in a process of their own, so that their
loops do not hold the cheap clients' GIL (a measurement of the server, not of this script).

Prints a table: the cheap requests' latency percentiles and errors (and the p99 of those sent after each
client's first request: the clients start together, so the first round is a burst of CLIENTS - 5), the CPU of
the server and its worker processes (and of the serving process alone), and how long that CPU took to fall back to idle (< 5 % of a core) after the last request; then the
pathological answers. Timings on a shared machine are noisy: compare the rows of one run (same minute).

    PYTHONPATH=src python3 benchmarks/load_web.py [--clients 50] [--seconds 30] [--modes cheap,once,repeat]
                                                  [--runs 1] [--workers N]
"""
from __future__ import annotations

import argparse
import collections
import json
import multiprocessing
import os
import sys
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from fuzz_web import call, start_server  # noqa: E402
from web_server import cpu_seconds, tree_cpu_seconds  # noqa: E402  (the tests' /proc readers)

THINK_S = 1.0
PATHOLOGICAL = 5
CHEAP = [{"model": m, "gpu": g} for m in ("Qwen/Qwen3-8B", "meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen2.5-7B-Instruct-AWQ")
         for g in ("H100", "RTX 4090", "L4")]
NAN_TRACE = json.dumps({"trace": '{"timestamp": NaN, "prompt_tokens": 10, "output_tokens": 5}\n'
                                 '{"timestamp": 1, "prompt_tokens": 10, "output_tokens": 5}'}).encode()
NAMES = {0: "SGLang chunked_prefill_size=-1", 1: "NaN trace", 2: "trickling Hub fetch", 3: "trickling Hub fetch",
         4: "trickling Hub fetch"}


def pathological(kind: int) -> tuple[str, str, bytes | None, dict]:
    if kind == 0:
        return "GET", "/api/simulate?" + urllib.parse.urlencode(
            {"engine": "sglang", "model": "Qwen/Qwen3-8B", "gpu": "H100", "chunked_prefill_size": "-1",
             "workload": "chat:requests=1"}), None, {}
    if kind == 1:
        return "POST", "/api/simulate?model=Qwen/Qwen3-8B&gpu=H100", NAN_TRACE, {"Content-Type": "application/json"}
    return "GET", "/api/explain?" + urllib.parse.urlencode({"model": f"org/m{kind}", "gpu": "H100"}), None, {}


def bad_clients(port: int, stop_in: float, once: bool, out) -> None:
    """The pathological clients (a process of their own): [(kind, status, seconds)] and the time of the last answer
    (time.time(): comparable across processes) put on `out`."""
    answers: list = []
    last = [0.0]
    stop = time.monotonic() + stop_in

    def client(kind: int) -> None:
        while time.monotonic() < stop:
            method, path, body, headers = pathological(kind)
            began = time.perf_counter()
            try:
                status, _ = call(port, method, path, body, headers, timeout=60)
            except OSError as error:
                status = type(error).__name__
            answers.append((kind, str(status), round(time.perf_counter() - began)))
            last[0] = time.time()
            if once:
                return

    threads = [threading.Thread(target=client, args=(kind,)) for kind in range(PATHOLOGICAL)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    out.put((answers, last[0]))


def run(mode: str, args, hub_endpoint: str) -> dict:
    env = {"HF_ENDPOINT": hub_endpoint, "HF_HOME": tempfile.mkdtemp(prefix="load-hf-"), "HF_HUB_OFFLINE": "0"}
    extra = ("--workers", str(args.workers)) if args.workers is not None else ()
    process, port = start_server(*extra, env=env)
    time.sleep(args.settle)  # the worker processes start in the background once the server listens
    latencies: list[float] = []
    later: list[float] = []  # those sent after the first round (the clients start together: a burst of 45)
    cheap_errors: collections.Counter = collections.Counter()
    began_all = time.monotonic()
    stop = began_all + args.seconds
    last = [0.0]

    def cheap_client(index: int) -> None:
        n = index
        while time.monotonic() < stop:
            params = CHEAP[n % len(CHEAP)]
            n += 1
            began = time.perf_counter()
            try:
                status, _ = call(port, "GET", "/api/explain?" + urllib.parse.urlencode(params), timeout=30)
            except OSError as error:
                status = type(error).__name__
            latencies.append(time.perf_counter() - began)
            if n > index + 1:
                later.append(latencies[-1])
            if status not in (200, 422):  # 422: the answer of a start the engine refuses (documented), not an error
                cheap_errors[str(status)] += 1
            last[0] = time.time()
            time.sleep(THINK_S)

    out, bad = None, None
    if mode != "cheap":
        out = multiprocessing.get_context("spawn").Queue()
        bad = multiprocessing.get_context("spawn").Process(target=bad_clients,
                                                           args=(port, args.seconds, mode == "once", out))
    threads = [threading.Thread(target=cheap_client, args=(i,)) for i in range(args.clients - PATHOLOGICAL)]
    cpu_start, own_start = tree_cpu_seconds(process.pid), cpu_seconds(process.pid)
    if bad is not None:
        bad.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    answers: list = []
    if bad is not None:
        answers, bad_last = out.get()
        bad.join()
        last[0] = max(last[0], bad_last)
    idle_after = _idle_after(process.pid, last[0])
    server_cpu, own_cpu = tree_cpu_seconds(process.pid) - cpu_start, cpu_seconds(process.pid) - own_start
    process.terminate()
    process.wait(10)
    latencies.sort()
    later.sort()
    return {"mode": mode, "latencies": latencies, "later": later, "errors": cheap_errors, "answers": collections.Counter(answers),
            "server_cpu": server_cpu, "own_cpu": own_cpu, "idle_after": idle_after, "load": os.getloadavg()[0]}


def _idle_after(pid: int, end: float) -> float | None:
    """Seconds after `end` (time.time()) at which the server's processes used < 5 % of a core over 0.5 s."""
    previous, previous_t = tree_cpu_seconds(pid), time.time()
    while time.time() - end < 30:
        time.sleep(0.5)
        now, now_t = tree_cpu_seconds(pid), time.time()
        if (now - previous) / (now_t - previous_t) < 0.05:
            return max(0.0, previous_t - end)
        previous, previous_t = now, now_t
    return None


def _pct(latencies: list[float], q: float) -> float:
    return latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--modes", default="cheap,once,repeat",
                        help="comma-separated: cheap (no pathological client), once (each pathological request "
                             "once), repeat (over and over, no pause); default all three")
    parser.add_argument("--runs", type=int, default=1, help="repeat the modes this many times (default 1)")
    parser.add_argument("--workers", type=int, default=None, help="serve --workers N (default: serve's default)")
    parser.add_argument("--settle", type=float, default=3.0, help="seconds between the server's start and the load")
    args = parser.parse_args()
    modes = [mode for mode in args.modes.split(",") if mode]
    if any(mode not in ("cheap", "once", "repeat") for mode in modes):
        parser.error("--modes: cheap, once or repeat")
    from test_hostile_hub import _Server

    hub = _Server(trickle=True)
    rows = [run(mode, args, hub.endpoint) for _ in range(args.runs) for mode in modes]
    hub.stop()
    print(f"{args.clients} clients x {args.seconds:g} s on loopback ({args.clients - PATHOLOGICAL} cheap explains, "
          f"think {THINK_S:g} s; {PATHOLOGICAL} pathological unless cheap), serve --workers "
          f"{'default' if args.workers is None else args.workers}, {os.cpu_count()} CPUs")
    print(f"| {'mode':<6} | {'cheap requests':>14} | {'errors':>6} | {'p50 ms':>7} | {'p90 ms':>7} | {'p99 ms':>7} | "
          f"{'max ms':>7} | {'p99 after 1st round':>19} | {'server CPU s':>12} | "
          f"{'of it serving':>13} | {'idle after s':>12} | {'load avg':>8} |")
    print("|" + "|".join("-" * (width + 2) for width in (6, 14, 6, 7, 7, 7, 7, 19, 12, 13, 12, 8)) + "|")
    for row in rows:
        lat = row["latencies"]
        idle = f"{row['idle_after']:.1f}" if row["idle_after"] is not None else "> 30"
        print(f"| {row['mode']:<6} | {len(lat):>14,} | {sum(row['errors'].values()):>6} | {_pct(lat, 0.5):>7.1f} | "
              f"{_pct(lat, 0.9):>7.1f} | {_pct(lat, 0.99):>7.1f} | {lat[-1] * 1000:>7.1f} | "
              f"{_pct(row['later'], 0.99):>19.1f} | {row['server_cpu']:>12.1f} | {row['own_cpu']:>13.1f} | "
              f"{idle:>12} | {row['load']:>8.1f} |")
    for row in rows:
        if row["errors"]:
            print(f"  {row['mode']}: cheap errors {dict(row['errors'])}")
        for (kind, status, seconds), count in sorted(row["answers"].items()):
            print(f"  {row['mode']:<6} {NAMES[kind]:<32} status {status:<14} ~{seconds:>3} s  x{count}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
