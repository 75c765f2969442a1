"""`statstorm trace`: capture PHP's file-metadata syscalls per request and per PHP operation.

Targets: a php-fpm pool (with workers respawned during the trace), the system Apache's PHP
(mod_php children replaced during the trace followed), PIDs, a lab's pool, or a command run
under the tracer; none named: the one PHP target running on the host. The backend is the compiled eBPF tracer when it is built, else
bpftrace, else strace (run by adapters/tracing/libbpf_run.py, bpftrace_run.py and
strace_run.py; what they share: trace_backends.py); the events are attributed
(model.attribution) into the trace file and its summary, returned as a `TraceRun`
(results/trace_run.py).
"""

from __future__ import annotations

import datetime as dt
import os
import shlex
import stat
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from statstorm import faults
from statstorm.adapters.php import by_site
from statstorm.adapters.tracing import (bpftrace, last_trace, libbpf_trace, strace_log,
                                        trace_targets, tracer_host)
from statstorm.adapters.tracing.bpftrace_run import run_bpftrace
from statstorm.adapters.tracing.bpftrace_session import Refused
from statstorm.adapters.tracing.libbpf_run import run_ebpf
from statstorm.adapters.tracing.strace_run import run_strace
from statstorm.adapters.tracing.trace_thread import Tracer
from statstorm.adapters.tracing.trace_backends import (DEFAULT_DURATION_S, DEFAULT_EVENT_CAP,
                                                       RecordOptions)
from statstorm.env import Env
from statstorm.errors import DependencyError, UsageError
from statstorm.model.tracestats import diff as diff_summaries
from statstorm.model.tracestats import summarize_trace
from statstorm.results.common import check_output_dir
from statstorm.results.doctor import DoctorResult, Mode
from statstorm.results.trace import (CALLS, FLAGGED_STAT, SUMMARY_KEYS, SYSCALL_CALL, Trace,
                                    read_trace, write_trace)
from statstorm.results.trace.diff import Change, DiffSide, TraceDiff
from statstorm.results.trace.summary import TraceSummary
from statstorm.results.trace.vocabulary import TracerBackend
from statstorm.results.trace_run import TraceRun

EBPF, BPFTRACE, STRACE = TracerBackend.EBPF, TracerBackend.BPFTRACE, TracerBackend.STRACE
BACKENDS = ("auto", EBPF.value, BPFTRACE.value, STRACE.value)


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
    run_id: str = ""  # the run the trace belongs to (the demo's), in the trace's header
    apache: bool = False  # the system Apache's PHP (mod_php, mod_fcgid)
    site: str = ""  # a site's URL: the PHP target serving it
    live: bool = False  # attribute while recording (RecordOptions.live): the CLI's own traces

    def recording(self) -> RecordOptions:
        """What the backend records and until when."""
        return RecordOptions(duration_s=self.duration_s, requests=self.requests,
                             max_events=self.max_events, counts=self.counts,
                             sample=self.sample, run_id=self.run_id, live=self.live)


def default_output() -> Path:
    return Path(f"trace-{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}.sst.gz")


def validate(opts: TraceOptions) -> None:
    modes = [m for m in (opts.pool, opts.pids, opts.lab, opts.cmd, opts.apache, opts.site) if m]
    if len(modes) > 1:
        raise UsageError("give exactly one target (none: the one running here): --pool NAME, "
                         "--apache, --site URL, -p PID, --lab [NAME] or --cmd 'php script.php'")
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
    if opts.sample > 1 and (opts.counts or opts.backend in (BPFTRACE, STRACE)):
        raise UsageError("--sample records one request in N in full with the compiled eBPF "
                         "tracer: use it without --counts and with --backend auto or ebpf")
    if opts.sample > 1 and opts.cmd is not None:
        raise UsageError("--sample needs a server's requests to choose from; a --cmd trace "
                         "is one request")
    if opts.counts and opts.backend == STRACE:
        raise UsageError("--counts counts in the kernel with eBPF; drop --backend strace "
                         "(strace records every call)")
    out = opts.output or default_output()
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(f"{out}: directory {parent} does not exist; create it or choose "
                         "another -o")
    if not os.access(parent, os.W_OK):
        raise UsageError(f"{out}: directory {parent} is not writable; choose another -o")
    try:
        words = shlex.split(opts.cmd) if opts.cmd is not None else None
    except ValueError as exc:  # an unbalanced quote
        raise UsageError(f"--cmd {opts.cmd!r}: {exc}; quote it as a shell would, e.g. "
                         "--cmd 'php -r \"echo 1;\"'") from None
    if words == []:
        raise UsageError("--cmd is empty; e.g. --cmd 'php script.php'")


