"""Result of `statstorm whatif`: frozen dataclasses and their schema-versioned JSON.

Two sides, "current" (the trace's recorded settings) and "proposed" (with the `--set`
changes), each with its calls per request, realpath cache bytes, metadata time and, when the
trace holds a network mount, the round trips under the mount's caches; the trace's own
counts ("measured"), the latency profile that priced them, and the notes and limits of the
prediction, and the PHP version the model replayed as. `to_json` writes exactly what `whatif --json` prints; `from_json` reads it back.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import ClassVar

from statstorm.results import jsonread as jr
from statstorm.results.jsontypes import JsonObject, JsonValue
from statstorm.results.common import known_fields

KIND = "whatif"
VERSION = 1
SCHEMA = f"statstorm.{KIND}/{VERSION}"

# a side's settings (model.phpsettings.PhpSettings.describe()) and a mount's caches
# (model.network_forecast.MountCaches.describe()), as written
Scalars = dict[str, str | int | float | bool]


@dataclass(frozen=True)
class CacheBytes:
    """The realpath cache each worker builds (bytes); `limit` 0: the cache is off."""

    per_worker_peak_max: int
    per_worker_peak_mean: float
    limit: int
    workers: int

    def to_json(self) -> JsonObject:
        return asdict(self)

    @classmethod
    def from_json(cls, data: JsonValue) -> CacheBytes:
        d = jr.obj(data, "CacheBytes")
        return cls(**known_fields(cls, d))


@dataclass(frozen=True)
class NetworkSide:
    """One side's network mount calls per request, those reaching the storage, the round
    trips they make, and each mount's caches (by mount point)."""

    calls_per_request: float
    reaching_per_request: float
    reaching_opens_per_request: float
    round_trips_per_request: float
    mounts: dict[str, Scalars]

    def to_json(self) -> JsonObject:
        return {**asdict(self), "mounts": {k: dict(v) for k, v in self.mounts.items()}}

    @classmethod
    def from_json(cls, data: object) -> NetworkSide:
        """From JSON, or from what model.round_trips.network_side describes."""
        d = jr.obj(data, "network")
        return cls(**{**known_fields(cls, d),
                      "mounts": {k: jr.scalar_map(v, "mounts")
                                 for k, v in jr.sub(d, "mounts").items()}})


@dataclass(frozen=True)
class Limit:
    """What the trace cannot show for this prediction (model.replay_limits); `paths`: the
    paths it names, when it is about paths."""

    id: str
    text: str
    paths: tuple[str, ...] | None = None

    def to_json(self) -> JsonObject:
        return {"id": self.id, "text": self.text,
                **({"paths": list(self.paths)} if self.paths is not None else {})}

    @classmethod
    def from_json(cls, data: JsonValue) -> Limit:
        d = jr.obj(data, "Limit")
        return cls(jr.str_(d, "id"), jr.str_(d, "text"),
                   jr.opt_strs(d, "paths"))


@dataclass(frozen=True)
class Side:
    """One side of the prediction: the settings it replays under and what they give."""

    settings: Scalars
    requests: int
    per_request: dict[str, float]  # lstat … getcwd, total, failed
    realpath_cache_bytes: CacheBytes
    metadata_time_us_per_request: float
    network: NetworkSide | None = None  # a trace with a network mount
    limits: tuple[Limit, ...] | None = None  # the proposed side

    def to_json(self) -> JsonObject:
        return {"settings": dict(self.settings), "requests": self.requests,
                "per_request": dict(self.per_request),
                "realpath_cache_bytes": self.realpath_cache_bytes.to_json(),
                "metadata_time_us_per_request": self.metadata_time_us_per_request,
                **({"network": self.network.to_json()} if self.network is not None else {}),
                **({"limits": [lim.to_json() for lim in self.limits]}
                   if self.limits is not None else {})}

    @classmethod
    def from_json(cls, data: JsonValue) -> Side:
        d = jr.obj(data, "Side")
        net, lims = jr.opt_obj(d, "network"), jr.opt_lst(d, "limits")
        return cls(settings=jr.scalar_map(jr.sub(d, "settings"), "settings"),
                   requests=jr.int_(d, "requests"), per_request=jr.num_map(d, "per_request"),
                   realpath_cache_bytes=CacheBytes.from_json(jr.sub(d, "realpath_cache_bytes")),
                   metadata_time_us_per_request=jr.num(d, "metadata_time_us_per_request"),
                   network=NetworkSide.from_json(net) if net is not None else None,
                   limits=None if lims is None else tuple(Limit.from_json(x) for x in lims))


