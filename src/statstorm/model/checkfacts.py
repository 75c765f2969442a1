"""The facts `statstorm check` judges: one pool's live settings, its files, mounts, memory,
huge pages, and what a trace or an fsbench run measured.

Plain frozen dataclasses filled by commands.check (which does the I/O) or by a test. The
helpers here are pure: ini value parsing, OPcache's prime rounding, and the figures `check`
takes from a loaded trace (PHP's realpath-cache byte accounting, which the code-tree scan
uses too, is in results.facts).
"""

from __future__ import annotations

import posixpath
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from statstorm.model import storage_kinds
from statstorm.model.mirror import MirrorFacts
from statstorm.results.check import MountFact as MountFact
from statstorm.results.check import SiteRoot as SiteRoot
from statstorm.results.fsbench import FsbenchResult
from statstorm.results.facts import ApacheFacts, HugePageFacts, realpath_bytes, with_parents
from statstorm.results.jsontypes import JsonObject, JsonValue
from statstorm.results.trace.raw import R_END, R_START, S_LAT, S_MOUNT, S_REQ, TraceRecords
from statstorm.results.trace.summary import TraceSummary
from statstorm.results.trace.vocabulary import Trace

# opcache.max_accelerated_files is rounded up to the first of these primes (PHP 8).
OPCACHE_PRIMES = (223, 463, 983, 1979, 3907, 7963, 16229, 32531, 65407, 130987, 262237,
                  524521, 1048793)
OPCACHE_MAX_FILES = 1_000_000


@dataclass(frozen=True)
class TraceFacts:
    """What `check` uses from a trace (events or counts), per finished request."""

    requests: int
    detail: str  # events | counts
    per_request: dict[str, float]
    ok_lstat_per_request: float = 0.0  # successful lstat (realpath resolution) per request
    failed_by_entry: tuple[tuple[str, int, float], ...] = ()  # include_path entry, failed, /req
    vendor_failed_per_request: float = 0.0  # failed access/stat under vendor/ per request
    vendor_failed_examples: tuple[str, ...] = ()
    ok_probe_per_request: float = 0.0  # successful file_exists/is_file/is_readable probes
    user_ini_per_request: float = 0.0
    user_ini_dirs: int = 0
    revalidate_per_request: float = 0.0  # OPcache timestamp stats per request
    php_opens_per_request: float = 0.0  # opens of .php files (OPcache misses) per request
    working_set_entries: int = 0  # realpath cache entries for the paths the trace touched
    working_set_bytes: int = 0
    cold_extra_calls: float | None = None  # first request of a worker minus the median
    mounts: tuple[tuple[str, str, float], ...] = ()  # mount point, fstype, calls per request
    data_opens_per_request: float = 0.0  # opens of non-PHP files on network mounts
    data_open_examples: tuple[tuple[str, float], ...] = ()  # path, opens per request
    network_time_share: float | None = None  # of request time, in calls on network mounts
    network_ms_per_request: float = 0.0
    round_trips_per_request: float | None = None  # measured at the storage (GlusterFS profile)
    included_dirs: tuple[str, ...] = ()  # the directories of the PHP files requests included


def included_dirs(trace: Trace) -> tuple[str, ...]:
    """The directories of the PHP files the trace's requests included (absolute paths, from
    PHP's included-files table), sorted."""
    return tuple(sorted({posixpath.dirname(name) for o in trace.operations.values()
                         if o.kind in ("include", "main_script")
                         and isinstance(name := o.args.get("name"), str)
                         and name.startswith("/")}))


def _numbers(d: JsonValue | None) -> dict[str, float] | None:
    """A JSON object's numeric entries as given (None: not an object)."""
    if not isinstance(d, dict):
        return None
    return {str(k): v for k, v in d.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)}


@dataclass(frozen=True)
class OpcacheStatus:
    """A pool's opcache_get_status(false): the figures the rules and the exporter read."""

    used_memory: int = 0
    free_memory: int = 0
    wasted_memory: int = 0
    oom_restarts: int = 0
    num_cached_keys: int | None = None  # None: the status does not say
    enabled: bool = False  # opcache_enabled
    memory_usage: dict[str, float] | None = None  # its numbers as given (None: not an object)
    statistics: dict[str, float] | None = None  # opcache_statistics's numbers (None: absent)

    @classmethod
    def from_json(cls, status: JsonObject) -> OpcacheStatus:
        mem, stats = _numbers(status.get("memory_usage")), _numbers(status.get("opcache_statistics"))
        m, st = mem or {}, stats or {}
        keys = st.get("num_cached_keys")
        return cls(int(m.get("used_memory", 0)), int(m.get("free_memory", 0)),
                   int(m.get("wasted_memory", 0)), int(st.get("oom_restarts", 0)),
                   None if keys is None else int(keys), bool(status.get("opcache_enabled")),
                   mem, stats)


