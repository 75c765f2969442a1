"""Results of `statstorm fsbench`: frozen dataclasses and their schema-versioned JSON.

The JSON (schema `statstorm.fsbench/2`) is rewritten atomically after every cell, so a run
that is interrupted still leaves every finished measurement on disk.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from statstorm.results.common import write_json_atomic
from statstorm.results.latency import LatencyStats

SCHEMA = "statstorm.fsbench/2"  # 2: ratio_to_first is time per call, not p50
PROFILE_SCHEMA = "statstorm.latency-profile/1"


@dataclass(frozen=True)
class ColdCheck:
    """Evidence that one cache drop before a cold pass happened (first drop per path)."""

    dentries_before: int
    dentries_after: int
    cached_kb_before: int
    cached_kb_after: int
    sample_file: str
    resident_pages_before: int
    resident_pages_after: int
    total_pages: int
    remounted: bool
    client_pid_before: int = 0
    client_pid_after: int = 0


@dataclass(frozen=True)
class ColdState:
    """Which cold levels were reached for one PATH, and which were not."""

    path: str
    reached: tuple[str, ...]
    not_reached: tuple[str, ...]
    check: ColdCheck | None = None


@dataclass(frozen=True)
class Cell:
    """One operation, cache state and PATH: all samples of all passes and clients."""

    op: str
    state: str
    path_index: int
    path: str
    clients: int
    passes: int
    calls_per_pass: int
    ok: int
    enoent: int
    other_errors: int
    stats: LatencyStats
    ratio_to_first: float | None = None  # time per call / first PATH's (throughput ratio)
    parts_p50_us: dict[str, float] = field(default_factory=dict)  # open: open/fstat alone

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["stats"]["histogram"] = [list(b) for b in self.stats.histogram]
        if self.path_index == 0:
            data.pop("ratio_to_first")
        return data


@dataclass(frozen=True)
class FsbenchResult:
    paths: tuple[str, ...]
    ops: tuple[str, ...]
    states: tuple[str, ...]
    clients: int
    iterations: int | None
    duration_s: float | None
    max_files: int | None
    started_at: str
    mounts: tuple[dict[str, Any], ...]
    workload: tuple[dict[str, Any], ...]  # per path: files, php_files, dirs, max_depth …
    overhead_p50_us: float
    cold: tuple[ColdState, ...]
    cells: tuple[Cell, ...]
    caveats: tuple[str, ...]
    complete: bool

    def cell(self, op: str, state: str, path_index: int) -> Cell | None:
        for c in self.cells:
            if (c.op, c.state, c.path_index) == (op, state, path_index):
                return c
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "started_at": self.started_at,
            "complete": self.complete,
            "paths": list(self.paths),
            "ops": list(self.ops),
            "states": list(self.states),
            "clients": self.clients,
            "iterations": self.iterations,
            "duration_s": self.duration_s,
            "max_files": self.max_files,
            "overhead_p50_us": self.overhead_p50_us,
            "mounts": list(self.mounts),
            "workload": list(self.workload),
            "cold": [asdict(c) for c in self.cold],
            "caveats": list(self.caveats),
            "results": [c.to_json() for c in self.cells],
        }


def write(path: Path, result: FsbenchResult) -> None:
    write_json_atomic(path, result.to_json())


def latency_profile(result: FsbenchResult, source: str) -> dict[str, Any]:
    """The p50 latency per call type and outcome per mount, for `statstorm whatif`.

    Prefers the warm state (what a running site sees); falls back to cold.
    """
    mounts: dict[str, Any] = {}
    for i, m in enumerate(result.mounts):
        state = "warm" if "warm" in result.states else result.states[0]

        def p50(op: str) -> float | None:
            c = result.cell(op, state, i)
            return round(c.stats.p50_us, 3) if c and c.stats.count else None

        def part(name: str) -> float | None:
            c = result.cell("open", state, i)
            return round(c.parts_p50_us[name], 3) if c and name in c.parts_p50_us else None

        hit, miss = p50("walk") or p50("stat"), p50("negative")
        entry: dict[str, Any] = {"fstype": m["fstype"], "path": result.paths[i], "state": state}
        for call, h in (("lstat", hit), ("stat", p50("stat") or hit), ("access", p50("stat") or hit)):
            entry[call] = {k: v for k, v in (("hit", h), ("enoent", miss)) if v is not None}
        entry["open"] = {k: v for k, v in (("hit", part("open")), ("enoent", miss)) if v is not None}
        entry["fstat"] = {k: v for k, v in (("hit", part("fstat")),) if v is not None}
        entry["readlink"] = {k: v for k, v in (("hit", hit), ("enoent", miss)) if v is not None}
        mounts.setdefault(m["mount_point"], entry)
    return {"schema": PROFILE_SCHEMA, "source": source, "mounts": mounts}
