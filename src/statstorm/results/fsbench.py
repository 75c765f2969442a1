"""Results of `statstorm fsbench`: frozen dataclasses and their schema-versioned JSON.

The JSON (schema `statstorm.fsbench/2`) is rewritten atomically after every cell, so a run
that is interrupted still leaves every finished measurement on disk.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from statstorm.results import jsonread as jr
from statstorm.results.jsontypes import JsonObject, JsonValue
from statstorm.results.common import known_fields, write_json_atomic
from statstorm.results.latency import LatencyStats

KIND = "fsbench"
VERSION = 2  # 2: ratio_to_first is time per call, not p50
SCHEMA = f"statstorm.{KIND}/{VERSION}"
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

    @classmethod
    def from_json(cls, data: JsonValue) -> ColdCheck:
        d = jr.obj(data, "ColdCheck")
        return cls(**known_fields(cls, d))


@dataclass(frozen=True)
class ColdState:
    """Which cold levels were reached for one PATH, and which were not."""

    path: str
    reached: tuple[str, ...]
    not_reached: tuple[str, ...]
    check: ColdCheck | None = None

    def to_json(self) -> JsonObject:
        return asdict(self)

    @classmethod
    def from_json(cls, data: JsonValue) -> ColdState:
        d = jr.obj(data, "ColdState")
        check = jr.opt_obj(d, "check")
        return cls(jr.str_(d, "path"), jr.strs(d, "reached"), jr.strs(d, "not_reached"),
                   None if check is None else ColdCheck.from_json(check))


def _bucket(x: JsonValue) -> tuple[int, int]:
    low, count = (jr.integer(v, "histogram") for v in jr.array(x, "histogram"))
    return low, count


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

    def to_json(self) -> JsonObject:
        data = asdict(self)
        data["stats"]["histogram"] = [list(b) for b in self.stats.histogram]
        if self.path_index == 0:
            data.pop("ratio_to_first")
        return data

    @classmethod
    def from_json(cls, data: JsonValue) -> Cell:
        d = jr.obj(data, "Cell")
        st = jr.sub(d, "stats")
        stats = LatencyStats(**{**known_fields(LatencyStats, st),
                                "histogram": tuple(_bucket(b) for b in jr.lst(st, "histogram"))})
        f = known_fields(cls, d)
        return cls(**{**f, "stats": stats, "parts_p50_us": jr.num_map(d, "parts_p50_us")})


@dataclass(frozen=True)
class TreeShape:
    """The code tree under one PATH as fsbench walked it."""

    path: str
    files: int
    php_files: int
    dirs: int
    max_depth: int
    walk_lstats_per_pass: int
    negative_names_per_pass: int

    def to_json(self) -> JsonObject:
        return asdict(self)

    @classmethod
    def from_json(cls, data: JsonValue) -> TreeShape:
        d = jr.obj(data, "TreeShape")
        return cls(**known_fields(cls, d))


def mount_facts(mount: JsonObject) -> tuple[str, str, str, dict[str, str]]:
    """(mount point, file-system type, source, cache options) of one of `mounts` (each the
    JSON of adapters.storage.mounts's MountInfo, kept as written)."""
    if not isinstance(mount, dict):
        return "", "", "", {}
    return (jr.str_(mount, "mount_point"), jr.str_(mount, "fstype"), jr.str_(mount, "source"),
            jr.str_map(mount, "cache_options"))


@dataclass(frozen=True)
class FsbenchResult:
    # what report's registry (results/result_files.py KINDS) knows of its files
    KIND: ClassVar[str] = KIND
    VERSIONS: ClassVar[tuple[int, ...]] = (1, 2)
    REQUIRED: ClassVar[tuple[str, ...]] = ("paths", "results")
    LEGACY: ClassVar[tuple[str, ...]] = ()

    paths: tuple[str, ...]
    ops: tuple[str, ...]
    states: tuple[str, ...]
    clients: int
    iterations: int | None
    duration_s: float | None
    max_files: int | None
    started_at: str
    mounts: tuple[dict[str, Any], ...]  # adapters.storage.mounts's MountInfo, as written
    workload: tuple[TreeShape, ...]  # per path
    overhead_p50_us: float
    cold: tuple[ColdState, ...]
    cells: tuple[Cell, ...]
    caveats: tuple[str, ...]
    complete: bool
    # per PATH: µs a statstorm lab's `--storage-delay` adds to each metadata call there (0: none)
    storage_delays_us: tuple[int, ...] = ()

    def cell(self, op: str, state: str, path_index: int) -> Cell | None:
        for c in self.cells:
            if (c.op, c.state, c.path_index) == (op, state, path_index):
                return c
        return None

    def to_json(self) -> JsonObject:
        # a file read from before the delays were recorded is written back as it was
        delays: JsonObject = ({"storage_delay_us": list(self.storage_delays_us)}
                              if self.storage_delays_us else {})
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
            "workload": [w.to_json() for w in self.workload],
            "cold": [c.to_json() for c in self.cold],
            "caveats": list(self.caveats),
            "results": [c.to_json() for c in self.cells],
            **delays,
        }

    @classmethod
    def from_json(cls, data: JsonValue) -> FsbenchResult:
        """An fsbench file as written (`complete` false: cut short while it ran)."""
        d = jr.obj(data, "FsbenchResult")
        return cls(paths=jr.strs(d, "paths"), ops=jr.strs(d, "ops"), states=jr.strs(d, "states"),
                   clients=jr.int_(d, "clients"), iterations=jr.opt_int(d, "iterations"),
                   duration_s=jr.opt_num(d, "duration_s"), max_files=jr.opt_int(d, "max_files"),
                   started_at=jr.str_(d, "started_at"),
                   mounts=jr.objs(d, "mounts"),
                   workload=tuple(TreeShape.from_json(w) for w in jr.lst(d, "workload")),
                   overhead_p50_us=jr.num(d, "overhead_p50_us"),
                   cold=tuple(ColdState.from_json(c) for c in jr.lst(d, "cold")),
                   cells=tuple(Cell.from_json(c) for c in jr.lst(d, "results")),
                   caveats=jr.strs(d, "caveats"), complete=jr.bool_(d, "complete"),
                   storage_delays_us=tuple(jr.integer(v, "storage_delay_us")
                                           for v in jr.lst(d, "storage_delay_us")))

    def storage_delay_us(self, i: int) -> int:
        """The lab delay on the i-th PATH's storage (0: none, or a file from before delays)."""
        return self.storage_delays_us[i] if i < len(self.storage_delays_us) else 0

    def mount_facts(self, i: int) -> tuple[str, str, str, dict[str, str]]:
        """mount_facts of the i-th PATH's mount (empty when the file has none for it)."""
        return mount_facts(self.mounts[i]) if i < len(self.mounts) else ("", "", "", {})


