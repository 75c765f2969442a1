"""What a mount's options mean for PHP: the effective metadata caching of NFS, GlusterFS's
FUSE client, sshfs and local file systems, from their option strings, and how long each lets
a deploy be seen stale. Pure: the options come in as text (adapters/storage/mounts.py reads them).
Which kind of storage a mount is, and which of these readings applies to it, is the table in
model/storage_kinds.py."""

from __future__ import annotations

from dataclasses import dataclass

from statstorm.results.mount_cache import CacheOptions

# Linux NFS client defaults (nfs(5)).
NFS_DEFAULTS = {"acregmin": 3, "acregmax": 60, "acdirmin": 30, "acdirmax": 60}
# The NFS options that decide metadata caching (nfs(5)).
NFS_CACHE_KEYS = ("actimeo", "acregmin", "acregmax", "acdirmin", "acdirmax", "lookupcache",
                  "nocto", "cto", "noac")
# GlusterFS FUSE client defaults (glusterfs(8)).
GLUSTER_FUSE_DEFAULTS = {"attribute-timeout": "1", "entry-timeout": "1", "negative-timeout": "0"}
GLUSTER_FUSE_KEYS = ("attribute-timeout", "entry-timeout", "negative-timeout")
# GlusterFS FUSE client options that keep file contents, not metadata: fopen-keep-cache keeps
# the kernel's page cache of a file across opens. In fstab it is a bare flag: mount.glusterfs
# passes `fopen-keep-cache` as `--fopen-keep-cache=true` (and `fopen-keep-cache=on` as
# `--fopen-keep-cache==on`, which the client refuses); the client's default is false.
GLUSTER_CONTENT_KEYS = ("fopen-keep-cache",)
GLUSTER_CONTENT_CLIENT = {"fopen-keep-cache": "true"}  # the client's value of the bare flag
# The GlusterFS volume options that decide metadata caching: those whose names hold one of these
# (quick-read's, whose cache of small files is revalidated like md-cache's, among them).
GLUSTER_VOLUME_CACHE_KEYS = ("md-cache", "nl-cache", "stat-prefetch", "cache-invalidation",
                             "readdir-ahead", "parallel-readdir", "quick-read", "qr-cache")
# sshfs defaults (sshfs(1), 2.x and 3.x).
SSHFS_CACHE_KEYS = ("cache", "cache_timeout", "cache_stat_timeout", "cache_dir_timeout",
                    "cache_link_timeout", "dir_cache", "dcache_timeout", "dcache_stat_timeout",
                    "dcache_dir_timeout", "dcache_link_timeout", "dcache_max_size",
                    "attr_timeout", "entry_timeout", "negative_timeout")


@dataclass(frozen=True)
class OptionMeaning:
    option: str
    value: str
    meaning: str


@dataclass(frozen=True)
class CacheView:
    """What a mount's meanings are read from."""

    fstype: str
    options: dict[str, str]  # its option string, split
    cache: dict[str, str]  # the effective options that decide its metadata caching
    volume: dict[str, str]  # GlusterFS: the volume's cache options

    @property
    def typed(self) -> CacheOptions:
        """The cache and volume options, read as numbers and flags."""
        return CacheOptions.of(self.cache, self.volume)


def split_options(options: str) -> dict[str, str]:
    """`rw,vers=3,noac` → {"rw": "", "vers": "3", "noac": ""}."""
    out: dict[str, str] = {}
    for part in options.split(","):
        if part:
            key, _, value = part.partition("=")
            out[key] = value
    return out


# ---------------------------------------------------------------- NFS


def nfs_cache_options(opts: dict[str, str]) -> dict[str, str]:
    """Effective attribute/lookup caching of an NFS mount from its option string."""
    eff = {k: str(v) for k, v in NFS_DEFAULTS.items()}
    noac = "noac" in opts
    if "actimeo" in opts:
        for k in NFS_DEFAULTS:
            eff[k] = opts["actimeo"]
    for k in NFS_DEFAULTS:
        if k in opts:
            eff[k] = opts[k]
    if noac:
        for k in NFS_DEFAULTS:
            eff[k] = "0"
    eff["noac"] = "yes" if noac else "no"
    eff["cto"] = "no" if "nocto" in opts else "yes"
    eff["lookupcache"] = opts.get("lookupcache", "all")
    if "vers" in opts or "nfsvers" in opts:
        eff["vers"] = opts.get("vers") or opts.get("nfsvers", "")
    return eff


def nfs_meanings(eff: dict[str, str]) -> list[OptionMeaning]:
    out = []
    if eff["noac"] == "yes":
        out.append(OptionMeaning("noac", "yes", "no attribute cache: every PHP stat, include and "
                                 "OPcache revalidation is a round trip to the server; a deploy is "
                                 "seen at once, at the highest metadata cost"))
    out.append(OptionMeaning(
        "acregmin/acregmax", f"{eff['acregmin']}/{eff['acregmax']} s",
        f"a file changed by a deploy can keep its old size/mtime for up to {eff['acregmax']} s, "
        "so OPcache revalidation and filemtime() may serve the old code that long"))
    out.append(OptionMeaning(
        "acdirmin/acdirmax", f"{eff['acdirmin']}/{eff['acdirmax']} s",
        f"directory attributes (new or removed files, a switched `current` symlink's directory) "
        f"can be up to {eff['acdirmax']} s stale"))
    lc = eff["lookupcache"]
    if lc == "all":
        m = ("positive and negative lookups are cached: a file added by a deploy can be reported "
             f"missing (include/autoload failure) until the directory's attributes expire "
             f"(up to {eff['acdirmax']} s)")
    elif lc in ("pos", "positive"):
        m = ("only existing names are cached: every include_path and autoloader miss goes to the "
             "server, but new files are found at once")
    else:
        m = "no lookup cache: every path component PHP resolves is a LOOKUP on the server"
    out.append(OptionMeaning("lookupcache", lc, m))
    if eff["cto"] == "no":
        out.append(OptionMeaning("nocto", "yes", "no close-to-open revalidation on open(): an "
                                 "OPcache miss can compile stale file contents until the attribute "
                                 "cache expires"))
    else:
        out.append(OptionMeaning("cto", "yes", "each open() revalidates attributes with the "
                                 "server (GETATTR): an OPcache miss costs at least one round trip"))
    return out


