"""Latency profiles for `statstorm whatif`: µs per call type and outcome, per mount point.

Format `statstorm.latency-profile/1` (written by `statstorm fsbench --profile-out`):
{"schema", "source", "mounts": {mount_point: {call: {"hit": µs, "enoent": µs}}}}. A call is
priced with the figures of the mount it landed on (as the trace recorded it); a mount the
profile does not name takes the profile's "*" entry, or else local disk's figures.

Built-in profiles are the p50 latencies measured by `bench/fsbench_gluster.py` on the lab
machine (docs/fsbench.md, warm state): local disk (ext4), the lab's GlusterFS FUSE mount with
default options and with 600 s attribute/entry/negative timeouts ("tuned"). `walk` gives
lstat and readlink hits, `stat` stat and access hits, `negative` every ENOENT, `open` the
open hit; fstat, getcwd and readlink never reach the storage's server (an open fd, the
process's own cwd, a cached dentry), so they take local disk's `walk` figure.
"""

from __future__ import annotations

from typing import Any

from statstorm.errors import UsageError
from statstorm.results.trace.vocabulary import CALLS

SCHEMA = "statstorm.latency-profile/1"


def _profile(walk: float, stat: float, negative: float, open_: float,
             local_walk: float = 3.6) -> dict[str, dict[str, float]]:
    return {"lstat": {"hit": walk, "enoent": negative}, "stat": {"hit": stat, "enoent": negative},
            "access": {"hit": stat, "enoent": negative}, "open": {"hit": open_, "enoent": negative},
            "fstat": {"hit": local_walk}, "readlink": {"hit": walk, "enoent": negative},
            "getcwd": {"hit": local_walk}}


BUILTIN: dict[str, dict[str, Any]] = {
    "local": {"schema": SCHEMA, "source": "built-in: local ext4, docs/fsbench.md (warm p50)",
              "mounts": {"*": _profile(3.6, 6.0, 5.6, 13.0)}},
    "gluster": {"schema": SCHEMA, "source": "built-in: lab GlusterFS FUSE, default mount "
                "options, docs/fsbench.md (warm p50)",
                "mounts": {"*": _profile(4.5, 1740.5, 1624.3, 1731.0)}},
    "gluster-tuned": {"schema": SCHEMA, "source": "built-in: lab GlusterFS FUSE, 600 s "
                      "attribute/entry/negative timeouts, docs/fsbench.md (warm p50)",
                      "mounts": {"*": _profile(3.9, 7.6, 7.4, 291.2)}},
}


def validate(profile: Any, where: str) -> dict[str, Any]:
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


def from_trace(syscalls: Any, mounts: list[tuple[str, str]]) -> dict[str, Any]:
    """Mean latency per mount, call and outcome of the trace's own syscalls."""
    sums: dict[tuple[int, str, str], list[float]] = {}
    for s in syscalls:
        if s.call not in CALLS or not s.lat_ns:
            continue
        k = (s.mount, s.call, "enoent" if s.ret < 0 else "hit")
        acc = sums.setdefault(k, [0.0, 0])
        acc[0] += s.lat_ns / 1000
        acc[1] += 1
    out: dict[str, dict[str, dict[str, float]]] = {}
    for (m, call, outcome), (total, n) in sums.items():
        mp = mounts[m][0] if 0 <= m < len(mounts) else "*"
        out.setdefault(mp, {}).setdefault(call, {})[outcome] = round(total / n, 3)
    if not out:
        raise UsageError("the trace has no latencies to build a profile from; use "
                         "--profile local, gluster or gluster-tuned")
    return {"schema": SCHEMA, "source": "the trace's own latencies (mean)", "mounts": out}


def cost_us(profile: dict[str, Any], mounts: list[tuple[str, str]],
            by_mount: dict[tuple[int, int, bool], int]) -> float:
    """Total µs of `by_mount` counts ({(mount index, call index, failed): calls})."""
    table = profile["mounts"]
    fallback = table.get("*") or BUILTIN["local"]["mounts"]["*"]
    per_mount: dict[int, dict[str, Any]] = {}
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
        if lat is None:
            lat = vals.get("hit", vals.get("enoent", 0.0))
        total += n * float(lat)
    return total
