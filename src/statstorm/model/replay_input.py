"""The replay's input: a trace turned into logical events per worker (`prepare`).

A trace holds syscalls and the PHP operations they belong to. The operations the model knows
(includes and their resolution, `file_exists`-style probes, path resolutions, stat-cache
clears, `.user.ini` scans) become logical events; their recorded syscalls are dropped and
the engine makes them again under the chosen settings. Every other recorded syscall (module
start-up, session files, fopen, the primary script's open…) is kept as it was.

The file system the engine sees (`FsView`) is built from the trace itself (model.replay_fs);
which operations are modelled, and which of their syscalls dropped, is model.replay_ops. The
input comes from the trace's raw records (`results.trace.raw`): no object per record.
"""

from __future__ import annotations

import operator
import posixpath
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from statstorm.errors import UsageError
from statstorm.model import open_basedir, php_versions, replay_cli, replay_fs, replay_ops
from statstorm.model.php_engine import CALL_INDEX
from statstorm.model.engine_events import E_CHDIR, E_CLEAR, E_INCLUDE, E_INI, E_PASS, E_PROBE, E_REALPATH, E_REQ, E_RESOLVE, E_USER_INI, Event
from statstorm.model.phpsettings import from_recorded
from statstorm.model.fs_view import FsView
from statstorm.model.realpath_cache import EXPAND, FILEPATH, REALPATH
from statstorm.model.replay_clock import epoch_ns as _epoch_ns, seconds as _seconds
from statstorm.model.replay_ops import fallback_dir
from statstorm.results.common import collector_paused
from statstorm.results.trace.raw import (O_ARGS, R_END, R_ID, R_PID, R_SCRIPT, R_START, S_CALL,
                                         S_KIND, S_OP, S_PATH, S_PID, S_REQ, S_RET, S_TS,
                                         TraceRecords, of_trace)
from statstorm.results.trace.vocabulary import Detail, Trace

MODES = {"expand": EXPAND, "filepath": FILEPATH, "realpath": REALPATH}


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
    wipes: int = 0  # realpath-cache wipes with no file name (model.replay_limits)
    start_s: int = 0
    merged: Any = None  # every worker's events in time order (built on first use)


def build_fs(trace: Trace | TraceRecords) -> FsView:
    """The file system as the trace saw it (see the module's docstring)."""
    t = trace if isinstance(trace, TraceRecords) else of_trace(trace)
    return replay_fs.from_records(t, replay_ops.scan(t).named)


def prepare(trace: Trace | TraceRecords) -> Prepared:
    """The model's input from a trace (see the module's docstring); from `read_records`
    (quickest) or a trace in memory."""
    with collector_paused():
        return _prepare(trace if isinstance(trace, TraceRecords) else of_trace(trace))


_NO_ARGS: dict[str, Any] = {}  # never changed
_G = 1_000_000_000
_TIME = operator.itemgetter(0)


