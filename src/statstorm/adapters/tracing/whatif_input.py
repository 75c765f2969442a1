"""The what-if input: a trace's model input, read from the trace or from its cache kept
beside the trace for the next run, and the trace's own per-request counts. Built by the
tracer as a trace closes (adapters/tracing/trace_backends.py) and loaded by `statstorm
whatif`; an adapter, as it reads and writes files and runs the model (model/ does no I/O and
results/ imports no model).

Decoding a big JSON-lines trace and building the model's input from it (`replay.prepare`)
costs several times the replay itself. `statstorm whatif` therefore keeps what it built in a
sidecar file, `TRACE.whatif-cache` (format `statstorm-whatif-input`, documented in
docs/trace.md), and uses it while it still matches. The trace file stays the source of truth:
the cache is only ever derived from it, and is ignored (then rebuilt) whenever the trace's
size, modification time, inode or content (a SHA-256 of the trace file), the cache's format
version, or the code that builds or reads the model input has changed. Deleting it is always
safe.

Besides the replay's input it holds what the mount layer needs, so that a cached run never
reads the records: the trace-derived latency profile (`latency_profile.from_records`) and the
network mounts' path calls with the round trips the trace measured (`network`). On a FUSE
mount each call also carries the symlinks its walk reads (a READLINK round trip each,
whatever the timeouts: model/network_forecast.py): the symlinks are the paths the trace's
readlink calls read and, when the trace was taken on this host, the directories and files
of its paths that `lstat` finds to be symlinks on the live tree; the symlinks read per call
of each kind go beside the measured round trips (`symlink_walks`) for their calibration.

The sidecar is a `marshal` dump of plain values (dicts, lists, tuples, sets, str, int): the
fastest stdlib form to load, and one that, unlike pickle, runs no code when loaded. A cache
is read only if the current user owns it, or root does and no one else can write it.

`measured_per_request` gives the trace's own mean calls per request from its raw records
(`results.trace.raw`), which is what `statstorm whatif` shows as measured.
"""

from __future__ import annotations

import dataclasses
import hashlib
import marshal
import os
import socket
import stat
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from statstorm.errors import UsageError
from statstorm.model import (engine_events, fs_view, fuse_symlinks, include_resolution,
                             latency_profile, mount_options, network_forecast,
                             open_basedir, php_engine, php_versions, phpsettings, replay_clock,
                             realpath_cache, replay, replay_cli, replay_fs, replay_input,
                             replay_ops, replay_tally, stat_family, stats, storage_kinds,
                             tracestats, user_ini)
from statstorm.model.fs_view import FsView
from statstorm.model.replay_input import Prepared
from statstorm.model.tracestats import summarize_trace
from statstorm.results.common import collector_paused, trusted, write_atomic
from statstorm.results.trace import jsonl, raw, sidecar, vocabulary
from statstorm.results.trace import header as trace_header, summary as trace_summary
from statstorm.results.trace.header import TraceHeader
from statstorm.results.trace.jsonl import read_trace
from statstorm.results.trace.raw import R_END, S_CALL, S_REQ, S_RET, TraceRecords, read_records
from statstorm.results.trace.vocabulary import CALLS, SUMMARY_KEYS, Detail, TracerBackend

FORMAT = "statstorm-whatif-input"
VERSION = 3
LSTAT_AT_MOST = 50_000  # paths lstat()ed on the live tree for its symlinks
SUFFIX = ".whatif-cache"
# The modules whose code decides what the cache holds: any change to them invalidates it.
_CODE = (vocabulary, trace_header, trace_summary, jsonl, sidecar, raw, sys.modules[__name__],
         tracestats, replay, replay_input, replay_fs, replay_ops, replay_cli, replay_tally,
         realpath_cache, fs_view, php_engine, stat_family, include_resolution, open_basedir,
         user_ini, phpsettings, latency_profile, network_forecast, stats, storage_kinds,
         mount_options, php_versions, engine_events, fuse_symlinks, replay_clock)


