"""`apply --verify`'s figures: a `Measurement` (one short traced run at one concurrency), how
the run after the change settled, whatif's `Prediction` of the change, and the `Verify` result
that puts them side by side and says whether the change made things worse. Written to apply's
JSON under "verify" (`Verify.to_json`) and read back by `Verify.from_json`.
"""

from __future__ import annotations

from dataclasses import dataclass
from statstorm.results import jsonread as jr
from statstorm.results.jsontypes import JsonObject, JsonValue


# --verify: a change is "worse" beyond these margins (a short run's noise stays inside them).
WORSE_SYSCALLS = 0.02  # metadata calls per request up by more than 2 %
WORSE_RPS = 0.10  # throughput down by more than 10 %


# Measurement's figures that may be missing (None)
FIGURES = ("rps", "p50_ms", "p99_ms", "syscalls_per_request", "failed_per_request",
           "round_trips_per_request")


@dataclass(frozen=True)
class Settling:
    """How the measurement after a change settled: the runs it took, whether two in a row
    agreed, and the first run right after the change."""

    runs: int
    settled: bool
    first: Measurement


@dataclass(frozen=True)
class Measurement:
    """One short traced run: throughput, latency, errors and metadata calls per request."""

    rps: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    errors: int = 0
    syscalls_per_request: float | None = None
    failed_per_request: float | None = None
    round_trips_per_request: float | None = None  # measured at the storage, where it can be
    requests: int = 0
    settling: Settling | None = None  # the measurement after a change

    def settle_figures(self) -> JsonObject:
        """The figures two runs must agree on to be settled (applyplan.settled)."""
        return {"round_trips_per_request": self.round_trips_per_request,
                "syscalls_per_request": self.syscalls_per_request}

    def to_json(self) -> JsonObject:
        out: JsonObject = {"rps": self.rps, "p50_ms": self.p50_ms, "p99_ms": self.p99_ms,
                     "errors": self.errors, "syscalls_per_request": self.syscalls_per_request,
                     "failed_per_request": self.failed_per_request,
                     "round_trips_per_request": self.round_trips_per_request,
                     "requests": self.requests}
        if self.settling is not None:
            out.update(runs=self.settling.runs, settled=self.settling.settled,
                       first=self.settling.first.settle_figures())
        return out

    @classmethod
    def from_json(cls, data: JsonValue) -> Measurement:
        """Tolerant: a figure that is missing is None (0 for the counts)."""
        d = jr.obj(data, "measurement")
        first = jr.opt_obj(d, "first")
        settling = (None if first is None else
                    Settling(jr.int_(d, "runs", 1), jr.bool_(d, "settled"), cls.from_json(first)))
        figures = {k: jr.opt_num(d, k) for k in FIGURES}
        return cls(**figures, errors=jr.int_(d, "errors"), requests=jr.int_(d, "requests"),
                   settling=settling)


@dataclass(frozen=True)
class Figures:
    """What whatif predicts for a set of changes, per request."""

    calls_per_request: float | None
    round_trips_per_request: float | None

    def to_json(self) -> JsonObject:
        return {"calls_per_request": self.calls_per_request,
                "round_trips_per_request": self.round_trips_per_request}

    @classmethod
    def from_json(cls, data: JsonValue) -> Figures:
        d = jr.obj(data, "figures")
        return cls(jr.opt_num(d, "calls_per_request"), jr.opt_num(d, "round_trips_per_request"))


