"""Result of `statstorm matrix` (and of `statstorm matrix import`): the schema-versioned JSON.

Raw data first: every cell keeps its rounds (one measured run each, with its latency
spectrum, validation failures and memory samples); a cell's summary (`rps` median and
interval, merged `p50_ms`/`p99_ms`, `failed`, `pss_mb`) and the pairwise `comparisons` are
computed from the rounds (statstorm.model.stats) and stored beside them, so a report reads
the file only. The file is rewritten atomically after every cell-round.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from statstorm.errors import UsageError
from statstorm.results import jsonread as jr
from statstorm.results.jsontypes import JsonObject, JsonValue
from statstorm.results.common import known_fields, read_json, write_json_atomic

KIND = "matrix"
VERSION = 1
SCHEMA = f"statstorm.{KIND}/{VERSION}"


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

    @classmethod
    def from_json(cls, data: JsonValue) -> Memory:
        d = jr.obj(data, "Memory")
        return cls(**known_fields(cls, d))


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

    def to_json(self) -> JsonObject:
        d = asdict(self)
        d["percentiles"] = [list(p) for p in self.percentiles]
        return d

    @classmethod
    def from_json(cls, data: JsonValue) -> Round:
        d = jr.obj(data, "Round")
        return cls(**{**known_fields(cls, d), "percentiles": jr.num_pairs(d, "percentiles"),
                      "memory": Memory.from_json(jr.sub(d, "memory"))})


@dataclass(frozen=True)
class RpsInterval:
    """Good answers per second of a cell: the rounds' median, its interval and the interval's
    coverage, the rounds and their values."""

    median: float | None
    ci_low: float | None
    ci_high: float | None
    coverage: float = 0.0
    rounds: int = 0
    samples: tuple[float, ...] = ()

    def to_json(self) -> JsonObject:
        return {**asdict(self), "samples": list(self.samples)}

    @classmethod
    def from_json(cls, data: JsonValue) -> RpsInterval:
        d = jr.obj(data, "RpsInterval")
        return cls(jr.opt_num(d, "median"), jr.opt_num(d, "ci_low"), jr.opt_num(d, "ci_high"),
                   jr.num(d, "coverage", 0.0), jr.int_(d, "rounds"), jr.nums(d, "samples"))


@dataclass(frozen=True)
class FailedBy:
    """Answers that failed validation, by what was wrong."""

    status: int = 0
    length: int = 0
    marker: int = 0
    socket: int = 0


@dataclass(frozen=True)
class PssMb:
    """PSS (MB) while loaded: the medians of the steady values, the largest peaks."""

    server: float | None = None
    php: float | None = None
    per_worker: float | None = None
    server_peak: float = 0.0
    php_peak: float = 0.0
    workers: int = 0


@dataclass(frozen=True)
class HugePages:
    """The PHP workers' huge pages at the end of the last run with memory samples."""

    anon_huge_mb: float
    file_pmd_mb: float
    workers_with_huge_pages: int
    workers: int
    in_use: bool


@dataclass(frozen=True)
class CellSummary:
    """A cell's figures, computed from its rounds (model.matrix_summary.summarize); written
    in the cell's JSON object beside its parameters."""

    rps: RpsInterval
    p50_ms: float | None
    p99_ms: float | None
    failed: int
    failed_by: FailedBy
    requests: int
    pss_mb: PssMb | None  # None: no memory sample
    huge_pages: HugePages | None = None  # written only with memory samples

    def to_json(self) -> JsonObject:
        out: JsonObject = {
            "rps": self.rps.to_json(), "p50_ms": self.p50_ms, "p99_ms": self.p99_ms,
            "failed": self.failed, "failed_by": asdict(self.failed_by),
            "requests": self.requests,
            "pss_mb": asdict(self.pss_mb) if self.pss_mb is not None else None}
        if self.huge_pages is not None:
            out["huge_pages"] = asdict(self.huge_pages)
        return out

    @classmethod
    def from_json(cls, data: JsonValue) -> CellSummary:
        """The summary keys of a cell's object (a hand-made file may hold only some)."""
        d = jr.obj(data, "CellSummary")
        pss, hp, fb = jr.opt_obj(d, "pss_mb"), jr.opt_obj(d, "huge_pages"), jr.sub(d, "failed_by")
        return cls(
            rps=RpsInterval.from_json(jr.sub(d, "rps")), p50_ms=jr.opt_num(d, "p50_ms"),
            p99_ms=jr.opt_num(d, "p99_ms"), failed=jr.int_(d, "failed"),
            failed_by=FailedBy(jr.int_(fb, "status"), jr.int_(fb, "length"),
                               jr.int_(fb, "marker"), jr.int_(fb, "socket")),
            requests=jr.int_(d, "requests"),
            pss_mb=PssMb(**known_fields(PssMb, pss)) if pss is not None else None,
            huge_pages=None if hp is None else HugePages(
                jr.num(hp, "anon_huge_mb"), jr.num(hp, "file_pmd_mb"),
                jr.int_(hp, "workers_with_huge_pages"), jr.int_(hp, "workers"),
                jr.bool_(hp, "in_use")))


@dataclass(frozen=True)
class StopRule:
    """Why the rounds stopped (`--precision`): the rule, the precision asked, the rounds
    done, the widest interval shown and whose it is, and the reason."""

    rule: str
    precision_pct: float
    rounds: int
    widest_pct: float | None
    widest: str
    reason: str  # precision reached | max rounds reached | running

    def to_json(self) -> JsonObject:
        return asdict(self)

    @classmethod
    def from_json(cls, data: JsonValue) -> StopRule:
        d = jr.obj(data, "StopRule")
        return cls(**known_fields(cls, d))


