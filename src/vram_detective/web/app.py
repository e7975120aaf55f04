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
from collections.abc import Callable
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

import anyio
import anyio.to_thread
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
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


# computations at once in the serving process (cheap requests: catalog explains, the catalogs, the page): the
# work is pure Python (one GIL), so more threads only interleave and stretch each request; waiting requests queue
COMPUTE_THREADS = 4
# worker processes a pool (`serve --workers`): one pool for simulate, fit, whatif, logs, compare, score and local
# models, one for the requests that fetch from the Hub (they wait on the network: slow or trickling Hub servers
# never hold the workers the others need). 0: those requests run on threads of the serving process instead
WORKERS = 2
# with --workers 0, the threads of the serving process those requests take instead (the Hub's mostly wait)
THREADS_WITHOUT_WORKERS = {"compute": COMPUTE_THREADS, "heavy": 2, "hub": 4}
# seconds of computation one request may take (`serve --request-budget`); past it: 503 with one line
REQUEST_SECONDS = 10.0
_LIMITERS: dict = {}


def _limiter(kind: str = "compute", size: int | None = None):
    if kind not in _LIMITERS:
        _LIMITERS[kind] = anyio.CapacityLimiter(size or COMPUTE_THREADS)
    return _LIMITERS[kind]


def _in_thread(name: str, params: dict, policy: service.Policy, allowance: budget.Budget):
    allowance.start()  # the budget counts from here: time spent queued is not the request's computation
    with budget.running(allowance):
        try:
            allowance.check()
        except budget.OverBudget as error:
            return _answer_of(_error(error))
        return answer(name, params, policy)


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
               request_seconds: float = REQUEST_SECONDS, workers: int = 0) -> Starlette:
    """The application; `local_root` is --allow-local-models (None: no local path is ever read); `allowed` the
    Host names it answers to (None: any); `request_seconds` each request's computation budget; `workers` the
    worker processes a pool (0: every request on threads of this process). The pools start in the background:
    app.state.pools, closed by app.state.close_pools()."""
    policy = service.Policy(Path(local_root).resolve() if local_root else None)
    service.install_read_guard(policy)
    static = {name: files("vram_detective.web").joinpath(f"static/{name}").read_bytes() for name in STATIC_TYPES}
    pools = _start_pools(workers, policy)

    async def asset(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in static:
            return JSONResponse({"error": "no such file"}, status_code=404)
        return Response(static[name], media_type=STATIC_TYPES[name])

    async def describe(request: Request) -> Response:
        return JSONResponse(api_description(max_body))

    def endpoint(name: str):
        return _budgeted_endpoint(name, policy, request_seconds, pools)

    routes = [Route("/", endpoint("page")), Route("/static/{name}", asset), Route("/api", describe),
              *(Route(path, endpoint(name), methods=methods) for path, name, methods in ROUTES)]
    app = Starlette(routes=routes)
    app.add_middleware(BodyLimit, limit=max_body)
    app.add_middleware(HostCheck, allowed=allowed)
    app.state.pools = pools
    app.state.close_pools = lambda: [pool.close() for pool in pools.values()]
    return app


def _start_pools(size: int, policy: service.Policy) -> dict:
    """{'heavy': Pool, 'hub': Pool} of `size` workers each, started on a background thread (the fork server
    imports for about a second: the serving process listens meanwhile); {} for size 0."""
    if size <= 0:
        return {}
    import threading

    from . import workers

    root = str(policy.local_root) if policy.local_root is not None else None
    pools = {kind: workers.Pool(size, root) for kind in ("heavy", "hub")}
    threading.Thread(target=lambda: [pool.start() for pool in pools.values()], daemon=True,
                     name="start-workers").start()
    return pools


async def _watch_disconnect(request: Request, allowance: budget.Budget) -> None:
    """Cancel the request's work when the client goes away (the body has been read: the next message the
    server sends is the disconnect)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            allowance.cancel()
            return


def _budgeted_endpoint(name: str, policy: service.Policy, seconds: float | None, pools: dict):
    """An endpoint answering WORKS[name] under a budget of `seconds`, cancelled when the client leaves: on a
    thread of this process for a cheap request, else by a worker process of its pool (the Hub pool when the
    request names a Hub model)."""
    work = WORKS[name]

    async def handle(request: Request) -> Response:
        try:
            params = await _params(request) if name != "page" else dict(request.query_params)
            if name != "page":
                service.check_parameters(params)
            source = service.model_kind(params, policy)
        except Exception as error:  # noqa: BLE001 - every error is one JSON line with its status
            return _error(error)
        hub = source == "hub"
        pool = "hub" if hub else ("heavy" if work.heavy or source == "local" else "compute")
        allowance = budget.Budget(None if seconds is None else seconds + (service.hub_deadline() if hub else 0))
        async with anyio.create_task_group() as group:
            group.start_soon(_watch_disconnect, request, allowance)
            if pool in pools:
                answered = await anyio.to_thread.run_sync(pools[pool].run, name, params, allowance.seconds,
                                                          allowance.cancelled,
                                                          limiter=_limiter(pool, pools[pool].size))
            else:
                answered = await anyio.to_thread.run_sync(_in_thread, name, params, policy, allowance,
                                                          limiter=_limiter(pool, THREADS_WITHOUT_WORKERS[pool]))
            group.cancel_scope.cancel()
        status, media_type, body, headers = answered
        return Response(body, status_code=status, headers=headers, media_type=media_type)
    return handle


@dataclass(frozen=True)
class Work:
    """What an endpoint computes from (params, policy); `kind` json, html (a fragment) or page; `heavy`: it can
    take seconds of CPU (a worker process answers it)."""

    function: Callable
    kind: str = "json"
    indent: int = 2
    heavy: bool = False


def answer(name: str, params: dict, policy: service.Policy) -> tuple[int, str, bytes, dict]:
    """WORKS[name] for these parameters, as (status, media type, body, headers): errors as JSON with their
    status. Run by the serving process (cheap requests) or a worker process (workers.py): the same bytes."""
    work = WORKS[name]
    started = time.perf_counter()
    try:
        result = work.function(params, policy)
    except Exception as error:  # noqa: BLE001 - every error is one JSON line with its status
        return _answer_of(_error(error))
    spent = time.perf_counter() - started
    if work.kind == "page":
        return 200, "text/html", result.encode("utf-8"), {"Content-Security-Policy": CSP, "Cache-Control": "no-store"}
    # the computation's own time (benchmarks/web.py reads it: the server-side latency)
    headers = {"Server-Timing": f"app;dur={spent * 1000:.2f}", "Cache-Control": "no-store"}
    if work.kind == "html":
        return 200, "text/html", result.encode("utf-8"), headers
    # a start the engine would refuse: what `--json` prints (exit 1 there), answered 422 as documented
    refused = isinstance(result, dict) and result.get("startup_failed") is True
    body = (json.dumps(result, indent=work.indent, default=str) + "\n").encode("utf-8")
    return (422 if refused else 200), "application/json", body, headers


def _answer_of(response: JSONResponse) -> tuple[int, str, bytes, dict]:
    return response.status_code, "application/json", bytes(response.body), {}


def over_budget_answer(why: str, seconds: float | None = None) -> tuple[int, str, bytes, dict]:
    """503: the client went away (`why` 'cancelled': nobody reads it) or the request ran past its budget."""
    return _answer_of(_error(budget.OverBudget(budget.over_text(seconds, why == "cancelled"))))


def worker_died_answer() -> tuple[int, str, bytes, dict]:
    """500: the worker process ended while computing (killed from outside, out of memory): a fresh one replaces it."""
    return _answer_of(JSONResponse({"error": "internal error (the worker process computing this request ended; "
                                             "it has been replaced: try again)"}, status_code=500))


def no_workers_answer(why: str) -> tuple[int, str, bytes, dict]:
    """500: the worker processes could not be started (serve --workers 0 computes on threads instead)."""
    return _answer_of(JSONResponse({"error": f"internal error (the worker processes could not start: {why[:200]}; "
                                             "serve --workers 0 runs without them)"}, status_code=500))


# --- what each endpoint computes: functions of (params, policy) ----------------------------------------------

def _read(params, policy):
    return service.read_request(params, policy)


def _explain_fragment(params, policy):
    request = _read(params, policy)
    breakdown = service.explain(request)
    return report.explain_fragment(breakdown, service.explain_json(request, breakdown),
                                   service.launch_line(request, breakdown), page=True)


def _logs_api(params, policy):
    from ..library import envelope

    tp = params.get("tp")
    found = service.logs_json(str(params.get("log") or ""), params.get("nvidia_smi") or None,
                              params.get("model"), params.get("gpu"), params.get("version"), policy,
                              engine=params.get("engine") or None, tp=int(tp) if tp not in (None, "") else None)
    return envelope("logs", found.get("engine"), found)


def _compare_api(params, policy):
    from ..library import compare

    engines = tuple(filter(None, str(params.get("engines") or "").split(","))) or None
    return compare(str(params.get("model") or ""), str(params.get("gpu") or ""),
                   context=service.token_count(params.get("context")), tp=int(params.get("tp") or 1),
                   engines=engines, gguf_type=params.get("gguf_type") or None,
                   speculation=service.speculation(params)).to_dict()


def _fit_api(params, policy):
    return service.fit_json(_read(params, policy), params)


def _simulate_fragment(params, policy):
    request = _read(params, policy)
    run = service.simulate(request, params)
    return report.simulate_fragment(run.report, service.simulate_launch_line(request, run.fit))


WORKS = {
    "page": Work(lambda p, policy: page.render(p, policy), "page"),
    "explain": Work(lambda p, policy: service.explain_json(_read(p, policy))),
    "whatif": Work(lambda p, policy: service.whatif_json(_read(p, policy)), heavy=True),
    "fit": Work(_fit_api, heavy=True),
    "logs": Work(_logs_api, heavy=True),
    "compare": Work(_compare_api, heavy=True),
    "score": Work(lambda p, policy: service.score_json(p, policy), heavy=True),
    # `simulate --json` prints with indent 1: the API's bytes are the command's
    "simulate": Work(lambda p, policy: service.simulate(_read(p, policy), p).report, indent=1, heavy=True),
    "models": Work(lambda p, policy: service.catalog_models()),
    "gpus": Work(lambda p, policy: service.catalog_gpus()),
    "releases": Work(lambda p, policy: service.releases()),
    "fragment/explain": Work(_explain_fragment, "html"),
    "fragment/fit": Work(lambda p, policy: report.fit_fragment(_fit_api(p, policy)), "html", heavy=True),
    "fragment/logs": Work(lambda p, policy: report.logs_fragment(_logs_api(p, policy)), "html", heavy=True),
    "fragment/simulate": Work(_simulate_fragment, "html", heavy=True),
}
BOTH = ("GET", "POST")
# (path, WORKS name, methods)
ROUTES = [("/api/explain", "explain", BOTH), ("/api/whatif", "whatif", BOTH), ("/api/fit", "fit", BOTH),
          ("/api/logs", "logs", ("POST",)), ("/api/compare", "compare", BOTH), ("/api/score", "score", ("POST",)),
          ("/api/simulate", "simulate", BOTH), ("/api/models", "models", ("GET",)), ("/api/gpus", "gpus", ("GET",)),
          ("/api/releases", "releases", ("GET",)), ("/fragment/explain", "fragment/explain", ("GET",)),
          ("/fragment/fit", "fragment/fit", ("GET",)), ("/fragment/logs", "fragment/logs", ("POST",)),
          ("/fragment/simulate", "fragment/simulate", BOTH)]


SAME = "exactly what `vram-detective {} --json` prints for the same inputs"


def _query(*pairs) -> list[dict]:
    return [{"name": name, "in": "query", "description": text} for name, text in pairs]


MODEL_PARAMS = _query(
    ("model", "catalog or Hub repo id (a local path only under --allow-local-models DIR)"),
    ("gpu", 'GPU name or alias ("RTX 4090", "H100")'), ("gpu_memory", "a custom GPU size instead, e.g. 23.65GiB"),
    ("engine", "vllm (default), sglang, llamacpp or ollama"), ("version", "the engine release (default: newest)"),
    ("line", "a pasted launch line (its model and flags)"),
    ("<setting>", "any engine setting by its snake_case name (max_model_len=32k, gpu_memory_utilization=0.8, "
                  "enforce_eager=true)"))
FIT_PARAMS = _query(("context", "tokens per request, e.g. 32k"), ("concurrency", "requests at once"),
                    ("max_gpu_memory", "nvidia-smi ceiling per GPU, e.g. 20GiB"), ("gpus", "GPUs available"),
                    ("top", "candidates to list"))
COMPARE_PARAMS = _query(
    ("model", "catalog or Hub repo id"), ("gpu", 'GPU name or alias ("RTX 4090", "H100")'),
    ("context", "tokens per request, e.g. 32k (default: each engine's own)"), ("tp", "GPUs the model is split over"),
    ("engines", "engines side by side, e.g. vllm,sglang,llamacpp,ollama"),
    ("gguf_type", "llama.cpp / Ollama without a GGUF file: the quantization mix (default Q4_K_M)"),
    ("speculative", "speculative decoding on every engine: mtp, eagle, eagle3, ngram or draft_model"),
    ("draft_model", "the draft checkpoint"), ("draft_tokens", "tokens proposed per step (default 3)"))
SIMULATE_PARAMS = _query(
    ("workload", "chat | rag | longdoc | agent [:rate=R,duration=S,users=N,think=S,burst=N,period=S,requests=N], "
                 "e.g. chat:rate=2,duration=120"),
    ("seed", "the workload's random seed (default 0)"), ("preemption_budget", "default 0.01"))


def _body(properties: dict, text: str, max_body: int, required: list | None = None) -> dict:
    """A request body as JSON (these properties) or as plain text (`text`), at most `max_body` bytes."""
    schema = {"type": "object", "properties": properties, **({"required": required} if required else {})}
    return {"content": {"application/json": {"schema": schema},
                        "text/plain": {"schema": {"type": "string", "description": text}}},
            "description": f"at most {max_body:,} bytes"}


def api_description(max_body: int = service.MAX_BODY_BYTES) -> dict:
    """An OpenAPI-style description of the JSON API (served at /api)."""
    text = {"type": "string"}
    logs = _body({"log": text, "nvidia_smi": text, "model": text, "gpu": text, "version": text, "engine": text,
                  "tp": {"type": "integer"}}, "the log", max_body)
    cases = _body({"cases": {"description": "JSONL text, or a list of case objects (groundtruth/SCHEMA.md)"},
                   "from_logs": {"type": "boolean"}}, "JSONL cases", max_body, ["cases"])
    return {
        "openapi": "3.0.3",
        "info": {"title": "vram-detective", "description": "GPU memory predictions as JSON. Errors: "
                 "{\"error\": \"...\"} with 400 (bad input), 403 (a local path), 413 (body over "
                 f"{max_body:,} bytes), 422 (an unknown parameter, named with the one meant; or the engine "
                 "would refuse to start: then the body is what --json prints, with startup_failed true), 503 (past "
                 "its computation budget: serve --request-budget), 500."},
        "paths": {
            "/api/explain": {"get": {"summary": SAME.format("explain"), "parameters": MODEL_PARAMS}},
            "/api/whatif": {"get": {"summary": SAME.format("whatif"), "parameters": MODEL_PARAMS}},
            "/api/fit": {"get": {"summary": SAME.format("fit"), "parameters": MODEL_PARAMS + FIT_PARAMS}},
            "/api/compare": {"get": {"summary": SAME.format("compare"), "parameters": COMPARE_PARAMS}},
            "/api/logs": {"post": {"summary": SAME.format("logs -") + " (the log read from the body, never written "
                                   "to disk); no log, nvidia_smi and model: " + SAME.format(
                                       "logs --nvidia-smi F --model M") + " (engine, tp: the engine that ran)",
                                   "requestBody": logs}},
            "/api/score": {"post": {"summary": SAME.format("score FILE --catalog-only") + " for the ground-truth "
                                    "cases in the body (models from the catalog; nothing read from disk)",
                                    "requestBody": cases}},
            "/api/simulate": {"get": {"summary": SAME.format("simulate") + simulate_caps(),
                                      "parameters": MODEL_PARAMS + SIMULATE_PARAMS},
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
