"""`statstorm check` rules for GlusterFS's next tier, after its metadata caches: the caches of
file contents that the attribute, entry and negative timeouts leave alone. Pure code; see
model.rules for the registry.

An app on a GlusterFS FUSE mount with the md-cache tier in place (glusterfs-mount-caching)
still opens and reads its data files (configuration JSON, templates) on every request. Two
caches can keep their contents on the client: quick-read's cache of small files on the volume,
revalidated every `performance.qr-cache-timeout` seconds (1 by default) unless the bricks'
upcalls invalidate it (`performance.quick-read-cache-invalidation`), and the kernel's page
cache of a file, which the FUSE client drops at every open unless it runs with
`fopen-keep-cache`. Whether they help is not known before measuring: on the MediaWiki lab
neither removed a round trip (the opens and flushes of its data files still reach the brick)
and neither moved throughput reproducibly (docs/check.md), so the change is quick-read's, a
volume option set live with no remount, and the flag is offered as a comment. The finding is a
measure-first change (`MEASURE_FIRST`): `apply --all` leaves it out, and `statstorm tune`
keeps it only where its measurement shows a gain.
"""

from __future__ import annotations

from statstorm.model.checkfacts import Facts, MountFact
from statstorm.model.finding import Finding, Rule, code_mounts, finding
from statstorm.model.mount_options import GLUSTER_CONTENT_CLIENT
from statstorm.model.rules_app import TIMESTAMPS_OFF
from statstorm.results.check import Severity

RULE_ID = "glusterfs-content-caching"
# Findings whose gain is not predicted but must be measured: `apply --all` leaves them out
# (model.applyplan.NAMED_ONLY) and `statstorm tune` keeps one only where it measured a gain.
MEASURE_FIRST = frozenset({RULE_ID, TIMESTAMPS_OFF})
# The metadata tier this rule follows (glusterfs-mount-caching asks for 600 s; 60 s is enough).
METADATA_MIN_S = 60.0
QR_SECONDS = 600  # quick-read's revalidation period asked for: md-cache's
DATA_OPENS_MIN = 2.0  # below this a trace shows nothing for a content cache to serve
QR_TIMEOUT_KEYS = ("performance.qr-cache-timeout", "performance.quick-read-cache-timeout")
QR_INVALIDATION = "performance.quick-read-cache-invalidation"
KEEP_CACHE = "fopen-keep-cache"
TRUE = frozenset({"on", "yes", "true", "enable", "1", ""})
TRADEOFF = ("quick-read serves a small file's old contents for up to 600 s after another client "
            "changes it when the bricks' upcall does not reach this client (fopen-keep-cache, "
            "where added, trusts that same invalidation to drop the kernel's pages): a deploy in "
            "place can be served stale; deploy to a new directory and reload php-fpm")
GAIN_NOTE = ("measure first: quick-read's cache saves client work (revalidations), not the "
             "opens that reach the bricks; `statstorm tune` keeps this change only where "
             "its measurement shows a gain")


def _flag(text: str | None, default: bool) -> bool:
    return default if text is None else text.strip().lower() in TRUE


def _metadata_tier_done(m: MountFact) -> bool:
    """The md-cache tier is in place: long FUSE timeouts, and (where the volume was read) a
    long md-cache with nl-cache on."""
    o = m.cache
    fuse = min(o.attribute_timeout, o.entry_timeout, o.negative_timeout) >= METADATA_MIN_S
    volume = not o.volume_read or (o.md_cache_seconds >= METADATA_MIN_S
                                   and o.nl_cache_state == "on")
    return fuse and volume


def _qr_seconds(vol: dict[str, str]) -> float:
    for key in QR_TIMEOUT_KEYS:
        if key in vol:
            try:
                return float(vol[key].split()[0])
            except (ValueError, IndexError):
                continue
    return 1.0  # GlusterFS's default


def content_gaps(m: MountFact) -> tuple[list[str], list[str]]:
    """What quick-read lacks on the mount's volume (evidence lines) and the change lines that
    give it; none when the volume's options were not read."""
    vol = m.volume_options
    v = m.volume or "VOLUME"
    bad: list[str] = []
    lines: list[str] = []
    if not vol:
        return bad, lines
    if not _flag(vol.get("performance.quick-read"), True):
        bad.append("performance.quick-read = off: small files are read from the bricks")
        lines.append(f"gluster volume set {v} performance.quick-read on")
    qr = _qr_seconds(vol)
    if qr < QR_SECONDS:
        bad.append(f"performance.qr-cache-timeout = {qr:g} s: quick-read revalidates each "
                   "cached file that often")
        lines.append(f"gluster volume set {v} performance.qr-cache-timeout {QR_SECONDS}")
    if not _flag(vol.get(QR_INVALIDATION), False):
        bad.append(f"{QR_INVALIDATION} = off: quick-read does not hear the bricks' upcalls")
        lines.append(f"gluster volume set {v} {QR_INVALIDATION} on")
    return bad, lines


def keep_cache_note(m: MountFact) -> list[str]:
    """The FUSE client's fopen-keep-cache, said and offered as a comment: measured, it gained
    nothing the noise did not hide (docs/check.md), so apply does not make it."""
    if m.cache_options.get(KEEP_CACHE, "false").lower() == GLUSTER_CONTENT_CLIENT[KEEP_CACHE]:
        return []
    return [f"# optional, measure it apart: the mount option {KEEP_CACHE} (a bare flag in "
            f"fstab) keeps the kernel's pages of a file across opens of {m.mount_point}"]


def glusterfs_content_caching(facts: Facts) -> list[Finding]:
    t = facts.trace
    if t is not None and t.data_opens_per_request < DATA_OPENS_MIN:
        return []
    out = []
    for m in code_mounts(facts, "glusterfs-fuse"):
        if not _metadata_tier_done(m):
            continue  # glusterfs-mount-caching first: the least invasive tier
        bad, change = content_gaps(m)
        if not bad:
            continue
        change += keep_cache_note(m)
        ev = [f"{m.mount_point} (GlusterFS FUSE, volume {m.volume or '?'}) has its metadata "
              "caches (attribute, entry and negative timeouts; md-cache) but not its content "
              "caches", *bad]
        if keep_cache_note(m):
            ev.append("the FUSE client runs without fopen-keep-cache: the kernel drops a file's "
                      "cached pages at every open")
        if t is not None:
            here = [(p, n) for p, n in t.data_open_examples
                    if p.startswith(m.mount_point.rstrip("/") + "/")]
            ev.append(f"{t.data_opens_per_request:g} non-PHP files opened per request on network "
                      "storage" + (": " + ", ".join(f"{p.rsplit('/', 1)[-1]} ({n:g}/req)"
                                                    for p, n in here[:4]) if here else ""))
            if t.round_trips_per_request is not None:
                ev.append(f"{t.round_trips_per_request:g} network round trips per request "
                          "measured while tracing (the volume's profile)")
        else:
            ev.append("no trace given: whether the app opens data files on this mount per "
                      "request is not known")
        out.append(finding(Severity.INFO, f"GlusterFS mount {m.mount_point}: quick-read keeps "
                           "small files briefly or not at all (measure first)", ev, change, TRADEOFF, None,
                           GAIN_NOTE))
    return out


RULES: tuple[tuple[str, Rule], ...] = (
    (RULE_ID, glusterfs_content_caching),
)

__all__ = ["MEASURE_FIRST", "RULES", "RULE_ID", "content_gaps", "glusterfs_content_caching"]
