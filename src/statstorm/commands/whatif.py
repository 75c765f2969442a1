"""`statstorm whatif`: replay a trace under its own settings and under proposed ones.

Reads the trace, builds the model's input once (model.replay.prepare), replays it under the
recorded settings ("current") and under the recorded settings with the `--set` changes
("proposed"), runs the network mounts' calls through their caches under the recorded mount
options and under the `mount:` changes (model.network_forecast), and prices both sides with a
latency profile: the trace's own by default (model.latency_profile.from_records).
"""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from statstorm.adapters.tracing import whatif_input
from statstorm.adapters.tracing.whatif_input import CachedInput, new_input
from statstorm.errors import UsageError
from statstorm.model import applyplan, php_versions, prediction_fit
from statstorm.model.finding import Finding
from statstorm.model.phpsettings import SETTABLE
from statstorm.model.storage_kinds import network_mount_indexes
from statstorm.model import latency_profile as lp
from statstorm.model import network_forecast as nf
from statstorm.model import round_trip_forecast as round_trips
from statstorm.model import sampling
from statstorm.model.phpsettings import PhpSettings, from_recorded, parse_set, with_changes
from statstorm.model.replay import Prepared, ReplayResult, replay
from statstorm.model.replay_limits import limits
from statstorm.results.common import MAX_JSON_BYTES, read_bounded
from statstorm.results.demo import Prediction as Forecast
from statstorm.results.trace import read_trace
from statstorm.results.trace.header import TraceHeader
from statstorm.results.trace.raw import TraceRecords, read_records
from statstorm.results.php_root import HOST_VERSION
from statstorm.results.whatif import (CacheBytes, FindMin, Limit, ModelledPhp, NetworkBasis,
                                      NetworkSide, Side, WhatifResult)

WhatifRun = WhatifResult  # the name the verb's callers knew
FIND_MIN = ("realpath_cache_size",)
UNLIMITED = 1 << 40


@dataclass(frozen=True)
class WhatifOptions:
    trace: Path
    sets: tuple[str, ...] = ()
    profile: str = "auto"  # auto | local | gluster | gluster-tuned | trace | FILE
    find_min: str | None = None
    cache: bool = True  # use and keep the trace's input cache (adapters.tracing.whatif_input)
    app_cache: bool = False  # the app's data files move to an object cache (apply's APCu)


def validate(opts: WhatifOptions) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """The PHP changes and the `mount:` changes (key without the prefix); `app:` keys are
    read by `app_cache`."""
    app_cache(opts)
    php_sets, mount = nf.parse_mount_sets(s for s in opts.sets if not s.startswith("app:"))
    changes = parse_set(php_sets)
    if opts.find_min is not None and opts.find_min not in FIND_MIN:
        raise UsageError(f"--find-min {opts.find_min}: only realpath_cache_size can be searched")
    if not opts.trace.exists():
        raise UsageError(f"{opts.trace}: no such trace file; record one with "
                         "`statstorm trace -o FILE`")
    if opts.profile not in lp.BUILTIN_PROFILES and opts.profile not in ("trace", "auto"):
        p = Path(opts.profile)
        if not p.is_file():
            raise UsageError(f"--profile {opts.profile}: not a built-in profile (auto, local, "
                             "gluster, gluster-tuned, trace) nor a file")
    return changes, mount


def app_cache(opts: WhatifOptions) -> bool:
    """Whether the app's data files move to its object cache (`--set app:data-cache=on`)."""
    on = opts.app_cache
    for s in opts.sets:
        if s.startswith("app:"):
            if s.replace(" ", "").lower() not in ("app:data-cache=on", "app:data-cache=1"):
                raise UsageError(f"--set {s}: the app setting whatif knows is "
                                 "app:data-cache=on")
            on = True
    return on


def load_profile(opts: WhatifOptions, cached: CachedInput) -> tuple[lp.LatencyProfile, str]:
    """The latency profile and its kind: a FILE; the trace's own (auto, trace); built-in."""
    if opts.profile in lp.BUILTIN_PROFILES:
        return lp.BUILTIN_PROFILES[opts.profile], "built-in"
    if opts.profile in ("trace", "auto"):
        if cached.latency is not None:
            return lp.LatencyProfile.from_json(cached.latency), "trace"
        if opts.profile == "trace":
            raise UsageError("the trace has no latencies to build a profile from; use "
                             "--profile local, gluster, gluster-tuned or a FILE")
        return lp.BUILTIN_PROFILES["local"], "built-in"
    try:
        data = json.loads(read_bounded(Path(opts.profile), MAX_JSON_BYTES,
                                       "write one with `statstorm fsbench --profile-out FILE`"))
    except (ValueError, RecursionError) as exc:
        raise UsageError(f"--profile {opts.profile}: unreadable JSON ({exc}); write it with "
                         "`statstorm fsbench --profile-out FILE`") from None
    return lp.LatencyProfile.from_json(lp.validate(data, opts.profile)), "file"


