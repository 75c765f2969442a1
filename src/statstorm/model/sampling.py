"""Sampled traces: about one request in N recorded in full, the others counted in the kernel.

The compiled tracer records by windows: one worker at a time has the PHP function probes
attached and records the requests it starts, whole, until about one request in N of all
requests seen is recorded; then another worker, later. So the recorded requests come in
runs of one worker's consecutive requests, spread over the trace's time and its workers.

A sampled trace's requests, operations and syscalls are those of the recorded requests; each
counted request left one record of its calls by type (calls, failures, summed latency).
Per-request figures come from the recorded requests as they are; totals over the traced time
are the recorded ones times `scale()`. The sampling error of the recorded requests' mean
(`stated_error`) comes from the spread of every request's calls, recorded and counted.
"""

from __future__ import annotations

import math
from typing import Any

from statstorm.results.jsontypes import JsonObject


class CountedRequests:
    """The requests of a sampled trace that were counted, not recorded."""

    def __init__(self) -> None:
        self.calls: dict[str, list[int]] = {}  # call → [calls, failed, latency_ns]
        self._totals: list[int] = []  # calls per counted request

    @property
    def requests(self) -> int:
        return len(self._totals)

    def add(self, counts: dict[str, tuple[int, int, int]]) -> None:
        total = 0
        for call, (n, failed, lat) in counts.items():
            c = self.calls.setdefault(call, [0, 0, 0])
            c[0] += n
            c[1] += failed
            c[2] += lat
            total += n
        self._totals.append(total)

    def mean_per_request(self) -> float:
        return sum(self._totals) / len(self._totals) if self._totals else 0.0

    def stated_error(self, recorded: list[int]) -> float:
        """The 95 % half-width of the recorded requests' mean calls per request as an
        estimate of all requests' mean: from the spread of every request's calls (recorded
        and counted), with the finite-population correction (0 when it cannot be told)."""
        every = list(recorded) + self._totals
        n, total = len(recorded), len(every)
        if n < 1 or total < 2:
            return 0.0
        m = sum(every) / total
        sd = math.sqrt(sum((x - m) ** 2 for x in every) / (total - 1))
        return 1.96 * sd / math.sqrt(n) * math.sqrt((total - n) / (total - 1))

    def trailer(self, one_in: int, recorded: list[int]) -> JsonObject:
        """What a sampled trace says of its sample (the trailer's "sampling"); `recorded`:
        the recorded requests' calls each."""
        return {
            "one_in": one_in, "recorded_requests": len(recorded),
            "counted_requests": self.requests,
            "scale": scale(len(recorded), self.requests),
            "counted_calls_per_request": round(self.mean_per_request(), 3),
            "calls_per_request_error": round(self.stated_error(recorded), 3),
            "counted_calls": {c: {"calls": v[0], "failed": v[1], "latency_ns": v[2]}
                              for c, v in sorted(self.calls.items())},
        }


def scale(recorded: int, counted: int) -> float:
    """All requests over the recorded ones: what a recorded total is multiplied by."""
    return round((recorded + counted) / recorded, 4) if recorded else 1.0


def whatif_note(header: dict[str, Any]) -> str | None:
    """What whatif says of a sampled trace (None: the trace recorded every request)."""
    n = int((header.get("sampling") or {}).get("one_in") or 1)
    if n <= 1:
        return None
    return (f"sampled trace: about 1 request in {n} was recorded (whole requests, one worker at "
            "a time); the figures per request "
            "are the recorded requests' own, and the replay sees only those, so cache state "
            "that the other requests built (realpath cache fills, TTL refreshes, OPcache "
            "revalidation windows) is missing from it")


def check_note(header: dict[str, Any], trailer: dict[str, Any]) -> str | None:
    """What check says of a sampled trace's evidence."""
    n = int((header.get("sampling") or {}).get("one_in") or 1)
    if n <= 1:
        return None
    s = trailer.get("sampling") or {}
    return (f"the trace is sampled (1 request in {n}): {s.get('recorded_requests', '?')} "
            f"recorded, {s.get('counted_requests', '?')} counted; its per-request figures are "
            "the recorded requests' own")
