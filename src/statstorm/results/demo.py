"""What `statstorm demo` measured, as written to `demo.json` in its output directory (after
every step, so a run cut short still leaves what it measured).

`DemoResult` is both what the demo builds and what the report reads (`from_json`), so the
schema lives here once. The files it names (`files`) are relative to demo.json's directory;
demo.json and every file the demo writes carry the run's id (`run_id`), so a reader takes only
files of the same run. demo.json written before the run id (no `run_id` key) named its files
as paths from the directory the demo ran in; they were always beside demo.json.
"""

from __future__ import annotations

import statistics
import uuid
from dataclasses import dataclass, field
from typing import ClassVar

from statstorm.results import jsonread as jr
from statstorm.results.jsontypes import JsonObject as JsonObject, JsonValue

SCHEMA = "statstorm.demo/1"
ROLES = ("local", "network")
STAGES = ("before", "after", "predicted")
RESULT_LINKS = ("trace_before", "check_before", "apply", "trace_after", "check_after")
"""The keys of `files` that name result files a report reads (not demo.json, not the page)."""

Json = JsonValue


def new_run_id() -> str:
    return uuid.uuid4().hex[:12]


def with_run_id(data: JsonObject, run_id: str) -> JsonObject:
    """`data` (a result's JSON) with the run's id after its schema key."""
    head = {k: v for k, v in data.items() if k == "schema"}
    return {**head, "run_id": run_id, **{k: v for k, v in data.items() if k not in head}}


# -- the measurements -----------------------------------------------------------------------------
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

    def to_json(self) -> JsonObject:
        return {"rps": self.rps, "p50_ms": self.p50_ms, "p99_ms": self.p99_ms,
                "errors": self.errors, "requests": self.requests, "round_trips": self.round_trips}

    @classmethod
    def from_json(cls, data: Json) -> Round:
        d = jr.obj(data, "round")
        return cls(jr.num(d, "rps"), jr.num(d, "p50_ms"), jr.num(d, "p99_ms"),
                   jr.int_(d, "errors"), jr.int_(d, "requests"), jr.opt_int(d, "round_trips"))


def _median(vals: list[float]) -> float:
    return round(statistics.median(vals), 2) if vals else 0.0


def _spread(vals: list[float]) -> list[float]:
    return [round(min(vals), 2), round(max(vals), 2)] if vals else []


@dataclass(frozen=True)
class Side:
    """One lab in one phase: its rounds, and their medians and spread."""

    rounds: tuple[Round, ...] = ()

    def _vals(self, key: str) -> list[float]:
        return [float(getattr(r, key)) for r in self.rounds]

    @property
    def rps(self) -> float:
        return _median(self._vals("rps"))

    @property
    def p50_ms(self) -> float:
        return _median(self._vals("p50_ms"))

    @property
    def p99_ms(self) -> float:
        return _median(self._vals("p99_ms"))

    @property
    def errors(self) -> int:
        return sum(r.errors for r in self.rounds)

    @property
    def rps_range(self) -> list[float]:
        """[min, max] of the rounds' throughput; [] without rounds."""
        return _spread(self._vals("rps"))

    @property
    def p99_range(self) -> list[float]:
        return _spread(self._vals("p99_ms"))

    @property
    def round_trips_per_request(self) -> float | None:
        rt = [r for r in self.rounds if r.round_trips is not None]
        reqs = sum(r.requests for r in rt)
        return round(sum(r.round_trips or 0 for r in rt) / reqs, 2) if rt and reqs else None

    def to_json(self) -> JsonObject:
        return {"rps": self.rps, "p50_ms": self.p50_ms, "p99_ms": self.p99_ms,
                "errors": self.errors, "rps_range": list(self.rps_range),
                "p99_range": list(self.p99_range),
                "round_trips_per_request": self.round_trips_per_request,
                "rounds": [r.to_json() for r in self.rounds]}

    @classmethod
    def from_json(cls, data: Json) -> Side:
        """The rounds; the medians and spread written beside them are computed from them."""
        return cls(tuple(Round.from_json(r)
                         for r in jr.lst(jr.obj(data, "lab's measurement"), "rounds")))


@dataclass(frozen=True)
class Phase:
    """Both labs measured with rounds interleaved (local, network, local, network, …)."""

    local: Side = Side()
    network: Side = Side()

    @property
    def ratio_rps(self) -> float | None:
        """The network lab's median throughput over the local lab's."""
        lr = self.local.rps
        return round(self.network.rps / lr, 3) if lr else None

    @property
    def ratio_p99(self) -> float | None:
        lp = self.local.p99_ms
        return round(self.network.p99_ms / lp, 3) if lp else None

    def ratios(self) -> tuple[float | None, float | None]:
        return self.ratio_rps, self.ratio_p99

    def side(self, role: str) -> Side:
        return self.local if role == "local" else self.network

    def to_json(self) -> JsonObject:
        return {"local": self.local.to_json(), "network": self.network.to_json(),
                "ratio_rps": self.ratio_rps, "ratio_p99": self.ratio_p99}

    @classmethod
    def from_json(cls, data: Json) -> Phase:
        d = jr.obj(data, "phase")
        return cls(Side.from_json(jr.sub(d, "local")), Side.from_json(jr.sub(d, "network")))


