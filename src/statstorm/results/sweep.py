"""Result of `statstorm sweep`: frozen dataclasses and the schema-versioned JSON file.

Latencies are milliseconds, rates are per second. The JSON is written after every finished
level, so an interrupted sweep still leaves every finished level on disk.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import ClassVar

from statstorm.results import jsonread as jr
from statstorm.results.jsontypes import JsonObject, JsonValue
from statstorm.results.common import known_fields

KIND = "sweep"
VERSION = 1
SCHEMA = f"statstorm.{KIND}/{VERSION}"


@dataclass(frozen=True)
class ErrorCounts:
    """Failed requests by kind. `wrong_content` is a 2xx answer whose body lacks the expected
    text, or (ab) whose length differs from the first answer's ("Failed requests: Length")."""

    connect: int = 0
    timeout: int = 0
    read_write: int = 0
    non_2xx: int = 0
    wrong_content: int = 0

    @property
    def total(self) -> int:
        return self.connect + self.timeout + self.read_write + self.non_2xx + self.wrong_content

    def __add__(self, other: ErrorCounts) -> ErrorCounts:
        return ErrorCounts(self.connect + other.connect, self.timeout + other.timeout,
                           self.read_write + other.read_write, self.non_2xx + other.non_2xx,
                           self.wrong_content + other.wrong_content)

    def to_json(self) -> JsonObject:
        return {**asdict(self), "total": self.total}

    @classmethod
    def from_json(cls, data: JsonValue) -> ErrorCounts:
        d = jr.obj(data, "ErrorCounts")
        return cls(**known_fields(cls, d))  # `total` is derived


@dataclass(frozen=True)
class LoadRun:
    """One run of a load generator at one level, as parsed from its output."""

    tool: str
    requests: int
    duration_s: float
    rps: float
    p50: float
    p90: float
    p99: float
    max: float
    errors: ErrorCounts
    # Latency distribution: [percentile, ms] pairs, as fine as the tool gives them.
    percentiles: tuple[tuple[float, float], ...] = ()
    # Open model only: the rate asked for and the rate the client really sent at.
    target_rate: float = 0.0
    sent_rate: float = 0.0

    def to_json(self) -> JsonObject:
        d = asdict(self)
        d["errors"] = self.errors.to_json()
        d["percentiles"] = [list(p) for p in self.percentiles]
        return d

    @classmethod
    def from_json(cls, data: JsonValue) -> LoadRun:
        d = jr.obj(data, "LoadRun")
        return cls(**{**known_fields(cls, d), "errors": ErrorCounts.from_json(d["errors"]),
                      "percentiles": jr.num_pairs(d, "percentiles")})


@dataclass(frozen=True)
class ServerSignals:
    """What the server side did while one run was going (system-wide and the FPM pool)."""

    seconds: float = 0.0
    ctx_switches_per_s: float = 0.0
    cpu_busy_pct: float = 0.0  # user + nice + system + irq + softirq, of all CPUs
    cpu_system_pct: float = 0.0
    cpu_iowait_pct: float = 0.0
    fpm_pool: str = ""
    fpm_active_max: int | None = None
    fpm_idle_min: int | None = None
    fpm_total: int | None = None
    fpm_listen_queue_max: int | None = None
    fpm_max_children_reached: int | None = None  # increase during the run
    fpm_samples: int = 0
    # --trace only (statstorm trace on the pool while the run went; None otherwise): all of
    # the pool's file-metadata syscalls per second of load, their mean per request, failed
    # ones per request, requests seen, events bpftrace lost, and the trace file.
    file_syscalls_per_s: float | None = None
    file_syscalls_per_request: float | None = None
    failed_per_request: float | None = None
    traced_requests: int | None = None
    trace_dropped: int | None = None
    trace_file: str | None = None

    def to_json(self) -> JsonObject:
        return asdict(self)

    @classmethod
    def from_json(cls, data: JsonValue) -> ServerSignals:
        d = jr.obj(data, "ServerSignals")
        return cls(**known_fields(cls, d))


@dataclass(frozen=True)
class RepeatResult:
    run: LoadRun
    server: ServerSignals

    def to_json(self) -> JsonObject:
        return {"run": self.run.to_json(), "server": self.server.to_json()}

    @classmethod
    def from_json(cls, data: JsonValue) -> RepeatResult:
        d = jr.obj(data, "RepeatResult")
        return cls(LoadRun.from_json(d["run"]), ServerSignals.from_json(d["server"]))


