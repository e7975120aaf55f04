"""The Starlette application behind `vram-detective serve`: the page, its fragments, and the JSON API
(`/api/explain`, `/api/whatif`, `/api/fit`, `/api/logs`, `/api/simulate`, `/api/score` return exactly what the
commands' `--json` prints).

Errors are JSON `{"error": "one line"}`: 400 bad input, 403 a local path (or trace file) the server may not
read, or a Host / Origin it was not started for, 413 a body over service.MAX_BODY_BYTES or a workload over the
simulate caps (service.MAX_SIM_*), 422 an unknown parameter or the engine would refuse to start (explain: the
`--json` answer itself, startup_failed true), 503 a request past its computation
budget (REQUEST_SECONDS), 500 anything else."""
from __future__ import annotations

import json
import time
from importlib.resources import files
from pathlib import Path

import anyio
import anyio.to_thread
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from .. import budget, read_policy
from . import page, report, service

STATIC_TYPES = {"app.js": "text/javascript; charset=utf-8", "app.css": "text/css; charset=utf-8"}
# no third-party origin is ever needed: say so to the browser too
CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
       "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")


class BodyLimit:
    """ASGI middleware: a request body over `limit` bytes is answered 413 (declared length or counted),
    before the endpoint reads it."""

    def __init__(self, app, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            return await _too_large(self.limit)(scope, receive, send)
        seen = 0

        async def counted():
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:
                raise _TooLarge(self.limit)
            return message

        try:
            await self.app(scope, counted, send)
        except _TooLarge:  # raised past an endpoint that does not answer errors itself
            await _too_large(self.limit)(scope, receive, send)


def _too_large_text(limit: int) -> str:
    return (f"request body over {limit:,} bytes (the limit for a pasted log and nvidia-smi output; send the "
            f"startup part of the log)")


class _TooLarge(service.TooLarge):
    """A counted body over the limit: a TooLarge, so an endpoint's own error answer is the same 413."""

    def __init__(self, limit: int):
        super().__init__(_too_large_text(limit))


def _too_large(limit: int) -> Response:
    return JSONResponse({"error": _too_large_text(limit)}, status_code=413)


def _error(error: BaseException) -> JSONResponse:
    from .. import errors

    text = str(error).strip()
    text = text.splitlines()[0] if text else type(error).__name__
    if isinstance(error, (service.Forbidden, read_policy.NotAllowed)):
        return JSONResponse({"error": text}, status_code=403)
    if isinstance(error, service.TooLarge):
        return JSONResponse({"error": text}, status_code=413)
    if isinstance(error, service.UnknownParameter):
        return JSONResponse({"error": text}, status_code=422)
    if isinstance(error, budget.OverBudget):
        return JSONResponse({"error": text}, status_code=503)
    status = errors.http_status(error)  # the CLI's exit-code policy: 422 refused, 400 bad input, 500 a bug
    body = {"error": errors.message(error)}
    return JSONResponse(body | ({"refused": True} if status == 422 else {}), status_code=status)


async def _params(request: Request) -> dict:
    """The query string, and for a POST its JSON object (or a plain-text body as `log`)."""
    params = dict(request.query_params)
    if request.method == "POST":
        body = (await request.body()).decode("utf-8", "replace")
        if body.strip():
            if request.headers.get("content-type", "").startswith("application/json"):
                try:
                    data = json.loads(body)
                except json.JSONDecodeError as error:
                    raise service.RequestError(f"body is not JSON: {error}") from None
                if not isinstance(data, dict):
                    raise service.RequestError("body must be a JSON object")
                params.update({key: value for key, value in data.items() if value is not None})
            else:
                params["log"] = body
    return params


# computations at once: the work is pure Python (one GIL), so more threads only interleave and stretch
# each request; waiting requests queue instead (a long `fit` still leaves the others threads to run on)
COMPUTE_THREADS = 4
# requests that fetch from the Hub wait on the network, not the CPU: their own pool, so that slow (or
# trickling) Hub servers never hold the threads a catalog-only request needs
HUB_THREADS = 4
# simulate, fit, whatif and logs can take a second or more of CPU: their own two threads, so that a few of them
# never hold every thread a cheap explain (a few milliseconds) waits for
HEAVY_THREADS = 2
# seconds of computation one request may take (`serve --request-budget`); past it: 503 with one line
REQUEST_SECONDS = 10.0
_LIMITERS: dict = {}


def _limiter(kind: str = "compute"):
    if kind not in _LIMITERS:
        _LIMITERS[kind] = anyio.CapacityLimiter({"hub": HUB_THREADS, "heavy": HEAVY_THREADS}.get(kind, COMPUTE_THREADS))
    return _LIMITERS[kind]


def _timed(work, params, allowance: budget.Budget | None = None):
    started = time.perf_counter()
    if allowance is None:
        return work(params), time.perf_counter() - started
    allowance.start()  # the budget counts from here: time spent queued is not the request's computation
    with budget.running(allowance):
        allowance.check()
        result = work(params)
    return result, time.perf_counter() - started


class HostCheck:
    """ASGI middleware: a request whose Host (or Origin, when the browser sends one) names a host this server
    was not started for is answered 403. Loopback servers are otherwise readable by any web page through DNS
    rebinding (a name the attacker controls resolved to 127.0.0.1); Jupyter checks the same way."""

    def __init__(self, app, allowed: frozenset[str] | None):
        self.app, self.allowed = app, allowed

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or self.allowed is None:
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        host = _host_name(headers.get(b"host", b"").decode("latin-1"))
        origin = headers.get(b"origin")
        bad = None
        if host not in self.allowed:
            bad = f"Host {host or '(none)'!r}"
        elif origin is not None and origin != b"null":
            origin_host = _host_name(origin.decode("latin-1").partition("://")[2])
            if origin_host not in self.allowed:
                bad = f"Origin {origin.decode('latin-1')[:100]!r}"
        if bad is not None:
            response = JSONResponse({"error": f"{bad[:120]} is not a name this server answers to (start it with "
                                              "--allow-host NAME to add one)"}, status_code=403)
            return await response(scope, receive, send)
        return await self.app(scope, receive, send)


def _host_name(value: str) -> str:
    """'127.0.0.1:8000' -> '127.0.0.1', '[::1]:80' -> '::1', 'Localhost.' -> 'localhost'."""
    value = value.strip().split("/", 1)[0].lower()
    if value.startswith("["):
        return value[1:].partition("]")[0]
    if value.count(":") == 1:
        value = value.partition(":")[0]
    return value.rstrip(".")


LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")


def allowed_hosts(host: str, extra: tuple[str, ...] = ()) -> frozenset[str] | None:
    """The Host names accepted: the loopback names, the address served on and `extra` (None: any, `*`)."""
    if "*" in extra:
        return None
    names = {*LOOPBACK_NAMES, _host_name(host), *(_host_name(name) for name in extra)}
    if host in ("0.0.0.0", "::", ""):  # every address of this machine: its own names too
        import socket

        names.add(socket.gethostname().lower())
        names.add(socket.getfqdn().lower())
    return frozenset(names)


def create_app(local_root: str | None = None, max_body: int = service.MAX_BODY_BYTES,
               allowed: frozenset[str] | None = frozenset(LOOPBACK_NAMES),
               request_seconds: float = REQUEST_SECONDS) -> Starlette:
    """The application; `local_root` is --allow-local-models (None: no local path is ever read); `allowed` the
    Host names it answers to (None: any); `request_seconds` each request's computation budget."""
    policy = service.Policy(Path(local_root).resolve() if local_root else None)
    service.install_read_guard(policy)
    static = {name: files("vram_detective.web").joinpath(f"static/{name}").read_bytes() for name in STATIC_TYPES}

    async def index(request: Request) -> Response:
        html = await run_in_threadpool(page.render, dict(request.query_params), policy)
        return HTMLResponse(html, headers={"Content-Security-Policy": CSP, "Cache-Control": "no-store"})

    async def asset(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in static:
            return JSONResponse({"error": "no such file"}, status_code=404)
        return Response(static[name], media_type=STATIC_TYPES[name])

    async def describe(request: Request) -> Response:
        return JSONResponse(api_description(max_body))

    routes = [Route("/", index), Route("/static/{name}", asset), Route("/api", describe),
              *_work_routes(policy, request_seconds)]
    app = Starlette(routes=routes)
    app.add_middleware(BodyLimit, limit=max_body)
    app.add_middleware(HostCheck, allowed=allowed)
    return app


async def _watch_disconnect(request: Request, allowance: budget.Budget) -> None:
    """Cancel the request's work when the client goes away (the body has been read: the next message the
    server sends is the disconnect)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            allowance.cancel()
            return


def _budgeted_endpoint(work, kind: str = "json", indent: int = 2, seconds: float | None = REQUEST_SECONDS,
                       pool: str = "compute"):
    """An endpoint running `work(params)` on a worker thread (the Hub pool when the request names a Hub
    model) under a budget of `seconds`, cancelled when the client leaves: JSON (or an HTML fragment), errors
    as JSON."""
    async def handle(request: Request) -> Response:
        try:
            params = await _params(request)
            service.check_parameters(params)
            hub = service.uses_hub(params)
        except Exception as error:  # noqa: BLE001 - every error is one JSON line with its status
            return _error(error)
        allowance = budget.Budget(None if seconds is None else seconds + (service.hub_deadline() if hub else 0))
        response = None
        async with anyio.create_task_group() as group:
            group.start_soon(_watch_disconnect, request, allowance)
            try:
                result, spent = await anyio.to_thread.run_sync(_timed, work, params, allowance,
                                                               limiter=_limiter("hub" if hub else pool))
            except Exception as error:  # noqa: BLE001
                response = _error(error)
            group.cancel_scope.cancel()
        if response is not None:
            return response
        # the computation's own time (benchmarks/web.py reads it: the server-side latency)
        headers = {"Server-Timing": f"app;dur={spent * 1000:.2f}", "Cache-Control": "no-store"}
        if kind == "html":
            return HTMLResponse(result, headers=headers)
        # a start the engine would refuse: what `--json` prints (exit 1 there), answered 422 as documented
        refused = isinstance(result, dict) and result.get("startup_failed") is True
        return Response(json.dumps(result, indent=indent, default=str) + "\n", media_type="application/json",
                        headers=headers, status_code=422 if refused else 200)
    return handle


def _work_routes(policy: service.Policy, seconds: float | None = REQUEST_SECONDS) -> list[Route]:
    """The API and the page's fragments: each a function of the request's parameters."""
    def _endpoint(work, kind: str = "json", indent: int = 2, pool: str = "compute"):
        return _budgeted_endpoint(work, kind, indent, seconds, pool)

    def read(params):
        return service.read_request(params, policy)

    def explain_fragment(params):
        request = read(params)
        breakdown = service.explain(request)
        return report.explain_fragment(breakdown, service.explain_json(request, breakdown),
                                       service.launch_line(request, breakdown), page=True)

    def logs_api(params):
        from ..library import envelope

        tp = params.get("tp")
        found = service.logs_json(str(params.get("log") or ""), params.get("nvidia_smi") or None,
                                  params.get("model"), params.get("gpu"), params.get("version"), policy,
                                  engine=params.get("engine") or None, tp=int(tp) if tp not in (None, "") else None)
        return envelope("logs", found.get("engine"), found)

    def compare_api(params):
        from ..library import compare

        engines = tuple(filter(None, str(params.get("engines") or "").split(","))) or None
        return compare(str(params.get("model") or ""), str(params.get("gpu") or ""),
                       context=service.token_count(params.get("context")), tp=int(params.get("tp") or 1),
                       engines=engines, gguf_type=params.get("gguf_type") or None).to_dict()

    def fit_api(params):
        return service.fit_json(read(params), params)

    def simulate_fragment(params):
        request = read(params)
        run = service.simulate(request, params)
        return report.simulate_fragment(run.report, service.simulate_launch_line(request, run.fit))

    both = ["GET", "POST"]
    return [
        Route("/api/explain", _endpoint(lambda p: service.explain_json(read(p))), methods=both),
        Route("/api/whatif", _endpoint(lambda p: service.whatif_json(read(p)), pool="heavy"), methods=both),
        Route("/api/fit", _endpoint(fit_api, pool="heavy"), methods=both),
        Route("/api/logs", _endpoint(logs_api, pool="heavy"), methods=["POST"]),
        Route("/api/compare", _endpoint(compare_api, pool="heavy"), methods=both),
        Route("/api/score", _endpoint(lambda p: service.score_json(p, policy), pool="heavy"), methods=["POST"]),
        # `simulate --json` prints with indent 1: the API's bytes are the command's
        Route("/api/simulate", _endpoint(lambda p: service.simulate(read(p), p).report, indent=1, pool="heavy"), methods=both),
        Route("/api/models", _endpoint(lambda p: service.catalog_models())),
        Route("/api/gpus", _endpoint(lambda p: service.catalog_gpus())),
        Route("/api/releases", _endpoint(lambda p: service.releases())),
        Route("/fragment/explain", _endpoint(explain_fragment, "html")),
        Route("/fragment/fit", _endpoint(lambda p: report.fit_fragment(fit_api(p)), "html", pool="heavy")),
        Route("/fragment/logs", _endpoint(lambda p: report.logs_fragment(logs_api(p)), "html", pool="heavy"), methods=["POST"]),
        Route("/fragment/simulate", _endpoint(simulate_fragment, "html", pool="heavy"), methods=both),
    ]


def api_description(max_body: int = service.MAX_BODY_BYTES) -> dict:
    """An OpenAPI-style description of the JSON API (served at /api)."""
    model_params = [
        {"name": "model", "in": "query", "description": "catalog or Hub repo id (a local path only under "
                                                         "--allow-local-models DIR)"},
        {"name": "gpu", "in": "query", "description": 'GPU name or alias ("RTX 4090", "H100")'},
        {"name": "gpu_memory", "in": "query", "description": "a custom GPU size instead, e.g. 23.65GiB"},
        {"name": "engine", "in": "query", "description": "vllm (default), sglang, llamacpp or ollama"},
        {"name": "version", "in": "query", "description": "the engine release (default: newest)"},
        {"name": "line", "in": "query", "description": "a pasted launch line (its model and flags)"},
        {"name": "<setting>", "in": "query", "description": "any engine setting by its snake_case name "
                                                            "(max_model_len=32k, gpu_memory_utilization=0.8, enforce_eager=true)"},
    ]
    same = "exactly what `vram-detective {} --json` prints for the same inputs"
    fit_params = [{"name": name, "in": "query", "description": text} for name, text in (
        ("context", "tokens per request, e.g. 32k"), ("concurrency", "requests at once"),
        ("max_gpu_memory", "nvidia-smi ceiling per GPU, e.g. 20GiB"), ("gpus", "GPUs available"),
        ("top", "candidates to list"))]
    return {
        "openapi": "3.0.3",
        "info": {"title": "vram-detective", "description": "GPU memory predictions as JSON. Errors: "
                 "{\"error\": \"...\"} with 400 (bad input), 403 (a local path), 413 (body over "
                 f"{max_body:,} bytes), 422 (an unknown parameter, named with the one meant; or the engine "
                 "would refuse to start: then the body is what --json prints, with startup_failed true), 500."},
        "paths": {
            "/api/explain": {"get": {"summary": same.format("explain"), "parameters": model_params}},
            "/api/whatif": {"get": {"summary": same.format("whatif"), "parameters": model_params}},
            "/api/fit": {"get": {"summary": same.format("fit"), "parameters": model_params + fit_params}},
            "/api/logs": {"post": {"summary": same.format("logs -") + " (the log read from the body, never "
                                   "written to disk); no log, nvidia_smi and model: " + same.format(
                                       "logs --nvidia-smi F --model M") + " (engine, tp: the engine that ran)",
                                   "requestBody": {"content": {
                                       "application/json": {"schema": {"type": "object", "properties": {
                                           "log": {"type": "string"}, "nvidia_smi": {"type": "string"},
                                           "model": {"type": "string"}, "gpu": {"type": "string"},
                                           "version": {"type": "string"}, "engine": {"type": "string"},
                                           "tp": {"type": "integer"}}}},
                                       "text/plain": {"schema": {"type": "string", "description": "the log"}}},
                                       "description": f"at most {max_body:,} bytes"}}},
            "/api/score": {"post": {"summary": same.format("score FILE --catalog-only") + " for the ground-truth "
                                    "cases in the body (models from the catalog; nothing read from disk)",
                                    "requestBody": {"content": {
                                        "application/json": {"schema": {"type": "object", "properties": {
                                            "cases": {"description": "JSONL text, or a list of case objects "
                                                      "(groundtruth/SCHEMA.md)"},
                                            "from_logs": {"type": "boolean"}}, "required": ["cases"]}},
                                        "text/plain": {"schema": {"type": "string", "description": "JSONL cases"}}},
                                        "description": f"at most {max_body:,} bytes"}}},
            "/api/simulate": {"get": {"summary": same.format("simulate") + simulate_caps(), "parameters": model_params + [
                {"name": "workload", "in": "query", "description": "chat | rag | longdoc | agent [:rate=R,duration=S,"
                 "users=N,think=S,burst=N,period=S,requests=N], e.g. chat:rate=2,duration=120"},
                {"name": "seed", "in": "query", "description": "the workload's random seed (default 0)"},
                {"name": "preemption_budget", "in": "query", "description": "default 0.01"}]},
                              "post": {"summary": "the same, with a pasted JSONL trace: a JSON body {\"trace\": "
                                       "\"one request a line\"} (timestamp, prompt_tokens, output_tokens, optional "
                                       "prefix_id, prefix_tokens, session)"}},
            "/api/models": {"get": {"summary": "the catalog's model ids"}},
            "/api/gpus": {"get": {"summary": "the GPU catalog"}},
            "/api/releases": {"get": {"summary": "each engine's releases"}},
        },
    }


def simulate_caps() -> str:
    return (f" (caps per request: {service.MAX_SIM_DURATION_S:g} s of arrivals, {service.MAX_SIM_REQUESTS:,} requests "
            f"and {service.MAX_SIM_TOKENS:,} tokens, or {service.MAX_SIM_USERS} users and "
            f"{service.MAX_SIM_USER_SECONDS:g} user-seconds in a closed loop; 413 beyond)")
