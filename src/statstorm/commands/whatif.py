"""`statstorm whatif`: replay a trace under its own settings and under proposed ones.

Reads the trace, builds the model's input once (model.replay.prepare), replays it under the
recorded settings ("current") and under the recorded settings with the `--set` changes
("proposed"), and prices both with a latency profile.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from statstorm.errors import UsageError
from statstorm.model import latency_profile as lp
from statstorm.model import sampling
from statstorm.model.phpsettings import PhpSettings, from_recorded, parse_set, with_changes
from statstorm.model.replay import Prepared, ReplayResult, prepare, replay
from statstorm.results import whatif_input
from statstorm.results.trace import Trace, read_trace
from statstorm.results.trace.raw import TraceRecords, read_records
from statstorm.results.whatif_input import CachedInput, measured_per_request

SCHEMA = "statstorm.whatif/1"
FIND_MIN = ("realpath_cache_size",)
UNLIMITED = 1 << 40


@dataclass(frozen=True)
class WhatifOptions:
    trace: Path
    sets: tuple[str, ...] = ()
    profile: str = "local"  # local | gluster | gluster-tuned | trace | FILE
    find_min: str | None = None
    cache: bool = True  # use and keep the trace's input cache (results.whatif_input)


@dataclass
class WhatifRun:
    current: dict[str, Any]
    proposed: dict[str, Any]
    measured: dict[str, float]  # the trace's own per-request counts
    profile_source: str
    changes: list[tuple[str, str]]
    find_min: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"schema": SCHEMA, "current": self.current, "proposed": self.proposed,
                               "measured": {"per_request": self.measured},
                               "changes": {k: v for k, v in self.changes},
                               "profile": self.profile_source}
        if self.find_min is not None:
            out["find_min"] = self.find_min
        if self.notes:
            out["notes"] = self.notes
        return out


def validate(opts: WhatifOptions) -> list[tuple[str, str]]:
    changes = parse_set(list(opts.sets))
    if opts.find_min is not None and opts.find_min not in FIND_MIN:
        raise UsageError(f"--find-min {opts.find_min}: only realpath_cache_size can be searched")
    if not opts.trace.exists():
        raise UsageError(f"{opts.trace}: no such trace file; record one with "
                         "`statstorm trace -o FILE`")
    if opts.profile not in lp.BUILTIN and opts.profile != "trace":
        p = Path(opts.profile)
        if not p.is_file():
            raise UsageError(f"--profile {opts.profile}: not a built-in profile (local, gluster, "
                             "gluster-tuned, trace) nor a file")
    return changes


def load_profile(opts: WhatifOptions, trace: Trace | None) -> dict[str, Any]:
    """The latency profile; `trace` is needed (and given) only for `--profile trace`."""
    if opts.profile in lp.BUILTIN:
        return lp.BUILTIN[opts.profile]
    if opts.profile == "trace":
        assert trace is not None
        return lp.from_trace(trace.syscalls, trace.mounts)
    try:
        data = json.loads(Path(opts.profile).read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"--profile {opts.profile}: unreadable JSON ({exc}); write it with "
                         "`statstorm fsbench --profile-out FILE`") from None
    return lp.validate(data, opts.profile)


def load_input(path: Path, use_cache: bool = True) -> tuple[CachedInput, TraceRecords | None]:
    """The model input of a trace: from its input cache when that still matches, else read
    and prepared from the trace's records (then cached for the next run when `use_cache`).
    The records are returned too when they were read (None when the cache answered)."""
    if use_cache:
        cached = whatif_input.load(path)
        if cached is not None:
            return cached, None
    records = read_records(path)
    cached = CachedInput(records.header, measured_per_request(records, path), prepare(records))
    if use_cache:
        whatif_input.save(path, cached)
    return cached, records


def side(result: ReplayResult, prep: Prepared, profile: dict[str, Any]) -> dict[str, Any]:
    n = max(result.requests, 1)
    us = lp.cost_us(profile, prep.mounts, result.by_mount) / n
    s = result.settings
    return {
        "settings": s.describe(),
        "requests": result.requests,
        "per_request": result.per_request,
        "realpath_cache_bytes": {
            "per_worker_peak_max": result.cache_bytes_peak,
            "per_worker_peak_mean": round(result.cache_bytes_mean, 1),
            "limit": 0 if s.open_basedir else s.realpath_cache_size,
            "workers": result.workers},
        "metadata_time_us_per_request": round(us, 1),
    }


def find_min_cache(prep: Prepared, settings: PhpSettings) -> dict[str, Any]:
    """The smallest realpath_cache_size that never refuses an entry: the largest cache any
    worker builds when nothing is refused (entries are never evicted, so that replay and
    one with exactly this limit make the same calls)."""
    if settings.open_basedir:
        return {"setting": "realpath_cache_size", "bytes": 0, "ini": "0",
                "note": "open_basedir is set: the realpath cache is disabled whatever its size"}
    big = replay(prep, replace(settings, realpath_cache_size=UNLIMITED))
    need = big.cache_bytes_peak
    kib = -(-need // 1024)
    return {"setting": "realpath_cache_size", "bytes": need, "ini": f"{max(kib, 1)}K",
            "per_request_at_min": big.per_request,
            "workers": big.workers, "max_requests": settings.max_requests}


def run(opts: WhatifOptions) -> WhatifRun:
    changes = validate(opts)
    # --profile trace needs every syscall's latency: the trace itself, not the cache
    cached, _ = load_input(opts.trace, opts.cache and opts.profile != "trace")
    trace = read_trace(opts.trace) if opts.profile == "trace" else None
    prep = cached.prep
    recorded = dict(cached.header.get("settings", {}))
    current_s = from_recorded(recorded)
    proposed_s = with_changes(current_s, recorded, changes)
    profile = load_profile(opts, trace)
    cur = replay(prep, current_s)
    prop = replay(prep, proposed_s)
    measured = cached.measured
    fm = find_min_cache(prep, proposed_s) if opts.find_min else None
    note = sampling.whatif_note(cached.header)
    return WhatifRun(side(cur, prep, profile), side(prop, prep, profile), measured,
                     str(profile.get("source", opts.profile)), changes, fm,
                     [note] if note else [])
