"""The PHP a target runs: its version, and the PHP root it runs chrooted in when it is
another version than the host's (`lab up --php 7.4|8.4`, adapters/labs/php_roots.py).

Every reader of a target's settings runs that version's own binaries the way the target
runs them: the host's as they are, a root's inside the root (chroot), so what it reads is
that version's defaults and the root's ini files (`/etc/php/V/fpm` of the root). A target's
version comes from its binary's Debian name (`php-fpm8.4`), the host's when it names none.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from statstorm.adapters.labs import phpfpm
from statstorm.env import Env
from statstorm.model.php_versions import version_of
from statstorm.results.php_root import HOST_VERSION


@dataclass(frozen=True)
class PhpRuntime:
    """The PHP of one binary: version ("8.4"), root ('' for the host's) and the binary."""

    version: str
    root: str
    binary: str  # as this machine sees it (inside the root's directory for a root's)

    def argv(self, *args: str) -> list[str]:
        """The command that runs the binary with `args` as the target runs it."""
        return [*phpfpm.command(self.binary), *args]

    def host_path(self, path: str) -> Path:
        """Where a path the target's processes see lies on this machine."""
        return Path(self.root + path) if self.root else Path(path)

    def etc(self, sapi: str) -> str:
        """The SAPI's configuration directory as the processes see it (/etc/php/8.4/fpm)."""
        return f"/etc/php/{self.version}/{sapi}"

    @property
    def label(self) -> str:
        """`PHP 8.4 (chrooted in ROOT)`, `PHP 8.2`."""
        return f"PHP {self.version}" + (f" (chrooted in {self.root})" if self.root else "")


def of_binary(binary: str) -> PhpRuntime:
    """The runtime of a PHP binary: its root when it lies in one, its version by its name
    (the host's, Debian 12's 8.2, when the name carries none)."""
    return PhpRuntime(version_of(binary) or HOST_VERSION, phpfpm.root_of(binary), binary)


def host(version: str = HOST_VERSION) -> PhpRuntime:
    """The host's own PHP CLI of `version`."""
    return PhpRuntime(version, "", f"/usr/bin/php{version}")


@dataclass(frozen=True)
class Identity:
    """What a PHP binary says of itself in `-i`: its full version and the php.ini it loads."""

    php_version: str  # "8.4.11" ('' when -i did not say)
    ini_file: str  # as the processes see it ('' for none)
    scan_dir: str = ""

    def describe(self, runtime: PhpRuntime) -> str:
        where = f"chrooted in the PHP root {runtime.root}" if runtime.root else "the host's"
        return (f"PHP {self.php_version or runtime.version} ({where}): php.ini "
                f"{self.ini_file or '(none)'}" + (f", conf.d {self.scan_dir}" if self.scan_dir
                                                  else ""))


def parse_identity(php_i: str) -> Identity:
    """The version and the ini files from `php -i` / `php-fpm -i` output."""
    def field(name: str) -> str:
        m = re.search(rf"^{re.escape(name)} => (.*)$", php_i, re.M)
        value = m.group(1).strip() if m else ""
        return "" if value in ("(none)", "no value") else value
    return Identity(field("PHP Version"), field("Loaded Configuration File"),
                    field("Scan this dir for additional .ini files"))


def identity(env: Env, runtime: PhpRuntime, args: list[str]) -> Identity:
    """`-i` of the runtime's binary with `args` (its -y/-d options), run as the target runs."""
    res = env.run(runtime.argv("-i", *args), what=f"{Path(runtime.binary).name} -i",
                  check=False)
    return parse_identity(res.stdout)
