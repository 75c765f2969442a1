"""What the compiled tracer knows of the PHP it probes: the layout of a PHP version, from that
version's own headers.

The layouts of the PHP versions the distributions ship (7.4, 8.1, 8.2, 8.3, 8.4) are a table
made from each version's `phpX.Y-dev` headers at package time (scripts/php_layouts.py,
`statstorm/bpf/php_layouts.json`), keyed by PHP's build id (ZEND_MODULE_BUILD_ID, which
every PHP binary holds): a PHP whose build id is in the table is traced with its layout,
given to the loader as `--layout`, with no header and no compiler on the host. Otherwise:

- a PHP from a root (`lab up --php VERSION`) gets its layout from the root's own headers:
  `statstorm/bpf/php_layout.c` compiled against them and run, cached under the state root
  by the binary's build id and the program's hash, so a trace compiles nothing after the
  first;
- the host's PHP of the build whose layout the loader was built with (build.sh, from the
  php8.2-dev headers scripts/setup.sh --lab unpacks) keeps that one (the loader looks for that
  build id in the binary: php_table.c `layout_fits`).

The layout says where the included-files table lies, how its entries and a file handle are
laid out, where the SAPI keeps the request's script (PHP 8.4 in Debian 13 has no USDT
probes) and the version (before 8.1 file names are passed as C strings).

A root's PHP whose layout is not known (no headers, headers of another build, a thread-safe
build, no compiler) is traced without PHP's function probes (`--ops 0`): its requests and
their syscalls are counted, none is attributed to a PHP operation. The host's PHP of an
unknown build (PHP 8.0, a debug or a thread-safe build) keeps its operations, but each
include's zend_stream_open is probed instead of PHP's included-files table being read. Either
way `PhpLayout.note` says so in one line, and `source` what the layout came from (the trace
header's `php_layout`; `coverage` for doctor)."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from statstorm.adapters.host import elf
from statstorm.adapters.labs import php_roots
from statstorm.adapters.tracing import libbpf_trace, php_layout_program as program
from statstorm.env import Env
from statstorm.results.host_facts import Coverage

SOURCE = program.PROGRAM
TABLE = SOURCE.with_name("php_layouts.json")  # made by scripts/php_layouts.py
TABLE_ENV = "STATSTORM_PHP_LAYOUTS"  # another table to read instead (a newer one, a test's)
DEFINE = program.DEFINE
NOT_ATTRIBUTED = ("syscalls are counted per request but not attributed to PHP operations "
                  "(includes, stats, realpaths)")
# ZEND_MODULE_BUILD_ID: "API" the module API number, ",NTS" or ",TS", then ",debug" and extras
BUILD_ID = re.compile(rb"API\d{8},N?TS(?:,[A-Za-z0-9_.-]+)*")
PROBED = ("its includes are probed at every zend_stream_open instead of read from PHP's "
          "included-files table (more traps per request)")


class Source(StrEnum):
    """Where a trace's PHP layout came from (the trace header's `php_layout.source`)."""

    TABLE = "table"  # the package's table, by the binary's build id
    HEADERS = "headers"  # a PHP root's own headers, compiled here
    BUILT_IN = "built-in"  # the one compiled into the loader
    PROBES = "probes"  # none: each include's zend_stream_open probed
    NONE = "none"  # none: counted, not attributed (--ops 0)


@dataclass(frozen=True)
class PhpLayout:
    """The loader's arguments for the binaries it probes, and the one line saying what it
    cannot attribute (and why) when their layout is not known."""

    args: tuple[str, ...] = ()  # () the built-in layout, or none (probing includes)
    note: str = ""
    version: str = ""  # the PHP version the layout came from ('' built-in or none)
    source: Source = Source.BUILT_IN

    @property
    def attributes(self) -> bool:
        return "--ops" not in self.args

    def header(self) -> dict[str, object]:
        """The trace header's `php_layout`."""
        return {"version": self.version, "attributed": self.attributes, "note": self.note,
                "source": self.source.value}


