"""An OpenAFS client's cache sizes from its command line and its cacheinfo file: what
`mounts.describe()` shows as an OpenAFS mount's cache options (it imports nothing of the other
storage modules, so mounts.py may import it). The sizes afsd computes itself:
model/afs_cache.py.
"""

from __future__ import annotations

from pathlib import Path

from statstorm.model import afs_cache

DEFAULT_CONF = Path("/etc/openafs")  # afsd's -confdir when none is given (Debian)


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
    return out


__all__ = ["DEFAULT_CONF", "cache_options", "cacheinfo_blocks"]
