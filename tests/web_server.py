"""A real `vram-detective serve` on a free loopback port, for the web tests (API and browser)."""
from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cli_env() -> dict:
    """This checkout's sources first, the Hub offline (tests never reach it)."""
    return dict(os.environ, PYTHONPATH=str(ROOT / "src"), HF_HUB_OFFLINE="1")


@contextlib.contextmanager
def running_server(*extra: str, env: dict | None = None):
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "vram_detective", "serve", "--port", str(port), *extra],
                               cwd=ROOT, env={**cli_env(), **(env or {})}, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            if process.poll() is not None:
                raise RuntimeError(f"serve exited: {process.stderr.read()}")
            try:
                urllib.request.urlopen(base + "/api/releases", timeout=2).read()
                break
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.05)
        else:
            raise RuntimeError("serve did not answer within 15 s")
        yield base, process
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of one process (its own threads, not its children)."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if int(open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry))
            except (OSError, IndexError, ValueError):
                continue
    return found


def worker_pids(pid: int) -> set[int]:
    """The worker processes of the server `pid`: the children of its fork server (web/workers.py)."""
    return {worker for child in children(pid) for worker in children(child)}


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of the server and every process under it (its fork server and workers)."""
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        try:
            total += cpu_seconds(current)
        except OSError:
            continue
        todo.extend(children(current))
    return total


def wait_for_workers(pid: int, count: int = 4, seconds: float = 60) -> set[int]:
    """The server's workers once `count` are running (they start in the background after it listens)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        found = worker_pids(pid)
        if len(found) >= count:
            return found
        time.sleep(0.1)
    raise RuntimeError(f"{count} workers did not start within {seconds:g} s (found {len(worker_pids(pid))})")


def cli_json(*args: str, stdin: str | None = None) -> str:
    """What `vram-detective ARGS --json` prints (stdout text)."""
    done = subprocess.run([sys.executable, "-m", "vram_detective", *args, "--json"], cwd=ROOT, env=cli_env(),
                          input=stdin, capture_output=True, text=True, timeout=120)
    return done.stdout
