"""Issue 30: the web server's heavy requests run in worker processes (web/workers.py), so a pathological one
never holds the serving process while a cheap explain waits; past its budget, or when its client leaves, its
worker is killed and replaced. A real `vram-detective serve` on loopback; processes observed through /proc."""
from __future__ import annotations

import re
import threading
import time
import urllib.error
import urllib.request

from test_hostile_web import FIT_7S, query, request
from web_server import cpu_seconds, running_server, wait_for_workers, worker_pids

EXPLAIN = "/api/explain?" + query(model="Qwen/Qwen3-8B", gpu="H100")
SMALL_FIT = "/api/fit?" + query(model="Qwen/Qwen3-8B", gpu="H100", context="32k", concurrency="4")


def _in_background(base: str, path: str) -> tuple[threading.Thread, list]:
    answers: list = []

    def ask() -> None:
        try:
            answers.append(request(base, path, timeout=120))
        except OSError as error:  # the server stopped first
            answers.append((type(error).__name__, {}))

    thread = threading.Thread(target=ask)
    thread.start()
    return thread, answers


def _busy_worker(workers: set[int], before: dict[int, float], seconds: float = 60) -> int:
    """The worker that has started computing (its CPU grew by 0.2 s)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for pid in workers:
            if cpu_seconds(pid) - before[pid] >= 0.2:
                return pid
        time.sleep(0.05)
    raise AssertionError("no worker started computing")


def test_a_cheap_explain_is_answered_while_a_heavy_request_computes_in_a_worker():
    """The 7-second fit under a 3-second budget: a worker computes it (the serving process's own CPU hardly
    moves), a catalog explain sent meanwhile is answered before it, and then the fit is answered 503 with one
    line, its worker replaced by a fresh one that answers the next fit."""
    with running_server("--request-budget", "3") as (base, process):
        workers = wait_for_workers(process.pid)
        before = {pid: cpu_seconds(pid) for pid in workers}
        serving_before = cpu_seconds(process.pid)
        fit, answers = _in_background(base, "/api/fit?" + query(**FIT_7S))
        busy = _busy_worker(workers, before)
        status, body = request(base, EXPLAIN)
        assert status == 200 and body["model"] == "Qwen/Qwen3-8B"
        assert fit.is_alive() and not answers  # the explain came back while the fit was still computing
        fit.join(120)
        status, body = answers[0]
        assert status == 503 and list(body) == ["error"]
        assert "ran past its budget of 3 s of computation (CPU)" in body["error"]
        worker_spent = 3.0  # at least its budget: it was stopped past it
        serving_spent = cpu_seconds(process.pid) - serving_before
        assert serving_spent < worker_spent / 3, f"the serving process spent {serving_spent:.2f} s of CPU"
        after = wait_for_workers(process.pid)
        assert busy not in after and len(after) == len(workers) and workers - after == {busy}
        assert request(base, SMALL_FIT)[0] == 200


def test_a_request_within_its_budget_keeps_its_worker():
    with running_server() as (base, process):
        workers = wait_for_workers(process.pid)
        assert request(base, SMALL_FIT)[0] == 200
        assert request(base, SMALL_FIT)[0] == 200
        assert worker_pids(process.pid) == workers


def _raw(base: str, path: str) -> tuple[int, bytes]:
    """Status and body bytes; fit's own run time ("seconds") blanked."""
    try:
        with urllib.request.urlopen(base + path, timeout=120) as response:
            status, body = response.status, response.read()
    except urllib.error.HTTPError as error:
        status, body = error.code, error.read()
    return status, re.sub(rb'"seconds": [0-9.]+', b'"seconds": 0', body)


def test_answers_are_the_same_bytes_from_a_worker_and_from_a_thread():
    """`--workers 0` computes every request on threads of the serving process (no worker process at all)."""
    paths = [SMALL_FIT, "/api/whatif?" + query(model="Qwen/Qwen3-8B", gpu="L4"),
             "/api/simulate?" + query(model="Qwen/Qwen3-8B", gpu="H100", workload="chat:requests=20"),
             "/api/simulate?" + query(model="Qwen/Qwen3-8B", gpu="H100", workload="nope"),
             "/api/fit?" + query(model="Qwen/Qwen3-8B", gpu="T4", context="4k", concurrency="1e308")]
    with running_server() as (base, process):
        wait_for_workers(process.pid)
        pooled = [_raw(base, path) for path in paths]
    with running_server("--workers", "0") as (base, process):
        time.sleep(0.5)
        assert worker_pids(process.pid) == set()
        threaded = [_raw(base, path) for path in paths]
    assert [status for status, _ in pooled] == [200, 200, 200, 400, 400]
    assert pooled == threaded


def test_trickling_hub_fetches_hold_up_neither_a_cheap_nor_a_heavy_request(tmp_path):
    """Three Hub fetches from a server trickling a byte every 0.5 s (the Hub pool's two workers busy, one fetch
    queued): a catalog explain and a fit are answered while all three are still in flight."""
    from test_hostile_hub import _Server

    hub = _Server(trickle=True)
    env = {"HF_ENDPOINT": hub.endpoint, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "0"}
    try:
        with running_server("--hub-deadline", "30", env=env) as (base, process):
            wait_for_workers(process.pid)
            fetches = [_in_background(base, "/api/explain?" + query(model=f"org/m{i}", gpu="H100")) for i in range(3)]
            time.sleep(1.0)  # the fetches reach their workers (and the hub server)
            status, body = request(base, EXPLAIN)
            assert status == 200 and body["model"] == "Qwen/Qwen3-8B"
            assert request(base, SMALL_FIT)[0] == 200
            assert all(thread.is_alive() and not answers for thread, answers in fetches)
    finally:
        hub.stop()
    for thread, _ in fetches:
        thread.join(60)
