"""A lab's storage "distance": a fixed delay added to every metadata call its storage serves,
so a lab on loopback stands for storage across a LAN (~0.2 ms) or a WAN (milliseconds).

Pure: the duration's text, which storages can be delayed and by what, and which calls. The
mechanism lives in an adapter: GlusterFS's own, `adapters/storage/gluster.py`
`delay_options`, the brick's debug/delay-gen translator; for CephFS and OpenAFS, which have
no such translator, a delayed network path (`adapters/host/delay_path.py`): the storage's
client alone in a network namespace, joined to the host through two TUN devices and a relay
that holds every packet half the delay each way, so that one round trip pays the delay once.

The calls delayed are the file operations PHP's metadata syscalls turn into on a GlusterFS
brick, as the volume profile of a MediaWiki lab shows them (tests/fixtures/gluster/
profile-info-cumulative-after.txt: LOOKUP, OPENDIR, READDIRP, STAT, FSTAT, OPEN, GETXATTR,
READLINK, STATFS) plus the ones of the same family a client may send instead (ACCESS, READDIR,
FGETXATTR). Data (READ, WRITE) and the writes and locks of an install are not delayed: the
delay stands for the round trip of a metadata call, which is what statstorm finds and fixes.

What the delay is, precisely: the brick holds every such call that long before it serves it,
once per call the client sends (one network round trip). A syscall pays it as many times as
it makes round trips: none when the client's caches answer (a stat within attribute-timeout),
once for a failed lookup (one LOOKUP; negative-timeout is 0 on a lab's mount), once more per
directory of its path whose entry has expired (entry-timeout, 1 s by default) and for an
open that also sends OPEN. What a caller measures per round trip is the delay plus how late
the machine ends such a wait (the brick's sleep, the client's wake-ups after it): 0.1-0.5 ms
on a loaded 2-vCPU machine, about +20 % of 1ms, +10 % of 5ms (tests/test_storage_delay_lab.py
checks 5ms within 20 %, one LOOKUP per failed lookup).

On CephFS and OpenAFS the delay is per packet, not per call: each IP packet between the client
and the servers waits half the delay in the relay, each way. A metadata call that the client
answers from its own cache (ceph-fuse with the capabilities and leases the MDS gave it, an AFS
cache manager with a callback on the directory or file) sends nothing and pays nothing; one
it sends (to the MDS, or to the file server) pays one round trip, the delay, plus the relay's
own lateness (tests/test_storage_delay_path.py measures it). Everything else between client
and servers pays it as well, data included (a read of many packets pays it once per window,
not per packet, as TCP and Rx keep packets in flight), and so do the MDS's capability recalls
and the file server's callbacks to the client: the path stands for the whole network, where
GlusterFS's delay-gen stands for the metadata calls only.
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
    by_path: bool = False  # through a delayed network path (adapters/host/delay_path.py)


# The one table of storages a lab can delay; a new one is one entry (and its adapter).
SUPPORT: tuple[DelaySupport, ...] = (
    DelaySupport(StorageKind.GLUSTERFS, "GlusterFS's debug/delay-gen translator on the brick"),
    DelaySupport(StorageKind.CEPHFS, "ceph-fuse in a network namespace, every packet to and "
                 "from the cluster relayed half the delay late each way", by_path=True),
    DelaySupport(StorageKind.OPENAFS, "afsd.fuse in a network namespace, every Rx packet to "
                 "and from the cell's servers relayed half the delay late each way",
                 by_path=True),
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


def tag(storage: str, us: int) -> str:
    """The storage and its delay as one word, as a matrix cell's storage names it:
    `glusterfs`, `glusterfs+1ms`; `split` reads it back."""
    return f"{storage}+{format_us(us)}" if us else storage


def split(text: str) -> tuple[str, int]:
    """`glusterfs+1ms` → (`glusterfs`, 1000); a storage without a delay → (storage, 0)."""
    storage, plus, delay = text.partition("+")
    if not plus:
        return text, 0
    try:
        return storage, parse(delay)
    except UsageError:
        raise UsageError(f"--storage {text!r}: write a delayed storage as STORAGE+DURATION, "
                         "e.g. glusterfs+1ms") from None


def parse_list(text: str) -> tuple[int, ...]:
    """`--storage-delay` as a list, `0,200us,1ms` → (0, 200, 1000): each once, in order."""
    values = tuple(dict.fromkeys(parse(p) for p in text.split(",") if p.strip()))
    if not values:
        raise UsageError("--storage-delay is empty: give durations such as 0,200us,1ms")
    return values


def axis(storages: tuple[str, ...], delays: tuple[int, ...]) -> tuple[str, ...]:
    """Every storage with every delay (`tag`), for a grid with the delay as one more axis.

    A storage that cannot be delayed (local disk) takes part with delay 0 only: its cells
    with a delay are left out, as a delay on it means nothing. Refused in one line when that
    leaves such a storage no cell (no 0 among the delays), or no storage can take a delay."""
    if any(delays):
        if not any(s in delayable() for s in storages):
            check(storages[0] if storages else "local", max(delays))
        if 0 not in delays:
            for s in storages:
                if s not in delayable():
                    raise UsageError(
                        f"--storage-delay {','.join(format_us(d) for d in delays)}: {s} "
                        f"storage has no delay; add 0 to the list (e.g. --storage-delay "
                        f"0,{format_us(max(delays))}) for its cells, or drop {s} from --storage")
    return tuple(dict.fromkeys(tag(s, d) for s in storages for d in delays
                               if not d or s in delayable()))


def delayable() -> tuple[str, ...]:
    return tuple(str(s.kind) for s in SUPPORT)


def by_path(storage: str) -> bool:
    """`storage` is delayed through a delayed network path (its client in a namespace)."""
    return any(str(s.kind) == storage and s.by_path for s in SUPPORT)


def check(storage: str, us: int) -> None:
    """A one-line error unless `storage` can be delayed by `us` (0: always fine)."""
    if us and storage not in delayable():
        own = " or ".join(str(s.kind) for s in SUPPORT if not s.by_path)
        path = " and ".join(str(s.kind) for s in SUPPORT if s.by_path)
        raise UsageError(f"--storage-delay takes a network storage: --storage {own} only "
                         f"through its own delay translator, {path} through a delayed network "
                         f"path; {storage} storage has no delay: drop the option or pick one "
                         "of those")


__all__ = ["MAX_US", "METADATA_FOPS", "SUPPORT", "DelaySupport", "axis", "by_path", "check",
           "delayable", "format_us", "label", "parse", "parse_list", "split", "tag"]
