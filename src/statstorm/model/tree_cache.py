"""The cached app tree's rules, pure: the key a cached tree is filed under (the app, its
package's version, the layout statstorm copies it in, the storage kind) and the comparison
of two manifests (results/tree_manifest.py) that decides whether a cached tree is served.

A cached tree is the app's package tree as a fresh copy gives it, before the lab's installer
writes its own files (MediaWiki's LocalSettings.php, WordPress's wp-config.php and uploads
link): those differ per lab (port, data path, secrets) and are written to each lab's storage
on top (`overlay`), so no lab is ever served another lab's settings.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from statstorm.results.tree_manifest import TreeEntry, TreeManifest

# The layout of the copy, part of every key: a change to how statstorm copies a tree (its
# excludes, symlinks resolved, the manifest's fields) is a new number, so no older cache is
# served for it.
LAYOUT = 1
# mtimes are compared to the second: tar, which makes every copy of a lab's tree, keeps
# whole seconds, so a fresh copy's files carry no more (nor does PHP's stat cache need more)
NS = 1_000_000_000


@dataclass(frozen=True)
class TreeKey:
    """What a cached tree is filed under; `name` is its directory under the cache."""

    app: str  # "mediawiki"
    version: str  # the Debian package's version, "1:1.39.17-1+deb12u2"
    storage: str  # "glusterfs"
    layout: str  # how the copy is made: the excludes, symlinks resolved, LAYOUT

    @property
    def name(self) -> str:
        digest = hashlib.sha256("\0".join((self.app, self.version, self.storage,
                                           self.layout)).encode()).hexdigest()[:12]
        safe = re.sub(r"[^A-Za-z0-9.+-]+", "_", self.version)[:40]
        return f"{self.app}-{safe}-{self.storage}-{digest}"


def key_for(app: str, version: str, storage: str, excludes: tuple[str, ...],
            dereference: bool = True) -> TreeKey:
    layout = f"v{LAYOUT};deref={int(dereference)};excl={','.join(sorted(excludes))}"
    return TreeKey(app=app, version=version, storage=storage, layout=layout)


@dataclass(frozen=True)
class TreeDiff:
    """How `actual` differs from `expected`: paths missing from it, extra in it, and changed
    (another kind, mode, owner, size, mtime, content or target)."""

    missing: tuple[str, ...] = ()
    extra: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()

    @property
    def same(self) -> bool:
        return not (self.missing or self.extra or self.changed)

    def summary(self, limit: int = 3) -> str:
        """'2 missing (a.php, b.php), 1 changed (c.php)': for a one-line message."""
        parts = []
        for label, paths in (("missing", self.missing), ("extra", self.extra),
                             ("changed", self.changed)):
            if paths:
                shown = ", ".join(paths[:limit]) + (", …" if len(paths) > limit else "")
                parts.append(f"{len(paths)} {label} ({shown})")
        return "; ".join(parts) or "the same"


def differs(a: TreeEntry, b: TreeEntry, *, content: bool) -> bool:
    """Whether PHP could tell the two apart; `content`: compare digests too (both must have
    one: a stat-only scan compares by the rest)."""
    if (a.kind, a.mode, a.uid, a.gid, a.size, a.target) != (b.kind, b.mode, b.uid, b.gid,
                                                            b.size, b.target):
        return True
    if a.kind != "dir" and a.mtime_ns // NS != b.mtime_ns // NS:
        return True
    return content and a.kind == "file" and a.digest != b.digest


def compare(expected: TreeManifest, actual: TreeManifest, *, content: bool = True) -> TreeDiff:
    want = {e.path: e for e in expected.entries}
    got = {e.path: e for e in actual.entries}
    return TreeDiff(
        missing=tuple(sorted(set(want) - set(got))),
        extra=tuple(sorted(set(got) - set(want))),
        changed=tuple(sorted(p for p in set(want) & set(got)
                             if differs(want[p], got[p], content=content))))


def overlay(cached: TreeManifest, wanted: TreeManifest) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """What turns the cached tree into `wanted` (the lab's tree after its installer): the
    paths to write from the lab's tree (new or changed, parents before children) and the
    paths to remove (deepest first)."""
    diff = compare(cached, wanted)
    write = tuple(sorted(diff.extra + diff.changed))
    remove = tuple(sorted(diff.missing, reverse=True))
    return write, remove
