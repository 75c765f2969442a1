"""Which mount a path lives on, and the options that decide its metadata caching.

Parsers take text (a `/proc/self/mounts` line, `/proc/self/mountstats`, a FUSE client's
command line) so they are tested on golden fixtures; `detect()` reads the live system.
The meanings say what each option does to PHP: how long a deploy can be seen stale.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from statstorm.adapters import procs
from statstorm.env import Env

NFS_TYPES = ("nfs", "nfs4")
LOCAL_TYPES = ("ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "zfs", "f2fs", "overlay")
# Linux NFS client defaults (nfs(5)).
NFS_DEFAULTS = {"acregmin": 3, "acregmax": 60, "acdirmin": 30, "acdirmax": 60}
# GlusterFS FUSE client defaults (glusterfs(8)).
GLUSTER_FUSE_DEFAULTS = {"attribute-timeout": "1", "entry-timeout": "1", "negative-timeout": "0"}
GLUSTER_FUSE_KEYS = ("attribute-timeout", "entry-timeout", "negative-timeout")
# sshfs defaults (sshfs(1), 2.x and 3.x).
SSHFS_CACHE_KEYS = ("cache", "cache_timeout", "cache_stat_timeout", "cache_dir_timeout",
                    "cache_link_timeout", "dir_cache", "dcache_timeout", "dcache_stat_timeout",
                    "dcache_dir_timeout", "dcache_link_timeout", "dcache_max_size",
                    "attr_timeout", "entry_timeout", "negative_timeout")


def unescape(field_: str) -> str:
    """Undo the octal escapes of /proc/self/mounts (`\\040` for a space …)."""
    out, i = [], 0
    while i < len(field_):
        if field_[i] == "\\" and i + 3 < len(field_) + 0 and field_[i + 1:i + 4].isdigit():
            out.append(chr(int(field_[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field_[i])
            i += 1
    return "".join(out)


@dataclass(frozen=True)
class MountEntry:
    source: str
    mount_point: str
    fstype: str
    options: str


def parse_mounts(text: str) -> list[MountEntry]:
    """Lines of /proc/self/mounts (or /etc/mtab) → entries, in order."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 4 and not line.startswith("#"):
            out.append(MountEntry(unescape(parts[0]), unescape(parts[1]), parts[2], parts[3]))
    return out


def current() -> list[MountEntry]:
    """This machine's mounts now (`/proc/self/mounts`); [] when it cannot be read."""
    try:
        return parse_mounts(Path("/proc/self/mounts").read_text())
    except OSError:
        return []


def verify_fstab(env: Env, fstab: Path, mount_points: list[str]) -> str:
    """`findmnt --verify` on the fstab lines of these mount points (the rest of the file is
    not statstorm's business): '' when it accepts them, else its first error."""
    lines = [ln for ln in fstab.read_bytes().decode("utf-8", "surrogateescape").split("\n")
             if len(ln.split()) >= 4 and not ln.lstrip().startswith("#")
             and ln.split()[1].replace("\\040", " ") in mount_points]
    with tempfile.NamedTemporaryFile("wb", prefix="statstorm-fstab-") as tmp:
        tmp.write(("\n".join(lines) + "\n").encode("utf-8", "surrogateescape"))
        tmp.flush()
        res = env.run(["findmnt", "--verify", "--tab-file", tmp.name], check=False,
                      what="findmnt --verify")
    if res.returncode == 0:
        return ""
    errors = [ln.strip() for ln in res.stdout.splitlines() if "[E]" in ln]
    return (f"findmnt --verify rejected {fstab}'s line for {', '.join(mount_points)} "
            f"({(errors or [res.first_error_line()])[0]})")


def split_options(options: str) -> dict[str, str]:
    """`rw,vers=3,noac` → {"rw": "", "vers": "3", "noac": ""}."""
    out: dict[str, str] = {}
    for part in options.split(","):
        if part:
            key, _, value = part.partition("=")
            out[key] = value
    return out


def find_mount(entries: list[MountEntry], path: str) -> MountEntry | None:
    """The entry whose mount point is the longest prefix of absolute `path` (last one wins)."""
    best: MountEntry | None = None
    for e in entries:
        mp = e.mount_point.rstrip("/") or "/"
        if path == mp or path.startswith(mp + "/") or mp == "/":
            if best is None or len(mp) >= len(best.mount_point.rstrip("/") or "/"):
                best = e
    return best


@dataclass(frozen=True)
class OptionMeaning:
    option: str
    value: str
    meaning: str


