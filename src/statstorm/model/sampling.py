"""Sampled traces: one request in N recorded in full, the others counted in the kernel.

A sampled trace's requests, operations and syscalls are those of the recorded requests; each
counted request left one record of its calls by type (calls, failures, summed latency).
Per-request figures come from the recorded requests as they are; totals over the traced time
are the recorded ones times `scale()`. The counted calls check the sample: the recorded
requests' mean calls per request should lie within the sampling error (`stated_error`) of the
counted requests' mean.
"""

from __future__ import annotations

import math
from typing import Any


class CountedRequests:
    """The requests of a sampled trace that were counted, not recorded."""

    def __init__(self) -> None:
        self.requests = 0
        self.calls: dict[str, list[int]] = {}  # call → [calls, failed, latency_ns]
        self._totals: list[int] = []  # calls per counted request

    def add(self, counts: dict[str, tuple[int, int, int]]) -> None:
        self.requests += 1
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

    def stated_error(self, recorded: int) -> float:
        """The 95 % half-width of a mean over `recorded` requests, from the spread of the
        counted requests' calls per request (0 when it cannot be told)."""
        if len(self._totals) < 2 or recorded < 1:
            return 0.0
        m = self.mean_per_request()
        sd = math.sqrt(sum((x - m) ** 2 for x in self._totals) / (len(self._totals) - 1))
        return 1.96 * sd / math.sqrt(recorded)

    def trailer(self, one_in: int, recorded: int) -> dict[str, Any]:
        """What a sampled trace says of its sample (the trailer's "sampling")."""
        return {
            "one_in": one_in, "recorded_requests": recorded, "counted_requests": self.requests,
            "scale": scale(recorded, self.requests),
            "counted_calls_per_request": round(self.mean_per_request(), 3),
            "calls_per_request_error": round(self.stated_error(recorded), 3),
            "counted_calls": {c: {"calls": v[0], "failed": v[1], "latency_ns": v[2]}
                              for c, v in sorted(self.calls.items())},
        }


def scale(recorded: int, counted: int) -> float:
    """All requests over the recorded ones: what a recorded total is multiplied by."""
    return round((recorded + counted) / recorded, 4) if recorded else 1.0
