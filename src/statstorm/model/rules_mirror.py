"""Rules on a local mirror of the code: where no setting closes the gap to local storage
(the pool stays network-bound with the code on a network mount), serve a local copy kept in
sync at deploy (`code-local-mirror`); once served from one, say when the network tree has
moved on since the last sync (`mirror-stale`). Pure code."""

from __future__ import annotations

from statstorm.model.checkfacts import Facts
from statstorm.model.finding import Finding, Rule, code_on_network, finding
from statstorm.model.mirror import MIRROR_INCLUDE_PATH, STALE_SHOWN, inside, stale_files
from statstorm.model.rules_app import network_bound_evidence
from statstorm.results.check import Severity

SYNC = "statstorm mirror sync {target}"


def sync_command(facts: Facts, pool: str = "") -> str:
    """The sync a deploy runs: a lab's by its name (its mirror is in its own directory)."""
    return SYNC.format(target=f"--lab {facts.lab}" if facts.lab else f"--pool {pool or facts.pool}")


def writable_in_tree(facts: Facts, app_root: str) -> list[str]:
    """The places PHP writes to (codetree.writable_paths, as the facts' mounts carry them)
    that lie inside the app's tree: a mirror keeps them on this server's copy only."""
    return list(dict.fromkeys(m.path for m in facts.mounts
                              if m.role.startswith("writable:") and inside(m.path, app_root)))


def code_local_mirror(facts: Facts) -> list[Finding]:
    why = network_bound_evidence(facts)
    net = [m for m in code_on_network(facts) if m.role == "docroot"]
    if not why or not net or not facts.docroot or not facts.pool:
        return []
    app_root = facts.app_root or facts.docroot
    sync = sync_command(facts)
    writes = writable_in_tree(facts, app_root)
    ev = [*why, f"the code is on {net[0].mount_point} ({net[0].kind})",
          "what the cache settings leave is per-request work through the network client "
          "(opens, lookups the caches do not hold): only local code removes it",
          f"the app's tree: {app_root} ({facts.php_files or 0} PHP files)"]
    if writes:
        ev.append("the app writes inside its tree: " + ", ".join(writes))
    tradeoff = (f"a deploy step on every web server: run `{sync}` after each deploy to "
                f"{app_root} (check reports mirror-stale until it runs), and local disk for "
                "the copy (twice while a sync runs). ")
    tradeoff += (f"Writes by the app into {', '.join(writes)} go to this server's copy only, "
                 "not to the network copy, and the next sync replaces them: move them out of "
                 "the tree (or symlink them to the network copy) first" if writes else
                 "No place the app writes to was found inside its tree: sessions, uploads and "
                 "caches elsewhere stay where they are")
    return [finding(Severity.WARNING, "settings cannot close the gap: serve a local mirror of "
                    "the code, synced at deploy", ev,
                    [f"# a local copy of {app_root} served instead of the network copy; "
                     f"at every deploy, on every web server: {sync}", f"mirror {app_root}",
                     *_include_path_line(facts, app_root)],
                    tradeoff, None, _gain(facts))]


def _include_path_line(facts: Facts, app_root: str) -> list[str]:
    """The pool's include_path, when entries of it are in the mirrored tree: apply points
    them at the mirror too (else includes through them still cross the network)."""
    path = facts.settings.get("include_path", "")
    if not any(e.startswith("/") and inside(e, app_root) for e in path.split(":")):
        return []
    return [f"{MIRROR_INCLUDE_PATH} {path}"]


def _gain(facts: Facts) -> str:
    """What the mirror gives, as far as it was measured."""
    if facts.local_ratio is not None:
        return (f"measured: the same code on local disk served {1 / facts.local_ratio:.2g}x "
                "this pool's throughput, side by side" if facts.local_ratio > 0 else
                "measured: the same code on local disk served, this pool did not")
    t = facts.trace
    ms = t.network_ms_per_request if t is not None else None
    if ms is None:
        return "measured by the trace's share of request time on the network mount"
    return (f"measured: {ms:g} ms per request on the network mount, which a local disk answers "
            "from the page cache")


def mirror_stale(facts: Facts) -> list[Finding]:
    m = facts.mirror
    stale = stale_files(m) if m else ()
    if m is None or not stale:
        return []
    names = ", ".join(p.rsplit("/", 1)[-1] for p in stale[:STALE_SHOWN])
    more = f" ({len(stale)} or more in all)" if len(stale) > STALE_SHOWN else ""
    return [finding(Severity.WARNING, "the local mirror is older than the network copy of "
                    "the code", [f"the pool serves {m.path}, a mirror of {m.marker.source} "
                                 f"synced at {m.marker.synced_at}",
                                 f"PHP files changed on the network copy since: {names}{more}"],
                    [sync_command(facts, m.marker.pool)],
                    "the sync copies the whole tree beside the current one, then switches to "
                    "it at once: twice the copy's disk for a moment", None,
                    "a deploy that is not served yet: no gain to measure")]


RULES: tuple[tuple[str, Rule], ...] = (
    ("code-local-mirror", code_local_mirror),
    ("mirror-stale", mirror_stale),
)
