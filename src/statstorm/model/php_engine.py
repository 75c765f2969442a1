"""The what-if engine: PHP's include resolution, OPcache, stat family and workers, as pure code.

Input is a stream of logical events per traced process (built from a trace by
`model.replay`); output is the syscalls PHP would make under `PhpSettings`, counted per
request and per mount. One `Engine` is one php-fpm master (or one CLI run): OPcache's shared
memory and revalidation windows are shared by all its workers; each worker has its own
realpath cache, stat cache and included-files table.
"""

from __future__ import annotations

import bisect
import posixpath
from dataclasses import dataclass, field
from typing import Any, Callable

from statstorm.model import include_resolution, open_basedir, php_versions, stat_family, user_ini
from statstorm.model.engine_events import (E_CHDIR, E_CLEAR, E_INCLUDE, E_INI, E_OPC_CLI,
                                           E_PASS, E_PROBE, E_REALPATH, E_REQ, E_RESOLVE,
                                           E_USER_INI, PROBE_ONCE, Event)
from statstorm.model.open_basedir import E_BASEDIR
from statstorm.model.phpsettings import PhpSettings
from statstorm.model.fs_view import FsView
from statstorm.model.realpath_cache import FILEPATH, REALPATH, RealpathCache, Resolver
from statstorm.model.replay_tally import Tally
from statstorm.results.trace.vocabulary import CALLS

CALL_INDEX = {c: i for i, c in enumerate(CALLS)}
NCALLS = len(CALLS)
_SLOT = {c: 2 * i for i, c in enumerate(CALLS)}  # call → its slot in a per-request counter
assert NCALLS <= 8  # a tally code keeps the slot (call index and failed) in 4 bits

OVERRIDE_FUNCS = frozenset(("file_exists", "is_file", "is_readable"))



@dataclass
class Worker:
    cache: RealpathCache
    resolver: Resolver
    requests: int = 0
    stat_file: str | None = None
    lstat_file: str | None = None
    included: set[str] = field(default_factory=set)
    opc_cwd: bool = False  # OPcache fetched the cwd for this request's relative keys
    own_ip: bool = False  # the script set its include_path in this request
    request_time: int = 0  # the current request's start (s): PHP's request time
    user_ini: dict[str, int] = field(default_factory=dict)  # script dir → expires
    peak_bytes: int = 0


