"""A GlusterFS client stacked on a live mount (how apply changes a mount's options) and
taken off again while a process still works inside it, on a real volume: the top mount is
detached lazily and its client ended, and the mount below keeps serving the same files. A
GlusterFS client ended with SIGTERM unmounts its mount point by path once more, which then
names the mount below: `gluster.unmount` must not end it that way."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from statstorm.adapters.host import procs
from statstorm.adapters.storage import gluster, mounts
from statstorm.env import Env
from statstorm.model.storage_kinds import STORAGE
from statstorm.results.storage_kind import StorageKind

pytestmark = [pytest.mark.root, pytest.mark.beside]

CLIENT = STORAGE[StorageKind.GLUSTERFS].client


@pytest.fixture
def mounted() -> Iterator[tuple[Env, Path]]:
    home = Path(f"/var/tmp/statstorm-test-gs-{uuid.uuid4().hex[:8]}")
    home.mkdir(mode=0o755)
    env = Env(state_root=home)
    volume, brick, mnt = f"statstorm-t-{uuid.uuid4().hex[:6]}", home / "brick", home / "mnt"
    try:
        with gluster.glusterd_lock():
            gluster.ensure_glusterd(env)
            gluster.create_volume(env, volume, brick)
        gluster.mount(env, volume, mnt, {})
        yield env, mnt
    finally:
        while gluster.is_mounted(mnt):
            gluster.unmount(env, mnt)
        with gluster.glusterd_lock():
            gluster.delete_volume(env, volume, brick)
            if gluster.GLUSTERD_PIDFILE.exists() and not gluster.list_volumes(env):
                gluster.stop_glusterd(env)
        shutil.rmtree(home, ignore_errors=True)


def test_a_busy_stacked_client_comes_off_and_the_one_below_serves(mounted) -> None:
    env, mnt = mounted
    (mnt / "index.php").write_text("<?php echo 1;\n")
    below = mounts.fuse_client(str(mnt), CLIENT)
    assert below is not None
    top = gluster.stack_client(
        env, gluster.client_argv_with(below[1], {"attribute-timeout": "600"}), mnt)
    assert top and top != below[0] and gluster.mount_depth(mnt) == 2
    holder = subprocess.Popen(["sleep", "120"], cwd=mnt)  # busy: its cwd is on the top mount
    try:
        gluster.unmount(env, mnt, top)
        assert not procs.alive(top)
        assert gluster.mount_depth(mnt) == 1 and procs.alive(below[0])
        assert mounts.fuse_client(str(mnt), CLIENT) == below
        assert (mnt / "index.php").read_text() == "<?php echo 1;\n"
    finally:
        holder.kill()
        holder.wait()
