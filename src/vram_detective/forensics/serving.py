"""What the KV pool held while the engine served: the periodic stats lines an engine prints after startup, folded
into bounded figures (peak, p99 and median usage of the pool, running / waiting requests, preemptions).

Formats, as each release prints them:
- vLLM V0 (engine/metrics.py LoggingStatLogger, 0.4-0.10): "Running: N reqs, Swapped: N reqs, Pending: N reqs,
  GPU KV cache usage: X%, CPU KV cache usage: Y%." and core/scheduler.py's warning on the 1st, 51st, 101st...
  preemption "Sequence group ... is preempted by PreemptionMode.RECOMPUTE/SWAP mode ...
  total_num_cumulative_preemption=N" (so the count read is at least the true one, minus up to 49);
- vLLM V1 (v1/metrics/loggers.py, 0.8+): "[Engine 000: ]... Running: N reqs, Waiting: N reqs[, Deferred: N reqs]
  [, Preemptions: N], GPU KV cache usage: X%[, Prefix cache hit rate: Y%]" (0.31+ prints the cache's device
  name in place of "GPU"; Preemptions counts those since the previous line);
- SGLang (managers/scheduler.py 0.4, scheduler_metrics_mixin.py 0.5, pool_stats_observer.py 0.5.2x):
  "Prefill batch. ... token usage: U, #running-req: N, #queue-req: N" and "Decode batch. #running-req: N,
  #token: T, token usage: U, ..." (hybrid pools print "full token usage" / "swa token usage" / "mamba usage":
  the largest is what fills first, as SGLang's own get_max_pool_usage takes it); a retraction prints
  "#retracted_reqs: N".
Memory stays bounded: usage goes into 1,001 bins of 0.1 %, whatever the log's length.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

_BINS = 1001  # 0.0 % .. 100.0 % by 0.1 %
_USAGE_KEY = " KV cache usage: "
# the whole V0 / V1 stats line at once (one search in C; the str.find path below reads any other shape)
_VLLM_LINE = re.compile(r"Running: (\d+) reqs, (?:Swapped: \d+ reqs, )?(?:Pending|Waiting): (\d+) reqs, "
                        r"(?:Deferred: \d+ reqs, )?(?:Preemptions: (\d+), )?(?!CPU)\w+ KV cache usage: ([\d.]+)%"
                        r"(?:, Prefix cache hit rate: ([\d.]+)%)?")
_V0_PREEMPTED = "is preempted by PreemptionMode"
_V0_CUMULATIVE = re.compile(r"total_num_cumulative_preemption=(\d+)")
_SGL_USAGE = re.compile(r"(?:full |swa |)token usage: ([\d.]+)|mamba usage: ([\d.]+)")
_SGL_RUNNING = re.compile(r"#running-req: (\d+)")
_SGL_QUEUE = re.compile(r"#queue-req: (\d+)")
_SGL_RETRACTED = re.compile(r"#retracted_reqs: (\d+)")
_SGL_HIT = re.compile(r"cache hit rate: ([\d.]+)%")


@dataclass
class ServingStats:
    """Accumulates the stats lines of one engine start (mutable while a log is read)."""

    samples: int = 0
    bins: list[int] = field(default_factory=lambda: [0] * _BINS)
    peak_usage: float = 0.0
    last_usage: float | None = None
    max_running: int = 0
    max_waiting: int = 0
    preemptions: int = 0
    hit_rate: float | None = None
    first_line: int | None = None
    last_line: int | None = None

    def feed(self, line: str, line_no: int = 0) -> bool:
        """Read one line; True when it was a stats or preemption line."""
        if "KV cache usage:" in line:
            return self._vllm(line, line_no)
        if "token usage:" in line or "mamba usage:" in line:
            return self._sglang(line, line_no)
        if _V0_PREEMPTED in line:
            cumulative = _V0_CUMULATIVE.search(line)
            self.preemptions = max(self.preemptions + 1, int(cumulative.group(1)) if cumulative else 0)
            return True
        retracted = _SGL_RETRACTED.search(line)
        if retracted:
            self.preemptions += int(retracted.group(1))
            return True
        return False

    def _vllm(self, line: str, line_no: int) -> bool:
        # a serving log holds a stats line every 10 s for days: one regular expression for the usual shapes
        whole = _VLLM_LINE.search(line)
        if whole is not None:
            running, waiting, preempted, usage, hit = whole.groups()
            self._sample(float(usage), line_no, int(running), int(waiting), float(hit) if hit else None)
            if preempted:
                self.preemptions += int(preempted)
            return True
        usage = None
        at = line.find(_USAGE_KEY)
        while at > 0 and usage is None:
            if line[line.rfind(" ", 0, at) + 1:at] != "CPU":  # V0's swap space share follows the GPU's
                usage = _number_at(line, at + len(_USAGE_KEY), "%")
            at = line.find(_USAGE_KEY, at + 1)
        if usage is None:
            return False
        waiting = _number_after(line, "Waiting: ", " ")
        self._sample(usage, line_no, _number_after(line, "Running: ", " "),
                     _number_after(line, "Pending: ", " ") if waiting is None else waiting,
                     _number_after(line, "Prefix cache hit rate: ", "%"))
        self.preemptions += int(_number_after(line, "Preemptions: ", ",") or 0)
        return True

    def _sglang(self, line: str, line_no: int) -> bool:
        shares = [float(a or b) for a, b in _SGL_USAGE.findall(line)]
        if not shares:
            return False
        running, queued, hit = _SGL_RUNNING.search(line), _SGL_QUEUE.search(line), _SGL_HIT.search(line)
        self._sample(100.0 * max(shares), line_no, int(running.group(1)) if running else None,
                     int(queued.group(1)) if queued else None, float(hit.group(1)) if hit else None)
        return True

    def _sample(self, usage_pct: float, line_no: int, running: float | None, waiting: float | None,
                hit: float | None) -> None:
        usage_pct = 100.0 if usage_pct > 100.0 else 0.0 if usage_pct < 0.0 else usage_pct
        self.samples += 1
        self.bins[int(usage_pct * 10 + 0.5)] += 1
        if usage_pct > self.peak_usage:
            self.peak_usage = usage_pct
        self.last_usage = usage_pct
        if running is not None and running > self.max_running:
            self.max_running = int(running)
        if waiting is not None and waiting > self.max_waiting:
            self.max_waiting = int(waiting)
        if hit is not None:
            self.hit_rate = hit
        if self.first_line is None:
            self.first_line = line_no
        self.last_line = line_no

    def percentile(self, share: float) -> float:
        """The usage (%) that `share` of the samples do not exceed (0.1 % resolution)."""
        rank = share * self.samples
        seen = 0
        for index, count in enumerate(self.bins):
            seen += count
            if count and seen >= rank:
                return index / 10
        return self.peak_usage

    def to_dict(self, pool_gib: float | None = None, pool_blocks: int | None = None) -> dict | None:
        """The figures, and what they mean in GiB / blocks when the startup printed the pool's size."""
        if not self.samples:
            return None
        figures = {"samples": self.samples, "lines": [self.first_line, self.last_line],
                   "peak_usage_pct": self.peak_usage, "p99_usage_pct": self.percentile(0.99),
                   "median_usage_pct": self.percentile(0.5), "last_usage_pct": self.last_usage,
                   "max_running": self.max_running, "max_waiting": self.max_waiting, "preemptions": self.preemptions,
                   "prefix_cache_hit_rate_pct": self.hit_rate}
        if pool_gib:
            figures["pool_gib"] = pool_gib
            figures["peak_in_use_gib"] = round(pool_gib * self.peak_usage / 100, 3)
            figures["p99_in_use_gib"] = round(pool_gib * figures["p99_usage_pct"] / 100, 3)
        if pool_blocks:
            figures["peak_blocks"] = round(pool_blocks * self.peak_usage / 100)
        return figures