class Engine:
    def __init__(self, settings: PhpSettings, fs: FsView,
                 mount_of: Callable[[str], int] | None = None,
                 counted: set[int] | None = None) -> None:
        self.counted = counted
        self._counting = True
        self.s = settings
        self.fs = fs
        self.mount_of = mount_of or (lambda p: -1)
        self._mount_memo: dict[str, int] = {}  # path → (mount index + 1) << 4
        self.tally: Tally = Tally()
        self.workers: dict[int, Worker] = {}
        self.retired: list[Worker] = []
        self.opc_keys: dict[Any, str] = {}  # OPcache key → script (real path)
        self.opc_scripts: dict[str, int] = {}  # script → revalidate at (s)
        self.opc_names: dict[tuple[str, str], Any] = {}  # (relative name, cwd) → its key
        self._req = -1
        self._counts: list[int] = [0] * (2 * NCALLS)
        self._now = 0
        self.basedirs = open_basedir.entries(settings.open_basedir)
        # what the PHP version modelled does differently (model/php_versions.py)
        mech = php_versions.mechanisms(settings.php_version)
        self.lock_file_open = mech.opcache_lock_file_open
        self.lstat_fills_stat = mech.lstat_fills_stat_cache
        self.compile_clears_stat = mech.compile_clears_stat_cache
        self.stat_checks_twice = mech.stat_checks_open_basedir_twice
        self.recorded_include_path: str | None = None
        self._validated: str | None = None  # the script of the last include's revalidation
        # the last include: a *_once of an included script (script, name, cwd, ip, fallback)
        self._deferred: tuple[str, str, str, str, str] | None = None

    # -- syscalls ------------------------------------------------------------------------
    def emit(self, call: str, path: str, failed: bool) -> None:
        slot = _SLOT[call] + failed
        self._counts[slot] += 1
        if not self._counting:
            return
        base = self._mount_memo.get(path)
        if base is None:
            base = self._mount_memo[path] = (self.mount_of(path) + 1) << 4
        code = base | slot
        codes = self.tally.codes
        codes[code] = codes.get(code, 0) + 1

    def _switch(self, req: int) -> None:
        self._req = req
        self._counting = self.counted is None or req in self.counted
        c = self.tally.per_req.get(req)
        if c is None:
            c = [0] * (2 * NCALLS)
            self.tally.per_req[req] = c
        self._counts = c

    # -- workers -------------------------------------------------------------------------
    def _new_worker(self) -> Worker:
        limit = 0 if self.basedirs else self.s.realpath_cache_size
        cache = RealpathCache(limit, self.s.realpath_cache_ttl)
        return Worker(cache, Resolver(self.fs, cache, self.emit))

    def worker(self, wid: int) -> Worker:
        w = self.workers.get(wid)
        if w is None:
            w = self._new_worker()
            self.workers[wid] = w
        return w

    def run(self, wid: int, events: list[Event], times: list[int],
            ns: list[int] | None = None) -> None:
        """Feed one worker's events, in order; `times[i]` is event i's wall clock (s),
        `ns[i]` its time in the trace (for paths created or removed while traced)."""
        self.run_many([wid] * len(events), events, times, ns)

    def run_many(self, wids: list[int], events: list[Event], times: list[int],
                 ns: list[int] | None = None) -> None:
        """Feed events of several workers in time order (`wids[i]`: event i's worker), so
        that OPcache's shared state sees them as the master did."""
        wid = wids[0] if wids else 0
        w = self.worker(wid)
        last = None
        fs, emit, s = self.fs, self.emit, self.s
        for i, ev in enumerate(events):
            kind = ev[0]
            now = times[i]
            if wids[i] != wid:
                wid = wids[i]
                w = self.worker(wid)
                last = None
            if ns is not None:
                fs.now_ns = ns[i]
            if now != last:
                last = self._now = w.resolver.now = now
            if ev[1] != self._req:
                self._switch(ev[1])
            if kind == E_PASS:
                if len(ev) == 6 and ev[5] == "revalidate":
                    if self._validated == ev[3]:
                        continue  # a revalidation the engine has just made itself
                    # else an override's (validate_timestamp_and_record: none within
                    # revalidate_freq), after its resolution
                    if not s.opcache or not s.opcache_validate_timestamps or (
                            s.opcache_revalidate_freq
                            and self.opc_scripts.get(ev[3], 0) >= w.request_time):
                        continue
                    d = self._deferred
                    if d is not None and d[0] == ev[3]:
                        include_resolution.resolve(w.resolver, d[1], d[2], d[3], d[4])
                    self.opc_scripts[ev[3]] = w.request_time + s.opcache_revalidate_freq
                emit(ev[2], ev[3], ev[4])
                continue
            if kind == E_REQ:
                w = self._start_request(wid, w, now)
                if ev[2] and ev[2] != "relative" and self.s.opcache:
                    self._primary_opcache(w, ev[2])
                if ev[2] == "relative" and s.opcache and not s.opcache_revalidate_path:
                    self.emit("getcwd", "", False)  # the primary script's key needs the cwd
                    w.opc_cwd = True
                continue
            r = w.resolver
            if kind == E_INCLUDE:
                self._include(w, ev[2], ev[3], ev[4], ev[5], ev[6])
            elif kind == E_PROBE:
                self._probe(w, ev[2], ev[3], ev[4], ev[5])
            elif kind == E_REALPATH:
                if ev[5]:  # before PHP's ini is read: the cache is still off (limit 0)
                    limit, w.cache.limit = w.cache.limit, 0
                    r.resolve(ev[2], ev[3], ev[4])
                    w.cache.limit = limit
                else:
                    r.resolve(ev[2], ev[3], ev[4])
            elif kind == E_CLEAR:
                w.stat_file = w.lstat_file = None
                if ev[2]:
                    if ev[3]:
                        w.cache.delete(ev[3])
                    else:
                        w.cache.clear()
            elif kind == E_USER_INI:
                user_ini.scan(s, fs, emit, w.user_ini, w.request_time, ev[2], ev[3])
            elif kind == E_RESOLVE:
                self._primary(w, ev[2], ev[3], ev[4], ev[5])
            elif kind == E_OPC_CLI:
                if self.s.opcache:  # the lock file's open; the primary script's timestamp
                    if self.lock_file_open:
                        self.emit("open", ev[2], False)
                    self.emit("fstat", ev[3], False)
            elif kind == E_INI:
                w.own_ip = True
            elif kind == E_BASEDIR:
                if self.basedirs:
                    self.basedir_ok(w, ev[2], ev[3])
            elif kind == E_CHDIR:
                if s.opcache and ev[3]:  # OPcache's chdir(): the new cwd for its keys
                    emit("getcwd", "", False)
                    w.opc_cwd = True
                if ev[2] and w.stat_file is not None and not w.stat_file.startswith("/"):
                    w.stat_file = None
                if ev[2] and w.lstat_file is not None and not w.lstat_file.startswith("/"):
                    w.lstat_file = None
            if w.cache.used > w.peak_bytes:
                w.peak_bytes = w.cache.used

    def _start_request(self, wid: int, w: Worker, now: int) -> Worker:
        if self.s.max_requests and w.requests >= self.s.max_requests:
            self.retired.append(w)
            w = self._new_worker()
            self.workers[wid] = w
        w.requests += 1
        w.stat_file = w.lstat_file = None
        w.included = set()
        w.opc_cwd = w.own_ip = False
        w.request_time = now
        w.resolver.now = now
        return w

    # -- include -------------------------------------------------------------------------
    def _ip(self, w: Worker, include_path: str) -> str:
        """The proposed include_path where the trace ran with the recorded one; a value the
        script set itself is kept, even the recorded one."""
        own = include_path != self.recorded_include_path or w.own_ip
        return include_path if own else self.s.include_path

    def _primary(self, w: Worker, name: str, cwd: str, include_path: str,
                 fallback: str) -> None:
        include_path = self._ip(w, include_path)
        if self.s.opcache and not self.s.opcache_revalidate_path and name in self.opc_keys:
            return
        resolved = include_resolution.resolve(w.resolver, name, cwd, include_path, fallback)
        if self.s.opcache and resolved is not None:
            self.opc_keys[name] = resolved

    def _primary_opcache(self, w: Worker, script: str) -> None:
        """php-fpm's primary script: compiled once, then revalidated (open: as traced)."""
        if script in self.opc_scripts:
            self._validate(w, script, script, "", "", "", have_path=True)
        else:
            self.opc_scripts[script] = w.request_time + self.s.opcache_revalidate_freq

    def _include(self, w: Worker, name: str, once: bool, cwd: str, include_path: str,
                 fallback: str) -> None:
        s = self.s
        self._validated = self._deferred = None
        include_path = self._ip(w, include_path)
        key = None
        if s.opcache:
            if name.startswith("/"):
                key = name  # include_resolution.opc_key, inlined for the common case
            elif s.opcache_revalidate_path:
                key = None  # no key by the name as written: no cwd for it
            else:
                if not w.opc_cwd:
                    self.emit("getcwd", cwd, False)  # ZCG(cwd), once per request
                    w.opc_cwd = True
                key = include_resolution.opc_key(name, cwd, include_path, fallback)
            script = self.opc_keys.get(key)
            if s.opcache_revalidate_path and script is not None and not (
                    once == PROBE_ONCE and script in w.included):
                script = None  # no key lookup; a probe's is (filename_is_in_cache)
            if script is not None:
                if once and script in w.included:
                    # (or enable_file_override's resolution of a probe's name, which the
                    # tracer takes for a *_once: its revalidation stat follows)
                    self._deferred = (script, name, cwd, include_path, fallback)
                    return
                w.included.add(script)
                if not s.opcache_validate_timestamps or (
                        s.opcache_revalidate_freq
                        and self.opc_scripts.get(script, 0) >= w.request_time):
                    return  # self._validate's first checks, inlined
                self._validate(w, name, script, cwd, include_path, fallback, have_path=once)
                return
        resolved = include_resolution.resolve(w.resolver, name, cwd, include_path, fallback)
        if s.opcache and once and resolved is not None and resolved in self.opc_scripts:
            # found by its real path (persistent_zend_resolve_path): the key is added, no
            # open; also when the script was included already
            if key is not None:
                self._add_key(key, resolved)
            if resolved in w.included:
                return
            w.included.add(resolved)
            self._validate(w, name, resolved, cwd, include_path, fallback, have_path=True)
            return
        if once and resolved is not None and resolved in w.included:
            return
        by_name = resolved is None  # compiled under the name as written (its key added)
        if resolved is None:
            if once:  # zend_stream_open of the name as written: its own resolution first
                include_resolution.resolve(w.resolver, name, cwd, include_path, fallback)
            target = name
            if self.basedirs and not self.basedir_ok(w, target, cwd):
                return
            # the stream opens the name as written: relative to the cwd, which is the
            # include's last resort (PHP finds there what include_path did not)
            path = w.resolver.resolve(name, cwd, FILEPATH) or self._abs(name, cwd)
            if not self.fs.exists(path):
                self.emit("open", path, True)
                return
            resolved = path  # (a *_once opens it every time: its name never resolves)
        else:
            if once:
                # zend_stream_open of the resolved path resolves it again (USE_PATH; with
                # OPcache only for a script it has not cached): free when the realpath
                # cache holds it under that spelling, a walk when the name was written
                # with `..`, `./` or a symlink, or the cache is off or full
                w.resolver.resolve(resolved, cwd, REALPATH)
            if self.basedirs and not self.basedir_ok(w, resolved, cwd):
                return
        self.emit("open", resolved, False)
        self.emit("fstat", resolved, False)
        if by_name and once and resolved in w.included:
            return  # opened by its name, found included already: not compiled, no key
        if self.compile_clears_stat:  # PHP 8.4: compiling a file clears the stat cache
            w.stat_file = w.lstat_file = None
        w.included.add(resolved)
        if s.opcache and not self._fresh(w, resolved):
            if resolved not in self.opc_scripts:
                self.opc_scripts[resolved] = w.request_time + s.opcache_revalidate_freq
            if key is not None and (not once or by_name):
                # a *_once compiles under its real path, when its name resolved
                self._add_key(key, resolved)
            self.opc_keys[resolved] = resolved

    def _fresh(self, w: Worker, script: str) -> bool:
        """file_update_protection: a script changed less than that many seconds before the
        request's time is compiled but not cached (the trace shows when it was created)."""
        protection = self.s.opcache_file_update_protection
        if not protection or not self.fs.created:
            return False
        times = self.fs.created.get(script) or []
        i = bisect.bisect_right(times, self.fs.now_ns)
        if not i:  # not created while traced, or not yet
            return False
        mtime = self._now - (self.fs.now_ns - times[i - 1]) // 1_000_000_000
        return w.request_time - protection < mtime

    def _add_key(self, key: Any, script: str) -> None:
        self.opc_keys[key] = script
        if type(key) is tuple:  # a relative name's, for enable_file_override's probes
            self.opc_names[(key[0], key[1])] = key

    def _validate(self, w: Worker, name: str, script: str, cwd: str, include_path: str,
                  fallback: str, have_path: bool) -> None:
        s = self.s
        if not s.opcache_validate_timestamps:
            return
        if s.opcache_revalidate_freq and self.opc_scripts.get(script, 0) >= w.request_time:
            return
        if not have_path:
            include_resolution.resolve(w.resolver, name, cwd, include_path, fallback)
        self.emit("stat", script, not self.fs.exists(script))
        self._validated = script
        self.opc_scripts[script] = w.request_time + s.opcache_revalidate_freq

    @staticmethod
    def _abs(path: str, cwd: str) -> str:
        return path if path.startswith("/") else posixpath.join(cwd, path)

    # -- open_basedir --------------------------------------------------------------------
    def basedir_ok(self, w: Worker, path: str, cwd: str) -> bool:
        """php_check_open_basedir: each entry until one holds the path."""
        return open_basedir.allowed(w.resolver, self.emit, self.basedirs, path, cwd)

    # -- stat family ---------------------------------------------------------------------
    def _probe(self, w: Worker, name: str, func: str, abspath: str, cwd: str) -> None:
        s = self.s
        if s.opcache and s.opcache_enable_file_override and func in OVERRIDE_FUNCS:
            # OPcache answers from a key of the name as written (a relative one needs the
            # cwd), revalidated as an include's; a miss runs the function itself
            key: Any = name
            if not name.startswith("/"):
                if not w.opc_cwd:
                    self.emit("getcwd", cwd, False)
                    w.opc_cwd = True
                key = self.opc_names.get((name, cwd))
            script = self.opc_keys.get(key) or (name if name in self.opc_scripts else None)
            if script is not None:
                ip, fb = (key[2], key[3]) if type(key) is tuple else ("", "")
                self._validate(w, name, script, cwd, ip, fb, have_path=False)
                if self.fs.exists(script):
                    return
        check = (lambda: self.basedir_ok(w, name, cwd)) if self.basedirs else None
        stat_family.probe(w, self.fs, self.emit, check, name, func, abspath,
                          self.lstat_fills_stat, self.stat_checks_twice)

    # -- results -------------------------------------------------------------------------
    def all_workers(self) -> list[Worker]:
        return self.retired + list(self.workers.values())
