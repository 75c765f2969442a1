"""The OpenAFS cache manager's caches, as afsd sizes them, and what they mean to PHP. Pure.

An AFS client keeps a file's status (size, mtime, mode: what PHP's stat, realpath and
OPcache's timestamp checks read) in its stat cache (vcache), one entry per file or directory,
and trusts it without asking the file server for as long as it holds the file's *callback*:
the server's promise to say when the file changes. While the stat cache holds the whole tree a
pool touches, a warm request costs no RPC at all; a deploy is seen as soon as the server breaks
the callbacks (seconds, not a timeout). When the stat cache is smaller than that tree, the
cache manager recycles entries (and gives their callbacks back), and every request fetches
the status of the files it needs again: FetchStatus or InlineBulkStatus round trips, per
request, for ever.

afsd's options (`afsd`/`afsd.fuse` take the same; Debian passes them from OPTIONS in
/etc/openafs/afs.conf.client or afs.conf): `-stat` (stat cache entries), `-dcache` (dcache
entries, in memory: which chunks of which files the disk cache holds), `-volumes` (volume
location entries), `-blocks` (1K blocks of cache; else cacheinfo's third field), `-files`
(cache files, V-files), `-chunksize` (log2 of a chunk's bytes). Options not given are
autotuned from the cache size as afsd.c (OpenAFS 1.8) does it: `effective()` here.
"""

from __future__ import annotations

# the option names and what they mean to PHP live with the OpenAFS entry of the storage table
from statstorm.model.storage_kinds import AFS_AUTOTUNED as AUTOTUNED
from statstorm.model.storage_kinds import AFS_CACHE_KEYS, AFS_CLIENT as CLIENT
from statstorm.model.storage_kinds import AFS_MEMCACHE as MEMCACHE
VOLUMES_DEFAULT = 200  # afsd's vCacheSize
DCACHE_MIN, DCACHE_MAX = 2000, 10000  # afsd clamps its autotuned dcache to these
FILES_MIN = 1000
# The flags afsd takes with a value (afsd.c's options); the others are bare flags.
VALUE_FLAGS = frozenset({"-blocks", "-files", "-chunksize", "-dcache", "-volumes", "-stat",
                         "-biods", "-daemons", "-cachedir", "-mountdir", "-confdir",
                         "-files_per_subdir", "-logfile", "-prealloc", "-rootvol", "-rxmaxmtu",
                         "-rxpck", "-rxmaxfrags", "-splitcache", "-inumcalc", "-volume-ttl",
                         "-o"})


def afsd_flags(argv: list[str] | tuple[str, ...]) -> dict[str, str]:
    """afsd's command line → {flag without dash: value ('' for a bare flag)}."""
    out: dict[str, str] = {}
    args = list(argv[1:])
    i = 0
    while i < len(args):
        a = args[i]
        if a.startswith("-"):
            if a in VALUE_FLAGS and i + 1 < len(args):
                out[a.lstrip("-")] = args[i + 1]
                i += 2
                continue
            out[a.lstrip("-")] = ""
        i += 1
    return out


def _int(text: str | None) -> int | None:
    try:
        return int(str(text).strip()) if text not in (None, "") else None
    except ValueError:
        return None


def effective(flags: dict[str, str], cacheinfo_blocks: int | None) -> dict[str, str]:
    """The cache sizes afsd runs with: the flags given, the rest autotuned from the cache's
    blocks as afsd.c (1.8) does; `autotuned` lists the options it computed."""
    memcache = MEMCACHE in flags
    blocks = _int(flags.get("blocks")) or cacheinfo_blocks or 0
    chunk = _int(flags.get("chunksize"))
    files, dcache, stat = (_int(flags.get(k)) for k in ("files", "dcache", "stat"))
    volumes = _int(flags.get("volumes"))
    auto = [k for k, v in (("chunksize", chunk), ("files", files), ("dcache", dcache),
                           ("stat", stat), ("volumes", volumes)) if v is None]
    if memcache:
        if dcache is not None:
            chunk = chunk or 13
            blocks = (1 << chunk) * dcache // 1024
        else:
            if not chunk:
                i = 14
                while i <= 21 and (1 << i) // 1024 < blocks // 1024:
                    i += 1
                chunk = i - 1
            dcache = blocks >> (chunk - 10) if chunk > 10 else blocks << (10 - chunk)
        files = dcache
    else:
        if not chunk:
            chunk = 18 if blocks < 500_000 else 19 if blocks < 1_000_000 else 20
        if files is None:
            per_chunk_kb = 1 << max(chunk - 10, 0)
            files = max(blocks // 32, FILES_MIN, int(1.5 * (blocks // per_chunk_kb)))
        if dcache is None:
            dcache = min(max(files // 2, DCACHE_MIN), DCACHE_MAX)
    if stat is None:
        stat = dcache // 4 if chunk <= 13 else int(dcache * 1.5) if chunk >= 16 else dcache
    out = {"stat": stat, "dcache": dcache, "volumes": volumes or VOLUMES_DEFAULT,
           "blocks": blocks, "files": files, "chunksize": chunk}
    res = {k: str(v) for k, v in out.items()}
    if memcache:
        res[MEMCACHE] = ""
    if auto:
        res[AUTOTUNED] = ",".join(auto)
    return res


def stat_entries(cache: dict[str, str]) -> int | None:
    """The stat cache's entries the client runs with (None: not known)."""
    return _int(cache.get("stat"))


def stat_cache_for(entries: int) -> int:
    """The -stat asked for a tree of `entries` files and directories: twice the tree, rounded
    up to a power of two (room for the requests' other files and for a deploy's new tree
    beside the old one), at least afsd's own default for a small cache."""
    want = max(2 * entries, 3000)
    n = 1
    while n < want:
        n <<= 1
    return n


__all__ = ["AFS_CACHE_KEYS", "AUTOTUNED", "CLIENT", "MEMCACHE", "afsd_flags", "effective",
           "stat_cache_for", "stat_entries"]