@dataclass(frozen=True)
class NetworkBasis:
    """How the round trips were priced: the basis, the trace's own measured round trips per
    request, the operations per reaching call, and whether the app's data files moved to
    its object cache (`app:data-cache=on`)."""

    basis: str
    measured_per_request: float | None
    ops_per_reaching_open: float
    ops_per_reaching_path_call: float
    opens_at_the_storage: float
    app_data_cache: bool

    def to_json(self) -> JsonObject:
        return asdict(self)

    @classmethod
    def from_json(cls, data: JsonValue) -> NetworkBasis:
        d = jr.obj(data, "NetworkBasis")
        return cls(**known_fields(cls, d))


@dataclass(frozen=True)
class FindMin:
    """`--find-min realpath_cache_size`: the smallest size holding every worker's working
    set, or a note saying why there is none (open_basedir disables the cache)."""

    setting: str
    bytes: int
    ini: str
    note: str | None = None
    per_request_at_min: dict[str, float] | None = None
    workers: int | None = None
    max_requests: int | None = None

    def to_json(self) -> JsonObject:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, data: JsonValue) -> FindMin:
        d = jr.obj(data, "FindMin")
        return cls(**known_fields(cls, d))


@dataclass(frozen=True)
class ModelledPhp:
    """The PHP version the model replayed as: the traced one (the trace's header says it),
    or the host's, assumed, when the trace does not say (a trace written before traces
    did, an import); `as_version`: the version whose facts the model used, when the table
    (model/php_versions.py) has no entry for the traced one."""

    version: str  # "8.4"
    basis: str  # "traced" | "assumed"
    full: str = ""  # "8.4.11" when the trace says
    as_version: str = ""

    def line(self) -> str:
        """`modelled PHP 8.4 (traced: 8.4.11)`, `modelled PHP 8.2 (assumed: the trace does
        not say)`."""
        why = ("traced" + (f": {self.full}" if self.full else "") if self.basis == "traced"
               else "assumed: the trace does not say")
        if self.as_version:
            why += f"; replayed with PHP {self.as_version}'s mechanisms, the nearest known"
        return f"modelled PHP {self.version} ({why})"

    def to_json(self) -> JsonObject:
        return {"version": self.version, "full": self.full, "basis": self.basis,
                **({"as_version": self.as_version} if self.as_version else {})}

    @classmethod
    def from_json(cls, data: JsonValue) -> ModelledPhp:
        d = jr.obj(data, "ModelledPhp")
        return cls(**known_fields(cls, d))


@dataclass(frozen=True)
class WhatifResult:
    """The whole prediction. `profile_kind` None: a file written before whatif named it."""

    # what report's registry (results/result_files.py KINDS) knows of its files
    KIND: ClassVar[str] = KIND
    VERSIONS: ClassVar[tuple[int, ...]] = (VERSION,)
    REQUIRED: ClassVar[tuple[str, ...]] = ("current", "proposed")
    LEGACY: ClassVar[tuple[str, ...]] = ("current", "proposed", "measured")

    current: Side
    proposed: Side
    measured: dict[str, float]  # the trace's own per-request counts
    profile_source: str
    changes: tuple[tuple[str, str], ...]
    find_min: FindMin | None = None
    notes: tuple[str, ...] = ()
    profile_kind: str | None = "built-in"  # trace | file | built-in
    network: NetworkBasis | None = None  # the mount layer: basis, measured round trips
    php: ModelledPhp | None = None  # None: a file written before whatif said

    def to_json(self) -> JsonObject:
        net = self.network
        return {"schema": SCHEMA, "current": self.current.to_json(),
                "proposed": self.proposed.to_json(),
                "measured": {"per_request": dict(self.measured),
                             **({"round_trips_per_request": net.measured_per_request}
                                if net is not None else {})},
                "changes": {k: v for k, v in self.changes}, "profile": self.profile_source,
                **({"profile_kind": self.profile_kind} if self.profile_kind is not None else {}),
                **({"network": net.to_json()} if net is not None else {}),
                **({"find_min": self.find_min.to_json()} if self.find_min is not None else {}),
                **({"notes": list(self.notes)} if self.notes else {}),
                **({"php": self.php.to_json()} if self.php is not None else {})}

    @classmethod
    def from_json(cls, data: JsonValue) -> WhatifResult:
        d = jr.obj(data, "WhatifResult")
        net, fm, php = jr.opt_obj(d, "network"), jr.opt_obj(d, "find_min"), jr.opt_obj(d, "php")
        return cls(current=Side.from_json(d["current"]), proposed=Side.from_json(d["proposed"]),
                   measured=jr.num_map(jr.sub(d, "measured"), "per_request"),
                   profile_source=jr.str_(d, "profile"),
                   changes=tuple(jr.str_map(d, "changes").items()),
                   find_min=FindMin.from_json(fm) if fm is not None else None,
                   notes=jr.strs(d, "notes"), profile_kind=jr.opt_str(d, "profile_kind"),
                   network=NetworkBasis.from_json(net) if net is not None else None,
                   php=ModelledPhp.from_json(php) if php is not None else None)
