"""The compiled eBPF tracer (`statstorm-trace`, libbpf CO-RE): its build, its run, its records.

`statstorm trace`'s default full-event backend. The kernel side (`statstorm/bpf/trace.bpf.c`)
records the same events as the bpftrace program of adapters/tracing/bpftrace.py, as binary records in
one ring buffer; the loader (`statstorm/bpf/loader.c`) copies them to a spool file without
waking per event, and they are decoded once the trace has stopped (a measured run: no CPU
spent on parsing while PHP is measured) or, for `statstorm trace`, while it records with at
most a quarter of one core (adapters/tracing/libbpf_run.py), the rest after the stop.

The loader is built by scripts/setup.sh --lab into BUILD_DIR, stamped with the hash of its sources:
a loader built from other sources is not used. An installed package (scripts/package.sh: the
.deb and the wheel) carries its own, prebuilt and stamped the same way, in PACKAGED_DIR next to
the sources it was built from; BUILD_DIR's is preferred when both are current (it was built on
this machine, against its PHP's headers).

`decode` yields each record as the typed event of the bpftrace program's matching line
(model.attribution's `Record`), so both backends feed the same attribution; the counting
mode's records are read as the counting lines by adapters/tracing/count_lines.py."""

from __future__ import annotations

import hashlib
import os
import select
import signal
import struct
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from statstorm.adapters.tracing import bpftrace
from statstorm.errors import DependencyError

BUILD_DIR = Path("/opt/statstorm/bpf")
# Another build of the loader, taken as it is (bench/trace_overhead.py's `--loader-b`: two
# builds side by side in one run)
OTHER_BUILD_ENV = "STATSTORM_BPF_DIR"
SOURCE_DIR = Path(__file__).resolve().parents[2] / "bpf"  # src/statstorm/bpf
PACKAGED_DIR = SOURCE_DIR / "bin"  # the prebuilt loader of a .deb or a wheel
BINARY, STAMP = "statstorm-trace", "source.sha"
SOURCES = ("trace.bpf.c", "loader.c", "window.h", "window.c", "probes.h", "probes.c",
           "build.sh", "php_layout.c", "php_table.h", "php_table.c")
STRMAX = 256  # trace.bpf.c's STRMAX: strings are cut at STRMAX - 1 bytes

# trace.bpf.c's enum call and enum fn, in order
CALLS = tuple(s[0] for s in bpftrace.SYSCALLS)
FUNCS = tuple(u[0] for u in bpftrace.UPROBES)
HDR = struct.Struct("<HBBIQ")          # len, tag, kind, pid, ts
BODY = struct.Struct("<HBBIQQqqq")     # ... a, b, c, d
COUNTS = struct.Struct("<HBBIQQ16Q")   # ... start, c[16]
SMALL_A = struct.Struct("<Q")


def source_hash() -> str:
    h = hashlib.sha256()
    for name in SOURCES:
        h.update((SOURCE_DIR / name).read_bytes())
    return h.hexdigest()[:16]


def loader() -> Path | None:
    """The built loader, if it was built from these sources: this machine's build
    (BUILD_DIR), else the package's (PACKAGED_DIR); or the other build named by
    $STATSTORM_BPF_DIR, whatever its sources."""
    other = os.environ.get(OTHER_BUILD_ENV)
    if other:
        binary = Path(other) / BINARY
        return binary if binary.exists() else None
    want = source_hash()
    for directory in (BUILD_DIR, PACKAGED_DIR):
        found = stamped(directory, want)
        if found is not None:
            return found
    return None


def stamped(directory: Path, want: str) -> Path | None:
    """`directory`'s loader if its stamp names the sources `want` (their hash)."""
    binary = directory / BINARY
    try:
        if binary.exists() and (directory / STAMP).read_text().strip() == want:
            return binary
    except OSError:
        pass
    return None


NOT_BUILT = "the compiled eBPF tracer is not built (or is out of date)"
BUILD_FIX = ("run scripts/setup.sh --lab (it installs the compiler; an installed package carries"
             " its own: reinstall it)")


def find() -> Path:
    path = loader()
    if path is None:
        raise DependencyError(f"{NOT_BUILT}; {BUILD_FIX}")
    return path


