"""Result of `statstorm matrix` (and of `statstorm matrix import`): the schema-versioned JSON.

Raw data first: every cell keeps its rounds (one measured run each, with its latency
spectrum, validation failures and memory samples); a cell's summary (`rps` median and
interval, merged `p50_ms`/`p99_ms`, `failed`, `pss_mb`) and the pairwise `comparisons` are
computed from the rounds (statstorm.model.stats) and stored beside them, so a report reads
the file only. The file is rewritten atomically after every cell-round.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from statstorm.errors import UsageError
from statstorm.results.common import read_json, write_json_atomic

SCHEMA = "statstorm.matrix/1"


@dataclass(frozen=True)
class Memory:
    """PSS (kB) sampled while one run's load went: steady = median of the samples' sums,
    peak = their largest. Huge pages (kB) of the PHP workers, read at the end of the run."""

    server_steady_kb: int = 0
    server_peak_kb: int = 0
    php_steady_kb: int = 0
    php_peak_kb: int = 0
    per_worker_kb: int = 0
    workers: int = 0
    samples: int = 0
    anon_huge_kb: int = 0
    file_pmd_kb: int = 0
    workers_with_huge_pages: int = 0


@dataclass(frozen=True)
class Round:
    """One measured run of one cell."""

    round: int
    requests: int
    duration_s: float
    rps: float  # good answers per second
    failed: int  # answers that failed validation (status, length or marker)
    bad_status: int = 0
    bad_length: int = 0
    bad_marker: int = 0
    socket_errors: int = 0
    max_ms: float = 0.0
    percentiles: tuple[tuple[float, float], ...] = ()  # (percent, ms)
    memory: Memory = Memory()

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["percentiles"] = [list(p) for p in self.percentiles]
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Round":
        return cls(**{**d, "percentiles": tuple((float(p), float(v)) for p, v in d["percentiles"]),
                      "memory": Memory(**d.get("memory", {}))})


@dataclass
class Cell:
    """One cell: its parameters, its rounds and the summary computed from them."""

    id: str
    server: str
    mpm: str
    handler: str
    opcache: bool | None
    huge_code_pages: bool | None
    storage: str
    knob: dict[str, int] = field(default_factory=dict)  # test knobs, shown, never hidden
    primer: dict[str, Any] = field(default_factory=dict)  # status, length, marker
    rounds: list[Round] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)  # rps, p50_ms, p99_ms, failed, ...

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "server": self.server, "mpm": self.mpm, "handler": self.handler,
                "opcache": self.opcache, "huge_code_pages": self.huge_code_pages,
                "storage": self.storage, **self.summary, "knob": dict(self.knob),
                "primer": dict(self.primer), "rounds": [r.to_json() for r in self.rounds]}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Cell":
        keys = ("id", "server", "mpm", "handler", "opcache", "huge_code_pages", "storage",
                "knob", "primer", "rounds")
        return cls(id=d["id"], server=d["server"], mpm=d["mpm"], handler=d["handler"],
                   opcache=d["opcache"], huge_code_pages=d["huge_code_pages"],
                   storage=d["storage"], knob=dict(d.get("knob", {})),
                   primer=dict(d.get("primer", {})),
                   rounds=[Round.from_json(r) for r in d.get("rounds", [])],
                   summary={k: v for k, v in d.items() if k not in keys})


@dataclass
class MatrixResult:
    """The whole matrix; mutable while it runs."""

    app: str
    source: str  # "measured" | "ab import"
    options: dict[str, Any]
    started: str
    cells: list[Cell] = field(default_factory=list)
    comparisons: list[dict[str, Any]] = field(default_factory=list)
    thp_mode: str = ""  # /sys/kernel/mm/transparent_hugepage/enabled
    finished: str = ""
    interrupted: bool = False
    wall_s: float = 0.0  # measuring time of all sessions so far
    warnings: list[str] = field(default_factory=list)
    # why the rounds stopped (with --precision): rule, reason, rounds, widest interval
    stop: dict[str, Any] = field(default_factory=dict)

    def cell(self, cell_id: str) -> Cell | None:
        return next((c for c in self.cells if c.id == cell_id), None)

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "app": self.app, "source": self.source,
                "options": self.options, "started": self.started, "finished": self.finished,
                "interrupted": self.interrupted, "wall_s": round(self.wall_s, 1),
                "thp_mode": self.thp_mode, "warnings": list(self.warnings),
                **({"stop": dict(self.stop)} if self.stop else {}),
                "cells": [c.to_json() for c in self.cells], "comparisons": self.comparisons}

    @classmethod
    def from_json(cls, d: dict[str, Any], where: str = "matrix result") -> "MatrixResult":
        if d.get("schema") != SCHEMA:
            raise UsageError(f"{where} is not a statstorm matrix result (schema "
                             f"{d.get('schema')!r}, expected {SCHEMA!r})")
        try:
            return cls(app=d["app"], source=d["source"], options=d["options"],
                       started=d["started"], cells=[Cell.from_json(c) for c in d["cells"]],
                       comparisons=list(d.get("comparisons", [])), thp_mode=d.get("thp_mode", ""),
                       finished=d.get("finished", ""), interrupted=d.get("interrupted", False),
                       wall_s=float(d.get("wall_s", 0.0)), warnings=list(d.get("warnings", [])),
                       stop=dict(d.get("stop", {})))
        except (KeyError, TypeError, ValueError) as exc:
            raise UsageError(f"{where} is damaged ({exc}): run the matrix again with another -o") from None


def save(path: Path, result: MatrixResult) -> None:
    write_json_atomic(path, result.to_json())


def load(path: Path) -> MatrixResult:
    return MatrixResult.from_json(read_json(path, "matrix result"), str(path))
