"""The simulator step for step against vLLM's real V1 Scheduler and KVCacheManager (issue 26), on a CPU.

Seeded random traces of six kinds (one full group; full + sliding window; prefix sharing; tight pools that
preempt; chunked prefill of long prompts; max_num_seqs binding), each with prefix caching on and off, all
arrivals at t = 0 on a pinned pool (the simulator as `--num-gpu-blocks-override N --block-size 16 --cost
decode=1,seq=0,prefill=1e15`). vLLM's scheduler runs in a virtual environment with that release installed
(VENVS/vllm-RELEASE, made when missing: `pip install vllm==RELEASE`, which pulls torch), driven by
vllm_scheduler_driver.py; the simulator runs here (simulate/stepwise.py). Prints the first divergence of each
divergent trace and a table by kind. Asserts nothing.

    PYTHONPATH=src python3 benchmarks/scheduler_conformance.py 0.11.0 [--traces N] [--seed S]
        [--venvs DIR] [--save-fixtures FILE] [--fixture-count N] [--fixture-include NAME] [-v]

--save-fixtures writes the real scheduler's series of the first N traces of each kind (compact JSON) for
tests/test_scheduler_conformance.py, which checks them without vLLM.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "src"))

from vram_detective.simulate.stepwise import first_divergence, step_rows  # noqa: E402

KINDS = ("full", "sliding", "prefix", "tight", "chunked", "seqs")
MODEL = ROOT / "groundtruth" / "models" / "Qwen--Qwen2.5-7B-Instruct"  # a config.json only (32k positions)
MAX_MODEL_LEN = 32768
BLOCK = 16


def _blocks(tokens: int) -> int:
    return -(-tokens // BLOCK)


def make_trace(kind: str, seed: int, caching: bool) -> dict:
    """One seeded trace of `kind`: a pool and 6 - 40 requests that each fit the pool alone."""
    rng = random.Random(f"{kind}:{seed}:{caching}")
    count = rng.randint(6, 40)
    prompt_hi, output_hi = (1500, 300)
    if kind == "chunked":
        count, prompt_hi = rng.randint(4, 12), 12000
    prefixes = []
    if kind in ("prefix", "sliding") or rng.random() < 0.3:
        prefixes = [rng.choice([16, 32, 48, 100, 256, 500, 800]) for _ in range(rng.randint(1, 4))]
    requests = []
    for _ in range(count):
        prefix = rng.randrange(len(prefixes)) if prefixes and rng.random() < 0.7 else -1
        low = prefixes[prefix] + 1 if prefix >= 0 else 1
        prompt = rng.randint(low, max(low, prompt_hi))
        requests.append([prompt, rng.randint(1, output_hi), prefix, prefixes[prefix] if prefix >= 0 else 0])
    groups = [["full", None]]
    if kind == "sliding" or (kind in ("tight", "prefix") and rng.random() < 0.4):
        groups.append(["sliding", rng.choice([16, 32, 64, 100, 128, 500, 1000])])
    largest = max(_blocks(p + o) for p, o, _, _ in requests)
    need = sum(_blocks(p + o) for p, o, _, _ in requests) * len(groups)
    floor = largest * len(groups) + 2  # every request fits the pool alone
    if kind == "tight":
        num_blocks = max(floor, int(need * rng.uniform(0.15, 0.5)))
    else:
        num_blocks = max(floor, int(need * rng.uniform(0.5, 1.5)))
    budget = rng.choice([2048, 8192]) if kind == "chunked" else rng.choice([512, 1024, 2048, 8192])
    seqs = rng.randint(1, 8) if kind == "seqs" else rng.choice([16, 64, 256])
    trace = {"name": f"{kind}-{seed}-{'cache' if caching else 'nocache'}", "kind": kind, "num_blocks": num_blocks,
             "block_size": BLOCK, "max_num_seqs": seqs, "max_num_batched_tokens": max(budget, seqs),
             "max_model_len": MAX_MODEL_LEN, "prefix_caching": caching, "groups": groups, "requests": requests}
    # half the traces with a sliding window run with async scheduling (two batches in flight: from 0.26.0 the
    # window's admission cap doubles); drawn apart so that every other draw above stays as it was
    if len(groups) > 1 and random.Random(f"{kind}:{seed}:{caching}:async").random() < 0.5:
        trace.update(name=trace["name"] + "-async", async_scheduling=True)
    return trace


def make_traces(count: int, seed: int) -> list[dict]:
    """`count` traces, the kinds and prefix caching on / off in turn."""
    return [make_trace(KINDS[i % len(KINDS)], seed + i // (2 * len(KINDS)), (i // len(KINDS)) % 2 == 0)
            for i in range(count)]


def for_release(traces: list[dict], release: str) -> list[dict]:
    """Releases before the hybrid KV-cache manager (0.8.5's KVCacheManager takes one group: "does not support
    hybrid models with more than 1 kv cache group") run the window alone: one sliding-window group."""
    if tuple(int(x) for x in release.split(".")[:2]) >= (0, 9):
        return traces
    return [dict(t, groups=[g for g in t["groups"] if g[0] == "sliding"]) if len(t["groups"]) > 1 else t
            for t in traces]


def ensure_venv(release: str, venvs: Path) -> Path:
    """VENVS/vllm-RELEASE/bin/python, made when missing (uv when on PATH, else pip; both pull torch)."""
    venv = venvs / f"vllm-{release}"
    python = venv / "bin" / "python"
    if python.exists():
        return python
    print(f"installing vLLM {release} into {venv} (pulls torch; minutes)", file=sys.stderr, flush=True)
    uv = shutil.which("uv")
    if uv:
        subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(venv)], check=True)
        subprocess.run([uv, "pip", "install", "--python", str(python), f"vllm=={release}"], check=True)
    else:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", f"vllm=={release}"], check=True)
    return python