def load_input(path: Path, use_cache: bool = True) -> tuple[CachedInput, TraceRecords | None]:
    """The model input of a trace: from its input cache when that still matches, else read
    and prepared from the trace's records (then cached for the next run when `use_cache`).
    The records are returned too when they were read (None when the cache answered)."""
    if use_cache:
        cached = whatif_input.load(path)
        if cached is not None:
            return cached, None
    records = read_records(path)
    cached = new_input(records, path)
    if use_cache:
        whatif_input.save(path, cached)
    return cached, records


def side(result: ReplayResult, prep: Prepared, profile: lp.LatencyProfile,
         tally: nf.Tally | None = None) -> Side:
    n = max(result.requests, 1)
    reach = nf_reach(tally, result) if tally is not None else {}
    us = lp.split_cost_us(profile, prep.mounts, result.by_mount, reach) / n
    s = result.settings
    return Side(
        settings=s.describe(), requests=result.requests, per_request=result.per_request,
        realpath_cache_bytes=CacheBytes(
            per_worker_peak_max=result.cache_bytes_peak,
            per_worker_peak_mean=round(result.cache_bytes_mean, 1),
            limit=0 if s.open_basedir else s.realpath_cache_size, workers=result.workers),
        metadata_time_us_per_request=round(us, 1))


def nf_reach(tally: nf.Tally, result: ReplayResult) -> dict[tuple[int, int, bool], float]:
    """The share of each (mount, call, failed) of the replay that reaches the storage: the
    forecast's share for that key, else its mount's (a call type the trace never made there)."""
    out: dict[tuple[int, int, bool], float] = {}
    mounts = {k[0] for k in tally.calls}
    for key in result.by_mount:
        if key[0] not in mounts:
            continue
        f = tally.fraction(key)
        if f is None:
            f = tally.mount_fraction(key[0]) if key[1] in nf.PATH_INDEXES else 0.0
        out[key] = f or 0.0
    return out


