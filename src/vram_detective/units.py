"""Units and the small parsers every layer shares (sizes, token counts, versions)."""
from __future__ import annotations

import math
import os
import re
import stat

GIB = 1 << 30  # every size vLLM logs is divided by 2**30, even the lines that say "GB"
MIB = 1 << 20
# A token count is an int64 in every engine (torch sizes); 19 digits hold any of them, more is a typo or an attack
MAX_TOKEN_DIGITS = 19


def gib(num_bytes: float) -> float:
    return num_bytes / GIB


def ceil_div(numerator: int, denominator: int) -> int:
    return -(-numerator // denominator)


def round_up(value: int, multiple: int) -> int:
    return ceil_div(value, multiple) * multiple


def parse_token_count(text: str | int) -> int:
    """'32k' -> 32768, '32768' -> 32768, '1m' -> 1048576, '4.5k' -> 4608 (vLLM's own suffix rules)."""
    if isinstance(text, int):
        return text
    if str(text).strip() == "-1":
        return -1  # vLLM 0.15+: auto-fit max_model_len to the KV pool
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgG]?)\s*", str(text))
    if not match:
        raise ValueError(f"not a token count: {text!r} (use e.g. 32768 or 32k)")
    number, suffix = match.group(1), match.group(2)
    if len(number) > MAX_TOKEN_DIGITS:
        raise ValueError(f"not a token count: {len(number)} digits (at most {MAX_TOKEN_DIGITS})")
    # vLLM's human_readable_int: lowercase k/m/g are powers of 1000, uppercase K/M/G powers of 1024.
    # Users mean 32k = 32768 almost always, so both cases map to powers of 1024 here, like the
    # '--max-model-len 32k' examples in vLLM's docs (which show 32768).
    scale = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}[suffix.lower()]
    whole, _, decimals = number.partition(".")  # exact: '4.5k' is 4608 and a long number never becomes a float
    value, remainder = divmod(int(whole + decimals) * scale, 10 ** len(decimals))
    if remainder:
        raise ValueError(f"not a whole number of tokens: {text!r}")
    return value


def parse_version(text: str) -> tuple[int, int, int]:
    """Leading release of a version string: '0.6.3.post1' -> (0,6,3); '0.8.x' -> (0,8,0);
    '>=0.21' -> (0,21,0); '0.8-0.9' -> (0,8,0); '0.20.2rc1.dev9+g01' -> (0,20,2)."""
    match = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", str(text))
    if not match:
        raise ValueError(f"not a vLLM version: {text!r} (use e.g. 0.8.5)")
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


def format_version(version: tuple[int, int, int]) -> str:
    return ".".join(str(part) for part in version)


def thousands(value: int) -> str:
    return f"{value:,}"


class NotARegularFileError(ValueError):
    """A path that names a FIFO, a device, a socket or a directory where a file's bytes were expected."""


def open_regular_file(path: str | os.PathLike, what: str = "file"):
    """A binary reader on `path`, refused unless it is a regular file: opening a FIFO without a writer (or a
    device such as /dev/zero) would block or never end. The open itself cannot block (O_NONBLOCK); the mode is
    checked on the opened descriptor, so a file swapped for a FIFO between check and open is still caught."""
    from .read_policy import check

    check(path, what)  # the web server reads only under --allow-local-models (read_policy.py)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a FIFO" if stat.S_ISFIFO(mode) else "a directory" if stat.S_ISDIR(mode) else "not a regular file"
            raise NotARegularFileError(f"{path}: {what} is {kind}, not a regular file")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def least_hundredth(ok, low: float, high: float, guess: float | None = None):
    """(x, ok(x)) for the least x in [low, high], in hundredths, at which ok(x) is truthy, for an ok that stays
    truthy above its threshold (a budget fraction that starts keeps starting when raised); (None, None) when
    not even `high` passes. Binary search over whole hundredths: exact, about 7 calls for [0.01, 0.99].
    `guess`: where the threshold likely is: tried first with its neighbour (2 calls when it is right), the
    search goes on in what is left when it is not, so the answer is the same."""
    lo, hi = math.ceil(round(low * 100, 6)), math.floor(round(high * 100, 6))
    best = ok(hi / 100) if hi >= lo else None
    if not best:
        return None, None
    first = None if guess is None else math.ceil(round(guess * 100, 6))
    near = passed = False  # near: the call after the guess, its neighbour on the side the threshold lies
    while lo < hi:
        if first is not None:
            middle, first, near = min(max(first, lo), hi - 1), None, True
        elif near:
            middle, near = (hi - 1 if passed else lo), False
        else:
            middle = (lo + hi) // 2
        trial = ok(middle / 100)
        passed = bool(trial)
        if trial:
            hi, best = middle, trial
        else:
            lo = middle + 1
    return hi / 100, best
