"""The cached app tree on a real GlusterFS (adapters/storage/tree_cache.py), on a small tree
so it takes seconds: a brick filled through the FUSE client is cached, a new volume created
on a copy of it serves the same files (read back through its mount, byte for byte); a
corrupted cache is refused, removed and never served; another app version is another key,
so the old cache is not served for it. MediaWiki's own labs on GlusterFS (tests/test_demo.py)
run the same code path on the whole tree."""

from __future__ import annotations

import hashlib
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from statstorm.adapters.storage import gluster, tree_cache
from statstorm.env import Env
from statstorm.model.tree_cache import compare, key_for

pytestmark = [pytest.mark.root, pytest.mark.beside]


@pytest.fixture
def volumes(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Env, list[tuple[str, Path, Path]]]]:
    home = Path(f"/var/tmp/statstorm-test-tc-{uuid.uuid4().hex[:8]}")
    home.mkdir(mode=0o755)
    # its own cache, not the one the suite's labs share (conftest.TREE_CACHE)
    monkeypatch.setenv("STATSTORM_TREE_CACHE", str(home / "cache/trees"))
    made: list[tuple[str, Path, Path]] = []
    env = Env(state_root=home)
    try:
        yield env, made
    finally:
        for volume, brick, mnt in made:
            gluster.unmount(env, mnt)
            with gluster.glusterd_lock():
                gluster.delete_volume(env, volume, brick)
        with gluster.glusterd_lock():
            if gluster.GLUSTERD_PIDFILE.exists() and not gluster.list_volumes(env):
                gluster.stop_glusterd(env)
        shutil.rmtree(home, ignore_errors=True)


def _volume(env: Env, made: list[tuple[str, Path, Path]], brick: Path) -> Path:
    volume = f"statstorm-t-{uuid.uuid4().hex[:6]}"
    mnt = brick.parent / f"mnt-{volume}"
    made.append((volume, brick, mnt))
    with gluster.glusterd_lock():
        gluster.ensure_glusterd(env)
        gluster.create_volume(env, volume, brick)
    gluster.mount(env, volume, mnt, {})
    return mnt / tree_cache.SUBDIR


def _digests(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()}


def test_cached_brick_serves_the_tree_and_a_corrupted_one_is_refused(volumes) -> None:
    env, made = volumes
    stage = env.state_root / "stage"
    for i in range(40):
        path = stage / f"lib/p{i % 4}/C{i}.php"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"<?php class C{i} {{}}\n" * (i + 1))
    (stage / "index.php").write_text("<?php require 'lib/p0/C0.php';\n")
    (stage / "link.php").symlink_to("index.php")
    key = key_for("mediawiki", "1:1.39.17-1", "glusterfs", ("./images",))

    # cold: copied through the mount, then the brick cached
    assert tree_cache.seed_brick(env, key, env.state_root / "b1") == (None, "")
    code = _volume(env, made, env.state_root / "b1")
    shutil.copytree(stage, code, symlinks=True)
    copied = tree_cache.scan(stage, digests=True)
    assert tree_cache.store_brick(env, key, env.state_root / "b1", copied)
    assert [t.files for t in tree_cache.cached(env)] == [copied.files]

    # warm: a new volume created on the cached brick serves the same tree through FUSE
    seeded, why = tree_cache.seed_brick(env, key, env.state_root / "b2")
    assert seeded is not None and why == ""
    code2 = _volume(env, made, env.state_root / "b2")
    assert _digests(code2) == _digests(stage)
    assert compare(copied, tree_cache.scan(code2, digests=True)).same
    # the lab's own file on top, through the mount; the cache is untouched by it
    (stage / "LocalSettings.php").write_text("<?php $wgServer = 'lab';\n")
    tree_cache.overlay(env, stage, code2, seeded)
    assert (code2 / "LocalSettings.php").read_text() == "<?php $wgServer = 'lab';\n"
    (code2 / "lib/p1/new.php").write_text("<?php\n")  # a new file gets its gfid on the brick
    assert (env.state_root / "b2/app/lib/p1/new.php").stat().st_nlink == 2

    # another version: another key, not served from this cache
    newer = key_for("mediawiki", "1:1.39.18-1", "glusterfs", ("./images",))
    assert tree_cache.seed_brick(env, newer, env.state_root / "b3") == (None, "")
    assert not (env.state_root / "b3").exists()

    # corrupted (a file's bytes changed in the cache): refused, removed, never served
    entry = tree_cache.cache_root(env) / key.name
    victim = entry / "brick/app/lib/p2/C2.php"
    victim.write_text(victim.read_text().replace("C2", "X2"))
    seeded, why = tree_cache.seed_brick(env, key, env.state_root / "b4")
    assert seeded is None and "1 changed (lib/p2/C2.php)" in why
    assert not (env.state_root / "b4").exists() and not entry.exists()
    # rebuilt by the next cold lab from its brick
    assert tree_cache.store_brick(env, key, env.state_root / "b1", copied)
    (entry / "brick/app/index.php").unlink()  # a file missing
    seeded, why = tree_cache.seed_brick(env, key, env.state_root / "b5")
    assert seeded is None and "missing (index.php)" in why and not entry.exists()
    assert tree_cache.clear(env) == []
