"""Replay a trace's PHP operations through the what-if engine (`model.php_engine`).

The trace is first turned into logical events per worker (`model.replay_input.prepare`);
a replay feeds them to the engine under chosen settings: the workers' streams merged in time
order (OPcache's state is shared by a master's workers), or dealt over another number of
workers, after warming the workers of a running pool.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from dataclasses import dataclass, field, replace
from typing import Any

from statstorm.model.php_engine import NCALLS, Engine
from statstorm.model.engine_events import E_REQ, Event
from statstorm.model.phpsettings import PhpSettings
from statstorm.model.fs_view import LINK
from statstorm.model.replay_input import Prepared, build_fs, prepare
from statstorm.model.replay_tally import Tally
from statstorm.results.common import collector_paused
from statstorm.results.trace.vocabulary import CALLS, SUMMARY_KEYS


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
    # paths whose kind the replay took rather than saw in the trace (FsView.guessed)
    guessed: tuple[str, ...] = ()


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
    prep.fs.guessed = set()
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
                        max((w.cache.used for w in workers), default=0), by_mount,
                        tuple(sorted(prep.fs.guessed)))


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
    """Every worker's events in one stream, ordered by (trace ns, index in its worker's
    stream, PID). Each worker's stream is in that order already, so whole runs of one
    worker's events are taken at once: up to the point where another worker's next event
    comes first (found by bisection)."""
    wids: list[int] = []
    evs: list[Event] = []
    times: list[int] = []
    ns: list[int] = []
    streams = prep.streams
    heads = [(streams[pid][2][0], 0, pid) for pid in pids if streams[pid][2]]
    heapq.heapify(heads)
    while heads:
        _, i, pid = heapq.heappop(heads)
        p_evs, p_times, p_ns = streams[pid]
        end = len(p_ns)
        if heads:
            n2, i2, pid2 = heads[0]
            cut = bisect.bisect_left(p_ns, n2, i)
            # events at the same ns: before the other's while (index, PID) is smaller
            same = bisect.bisect_right(p_ns, n2, cut)
            end = max(cut, min(same, i2 + 1 if pid < pid2 else i2))
        wids.extend(itertools.repeat(pid, end - i))
        evs.extend(p_evs[i:end])
        times.extend(p_times[i:end])
        ns.extend(p_ns[i:end])
        if end < len(p_ns):
            heapq.heappush(heads, (p_ns[end], end, pid))
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
