"""The PHP versions a lab can run, and a PHP root: a Debian tree of another release, made
once with debootstrap under the state root (`<state root>/php-roots/<version>`), whose
php-fpm a lab runs chrooted (adapters/labs/php_roots.py).

`PhpRoot` is written as the root's marker file, `<root>/.statstorm-php-root.json`, only
once the root is whole: a directory without it is a root whose build did not finish.
"""

from __future__ import annotations

from dataclasses import dataclass

from statstorm.errors import UsageError
from statstorm.results import jsonread as jr
from statstorm.results.common import known_fields
from statstorm.results.jsontypes import JsonObject, JsonValue

KIND = "php-root"
VERSION = 1
SCHEMA = f"statstorm.{KIND}/{VERSION}"
MARKER = ".statstorm-php-root.json"
HEADERS = "usr/include/php"  # in a root: <API>/main/php.h, unpacked from dev_package


@dataclass(frozen=True)
class PhpRelease:
    """One PHP version a lab can run: `release` '' is the host's own PHP (no root)."""

    version: str  # "8.4": Debian's package names carry it (php8.4-fpm)
    release: str  # the Debian release whose packages hold it: bullseye, trixie; '' = host

    @property
    def host(self) -> bool:
        return not self.release

    @property
    def fpm(self) -> str:
        """The php-fpm binary, inside the root for another release."""
        return f"/usr/sbin/php-fpm{self.version}"

    @property
    def cli(self) -> str:
        return f"/usr/bin/php{self.version}"

    @property
    def dev_package(self) -> str:
        """The package of PHP's headers (unpacked in the root, not installed: the tracer
        reads PHP's layout from them)."""
        return f"php{self.version}-dev"

    @property
    def apcu_package(self) -> str:
        """APCu for this release's PHP (its apcu.so unpacked in the root, not installed:
        `apply` loads it into the one pool that needs it, as on the host): trixie names it
        by the version (php-apcu only depends on it there), bullseye had php-apcu alone."""
        return "php-apcu" if self.release == "bullseye" else f"php{self.version}-apcu"

    def packages(self) -> tuple[str, ...]:
        """What a lab's apps need of PHP (as scripts/setup.sh --lab installs for the host's),
        OPcache included."""
        return tuple(f"php{self.version}-{ext}" for ext in
                     ("fpm", "cli", "opcache", "sqlite3", "mysql", "mbstring", "xml", "intl"))


# The one table of PHP versions: a new one is one entry (its Debian release).
HOST_VERSION = "8.2"  # Debian 12's PHP: the host's packages, today's labs
RELEASES: dict[str, PhpRelease] = {
    "7.4": PhpRelease("7.4", "bullseye"),
    HOST_VERSION: PhpRelease(HOST_VERSION, ""),
    "8.4": PhpRelease("8.4", "trixie"),
}


def release(version: str, flag: str = "--php") -> PhpRelease:
    """The release of `version` ("8.4", also "8.4.11" or "php8.4"); a one-line UsageError
    naming the versions there are."""
    text = version.strip().lower().removeprefix("php")
    parts = text.split(".")
    key = ".".join(parts[:2]) if len(parts) >= 2 and all(p.isdigit() for p in parts) else text
    found = RELEASES.get(key)
    if found is None:
        raise UsageError(f"{flag} {version!r}: statstorm runs PHP "
                         f"{', '.join(sorted(RELEASES, key=_numeric))}; pick one of those")
    return found


def _numeric(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def other_releases() -> list[PhpRelease]:
    """The versions that need a root (not the host's own)."""
    return [r for v, r in sorted(RELEASES.items(), key=lambda kv: _numeric(kv[0])) if not r.host]


@dataclass(frozen=True)
class PhpRoot:
    """A finished PHP root, as its marker records it (and `lab php-root list` shows it)."""

    version: str  # "8.4"
    release: str  # "trixie"
    path: str  # the root's directory
    php_version: str  # PHP_VERSION inside, e.g. "8.4.11"
    mirror: str  # the Debian mirror it was made from
    packages: tuple[str, ...] = ()
    build_seconds: float = 0.0
    built_at: str = ""  # UTC, ISO 8601
    size_bytes: int = 0  # filled by `list` (du), not stored
    in_use_by: tuple[str, ...] = ()  # labs whose php-fpm runs in it now (live, not stored)

    def to_json(self) -> JsonObject:
        return {"schema": SCHEMA, "version": self.version, "release": self.release,
                "path": self.path, "php_version": self.php_version, "mirror": self.mirror,
                "packages": list(self.packages), "build_seconds": round(self.build_seconds, 1),
                "built_at": self.built_at, "size_bytes": self.size_bytes,
                "in_use_by": list(self.in_use_by)}

    @classmethod
    def from_json(cls, data: JsonValue) -> PhpRoot:
        d = jr.obj(data, "PhpRoot")
        known = known_fields(cls, d, mirror="", php_version="")
        for key in ("version", "release", "path"):
            if not isinstance(known.get(key), str):
                raise UsageError(f"PHP root marker: {key!r} missing; rebuild the root")
        known["packages"] = tuple(str(p) for p in jr.lst(d, "packages"))
        known["in_use_by"] = ()
        known["build_seconds"] = jr.num(d, "build_seconds")
        known["size_bytes"] = int(jr.num(d, "size_bytes"))
        return cls(**known)