@dataclass(frozen=True)
class PerRequest:
    """One figure per request before the fix, after it, and as predicted; `keys` are the
    stages written (a demo cut short has only some)."""

    before: float | None = None
    after: float | None = None
    predicted: float | None = None
    keys: tuple[str, ...] = STAGES

    def stage(self, name: str) -> float | None:
        return {"before": self.before, "after": self.after, "predicted": self.predicted}[name]

    def to_json(self) -> JsonObject:
        return {k: self.stage(k) for k in self.keys}

    @classmethod
    def from_json(cls, data: Json) -> PerRequest:
        d = jr.obj(data or {}, "per request")
        return cls(jr.opt_num(d, "before"), jr.opt_num(d, "after"), jr.opt_num(d, "predicted"),
                   tuple(k for k in d if k in STAGES))


def _list(items: tuple[str, ...] | None) -> JsonValue:
    return None if items is None else list(items)


@dataclass(frozen=True)
class Prediction:
    """What check's changes will do, written before any is made."""

    php_settings: tuple[str, ...]  # whatif's --set
    metadata_calls_per_request: float | None
    metadata_calls_per_request_now: float | None
    network_calls_now: float | None  # file calls per request reaching the network storage
    network_calls_after: float | None
    round_trips_per_request: float | None
    changes: tuple[str, ...]
    # the changes each figure's model leaves out (model/prediction_fit.py; None: a result
    # written before statstorm recorded them)
    not_modelled_calls: tuple[str, ...] | None = ()
    not_modelled_round_trips: tuple[str, ...] | None = ()

    def to_json(self) -> JsonObject:
        unrecorded = self.not_modelled_calls is None and self.not_modelled_round_trips is None
        left_out: JsonObject = {} if unrecorded else {"not_modelled": {
                "metadata_calls_per_request": _list(self.not_modelled_calls),
                "round_trips_per_request": _list(self.not_modelled_round_trips)}}
        return {"php_settings": list(self.php_settings), **left_out,
                "metadata_calls_per_request": self.metadata_calls_per_request,
                "metadata_calls_per_request_now": self.metadata_calls_per_request_now,
                "network_calls_reaching_storage_per_request": {
                    "now": self.network_calls_now, "after": self.network_calls_after},
                "round_trips_per_request": self.round_trips_per_request,
                "changes": list(self.changes)}

    @classmethod
    def from_json(cls, data: Json) -> Prediction:
        d = jr.obj(data, "predicted")
        net = jr.sub(d, "network_calls_reaching_storage_per_request")
        return cls(jr.strs(d, "php_settings"), jr.opt_num(d, "metadata_calls_per_request"),
                   jr.opt_num(d, "metadata_calls_per_request_now"), jr.opt_num(net, "now"),
                   jr.opt_num(net, "after"), jr.opt_num(d, "round_trips_per_request"),
                   jr.strs(d, "changes"),
                   jr.opt_strs(jr.sub(d, "not_modelled"), "metadata_calls_per_request"),
                   jr.opt_strs(jr.sub(d, "not_modelled"), "round_trips_per_request"))


@dataclass(frozen=True)
class Lab:
    name: str
    url: str


@dataclass(frozen=True)
class LabSettings:
    """What one lab ran with after the fix: the change lines made on it and, on network
    storage, the mount's cache options."""

    changes: tuple[str, ...] = ()
    mount_options: dict[str, str] | None = None

    def to_json(self) -> JsonObject:
        out: JsonObject = {"changes": list(self.changes)}
        if self.mount_options is not None:
            out["mount_options"] = dict(self.mount_options)
        return out

    @classmethod
    def from_json(cls, data: Json) -> LabSettings:
        d = jr.obj(data, "settings")
        return cls(jr.strs(d, "changes"),
                   jr.str_map(d, "mount_options") if "mount_options" in d else None)


