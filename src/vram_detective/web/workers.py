"""The web server's worker processes (issue 30). The requests that can take seconds of CPU (simulate, fit, whatif,
compare, score, logs) and those that fetch from the Hub or read a local model run in a few long-lived worker
processes, so that they never hold the serving process's GIL while a cheap catalog explain waits for it: the
serving process answers the cheap requests on its threads and only waits on a pipe for the others.

- Bounded: `size` workers a pool (the server has two pools, as it had two thread pools: one for the CPU-heavy
  requests, one for the Hub fetches that mostly wait on the network); more requests queue for a free worker.
- Started at start-up from a fork server that has imported and warmed what the workers run (web/warm.py), so
  neither the first request nor a replacement pays the imports; workers run at a lower priority (NICE) so that on
  a busy machine the serving process gets the CPU first.
- A request's budget is its worker's CPU time, read from /proc (wall time where there is no /proc): past it, or
  when the client goes away, the worker is killed and replaced, and the request answered 503 with one line.
- Each worker installs the server's read policy (service.install_read_guard) before its first request.

The work itself is app.answer(name, params, policy): the same function the serving process runs for the cheap
requests, so an answer's bytes do not depend on where it was computed."""
from __future__ import annotations

import multiprocessing
import os
import queue
import signal
import threading
import time
from pathlib import Path

# the workers' niceness: below the serving process, which answers the cheap requests
NICE = 10
# how often a waiting request looks at its worker's CPU time and its client
POLL_SECONDS = 0.02
# a request may take this many times its CPU budget in wall time (plus WALL_SLACK_S) before it is stopped all the
# same: a worker waiting on something other than the CPU (a Hub server has deadlines of its own, model/hub.py)
WALL_FACTOR = 3.0
WALL_SLACK_S = 10.0


class Worker:
    """One worker process and the server's end of its pipe."""

    def __init__(self, context, local_root: str | None):
        self.conn, child = context.Pipe()
        self.process = context.Process(target=serve, args=(child, local_root), daemon=True,
                                       name="vram-detective-worker")
        self.process.start()
        child.close()

    @property
    def pid(self) -> int:
        return self.process.pid

    def cpu_seconds(self) -> float | None:
        """User + system CPU seconds of the worker so far (None where /proc cannot tell)."""
        return process_cpu_seconds(self.process.pid)

    def kill(self) -> None:
        self.process.kill()
        self.process.join(5)
        self.conn.close()


def process_cpu_seconds(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Pool:
    """`size` workers; run() sends one request to a free one and waits for its answer under the request's budget."""

    def __init__(self, size: int, local_root: str | None, context=None):
        self.size, self.local_root = size, local_root
        self.context = context or _context()
        self._idle: queue.SimpleQueue = queue.SimpleQueue()
        self._workers: set[Worker] = set()
        self._lock = threading.Lock()
        self._closed = False
        self.replaced = 0  # workers killed (over budget, client gone, died) and started anew
        self.broken: str | None = None  # why workers cannot be started (then every request is answered 500)

    def start(self) -> None:
        try:
            for _ in range(self.size):
                self._add()
        except Exception as error:  # noqa: BLE001 - no worker could start: requests are told so, never left waiting
            self.broken = f"{type(error).__name__}: {error}"

    def _add(self) -> None:
        with self._lock:
            if self._closed:
                return
            worker = Worker(self.context, self.local_root)
            self._workers.add(worker)
        self._idle.put(worker)

    def _replace(self, worker: Worker) -> None:
        with self._lock:
            self._workers.discard(worker)
        worker.kill()
        self.replaced += 1
        self.start_one()

    def start_one(self) -> None:
        try:
            self._add()
        except Exception as error:  # noqa: BLE001 - see start()
            self.broken = f"{type(error).__name__}: {error}"

    def pids(self) -> list[int]:
        with self._lock:
            return sorted(worker.pid for worker in self._workers)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            workers, self._workers = list(self._workers), set()
        for worker in workers:
            worker.kill()

    def run(self, name: str, params: dict, seconds: float | None, cancelled: threading.Event):
        """app.answer(name, params) computed by a worker: (status, media type, body, headers). At most `size`
        callers at once (the caller's limiter), so a free worker is always there or being started."""
        from . import app

        worker = self._take(cancelled)
        if worker is None:
            return app.over_budget_answer("cancelled") if self.broken is None else app.no_workers_answer(self.broken)
        try:
            worker.conn.send((name, params))
        except (OSError, ValueError):
            self._replace(worker)
            return app.worker_died_answer()
        stopped = self._watch(worker, seconds, cancelled)
        if stopped is not None:
            self._replace(worker)
            return app.over_budget_answer(stopped, seconds)
        try:
            answer = worker.conn.recv()
        except (EOFError, OSError):
            self._replace(worker)
            return app.worker_died_answer()
        self._idle.put(worker)
        return answer

    def _take(self, cancelled: threading.Event) -> Worker | None:
        while not cancelled.is_set() and self.broken is None:
            try:
                return self._idle.get(timeout=POLL_SECONDS * 5)
            except queue.Empty:
                continue
        return None

    def _watch(self, worker: Worker, seconds: float | None, cancelled: threading.Event) -> str | None:
        """None once the worker has answered (or died); else why it was stopped: 'cancelled' or 'budget'."""
        started, cpu_start = time.monotonic(), worker.cpu_seconds()
        wall = None if seconds is None else (seconds if cpu_start is None else seconds * WALL_FACTOR + WALL_SLACK_S)
        while not worker.conn.poll(POLL_SECONDS):
            if cancelled.is_set():
                return "cancelled"
            if seconds is None:
                continue
            cpu = worker.cpu_seconds() if cpu_start is not None else None
            if (cpu is not None and cpu - cpu_start > seconds) or time.monotonic() - started > wall:
                return "budget"
        return None


def _context():
    """A fork server where the platform has one (workers forked from a process that has imported and warmed
    web/warm.py's modules), else spawn."""
    try:
        context = multiprocessing.get_context("forkserver")
    except ValueError:
        return multiprocessing.get_context("spawn")
    context.set_forkserver_preload(["vram_detective.web.warm"])
    return context


def serve(conn, local_root: str | None) -> None:
    """A worker's life: the server's read policy, then one request at a time until the server's end closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl+C stops the server, which stops its workers
    try:
        os.nice(NICE)
    except (OSError, AttributeError):
        pass
    from . import app, service

    policy = service.Policy(Path(local_root) if local_root else None)
    service.install_read_guard(policy)
    while True:
        try:
            name, params = conn.recv()
        except (EOFError, OSError):
            return
        conn.send(app.answer(name, params, policy))
