"""The tree an app runs from: its docroot, or the directory above it that holds every file of
PHP code its requests include (a front controller in `public/`, `web/` or `public_html/`
requiring `../src/…`, `../vendor/…`: Laravel, Symfony, Drupal, Roundcube). Included code under
a system directory (Debian's /usr/share/php) is used in place, and so is code whose common
directory with the docroot is too near the root to copy (`/srv`, `/var`): named, not copied."""

from __future__ import annotations

import os
from collections.abc import Iterable

from statstorm.results.app_tree import AppTree

SYSTEM = ("/usr/", "/etc/", "/proc/", "/sys/", "/dev/", "/run/", "/var/lib/php/")
MIN_DEPTH = 2  # a tree to copy is at least /a/b


def _depth(path: str) -> int:
    return len([p for p in path.split("/") if p])


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def tree_of(docroot: str, included: Iterable[str]) -> AppTree:
    """The tree of an app served from `docroot` whose requests included these files."""
    return tree_of_dirs(docroot, (os.path.dirname(os.path.normpath(f)) for f in included
                                  if f.startswith("/")))


def tree_of_dirs(docroot: str, dirs: Iterable[str]) -> AppTree:
    """The tree of an app served from `docroot` whose requests included files in `dirs`."""
    doc = os.path.normpath(docroot)
    found = sorted({os.path.normpath(d) for d in dirs if d.startswith("/")})
    system = [d for d in found if not _under(d, doc) and (d + "/").startswith(SYSTEM)]
    code = [d for d in found if d not in system]
    root = os.path.commonpath([doc, *code]) if code else doc
    if _depth(root) < MIN_DEPTH:
        root = doc
    outside = [d for d in [*system, *code] if not _under(d, root)]
    return AppTree(doc, root, tuple(_collapse(sorted(outside))))


def _collapse(dirs: list[str]) -> list[str]:
    """The directories without those under another of them."""
    out: list[str] = []
    for d in dirs:
        if not any(_under(d, o) for o in out):
            out.append(d)
    return out


__all__ = ["MIN_DEPTH", "SYSTEM", "tree_of", "tree_of_dirs"]
