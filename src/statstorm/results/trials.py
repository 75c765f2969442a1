"""The escalation's changes (model/escalation.py) as demo.json and tune.json record them: each
tried (`Trial`: applied alone, both sides measured again, kept or rolled back, judged by
`judge`), each not tried, with why (`Skipped`), and the phase the run ended at (`Final`: after
`apply --all`, or with the escalation's kept changes made).
"""

from __future__ import annotations

from dataclasses import dataclass

from statstorm.results import jsonread as jr
from statstorm.results.jsontypes import JsonObject, JsonValue
from statstorm.results.measurements import Phase

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
class Final:
    """The phase a run ended at, and what got it there: `apply --all` (the `after` phase) and
    the escalation's changes kept, in the order kept (the last kept trial's phase, measured
    with every one of them made). Derived from `after` and the trials (`final_of`), so a
    result file's `final` key is written for its readers and never read back."""

    phase: Phase
    kept: tuple[str, ...] = ()  # the escalation's changes kept ((): apply --all alone)

    @property
    def label(self) -> str:
        """`after apply --all`, or `with A and B kept`."""
        return f"with {_and(self.kept)} kept" if self.kept else "after apply --all"

    @property
    def how(self) -> str:
        """What got the target there: `apply --all`, then the escalation's kept changes."""
        return ("apply --all" + (f", then {_and(self.kept)} kept by the escalation"
                                 if self.kept else ""))

    @property
    def round_trips_per_request(self) -> float | None:
        return self.phase.network.round_trips_per_request

    def line(self, round_trips_before: float | None) -> str:
        """The figure the run ended at and what got it there, in one line."""
        ph, rt, before = self.phase, self.round_trips_per_request, round_trips_before
        fewer = (f", network round trips per request {before:g} → {rt:g} "
                 f"({1 - rt / before:.0%} fewer)" if before and rt is not None else "")
        rps, p99 = ph.ratio_rps, ph.ratio_p99
        return (f"in the end ({self.label}): "
                + (f"{rps:g}x local throughput" if rps is not None else "throughput not measured")
                + (f", p99 {p99:g}x local" if p99 is not None else "")
                + f"{fewer}; by {self.how}")

    def to_json(self) -> JsonObject:
        return {"ratio_rps": self.phase.ratio_rps, "ratio_p99": self.phase.ratio_p99,
                "round_trips_per_request": self.round_trips_per_request,
                "label": self.label, "kept": list(self.kept)}


def final_of(after: Phase | None, trials: tuple[Trial, ...]) -> Final | None:
    """The phase the run ended at: the last kept trial's (every kept change made), else
    `after` (apply --all alone); None before `after` was measured."""
    kept = [t for t in trials if t.kept]
    if kept:
        return Final(kept[-1].phase, tuple(t.finding for t in kept))
    return Final(after) if after is not None else None


def _and(names: tuple[str, ...]) -> str:
    """`a`, `a and b`, `a, b and c`."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def trials_json(data: JsonObject) -> tuple[tuple[Trial, ...], tuple[Skipped, ...]]:
    """`measure_first` and `escalation_skipped` of a result file (absent: none)."""
    return (tuple(Trial.from_json(t) for t in _list(data.get("measure_first"))),
            tuple(Skipped.from_json(x) for x in _list(data.get("escalation_skipped"))))


def _list(value: JsonValue | None) -> list[JsonValue]:
    """An optional list (a result written before measure-first changes has none)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError("measure_first or escalation_skipped is not a list")
    return value
