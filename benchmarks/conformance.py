"""How far the project agrees with the engines' own unit tests (tests/conformance/).

    python benchmarks/conformance.py [-v]
Runs pytest on tests/conformance with a small plugin that reads each case's id
(`<engine test>[<part>]@<engine>-<release>`) and prints, per engine and release, the expectations translated
and those agreeing, then the ones that do not agree (known gaps are xfail(strict=True) cases).
"""
from __future__ import annotations

import argparse
import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_ID = re.compile(r"\[(?P<test>[A-Za-z0-9_]+)\[(?P<part>[^\]]*)\]@(?P<engine>[a-z_]+)-(?P<release>[0-9.]+)\]$")


class Collector:
    """pytest plugin: (engine, release) -> [(case, agrees)]."""

    def __init__(self) -> None:
        self.results: dict[tuple[str, str], list[tuple[str, bool]]] = defaultdict(list)

    def pytest_runtest_logreport(self, report) -> None:
        if report.when != "call" and not (report.when == "setup" and report.outcome != "passed"):
            return
        match = _ID.search(report.nodeid)
        if match is None:
            return
        agrees = report.outcome == "passed" and not hasattr(report, "wasxfail")
        case = f"{match['test']}[{match['part']}]"
        self.results[(match["engine"], match["release"])].append((case, agrees))


def _release_key(item: tuple[tuple[str, str], object]):
    (engine, release), _ = item
    return engine, tuple(int(p) for p in release.split("."))


def main() -> int:
    import pytest

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="also show pytest's own output")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    collector = Collector()
    quiet = [] if args.verbose else ["-p", "no:terminal"]
    pytest.main([str(ROOT / "tests" / "conformance"), "-p", "no:cacheprovider", *quiet], plugins=[collector])
    print(f"{'engine':8} {'release':9} {'translated':>10} {'agreeing':>9}")
    disagreeing: list[str] = []
    total = agree = 0
    for (engine, release), cases in sorted(collector.results.items(), key=_release_key):
        ok = sum(1 for _, agrees in cases if agrees)
        total, agree = total + len(cases), agree + ok
        print(f"{engine:8} {release:9} {len(cases):10d} {ok:9d}")
        disagreeing += [f"  {engine} {release}: {case}" for case, agrees in cases if not agrees]
    print(f"{'all':18} {total:10d} {agree:9d}")
    print("not agreeing:" if disagreeing else "not agreeing: none")
    print("\n".join(disagreeing))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
