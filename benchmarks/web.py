"""Load on `vram-detective serve`: concurrent clients on loopback, mixed explain / whatif / logs requests.

    python benchmarks/web.py [--clients 50] [--seconds 30]
Starts a real server (this checkout's sources) on a free loopback port; each client keeps one HTTP/1.1
connection and sends, in a fixed mix, explain fragments with a moving utilization slider (what the page
sends), /api/explain, /api/whatif and /api/logs with real logs from groundtruth/dev.jsonl. Prints the error
count and the p50 / p99 latency per kind, as the client waits for it and as the server spent on it (its
Server-Timing header). Goal: 0 errors; recompute (explain) p50 <= 20 ms server side.
"""
from __future__ import annotations

import argparse
import http.client
import json
import random
import statistics
import sys
import threading
import time
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from web_server import running_server  # noqa: E402  (the tests' helper: a real server on a free port)

SEED = {"model": "Qwen/Qwen2.5-7B-Instruct-AWQ", "gpu": "RTX 4090", "version": "0.6.3", "max_model_len": "32768"}
OTHERS = ({"model": "Qwen/Qwen3-8B", "gpu": "A100-80G", "max_num_seqs": "64"},
          {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "L4", "engine": "sglang"})
MIX = ("fragment",) * 4 + ("explain",) * 3 + ("whatif",) * 2 + ("logs",)


def _logs() -> list[str]:
    rows = [json.loads(line) for line in (ROOT / "groundtruth" / "dev.jsonl").read_text().splitlines() if line.strip()]
    return [row["log"] for row in rows if row.get("engine", "vllm") == "vllm" and 200 < len(row.get("log") or "") < 2000][:20]


def _request(rng: random.Random, kind: str, logs: list[str]) -> tuple[str, str, bytes | None]:
    if kind == "logs":
        return "POST", "/api/logs", json.dumps({"log": rng.choice(logs)}).encode()
    params = dict(SEED if kind != "explain" or rng.random() < 0.6 else rng.choice(OTHERS))
    if params.get("engine") != "sglang":
        params["gpu_memory_utilization"] = f"{rng.randint(50, 95) / 100:.2f}"
    path = {"fragment": "/fragment/explain", "explain": "/api/explain", "whatif": "/api/whatif"}[kind]
    return "GET", f"{path}?{urllib.parse.urlencode(params)}", None


def _client(port: int, stop: float, seed: int, logs: list[str], out: list, errors: list) -> None:
    rng = random.Random(seed)
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    while time.perf_counter() < stop:
        kind = rng.choice(MIX)
        method, path, body = _request(rng, kind, logs)
        started = time.perf_counter()
        try:
            connection.request(method, path, body=body, headers={"Content-Type": "application/json"} if body else {})
            response = connection.getresponse()
            response.read()
        except (OSError, http.client.HTTPException) as error:
            errors.append(f"{kind}: {error}")
            connection.close()
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            continue
        waited = time.perf_counter() - started
        if response.status != 200:
            errors.append(f"{kind}: HTTP {response.status}")
            continue
        timing = response.getheader("Server-Timing", "app;dur=nan").split("dur=")[-1]
        out.append((kind, waited * 1000, float(timing)))
    connection.close()


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()
    logs = _logs()
    with running_server() as (base, _):
        port = int(base.rsplit(":", 1)[1])
        results, errors = [], []
        stop = time.perf_counter() + args.seconds
        threads = [threading.Thread(target=_client, args=(port, stop, index, logs, results, errors))
                   for index in range(args.clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    print(f"{args.clients} clients, {args.seconds:g} s on loopback: {len(results):,} requests, "
          f"{len(results) / args.seconds:,.0f}/s, {len(errors)} errors")
    print(f"{'kind':<18} {'count':>7} {'client p50':>11} {'client p99':>11} {'server p50':>11} {'server p99':>11}  (ms)")
    for kind in dict.fromkeys(MIX):
        waited = [w for k, w, _ in results if k == kind]
        spent = [s for k, _, s in results if k == kind]
        if waited:
            print(f"{kind:<18} {len(waited):>7,} {_percentile(waited, .5):>11.1f} {_percentile(waited, .99):>11.1f} "
                  f"{_percentile(spent, .5):>11.1f} {_percentile(spent, .99):>11.1f}")
    for error in errors[:10]:
        print("  error:", error)
    recompute = [s for k, _, s in results if k in ("fragment", "explain")]
    ok = not errors and recompute and statistics.median(recompute) <= 20
    print(f"goal (0 errors, recompute p50 <= 20 ms server side): {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
