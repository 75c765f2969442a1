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
from statstorm.results.jsontypes import JsonObject, JsonValue

SCHEMA = "statstorm.tune/1"
KEEP_MARGIN = 0.05  # an escalation's change is kept when it raises the ratio by more than this


@dataclass(frozen=True)
class Trial:
    """A change of tune's escalation (model/escalation.py: measure-first ones, then the code
    mirror) tried after the others: applied alone, both sides measured again with rounds
    interleaved, and kept only when the pool's throughput over its shadow's rose by more than
    KEEP_MARGIN over the ratio before it (the `after` phase's, or the last kept trial's: a
    ratio, so the machine's other load, which both sides share, cancels); else rolled back."""

    finding: str
    phase: Phase  # measured with the change made
    ratio_without: float | None  # the ratio before it (`after`, or the last kept trial's)
    kept: bool
    why: str  # said to the user
    price: str = ""  # what the change asks of the user (a deploy step, staleness)

    @property
    def ratio_with(self) -> float | None:
        return self.phase.ratio_rps

    def to_json(self) -> JsonObject:
        return {"finding": self.finding, "phase": self.phase.to_json(),
                "ratio_without": self.ratio_without, "ratio_with": self.ratio_with,
                "kept": self.kept, "why": self.why, "price": self.price}

    @classmethod
    def from_json(cls, data: JsonValue) -> Trial:
        d = jr.obj(data, "measure_first entry")
        without = d.get("ratio_without")
        return cls(jr.str_(d, "finding"), Phase.from_json(jr.sub(d, "phase")),
                   float(without) if isinstance(without, (int, float)) else None,
                   jr.bool_(d, "kept"), jr.str_(d, "why"),
                   jr.str_(d, "price"))


def judge(finding: str, phase: Phase, baseline: Phase | None, price: str = "") -> Trial:
    """Keep the change only where it raised the pool's ratio to its shadow by more than
    KEEP_MARGIN over `baseline`'s (the phase measured without it) and the pool answered as
    well as without it: a change that makes requests fail is rolled back, however fast."""
    without = baseline.ratio_rps if baseline is not None else None
    with_ = phase.ratio_rps
    if without is None or with_ is None:
        return Trial(finding, phase, without, False, "not measured on both sides: rolled back",
                     price)
    failed = phase.network.errors - (baseline.network.errors if baseline is not None else 0)
    if failed > 0:
        return Trial(finding, phase, without, False,
                     f"{failed} more failed request(s) on the pool with it (errors or non-2xx "
                     "answers): rolled back", price)
    gain = with_ / without - 1 if without else 0.0
    kept = gain > KEEP_MARGIN
    return Trial(finding, phase, without, kept,
                 f"ratio {without:g}x → {with_:g}x ({gain:+.0%}): "
                 + ("kept" if kept else f"rolled back (not more than {KEEP_MARGIN:.0%} better)"),
                 price)


@dataclass(frozen=True)
class Skipped:
    """A change of the escalation not tried, and why (check did not propose it, --no-mirror,
    the target ratio already reached, apply made nothing)."""

    finding: str
    why: str

    def to_json(self) -> JsonObject:
        return {"finding": self.finding, "why": self.why}

    @classmethod
    def from_json(cls, data: JsonValue) -> Skipped:
        d = jr.obj(data, "escalation_skipped entry")
        return cls(jr.str_(d, "finding"), jr.str_(d, "why"))


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
    files: dict[str, str] = field(default_factory=dict)
    timings_s: dict[str, float] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    trials: tuple[Trial, ...] = ()  # the escalation's changes tried after `after`, each judged
    skipped: tuple[Skipped, ...] = ()  # the escalation's changes not tried, and why

    def final(self) -> Phase | None:
        """The last phase with every kept change made: the last kept trial's, else `after`."""
        kept = [t.phase for t in self.trials if t.kept]
        return kept[-1] if kept else self.after

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
            findings_before=self.findings_before, files={}, timings_s=dict(self.timings_s),
            notes=self.notes)

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
                "metadata_calls_per_request": self.metadata_calls_per_request.to_json(),
                "predicted": self.predicted.to_json() if self.predicted else None,
                "predicted_at": self.predicted_at, "planned": list(self.planned),
                "diffs": list(self.diffs),
                "applied": list(self.applied), "applied_at": self.applied_at,
                "manual": list(self.manual), "findings_before": list(self.findings_before),
                "files": dict(self.files), "timings_s": dict(self.timings_s),
                "notes": list(self.notes),
                "measure_first": [t.to_json() for t in self.trials],
                "escalation_skipped": [x.to_json() for x in self.skipped]}

    @classmethod
    def from_json(cls, data: JsonValue) -> TuneResult:
        """A tune.json's content; ValueError naming the key when it is not one."""
        d = jr.obj(data, "tune.json")
        shadow = jr.section(d, "shadow")
        before, after, predicted = (jr.section(d, k) for k in ("before", "after", "predicted"))
        sh = jr.obj(shadow, "shadow") if shadow is not None else None
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
            trials=tuple(Trial.from_json(t) for t in _list(d.get("measure_first"))),
            skipped=tuple(Skipped.from_json(x) for x in _list(d.get("escalation_skipped"))))


def _list(value: JsonValue | None) -> list[JsonValue]:
    """An optional list (a tune.json written before measure-first changes has none)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError("tune.json: measure_first or escalation_skipped is not a list")
    return value
