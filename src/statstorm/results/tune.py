"""What `statstorm tune` measured on a running pool, as written to `tune.json` in its output
directory (after every step, so a run cut short still leaves what it measured).

The measurements are the demo's (results/demo.py): `Phase` with `local` (the shadow, the pool's
code on local disk) and `network` (the user's pool as it runs), `Prediction`, `PerRequest`.
`TuneResult` is both what tune builds and what the report reads (`from_json`). The files it
names (`files`) are relative to tune.json's directory and carry the run's id.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from statstorm.results import jsonread as jr
from statstorm.results.demo import DemoResult, Lab, PerRequest, Phase, Prediction
from statstorm.results.trials import (KEEP_MARGIN as KEEP_MARGIN, Final as Final,
                                      Skipped as Skipped, Trial as Trial, final_of,
                                      judge as judge, trials_json)
from statstorm.results.jsontypes import JsonObject, JsonValue

SCHEMA = "statstorm.tune/1"


@dataclass(frozen=True)
class TuneResult:
    """tune.json: the pool, its site and shadow, both phases' measurements, the prediction,
    the changes planned (a dry run) or made (`--yes`), and what check said."""

    KIND: ClassVar[str] = "tune"
    VERSIONS: ClassVar[tuple[int, ...]] = (1,)
    REQUIRED: ClassVar[tuple[str, ...]] = ("pool", "urls")
    LEGACY: ClassVar[tuple[str, ...]] = ()

    pool: str
    urls: tuple[str, ...]
    output_dir: str
    run_id: str | None = None
    docroot: str = ""  # the code tree the shadow copied
    shadow: Lab | None = None  # the shadow's lab name and URL (removed at the end)
    dry_run: bool = True
    before: Phase | None = None  # local: the shadow; network: the pool
    after: Phase | None = None
    predicted: Prediction | None = None
    predicted_at: str | None = None
    planned: tuple[str, ...] = ()  # the change lines apply makes (or would make)
    diffs: tuple[str, ...] = ()  # the unified diffs of the files apply edits (or would)
    applied: tuple[str, ...] = ()  # finding ids applied (with --yes)
    applied_at: str | None = None
    manual: tuple[str, ...] = ()  # lines left to do by hand
    metadata_calls_per_request: PerRequest = PerRequest(keys=())
    findings_before: tuple[str, ...] = ()  # "severity: id"
    findings_after: tuple[str, ...] = ()  # check of the second trace, after every change
    files: dict[str, str] = field(default_factory=dict)
    timings_s: dict[str, float] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    trials: tuple[Trial, ...] = ()  # the escalation's changes tried after `after`, each judged
    skipped: tuple[Skipped, ...] = ()  # the escalation's changes not tried, and why

    def final(self) -> Final | None:
        """The phase the run ended at and its label: `after` (apply --all), or the last kept
        escalation trial's, with every kept change made; None before `after`."""
        return final_of(self.after, self.trials)

    def round_trips(self) -> PerRequest:
        """Network round trips per request: measured before and after, and predicted."""
        return PerRequest(self.before.network.round_trips_per_request if self.before else None,
                          self.after.network.round_trips_per_request if self.after else None,
                          self.predicted.round_trips_per_request if self.predicted else None)

    def as_demo(self) -> DemoResult:
        """The run as the report draws a demo: the shadow as the local lab, the pool as the
        network one (`statstorm report tune.json`)."""
        labs = {"network": Lab(f"pool {self.pool}", self.urls[0] if self.urls else "")}
        if self.shadow is not None:
            labs["local"] = self.shadow
        return DemoResult(
            app=f"pool {self.pool} ({self.docroot})", storage="its storage",
            output_dir=self.output_dir, run_id=self.run_id, labs=labs, before=self.before,
            after=self.after, predicted=self.predicted, predicted_at=self.predicted_at,
            applied=self.applied, applied_at=self.applied_at, manual=self.manual,
            metadata_calls_per_request=self.metadata_calls_per_request,
            findings_before=self.findings_before, findings_after=self.findings_after, files={},
            timings_s=dict(self.timings_s), notes=self.notes, trials=self.trials,
            skipped=self.skipped)

    def to_json(self) -> JsonObject:
        head: JsonObject = {"schema": SCHEMA}
        if self.run_id is not None:
            head["run_id"] = self.run_id
        return {**head, "pool": self.pool, "urls": list(self.urls),
                "output_dir": self.output_dir, "docroot": self.docroot,
                "shadow": ({"name": self.shadow.name, "url": self.shadow.url}
                           if self.shadow else None),
                "dry_run": self.dry_run,
                "before": self.before.to_json() if self.before else None,
                "after": self.after.to_json() if self.after else None,
                "round_trips_per_request": self.round_trips().to_json(),
                "final": final.to_json() if (final := self.final()) is not None else None,
                "metadata_calls_per_request": self.metadata_calls_per_request.to_json(),
                "predicted": self.predicted.to_json() if self.predicted else None,
                "predicted_at": self.predicted_at, "planned": list(self.planned),
                "diffs": list(self.diffs),
                "applied": list(self.applied), "applied_at": self.applied_at,
                "manual": list(self.manual), "findings_before": list(self.findings_before),
                "findings_after": list(self.findings_after),
                "files": dict(self.files), "timings_s": dict(self.timings_s),
                "notes": list(self.notes),
                "measure_first": [t.to_json() for t in self.trials],
                "escalation_skipped": [x.to_json() for x in self.skipped]}

    @classmethod
    def from_json(cls, data: JsonValue) -> TuneResult:
        """A tune.json's content; ValueError naming the key when it is not one. Its `final`
        (absent before it was written) is derived from `after` and the trials, not read."""
        d = jr.obj(data, "tune.json")
        shadow = jr.section(d, "shadow")
        before, after, predicted = (jr.section(d, k) for k in ("before", "after", "predicted"))
        sh = jr.obj(shadow, "shadow") if shadow is not None else None
        trials, skipped = trials_json(d)
        return cls(
            pool=jr.str_(d, "pool"), urls=jr.strs(d, "urls"), output_dir=jr.str_(d, "output_dir"),
            run_id=jr.opt_str(d, "run_id"), docroot=jr.str_(d, "docroot"),
            shadow=Lab(jr.str_(sh, "name"), jr.str_(sh, "url")) if sh is not None else None,
            dry_run=jr.bool_(d, "dry_run"),
            before=Phase.from_json(before) if before is not None else None,
            after=Phase.from_json(after) if after is not None else None,
            predicted=Prediction.from_json(predicted) if predicted is not None else None,
            predicted_at=jr.opt_str(d, "predicted_at"), planned=jr.strs(d, "planned"),
            diffs=jr.strs(d, "diffs"),
            applied=jr.strs(d, "applied"), applied_at=jr.opt_str(d, "applied_at"),
            manual=jr.strs(d, "manual"), findings_before=jr.strs(d, "findings_before"),
            metadata_calls_per_request=PerRequest.from_json(
                jr.sub(d, "metadata_calls_per_request")),
            files=jr.str_map(d, "files"), timings_s=jr.num_map(d, "timings_s"),
            notes=jr.strs(d, "notes"),
            findings_after=jr.strs(d, "findings_after") if "findings_after" in d else (),
            trials=trials, skipped=skipped)
