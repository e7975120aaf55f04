"""Checks on a command's own arguments that argparse cannot express, run once before the command (cli.py):
a value no command can honour is bad input (errors.BadInput, exit 2) with one line saying why."""
from __future__ import annotations

import argparse
import math

from .errors import BadInput
from .hardware import MAX_MEMORY_BYTES
from .units import parse_token_count

# Requests x tokens a target may ask for: a KV pool holds at most MAX_MEMORY_BYTES at >= 1 byte per token, so
# a larger target is met by nothing; bounding it keeps the advisor's integer arithmetic inside int64.
MAX_TARGET_TOKENS = MAX_MEMORY_BYTES
MAX_GPUS = 1 << 16


def check_arguments(args: argparse.Namespace) -> None:
    """Every check that applies to the arguments `args` carries (commands share names: --gpus, --concurrency)."""
    _check_target(args)
    _check_gpus(args)


def _check_target(args: argparse.Namespace) -> None:
    concurrency = getattr(args, "concurrency", None)
    if concurrency is None:
        return
    if not math.isfinite(concurrency) or concurrency <= 0:
        raise BadInput(f"--concurrency must be a positive number of requests, got {concurrency:g}")
    context = getattr(args, "context", None)
    tokens_each = parse_token_count(context) if context else 1
    if concurrency * max(tokens_each, 1) > MAX_TARGET_TOKENS:
        raise BadInput(f"--concurrency {concurrency:g} x {max(tokens_each, 1):,} tokens is more than any GPU's KV "
                       f"cache holds (at most {MAX_TARGET_TOKENS:,} tokens at one byte each)")


def _check_gpus(args: argparse.Namespace) -> None:
    gpus = getattr(args, "gpus", None)
    if gpus is None or isinstance(gpus, (list, tuple)):
        return
    if not 1 <= gpus <= MAX_GPUS:
        raise BadInput(f"--gpus must be from 1 to {MAX_GPUS:,}, got {gpus}")
    tp = getattr(args, "tensor_parallel_size", None) or 1
    pp = getattr(args, "pipeline_parallel_size", None) or 1
    if tp * pp > gpus:
        raise BadInput(f"-tp {tp} x -pp {pp} needs {tp * pp} GPUs but --gpus is {gpus}: raise --gpus or drop the "
                       "pinned parallel sizes")
    top = getattr(args, "top", None)
    if top is not None and top < 1:
        raise BadInput(f"--top must be at least 1, got {top}")


# --- engine settings: whole numbers each engine takes, checked where its settings are read ---------------------

MAX_INT64 = (1 << 63) - 1


def check_counts(values: dict, ranges: dict, error: type[Exception] = BadInput) -> None:
    """Every setting of `values` named in `ranges` (setting -> (flag, lowest, highest, also-allowed values)) is a
    whole number inside its range; else `error` with one line naming the flag. Booleans, NaN, infinities and
    non-numbers are refused too (a count is never True or 2.5). One helper for every engine's counts (vLLM's
    token counts: engines/vllm/settings.py check_amounts)."""
    for key, (flag, lowest, highest, special) in ranges.items():
        value = values.get(key)
        if value is None or (isinstance(value, str) and value.lower() in special):
            continue
        if isinstance(value, str):
            try:
                value = int(value)
            except ValueError:
                raise error(f"{flag} must be a whole number, got {value[:40]!r}") from None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or (
                isinstance(value, float) and (not math.isfinite(value) or value != int(value))):
            raise error(f"{flag} must be a whole number, got {str(value)[:40]!r}")
        if value in special:
            continue
        if not lowest <= value <= highest:
            shown = f"{value:,}" if abs(value) < 10 ** 30 else f"a {len(str(int(abs(value))))}-digit number"
            allowed = "".join(f" or {s}" for s in special if not isinstance(s, str))
            raise error(f"{flag} must be from {lowest:,} to {highest:,}{allowed}, got {shown}")


def check_fraction(values: dict, key: str, flag: str, error: type[Exception] = BadInput) -> None:
    """A fraction in (0, 1] (memory fractions)."""
    value = values.get(key)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise error(f"{flag} must be a fraction in (0, 1], got {str(value)[:40]}")
