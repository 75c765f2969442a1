"""Result files recognised by their content, for `statstorm report`.

A result file is a trace (`.sst`, `.sst.gz`: the `statstorm-trace` header line) or the JSON a
verb writes, named by its `schema` key (`statstorm.KIND/VERSION`). JSON written before a verb
had a schema key is recognised by its keys. Anything else (missing, truncated, a schema this
statstorm does not read) is a UsageError of one line naming the file and what to do.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statstorm.errors import UsageError
from statstorm.results.common import MAX_JSON_BYTES, read_bounded
from statstorm.results.trace import FORMAT, Trace, read_trace

# kind → the schema versions this statstorm reads
VERSIONS: dict[str, tuple[int, ...]] = {
    "trace": (1,), "trace-summary": (1,), "check": (1,), "whatif": (1,), "fsbench": (1, 2),
    "sweep": (1,), "apply": (1,), "demo": (1,), "matrix": (1,),
}
# kind → keys a file of that kind must hold (else it was cut short or edited)
REQUIRED: dict[str, tuple[str, ...]] = {
    "trace-summary": ("per_request", "totals"),
    "check": ("findings",),
    "whatif": ("current", "proposed"),
    "fsbench": ("paths", "results"),
    "sweep": ("target", "levels"),
    "apply": ("mode",),
    "demo": ("app", "storage"),
    "matrix": ("cells",),
}
# files without a schema key (written before the verb had one): kind → keys that tell it
LEGACY: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("whatif", ("current", "proposed", "measured")),
    ("trace-summary", ("per_request", "totals", "source")),
    ("check", ("findings", "pools")),
    ("sweep", ("levels", "knee", "target")),
)
READABLE = ("trace files (.sst, .sst.gz) and the JSON of check --json, whatif --json, fsbench, "
            "sweep, apply, demo and matrix")


@dataclass
class ResultFile:
    """One result file: its kind, version, path and content (a trace's records in `trace`)."""

    kind: str
    version: int
    path: Path
    data: dict[str, Any] = field(default_factory=dict)
    trace: Trace | None = None

    @property
    def name(self) -> str:
        return self.path.name


def _is_trace(path: Path) -> bool:
    """Whether `path` starts like a trace file: gzip, or a first line naming the format."""
    try:
        if path.exists() and not path.is_dir() and not path.is_file():
            raise UsageError(f"{path}: not a regular file (a pipe, socket or device); save the "
                             "output to a file first and give that file")
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such result file") from None
    except IsADirectoryError:
        raise UsageError(f"{path}: is a directory; give result files ({READABLE})") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot be read ({exc.strerror})") from None
    if head[:2] == b"\x1f\x8b":
        try:
            with gzip.open(path, "rb") as fh:
                head = fh.read(4096)
        except (OSError, EOFError) as exc:
            raise UsageError(f"{path}: truncated or damaged gzip file ({exc}); re-create it") \
                from None
    return head.lstrip().startswith(b"{") and f'"format":"{FORMAT}"'.encode() in \
        head.split(b"\n", 1)[0].replace(b" ", b"")


def _schema(path: Path, data: Any) -> tuple[str, int]:
    if not isinstance(data, dict):
        raise UsageError(f"{path}: not a statstorm result (a JSON {type(data).__name__}); "
                         f"the report reads {READABLE}")
    schema = data.get("schema")
    if schema is None:
        for kind, keys in LEGACY:
            if all(k in data for k in keys):
                return kind, 1
        raise UsageError(f"{path}: JSON without a statstorm schema key; the report reads "
                         f"{READABLE}")
    text = str(schema)
    kind, _, ver = text.partition("/")
    kind = kind.removeprefix("statstorm.")
    if not text.startswith("statstorm.") or kind not in VERSIONS or not ver.isdigit():
        raise UsageError(f"{path}: schema {text!r} is not a result this report reads; it reads "
                         f"{READABLE}")
    version = int(ver)
    if version not in VERSIONS[kind]:
        newest = max(VERSIONS[kind])
        raise UsageError(f"{path}: {text} is not supported (this statstorm reads "
                         f"statstorm.{kind}/{newest}); re-create it with this statstorm or "
                         "upgrade statstorm")
    return kind, version


def load(path: Path) -> ResultFile:
    """Read one result file and tell its kind; one-line UsageError when it cannot be used."""
    if _is_trace(path):
        trace = read_trace(path)
        if not trace.trailer:
            raise UsageError(f"{path}: truncated trace (no end record); record it again or "
                             "leave it out")
        return ResultFile("trace", int(trace.header.get("version", 1)), path,
                          dict(trace.header), trace)
    try:
        data = json.loads(read_bounded(path, MAX_JSON_BYTES, "give a statstorm result file"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise UsageError(f"{path}: truncated or not JSON ({exc}); re-create it with the "
                         "command that wrote it") from None
    kind, version = _schema(path, data)
    missing = [k for k in REQUIRED.get(kind, ()) if k not in data]
    if missing:
        raise UsageError(f"{path}: a statstorm.{kind} file without {missing[0]!r}: cut short "
                         "or edited; re-create it")
    return ResultFile(kind, version, path, data)


def load_all(paths: list[Path], follow_demo: bool = True) -> list[ResultFile]:
    """Every file in `paths`, in order; with `follow_demo`, the files a demo.json names (its
    traces, check and apply results) are read too when they were not given and exist, found
    where the demo wrote them or beside the demo.json."""
    out = [load(p) for p in paths]
    if not follow_demo:
        return out
    seen = {p.resolve() for p in paths}
    for rf in list(out):
        if rf.kind != "demo":
            continue
        for written in (rf.data.get("files") or {}).values():
            p = Path(str(written))
            cand = p if p.is_file() else rf.path.parent / p.name
            if cand.is_file() and cand.resolve() not in seen and cand.name != rf.path.name:
                seen.add(cand.resolve())
                out.append(load(cand))
    return out
