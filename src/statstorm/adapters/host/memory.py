"""Memory and huge pages as the kernel reports them: /proc/meminfo, the THP mode, where a
process's code is mapped. (Per-process PSS and huge pages: adapters.smaps.)"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from statstorm.results.facts import HugePageFacts

THP = "/sys/kernel/mm/transparent_hugepage/enabled"


def parse_meminfo(text: str) -> dict[str, int]:
    """`/proc/meminfo` → {field: value} (kB, or a count for HugePages_*)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        m = re.match(r"(\S+):\s+(\d+)", line)
        if m:
            out[m.group(1)] = int(m.group(2))
    return out


@dataclass(frozen=True)
class MemInfo:
    """What the checks read of `/proc/meminfo` (kB; None: not reported)."""

    total_kb: int | None = None  # MemTotal
    available_kb: int | None = None  # MemAvailable
    hugepages_total: int = 0  # HugePages_Total (a count)
    hugepages_free: int = 0  # HugePages_Free
    hugepage_kb: int = 2048  # Hugepagesize

    @classmethod
    def parse(cls, text: str) -> MemInfo:
        total = available = None
        hp_total, hp_free, hp_kb = 0, 0, 2048
        for name, v in parse_meminfo(text).items():
            match name:
                case "MemTotal":
                    total = v
                case "MemAvailable":
                    available = v
                case "HugePages_Total":
                    hp_total = v
                case "HugePages_Free":
                    hp_free = v
                case "Hugepagesize":
                    hp_kb = v
        return cls(total, available, hp_total, hp_free, hp_kb)


def thp_mode(text: str) -> str:
    """`always [madvise] never` → madvise."""
    m = re.search(r"\[(\w+)\]", text)
    return m.group(1) if m else ""


def meminfo() -> MemInfo:
    try:
        return MemInfo.parse(Path("/proc/meminfo").read_text())
    except OSError:
        return MemInfo()


def thp_enabled() -> str:
    """The kernel's transparent huge page mode (`always`, `madvise`, `never`; '' unknown)."""
    try:
        return thp_mode(Path(THP).read_text())
    except OSError:
        return ""


def hugepages(info: MemInfo) -> HugePageFacts:
    return HugePageFacts(thp_enabled=thp_enabled(), nr_hugepages=info.hugepages_total,
                         free_hugepages=info.hugepages_free, page_kb=info.hugepage_kb)


def code_window(pid: int) -> tuple[str, int, int] | None:
    """The first executable file mapping of a process (what `opcache.huge_code_pages` looks
    at: PHP remaps only that one, the main binary's code): (path, start, end), or None.
    Anonymous executable memory shown as a device file is skipped: PHP 8.4's JIT buffer is a
    shared `/dev/zero` mapping and comes before the binary's code."""
    try:
        lines = Path(f"/proc/{pid}/maps").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split()
        if len(parts) >= 6 and parts[1].startswith("r-x") and parts[5].startswith("/") \
                and not parts[5].startswith("/dev/"):
            start, _, end = parts[0].partition("-")
            return parts[5], int(start, 16), int(end, 16)
    return None
