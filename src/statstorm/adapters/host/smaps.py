"""What a process's memory really is, from /proc/PID/smaps_rollup (or smaps on old kernels):
its proportional set size (PSS: private pages plus its fair share of shared ones, so the PSS
of a server's processes adds up to what they cost together) and its huge pages —
`AnonHugePages` (transparent huge pages of anonymous memory: where
`opcache.huge_code_pages` copies PHP's code) and `FilePmdMapped` (file pages mapped with
huge pages)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

_FIELDS = {"Pss": "pss_kb", "Rss": "rss_kb", "AnonHugePages": "anon_huge_kb",
           "FilePmdMapped": "file_pmd_kb", "ShmemPmdMapped": "shmem_pmd_kb"}


@dataclass(frozen=True)
class ProcessMemory:
    """One process's memory, kB."""

    pid: int
    pss_kb: int = 0
    rss_kb: int = 0
    anon_huge_kb: int = 0
    file_pmd_kb: int = 0
    shmem_pmd_kb: int = 0

    @property
    def huge_kb(self) -> int:
        return self.anon_huge_kb + self.file_pmd_kb + self.shmem_pmd_kb


def parse(text: str, pid: int = 0) -> ProcessMemory:
    """smaps_rollup (one set of totals) or smaps (one set per mapping, summed) → totals."""
    totals = dict.fromkeys(_FIELDS.values(), 0)
    for m in re.finditer(r"^(\w+):\s+(\d+) kB", text, re.M):
        key = _FIELDS.get(m.group(1))
        if key:
            totals[key] += int(m.group(2))
    return ProcessMemory(pid=pid, **totals)


def read(pid: int) -> ProcessMemory | None:
    """The process's memory; None when it is gone or not readable."""
    for name in ("smaps_rollup", "smaps"):
        try:
            return parse(Path(f"/proc/{pid}/{name}").read_text(), pid)
        except FileNotFoundError:
            continue
        except (ProcessLookupError, PermissionError, OSError):
            return None
    return None


def read_all(pids: Iterable[int]) -> list[ProcessMemory]:
    """The memory of each process still there (those that ended meanwhile are left out)."""
    return [m for m in (read(p) for p in pids) if m is not None]
