"""How many of a trace's file calls reach network storage under a mount's metadata caches:
a small model of the kernel's FUSE and NFS attribute, entry and negative caches, for the
round-trip forecast of `statstorm demo` and the mount layer of `statstorm whatif`. Pure code.
Which mounts are network storage, and which of these models applies to each, is the table in
`model/storage_kinds.py`.

A path-based call (stat, lstat, access, readlink, open) on a network mount is answered by
the kernel when the same path was looked up within the timeout that applies to it;
otherwise it goes to the storage (one or more round trips).

- **FUSE** (GlusterFS): a path that exists is cached for min(attribute-timeout,
  entry-timeout), one that does not for negative-timeout. An open always reaches the FUSE
  client (it has to hand out a file handle), and a data file's open also reads its data.
- **NFS**: an unchanged file's attributes are cached for a time that starts at acregmin and
  doubles at each revalidation up to acregmax (acdirmin/acdirmax for a directory: a path
  that is the parent of another path seen); `actimeo` sets all four, `noac` makes them 0.
  `lookupcache=all` also caches a missing name for as long as its directory's attributes,
  `pos` caches found names only, `none` sends every lookup to the server. With close-to-open
  (`cto`, the default) every open revalidates the file with the server; `nocto` lets a cached
  file open without a round trip.

A path whose walk passes through a symlink on a FUSE mount costs one READLINK round trip per
symlink, whatever the timeouts: the kernel reads a FUSE symlink's target from the client on
every walk through it (fs/fuse/dir.c `fuse_get_link`) unless the client asked for
FUSE_CACHE_SYMLINKS at FUSE_INIT, which the GlusterFS client does not. Which paths are
symlinks is an input (model/fuse_symlinks.py: the trace's own readlink calls, or what the
adapter found on the live tree); a call carries how many it walks through.

The trace is run through the caches several times and only the last pass counted: the steady
state of a server that serves the same pages again and again.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Iterable

from statstorm.errors import UsageError
from statstorm.model.fuse_symlinks import Symlinks, symlinks_of_calls, walks, walks_per_call
from statstorm.model.mount_options import GLUSTER_FUSE_KEYS, NFS_CACHE_KEYS
from statstorm.model.storage_kinds import CacheModel, cache_model_of
from statstorm.results.trace.raw import S_CALL, S_MOUNT, S_PATH, S_REQ, S_RET, S_TS
from statstorm.results.trace.vocabulary import CALLS

PATH_CALLS = frozenset(("stat", "lstat", "access", "readlink", "open"))
PATH_INDEXES = frozenset(CALLS.index(c) for c in PATH_CALLS)
OPEN = CALLS.index("open")
FUSE, NFS = CacheModel.FUSE, CacheModel.NFS
FUSE_KEYS = GLUSTER_FUSE_KEYS
NFS_KEYS = NFS_CACHE_KEYS
LOOKUPCACHE = {"all": "all", "pos": "pos", "positive": "pos", "none": "none"}
WARM_PASSES = 8  # NFS: enough doublings from acregmin to reach acregmax


@dataclass(frozen=True)
class MountCaches:
    attribute_s: float = 1.0  # GlusterFS FUSE defaults; NFS: acregmin
    entry_s: float = 1.0
    negative_s: float = 0.0
    kind: CacheModel = FUSE
    attribute_max_s: float = 0.0  # NFS: acregmax
    dir_min_s: float = 0.0  # NFS: acdirmin
    dir_max_s: float = 0.0  # NFS: acdirmax
    lookupcache: str = "all"  # NFS
    cto: bool = True  # NFS: an open revalidates with the server

    def describe(self) -> dict[str, float | str | bool]:
        if self.kind == FUSE:
            return {"kind": FUSE, "attribute-timeout": self.attribute_s,
                    "entry-timeout": self.entry_s, "negative-timeout": self.negative_s}
        return {"kind": NFS, "acregmin": self.attribute_s, "acregmax": self.attribute_max_s,
                "acdirmin": self.dir_min_s, "acdirmax": self.dir_max_s,
                "lookupcache": self.lookupcache, "cto": self.cto}


NFS_DEFAULT = MountCaches(3.0, 3.0, 0.0, NFS, 60.0, 30.0, 60.0, "all", True)


def _secs(key: str, value: str) -> float:
    try:
        v = float(value)
    except ValueError:
        v = -1.0
    if not 0 <= v <= 1e7:
        raise UsageError(f"mount:{key}={value}: give a number of seconds (0 or more)")
    return v


def kind_of(fstype: str) -> CacheModel | None:
    """The cache model of a file system type: FUSE or NFS for network storage (a network kind
    without a model of its own is forecast as FUSE), None for the rest."""
    return cache_model_of(fstype)


def caches_of(fstype: str, options: dict[str, str] | None) -> MountCaches:
    """A mount's caches from the options recorded with the trace (`mount_options` in its
    header: the effective cache options of `adapters.mounts`); the client's defaults for an
    option (or a whole mount) not recorded."""
    kind = kind_of(fstype) or FUSE
    opts = {k: str(v) for k, v in (options or {}).items()}
    if kind == FUSE:
        changes = [(k, opts[k]) for k in FUSE_KEYS if k in opts]
    else:
        changes = [(k, opts[k]) for k in ("acregmin", "acregmax", "acdirmin", "acdirmax",
                                          "lookupcache") if k in opts]
        if opts.get("cto") == "no":
            changes.append(("nocto", "1"))
    try:
        return with_changes(NFS_DEFAULT if kind == NFS else MountCaches(), changes)
    except UsageError:  # an option this model cannot read: the client's defaults
        return NFS_DEFAULT if kind == NFS else MountCaches()


def _flag(key: str, value: str) -> bool:
    v = value.strip().lower()
    if v in ("", "1", "on", "yes", "true"):
        return True
    if v in ("0", "off", "no", "false"):
        return False
    raise UsageError(f"mount:{key}={value}: give on or off")


def with_changes(c: MountCaches, changes: list[tuple[str, str]]) -> MountCaches:
    """`c` with `mount:` changes applied ((key, value) without the prefix), in order."""
    for key, value in changes:
        if key in FUSE_KEYS and c.kind == FUSE:
            s = _secs(key, value)
            c = (replace(c, attribute_s=s) if key == "attribute-timeout" else
                 replace(c, entry_s=s) if key == "entry-timeout" else replace(c, negative_s=s))
        elif key in NFS_KEYS and c.kind == NFS:
            if key == "actimeo":
                s = _secs(key, value)
                c = replace(c, attribute_s=s, entry_s=s, attribute_max_s=s, dir_min_s=s,
                            dir_max_s=s)
            elif key == "noac":
                if _flag(key, value):
                    c = replace(c, attribute_s=0.0, entry_s=0.0, attribute_max_s=0.0,
                                dir_min_s=0.0, dir_max_s=0.0)
            elif key in ("nocto", "cto"):
                c = replace(c, cto=_flag(key, value) == (key == "cto"))
            elif key == "lookupcache":
                lc = LOOKUPCACHE.get(value.strip().lower())
                if lc is None:
                    raise UsageError(f"mount:lookupcache={value}: give none, pos or all")
                c = replace(c, lookupcache=lc)
            else:
                s = _secs(key, value)
                if key == "acregmin":
                    c = replace(c, attribute_s=s, entry_s=s,
                                attribute_max_s=max(c.attribute_max_s, s))
                elif key == "acregmax":
                    c = replace(c, attribute_max_s=s)
                elif key == "acdirmin":
                    c = replace(c, dir_min_s=s, dir_max_s=max(c.dir_max_s, s))
                else:
                    c = replace(c, dir_max_s=s)
        else:
            raise UsageError(_wrong_kind(key, c.kind))
    return c


def _wrong_kind(key: str, kind: CacheModel) -> str:
    if key not in FUSE_KEYS + NFS_KEYS:
        return (f"unknown mount:{key}: FUSE/GlusterFS takes {', '.join(FUSE_KEYS)}; NFS takes "
                "actimeo, acregmin, acregmax, acdirmin, acdirmax, lookupcache, nocto, noac")
    other = "NFS" if key in NFS_KEYS else "FUSE/GlusterFS"
    return (f"mount:{key} is an {other} option and the trace's network mount is "
            f"{'NFS' if kind == NFS else 'FUSE/GlusterFS'}: use "
            f"{', '.join(FUSE_KEYS if kind == FUSE else NFS_KEYS[:-2])}")


def parse_mount_sets(sets: Iterable[str]) -> tuple[list[str], list[tuple[str, str]]]:
    """`--set` values split into the PHP ones (returned as given) and the `mount:` ones, as
    (key, value) without the prefix; a key's form is checked here, its kind against the
    trace's mounts when applied."""
    php: list[str] = []
    mount: list[tuple[str, str]] = []
    for s in sets:
        if not s.startswith("mount:"):
            php.append(s)
            continue
        key, sep, value = s[len("mount:"):].partition("=")
        key = key.strip().lower()
        if key not in FUSE_KEYS + NFS_KEYS:
            raise UsageError(_wrong_kind(key, FUSE))
        if not sep and key not in ("nocto", "cto", "noac"):
            raise UsageError(f"--set {s}: give mount:{key}=VALUE")
        mount.append((key, value.strip()))
    return php, mount