@dataclass(frozen=True)
class MountInfo:
    """What fsbench reports about the mount of one PATH."""

    path: str
    mount_point: str
    source: str
    fstype: str
    kind: str  # local | nfs | glusterfs-fuse | sshfs | fuse | other
    options: dict[str, str]
    cache_options: dict[str, str]  # the effective options that decide metadata caching
    volume_options: dict[str, str] = field(default_factory=dict)
    client_pid: int = 0
    notes: tuple[str, ...] = ()
    meanings: tuple[OptionMeaning, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def kind_of(fstype: str) -> str:
    if fstype in NFS_TYPES:
        return "nfs"
    if fstype in ("fuse.glusterfs", "glusterfs"):
        return "glusterfs-fuse"
    if fstype == "fuse.sshfs":
        return "sshfs"
    if fstype.startswith("fuse"):
        return "fuse"
    if fstype in LOCAL_TYPES:
        return "local"
    return "other"


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


@dataclass(frozen=True)
class NfsOpStats:
    ops: int
    transmissions: int
    rtt_ms_total: int
    execute_ms_total: int

    @property
    def avg_rtt_ms(self) -> float:
        return self.rtt_ms_total / self.ops if self.ops else 0.0


def parse_mountstats(text: str) -> dict[str, dict[str, Any]]:
    """/proc/self/mountstats → {mount point: {fstype, device, opts, age, events, ops}} for NFS."""
    result: dict[str, dict[str, Any]] = {}
    cur: dict[str, Any] | None = None
    in_ops = False
    for raw in text.splitlines():
        line = raw.strip()
        if raw.startswith("device "):
            parts = raw.split()
            # device SRC mounted on MP with fstype TYPE [statvers=X]
            try:
                mp = unescape(parts[4])
                fstype = parts[7]
            except IndexError:
                cur = None
                continue
            if fstype not in NFS_TYPES:
                cur = None
                continue
            cur = {"device": unescape(parts[1]), "fstype": fstype, "opts": {}, "age_s": 0,
                   "events": {}, "ops": {}}
            result[mp] = cur
            in_ops = False
            continue
        if cur is None or not line:
            continue
        if line.startswith("opts:"):
            cur["opts"] = split_options(line.split(None, 1)[1] if " " in line else "")
        elif line.startswith("age:"):
            cur["age_s"] = int(line.split()[1])
        elif line.startswith("events:"):
            names = ["inoderevalidate", "dentryrevalidate", "datainvalidate", "attrinvalidate",
                     "vfsopen", "vfslookup", "vfsaccess", "vfsupdatepage", "vfsreadpage",
                     "vfsreadpages", "vfswritepage", "vfswritepages", "vfsgetdents",
                     "vfssetattr", "vfsflush", "vfsfsync", "vfslock", "vfsrelease",
                     "congestionwait", "setattrtrunc", "extendwrite", "sillyrename",
                     "shortread", "shortwrite", "delay", "pnfsread", "pnfswrite"]
            vals = [int(x) for x in line.split()[1:]]
            cur["events"] = dict(zip(names, vals))
        elif line.startswith("per-op statistics"):
            in_ops = True
        elif in_ops and ":" in line:
            name, _, rest = line.partition(":")
            nums = [int(x) for x in rest.split()]
            if len(nums) >= 8:
                st = NfsOpStats(nums[0], nums[1], nums[6], nums[7])
                cur["ops"][name.strip()] = {"ops": st.ops, "transmissions": st.transmissions,
                                            "rtt_ms_total": st.rtt_ms_total,
                                            "execute_ms_total": st.execute_ms_total,
                                            "avg_rtt_ms": round(st.avg_rtt_ms, 3)}
    return result


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
    keys = ("md-cache", "nl-cache", "stat-prefetch", "cache-invalidation", "readdir-ahead",
            "parallel-readdir")
    return {k: v.replace("(DEFAULT)", "").strip() for k, v in sorted(vol_opts.items())
            if any(s in k for s in keys)}


def gluster_meanings(eff: dict[str, str], vol: dict[str, str]) -> list[OptionMeaning]:
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
    mdc = vol.get("performance.md-cache-timeout")
    if mdc is not None:
        out.append(OptionMeaning("performance.md-cache-timeout", f"{mdc} s",
                                 f"the client's md-cache serves metadata for {mdc} s after the "
                                 "kernel asks (stat-prefetch "
                                 f"{vol.get('performance.stat-prefetch', '?')}); with "
                                 "cache-invalidation off, changes made through another client "
                                 f"can stay invisible that long"))
    nl = vol.get("performance.nl-cache")
    if nl is not None:
        out.append(OptionMeaning("performance.nl-cache", nl,
                                 "negative lookups cached in the client for "
                                 f"{vol.get('performance.nl-cache-timeout', '?')} s" if nl == "on"
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


def sshfs_meanings(eff: dict[str, str]) -> list[OptionMeaning]:
    if eff.get("cache", "yes") == "no" or eff.get("dir_cache") == "no":
        return [OptionMeaning("cache", "no", "no attribute/dir cache: every PHP stat is an SFTP "
                              "round trip; deploys are seen at once")]
    t = eff.get("cache_stat_timeout") or eff.get("dcache_stat_timeout") or eff["cache_timeout"]
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


# ---------------------------------------------------------------- assembling


def describe(path: str, entry: MountEntry, *, client_argv: list[str] | None = None,
             client_pid: int = 0, volume_options: dict[str, str] | None = None,
             notes: tuple[str, ...] = ()) -> MountInfo:
    """Put a mount entry (plus a FUSE client's argv and volume options) into a MountInfo."""
    opts = split_options(entry.options)
    kind = kind_of(entry.fstype)
    cache: dict[str, str] = {}
    vol: dict[str, str] = {}
    meanings: list[OptionMeaning] = []
    extra = list(notes)
    if kind == "nfs":
        cache = nfs_cache_options(opts)
        meanings = nfs_meanings(cache)
    elif kind == "glusterfs-fuse":
        cache = dict(GLUSTER_FUSE_DEFAULTS)
        if client_argv is None:
            extra.append("GlusterFS FUSE client process not found: timeouts shown are the "
                         "client defaults")
        else:
            copts = gluster_client_options(client_argv)
            cache.update({k: copts[k] for k in GLUSTER_FUSE_KEYS if k in copts})
            cache["volume"] = gluster_volume_name(copts, entry.source)
        vol = gluster_cache_volume_options(volume_options or {})
        meanings = gluster_meanings(cache, vol)
    elif kind == "sshfs":
        if client_argv is None:
            extra.append("sshfs process not found: cache options shown are the defaults")
        cache = sshfs_cache_options(client_argv or [])
        meanings = sshfs_meanings(cache)
    elif kind == "local":
        meanings = local_meanings(entry.fstype, opts)
    else:
        meanings = [OptionMeaning(entry.fstype, "?", "metadata caching of this file system is "
                                  "not modelled; measure it")]
    return MountInfo(path=path, mount_point=entry.mount_point, source=entry.source,
                     fstype=entry.fstype, kind=kind, options=opts, cache_options=cache,
                     volume_options=vol, client_pid=client_pid, notes=tuple(extra),
                     meanings=tuple(meanings))


def fuse_clients(mount_point: str, program: str) -> list[tuple[int, list[str]]]:
    """PID and argv of each FUSE client process whose last argument is `mount_point`, the
    newest first (when clients are stacked on one mount point, the newest is on top)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        argv = procs.cmdline(int(entry.name))
        if argv and argv[-1].rstrip("/") == mount_point.rstrip("/") \
                and program in os.path.basename(argv[0]):
            found.append((int(entry.name), argv))
        elif argv and program == "sshfs" and "sshfs" in os.path.basename(argv[0]) \
                and mount_point in argv:
            found.append((int(entry.name), argv))
    return sorted(found, key=lambda f: procs.start_ticks(f[0]), reverse=True)


def fuse_client(mount_point: str, program: str) -> tuple[int, list[str]] | None:
    """The FUSE client serving `mount_point` now (the top one when several are stacked)."""
    found = fuse_clients(mount_point, program)
    return found[0] if found else None


def detect(path: str, *, volume_reader: Callable[[str], dict[str, str]] | None = None,
           mounts_text: str | None = None) -> MountInfo:
    """Detect the live mount of `path`; `volume_reader(volume)` reads GlusterFS volume options."""
    real = os.path.realpath(path)
    entries = current() if mounts_text is None else parse_mounts(mounts_text)
    entry = find_mount(entries, real)
    if entry is None:
        entry = MountEntry("?", "/", "unknown", "")
    kind = kind_of(entry.fstype)
    argv: list[str] | None = None
    pid = 0
    notes: list[str] = []
    vol_opts: dict[str, str] | None = None
    if kind in ("glusterfs-fuse", "sshfs"):
        found = fuse_client(entry.mount_point, "glusterfs" if kind == "glusterfs-fuse" else "sshfs")
        if found:
            pid, argv = found
    if kind == "glusterfs-fuse":
        volume = gluster_volume_name(gluster_client_options(argv or []), entry.source)
        if volume_reader is not None and volume and shutil.which("gluster"):
            try:
                vol_opts = volume_reader(volume)
            except Exception as exc:  # the volume may live on another server
                notes.append(f"volume {volume} options not readable here ({exc})")
        else:
            notes.append(f"volume {volume or '?'} options not read (gluster CLI not available)")
    return describe(real, entry, client_argv=argv, client_pid=pid, volume_options=vol_opts,
                    notes=tuple(notes))
