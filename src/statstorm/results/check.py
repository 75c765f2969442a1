"""What `statstorm check` gives: its findings graded by `Severity`, and each pool it checked with
the facts it judged (as `check --json` writes them, schema statstorm.check/1). Written by
`CheckResult.to_json` and read back by `CheckResult.from_json` (the report and the demo read
check.json through it), so the schema lives here once.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any, NotRequired, TypedDict

from statstorm.results.facts import ApacheFacts, HugePageFacts
from statstorm.results.jsontypes import JsonObject
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
    def from_json(cls, d: dict[str, Any]) -> Finding:
        sev = str(d["severity"])
        return cls(id=str(d["id"]), severity=Severity(sev) if sev in SEVERITIES else Severity.INFO,
                   title=str(d["title"]), evidence=tuple(str(x) for x in d["evidence"]),
                   change=tuple(str(x) for x in d["change"]), tradeoff=str(d["tradeoff"]),
                   predicted_gain=gain_from_json(d["predicted_gain"]),
                   gain_note=str(d["gain_note"]), pool=str(d["pool"]), docs=str(d["docs"]))


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
    def from_json(cls, d: dict[str, Any]) -> MountFact:
        return cls(str(d["role"]), str(d["path"]), str(d["mount_point"]), str(d["fstype"]),
                   str(d["kind"]), _strs(d["cache_options"]), _strs(d["volume_options"]),
                   str(d["volume"]))


def _strs(d: object) -> dict[str, str]:
    return {str(k): str(v) for k, v in d.items()} if isinstance(d, dict) else {}


def _ints(xs: object) -> tuple[int, ...]:
    return tuple(int(x) for x in xs) if isinstance(xs, list) else ()


def _opt_int(x: object) -> int | None:
    return int(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _apache(d: object) -> ApacheFacts | None:
    if not isinstance(d, dict):
        return None
    return ApacheFacts(**{**d, "walk": tuple(tuple(w) for w in d["walk"]),
                          "htaccess_files": tuple(d["htaccess_files"]),
                          "child_pss_kb": tuple(d["child_pss_kb"])})


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

    def to_json(self) -> JsonObject:
        return {"pool": self.pool, "settings_source": self.settings_source,
                "docroot": self.docroot, "php_files": self.php_files,
                "settings": dict(self.settings), "pm": dict(self.pm),
                "mounts": [m.to_json() for m in self.mounts],
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
                "notes": list(self.notes)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> CheckedPool:
        """Tolerant of files written before huge_mapped_kb, apache and code_mapping."""
        hp, om, nsf = d["hugepages"], d["opcache_memory"], d["nginx_script_filename"]
        hm, cm = d.get("huge_mapped_kb"), d.get("code_mapping")
        return cls(
            pool=str(d["pool"]), settings_source=str(d["settings_source"]),
            docroot=str(d["docroot"] or ""), php_files=_opt_int(d["php_files"]),
            settings=_strs(d["settings"]), pm=_strs(d["pm"]),
            mounts=tuple(MountFact.from_json(m) for m in d["mounts"]),
            symlinks=tuple((str(a), str(b)) for a, b in d["symlinks"]),
            nginx_script_filename=None if nsf is None else str(nsf),
            worker_pss_kb=_ints(d["worker_pss_kb"]),
            mem_available_kb=_opt_int(d["mem_available_kb"]),
            hugepages=HugePageFacts(**hp) if isinstance(hp, dict) else None,
            php_binary=str(d["php_binary"]), text_bytes=_opt_int(d["text_bytes"]),
            realpath_used=_opt_int(d["realpath_used"]),
            realpath_used_by_worker=_ints(d["realpath_used_by_worker"]),
            opcache_memory={str(k): v for k, v in om.items()} if isinstance(om, dict) else None,
            huge_mapped_kb=_ints(hm) if isinstance(hm, list) else None,
            apache=_apache(d.get("apache")),
            code_mapping=(str(cm[0]), int(cm[1]), int(cm[2])) if isinstance(cm, list) else None,
            notes=tuple(str(n) for n in d["notes"]))


@dataclass(frozen=True)
class CheckResult:
    """Every pool checked and all their findings, most severe first."""

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
    def from_json(cls, d: dict[str, Any]) -> CheckResult:
        return cls(pools=tuple(CheckedPool.from_json(p) for p in d["pools"]),
                   findings=[Finding.from_json(f) for f in d["findings"]])
