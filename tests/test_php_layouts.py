"""The tracer's PHP layouts chosen per binary (adapters/tracing/php_layouts.py), on real
files: a PHP whose build is in the table (the host's 8.2) gets the table's layout, the same
as its own headers give; a build the table lacks keeps the loader's built-in layout or is
probed, with one line saying why; a root's PHP whose layout cannot be known is counted only;
and an ELF build id read as readelf reads it."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from statstorm.adapters.host import elf
from statstorm.adapters.tracing import php_layouts
from statstorm.env import Env
from statstorm.results.php_root import MARKER

ROOT_84 = Path("/var/tmp/statstorm-php-roots/8.4")


def test_build_id_is_readelfs() -> None:
    binary = shutil.which("ls")
    assert binary is not None
    notes = subprocess.run(["readelf", "-n", binary], capture_output=True, text=True,
                           check=True).stdout
    want = next(line.split(":", 1)[1].strip() for line in notes.splitlines()
                if "Build ID" in line)
    assert elf.build_id(binary) == want and len(want) == 40
    assert elf.build_id(__file__) == ""


def fake_root(tmp_path: Path) -> str:
    """A directory that is a PHP root by its marker, holding a php-fpm that is not PHP."""
    root = tmp_path / "8.4"
    (root / "usr/sbin").mkdir(parents=True)
    (root / MARKER).write_text(json.dumps({"version": "8.4"}))
    binary = root / "usr/sbin/php-fpm8.4"
    shutil.copy(shutil.which("ls") or "/bin/ls", binary)
    return str(binary)


def stand_in(tmp_path: Path, name: str, build: str) -> str:
    """A file holding only what is read of a PHP binary: its build ids."""
    binary = tmp_path / name
    binary.write_bytes(b"\x7fELF stand-in\0" + build.encode() + b"\0")
    return str(binary)


def test_the_hosts_php_gets_the_tables_layout(tmp_path: Path) -> None:
    layout = php_layouts.for_binaries(Env(state_root=tmp_path), ["/usr/sbin/php-fpm8.2"])
    assert layout.args[0] == "--layout" and "BUILD_ID=API20220829,NTS;" in layout.args[1]
    assert layout.source == php_layouts.Source.TABLE and layout.version == "8.2"
    assert layout.note == "" and layout.attributes
    assert layout.header() == {"version": "8.2", "attributed": True, "note": "",
                               "source": "table"}


def test_the_tables_82_is_what_the_hosts_headers_give() -> None:
    """The table's 8.2 layout equals the one php_layout.c prints from the php8.2-dev headers
    setup unpacked (those the loader's built-in layout is compiled from)."""
    inc = next(iter(sorted(Path("/opt/statstorm/php/include/php").glob("2022*/main/php.h"))),
               None)
    if inc is None or shutil.which("cc") is None:
        pytest.skip("php8.2-dev's headers and a C compiler are needed (scripts/setup.sh --lab)")
    printed = php_layouts._compute(inc.parents[1])
    fields = dict(m.groups() for m in map(php_layouts.DEFINE.match, printed.splitlines()) if m)
    (k,) = [k for k in php_layouts.table() if k.php == "8.2"]
    assert fields.pop("BUILD_ID").strip('"') == k.build_id
    table = dict(k.fields)
    # the same fields; the version's patch level is that of each package (8.2.NN)
    assert int(fields.pop("VERSION_NUM")) // 100 == int(table.pop("VERSION_NUM")) // 100
    assert fields == table


def test_every_entry_gives_every_field_php_layout_prints() -> None:
    names = set(re.findall(r"#define PHP_(\w+) ", php_layouts.SOURCE.read_text())) - {"BUILD_ID"}
    got = php_layouts.table()
    assert [k.php for k in got] == ["7.4", "8.1", "8.2", "8.3", "8.4"]
    for k in got:
        assert {n for n, _ in k.fields} == names, k.php
        assert re.fullmatch(r"API\d{8},NTS", k.build_id) and k.php_version.startswith(k.php + ".")
    assert len({k.build_id for k in got}) == len(got)


def test_a_build_in_the_table_is_read_by_its_build_id(tmp_path: Path) -> None:
    old = stand_in(tmp_path, "php-fpm7.4", "API20190902,NTS")
    layout = php_layouts.for_binaries(Env(state_root=tmp_path), [old])
    assert layout.version == "7.4" and layout.source == php_layouts.Source.TABLE
    assert "VERSION_NUM=70433" in layout.args[1]
    # two binaries of one build: one layout; of two builds: none from the table
    also = stand_in(tmp_path, "php-cgi7.4", "API20190902,NTS")
    assert php_layouts.for_binaries(Env(state_root=tmp_path), [old, also]) == layout
    other = php_layouts.for_binaries(Env(state_root=tmp_path), [old, "/usr/sbin/php-fpm8.2"],
                                     builtin="API20220829,NTS")
    assert other.source == php_layouts.Source.PROBES and old in other.note


@pytest.mark.parametrize("build, why", [
    ("API20200930,NTS", "is not in the tracer's table"),  # PHP 8.0: in no archive today
    ("API20220829,NTS,debug", "is not in the tracer's table"),
    ("API20220829,TS", "thread-safe (ZTS)"),
])
def test_a_build_the_table_lacks_is_probed_with_one_line(tmp_path: Path, build: str,
                                                         why: str) -> None:
    binary = stand_in(tmp_path, "php-fpm", build)
    layout = php_layouts.for_binaries(Env(state_root=tmp_path), [binary], builtin="")
    assert layout.args == () and layout.source == php_layouts.Source.PROBES
    assert "\n" not in layout.note and binary in layout.note and why in layout.note
    assert build in layout.note and "zend_stream_open" in layout.note
    # the loader's built-in layout, when it is of that build, is kept
    kept = php_layouts.for_binaries(Env(state_root=tmp_path), [binary], builtin=build)
    assert kept == php_layouts.PhpLayout()


def test_without_the_table_the_hosts_php_keeps_the_built_in_layout(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(php_layouts, "table", lambda path=None: ())
    layout = php_layouts.for_binaries(Env(state_root=tmp_path), ["/usr/sbin/php-fpm8.2"],
                                      builtin="API20220829,NTS")
    assert layout == php_layouts.PhpLayout() and layout.source == php_layouts.Source.BUILT_IN


def test_a_table_that_cannot_be_read_is_none(tmp_path: Path) -> None:
    (tmp_path / "broken.json").write_text("{")
    (tmp_path / "no-fields.json").write_text('{"layouts": [{"php": "8.2"}]}')
    assert php_layouts.table(tmp_path / "broken.json") == ()
    assert php_layouts.table(tmp_path / "no-fields.json") == ()
    assert php_layouts.table(tmp_path / "missing.json") == ()


def test_a_root_without_headers_is_counted_only_with_one_line(tmp_path: Path) -> None:
    binary = fake_root(tmp_path)
    layout = php_layouts.for_binaries(Env(state_root=tmp_path / "state"), [binary])
    assert layout.args == ("--ops", "0") and not layout.attributes
    assert "\n" not in layout.note and binary in layout.note
    assert "not attributed to PHP operations" in layout.note
    assert "has no PHP headers" in layout.note and "statstorm lab php-root build" in layout.note
    # with the host's PHP in the same trace: one layout at a time, so counts only too
    both = php_layouts.for_binaries(Env(state_root=tmp_path), [binary, "/usr/sbin/php-fpm8.2"])
    assert both.args == ("--ops", "0") and "one PHP's layout at a time" in both.note


def test_headers_of_another_build_give_no_layout(tmp_path: Path) -> None:
    headers = next(iter(sorted((ROOT_84 / "usr/include/php").glob("*/main/php.h"))), None)
    if headers is None or shutil.which("cc") is None:
        pytest.skip("PHP 8.4's root with its headers and a C compiler are needed")
    binary = fake_root(tmp_path)
    api = headers.parent.parent
    shutil.copytree(api, Path(binary).parents[2] / "usr/include/php" / api.name)
    layout = php_layouts.for_binaries(Env(state_root=tmp_path / "state"), [binary])
    assert layout.args == ("--ops", "0")
    assert "are of another build than API" in layout.note
    # computed once, then read from the cache keyed by the binary's build id
    cache = php_layouts.cache_path(tmp_path / "state", binary)
    assert cache.is_file() and elf.build_id(binary) in cache.name
    assert "#define PHP_EG_INCLUDED" in cache.read_text()
