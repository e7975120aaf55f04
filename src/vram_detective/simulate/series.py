"""Bounded bookkeeping of pool occupancy: a downsampled time series (fixed number of buckets whose width
doubles as the run grows) and a time-weighted histogram of blocks in use (for peak and p99)."""
from __future__ import annotations

from bisect import bisect_left
from itertools import accumulate


class Series:
    """Max and time-weighted mean of a value per bucket; at most `size` buckets."""

    __slots__ = ("size", "width", "maxima", "sums", "last_t", "last_v")

    def __init__(self, size: int = 512, width: float = 1.0):
        self.size, self.width = size, width
        self.maxima: list[float] = []
        self.sums: list[float] = []
        self.last_t, self.last_v = 0.0, 0.0

    def record(self, t: float, value: float) -> None:
        """`value` holds from now on (the previous value held until t)."""
        maxima, width = self.maxima, self.width
        if t > self.last_t:
            index = int(self.last_t / width)
            if index < len(maxima) and t <= (index + 1) * width:  # within one bucket: _hold's one addition
                self.sums[index] += self.last_v * (t - self.last_t)
                if self.last_v > maxima[index]:
                    maxima[index] = self.last_v
            else:
                self._hold(self.last_t, t, self.last_v)
            self.last_t = t
        self.last_v = value
        index = int(t / self.width)
        if index >= len(self.maxima):
            self._bucket(t)
            index = int(t / self.width)
        if value > self.maxima[index]:
            self.maxima[index] = value

    def _bucket(self, t: float) -> None:
        index = int(t / self.width)
        while index >= self.size:
            self._halve()
            index = int(t / self.width)
        while len(self.maxima) <= index:
            self.maxima.append(self.last_v)
            self.sums.append(0.0)

    def _hold(self, t0: float, t1: float, value: float) -> None:
        while t0 < t1:
            self._bucket(t0)
            index = int(t0 / self.width)
            end = min(t1, (index + 1) * self.width)
            self.sums[index] += value * (end - t0)
            if value > self.maxima[index]:
                self.maxima[index] = value
            t0 = end if end > t0 else t1

    def _halve(self) -> None:
        self.maxima = [max(self.maxima[i:i + 2]) for i in range(0, len(self.maxima), 2)]
        self.sums = [sum(self.sums[i:i + 2]) for i in range(0, len(self.sums), 2)]
        self.width *= 2

    def finish(self, t: float) -> tuple[tuple[float, float, float], ...]:
        """(bucket start s, max, mean) per bucket up to t."""
        self.record(t, self.last_v)
        return tuple((i * self.width, self.maxima[i], self.sums[i] / self.width) for i in range(len(self.maxima)))


class Histogram:
    """Seconds spent at each level of blocks in use (levels 0..capacity). The levels are kept up to the peak reached
    (a llama.cpp pool of 10M one-token cells once took 80 MB here, and 400 MB for its percentile)."""

    __slots__ = ("seconds", "last_t", "level", "peak")

    def __init__(self, capacity: int):
        self.seconds = [0.0]
        self.last_t, self.level, self.peak = 0.0, 0, 0

    def set(self, t: float, level: int) -> None:
        self.seconds[self.level] += t - self.last_t
        self.last_t, self.level = t, level
        if level > self.peak:
            self.peak = level
            if level >= len(self.seconds):  # grown in doublings: a rising run costs O(peak) in all
                self.seconds.extend([0.0] * max(level + 1 - len(self.seconds), len(self.seconds)))

    def percentile(self, fraction: float) -> int:
        total = sum(self.seconds)
        if total <= 0:
            return self.level
        running = list(accumulate(self.seconds))  # the same sums in the same order as a loop, in C
        return min(bisect_left(running, fraction * total), len(running) - 1)  # seconds >= 0: running is sorted