@dataclass(frozen=True)
class Known:
    """One entry of the table: a PHP version's layout, from the headers of one package."""

    php: str  # "8.2"
    php_version: str  # the headers' own, "8.2.29"
    build_id: str  # "API20220829,NTS"
    origin: str  # "php8.2-dev 8.2.29-1~deb12u1 (Debian 12)"
    fields: tuple[tuple[str, str], ...]

    def arg(self) -> str:
        return ";".join(f"{k}={v}" for k, v in (("BUILD_ID", self.build_id), *self.fields))


class Unknown(Exception):
    """This PHP's layout cannot be known (the message says why)."""


def table(path: Path | None = None) -> tuple[Known, ...]:
    """The table's layouts ($STATSTORM_PHP_LAYOUTS, else the package's; none when it is
    missing or cannot be read: PHP is then traced as for a build not in it)."""
    return _read_table(path or Path(os.environ.get(TABLE_ENV) or TABLE))


@functools.lru_cache(maxsize=4)
def _read_table(path: Path) -> tuple[Known, ...]:
    try:
        data = json.loads(path.read_text())
        return tuple(Known(str(e["php"]), str(e["php_version"]), str(e["build_id"]),
                           f"{e['from']['package']} {e['from']['version']} "
                           f"({e['from']['distribution']})",
                           tuple(sorted((str(k), str(v)) for k, v in e["fields"].items())))
                     for e in data["layouts"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return ()


def known(binary: str) -> Known | None:
    """The table's layout of this PHP binary's build ([] of its build ids: not a PHP, or
    not readable), or None."""
    ids = build_ids(binary)
    return next((k for k in table() if k.build_id in ids), None)


def for_binaries(env: Env, binaries: list[str], builtin: str | None = None) -> PhpLayout:
    """The layout for the PHP binaries a trace probes: the table's for a known build; else
    computed from a root's own headers for a root's, none (counts only, with the reason)
    when it cannot be; the loader's built-in one for the host's PHP of its build, none
    (probing includes, with the reason) for another. `builtin`: the build id of the layout
    compiled into the loader (None: read from the loader found here)."""
    found = [known(b) for b in binaries]
    if binaries and all(found) and len({k.build_id for k in found if k}) == 1:
        k = found[0]
        assert k is not None
        return PhpLayout(("--layout", k.arg()), version=k.php, source=Source.TABLE)
    rooted = [b for b in binaries if php_roots.root_of(b) is not None]
    if not rooted:
        return _host(binaries, builtin)
    try:
        if len(rooted) != len(binaries):
            raise Unknown("the host's PHP and a PHP root's are probed together, and the "
                          "tracer reads one PHP's layout at a time")
        layouts = {b: layout_of(env, b) for b in rooted}
        if len(set(layouts.values())) > 1:
            raise Unknown("PHP binaries of different versions are probed together, and the "
                          "tracer reads one PHP's layout at a time")
    except Unknown as exc:
        return PhpLayout(("--ops", "0"), f"PHP at {', '.join(rooted)}: {NOT_ATTRIBUTED}: {exc}",
                         source=Source.NONE)
    fields = next(iter(layouts.values()))
    arg = ";".join(f"{k}={v}" for k, v in fields)
    version = dict(fields).get("VERSION_NUM", "0")
    major, minor = int(version) // 10000, int(version) // 100 % 100
    return PhpLayout(("--layout", arg), version=f"{major}.{minor}", source=Source.HEADERS)


def _host(binaries: list[str], builtin: str | None) -> PhpLayout:
    """The host's PHP of a build the table does not know: the loader's built-in layout when
    it is of that build, else each include probed, with the reason in one line."""
    if builtin is None:
        loader = libbpf_trace.loader()
        builtin = (build_ids(loader) or [""])[0] if loader is not None else ""
    other = [b for b in binaries if not builtin or not holds(b, builtin)]
    if not other:
        return PhpLayout()
    ids = sorted({i for b in other for i in build_ids(b)}) or ["no PHP build id"]
    why = f"its build ({', '.join(ids)}) is not in the tracer's table of PHP layouts"
    if any(",TS" in i for i in ids):
        why += "; a thread-safe (ZTS) PHP has no layout the tracer can read"
    return PhpLayout(note=f"PHP at {', '.join(other)}: {PROBED} ({why})", source=Source.PROBES)


def build_ids(path: Path | str) -> list[str]:
    """The ZEND_MODULE_BUILD_ID strings in a file, in order, each once: a PHP binary's own
    ("API20220829,NTS"), or the one of the layout compiled into the loader ([]: none, or
    not readable)."""
    try:
        data = Path(path).read_bytes()
    except OSError:
        return []
    return list(dict.fromkeys(m.group().decode() for m in BUILD_ID.finditer(data)))


def holds(binary: str, build: str) -> bool:
    """Does `binary` hold the build id `build` (the loader's own test: php_table.c
    `layout_fits`, a substring anywhere in the file)?"""
    try:
        return build.encode() in Path(binary).read_bytes()
    except OSError:
        return False


def coverage(env: Env, binaries: list[str], builtin: str) -> tuple[Coverage, str]:
    """What the compiled tracer attributes in these PHP binaries, and why not everything in
    one line (`for_binaries`, with the build id `builtin` of the layout compiled into the
    loader, '' none)."""
    if not binaries:
        return Coverage.UNKNOWN, "no PHP binary to probe was found"
    try:
        layout = for_binaries(env, binaries, builtin)
    except OSError as exc:  # the state root's layout cache not writable here
        return Coverage.UNKNOWN, f"its layout could not be computed ({exc.strerror})"
    if layout.source == Source.PROBES:
        return Coverage.PROBES, layout.note
    return (Coverage.TABLE, "") if layout.attributes else (Coverage.COUNTS, layout.note)


def layout_of(env: Env, binary: str) -> tuple[tuple[str, str], ...]:
    """The layout of the PHP `binary` (in a root), from the root's headers (cached by the
    binary's build id); Unknown when it cannot be known."""
    root = php_roots.root_of(binary)
    if root is None:
        raise Unknown(f"{binary} is not in a PHP root")
    headers = php_roots.headers(root)
    if headers is None:
        made = php_roots.load(root)
        raise Unknown(f"its root {root} has no PHP headers (fetch them: statstorm lab php-root "
                      f"build {made.version if made else 'VERSION'})")
    cache = cache_path(env.state_root, binary)
    try:
        text = cache.read_text()
    except OSError:
        text = _compute(headers)
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text)
        tmp.replace(cache)
    fields = tuple(program.fields(text).items())
    values = dict(fields)
    build = values.get("BUILD_ID", "")
    if not build:
        raise Unknown(f"its headers ({headers}) give no layout of it ({cache})")
    try:
        found = build.encode() in Path(binary).read_bytes()
    except OSError as exc:
        raise Unknown(f"{binary} cannot be read ({exc.strerror})") from None
    if not found:
        raise Unknown(f"its root's headers ({headers}) are of another build than {build}")
    return fields


def cache_path(state_root: Path, binary: str) -> Path:
    """Where the layout of the PHP `binary` is kept once computed: by its build id and
    php_layout.c's hash (a new program computes it again)."""
    key = elf.build_id(binary) or hashlib.sha256(binary.encode()).hexdigest()[:16]
    source_hash = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:12]
    return state_root / "php-layouts" / f"{key}-{source_hash}.h"


def _compute(headers: Path) -> str:
    """php_layout.c compiled against `headers` and run: its #define lines."""
    try:
        return program.printed(headers, f"its headers ({headers})")
    except program.NoLayout as exc:
        raise Unknown(str(exc)) from None