def find_min_cache(prep: Prepared, settings: PhpSettings) -> FindMin:
    """The smallest realpath_cache_size that never refuses an entry: the largest cache any
    worker builds when nothing is refused (entries are never evicted, so that replay and
    one with exactly this limit make the same calls)."""
    if settings.open_basedir:
        return FindMin("realpath_cache_size", 0, "0", note="open_basedir is set: the "
                       "realpath cache is disabled whatever its size")
    big = replay(prep, replace(settings, realpath_cache_size=UNLIMITED))
    need = big.cache_bytes_peak
    kib = -(-need // 1024)
    return FindMin("realpath_cache_size", need, f"{max(kib, 1)}K",
                   per_request_at_min=big.per_request, workers=big.workers,
                   max_requests=settings.max_requests)


def run(opts: WhatifOptions) -> WhatifResult:
    changes, mount_changes = validate(opts)
    cached, _ = load_input(opts.trace, opts.cache)
    prep = cached.prep
    head = TraceHeader.from_json(cached.header)
    recorded = dict(head.settings)
    php = modelled_php(head)
    current_s = from_recorded(recorded, php.as_version or php.version)
    proposed_s = with_changes(current_s, recorded, changes)
    profile, kind = load_profile(opts, cached)
    cur = replay(prep, current_s)
    prop = replay(prep, proposed_s)
    notes: list[str] = []
    data_cache = app_cache(opts)
    net = network_plan(cached, mount_changes, data_cache, notes)
    if net is None:
        current, proposed = side(cur, prep, profile), side(prop, prep, profile)
        network: NetworkBasis | None = None
    else:
        caches_now, caches_then, t_now, t_then = net
        current, proposed = side(cur, prep, profile, t_now), side(prop, prep, profile, t_then)
        r_now, r_then = nf_reach(t_now, cur), nf_reach(t_then, prop)
        factors = round_trips.round_trip_factors(cached.network.get("measured"), cur.by_mount,
                                                 cur.requests, r_now)
        current = replace(current, network=NetworkSide.from_json(round_trips.network_side(
            cur.by_mount, cur.requests, r_now, factors, caches_now, prep.mounts)))
        proposed = replace(proposed, network=NetworkSide.from_json(round_trips.network_side(
            prop.by_mount, prop.requests, r_then, factors, caches_then, prep.mounts)))
        network = NetworkBasis.from_json({**factors.describe(), "app_data_cache": data_cache})
        if profile.split is None or kind != "trace":
            notes.append("the latency profile does not tell cache answers from round trips: "
                         "metadata time is priced per call as the profile says, so mount: "
                         "changes show in the round trips only")
    proposed = replace(proposed, limits=tuple(
        Limit.from_json(x) for x in limits(prep, current_s, proposed_s, prop.guessed)))
    fm = find_min_cache(prep, proposed_s) if opts.find_min else None
    note = sampling.whatif_note(head)
    if note:
        notes.insert(0, note)
    changes_all = changes + [(f"mount:{k}", v) for k, v in mount_changes]
    if data_cache:
        changes_all.append(("app:data-cache", "on"))
    return WhatifResult(current, proposed, cached.measured,
                        profile.source or opts.profile, tuple(changes_all), fm,
                        tuple(notes), kind, network, php)


def modelled_php(head: TraceHeader) -> ModelledPhp:
    """The PHP version to replay as: the trace's (its header), else the host's, assumed; a
    version the model's table does not know is replayed with the nearest one's facts."""
    if not head.php.known:
        return ModelledPhp(HOST_VERSION, "assumed")
    version = head.php.version
    return ModelledPhp(version, "traced", head.php.full,
                       "" if php_versions.facts_of(version) else php_versions.nearest(version))


def network_plan(cached: CachedInput, mount_changes: list[tuple[str, str]], app_cache: bool,
                 notes: list[str]) -> tuple[dict[int, nf.MountCaches], dict[int, nf.MountCaches],
                                            nf.Tally, nf.Tally] | None:
    """Each network mount's caches now and proposed, and the forecast under each; None when
    the trace has no network mount (then `mount:` changes are an error)."""
    mounts = list(TraceHeader.from_json(cached.header).mounts)
    net = [i for i, (_, fstype) in enumerate(mounts) if nf.kind_of(fstype)]
    if not net:
        if mount_changes:
            raise UsageError("--set mount:…: the trace has no network mount (NFS, FUSE, "
                             "GlusterFS) to change")
        return None
    recorded = cached.header.get("mount_options")
    if not isinstance(recorded, list):
        notes.append("the trace does not record its mount options (an older trace): the "
                     "clients' default cache timeouts are assumed for the current side")
        recorded = []
    now: dict[int, nf.MountCaches] = {}
    then: dict[int, nf.MountCaches] = {}
    for i in net:
        opts = recorded[i] if i < len(recorded) and isinstance(recorded[i], dict) else None
        now[i] = nf.caches_of(mounts[i][1], opts)
    kinds = {c.kind for c in now.values()}
    for i in net:
        mine = [(k, v) for k, v in mount_changes
                if (k in nf.FUSE_KEYS) == (now[i].kind == nf.FUSE)]
        if len(kinds) == 1:
            mine = mount_changes  # a key of the other kind is an error naming the right ones
        then[i] = nf.with_changes(now[i], mine)
    calls = cached.network.get("calls") or []
    requests = int(cached.network.get("requests") or 0)
    roots = {i: mounts[i][0] for i in net}
    return (now, then, nf.simulate(calls, requests, now, roots=roots),
            nf.simulate(calls, requests, then, app_cache=app_cache, roots=roots))


def _figures(side_: Side) -> dict[str, float | None]:
    return {"calls_per_request": side_.per_request["total"],
            "round_trips_per_request": (side_.network.round_trips_per_request
                                        if side_.network is not None else None)}


def predict_changes(trace: Path, sets: list[str], not_modelled: list[str]) -> dict[str, Any]:
    """whatif's prediction for a set of changes (`apply --verify`): metadata calls and
    network round trips per request, current and with every change, and with each change
    alone. `sets` are --set values (PHP keys, mount:, app:); `not_modelled` is carried."""
    both = run(WhatifOptions(trace, sets=tuple(sets)))
    each = []
    for s in sets:
        alone = run(WhatifOptions(trace, sets=(s,)))
        each.append({"setting": s, **_figures(alone.proposed)})
    return {"trace": str(trace), "profile": both.profile_source, "sets": sets,
            "current": _figures(both.current), "proposed": _figures(both.proposed),
            "each": each, "not_modelled": not_modelled, "notes": list(both.notes)}


# -- a composite verb's prediction (demo, tune) -----------------------------------------------
# Changes that make no metadata call more or fewer (they change where calls are answered, or
# how php-fpm reloads), and changes that do not change what reaches the storage.
NO_CALLS = frozenset({applyplan.MOUNT, applyplan.VOLUME, applyplan.FPM_GLOBAL})
NO_ROUND_TRIPS = frozenset({applyplan.FPM_GLOBAL})

def predict_findings(findings: list[Finding], settings: dict[str, str], trace_path: Path,
                    round_trips_before: float | None) -> Forecast:
    """What check's changes will do (those `apply --all` makes), before any is made: metadata
    calls per request from `whatif` (the PHP changes), round trips per request from the
    measured ones scaled by the forecast of the mount and app changes
    (model.network_forecast)."""
    # what `apply --all` makes: the changes it leaves to be named (NAMED_ONLY) are not made
    changes = applyplan.merge([c for f in findings if f.id not in applyplan.NAMED_ONLY
                               for c in applyplan.classify(f, settings)])
    sets = [f"{c.key}={c.value}" for c in changes
            if c.kind in (applyplan.POOL_INI, applyplan.MASTER_INI) and c.key in SETTABLE]
    wi = run(WhatifOptions(trace_path, sets=tuple(sets)))
    tr = read_trace(trace_path)
    network = network_mount_indexes(tr.mounts)
    requests = sum(1 for r in tr.requests.values() if r.end_ns >= 0) or len(tr.requests)
    mount = {c.key: c.value for c in changes if c.kind == applyplan.MOUNT}

    def secs(key: str, default: float) -> float:
        try:
            return float(mount.get(key, default))
        except ValueError:
            return default
    caches_then = nf.MountCaches(secs("attribute-timeout", 1), secs("entry-timeout", 1),
                                 secs("negative-timeout", 0))
    app = any(c.kind == applyplan.APP for c in changes)
    # the what-if input's calls know the symlinks found on the live tree as well as those
    # the trace's readlinks show (adapters/tracing/whatif_input.py)
    cached = whatif_input.load(trace_path)
    calls = cached.network.get("calls") if cached is not None else None
    if calls is not None:
        now = nf.forecast_calls(calls, network, requests, nf.MountCaches())
        then = nf.forecast_calls(calls, network, requests, caches_then, app_cache=app)
    else:
        now = nf.forecast(tr.syscalls, network, requests, nf.MountCaches())
        then = nf.forecast(tr.syscalls, network, requests, caches_then, app_cache=app)
    rt = None
    if round_trips_before is not None and now.reaching_per_request:
        rt = nf.scaled_round_trips(round_trips_before, now, then)
    # a FUSE mount's symlinks are looked for on the live tree only where the trace was taken
    unchecked = () if tr.header.get("host") == socket.gethostname() else tuple(
        prediction_fit.symlink_line(str(tr.mounts[i][0])) for i in sorted(network)
        if nf.kind_of(str(tr.mounts[i][1])) == nf.FUSE)
    made = [c for c in changes if c.kind != applyplan.MANUAL]
    app_cache = any(c.kind == applyplan.APP for c in made)
    forecast = {k for k in ("attribute-timeout", "entry-timeout", "negative-timeout")
                if k in mount}
    return Forecast(tuple(sets), wi.proposed.per_request["total"],
                    wi.current.per_request["total"], now.reaching_per_request,
                    then.reaching_per_request, rt, tuple(c.line for c in made),
                    not_modelled_calls=tuple(dict.fromkeys(
                        c.line for c in made if f"{c.key}={c.value}" not in sets
                        and c.kind not in NO_CALLS)),
                    not_modelled_round_trips=tuple(dict.fromkeys(
                        c.line for c in made
                        if not (c.kind == applyplan.MOUNT and c.key in forecast)
                        and c.kind != applyplan.APP and c.kind not in NO_ROUND_TRIPS
                        and not (app_cache and c.key == "extension"))) + unchecked)


def prediction_line(p: Forecast | None, round_trips_before: float | None) -> str:
    """The prediction as one line, printed before anything changes."""
    rt = p.round_trips_per_request if p else None
    return (f"prediction (before any change): metadata calls per request "
            f"{p.metadata_calls_per_request_now if p else None} → "
            f"{p.metadata_calls_per_request if p else None} "
            f"(whatif: {', '.join(p.php_settings if p else ()) or 'no PHP change'}); "
            f"network round trips per request "
            f"{round_trips_before if round_trips_before is not None else '?'} → "
            f"{rt if rt is not None else '?'} (mount and app changes)")
