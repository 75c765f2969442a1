#!/usr/bin/env python3
"""The table of PHP layouts the compiled tracer reads PHP with, made from each version's own
headers: src/statstorm/bpf/php_layouts.json.

For each PHP version a distribution ships, its `phpX.Y-dev` package is downloaded from the
distribution's archive (verified against the archive's index, or against the hash the table
recorded), unpacked (never installed) and `src/statstorm/bpf/php_layout.c` is compiled against
its headers and run: the #define lines it prints are the version's entry, keyed by PHP's build
id (ZEND_MODULE_BUILD_ID: the module API number and NTS), which the tracer finds in a PHP
binary at run time (adapters/tracing/php_layouts.py). The downloaded packages are kept under
$STATSTORM_PHP_HEADERS_CACHE (default /var/tmp/statstorm-php-headers).

  scripts/php_layouts.py --update      the newest package of each version, from the archives'
                                       indexes: the table rewritten (say so in the commit)
  scripts/php_layouts.py --check       each entry made again from the package it names; exit
                                       1 naming every field that differs (tests, package.sh)
  scripts/php_layouts.py --out FILE    the table made again from the packages it names, into
                                       FILE (scripts/package.sh: made at package time)

Needs a C compiler (cc) and dpkg-deb: a build machine's tools, not a server's."""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import os
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
TABLE = HERE / "src/statstorm/bpf/php_layouts.json"
sys.path.insert(0, str(HERE / "src"))  # the standard library only, as Debian's python3 has it
from statstorm.adapters.tracing import php_layout_program as program  # noqa: E402
SCHEMA = "statstorm.php_layouts/1"
DEBIAN = os.environ.get("STATSTORM_DEBIAN_MIRROR", "http://deb.debian.org/debian")
UBUNTU = os.environ.get("STATSTORM_UBUNTU_MIRROR", "http://archive.ubuntu.com/ubuntu")
# (PHP version, archive, suite, what the archive is). PHP 8.0 is in no release either
# archive still serves: a PHP 8.0 binary is traced by probing (adapters/tracing/php_layouts.py).
SOURCES = (
    ("7.4", DEBIAN, "bullseye", "Debian 11"),
    ("8.1", UBUNTU, "jammy", "Ubuntu 22.04"),
    ("8.2", DEBIAN, "bookworm", "Debian 12"),
    ("8.3", UBUNTU, "noble", "Ubuntu 24.04"),
    ("8.4", DEBIAN, "trixie", "Debian 13"),
)


class Failed(Exception):
    """One line saying what failed and how to fix it."""


def cache_dir() -> Path:
    return Path(os.environ.get("STATSTORM_PHP_HEADERS_CACHE", "/var/tmp/statstorm-php-headers"))


def _get(url: str) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=120) as r:
            return bytes(r.read())
    except OSError as exc:
        raise Failed(f"cannot fetch {url} ({exc}): is the archive reachable?") from None


def newest(php: str, archive: str, suite: str) -> dict[str, str]:
    """The php<php>-dev package in `suite`'s main index: its version, pool file and hash."""
    index = lzma.decompress(_get(f"{archive}/dists/{suite}/main/binary-amd64/Packages.xz"))
    want = f"php{php}-dev"
    for stanza in index.decode(errors="replace").split("\n\n"):
        fields = dict(line.split(": ", 1) for line in stanza.splitlines()
                      if ": " in line and not line.startswith(" "))
        if fields.get("Package") == want:
            return {"package": want, "version": fields["Version"],
                    "file": fields["Filename"], "sha256": fields["SHA256"]}
    raise Failed(f"{want} is not in {archive} {suite} main")


def fetch(archive: str, entry: dict[str, str]) -> Path:
    """The package `entry` names, from the cache or the archive, its hash checked."""
    cached = cache_dir() / Path(entry["file"]).name
    if cached.is_file() and hashlib.sha256(cached.read_bytes()).hexdigest() == entry["sha256"]:
        return cached
    data = _get(f"{archive}/{entry['file']}")
    if hashlib.sha256(data).hexdigest() != entry["sha256"]:
        raise Failed(f"{entry['file']} from {archive} does not have the hash the index gives")
    cached.parent.mkdir(parents=True, exist_ok=True)
    tmp = cached.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_bytes(data)
    tmp.replace(cached)
    return cached


