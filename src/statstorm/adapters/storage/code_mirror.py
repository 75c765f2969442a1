"""A local mirror of a pool's code on this machine (model/mirror.py has the layout): made,
re-synced and removed, and read back as check's facts.

A sync copies the network tree into a new generation directory beside the one served, then
switches the `current` symlink to it with one rename (atomic: a request sees the old tree or
the new one, never a half-copied tree), then writes the marker. In place (rsync-like) would
need half the disk but lets a request read a mix of old and new files while it runs.

A worker that resolved `current` before the switch keeps its realpath cache entry (and
OPcache its entry for the path) for up to realpath_cache_ttl, so it keeps serving the
generation served before: `statstorm mirror sync` reloads the pool, then removes that
generation once no process holds a file or directory in it (`holders`); without the reload
it is kept until the next sync."""

from __future__ import annotations

import heapq
import json
import os
import shutil
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

from statstorm.adapters.storage import tree_copy
from statstorm.errors import ComponentError, PrivilegeError, UsageError
from statstorm.model.mirror import CURRENT, MARKER, MIRROR_ROOT, MirrorFacts, inside
from statstorm.results.common import write_atomic
from statstorm.results.mirror import MirrorMarker, MirrorSync

MARGIN = 64 << 20  # free space left after a copy
NEWEST = 50  # PHP files of the network tree whose mtimes check compares


def root_dir() -> Path:
    """Where mirrors live: `$STATSTORM_MIRROR_ROOT`, else /var/local/statstorm/mirror."""
    return Path(os.environ.get("STATSTORM_MIRROR_ROOT") or MIRROR_ROOT)


def tree_size(src: Path) -> tuple[int, int]:
    """Entries (files, directories, links) and bytes of the files under `src`, links not
    followed."""
    entries = size = 0
    for d, dirs, files in os.walk(src):
        entries += len(dirs) + len(files)
        for f in files:
            try:
                st = os.lstat(os.path.join(d, f))
            except OSError:
                continue
            size += st.st_size if not os.path.islink(os.path.join(d, f)) else 0
    return entries, size


def _existing(path: Path) -> Path:
    while not path.exists():
        path = path.parent
    return path


def check_space(src: Path, dest: Path, size: int) -> None:
    """UsageError, in one line, when the disk under `dest` cannot hold `size` more bytes."""
    free = shutil.disk_usage(_existing(dest)).free
    if size + MARGIN > free:
        raise UsageError(f"{_existing(dest)} has {free / 1048576:.0f} MiB free, the copy of "
                         f"{src} needs {size / 1048576:.0f} MiB (and {MARGIN >> 20} MiB to "
                         "spare): free space, or set STATSTORM_MIRROR_ROOT to a larger disk")


def read_marker(mirror: Path) -> MirrorMarker | None:
    try:
        return MirrorMarker.from_json(json.loads((mirror / MARKER).read_text()))
    except (OSError, ValueError):
        return None


def _guard(mirror: Path, under: Path | None) -> Path:
    """Only a directory of statstorm's, under the mirror root (or `under`, a lab's own), is
    ever written or removed; the root it is under."""
    root = under or root_dir()
    if not inside(str(mirror), str(root)) or len(mirror.relative_to(root).parts) != 2:
        raise ComponentError(f"{mirror} is not a mirror directory under {root}: remove it by "
                             "hand")
    return root