# ---------------------------------------------------------------- GlusterFS FUSE


def gluster_client_options(argv: list[str]) -> dict[str, str]:
    """`--attribute-timeout=600 --volfile-id=/vol …` of a glusterfs FUSE client → options."""
    out: dict[str, str] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--"):
            key, sep, value = arg[2:].partition("=")
            if not sep and i + 1 < len(argv) and not argv[i + 1].startswith("-") \
                    and key in ("volfile-server", "volfile-id", "process-name", "log-file",
                                "log-level"):
                value = argv[i + 1]
                i += 1
            out[key] = value
        i += 1
    return out


def gluster_volume_name(client_opts: dict[str, str], source: str) -> str:
    vid = client_opts.get("volfile-id", "")
    if vid:
        return vid.lstrip("/")
    return source.split(":", 1)[1].lstrip("/") if ":" in source else ""


def gluster_cache_volume_options(vol_opts: dict[str, str]) -> dict[str, str]:
    """The volume options that decide metadata caching (md-cache, nl-cache, invalidation)."""
    return {k: v.replace("(DEFAULT)", "").strip() for k, v in sorted(vol_opts.items())
            if any(s in k for s in GLUSTER_VOLUME_CACHE_KEYS)}


def _given(text: str | None) -> str:
    return "?" if text is None else text


def gluster_meanings(eff: dict[str, str], opts: CacheOptions) -> list[OptionMeaning]:
    a, e, n = (eff[k] for k in GLUSTER_FUSE_KEYS)
    out = [
        OptionMeaning("attribute-timeout", f"{a} s",
                      f"the kernel answers stat/lstat of a known file from its cache for {a} s; "
                      f"a deploy's new mtime/size can be seen up to {a} s late, so OPcache may "
                      f"serve the old code that long" if a not in ("0", "0.0") else
                      "every stat/lstat goes to the FUSE client: deploys are seen at once, each "
                      "PHP stat costs a user-space round trip"),
        OptionMeaning("entry-timeout", f"{e} s",
                      f"a resolved name stays valid in the kernel for {e} s: a renamed/replaced "
                      f"file or switched `current` symlink can resolve to the old inode for up "
                      f"to {e} s"),
        OptionMeaning("negative-timeout", f"{n} s",
                      "failed lookups are not cached: every include_path and autoloader miss "
                      "is a round trip" if n in ("0", "0.0") else
                      f"a missing name stays missing for {n} s: a file added by a deploy can "
                      f"fail include/autoload for up to {n} s"),
    ]
    mdc = opts.md_cache_timeout
    if mdc is not None:
        out.append(OptionMeaning("performance.md-cache-timeout", f"{mdc} s",
                                 f"the client's md-cache serves metadata for {mdc} s after the "
                                 "kernel asks (stat-prefetch "
                                 f"{_given(opts.stat_prefetch)}); with "
                                 "cache-invalidation off, changes made through another client "
                                 f"can stay invisible that long"))
    nl = opts.nl_cache
    if nl is not None:
        out.append(OptionMeaning("performance.nl-cache", nl,
                                 "negative lookups cached in the client for "
                                 f"{_given(opts.nl_cache_timeout)} s" if nl == "on"
                                 else "negative lookups are not cached in the client: each "
                                 "miss the kernel forwards reaches the brick"))
    return out


# ---------------------------------------------------------------- sshfs


def sshfs_cache_options(argv: list[str]) -> dict[str, str]:
    """Cache options from an sshfs command line (`-o k=v,...` and `-ok=v`)."""
    opts: dict[str, str] = {}
    for i, arg in enumerate(argv):
        chunk = None
        if arg == "-o" and i + 1 < len(argv):
            chunk = argv[i + 1]
        elif arg.startswith("-o") and len(arg) > 2:
            chunk = arg[2:]
        if chunk:
            opts.update(split_options(chunk))
    eff = {"cache": "yes", "cache_timeout": "20"}
    for k in SSHFS_CACHE_KEYS:
        if k in opts:
            eff[k] = opts[k] or "yes"
    return eff


def sshfs_meanings(opts: CacheOptions) -> list[OptionMeaning]:
    if not opts.sshfs_cache:
        return [OptionMeaning("cache", "no", "no attribute/dir cache: every PHP stat is an SFTP "
                              "round trip; deploys are seen at once")]
    t = opts.sshfs_stat_timeout
    return [OptionMeaning("cache_timeout", f"{t} s", f"sshfs serves stat/lookup from its cache for "
                          f"{t} s: a deploy can be seen up to {t} s late, also for missing files")]


# ---------------------------------------------------------------- local


def local_meanings(fstype: str, opts: dict[str, str]) -> list[OptionMeaning]:
    out = [OptionMeaning(fstype, "local", "kernel dentry/inode caches are coherent: a deploy is "
                         "seen at once; warm stat costs a few µs")]
    for atime in ("noatime", "relatime", "strictatime"):
        if atime in opts:
            out.append(OptionMeaning(atime, "yes", "atime updates on read: " + (
                "none" if atime == "noatime" else "at most once a day per file" if
                atime == "relatime" else "every read writes an inode (costly for PHP reads)")))
    return out