@dataclass(frozen=True)
class DemoResult:
    """demo.json: the labs, both phases' measurements, the prediction, what was applied and
    what check said before and after; `files` names the run's other files."""

    KIND: ClassVar[str] = "demo"
    VERSIONS: ClassVar[tuple[int, ...]] = (1,)
    REQUIRED: ClassVar[tuple[str, ...]] = ("app", "storage")
    LEGACY: ClassVar[tuple[str, ...]] = ()  # every demo.json has its schema key

    app: str
    storage: str
    output_dir: str
    run_id: str | None = None  # None: written before demo.json carried it
    labs: dict[str, Lab] = field(default_factory=dict)  # role → lab
    before: Phase | None = None
    after: Phase | None = None
    predicted: Prediction | None = None
    predicted_at: str | None = None
    applied: tuple[str, ...] = ()
    applied_at: str | None = None
    manual: tuple[str, ...] = ()
    settings: dict[str, LabSettings] = field(default_factory=dict)  # role → what it ran with
    metadata_calls_per_request: PerRequest = PerRequest(keys=())
    findings_before: tuple[str, ...] = ()  # "severity: id"
    findings_after: tuple[str, ...] = ()
    files: dict[str, str] = field(default_factory=dict)  # what → file, relative to demo.json
    timings_s: dict[str, float] = field(default_factory=dict)
    kept: bool = False
    notes: tuple[str, ...] = ()
    storage_delay_us: int = 0  # the network lab's `--storage-delay` (0: none)
    php: str = ""  # both labs' `--php` when not the host's own ('': the host's PHP)

    def round_trips(self) -> PerRequest:
        """Network round trips per request: measured before and after, and predicted."""
        return PerRequest(self.before.network.round_trips_per_request if self.before else None,
                          self.after.network.round_trips_per_request if self.after else None,
                          self.predicted.round_trips_per_request if self.predicted else None)

    def phases(self) -> list[tuple[str, Phase]]:
        return [(name, p) for name, p in (("before", self.before), ("after", self.after))
                if p is not None]

    def links(self) -> list[tuple[str, str]]:
        """The result files of the run it names (key, as written), in the order written."""
        return [(k, v) for k, v in self.files.items() if k in RESULT_LINKS]

    def to_json(self) -> JsonObject:
        head: JsonObject = {"schema": SCHEMA}
        if self.run_id is not None:
            head["run_id"] = self.run_id
        return {**head, "app": self.app, "storage": self.storage,
                "output_dir": self.output_dir,
                "labs": {role: {"name": lab.name, "url": lab.url}
                         for role, lab in self.labs.items()},
                "before": self.before.to_json() if self.before else None,
                "after": self.after.to_json() if self.after else None,
                "round_trips_per_request": self.round_trips().to_json(),
                "metadata_calls_per_request": self.metadata_calls_per_request.to_json(),
                "predicted": self.predicted.to_json() if self.predicted else {},
                "predicted_at": self.predicted_at,
                "applied": list(self.applied), "applied_at": self.applied_at,
                "manual": list(self.manual),
                "settings": {role: s.to_json() for role, s in self.settings.items()},
                "findings_before": list(self.findings_before),
                "findings_after": list(self.findings_after),
                "files": dict(self.files), "timings_s": dict(self.timings_s),
                "kept": self.kept, "notes": list(self.notes),
                **({"storage_delay_us": self.storage_delay_us} if self.storage_delay_us else {}),
                **({"php": self.php} if self.php else {})}

    @classmethod
    def from_json(cls, data: Json) -> DemoResult:
        """A demo.json's content; ValueError naming the key when it is not one."""
        d = jr.obj(data, "demo.json")
        labs = {role: Lab(jr.str_(lab, "name"), jr.str_(lab, "url"))
                for role, v in jr.sub(d, "labs").items() for lab in (jr.obj(v, "lab"),)}
        before, after, predicted = (jr.section(d, k) for k in ("before", "after", "predicted"))
        return cls(
            app=jr.str_(d, "app"), storage=jr.str_(d, "storage"),
            output_dir=jr.str_(d, "output_dir"),
            run_id=jr.opt_str(d, "run_id"), labs=labs,
            before=Phase.from_json(before) if before is not None else None,
            after=Phase.from_json(after) if after is not None else None,
            predicted=Prediction.from_json(predicted) if predicted is not None else None,
            predicted_at=jr.opt_str(d, "predicted_at"), applied=jr.strs(d, "applied"),
            applied_at=jr.opt_str(d, "applied_at"), manual=jr.strs(d, "manual"),
            settings={str(role): LabSettings.from_json(v)
                      for role, v in jr.sub(d, "settings").items()},
            metadata_calls_per_request=PerRequest.from_json(
                jr.sub(d, "metadata_calls_per_request")),
            findings_before=jr.strs(d, "findings_before"),
            findings_after=jr.strs(d, "findings_after"),
            files=jr.str_map(d, "files"), timings_s=jr.num_map(d, "timings_s"),
            kept=jr.bool_(d, "kept"), notes=jr.strs(d, "notes"),
            storage_delay_us=jr.integer(d.get("storage_delay_us", 0), "storage_delay_us"),
            php=jr.str_(d, "php") if "php" in d else "")
