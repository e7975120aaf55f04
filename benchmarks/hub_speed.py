"""Cold Hub answer for a Llama-3.1-8B layout (config.json, generation_config.json, the index, 4 shards as sparse
files with real headers) from the tests' local Hub server, against hf-mem (`pip install hf-mem`) on the same
server: wall time (median of --repeat cold runs) and the body bytes each sent.

    PYTHONPATH=src python3 benchmarks/hub_speed.py [--repeat 7] [--latency-ms 0]

hf-mem only knows https://huggingface.co: its httpx2 client is pointed at the local server by rewriting each
request's URL (scheme, host, port) before it is sent, and the server answers its file-tree call
(/api/models/{repo}/tree/{rev}). Each of our runs starts with an empty HF_HOME (no header-table cache).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import unquote, urlparse

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]

from test_sources_server import FakeHub, llama_tensors, write_sharded  # noqa: E402

REPO = "bench/Llama-3.1-8B-Instruct"


class TreeHub(FakeHub):
    """The local server plus the file-tree endpoint hf-mem lists a repository with."""

    def _answer(self, handler, head: bool) -> None:
        path = unquote(urlparse(handler.path).path)
        match = re.match(r"^/api/models/(?P<repo>[^/]+/[^/]+)/tree/(?P<rev>[^/?]+)$", path)
        if match and match.group("repo") in self.repos:
            repo = self.repos[match.group("repo")]
            if repo.delay:
                time.sleep(repo.delay)
            tree = [{"type": "file", "path": name, "size": file.stat().st_size} for name, file in sorted(repo.files.items())]
            return self._send(handler, 200, {"Content-Type": "application/json"}, json.dumps(tree).encode(), head)
        return super()._answer(handler, head)


def _layout(root: Path) -> dict:
    from vram_detective.model.sources import load_model

    config = dict(load_model("meta-llama/Llama-3.1-8B-Instruct").config)
    files = write_sharded(root / "llama", config, llama_tensors(config), shards=4, sparse=True)
    generation = root / "llama" / "generation_config.json"
    generation.write_text(json.dumps({"bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009]}))
    return dict(files, **{"generation_config.json": generation})


def _ours(server: FakeHub, root: Path, run: int) -> tuple[float, int, int]:
    from vram_detective.model import hub

    os.environ["HF_HOME"] = str(root / f"hf-home-{run}")  # cold: no header-table cache, no config download
    server.traffic.reset()
    started = time.perf_counter()
    source = hub.fetch(REPO)
    wall = time.perf_counter() - started
    assert source.checkpoint is not None and len(source.checkpoint.files) == 4
    return wall, sum(server.traffic.body_bytes.values()), len(server.traffic.requests)


def _point_hf_mem_at(endpoint: str) -> None:
    import httpx2

    local = urlparse(endpoint)
    send = httpx2.AsyncClient.send
    if getattr(send, "_bench", False):
        return

    async def to_local(self, request, **kwargs):
        request.url = request.url.copy_with(scheme=local.scheme, host=local.hostname, port=local.port)
        return await send(self, request, **kwargs)

    to_local._bench = True
    httpx2.AsyncClient.send = to_local


def _hf_mem(server: FakeHub) -> tuple[float, int, int, int]:
    from hf_mem import run

    server.traffic.reset()
    started = time.perf_counter()
    result = run(REPO)
    wall = time.perf_counter() - started
    return wall, sum(server.traffic.body_bytes.values()), len(server.traffic.requests), result.memory


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--latency-ms", type=float, default=0.0, help="server delay per request (a far-away Hub)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        server = TreeHub().start()
        os.environ.update({"HF_ENDPOINT": server.endpoint, "HF_HUB_DISABLE_PROGRESS_BARS": "1",
                           "HF_HUB_DISABLE_TELEMETRY": "1"})
        os.environ.pop("HF_HUB_OFFLINE", None)
        try:
            server.add_repo(REPO, _layout(root / "models"))
            for repo in server.repos.values():
                repo.delay = args.latency_ms / 1000
            ours = [_ours(server, root, run) for run in range(args.repeat)]
            rows = [("vram-detective (hub.fetch)", ours)]
            try:
                _point_hf_mem_at(server.endpoint)
                theirs = [_hf_mem(server)[:3] for _ in range(args.repeat)]
                rows.append(("hf-mem", theirs))
            except ImportError:
                print("hf-mem is not installed (pip install hf-mem): only our figures")
        finally:
            server.stop()
    print(f"cold Hub answer, {REPO} layout (4 shards), {args.repeat} runs, server latency {args.latency_ms:g} ms")
    print(f"{'tool':<28} {'median s':>9} {'best s':>8} {'body bytes':>11} {'requests':>9}")
    for name, runs in rows:
        walls = [wall for wall, _, _ in runs]
        print(f"{name:<28} {statistics.median(walls):>9.3f} {min(walls):>8.3f} {runs[-1][1]:>11,} {runs[-1][2]:>9}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
