"""The tracer's PHP layouts chosen per binary (adapters/tracing/php_layouts.py), on real
files: the host's PHP keeps the layout built in, a root's PHP whose layout cannot be known
is counted only, with one line saying why; and an ELF build id read as readelf reads it."""

from __future__ import annotations

import json
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


def test_the_hosts_php_keeps_the_built_in_layout(tmp_path: Path) -> None:
    layout = php_layouts.for_binaries(Env(state_root=tmp_path), ["/usr/sbin/php-fpm8.2"])
    assert layout.args == () and layout.note == "" and layout.attributes


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
