"""What `statstorm check` gives: its findings graded by `Severity`, and each pool it checked with
the facts it judged (as `check --json` writes them, schema statstorm.check/1). Written by
`CheckResult.to_json` and read back by `CheckResult.from_json` (the report and the demo read
check.json through it), so the schema lives here once.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import ClassVar, NotRequired, TypedDict

from statstorm.results.facts import ApacheFacts, HugePageFacts
from statstorm.results import jsonread as jr
from statstorm.results.last_trace import LastTrace
from statstorm.results.jsontypes import JsonObject, JsonValue
from statstorm.results.mount_cache import CacheOptions

SCHEMA = "statstorm.check/1"


class Severity(StrEnum):
    """How much a finding matters, least first: `rank` orders them (--fail-on)."""

    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"

    @property
    def rank(self) -> int:
        return SEVERITIES.index(self)


SEVERITIES: tuple[Severity, ...] = tuple(Severity)

# A finding's predicted gain: metadata calls per request removed (negative), and their time
# where fsbench measured the storage ("from" says how).
Gain = TypedDict("Gain", {"metric": str, "syscalls_per_request": float,
                          "us_per_request": NotRequired[float], "from": NotRequired[str]})


def gain_from_json(d: object) -> Gain | None:
    """A predicted gain from JSON (or a rule's plain dict); None when there is none."""
    if not isinstance(d, dict) or not d:
        return None
    g: Gain = {"metric": str(d["metric"]),
               "syscalls_per_request": float(d["syscalls_per_request"])}
    if "us_per_request" in d:
        g["us_per_request"] = float(d["us_per_request"])
    if "from" in d:
        g["from"] = str(d["from"])
    return g


def gain_json(g: Gain | None) -> JsonObject | None:
    if g is None:
        return None
    out: JsonObject = {"metric": g["metric"], "syscalls_per_request": g["syscalls_per_request"]}
    if "us_per_request" in g:
        out["us_per_request"] = g["us_per_request"]
    if "from" in g:
        out["from"] = g["from"]
    return out


@dataclass(frozen=True)
class Finding:
    """One rule's verdict on one pool: the evidence, the exact lines to change, the
    trade-off, and the predicted gain (or why there is none)."""

    id: str
    severity: Severity
    title: str
    evidence: tuple[str, ...]
    change: tuple[str, ...]  # exact ini / pool / mount / web-server lines, or commands
    tradeoff: str
    predicted_gain: Gain | None = None
    gain_note: str = ""  # why there is no prediction, or how it was made
    pool: str = ""
    docs: str = ""

    def to_json(self) -> JsonObject:
        return {"id": self.id, "severity": self.severity.value, "title": self.title,
                "evidence": list(self.evidence), "change": list(self.change),
                "tradeoff": self.tradeoff,
                "predicted_gain": gain_json(self.predicted_gain), "gain_note": self.gain_note,
                "pool": self.pool,
                "docs": self.docs}

    @classmethod
    def from_json(cls, data: JsonValue) -> Finding:
        d = jr.obj(data, "finding")
        sev = jr.str_(d, "severity")
        return cls(id=jr.str_(d, "id"),
                   severity=Severity(sev) if sev in SEVERITIES else Severity.INFO,
                   title=jr.str_(d, "title"), evidence=jr.strs(d, "evidence"),
                   change=jr.strs(d, "change"), tradeoff=jr.str_(d, "tradeoff"),
                   predicted_gain=gain_from_json(jr.opt_obj(d, "predicted_gain")),
                   gain_note=jr.str_(d, "gain_note"), pool=jr.str_(d, "pool"),
                   docs=jr.str_(d, "docs"))


def by_severity(findings: list[Finding] | tuple[Finding, ...]) -> tuple[Finding, ...]:
    """Most severe first, in their order within a severity."""
    return tuple(sorted(findings, key=lambda f: -f.severity.rank))


@dataclass(frozen=True)
class MountFact:
    """The mount holding one path PHP reads code from (the docroot or an include_path entry)."""

    role: str  # "docroot" or "include_path"
    path: str
    mount_point: str
    fstype: str
    kind: str  # its storage's mount label (model/storage_kinds.py): local, nfs, glusterfs-fuse…
    cache_options: dict[str, str] = field(default_factory=dict)
    volume_options: dict[str, str] = field(default_factory=dict)
    volume: str = ""
    cache: CacheOptions = field(init=False, repr=False, compare=False)  # the options, typed

    def __post_init__(self) -> None:
        object.__setattr__(self, "cache", CacheOptions.of(self.cache_options, self.volume_options))

    def to_json(self) -> JsonObject:
        return {"role": self.role, "path": self.path, "mount_point": self.mount_point,
                "fstype": self.fstype, "kind": self.kind,
                "cache_options": dict(self.cache_options),
                "volume_options": dict(self.volume_options), "volume": self.volume}

    @classmethod
    def from_json(cls, data: JsonValue) -> MountFact:
        d = jr.obj(data, "mount")
        return cls(jr.str_(d, "role"), jr.str_(d, "path"), jr.str_(d, "mount_point"),
                   jr.str_(d, "fstype"), jr.str_(d, "kind"), jr.str_map(d, "cache_options"),
                   jr.str_map(d, "volume_options"), jr.str_(d, "volume"))


def _pair(x: JsonValue) -> tuple[str, str]:
    a, b = (str(v) for v in jr.array(x, "symlinks"))
    return a, b


def _hugepages(d: JsonObject | None) -> HugePageFacts | None:
    if d is None:
        return None
    return HugePageFacts(jr.str_(d, "thp_enabled"), jr.int_(d, "nr_hugepages"),
                         jr.int_(d, "free_hugepages"), jr.int_(d, "page_kb"))


def _walk_step(x: JsonValue) -> tuple[str, str, str]:
    directory, override, options = (str(v) for v in jr.array(x, "walk"))
    return directory, override, options


def _apache(d: JsonObject | None) -> ApacheFacts | None:
    if d is None:
        return None
    return ApacheFacts(
        config=jr.str_(d, "config"), mpm=jr.str_(d, "mpm"), handler=jr.str_(d, "handler"),
        max_request_workers=jr.int_(d, "max_request_workers"),
        server_limit=jr.int_(d, "server_limit"),
        threads_per_child=jr.int_(d, "threads_per_child"), docroot=jr.str_(d, "docroot"),
        walk=tuple(_walk_step(w) for w in jr.lst(d, "walk")),
        htaccess_files=jr.strs(d, "htaccess_files"),
        directory_source=jr.str_(d, "directory_source"),
        fcgid_max_processes=jr.opt_int(d, "fcgid_max_processes"),
        child_pss_kb=jr.ints(d, "child_pss_kb"))


def _code_mapping(d: JsonObject) -> tuple[str, int, int] | None:
    cm = jr.opt_lst(d, "code_mapping")
    if cm is None:
        return None
    path, start, end = cm
    return str(path), jr.integer(start, "code_mapping"), jr.integer(end, "code_mapping")


@dataclass(frozen=True)
class SiteRoot:
    """One site a pool serves, as check found it: the server that passes to the pool
    (`nginx`, `apache`) or the trace (`trace`: the code a pool read with no configuration
    naming it), the site's names, its docroot and, when the docroot is built from
    variables, the variables it could not resolve."""

    source: str
    names: tuple[str, ...] = ()
    docroot: str = ""
    unknown: str = ""  # e.g. "$host": the docroot depends on the request
    config: str = ""  # the file (and line) that says so

    def to_json(self) -> JsonObject:
        return {"source": self.source, "names": list(self.names), "docroot": self.docroot,
                "unknown": self.unknown, "config": self.config}

    @classmethod
    def from_json(cls, data: JsonValue) -> SiteRoot:
        d = jr.obj(data, "site")
        return cls(source=jr.str_(d, "source"), names=tuple(jr.strs(d, "names")),
                   docroot=jr.str_(d, "docroot"), unknown=jr.str_(d, "unknown"),
                   config=jr.str_(d, "config"))


@dataclass(frozen=True)
class CheckedPool:
    """One pool as check saw it: where its settings came from and the facts it judged."""

    pool: str
    settings_source: str
    docroot: str = ""
    php_files: int | None = None
    settings: dict[str, str] = field(default_factory=dict)
    pm: dict[str, str] = field(default_factory=dict)
    mounts: tuple[MountFact, ...] = ()
    sites: tuple[SiteRoot, ...] = ()
    symlinks: tuple[tuple[str, str], ...] = ()
    nginx_script_filename: str | None = None
    worker_pss_kb: tuple[int, ...] = ()
    mem_available_kb: int | None = None
    hugepages: HugePageFacts | None = None
    php_binary: str = ""
    text_bytes: int | None = None
    realpath_used: int | None = None
    realpath_used_by_worker: tuple[int, ...] = ()
    opcache_memory: dict[str, float] | None = None  # opcache_get_status()'s memory_usage
    huge_mapped_kb: tuple[int, ...] | None = None
    apache: ApacheFacts | None = None
    code_mapping: tuple[str, int, int] | None = None
    notes: tuple[str, ...] = ()
    trace: LastTrace | None = None  # the trace judged: given, or the pool's last (remembered)
    trace_remembered: bool = False

    def to_json(self) -> JsonObject:
        return {"pool": self.pool, "settings_source": self.settings_source,
                "docroot": self.docroot, "php_files": self.php_files,
                "settings": dict(self.settings), "pm": dict(self.pm),
                "mounts": [m.to_json() for m in self.mounts],
                "sites": [x.to_json() for x in self.sites],
                "symlinks": [list(x) for x in self.symlinks],
                "nginx_script_filename": self.nginx_script_filename,
                "worker_pss_kb": list(self.worker_pss_kb),
                "mem_available_kb": self.mem_available_kb,
                "hugepages": self.hugepages.__dict__ if self.hugepages else None,
                "php_binary": self.php_binary, "text_bytes": self.text_bytes,
                "realpath_used": self.realpath_used,
                "realpath_used_by_worker": list(self.realpath_used_by_worker),
                "opcache_memory": (dict(self.opcache_memory) if self.opcache_memory is not None
                                   else None),
                "huge_mapped_kb": (list(self.huge_mapped_kb)
                                   if self.huge_mapped_kb is not None else None),
                "apache": asdict(self.apache) if self.apache else None,
                "code_mapping": list(self.code_mapping) if self.code_mapping else None,
                "notes": list(self.notes),
                "trace": self.trace.to_json() if self.trace else None,
                "trace_remembered": self.trace_remembered}

    @classmethod
    def from_json(cls, data: JsonValue) -> CheckedPool:
        """Tolerant of files written before huge_mapped_kb, apache, code_mapping and trace."""
        d = jr.obj(data, "pool")
        om = jr.opt_obj(d, "opcache_memory")
        return cls(
            pool=jr.str_(d, "pool"), settings_source=jr.str_(d, "settings_source"),
            docroot=jr.str_(d, "docroot"), php_files=jr.opt_int(d, "php_files"),
            settings=jr.str_map(d, "settings"), pm=jr.str_map(d, "pm"),
            mounts=tuple(MountFact.from_json(m) for m in jr.lst(d, "mounts")),
            sites=tuple(SiteRoot.from_json(x) for x in jr.lst(d, "sites")),
            symlinks=tuple(_pair(x) for x in jr.lst(d, "symlinks")),
            nginx_script_filename=jr.opt_str(d, "nginx_script_filename"),
            worker_pss_kb=jr.ints(d, "worker_pss_kb"),
            mem_available_kb=jr.opt_int(d, "mem_available_kb"),
            hugepages=_hugepages(jr.opt_obj(d, "hugepages")),
            php_binary=jr.str_(d, "php_binary"), text_bytes=jr.opt_int(d, "text_bytes"),
            realpath_used=jr.opt_int(d, "realpath_used"),
            realpath_used_by_worker=jr.ints(d, "realpath_used_by_worker"),
            opcache_memory=None if om is None else jr.num_map(d, "opcache_memory"),
            huge_mapped_kb=jr.opt_ints(d, "huge_mapped_kb"),
            apache=_apache(jr.opt_obj(d, "apache")), code_mapping=_code_mapping(d),
            notes=jr.strs(d, "notes"),
            trace=LastTrace.from_json(d["trace"]) if d.get("trace") is not None else None,
            trace_remembered=jr.bool_(d, "trace_remembered"))


@dataclass(frozen=True)
class CheckResult:
    """Every pool checked and all their findings, most severe first."""

    # what report's registry (results/result_files.py KINDS) knows of its files
    KIND: ClassVar[str] = "check"
    VERSIONS: ClassVar[tuple[int, ...]] = (1,)
    REQUIRED: ClassVar[tuple[str, ...]] = ("findings",)
    LEGACY: ClassVar[tuple[str, ...]] = ("findings", "pools")

    pools: tuple[CheckedPool, ...]
    findings: list[Finding]  # a list: the callers that act on them take lists

    def worst(self) -> Severity | None:
        return self.findings[0].severity if self.findings else None

    def failed(self, fail_on: Severity | None) -> bool:
        """True if a finding is at least as severe as `fail_on`."""
        return fail_on is not None and any(f.severity.rank >= fail_on.rank
                                           for f in self.findings)

    def to_json(self) -> JsonObject:
        return {"schema": SCHEMA, "findings": [f.to_json() for f in self.findings],
                "pools": [p.to_json() for p in self.pools]}

    @classmethod
    def from_json(cls, data: JsonValue) -> CheckResult:
        d = jr.obj(data, "check.json")
        return cls(pools=tuple(CheckedPool.from_json(p) for p in jr.lst(d, "pools")),
                   findings=[Finding.from_json(f) for f in jr.lst(d, "findings")])
