"""Request workloads: built-in shapes (chat, rag, longdoc, agent) with an arrival process, or a JSONL trace.

A shape says what one *session* sends: a shared system prefix (one of `num_prefixes`, so requests of many
sessions share its blocks), then turns; each turn re-sends the whole conversation so far plus new tokens,
so later turns share the session's earlier blocks. Lengths are log-normal (median, sigma) clipped to
[lo, hi]. Arrivals: Poisson sessions at `rate`/s for `duration` s, bursts of `burst` sessions every
`period` s, or a closed loop of `users` who start a new turn `think` s after the last one finished.
Everything is drawn from one `random.Random(seed)`: the same spec and seed give the same requests.
"""
from __future__ import annotations

import heapq
import json
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, field, replace


@dataclass(frozen=True, slots=True)
class Request:
    arrival: float  # seconds from the start of the trace
    prompt_tokens: int
    output_tokens: int
    prefix_id: str | None = None  # a system prompt shared across sessions
    prefix_tokens: int = 0  # its length (the first prefix_tokens of the prompt)
    session: str = ""  # the conversation: its blocks are shared with its later turns
    user: int = -1  # closed loop: the user who sends it

    def at(self, arrival: float) -> Request:
        """This request sent at `arrival` (replace(self, arrival=...) without its walk over the fields)."""
        return Request(arrival, self.prompt_tokens, self.output_tokens, self.prefix_id, self.prefix_tokens,
                       self.session, self.user)


@dataclass(frozen=True)
class Lengths:
    median: float
    sigma: float
    lo: int
    hi: int

    def draw(self, rng: random.Random) -> int:
        value = self.median * math.exp(rng.gauss(0.0, self.sigma)) if self.sigma else self.median
        return int(min(self.hi, max(self.lo, round(value))))


@dataclass(frozen=True)
class Shape:
    name: str
    description: str
    first_prompt: Lengths  # the first turn's own tokens (after the shared prefix)
    output: Lengths
    prefix: Lengths | None = None  # the shared system prefix (per prefix id, fixed)
    num_prefixes: int = 1
    zipf: float = 0.0  # > 0: prefixes picked by popularity (documents), else uniformly
    turns: tuple[int, int] = (1, 1)
    turn_prompt: Lengths | None = None  # what each later turn adds


SHAPES = {
    "chat": Shape("chat", "chat: 4 system prompts (~400 tokens), 1-4 turns of ~250 tokens, answers ~300 tokens",
                  Lengths(250, 0.8, 8, 4096), Lengths(300, 0.7, 4, 2048), Lengths(400, 0.3, 64, 1024), 4,
                  turns=(1, 4), turn_prompt=Lengths(120, 0.8, 4, 2048)),
    "rag": Shape("rag", "RAG: 3 long system prompts (~1.5K tokens) + ~3K retrieved tokens, answers ~250",
                 Lengths(3000, 0.4, 256, 16384), Lengths(250, 0.6, 8, 1024), Lengths(1500, 0.2, 512, 4096), 3),
    "longdoc": Shape("longdoc", "long-document QA: 50 documents (~20K tokens, popular ones asked often), "
                     "~60-token questions, answers ~400", Lengths(60, 0.5, 8, 512), Lengths(400, 0.6, 16, 2048),
                     Lengths(20000, 0.5, 2048, 120000), 50, zipf=1.1),
    "agent": Shape("agent", "agents: tool definitions (~3K tokens), 5-20 turns each adding ~800 tokens of tool "
                   "output, answers ~150", Lengths(500, 0.6, 16, 8192), Lengths(150, 0.7, 4, 2048),
                   Lengths(3000, 0.0, 3000, 3000), 1, turns=(5, 20), turn_prompt=Lengths(800, 0.9, 16, 16384)),
}


