"""Latency profiles for `statstorm whatif`: µs per call type and outcome, per mount point.

Format `statstorm.latency-profile/1` (written by `statstorm fsbench --profile-out`):
{"schema", "source", "mounts": {mount_point: {call: {"hit": µs, "enoent": µs}}}}. A call is
priced with the figures of the mount it landed on (as the trace recorded it); a mount the
profile does not name takes the profile's "*" entry, or else local disk's figures.

The trace's own profile (`from_records`, whatif's default when the trace holds latencies)
has the mean per mount, call and outcome, and for each network mount a `split`: its path
calls' latencies cut in two at the threshold Otsu's method finds on a log scale (the two
modes of a network mount: answers from the kernel's caches, a few µs, and round trips to
the storage, hundreds of µs), with the mean of each mode per call and outcome. whatif prices
a call on such a mount as a round trip for the share of its calls the mount layer says reach
the storage (`model.network_forecast`), and as a cache answer for the rest (`split_cost_us`).

Built-in profiles are the p50 latencies measured by `bench/fsbench_gluster.py` on the lab
machine (docs/fsbench.md, warm state): local disk (ext4), the lab's GlusterFS FUSE mount with
default options and with 600 s attribute/entry/negative timeouts ("tuned"). `walk` gives
lstat and readlink hits, `stat` stat and access hits, `negative` every ENOENT, `open` the
open hit; fstat, getcwd and readlink never reach the storage's server (an open fd, the
process's own cwd, a cached dentry), so they take local disk's `walk` figure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Iterable, TypeAlias

from statstorm.errors import UsageError
from statstorm.results.jsontypes import JsonObject, JsonValue
from statstorm.results.trace.raw import S_CALL, S_LAT, S_MOUNT, S_RET
from statstorm.results.trace.vocabulary import CALLS

SCHEMA = "statstorm.latency-profile/1"

# call → outcome ("hit" or "enoent") → µs
Prices: TypeAlias = dict[str, dict[str, float]]


def _prices(v: JsonValue) -> Prices:
    if not isinstance(v, dict):
        return {}
    return {str(call): {str(o): x for o, x in outcomes.items()
                        if isinstance(x, (int, float)) and not isinstance(x, bool)}
            for call, outcomes in v.items() if isinstance(outcomes, dict)}


def _prices_json(p: Prices) -> JsonObject:
    return {call: {o: x for o, x in outcomes.items()} for call, outcomes in p.items()}


def _opt_num(v: JsonValue) -> float | None:
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


@dataclass(frozen=True)
class MountSplit:
    """A network mount's path calls cut in two modes: kernel-cache answers and round trips
    (`split_modes`)."""

    threshold_us: float | None  # None: every call a cache answer
    cached_us: Prices
    round_trip_us: Prices
    round_trip_mean_us: float | None
    cached_mean_us: float | None
    round_trip_share: float

    def to_json(self) -> JsonObject:
        return {"threshold_us": self.threshold_us, "cached_us": _prices_json(self.cached_us),
                "round_trip_us": _prices_json(self.round_trip_us),
                "round_trip_mean_us": self.round_trip_mean_us,
                "cached_mean_us": self.cached_mean_us, "round_trip_share": self.round_trip_share}

    @classmethod
    def from_json(cls, d: Mapping[str, JsonValue]) -> MountSplit:
        return cls(threshold_us=_opt_num(d["threshold_us"]),
                   cached_us=_prices(d["cached_us"]),
                   round_trip_us=_prices(d["round_trip_us"]),
                   round_trip_mean_us=_opt_num(d["round_trip_mean_us"]),
                   cached_mean_us=_opt_num(d["cached_mean_us"]),
                   round_trip_share=_opt_num(d["round_trip_share"]) or 0.0)


@dataclass(frozen=True)
class LatencyProfile:
    """µs per call type and outcome, per mount point ("*": any other mount); the trace's own
    profile also splits each network mount's calls in two modes."""

    source: str
    mounts: dict[str, Prices]
    split: dict[str, MountSplit] | None = None

    def to_json(self) -> JsonObject:
        out: JsonObject = {"schema": SCHEMA, "source": self.source,
                           "mounts": {m: _prices_json(p) for m, p in self.mounts.items()}}
        if self.split is not None:
            out["split"] = {m: sp.to_json() for m, sp in self.split.items()}
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, JsonValue]) -> LatencyProfile:
        """A profile `validate` accepted (or one this module wrote)."""
        mounts, split = d["mounts"], d.get("split")
        return cls(source=str(d.get("source", "")),
                   mounts={str(m): _prices(p) for m, p in mounts.items()}
                   if isinstance(mounts, dict) else {},
                   split={str(m): MountSplit.from_json(sp) for m, sp in split.items()
                          if isinstance(sp, dict)} if isinstance(split, dict) else None)


