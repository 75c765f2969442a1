"""The fsbench workload, built from the list of files of a real code tree (no I/O).

A tree is given as paths relative to its root. From it we derive what PHP does to storage:
the lstat of every path component from `/` (realpath resolution), a stat per file, lookups of
names that do not exist in existing directories (include_path and autoloader misses), the
open+fstat+read+close of each PHP file (an OPcache miss), and a readdir of every directory.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

OPS = ("walk", "stat", "negative", "open", "readdir", "find")
# Suffix that turns a file name into a name that does not exist in the same directory.
MISSING_SUFFIX = ".statstorm-missing.php"


@dataclass(frozen=True)
class Workload:
    """What one pass of each operation touches, as absolute paths."""

    root: str
    files: tuple[str, ...]
    php_files: tuple[str, ...]
    dirs: tuple[str, ...]
    walk_paths: tuple[str, ...]  # every component prefix of every file, in PHP's order
    negative_names: tuple[str, ...]
    max_depth: int

    def calls_per_pass(self, op: str) -> int:
        """How many timed samples one pass of `op` produces."""
        return {
            "walk": len(self.walk_paths),
            "stat": len(self.files),
            "negative": len(self.negative_names),
            "open": len(self.php_files),
            "readdir": len(self.dirs),
            "find": 1,
        }[op]


def components(abs_path: str) -> list[str]:
    """`/a/b/c.php` → [`/a`, `/a/b`, `/a/b/c.php`]: what realpath lstat()s, in order."""
    out = []
    cur = ""
    for part in abs_path.strip("/").split("/"):
        if not part:
            continue
        cur = f"{cur}/{part}"
        out.append(cur)
    return out


def sample(items: list[str], limit: int | None) -> list[str]:
    """A deterministic, evenly spread subset of at most `limit` items (all when None)."""
    if limit is None or len(items) <= limit:
        return items
    step = len(items) / limit
    return [items[int(i * step)] for i in range(limit)]


def build(root: str, rel_files: list[str], rel_dirs: list[str], *,
          max_files: int | None = None) -> Workload:
    """Build the workload for the tree at absolute `root` from its relative files and dirs."""
    root = posixpath.normpath(root)
    files_rel = sample(sorted(rel_files), max_files)
    files = [posixpath.join(root, f) for f in files_rel]
    php = [f for f in files if f.endswith((".php", ".inc"))]
    dirs = [root] + [posixpath.join(root, d) for d in sorted(rel_dirs)]
    walk: list[str] = []
    for f in files:
        walk.extend(components(f))
    existing = set(files) | set(dirs)
    negative = []
    for f in files:
        name = f + MISSING_SUFFIX
        if name not in existing:
            negative.append(name)
    depth = max((f.count("/") for f in files_rel), default=0)
    return Workload(root=root, files=tuple(files), php_files=tuple(php), dirs=tuple(dirs),
                    walk_paths=tuple(walk), negative_names=tuple(negative), max_depth=depth)
