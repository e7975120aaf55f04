"""The arrival feed every simulator reads: the open-loop requests in time order, or a closed loop of
users whose next request comes `think` seconds after their last one finished. Holds one pending
request per user / one look-ahead request, so memory does not grow with the trace."""
from __future__ import annotations

import heapq

from .workloads import Request, Workload


class Arrivals:
    def __init__(self, workload: Workload, seed: int):
        self.workload = workload
        self.heap: list[tuple[float, int, Request]] = []
        self.count = 0
        self.issued = 0
        if workload.closed:
            self.users = [workload.user_turns(seed, user) for user in range(workload.users)]
            for user in range(workload.users):
                self._issue(user, user * 0.01)  # users start a few ms apart, not in one instant
            self.open = None
        else:
            self.open = workload.open_requests(seed)
            self._pull()

    def _pull(self) -> None:
        request = next(self.open, None)
        if request is not None:
            self._push(request)

    def _push(self, request: Request) -> None:
        heapq.heappush(self.heap, (request.arrival, self.count, request))
        self.count += 1

    def _issue(self, user: int, t: float) -> None:
        limit = self.workload.max_requests
        if t > self.workload.duration or (limit and self.issued >= limit):
            return
        self.issued += 1
        self._push(next(self.users[user]).at(t))

    def next_time(self) -> float | None:
        return self.heap[0][0] if self.heap else None

    def pop(self) -> Request:
        _, _, request = heapq.heappop(self.heap)
        if self.open is not None:
            self._pull()
        return request

    def finished(self, request: Request, t: float) -> None:
        if self.open is None and request.user >= 0:
            self._issue(request.user, t + self.workload.think)
