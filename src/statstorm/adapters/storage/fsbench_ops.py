"""The timed syscall loops of fsbench, cache dropping and cache-state checks.

Each loop times every call with `time.perf_counter_ns()` around one `os.*` call, so a sample
is the syscall plus about a microsecond of Python; `null_loop()` measures that overhead so
it can be reported next to the results.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import mmap
import os
import stat as stat_mod
import time
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from statstorm.errors import UsageError

DROP_CACHES = Path("/proc/sys/vm/drop_caches")


@dataclass
class PassResult:
    """Samples (ns) of one pass plus its outcome counts."""

    samples: array  # type: ignore[type-arg]
    wall_ns: int
    ok: int = 0
    enoent: int = 0
    other_errors: int = 0
    open_ns: array | None = None  # type: ignore[type-arg]
    fstat_ns: array | None = None  # type: ignore[type-arg]


def scan_tree(root: str) -> tuple[list[str], list[str]]:
    """Files and directories under `root`, relative, without following symlinked dirs."""
    files: list[str] = []
    dirs: list[str] = []
    stack = [""]
    while stack:
        rel = stack.pop()
        base = os.path.join(root, rel) if rel else root
        try:
            it = os.scandir(base)
        except OSError as exc:
            raise UsageError(f"{base}: cannot read directory ({exc.strerror}); "
                             "check permissions") from None
        with it:
            for e in it:
                r = f"{rel}/{e.name}" if rel else e.name
                if e.is_dir(follow_symlinks=False):
                    dirs.append(r)
                    stack.append(r)
                else:
                    files.append(r)
    return files, dirs


def _lookup_loop(paths: Sequence[str], f: Callable[[str], object]) -> PassResult:
    """Time `f` (os.lstat or os.stat) on each path; kept inline, as the other loops, so the
    timed region holds nothing but the call."""
    clock = time.perf_counter_ns
    out = array("q")
    ok = enoent = other = 0
    start = clock()
    for p in paths:
        t0 = clock()
        try:
            f(p)
            t1 = clock()
            ok += 1
        except FileNotFoundError:
            t1 = clock()
            enoent += 1
        except OSError:
            t1 = clock()
            other += 1
        out.append(t1 - t0)
    return PassResult(out, clock() - start, ok, enoent, other)


def walk_pass(paths: Sequence[str]) -> PassResult:
    """lstat of every path component, as PHP's realpath resolution does."""
    return _lookup_loop(paths, os.lstat)


def stat_pass(paths: Sequence[str]) -> PassResult:
    return _lookup_loop(paths, os.stat)


def negative_pass(paths: Sequence[str]) -> PassResult:
    """stat of names that do not exist: each sample should end in ENOENT."""
    return _lookup_loop(paths, os.stat)


def open_pass(paths: Sequence[str]) -> PassResult:
    """open + fstat + read(whole file) + close per file: what an OPcache miss does."""
    clock = time.perf_counter_ns
    out, o_ns, f_ns = array("q"), array("q"), array("q")
    ok = enoent = other = 0
    start = clock()
    for p in paths:
        t0 = clock()
        try:
            fd = os.open(p, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            out.append(clock() - t0)
            enoent += 1
            continue
        except OSError:
            out.append(clock() - t0)
            other += 1
            continue
        t1 = clock()
        try:
            st = os.fstat(fd)
            t2 = clock()
            remaining = st.st_size
            while remaining > 0:
                chunk = os.read(fd, min(remaining, 1 << 20))
                if not chunk:
                    break
                remaining -= len(chunk)
        finally:
            os.close(fd)
        t3 = clock()
        out.append(t3 - t0)
        o_ns.append(t1 - t0)
        f_ns.append(t2 - t1)
        ok += 1
    return PassResult(out, clock() - start, ok, enoent, other, o_ns, f_ns)


def readdir_pass(dirs: Sequence[str]) -> PassResult:
    """Read every directory to the end (opendir + getdents + closedir) per sample."""
    clock = time.perf_counter_ns
    out = array("q")
    ok = other = enoent = 0
    start = clock()
    for d in dirs:
        t0 = clock()
        try:
            with os.scandir(d) as it:
                for _ in it:
                    pass
            ok += 1
        except FileNotFoundError:
            enoent += 1
        except OSError:
            other += 1
        out.append(clock() - t0)
    return PassResult(out, clock() - start, ok, enoent, other)


def find_pass(root: str) -> PassResult:
    """The classic `find ROOT`: readdir of the whole tree using d_type, one sample per walk."""
    clock = time.perf_counter_ns
    t0 = clock()
    seen = 0
    other = 0
    stack = [root]
    while stack:
        d = stack.pop()
        try:
            with os.scandir(d) as it:
                for e in it:
                    seen += 1
                    if e.is_dir(follow_symlinks=False):
                        stack.append(e.path)
        except OSError:
            other += 1
    dt = clock() - t0
    return PassResult(array("q", [dt]), dt, 1 if not other else 0, 0, other)


def null_pass(n: int) -> PassResult:
    """The timing loop with no syscall: the per-sample overhead of the measurement."""
    clock = time.perf_counter_ns
    out = array("q")
    start = clock()
    for _ in range(n):
        t0 = clock()
        t1 = clock()
        out.append(t1 - t0)
    return PassResult(out, clock() - start, n)


# ---------------------------------------------------------------- cache state


def drop_caches(level: int = 3) -> None:
    """sync, then drop the page cache (1), dentries+inodes (2) or both (3). Needs root."""
    os.sync()
    DROP_CACHES.write_text(f"{level}\n")


def dentry_count() -> int:
    """nr_dentry from /proc/sys/fs/dentry-state."""
    return int(Path("/proc/sys/fs/dentry-state").read_text().split()[0])


def meminfo_kb(key: str = "Cached") -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


_libc: ctypes.CDLL | None = None


def _get_libc() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        _libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        _libc.mincore.restype = ctypes.c_int
    return _libc


def resident_pages(path: str) -> tuple[int, int]:
    """(pages of `path` in the page cache, total pages) via mmap + mincore(2).

    Mapping a file does not read it, so this does not warm the cache it inspects. The
    mapping is private copy-on-write (never written), which lets ctypes take its address.
    """
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return 0, 0
        m = mmap.mmap(fd, size, access=mmap.ACCESS_COPY)
    finally:
        os.close(fd)
    try:
        npages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
        vec = (ctypes.c_ubyte * npages)()
        view = ctypes.c_char.from_buffer(m)
        try:
            rc = _get_libc().mincore(ctypes.c_void_p(ctypes.addressof(view)),
                                     ctypes.c_size_t(size), vec)
        finally:
            del view
        if rc != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        return sum(v & 1 for v in vec), npages
    finally:
        m.close()


def is_enoent(exc: OSError) -> bool:
    return exc.errno == errno.ENOENT


def is_dir(path: str) -> bool:
    try:
        return stat_mod.S_ISDIR(os.stat(path).st_mode)
    except OSError:
        return False
