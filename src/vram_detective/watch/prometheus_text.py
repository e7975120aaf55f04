"""Prometheus text exposition (format 0.0.4, what vLLM and SGLang print through prometheus_client and llama-server
prints by hand) read into samples. prometheus_client's parser when installed (the `[watch]` extra); else this
module's own, which reads the same lines: `# HELP` / `# TYPE` comments, `name{label="value",...} value
[timestamp]`, with the escapes \\\\, \\" and \\n in label values."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+(-?\d+))?\s*$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


class NotPrometheus(ValueError):
    """Text that is not Prometheus exposition (one line saying where)."""


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict
    value: float


def parse(text: str, use_library: bool = True) -> list[Sample]:
    """Every sample of a scrape (histogram buckets as their `_bucket` samples with `le`)."""
    if use_library:
        try:
            from prometheus_client.parser import text_string_to_metric_families
        except ImportError:
            pass
        else:
            try:
                return [Sample(s.name, dict(s.labels), float(s.value))
                        for family in text_string_to_metric_families(text) for s in family.samples]
            except (ValueError, TypeError, IndexError) as error:
                raise NotPrometheus(f"not Prometheus text ({error})") from None
    return _parse_own(text)


def _parse_own(text: str) -> list[Sample]:
    samples = []
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None:
            raise NotPrometheus(f"not Prometheus text (line {number}: {line[:60]!r})")
        name, labels, value = match.group(1), match.group(2) or "", match.group(3)
        samples.append(Sample(name, _labels(labels, number), _number(value, number)))
    return samples


def _labels(text: str, number: int) -> dict:
    out, at = {}, 0
    while at < len(text.strip()):
        match = _LABEL.match(text, at)
        if match is None:
            raise NotPrometheus(f"not Prometheus text (line {number}: labels {text[:60]!r})")
        out[match.group(1)] = re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), match.group(2))
        at = match.end()
    return out


def _number(text: str, number: int) -> float:
    special = {"+Inf": math.inf, "-Inf": -math.inf, "NaN": math.nan}
    if text in special:
        return special[text]
    try:
        return float(text)
    except ValueError:
        raise NotPrometheus(f"not Prometheus text (line {number}: value {text!r})") from None


def total(samples: list[Sample], name: str) -> float | None:
    """The sum of a metric over its label sets (engines, finish reasons), None when absent."""
    values = [s.value for s in samples if s.name == name]
    return sum(values) if values else None


def largest(samples: list[Sample], name: str) -> float | None:
    values = [s.value for s in samples if s.name == name]
    return max(values) if values else None


def labels_of(samples: list[Sample], name: str) -> dict | None:
    return next((s.labels for s in samples if s.name == name), None)


def buckets(samples: list[Sample], name: str) -> list[tuple[float, float]]:
    """A histogram's cumulative buckets (upper bound, count) summed over label sets, in bound order."""
    by_bound: dict[float, float] = {}
    for s in samples:
        if s.name == f"{name}_bucket" and "le" in s.labels:
            bound = math.inf if s.labels["le"] in ("+Inf", "inf") else float(s.labels["le"])
            by_bound[bound] = by_bound.get(bound, 0.0) + s.value
    return sorted(by_bound.items())
