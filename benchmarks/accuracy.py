"""Accuracy of the predictions against real vLLM startup logs.

    python benchmarks/accuracy.py --summary            # the table for groundtruth/dev.jsonl
    python benchmarks/accuracy.py --cases FILE --json  # any case file, machine-readable
    python benchmarks/accuracy.py --per-case           # every scored figure of every case
    python benchmarks/accuracy.py --markdown           # the end-to-end tables for docs/accuracy.md
    python benchmarks/accuracy.py --modern             # vLLM 0.15+'s profile terms on groundtruth/dev-vllm-modern.jsonl

The summary ends with the profile-term table of dev-vllm-modern.jsonl (real vLLM 0.19 runs with the DEBUG profiling
lines): activation peak, non-torch memory, the CUDA-graph pool and vLLM's own estimate, the KV pool.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from vram_detective.fidelity import markdown  # noqa: E402
from vram_detective.scoring import format_summary, load_cases, score_cases  # noqa: E402

DEFAULT_CASES = ROOT / "groundtruth" / "dev.jsonl"  # the repo copy (scripts/sync_groundtruth.py)
MODERN_CASES = ROOT / "groundtruth" / "dev-vllm-modern.jsonl"
ENGINE = "vllm"  # this benchmark's engine: its section of the score report
PROFILE_TERMS = ("activation_peak_gib", "non_torch_gib", "cuda_graph_gib", "cuda_graph_estimate_gib", "kv_cache_gib")


def profile_terms(report: dict) -> str:
    """The profile terms' errors (median / p90 / max relative, median |GiB|) and how many estimate lines land
    within 0.01 GiB of the logged one."""
    lines = [f"  {'figure':<26}{'n':>3}{'median':>9}{'p90':>9}{'max':>9}{'|GiB| med':>11}"]
    for key in PROFILE_TERMS:
        row = report["figures"].get(key)
        if not row:
            continue
        lines.append(f"  {key:<26}{row['n']:>3}{row['median_abs_rel_err']:>9.1%}{row['p90_abs_rel_err']:>9.1%}"
                     f"{row['max_abs_rel_err']:>9.1%}{row.get('median_abs_err_gib', 0):>11.3f}")
    errors = [case["figures"]["cuda_graph_estimate_gib"]["abs_err_gib"] for case in report["per_case"]
              if "cuda_graph_estimate_gib" in case["figures"]]
    if errors:
        close = sum(error <= 0.01 for error in errors)
        lines.append(f"  'Estimated CUDA graph memory' line within 0.01 GiB: {close}/{len(errors)}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default=str(DEFAULT_CASES), help="ground-truth JSONL (default: groundtruth/dev.jsonl)")
    parser.add_argument("--summary", action="store_true", help="print the accuracy table (default)")
    parser.add_argument("--per-case", action="store_true", help="print every scored figure")
    parser.add_argument("--json", action="store_true", help="print the full report as JSON")
    parser.add_argument("--modern", action="store_true",
                        help="only the profile-term table of groundtruth/dev-vllm-modern.jsonl")
    parser.add_argument("--markdown", action="store_true",
                        help="print the end-to-end tables (headline, verdict confusion, era, GPU class) as Markdown")
    args = parser.parse_args()
    if not Path(args.cases).is_file():
        print(f"no case file at {args.cases}", file=sys.stderr)
        return 2
    if args.modern:
        print(f"vLLM 0.15+ profile terms ({MODERN_CASES.name})\n" + profile_terms(score_cases(load_cases(str(MODERN_CASES)))[ENGINE]))
        return 0
    started = time.perf_counter()
    whole = score_cases(load_cases(args.cases))
    elapsed = time.perf_counter() - started
    report = whole.get(ENGINE, {"cases": 0, "scored": 0, "per_case": []})  # vLLM's section (score's sections: one per engine)
    if args.json:
        print(json.dumps(whole, indent=2))
        return 0
    if args.markdown:
        print(markdown(report))
        return 0
    if args.per_case:
        for case in report["per_case"]:
            print(f"{case['id']}  (vLLM {case['vllm_version']})" + (f"  refused: {case['refused']}" if "refused" in case else ""))
            for key, figure in case["figures"].items():
                print(f"    {key:<32} observed {figure['observed']!s:>12}  predicted {figure['predicted']!s:>12}  "
                      f"error {figure['rel_err']:.2%}")
        print()
    print(format_summary(whole))
    print(f"\nscored {report['scored']} of {report['cases']} cases in {elapsed:.2f} s")
    if MODERN_CASES.is_file() and Path(args.cases).resolve() != MODERN_CASES.resolve():
        modern = score_cases(load_cases(str(MODERN_CASES)))[ENGINE]
        print(f"\nvLLM 0.15+ profile terms ({MODERN_CASES.name}, {modern['scored']} cases)\n" + profile_terms(modern))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # e.g. piped into head
        sys.exit(0)
