"""`statstorm trace`: capture PHP's file-metadata syscalls per request and per PHP operation.

Targets: a php-fpm pool (with workers respawned during the trace), PIDs, a lab's pool, or a
command run under the tracer. The eBPF backend (bpftrace) streams events into the
attributor (model.attribution), which writes the trace file and feeds the summary as it goes;
the strace backend records a log and imports it.
"""

from __future__ import annotations

import datetime as dt
import functools
import os
import shlex
import signal
import shutil
import socket
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from statstorm.adapters import (bpftrace, libbpf_trace, mounts, php_targets, procs, round_trips,
                                strace_log, trace_targets)
from statstorm.adapters.bpftrace_session import BpftraceSession, EventFramer, Refused
from statstorm.adapters.strace_session import StraceSession
from statstorm.env import Env
from statstorm.errors import ComponentError, DependencyError, Interrupted, UsageError
from statstorm.model.attribution import Attributor, CountAttributor, Reorder, feed
from statstorm.model.sampling import CountedRequests
from statstorm.model.tracestats import SummaryBuilder, Tee, diff_summaries, summarize
from statstorm.results import whatif_input
from statstorm.results.trace import (TraceWriter, read_trace, write_trace,
                                     decode_path, new_header)

DEFAULT_EVENT_CAP = 2_000_000
COUNTS_BATCH_S = 0.05
DEFAULT_DURATION_S = 10.0
BACKENDS = ("auto", "ebpf", "bpftrace", "strace")


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
    sample: int = 1  # record one request in N per worker in full, count the others (ebpf)


@dataclass
class TraceRun:
    output: Path
    summary: dict[str, Any]
    backend: str
    warnings: list[str] = field(default_factory=list)


def default_output() -> Path:
    return Path(f"trace-{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}.sst.gz")


def validate(opts: TraceOptions) -> None:
    modes = [m for m in (opts.pool, opts.pids, opts.lab, opts.cmd) if m]
    if len(modes) != 1:
        raise UsageError("give exactly one target: --pool NAME, -p PID, --lab [NAME] or "
                         "--cmd 'php script.php'")
    if opts.duration_s is not None and opts.duration_s <= 0:
        raise UsageError("--duration must be a positive number of seconds")
    if opts.requests is not None and opts.requests <= 0:
        raise UsageError("--requests must be at least 1")
    if opts.max_events <= 0:
        raise UsageError("--max-events must be at least 1")
    if opts.backend not in BACKENDS:
        raise UsageError("--backend: use auto, ebpf, bpftrace or strace")
    if opts.sample < 1:
        raise UsageError("--sample must be at least 1 (1: record every request)")
    if opts.sample > 1 and (opts.counts or opts.backend in ("bpftrace", "strace")):
        raise UsageError("--sample records one request in N in full with the compiled eBPF "
                         "tracer: use it without --counts and with --backend auto or ebpf")
    if opts.sample > 1 and opts.cmd is not None:
        raise UsageError("--sample needs a server's requests to choose from; a --cmd trace "
                         "is one request")
    if opts.counts and opts.backend == "strace":
        raise UsageError("--counts counts in the kernel with eBPF; drop --backend strace "
                         "(strace records every call)")
    out = opts.output or default_output()
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(f"{out}: directory {parent} does not exist; create it or choose "
                         "another -o")
    if not os.access(parent, os.W_OK):
        raise UsageError(f"{out}: directory {parent} is not writable; choose another -o")
    if opts.cmd is not None and not shlex.split(opts.cmd):
        raise UsageError("--cmd is empty; e.g. --cmd 'php script.php'")


# -- running ---------------------------------------------------------------------------------
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


