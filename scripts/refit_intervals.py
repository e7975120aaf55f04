"""Regenerate src/vram_detective/data/intervals.json from the scorer's errors on the dev ground truth, and
report how often observed figures fall inside their 90 % intervals: in sample, and two-fold held out (the
cases split by a hash of their id; each fold's intervals fitted on the other fold).

    PYTHONPATH=src python3 scripts/refit_intervals.py [--check]   # --check: report only, write nothing
"""
from __future__ import annotations

import argparse
import json
import sys
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from vram_detective import intervals  # noqa: E402
from vram_detective.scoring import load_cases, score_cases  # noqa: E402

FILES = ("dev.jsonl", "dev-vllm-more.jsonl", "dev-vllm-modern.jsonl", "dev-sglang.jsonl", "dev-llamacpp.jsonl")
OUT = ROOT / "src" / "vram_detective" / "data" / "intervals.json"


def fold(case_id: str) -> int:
    return zlib.crc32(case_id.encode()) % 2


def rows() -> list[dict]:
    out = []
    for name in FILES:
        out += intervals.observations(score_cases(load_cases(str(ROOT / "groundtruth" / name))))
    return out


def held_out_coverage(observed: list[dict]) -> dict:
    """Each fold scored with the intervals fitted on the other."""
    scored = []
    for part in (0, 1):
        data = intervals.fit([row for row in observed if fold(row["id"]) != part])
        test = [row for row in observed if fold(row["id"]) == part]
        result = intervals.coverage(test, data)
        scored.append(result)
    n = sum(result["overall"]["n"] for result in scored)
    inside = sum(result["overall"]["inside"] for result in scored)
    return {"n": n, "inside": inside, "share": round(inside / n, 4) if n else None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="report only; do not write the data file")
    args = parser.parse_args()
    observed = rows()
    data = intervals.fit(observed)
    data["source"] = "scripts/refit_intervals.py over groundtruth/" + ", ".join(FILES)
    in_sample = intervals.coverage(observed, data)
    held = held_out_coverage(observed)
    data["coverage"] = {"in_sample": in_sample["overall"], "two_fold_held_out": held}
    print(f"figures: {len(observed)}; with an interval: {in_sample['overall']['n']}")
    print(f"coverage of the 90 % intervals: in sample {in_sample['overall']['share']:.1%}, "
          f"two-fold held out {held['share']:.1%} (n={held['n']})")
    for term, stats in in_sample["by_term"].items():
        print(f"  {term:<40} n={stats['n']:>3} inside {stats['share']:.0%}")
    if not args.check:
        OUT.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
