"""The OpenAFS facts of a code tree, judged by model/rules_afs.py on their own: the mount's
cache sizes (its running client's) and the files and directories the code tree holds.

`statstorm check` judges the same rule with all its facts once the rule is registered in
model/rules.py and mounts.describe() fills an OpenAFS mount's cache options from
afs_client.cache_options (docs/lab-afs-notes.md); this is what the AFS benchmark and tests
call, and what a pool's facts reduce to for this one rule.
"""

from __future__ import annotations

import os
from dataclasses import replace

from statstorm.adapters.storage import afs_client, mounts
from statstorm.model import rules_afs
from statstorm.model.checkfacts import Facts, MountFact
from statstorm.model.finding import Finding
from statstorm.model.storage_kinds import STORAGE
from statstorm.results.facts import with_parents
from statstorm.results.storage_kind import StorageKind

PHP_SUFFIXES = (".php", ".inc")


def tree_entries(root: str) -> tuple[int, int]:
    """(PHP files, PHP files and their directories) under `root`, its own dirs counted once."""
    files = [os.path.join(d, f) for d, _, names in os.walk(root) for f in names
             if f.endswith(PHP_SUFFIXES)]
    top = os.path.dirname(root.rstrip("/"))
    return len(files), len(with_parents(files) - with_parents([top]))


def mount_fact(code: str) -> MountFact | None:
    """The OpenAFS mount holding `code` as check's facts name it, its client's cache sizes
    read; None when `code` is not on one."""
    entry = mounts.find_mount(mounts.current(), os.path.realpath(code))
    if entry is None or not afs_client.is_afs(entry.mount_point):
        return None
    return MountFact(role="docroot", path=code, mount_point=entry.mount_point,
                     fstype=entry.fstype, kind=STORAGE[StorageKind.OPENAFS].label,
                     cache_options=afs_client.mount_cache_options(entry.mount_point))


def findings(code: str, pool: str = "", facts: Facts | None = None) -> list[Finding]:
    """The OpenAFS rule's findings for code under `code` (with `facts`' trace when given)."""
    m = mount_fact(code)
    if m is None:
        return []
    php, entries = tree_entries(code)
    base = facts or Facts(pool=pool, settings={})
    f = replace(base, mounts=(m,), php_files=php, tree_entries=entries)
    return [replace(x, id=rule_id, pool=f.pool) for rule_id, fn in rules_afs.RULES
            for x in fn(f)]


__all__ = ["findings", "mount_fact", "tree_entries"]
