"""Facts that the adapters measuring them and the model judging them share: huge pages as the
kernel reports them, and PHP's realpath-cache byte accounting of a set of paths (used for a
code tree on disk and for the paths a trace touched). Plain data and pure functions.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Iterable

# PHP >= 7.2 on 64-bit: sizeof(realpath_cache_bucket) (see docs/check.md, realpath cache).
REALPATH_BUCKET_BYTES = 48


@dataclass(frozen=True)
class HugePageFacts:
    thp_enabled: str  # always | madvise | never | "" (unknown)
    nr_hugepages: int
    free_hugepages: int
    page_kb: int


# -- realpath cache accounting -----------------------------------------------------------------
def with_parents(paths: Iterable[str]) -> set[str]:
    """Every absolute path and each of its parent directories (each is a realpath entry)."""
    out: set[str] = set()
    for p in paths:
        if not p.startswith("/"):
            continue
        p = p.rstrip("/") or "/"
        while p not in out and p != "/":
            out.add(p)
            p = posixpath.dirname(p)
    return out


def realpath_bytes(entries: Iterable[str]) -> tuple[int, int]:
    """(entries, bytes) the realpath cache needs to hold these keys: 48 + len + 1 each
    (symlinked keys need their target's length + 1 more; not counted)."""
    n = total = 0
    for e in entries:
        n += 1
        total += REALPATH_BUCKET_BYTES + len(e.encode("utf-8", "surrogateescape")) + 1
    return n, total


@dataclass(frozen=True)
class ApacheFacts:
    """An Apache server in front of PHP, as its configuration and processes show it."""

    config: str  # the main configuration file
    mpm: str  # event | worker | prefork
    handler: str  # mod_php | fpm | fcgid | "" (PHP is served some other way)
    max_request_workers: int  # effective (the MPM's default where unset)
    server_limit: int
    threads_per_child: int  # 1 for prefork
    docroot: str
    # (directory, AllowOverride, Options) in effect from / down to the docroot, each after
    # merging the <Directory> sections that cover it (shortest path first, as Apache does)
    walk: tuple[tuple[str, str, str], ...] = ()
    htaccess_files: tuple[str, ...] = ()  # .htaccess files under the docroot (rules in them)
    directory_source: str = ""  # file:line of the <Directory> block for the docroot, if any
    fcgid_max_processes: int | None = None  # FcgidMaxProcessesPerClass (fcgid only)
    child_pss_kb: tuple[int, ...] = ()  # the server's PHP-running children (mod_php)
