"""The app tree copied onto a network storage once and reused: a GlusterFS brick filled
through the FUSE client (every file with its trusted.gfid, its .glusterfs handle and
GlusterFS's own times) kept under the state root, and given to a new lab's volume as a
local copy (`cp -a`, xattrs and hard links kept) before the volume is created on it.

    <state root>/cache/trees/<key>/brick/          the brick, its volume-id removed
    <state root>/cache/trees/<key>/manifest.json   what PHP sees of <brick>/app (TreeManifest)
    <state root>/cache/trees/<key>.lock            held while one is built, copied or removed

A cached tree is built in a temporary directory beside it and renamed into place; it is
served only after the copy given to a lab matches its manifest byte for byte (each file's
SHA-256, type, mode, owner, size, mtime) with every file linked to its gfid handle. One that
does not is removed, and the lab copies the tree again through the mount (and caches that).
`lab down` never removes the cache; `statstorm lab cache clear` does (model/tree_cache.py:
the key and the comparison).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import stat
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from statstorm.env import Env
from statstorm.errors import ComponentError, UsageError
from statstorm.model import tree_cache
from statstorm.model.tree_cache import TreeKey
from statstorm.results.common import read_json, write_json_atomic
from statstorm.results.tree_manifest import CachedTree, TreeEntry, TreeManifest

SUBDIR = "app"  # the app's directory in the volume (the lab's code_path is <mount>/app)
MANIFEST = "manifest.json"
VOLUME_ID = "trusted.glusterfs.volume-id"  # glusterd refuses a brick that still has one
MAX_MANIFEST = 64 * 1024 * 1024


def cache_root(env: Env) -> Path:
    """`<state root>/cache/trees`; `$STATSTORM_TREE_CACHE` puts it elsewhere (test sessions
    with state roots of their own can share one)."""
    chosen = os.environ.get("STATSTORM_TREE_CACHE")
    return Path(chosen) if chosen else env.state_root / "cache" / "trees"


def scan(root: Path, *, digests: bool) -> TreeManifest:
    """Every entry below `root` (not `root` itself), sorted by path; with `digests`, each
    file's SHA-256 (its bytes read)."""
    entries = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        base = Path(dirpath)
        for name in [*dirnames, *filenames]:
            path = base / name
            st = path.lstat()
            rel = str(path.relative_to(root))
            mode, owner = stat.S_IMODE(st.st_mode), (st.st_uid, st.st_gid)
            if stat.S_ISDIR(st.st_mode):
                entries.append(TreeEntry(rel, "dir", mode, *owner))
            elif stat.S_ISLNK(st.st_mode):
                entries.append(TreeEntry(rel, "link", mode, *owner, mtime_ns=st.st_mtime_ns,
                                         target=os.readlink(path)))
            elif stat.S_ISREG(st.st_mode):
                digest = ""
                if digests:
                    with path.open("rb") as fh:
                        digest = hashlib.file_digest(fh, "sha256").hexdigest()
                entries.append(TreeEntry(rel, "file", mode, *owner, size=st.st_size,
                                         mtime_ns=st.st_mtime_ns, digest=digest))
            else:
                raise ComponentError(f"{path}: not a file, directory or symlink; an app tree "
                                     "holds no others")
    return TreeManifest(entries=tuple(sorted(entries, key=lambda e: e.path)))


def unlinked_files(root: Path) -> list[str]:
    """Files below `root` without their gfid handle (a hard link in the brick's .glusterfs)."""
    return [str(Path(d, f).relative_to(root)) for d, _, files in os.walk(root) for f in files
            if os.lstat(os.path.join(d, f)).st_nlink < 2]


@contextmanager
def locked(env: Env, key_name: str) -> Iterator[None]:
    """The cached tree `key_name` held by this process alone (fcntl lock beside it)."""
    root = cache_root(env)
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root / f"{key_name}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _copy(src: Path, dest: Path) -> None:
    """`cp -a` (xattrs, hard links, times, owners kept; reflinks where the disk has them)."""
    res = subprocess.run(["cp", "-a", "--reflink=auto", str(src), str(dest)],
                         capture_output=True, text=True, check=False)
    if res.returncode:
        first = (res.stderr.strip().splitlines() or ["cp failed"])[0]
        raise ComponentError(f"copying {src} to {dest} failed: {first}")


def _drop_volume_id(brick: Path) -> None:
    try:
        os.removexattr(brick, VOLUME_ID)
    except OSError:
        pass  # not there (ENODATA): nothing to drop


def _load(entry: Path) -> TreeManifest | None:
    try:
        return TreeManifest.from_json(read_json(entry / MANIFEST, "tree manifest"))
    except (UsageError, OSError, ValueError):
        return None


