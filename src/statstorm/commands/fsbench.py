"""`statstorm fsbench`: PHP-shaped metadata benchmark of real code trees, warm and cold.

For each cache state and operation, every PATH runs one pass in turn (interleaved rounds),
so a comparison of PATHs holds on a noisy machine. Each (operation, state, PATH) cell is
written to the JSON file as soon as its last round finishes.
"""

from __future__ import annotations

import datetime as dt
import multiprocessing
import os
import signal
import time
from array import array
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from statstorm import faults
from statstorm.adapters.labs import state as labs
from statstorm.adapters.storage import fsbench_ops, gluster, mounts
from statstorm.env import Env
from statstorm.errors import PrivilegeError, UsageError
from statstorm.model import fsworkload
from statstorm.model.latency import ratio, summarize
from statstorm.results import fsbench as res
from statstorm.results.common import write_json_atomic
from statstorm.results.lab import LabState

STATES = ("warm", "cold")
DEFAULT_ITERATIONS = 3
CAVEATS = (
    "Each sample is one os.* call between two time.perf_counter_ns() reads: it includes about "
    "{overhead:.2f} µs of Python (the null loop's p50, reported as overhead_p50_us); compare "
    "PATHs by ratio, and treat sub-µs differences on local disk as noise.",
    "walk lstat()s every component from `/` for every file, as PHP's realpath resolution does "
    "with an empty realpath cache; a warm PHP realpath cache would skip most of these calls.",
    "open times open+fstat+read(whole file)+close; the latency profile's open/fstat values are "
    "the open() and fstat() parts alone.",
    "cold: caches are dropped before every pass; the cold check mmap()s one sampled file "
    "(mincore) after the drop, which looks up that one file's path again.",
    "With --clients N every client runs a full pass starting at a different offset; ops/s is "
    "all clients' calls over the wall time of the pass.",
)


@dataclass(frozen=True)
class FsbenchOptions:
    paths: tuple[str, ...]
    ops: tuple[str, ...] = fsworkload.OPS
    states: tuple[str, ...] = ("warm",)
    clients: int = 1
    iterations: int | None = None
    duration_s: float | None = None
    max_files: int | None = None
    output: Path | None = None
    profile_out: Path | None = None


def parse_ops(text: str) -> tuple[str, ...]:
    ops = tuple(o.strip() for o in text.split(",") if o.strip())
    bad = [o for o in ops if o not in fsworkload.OPS]
    if bad or not ops:
        names = ", ".join(map(repr, bad)) or "(none)"
        raise UsageError(f"--ops {text!r}: unknown operation {names}; "
                         f"choose from {','.join(fsworkload.OPS)}")
    return tuple(dict.fromkeys(ops))


def parse_states(text: str) -> tuple[str, ...]:
    if text == "both":
        return STATES
    if text in STATES:
        return (text,)
    raise UsageError(f"--state {text!r}: use warm, cold or both")


def validate(env: Env, opts: FsbenchOptions) -> None:
    if not opts.paths:
        raise UsageError("give at least one PATH: statstorm fsbench /srv/www/app")
    for p in opts.paths:
        if not os.path.exists(p):
            raise UsageError(f"{p}: no such directory; give the root of a code tree")
        if not os.path.isdir(p):
            raise UsageError(f"{p}: not a directory; give the root of a code tree")
        if not os.access(p, os.R_OK | os.X_OK):
            raise PrivilegeError(f"{p}: not readable; run as a user who can read the tree")
    if opts.clients < 1 or opts.clients > 256:
        raise UsageError(f"--clients {opts.clients}: use 1-256")
    if opts.iterations is not None and opts.duration_s is not None:
        raise UsageError("--iterations and --duration exclude each other: give one")
    if opts.iterations is not None and opts.iterations < 1:
        raise UsageError(f"--iterations {opts.iterations}: use 1 or more")
    if opts.duration_s is not None and opts.duration_s <= 0:
        raise UsageError(f"--duration {opts.duration_s}: use a positive number of seconds")
    if opts.max_files is not None and opts.max_files < 1:
        raise UsageError(f"--max-files {opts.max_files}: use 1 or more")
    if "cold" in opts.states and not env.is_root():
        raise PrivilegeError("--state cold drops the kernel caches (/proc/sys/vm/drop_caches): "
                             "run as root, or use --state warm")
    for out in (opts.output, opts.profile_out):
        if out is not None:
            parent = out.parent if str(out.parent) else Path(".")
            if not parent.is_dir():
                raise UsageError(f"{out}: directory {parent} does not exist; create it first")
            if not os.access(parent, os.W_OK):
                raise PrivilegeError(f"{out}: cannot write to {parent}; pick another -o path")


