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


def read_trace(path: str) -> tuple[Request, ...]:
    """JSONL, one request a line: timestamp (s), prompt_tokens, output_tokens, optional prefix_id /
    prefix_tokens / session. Timestamps are made relative to the first; lines are sorted by time."""
    with open(path, encoding="utf-8") as handle:
        return parse_trace(handle, path)


def parse_trace(lines, source: str = "trace") -> tuple[Request, ...]:
    """read_trace's rules over lines already in memory (a pasted trace); `source` names it in errors."""
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            rows.append(Request(float(row["timestamp"]), int(row["prompt_tokens"]), int(row["output_tokens"]),
                                row.get("prefix_id"), int(row.get("prefix_tokens", 0) or 0),
                                str(row.get("session", "") or f"t{number}")))
        except KeyError as missing:
            raise ValueError(f"{source}:{number}: missing {missing}") from None
        except (json.JSONDecodeError, TypeError, AttributeError) as error:
            raise ValueError(f"{source}:{number}: not a JSON request ({error})") from None
    rows.sort(key=lambda r: r.arrival)
    first = rows[0].arrival if rows else 0.0
    return tuple(replace(r, arrival=r.arrival - first) for r in rows)


def parse_workload(spec: str) -> Workload:
    """'chat', 'chat:rate=5,duration=600', 'agent:users=16', 'rag:burst=40,period=30',
    'trace:requests.jsonl' (options: rate, duration, burst, period, users, think, requests)."""
    name, _, options = spec.partition(":")
    if name == "trace":
        return Workload("trace", trace=read_trace(options), description=f"trace {options}")
    if name not in SHAPES:
        raise ValueError(f"unknown workload {name!r} (known: {', '.join(SHAPES)}, trace:FILE.jsonl)")
    values: dict[str, float] = {}
    for item in filter(None, options.split(",")):
        key, _, value = item.partition("=")
        if key not in ("rate", "duration", "burst", "period", "users", "think", "requests"):
            raise ValueError(f"unknown workload option {key!r} in {spec!r}")
        values[key] = float(value)
    shape = SHAPES[name]
    rate = values.get("rate", 0.0 if ("users" in values or "burst" in values) else 2.0)
    return Workload(name, shape, rate=rate, duration=values.get("duration", 600.0),
                    burst=int(values.get("burst", 0)), period=values.get("period", 60.0),
                    users=int(values.get("users", 0)), think=values.get("think", 1.0),
                    max_requests=int(values.get("requests", 0)), description=shape.description)
