"""A Hub server that lies, trickles and loops (a real HTTP server on 127.0.0.1 started by each test): the
fetch ends with one line within its deadline, and nothing from the answer builds a path outside the cache."""
from __future__ import annotations

import json
import re
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytest.importorskip("huggingface_hub")

from vram_detective.model.hub import fetch  # noqa: E402
from vram_detective.model.hub_calls import HubAnswerError, HubDeadlineError, HubError
from vram_detective.model.sources import MAX_CONFIG_BYTES, MAX_INDEX_BYTES, MalformedConfigError  # noqa: E402

COMMIT = "0123456789abcdef0123456789abcdef01234567"


class _Server:
    """Answers model info with `sha` and the files given; `trickle` sends every body 1 byte per 0.5 s;
    `loop` redirects every request to itself."""

    def __init__(self, sha=COMMIT, files=("config.json",), trickle=False, loop=False, huge=None, honor_range=True):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_HEAD(self):
                server.answer(self, head=True)

            def do_GET(self):
                server.answer(self, head=False)

        self.sha, self.files, self.trickle, self.loop = sha, files, trickle, loop
        self.huge, self.honor_range = huge or {}, honor_range  # file name -> size served lazily (spaces)
        self.sent: dict[str, int] = {}
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        self.endpoint = "http://127.0.0.1:%d" % self.httpd.server_address[1]

    def answer(self, handler, head):
        if self.loop:
            handler.send_response(302)
            handler.send_header("Location", handler.path)
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            return
        name = handler.path.rsplit("/", 1)[-1]
        if not handler.path.startswith("/api/models/") and name in self.huge:
            return self.answer_huge(handler, head, name, self.huge[name])
        if handler.path.startswith("/api/models/"):
            body = json.dumps({"id": "org/m", "sha": self.sha, "siblings": [{"rfilename": f} for f in self.files]})
        else:
            body = json.dumps({"architectures": ["LlamaForCausalLM"]})
        data = body.encode()
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.send_header("X-Repo-Commit", COMMIT)
        handler.send_header("ETag", '"e"')
        handler.end_headers()
        if head:
            return
        try:
            if self.trickle:
                for index in range(len(data)):
                    handler.wfile.write(data[index:index + 1])
                    handler.wfile.flush()
                    time.sleep(0.5)
            else:
                handler.wfile.write(data)
        except OSError:
            pass

    def answer_huge(self, handler, head, name, size):
        """`size` bytes of JSON whitespace, made as they are sent (never held), through a small socket
        buffer so that what is counted as sent is what left for the client (within ~1 MiB)."""
        handler.request.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
        start, end = 0, size - 1
        found = re.match(r"bytes=(\d+)-(\d+)$", handler.headers.get("Range") or "")
        if found and self.honor_range:
            start, end = int(found.group(1)), min(int(found.group(2)), size - 1)
            handler.send_response(206)
            handler.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        else:
            handler.send_response(200)
        handler.send_header("Content-Length", str(end - start + 1))
        handler.send_header("X-Repo-Commit", COMMIT)
        handler.send_header("ETag", '"huge"')
        handler.end_headers()
        left = 0 if head else end - start + 1
        chunk = b" " * 65536
        try:
            while left > 0:
                piece = chunk[:min(left, len(chunk))]
                handler.wfile.write(piece)
                left -= len(piece)
                self.sent[name] = self.sent.get(name, 0) + len(piece)
        except OSError:
            pass

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def hub_env(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_ASSETS_CACHE", "HF_TOKEN", "HF_HUB_OFFLINE",
                 "VRAM_DETECTIVE_HUB_DEADLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    servers = []

    def start(**kwargs):
        server = _Server(**kwargs)
        servers.append(server)
        monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
        return server

    yield start
    for server in servers:
        server.stop()


def test_a_commit_that_is_a_path_builds_no_cache_path(hub_env, tmp_path):
    hub_env(sha="../../../../x/PWNED")
    with pytest.raises(HubAnswerError, match="not a 40-hex commit"):
        fetch("org/m")
    assert not list(tmp_path.rglob("PWNED")) and not (tmp_path / "x").exists()


def test_a_trickling_server_fails_by_the_deadline(hub_env, monkeypatch):
    hub_env(trickle=True)
    started = time.monotonic()
    with pytest.raises(HubDeadlineError, match="2 s deadline"):
        fetch("org/m", deadline=2)
    assert time.monotonic() - started < 2 + 1.5
    monkeypatch.setenv("VRAM_DETECTIVE_HUB_DEADLINE", "1")
    started = time.monotonic()
    with pytest.raises(HubDeadlineError, match="1 s deadline"):
        fetch("org/m")
    assert time.monotonic() - started < 1 + 1.5


def test_a_redirect_loop_is_one_line(hub_env):
    hub_env(loop=True)
    with pytest.raises(HubError) as error:
        fetch("org/m", deadline=20)
    assert "\n" not in str(error.value) and "redirect" in str(error.value)


def test_a_bad_deadline_is_refused(hub_env, monkeypatch):
    hub_env()
    monkeypatch.setenv("VRAM_DETECTIVE_HUB_DEADLINE", "soon")
    with pytest.raises(HubError, match="VRAM_DETECTIVE_HUB_DEADLINE"):
        fetch("org/m")


HUGE = 300 << 20  # a 300 MB file: refused after the limit + 1 bytes, never downloaded whole
# what sits in the sockets' buffers when the client hangs up: 128-192 KiB on an idle machine, more when the client
# is slow to close under load; bounded by the kernel's loopback buffers, far below the 300 MB the server offers
MARGIN = 16 << 20


@pytest.mark.parametrize("honor_range", [True, False], ids=["ranged", "range-ignored"])
@pytest.mark.parametrize("name, limit", [("config.json", MAX_CONFIG_BYTES), ("quantize_config.json", MAX_CONFIG_BYTES),
                                         ("model.safetensors.index.json", MAX_INDEX_BYTES)])
def test_a_huge_json_file_is_refused_before_it_is_downloaded(hub_env, name, limit, honor_range):
    server = hub_env(files=("config.json", name), huge={name: HUGE}, honor_range=honor_range)
    started = time.monotonic()
    with pytest.raises(MalformedConfigError) as error:
        fetch("org/m", deadline=60)
    message = str(error.value)
    assert "\n" not in message and f"org/m/{name}" in message and f"{limit:,}-byte limit" in message
    if honor_range:  # the size the server announced names the file's size
        assert f"{HUGE:,} bytes" in message and server.sent[name] == limit + 1
    assert limit < server.sent[name] <= limit + 1 + MARGIN
    assert time.monotonic() - started < 30