# ---------------------------------------------------------------- passes (also in clients)

_WORKLOADS: list[fsworkload.Workload] = []


def _targets(w: fsworkload.Workload, op: str) -> tuple[str, ...]:
    return {"walk": w.walk_paths, "stat": w.files, "negative": w.negative_names,
            "open": w.php_files, "readdir": w.dirs}.get(op, ())


def _one_pass(op: str, w: fsworkload.Workload,
              offset_frac: float = 0.0) -> fsbench_ops.PassResult:
    if op == "find":
        return fsbench_ops.find_pass(w.root)
    t = _targets(w, op)
    if offset_frac and t:
        k = int(len(t) * offset_frac)
        t = t[k:] + t[:k]
    fn = {"walk": fsbench_ops.walk_pass, "stat": fsbench_ops.stat_pass,
          "negative": fsbench_ops.negative_pass, "open": fsbench_ops.open_pass,
          "readdir": fsbench_ops.readdir_pass}[op]
    return fn(t)


def _client_init() -> None:
    """Clients leave signals to the parent: it ends them by PID (pool.terminate)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _client_pass(args: tuple[str, int, float]) -> fsbench_ops.PassResult:
    op, index, frac = args
    return _one_pass(op, _WORKLOADS[index], frac)


@dataclass
class _Acc:
    samples: array = field(default_factory=lambda: array("q"))  # type: ignore[type-arg]
    open_ns: array = field(default_factory=lambda: array("q"))  # type: ignore[type-arg]
    fstat_ns: array = field(default_factory=lambda: array("q"))  # type: ignore[type-arg]
    wall_ns: int = 0
    passes: int = 0
    ok: int = 0
    enoent: int = 0
    other: int = 0

    def add(self, parts: list[fsbench_ops.PassResult], wall_ns: int) -> None:
        for r in parts:
            self.samples.extend(r.samples)
            if r.open_ns is not None:
                self.open_ns.extend(r.open_ns)
            if r.fstat_ns is not None:
                self.fstat_ns.extend(r.fstat_ns)
            self.ok += r.ok
            self.enoent += r.enoent
            self.other += r.other_errors
        self.wall_ns += wall_ns
        self.passes += 1


# ---------------------------------------------------------------- cold


@dataclass
class _Owned:
    """A GlusterFS mount that a statstorm lab owns, so fsbench may remount it."""

    lab: str
    volume: str
    mount_point: Path
    options: dict[str, str]
    client_pid: int


def _lab_at(env: Env, info: mounts.MountInfo) -> LabState | None:
    """The statstorm lab whose storage is mounted here, if any."""
    for st in labs.list_labs(env):
        if st.mount_point and os.path.realpath(st.mount_point) == os.path.realpath(info.mount_point):
            return st
    return None


def _lab_of(env: Env, info: mounts.MountInfo) -> LabState | None:
    """The statstorm lab whose GlusterFS mount this is, if any."""
    return _lab_at(env, info) if info.kind == "glusterfs-fuse" else None


def _owned_mount(env: Env, info: mounts.MountInfo) -> _Owned | None:
    st = _lab_of(env, info)
    if st is None:
        return None
    return _Owned(st.name, st.volume, Path(st.mount_point), dict(st.mount_options),
                  st.fuse_client_pid)


def _remount(env: Env, owned: _Owned) -> int:
    gluster.unmount(env, owned.mount_point, owned.client_pid)
    pid = gluster.mount(env, owned.volume, owned.mount_point, owned.options)
    owned.client_pid = pid
    labs.record_mount(env, owned.lab, {}, pid)
    return pid


def _delay_of(env: Env, info: mounts.MountInfo) -> int:
    """The `--storage-delay` of the lab this mount belongs to, of any storage (0: none, or not
    a lab's)."""
    st = _lab_at(env, info)
    return st.storage_delay_us if st is not None else 0


def _cold_levels(info: mounts.MountInfo, owned: _Owned | None) -> tuple[list[str], list[str]]:
    reached = ["kernel page cache dropped (drop_caches)",
               "kernel dentry/inode caches dropped (drop_caches)"]
    missing: list[str] = []
    if info.kind == "nfs":
        reached.append("NFS attribute and lookup caches (kept in the dropped inodes/dentries)")
    elif info.kind in ("glusterfs-fuse", "sshfs", "fuse"):
        if owned is not None:
            reached.append(f"FUSE client cache reset (remounted statstorm lab {owned.lab})")
        else:
            missing.append("FUSE client cache: not reset (not a statstorm mount)")
    if info.kind == "glusterfs-fuse":
        missing.append("server-side (brick) caches: not reset")
    elif info.kind == "nfs":
        missing.append("NFS server caches: not reset")
    return reached, missing


def _drop(env: Env, w: fsworkload.Workload, owned: _Owned | None, check: bool) -> res.ColdCheck | None:
    sample = w.php_files[0] if w.php_files else (w.files[0] if w.files else "")
    before_pages = 0
    if check and sample:
        try:
            before_pages, _ = fsbench_ops.resident_pages(sample)
        except OSError:
            before_pages = -1
    d0, c0 = fsbench_ops.dentry_count(), fsbench_ops.meminfo_kb("Cached")
    pid0 = owned.client_pid if owned else 0
    pid1 = 0
    if owned is not None:
        pid1 = _remount(env, owned)
    try:
        fsbench_ops.drop_caches(3)
    except PermissionError:
        raise PrivilegeError("cannot write /proc/sys/vm/drop_caches: run as root for --state cold") from None
    if not check:
        return None
    d1, c1 = fsbench_ops.dentry_count(), fsbench_ops.meminfo_kb("Cached")
    after, total = (0, 0)
    if sample:
        try:
            after, total = fsbench_ops.resident_pages(sample)
        except OSError:
            after, total = -1, 0
    return res.ColdCheck(d0, d1, c0, c1, sample, before_pages, after, total, owned is not None,
                         pid0, pid1)


# ---------------------------------------------------------------- run


def run(env: Env, opts: FsbenchOptions,
        on_cell: Callable[[res.FsbenchResult, res.Cell], None] | None = None) -> res.FsbenchResult:
    validate(env, opts)
    started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    paths = tuple(os.path.realpath(p) for p in opts.paths)
    infos = [mounts.detect(p, volume_reader=lambda v: gluster.volume_options(env, v)) for p in paths]
    workloads = []
    for p in paths:
        env.log(f"fsbench: scanning {p}…")
        files, dirs = fsbench_ops.scan_tree(p)
        if not files:
            raise UsageError(f"{p}: no files in this tree; point fsbench at a code tree")
        workloads.append(fsworkload.build(p, files, dirs, max_files=opts.max_files))
    _WORKLOADS[:] = workloads
    owned = [_owned_mount(env, i) if "cold" in opts.states else None for i in infos]
    cold: list[res.ColdState] = []
    if "cold" in opts.states:
        for p, i, o in zip(paths, infos, owned):
            r, m = _cold_levels(i, o)
            cold.append(res.ColdState(p, tuple(r), tuple(m)))
    null = fsbench_ops.null_pass(20000)
    overhead = summarize(null.samples, wall_s=null.wall_ns / 1e9).p50_us
    shapes = tuple(res.TreeShape(path=w.root, files=len(w.files), php_files=len(w.php_files),
                                 dirs=len(w.dirs), max_depth=w.max_depth,
                                 walk_lstats_per_pass=len(w.walk_paths),
                                 negative_names_per_pass=len(w.negative_names))
                   for w in workloads)
    result = res.FsbenchResult(
        paths=paths, ops=opts.ops, states=opts.states, clients=opts.clients,
        iterations=opts.iterations if opts.duration_s is None else None,
        duration_s=opts.duration_s, max_files=opts.max_files, started_at=started,
        mounts=tuple(i.to_json() for i in infos), workload=shapes,
        overhead_p50_us=round(overhead, 4), cold=tuple(cold), cells=(),
        caveats=tuple(c.format(overhead=overhead) for c in CAVEATS), complete=False,
        storage_delays_us=tuple(_delay_of(env, i) for i in infos))
    if opts.output:
        res.write(opts.output, result)
    iterations = opts.iterations or (None if opts.duration_s else DEFAULT_ITERATIONS)
    pool = None
    if opts.clients > 1:
        pool = multiprocessing.get_context("fork").Pool(opts.clients, initializer=_client_init)
    try:
        for state in opts.states:
            for op in opts.ops:
                result = _run_cells(env, opts, result, state, op, workloads, owned, pool,
                                    iterations, on_cell)
        if pool is not None:
            pool.close()
    except BaseException:
        if pool is not None:
            pool.terminate()
        raise
    finally:
        if pool is not None:
            pool.join()
    result = replace(result, complete=True)
    if opts.output:
        res.write(opts.output, result)
    if opts.profile_out:
        write_json_atomic(opts.profile_out, res.latency_profile(result, source=f"statstorm fsbench {started}"))
    return result


def _time_ratio(first_rate: float | None, rate: float) -> float | None:
    """Time per call relative to the first PATH: the first's throughput over this one's
    (not a p50 ratio: on network storage most calls hit the client's cache, the tail is
    the cost)."""
    r = ratio(first_rate or 0.0, rate)
    return None if r is None else round(r, 3)


def _run_cells(env: Env, opts: FsbenchOptions, result: res.FsbenchResult, state: str, op: str,
               workloads: list[fsworkload.Workload], owned: list[_Owned | None],
               pool: Any, iterations: int | None,
               on_cell: Callable[[res.FsbenchResult, res.Cell], None] | None) -> res.FsbenchResult:
    clock = env.clock
    accs = [_Acc() for _ in workloads]
    env.log(f"fsbench: {op} ({state}) on {len(workloads)} path(s)…")
    if state == "warm":
        for i, w in enumerate(workloads):
            _one_pass(op, w)  # priming pass, not recorded
    checks: dict[int, res.ColdCheck | None] = {}
    deadline = clock() + (opts.duration_s or 0)
    rnd = 0
    while True:
        for i, w in enumerate(workloads):
            if state == "cold":
                chk = _drop(env, w, owned[i], check=i not in checks)
                faults.phase("fsbench/dropped")
                if i not in checks:
                    checks[i] = chk
            t0 = time.perf_counter_ns()
            if pool is None:
                parts = [_one_pass(op, w)]
            else:
                parts = pool.map(_client_pass, [(op, i, c / opts.clients) for c in range(opts.clients)])
            accs[i].add(parts, time.perf_counter_ns() - t0)
            faults.phase("fsbench/pass")
        rnd += 1
        if iterations is not None and rnd >= iterations:
            break
        if iterations is None and clock() >= deadline:
            break
    if state == "cold" and checks and not any(c.check for c in result.cold):
        result = replace(result, cold=tuple(replace(c, check=checks.get(k)) for k, c in enumerate(result.cold)))
    cells = list(result.cells)
    first_rate = None
    for i, (w, acc) in enumerate(zip(workloads, accs)):
        stats = summarize(acc.samples, wall_s=acc.wall_ns / 1e9, errors=acc.other)
        parts_p50: dict[str, float] = {}
        if acc.open_ns:
            parts_p50["open"] = summarize(acc.open_ns, wall_s=0).p50_us
            parts_p50["fstat"] = summarize(acc.fstat_ns, wall_s=0).p50_us
        if i == 0:
            first_rate = stats.ops_per_s
        cell = res.Cell(op=op, state=state, path_index=i, path=w.root, clients=opts.clients,
                        passes=acc.passes, calls_per_pass=w.calls_per_pass(op), ok=acc.ok,
                        enoent=acc.enoent, other_errors=acc.other, stats=stats,
                        ratio_to_first=None if i == 0 else _time_ratio(first_rate, stats.ops_per_s),
                        parts_p50_us=parts_p50)
        cells.append(cell)
        result = replace(result, cells=tuple(cells))
        if opts.output:
            res.write(opts.output, result)
        faults.phase("fsbench/cell")
        if on_cell:
            on_cell(result, cell)
    return result
