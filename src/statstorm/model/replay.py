"""Replay a trace's PHP operations through the what-if engine (`model.phpmodel`).

A trace holds syscalls and the PHP operations they belong to. The operations the model knows
(includes and their resolution, `file_exists`-style probes, path resolutions, stat-cache
clears, `.user.ini` scans) become logical events; their recorded syscalls are dropped and
the engine makes them again under the chosen settings. Every other recorded syscall (module
start-up, session files, fopen, the primary script's open…) is kept as it was.

The file system the engine sees (`FsView`) is built from the trace itself: every path that
a call found or did not find, every symlink read, with each symlink's target taken from the
next `lstat` of the same resolution.
"""

from __future__ import annotations

import datetime as dt
import heapq
import posixpath
from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Any

from statstorm.errors import UsageError
from statstorm.model.phpmodel import (CALL_INDEX, E_CLEAR, E_INCLUDE, E_PASS, E_PROBE,
                                      E_REALPATH, E_REQ, E_RESOLVE, E_USER_INI, NCALLS, Engine,
                                      Event, Tally)
from statstorm.model.phpsettings import PhpSettings, from_recorded
from statstorm.model.realpath_cache import DIR, EXPAND, FILE, FILEPATH, LINK, MISSING, REALPATH, FsView
from statstorm.results.common import collector_paused
from statstorm.results.trace import CALLS, SUMMARY_KEYS, Operation, Trace

MODES = {"expand": EXPAND, "filepath": FILEPATH, "realpath": REALPATH}
ENOENT, ENOTDIR = -2, -20
MODELED_KINDS = ("include", "include_resolve", "file_probe", "stat_cache_clear", "user_ini")


@dataclass
class Prepared:
    """A trace turned into model input (built once, replayed under several settings)."""

    fs: FsView
    # pid → (events, wall-clock seconds, trace ns)
    streams: dict[int, tuple[list[Event], list[int], list[int]]]
    counted: list[int]  # request ids that count (finished)
    first_request: dict[int, int]  # pid → start of its first request (ns), for ordering
    mounts: list[tuple[str, str]]
    events: int = 0
    modeled_ops: int = 0
    kept_syscalls: int = 0
    include_path: str = ""  # as recorded in the header
    max_requests: int = 0  # pm.max_requests as recorded
    workers: int = 0  # pm.max_children as recorded
    # A running pool (not a command): its workers were warm when the trace began.
    preexisting: set[int] = field(default_factory=set)  # PIDs running at the start
    revalidated: dict[str, int] = field(default_factory=dict)  # script → first revalidation (s)
    compiled: set[str] = field(default_factory=set)  # scripts opened by an include (compiled)
    lstatted: dict[int, set[str]] = field(default_factory=dict)  # pid → paths it lstat()ed
    user_ini_scanned: dict[int, set[str]] = field(default_factory=dict)  # pid → script dirs
    start_s: int = 0
    merged: Any = None  # every worker's events in time order (built on first use)


@dataclass
class ReplayResult:
    settings: PhpSettings
    requests: int
    per_request: dict[str, float]
    workers: int
    cache_bytes_peak: int  # the largest realpath cache of any worker
    cache_bytes_mean: float  # mean over workers of each one's peak
    cache_bytes_final: int = 0  # the largest realpath_cache_size() at the end of the replay
    by_mount: dict[tuple[int, int, bool], int] = field(default_factory=dict)


def _epoch_ns(trace: Trace) -> int:
    """Wall-clock ns of the trace's time 0: recorded by the tracer, else the header's
    `created` (1 s resolution, taken a little before time 0)."""
    t0 = trace.trailer.get("t0_wall_ns")
    if isinstance(t0, int) and t0 > 0:
        return t0
    try:
        return int(dt.datetime.fromisoformat(str(trace.header.get("created"))).timestamp()
                   ) * 1_000_000_000
    except ValueError:
        return 0