class Refused(Exception):
    """The loader did not start or attach (the message is its error line)."""


@dataclass
class Status:
    records: int = 0
    syscalls: int = 0
    requests: int = 0  # request ends seen (recorded or counted)
    lost: int = 0
    unrecorded_hits: int = 0  # PHP function probes run in requests not recorded (sampling)
    windows: int = 0  # workers armed so far (sampling)


class LoaderSession:
    """One run of the loader: `start` (returns once attached), `poll`, `stop`, `close`."""

    def __init__(self, targets: bpftrace.Targets, binaries: list[str], spool: Path, *,
                 sample: int = 1, counts: bool = False, counts_fd: int | None = None,
                 own: bool = False, layout: tuple[str, ...] = ()) -> None:
        """counts: count every request, record nothing else (K, U, F and E records).
        counts_fd: the same, with the records written to this inherited file descriptor (a
        pipe) as they come, instead of to `spool`. own: PHP's functions probed in the
        targets' PIDs only (not their children, nor other processes of the binaries).
        layout: the binaries' PHP layout for the loader (adapters/tracing/php_layouts.py:
        `--layout ...` from their version's headers, `--ops 0` when none is known)."""
        out = str(spool) if counts_fd is None else f"/dev/fd/{counts_fd}"
        self.argv = [str(find()), "--out", out, "--sample", str(max(sample, 1))]
        self.pass_fds: tuple[int, ...] = ()
        if counts or counts_fd is not None:
            self.argv += ["--counts", "1"]
        if counts_fd is not None:
            self.pass_fds = (counts_fd,)
        if own:
            self.argv += ["--own", "1"]
        for p in targets.pids:
            self.argv += ["--pid", str(p)]
        for p in targets.parents:
            self.argv += ["--parent", str(p)]
        for b in binaries:
            self.argv += ["--binary", b]
        self.argv += list(layout)
        self.spool = spool
        self.errlog = spool.with_suffix(".err")
        self.proc: subprocess.Popen[bytes] | None = None
        self.status = Status()
        self._buf = b""
        self.done = False

    def start(self, timeout: float = 120.0, *,
              abort: Callable[[], str | None] | None = None) -> None:
        """Start the loader; return once it is attached. `abort` is asked while it attaches:
        a reason given ends the attempt (Refused)."""
        with open(self.errlog, "wb") as err:
            self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=err,
                                         stdin=subprocess.DEVNULL, start_new_session=True,
                                         pass_fds=self.pass_fds)
        deadline = time.monotonic() + timeout
        while True:
            for line in self._lines(0.1):
                if line == b"READY":
                    return
            if self.proc.poll() is not None and not self._buf:
                raise self.refusal()
            why = abort() if abort is not None else None
            if why:
                self.kill()
                raise Refused(why)
            if time.monotonic() > deadline:
                self.kill()
                raise Refused(f"no answer from the eBPF tracer within {timeout:g} s")

    def _lines(self, timeout: float) -> list[bytes]:
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        r, _, _ = select.select([fd], [], [], timeout)
        if not r:
            return []
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return []
        *lines, self._buf = (self._buf + chunk).split(b"\n")
        for line in lines:
            parts = line.split()
            if parts[:1] in ([b"STAT"], [b"DONE"]) and len(parts) == 7:
                self.status = Status(*(int(x) for x in parts[1:]))
                self.done = self.done or parts[0] == b"DONE"
        return lines

    def poll(self, timeout: float) -> Status:
        """Wait up to `timeout` for the loader's next status line."""
        self._lines(timeout)
        return self.status

    def exited(self) -> bool:
        return self.proc is None or self.proc.poll() is not None

    def refusal(self) -> Refused:
        code = self.proc.returncode if self.proc is not None else None
        try:
            first = next((ln.strip() for ln in self.errlog.read_text(errors="replace")
                          .splitlines() if ln.strip()), "")
        except OSError:
            first = ""
        first = first.removeprefix("statstorm-trace: ")
        return Refused(first or f"the eBPF tracer exited with status {code}")

    def stop(self, timeout: float = 30.0) -> Status:
        """Stop recording; returns once the spool file is complete (the loader then detaches
        its probes: about 0.1 s for full events on Linux 6.6 and later, a second or more in
        counting mode and on older kernels; `close` waits for that, bpf/probes.h says why)."""
        if self.proc is None or self.proc.poll() is not None:
            return self.status
        self.proc.send_signal(signal.SIGINT)
        deadline = time.monotonic() + timeout
        while not self.done and time.monotonic() < deadline:
            self._lines(0.2)
            if self.proc.poll() is not None and not self.done:
                self._lines(0)
                break
        if not self.done:
            self.kill()
            raise Refused(self.refusal().args[0] if self.proc.returncode else
                          "the eBPF tracer did not finish writing its records")
        return self.status

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def close(self, timeout: float = 30.0) -> None:
        """Wait for the loader to exit (killed if it does not) and remove its files."""
        if self.proc is not None:
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
            if self.proc.stdout is not None:
                self.proc.stdout.close()
        for p in (self.spool, self.errlog):
            try:
                p.unlink()
            except OSError:
                pass


