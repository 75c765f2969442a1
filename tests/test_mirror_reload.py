"""`statstorm mirror sync` and the workers' caches, without root: check's symlink-deploy-stale
leaves the `current` switch of a statstorm mirror alone (sync reloads the pool) but not any
other symlink; a generation is removed only when no process holds a file in it; the sync's
orchestration (reload after the switch, the generation before removed only after a reload
that was followed, --no-reload's note). The real pool: tests/test_mirror.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from statstorm.adapters.apply import apply_target, pool_config
from statstorm.adapters.storage import code_mirror
from statstorm.commands import mirror as mirror_cmd
from statstorm.env import Env
from statstorm.model.checkfacts import Facts
from statstorm.model.mirror import MirrorFacts
from statstorm.model.rules import evaluate
from statstorm.results.mirror import MirrorMarker

MIRROR = "/var/local/statstorm/mirror/www/abc"


def _facts(symlinks: tuple[tuple[str, str], ...], mirror: MirrorFacts | None) -> Facts:
    return Facts(pool="www", settings={"realpath_cache_ttl": "600"},
                 docroot=MIRROR + "/current", symlinks=symlinks, mirror=mirror,
                 nginx_script_filename="$document_root$fastcgi_script_name")


def _ids(f: Facts) -> set[str]:
    return {x.id for x in evaluate(f)}


def test_symlink_deploy_stale_leaves_a_statstorm_mirror_alone() -> None:
    marker = MirrorMarker("/srv/gl/app", "www", "tree-2", 1e9, "2001-09-09T01:46:40+00:00")
    m = MirrorFacts(MIRROR, marker)
    switch = ((MIRROR + "/current", "tree-2"),)
    assert "symlink-deploy-stale" in _ids(_facts(switch, None))  # not known as a mirror
    assert "symlink-deploy-stale" not in _ids(_facts(switch, m))
    other = ((MIRROR + "/current", "tree-2"), ("/srv/shared", "/mnt/shared-7"))
    assert "symlink-deploy-stale" in _ids(_facts(other, m))  # another link still counts


def _mirror(root: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("STATSTORM_MIRROR_ROOT", str(root / "mirror"))
    app = root / "app"
    app.mkdir()
    (app / "a.php").write_text("<?php echo 'v1';\n")
    mirror = root / "mirror" / "www" / "abc"
    code_mirror.make(mirror, app, "www")
    return app


def test_a_held_generation_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    app = _mirror(tmp_path, monkeypatch)
    mirror = tmp_path / "mirror" / "www" / "abc"
    (app / "a.php").write_text("<?php echo 'v2';\n")
    (done,) = code_mirror.sync("www")
    old = mirror / done.previous
    assert code_mirror.remove_generation(mirror, done.marker.tree) == []  # current: never
    assert (mirror / done.marker.tree).is_dir()
    holder = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                              cwd=old, stdin=subprocess.PIPE)
    try:
        assert holder.pid in code_mirror.holders(old)
        assert code_mirror.remove_generation(mirror, done.previous) == [holder.pid]
        assert old.is_dir()
    finally:
        holder.communicate(b"")
    assert code_mirror.remove_generation(mirror, done.previous) == []
    assert not old.exists()


class _Reload:
    def __init__(self, lost: str = "") -> None:
        self.lost, self.calls = lost, []  # type: ignore[var-annotated]

    def __call__(self, env: Env, target: object, paths: list[Path], fpm: bool = False) -> str:
        self.calls.append((os.readlink(self.current), fpm))
        return self.lost


def _fake_pool(monkeypatch: pytest.MonkeyPatch, reload: _Reload) -> None:
    monkeypatch.setattr(apply_target, "resolve", lambda env, lab, pool: object())
    monkeypatch.setattr(pool_config, "reload", reload)


def test_sync_reloads_after_the_switch_then_removes_the_tree_before(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    app = _mirror(tmp_path, monkeypatch)
    mirror = tmp_path / "mirror" / "www" / "abc"
    first = os.readlink(mirror / "current")
    reload = _Reload()
    reload.current = mirror / "current"  # type: ignore[attr-defined]
    _fake_pool(monkeypatch, reload)
    (app / "a.php").write_text("<?php echo 'v2';\n")
    res = mirror_cmd.run(Env(), mirror_cmd.SyncOptions("www"))
    (done,) = res.synced
    assert reload.calls == [(done.marker.tree, True)]  # reloaded once, after the switch
    assert res.reloaded and res.removed == (str(mirror / first),) and not res.note
    assert not (mirror / first).exists()
    assert res.to_json()["reloaded"] is True


def test_no_reload_keeps_the_tree_before_and_says_the_window(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    app = _mirror(tmp_path, monkeypatch)
    mirror = tmp_path / "mirror" / "www" / "abc"
    first = os.readlink(mirror / "current")
    reload = _Reload()
    _fake_pool(monkeypatch, reload)
    (app / "a.php").write_text("<?php echo 'v2';\n")
    res = mirror_cmd.run(Env(), mirror_cmd.SyncOptions("www", reload=False))
    assert reload.calls == [] and not res.reloaded and (mirror / first).is_dir()
    assert "realpath_cache_ttl" in res.note and "\n" not in res.note


def test_a_reload_not_followed_keeps_the_tree_before(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    app = _mirror(tmp_path, monkeypatch)
    mirror = tmp_path / "mirror" / "www" / "abc"
    first = os.readlink(mirror / "current")
    reload = _Reload("no php-fpm master with new workers")
    reload.current = mirror / "current"  # type: ignore[attr-defined]
    _fake_pool(monkeypatch, reload)
    (app / "a.php").write_text("<?php echo 'v2';\n")
    res = mirror_cmd.run(Env(), mirror_cmd.SyncOptions("www"))
    assert (mirror / first).is_dir() and res.kept == ((str(mirror / first),
                                                        "the reload was not followed"),)
    assert "not seen to settle" in res.note


def test_a_mapped_file_holds_its_generation(tmp_path: Path) -> None:
    """A process that only maps a file of the tree (its descriptor closed) holds it too."""
    import mmap
    tree = tmp_path / "tree-1"
    tree.mkdir()
    (tree / "lib.php").write_bytes(b"<?php\n" * 100)
    with open(tree / "lib.php", "rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        assert os.getpid() in code_mirror.holders(tree)
    finally:
        mapped.close()
    assert os.getpid() not in code_mirror.holders(tree)
