"""An OpenAFS client's cache sizes (and afsd.fuse's FUSE timeouts) from its command line and
its cacheinfo file: what `mounts.describe()` shows as an OpenAFS mount's cache options (it
imports nothing of the other storage modules, so mounts.py may import it). The sizes afsd
computes itself: model/afs_cache.py; the timeouts: model/afs_fuse.py.
"""

from __future__ import annotations

from pathlib import Path

from statstorm.model import afs_cache, afs_fuse
from statstorm.model.storage_kinds import STORAGE
from statstorm.results.storage_kind import StorageKind

DEFAULT_CONF = Path("/etc/openafs")  # afsd's -confdir when none is given (Debian)
FUSE_CLIENT = STORAGE[StorageKind.OPENAFS].client  # afsd.fuse


def cacheinfo_blocks(conf_dir: Path) -> int | None:
    """The third field of the client's cacheinfo (`mount:cachedir:blocks`)."""
    try:
        text = (conf_dir / "cacheinfo").read_text().strip()
        return int(text.split(":")[2])
    except (OSError, IndexError, ValueError):
        return None


def cache_options(argv: list[str]) -> dict[str, str]:
    """The cache sizes a client with this command line runs with (the autotuned ones too)."""
    flags = afs_cache.afsd_flags(argv)
    conf = Path(flags.get("confdir") or DEFAULT_CONF)
    out = afs_cache.effective(flags, cacheinfo_blocks(conf))
    out[afs_cache.CLIENT] = Path(argv[0]).name if argv else ""
    if out[afs_cache.CLIENT] == FUSE_CLIENT:  # the kernel's timeouts of what it answered
        out.update(afs_fuse.effective(argv))
    return out


__all__ = ["DEFAULT_CONF", "cache_options", "cacheinfo_blocks"]
