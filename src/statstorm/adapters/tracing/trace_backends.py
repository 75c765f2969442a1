"""What the tracer backends' runs for `statstorm trace` share: the compiled eBPF tracer's
(adapters/tracing/libbpf_run.py), bpftrace's (adapters/tracing/bpftrace_run.py) and strace's
(adapters/tracing/strace_run.py), each attached to a resolved target and ended by a duration,
a request count, an event cap, a stop event or Ctrl-C: what a run records and until when
(`RecordOptions`), the trace header, the bound that ends it, the attributors its events go
through, and its close (trailer, summary, the what-if input beside the trace). The backends
themselves are adapters/tracing/libbpf_trace.py, adapters/tracing/bpftrace_session.py and
adapters/tracing/strace_session.py; commands/trace.py chooses one and falls back to the next."""

from __future__ import annotations

import datetime as dt
import os
import re
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from statstorm import faults
from statstorm.adapters.host import procs
from statstorm.adapters.labs import phpfpm
from statstorm.adapters.php import php_targets
from statstorm.adapters.storage import mounts, round_trips
from statstorm.adapters.tracing import trace_targets, whatif_input
from statstorm.env import Env
from statstorm.model import php_versions
from statstorm.model.attribution import Attributor
from statstorm.model.count_attribution import CountAttributor
from statstorm.model.tracestats import SummaryBuilder, Tee
from statstorm.results.trace import TraceWriter, new_header
from statstorm.results.php_root import HOST_VERSION
from statstorm.results.trace.header import PhpIdentity
from statstorm.results.trace.summary import TraceSummary
from statstorm.results.trace.vocabulary import TracerBackend

DEFAULT_EVENT_CAP = 2_000_000
DEFAULT_DURATION_S = 10.0


@dataclass(frozen=True)
class RecordOptions:
    """What a backend records and until when (from `statstorm trace`'s options)."""

    duration_s: float | None = None  # None: DEFAULT_DURATION_S, or a command's whole run
    requests: int | None = None
    max_events: int = DEFAULT_EVENT_CAP
    counts: bool = False  # count per request in the kernel: no paths, mounts or operations
    sample: int = 1  # record about one request in N in full, count the others (ebpf)
    run_id: str = ""  # the run the trace belongs to (a demo's), written in the header
    # attribute the compiled tracer's records while it records (`statstorm trace`: the file
    # is written soon after the trace ends), not only once it has stopped (a measured run)
    live: bool = False


def cwd_of(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return ""


def header(source: TracerBackend, target: trace_targets.Target,
           opts: RecordOptions, env: Env | None = None) -> dict[str, Any]:
    """The trace's header; with `env`, the traced PHP's full version is asked of its binary."""
    targets: dict[str, Any] = {"mode": target.mode, "description": target.description,
                               "pids": target.pids}
    if target.pool:
        targets["pool"] = target.pool
    if target.argv:
        targets["cmd"] = target.argv
    entries = mounts.current()
    head = new_header(source.value, created=dt.datetime.now(dt.timezone.utc).isoformat(
        timespec="seconds"), host=socket.gethostname(), targets=targets,
        settings=target.settings, mounts=[(m.mount_point, m.fstype) for m in entries],
        detail="counts" if opts.counts else "events")
    # each mount's effective cache options (network mounts; {} for the others), for whatif
    head["mount_options"] = [mounts.detect(m.mount_point).cache_options
                             if mounts.kind_of(m.fstype) in ("nfs", "glusterfs-fuse") else {}
                             for m in entries]
    if opts.run_id:
        head["run_id"] = opts.run_id
    head["php"] = php_identity(env, target).to_json()
    return head


def php_identity(env: Env | None, target: trace_targets.Target) -> PhpIdentity:
    """The PHP the trace is of: a lab's version from its state, else the version the traced
    binaries' Debian names carry (php-fpm8.4, libphp8.2.so; the host's for a `php` that
    names none); the full version from the binary's `-v` (with `env`), run as the target
    runs it (chrooted in its PHP root). Unknown ('') when no PHP binary is traced or they
    are of several versions."""
    binaries = [os.path.realpath(b) for b in target.binaries
                if os.path.basename(b).startswith(("php", "libphp")) and os.path.isfile(b)]
    version, source = target.php_version, "lab" if target.php_version else ""
    if not version and binaries:
        named = {php_versions.version_of(b) for b in binaries}
        if len(named) == 1:
            version, source = named.pop() or HOST_VERSION, "binary"
    if not version:
        return PhpIdentity()
    full = ""
    runnable = [b for b in binaries if os.path.basename(b).startswith("php")]
    if env is not None and runnable:
        res = env.run([*phpfpm.command(runnable[0]), "-v"], check=False, timeout=30,
                      what=f"{os.path.basename(runnable[0])} -v")
        m = re.match(r"PHP (\d+\.\d+\.\d+\S*)", res.stdout)
        if m and m.group(1).startswith(version + "."):
            full = m.group(1)
    return PhpIdentity(version, full, source)


def build_input(env: Env, progress: Callable[[str], None] | None, path: Path) -> None:
    """The what-if input of the trace just written, kept beside it (TRACE.whatif-cache), so
    that the first `statstorm whatif TRACE` starts from it (`whatif_input.build`)."""
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


def bound_reached(opts: RecordOptions, now: float, deadline: float | None,
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


def finish_events(env: Env, attr: Attributor | CountAttributor, writer: TraceWriter,
                  summary: SummaryBuilder, progress: Callable[[str], None] | None, out: Path,
                  warnings: list[str], *, backend: TracerBackend, stopped: str, t_start: float,
                  dropped: int, network: round_trips.Window | None, strlen: int,
                  extra: Callable[[], dict[str, Any]] | None = None) -> TraceSummary:
    """Close an eBPF trace once every event is fed: its trailer, warnings and summary.
    `extra` adds to the trailer what the backend tells once every request is closed."""
    faults.phase("trace/publish")
    attr.finish()
    trailer: dict[str, Any] = {
        "stopped": stopped, "duration_ns": attr.last_ns,
        "wall_s": round(time.monotonic() - t_start, 3), "dropped": dropped,
        "completed_requests": attr.completed, "truncated_paths": attr.truncated_paths,
        "pids": sorted(attr.pids_seen), "forks": attr.forks, "exits": attr.exits,
        "backend": backend.value, **(extra() if extra is not None else {}),
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
    result = summary.build(trailer)
    build_input(env, progress, out)
    return result
