"""Hub fetch cost: for models served by the tests' local Hub server (tests/test_sources_server.py), the bytes
transferred for the safetensors headers against the sum of the header sizes (goal <= 1.1x), the requests,
and the wall time; shards are read concurrently. For comparison, huggingface_hub's own
HfApi.get_safetensors_metadata (first 100 kB of every shard) on the same repos.

    python benchmarks/fetch.py            # a table
    python benchmarks/fetch.py --json

Models: a tiny 3-shard Llama (real files from the safetensors package), catalog-sized Qwen2.5-7B (4 shards)
and Qwen2.5-72B (37 shards) as sparse files with real headers, and a GGUF file with a 150k-token vocabulary.
The server can add a per-request latency (--latency-ms) to show what concurrency buys.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]

from test_sources_server import (  # noqa: E402
    TINY_LLAMA, FakeHub, llama_tensors, write_gguf, write_sharded,
)
from vram_detective.model import hub as hub_source  # noqa: E402
from vram_detective.model.safetensors_headers import read_header  # noqa: E402
from vram_detective.model.sources import load_model  # noqa: E402


def _prepare(root: Path, server: FakeHub) -> list[tuple[str, str, int]]:
    """(repo id, kind, sum of 8 + N over its shards or the GGUF header size)."""
    repos = []
    files = write_sharded(root / "tiny", TINY_LLAMA, llama_tensors(TINY_LLAMA), shards=3)
    server.add_repo("bench/tiny-llama", files)
    repos.append(("bench/tiny-llama", "safetensors", files))
    for repo_id, shards in (("Qwen/Qwen2.5-7B-Instruct", 4), ("Qwen/Qwen2.5-72B-Instruct", 37)):
        config = load_model(repo_id).config
        files = write_sharded(root / repo_id.replace("/", "--"), config, llama_tensors(config), shards=shards, sparse=True)
        server.add_repo("bench/" + repo_id.split("/")[1], files)
        repos.append(("bench/" + repo_id.split("/")[1], "safetensors", files))
    gguf_dir = root / "gguf"
    gguf_dir.mkdir()
    path = write_gguf(gguf_dir / "tiny-Q4_K_M.gguf", tokens=150_000)[0]
    server.add_repo("bench/tiny-GGUF", {path.name: path})
    repos.append(("bench/tiny-GGUF", "gguf", {path.name: path}))
    out = []
    for repo_id, kind, files in repos:
        if kind == "safetensors":
            header_sum = sum(8 + read_header(p).header_bytes for n, p in files.items() if n.endswith(".safetensors"))
        else:
            from vram_detective.model.gguf_source import read_local

            header_sum = read_local(next(iter(files.values()))).header_bytes
        out.append((repo_id, kind, header_sum))
    return out


def run(latency_ms: float = 0.0) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        server = FakeHub().start()
        os.environ.update({"HF_ENDPOINT": server.endpoint, "HF_HOME": str(root / "hf-home"),
                           "HF_HUB_DISABLE_PROGRESS_BARS": "1", "HF_HUB_DISABLE_TELEMETRY": "1"})
        os.environ.pop("HF_HUB_OFFLINE", None)
        try:
            repos = _prepare(root / "models", server)
            for repo in server.repos.values():
                repo.delay = latency_ms / 1000
            for repo_id, kind, header_sum in repos:
                suffix = ".safetensors" if kind == "safetensors" else ".gguf"
                server.traffic.reset()
                stats = hub_source.FetchStats()
                started = time.perf_counter()
                source = hub_source.fetch(repo_id, stats=stats)
                wall = time.perf_counter() - started
                sent = server.traffic.bytes_for(suffix)
                requests = sum(1 for _, path, _ in server.traffic.requests if path.endswith(suffix))
                row = {"repo": repo_id, "format": kind, "files": len(source.checkpoint.files),
                       "tensors": len(source.checkpoint.tensors), "checkpoint_gib": round(source.checkpoint.total_bytes / 2**30, 2),
                       "header_bytes": header_sum, "bytes_transferred": sent, "ratio": round(sent / header_sum, 4),
                       "header_requests": requests, "all_requests": len(server.traffic.requests),
                       "all_body_bytes": sum(server.traffic.body_bytes.values()), "wall_s": round(wall, 3)}
                if kind == "safetensors":
                    row.update(_hfapi_baseline(repo_id, server, suffix))
                rows.append(row)
        finally:
            server.stop()
    return rows


def _hfapi_baseline(repo_id: str, server: FakeHub, suffix: str) -> dict:
    from huggingface_hub import HfApi

    server.traffic.reset()
    started = time.perf_counter()
    HfApi(endpoint=os.environ["HF_ENDPOINT"]).get_safetensors_metadata(repo_id)
    wall = time.perf_counter() - started
    return {"hfapi_bytes_transferred": server.traffic.bytes_for(suffix), "hfapi_wall_s": round(wall, 3)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="server delay per request (a far-away Hub)")
    args = parser.parse_args()
    rows = run(args.latency_ms)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'repository':<28} {'fmt':<11} {'files':>5} {'ckpt GiB':>8} {'headers B':>10} {'sent B':>10} {'ratio':>6} "
          f"{'reqs':>5} {'wall s':>7} {'HfApi sent B':>12} {'HfApi s':>7}")
    for r in rows:
        print(f"{r['repo']:<28} {r['format']:<11} {r['files']:>5} {r['checkpoint_gib']:>8} {r['header_bytes']:>10,} "
              f"{r['bytes_transferred']:>10,} {r['ratio']:>6.3f} {r['header_requests']:>5} {r['wall_s']:>7.3f} "
              f"{r.get('hfapi_bytes_transferred', 0):>12,} {r.get('hfapi_wall_s', 0):>7.3f}")
    worst = max(r["ratio"] for r in rows if r["format"] == "safetensors")
    print(f"safetensors: worst bytes transferred / header bytes = {worst:.3f} (goal <= 1.1)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
