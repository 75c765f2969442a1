"""What a host offers the tracers, as read (`adapters/host/kernel_features.py`, the tools and
the PHP found by `commands/doctor.py`) and judged (`model/host_checks.py`): the kernel's
facts (`KernelFacts`), the tracers installed (`TracerTools`) and each PHP found with what
the compiled tracer can attribute in it (`PhpFound`). Facts only: a value not known is
None or '' (a file not there, not readable), never a guess."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from statstorm.results import jsonlenient as lenient
from statstorm.results.jsontypes import JsonObject, JsonValue


def _int_or_none(v: JsonValue) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _str(v: JsonValue) -> str:
    return v if isinstance(v, str) else ""


@dataclass(frozen=True)
class KernelFacts:
    """The kernel's files that decide which tracer can run (under a root: '/' on this host,
    a captured tree in tests)."""

    release: str = ""  # /proc/sys/kernel/osrelease ("6.1.0-28-amd64")
    btf: bool = False  # /sys/kernel/btf/vmlinux exists
    lockdown: str = ""  # none | integrity | confidentiality; '' not readable
    securityfs: bool = False  # mounted (where the lockdown file lives)
    tracefs: str = ""  # where tracefs is mounted ('' not mounted)
    tracefs_known: bool = False  # "tracefs" in /proc/filesystems: it can be mounted
    # events/syscalls/sys_enter_newfstatat in tracefs (None: tracefs not mounted)
    syscall_tracepoints: bool | None = None
    uprobe_events: bool | None = None  # tracefs's uprobe_events (None: no tracefs)
    uprobe_pmu: bool = False  # /sys/bus/event_source/devices/uprobe: perf-event uprobes
    config: dict[str, str] = field(default_factory=dict)  # CONFIG_X → y, m or '' (not set)
    config_source: str = ""  # /proc/config.gz, /boot/config-RELEASE ('' none readable)
    unprivileged_bpf_disabled: int | None = None  # kernel.unprivileged_bpf_disabled
    perf_event_paranoid: int | None = None  # kernel.perf_event_paranoid
    ptrace_scope: int | None = None  # kernel.yama.ptrace_scope (None: Yama not active)
    euid: int | None = None  # /proc/self/status Uid: (the effective one)
    cap_eff: int | None = None  # /proc/self/status CapEff:
    memlock_hard: int | None = None  # /proc/self/limits Max locked memory, bytes (-1: unlimited)

    def to_json(self) -> JsonObject:
        return {"release": self.release, "btf": self.btf, "lockdown": self.lockdown or None,
                "securityfs": self.securityfs, "tracefs": self.tracefs or None,
                "tracefs_known": self.tracefs_known,
                "syscall_tracepoints": self.syscall_tracepoints,
                "uprobe_events": self.uprobe_events, "uprobe_pmu": self.uprobe_pmu,
                "config": dict(self.config), "config_source": self.config_source or None,
                "unprivileged_bpf_disabled": self.unprivileged_bpf_disabled,
                "perf_event_paranoid": self.perf_event_paranoid,
                "ptrace_scope": self.ptrace_scope, "euid": self.euid,
                "cap_eff": None if self.cap_eff is None else f"{self.cap_eff:016x}",
                "memlock_hard": self.memlock_hard}

    @classmethod
    def from_json(cls, data: JsonObject) -> KernelFacts:
        def tri(key: str) -> bool | None:
            v = data.get(key)
            return v if isinstance(v, bool) else None

        cap = _str(data.get("cap_eff"))
        config = lenient.obj_or_empty(data, "config")
        return cls(_str(data.get("release")), bool(data.get("btf")), _str(data.get("lockdown")),
                   bool(data.get("securityfs")), _str(data.get("tracefs")),
                   bool(data.get("tracefs_known")), tri("syscall_tracepoints"),
                   tri("uprobe_events"), bool(data.get("uprobe_pmu")),
                   {k: _str(v) for k, v in config.items()}, _str(data.get("config_source")),
                   _int_or_none(data.get("unprivileged_bpf_disabled")),
                   _int_or_none(data.get("perf_event_paranoid")),
                   _int_or_none(data.get("ptrace_scope")), _int_or_none(data.get("euid")),
                   int(cap, 16) if cap else None, _int_or_none(data.get("memlock_hard")))


@dataclass(frozen=True)
class TracerTools:
    """The tracers installed: the compiled one (built from these sources, or why not), the
    PHP build whose layout is compiled into it, bpftrace and strace."""

    tracer: str = ""  # the loader's path ('' not built)
    tracer_missing: str = ""  # why not (libbpf_trace's words)
    tracer_fix: str = ""  # and how to build it
    tracer_php_build: str = ""  # ZEND_MODULE_BUILD_ID of its built-in layout ('' none)
    bpftrace: str = ""
    strace: str = ""

    def to_json(self) -> JsonObject:
        return {"tracer": self.tracer or None, "tracer_missing": self.tracer_missing or None,
                "tracer_fix": self.tracer_fix or None,
                "tracer_php_build": self.tracer_php_build or None,
                "bpftrace": self.bpftrace or None, "strace": self.strace or None}

    @classmethod
    def from_json(cls, data: JsonObject) -> TracerTools:
        return cls(*(_str(data.get(k)) for k in ("tracer", "tracer_missing", "tracer_fix",
                                                  "tracer_php_build", "bpftrace", "strace")))


class Coverage(StrEnum):
    """What the compiled tracer records of a PHP's operations (adapters/tracing/php_layouts.py)."""

    TABLE = "table"  # every operation; includes read from PHP's included-files table
    PROBES = "probing includes"  # every operation; each include's zend_stream_open probed
    COUNTS = "counts only"  # syscalls counted per request, no PHP operation attributed
    UNKNOWN = "unknown"  # the compiled tracer is not built: nothing to ask


@dataclass(frozen=True)
class PhpFound:
    """A PHP target running here (as check and trace find them), its binaries and what the
    compiled tracer can attribute in it."""

    label: str  # `pool www`, `Apache prefork, mod_php`
    binaries: tuple[str, ...]
    version: str = ""  # "8.2" ('' not known)
    builds: tuple[str, ...] = ()  # each binary's ZEND_MODULE_BUILD_ID ("API20220829,NTS")
    coverage: Coverage = Coverage.UNKNOWN
    note: str = ""  # why not TABLE, in one line ('' for TABLE)

    @property
    def thread_safe(self) -> bool:
        return any(b.split(",")[1:2] == ["TS"] for b in self.builds)

    def to_json(self) -> JsonObject:
        return {"label": self.label, "binaries": list(self.binaries), "version": self.version,
                "builds": list(self.builds), "thread_safe": self.thread_safe,
                "coverage": self.coverage.value, "note": self.note}

    @classmethod
    def from_json(cls, data: JsonObject) -> PhpFound:
        def strs(key: str) -> tuple[str, ...]:
            return tuple(_str(v) for v in lenient.list_or_none(data, key) or [])

        cov = _str(data.get("coverage"))
        return cls(_str(data.get("label")), strs("binaries"), _str(data.get("version")),
                   strs("builds"), Coverage(cov) if cov in set(Coverage) else Coverage.UNKNOWN,
                   _str(data.get("note")))
