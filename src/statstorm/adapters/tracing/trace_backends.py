"""The tracer backends' runs for `statstorm trace`: bpftrace's run, and what it shares with
the compiled eBPF tracer's (adapters/tracing/libbpf_run.py) and strace's (adapters/tracing/strace_run.py):
each attached to a resolved target and ended by a duration, a request count, an event cap, a
stop event or Ctrl-C; their events attributed into a trace file and its summary. The
backends themselves are adapters/tracing/libbpf_trace.py, adapters/tracing/bpftrace_session.py and
adapters/tracing/strace_session.py; commands/trace.py chooses one and falls back to the next."""

from __future__ import annotations

import datetime as dt
import functools
import os
import signal
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from statstorm import faults
from statstorm.adapters.host import procs
from statstorm.adapters.php import php_targets
from statstorm.adapters.storage import mounts, round_trips
from statstorm.adapters.tracing import bpftrace, trace_targets
from statstorm.adapters.tracing.bpftrace_session import BpftraceSession, EventFramer, Refused
from statstorm.env import Env
from statstorm.errors import ComponentError, Interrupted
from statstorm.model.attribution import Attributor
from statstorm.model.count_attribution import CountAttributor
from statstorm.model.events import Reorder, feed
from statstorm.model.tracestats import SummaryBuilder, Tee
from statstorm.results import whatif_input
from statstorm.results.trace import TraceWriter, decode_path, new_header

DEFAULT_EVENT_CAP = 2_000_000
COUNTS_BATCH_S = 0.05
DEFAULT_DURATION_S = 10.0


@dataclass(frozen=True)
class TraceOptions:
    pool: str | None = None
    pids: tuple[int, ...] = ()
    lab: str | None = None
    cmd: str | None = None
    duration_s: float | None = None
    requests: int | None = None
    max_events: int = DEFAULT_EVENT_CAP
    output: Path | None = None
    backend: str = "auto"  # auto | ebpf | bpftrace | strace
    counts: bool = False  # count per request in the kernel: no paths, mounts or operations
    sample: int = 1  # record about one request in N in full, count the others (ebpf)


@dataclass
class TraceRun:
    output: Path
    summary: dict[str, Any]
    backend: str
    warnings: list[str] = field(default_factory=list)


def feed_counts(attr: CountAttributor, fields: list[bytes]) -> None:
    """Dispatch one line of the counting program (K, U, V, F, E) to its attributor."""
    tag = fields[0]
    if tag == b"K":
        attr.on_counts(int(fields[1]), int(fields[2]), int(fields[3]),
                       bpftrace.unpack_counts([int(v) for v in fields[4:]]))
    elif tag == b"U":
        attr.on_startup(int(fields[1]), int(fields[2]), decode_path(fields[3]))
    elif tag == b"V":
        attr.on_uri(int(fields[1]), decode_path(fields[2]))
    elif tag == b"F":
        attr.on_fork(int(fields[1]), int(fields[2]))
    elif tag == b"E":
        attr.on_exit(int(fields[1]))


def cwd_of(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return ""


def header(source: str, target: trace_targets.Target, opts: TraceOptions) -> dict[str, Any]:
    targets: dict[str, Any] = {"mode": target.mode, "description": target.description,
                               "pids": target.pids}
    if target.pool:
        targets["pool"] = target.pool
    if target.argv:
        targets["cmd"] = target.argv
    entries = mounts.current()
    head = new_header(source, created=dt.datetime.now(dt.timezone.utc).isoformat(
        timespec="seconds"), host=socket.gethostname(), targets=targets,
        settings=target.settings, mounts=[(m.mount_point, m.fstype) for m in entries],
        detail="counts" if opts.counts else "events")
    # each mount's effective cache options (network mounts; {} for the others), for whatif
    head["mount_options"] = [mounts.detect(m.mount_point).cache_options
                             if mounts.kind_of(m.fstype) in ("nfs", "glusterfs-fuse") else {}
                             for m in entries]
    return head


def build_input(env: Env, progress: Callable[[str], None] | None, path: Path) -> None:
    """The what-if input of the trace just written, kept beside it (TRACE.whatif-cache), so
    that the first `statstorm whatif TRACE` starts from it (`results.whatif_input.build`)."""
    if progress:
        progress("building the what-if input (TRACE.whatif-cache)")
    t0 = time.monotonic()
    built = whatif_input.build(path)
    env.debug(f"what-if input {'built' if built else 'not built'} in "
              f"{time.monotonic() - t0:.1f} s")


def hold_command(target: trace_targets.Target) -> procs.HeldCommand | None:
    """A `--cmd` target's command, started and held until the tracer is attached (its PID
    becomes the target's); None for other targets."""
    if target.mode != "cmd":
        return None
    held = procs.HeldCommand(target.argv)
    target.pids = [held.pid]
    return held


def on_attached(network: round_trips.Window | None, held: procs.HeldCommand | None,
                ready: threading.Event | None) -> None:
    """The tracer is attached: open the round-trip window, let the held command run, tell
    whoever waits (`ready`)."""
    if network is not None:
        network.open()
    if held is not None:
        held.release()
    if ready is not None:
        ready.set()
    faults.phase("trace/attached")


def bound_reached(opts: TraceOptions, now: float, deadline: float | None,
                  stop: threading.Event | None, requests: int, syscalls: int,
                  held: procs.HeldCommand | None, warnings: list[str]) -> str | None:
    """Why an attached trace stops now ("duration", "stop", "requests", "event cap",
    "command exited"), or None: it goes on."""
    faults.phase("trace/recording")
    if deadline is not None and now >= deadline:
        return "duration"
    if stop is not None and stop.is_set():
        return "stop"
    if opts.requests and requests >= opts.requests:
        return "requests"
    if syscalls >= opts.max_events:
        warnings.append(f"stopped at the event cap ({opts.max_events:,} events); "
                        "raise --max-events or shorten --duration")
        return "event cap"
    if held is not None and held.ended():
        return "command exited"
    return None


def run_bpftrace(env: Env, opts: TraceOptions, target: trace_targets.Target, out: Path,
                 warnings: list[str], progress: Callable[[str], None] | None,
                 ready_event: threading.Event | None = None,
                 stop: threading.Event | None = None) -> TraceRun:
    binary = bpftrace.find()
    network = round_trips.window_for(env, target.code)
    held = hold_command(target)
    head = header("bpftrace", target, opts)
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
                               backend="bpftrace", stopped=stopped, t_start=t_start,
                               dropped=framer.dropped, network=network, strlen=bpftrace.STRLEN)
    except BaseException:
        writer.abort()  # the drain failed (a full disk): no temp file, the previous trace
        raise
    finally:
        if main:
            signal.signal(signal.SIGINT, old)
        session.close()
    return TraceRun(out, result, "bpftrace", warnings)


