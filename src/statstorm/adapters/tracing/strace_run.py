"""strace's run for `statstorm trace` (the last fallback, adapters/tracing/strace_session.py): the
target's processes under strace until a bound, the log imported (adapters/tracing/strace_log.py) and
written as a trace with its summary."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Callable

from statstorm.adapters.tracing import strace_log, trace_targets
from statstorm.adapters.tracing.strace_session import StraceSession
from statstorm.adapters.tracing.trace_backends import (DEFAULT_DURATION_S, RecordOptions,
                                                       cwd_of, header)
from statstorm.env import Env
from statstorm.errors import Interrupted
from statstorm.model.attribution import Attributor
from statstorm.model.tracestats import SummaryBuilder, Tee
from statstorm.results.jsontypes import JsonObject
from statstorm.results.trace import TraceWriter
from statstorm.results.trace.vocabulary import TracerBackend
from statstorm.results.trace_run import TraceRun


def run_strace(env: Env, opts: RecordOptions, target: trace_targets.Target, out: Path,
               warnings: list[str], progress: Callable[[str], None] | None,
               ready: threading.Event | None = None,
               stop: threading.Event | None = None) -> TraceRun:
    session = (StraceSession(argv=target.argv) if target.mode == "cmd"
               else StraceSession(pids=[*target.parents, *target.pids]))
    warnings.insert(0, "LOUD WARNING: tracing with strace (ptrace) stops every traced process "
                    "twice per syscall; expect PHP to run several times slower while tracing")
    t0 = time.monotonic()
    stopped = "end"
    try:
        session.start()
        limit = opts.duration_s if opts.duration_s is not None else (
            None if target.mode == "cmd" else DEFAULT_DURATION_S)
        if ready is not None:
            ready.set()  # strace has no "attached" marker; it attaches within moments
        try:
            while session.running():
                if limit is not None and time.monotonic() - t0 >= limit:
                    stopped = "duration"
                    break
                if stop is not None and stop.is_set():
                    stopped = "stop"
                    break
                if opts.requests and session.accepts() > opts.requests:
                    stopped = "requests"
                    break
                time.sleep(0.2)
                if progress:
                    progress(f"{time.monotonic() - t0:5.1f} s  strace running")
        except (KeyboardInterrupt, Interrupted):
            stopped = "interrupted"
        trace = strace_log.import_file(session.stop(), requests=None)
        head = header(TracerBackend.STRACE, target, opts, env)
        head["import"] = trace.header.get("import", {})
        master = set(target.parents)
        summary = SummaryBuilder(head)
        with TraceWriter(out, head) as writer:
            tee = Tee(writer, summary)
            mount_idx = Attributor(tee, head["mounts"], cwd_of=cwd_of).mount_of
            keep = {r.id for r in trace.requests.values() if r.pid not in master}
            for s in trace.syscalls:
                if s.pid in master:
                    continue
                s.mount = mount_idx(s.path) if s.path else -1
                tee.syscall(s)
            for r in trace.requests.values():
                if r.id in keep:
                    tee.request(r)
            trailer: JsonObject = {"stopped": stopped, "backend": TracerBackend.STRACE.value,
                                   "wall_s": round(time.monotonic() - t0, 3)}
            writer.close(trailer)
        result = summary.build(trailer)
    finally:
        session.close()
    return TraceRun(out, result, TracerBackend.STRACE, warnings)
