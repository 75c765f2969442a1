"""WordPress on a lab of another PHP: its mysqli is looked for in the lab's PHP root (a root
without it is named, with the rebuild that gives it), never in the host's PHP."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from statstorm.adapters.labs import lab_apps
from statstorm.apps import wordpress
from statstorm.env import Env
from statstorm.errors import DependencyError
from statstorm.results.php_root import MARKER, PhpRoot

pytestmark = pytest.mark.skipif(not (wordpress.SOURCE / "wp-settings.php").exists(),
                                reason="the wordpress package is not installed")


def fake_root(roots: Path, version: str, mysqli: bool) -> Path:
    root = roots / version
    (root / "usr/sbin").mkdir(parents=True)
    (root / f"usr/sbin/php-fpm{version}").write_text("")
    api = root / "usr/lib/php/20240924"
    api.mkdir(parents=True)
    if mysqli:
        (api / "mysqli.so").write_text("")
    (root / MARKER).write_text(json.dumps(PhpRoot(version, "trixie", str(root), f"{version}.1",
                                                  "").to_json()))
    return root


def test_mysqli_is_looked_for_in_the_labs_root(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STATSTORM_PHP_ROOTS", str(tmp_path / "roots"))
    env = Env(state_root=tmp_path)
    fake_root(tmp_path / "roots", "8.4", mysqli=False)
    with pytest.raises(DependencyError, match=r"php8\.4-mysql.*php-root build 8\.4 --rebuild"):
        lab_apps.require_wordpress(env, "8.4")
    (tmp_path / "roots/8.4/usr/lib/php/20240924/mysqli.so").write_text("")
    lab_apps.require_wordpress(env, "8.4")
    # a root not built yet: `lab up` builds it with php-mysql among its packages
    lab_apps.require_wordpress(env, "7.4")
