"""An OpenAFS file server's RPC counts: the round trips its clients made, read with
`xstat_fs_test -collID 2` (AFS_XSTATSCOLL_FULL_PERF_INFO: for each RPC, the calls served and
how many succeeded, since the server started).

Every client of the server counts (a lab's cell has one: its afsd.fuse). The statistics
calls of the reader itself (GetXStats, XStatsVersion, GetStatistics) are left out of the
round trips. Parsers take text, so they are tested on captures from the lab
(tests/fixtures/afs/).
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from statstorm.env import Env
from statstorm.errors import ComponentError, DependencyError

XSTAT_FS = "xstat_fs_test"
FULL_PERF = "2"  # AFS_XSTATSCOLL_FULL_PERF_INFO
HEADER = "AFS_XSTATSCOLL_FULL_PERF_INFO"
# the reader's own calls and the server's answers to monitoring: not PHP's round trips
OWN_CALLS = frozenset({"GetXStats", "XStatsVersion", "GetStatistics", "GetStatistics64"})
# the RPCs that fetch a file's status: what a too-small stat cache repeats
STATUS_CALLS = frozenset({"FetchStatus", "BulkStatus", "InlineBulkStatus"})
_OP = re.compile(r"^\s*(\w+): (\d+) ops \((\d+) OK\)")
_PROBE = re.compile(r"for FS (\S+)")


@dataclass(frozen=True)
class XstatSnapshot:
    """One probe of a file server's RPC counts."""

    server: str
    ops: dict[str, int]  # RPC → calls served since the server started
    ok: dict[str, int]  # RPC → of those, the ones that succeeded


def parse(text: str) -> XstatSnapshot:
    """`xstat_fs_test -collID 2 -onceonly`'s output → its RPC counts. ComponentError when it
    holds no full performance collection (the server did not answer)."""
    if HEADER not in text:
        first = next((line.strip() for line in text.splitlines() if line.strip()), "no output")
        raise ComponentError(f"xstat_fs_test returned no RPC statistics ({first})")
    m = _PROBE.search(text)
    ops: dict[str, int] = {}
    ok: dict[str, int] = {}
    for line in text.splitlines():
        om = _OP.match(line)
        if om:
            name = om.group(1)
            ops[name] = ops.get(name, 0) + int(om.group(2))
            ok[name] = ok.get(name, 0) + int(om.group(3))
    return XstatSnapshot(m.group(1) if m else "", ops, ok)


def delta(before: XstatSnapshot, after: XstatSnapshot) -> dict[str, int]:
    """The RPCs served between two probes, the reader's own left out (a server restarted in
    between counts from zero)."""
    out = {}
    for name, n in after.ops.items():
        if name in OWN_CALLS:
            continue
        d = n - before.ops.get(name, 0)
        if d < 0:
            d = n
        if d:
            out[name] = d
    return out


def round_trips(calls: Mapping[str, int]) -> int:
    return sum(calls.values())


def status_fetches(calls: Mapping[str, int]) -> int:
    """The status fetches among them (FetchStatus, BulkStatus, InlineBulkStatus)."""
    return sum(n for k, n in calls.items() if k in STATUS_CALLS)


def snapshot(env: Env, server: str) -> XstatSnapshot:
    """Probe `server`'s file server once."""
    if not shutil.which(XSTAT_FS):
        raise DependencyError(f"{XSTAT_FS} is missing: install openafs-client")
    res = env.run([XSTAT_FS, "-fsname", server, "-collID", FULL_PERF, "-onceonly"],
                  check=False, what=f"xstat_fs_test of {server}", timeout=30)
    return parse(res.stdout + res.stderr)


def cell_servers(conf_dir: Path) -> list[str]:
    """The addresses a client's CellServDB names for its own cell (ThisCell): in a cell whose
    database servers are its file servers (a lab's), the file servers to probe."""
    try:
        cell = (conf_dir / "ThisCell").read_text().strip()
        lines = (conf_dir / "CellServDB").read_text().splitlines()
    except OSError:
        return []
    out: list[str] = []
    mine = False
    for line in lines:
        if line.startswith(">"):
            mine = line[1:].split()[0] == cell if line[1:].split() else False
        elif mine and line.strip() and not line.lstrip().startswith("#"):
            out.append(line.split()[0])
    return out


__all__ = ["OWN_CALLS", "STATUS_CALLS", "XstatSnapshot", "cell_servers", "delta", "parse",
           "round_trips", "snapshot", "status_fetches"]
