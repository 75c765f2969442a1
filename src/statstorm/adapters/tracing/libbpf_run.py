"""The compiled eBPF tracer's run for `statstorm trace` (adapters/tracing/libbpf_trace.py): attached
to a resolved target, its records spooled while PHP runs and decoded and attributed into the
trace file and its summary (while it records for `statstorm trace`, within a share of one core;
after the stop for a measured run), with a sampled trace's counted requests stated in the
trailer."""

from __future__ import annotations

import contextlib
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

from statstorm import faults
from statstorm.adapters.storage import round_trips
from statstorm.adapters.tracing import (bpftrace, count_lines, libbpf_trace, php_layouts,
                                        trace_targets)
from statstorm.adapters.tracing.trace_backends import (DEFAULT_DURATION_S, RecordOptions,
                                                       bound_reached, count_attributor,
                                                       event_attributor, finish_events, header,
                                                       hold_command, on_attached, title_filter)
from statstorm.env import Env
from statstorm.errors import ComponentError, Interrupted
from statstorm.model.attribution import Attributor
from statstorm.model.count_attribution import CountAttributor
from statstorm.model.events import feed_record
from statstorm.model.sampling import CountedRequests
from statstorm.model.tracestats import SummaryBuilder
from statstorm.results.common import signals_deferred
from statstorm.results.trace import TraceWriter
from statstorm.results.trace.header import PhpIdentity
from statstorm.results.trace.summary import TraceSummary
from statstorm.results.trace.vocabulary import TracerBackend
from statstorm.results.trace_run import TraceRun


def run_ebpf(env: Env, opts: RecordOptions, target: trace_targets.Target, out: Path,
              warnings: list[str], progress: Callable[[str], None] | None,
              ready_event: threading.Event | None = None,
              stop: threading.Event | None = None) -> TraceRun:
    """The compiled tracer: records spooled in the kernel's format while PHP runs, decoded
    and attributed as they come (`opts.live`, within LIVE_SHARE of a core) and once the
    trace has stopped (adapters/tracing/libbpf_trace.py)."""
    network = round_trips.window_for(env, target.code)
    held = hold_command(target)
    head = header(TracerBackend.EBPF, target, opts, env)
    if opts.sample > 1:
        head["sampling"] = {"one_in": opts.sample}
    # The layout of the PHP probed (the table's, a root's headers', the built-in one); none
    # known: its includes probed, or its requests counted and no operation attributed, and
    # one line saying why, in the output and the header.
    layout = php_layouts.for_binaries(env, target.binaries)
    if layout.note and not opts.counts:
        warnings.append(layout.note)
    head["php_layout"] = layout.header()
    if layout.version and not head["php"]["version"]:  # the build id's layout says
        head["php"] = PhpIdentity(layout.version, source="layout").to_json()
    spool_dir = Path(tempfile.mkdtemp(prefix="statstorm-trace-"))
    session = libbpf_trace.LoaderSession(
        bpftrace.Targets(tuple(target.pids), tuple(target.parents)), target.binaries,
        spool_dir / "records.bin", sample=opts.sample, counts=opts.counts,
        own=target.own_probes, layout=layout.args)
    stopped = "end"
    spooled: SpoolAttribution | None = None

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
        main = threading.current_thread() is threading.main_thread()
        deadline = (t_start + (opts.duration_s or DEFAULT_DURATION_S)
                    if opts.duration_s is not None or target.mode != "cmd" else None)
        on_attached(network, held, ready_event)
        last_progress = 0.0
        try:
            while True:
                st = session.poll(0.2)
                now = time.monotonic()
                bound = bound_reached(opts, now, deadline, stop, st.requests, st.syscalls,
                                      held, warnings)
                if bound:
                    stopped = bound
                    break
                if session.exited():
                    raise ComponentError(f"the eBPF tracer stopped: {session.refusal()}")
                if opts.live:  # the trace file begun at the first poll, once recording
                    spooled = spooled or SpoolAttribution(opts, target, head, out, t0)
                    spooled.feed(session.spool, budget=LIVE_SHARE)
                if progress and now - last_progress >= 1.0:
                    last_progress = now
                    progress(f"{now - t_start:5.1f} s  {st.syscalls:,} syscalls  "
                             f"{st.requests} requests done")
        except (KeyboardInterrupt, Interrupted):
            # an attribution that failed as a signal was held back: the failure is the news
            if spooled is not None and spooled.failed is not None:
                raise spooled.failed from None
            stopped = "interrupted"
        old = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
        try:
            if held is not None:
                held.finish()
            status = session.stop()
            faults.phase("trace/stopped")
            if progress:
                progress(f"attributing the last of {status.records:,} events" if opts.live
                         else f"attributing {status.records:,} events")
            spooled = spooled or SpoolAttribution(opts, target, head, out, t0)
            spooled.feed(session.spool)
            result = spooled.finish(env, progress, warnings, stopped, t_start, status, network)
        finally:
            if main:
                signal.signal(signal.SIGINT, old)
    except BaseException:
        session.kill()
        if held is not None:
            held.cancel()
        if spooled is not None:
            spooled.abort()
        raise
    finally:
        session.close()
        shutil.rmtree(spool_dir, ignore_errors=True)
    return TraceRun(out, result, TracerBackend.EBPF, warnings)


