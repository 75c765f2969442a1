"""`statstorm lab up --app wordpress`: Debian's WordPress on the lab's own MariaDB, served by
nginx + php-fpm from local disk or GlusterFS, and nothing left running after `lab down`."""

from __future__ import annotations

import shutil
import stat
import urllib.request
from pathlib import Path

import pytest

from conftest import leftovers, run_cli, unique_name
from statstorm.adapters.labs import lab_apps, mariadb
from statstorm.apps import wordpress
from statstorm.commands import lab as lab_cmd
from statstorm.env import Env
from statstorm.errors import ComponentError, DependencyError

pytestmark = pytest.mark.beside  # the lane it runs in (tests/README.md); root per test


def get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=60) as resp:
        return resp.status, resp.read().decode("utf-8", "replace")


def assert_front_page(url: str) -> None:
    status, body = get(url + wordpress.ENTRY)
    assert status == 200
    for marker in wordpress.PAGE_MARKERS:
        assert marker in body, marker
    assert "wp-admin/install.php" not in body


def assert_down(state_home: Path, state: dict[str, object]) -> None:
    run_cli(["lab", "down", "--name", str(state["name"])], state_home, check=True)
    # No mariadbd, php-fpm or nginx (nor mount, volume or file) of the lab is left.
    assert leftovers(str(state["state_dir"]), str(state.get("volume") or "")) == []


def test_missing_wordpress_is_a_one_line_error(monkeypatch: pytest.MonkeyPatch,
                                               tmp_path: Path) -> None:
    monkeypatch.setattr(wordpress, "SOURCE", tmp_path)
    with pytest.raises(DependencyError) as err:
        wordpress.require_installed()
    assert "wordpress package" in str(err.value) and "setup.sh" in str(err.value)
    assert "\n" not in str(err.value)


def test_missing_theme_is_a_one_line_error(monkeypatch: pytest.MonkeyPatch,
                                           tmp_path: Path) -> None:
    (tmp_path / "wp-settings.php").write_text("<?php\n")
    monkeypatch.setattr(wordpress, "SOURCE", tmp_path)
    with pytest.raises(DependencyError) as err:
        wordpress.require_installed()
    assert wordpress.THEME_PACKAGE in str(err.value) and "\n" not in str(err.value)


def test_config_reaches_mariadb_over_the_socket() -> None:
    text = wordpress.render_config(wordpress.Database(Path("/x/run/mysqld/mysqld.sock"), "pw"),
                                   8080)
    assert "define('DB_HOST', 'localhost:/x/run/mysqld/mysqld.sock');" in text
    assert "define('DISABLE_WP_CRON', true);" in text
    assert text.rstrip().endswith("require_once ABSPATH . 'wp-settings.php';")


@pytest.mark.root
@pytest.mark.slow
def test_wordpress_on_local_disk(lab, state_home: Path) -> None:
    state = lab("--app", "wordpress", "--storage", "local", "--workers", "2")
    root = Path(str(state["state_dir"]))
    assert state["app"] == "wordpress" and state["entry_path"] == wordpress.ENTRY
    # Twice: the second view is a page of posts too, not a redirect to the installer.
    assert_front_page(str(state["url"]))
    assert_front_page(str(state["url"]))
    status, body = get(f"{state['url']}{wordpress.API}")
    assert status == 200 and all(m in body for m in wordpress.API_MARKERS)
    # The lab's own mariadbd, recorded, on a socket below the lab; no TCP listener.
    pid = int(str(state["mariadb_pid"]))
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    assert f"--datadir={root}/data/mysql" in argv and "--skip-networking" in argv
    assert str(state["db_socket"]).startswith(str(root / "run"))
    # Code on the storage, data on local disk, secrets for root and the workers only.
    code = Path(str(state["code_path"]))
    assert (code / "wp-content/uploads").resolve() == root / "data/wordpress/uploads"
    assert stat.S_IMODE((code / "wp-config.php").stat().st_mode) == 0o640
    assert stat.S_IMODE((root / "conf" / wordpress.ADMIN_FILE).stat().st_mode) == 0o600
    assert_down(state_home, state)


@pytest.mark.root
@pytest.mark.slow
def test_wordpress_on_glusterfs(lab, state_home: Path) -> None:
    state = lab("--app", "wordpress", "--storage", "glusterfs", "--workers", "1")
    code = Path(str(state["code_path"]))
    assert code.is_relative_to(Path(str(state["mount_point"])))
    assert (code / "wp-includes/version.php").is_file()
    assert_front_page(str(state["url"]))
    assert_down(state_home, state)


@pytest.mark.root
def test_failed_up_stops_mariadb(state_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The install fails after mariadbd started: `up` ends it by PID and removes the lab."""
    name = unique_name("wpfail")
    started: list[str] = []

    def failing_install(*args: object, **kwargs: object) -> None:
        started.extend(str(p) for p in mariadb.own_pids(mariadb.Instance.under(
            state_home / "labs" / name)))
        raise ComponentError("injected install failure")

    monkeypatch.setattr(wordpress, "install", failing_install)
    monkeypatch.setattr(lab_apps, "copy_wordpress", lambda env, dest: dest.mkdir(parents=True))
    env = Env(state_root=state_home)
    try:
        with pytest.raises(ComponentError, match="injected"):
            lab_cmd.up(env, lab_cmd.LabOptions(name=name, app="wordpress", workers=1))
        assert len(started) == 1  # the server was running when the install failed
        assert leftovers(str(state_home / "labs" / name)) == []
    finally:
        lab_cmd.down(env, name, quiet=True)
        shutil.rmtree(state_home / "labs" / name, ignore_errors=True)
