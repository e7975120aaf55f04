"""`vram-detective watch URL [MODEL] --gpu GPU`: poll a running engine's Prometheus endpoint a few times (bounded:
--samples scrapes, --interval apart, all within --deadline), then set what it shows beside the prediction (the pool
the engine reports, how full it got) and simulate the traffic it saw (arrival rate and lengths from its counters
and histograms) to say what the least pool serving that traffic would be."""
from __future__ import annotations

import argparse
import sys
import time
from ..term import HelpFormatter  # --help fitted to the terminal

EXIT_BAD_INPUT = 2
GIB = 1 << 30


class EndpointError(Exception):
    """The endpoint could not be read, or is not an engine's (one line, exit 2)."""


def register(subparsers) -> None:
    from ..cli import _add_vllm_flags, add_model_arguments, add_output_arguments

    watch = subparsers.add_parser(
        "watch", help="a running engine's /metrics beside the prediction, and a simulation of its traffic",
        description="Read a running vLLM / SGLang / llama-server Prometheus endpoint (a few scrapes, bounded by "
                    "--deadline), then compare the pool it reports and how full it gets with the prediction for "
                    "MODEL on --gpu, and simulate the traffic it saw.",
        epilog="example:\n  vram-detective watch http://127.0.0.1:8000/metrics Qwen/Qwen3-8B --gpu 4090",
        formatter_class=HelpFormatter)
    watch.add_argument("url", help="the engine's metrics URL (http://HOST:PORT/metrics; /metrics is added to a bare "
                                   "host:port)")
    add_model_arguments(watch, model_optional=True)
    watch.add_argument("--interval", type=float, default=2.0, help="seconds between scrapes (default 2)")
    watch.add_argument("--samples", type=int, default=5, help="scrapes to take (default 5)")
    watch.add_argument("--deadline", type=float, default=30.0, help="give up after this many seconds (default 30)")
    add_output_arguments(watch)
    _add_vllm_flags(watch)


def _url(text: str) -> str:
    from urllib.parse import urlsplit

    text = text if "://" in text else f"http://{text}"
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise EndpointError(f"not an http(s) URL: {text!r}")
    return text if parts.path not in ("", "/") else text.rstrip("/") + "/metrics"


def _fetch(url: str, timeout: float) -> str:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=max(timeout, 0.1)) as response:  # noqa: S310 - the user's URL
            return response.read(8 << 20).decode("utf-8", errors="replace")
    except urllib.error.HTTPError as error:
        raise EndpointError(f"{url} answered HTTP {error.code}") from None
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise EndpointError(f"{url} does not answer ({reason})") from None


def read_engine(text: str, url: str):
    """The engine's live figures from one scrape (each engine reads its own names); EndpointError when none."""
    from ..engines import ENGINES, get_engine
    from .prometheus_text import NotPrometheus, parse

    try:
        samples = parse(text)
    except NotPrometheus as error:
        raise EndpointError(f"{url} is not a metrics endpoint: {error}") from None
    for name in ENGINES:
        reader = get_engine(name).live_metrics  # None: the engine serves no metrics this tool reads
        figures = reader(samples) if reader is not None else None
        if figures is not None:
            return figures
    raise EndpointError(f"{url} serves Prometheus text but no engine's metrics (vllm:*, sglang:*, llamacpp:*): "
                        "not an inference engine, or SGLang without --enable-metrics / llama-server without --metrics")


def poll(url: str, samples: int, interval: float, deadline: float, clock=time.monotonic, sleep=time.sleep):
    """[(seconds since the first scrape, LiveFigures)], at most `samples`, all within `deadline` seconds."""
    start = clock()
    scrapes = []
    for index in range(samples):
        left = deadline - (clock() - start)
        if left <= 0:
            break
        try:
            text = _fetch(url, min(left, 10.0))
        except EndpointError as error:
            if scrapes:
                raise EndpointError(f"{error}: it stopped answering after {len(scrapes)} scrape(s)") from None
            raise
        scrapes.append((clock() - start, read_engine(text, url)))
        if index + 1 < samples:
            pause = min(interval, deadline - (clock() - start))
            if pause <= 0:
                break
            sleep(pause)
    if not scrapes:
        raise EndpointError(f"no scrape of {url} within --deadline {deadline:g} s")
    return scrapes


def run(args) -> int:
    from .report import observed, render

    if args.samples < 1 or args.interval < 0 or args.deadline <= 0:
        print("vram-detective: error: --samples must be at least 1, --interval at least 0 and --deadline positive",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        url = _url(args.url)
        scrapes = poll(url, args.samples, args.interval, args.deadline)
    except EndpointError as error:
        print(f"vram-detective: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    live = observed(scrapes)
    from .compare import compare

    answer = compare(args, live)
    text = render(url, live, answer, as_json=bool(getattr(args, "json", False)))
    print(f"```\n{text}\n```" if getattr(args, "markdown", False) else text)
    return 0