@dataclass(frozen=True)
class Prediction:
    """whatif's prediction of apply's changes from a trace before them: now, with every change,
    and with each change alone (commands.whatif.predict_changes)."""

    current: Figures
    proposed: Figures
    each: tuple[tuple[str, Figures], ...] = ()  # (--set value, its figures alone)
    not_modelled: tuple[str, ...] = ()  # changes whatif does not model (measured only)
    trace: str = ""
    profile: str = ""
    sets: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    def to_json(self) -> JsonObject:
        return {"trace": self.trace, "profile": self.profile, "sets": list(self.sets),
                "current": self.current.to_json(), "proposed": self.proposed.to_json(),
                "each": [{"setting": s, **f.to_json()} for s, f in self.each],
                "not_modelled": list(self.not_modelled), "notes": list(self.notes)}

    @classmethod
    def from_json(cls, data: JsonValue) -> Prediction:
        d = jr.obj(data, "prediction")
        return cls(current=Figures.from_json(jr.sub(d, "current")),
                   proposed=Figures.from_json(jr.sub(d, "proposed")),
                   each=tuple((jr.str_(e, "setting"), Figures.from_json(e))
                              for e in jr.objs(d, "each")),
                   not_modelled=jr.strs(d, "not_modelled"),
                   trace=jr.str_(d, "trace"), profile=jr.str_(d, "profile"),
                   sets=jr.strs(d, "sets"), notes=jr.strs(d, "notes"))


def _rel(b: float | None, a: float | None) -> float | None:
    """(a − b) / b; None when b is missing or 0, or a is missing."""
    return None if not b or a is None else round((a - b) / b, 4)


def _err(predicted: float | None, measured: float | None) -> float | None:
    """(predicted − measured) / measured; None when either is missing or measured is 0."""
    if predicted is None or measured is None or not measured:
        return None
    return round((predicted - measured) / measured, 4)


@dataclass(frozen=True)
class FigureChanges:
    """Relative changes from before to after (None where a figure is missing)."""

    rps: float | None
    p50_ms: float | None
    p99_ms: float | None
    syscalls_per_request: float | None
    round_trips_per_request: float | None

    def to_json(self) -> JsonObject:
        return {"rps": self.rps, "p50_ms": self.p50_ms, "p99_ms": self.p99_ms,
                "syscalls_per_request": self.syscalls_per_request,
                "round_trips_per_request": self.round_trips_per_request}


@dataclass(frozen=True)
class Verify:
    """--verify's result: before and after, same method; why the change is worse (empty: it
    is not); whatif's prediction beside the measurement, when one was made."""

    before: Measurement
    after: Measurement
    predicted: Prediction | None = None

    @property
    def change(self) -> FigureChanges:
        b, a = self.before, self.after
        return FigureChanges(_rel(b.rps, a.rps), _rel(b.p50_ms, a.p50_ms),
                             _rel(b.p99_ms, a.p99_ms),
                             _rel(b.syscalls_per_request, a.syscalls_per_request),
                             _rel(b.round_trips_per_request, a.round_trips_per_request))

    @property
    def worse(self) -> str:
        ch, why = self.change, []
        if ch.syscalls_per_request is not None and ch.syscalls_per_request > WORSE_SYSCALLS:
            why.append(f"metadata calls per request rose {ch.syscalls_per_request:+.1%}")
        if ch.rps is not None and ch.rps < -WORSE_RPS:
            why.append(f"throughput fell {ch.rps:+.1%}")
        if self.after.errors > self.before.errors:
            why.append(f"{self.after.errors} failed requests (before: {self.before.errors})")
        return "; ".join(why)

    @property
    def measured(self) -> Figures:
        """The measurement after, as whatif's figures."""
        return Figures(self.after.syscalls_per_request, self.after.round_trips_per_request)

    @property
    def error(self) -> Figures:
        """(predicted − measured) / measured of each figure (None: not known)."""
        p, m = self.predicted, self.measured
        if p is None:
            return Figures(None, None)
        return Figures(_err(p.proposed.calls_per_request, m.calls_per_request),
                       _err(p.proposed.round_trips_per_request, m.round_trips_per_request))

    def to_json(self) -> JsonObject:
        out: JsonObject = {"before": self.before.to_json(), "after": self.after.to_json(),
                     "change": self.change.to_json(), "worse": self.worse}
        if self.predicted is not None:
            out["predicted"] = {**self.predicted.to_json(), "measured": self.measured.to_json(),
                                "error": self.error.to_json()}
        return out

    @classmethod
    def from_json(cls, data: JsonValue) -> Verify:
        d = jr.obj(data, "verify")
        p = jr.opt_obj(d, "predicted")
        return cls(Measurement.from_json(jr.sub(d, "before")),
                   Measurement.from_json(jr.sub(d, "after")),
                   None if p is None else Prediction.from_json(p))
