"""Counts mode (`trace --counts`): requests counted in the kernel, named and numbered.

Pure code, fed like `model/attribution.py`'s Attributor, but each event is a whole request
(its calls already counted by the kernel) or a name for the next one."""

from __future__ import annotations

from typing import Protocol

from statstorm.results.trace.vocabulary import Request, RequestCounts


class CountSink(Protocol):
    def request(self, r: Request) -> None: ...
    def request_counts(self, rc: RequestCounts) -> None: ...


class CountAttributor:
    """Counts mode (`trace --counts`): each K line is a request already counted in the kernel.

    It only names requests (script and URI from PHP's request-startup probe) and numbers
    them; with `single_request` (a traced command) every process's counts form one request."""

    def __init__(self, sink: CountSink, *, single_request: bool = False) -> None:
        self.sink = sink
        self._single = single_request
        self._scripts: dict[int, tuple[int, str, str]] = {}  # pid → (ts, script, uri)
        self._next_req = 0
        self._merged: dict[str, list[int]] = {}
        self._span = [0, 0]
        self.t0: int | None = None
        self.last_ns = 0
        self.completed = 0
        self.truncated_paths = 0
        self.forks = 0
        self.exits = 0
        self.pids_seen: set[int] = set()

    def _rel(self, ts: int) -> int:
        if self.t0 is None:
            self.t0 = ts
        rel = max(ts - self.t0, 0)
        self.last_ns = max(self.last_ns, rel)
        return rel

    def on_startup(self, pid: int, ts: int, script: str) -> None:
        self._scripts[pid] = (ts, script, "")

    def on_uri(self, pid: int, uri: str) -> None:
        if pid in self._scripts:
            ts, script, _ = self._scripts[pid]
            self._scripts[pid] = (ts, script, uri)

    def on_counts(self, pid: int, start: int, end: int,
                  calls: dict[str, tuple[int, int, int]]) -> None:
        """A request ran on `pid` from `start` to `end` (kernel ns; start 0: not a request)
        making `calls` ({call: (calls, failed, latency_ns)})."""
        self.pids_seen.add(pid)
        end_rel = self._rel(end)
        if self._single:
            for call, v in calls.items():
                m = self._merged.setdefault(call, [0, 0, 0])
                for i in range(3):
                    m[i] += v[i]
            self._span[1] = max(self._span[1], end_rel)
            return
        if start <= 0:  # the worker was mid-request when the trace began, or is starting up
            if calls:
                self.sink.request_counts(RequestCounts(-1, pid, calls))
            return
        ts, script, uri = self._scripts.pop(pid, (0, "", ""))
        if ts < start:
            script = uri = ""
        rid = self._next_req
        self._next_req += 1
        self.sink.request(Request(rid, pid, self._rel(start), end_rel, script, uri))
        self.sink.request_counts(RequestCounts(rid, pid, calls))
        self.completed += 1

    def on_fork(self, parent: int, child: int) -> None:
        self.forks += 1

    def on_exit(self, pid: int) -> None:
        self.exits += 1

    def finish(self) -> None:
        if self._single:
            self.sink.request(Request(0, min(self.pids_seen, default=0), 0, self._span[1]))
            self.sink.request_counts(RequestCounts(0, min(self.pids_seen, default=0), {
                k: (v[0], v[1], v[2]) for k, v in self._merged.items()}))
            self.completed = 1