def _profile(walk: float, stat: float, negative: float, open_: float,
             local_walk: float = 3.6) -> Prices:
    return {"lstat": {"hit": walk, "enoent": negative}, "stat": {"hit": stat, "enoent": negative},
            "access": {"hit": stat, "enoent": negative}, "open": {"hit": open_, "enoent": negative},
            "fstat": {"hit": local_walk}, "readlink": {"hit": walk, "enoent": negative},
            "getcwd": {"hit": local_walk}}


BUILTIN_PROFILES: dict[str, LatencyProfile] = {
    "local": LatencyProfile("built-in: local ext4, docs/fsbench.md (warm p50)",
                            {"*": _profile(3.6, 6.0, 5.6, 13.0)}),
    "gluster": LatencyProfile("built-in: lab GlusterFS FUSE, default mount "
                              "options, docs/fsbench.md (warm p50)",
                              {"*": _profile(4.5, 1740.5, 1624.3, 1731.0)}),
    "gluster-tuned": LatencyProfile("built-in: lab GlusterFS FUSE, 600 s "
                                    "attribute/entry/negative timeouts, docs/fsbench.md (warm "
                                    "p50)", {"*": _profile(3.9, 7.6, 7.4, 291.2)}),
}
LOCAL: Prices = BUILTIN_PROFILES["local"].mounts["*"]


def validate(profile: JsonValue, where: str) -> JsonObject:
    if not isinstance(profile, dict) or profile.get("schema") != SCHEMA:
        raise UsageError(f"{where}: not a latency profile ({SCHEMA}); write one with "
                         "`statstorm fsbench --profile-out FILE` or use local, gluster, "
                         "gluster-tuned or trace")
    mounts = profile.get("mounts")
    if not isinstance(mounts, dict) or not mounts:
        raise UsageError(f"{where}: the profile has no mounts")
    for mp, calls in mounts.items():
        if not isinstance(calls, dict):
            raise UsageError(f"{where}: mount {mp}: expected call → {{hit, enoent}} µs")
        for call, vals in calls.items():
            if call in CALLS and isinstance(vals, dict):
                for k, v in vals.items():
                    if not isinstance(v, (int, float)) or v < 0:
                        raise UsageError(f"{where}: mount {mp}: {call}.{k} must be a "
                                         "non-negative number of µs")
    return profile


SPLIT_MIN_RATIO = 4.0  # the two modes' medians at least this far apart, else one mode
ROUND_TRIP_FLOOR_US = 50.0  # one mode only: above this median it is the round trips'


def from_records(syscalls: Iterable[list[Any]], mounts: list[tuple[str, str]],
                 network: set[int]) -> JsonObject | None:
    """The trace's own latencies as a profile (raw records): the mean per mount, call and
    outcome; for each network mount also its two modes, kernel-cache answers and round
    trips (`split`). None when the trace holds no latencies."""
    lats: dict[tuple[int, str, str], list[float]] = {}
    for s in syscalls:
        if s[S_CALL] in CALLS and s[S_LAT]:
            k = (s[S_MOUNT], s[S_CALL], "enoent" if s[S_RET] < 0 else "hit")
            v = lats.get(k)
            if v is None:
                v = lats[k] = []
            v.append(s[S_LAT] / 1000)
    if not lats:
        return None
    out: dict[str, Prices] = {}
    for (m, call, outcome), vals in lats.items():
        mp = mounts[m][0] if 0 <= m < len(mounts) else "*"
        out.setdefault(mp, {}).setdefault(call, {})[outcome] = round(sum(vals) / len(vals), 3)
    split = {}
    for m in sorted(network):
        mine = {(c, o): v for (mm, c, o), v in lats.items() if mm == m and c in PATH_CALLS}
        if mine and 0 <= m < len(mounts):
            split[mounts[m][0]] = mount_split(mine)
    return LatencyProfile("the trace's own latencies", out, split).to_json()


PATH_CALLS = ("stat", "lstat", "access", "readlink", "open")


def _median(v: list[float]) -> float:
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def otsu_log(values: list[float]) -> float:
    """The threshold that best splits `values` into two classes on a log scale (Otsu's
    method over a histogram of 8 buckets per octave): the largest between-class variance."""
    logs = [math.log2(max(v, 0.001)) for v in values]
    lo = min(logs)
    hist: dict[int, int] = {}
    for x in logs:
        b = int((x - lo) * 8)
        hist[b] = hist.get(b, 0) + 1
    keys = sorted(hist)
    total = len(logs)
    sum_all = sum(b * n for b, n in hist.items())
    best, best_b = -1.0, keys[0]
    w0 = s0 = 0.0
    for b in keys[:-1]:
        w0 += hist[b]
        s0 += b * hist[b]
        w1 = total - w0
        m0, m1 = s0 / w0, (sum_all - s0) / w1
        var = w0 * w1 * (m0 - m1) ** 2
        if var > best:
            best, best_b = var, b
    return 2 ** (lo + (best_b + 1) / 8)