def real_series(python: Path, traces: list[dict]) -> tuple[str, dict]:
    env = dict(os.environ, VLLM_LOGGING_LEVEL="ERROR", VLLM_TARGET_DEVICE="cpu")
    env.pop("PYTHONPATH", None)
    done = subprocess.run([str(python), str(HERE / "vllm_scheduler_driver.py"), str(MODEL)],
                          input=json.dumps({"traces": traces}), capture_output=True, text=True, env=env,
                          cwd="/tmp")
    if done.returncode:
        raise SystemExit(f"the vLLM driver failed:\n{done.stderr[-3000:]}")
    out = json.loads(done.stdout)
    return out["version"], out["series"]


def compare(traces: list[dict], series: dict, version: str, verbose: bool) -> list[tuple[dict, str | None]]:
    results = []
    for trace in traces:
        real = series[trace["name"]]
        if isinstance(real, dict):
            results.append((trace, f"the real scheduler failed: {real['error']}"))
            continue
        simulated = step_rows(trace, version)
        results.append((trace, first_divergence(real, simulated)))
        if verbose:
            print(f"  {trace['name']:24} {len(real):5} steps  {results[-1][1] or 'identical'}")
    return results


def table(results: list[tuple[dict, str | None]], release: str) -> None:
    """Traces, divergent ones (the first differing field of each), and those the real scheduler itself could
    not run (an exception inside vLLM: nothing to compare)."""
    by_kind: dict[str, list] = defaultdict(list)
    for trace, divergence in results:
        by_kind[trace["kind"]].append(divergence)
    print(f"\nvLLM {release}: the simulator against the real Scheduler, step for step")
    print(f"{'kind':10} {'traces':>7} {'divergent':>10} {'vLLM failed':>12}  first divergences (field)")
    total = bad_total = failed_total = 0
    for kind in KINDS:
        found = by_kind.get(kind, [])
        failed = [d for d in found if d and d.startswith("the real scheduler failed")]
        bad = [d for d in found if d and d not in failed]
        fields = Counter(d.split(":")[1].split()[0] if d.startswith("step ") else d.split(":")[0] for d in bad)
        print(f"{kind:10} {len(found):7} {len(bad):10} {len(failed):12}  "
              f"{', '.join(f'{k} {v}' for k, v in fields.most_common())}")
        total, bad_total, failed_total = total + len(found), bad_total + len(bad), failed_total + len(failed)
    print(f"{'all':10} {total:7} {bad_total:10} {failed_total:12}")


