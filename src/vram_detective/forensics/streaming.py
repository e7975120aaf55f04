"""`logs` on a log of any length: stream it, keep the last runs in full and fold every earlier one into a summary
(how many runs, how many failed, each observed figure's range, the releases, models and failure messages seen).
Memory stays bounded by the runs kept, however many starts the file holds (issue 17: a 1 GiB log of 566k
starts took 9 GiB and printed 219 MB).

The runs come from the streaming reader of the engine that wrote the log (engine.logs.reader(); the default
engine's when none is given). The hook for forensics/command.py is one call:

    bounded = parse_file_bounded(path, keep=DEEP_RUNS)   # or parse_stream_bounded(binary_stream, name, keep, reader)
    parsed, earlier = bounded.parsed, bounded.earlier     # ParsedLog of the last `keep` runs; RunsSummary
    report["earlier_runs"] = earlier.to_dict()            # None-free dict; earlier.count == 0 when none

`engine_of_file(path)` names the engine from the first HEAD_BYTES only (instead of reading the whole file).
"""
from __future__ import annotations

import collections
import functools
from dataclasses import dataclass, field
from typing import Any

from ..units import open_regular_file

KEEP_RUNS = 8  # runs kept in full (an engine's analysis takes the last DEEP_RUNS = 8)
DEEP_RUNS = 8  # runs analysed in full (the last ones); earlier restarts are listed with their figures
LISTED_RUNS = 64  # runs listed at all; the startups before them are folded into one summary (bounded memory)
HEAD_BYTES = 4 << 20  # what engine detection reads: every engine's banner comes in the first lines
MAX_DISTINCT = 20  # releases / models / failure messages counted by name; the rest as "other"
MAX_FIGURES_PER_RUN = 20_000  # one run repeating a line forever keeps its first figures only


@dataclass
class FigureRange:
    count: int = 0
    low: float | None = None
    high: float | None = None
    last: float | None = None

    def add(self, value) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
            return
        self.count += 1
        self.low = value if self.low is None else min(self.low, value)
        self.high = value if self.high is None else max(self.high, value)
        self.last = value


class _Tally:
    """Counts of at most MAX_DISTINCT names; later names go to "other" (bounded whatever the log holds)."""

    def __init__(self) -> None:
        self.counts: collections.Counter = collections.Counter()
        self.other = 0

    def add(self, name) -> None:
        if name is None:
            return
        name = str(name)[:200]
        if name in self.counts or len(self.counts) < MAX_DISTINCT:
            self.counts[name] += 1
        else:
            self.other += 1

    def to_dict(self) -> dict:
        out = dict(self.counts.most_common())
        if self.other:
            out["(other)"] = self.other
        return out


@dataclass
class RunsSummary:
    """What the runs before the kept ones printed, folded as they leave the parser."""

    count: int = 0
    first_line: int = 0
    last_line: int = 0
    failed: int = 0
    started: int = 0
    figures: dict[str, FigureRange] = field(default_factory=dict)
    versions: _Tally = field(default_factory=_Tally)
    models: _Tally = field(default_factory=_Tally)
    failure_messages: _Tally = field(default_factory=_Tally)

    def add(self, run) -> None:
        observed = run.observed()
        self.count += 1
        self.first_line = self.first_line or run.first_line
        self.last_line = max(self.last_line, run.last_line)
        failed = observed.get("startup_failed")
        self.failed += failed is True
        self.started += failed is False
        for key, value in observed.items():
            if key != "startup_failed":
                self.figures.setdefault(key, FigureRange()).add(value)
        self.versions.add(run.version[0] if run.version else None)
        self.models.add(run.model[0] if run.model else None)
        self.failure_messages.add(run.failure_message())

    def to_dict(self) -> dict:
        return {"runs": self.count, "lines": [self.first_line, self.last_line], "failed": self.failed,
                "started": self.started, "versions": self.versions.to_dict(), "models": self.models.to_dict(),
                "failure_messages": self.failure_messages.to_dict(),
                "figures": {key: {"runs": r.count, "min": r.low, "max": r.high, "last": r.last}
                            for key, r in self.figures.items()}}


def default_reader():
    """The streaming reader of the default engine (the one a log is taken for when no other engine claims it)."""
    from ..engines import get_engine

    return get_engine().logs.reader()


@functools.cache
def _bounded_class(parser_class: type) -> type:
    """The engine's parser, holding at most `keep` + 2 runs: older ones are summarized and dropped as the log
    goes on. The two extra runs cover what finish() still merges (identity lines after the last figures)."""

    class Bounded(parser_class):
        def __init__(self, keep: int = KEEP_RUNS) -> None:
            super().__init__()
            self.keep = max(int(keep), 1)
            self.earlier = RunsSummary()

        def feed(self, raw: str) -> None:
            super().feed(raw)
            runs = self._builder.runs
            if len(runs[-1].figures) > MAX_FIGURES_PER_RUN:
                del runs[-1].figures[MAX_FIGURES_PER_RUN:]
            while len(runs) > self.keep + 2:
                oldest = runs.pop(0)
                if oldest.lines_matched or oldest.figures or oldest.settings:  # the runs finish() would keep
                    self.earlier.add(oldest)

        def finish(self):
            parsed = super().finish()
            while len(parsed.runs) > self.keep:
                self.earlier.add(parsed.runs.pop(0))
            for index, run in enumerate(parsed.runs):
                run.index = self.earlier.count + index  # run numbers count the summarized runs too
            return parsed

    Bounded.__name__ = Bounded.__qualname__ = f"Bounded{parser_class.__name__}"
    return Bounded


def BoundedLogParser(keep: int = KEEP_RUNS, reader: Any = None):  # noqa: N802 - builds the parser like a class
    """A parser of `reader` (default: the default engine's) with bounded memory (_bounded_class)."""
    return _bounded_class((reader or default_reader()).LogParser)(keep)


@dataclass(frozen=True)
class BoundedParse:
    parsed: Any  # the reader's ParsedLog of the last `keep` runs, in full
    earlier: RunsSummary  # every run before them


def parse_stream_bounded(stream, name: str = "input", keep: int = KEEP_RUNS, reader: Any = None) -> BoundedParse:
    """The reader's parse_stream with bounded memory: the same errors (binary, empty, no memory lines)."""
    reader = reader or default_reader()
    parser = BoundedLogParser(keep, reader)
    parsed = reader.parse_stream(stream, name, parser)
    return BoundedParse(parsed, parser.earlier)


def parse_file_bounded(path: str, keep: int = KEEP_RUNS, reader: Any = None) -> BoundedParse:
    with open_regular_file(path, "log") as stream:
        return parse_stream_bounded(stream, path, keep, reader)


def engine_of_file(path: str, head_bytes: int = HEAD_BYTES) -> str:
    """The engine that wrote the log, from its first `head_bytes` (engine_logs.detect_engine)."""
    from .engine_logs import detect_engine

    with open_regular_file(path, "log") as stream:
        head = stream.read(head_bytes)
    return detect_engine(head.decode("utf-8", "replace"))
