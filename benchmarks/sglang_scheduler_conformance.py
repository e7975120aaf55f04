"""The SGLang simulator step for step against SGLang's own scheduler pieces, on a CPU (issue 26).

SGLang's `Scheduler.get_next_batch_to_run` / `update_running_batch`, `PrefillAdder`, `ScheduleBatch` (retract_decode,
check_decode_mem), `NewTokenRatioTracker`, its default tree cache (`UnifiedRadixCache`) and its token-to-KV pool
allocator run in a virtual environment with that release (VENVS/sglang-RELEASE), driven by
sglang_scheduler_driver.py; the simulator (simulate/sglang.py through simulate/stepwise.py) runs here over the same
traces. The traces are scheduler_conformance.py's seeded traces of five kinds (one full group; shared prefixes;
tight pools that retract; chunked prefill of long prompts; max_running_requests binding), prefix caching (the radix
cache) on and off, with SGLang's default page_size of 1: a pool of the trace's 16-token blocks x 16 tokens,
chunked_prefill_size = max_prefill_tokens = the trace's step budget, max_running_requests = its max_num_seqs (the
"sliding" kind is left out: SGLang keeps a sliding window in a pool of its own). Every request ignores EOS and
emits exactly its output length. Prints the first divergence of each divergent trace and a table by kind. Asserts
nothing.

    PYTHONPATH=src python3 benchmarks/sglang_scheduler_conformance.py 0.5.23 [--traces N] [--seed S]
        [--series FILE] [--save-fixtures FILE] [--fixture-count N] [--fixture-include NAME]
        [--fixture-append] [-v]

--save-fixtures writes the real scheduler's series of the first N traces of each kind and caching setting for
tests/test_scheduler_conformance.py, which checks them without SGLang.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(HERE))

from scheduler_conformance import make_traces, run_length, saved_or_real_series  # noqa: E402

from vram_detective.simulate.stepwise import first_divergence, step_rows  # noqa: E402

KINDS = ("full", "prefix", "tight", "chunked", "seqs")
PAGE = 1  # SGLang's default page_size (server_args: page_size None -> 1 for the default attention backends)
# what the driver imports beyond the sglang wheel itself (installed with --no-deps: its CUDA kernels, flashinfer
# and the rest are never imported by the scheduling code)
DRIVER_DEPS = ("numpy", "orjson", "psutil", "pybase64", "requests", "packaging", "pillow", "msgspec", "pydantic",
               "pyzmq", "tqdm", "IPython", "aiohttp", "transformers", "torchvision", "dill", "apache-tvm-ffi==0.1.11",
               "sentencepiece", "compressed-tensors", "gguf", "openai", "partial_json_parser", "setproctitle",
               "einops", "uvicorn", "fastapi", "triton", "starlette")


def sglang_traces(count: int, seed: int) -> list[dict]:
    """scheduler_conformance.py's traces without the sliding kind, in SGLang's token pool (page_size 1) of the
    same size, full attention only."""
    out = []
    for trace in make_traces(count, seed):
        if trace["kind"] == "sliding":
            continue
        trace = dict(trace, block_size=PAGE, num_blocks=trace["num_blocks"] * trace["block_size"] // PAGE,
                     groups=[["full", None]])
        if trace.pop("async_scheduling", False):  # vLLM's two batches in flight: not SGLang's (no overlap here)
            trace["name"] = trace["name"].removesuffix("-async")
        out.append(trace)
    return out


def ensure_venv(release: str, venvs: Path) -> Path:
    """VENVS/sglang-RELEASE/bin/python, made when missing: CPU torch, then sglang without its dependencies (they
    pull CUDA kernels) and what its scheduling modules import."""
    venv = venvs / f"sglang-{release}"
    python = venv / "bin" / "python"
    if python.exists():
        return python
    print(f"installing SGLang {release} into {venv} (CPU torch; minutes)", file=sys.stderr, flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(python), "-m", "pip", "install", "-q"]
    subprocess.run(pip + ["--index-url", "https://download.pytorch.org/whl/cpu", "torch"], check=True)
    subprocess.run(pip + ["--no-deps", f"sglang=={release}"], check=True)
    subprocess.run(pip + list(DRIVER_DEPS), check=True)
    return python


def real_series(python: Path, traces: list[dict]) -> tuple[str, dict]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    done = subprocess.run([str(python), str(HERE / "sglang_scheduler_driver.py")], input=json.dumps(
        {"traces": traces}), capture_output=True, text=True, env=env, cwd="/tmp")
    if done.returncode:
        raise SystemExit(f"the SGLang driver failed:\n{done.stderr[-3000:]}")
    out = json.loads(done.stdout)
    return out["version"], out["series"]


def compare(traces: list[dict], series: dict, release: str, verbose: bool) -> list[tuple[dict, str | None]]:
    results = []
    for trace in traces:
        real = series[trace["name"]]
        if isinstance(real, dict):
            results.append((trace, f"the real scheduler failed: {real['error']}"))
            continue
        simulated = step_rows(trace, release, engine="sglang")
        results.append((trace, first_divergence(real, simulated)))
        if verbose:
            print(f"  {trace['name']:24} {len(real):5} steps  {results[-1][1] or 'identical'}")
    return results


def table(results: list[tuple[dict, str | None]], release: str) -> None:
    by_kind: dict[str, list] = defaultdict(list)
    for trace, divergence in results:
        by_kind[trace["kind"]].append(divergence)
    print(f"\nSGLang {release}: the simulator against the real scheduler pieces, step for step")
    print(f"{'kind':10} {'traces':>7} {'divergent':>10} {'SGLang failed':>14}  first divergences (field)")
    total = bad_total = failed_total = 0
    for kind in KINDS:
        found = by_kind.get(kind, [])
        failed = [d for d in found if d and d.startswith("the real scheduler failed")]
        bad = [d for d in found if d and d not in failed]
        fields = Counter(d.split(":")[1].split()[0] if d.startswith("step ") else d.split(":")[0] for d in bad)
        print(f"{kind:10} {len(found):7} {len(bad):10} {len(failed):14}  "
              f"{', '.join(f'{k} {v}' for k, v in fields.most_common())}")
        total, bad_total, failed_total = total + len(found), bad_total + len(bad), failed_total + len(failed)
    print(f"{'all':10} {total:7} {bad_total:10} {failed_total:14}")


def save_fixtures(path: Path, release: str, traces: list[dict], series: dict, per_kind: int,
                  include: tuple[str, ...] = (), append: bool = False) -> None:
    """The first `per_kind` traces of each kind and caching setting, and those named in `include` (one with a
    retraction: SGLang's reserve of new_token_ratio x max_new_tokens makes them rare)."""
    chosen, seen = [], Counter()
    for trace in traces:
        real = series[trace["name"]]
        if isinstance(real, dict) or (seen[trace["kind"], trace["prefix_caching"]] >= per_kind
                                      and trace["name"] not in include):
            continue
        seen[trace["kind"], trace["prefix_caching"]] += 1
        case = {"trace": trace, "steps": run_length(real)}
        divergence = first_divergence(real, step_rows(trace, release, engine="sglang"))
        if divergence:  # a known gap: the test expects it to fail (xfail strict), with what was observed
            case["known_divergence"] = divergence
        chosen.append(case)
    if append and path.exists():  # traces of another seed added to the committed ones
        kept = json.loads(path.read_text())["cases"]
        names = {c["trace"]["name"] for c in chosen}
        chosen = [c for c in kept if c["trace"]["name"] not in names] + chosen
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {"engine": "sglang", "release": release,
            "source": "benchmarks/sglang_scheduler_conformance.py: SGLang's own scheduler pieces on a CPU",
            "fields": ["used", "running", "waiting", "preempted", "hits", "finished"],
            "steps": "[[repeat, row], ...]: repeat identical steps in a row", "cases": chosen}
    path.write_text(json.dumps(body, separators=(",", ":")) + "\n")
    print(f"wrote {len(chosen)} traces' series to {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("release", help="the SGLang release, e.g. 0.5.23")
    parser.add_argument("--traces", type=int, default=240, help="traces before the sliding kind is left out")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--venvs", type=Path, default=Path(os.environ.get("SGLANG_VENVS", "/work/venvs")))
    parser.add_argument("--save-fixtures", type=Path, metavar="FILE")
    parser.add_argument("--fixture-count", type=int, default=2, help="traces per kind and caching setting")
    parser.add_argument("--fixture-include", action="append", default=[], metavar="NAME",
                        help="also save this trace's series (repeatable)")
    parser.add_argument("--fixture-append", action="store_true",
                        help="add to the traces FILE already holds (another seed's)")
    parser.add_argument("--series", type=Path, metavar="FILE",
                        help="the real scheduler's series: read from FILE when it exists, else written there")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args()
    traces = sglang_traces(args.traces, args.seed)
    start = time.perf_counter()
    version, series = saved_or_real_series(args.series, lambda: real_series(ensure_venv(args.release, args.venvs),
                                                                             traces))
    print(f"SGLang {version}: {len(traces)} traces in {time.perf_counter() - start:.0f} s (the real scheduler)",
          flush=True)
    results = compare(traces, series, args.release, args.verbose)
    for trace, divergence in results:
        if divergence:
            print(f"  {trace['name']:24} {divergence}")
    table(results, args.release)
    if args.save_fixtures:
        save_fixtures(args.save_fixtures, args.release, traces, series, args.fixture_count,
                      tuple(args.fixture_include), args.fixture_append)


if __name__ == "__main__":
    main()
