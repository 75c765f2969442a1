"""apply on a lab whose php-fpm master runs with `-d opcache.enable=0` (`lab up --php-ini
opcache.enable=0`, as bench/seed002_afs.py's `--opcache off` starts it): the -d beats any ini
file, so apply lists opcache-disabled as manual, naming the -d, writes no ini file for it, and
check still reports it after; the pool-level changes of `--all` are still made."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_cli

pytestmark = [pytest.mark.root, pytest.mark.beside]


def test_opcache_enable_given_as_d_is_manual_on_a_lab(lab, state_home: Path) -> None:
    st = lab("--app", "synthetic", "--storage", "local", "--workers", "1",
             "--php-ini", "opcache.enable=0")
    name = str(st["name"])
    res = run_cli(["check", "--lab", name, "--json"], state_home)
    assert "opcache-disabled" in {f["id"] for f in json.loads(res.stdout)["findings"]}

    p = run_cli(["apply", "--lab", name, "--all", "--yes", "--json"], state_home)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert "opcache-disabled" not in {c["finding"] for c in out["changes"]}
    (manual,) = [m for m in out["manual"] if m["finding"] == "opcache-disabled"]
    assert "`-d opcache.enable=0`" in manual["why"], manual
    assert "--php-ini opcache.enable=0" in manual["why"]
    ini = Path(str(st["state_dir"])) / "conf/php/99-statstorm.ini"
    assert not ini.exists() or "opcache.enable" not in ini.read_text()

    res = run_cli(["check", "--lab", name, "--json"], state_home)
    assert "opcache-disabled" in {f["id"] for f in json.loads(res.stdout)["findings"]}