def build_fs(trace: Trace) -> FsView:
    fs = FsView()
    by_op: dict[tuple[int, int], list[Any]] = defaultdict(list)
    for s in trace.syscalls:
        path = s.path
        if not path.startswith("/"):
            continue
        if s.call == "readlink":
            by_op[(s.pid, s.op)].append(s)
            continue
        if s.call in ("lstat", "stat", "access", "open"):
            if s.ret >= 0:
                fs.observe(path, FILE, s.ts_ns)
            elif s.ret in (ENOENT, ENOTDIR):
                fs.observe(path, MISSING, s.ts_ns)
        elif s.call == "getcwd" and s.ret > 0:
            fs.observe(path, DIR)
        if s.call == "lstat":
            by_op[(s.pid, s.op)].append(s)
    # symlinks: readlink(P) ok, then the next lstat of the same resolution is the target
    for calls in by_op.values():
        for i, s in enumerate(calls):
            if s.call != "readlink" or s.ret < 0:
                continue
            nxt = next((c for c in calls[i + 1:] if c.call == "lstat"), None)
            if nxt is None:
                continue
            parent = posixpath.dirname(s.path)
            target = nxt.path
            if target.startswith(parent.rstrip("/") + "/"):
                target = target[len(parent.rstrip("/")) + 1:]
            fs.observe_link(s.path, target)
    # A script an include named (absolutely) exists unless a call found it missing: with
    # OPcache answering from its key the trace has no call on it at all.
    named = [str(o.args.get("name", "")) for o in trace.operations.values()
             if o.kind in ("include", "include_resolve")]
    named += [r.script for r in trace.requests.values()]  # the primary scripts, likewise
    for name in named:
        if name.startswith("/") and name not in fs.types:
            fs.observe(name, FILE)
    fs.finish()
    return fs


def _descendants(children: dict[int, list[Operation]], roots: set[int]) -> set[int]:
    out = set()
    stack = list(roots)
    while stack:
        i = stack.pop()
        if i in out:
            continue
        out.add(i)
        stack.extend(c.id for c in children.get(i, ()))
    return out


def prepare(trace: Trace) -> Prepared:
    """The model's input from a trace (see the module's docstring)."""
    with collector_paused():
        return _prepare(trace)


