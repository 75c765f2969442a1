"""What a rule of `statstorm check` gives, a Finding, and the helpers the rules share to make
one: the pool's settings, a predicted gain from the trace and fsbench, the network mounts
holding code. Pure code; the rules are in model.rules_php and model.rules_stack, their
registry in model.rules.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from statstorm.model.checkfacts import Facts, MountFact, ini_bool
from statstorm.model.storage_kinds import network_labels
from statstorm.results.check import Finding as Finding, Gain as Gain, Severity as Severity
from statstorm.results.check import gain_from_json
from statstorm.results.serving import handler_of

NETWORK_KINDS = network_labels()  # the mount labels of network storage (model/storage_kinds.py)
REALPATH_DEFAULT = 4 << 20
NO_TRACE = "no trace given: run `statstorm trace` and pass it with --trace to measure this"


Rule = Callable[[Facts], list[Finding]]  # a rule: one pool's facts in, its findings out


def finding(severity: Severity | str, title: str, evidence: list[str], change: list[str],
            tradeoff: str, gain: Gain | dict[str, object] | None = None,
            note: str = "") -> Finding:
    """A rule's finding (its id, pool and docs are filled in by model.rules.evaluate)."""
    return Finding(id="", severity=Severity(severity), title=title, evidence=tuple(evidence),
                   change=tuple(change), tradeoff=tradeoff, predicted_gain=gain_from_json(gain),
                   gain_note=note)


def setting(facts: Facts, key: str) -> str | None:
    return facts.settings.get(key)


def opcache_reset_step(facts: Facts) -> str:
    """The command that empties this target's OPcache after a deploy (what
    `opcache.validate_timestamps = 0` needs): `statstorm opcache reset` for a php-fpm pool,
    a graceful restart where PHP runs in Apache's children (no pool socket to ask)."""
    handler = handler_of(facts.handler)
    if handler is not None and handler.php_in_server:
        return ("a graceful restart of the lab's Apache" if facts.lab
                else "`apache2ctl graceful`")
    if facts.lab:
        return f"`statstorm opcache reset --lab {facts.lab}`"
    return f"`statstorm opcache reset --pool {facts.pool}`"


def gain_estimate(facts: Facts, what: str, calls: float, op: str) -> Gain:
    """Syscalls per request removed, and their time where fsbench measured the code's mount."""
    gain: Gain = {"metric": f"{what} per request", "syscalls_per_request": -round(calls, 1)}
    mount = next((m for m in facts.mounts if m.role == "docroot"), None)
    p50 = facts.fsbench_p50_us.get(mount.mount_point, {}).get(op) if mount else None
    if p50 is not None:
        gain["us_per_request"] = -round(calls * p50, 1)
        gain["from"] = f"fsbench {op} p50 {p50:g} µs on {mount.mount_point if mount else ''}"
    return gain


def opcache_on(facts: Facts) -> bool:
    return ini_bool(setting(facts, "opcache.enable"), False)


CODE_ROLES = ("docroot", "include_path", "traced")  # traced: network code no configuration named


def code_mounts(facts: Facts, kind: str) -> list[MountFact]:
    """The first code mount fact of each mount point of `kind` (one finding per mount)."""
    seen: dict[str, MountFact] = {}
    for m in facts.mounts:
        if m.kind == kind and m.role in CODE_ROLES and m.mount_point not in seen:
            seen[m.mount_point] = m
    return list(seen.values())


def code_on_network(facts: Facts) -> list[MountFact]:
    """The network mounts holding code (not writable data)."""
    return [m for m in facts.mounts if m.kind in NETWORK_KINDS and m.role in CODE_ROLES]


@dataclass(frozen=True)
class MemoryFit:
    """`limit` PHP processes of the p95 PSS seen, against the memory there is for them."""

    per_kb: int  # p95 PSS of the processes seen
    need_kb: int  # limit × per_kb
    have_kb: int  # MemAvailable + what the processes use now
    fits: int  # how many processes fit (at least 1)
    seen: int

    @property
    def severity(self) -> Severity:
        return Severity.CRITICAL if self.need_kb > 1.5 * self.have_kb else Severity.WARNING

    def evidence(self, what: str) -> str:
        return (f"all {what} need about {self.need_kb / 1024:.0f} MiB; available for them: "
                f"{self.have_kb / 1024:.0f} MiB (MemAvailable + what the {what} use now)")


def memory_fit(pss_kb: tuple[int, ...], limit: int, available_kb: int | None) -> MemoryFit | None:
    """The fit of `limit` processes like these when they do not fit; None when they do (or
    nothing was measured)."""
    pss = sorted(pss_kb)
    if limit <= 0 or not pss or available_kb is None:
        return None
    per = pss[min(len(pss) - 1, int(len(pss) * 0.95))]
    need, have = limit * per, available_kb + sum(pss)
    if need <= have:
        return None
    return MemoryFit(per, need, have, max(1, have // per), len(pss))