@dataclass
class CachedInput:
    """What `statstorm whatif` needs from a trace, without the trace's records."""

    header: dict[str, Any]
    measured: dict[str, float]  # the trace's own per-request counts (tracestats.summarize_trace)
    prep: Prepared
    latency: dict[str, Any] | None = None  # the trace's own latency profile (None: none)
    # the network mounts' path calls (network_forecast.NetCall), the trace's finished
    # requests and the round trips it measured (its trailer's "network")
    network: dict[str, Any] = dataclasses.field(default_factory=dict)


def cache_path(trace: Path) -> Path:
    return trace.with_name(trace.name + SUFFIX)


def _code_key() -> str:
    """A digest of the code that builds the model input (a stale cache is never used)."""
    h = hashlib.sha256()
    for mod in _CODE:
        h.update(Path(str(mod.__file__)).read_bytes())
    return h.hexdigest()


def _source_key(trace: Path) -> list[Any]:
    """The trace file's size, mtime, inode and a SHA-256 of its bytes: a same-size edit with
    its mtime put back, or another file renamed over it, does not match."""
    with open(trace, "rb") as fh:
        st = os.fstat(fh.fileno())
        digest = hashlib.file_digest(fh, "sha256").hexdigest()
    return [st.st_size, st.st_mtime_ns, st.st_ino, digest]


def network_input(records: TraceRecords) -> dict[str, Any]:
    """What the mount layer of whatif needs from the records (see CachedInput.network)."""
    net = {i for i, (_, fstype) in enumerate(records.mounts)
           if network_forecast.kind_of(str(fstype))}
    done = sum(1 for r in records.requests.values() if r[R_END] >= 0) or len(records.requests)
    measured = records.trailer.get("network")
    if not net:
        return {"calls": [], "requests": done, "measured": measured}
    fuse = {i for i in net
            if network_forecast.kind_of(str(records.mounts[i][1])) == network_forecast.FUSE}
    bare = network_forecast.calls_of_records(records.syscalls, records.paths, net)
    roots = {i: str(records.mounts[i][0]).rstrip("/") for i in fuse}
    links = symlinks(bare, roots, live=TraceHeader.from_json(records.header).host
                     == socket.gethostname())
    calls = (network_forecast.calls_of_records(records.syscalls, records.paths, net, links)
             if links else bare)
    rows = fuse_symlinks.walks_per_call(calls)
    if rows:
        measured = {**(measured if isinstance(measured, dict) else {}), "symlink_walks": rows}
    return {"calls": calls, "requests": done, "measured": measured}


def symlinks(calls: list[network_forecast.NetCall], roots: dict[int, str], *,
             live: bool) -> fuse_symlinks.Symlinks:
    """The symlinks on the FUSE mounts (`roots`: mount → its mount point) among the calls'
    paths and their directories below the mount point: the ones the trace read with
    readlink, and with `live` (the trace was taken on this host) the ones `lstat` finds on
    the tree as it is now."""
    found = {m: set(v) for m, v in fuse_symlinks.symlinks_of_calls(
        ((c[1], c[2], c[3], c[4]) for c in calls), set(roots)).items()}
    if live:
        names: dict[str, int] = {}
        for c in calls:
            root = roots.get(c[1])
            if root is not None and c[3].startswith(root + "/"):
                p = c[3].rstrip("/")
                names.setdefault(p, c[1])
                for i in range(len(root) + 1, len(p)):
                    if p[i] == "/":
                        names.setdefault(p[:i], c[1])
        for p, m in list(names.items())[:LSTAT_AT_MOST]:
            try:
                if stat.S_ISLNK(os.lstat(p).st_mode):
                    found.setdefault(m, set()).add(p)
            except OSError:
                continue
    return {m: frozenset(v) for m, v in found.items() if v}


def new_input(records: TraceRecords, trace: Path) -> CachedInput:
    """The whole what-if input of a trace's records."""
    net = {i for i, (_, fstype) in enumerate(records.mounts)
           if network_forecast.kind_of(str(fstype))}
    return CachedInput(records.header, measured_per_request(records, trace),
                       replay_input.prepare(records),
                       latency_profile.from_records(records.syscalls, records.mounts, net),
                       network_input(records))