def run_length(rows: list[list]) -> list[list]:
    """[[repeat, row], ...]: a stretch of identical steps as one entry."""
    out: list[list] = []
    for row in rows:
        if out and out[-1][1] == row:
            out[-1][0] += 1
        else:
            out.append([1, row])
    return out


def save_fixtures(path: Path, release: str, traces: list[dict], series: dict, per_kind: int,
                  include: tuple[str, ...] = ()) -> None:
    """The first `per_kind` traces of each kind and caching setting, and the traces named in `include` (one
    that once diverged, kept so CI checks the rule that fixed it)."""
    chosen, seen = [], Counter()
    for trace in traces:
        if isinstance(series[trace["name"]], dict):
            continue
        if seen[trace["kind"], trace["prefix_caching"]] < per_kind or trace["name"] in include:
            seen[trace["kind"], trace["prefix_caching"]] += 1
            case = {"trace": trace, "steps": run_length(series[trace["name"]])}
            divergence = first_divergence(series[trace["name"]], step_rows(trace, release))
            if divergence:  # a known gap: the test expects it to fail (xfail strict), with what was observed
                case["known_divergence"] = divergence
            chosen.append(case)
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {"release": release, "source": "benchmarks/scheduler_conformance.py: vLLM's own Scheduler on a CPU",
            "fields": ["used", "running", "waiting", "preempted", "hits", "finished", "queries", "query_hits"],
            "steps": "[[repeat, row], ...]: repeat identical steps in a row",
            "cases": chosen}
    path.write_text(json.dumps(body, separators=(",", ":")) + "\n")
    print(f"wrote {len(chosen)} traces' series to {path}")


def saved_or_real_series(path: Path | None, run) -> tuple[str, list]:
    """(release, per-trace series): read from `path` when it exists, else `run()` (the real scheduler) and
    written there when a path is given."""
    if path and path.exists():
        saved = json.loads(path.read_text())
        return saved["version"], saved["series"]
    version, series = run()
    if path:
        path.write_text(json.dumps({"version": version, "series": series}, separators=(",", ":")))
    return version, series


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("release", help="the vLLM release, e.g. 0.11.0")
    parser.add_argument("--traces", type=int, default=240)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--venvs", type=Path, default=Path(os.environ.get("VLLM_VENVS", "/work/venvs")))
    parser.add_argument("--save-fixtures", type=Path, metavar="FILE")
    parser.add_argument("--fixture-count", type=int, default=3, help="traces per kind and caching setting")
    parser.add_argument("--fixture-include", action="append", default=[], metavar="NAME",
                        help="also save this trace's series (repeatable)")
    parser.add_argument("--series", type=Path, metavar="FILE",
                        help="the real scheduler's series: read from FILE when it exists, else written there")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args()
    traces = for_release(make_traces(args.traces, args.seed), args.release)
    start = time.perf_counter()
    version, series = saved_or_real_series(args.series, lambda: real_series(ensure_venv(args.release, args.venvs),
                                                                             traces))
    print(f"vLLM {version}: {len(traces)} traces in {time.perf_counter() - start:.0f} s (the real scheduler)",
          flush=True)
    results = compare(traces, series, args.release, args.verbose)
    for trace, divergence in results:
        if divergence:
            print(f"  {trace['name']:24} {divergence}")
    table(results, args.release)
    if args.save_fixtures:
        save_fixtures(args.save_fixtures, args.release, traces, series, args.fixture_count,
                      tuple(args.fixture_include))


if __name__ == "__main__":
    main()