def make(mirror: Path, source: Path, pool: str, under: Path | None = None) -> MirrorSync:
    """A new generation of `source` in `mirror` (created 0755 when new; under the mirror root,
    or `under`), served through `current`; the generations older than the one served before
    are removed."""
    root = _guard(mirror, under)
    mirror.mkdir(parents=True, exist_ok=True, mode=0o755)
    for d in (mirror, mirror.parent, mirror.parent.parent):
        if d.stat().st_mode & 0o055 != 0o055 and inside(str(d), str(root)):
            d.chmod(0o755)  # the web server and PHP traverse it
    began = time.monotonic()
    synced = time.time()  # before the copy: a file changed meanwhile counts as newer
    tree = mirror / ("tree-" + datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ"))
    try:
        tree_copy.copy_tree(source, tree)
        st = source.stat()
        os.chown(tree, st.st_uid, st.st_gid)
        tree.chmod(st.st_mode & 0o7777)
    except (ComponentError, OSError) as exc:
        shutil.rmtree(tree, ignore_errors=True)
        raise ComponentError(f"copying {source} to {tree} failed ({exc})") from None
    entries, size = tree_size(tree)
    cur = mirror / CURRENT
    previous = os.readlink(cur) if cur.is_symlink() else ""
    tmp = mirror / f".{CURRENT}.{tree.name}"
    os.symlink(tree.name, tmp)
    os.replace(tmp, cur)  # the switch: one rename
    marker = MirrorMarker(str(source), pool, tree.name, synced,
                          datetime.fromtimestamp(synced, timezone.utc).isoformat(timespec="seconds"),
                          entries, size)
    write_atomic(mirror / MARKER, json.dumps(marker.to_json(), indent=2) + "\n", new_mode=0o644)
    for old in mirror.glob("tree-*"):
        if old.name not in (tree.name, previous):
            shutil.rmtree(old, ignore_errors=True)
    return MirrorSync(str(mirror), marker, previous, round(time.monotonic() - began, 2))


def holders(tree: Path, proc: Path = Path("/proc")) -> list[int]:
    """The processes whose working directory, root, an open file or a mapped file is inside
    `tree`. Without root, a process this one may not look into counts as holding it (the
    tree is kept, not removed under it); as root, one the kernel still hides (an init
    outside this namespace) does not, nor one that ended meanwhile."""
    real = os.path.realpath(tree)
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if _holds(entry, real):
                found.append(int(entry.name))
        except PermissionError:
            if os.geteuid() != 0:
                found.append(int(entry.name))
        except OSError:
            continue  # gone
    return sorted(found)


def _holds(entry: Path, real: str) -> bool:
    links = [entry / "cwd", entry / "root", *(entry / "fd").iterdir()]
    for link in links:
        try:
            target = os.readlink(link)
        except FileNotFoundError:
            continue  # closed meanwhile
        if target != "/" and inside(target, real):
            return True
    with open(entry / "maps", errors="replace") as maps:  # addr perms offset dev inode path
        for line in maps:
            parts = line.split(None, 5)
            if len(parts) == 6 and parts[5].startswith("/") and inside(parts[5].strip(), real):
                return True
    return False


def remove_generation(mirror: Path, name: str, under: Path | None = None) -> list[int]:
    """Remove the generation `name` of `mirror` unless `current` points to it or a process
    holds something in it: those processes' PIDs then (nothing removed)."""
    _guard(mirror, under)
    tree = mirror / name
    cur = mirror / CURRENT
    if not name.startswith("tree-") or "/" in name or not tree.is_dir() or \
            (cur.is_symlink() and os.readlink(cur) == name):
        return []
    held = holders(tree)
    if not held:
        shutil.rmtree(tree, ignore_errors=True)
    return held


def remove(mirror: Path, under: Path | None = None) -> None:
    """The mirror directory, whole (and its pool's directory when left empty)."""
    _guard(mirror, under)
    shutil.rmtree(mirror, ignore_errors=True)
    if mirror.exists():
        raise ComponentError(f"cannot remove {mirror}: remove it by hand")
    try:
        mirror.parent.rmdir()
    except OSError:
        pass  # other mirrors of the pool, or not empty


def of_pool(pool: str, under: Path | None = None) -> list[Path]:
    """The mirrors made for `pool` (their directories), under the mirror root or `under`."""
    return sorted(m.parent for m in ((under or root_dir()) / pool).glob(f"*/{MARKER}"))


def require(pool: str, under: Path | None = None, target: str = "") -> list[Path]:
    """The mirrors of `pool`; UsageError, naming how to make one (`statstorm apply TARGET`,
    default `--pool POOL`), when there is none."""
    found = of_pool(pool, under)
    if not found:
        raise UsageError(f"no mirror of pool {pool} under {under or root_dir()}: make one with "
                         f"`statstorm apply {target or '--pool ' + pool} code-local-mirror "
                         "--yes`")
    return found


def sync(pool: str, ready: threading.Event | None = None, under: Path | None = None,
         ) -> list[MirrorSync]:
    """Every mirror of `pool` (under the mirror root or `under`) copied anew from its network
    tree (see the module's note); `ready` is set once they are found and checked, before the
    first copy."""
    checked = []
    for mirror in require(pool, under):
        if not os.access(mirror, os.W_OK):
            raise PrivilegeError(f"cannot write {mirror}: run statstorm mirror sync as root")
        marker = read_marker(mirror)
        if marker is None:
            raise ComponentError(f"{mirror / MARKER} cannot be read: remove the mirror with "
                                 "`statstorm apply --rollback` and apply it again")
        source = Path(marker.source)
        if not source.is_dir():
            raise ComponentError(f"the mirror's source {source} is not there: mount it first")
        check_space(source, mirror, tree_size(source)[1])
        checked.append((mirror, source, marker.pool or pool))
    if ready is not None:
        ready.set()
    return [make(*one, under) for one in checked]


def newest_php(source: Path, limit: int = NEWEST) -> tuple[tuple[str, float], ...]:
    """The `limit` most recently changed PHP files under `source`, newest first."""
    found: list[tuple[float, str]] = []
    for d, _, files in os.walk(source):
        for f in files:
            if f.endswith(".php"):
                p = os.path.join(d, f)
                try:
                    found.append((os.lstat(p).st_mtime, p))
                except OSError:
                    continue
                if len(found) > 4 * limit:
                    found = heapq.nlargest(limit, found)
    return tuple((p, m) for m, p in heapq.nlargest(limit, found))


def facts(docroot: str, under: Path | None = None) -> MirrorFacts | None:
    """The mirror `docroot` is served from (under `under`, default the mirror root), with its
    network tree's newest PHP files; None when it is not in one (or its marker cannot be
    read)."""
    root = os.path.realpath(under or root_dir())
    real = os.path.realpath(docroot)
    if not docroot or not inside(real, root) or real == root:
        return None
    parts = Path(real).relative_to(root).parts
    if len(parts) < 2:
        return None
    mirror = Path(root, parts[0], parts[1])
    marker = read_marker(mirror)
    if marker is None:
        return None
    source = Path(marker.source)
    return MirrorFacts(str(mirror), marker, newest_php(source) if source.is_dir() else ())