# -- the calls ----------------------------------------------------------------------------------
# A network call as the forecast reads it: (ts_ns, mount, call index, path, found, data open,
# symlinks its walk reads on a FUSE mount); a 6-tuple (an older input) walks through none
NetCall = tuple[int, int, int, str, bool, bool, int]


def calls_of_records(syscalls: Iterable[list[Any]], paths: dict[int, str],
                     network: set[int], symlinks: Symlinks | None = None) -> list[NetCall]:
    """The path calls of requests on `network` mounts, from raw trace records, time order;
    `symlinks`: the FUSE mounts' symlinks, for each call's walks through them."""
    out: list[NetCall] = []
    links = symlinks or {}
    none: frozenset[str] = frozenset()
    for s in syscalls:
        if s[S_MOUNT] in network and s[S_REQ] >= 0 and s[S_CALL] in PATH_CALLS:
            p = s[S_PATH]
            path = paths.get(p, "") if isinstance(p, int) else str(p)
            ok = s[S_RET] >= 0
            ci = CALLS.index(s[S_CALL])
            out.append((s[S_TS], s[S_MOUNT], ci, path, ok,
                        ci == OPEN and ok and not path.endswith(".php"),
                        walks(path, ci, links.get(s[S_MOUNT], none))))
    out.sort(key=lambda c: c[0])
    return out