def complete(data: bytes) -> int:
    """How many bytes at the start of `data` are whole records (the rest: a record whose end
    has not been read yet)."""
    off, end = 0, len(data)
    while off + HDR.size <= end:
        size = HDR.unpack_from(data, off)[0]
        if size < HDR.size or off + size > end:
            break
        off += size
    return off


def decode(data: bytes, interned: dict[tuple[int, int, int], bytes] | None = None
           ) -> Iterator[tuple[Any, ...]]:
    """The spool's records → typed event records (model.attribution's `Record` layout; a
    counted request: ("K", pid, start, end, [16 packed counters])). The ring buffer hands
    records out in the order they were reserved, which is event order (a syscall's record is
    reserved at its exit): no reordering is needed. `interned`: OPcache's interned paths seen
    so far, by their string's address, hash and length (kept by a caller that decodes the
    spool a piece at a time, each piece whole records: `complete`)."""
    off, end = 0, len(data)
    hdr, body, counts, num = HDR.unpack_from, BODY.unpack_from, COUNTS.unpack_from, \
        SMALL_A.unpack_from
    if interned is None:
        interned = {}
    while off + HDR.size <= end:
        size, tag, kind, pid, ts = hdr(data, off)
        if size < HDR.size or off + size > end:
            break  # a cut record (the loader was killed while writing)
        if tag == 0x53:  # S
            _, _, _, _, _, a, b, c, d = body(data, off)
            yield ("S", pid, ts, a, CALLS[kind], b, c, d, data[off + BODY.size:off + size])
        elif tag == 0x4F:  # O
            a = num(data, off + HDR.size)[0]
            yield ("O", pid, ts, FUNCS[kind], a - (1 << 64) if a >= 1 << 63 else a,
                   data[off + BODY.size:off + size])
        elif tag == 0x52:  # R
            yield ("R", pid, ts, FUNCS[kind])
        elif tag == 0x54 or tag == 0x49:
            # T: an included-files table entry, read as a zend_stream_open in and out, with
            # the address, hash and length of its path if OPcache interned it (b c d). I: an
            # entry whose path a T record with the same three numbers carried before.
            key = body(data, off)[6:9]
            if tag == 0x54:
                path = data[off + BODY.size:off + size]
                if key[0]:
                    interned[key] = path
            else:
                path = interned.get(key, b"")
            yield ("O", pid, ts, FUNCS[kind], 1, path)
            yield ("R", pid, ts, FUNCS[kind])
        elif tag == 0x50 or tag == 0x56:  # P V
            yield (chr(tag), pid, data[off + BODY.size:off + size])
        elif tag == 0x55:  # U
            yield ("U", pid, ts, data[off + BODY.size:off + size])
        elif tag == 0x41 or tag == 0x58 or tag == 0x51:  # A X Q
            yield (chr(tag), pid, ts)
        elif tag == 0x46:  # F
            yield ("F", pid, num(data, off + HDR.size)[0])
        elif tag == 0x45:  # E
            yield ("E", pid)
        elif tag == 0x4B:  # K
            vals = counts(data, off)
            yield ("K", pid, vals[5], ts, list(vals[6:]))
        off += size

