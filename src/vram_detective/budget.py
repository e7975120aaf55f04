"""A cooperative CPU-time budget for one piece of work (a web request): the loops that can run long (the
simulator's steps, the advisor's and the simulate fit's predictions) call `check()`, which raises OverBudget
once the budget's deadline has passed or its owner cancelled it (the client went away).

No budget is set on the command line, so `check()` costs one thread-local read there. The budget is per
thread: the web server runs each cheap request's work on a worker thread of its own (web/app.py); the others
run in worker processes whose CPU time the server watches (web/workers.py)."""
from __future__ import annotations

import contextlib
import threading
import time


class OverBudget(RuntimeError):
    """The work ran past its deadline, or was cancelled; `reason` is one line for the client."""


class Budget:
    def __init__(self, seconds: float | None):
        self.seconds = seconds
        self.deadline = None
        self.cancelled = threading.Event()
        self.start()

    def start(self) -> None:
        """(Re)start the clock on the thread that does the work: the budget is that thread's CPU time from here
        (time queued, or waiting for the GIL on a busy machine, is not the request's computation)."""
        self.deadline = None if self.seconds is None else time.thread_time() + self.seconds

    def cancel(self) -> None:
        self.cancelled.set()

    def check(self) -> None:
        if self.cancelled.is_set():
            raise OverBudget(over_text(self.seconds, cancelled=True))
        if self.deadline is not None and time.thread_time() > self.deadline:
            raise OverBudget(over_text(self.seconds))


def over_text(seconds: float | None, cancelled: bool = False) -> str:
    """The one line of a request stopped: cancelled, or past its budget (also the web server's worker processes')."""
    if cancelled or seconds is None:
        return "the request was cancelled (the client went away)"
    return (f"the request ran past its budget of {seconds:g} s of computation (CPU) "
            "(the web server's limit; run the command line for larger work)")


_local = threading.local()


@contextlib.contextmanager
def running(budget: Budget):
    """Run the body under `budget` on this thread."""
    previous = getattr(_local, "budget", None)
    _local.budget = budget
    try:
        yield budget
    finally:
        _local.budget = previous


def check() -> None:
    """Raise OverBudget when this thread's budget (if any) is spent or cancelled."""
    budget = getattr(_local, "budget", None)
    if budget is not None:
        budget.check()
