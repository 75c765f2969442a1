"""A local mirror of a pool's code: the marker apply and `statstorm mirror sync` write in the
mirror's directory (where the copy came from, when it was made), and what a sync did.
Written by `adapters/apply/mirror.py`; read back by the same module, check's facts and the CLI.
"""

from __future__ import annotations

from dataclasses import dataclass

from statstorm.results import jsonread as jr
from statstorm.results.jsontypes import JsonObject, JsonValue

SCHEMA = "statstorm.mirror/1"


@dataclass(frozen=True)
class MirrorMarker:
    """`<mirror>/mirror.json`: the network tree copied (`source`), the pool it serves, the
    generation directory `current` points to, and the time of the sync (epoch seconds, and
    as UTC text for people)."""

    source: str
    pool: str
    tree: str  # the generation directory's name (tree-<stamp>)
    synced: float
    synced_at: str
    files: int = 0
    bytes: int = 0

    def to_json(self) -> JsonObject:
        return {"schema": SCHEMA, "source": self.source, "pool": self.pool, "tree": self.tree,
                "synced": self.synced, "synced_at": self.synced_at, "files": self.files,
                "bytes": self.bytes}

    @classmethod
    def from_json(cls, data: JsonValue) -> MirrorMarker:
        d = jr.obj(data, "mirror marker")
        if d.get("schema") != SCHEMA or not jr.str_(d, "source").startswith("/"):
            raise ValueError(f"not a {SCHEMA} marker with an absolute source")
        return cls(jr.str_(d, "source"), jr.str_(d, "pool"), jr.str_(d, "tree"),
                   jr.num(d, "synced"), jr.str_(d, "synced_at"), jr.int_(d, "files"),
                   jr.int_(d, "bytes"))


@dataclass(frozen=True)
class MirrorSync:
    """One mirror re-copied by `statstorm mirror sync`: where, from where, the new generation
    and the one kept behind it (workers may still resolve paths into it, see docs/apply.md)."""

    path: str
    marker: MirrorMarker
    previous: str  # the generation `current` pointed to before ('' : none)
    seconds: float

    def to_json(self) -> JsonObject:
        return {"path": self.path, "marker": self.marker.to_json(), "previous": self.previous,
                "seconds": self.seconds}
