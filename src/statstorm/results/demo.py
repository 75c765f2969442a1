"""What `statstorm demo` measured, as written to `demo.json` in its output directory (after
every step, so a run cut short still leaves what it measured)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

SCHEMA = "statstorm.demo/1"


@dataclass(frozen=True)
class Round:
    """One measured run of one lab: wrk's figures and, on network storage, the round trips
    the storage served meanwhile."""

    rps: float
    p50_ms: float
    p99_ms: float
    errors: int
    requests: int
    round_trips: int | None = None


@dataclass
class Side:
    """One lab in one phase: its rounds, and their medians and spread."""

    rounds: list[Round] = field(default_factory=list)

    def median(self, key: str) -> float:
        vals = [float(getattr(r, key)) for r in self.rounds]
        return round(statistics.median(vals), 2) if vals else 0.0

    def spread(self, key: str) -> list[float]:
        vals = [float(getattr(r, key)) for r in self.rounds]
        return [round(min(vals), 2), round(max(vals), 2)] if vals else []

    def round_trips_per_request(self) -> float | None:
        rt = [r for r in self.rounds if r.round_trips is not None]
        reqs = sum(r.requests for r in rt)
        return round(sum(r.round_trips or 0 for r in rt) / reqs, 2) if rt and reqs else None

    def to_json(self) -> dict[str, Any]:
        return {"rps": self.median("rps"), "p50_ms": self.median("p50_ms"),
                "p99_ms": self.median("p99_ms"), "errors": sum(r.errors for r in self.rounds),
                "rps_range": self.spread("rps"), "p99_range": self.spread("p99_ms"),
                "round_trips_per_request": self.round_trips_per_request(),
                "rounds": [r.__dict__ for r in self.rounds]}


@dataclass
class Phase:
    """Both labs measured with rounds interleaved (local, network, local, network, …)."""

    local: Side = field(default_factory=Side)
    network: Side = field(default_factory=Side)

    def ratios(self) -> tuple[float | None, float | None]:
        lr, nr = self.local.median("rps"), self.network.median("rps")
        lp, np_ = self.local.median("p99_ms"), self.network.median("p99_ms")
        return (round(nr / lr, 3) if lr else None, round(np_ / lp, 3) if lp else None)

    def to_json(self) -> dict[str, Any]:
        rps, p99 = self.ratios()
        return {"local": self.local.to_json(), "network": self.network.to_json(),
                "ratio_rps": rps, "ratio_p99": p99}


@dataclass
class DemoResult:
    app: str
    storage: str
    output_dir: str
    labs: dict[str, dict[str, str]] = field(default_factory=dict)  # role → name, url
    before: Phase | None = None
    after: Phase | None = None
    predicted: dict[str, Any] = field(default_factory=dict)
    predicted_at: str = ""
    applied: list[str] = field(default_factory=list)
    applied_at: str = ""
    manual: list[str] = field(default_factory=list)
    settings: dict[str, dict[str, Any]] = field(default_factory=dict)  # role → what it ran with
    metadata_calls_per_request: dict[str, float | None] = field(default_factory=dict)
    findings_before: list[str] = field(default_factory=list)
    findings_after: list[str] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)
    timings_s: dict[str, float] = field(default_factory=dict)
    kept: bool = False
    notes: list[str] = field(default_factory=list)

    def round_trips(self) -> dict[str, float | None]:
        return {"before": self.before.network.round_trips_per_request() if self.before else None,
                "after": self.after.network.round_trips_per_request() if self.after else None,
                "predicted": self.predicted.get("round_trips_per_request")}

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "app": self.app, "storage": self.storage,
                "output_dir": self.output_dir, "labs": self.labs,
                "before": self.before.to_json() if self.before else None,
                "after": self.after.to_json() if self.after else None,
                "round_trips_per_request": self.round_trips(),
                "metadata_calls_per_request": self.metadata_calls_per_request,
                "predicted": self.predicted, "predicted_at": self.predicted_at or None,
                "applied": self.applied, "applied_at": self.applied_at or None,
                "manual": self.manual, "settings": self.settings,
                "findings_before": self.findings_before, "findings_after": self.findings_after,
                "files": self.files, "timings_s": self.timings_s, "kept": self.kept,
                "notes": self.notes}
