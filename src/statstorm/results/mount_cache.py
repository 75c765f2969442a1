"""A mount's metadata-cache options as the rules read them: typed once from the option
strings a mount shows (`MountFact.cache_options` / `volume_options` keep them as text, as
`check --json` writes them). The option names are those of model/mount_options.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping


def _text(opts: Mapping[str, str], key: str) -> str | None:
    """The option's text (None: not given)."""
    return opts.get(key)


def _or(text: str | None, default: str) -> str:
    return default if text is None else text


def _seconds(text: str | None, default: float) -> float:
    """An option's seconds; `default` when absent, empty or not a number."""
    try:
        return float(text or default)
    except ValueError:
        return default


def _whole(opts: Mapping[str, str], key: str, default: int) -> int:
    """The option as a whole number (as PHP's ini reading: surrounding blanks allowed)."""
    text = _text(opts, key)
    try:
        return int(text.strip()) if text is not None else default
    except ValueError:
        return default


@dataclass(frozen=True)
class CacheOptions:
    """The metadata caching of a mount: NFS's attribute and lookup caches, GlusterFS's FUSE
    timeouts and its volume's md-cache and nl-cache (the defaults are the clients')."""

    acregmax: int = 60  # NFS: seconds a file's attributes are cached at most
    noac: bool = False  # NFS: no attribute cache at all
    lookupcache: str = "all"  # NFS: all | pos(itive) | none
    attribute_timeout: float = 1.0  # GlusterFS FUSE, seconds
    entry_timeout: float = 1.0
    negative_timeout: float = 0.0
    volume_read: bool = False  # GlusterFS: the volume's options were read
    # GlusterFS volume options as given (None: not among those read)
    md_cache_timeout: str | None = None  # performance.md-cache-timeout
    stat_prefetch: str | None = None  # performance.stat-prefetch
    nl_cache: str | None = None  # performance.nl-cache
    nl_cache_timeout: str | None = None  # performance.nl-cache-timeout
    sshfs_cache: bool = True  # sshfs: cache and dir_cache not off
    sshfs_stat_timeout: str = ""  # sshfs: seconds it serves stat/lookup from its cache

    @property
    def md_cache_seconds(self) -> float:
        """performance.md-cache-timeout in seconds (GlusterFS's default: 1)."""
        return _seconds(self.md_cache_timeout, 1.0)

    @property
    def nl_cache_state(self) -> str:
        """performance.nl-cache (GlusterFS's default: off)."""
        return _or(self.nl_cache, "off")

    @classmethod
    def of(cls, cache: Mapping[str, str], volume: Mapping[str, str]) -> CacheOptions:
        """From a mount's effective cache options and its volume's options."""
        return cls(acregmax=_whole(cache, "acregmax", 60), noac=_text(cache, "noac") == "yes",
                   lookupcache=_or(_text(cache, "lookupcache"), "all"),
                   attribute_timeout=_seconds(_text(cache, "attribute-timeout"), 1.0),
                   entry_timeout=_seconds(_text(cache, "entry-timeout"), 1.0),
                   negative_timeout=_seconds(_text(cache, "negative-timeout"), 0.0),
                   volume_read=bool(volume),
                   md_cache_timeout=_text(volume, "performance.md-cache-timeout"),
                   stat_prefetch=_text(volume, "performance.stat-prefetch"),
                   nl_cache=_text(volume, "performance.nl-cache"),
                   nl_cache_timeout=_text(volume, "performance.nl-cache-timeout"),
                   sshfs_cache=_or(_text(cache, "cache"), "yes") != "no"
                   and _text(cache, "dir_cache") != "no",
                   sshfs_stat_timeout=_text(cache, "cache_stat_timeout")
                   or _text(cache, "dcache_stat_timeout") or _or(_text(cache, "cache_timeout"), ""))
