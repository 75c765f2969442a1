"""What the compiled tracer knows of the PHP it probes: the layout of a PHP version, from that
version's own headers.

The host's PHP (Debian 12's 8.2) has its layout compiled into the loader (build.sh, from the
php8.2-dev headers scripts/setup.sh unpacks). A PHP from a root (`lab up --php 7.4|8.4`)
gets its layout here: `statstorm/bpf/php_layout.c` compiled against the headers unpacked in
its root (adapters/labs/php_roots.py) and run, its lines given to the loader as `--layout`;
cached under the state root by the binary's build id and the program's hash, so a trace
compiles nothing after the first. The layout says where the included-files table lies, how
its entries and a file handle are laid out, where the SAPI keeps the request's script (PHP
8.4 in Debian 13 has no USDT probes) and the version (before 8.1 file names are passed as C
strings).

A PHP whose layout is not known (no headers in its root, headers of another build, a
thread-safe build, no compiler) is traced without PHP's function probes (`--ops 0`): its
requests and their syscalls are counted, none is attributed to a PHP operation, and
`PhpLayout.note` says so in one line. The host's PHP of another build than the one whose
layout is built in (the loader looks for that build id, ZEND_MODULE_BUILD_ID, in the binary:
php_table.c `layout_fits`) keeps its operations, but each include's zend_stream_open is
probed instead of PHP's included-files table being read (`coverage` says which, for
doctor)."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from statstorm.adapters.host import elf
from statstorm.adapters.labs import php_roots
from statstorm.env import Env
from statstorm.results.host_facts import Coverage

SOURCE = Path(__file__).resolve().parents[2] / "bpf" / "php_layout.c"
DEFINE = re.compile(r"^#define PHP_(\w+) (\S+)$")
NOT_ATTRIBUTED = ("syscalls are counted per request but not attributed to PHP operations "
                  "(includes, stats, realpaths)")
# ZEND_MODULE_BUILD_ID: "API" the module API number, ",NTS" or ",TS", then ",debug" and extras
BUILD_ID = re.compile(rb"API\d{8},N?TS(?:,[A-Za-z0-9_.-]+)*")
PROBED = ("its includes are probed at every zend_stream_open instead of read from PHP's "
          "included-files table (more traps per request)")


@dataclass(frozen=True)
class PhpLayout:
    """The loader's arguments for the binaries it probes, and the one line saying what it
    cannot attribute (and why) when their layout is not known."""

    args: tuple[str, ...] = ()  # () the built-in layout (the host's PHP)
    note: str = ""
    version: str = ""  # the PHP version the layout came from ('' built-in or none)

    @property
    def attributes(self) -> bool:
        return "--ops" not in self.args


class Unknown(Exception):
    """This PHP's layout cannot be known (the message says why)."""


def for_binaries(env: Env, binaries: list[str]) -> PhpLayout:
    """The layout for the PHP binaries a trace probes: built-in for the host's PHP, computed
    from a root's own headers for a root's, none (counts only, with the reason) otherwise."""
    rooted = [b for b in binaries if php_roots.root_of(b) is not None]
    if not rooted:
        return PhpLayout()
    try:
        if len(rooted) != len(binaries):
            raise Unknown("the host's PHP and a PHP root's are probed together, and the "
                          "tracer reads one PHP's layout at a time")
        layouts = {b: layout_of(env, b) for b in rooted}
        if len(set(layouts.values())) > 1:
            raise Unknown("PHP binaries of different versions are probed together, and the "
                          "tracer reads one PHP's layout at a time")
    except Unknown as exc:
        return PhpLayout(("--ops", "0"), f"PHP at {', '.join(rooted)}: {NOT_ATTRIBUTED}: {exc}")
    fields = next(iter(layouts.values()))
    arg = ";".join(f"{k}={v}" for k, v in fields)
    version = dict(fields).get("VERSION_NUM", "0")
    major, minor = int(version) // 10000, int(version) // 100 % 100
    return PhpLayout(("--layout", arg), version=f"{major}.{minor}")


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
    one line: a PHP root's by its own layout (`for_binaries`), the host's by whether the
    layout built into the loader (its build id `builtin`, '' none) is of their build."""
    if not binaries:
        return Coverage.UNKNOWN, "no PHP binary to probe was found"
    if any(php_roots.root_of(b) is not None for b in binaries):
        try:
            layout = for_binaries(env, binaries)
        except OSError as exc:  # the state root's layout cache not writable here
            return Coverage.UNKNOWN, f"its layout could not be computed ({exc.strerror})"
        return (Coverage.TABLE, "") if layout.attributes else (Coverage.COUNTS, layout.note)
    other = [b for b in binaries if not builtin or not holds(b, builtin)]
    if not other:
        return Coverage.TABLE, ""
    why = (f"the tracer's built-in layout is of {builtin}" if builtin
           else "the tracer was built without PHP's headers")
    zts = [b for b in other if any(",TS" in i for i in build_ids(b))]
    if zts:
        why += "; a thread-safe (ZTS) PHP has no layout the tracer can read"
    return Coverage.PROBES, f"PHP at {', '.join(other)}: {PROBED} ({why})"


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
    fields = tuple((m.group(1), m.group(2).strip('"'))
                   for m in map(DEFINE.match, text.splitlines()) if m)
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
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise Unknown("no C compiler (cc) to read its headers with")
    with tempfile.TemporaryDirectory(prefix="statstorm-layout-") as tmp:
        exe = Path(tmp) / "php_layout"
        inc = [f"-I{headers / d}" if d else f"-I{headers}" for d in ("", "main", "Zend", "TSRM")]
        built = subprocess.run([cc, "-w", *inc, str(SOURCE), "-o", str(exe)],
                               capture_output=True, text=True, check=False)
        if built.returncode != 0:
            why = (built.stderr.strip().splitlines() or ["?"])[0]
            raise Unknown(f"its headers ({headers}) do not compile php_layout.c ({why})")
        ran = subprocess.run([str(exe)], capture_output=True, text=True, check=False)
        if ran.returncode != 0:
            raise Unknown(f"its headers ({headers}) are of a thread-safe (ZTS) PHP, whose "
                          f"globals the tracer cannot find")
        return ran.stdout