def seed_brick(env: Env, key: TreeKey, brick: Path) -> tuple[TreeManifest | None, str]:
    """Give `brick` (not there yet) a verified copy of the cached tree of `key`: its manifest,
    or None with why not ('' when there is no cached tree); a copy that fails its check is
    removed with the cache it came from, never served."""
    entry = cache_root(env) / key.name
    with locked(env, key.name):
        if not entry.exists():
            return None, ""
        manifest = _load(entry)
        why = "its manifest is unreadable"
        if manifest is not None and manifest.key == key.name and (entry / "brick").is_dir():
            _copy(entry / "brick", brick)
            _drop_volume_id(brick)
            diff = tree_cache.compare(manifest, scan(brick / SUBDIR, digests=True))
            unlinked = unlinked_files(brick / SUBDIR)
            if diff.same and not unlinked:
                return manifest, ""
            why = (f"it differs from its manifest: {diff.summary()}" if not diff.same else
                   f"{len(unlinked)} files have no gfid handle ({', '.join(unlinked[:3])})")
            shutil.rmtree(brick, ignore_errors=True)
        elif manifest is not None:
            why = "its manifest is for another key"
        shutil.rmtree(entry, ignore_errors=True)
        env.log(f"  the cached tree {key.name} was refused and removed ({why}); "
                "copying the tree again")
        return None, why


def store_brick(env: Env, key: TreeKey, brick: Path, expected: TreeManifest) -> bool:
    """Keep a copy of `brick` (its app just copied through the mount, the lab's own files
    not yet written) as the cached tree of `key`, if it matches `expected` (the tree copied)
    and none is there; True if it was stored."""
    root = cache_root(env)
    entry = root / key.name
    with locked(env, key.name):
        if entry.exists():
            return False  # another lab built it meanwhile
        tmp = root / f".tmp-{key.name}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(mode=0o700)
        try:
            _copy(brick, tmp / "brick")
            _drop_volume_id(tmp / "brick")
            got = scan(tmp / "brick" / SUBDIR, digests=True)
            diff = tree_cache.compare(expected, got)
            unlinked = unlinked_files(tmp / "brick" / SUBDIR)
            if not diff.same or unlinked:
                env.log(f"  not caching the tree: the brick differs from the copy "
                        f"({diff.summary() if not diff.same else 'files without gfid'})")
                return False
            write_json_atomic(tmp / MANIFEST, TreeManifest(got.entries, key.name).to_json())
            tmp.rename(entry)
            return True
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def overlay(env: Env, stage: Path, code: Path, cached: TreeManifest) -> TreeManifest:
    """Write onto `code` (the cached tree, through the mount) what the lab's `stage` has
    that the cached tree has not (its installer's files), remove what it lacks, and check
    that `code` is now the stage's tree (names, types, modes, owners, sizes, mtimes): the
    stage's manifest."""
    wanted = scan(stage, digests=True)
    write, remove = tree_cache.overlay(cached, wanted)
    kinds = {e.path: e.kind for e in cached.entries}
    retyped = [p for p in write if p in kinds and kinds[p] != _kind_of(wanted, p)]
    for rel in [*remove, *retyped]:
        path = code / rel
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    if write:
        env.debug(f"writing {len(write)} of the lab's own entries: {', '.join(write[:5])}")
        reader = subprocess.Popen(["tar", "-C", str(stage), "-cf", "-", "--no-recursion",
                                   "--", *write], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        res = subprocess.run(["tar", "-C", str(code), "-xf", "-"], stdin=reader.stdout,
                             capture_output=True, check=False)
        _, rerr = reader.communicate()
        if reader.returncode or res.returncode:
            text = (res.stderr or rerr or b"tar failed").decode(errors="replace").strip()
            raise ComponentError(f"writing the lab's files to {code} failed: "
                                 f"{text.splitlines()[0] if text else 'tar failed'}")
    diff = tree_cache.compare(wanted, scan(code, digests=False), content=False)
    if not diff.same:
        raise ComponentError(f"{code} is not the lab's tree after the cached copy: "
                             f"{diff.summary()}; run `statstorm lab cache clear` and retry")
    return wanted


def _kind_of(manifest: TreeManifest, path: str) -> str:
    return next((e.kind for e in manifest.entries if e.path == path), "")


def cached(env: Env) -> list[CachedTree]:
    """The cached trees there are (`statstorm lab cache list`)."""
    root = cache_root(env)
    if not root.is_dir():
        return []
    out = []
    for entry in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        size = sum(os.lstat(os.path.join(d, f)).st_size for d, _, fs in os.walk(entry) for f in fs)
        manifest = _load(entry)
        out.append(CachedTree(entry.name, str(entry), manifest.files if manifest else 0, size))
    return out


def clear(env: Env) -> list[str]:
    """Remove every cached tree (each under its lock, so none is removed while a lab copies
    it) and any left half-built; their names."""
    root = cache_root(env)
    if not root.is_dir():
        return []
    removed = []
    for entry in sorted(root.iterdir()):
        if entry.suffix == ".lock" or not entry.is_dir():
            continue
        name = entry.name
        if name.startswith(".tmp-"):
            pid = name.rsplit("-", 1)[-1]
            if not (pid.isdigit() and Path(f"/proc/{pid}").exists()):
                shutil.rmtree(entry, ignore_errors=True)  # a build that did not finish
            continue
        with locked(env, name):
            shutil.rmtree(entry, ignore_errors=True)
            (root / f"{name}.lock").unlink(missing_ok=True)
        removed.append(name)
    return removed
