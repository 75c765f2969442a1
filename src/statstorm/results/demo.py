"""What `statstorm demo` measured, as written to `demo.json` in its output directory (after
every step, so a run cut short still leaves what it measured).

`DemoResult` is both what the demo builds and what the report reads (`from_json`), so the
schema lives here once. The files it names (`files`) are relative to demo.json's directory;
demo.json and every file the demo writes carry the run's id (`run_id`), so a reader takes only
files of the same run. demo.json written before the run id (no `run_id` key) named its files
as paths from the directory the demo ran in; they were always beside demo.json.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import ClassVar

from statstorm.results import jsonread as jr
from statstorm.results.jsontypes import JsonObject as JsonObject, JsonValue
from statstorm.results.trials import Final as Final, Skipped, Trial, final_of, trials_json
from statstorm.results.measurements import (STAGES as STAGES, PerRequest as PerRequest,
                                            Phase as Phase, Prediction as Prediction,
                                            Round as Round, Side as Side)

SCHEMA = "statstorm.demo/1"
ROLES = ("local", "network")
RESULT_LINKS = ("trace_before", "check_before", "apply", "trace_after", "check_after")
"""The keys of `files` that name result files a report reads (not demo.json, not the page)."""

Json = JsonValue


def new_run_id() -> str:
    return uuid.uuid4().hex[:12]


def with_run_id(data: JsonObject, run_id: str) -> JsonObject:
    """`data` (a result's JSON) with the run's id after its schema key."""
    head = {k: v for k, v in data.items() if k == "schema"}
    return {**head, "run_id": run_id, **{k: v for k, v in data.items() if k not in head}}


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
    trials: tuple[Trial, ...] = ()  # the escalation's changes tried after `after`, each judged
    skipped: tuple[Skipped, ...] = ()  # the escalation's changes not tried, and why

    def round_trips(self) -> PerRequest:
        """Network round trips per request: measured before and after, and predicted."""
        return PerRequest(self.before.network.round_trips_per_request if self.before else None,
                          self.after.network.round_trips_per_request if self.after else None,
                          self.predicted.round_trips_per_request if self.predicted else None)

    def final(self) -> Final | None:
        """The phase the run ended at and its label: `after` (apply --all), or the last kept
        escalation trial's, with every kept change made; None before `after`."""
        return final_of(self.after, self.trials)

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
                "final": final.to_json() if (final := self.final()) is not None else None,
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
                **({"php": self.php} if self.php else {}),
                **({"measure_first": [t.to_json() for t in self.trials]} if self.trials else {}),
                **({"escalation_skipped": [x.to_json() for x in self.skipped]}
                   if self.skipped else {})}

    @classmethod
    def from_json(cls, data: Json) -> DemoResult:
        """A demo.json's content; ValueError naming the key when it is not one. Its `final`
        (absent before it was written) is derived from `after` and the trials, not read."""
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
            php=jr.str_(d, "php") if "php" in d else "",
            trials=trials_json(d)[0], skipped=trials_json(d)[1])
