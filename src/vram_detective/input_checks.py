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
