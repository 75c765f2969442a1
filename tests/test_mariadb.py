"""The lab's own MariaDB server (adapters/labs/mariadb.py): a real mariadbd on a unix socket."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from statstorm.adapters.host import procs
from statstorm.adapters.labs import mariadb
from statstorm.env import Env
from statstorm.errors import ComponentError, DependencyError, UsageError

pytestmark = pytest.mark.beside  # the lane it runs in (tests/README.md); root per test


def test_greets_nothing_on_a_missing_socket(tmp_path: Path) -> None:
    assert not mariadb.greets(tmp_path / "none.sock")


def test_missing_server_is_a_one_line_dependency_error(monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    monkeypatch.setattr(mariadb, "SERVER", str(tmp_path / "mariadbd"))
    with pytest.raises(DependencyError) as err:
        mariadb.require_installed()
    assert "mariadb-server" in str(err.value) and "setup.sh" in str(err.value)
    assert "\n" not in str(err.value)


def test_odd_sql_names_are_refused() -> None:
    inst = mariadb.Instance.under(Path("/nonexistent"))
    with pytest.raises(ComponentError):
        mariadb.create_database(Env(), inst, "wp", "wp", "pass'word")


def test_a_socket_path_too_long_is_a_usage_error(tmp_path: Path) -> None:
    inst = mariadb.Instance.under(tmp_path / ("x" * 120))
    with pytest.raises(UsageError, match="shorter"):
        mariadb.init(Env(), inst)


@pytest.fixture
def lab_root() -> Iterator[Path]:
    """A directory the mysql user can reach (pytest's tmp_path is 0700); whatever runs on
    it is ended by PID at the end, even when the test failed."""
    root = Path(f"/var/tmp/statstorm-mariadb-{uuid.uuid4().hex[:8]}")
    root.mkdir(mode=0o755)
    (root / "data").mkdir(mode=0o755)
    (root / "run").mkdir(mode=0o755)
    try:
        yield root
    finally:
        mariadb.stop(0, mariadb.Instance.under(root))
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.root
def test_server_starts_serves_the_app_user_and_stops_by_pid(lab_root: Path) -> None:
    env = Env()
    inst = mariadb.Instance.under(lab_root)
    mariadb.init(env, inst)
    recorded: list[int] = []
    pid = mariadb.start(env, inst, lab_root / "mariadbd.out", recorded.append)
    assert recorded == [pid] and procs.alive(pid)
    assert mariadb.own_pids(inst) == [pid]
    assert mariadb.greets(inst.socket)
    mariadb.create_database(env, inst, "appdb", "appuser", "s3cret-Pass")
    # The app's user logs in with its password and sees its database.
    res = env.run([mariadb.CLIENT, "--no-defaults", f"--socket={inst.socket}", "--user=appuser",
                   "--password=s3cret-Pass", "--batch", "--skip-column-names", "-e",
                   "SELECT DATABASE(), CURRENT_USER()", "appdb"])
    assert res.stdout.split() == ["appdb", "appuser@localhost"]
    mariadb.stop(pid, inst)
    assert not procs.alive(pid) and mariadb.own_pids(inst) == []
    assert not mariadb.greets(inst.socket)
