"""A lab's storage "distance": a fixed delay added to every metadata call its storage serves,
so a lab on loopback stands for storage across a LAN (~0.2 ms) or a WAN (milliseconds).

Pure: the duration's text, which storages can be delayed and by what, and which calls. The
storage's own mechanism lives in its adapter (GlusterFS: `adapters/storage/gluster.py`
`delay_options`, the brick's debug/delay-gen translator).

The calls delayed are the file operations PHP's metadata syscalls turn into on a GlusterFS
brick, as the volume profile of a MediaWiki lab shows them (tests/fixtures/gluster/
profile-info-cumulative-after.txt: LOOKUP, OPENDIR, READDIRP, STAT, FSTAT, OPEN, GETXATTR,
READLINK, STATFS) plus the ones of the same family a client may send instead (ACCESS, READDIR,
FGETXATTR). Data (READ, WRITE) and the writes and locks of an install are not delayed: the
delay stands for the round trip of a metadata call, which is what statstorm finds and fixes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from statstorm.errors import UsageError
from statstorm.results.storage_kind import StorageKind

# delay-gen keeps the duration as an unsigned 32-bit count of µs; a lab slower than 1 s
# per call would not finish installing its app.
MAX_US = 1_000_000
METADATA_FOPS = ("lookup", "stat", "fstat", "access", "open", "opendir", "readdir", "readdirp",
                 "readlink", "getxattr", "fgetxattr", "statfs")
_UNITS = {"us": 1, "µs": 1, "ms": 1000, "s": 1_000_000}
_TEXT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(us|µs|ms|s)?\s*$")


@dataclass(frozen=True)
class DelaySupport:
    """How one storage kind can be given a delay in a lab."""

    kind: StorageKind
    how: str  # the mechanism, for messages and docs


# The one table of storages a lab can delay; a new one is one entry (and its adapter).
SUPPORT: tuple[DelaySupport, ...] = (
    DelaySupport(StorageKind.GLUSTERFS, "GlusterFS's debug/delay-gen translator on the brick"),
)


def parse(text: str) -> int:
    """`--storage-delay` text → whole microseconds: `200us`, `1ms`, `1.5ms`, `0.002s`, `0`."""
    m = _TEXT.match(text)
    if not m or (m.group(2) is None and float(m.group(1)) != 0):
        raise UsageError(f"--storage-delay {text!r}: give a duration with its unit, e.g. 200us, "
                         "1ms or 0 (none)")
    us = float(m.group(1)) * _UNITS[m.group(2) or "us"]
    if us != int(us):
        raise UsageError(f"--storage-delay {text!r}: the smallest step is 1us")
    if us > MAX_US:
        raise UsageError(f"--storage-delay {text!r}: at most 1s per call")
    return int(us)


def format_us(us: int) -> str:
    """Microseconds as `--storage-delay` takes them back: 0, 200us, 1ms, 1.5ms, 1s."""
    if us == 0:
        return "0"
    if us % 1_000_000 == 0:
        return f"{us // 1_000_000}s"
    if us >= 1000:
        return f"{us / 1000:g}ms"
    return f"{us}us"


def label(storage: str, us: int) -> str:
    """The storage as a lab's outputs name it: `glusterfs`, or `glusterfs +1ms` when delayed."""
    return f"{storage} +{format_us(us)}" if us else storage


def delayable() -> tuple[str, ...]:
    return tuple(str(s.kind) for s in SUPPORT)


def check(storage: str, us: int) -> None:
    """A one-line error unless `storage` can be delayed by `us` (0: always fine)."""
    if us and storage not in delayable():
        raise UsageError(f"--storage-delay works with --storage {' or '.join(delayable())} "
                         f"only ({SUPPORT[0].how}); {storage} storage has no delay: drop the "
                         "option or use --storage glusterfs")


__all__ = ["MAX_US", "METADATA_FOPS", "SUPPORT", "DelaySupport", "check", "delayable",
           "format_us", "label", "parse"]
