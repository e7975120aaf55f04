"""`vram-detective serve [--host 127.0.0.1] [--port 8000] [--allow-local-models DIR]` (a plug-in command
of cli.py). register() only declares arguments; run() imports Starlette and uvicorn (the `[web]` extra)."""
from __future__ import annotations

import argparse
from ..term import HelpFormatter  # --help fitted to the terminal

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "serve", help="a local web page: the memory bar, live levers, log forensics, fit (needs the [web] extra)",
        description="Serve the page and the JSON API (/api) on this machine. Binds 127.0.0.1 unless --host says "
                    "otherwise. Requests never make the server read a local path unless --allow-local-models DIR "
                    "is given (then only under DIR).",
        formatter_class=HelpFormatter)
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    parser.add_argument("--allow-local-models", metavar="DIR", default=None,
                        help="let requests name model directories and GGUF files under DIR (default: none)")
    parser.add_argument("--hub-deadline", type=float, default=None, metavar="SECONDS",
                        help="seconds a Hub fetch may take in all (default 15)")
    parser.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                        help="also answer requests whose Host (or Origin) is NAME (repeatable; '*' any). By default "
                             "only the loopback names and --host are answered, so that a web page elsewhere cannot "
                             "reach this server through DNS rebinding")
    parser.add_argument("--request-budget", type=float, default=None, metavar="SECONDS",
                        help="seconds of computation one request may take before it is answered 503 (default 10)")
    parser.add_argument("--workers", type=int, default=None, metavar="N",
                        help="worker processes for the heavy requests (simulate, fit, whatif, logs, compare, score, "
                             "local models) and as many for Hub fetches, so that cheap explains never wait behind "
                             "them (default 2; 0: threads of the serving process)")


def run(args) -> int:
    import os
    import sys
    from pathlib import Path

    from .service import HUB_DEADLINE_SECONDS

    try:
        import uvicorn

        from .app import REQUEST_SECONDS, WORKERS, allowed_hosts, create_app
    except ModuleNotFoundError as error:
        print(f"vram-detective: error: serve needs {error.name}: pip install 'vram-detective[web]'", file=sys.stderr)
        return 2
    budget = args.request_budget if args.request_budget is not None else REQUEST_SECONDS
    if not 0 < budget < 1e6 or not 0 < (args.hub_deadline or 1) < 1e6:
        print("vram-detective: error: --request-budget and --hub-deadline are positive seconds", file=sys.stderr)
        return 2
    workers = WORKERS if args.workers is None else args.workers
    if not 0 <= workers <= 64:
        print("vram-detective: error: --workers is 0..64", file=sys.stderr)
        return 2
    if args.allow_local_models and not Path(args.allow_local_models).is_dir():
        print(f"vram-detective: error: --allow-local-models {args.allow_local_models}: not a directory", file=sys.stderr)
        return 2
    os.environ["VRAM_DETECTIVE_HUB_DEADLINE"] = str(args.hub_deadline or os.environ.get("VRAM_DETECTIVE_HUB_DEADLINE")
                                                   or HUB_DEADLINE_SECONDS)
    where = "this machine only" if args.host in LOOPBACK else "ALL machines that can reach this address"
    local = (f"local models under {Path(args.allow_local_models).resolve()}" if args.allow_local_models
             else "no local paths read")
    print(f"vram-detective: serving http://{_url_host(args.host)}:{args.port}/ ({where}; {local}; "
          f"API at /api). Ctrl+C stops it.", file=sys.stderr, flush=True)
    from .service import warm_up

    warm_up()
    app = create_app(args.allow_local_models, allowed=allowed_hosts(args.host, tuple(args.allow_host)),
                     request_seconds=budget, workers=workers)
    # the cheap computations are pure Python on threads: a shorter switch interval than the default 5 ms lets a
    # cheap request's thread run between the slices of a long one (its latency, not the throughput)
    sys.setswitchinterval(0.001)
    config = uvicorn.Config(app, host=args.host, port=args.port,
                            log_level="warning", access_log=False)
    try:
        uvicorn.Server(config).run()
    finally:
        app.state.close_pools()
    return 0


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