# -- running ---------------------------------------------------------------------------------
def counting_tracer(env: Env, *, lab: str | None, pool: str | None, duration_s: float,
                    output: Path, ready: threading.Event, stop: threading.Event) -> TraceRun:
    """The in-kernel counting trace of a pool during a load run (sweep --trace, apply
    --verify): attached when `ready` is set, ended by `stop`."""
    return run(env, TraceOptions(lab=lab, pool=pool, counts=True,
                                 duration_s=duration_s, output=output), ready=ready, stop=stop)


def views_tracer(views: int, run_id: str = "") -> Tracer:
    """The full trace of a lab's or pool's page views (the demo's and tune's "find" step):
    it ends by itself once `views` requests are over; its header carries `run_id`."""
    def tracer(env: Env, *, lab: str | None, pool: str | None, duration_s: float, output: Path,
               ready: threading.Event, stop: threading.Event) -> TraceRun:
        return run(env, TraceOptions(lab=lab, pool=pool, requests=views, duration_s=duration_s,
                                     output=output, run_id=run_id), ready=ready, stop=stop)
    return tracer


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
    if opts.site:
        found = by_site.serving(env, opts.site)
        env.log(f"{opts.site}: {found.how}")
        opts = replace(opts, pool=found.pool or None, apache=found.apache)
    target = trace_targets.resolve(env, lab=opts.lab, pool=opts.pool,
                                   pids=list(opts.pids) if opts.pids else None, cmd=opts.cmd,
                                   apache=opts.apache)
    out = opts.output or default_output()
    result = _record(env, opts, target, out, progress, ready, stop)
    if target.mode in last_trace.MODES and target.pool:
        lab = (opts.lab or "") if target.mode == "lab" else ""
        _remember(env, result, target.pool, lab)
    return result