def write(path: Path, result: FsbenchResult) -> None:
    write_json_atomic(path, result.to_json())


def latency_profile(result: FsbenchResult, source: str) -> JsonObject:
    """The p50 latency per call type and outcome per mount, for `statstorm whatif`.

    Prefers the warm state (what a running site sees); falls back to cold.
    """
    mounts: JsonObject = {}
    for i, m in enumerate(result.mounts):
        state = "warm" if "warm" in result.states else result.states[0]

        def p50(op: str) -> float | None:
            c = result.cell(op, state, i)
            return round(c.stats.p50_us, 3) if c and c.stats.count else None

        def part(name: str) -> float | None:
            c = result.cell("open", state, i)
            return round(c.parts_p50_us[name], 3) if c and name in c.parts_p50_us else None

        hit, miss = p50("walk") or p50("stat"), p50("negative")
        entry: JsonObject = {"fstype": jr.str_(m, "fstype"), "path": result.paths[i],
                             "state": state}
        for call, h in (("lstat", hit), ("stat", p50("stat") or hit), ("access", p50("stat") or hit)):
            entry[call] = {k: v for k, v in (("hit", h), ("enoent", miss)) if v is not None}
        entry["open"] = {k: v for k, v in (("hit", part("open")), ("enoent", miss)) if v is not None}
        entry["fstat"] = {k: v for k, v in (("hit", part("fstat")),) if v is not None}
        entry["readlink"] = {k: v for k, v in (("hit", hit), ("enoent", miss)) if v is not None}
        mounts.setdefault(jr.str_(m, "mount_point"), entry)
    return {"schema": PROFILE_SCHEMA, "source": source, "mounts": mounts}
