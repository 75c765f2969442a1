"""A code tree's manifest: every entry below its root with what PHP can see of it (type,
mode, owner, size, mtime, a symlink's target) and, for a regular file, a SHA-256 of its
bytes. A cached app tree keeps one beside it (`<state root>/cache/trees/<key>/manifest.json`,
adapters/storage/tree_cache.py): written by this class, read back by it.

A directory's mtime is left out: copying a file into a directory changes it, and PHP never
reads it (OPcache revalidates files, the realpath cache stores no times).
"""

from __future__ import annotations

from dataclasses import dataclass

from statstorm.errors import UsageError
from statstorm.results import jsonread as jr
from statstorm.results.jsontypes import JsonObject, JsonValue

KIND = "tree-manifest"
VERSION = 1
SCHEMA = f"statstorm.{KIND}/{VERSION}"
KINDS = ("file", "dir", "link")


@dataclass(frozen=True)
class TreeEntry:
    """One entry of a tree, by its path relative to the root ('a/b.php')."""

    path: str
    kind: str  # one of KINDS
    mode: int  # the permission bits (st_mode & 0o7777)
    uid: int
    gid: int
    size: int = 0  # a file's bytes; 0 for a directory or a symlink
    mtime_ns: int = 0  # a file's or symlink's; 0 for a directory
    digest: str = ""  # a file's SHA-256 in hex; '' when not read (a stat-only scan)
    target: str = ""  # a symlink's

    def to_json(self) -> JsonObject:
        out: JsonObject = {"path": self.path, "kind": self.kind, "mode": self.mode,
                           "uid": self.uid, "gid": self.gid}
        if self.kind == "file":
            out.update(size=self.size, mtime_ns=self.mtime_ns, digest=self.digest)
        elif self.kind == "link":
            out.update(mtime_ns=self.mtime_ns, target=self.target)
        return out

    @classmethod
    def from_json(cls, data: JsonValue) -> TreeEntry:
        d = jr.obj(data, "tree entry")
        path, kind = jr.str_(d, "path"), jr.str_(d, "kind")
        if not path or kind not in KINDS:
            raise UsageError("tree manifest: an entry without a path or with an unknown kind")
        return cls(path=path, kind=kind, mode=jr.int_(d, "mode"), uid=jr.int_(d, "uid"),
                   gid=jr.int_(d, "gid"), size=jr.int_(d, "size"),
                   mtime_ns=jr.int_(d, "mtime_ns"), digest=jr.str_(d, "digest"),
                   target=jr.str_(d, "target"))


@dataclass(frozen=True)
class TreeManifest:
    """A tree's entries, sorted by path; `key`: the cache key it was made for ('' for a scan)."""

    entries: tuple[TreeEntry, ...]
    key: str = ""

    @property
    def files(self) -> int:
        return sum(1 for e in self.entries if e.kind == "file")

    @property
    def bytes(self) -> int:
        return sum(e.size for e in self.entries)

    def to_json(self) -> JsonObject:
        return {"schema": SCHEMA, "key": self.key,
                "entries": [e.to_json() for e in self.entries]}

    @classmethod
    def from_json(cls, data: JsonValue) -> TreeManifest:
        d = jr.obj(data, "tree manifest")
        if d.get("schema") != SCHEMA:
            raise UsageError(f"tree manifest: schema {d.get('schema')!r}, not {SCHEMA}")
        entries = tuple(TreeEntry.from_json(e) for e in jr.lst(d, "entries"))
        return cls(entries=tuple(sorted(entries, key=lambda e: e.path)), key=jr.str_(d, "key"))


@dataclass(frozen=True)
class CachedTree:
    """A cached app tree as `statstorm lab cache list` shows it."""

    name: str  # its key's name: "<app>-<version>-<storage>-<hash>"
    path: str
    files: int  # the app's files (from its manifest; 0 when unreadable)
    size_bytes: int  # on disk, the brick's .glusterfs included

    def to_json(self) -> JsonObject:
        return {"name": self.name, "path": self.path, "files": self.files,
                "size_bytes": self.size_bytes}
