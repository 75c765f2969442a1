"""`statstorm trace`: capture PHP's file-metadata syscalls per request and per PHP operation.

Targets: a php-fpm pool (with workers respawned during the trace), PIDs, a lab's pool, or a
command run under the tracer. The eBPF backend (bpftrace) streams events into the
attributor (model.attribute), which writes the trace file and feeds the summary as it goes;
the strace backend records a log and imports it.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import functools
import os
import re
import select
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from statstorm.adapters import bpftrace, mounts, phpfpm, procs
from statstorm.context import Env
from statstorm.errors import ComponentError, DependencyError, Interrupted, UsageError
from statstorm.model import inputcache
from statstorm.model.attribute import Attributor, CountAttributor, Reorder, feed
from statstorm.model.tracestats import SummaryBuilder
from statstorm.results.trace import (Operation, Request, RequestCounts, Syscall, TraceWriter,
                                     decode_path, new_header)

DEFAULT_EVENT_CAP = 2_000_000
F_SETPIPE_SZ = 1031  # fcntl: resize a pipe (Linux)
PIPE_BYTES = 1 << 20
COUNTS_BATCH_S = 0.05
DEFAULT_DURATION_S = 10.0
SETTING_PREFIXES = ("realpath_cache", "open_basedir", "include_path", "opcache.", "user_ini.",
                    "cgi.fix_pathinfo", "auto_prepend_file", "session.save_handler",
                    "session.save_path")
PHP_BINARIES = ("/usr/bin/php8.2", "/usr/sbin/php-fpm8.2", "/usr/bin/php-cgi8.2")
STRACE_SYSCALLS = ("newfstatat,statx,stat,lstat,fstat,access,faccessat,faccessat2,open,openat,"
                   "readlink,readlinkat,getcwd,chdir,fchdir,accept,accept4")


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
    backend: str = "auto"  # auto | bpftrace | strace
    counts: bool = False  # count per request in the kernel: no paths, mounts or operations


@dataclass
class Target:
    mode: str  # pool | pids | lab | cmd
    description: str
    pids: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    binaries: list[str] = field(default_factory=list)
    pool: str = ""
    settings: dict[str, Any] = field(default_factory=dict)
    argv: list[str] = field(default_factory=list)
    allow: Callable[[str], bool] | None = None  # given a process title: trace it?


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
    if opts.backend not in ("auto", "bpftrace", "strace"):
        raise UsageError("--backend: use auto, bpftrace or strace")
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


# -- settings --------------------------------------------------------------------------------
def _relevant(key: str) -> bool:
    return key.startswith(SETTING_PREFIXES)


def parse_php_i(text: str) -> dict[str, str]:
    """Directive values (the local value) from `php -i` / `php-fpm -i` output."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split("=>")]
        if len(parts) == 3 and _relevant(parts[0]):
            out[parts[0]] = "" if parts[1] == "no value" else parts[1]
    return out


def parse_fpm_tt(text: str, pool: str) -> dict[str, str]:
    """The pool's pm.* settings and php_value/php_admin_value lines from `php-fpm -tt`."""
    out: dict[str, str] = {}
    for key, value in phpfpm.pool_directives(text, pool).items():
        if key.startswith("pm"):
            out[key] = value
        vm = re.fullmatch(r"php_(?:admin_)?value\[(.+)\]", key)
        if vm and _relevant(vm.group(1)):
            out[vm.group(1)] = value
    return out


def _ini_args(argv: list[str]) -> list[str]:
    """The -d/-c/-n options of a PHP command line (they change its settings)."""
    out: list[str] = []
    i = 1
    while i < len(argv):
        a = argv[i]
        if a in ("-d", "-c") and i + 1 < len(argv):
            out += [a, argv[i + 1]]
            i += 2
            continue
        if a == "-n" or (a.startswith(("-d", "-c")) and len(a) > 2):
            out.append(a)
        elif a == "-y" or a == "--fpm-config":
            out += [a, argv[i + 1]] if i + 1 < len(argv) else []
            i += 2
            continue
        elif not a.startswith("-"):
            break
        i += 1
    return out