@dataclass(frozen=True)
class TraceOrigin:
    """Where the trace check judges a pool by came from and when it was taken (times are data
    here: the command reads the clock and the files, the rules compare)."""

    path: str
    taken: str  # ISO 8601 UTC, as said to the user
    taken_at: float | None  # the same in seconds since the epoch (None: unknown)
    remembered: bool  # the pool's last trace (no --trace given), not a file given


@dataclass(frozen=True)
class AppliedChange:
    """The last change apply made to a pool: its backup set and when it was made."""

    backup: str
    when: str  # ISO 8601 UTC
    at: float | None  # seconds since the epoch (None: unknown)


@dataclass(frozen=True)
class Facts:
    """Everything the rules read for one php-fpm pool (or the CLI when there is no pool)."""

    pool: str
    settings: dict[str, str]  # effective for the pool's workers
    lab: str = ""  # the lab the pool belongs to ('' for a pool found running)
    handler: str = ""  # how the target runs PHP (results.serving.Handler: fpm, mod_php, fcgid)
    cli_settings: dict[str, str] = field(default_factory=dict)
    pm: dict[str, str] = field(default_factory=dict)  # pm, pm.max_children, pm.max_requests …
    fpm_global: dict[str, str] = field(default_factory=dict)  # php-fpm's [global] (php-fpm -tt)
    settings_source: str = ""
    docroot: str = ""
    app_root: str = ""  # the app's tree the docroot belongs to (codetree.app_root)
    mirror: MirrorFacts | None = None  # the docroot is a local mirror of statstorm's
    php_files: int | None = None  # PHP files under the docroot and include_path entries
    tree_entries: int = 0  # realpath cache entries for those files and their directories
    tree_bytes: int = 0
    user_ini_files: int | None = None  # files named user_ini.filename under the docroot
    recent_php_files: tuple[str, ...] = ()  # mtime within file_update_protection
    future_php_files: tuple[str, ...] = ()  # mtime ahead of this machine's clock
    include_path_php: tuple[tuple[str, int], ...] = ()  # entry, PHP files under it (-1: absent)
    mounts: tuple[MountFact, ...] = ()
    sites: tuple[SiteRoot, ...] = ()  # every site the pool serves, with its docroot
    symlinks: tuple[tuple[str, str], ...] = ()  # (symlinked component, its target)
    nginx_script_filename: str | None = None  # fastcgi_param SCRIPT_FILENAME value
    hugepages: HugePageFacts | None = None
    php_binary: str = ""
    text_bytes: int | None = None  # the PHP binary's executable segment (ELF)
    worker_pss_kb: tuple[int, ...] = ()
    mem_available_kb: int | None = None
    mem_total_kb: int | None = None
    opcache: OpcacheStatus | None = None  # opcache_get_status(false) of the pool (None: not asked)
    realpath_used: int | None = None  # the largest realpath_cache_size() of the workers asked
    realpath_used_by_worker: tuple[int, ...] = ()
    trace: TraceFacts | None = None
    trace_origin: TraceOrigin | None = None  # where `trace` came from, when it was taken
    last_change: AppliedChange | None = None  # apply's newest backup set in effect
    target_args: str = ""  # how trace and check name this target: --pool NAME, --lab NAME…
    app: str = ""  # the app recognised under the docroot (mediawiki, wordpress, …)
    app_config: str = ""  # its configuration file
    extensions: tuple[str, ...] | None = None  # loaded in the pool's workers (None: not asked)
    apcu_path: str = ""  # an apcu.so this machine can load into the pool ('' : none)
    fsbench_p50_us: dict[str, dict[str, float]] = field(default_factory=dict)  # mount → op → µs
    apache: ApacheFacts | None = None  # the Apache server in front of PHP, if any
    huge_mapped_kb: tuple[int, ...] | None = None  # per PHP process: AnonHugePages+FilePmdMapped
    # the code huge_code_pages would move: the first executable mapping of a PHP process
    # (path, start, end), as its master loaded it (the addresses change at every start)
    code_mapping: tuple[str, int, int] | None = None
    # the pool's throughput over the same code's on local disk, measured side by side by its
    # caller (tune's shadow, the demo's local lab); None: not measured
    local_ratio: float | None = None

    @property
    def opcache_memory(self) -> dict[str, float] | None:
        """opcache_get_status()'s memory_usage as check --json shows it."""
        mem = self.opcache.memory_usage if self.opcache else None
        return dict(mem) if mem is not None else None

    @property
    def max_children(self) -> int:
        """pm.max_children (0: not set)."""
        return ini_int(self.pm.get("pm.max_children"), 0)

    @property
    def max_requests(self) -> int:
        """pm.max_requests (0: not set, workers are never recycled)."""
        return ini_int(self.pm.get("pm.max_requests"), 0)