def calls_of_syscalls(syscalls: Iterable[Any], network: set[int],
                      fuse: set[int] | None = None) -> list[NetCall]:
    """The path calls of requests on `network` mounts from Syscall records, with their walks
    through the symlinks the trace's readlink calls show on the `fuse` mounts."""
    rows = [(s.ts_ns, s.mount, CALLS.index(s.call), s.path, s.ret >= 0) for s in syscalls
            if s.mount in network and s.call in PATH_CALLS and s.req >= 0]
    links = symlinks_of_calls(((m, ci, p, ok) for _, m, ci, p, ok in rows), fuse or set())
    none: frozenset[str] = frozenset()
    return [(ts, m, ci, p, ok, ci == OPEN and ok and not p.endswith(".php"),
             walks(p, ci, links.get(m, none))) for ts, m, ci, p, ok in rows]


# -- the forecast -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Forecast:
    requests: int
    calls_per_request: float  # metadata calls on network mounts
    reaching_per_request: float  # of them, the ones the caches do not answer, + READLINKs
    data_opens_per_request: float  # opens of non-PHP files on network mounts (all reach it)
    readlinks_per_request: float = 0.0  # FUSE: symlinks read by walks (reach it whatever)


@dataclass
class Tally:
    """Calls and the ones reaching the storage, per (mount, call index, failed)."""

    calls: dict[tuple[int, int, bool], int]
    reaching: dict[tuple[int, int, bool], int]
    data_opens: int = 0
    # FUSE: the symlinks the calls' walks read (a READLINK each, whatever the timeouts)
    readlinks: dict[tuple[int, int, bool], int] = field(default_factory=dict)

    def fraction(self, key: tuple[int, int, bool]) -> float | None:
        n = self.calls.get(key, 0)
        return self.reaching.get(key, 0) / n if n else None

    def mount_fraction(self, mount: int) -> float | None:
        n = sum(v for k, v in self.calls.items() if k[0] == mount)
        r = sum(v for k, v in self.reaching.items() if k[0] == mount)
        return r / n if n else None