def fpm_settings(env: Env, binary: str, master_argv: list[str], pool: str) -> dict[str, Any]:
    args = _ini_args(master_argv)
    settings: dict[str, Any] = {}
    res = env.run([binary, "-i", *args], what="php-fpm -i", check=False)
    settings.update(parse_php_i(res.stdout))
    res = env.run([binary, "-tt", *args], what="php-fpm -tt", check=False)
    settings.update(parse_fpm_tt(res.stderr + res.stdout, pool))
    settings["sapi"] = "fpm-fcgi"
    return settings


def cli_settings(env: Env, argv: list[str]) -> dict[str, Any]:
    php = shutil.which(argv[0]) or argv[0]
    if not os.path.basename(php).startswith("php"):
        php = shutil.which("php") or PHP_BINARIES[0]
        args: list[str] = []
    else:
        args = [a for a in _ini_args(argv) if a not in ("-y", "--fpm-config")]
    res = env.run([php, *args, "-i"], what="php -i", check=False)
    settings: dict[str, Any] = parse_php_i(res.stdout)
    settings["sapi"] = "cli"
    return settings


# -- targets ---------------------------------------------------------------------------------
def pool_workers(pool: str) -> list[int]:
    return [p for p in procs.find_pids([f"php-fpm: pool {pool}"])
            if " ".join(procs.cmdline(p)).strip() == f"php-fpm: pool {pool}"]


def _php_binaries(extra: list[str]) -> list[str]:
    """The PHP binaries to probe: the targets' own, or every known one if they run no PHP
    binary directly (e.g. a shell script that starts php)."""
    own = [b for b in dict.fromkeys(extra) if b and os.path.basename(b).startswith("php")]
    return own or [b for b in PHP_BINARIES if os.path.exists(b)]


def _pool_target(env: Env, pool: str, mode: str, description: str,
                 settings_argv: list[str] | None = None) -> Target:
    """The pool's workers and master; its settings are read with `settings_argv` (the
    master's binary and options) when given, else from the master's title."""
    workers = pool_workers(pool)
    if not workers:
        raise UsageError(f"no php-fpm pool {pool!r} is running (no process titled "
                         f"'php-fpm: pool {pool}'); check the name with `ps -eo args | "
                         "grep 'php-fpm: pool'`")
    masters = sorted({procs.ppid(w) for w in workers} - {0})
    binary = procs.exe(workers[0])

    def allow(title: str) -> bool:
        # A worker forked a moment ago may still carry the master's title.
        return title == f"php-fpm: pool {pool}" or title.startswith("php-fpm: master") or not title

    t = Target(mode=mode, description=description, pids=workers, parents=masters,
               binaries=_php_binaries([binary]), pool=pool, allow=allow)
    if settings_argv is None:
        # The master's title hides its -d options; a lab passes them from its state.
        master_argv = procs.cmdline(masters[0]) if masters else []
        conf = re.search(r"\((\S+)\)", " ".join(master_argv))
        settings_argv = [binary] + (["-y", conf.group(1)] if conf else [])
    t.settings = fpm_settings(env, settings_argv[0], settings_argv, pool)
    return t


def resolve(env: Env, opts: TraceOptions) -> Target:
    if opts.lab:
        from statstorm.commands import lab as lab_cmd
        state = lab_cmd.status(env, opts.lab)
        if state.phase != "up" or not state.pool:
            raise UsageError(f"lab {opts.lab!r} is not up; start it with `statstorm lab up "
                             f"--name {opts.lab}`")
        # The lab's master gets its ini overrides as -d options: read them back the same way.
        conf = Path(state.state_dir) / "conf/php-fpm.conf"
        args = [state.fpm_binary, "-y", str(conf)]
        for k, v in state.php_ini.items():
            args += ["-d", f"{k}={v}"]
        t = _pool_target(env, state.pool, "lab", f"lab {opts.lab} (pool {state.pool})", args)
        t.settings["lab"] = opts.lab
        return t
    if opts.pool:
        return _pool_target(env, opts.pool, "pool", f"pool {opts.pool}")
    if opts.pids:
        for p in opts.pids:
            if not procs.alive(p):
                raise UsageError(f"PID {p} is not running")
        binaries = [procs.exe(p) for p in opts.pids]
        t = Target(mode="pids", description="PIDs " + ",".join(map(str, opts.pids)),
                   pids=list(opts.pids), binaries=_php_binaries(binaries))
        title = " ".join(procs.cmdline(opts.pids[0]))
        m = re.match(r"php-fpm: pool (\S+)", title)
        if m:
            master = procs.ppid(opts.pids[0])
            cm = re.search(r"\((\S+)\)", " ".join(procs.cmdline(master)))
            t.settings = fpm_settings(env, binaries[0],
                                      [binaries[0]] + (["-y", cm.group(1)] if cm else []),
                                      m.group(1))
        elif os.path.basename(binaries[0]).startswith("php"):
            t.settings = cli_settings(env, [binaries[0], *procs.cmdline(opts.pids[0])[1:]])
        return t
    assert opts.cmd is not None
    argv = shlex.split(opts.cmd)
    exe = shutil.which(argv[0])
    if exe is None:
        raise UsageError(f"--cmd: {argv[0]!r} not found in PATH")
    t = Target(mode="cmd", description=f"command {opts.cmd}", argv=argv,
               binaries=_php_binaries([os.path.realpath(exe)]))
    t.settings = cli_settings(env, argv)
    return t