@dataclass(frozen=True)
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
    php: str = ""  # the PHP version when the matrix has several (an axis), else ''
    primer: JsonObject = field(default_factory=dict)  # status, length, marker
    rounds: tuple[Round, ...] = ()
    summary: CellSummary | None = None  # None: no round yet

    def to_json(self) -> JsonObject:
        return {"id": self.id, "server": self.server, "mpm": self.mpm, "handler": self.handler,
                "opcache": self.opcache, "huge_code_pages": self.huge_code_pages,
                "storage": self.storage, **({"php": self.php} if self.php else {}),
                **(self.summary.to_json() if self.summary is not None else {}),
                "knob": dict(self.knob), "primer": dict(self.primer),
                "rounds": [r.to_json() for r in self.rounds]}

    @property
    def label(self) -> str:
        """The cell's parameters in a few words ("nginx / fpm / opcache on / local"), its PHP
        version last when the matrix has several ("… / glusterfs / php8.4")."""
        parts = []
        for k in ("server", "mpm", "handler", "opcache", "huge_code_pages", "storage", "php"):
            v = getattr(self, k)
            if v in (None, "", "-"):
                continue
            parts.append(f"{k.replace('_', ' ')} {'on' if v else 'off'}" if isinstance(v, bool)
                         else f"php{v}" if k == "php" else str(v))
        return " / ".join(parts) or "?"

    @classmethod
    def from_json(cls, data: JsonValue) -> Cell:
        """A cell as written (a hand-made file may lack its id, knobs, primer and rounds)."""
        d = jr.obj(data, "Cell")
        f = known_fields(cls, d, id="")
        knob = jr.sub(d, "knob")
        return cls(**{**f, "knob": {k: jr.int_(knob, k) for k in knob},
                      "primer": dict(jr.sub(d, "primer")),
                      "rounds": tuple(Round.from_json(r) for r in jr.lst(d, "rounds")),
                      "summary": CellSummary.from_json(d) if "rps" in d else None})


@dataclass(frozen=True)
class MatrixResult:
    """The whole matrix. A run makes a new value after every step (`with_cell`,
    `dataclasses.replace`, model.matrix_summary.refresh) and writes it."""

    # what report's registry (results/result_files.py KINDS) knows of its files
    KIND: ClassVar[str] = KIND
    VERSIONS: ClassVar[tuple[int, ...]] = (VERSION,)
    REQUIRED: ClassVar[tuple[str, ...]] = ("cells",)
    LEGACY: ClassVar[tuple[str, ...]] = ()

    app: str
    source: str  # "measured" | "ab import"
    options: JsonObject
    started: str
    cells: tuple[Cell, ...] = ()
    comparisons: tuple[dict[str, Any], ...] = ()
    thp_mode: str = ""  # /sys/kernel/mm/transparent_hugepage/enabled
    finished: str = ""
    interrupted: bool = False
    wall_s: float = 0.0  # measuring time of all sessions so far
    warnings: tuple[str, ...] = ()
    # why the rounds stopped (with --precision): rule, reason, rounds, widest interval
    stop: StopRule | None = None

    def cell(self, cell_id: str) -> Cell | None:
        return next((c for c in self.cells if c.id == cell_id), None)

    def with_cell(self, cell: Cell) -> MatrixResult:
        """This result with `cell` in place of the cell of its id (appended if new)."""
        if self.cell(cell.id) is None:
            return replace(self, cells=(*self.cells, cell))
        return replace(self, cells=tuple(cell if c.id == cell.id else c for c in self.cells))

    def to_json(self) -> JsonObject:
        return {"schema": SCHEMA, "app": self.app, "source": self.source,
                "options": self.options, "started": self.started, "finished": self.finished,
                "interrupted": self.interrupted, "wall_s": round(self.wall_s, 1),
                "thp_mode": self.thp_mode, "warnings": list(self.warnings),
                **({"stop": self.stop.to_json()} if self.stop is not None else {}),
                "cells": [c.to_json() for c in self.cells], "comparisons": [*self.comparisons]}

    @classmethod
    def from_json(cls, data: JsonValue, where: str = "matrix result") -> MatrixResult:
        d: JsonObject = data if isinstance(data, dict) else {}
        if d.get("schema") != SCHEMA:
            raise UsageError(f"{where} is not a statstorm matrix result (schema "
                             f"{d.get('schema')!r}, expected {SCHEMA!r})")
        f = known_fields(cls, d, app="", source="", started="")
        try:
            stop = jr.section(d, "stop")
            return cls(**{**f, "options": dict(jr.sub(d, "options")),
                          "cells": tuple(Cell.from_json(c)
                                         for c in jr.array(d["cells"], "cells")),
                          "comparisons": tuple(dict(c) for c in jr.objs(d, "comparisons")),
                          "wall_s": float(jr.num(d, "wall_s")),
                          "warnings": tuple(jr.strs(d, "warnings")),
                          "stop": StopRule.from_json(stop) if stop is not None else None})
        except (KeyError, TypeError, ValueError) as exc:
            raise UsageError(f"{where} is damaged ({exc}): run the matrix again with another -o") from None


def save(path: Path, result: MatrixResult) -> None:
    write_json_atomic(path, result.to_json())


def load(path: Path) -> MatrixResult:
    return MatrixResult.from_json(read_json(path, "matrix result"), str(path))