def _cwd_of(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return ""


def counting_tracer(env: Env, *, lab: str | None, pool: str | None, duration_s: float,
                    output: Path, ready: threading.Event, stop: threading.Event) -> TraceRun:
    """The in-kernel counting trace of a pool during a load run (sweep --trace, apply
    --verify): attached when `ready` is set, ended by `stop`."""
    return run(env, TraceOptions(lab=lab, pool=pool, backend="bpftrace", counts=True,
                                 duration_s=duration_s, output=output), ready=ready, stop=stop)


def run(env: Env, opts: TraceOptions, *, progress: Callable[[str], None] | None = None,
        ready: threading.Event | None = None, stop: threading.Event | None = None,
        ) -> TraceRun:
    """Trace the target until a bound is reached or the user interrupts; write the trace.

    `ready` is set once the tracer is attached (events from then on are seen); setting `stop`
    ends the trace like its duration would (``"stopped": "stop"``). Both let another thread,
    e.g. `statstorm sweep --trace`, run load exactly while the tracer is attached."""
    validate(opts)
    if os.geteuid() != 0:
        bpftrace.check_privileges()
    target = trace_targets.resolve(env, lab=opts.lab, pool=opts.pool,
                                   pids=list(opts.pids) if opts.pids else None, cmd=opts.cmd)
    out = opts.output or default_output()
    backend = opts.backend
    warnings: list[str] = []
    if backend in ("auto", "ebpf") and not opts.counts:
        if backend == "ebpf" or libbpf_trace.loader() is not None:
            libbpf_trace.find()
            bpftrace.ensure_tracefs()
            try:
                return _run_ebpf(env, opts, target, out, warnings, progress, ready, stop)
            except libbpf_trace.Refused as exc:
                if backend == "ebpf":
                    raise DependencyError(f"the eBPF tracer could not attach: {exc}") from None
                warnings.append(f"the eBPF tracer could not attach ({exc}); trying bpftrace")
        elif opts.sample > 1:
            libbpf_trace.find()  # --sample needs it: says how to build it
    if backend in ("auto", "bpftrace", "ebpf"):
        try:
            bpftrace.find()
            bpftrace.ensure_tracefs()
        except DependencyError as exc:
            if backend == "bpftrace":
                raise
            warnings.append(f"{exc}; falling back to strace")
            backend = "strace"
    if backend == "strace":
        return _run_strace(env, opts, target, out, warnings, progress, ready, stop)
    try:
        return _run_bpftrace(env, opts, target, out, warnings, progress, ready, stop)
    except Refused as exc:
        if opts.backend == "bpftrace":
            raise DependencyError(f"bpftrace could not attach: {exc}") from None
        warnings.append(f"bpftrace could not attach ({exc}); falling back to strace")
        return _run_strace(env, opts, target, out, warnings, progress, ready, stop)


def _header(source: str, target: trace_targets.Target, opts: TraceOptions) -> dict[str, Any]:
    targets: dict[str, Any] = {"mode": target.mode, "description": target.description,
                               "pids": target.pids}
    if target.pool:
        targets["pool"] = target.pool
    if target.argv:
        targets["cmd"] = target.argv
    return new_header(source, created=dt.datetime.now(dt.timezone.utc).isoformat(
        timespec="seconds"), host=socket.gethostname(), targets=targets,
        settings=target.settings, mounts=[(m.mount_point, m.fstype) for m in mounts.current()],
        detail="counts" if opts.counts and source == "bpftrace" else "events")


def _build_input(env: Env, progress: Callable[[str], None] | None, path: Path) -> None:
    """The what-if input of the trace just written, kept beside it (TRACE.whatif-cache), so
    that the first `statstorm whatif TRACE` starts from it (`results.whatif_input.build`)."""
    if progress:
        progress("building the what-if input (TRACE.whatif-cache)")
    t0 = time.monotonic()
    built = whatif_input.build(path)
    env.debug(f"what-if input {'built' if built else 'not built'} in "
              f"{time.monotonic() - t0:.1f} s")


def _run_bpftrace(env: Env, opts: TraceOptions, target: trace_targets.Target, out: Path,
                  warnings: list[str], progress: Callable[[str], None] | None,
                  ready_event: threading.Event | None = None,
                  stop: threading.Event | None = None) -> TraceRun:
    binary = bpftrace.find()
    network = round_trips.window_for(env, target.code)
    held: procs.HeldCommand | None = None
    if target.mode == "cmd":
        held = procs.HeldCommand(target.argv)
        target.pids = [held.pid]
    header = _header("bpftrace", target, opts)
    make = bpftrace.count_program if opts.counts else bpftrace.program
    session = BpftraceSession(binary, make(bpftrace.Targets(tuple(target.pids),
                                                            tuple(target.parents)),
                                           target.binaries))
    framer = EventFramer(_title_filter(target))
    summary = SummaryBuilder(header)
    writer = TraceWriter(out, header)
    stopped = "end"
    t_start = time.monotonic()
    attr, dispatch = _attributor(opts, target, header, writer, summary)
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
                if deadline is not None and now >= deadline:
                    stopped = "duration"
                    break
                if stop is not None and stop.is_set():
                    stopped = "stop"
                    break
                if opts.requests and attr.completed >= opts.requests:
                    stopped = "requests"
                    break
                if writer.events >= opts.max_events:
                    stopped = "event cap"
                    warnings.append(f"stopped at the event cap ({opts.max_events:,} events); "
                                    "raise --max-events or shorten --duration")
                    break
                if held is not None and held.ended():
                    stopped = "command exited"
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
                        if network is not None:
                            network.open()
                        if held is not None:
                            held.release()
                        if ready_event is not None:
                            ready_event.set()
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
        halt()
        session.close()
        raise
    except BaseException:
        halt()
        writer.close({"stopped": "error"})
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
        result = _finish(env, attr, writer, summary, progress, out, warnings, backend="bpftrace",
                         stopped=stopped, t_start=t_start, dropped=framer.dropped,
                         network=network, strlen=bpftrace.STRLEN)
    finally:
        if main:
            signal.signal(signal.SIGINT, old)
        session.close()
    return TraceRun(out, result, "bpftrace", warnings)


def _run_ebpf(env: Env, opts: TraceOptions, target: trace_targets.Target, out: Path,
              warnings: list[str], progress: Callable[[str], None] | None,
              ready_event: threading.Event | None = None,
              stop: threading.Event | None = None) -> TraceRun:
    """The compiled tracer: records spooled in the kernel's format while PHP runs, decoded
    and attributed once the trace has stopped (adapters/libbpf_trace.py)."""
    network = round_trips.window_for(env, target.code)
    held: procs.HeldCommand | None = None
    if target.mode == "cmd":
        held = procs.HeldCommand(target.argv)
        target.pids = [held.pid]
    header = _header("ebpf", target, opts)
    if opts.sample > 1:
        header["sampling"] = {"one_in": opts.sample}
    spool_dir = Path(tempfile.mkdtemp(prefix="statstorm-trace-"))
    session = libbpf_trace.LoaderSession(
        bpftrace.Targets(tuple(target.pids), tuple(target.parents)), target.binaries,
        spool_dir / "records.bin", sample=opts.sample)
    stopped = "end"

    def command_ended() -> str | None:
        if held is not None and held.ended():
            return ("the traced command ended before the tracer was attached "
                    f"(exit status {held.returncode}); nothing was traced")
        return None

    try:
        t_attach = time.monotonic()
        try:
            session.start(abort=command_ended)
        except libbpf_trace.Refused as exc:
            if held is not None and held.ended():
                raise ComponentError(str(exc)) from None
            raise
        env.debug(f"eBPF tracer attached in {time.monotonic() - t_attach:.1f} s")
        t_start = time.monotonic()
        t0 = time.monotonic_ns()
        deadline = (t_start + (opts.duration_s or DEFAULT_DURATION_S)
                    if opts.duration_s is not None or target.mode != "cmd" else None)
        if network is not None:
            network.open()
        if held is not None:
            held.release()
        if ready_event is not None:
            ready_event.set()
        last_progress = 0.0
        try:
            while True:
                st = session.poll(0.2)
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    stopped = "duration"
                    break
                if stop is not None and stop.is_set():
                    stopped = "stop"
                    break
                if opts.requests and st.requests >= opts.requests:
                    stopped = "requests"
                    break
                if st.records >= opts.max_events:
                    stopped = "event cap"
                    warnings.append(f"stopped at the event cap ({opts.max_events:,} events); "
                                    "raise --max-events or shorten --duration")
                    break
                if held is not None and held.ended():
                    stopped = "command exited"
                    break
                if session.exited():
                    raise ComponentError(f"the eBPF tracer stopped: {session.refusal()}")
                if progress and now - last_progress >= 1.0:
                    last_progress = now
                    progress(f"{now - t_start:5.1f} s  {st.records:,} events  "
                             f"{st.requests} requests done")
        except (KeyboardInterrupt, Interrupted):
            stopped = "interrupted"
        main = threading.current_thread() is threading.main_thread()
        old = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
        try:
            if held is not None:
                held.finish()
            status = session.stop()
            if progress:
                progress(f"attributing {status.records:,} events")
            result = _attribute_spool(env, opts, target, header, out, warnings, progress,
                                      session.spool, t0, stopped, t_start, status, network)
        finally:
            if main:
                signal.signal(signal.SIGINT, old)
    except BaseException:
        session.kill()
        if held is not None:
            held.finish()
        raise
    finally:
        session.close()
        shutil.rmtree(spool_dir, ignore_errors=True)
    return TraceRun(out, result, "ebpf", warnings)


def _attribute_spool(env: Env, opts: TraceOptions, target: trace_targets.Target,
                     header: dict[str, Any], out: Path, warnings: list[str],
                     progress: Callable[[str], None] | None, spool: Path, t0: int,
                     stopped: str, t_start: float, status: libbpf_trace.Status,
                     network: round_trips.Window | None) -> dict[str, Any]:
    """The spooled records → the trace file and its summary."""
    summary = SummaryBuilder(header)
    writer = TraceWriter(out, header)
    attr, dispatch = _attributor(opts, target, header, writer, summary,
                                 strlen=libbpf_trace.STRMAX)
    attr.t0 = t0
    keep = _title_filter(target)
    reorder = Reorder()
    counted = CountedRequests()
    try:
        for fields in libbpf_trace.decode(spool.read_bytes()):
            if keep is not None and fields[0] not in (b"F", b"E") and not keep(int(fields[1])):
                continue
            if fields[0] == b"K":
                counted.add(bpftrace.unpack_counts([int(v) for v in fields[4:]]))
                continue
            reorder.push(fields)
            for ready in reorder.pop_ready():
                dispatch(ready)
        for ready in reorder.pop_ready(flush=True):
            dispatch(ready)
    except BaseException:
        writer.close({"stopped": "error"})
        raise
    extra = {"events": status.records}
    if opts.sample > 1:
        extra["sampling"] = counted.trailer(opts.sample, attr.completed)
    return _finish(env, attr, writer, summary, progress, out, warnings, backend="ebpf",
                   stopped=stopped, t_start=t_start, dropped=status.lost, network=network,
                   strlen=libbpf_trace.STRMAX, extra=extra)


def _title_filter(target: trace_targets.Target) -> Callable[[int], bool] | None:
    """Which PIDs' events count (Apache: the processes that run PHP), or None: all."""
    if not target.allow:
        return None
    return php_targets.TitleFilter(target.allow, *([target.settled] if target.settled else []))


def _attributor(opts: TraceOptions, target: trace_targets.Target, header: dict[str, Any],
                writer: TraceWriter, summary: SummaryBuilder, strlen: int = bpftrace.STRLEN
                ) -> tuple[Attributor | CountAttributor, Callable[[list[bytes]], None]]:
    """The attributor the events go to, and the function that feeds it one event."""
    if opts.counts:
        cattr = CountAttributor(Tee(writer, summary), single_request=target.mode == "cmd")
        return cattr, functools.partial(feed_counts, cattr)
    eattr = Attributor(Tee(writer, summary), header["mounts"], cwd_of=_cwd_of,
                       single_request=target.mode == "cmd", strlen=strlen)
    return eattr, functools.partial(feed, eattr)


def _finish(env: Env, attr: Attributor | CountAttributor, writer: TraceWriter,
            summary: SummaryBuilder, progress: Callable[[str], None] | None, out: Path,
            warnings: list[str], *, backend: str, stopped: str, t_start: float, dropped: int,
            network: round_trips.Window | None, strlen: int,
            extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Close an eBPF trace once every event is fed: its trailer, warnings and summary."""
    attr.finish()
    trailer: dict[str, Any] = {
        "stopped": stopped, "duration_ns": attr.last_ns,
        "wall_s": round(time.monotonic() - t_start, 3), "dropped": dropped,
        "completed_requests": attr.completed, "truncated_paths": attr.truncated_paths,
        "pids": sorted(attr.pids_seen), "forks": attr.forks, "exits": attr.exits,
        "backend": backend, **(extra or {}),
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
    _build_input(env, progress, out)
    return result



def _run_strace(env: Env, opts: TraceOptions, target: trace_targets.Target, out: Path, warnings: list[str],
                progress: Callable[[str], None] | None,
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
        header = _header("strace", target, opts)
        header["import"] = trace.header.get("import", {})
        master = set(target.parents)
        summary = SummaryBuilder(header)
        with TraceWriter(out, header) as writer:
            tee = Tee(writer, summary)
            mount_idx = Attributor(tee, header["mounts"], cwd_of=_cwd_of).mount_of
            keep = {r.id for r in trace.requests.values() if r.pid not in master}
            for s in trace.syscalls:
                if s.pid in master:
                    continue
                s.mount = mount_idx(s.path) if s.path else -1
                tee.syscall(s)
            for r in trace.requests.values():
                if r.id in keep:
                    tee.request(r)
            trailer = {"stopped": stopped, "backend": "strace",
                       "wall_s": round(time.monotonic() - t0, 3)}
            writer.close(trailer)
        result = summary.finish(trailer)
    finally:
        session.close()
    return TraceRun(out, result, "strace", warnings)


# -- saved traces ------------------------------------------------------------------------------
def show(path: Path) -> dict[str, Any]:
    """The summary of a saved trace (`statstorm trace show`)."""
    return summarize(read_trace(path))


def diff(a: Path, b: Path) -> dict[str, Any]:
    """Two saved traces per request, call type by call type (`statstorm trace diff`)."""
    return diff_summaries(show(a), show(b))


def import_log(source: Path, output: Path | None, *, requests: int | None,
               table: int = 0) -> tuple[Path, dict[str, Any]]:
    """An strace log or `strace -c` table written as a trace (`statstorm trace import`):
    the file written (default SOURCE.sst.gz) and its summary."""
    if requests is not None and requests <= 0:
        raise UsageError("--requests must be at least 1")
    tr = strace_log.import_file(source, requests=requests, table=table)
    out = output or source.with_name(source.name + ".sst.gz")
    write_trace(out, tr)
    return out, summarize(tr)