def layout(deb: Path) -> tuple[str, str, dict[str, str]]:
    """php_layout.c compiled against the headers in `deb` and run
    (adapters/tracing/php_layout_program.py): the PHP version the headers are of, its build
    id and the fields."""
    with tempfile.TemporaryDirectory(prefix="statstorm-layouts-") as tmp:
        subprocess.run(["dpkg-deb", "-x", str(deb), tmp], check=True)
        found = sorted(Path(tmp, "usr/include/php").glob("20*/main/php.h"))
        if not found:
            raise Failed(f"{deb.name} holds no PHP headers (usr/include/php/API/main/php.h)")
        try:
            text = program.printed(found[-1].parents[1], f"{deb.name}'s headers")
        except program.NoLayout as exc:
            raise Failed(f"{exc}: install gcc" if "no C compiler" in str(exc)
                         else str(exc)) from None
    fields = program.fields(text)
    build = fields.pop("BUILD_ID", "")
    full = program.made_from(text)
    if not full or not build:
        raise Failed(f"php_layout.c printed no build id for {deb.name}")
    return full, build, fields


def entry_for(php: str, archive: str, suite: str, label: str,
              package: dict[str, str]) -> dict[str, object]:
    full, build, fields = layout(fetch(archive, package))
    if not full.startswith(php + "."):
        raise Failed(f"{package['file']} holds the headers of PHP {full}, not {php}")
    return {"php": php, "php_version": full, "build_id": build,
            "from": {"archive": archive, "suite": suite, "distribution": label, **package},
            "fields": fields}


def table(entries: list[dict[str, object]]) -> str:
    return json.dumps({"schema": SCHEMA, "made_by": "scripts/php_layouts.py",
                       "layouts": entries}, indent=1, sort_keys=True) + "\n"


def remade(current: dict[str, object]) -> list[dict[str, object]]:
    """Each entry of `current` made again from the package it names."""
    out = []
    for e in current["layouts"]:  # type: ignore[union-attr]
        src = dict(e["from"])
        package = {k: src[k] for k in ("package", "version", "file", "sha256")}
        out.append(entry_for(e["php"], src["archive"], src["suite"], src["distribution"],
                             package))
    return out


def differences(old: list[dict[str, object]], new: list[dict[str, object]]) -> list[str]:
    by = {str(e["php"]): e for e in new}
    out = []
    for e in old:
        got = by.get(str(e["php"]))
        if got is None:
            out.append(f"PHP {e['php']}: not made again")
            continue
        for key in ("build_id", "php_version"):
            if e[key] != got[key]:
                out.append(f"PHP {e['php']}: {key} {e[key]} in the table, {got[key]} made")
        fields_old, fields_new = dict(e["fields"]), dict(got["fields"])  # type: ignore[arg-type]
        for name in sorted(set(fields_old) | set(fields_new)):
            if fields_old.get(name) != fields_new.get(name):
                out.append(f"PHP {e['php']}: {name} {fields_old.get(name)} in the table, "
                           f"{fields_new.get(name)} from its headers")
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--update", action="store_true")
    mode.add_argument("--check", action="store_true")
    mode.add_argument("--out", type=Path)
    ap.add_argument("--table", type=Path, default=TABLE)
    args = ap.parse_args(argv)
    try:
        if args.update:
            entries = [entry_for(php, archive, suite, label, newest(php, archive, suite))
                       for php, archive, suite, label in SOURCES]
            args.table.write_text(table(entries))
            for e in entries:
                print(f"PHP {e['php_version']} {e['build_id']}: {e['from']['version']} "  # type: ignore[index]
                      f"({e['from']['distribution']})")  # type: ignore[index]
            return 0
        try:
            current = json.loads(args.table.read_text())
        except (OSError, ValueError) as exc:
            raise Failed(f"cannot read the table {args.table} ({exc})") from None
        entries = remade(current)
        if args.out:
            args.out.write_text(table(entries))
        diff = differences(current["layouts"], entries)
        for line in diff:
            print(f"php_layouts: {line}", file=sys.stderr)
        if diff:
            print("php_layouts: the table does not match the headers it names: "
                  "scripts/php_layouts.py --update", file=sys.stderr)
            return 1
        print(f"php_layouts: {len(entries)} layouts match their headers "
              f"({', '.join(str(e['php_version']) for e in entries)})")
        return 0
    except (Failed, subprocess.CalledProcessError) as exc:
        print(f"php_layouts: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
