"""The tracer's table of PHP layouts cannot drift from the headers it was made from:
scripts/php_layouts.py makes every entry again from the `phpX.Y-dev` package it names
(downloaded from its archive once, its hash checked, kept in the cache) and finds them
equal; a table changed by hand is refused, naming the field."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts/php_layouts.py"
TABLE = REPO / "src/statstorm/bpf/php_layouts.json"

# it downloads each version's headers once (kept in /var/tmp/statstorm-php-headers) and
# compiles php_layout.c: the suite's root part, where the archives and a compiler are there
pytestmark = pytest.mark.root


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    if shutil.which("cc") is None or shutil.which("dpkg-deb") is None:
        pytest.skip("a C compiler and dpkg-deb are needed (scripts/setup.sh --dev)")
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True,
                          text=True, timeout=600, check=False)


def test_the_table_is_what_each_versions_headers_give() -> None:
    res = _run("--check")
    assert res.returncode == 0, res.stderr
    assert "5 layouts match their headers" in res.stdout


def test_a_table_changed_by_hand_is_refused(tmp_path: Path) -> None:
    data = json.loads(TABLE.read_text())
    data["layouts"][2]["fields"]["EG_INCLUDED"] = "8"
    changed = tmp_path / "php_layouts.json"
    changed.write_text(json.dumps(data))
    res = _run("--check", "--table", str(changed))
    assert res.returncode == 1
    lines = res.stderr.strip().splitlines()
    assert lines[0].startswith("php_layouts: PHP 8.2: EG_INCLUDED 8 in the table, ")
    assert lines[-1].endswith("scripts/php_layouts.py --update")
    out = tmp_path / "made.json"
    assert _run("--out", str(out)).returncode == 0
    assert json.loads(out.read_text()) == json.loads(TABLE.read_text())
