"""A loopback HTTP server replaying an engine's /metrics texts, one file per scrape (tests/data/metrics/ENGINE-RELEASE/
0.txt, 1.txt, ...; the last one repeats). Run as a script (`python metrics_replay_server.py FOLDER PORT`) it prints
"served N" after each scrape, so a test can kill it mid-poll."""
from __future__ import annotations

import contextlib
import http.server
import itertools
import sys
import threading
from pathlib import Path


def handler(texts: list[bytes], content_type: str = "text/plain; version=0.0.4; charset=utf-8", announce=None):
    counter = itertools.count()

    class Replay(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            index = next(counter)
            body = texts[min(index, len(texts) - 1)]
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            self.wfile.flush()
            if announce is not None:
                announce(index + 1)

        def log_message(self, *args):
            pass

    return Replay


def texts_of(folder: Path) -> list[bytes]:
    return [path.read_bytes() for path in sorted(folder.glob("*.txt"), key=lambda p: int(p.stem))]


@contextlib.contextmanager
def replaying(texts: list[bytes], content_type: str = "text/plain; version=0.0.4; charset=utf-8"):
    """A server on a free loopback port in a thread; yields its metrics URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler(texts, content_type))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        server.shutdown()
        server.server_close()


def main() -> None:
    folder, port = Path(sys.argv[1]), int(sys.argv[2])

    def announce(count: int) -> None:
        print(f"served {count}", flush=True)

    server = http.server.HTTPServer(("127.0.0.1", port), handler(texts_of(folder), announce=announce))
    print("ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
