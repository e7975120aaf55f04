"""SGLang accuracy on groundtruth/dev-sglang.jsonl: the scorer's SGLang section, per case and summarized.

End to end (`kv_cache_tokens`): the catalog GPU's CUDA total -> CUDA context -> SGLang's weights -> the pool.
`tokens_from_logged_start`: the log's own free memory before weights, the predicted weights;
`tokens_from_logged_memory`: both logged (exact up to the 0.01 GiB printing).
Run: PYTHONPATH=src python3 benchmarks/sglang_accuracy.py [CASES.jsonl]
"""
from __future__ import annotations

import sys
from pathlib import Path

from vram_detective.scoring import load_cases, score_engine_cases

CASES = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "groundtruth" / "dev-sglang.jsonl")
SHOWN = ("weights_mem_usage_gb", "kv_cache_tokens", "tokens_from_logged_start", "tokens_from_logged_memory")


def main() -> None:
    report = score_engine_cases("sglang", load_cases(str(CASES)))
    print(f"{'case':44} {'release':8} " + " ".join(f"{key[:24]:>26}" for key in SHOWN))
    for entry in report["per_case"]:
        cells = []
        for key in SHOWN:
            figure = entry["figures"].get(key)
            cells.append(f"{figure['predicted']:>11,.2f} vs {figure['observed']:>9,} {figure['rel_err']:>4.1%}"
                         if figure else f"{'-':>26}")
        print(f"{entry['id'][:44]:44} {entry['engine_version']:8} " + " ".join(cells))
    print()
    for title, key in (("scored", "figures"), ("non-nvidia / approximate / shared-gpu", "figures_separate_tags")):
        print(title)
        for figure, stats in report[key].items():
            print(f"  {figure:28} n={stats['n']:<3} median {stats['median_abs_rel_err']:.2%}  "
                  f"p90 {stats['p90_abs_rel_err']:.2%}  max {stats['max_abs_rel_err']:.2%}")
    print("skipped: " + "; ".join(f"{s['id']} ({s['reason']})" for s in report["skipped"]))


if __name__ == "__main__":
    main()
