"""What `statstorm doctor` found: each check with its status and fix, which tracing modes can
run here and what the main verbs will use, each verb's privileges, the PHP found, and the
facts they were judged from (results/host_facts.py). Judged by model/host_checks.py; the
same judgement gives `trace` and the exporter their one-line refusals."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from statstorm.errors import EXIT_DEPENDENCY, EXIT_OK, EXIT_PRIVILEGE
from statstorm.results import jsonlenient as lenient
from statstorm.results.host_facts import KernelFacts, PhpFound, TracerTools
from statstorm.results.jsontypes import JsonObject, JsonValue

KIND = "doctor"
VERSION = 1
SCHEMA = f"statstorm.{KIND}/{VERSION}"


class Status(StrEnum):
    OK = "ok"
    INFO = "info"  # a fact to know; it stops nothing
    WARN = "warn"  # works, with less (a fallback lost, a slower probe, less read)
    MISSING = "missing"  # a main verb cannot do its default job here


class Mode(StrEnum):
    """The ways statstorm traces, in the order trace falls back through them."""

    EVENTS = "events"  # the compiled eBPF tracer, full events (trace's default)
    COUNTS = "counts"  # the compiled eBPF tracer counting in the kernel (--counts, exporter)
    BPFTRACE = "bpftrace"  # the fallback eBPF tracer (events and counts)
    STRACE = "strace"  # the last fallback (ptrace: several times slower)


MODE_NAMES = {Mode.EVENTS: "the compiled eBPF tracer",
              Mode.COUNTS: "the compiled eBPF tracer's counting mode",
              Mode.BPFTRACE: "bpftrace", Mode.STRACE: "strace"}


def _str(v: JsonValue) -> str:
    return v if isinstance(v, str) else ""


def _strs(data: JsonObject, key: str) -> tuple[str, ...]:
    return tuple(_str(v) for v in lenient.list_or_none(data, key) or [])


def _objs(data: JsonObject, key: str) -> list[JsonObject]:
    return [v for v in lenient.list_or_none(data, key) or [] if isinstance(v, dict)]


@dataclass(frozen=True)
class Check:
    """One thing doctor looked at: what it found and means (`says`, one line), how to fix it
    ('' when nothing is to be fixed) and the modes it stops."""

    id: str
    status: Status
    says: str
    fix: str = ""
    blocks: tuple[Mode, ...] = ()
    privilege: bool = False  # what is missing is a privilege (exit code 3, not 4)

    def line(self) -> str:
        """The one line trace and the exporter refuse with, as doctor prints it."""
        return f"{self.says}; fix: {self.fix}" if self.fix else self.says

    def to_json(self) -> JsonObject:
        return {"id": self.id, "status": self.status.value, "says": self.says,
                "fix": self.fix or None, "blocks": [m.value for m in self.blocks],
                "privilege": self.privilege}

    @classmethod
    def from_json(cls, data: JsonObject) -> Check:
        return cls(_str(data.get("id")), Status(_str(data.get("status")) or "info"),
                   _str(data.get("says")), _str(data.get("fix")),
                   tuple(Mode(m) for m in _strs(data, "blocks") if m in set(Mode)),
                   bool(data.get("privilege")))


@dataclass(frozen=True)
class ModeVerdict:
    """Can this mode run here, and if not, the first check that stops it."""

    mode: Mode
    works: bool
    reason: str = ""  # the blocking check's line ('' when it works)
    blocked_by: tuple[str, ...] = ()  # every blocking check's id

    def to_json(self) -> JsonObject:
        return {"mode": self.mode.value, "works": self.works, "reason": self.reason or None,
                "blocked_by": list(self.blocked_by)}

    @classmethod
    def from_json(cls, data: JsonObject) -> ModeVerdict:
        return cls(Mode(_str(data.get("mode"))), bool(data.get("works")),
                   _str(data.get("reason")), _strs(data, "blocked_by"))


@dataclass(frozen=True)
class Route:
    """What a verb will trace with here: the first mode of its chain that works (None: it
    refuses), and what that costs or loses in one line."""

    verb: str
    mode: Mode | None
    note: str

    def to_json(self) -> JsonObject:
        return {"verb": self.verb, "mode": self.mode.value if self.mode else None,
                "note": self.note}

    @classmethod
    def from_json(cls, data: JsonObject) -> Route:
        mode = _str(data.get("mode"))
        return cls(_str(data.get("verb")), Mode(mode) if mode else None, _str(data.get("note")))


@dataclass(frozen=True)
class VerbPrivileges:
    """A verb judged against this process's user and effective capabilities."""

    verb: str
    root: bool  # statstorm itself asks for root (it checks the effective user)
    needed: tuple[str, ...]  # the capabilities it needs on this kernel, each once
    missing: tuple[str, ...]  # of those, the ones the effective set lacks
    euid_ok: bool  # root when it asks for it (True when it does not)
    main: bool  # one of the verbs doctor's exit code stands for
    why: tuple[tuple[str, str], ...] = ()  # (capability, what for) of each need here
    elsewhere: tuple[tuple[str, str], ...] = ()  # needs of other kernels or set-ups, not here

    @property
    def ok(self) -> bool:
        return self.euid_ok and not self.missing

    def to_json(self) -> JsonObject:
        return {"verb": self.verb, "root": self.root, "needed": list(self.needed),
                "missing": list(self.missing), "euid_ok": self.euid_ok, "ok": self.ok,
                "main": self.main,
                "why": [{"cap": c, "for": w} for c, w in self.why],
                "not_here": [{"cap": c, "for": w} for c, w in self.elsewhere]}

    @classmethod
    def from_json(cls, data: JsonObject) -> VerbPrivileges:
        def pairs(key: str) -> tuple[tuple[str, str], ...]:
            return tuple((_str(w.get("cap")), _str(w.get("for"))) for w in _objs(data, key))

        return cls(_str(data.get("verb")), bool(data.get("root")), _strs(data, "needed"),
                   _strs(data, "missing"), bool(data.get("euid_ok", True)),
                   bool(data.get("main")), pairs("why"), pairs("not_here"))