# -- value parsing -----------------------------------------------------------------------------
def ini_bytes(value: str | None) -> int | None:
    """`4096K`, `16M`, `1G`, `512` → bytes; None if absent or not a size."""
    if value is None:
        return None
    v = value.strip()
    if not v:
        return 0
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}.get(v[-1].lower(), 1)
    num = v[:-1] if mult > 1 else v
    try:
        return int(float(num) * mult)
    except (ValueError, OverflowError):  # not a number; inf
        return None


def ini_int(value: str | None, default: int = 0) -> int:
    try:
        return int(str(value).strip()) if value is not None else default
    except ValueError:
        return default


def ini_bool(value: str | None, default: bool = False) -> bool:
    if value is None:
        return default
    return value.strip().lower() in ("1", "on", "yes", "true")


def human_bytes(n: float) -> str:
    for unit, size in (("M", 1 << 20), ("K", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f}{unit}".replace(".0", "")
    return f"{int(n)}"


def ini_size(n: int) -> str:
    """Bytes as an ini size, rounded up to whole KiB or MiB."""
    if n >= 1 << 20:
        return f"{-(-n // (1 << 20))}M"
    return f"{-(-n // 1024)}K"


def opcache_rounded(n: int) -> int:
    """opcache.max_accelerated_files as PHP really sizes its hash (the next prime)."""
    for p in OPCACHE_PRIMES:
        if p >= n:
            return p
    return OPCACHE_PRIMES[-1]


# -- from a trace --------------------------------------------------------------------------------
FEW_REQUESTS = 3  # below this many finished requests, a trace's figures are said to be thin


def finished_requests(trace: Trace) -> int | None:
    """How many of a trace's requests finished (None: the trace has no requests of its own,
    an imported `strace -c` table: its summary's count stands)."""
    if not trace.requests:
        return None
    return sum(1 for r in trace.requests.values() if r.end_ns >= 0)


def sample_note(trace: Trace) -> str | None:
    """What check says of a trace with no or few finished requests (None: enough): one with
    none gives check no figure (`trace_facts`); one with a few gives one sample of each."""
    done = finished_requests(trace)
    if done is None or done >= FEW_REQUESTS:
        return None
    if done == 0:
        return (f"not enough requests in the trace (0 finished of {len(trace.requests)}): "
                "check goes on without its figures")
    return (f"only {done} finished request(s) in the trace: its figures are "
            f"{'one sample' if done == 1 else 'two samples'} each")


def trace_facts(trace: Trace, summary: TraceSummary) -> TraceFacts:
    """The figures `check` uses from a loaded trace (results.trace.Trace) and its summary; a
    trace whose requests all broke off (none finished) gives none but its count of 0."""
    n = summary.requests
    per_request = {k: float(v) for k, v in summary.per_request.items() if v is not None}
    entries = tuple((e.entry, e.failed, e.per_request)
                    for e in summary.failed_by_include_path_entry or ())
    mounts = tuple((m.mount, m.fstype, m.per_request) for m in summary.by_mount or ())
    detail = summary.detail or "events"
    net = summary.trace.network
    rt = float(net.per_request) if net is not None and net.per_request is not None else None
    done = {i for i, r in trace.requests.items() if r.end_ns >= 0}
    if trace.requests and not done:
        return TraceFacts(requests=0, detail=detail, per_request={})
    if not trace.syscalls or n == 0:
        return TraceFacts(requests=n, detail=detail, per_request=per_request,
                          failed_by_entry=entries, mounts=mounts, round_trips_per_request=rt)
    div = max(len(done), 1)
    network = storage_kinds.network_mount_indexes(trace.head.mounts)
    data_opens: Counter[str] = Counter()
    net_ns = 0
    ok_lstat: Counter[int] = Counter()
    totals: Counter[int] = Counter()
    vendor_failed = 0
    vendor_examples: Counter[str] = Counter()
    ok_probe = user_ini = revalidate = php_opens = 0
    ini_dirs: set[str] = set()
    seen: set[str] = set()
    for s in trace.syscalls:
        if s.req not in done:
            continue
        if s.call != "chdir":
            totals[s.req] += 1
        if s.path and s.ret >= 0 and s.call in ("lstat", "stat", "open", "readlink"):
            seen.add(s.path)
        if s.call == "lstat" and s.ret >= 0:
            ok_lstat[s.req] += 1
        if s.ret < 0 and s.call in ("access", "stat", "lstat") and "/vendor/" in s.path \
                and s.kind in ("file_probe", "other"):
            vendor_failed += 1
            vendor_examples[s.path] += 1
        if s.kind == "file_probe" and s.ret >= 0 and s.call in ("access", "stat"):
            ok_probe += 1
        if s.kind == "user_ini":
            user_ini += 1
            ini_dirs.add(posixpath.dirname(s.path))
        if s.kind == "opcache_revalidate" and s.call == "stat":
            revalidate += 1
        if s.call == "open" and s.path.endswith(".php") and s.ret >= 0:
            php_opens += 1
        if s.mount in network:
            net_ns += s.lat_ns
            if s.call == "open" and s.ret >= 0 and not s.path.endswith((".php", "/")):
                data_opens[s.path] += 1
    ws_entries, ws_bytes = realpath_bytes(with_parents(seen))
    return TraceFacts(
        requests=n, detail=detail, per_request=per_request,
        ok_lstat_per_request=round(statistics.median(ok_lstat[i] for i in done), 1),
        failed_by_entry=entries,
        vendor_failed_per_request=round(vendor_failed / div, 2),
        vendor_failed_examples=tuple(p for p, _ in vendor_examples.most_common(3)),
        ok_probe_per_request=round(ok_probe / div, 2),
        user_ini_per_request=round(user_ini / div, 2), user_ini_dirs=len(ini_dirs),
        revalidate_per_request=round(revalidate / div, 2),
        php_opens_per_request=round(php_opens / div, 2),
        working_set_entries=ws_entries, working_set_bytes=ws_bytes,
        cold_extra_calls=_cold_extra(trace, done, totals), mounts=mounts,
        data_opens_per_request=round(sum(data_opens.values()) / div, 2),
        data_open_examples=tuple((p, round(c / div, 2)) for p, c in data_opens.most_common(5)),
        network_time_share=_share(net_ns, trace, done),
        network_ms_per_request=round(net_ns / div / 1e6, 2), round_trips_per_request=rt,
        included_dirs=included_dirs(trace))


def is_network_fstype(fstype: str) -> bool:
    """Network storage (NFS, GlusterFS, CephFS, sshfs, …: model/storage_kinds.py): a metadata
    call may leave the machine."""
    return storage_kinds.is_network_fstype(fstype)


def _share(net_ns: int, trace: Trace, done: set[int]) -> float | None:
    """The share of the finished requests' time spent in metadata calls on network mounts."""
    wall = sum(trace.requests[i].end_ns - trace.requests[i].start_ns for i in done)
    return round(min(net_ns / wall, 1.0), 3) if wall > 0 else None


@dataclass(frozen=True)
class NetworkTime:
    """The time of a trace's finished requests in metadata calls on network mounts."""

    requests: int  # finished requests
    share: float | None  # of their time (None: no call or no time recorded)
    ms_per_request: float


def network_time(records: TraceRecords) -> NetworkTime:
    """`trace_facts`' network_time_share and network_ms_per_request from a trace's raw
    records: the same figures without an object per record (`trace` reads them back as it
    closes, for the pool's last-trace record)."""
    done = {i for i, r in records.requests.items() if r[R_END] >= 0}
    if not records.syscalls or not done:
        return NetworkTime(len(done), None, 0.0)
    network = storage_kinds.network_mount_indexes(records.mounts)
    net_ns = sum(r[S_LAT] for r in records.syscalls if r[S_MOUNT] in network and r[S_REQ] in done)
    wall = sum(records.requests[i][R_END] - records.requests[i][R_START] for i in done)
    return NetworkTime(len(done), round(min(net_ns / wall, 1.0), 3) if wall > 0 else None,
                       round(net_ns / len(done) / 1e6, 2))


def _cold_extra(trace: Trace, done: set[int], totals: Counter[int]) -> float | None:
    """Calls of a worker's first traced request above the median of the others."""
    by_pid: dict[int, list[int]] = defaultdict(list)
    for i in sorted(done, key=lambda i: trace.requests[i].start_ns):
        by_pid[trace.requests[i].pid].append(i)
    firsts = [ids[0] for ids in by_pid.values() if len(ids) > 1]
    rest = [totals[i] for ids in by_pid.values() for i in ids[1:]]
    if not firsts or not rest:
        return None
    return round(statistics.median(totals[i] for i in firsts) - statistics.median(rest), 1)


def fsbench_p50(result: FsbenchResult) -> dict[str, dict[str, float]]:
    """mount point → op → warm p50 µs, from an fsbench result."""
    out: dict[str, dict[str, float]] = {}
    for cell in result.cells:
        if cell.state != "warm":
            continue
        mp = result.mount_facts(cell.path_index)[0] if cell.path_index < len(result.mounts) \
            else cell.path
        out.setdefault(mp, {})[cell.op] = float(cell.stats.p50_us)
    return out
