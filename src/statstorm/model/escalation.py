"""tune's escalation: the changes `apply --all` leaves out that `statstorm tune --yes` tries
one at a time after it, least invasive first, while the pool stays below `TARGET_RATIO` of its
shadow's throughput. Each is applied by name only where check proposed it, measured, and kept
only when the ratio rose by more than results.tune.KEEP_MARGIN; else rolled back. Pure code.

The order is the price each asks of the user, cheapest first:
1. `glusterfs-content-caching`: volume options set live, no file of the app touched;
2. `openafs-fuse-timeouts`: afsd.fuse restarted with a 60 s negative timeout, no file of the
   app touched; a new file can stay unseen up to 60 s on that client (GlusterFS's kind of
   price, in seconds);
3. `opcache-timestamps-off`: OPcache stops looking at the code's timestamps, so a deploy must
   reset it (`statstorm opcache reset`);
4. `code-local-mirror`: a copy of the code on local disk, which every deploy must sync
   (`statstorm mirror sync`); `tune --no-mirror` leaves it out.
"""

from __future__ import annotations

from statstorm.model.rules_afs import TIMEOUTS_ID as AFS_TIMEOUTS
from statstorm.model.rules_gluster import RULE_ID as CONTENT
from statstorm.model.rules_app import NETWORK_RATIO, TIMESTAMPS_OFF as TIMESTAMPS

MIRROR = "code-local-mirror"
ORDER: tuple[str, ...] = (CONTENT, AFS_TIMEOUTS, TIMESTAMPS, MIRROR)
# Changes of one client's storage only, tried and listed only where check proposed them (a
# pool on another storage is not told that its AFS client was not tried).
WHERE_PROPOSED = frozenset({AFS_TIMEOUTS})
ESCALATION: tuple[str, ...] = tuple(i for i in ORDER if i not in WHERE_PROPOSED)
TARGET_RATIO = NETWORK_RATIO  # the goal: the pool's throughput over its shadow's (0.90)
# What each asks of the user, said when it is tried and in tune.json.
PRICE = {
    CONTENT: "GlusterFS volume options set live: small files may be served up to 600 s stale "
             "when an upcall does not reach this client",
    AFS_TIMEOUTS: "afsd.fuse restarted with a 60 s negative timeout: a new file on the AFS "
                  "mount may stay unseen up to 60 s on this client",
    TIMESTAMPS: "OPcache no longer sees code changes by itself: every deploy must run "
                "`statstorm opcache reset {target}`",
    MIRROR: "a copy of the code on local disk that every deploy must sync with "
            "`statstorm mirror sync {target}` (until then the old code is served)",
}


def price(rule_id: str, target: str) -> str:
    """What the change asks of the user; `target` names the pool as the verbs take it
    (`--pool NAME`, or a lab's `--lab NAME`)."""
    return PRICE.get(rule_id, "").format(target=target)


def plan(reported: list[str], mirror: bool = True) -> tuple[list[str], list[tuple[str, str]]]:
    """The escalation's changes to try, in order, among those check `reported`; and the ones
    left out with why (not proposed by check, or the mirror turned off)."""
    tried: list[str] = []
    skipped: list[tuple[str, str]] = []
    for rule_id in ORDER:
        if rule_id in WHERE_PROPOSED and rule_id not in reported:
            continue
        if rule_id == MIRROR and not mirror:
            skipped.append((rule_id, "left out by --no-mirror"))
        elif rule_id not in reported:
            skipped.append((rule_id, "check did not propose it for this pool"))
        else:
            tried.append(rule_id)
    return tried, skipped


def reached(ratio: float | None) -> bool:
    """Whether the pool is close enough to its shadow for the escalation to stop."""
    return ratio is not None and ratio >= TARGET_RATIO


__all__ = ["ESCALATION", "MIRROR", "ORDER", "PRICE", "TARGET_RATIO", "WHERE_PROPOSED", "plan",
           "price", "reached"]