@dataclass(frozen=True)
class Workload:
    """A shape with its arrival process, or a trace. `sessions(rng)` yields sessions in start order."""

    name: str
    shape: Shape | None = None
    rate: float = 0.0  # Poisson sessions per second
    duration: float = 600.0
    burst: int = 0  # sessions per burst
    period: float = 60.0
    users: int = 0  # closed loop
    think: float = 1.0
    max_requests: int = 0  # stop after this many requests (0: no limit)
    trace: tuple[Request, ...] = ()
    max_model_len: int = 0  # set by the simulator: prompts are cut so prompt + output fits
    description: str = field(default="", compare=False)

    @property
    def closed(self) -> bool:
        return self.users > 0

    def open_requests(self, seed: int) -> Iterator[Request]:
        """The open-loop requests in arrival order (memory: one pending request per live session)."""
        return self._limited(iter(self.trace) if self.trace else self._open(seed))

    def _open(self, seed: int) -> Iterator[Request]:
        rng = random.Random(seed)
        pending: list = []
        order = 0
        for number, start in enumerate(self._session_starts(rng)):
            turns = self._session(rng, f"s{number}", start, -1)
            first = next(turns)
            heapq.heappush(pending, (first.arrival, order, first, turns))
            order += 1
            while pending and pending[0][0] <= start:
                yield from self._pop(pending)
        while pending:
            yield from self._pop(pending)

    def _pop(self, pending: list) -> Iterator[Request]:
        _, order, request, turns = heapq.heappop(pending)
        nxt = next(turns, None)
        if nxt is not None:
            heapq.heappush(pending, (nxt.arrival, order, nxt, turns))
        yield request

    def _limited(self, requests: Iterator[Request]) -> Iterator[Request]:
        for count, request in enumerate(requests):
            if self.max_requests and count >= self.max_requests:
                return
            yield self._fit(request)

    def _session_starts(self, rng: random.Random) -> Iterator[float]:
        if self.burst:
            t = 0.0
            while t < self.duration:
                for _ in range(self.burst):
                    yield t
                t += self.period
            return
        t = rng.expovariate(self.rate) if self.rate > 0 else math.inf
        while t < self.duration:
            yield t
            t += rng.expovariate(self.rate)

    def user_turns(self, seed: int, user: int) -> Iterator[Request]:
        """Closed loop: one user's requests, session after session (arrival filled in by the simulator)."""
        rng = random.Random(f"{seed}:{user}")
        number = 0
        while True:
            yield from self._session(rng, f"u{user}s{number}", 0.0, user)
            number += 1

    def _session(self, rng: random.Random, session: str, start: float, user: int) -> Iterator[Request]:
        shape = self.shape
        pick = _pick_prefix(rng, shape)
        prefix = _prefix_tokens(shape, pick)
        context = prefix + shape.first_prompt.draw(rng)
        turns = rng.randint(*shape.turns)
        t = start
        for turn in range(turns):
            if turn:
                context += shape.turn_prompt.draw(rng)
            output = shape.output.draw(rng)
            request = self._fit(Request(t, context, output, f"{shape.name}-p{pick}" if prefix else None,
                                        prefix, session, user))
            yield request
            context = request.prompt_tokens + output
            # an open-loop agent sends its next turn after an estimated answer time plus thinking
            t += self.think + output * 0.02

    def _fit(self, request: Request) -> Request:
        limit = self.max_model_len
        if not limit or request.prompt_tokens + request.output_tokens <= limit:
            return request
        output = min(request.output_tokens, max(1, limit // 4))
        prompt = limit - output
        return replace(request, prompt_tokens=prompt, output_tokens=output,
                       prefix_tokens=min(request.prefix_tokens, prompt))


def _pick_prefix(rng: random.Random, shape: Shape) -> int:
    if shape.num_prefixes <= 1:
        return 0
    if shape.zipf > 0:
        weights = [1.0 / (k + 1) ** shape.zipf for k in range(shape.num_prefixes)]
        return rng.choices(range(shape.num_prefixes), weights)[0]
    return rng.randrange(shape.num_prefixes)


def _prefix_tokens(shape: Shape, pick: int) -> int:
    # a prefix's length is a property of the prefix: drawn from its own seeded stream
    return shape.prefix.draw(random.Random(f"{shape.name}:{pick}")) if shape.prefix else 0


# What one simulation may take by default on the command line (`simulate --max-requests/--max-tokens` raise
# them): 100,000 trace lines took 107 s (issue 30), so past these a run is refused with the flag to raise them.
MAX_REQUESTS = 100_000
MAX_TOKENS = 2_000_000_000
MAX_REQUEST_TOKENS = 1 << 31  # one request's prompt or output: more than any model's context
MAX_TRACE_LINE_BYTES = 1 << 16  # one JSONL request line (a request is a handful of numbers)
MAX_TRACE_DEPTH = 4  # {"timestamp": ..., ...}: a flat object; deeper nesting is not a request


class WorkloadError(ValueError):
    """A workload or trace no simulation can take (bad input, one line)."""


def read_trace(path: str, max_requests: int = MAX_REQUESTS) -> tuple[Request, ...]:
    """JSONL, one request a line: timestamp (s), prompt_tokens, output_tokens, optional prefix_id /
    prefix_tokens / session. Timestamps are made relative to the first; lines are sorted by time."""
    import io

    from ..units import open_regular_file

    with open_regular_file(path, "the trace") as raw:
        return parse_trace(io.TextIOWrapper(raw, encoding="utf-8", errors="replace"), path, max_requests)


def _nesting(line: str) -> int:
    depth = deepest = 0
    for char in line:
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def _count(row: dict, key: str, where: str, minimum: int, default=None) -> int:
    value = row.get(key, default)
    if value is None and default is None:
        raise WorkloadError(f"{where}: missing {key!r}")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise WorkloadError(f"{where}: {key} must be a whole number of tokens, got {str(value)[:40]!r}")
    if not minimum <= value <= MAX_REQUEST_TOKENS or value != int(value):
        raise WorkloadError(f"{where}: {key} must be a whole number from {minimum} to {MAX_REQUEST_TOKENS:,}, "
                            f"got {value:g}")
    return int(value)


def _trace_request(line: str, where: str, number: int) -> Request:
    if len(line) > MAX_TRACE_LINE_BYTES:
        raise WorkloadError(f"{where}: a line of {len(line):,} characters is not a request (at most "
                            f"{MAX_TRACE_LINE_BYTES:,})")
    if _nesting(line) > MAX_TRACE_DEPTH:
        raise WorkloadError(f"{where}: not a JSON request (nested deeper than {MAX_TRACE_DEPTH} levels)")
    try:
        row = json.loads(line)
    except ValueError as error:
        raise WorkloadError(f"{where}: not a JSON request ({error})") from None
    if not isinstance(row, dict):
        raise WorkloadError(f"{where}: not a JSON request (a {type(row).__name__}, not an object)")
    stamp = row.get("timestamp")
    if isinstance(stamp, bool) or not isinstance(stamp, (int, float)):
        raise WorkloadError(f"{where}: missing 'timestamp' (seconds, a number)" if stamp is None else
                            f"{where}: timestamp must be a number of seconds, got {str(stamp)[:40]!r}")
    if not (math.isfinite(stamp) and 0 <= stamp <= 1e9):
        raise WorkloadError(f"{where}: timestamp must be finite seconds from 0 to 1e9, got {stamp}")
    prompt = _count(row, "prompt_tokens", where, 1)
    output = _count(row, "output_tokens", where, 0)
    prefix = _count(row, "prefix_tokens", where, 0, 0)
    if prefix > prompt:
        raise WorkloadError(f"{where}: prefix_tokens {prefix} is more than prompt_tokens {prompt}")
    prefix_id = row.get("prefix_id")
    return Request(float(stamp), prompt, output, None if prefix_id is None else str(prefix_id)[:200], prefix,
                   str(row.get("session", "") or f"t{number}")[:200])


def parse_trace(lines, source: str = "trace", max_requests: int = MAX_REQUESTS,
                max_tokens: int = MAX_TOKENS) -> tuple[Request, ...]:
    """read_trace's rules over lines already in memory (a pasted trace); `source` names it in errors. Every
    value is checked here (finite, non-negative timestamps; whole, bounded token counts), and a trace over
    `max_requests` requests or `max_tokens` tokens is refused (WorkloadError names the limit)."""
    rows = []
    tokens = 0
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        request = _trace_request(line, f"{source}:{number}", number)
        rows.append(request)
        tokens += request.prompt_tokens + request.output_tokens
        if len(rows) > max_requests or tokens > max_tokens:
            raise WorkloadError(f"{source}: more than {max_requests:,} requests or {max_tokens:,} tokens "
                                "(simulate --max-requests N / --max-tokens N raise the limit)")
    rows.sort(key=lambda r: r.arrival)
    first = rows[0].arrival if rows else 0.0
    return tuple(replace(r, arrival=r.arrival - first) for r in rows)


def size(workload: Workload, seed: int, max_requests: int = MAX_REQUESTS, max_tokens: int = MAX_TOKENS) -> int:
    """The requests a run of `workload` sends (an upper bound for a closed loop), refused past the limits with
    WorkloadError (the CLI's flags raise them). An open loop's requests are drawn to count them (cheap)."""
    hint = "(simulate --max-requests N / --max-tokens N raise the limit)"
    if workload.closed:
        bound = workload.users * (int(workload.duration / max(workload.think, 0.01)) + 1)
        count = min(bound, workload.max_requests) if workload.max_requests else bound
        if count > max_requests:
            raise WorkloadError(f"{workload.users} users for {workload.duration:g} s may send {bound:,} requests, "
                                f"over the limit of {max_requests:,} {hint} (or add requests=N to the workload)")
        return count
    tokens = count = 0
    for count, request in enumerate(workload.open_requests(seed), 1):
        tokens += request.prompt_tokens + request.output_tokens
        if count > max_requests or tokens > max_tokens:
            raise WorkloadError(f"the workload sends more than {max_requests:,} requests or {max_tokens:,} tokens "
                                f"{hint}")
    return count


# workload options: (smallest, largest) each may take
OPTION_RANGES = {"rate": (0.0, 1e6), "duration": (0.0, 1e9), "burst": (0, 1_000_000), "period": (1e-3, 1e9),
                 "users": (0, 100_000), "think": (0.0, 1e6), "requests": (0, 1e12)}


def _option(key: str, value: str, spec: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise WorkloadError(f"workload option {key}={value[:40]!r} is not a number (in {spec[:80]!r})") from None
    low, high = OPTION_RANGES[key]
    if not low <= number <= high:  # NaN fails too
        raise WorkloadError(f"workload option {key} must be from {low:g} to {high:g}, got {value[:40]}")
    if key in ("burst", "users", "requests") and number != int(number):
        raise WorkloadError(f"workload option {key} must be a whole number, got {value[:40]}")
    return number


def parse_workload(spec: str, max_requests: int = MAX_REQUESTS) -> Workload:
    """'chat', 'chat:rate=5,duration=600', 'agent:users=16', 'rag:burst=40,period=30',
    'trace:requests.jsonl' (options: rate, duration, burst, period, users, think, requests)."""
    name, _, options = spec.partition(":")
    if name == "trace":
        return Workload("trace", trace=read_trace(options, max_requests), description=f"trace {options}")
    if name not in SHAPES:
        raise ValueError(f"unknown workload {name!r} (known: {', '.join(SHAPES)}, trace:FILE.jsonl)")
    values: dict[str, float] = {}
    for item in filter(None, options.split(",")):
        key, _, value = item.partition("=")
        if key not in OPTION_RANGES:
            raise WorkloadError(f"unknown workload option {key[:40]!r} in {spec[:80]!r}")
        values[key] = _option(key, value, spec)
    shape = SHAPES[name]
    rate = values.get("rate", 0.0 if ("users" in values or "burst" in values) else 2.0)
    return Workload(name, shape, rate=rate, duration=values.get("duration", 600.0),
                    burst=int(values.get("burst", 0)), period=values.get("period", 60.0),
                    users=int(values.get("users", 0)), think=values.get("think", 1.0),
                    max_requests=int(values.get("requests", 0)), description=shape.description)