# -- running ---------------------------------------------------------------------------------
class _Tee:
    def __init__(self, writer: TraceWriter, summary: SummaryBuilder) -> None:
        self.writer = writer
        self.summary = summary

    def syscall(self, s: Syscall) -> None:
        self.writer.syscall(s)
        self.summary.syscall(s)

    def request(self, r: Request) -> None:
        self.writer.request(r)
        self.summary.request(r)

    def operation(self, o: Operation) -> None:
        self.writer.operation(o)
        self.summary.operation(o)

    def request_counts(self, rc: RequestCounts) -> None:
        self.writer.request_counts(rc)
        self.summary.request_counts(rc)


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


def read_mounts() -> list[tuple[str, str]]:
    try:
        with open("/proc/self/mounts") as fh:
            return [(m.mount_point, m.fstype) for m in mounts.parse_mounts(fh.read())]
    except OSError:
        return []


def _cwd_of(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return ""


def _spawn_held(argv: list[str]) -> tuple[subprocess.Popen[bytes], int]:
    """Start `argv` held before exec until the write end of the returned pipe is closed.

    The pipe is the wrapper's stdin (a numbered descriptor would not survive the child's
    close_fds unless the pipe happened to get that number), and stays the command's: at
    end of file, it reads like /dev/null, and opening /dev/null instead would add a traced
    call. Its stdout goes to our stderr, so `--json` output stays clean."""
    r, w = os.pipe()
    wrapper = ["/bin/sh", "-c", 'read _; exec "$@"', "statstorm-held", *argv]
    try:
        proc = subprocess.Popen(wrapper, stdin=r, stdout=2)
    finally:
        os.close(r)
    return proc, w


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
    target = resolve(env, opts)
    out = opts.output or default_output()
    backend = opts.backend
    warnings: list[str] = []
    if backend in ("auto", "bpftrace"):
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
    except _BpftraceRefused as exc:
        if opts.backend == "bpftrace":
            raise DependencyError(f"bpftrace could not attach: {exc}") from None
        warnings.append(f"bpftrace could not attach ({exc}); falling back to strace")
        return _run_strace(env, opts, target, out, warnings, progress, ready, stop)


class _BpftraceRefused(Exception):
    pass


def _header(source: str, target: Target, opts: TraceOptions) -> dict[str, Any]:
    targets: dict[str, Any] = {"mode": target.mode, "description": target.description,
                               "pids": target.pids}
    if target.pool:
        targets["pool"] = target.pool
    if target.argv:
        targets["cmd"] = target.argv
    return new_header(source, created=dt.datetime.now(dt.timezone.utc).isoformat(
        timespec="seconds"), host=socket.gethostname(), targets=targets,
        settings=target.settings, mounts=read_mounts(),
        detail="counts" if opts.counts and source == "bpftrace" else "events")


def _build_input(env: Env, progress: Callable[[str], None] | None, path: Path) -> None:
    """The what-if input of the trace just written, kept beside it (TRACE.whatif-cache), so
    that the first `statstorm whatif TRACE` starts from it (`model.inputcache.build`)."""
    if progress:
        progress("building the what-if input (TRACE.whatif-cache)")
    t0 = time.monotonic()
    built = inputcache.build(path)
    env.debug(f"what-if input {'built' if built else 'not built'} in "
              f"{time.monotonic() - t0:.1f} s")


def _run_bpftrace(env: Env, opts: TraceOptions, target: Target, out: Path,
                  warnings: list[str], progress: Callable[[str], None] | None,
                  ready_event: threading.Event | None = None,
                  stop: threading.Event | None = None) -> TraceRun:
    binary = bpftrace.find()
    held: subprocess.Popen[bytes] | None = None
    release_fd = -1
    if target.mode == "cmd":
        held, release_fd = _spawn_held(target.argv)
        target.pids = [held.pid]
    header = _header("bpftrace", target, opts)
    tmpdir = tempfile.mkdtemp(prefix="statstorm-trace-")
    prog = Path(tmpdir, "trace.bt")
    make = bpftrace.count_program if opts.counts else bpftrace.program
    prog.write_text(make(bpftrace.Targets(tuple(target.pids), tuple(target.parents)),
                         target.binaries))
    errlog = Path(tmpdir, "bpftrace.err")
    summary = SummaryBuilder(header)
    writer = TraceWriter(out, header, after_close=functools.partial(_build_input, env,
                                                                     progress))
    bt: subprocess.Popen[bytes] | None = None
    stopped = "end"
    dropped = 0
    lines = 0
    t_start = time.monotonic()
    attr: Attributor | CountAttributor
    dispatch: Callable[[list[bytes]], None]
    if opts.counts:
        cattr = CountAttributor(_Tee(writer, summary), single_request=target.mode == "cmd")
        attr, dispatch = cattr, functools.partial(feed_counts, cattr)
    else:
        eattr = Attributor(_Tee(writer, summary), header["mounts"], cwd_of=_cwd_of,
                           single_request=target.mode == "cmd")
        attr, dispatch = eattr, functools.partial(feed, eattr)
    try:
        with open(errlog, "wb") as err:
            bt = subprocess.Popen(bpftrace.argv(binary, str(prog)), stdout=subprocess.PIPE,
                                  stderr=err, stdin=subprocess.DEVNULL, env=bpftrace.env(),
                                  start_new_session=True)
        assert bt.stdout is not None
        fd = bt.stdout.fileno()
        os.set_blocking(fd, False)
        try:  # room for bursts: bpftrace blocks (and then drops events) when the pipe is full
            fcntl.fcntl(fd, F_SETPIPE_SZ, PIPE_BYTES)
        except OSError:
            pass
        buf = b""
        ready = False
        reorder = Reorder()
        prev: list[bytes] | None = None
        allowed: dict[int, bool] = {}
        deadline_ready = time.monotonic() + 120
        deadline = None
        last_progress = 0.0
        eof = False
        while True:
            now = time.monotonic()
            if not ready and now > deadline_ready:
                raise _BpftraceRefused("no answer from bpftrace within 120 s")
            if not ready and held is not None and held.poll() is not None:
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
                if held is not None and held.poll() is not None:
                    stopped = "command exited"
                    break
            if eof:
                break
            r, _, _ = select.select([fd], [], [], 0.2)
            if r:
                if ready and opts.counts:
                    # A few lines per request: read them in batches, not one wake-up each.
                    time.sleep(COUNTS_BATCH_S)
                chunk = os.read(fd, PIPE_BYTES)
                if not chunk:
                    eof = True
                buf += chunk
            if not ready and bt.poll() is not None and not r:
                msg = _first_error(errlog)
                raise _BpftraceRefused(msg or f"bpftrace exited with status {bt.returncode}")
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
                        if release_fd >= 0:
                            os.close(release_fd)
                            release_fd = -1
                        if ready_event is not None:
                            ready_event.set()
                    continue
                prev = _take_line(line, prev, reorder, allowed, target)
                lines += 1
                if line.startswith(b"Lost "):
                    m = re.match(rb"Lost (\d+)", line)
                    dropped += int(m.group(1)) if m else 0
            for fields in reorder.pop_ready():
                dispatch(fields)
            if progress and ready and now - last_progress >= 1.0:
                last_progress = now
                progress(f"{now - t_start:5.1f} s  {writer.events:,} syscalls  "
                         f"{attr.completed} requests done")
    except (KeyboardInterrupt, Interrupted):
        stopped = "interrupted"
    except (_BpftraceRefused, ComponentError):
        writer.abort()
        _stop(bt, held, release_fd)
        shutil.rmtree(tmpdir, ignore_errors=True)
        raise
    except BaseException:
        _stop(bt, held, release_fd)
        writer.close({"stopped": "error"}, after=False)
        shutil.rmtree(tmpdir, ignore_errors=True)
        raise
    # Drain: stop bpftrace (it flushes what it has), then feed the rest. Ctrl-C is ignored
    # meanwhile (only the main thread can change that; a tracer thread leaves it alone).
    main = threading.current_thread() is threading.main_thread()
    old = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
    try:
        env.debug(f"stopping ({stopped})")
        rest = _stop(bt, held, release_fd)
        env.debug("bpftrace stopped")
        tail = (buf + rest).split(b"\n")
        for line in tail:
            if line:
                prev = _take_line(line, prev, reorder, allowed, target)
        for fields in reorder.pop_ready(flush=True):
            dispatch(fields)
        attr.finish()
        trailer = {
            "stopped": stopped, "duration_ns": attr.last_ns,
            "wall_s": round(time.monotonic() - t_start, 3), "dropped": dropped,
            "completed_requests": attr.completed, "truncated_paths": attr.truncated_paths,
            "pids": sorted(attr.pids_seen), "forks": attr.forks, "exits": attr.exits,
            "backend": "bpftrace",
        }
        if attr.t0 is not None:
            # wall clock of time 0 (event times are CLOCK_MONOTONIC ns from attr.t0): lets
            # `statstorm whatif` place events in PHP's seconds (TTLs, revalidation windows)
            trailer["t0_wall_ns"] = time.time_ns() - time.monotonic_ns() + attr.t0
        if attr.truncated_paths:
            warnings.append(f"{attr.truncated_paths} paths were longer than "
                            f"{bpftrace.STRLEN - 1} bytes and were cut")
        if dropped:
            warnings.append(f"bpftrace lost {dropped:,} events (its buffers overflowed); the "
                            "counts are low by that much")
        writer.close(trailer)
        result = summary.finish(trailer)
    finally:
        if main:
            signal.signal(signal.SIGINT, old)
        shutil.rmtree(tmpdir, ignore_errors=True)
    if stopped == "interrupted":
        warnings.append("interrupted: the trace holds what was captured until then")
    return TraceRun(out, result, "bpftrace", warnings)


_TAGS = frozenset(b"SAUVXQORPFEK")


def _take_line(line: bytes, prev: list[bytes] | None, reorder: Reorder,
               allowed: dict[int, bool], target: Target) -> list[bytes] | None:
    if len(line) >= 2 and line[0] in _TAGS and line[1:2] == b"\t":
        limit = 9 if line[0] == ord("S") else (6 if line[0] == ord("O") else 0)
        fields = line.split(b"\t", limit - 1) if limit else line.split(b"\t")
        if target.allow is not None and fields[0] not in (b"F", b"E"):
            pid = int(fields[1])
            ok = allowed.get(pid)
            if ok is None:
                title = " ".join(procs.cmdline(pid))
                ok = target.allow(title)
                if title.startswith("php-fpm: pool"):  # settled: the worker has its title
                    allowed[pid] = ok
            if not ok:
                return prev
        reorder.push(fields)
        return fields
    if prev is not None and not line.startswith((b"Attaching", b"Lost ", b"READY", b"SYNC")):
        prev[-1] += b"\n" + line  # a path with a newline in it
    return prev


def _first_error(errlog: Path) -> str:
    try:
        for line in errlog.read_text(errors="replace").splitlines():
            if "RLIMIT_MEMLOCK" in line or not line.strip():
                continue
            return line.strip()
    except OSError:
        pass
    return ""


def _sync_cpus() -> int:
    """Call getppid() once on each CPU we may run on (bpftrace prints SYNC for each)."""
    cpus = sorted(os.sched_getaffinity(0))
    for cpu in cpus:
        os.sched_setaffinity(0, {cpu})
        os.getppid()
    os.sched_setaffinity(0, set(cpus))
    return len(cpus)


def _stop(bt: subprocess.Popen[bytes] | None, held: subprocess.Popen[bytes] | None,
          release_fd: int) -> bytes:
    """Stop bpftrace and the held command; return bpftrace's remaining output.

    bpftrace's own SIGINT path detaches every uprobe before it exits, which takes seconds.
    Instead the tracer makes each CPU emit a SYNC marker after its last event; once every
    marker is read, all events are, and bpftrace is killed (the kernel detaches the probes
    when its file descriptors close)."""
    if release_fd >= 0:
        os.close(release_fd)
    if held is not None and held.poll() is None:
        try:
            held.wait(timeout=60)
        except subprocess.TimeoutExpired:
            held.kill()
            held.wait()
    rest = b""
    if bt is not None and bt.stdout is not None:
        fd = bt.stdout.fileno()
        wanted = _sync_cpus() if bt.poll() is None else 0
        seen: set[bytes] = set()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(seen) < wanted:
            r, _, _ = select.select([fd], [], [], 0.2)
            if r:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    break
                rest += chunk
                seen.update(re.findall(rb"^SYNC\t(\d+)$", rest, re.M))
            elif bt.poll() is not None:
                break
        if bt.poll() is None:
            bt.kill()
        bt.wait()
        try:
            rest += bt.stdout.read()
        except (OSError, ValueError):
            pass
        bt.stdout.close()
    return rest


def _run_strace(env: Env, opts: TraceOptions, target: Target, out: Path, warnings: list[str],
                progress: Callable[[str], None] | None,
                ready: threading.Event | None = None,
                stop: threading.Event | None = None) -> TraceRun:
    from statstorm.adapters import strace_log  # the importer
    strace = shutil.which("strace")
    if strace is None:
        raise DependencyError("neither bpftrace nor strace can be used; run scripts/setup.sh")
    warnings.insert(0, "LOUD WARNING: tracing with strace (ptrace) stops every traced process "
                    "twice per syscall; expect PHP to run several times slower while tracing")
    tmpdir = tempfile.mkdtemp(prefix="statstorm-strace-")
    log = Path(tmpdir, "strace.log")
    argv = [strace, "-f", "-tt", "-T", "-qq", "-e", f"trace={STRACE_SYSCALLS}", "-o", str(log)]
    t0 = time.monotonic()
    stopped = "end"
    try:
        if target.mode == "cmd":
            proc = subprocess.Popen(argv + ["--", *target.argv], stdin=subprocess.DEVNULL,
                                    stdout=2)
        else:
            attach = [*target.parents, *target.pids]
            proc = subprocess.Popen(argv + [a for p in attach for a in ("-p", str(p))],
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        limit = opts.duration_s if opts.duration_s is not None else (
            None if target.mode == "cmd" else DEFAULT_DURATION_S)
        if ready is not None:
            ready.set()  # strace has no "attached" marker; it attaches within moments
        try:
            while proc.poll() is None:
                if limit is not None and time.monotonic() - t0 >= limit:
                    stopped = "duration"
                    break
                if stop is not None and stop.is_set():
                    stopped = "stop"
                    break
                if opts.requests and _count_lines(log, (b"accept(", b"accept4(")) > opts.requests:
                    stopped = "requests"
                    break
                time.sleep(0.2)
                if progress:
                    progress(f"{time.monotonic() - t0:5.1f} s  strace running")
        except (KeyboardInterrupt, Interrupted):
            stopped = "interrupted"
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        trace = strace_log.import_file(log, requests=None)
        header = _header("strace", target, opts)
        header["import"] = trace.header.get("import", {})
        master = set(target.parents)
        summary = SummaryBuilder(header)
        with TraceWriter(out, header) as writer:
            tee = _Tee(writer, summary)
            mount_idx = Attributor(tee, header["mounts"], cwd_of=_cwd_of).mount_of
            keep = set()
            for r in trace.requests.values():
                if r.pid not in master:
                    keep.add(r.id)
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
        shutil.rmtree(tmpdir, ignore_errors=True)
    return TraceRun(out, result, "strace", warnings)


def _count_lines(path: Path, needles: tuple[bytes, ...]) -> int:
    try:
        data = path.read_bytes()
    except OSError:
        return 0
    return sum(data.count(n) for n in needles)