def _number_after(line: str, key: str, end: str) -> float | None:
    """The number printed after `key` up to `end`; None when absent or not a number."""
    start = line.find(key)
    return None if start < 0 else _number_at(line, start + len(key), end)


def _number_at(line: str, start: int, end: str) -> float | None:
    stop = line.find(end, start)
    try:
        return float(line[start:stop if stop >= 0 else len(line)])
    except ValueError:
        return None


def read_serving_stats(text: str) -> ServingStats:
    """Every stats line of a whole text (engine logs read at once: SGLang, or a log given to simulate)."""
    stats = ServingStats()
    for number, line in enumerate(text.splitlines(), 1):
        if "usage:" in line or "preempted" in line or "#retracted" in line:
            stats.feed(line, number)
    return stats


def read_serving_file(path: str) -> ServingStats:
    """read_serving_stats over a file of any length, a line at a time (lines cut at 64 KiB)."""
    from ..units import open_regular_file

    stats = ServingStats()
    with open_regular_file(path, "log") as stream:
        for number, raw in enumerate(stream, 1):
            if b"usage:" in raw or b"preempted" in raw or b"#retracted" in raw:
                stats.feed(raw[:1 << 16].decode("utf-8", "replace"), number)
    return stats


def serving_line(figures: dict) -> str:
    """One sentence for the text reports."""
    where = ""
    if "peak_in_use_gib" in figures:
        where = (f" (≈ {figures['peak_in_use_gib']:.2f} of the {figures['pool_gib']:.2f} GiB pool; p99 ≈ "
                 f"{figures['p99_in_use_gib']:.2f} GiB)")
    hit = figures.get("prefix_cache_hit_rate_pct")
    return (f"while serving ({figures['samples']:,} stats lines): KV cache usage peaked at "
            f"{figures['peak_usage_pct']:.1f} %{where}, p99 {figures['p99_usage_pct']:.1f} %, median "
            f"{figures['median_usage_pct']:.1f} %; up to {figures['max_running']} running and {figures['max_waiting']} "
            f"waiting requests; {figures['preemptions']} preemption{'s' if figures['preemptions'] != 1 else ''}" + (f"; prefix-cache hit rate {hit:.1f} %"
                                                                            if hit is not None else ""))