def _remember(env: Env, result: TraceRun, pool: str, lab: str) -> None:
    """Keep the trace as the pool's last (check reads it when given no --trace); a trace
    that cannot be remembered is still written: a warning says so."""
    ended = last_trace.now()
    try:
        last_trace.remember(env, last_trace.record(result.output, pool, lab, ended))
    except (OSError, UsageError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        result.warnings.append(f"the trace is written, but check cannot find it as this pool's "
                               f"last trace ({last_trace.root(env)}: {why}): give it with "
                               f"`statstorm check --trace {result.output}`")


def _record(env: Env, opts: TraceOptions, target: trace_targets.Target, out: Path,
            progress: Callable[[str], None] | None, ready: threading.Event | None,
            stop: threading.Event | None) -> TraceRun:
    """Run the backend chosen (falling back as `auto` allows) until its bound. What this
    host's kernel cannot run is refused, or fallen back from, in doctor's words
    (adapters/tracing/tracer_host.py)."""
    backend = opts.backend
    rec = opts.recording()
    warnings: list[str] = []
    host = tracer_host.judge()
    if backend in ("auto", EBPF):
        why = tracer_host.refusal(host, Mode.COUNTS if rec.counts else Mode.EVENTS)
        built = libbpf_trace.loader() is not None
        if why and (backend == EBPF or opts.sample > 1):
            raise DependencyError(why)  # --sample needs it too: the line says how
        if not why:
            if rec.counts:  # full events need no tracefs (raw tracepoints, uprobe links)
                bpftrace.ensure_tracefs()
            try:
                return run_ebpf(env, rec, target, out, warnings, progress, ready, stop)
            except libbpf_trace.Refused as exc:
                if backend == EBPF:
                    raise DependencyError(f"the eBPF tracer could not attach: {exc}") from None
                warnings.append(f"the eBPF tracer could not attach ({exc}); trying bpftrace")
        elif built:
            warnings.append(f"{why}; trying bpftrace")
    if backend in ("auto", BPFTRACE):
        try:
            bpftrace.find()
            why = tracer_host.refusal(host, Mode.BPFTRACE)
            if why:
                raise DependencyError(why)
            bpftrace.ensure_tracefs()
        except DependencyError as exc:
            if backend == BPFTRACE:
                raise
            warnings.append(f"{exc}; falling back to strace")
            backend = STRACE
    if backend == STRACE:
        return _strace(env, host, rec, target, out, warnings, progress, ready, stop)
    try:
        return run_bpftrace(env, rec, target, out, warnings, progress, ready, stop)
    except Refused as exc:
        if opts.backend == BPFTRACE:
            raise DependencyError(f"bpftrace could not attach: {exc}") from None
        warnings.append(f"bpftrace could not attach ({exc}); falling back to strace")
        return _strace(env, host, rec, target, out, warnings, progress, ready, stop)


def _strace(env: Env, host: DoctorResult, rec: RecordOptions, target: trace_targets.Target,
            out: Path, warnings: list[str], progress: Callable[[str], None] | None,
            ready: threading.Event | None, stop: threading.Event | None) -> TraceRun:
    """strace, the last fallback: refused in doctor's words where ptrace cannot attach; a
    counting trace fallen back to it holds every call (strace cannot count in the kernel)."""
    why = tracer_host.refusal(host, Mode.STRACE)
    if why and host.tools.strace:  # not installed: StraceSession says what to install
        raise DependencyError(why)
    if rec.counts:
        rec = replace(rec, counts=False)
        warnings.append("strace cannot count in the kernel: this trace holds every call "
                        "(full events), not counts")
    return run_strace(env, rec, target, out, warnings, progress, ready, stop)


def _summary(tr: Trace) -> TraceSummary:
    """summarize_trace(), with what an excerpt of an `strace -c` table does not say marked
    unknown (None, listed in `unknown`): the call types none of its rows counts, and the totals."""
    s = summarize_trace(tr)
    head = tr.head
    if head.source != TracerBackend.STRACE_C or head.import_complete:
        return s
    partial = {SYSCALL_CALL.get(n) or ("stat" if n in FLAGGED_STAT else "")
               for n in head.import_unreadable}
    unknown = [k for k in SUMMARY_KEYS if k not in CALLS or not s.totals[k] or k in partial]
    s = replace(s, per_request=s.per_request.unknown(unknown),
                totals=s.totals.unknown(unknown), failed_share=None, unknown=tuple(unknown))
    return s.noted("an excerpt of an strace -c table (rows cut or no total row): "
                   + ", ".join(unknown) + " unknown, not 0")


def _regular(path: Path) -> None:
    """Refuse a FIFO or device before opening it (opening a FIFO waits for a writer)."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return  # read_trace names the problem
    if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        raise UsageError(f"{path}: not a regular file (a pipe, socket or device); give a trace "
                         "file written by statstorm trace")


def show(path: Path) -> TraceSummary:
    """The summary of a saved trace (`statstorm trace show`)."""
    _regular(path)
    tr = read_trace(path)
    s = _summary(tr)
    if not tr.sealed:  # whole (it ends with its trailer), but written before traces were sealed
        s = s.noted("written before statstorm sealed its traces: its completeness and content "
                    "could not be checked")
    return s


def diff(a: Path, b: Path) -> TraceDiff:
    """Two saved traces per request, call type by call type (`statstorm trace diff`). A call
    type either side does not know (an excerpt of an `strace -c` table) is not compared: its
    delta and ratio are None and it is listed in `not_compared`."""
    sa, sb = show(a), show(b)
    unknown = sorted(set(sa.unknown or ()) | set(sb.unknown or ()), key=SUMMARY_KEYS.index)
    d = diff_summaries(replace(sa, per_request=sa.per_request.known()),
                       replace(sb, per_request=sb.per_request.known()))
    per_request = {**d.per_request, **{k: Change(sa.per_request[k], sb.per_request[k], None,
                                                 None) for k in unknown}}
    return replace(d, a=DiffSide(sa.requests, sa.per_request),
                   b=DiffSide(sb.requests, sb.per_request), per_request=per_request,
                   not_compared=tuple(unknown) or None)


def import_log(source: Path, output: Path | None, *, requests: int | None,
               table: int = 0) -> tuple[Path, TraceSummary]:
    """An strace log or `strace -c` table written as a trace (`statstorm trace import`):
    the file written (default SOURCE.sst.gz) and its summary."""
    if requests is not None and requests <= 0:
        raise UsageError("--requests must be at least 1")
    if output is not None:  # checked before the import (the default is beside the source)
        check_output_dir(output)
    tr = strace_log.import_file(source, requests=requests, table=table)
    out = output or source.with_name(source.name + ".sst.gz")
    faults.phase("trace-import/parsed")
    write_trace(out, tr)
    return out, _summary(tr)


__all__ = ["BACKENDS", "DEFAULT_DURATION_S", "DEFAULT_EVENT_CAP", "TraceOptions", "TraceRun",
           "counting_tracer", "default_output", "diff", "import_log", "run",
           "show", "validate"]
