"""The rules of `statstorm check`: Facts in, graded findings out. Pure code.

Each rule is a function `Facts -> list[Finding]` registered in RULES under its stable id (the
rules live in model.rules_php and model.rules_stack, imported at the end); the id is the anchor
of its section in docs/check.md (a test fails if a rule has none). A finding carries the
evidence (settings and measured figures), the exact lines to change, the trade-off, and a
predicted gain where statstorm can estimate one from the trace (syscalls per request it
removes, and with an fsbench result their time); otherwise `predicted_gain` is None and
`gain_note` says why.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Callable

from statstorm.model.checkfacts import Facts, MountFact, ini_bool

SEVERITIES = ("info", "warning", "critical")
DOCS = "docs/check.md#"
NETWORK_KINDS = ("nfs", "glusterfs-fuse", "sshfs", "fuse")
REALPATH_DEFAULT = 4 << 20
NO_TRACE = "no trace given: run `statstorm trace` and pass it with --trace to measure this"


@dataclass(frozen=True)
class Finding:
    id: str
    severity: str  # info | warning | critical
    title: str
    evidence: tuple[str, ...]
    change: tuple[str, ...]  # exact ini / pool / mount / web-server lines, or commands
    tradeoff: str
    predicted_gain: dict[str, Any] | None = None
    gain_note: str = ""  # why there is no prediction, or how it was made
    pool: str = ""
    docs: str = ""

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["evidence"] = list(self.evidence)
        data["change"] = list(self.change)
        return data


def rank(severity: str) -> int:
    return SEVERITIES.index(severity)


Rule = Callable[[Facts], list["Finding"]]
RULES: dict[str, Rule] = {}


def rule(rule_id: str) -> Callable[[Rule], Rule]:
    def register(fn: Rule) -> Rule:
        RULES[rule_id] = fn
        return fn
    return register


def evaluate(facts: Facts) -> list[Finding]:
    """All findings for one pool, most severe first (stable order within a severity)."""
    out: list[Finding] = []
    for rule_id, fn in RULES.items():
        for f in fn(facts):
            out.append(Finding(**{**asdict(f), "evidence": tuple(f.evidence),
                                  "change": tuple(f.change), "id": rule_id, "pool": facts.pool,
                                  "docs": DOCS + rule_id}))
    return sorted(out, key=lambda f: -rank(f.severity))


def finding(severity: str, title: str, evidence: list[str], change: list[str], tradeoff: str,
       gain: dict[str, Any] | None = None, note: str = "") -> Finding:
    return Finding(id="", severity=severity, title=title, evidence=tuple(evidence),
                   change=tuple(change), tradeoff=tradeoff, predicted_gain=gain, gain_note=note)


def setting(facts: Facts, key: str) -> str | None:
    return facts.settings.get(key)


def gain_estimate(facts: Facts, what: str, calls: float, op: str) -> dict[str, Any]:
    """Syscalls per request removed, and their time where fsbench measured the code's mount."""
    gain: dict[str, Any] = {"metric": f"{what} per request", "syscalls_per_request": -round(calls, 1)}
    mount = next((m for m in facts.mounts if m.role == "docroot"), None)
    p50 = facts.fsbench_p50_us.get(mount.mount_point, {}).get(op) if mount else None
    if p50 is not None:
        gain["us_per_request"] = -round(calls * p50, 1)
        gain["from"] = f"fsbench {op} p50 {p50:g} µs on {mount.mount_point if mount else ''}"
    return gain


def opcache_on(facts: Facts) -> bool:
    return ini_bool(setting(facts, "opcache.enable"), False)


CODE_ROLES = ("docroot", "include_path")


def code_on_network(facts: Facts) -> list[MountFact]:
    """The network mounts holding code (not writable data)."""
    return [m for m in facts.mounts if m.kind in NETWORK_KINDS and m.role in CODE_ROLES]



# The rules register themselves on import (kept last: they import the helpers above).
from statstorm.model import rules_php, rules_stack  # noqa: E402,F401
