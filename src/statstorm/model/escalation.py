"""tune's escalation: the changes `apply --all` leaves out that `statstorm tune --yes` tries
one at a time after it, least invasive first, while the pool stays below `TARGET_RATIO` of its
shadow's throughput. Each is applied by name only where check proposed it, measured, and kept
only when the ratio rose by more than results.tune.KEEP_MARGIN; else rolled back. Pure code.

The order is the price each asks of the user, cheapest first:
1. `glusterfs-content-caching`: volume options set live, no file of the app touched;
2. `opcache-timestamps-off`: OPcache stops looking at the code's timestamps, so a deploy must
   reset it (`statstorm opcache reset`);
3. `code-local-mirror`: a copy of the code on local disk, which every deploy must sync
   (`statstorm mirror sync`); `tune --no-mirror` leaves it out.
"""

from __future__ import annotations

from statstorm.model.rules_gluster import RULE_ID as CONTENT
from statstorm.model.rules_app import NETWORK_RATIO, TIMESTAMPS_OFF as TIMESTAMPS

MIRROR = "code-local-mirror"
ESCALATION: tuple[str, ...] = (CONTENT, TIMESTAMPS, MIRROR)
TARGET_RATIO = NETWORK_RATIO  # the goal: the pool's throughput over its shadow's (0.90)
# What each asks of the user, said when it is tried and in tune.json.
PRICE = {
    CONTENT: "GlusterFS volume options set live: small files may be served up to 600 s stale "
             "when an upcall does not reach this client",
    TIMESTAMPS: "OPcache no longer sees code changes by itself: every deploy must run "
                "`statstorm opcache reset --pool {pool}`",
    MIRROR: "a copy of the code on local disk that every deploy must sync with "
            "`statstorm mirror sync --pool {pool}` (until then the old code is served)",
}


def price(rule_id: str, pool: str) -> str:
    return PRICE.get(rule_id, "").format(pool=pool)


def plan(reported: list[str], mirror: bool = True) -> tuple[list[str], list[tuple[str, str]]]:
    """The escalation's changes to try, in order, among those check `reported`; and the ones
    left out with why (not proposed by check, or the mirror turned off)."""
    tried: list[str] = []
    skipped: list[tuple[str, str]] = []
    for rule_id in ESCALATION:
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


__all__ = ["ESCALATION", "MIRROR", "PRICE", "TARGET_RATIO", "plan", "price", "reached"]
