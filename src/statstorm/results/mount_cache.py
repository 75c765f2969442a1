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


def _number(opts: Mapping[str, str], key: str, default: float) -> float:
    """The option as a number; `default` when absent, empty or not a number."""
    try:
        return float(_text(opts, key) or default)
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
    md_cache_timeout: float = 1.0  # GlusterFS volume: performance.md-cache-timeout
    nl_cache: str = "off"  # GlusterFS volume: performance.nl-cache

    @classmethod
    def of(cls, cache: Mapping[str, str], volume: Mapping[str, str]) -> CacheOptions:
        """From a mount's effective cache options and its volume's options."""
        return cls(acregmax=_whole(cache, "acregmax", 60), noac=_text(cache, "noac") == "yes",
                   lookupcache=_or(_text(cache, "lookupcache"), "all"),
                   attribute_timeout=_number(cache, "attribute-timeout", 1.0),
                   entry_timeout=_number(cache, "entry-timeout", 1.0),
                   negative_timeout=_number(cache, "negative-timeout", 0.0),
                   volume_read=bool(volume),
                   md_cache_timeout=_number(volume, "performance.md-cache-timeout", 1.0),
                   nl_cache=_or(_text(volume, "performance.nl-cache"), "off"))