def _prepare(trace: Trace) -> Prepared:
    if trace.header.get("detail") == "counts" or (not trace.syscalls and trace.request_counts):
        raise UsageError("this trace has counts only (recorded with --counts); record one "
                         "with `statstorm trace` without --counts to replay it")
    if not trace.operations:
        raise UsageError("this trace has no PHP operations (an strace import or an old "
                         "trace); record it with `statstorm trace` (eBPF) to replay it")
    fs = build_fs(trace)
    epoch_ns = _epoch_ns(trace)
    settings = trace.header.get("settings", {})
    single = trace.header.get("targets", {}).get("mode") == "cmd"
    ops = trace.operations
    children: dict[int, list[Operation]] = defaultdict(list)
    for o in ops.values():
        if o.parent >= 0:
            children[o.parent].append(o)

    # which operations become logical events
    roots: set[int] = set()
    for o in ops.values():
        if o.parent >= 0 and o.parent in ops:
            continue
        if o.kind in MODELED_KINDS or (o.kind in ("realpath", "main_script") and "path" in o.args):
            roots.add(o.id)
    dropped = _descendants(children, roots)

    timeline: dict[int, list[tuple[int, int, Event]]] = defaultdict(list)
    seq = 0
    requests = trace.requests
    script_of = {r.id: r.script for r in requests.values()}

    # per-pid state while walking operations in time order
    cwd: dict[int, str] = {}
    inc_path: dict[int, str] = defaultdict(lambda: str(settings.get("include_path", "")))
    for s in trace.syscalls:
        if s.call == "getcwd" and s.ret > 0 and s.pid not in cwd:
            cwd[s.pid] = s.path
    pending_once: dict[int, bool] = {}
    primary_seen: set[int] = set()  # requests whose primary script was resolved
    # A command's search for its own binary (PHP_BINARY) runs in module start-up before
    # the ini settings are registered: realpath_cache_size is still 0 then.
    argv = trace.header.get("targets", {}).get("cmd") or [""]
    binary = posixpath.basename(str(argv[0])) if single else ""
    in_binary_search = bool(binary)
    user_ini: dict[tuple[int, int], list[str]] = defaultdict(list)
    user_ini_start: dict[tuple[int, int], int] = {}
    modeled = 0
    for o in sorted((ops[i] for i in roots), key=lambda o: (o.start_ns, o.id)):
        a = o.args
        pid = o.pid
        ev: Event | None = None
        if o.kind == "include_resolve" or o.kind == "include":
            in_binary_search = False
            kid = next((c for c in children.get(o.id, ()) if c.kind == "include_resolve"), None)
            info = a if o.kind == "include_resolve" else (kid.args if kid else {})
            if info.get("cwd"):
                cwd[pid] = str(info["cwd"])
            if "include_path" in info:
                inc_path[pid] = str(info.get("include_path") or "")
            name = str(a.get("name", ""))
            c = cwd.get(pid, "")
            ip = inc_path[pid]
            fallback = _fallback(info, name, ip, script_of.get(o.req, ""))
            if o.kind == "include_resolve" and o.req not in primary_seen and (
                    name == script_of.get(o.req)):
                # CGI/FPM: the primary script's resolution (its open is kept as traced)
                primary_seen.add(o.req)
                ev = (E_RESOLVE, o.req, name, c, ip, fallback)
            elif o.kind == "include_resolve":
                ev = (E_INCLUDE, o.req, name, True, c, ip, fallback)
                pending_once[pid] = True
            elif a.get("type") == "once":
                if pending_once.pop(pid, False):
                    continue
                ev = (E_INCLUDE, o.req, name, True, c, ip, fallback)
            elif a.get("type") == "main":
                continue
            else:
                ev = (E_INCLUDE, o.req, name, False, c, ip, fallback)
        else:
            pending_once.pop(pid, None)
            if o.kind != "realpath" and o.kind != "main_script":
                in_binary_search = False
            if o.kind == "file_probe":
                name = str(a.get("name", ""))
                c = cwd.get(pid, "")
                absp = name if name.startswith("/") else (posixpath.join(c, name) if c else name)
                ev = (E_PROBE, o.req, name, str(a.get("func", "stat")), absp, c)
            elif o.kind == "stat_cache_clear":
                ev = (E_CLEAR, o.req, bool(a.get("realpath")), str(a.get("name") or ""))
            elif o.kind == "user_ini":
                key = (pid, o.req)
                user_ini[key].append(str(a.get("name", "")))
                user_ini_start.setdefault(key, o.start_ns)
                modeled += 1
                continue
            else:
                path = str(a.get("path", ""))
                if in_binary_search and posixpath.basename(path) != binary:
                    in_binary_search = False
                ev = (E_REALPATH, o.req, path, cwd.get(pid, ""),
                      MODES.get(str(a.get("mode", "realpath")), REALPATH), in_binary_search)
        modeled += 1
        timeline[pid].append((o.start_ns, seq, ev))
        seq += 1
    # .user.ini: every request of a CGI/FPM worker checks its per-directory cache; a scan
    # is recorded only when it happened, so each request gets the check, with the
    # directories of a scan recorded for the same script directory
    scans: dict[str, tuple[str, ...]] = {}
    for (pid, req), dirs in user_ini.items():
        script_dir = posixpath.dirname(script_of.get(req, "")) or (dirs[-1] if dirs else "")
        scans.setdefault(script_dir, tuple(dirs))
    if not single:
        for r in requests.values():
            d = posixpath.dirname(r.script)
            if d in scans:
                at = user_ini_start.get((r.pid, r.id), r.start_ns + 1)
                timeline[r.pid].append((at, seq, (E_USER_INI, r.id, d, scans[d])))
                seq += 1
    else:
        for (pid, req), dirs in user_ini.items():
            script_dir = posixpath.dirname(script_of.get(req, "")) or (dirs[-1] if dirs else "")
            timeline[pid].append((user_ini_start[(pid, req)], seq,
                                  (E_USER_INI, req, script_dir, tuple(dirs))))
            seq += 1

    # the PHP scripts the trace saw included (for revalidation stats outside operations)
    scripts = {str(o.args.get("name", "")) for o in ops.values() if o.kind == "include"}
    scripts.update(sc.path for sc in trace.syscalls
                   if sc.kind in ("include", "include_resolve") and sc.ret >= 0)
    first_include: dict[int, int] = {}  # request → start of its first include
    for o in ops.values():
        if o.kind == "include" and o.start_ns < first_include.get(o.req, 1 << 62):
            first_include[o.req] = o.start_ns
    kept = 0
    for s in trace.syscalls:
        if s.op in dropped or s.call not in CALL_INDEX:
            continue
        if s.kind == "opcache_revalidate" and s.op < 0 and (
                s.path in scripts or (s.path == script_of.get(s.req) and not single
                                      and s.ts_ns < first_include.get(s.req, 1 << 62))):
            # a *_once's revalidation (OPcache compiles it outside compile_filename), or
            # php-fpm's primary script's (before its first include; a later stat of it is
            # the application's, e.g. getlastmod()): the engine makes them
            continue
        ev = (E_PASS, s.req, s.call, s.path, s.ret < 0)
        if s.call == "getcwd" and s.op < 0 and s.kind == "other":
            ev = ev + (True,)  # maybe OPcache's cwd for a relative key (see below)
        timeline[s.pid].append((s.ts_ns, seq, ev))
        seq += 1
        kept += 1

    first_request: dict[int, int] = {}
    if single:
        # A relative primary script: OPcache fetches the cwd for its key (a getcwd right
        # after the script's own path resolution, in no operation). The engine makes that
        # call, so a recorded one goes.
        primary = _script_arg([str(a) for a in argv])
        rel = "relative" if primary and not primary.startswith("/") else ""
        if rel and from_recorded(settings).opcache:
            for pid, tl in timeline.items():
                tl.sort(key=lambda x: (x[0], x[1]))
                seen_expand = False
                for i, (_, _, ev) in enumerate(tl):
                    if ev[0] == E_REALPATH and ev[4] == FILEPATH:
                        seen_expand = True
                    elif seen_expand and ev[0] == E_PASS and ev[2] == "getcwd":
                        del tl[i]
                        break
                    elif seen_expand and ev[0] != E_PASS:
                        break
        for pid, tl in timeline.items():
            t0 = min(t for t, _, _ in tl) if tl else 0
            tl.append((t0 - 1, -1, (E_REQ, 0, rel)))
            first_request[pid] = t0
    else:
        for r in requests.values():
            if r.pid in timeline or r.id in script_of:
                timeline[r.pid].append((r.start_ns, -1, (E_REQ, r.id, r.script)))
                first_request[r.pid] = min(first_request.get(r.pid, r.start_ns), r.start_ns)

    streams: dict[int, tuple[list[Event], list[int], list[int]]] = {}
    total = 0
    for pid, tl in timeline.items():
        tl.sort(key=lambda x: (x[0], x[1]))
        # OPcache fetches the cwd once per request for its first relative key, just before
        # the include: the engine makes that call itself, so the recorded one goes
        tl = [x for i, x in enumerate(tl) if not (
            len(x[2]) == 6 and i + 1 < len(tl) and tl[i + 1][2][0] == E_INCLUDE
            and not str(tl[i + 1][2][2]).startswith("/"))]
        evs = [e for _, _, e in tl]
        ns = [t for t, _, _ in tl]
        times = [(epoch_ns + max(t, 0)) // 1_000_000_000 for t in ns]
        streams[pid] = (evs, times, ns)
        total += len(evs)
    counted = [r.id for r in requests.values() if r.end_ns >= 0]
    if not counted and single:
        counted = [0]
    rec = from_recorded(settings)
    prep = Prepared(fs, streams, counted, first_request, trace.mounts, total, modeled, kept,
                    str(settings.get("include_path", "")), rec.max_requests, rec.workers)
    prep.start_s = epoch_ns // 1_000_000_000
    for (pid, req), dirs in user_ini.items():
        d = posixpath.dirname(script_of.get(req, "")) or (dirs[-1] if dirs else "")
        prep.user_ini_scanned.setdefault(pid, set()).add(d)
    if not single:
        prep.preexisting = {int(p) for p in trace.header.get("targets", {}).get("pids", [])}
        for sc in trace.syscalls:
            if sc.kind == "opcache_revalidate" and sc.path not in prep.revalidated:
                # the window is checked against the request's time, not the call's
                rq = requests.get(sc.req)
                at = rq.start_ns if rq is not None else sc.ts_ns
                prep.revalidated[sc.path] = (epoch_ns + max(at, 0)) // 1_000_000_000
            elif sc.kind == "include" and sc.call == "open" and sc.ret >= 0:
                prep.compiled.add(sc.path)
            elif sc.call == "lstat" and sc.ret >= 0 and sc.op in dropped:
                # a resolution PHP made (not one of SQLite's own walks, say)
                prep.lstatted.setdefault(sc.pid, set()).add(sc.path)
    return prep


def _script_arg(argv: list[str]) -> str:
    """The script of a `php [options] script.php` command line ('' if none)."""
    i = 1
    while i < len(argv):
        a = argv[i]
        if a in ("-d", "-c", "-z"):
            i += 2
            continue
        if a == "--":
            return argv[i + 1] if i + 1 < len(argv) else ""
        if not a.startswith("-"):
            return a
        i += 1
    return ""


_ENTRIES: dict[str, int] = {}
_DIRS: dict[str, str] = {}


def _fallback(info: dict[str, Any], name: str, include_path: str, script: str) -> str:
    """The including script's directory, php_resolve_path's last try."""
    cands = info.get("candidates")
    if cands:
        n = _ENTRIES.get(include_path)
        if n is None:
            n = _ENTRIES[include_path] = len([e for e in include_path.split(":")
                                              if "://" not in e])
        if len(cands) == n + 1 and str(cands[-1]).endswith("/" + name):
            return str(cands[-1])[: -len(name) - 1]
    d = _DIRS.get(script)
    if d is None:
        d = _DIRS[script] = posixpath.dirname(script) if script else ""
    return d


def mount_lookup(mounts: list[tuple[str, str]]) -> Any:
    order = sorted(((m, i) for i, (m, _) in enumerate(mounts)), key=lambda x: -len(x[0]))

    def of(path: str) -> int:
        for mp, idx in order:
            if path == mp or path.startswith(mp.rstrip("/") + "/"):
                return idx
        return -1
    return of


def replay(prep: Prepared, settings: PhpSettings) -> ReplayResult:
    """The calls PHP would make for the trace under `settings`."""
    with collector_paused():
        return _replay(prep, settings)


def _replay(prep: Prepared, settings: PhpSettings) -> ReplayResult:
    eng = Engine(settings, prep.fs, mount_lookup(prep.mounts), set(prep.counted))
    eng.recorded_include_path = prep.include_path
    pids = worker_order(prep)
    regroup = settings.workers and (settings.workers != prep.workers or (
        prep.max_requests and settings.max_requests != prep.max_requests))
    if regroup and not _single(prep):
        # Requests dealt over `workers` model workers in the order they started: for another
        # pool size, or when the traced workers were recycled (a recycled worker's
        # successor is another PID) and the proposed recycling differs.
        blocks = _request_blocks(prep)
        for i, (evs, times, ns) in enumerate(blocks):
            eng.run(i % settings.workers, evs, times, ns)
    else:
        if prep.preexisting:
            _warm_up(eng, prep, pids)
        if len(pids) == 1:
            evs, times, ns = prep.streams[pids[0]]
            eng.run(pids[0], evs, times, ns)
        else:
            wids, evs, times, ns = merge_streams(prep, pids)
            eng.run_many(wids, evs, times, ns)
    n = len(prep.counted)
    per_request: dict[str, float] = {}
    sums = [0] * (2 * NCALLS)
    for rid in prep.counted:
        c = eng.tally.per_req.get(rid)
        if c is None:
            continue
        for i in range(2 * NCALLS):
            sums[i] += c[i]
    total = failed = 0
    for i, call in enumerate(CALLS):
        v = sums[2 * i] + sums[2 * i + 1]
        per_request[call] = round(v / n, 3) if n else 0.0
        total += v
        failed += sums[2 * i + 1]
    per_request["total"] = round(total / n, 3) if n else 0.0
    per_request["failed"] = round(failed / n, 3) if n else 0.0
    workers = eng.all_workers()
    peaks = [w.peak_bytes for w in workers]
    by_mount = dict(eng.tally.by_mount)  # calls of counted requests
    return ReplayResult(settings, n, {k: per_request[k] for k in SUMMARY_KEYS}, len(workers),
                        max(peaks, default=0), sum(peaks) / len(peaks) if peaks else 0.0,
                        max((w.cache.used for w in workers), default=0), by_mount)


def worker_order(prep: Prepared) -> list[int]:
    """The traced workers in the order their first requests started."""
    return sorted(prep.streams, key=lambda p: (prep.first_request.get(p, 0), p))


def merge_streams(prep: Prepared, pids: list[int] | None = None) -> tuple[
        list[int], list[Event], list[int], list[int]]:
    """Every worker's events in one time-ordered stream, merged once and kept in `prep`
    (replays under several settings, and the input cache, share it)."""
    pids = worker_order(prep) if pids is None else pids
    if prep.merged is None or prep.merged[0] != pids:
        prep.merged = (pids, _merged(prep, pids))
    return prep.merged[1]  # type: ignore[no-any-return]


def _merged(prep: Prepared, pids: list[int]) -> tuple[list[int], list[Event], list[int],
                                                     list[int]]:
    """Every worker's events in one time-ordered stream."""
    merged = heapq.merge(*[[(n, i, pid, e, t) for i, (e, t, n) in enumerate(zip(*prep.streams[pid]))]
                           for pid in pids])
    wids: list[int] = []
    evs: list[Event] = []
    times: list[int] = []
    ns: list[int] = []
    for n, _, pid, e, t in merged:
        wids.append(pid)
        evs.append(e)
        times.append(t)
        ns.append(n)
    return wids, evs, times, ns


def _warm_up(eng: Engine, prep: Prepared, pids: list[int]) -> None:
    """The workers of a running pool were warm when the trace began: run each one's events
    once, uncounted, so its realpath, stat and .user.ini caches hold its working set, and
    OPcache holds every script the trace did not see compiled. Each script's revalidation
    window is then set so that it first expires when the trace saw it expire (never, for
    a script the trace never revalidated)."""
    real = eng.tally
    eng.tally = Tally()
    eng._req = -2
    warm = [pid for pid in pids if pid in prep.preexisting]
    settings = eng.s
    if settings.opcache:  # the pool's scripts are in OPcache's shared memory
        for pid in warm:
            evs, times, ns = prep.streams[pid]
            eng.run(pid, evs, times, ns)
    # each worker has resolved every path of its requests before (as without OPcache: its
    # own first requests, revalidations)
    eng.s = replace(settings, opcache=False)
    for pid in warm:
        evs, times, ns = prep.streams[pid]
        eng.run(pid, evs, times, ns)
        w = eng.workers[pid]
        w.requests = 0
        # ... except what the trace saw it lstat(): that was not cached yet; and the same
        # for the .user.ini scans it saw
        for path in prep.lstatted.get(pid, ()):
            w.cache.delete(path)
        for d in prep.user_ini_scanned.get(pid, ()):
            w.user_ini.pop(d, None)
    eng.s = settings
    eng.tally = real
    eng._req = -2  # the next event picks its counter in the real tally
    eng._req = -2  # force a fresh per-request counter on the next event
    for script in list(eng.opc_scripts):
        if script in prep.compiled:
            del eng.opc_scripts[script]
            continue
        first = prep.revalidated.get(script)
        if first is not None:
            eng.opc_scripts[script] = first - 1
        elif eng.s.opcache_validate_timestamps and not eng.s.opcache_revalidate_freq:
            eng.opc_scripts[script] = prep.start_s - 1
        else:
            eng.opc_scripts[script] = 1 << 62 if prep.revalidated or prep.compiled else (
                prep.start_s - 1)
    eng.opc_keys = {k: v for k, v in eng.opc_keys.items() if v in eng.opc_scripts}
    for w in eng.workers.values():
        w.peak_bytes = w.cache.used


def _single(prep: Prepared) -> bool:
    return len(prep.counted) <= 1


def _request_blocks(prep: Prepared) -> list[tuple[list[Event], list[int], list[int]]]:
    """Each worker's stream cut at its request starts, all blocks in start order."""
    blocks: list[tuple[int, list[Event], list[int], list[int]]] = []
    for evs, times, ns in prep.streams.values():
        cur: list[Event] = []
        cur_t: list[int] = []
        cur_ns: list[int] = []
        start = ns[0] if ns else 0
        for ev, t, n in zip(evs, times, ns):
            if ev[0] == E_REQ and cur:
                blocks.append((start, cur, cur_t, cur_ns))
                cur, cur_t, cur_ns, start = [], [], [], n
            cur.append(ev)
            cur_t.append(t)
            cur_ns.append(n)
        if cur:
            blocks.append((start, cur, cur_t, cur_ns))
    blocks.sort(key=lambda b: b[0])
    return [(b[1], b[2], b[3]) for b in blocks]


__all__ = ["Prepared", "ReplayResult", "prepare", "replay", "build_fs", "LINK"]