def split_modes(lats: dict[tuple[str, str], list[float]]) -> JsonObject:
    """`mount_split` as JSON."""
    return mount_split(lats).to_json()


def mount_split(lats: dict[tuple[str, str], list[float]]) -> MountSplit:
    """A network mount's path-call latencies (µs, per call and outcome) split into the
    kernel's cache answers (fast) and round trips (slow) at one threshold for the mount."""
    every = [x for v in lats.values() for x in v]
    t = otsu_log(every) if len(set(every)) > 1 else every[0] * 2
    fast = [x for x in every if x < t]
    slow = [x for x in every if x >= t]
    if not fast or not slow or _median(slow) < SPLIT_MIN_RATIO * _median(fast):
        one = _median(every)  # one mode: which, by its size
        t = 0.0 if one >= ROUND_TRIP_FLOOR_US else math.inf
        fast = [] if t == 0.0 else every
        slow = every if t == 0.0 else []
    cached: Prices = {}
    trips: Prices = {}
    for (call, outcome), v in sorted(lats.items()):
        f = [x for x in v if x < t]
        s = [x for x in v if x >= t]
        if f:
            cached.setdefault(call, {})[outcome] = round(sum(f) / len(f), 3)
        if s:
            trips.setdefault(call, {})[outcome] = round(sum(s) / len(s), 3)
    return MountSplit(threshold_us=None if math.isinf(t) else round(t, 3),
                      cached_us=cached, round_trip_us=trips,
                      round_trip_mean_us=round(sum(slow) / len(slow), 3) if slow else None,
                      cached_mean_us=round(sum(fast) / len(fast), 3) if fast else None,
                      round_trip_share=round(len(slow) / len(every), 4))


def split_cost_us(prof: LatencyProfile, mounts: list[tuple[str, str]],
                  by_mount: dict[tuple[int, int, bool], int],
                  reach: dict[tuple[int, int, bool], float]) -> float:
    """Like `cost_us`, but a call on a mount the profile splits (`split`) is priced as a
    kernel-cache answer or a round trip: `reach[key]` of its calls reach the storage."""
    split = prof.split or {}
    plain: dict[tuple[int, int, bool], int] = {}
    total = 0.0
    for key, n in by_mount.items():
        m, ci, failed = key
        mp = mounts[m][0] if 0 <= m < len(mounts) else ""
        sp = split.get(mp)
        if sp is None or key not in reach:
            plain[key] = n
            continue
        call, outcome = CALLS[ci], "enoent" if failed else "hit"
        f = reach[key]
        rt = (_price(sp.round_trip_us, call, outcome) or sp.round_trip_mean_us
              or _price(prof.mounts.get(mp, {}), call, outcome) or 0.0)
        hit = (_price(sp.cached_us, call, outcome) or sp.cached_mean_us
               or _price(LOCAL, call, outcome) or 0.0)
        total += n * (f * rt + (1 - f) * hit)
    return total + cost_us(prof, mounts, plain)


def _price(calls: Prices, call: str, outcome: str) -> float | None:
    v = (calls.get(call) or {}).get(outcome)
    return float(v) if v is not None else None


def cost_us(profile: LatencyProfile, mounts: list[tuple[str, str]],
            by_mount: dict[tuple[int, int, bool], int]) -> float:
    """Total µs of `by_mount` counts ({(mount index, call index, failed): calls})."""
    table = profile.mounts
    fallback = table.get("*") or LOCAL
    per_mount: dict[int, Prices] = {}
    total = 0.0
    for (m, ci, failed), n in by_mount.items():
        prof = per_mount.get(m)
        if prof is None:
            mp = mounts[m][0] if 0 <= m < len(mounts) else ""
            # the mount's own figures; else the profile's "*"; else local disk
            prof = table[mp] if mp in table else fallback
            per_mount[m] = prof
        vals = prof.get(CALLS[ci]) or fallback.get(CALLS[ci]) or {}
        lat = vals.get("enoent" if failed else "hit")
        if lat is None:  # an outcome the profile does not price: the other one's figure
            lat = next((vals[o] for o in ("hit", "enoent") if o in vals), 0.0)
        total += n * float(lat)
    return total
