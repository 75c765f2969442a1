"""bpftrace's run for `statstorm trace` (the fallback when the compiled tracer is not built or
cannot attach; adapters/tracing/bpftrace_session.py): its lines read while PHP runs, framed,
put back in time order and attributed into the trace file and its summary until a bound is
reached (what the backends' runs share: adapters/tracing/trace_backends.py)."""

from __future__ import annotations

import functools
import signal
import threading
import time
from pathlib import Path
from typing import Any, Callable

from statstorm.adapters.labs import php_roots
from statstorm.adapters.storage import round_trips
from statstorm.adapters.tracing import bpftrace, count_lines, trace_targets
from statstorm.adapters.tracing.bpftrace_session import BpftraceSession, EventFramer, Refused
from statstorm.adapters.tracing.trace_backends import (DEFAULT_DURATION_S, RecordOptions,
                                                       bound_reached, count_attributor,
                                                       event_attributor, finish_events, header,
                                                       hold_command, on_attached, title_filter)
from statstorm.env import Env
from statstorm.errors import ComponentError, Interrupted
from statstorm.model.attribution import Attributor
from statstorm.model.count_attribution import CountAttributor
from statstorm.model.events import Reorder, feed
from statstorm.model.tracestats import SummaryBuilder
from statstorm.results.trace import TraceWriter
from statstorm.results.trace.vocabulary import TracerBackend
from statstorm.results.trace_run import TraceRun

COUNTS_BATCH_S = 0.05


def run_bpftrace(env: Env, opts: RecordOptions, target: trace_targets.Target, out: Path,
                 warnings: list[str], progress: Callable[[str], None] | None,
                 ready_event: threading.Event | None = None,
                 stop: threading.Event | None = None) -> TraceRun:
    binary = bpftrace.find()
    rooted = [b for b in target.binaries if php_roots.root_of(b) is not None]
    if rooted:  # its program reads PHP 8.2's arguments and needs the USDT probe
        raise Refused(f"bpftrace traces the host's PHP only, not a PHP root's ({rooted[0]}); "
                      f"use --backend ebpf")
    network = round_trips.window_for(env, target.code)
    held = hold_command(target)
    head = header(TracerBackend.BPFTRACE, target, opts, env)
    make = bpftrace.count_program if opts.counts else bpftrace.program
    session = BpftraceSession(binary, make(bpftrace.Targets(tuple(target.pids),
                                                            tuple(target.parents)),
                                           target.binaries))
    framer = EventFramer(title_filter(target))
    summary = SummaryBuilder(head)
    writer = TraceWriter(out, head)
    stopped = "end"
    t_start = time.monotonic()
    attr, dispatch = attributor(opts, target, head, writer, summary)
    reorder = Reorder()

    def take(line: bytes) -> None:
        fields = framer.take(line)
        if fields is not None:
            reorder.push(fields)

    def halt() -> bytes:
        if held is not None:
            held.finish()
        return session.stop()

    buf = b""
    try:
        session.start()
        ready = False
        deadline_ready = time.monotonic() + 120
        deadline = None
        last_progress = 0.0
        eof = False
        while True:
            now = time.monotonic()
            if not ready and now > deadline_ready:
                raise Refused("no answer from bpftrace within 120 s")
            if not ready and held is not None and held.ended():
                raise ComponentError("the traced command ended before the tracer was attached "
                                     f"(exit status {held.returncode}); nothing was traced")
            if ready:
                bound = bound_reached(opts, now, deadline, stop, attr.completed,
                                      writer.events, held, warnings)
                if bound:
                    stopped = bound
                    break
            if eof:
                break
            chunk = session.read(0.2)
            if chunk is not None:
                if chunk and ready and opts.counts:
                    # A few lines per request: read them in batches, not one wake-up each.
                    time.sleep(COUNTS_BATCH_S)
                    chunk += session.read(0) or b""
                eof = not chunk
                buf += chunk
            elif not ready and session.exited():
                raise session.refusal()
            *complete, buf = buf.split(b"\n")
            for line in complete:
                if not ready:
                    if line == b"READY":
                        env.debug(f"bpftrace attached in {time.monotonic() - t_start:.1f} s")
                        ready = True
                        t_start = time.monotonic()
                        attr.t0 = time.monotonic_ns()
                        if opts.duration_s is not None or target.mode != "cmd":
                            deadline = t_start + (opts.duration_s or DEFAULT_DURATION_S)
                        on_attached(network, held, ready_event)
                    continue
                take(line)
            for fields in reorder.pop_ready():
                dispatch(fields)
            if progress and ready and now - last_progress >= 1.0:
                last_progress = now
                progress(f"{now - t_start:5.1f} s  {writer.events:,} syscalls  "
                         f"{attr.completed} requests done")
    except (KeyboardInterrupt, Interrupted):
        stopped = "interrupted"
    except (Refused, ComponentError):
        writer.abort()
        if held is not None:
            held.cancel()  # never attached: the command must not run untraced
        session.stop()
        session.close()
        raise
    except BaseException:
        halt()
        writer.abort()  # a failed trace is not published: the previous file stays
        session.close()
        raise
    # Drain: stop bpftrace (it flushes what it has), then feed the rest. Ctrl-C is ignored
    # meanwhile (only the main thread can change that; a tracer thread leaves it alone).
    main = threading.current_thread() is threading.main_thread()
    old = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
    try:
        env.debug(f"stopping ({stopped})")
        rest = halt()
        env.debug("bpftrace stopped")
        for line in (buf + rest).split(b"\n"):
            if line:
                take(line)
        for fields in reorder.pop_ready(flush=True):
            dispatch(fields)
        result = finish_events(env, attr, writer, summary, progress, out, warnings,
                               backend=TracerBackend.BPFTRACE, stopped=stopped, t_start=t_start,
                               dropped=framer.dropped, network=network, strlen=bpftrace.STRLEN)
    except BaseException:
        writer.abort()  # the drain failed (a full disk): no temp file, the previous trace
        raise
    finally:
        if main:
            signal.signal(signal.SIGINT, old)
        session.close()
    return TraceRun(out, result, TracerBackend.BPFTRACE, warnings)




def attributor(opts: RecordOptions, target: trace_targets.Target, head: dict[str, Any],
               writer: TraceWriter, summary: SummaryBuilder
               ) -> tuple[Attributor | CountAttributor, Callable[[list[bytes]], None]]:
    """bpftrace's attributor, and the function that feeds it one event line."""
    if opts.counts:
        cattr = count_attributor(target, writer, summary)
        return cattr, functools.partial(count_lines.feed_fields, cattr)
    eattr = event_attributor(target, head, writer, summary, bpftrace.STRLEN)
    return eattr, functools.partial(feed, eattr)