@dataclass(frozen=True)
class LevelResult:
    """One level of the sweep: all repeats; requests/s is their median, p50/p90/p99 are of all
    the level's requests together (the repeats' latency histograms merged, model/stats.py)."""

    concurrency: int | None
    rate: float | None
    repeats: tuple[RepeatResult, ...]
    rps: float
    rps_spread: float  # half the range of the repeats' requests/s
    p50: float
    p90: float
    p99: float
    max: float
    errors: ErrorCounts  # summed over the repeats
    server: ServerSignals  # medians over the repeats (maxima for queue/children counters)
    validation: str = ""  # "" = the direct GET matched; otherwise what was wrong

    @property
    def level(self) -> float:
        return float(self.concurrency if self.concurrency is not None else (self.rate or 0.0))

    def to_json(self) -> JsonObject:
        d: JsonObject = {}
        if self.concurrency is not None:
            d["concurrency"] = self.concurrency
        if self.rate is not None:
            d["rate"] = self.rate
        d.update({
            "rps": round(self.rps, 3), "rps_spread": round(self.rps_spread, 3),
            "rps_repeats": [round(r.run.rps, 3) for r in self.repeats],
            "p50": self.p50, "p90": self.p90, "p99": self.p99, "max": self.max,
            "errors": self.errors.to_json(), "validation": self.validation or "ok",
            "server": self.server.to_json(),
            "repeats": [r.to_json() for r in self.repeats],
        })
        return d

    @classmethod
    def from_json(cls, data: JsonValue) -> LevelResult:
        """A level as written; keys a hand-made or older file lacks read as empty."""
        d = jr.obj(data, "LevelResult")
        f = known_fields(cls, d, concurrency=None, rate=None, rps_spread=0.0, p50=0.0, p90=0.0,
                         p99=0.0, max=0.0)
        validation = jr.str_(d, "validation")
        return cls(**{**f, "repeats": tuple(RepeatResult.from_json(r)
                                            for r in jr.lst(d, "repeats")),
                      "errors": ErrorCounts.from_json(jr.sub(d, "errors")),
                      "server": ServerSignals.from_json(jr.sub(d, "server")),
                      "validation": "" if validation == "ok" else validation})


@dataclass(frozen=True)
class Knee:
    """The sweep's analysis (see statstorm.model.knee for the definitions)."""

    knee: float | None
    peak: float | None
    saturation_rps: float
    collapse: bool
    collapse_at: float | None
    collapse_rps: float | None
    drop_threshold_rps: float
    signals: tuple[str, ...]
    diagnosis: str
    sentence: str

    def to_json(self) -> JsonObject:
        d = asdict(self)
        d["signals"] = list(self.signals)
        return d

    @classmethod
    def from_json(cls, data: JsonValue) -> Knee:
        """The analysis as written (a hand-made file may hold only some of it)."""
        d = jr.obj(data, "Knee")
        f = known_fields(cls, d, knee=None, peak=None, saturation_rps=0.0, collapse=False,
                         collapse_at=None, collapse_rps=None, drop_threshold_rps=0.0,
                         diagnosis="", sentence="")
        return cls(**{**f, "signals": jr.strs(d, "signals")})


@dataclass(frozen=True)
class SweepSettings:
    """The options a sweep ran with, as its file records them."""

    levels: tuple[float, ...]
    duration_s: float
    warmup_s: float
    repeats: int
    timeout_s: float
    expect_status: int
    expect_text: str
    fpm_status_url: str | None
    pool: str | None
    trace: bool

    def to_json(self) -> JsonObject:
        return {**asdict(self), "levels": list(self.levels)}

    def items(self) -> list[tuple[str, object]]:
        """(option, value) in the file's order."""
        return [(f.name, getattr(self, f.name)) for f in fields(self)]

    @classmethod
    def from_json(cls, data: JsonValue) -> SweepSettings:
        d = jr.obj(data, "SweepSettings")
        f = known_fields(cls, d, duration_s=0.0, warmup_s=0.0, repeats=1,
                         timeout_s=0.0, expect_status=200, expect_text="", fpm_status_url=None,
                         pool=None, trace=False)
        return cls(**{**f, "levels": jr.nums(d, "levels")})


@dataclass(frozen=True)
class SweepResult:
    """The whole sweep (a new one after every finished level while it runs)."""

    # what report's registry (results/result_files.py KINDS) knows of its files
    KIND: ClassVar[str] = KIND
    VERSIONS: ClassVar[tuple[int, ...]] = (VERSION,)
    REQUIRED: ClassVar[tuple[str, ...]] = ("target", "levels")
    LEGACY: ClassVar[tuple[str, ...]] = ("levels", "knee", "target")

    target: str
    tool: str
    model: str  # closed | open
    options: SweepSettings
    started: str
    levels: tuple[LevelResult, ...] = ()
    knee: Knee | None = None
    finished: str = ""
    interrupted: bool = False
    warnings: tuple[str, ...] = ()
    # --lab: the lab swept, its storage and the µs its `--storage-delay` adds to every
    # metadata call ('', '', 0 for a URL; a file from before them reads the same)
    lab: str = ""
    storage: str = ""
    storage_delay_us: int = 0

    def to_json(self) -> JsonObject:
        return {
            "schema": SCHEMA, "target": self.target, "tool": self.tool, "model": self.model,
            **({"lab": self.lab, "storage": self.storage,
                "storage_delay_us": self.storage_delay_us} if self.lab else {}),
            "options": self.options.to_json(), "started": self.started, "finished": self.finished,
            "interrupted": self.interrupted, "warnings": list(self.warnings),
            "levels": [lv.to_json() for lv in self.levels],
            "knee": self.knee.to_json() if self.knee else None,
        }

    @classmethod
    def from_json(cls, data: JsonValue) -> SweepResult:
        """A sweep file as written; keys a hand-made or older file lacks read as empty."""
        d = jr.obj(data, "SweepResult")
        f = known_fields(cls, d, tool="", model="closed", started="", finished="",
                         interrupted=False, lab="", storage="", storage_delay_us=0)
        knee = jr.section(d, "knee")
        return cls(**{**f, "options": SweepSettings.from_json(jr.sub(d, "options")),
                      "levels": tuple(LevelResult.from_json(lv) for lv in jr.lst(d, "levels")),
                      "knee": Knee.from_json(knee) if knee is not None else None,
                      "warnings": jr.strs(d, "warnings")})
