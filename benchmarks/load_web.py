"""Load test of `vram-detective serve` (issue 30): CLIENTS clients on loopback for SECONDS, most sending cheap
catalog explains (each waits THINK_S between requests, as a page's user does), 5 sending the pathological
requests over and over (SGLang chunked_prefill_size=-1, a NaN trace, a Hub fetch from a server trickling one
byte every 0.5 s). Prints the cheap requests' latency percentiles and errors, the pathological answers, and how
long the server's CPU took to fall back to idle after the last request.

    PYTHONPATH=src python3 benchmarks/load_web.py [--clients 50] [--seconds 30]
"""
from __future__ import annotations

import argparse
import collections
import json
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

THINK_S = 1.0
CHEAP = [{"model": m, "gpu": g} for m in ("Qwen/Qwen3-8B", "meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen2.5-7B-Instruct-AWQ")
         for g in ("H100", "RTX 4090", "L4")]
NAN_TRACE = json.dumps({"trace": '{"timestamp": NaN, "prompt_tokens": 10, "output_tokens": 5}\n'
                                 '{"timestamp": 1, "prompt_tokens": 10, "output_tokens": 5}'}).encode()


def _cpu(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pathological(kind: int) -> tuple[str, str, bytes | None, dict]:
    if kind == 0:
        return "GET", "/api/simulate?" + urllib.parse.urlencode(
            {"engine": "sglang", "model": "Qwen/Qwen3-8B", "gpu": "H100", "chunked_prefill_size": "-1",
             "workload": "chat:requests=1"}), None, {}
    if kind == 1:
        return "POST", "/api/simulate?model=Qwen/Qwen3-8B&gpu=H100", NAN_TRACE, {"Content-Type": "application/json"}
    return "GET", "/api/explain?" + urllib.parse.urlencode({"model": f"org/m{kind}", "gpu": "H100"}), None, {}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--once", action="store_true", help="each pathological client sends its request once "
                                                            "(default: over and over, with no pause)")
    args = parser.parse_args()
    from test_hostile_hub import _Server

    hub = _Server(trickle=True)
    env = {"HF_ENDPOINT": hub.endpoint, "HF_HOME": tempfile.mkdtemp(prefix="load-hf-"), "HF_HUB_OFFLINE": "0"}
    process, port = start_server(env=env)
    latencies: list[float] = []
    cheap_errors: collections.Counter = collections.Counter()
    bad_answers: collections.Counter = collections.Counter()
    stop = time.monotonic() + args.seconds
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
            if status not in (200, 422):  # 422: the answer of a start the engine refuses (documented), not an error
                cheap_errors[str(status)] += 1
            last[0] = time.monotonic()
            time.sleep(THINK_S)

    def bad_client(index: int) -> None:
        while time.monotonic() < stop:
            method, path, body, headers = pathological(index)
            began = time.perf_counter()
            try:
                status, data = call(port, method, path, body, headers, timeout=60)
            except OSError as error:
                status, data = type(error).__name__, b""
            bad_answers[(index, str(status), round(time.perf_counter() - began))] += 1
            last[0] = time.monotonic()
            if args.once:
                return

    threads = [threading.Thread(target=bad_client, args=(i,)) for i in range(5)]
    threads += [threading.Thread(target=cheap_client, args=(i,)) for i in range(args.clients - 5)]
    cpu_start = _cpu(process.pid)
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    end = last[0]
    idle_after = None
    previous, previous_t = _cpu(process.pid), time.monotonic()
    while time.monotonic() - end < 30:
        time.sleep(0.5)
        now, now_t = _cpu(process.pid), time.monotonic()
        if (now - previous) / (now_t - previous_t) < 0.05:
            idle_after = previous_t - end
            break
        previous, previous_t = now, now_t
    server_cpu = _cpu_total(cpu_start, process)
    process.terminate()
    process.wait(10)
    hub.stop()
    latencies.sort()

    def pct(q: float) -> float:
        return latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000

    print(f"{args.clients} clients x {args.seconds:g} s on loopback ({args.clients - 5} cheap explains, think "
          f"{THINK_S:g} s; 5 pathological), server CPU {server_cpu:.1f} s; machine load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"cheap explains: {len(latencies):,} requests, errors {sum(cheap_errors.values())} {dict(cheap_errors)}, "
          f"p50 {pct(0.5):.1f} ms, p90 {pct(0.9):.1f} ms, p99 {pct(0.99):.1f} ms, max {latencies[-1] * 1000:.1f} ms")
    names = {0: "SGLang chunked_prefill_size=-1", 1: "NaN trace", 2: "trickling Hub fetch", 3: "trickling Hub fetch",
             4: "trickling Hub fetch"}
    for (kind, status, seconds), count in sorted(bad_answers.items()):
        print(f"  {names[kind]:<32} status {status:<14} ~{seconds:>3} s  x{count}")
    print(f"server CPU back to idle (< 5 %) {idle_after:.1f} s after the last request" if idle_after is not None
          else "server CPU NOT idle within 30 s of the last request")
    return 0


def _cpu_total(start: float, process) -> float:
    try:
        return _cpu(process.pid) - start
    except OSError:
        return float("nan")


if __name__ == "__main__":
    sys.exit(main())