def title_filter(target: trace_targets.Target) -> Callable[[int], bool] | None:
    """Which PIDs' events count (Apache: the processes that run PHP), or None: all."""
    if not target.allow:
        return None
    return php_targets.TitleFilter(target.allow, *([target.settled] if target.settled else []))


def event_attributor(target: trace_targets.Target, head: dict[str, Any], writer: TraceWriter,
                     summary: SummaryBuilder, strlen: int) -> Attributor:
    """The attributor of a full-event trace (paths cut at `strlen` - 1 bytes)."""
    return Attributor(Tee(writer, summary), head["mounts"], cwd_of=cwd_of,
                      single_request=target.mode == "cmd", strlen=strlen)


def count_attributor(target: trace_targets.Target, writer: TraceWriter,
                     summary: SummaryBuilder) -> CountAttributor:
    """The attributor of a counted trace (`--counts`): requests counted in the kernel."""
    return CountAttributor(Tee(writer, summary), single_request=target.mode == "cmd")


def attributor(opts: TraceOptions, target: trace_targets.Target, head: dict[str, Any],
               writer: TraceWriter, summary: SummaryBuilder
               ) -> tuple[Attributor | CountAttributor, Callable[[list[bytes]], None]]:
    """bpftrace's attributor, and the function that feeds it one event line."""
    if opts.counts:
        cattr = count_attributor(target, writer, summary)
        return cattr, functools.partial(feed_counts, cattr)
    eattr = event_attributor(target, head, writer, summary, bpftrace.STRLEN)
    return eattr, functools.partial(feed, eattr)


def finish_events(env: Env, attr: Attributor | CountAttributor, writer: TraceWriter,
                  summary: SummaryBuilder, progress: Callable[[str], None] | None, out: Path,
                  warnings: list[str], *, backend: str, stopped: str, t_start: float,
                  dropped: int, network: round_trips.Window | None, strlen: int,
                  extra: Callable[[], dict[str, Any]] | None = None) -> dict[str, Any]:
    """Close an eBPF trace once every event is fed: its trailer, warnings and summary.
    `extra` adds to the trailer what the backend tells once every request is closed."""
    faults.phase("trace/publish")
    attr.finish()
    trailer: dict[str, Any] = {
        "stopped": stopped, "duration_ns": attr.last_ns,
        "wall_s": round(time.monotonic() - t_start, 3), "dropped": dropped,
        "completed_requests": attr.completed, "truncated_paths": attr.truncated_paths,
        "pids": sorted(attr.pids_seen), "forks": attr.forks, "exits": attr.exits,
        "backend": backend, **(extra() if extra is not None else {}),
    }
    if attr.t0 is not None:
        # wall clock of time 0 (event times are CLOCK_MONOTONIC ns from attr.t0): lets
        # `statstorm whatif` place events in PHP's seconds (TTLs, revalidation windows)
        trailer["t0_wall_ns"] = time.time_ns() - time.monotonic_ns() + attr.t0
    if network is not None:
        trailer["network"] = network.close(attr.completed)
        if network.note:
            warnings.append(network.note)
    if attr.truncated_paths:
        warnings.append(f"{attr.truncated_paths} paths were longer than {strlen - 1} bytes "
                        "and were cut")
    if dropped:
        warnings.append(f"the tracer lost {dropped:,} events (its buffers overflowed); the "
                        "counts are low by that much")
    if stopped == "interrupted":
        warnings.append("interrupted: the trace holds what was captured until then")
    writer.close(trailer)
    result = summary.finish(trailer)
    build_input(env, progress, out)
    return result