def simulate(calls: list[NetCall], requests: int, caches: dict[int, MountCaches], *,
             app_cache: bool = False, roots: dict[int, str] | None = None) -> Tally:
    """Run the calls (time order) through each mount's caches; count the last pass.
    `app_cache`: the app keeps its data files in an object cache, so it opens them no more.
    `roots`: each mount's mount point; on a FUSE mount, a path's directories below it need
    their own entries (each expires after entry-timeout, and its LOOKUP reaches the
    client); without `roots` only the path itself is followed. A call's walks through
    symlinks on a FUSE mount (its 7th field) are counted in `readlinks`, whatever the
    caches."""
    tally = Tally({}, {})
    if not calls or requests <= 0:
        return tally
    # each pass starts one request's gap after the previous one ends
    width = calls[-1][0] - calls[0][0]
    span = width + max(width // max(requests - 1, 1), 1)
    dirs = {nc[3][:i] for nc in calls for i in range(1, len(nc[3])) if nc[3][i] == "/"}
    nfs = any(c.kind == NFS for c in caches.values())
    passes = WARM_PASSES + 1 if nfs else 2
    default = MountCaches()
    seen: dict[str, tuple[int, float, bool]] = {}  # path → (validated at, ttl s, found)
    walked: dict[str, int] = {}  # FUSE: a directory's entry → looked up at
    parents: dict[str, tuple[str, ...]] = {}
    for nc in calls:
        m, p = nc[1], nc[3]
        if p not in parents:
            root = (roots or {}).get(m)
            parents[p] = () if root is None else tuple(
                p[:i] for i in range(len(root.rstrip("/")) + 1, len(p)) if p[i] == "/")
    for rnd in range(passes):
        last = rnd == passes - 1
        for call in calls:
            ts, m, ci, path, ok, data_open = call[:6]
            if app_cache and data_open:
                continue
            c = caches.get(m, default)
            now = ts + rnd * span
            st = seen.get(path)
            if c.kind == FUSE:
                hit = st is not None and now - st[0] < st[1] * 1e9
                limit = now - c.entry_s * 1e9
                for d in parents[path]:
                    if walked.get(d, -1 << 62) <= limit:
                        walked[d] = now
                        hit = False
                reach = ci == OPEN or not hit
                if not (st is not None and now - st[0] < st[1] * 1e9):
                    ttl = min(c.attribute_s, c.entry_s) if ok else c.negative_s
                    seen[path] = (now, ttl, ok)
            else:
                reach = _nfs_call(c, seen, st, now, path, ok, ci, path in dirs)
            if last:
                key = (m, ci, not ok)
                tally.calls[key] = tally.calls.get(key, 0) + 1
                if reach:
                    tally.reaching[key] = tally.reaching.get(key, 0) + 1
                if data_open:
                    tally.data_opens += 1
                if len(call) > 6 and call[6] and c.kind == FUSE:
                    tally.readlinks[key] = tally.readlinks.get(key, 0) + call[6]
    return tally


def _nfs_call(c: MountCaches, seen: dict[str, tuple[int, float, bool]],
              st: tuple[int, float, bool] | None, now: int, path: str, ok: bool, ci: int,
              is_dir: bool) -> bool:
    """One call on an NFS mount: does it reach the server? (updates `seen`)"""
    lo, hi = (c.dir_min_s, c.dir_max_s) if is_dir else (c.attribute_s, c.attribute_max_s)
    if not ok:
        if c.lookupcache != "all":
            return True
        lo, hi = c.dir_min_s, c.dir_max_s  # a negative entry lives as its directory's attrs
    elif c.lookupcache == "none":
        seen[path] = (now, lo, ok)
        return True
    valid = st is not None and st[2] == ok and now - st[0] < st[1] * 1e9
    if valid:
        return ci == OPEN and c.cto and ok
    # revalidated unchanged: the timeout doubles (up to the maximum); else it starts over
    ttl = min(max(st[1] * 2, lo), max(hi, lo)) if st is not None and st[2] == ok else lo
    seen[path] = (now, ttl, ok)
    return True


def forecast(syscalls: Iterable[Any], network_mounts: set[int], requests: int,
             caches: MountCaches, *, app_cache: bool = False) -> Forecast:
    """`syscalls`: the trace's Syscall records (time order); the same caches on every
    network mount (the demo's forecast). The symlinks are the ones the trace's readlink
    calls show: `forecast_calls` on the what-if input's calls also knows those found on
    the live tree."""
    return forecast_calls(calls_of_syscalls(syscalls, network_mounts,
                                            network_mounts if caches.kind == FUSE else set()),
                          network_mounts, requests, caches, app_cache=app_cache)


def forecast_calls(calls: list[NetCall], network_mounts: set[int], requests: int,
                   caches: MountCaches, *, app_cache: bool = False) -> Forecast:
    """The demo's forecast of network calls (the what-if input's `calls`, their walks
    through symlinks included), the same caches on every network mount."""
    if not calls or requests <= 0:
        return Forecast(max(requests, 0), 0.0, 0.0, 0.0)
    t = simulate(calls, requests, {m: caches for m in network_mounts}, app_cache=app_cache)
    total = sum(t.calls.values())
    links = sum(t.readlinks.values())
    reaching = sum(t.reaching.values()) + links
    return Forecast(requests, round(total / requests, 2), round(reaching / requests, 2),
                    round(t.data_opens / requests, 2), round(links / requests, 2))


def scaled_round_trips(before: float, now: Forecast, then: Forecast) -> float:
    """The demo's round trips per request after the changes, from the `before` measured: the
    READLINKs of walks through symlinks on a FUSE mount are one round trip each on both
    sides, and the rest of `before` scales with the other reaching calls."""
    rest_now = now.reaching_per_request - now.readlinks_per_request
    rest_then = then.reaching_per_request - then.readlinks_per_request
    rest = max(before - now.readlinks_per_request, 0.0)
    scaled = rest * rest_then / rest_now if rest_now > 0 else rest
    return round(then.readlinks_per_request + scaled, 2)


__all__ = ["MountCaches", "Forecast", "scaled_round_trips", "Tally", "forecast", "simulate", "caches_of",
           "with_changes", "parse_mount_sets", "calls_of_records", "walks", "forecast_calls",
           "symlinks_of_calls", "walks_per_call"]
