"""Accuracy of the predictions against real vLLM startup logs.

    python benchmarks/accuracy.py --summary            # the table for groundtruth/dev.jsonl
    python benchmarks/accuracy.py --cases FILE --json  # any case file, machine-readable
    python benchmarks/accuracy.py --per-case           # every scored figure of every case
    python benchmarks/accuracy.py --markdown           # the end-to-end tables for docs/accuracy.md
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default=str(DEFAULT_CASES), help="ground-truth JSONL (default: groundtruth/dev.jsonl)")
    parser.add_argument("--summary", action="store_true", help="print the accuracy table (default)")
    parser.add_argument("--per-case", action="store_true", help="print every scored figure")
    parser.add_argument("--json", action="store_true", help="print the full report as JSON")
    parser.add_argument("--markdown", action="store_true",
                        help="print the end-to-end tables (headline, verdict confusion, era, GPU class) as Markdown")
    args = parser.parse_args()
    if not Path(args.cases).is_file():
        print(f"no case file at {args.cases}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    report = score_cases(load_cases(args.cases))
    elapsed = time.perf_counter() - started
    if args.json:
        print(json.dumps(report, indent=2))
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
    print(format_summary(report))
    print(f"\nscored {report['scored']} of {report['cases']} cases in {elapsed:.2f} s")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # e.g. piped into head
        sys.exit(0)
