"""A local mirror of a pool's code, as pure data: where it lives, the root the web server
serves it from, and whether the network tree has moved on since the last sync. No files:
the copy, the marker and the sync are in `adapters/apply/mirror.py`.

Layout under the mirror root (`/var/local/statstorm/mirror`, or `$STATSTORM_MIRROR_ROOT`):
`<pool>/<hash of the network path>/` holds `mirror.json` (results.mirror.MirrorMarker),
generation directories `tree-<stamp>/` and the symlink `current` to the newest one. nginx's
`root` names `.../current` (plus the docroot's place in the app's tree), so a sync that
switches the symlink switches every new request at once."""

from __future__ import annotations

import hashlib
import posixpath
from dataclasses import dataclass

from statstorm.results.mirror import MirrorMarker

MIRROR_ROOT = "/var/local/statstorm/mirror"
MARKER = "mirror.json"
CURRENT = "current"
STALE_SHOWN = 5  # files named in the evidence
MIRROR_INCLUDE_PATH = "mirror-include-path"  # a change line: the pool's include_path, rebased


def mirror_dir(root: str, pool: str, source: str) -> str:
    """The mirror of `source` (the app's tree on the network) for `pool`."""
    digest = hashlib.sha256(source.rstrip("/").encode()).hexdigest()[:12]
    return posixpath.join(root, pool, digest)


def served_root(mirror: str, app_root: str, docroot: str) -> str:
    """The root that serves `docroot` (inside `app_root`) from the mirror."""
    rel = posixpath.relpath(docroot.rstrip("/") or "/", app_root.rstrip("/") or "/")
    cur = posixpath.join(mirror, CURRENT)
    return cur if rel == "." else posixpath.join(cur, rel)


def rebased_include_path(include_path: str, app_root: str, mirror: str) -> str:
    """`include_path` with its entries inside `app_root` pointing at the same place in the
    mirror's served tree (`current`); '' when no entry is inside it."""
    entries = include_path.split(":")
    if not any(e.startswith("/") and inside(e, app_root) for e in entries):
        return ""
    return ":".join(served_root(mirror, app_root, e) if e.startswith("/") and inside(e, app_root)
                    else e for e in entries)


def inside(path: str, tree: str) -> bool:
    """Whether `path` is `tree` or under it (both absolute, normalised)."""
    p, t = posixpath.normpath(path), posixpath.normpath(tree)
    return p == t or p.startswith(t.rstrip("/") + "/")


@dataclass(frozen=True)
class MirrorFacts:
    """A pool served from a mirror: its directory, its marker, and the newest PHP files of
    the network tree with their mtimes (newest first, a few dozen at most)."""

    path: str
    marker: MirrorMarker
    newest: tuple[tuple[str, float], ...] = ()


def mirror_switch(mirror: MirrorFacts | None, link: str) -> bool:
    """Whether `link` is the `current` of the statstorm mirror the pool serves: `statstorm
    mirror sync` switches it and then reloads the pool, so no worker keeps the old tree."""
    return mirror is not None and posixpath.normpath(link) == posixpath.join(mirror.path, CURRENT)


def stale_files(facts: MirrorFacts) -> tuple[str, ...]:
    """The network tree's PHP files changed after the mirror's last sync."""
    return tuple(p for p, mtime in facts.newest if mtime > facts.marker.synced)
