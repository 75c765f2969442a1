"""What the demo and tune measure and predict: each side's rounds (`Round`, `Side`), both sides
in one phase (`Phase`), a figure per request before, after and as predicted (`PerRequest`), and
the prediction written before any change (`Prediction`). demo.json and tune.json hold them
(results/demo.py, results/tune.py); each is written by its class and read back by the same class.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from statstorm.results import jsonread as jr
from statstorm.results.jsontypes import JsonObject, JsonValue

STAGES = ("before", "after", "predicted")
Json = JsonValue

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