# While a `statstorm trace` records: at most this share of one core attributes its records,
# in pieces of PIECE bytes (about 1,000 records), from at most LIVE_READ bytes read at a time
LIVE_SHARE = 0.25
PIECE = 64 << 10
LIVE_READ = 1 << 20
CREDIT_S = 0.1  # the share's CPU not spent, kept for a later burst (the loader's 1 MiB lumps)
CALL_S = 0.1  # at most this long in one call, so the trace's bounds are checked on time


class SpoolAttribution:
    """The spooled records → the trace file and its summary. Fed the spool's new whole
    records as it grows (`opts.live`: a `statstorm trace` a user waits for, whose file is
    then written soon after its end, with no more than a quarter of one core spent on it
    while PHP runs: LIVE_SHARE), or all at once after the stop (a measured run: nothing
    decoded while PHP is measured)."""

    def __init__(self, opts: RecordOptions, target: trace_targets.Target, head: dict[str, Any],
                 out: Path, t0: int) -> None:
        self.opts, self.out = opts, out
        self.summary = SummaryBuilder(head)
        self.writer = TraceWriter(out, head)
        self.attr: Attributor | CountAttributor
        if opts.counts:
            self.attr = count_attributor(target, self.writer, self.summary)
        else:
            self.attr = event_attributor(target, head, self.writer, self.summary,
                                         libbpf_trace.STRMAX)
        self.attr.t0 = t0
        self.keep = title_filter(target)
        self.counted = CountedRequests()
        self.interned: dict[tuple[int, int, int], bytes] = {}
        self.offset = 0  # of the spool: the bytes attributed so far
        self.aborted = False
        self.failed: BaseException | None = None  # what a feed raised (then aborted)
        self.start = time.monotonic()
        self.spent = 0.0  # CPU seconds attributing while the trace records

    def feed(self, spool: Path, budget: float | None = None) -> None:
        """Attribute the spool's whole records past those already fed. `budget` (while the
        trace records): at most that share of one core since `start` goes to attributing
        (CREDIT_S saved up at most, CALL_S a call), a piece (PIECE bytes) at a time, the rest
        left for later (a saturated pool's records come faster than they are attributed:
        the CPU stays PHP's); and Ctrl-C and SIGTERM are handled once a piece is done
        (`signals_deferred`), so an interruption never falls inside a record's attribution:
        the trace published after it must read. Without: everything left, at once (after
        the stop)."""
        try:
            with open(spool, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read() if budget is None else fh.read(LIVE_READ)
        except FileNotFoundError:
            return  # not written yet
        done, began = 0, time.monotonic()
        if budget is not None:  # no credit saved up past CREDIT_S: the share holds at any time
            self.spent = max(self.spent, budget * (began - self.start) - CREDIT_S)
        while done < len(data):
            if budget is not None and (
                    self.spent >= budget * (time.monotonic() - self.start)
                    or time.monotonic() - began >= CALL_S):  # back to the trace's bounds
                break
            piece = data[done:] if budget is None else data[done:done + PIECE]
            whole = libbpf_trace.complete(piece)
            if not whole:
                break  # the rest of a record not written yet
            t = time.thread_time()
            # (a signal held back is raised as the `with` ends: the trace goes on to its stop)
            with signals_deferred() if budget is not None else contextlib.nullcontext():
                try:
                    self._attribute(piece[:whole] if whole < len(piece) else piece)
                except BaseException as exc:
                    self.failed = exc
                    self.abort()  # a failed trace is not published: the previous file stays
                    raise
                done += whole
                self.offset += whole
            self.spent += time.thread_time() - t

    def _attribute(self, data: bytes) -> None:
        attr, keep, counted = self.attr, self.keep, self.counted
        for rec in libbpf_trace.decode(data, self.interned):
            tag = rec[0]
            if keep is not None and tag != "F" and tag != "E" and not keep(rec[1]):
                continue
            if isinstance(attr, CountAttributor) or tag == "K":
                line = count_lines.from_record(rec)
                if isinstance(attr, CountAttributor):
                    if line is not None:
                        count_lines.feed(attr, line)
                elif isinstance(line, count_lines.Counted):  # counted, not recorded (--sample)
                    counted.add(line.calls())
            else:
                feed_record(attr, rec)

    def abort(self) -> None:
        if not self.aborted:  # no temp file (a no-op once published)
            self.aborted = True
            self.writer.abort()

    def finish(self, env: Env, progress: Callable[[str], None] | None, warnings: list[str],
               stopped: str, t_start: float, status: libbpf_trace.Status,
               network: round_trips.Window | None) -> TraceSummary:
        """Every record fed: the trailer, the summary and the what-if input."""
        opts, summary, counted = self.opts, self.summary, self.counted

        def extra() -> dict[str, Any]:
            if opts.sample <= 1:
                return {"events": status.records}
            done = [c["total"] for i, c in summary.per_req.items()
                    if i in summary.requests and summary.requests[i].end_ns >= 0]
            sampling = counted.trailer(opts.sample, done)
            # the recording windows (one worker at a time) and the PHP function probes that
            # ran in requests not recorded (those of the armed worker while its probes detach)
            sampling.update(windows=status.windows, probe_hits_unrecorded=status.unrecorded_hits)
            return {"events": status.records, "sampling": sampling}

        try:
            return finish_events(env, self.attr, self.writer, summary, progress, self.out,
                                 warnings, backend=TracerBackend.EBPF, stopped=stopped,
                                 t_start=t_start, dropped=status.lost, network=network,
                                 strlen=libbpf_trace.STRMAX, extra=extra)
        except BaseException:
            self.abort()  # no temp file after a failed drain
            raise