def _prepare(t: TraceRecords) -> Prepared:
    head = t.head
    if head.detail == Detail.COUNTS or (not t.syscalls and t.request_counts):
        raise UsageError("this trace has counts only (recorded with --counts); record one "
                         "with `statstorm trace` without --counts to replay it")
    if not t.operations:
        raise UsageError("this trace has no PHP operations (an strace import or an old "
                         "trace); record it with `statstorm trace` (eBPF) to replay it")
    scan = replay_ops.scan(t)
    cut_cwds = replay_fs.cut_cwds(t)
    fs = replay_fs.from_records(t, scan.named, cut_cwds)
    epoch_ns = _epoch_ns(t)
    settings = head.settings
    single = head.target_mode == "cmd"
    arg = t.path
    pget = t.paths.get

    dropped = replay_ops.dropped(scan.roots, scan.children)
    resolve_of = scan.resolve_of

    # pid → [(trace ns, event)]: sorted by time at the end, a stable sort, so events at the
    # same ns stay in the order they were added (a request's start before them all)
    timeline: dict[int, list[tuple[int, Event]]] = defaultdict(list)
    requests = t.requests
    script_of = {r[R_ID]: r[R_SCRIPT] for r in requests.values()}

    # per-pid state while walking operations in time order
    cwd: dict[int, str] = {}
    recorded_ip = head.setting("include_path")
    inc_path: dict[int, str] = defaultdict(lambda: recorded_ip)
    rebuilt_ip = replay_ops.uncut_include_paths(t, recorded_ip)
    for s in t.syscalls:
        if s[S_CALL] == "getcwd" and s[S_RET] > 0 and s[S_PID] not in cwd:
            path = pget(s[S_PATH], "")
            if path not in cut_cwds:
                cwd[s[S_PID]] = path
    cwd0 = dict(cwd)  # each process's first cwd
    expands: set[tuple[int, int]] = set()  # (pid, start) of the script's expand_filepath calls
    pending_once: dict[int, bool] = {}
    primary_seen: set[int] = set()  # requests whose primary script was resolved
    # A command's search for its own binary (PHP_BINARY) runs in module start-up before
    # the ini settings are registered: realpath_cache_size is still 0 then.
    argv = head.target_cmd or [""]
    binary = replay_cli.php_binary(argv) if single else ""
    in_binary_search = bool(binary)
    user_ini: dict[tuple[int, int], list[str]] = defaultdict(list)
    user_ini_start: dict[tuple[int, int], int] = {}
    modeled = 0
    wipes = 0
    fallbacks: dict[tuple[Any, ...], str] = {}
    # the fallback directory of names without candidates, by (include_path, script): the
    # same for a run of includes, so looked up by name alone while they do not change
    by_dir: dict[tuple[str, str], dict[str, str]] = {}
    fb_ip = fb_script = None
    fb_names: dict[str, str] = {}
    ev: Event
    tl_pid, tl = None, []  # the last worker's timeline (a run of roots is often one worker's)
    chdirs = replay_ops.Chdirs(t, fs.canon, cut_cwds)
    for o in scan.roots:
        _, oid, req, pid, start, _, kind, _, a = o
        chdirs.advance(pid, start, cwd)
        if kind == "include" or kind == "include_resolve":
            in_binary_search = False
            if kind == "include_resolve":
                info = a
            else:
                kid = resolve_of.get(oid)
                info = kid[O_ARGS] if kid is not None else _NO_ARGS
            if info:
                v = info.get("cwd")
                if isinstance(v, int):
                    v = pget(v, "")
                if v and v not in cut_cwds:  # (a cut one: the cwd chdir calls left)
                    cwd[pid] = chdirs.physical(str(v))
                if "include_path" in info:
                    v = info.get("include_path")
                    if isinstance(v, int):
                        v = pget(v, "")
                    inc_path[pid] = replay_ops.uncut(str(v or ""), recorded_ip, rebuilt_ip)
            v = a.get("name", "")
            name = pget(v, "") if isinstance(v, int) else str(v)
            c = cwd.get(pid, "")
            ip = inc_path[pid]
            script = script_of.get(req, "")
            cands = info.get("candidates") if info else None
            if cands:
                last = pget(cands[-1], "") if type(cands) is list else str(cands[-1])
                fkey = (name, ip, script, last, len(cands))
                fallback = fallbacks.get(fkey)
                if fallback is None:
                    fallback = fallbacks[fkey] = fallback_dir(last, len(cands), name, ip,
                                                              script)
            else:
                if ip is not fb_ip or script is not fb_script:
                    fb_ip, fb_script = ip, script
                    fb_names = by_dir.setdefault((ip, script), {})
                fallback = fb_names.get(name)
                if fallback is None:
                    fallback = fb_names[name] = fallback_dir(None, 0, name, ip, script)
            if kind == "include_resolve" and req not in primary_seen and (
                    name == script_of.get(req)):
                # CGI/FPM: the primary script's resolution (its open is kept as traced)
                primary_seen.add(req)
                ev = (E_RESOLVE, req, name, c, ip, fallback)
            else:
                if kind == "include_resolve":
                    ev = (E_INCLUDE, req, name, True, c, ip, fallback)
                    pending_once[pid] = True
                else:
                    typ = a.get("type")
                    if typ == "once":
                        if pending_once.pop(pid, False):
                            continue
                        ev = (E_INCLUDE, req, name, True, c, ip, fallback)
                    elif typ == "main":
                        continue
                    else:
                        ev = (E_INCLUDE, req, name, False, c, ip, fallback)
        else:
            pending_once.pop(pid, None)
            if kind != "realpath" and kind != "main_script":
                in_binary_search = False
            if kind == "file_probe":
                v = a.get("name", "")
                name = pget(v, "") if isinstance(v, int) else str(v)
                c = cwd.get(pid, "")
                absp = name if name.startswith("/") else (posixpath.join(c, name) if c else name)
                func = a.get("func", "stat")
                ev = (E_PROBE, req, name, func if type(func) is str else str(func), absp, c)
            elif kind == "stat_cache_clear":
                v = a.get("name")
                if isinstance(v, int):
                    v = pget(v, "")
                ev = (E_CLEAR, req, bool(a.get("realpath")), str(v or ""))
                wipes += ev[2] and not ev[3]
            elif kind == "ini_set":
                ev = (E_INI, req)  # the script set its include_path itself
            elif kind == "user_ini":
                key = (pid, req)
                user_ini[key].append(arg(a.get("name", "")))
                user_ini_start.setdefault(key, start)
                modeled += 1
                continue
            else:
                path = arg(a.get("path", ""))
                if in_binary_search and posixpath.basename(path) != binary:
                    in_binary_search = False
                ev = (E_REALPATH, req, path, cwd.get(pid, ""),
                      MODES.get(str(a.get("mode", "realpath")), REALPATH), in_binary_search)
                if kind == "realpath" and ev[4] == FILEPATH:  # maybe fopen()'s (a check)
                    expands.add((pid, start))
        modeled += 1
        if pid != tl_pid:
            tl_pid, tl = pid, timeline[pid]
        tl.append((start, ev))
    # .user.ini: every request of a CGI/FPM worker checks its per-directory cache; a scan
    # is recorded only when it happened, so each request gets the check, with the
    # directories of a scan recorded for the same script directory
    scans: dict[str, tuple[str, ...]] = {}
    for (pid, req), dirs in user_ini.items():
        script_dir = posixpath.dirname(script_of.get(req, "")) or (dirs[-1] if dirs else "")
        scans.setdefault(script_dir, tuple(dirs))
    if not single:
        for r in requests.values():
            d = posixpath.dirname(r[R_SCRIPT])
            if d in scans:
                at = user_ini_start.get((r[R_PID], r[R_ID]), r[R_START] + 1)
                timeline[r[R_PID]].append((at, (E_USER_INI, r[R_ID], d, scans[d])))
    else:
        for (pid, req), dirs in user_ini.items():
            script_dir = posixpath.dirname(script_of.get(req, "")) or (dirs[-1] if dirs else "")
            timeline[pid].append((user_ini_start[(pid, req)],
                                  (E_USER_INI, req, script_dir, tuple(dirs))))

    # the PHP scripts the trace saw included (for revalidation stats outside operations)
    scripts = scan.scripts
    scripts.update(pget(sc[S_PATH], "") for sc in t.syscalls
                   if (sc[S_KIND] == "include" or sc[S_KIND] == "include_resolve")
                   and sc[S_RET] >= 0)
    first_include = scan.first_include  # request → start of its first include
    kept, rec = 0, from_recorded(settings)
    if rec.opcache and not rec.opcache_revalidate_path and rec.opcache_file_update_protection:
        for path, made in replay_fs.recompiled(t).items():
            fs.created[path] = sorted(fs.created.get(path, []) + [made])
    opc_skip, opc_sem, opc_script = replay_ops.cli_opcache_calls(
        t, single and rec.opcache, php_versions.mechanisms(
            head.php.version).opcache_lock_file_open)
    compiled_fstats = replay_ops.compile_fstats(t, dropped)
    chdir_calls: list[tuple[int, int, int, str, bool]] = []
    # OPcache's chdir() fetches the new cwd (the engine makes that getcwd; with revalidate_path
    # no key by the name: no cwd). CLI only: php-fpm's own chdir() is not told from a script's
    opc_chdir, opc_keys = rec.opcache and single, rec.opcache and not rec.opcache_revalidate_path
    after_chdir: set[int] = set()  # processes whose last call was a chdir
    for s in t.syscalls:
        _, ts, pid, req, op, call, _, path_id, ret, _, _, skind = s
        if opc_skip and (call == "open" or call == "fstat") and (ts, pid, call) in opc_skip:
            continue
        if compiled_fstats and call == "fstat" and (ts, pid) in compiled_fstats:
            continue
        if after_chdir and pid in after_chdir:
            after_chdir.discard(pid)
            if opc_chdir and call == "getcwd" and op < 0:
                continue
        if op in dropped or call not in CALL_INDEX:
            if call == "chdir" and skind != "startup":
                chdir_calls.append((pid, ts, req, pget(path_id, ""), ret == 0))
                # PHP's chdir() forgets relative stat-cache keys when it succeeds
                timeline[pid].append((ts, (E_CHDIR, req, ret == 0, single)))
                after_chdir.add(pid)
            continue
        path = pget(path_id, "")
        if skind == "opcache_revalidate" and op < 0 and (
                path in scripts or (path == script_of.get(req) and not single
                                    and ts < first_include.get(req, 1 << 62))):
            # a *_once's revalidation (OPcache compiles it outside compile_filename), or
            # php-fpm's primary script's (before its first include; a later stat of it is
            # the application's, e.g. getlastmod()): the engine makes them; with
            # enable_file_override it may be a probe's that OPcache answered (no operation)
            if rec.opcache_enable_file_override and path in scripts:
                timeline[pid].append((ts, (E_PASS, req, call, path, ret < 0, "revalidate")))
            continue
        if call == "getcwd" and op < 0 and (skind == "other" or skind == "main_script"):
            ev = (E_PASS, req, call, path, ret < 0, True)  # maybe OPcache's cwd (see below)
        else:
            ev = (E_PASS, req, call, path, ret < 0)
        timeline[pid].append((ts, ev))
        kept += 1

    first_request: dict[int, int] = {}
    if single:
        first_request = replay_cli.cli_request(
            timeline, argv, opc_keys, opc_skip, opc_sem, opc_script)
    else:
        # each request's start goes first among its worker's events at the same ns
        starts: dict[int, list[tuple[int, Event]]] = {}
        for r in requests.values():
            pid = r[R_PID]
            starts.setdefault(pid, []).append((r[R_START], (E_REQ, r[R_ID], r[R_SCRIPT])))
            first_request[pid] = min(first_request.get(pid, r[R_START]), r[R_START])
        for pid, entries in starts.items():
            timeline[pid] = entries + timeline[pid]

    basedirs = open_basedir.entries(head.setting("open_basedir"))
    if not basedirs:  # PHP's chdir() checks the path against a proposed open_basedir
        for pid, ts, ev in open_basedir.chdir_checks(chdirs.before(chdir_calls, cwd0), single):
            timeline[pid].append((ts - 1, ev))
    streams: dict[int, tuple[list[Event], list[int], list[int]]] = {}
    total = 0
    epoch_s = epoch_ns // _G
    for pid, tl in timeline.items():
        tl.sort(key=_TIME)
        if basedirs:  # the recorded checks outside includes and probes, one event each
            tl = open_basedir.group(tl, basedirs)
        elif expands:  # fopen() and the like check the path against a proposed one
            tl = open_basedir.fopen_checks(tl, {ns for p, ns in expands if p == pid})
        if rec.opcache:
            tl = replay_ops.opcache_events(tl, opc_keys, rec.opcache_enable_file_override)
        evs = [x[1] for x in tl]
        ns = [x[0] for x in tl]
        streams[pid] = (evs, _seconds(ns, epoch_ns), ns)
        total += len(evs)
    counted = [r[R_ID] for r in requests.values() if r[R_END] >= 0]
    if not counted and single:
        counted = [0]
    prep = Prepared(fs, streams, counted, first_request, t.mounts, total, modeled, kept,
                    recorded_ip, rec.max_requests, rec.workers)
    prep.start_s = epoch_s
    prep.wipes = wipes
    for (pid, req), dirs in user_ini.items():
        d = posixpath.dirname(script_of.get(req, "")) or (dirs[-1] if dirs else "")
        prep.user_ini_scanned.setdefault(pid, set()).add(d)
    if not single:
        prep.preexisting = set(head.target_pids)
        for sc in t.syscalls:
            skind = sc[S_KIND]
            if skind == "opcache_revalidate" and pget(sc[S_PATH], "") not in prep.revalidated:
                # the window is checked against the request's time, not the call's
                rq = requests.get(sc[S_REQ])
                at = rq[R_START] if rq is not None else sc[S_TS]
                prep.revalidated[pget(sc[S_PATH], "")] = (epoch_ns + max(at, 0)) // _G
            elif skind == "include" and sc[S_CALL] == "open" and sc[S_RET] >= 0:
                prep.compiled.add(pget(sc[S_PATH], ""))
            elif sc[S_CALL] == "lstat" and sc[S_RET] >= 0 and sc[S_OP] in dropped:
                # a resolution PHP made (not one of SQLite's own walks, say)
                prep.lstatted.setdefault(sc[S_PID], set()).add(pget(sc[S_PATH], ""))
    return prep
