"""Memory and huge pages as the kernel reports them: /proc/meminfo, the THP mode, where a
process's code is mapped. (Per-process PSS and huge pages: adapters.smaps.)"""

from __future__ import annotations

import re
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


def thp_mode(text: str) -> str:
    """`always [madvise] never` → madvise."""
    m = re.search(r"\[(\w+)\]", text)
    return m.group(1) if m else ""


def meminfo() -> dict[str, int]:
    try:
        return parse_meminfo(Path("/proc/meminfo").read_text())
    except OSError:
        return {}


def thp_enabled() -> str:
    """The kernel's transparent huge page mode (`always`, `madvise`, `never`; '' unknown)."""
    try:
        return thp_mode(Path(THP).read_text())
    except OSError:
        return ""


def hugepages(info: dict[str, int]) -> HugePageFacts:
    return HugePageFacts(thp_enabled=thp_enabled(), nr_hugepages=info.get("HugePages_Total", 0),
                         free_hugepages=info.get("HugePages_Free", 0),
                         page_kb=info.get("Hugepagesize", 2048))


def code_window(pid: int) -> tuple[str, int, int] | None:
    """The first executable file mapping of a process (what `opcache.huge_code_pages` looks
    at: PHP remaps only that one, the main binary's code): (path, start, end), or None."""
    try:
        lines = Path(f"/proc/{pid}/maps").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split()
        if len(parts) >= 6 and parts[1].startswith("r-x") and parts[5].startswith("/"):
            start, _, end = parts[0].partition("-")
            return parts[5], int(start, 16), int(end, 16)
    return None