def _encode(cached: CachedInput, trace: Path) -> bytes:
    prep = cached.prep
    replay.merge_streams(prep)  # the first replay's merge, done once here
    fields = {f.name: getattr(prep, f.name) for f in dataclasses.fields(prep)}
    fields["fs"] = dict(vars(prep.fs))
    return marshal.dumps({"format": FORMAT, "version": VERSION, "code": _code_key(),
                          "source": _source_key(trace), "header": cached.header,
                          "measured": cached.measured, "prepared": fields,
                          "latency": cached.latency, "network": cached.network})


def _decode(data: Any, trace: Path) -> CachedInput | None:
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return None
    if (data.get("version") != VERSION or data.get("code") != _code_key()
            or data.get("source") != _source_key(trace)):
        return None
    fields = dict(data["prepared"])
    fs = FsView()
    fs.__dict__.update(fields.pop("fs"))
    prep = Prepared(fs=fs, **fields)
    return CachedInput(dict(data["header"]), dict(data["measured"]), prep, data["latency"],
                       dict(data["network"]))


def load(trace: Path) -> CachedInput | None:
    """The trace's cached model input, or None (no cache, a stale or unreadable one).

    The collector is paused while loading: a million small tuples, none cyclic, would
    otherwise trigger collections that cost many times the load itself."""
    with collector_paused():
        return _load(trace)


def _load(trace: Path) -> CachedInput | None:
    path = cache_path(trace)
    try:
        with open(path, "rb") as fh:
            if not trusted(os.fstat(fh.fileno())):
                return None
            data = marshal.loads(fh.read())  # marshal.load reads a file piece by piece: slow
        return _decode(data, trace)
    except (OSError, EOFError, ValueError, TypeError, KeyError):
        return None


def build(trace: Path) -> bool:
    """Build and keep the model input of a trace just written (the tracer calls this as the
    trace closes, so that the first `statstorm whatif` starts from the cache). False when
    the trace has nothing to replay (counts only, no PHP operations) or the cache cannot be
    written; never an error: `statstorm whatif` builds the input itself then."""
    try:
        records = read_records(trace)
        if TraceHeader.from_json(records.header).detail == Detail.COUNTS \
                or not records.operations:
            return False
        cached = new_input(records, trace)
    except (OSError, UsageError):
        return False
    return save(trace, cached)


def save(trace: Path, cached: CachedInput) -> bool:
    """Write the cache beside the trace (atomically); False if that is not possible (a
    read-only directory, say): the cache is an optimisation, never an error."""
    try:
        write_atomic(cache_path(trace), _encode(cached, trace), new_mode=0o644, durable=False)
    except (OSError, ValueError):
        return False
    return True


def measured_per_request(t: TraceRecords, path: Path) -> dict[str, float]:
    """The trace's own mean calls per request (`summarize_trace(trace).per_request`)."""
    if t.request_counts or t.count_rows:  # counts (kernel-counted, or an strace -c table): the full summary
        return {k: v for k, v in summarize_trace(read_trace(path)).per_request.items()
                if v is not None}
    calls = frozenset(CALLS)
    tally = Counter((s[S_REQ], s[S_CALL], s[S_RET] < 0) for s in t.syscalls
                    if s[S_CALL] in calls)
    per_req: dict[int, Counter[str]] = {}
    for (req, call, failed), n in tally.items():
        c = per_req.get(req)
        if c is None:
            c = per_req[req] = Counter()
        c[call] += n
        c["total"] += n
        if failed:
            c["failed"] += n
    ids = [i for i, r in t.requests.items() if r[R_END] >= 0 and i in per_req]
    if not ids and TraceHeader.from_json(t.header).source != TracerBackend.BPFTRACE:
        ids = [i for i in t.requests if i in per_req]
    n_req = len(ids)
    return {key: round(sum(per_req[i][key] for i in ids) / n_req, 3) if n_req else 0.0
            for key in SUMMARY_KEYS}