@dataclass(frozen=True)
class DoctorResult:
    """One `statstorm doctor`: the checks, the modes, the routes, the privileges and the PHP
    found, with the facts behind them; `exit_code` is 0 when every main verb can do its
    default job here."""

    checks: tuple[Check, ...]
    modes: tuple[ModeVerdict, ...]
    routes: tuple[Route, ...]
    privileges: tuple[VerbPrivileges, ...]
    php: tuple[PhpFound, ...]
    php_listed: bool  # False: the PHP targets could not be listed (a check says why)
    kernel: KernelFacts
    tools: TracerTools

    @property
    def missing(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if c.status == Status.MISSING)

    @property
    def exit_code(self) -> int:
        """0: everything the main verbs need is here; 3: only privileges are missing
        (run it as root); 4: a kernel feature or a tracer is missing."""
        missing = self.missing
        if not missing:
            return EXIT_OK
        return EXIT_PRIVILEGE if all(c.privilege for c in missing) else EXIT_DEPENDENCY

    def mode(self, mode: Mode) -> ModeVerdict:
        return next(m for m in self.modes if m.mode == mode)

    def to_json(self) -> JsonObject:
        return {"schema": SCHEMA, "kind": KIND, "exit": self.exit_code,
                "ok": not self.missing, "checks": [c.to_json() for c in self.checks],
                "modes": [m.to_json() for m in self.modes],
                "routes": [r.to_json() for r in self.routes],
                "privileges": [p.to_json() for p in self.privileges],
                "php": [p.to_json() for p in self.php], "php_listed": self.php_listed,
                "kernel": self.kernel.to_json(), "tools": self.tools.to_json()}

    @classmethod
    def from_json(cls, data: JsonObject) -> DoctorResult:
        return cls(tuple(Check.from_json(c) for c in _objs(data, "checks")),
                   tuple(ModeVerdict.from_json(m) for m in _objs(data, "modes")),
                   tuple(Route.from_json(r) for r in _objs(data, "routes")),
                   tuple(VerbPrivileges.from_json(p) for p in _objs(data, "privileges")),
                   tuple(PhpFound.from_json(p) for p in _objs(data, "php")),
                   bool(data.get("php_listed", True)),
                   KernelFacts.from_json(lenient.obj_or_empty(data, "kernel")),
                   TracerTools.from_json(lenient.obj_or_empty(data, "tools")))
