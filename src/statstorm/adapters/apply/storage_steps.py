"""Live storage changes and their undo: a local mirror of the code (adapters/apply/mirror.py),
GlusterFS volume options (`gluster volume set`,
the old value kept) and FUSE mount options, given by a second client stacked on the mount
point (a FUSE mount cannot change them in place, and unmounting first would fail every
request in between); open files stay with the client below, and undoing unmounts the new
one, which brings the old options back. A lab's OpenAFS and CephFS clients take theirs only
when they start: they are restarted with them (adapters/storage/afs_client.py,
ceph_client.py), and restarted with their old ones on undo."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from statstorm.adapters.apply import mirror
from statstorm.adapters.labs import state as labs
from statstorm.adapters.storage import afs_client, ceph_client, gluster, mounts
from statstorm.env import Env
from statstorm.errors import ComponentError
from statstorm.model.mount_options import (GLUSTER_CONTENT_CLIENT, GLUSTER_FUSE_DEFAULTS,
                                           GLUSTER_FUSE_KEYS, gluster_client_options)
from statstorm.model.storage_kinds import STORAGE, LiveChange, mount_type
from statstorm.results.apply import MIRROR, MOUNT, VOLUME, StorageStep
from statstorm.results.storage_kind import StorageKind

GLUSTER_CLIENT = STORAGE[StorageKind.GLUSTERFS].client


class StepFailed(Exception):
    """A step did not take effect as planned: the caller undoes it (and the rest)."""


def mount_step(mp: str, options: dict[str, str]) -> StorageStep | str:
    """The step that gives the mount at `mp` these options, or why apply cannot."""
    info = mounts.detect(mp)
    if info.mount_point.rstrip("/") != mp.rstrip("/"):
        return f"{mp} is not a mount point now"
    storage = STORAGE[info.storage]
    if info.storage is StorageKind.OPENAFS:
        made = afs_client.live_step(mp, options)
        return made if isinstance(made, str) else StorageStep(MOUNT, mp, made[0], dict(options),
                                                              made[1])
    if info.storage is StorageKind.CEPHFS and info.fstype != mount_type(StorageKind.CEPHFS):
        made = ceph_client.live_step(mp, options)
        return made if isinstance(made, str) else StorageStep(MOUNT, mp, made[0], dict(options),
                                                              made[1])
    if storage.live_change is LiveChange.REMOUNT:
        return storage.set_live
    if storage.live_change is not LiveChange.STACKED_CLIENT:
        return f"{mp} is {info.fstype}: change its options by hand"
    client = mounts.fuse_client(mp, storage.client)
    if client is None:
        return f"no GlusterFS client process serves {mp}"
    current = gluster_client_options(client[1])
    before = {k: _as_given(k, current.get(k, GLUSTER_FUSE_DEFAULTS.get(k, ""))) for k in options}
    return StorageStep(MOUNT, mp, before, dict(options), client[1])


def _as_given(key: str, client_value: str) -> str:
    """A client's option as fstab gives it: a flag the client runs with is the bare flag
    (''), one it runs without is 'false'; other options as they are."""
    if key not in GLUSTER_CONTENT_CLIENT:
        return client_value
    return "" if client_value.lower() == GLUSTER_CONTENT_CLIENT[key] else "false"


def client_options(options: dict[str, str]) -> dict[str, str]:
    """Mount options as the FUSE client takes them: a bare flag (fstab's `fopen-keep-cache`)
    with the value mount.glusterfs gives it (`--fopen-keep-cache=true`)."""
    return {k: GLUSTER_CONTENT_CLIENT[k] if k in GLUSTER_CONTENT_CLIENT and v == "" else v
            for k, v in options.items()}


def live_options(st: StorageStep) -> dict[str, str]:
    """The cache options a MOUNT step's mount was given before (its client's command line):
    what an fstab line added for it keeps besides the step's own."""
    if afs_client.is_afs(st.where) or _is_ceph_fuse(st):
        return {}
    given = gluster_client_options(st.client_argv)
    return {k: given[k] for k in GLUSTER_FUSE_KEYS if k in given}


def _is_ceph_fuse(st: StorageStep) -> bool:
    return bool(st.client_argv) and Path(st.client_argv[0]).name == ceph_client.CLIENT


def _is_afsd(st: StorageStep) -> bool:
    """A step on a lab's afsd.fuse (told by the command line it ran with: a dead client has
    no cell to find)."""
    return bool(st.client_argv) and Path(st.client_argv[0]).name == afs_client.CLIENT


def volume_step(env: Env, volume: str, options: dict[str, str]) -> StorageStep | str:
    if not shutil.which("gluster"):
        return "the gluster CLI is not on this machine: run it on a server of the volume"
    try:
        current = gluster.volume_options(env, volume)
    except ComponentError:
        return f"volume {volume} is not managed from this machine: run it on one of its servers"
    before = {k: current.get(k, "").replace("(DEFAULT)", "").strip() for k in options}
    return StorageStep(VOLUME, volume, before, dict(options))


def do(env: Env, st: StorageStep, lab: str = "") -> None:
    """Make one storage step; StepFailed when the new mount does not serve the same tree."""
    env.log(f"storage: {st.text()}")
    if st.kind == MIRROR:
        try:
            mirror.do(env, st)
        except ComponentError as exc:
            raise StepFailed(str(exc)) from None
        return
    if st.kind == VOLUME:
        st.done = True  # a half-made step is undone whole
        try:
            for key, value in st.after.items():
                gluster.set_volume_option(env, st.where, key, value)
        except ComponentError as exc:
            raise StepFailed(str(exc)) from None
        return
    if _is_afsd(st):  # a lab's OpenAFS client: restarted
        st.done = True  # a failed restart is undone: the client started with its old flags
        try:
            st.client_pid = afs_client.restart_with(env, st.where, st.client_argv, st.after)
        except ComponentError as exc:
            raise StepFailed(f"the restart of {st.where}'s AFS client failed ({exc})") from None
        if lab:
            labs.record_mount(env, lab, st.after, st.client_pid)
        return
    if _is_ceph_fuse(st):  # a lab's ceph-fuse: restarted
        if ceph_client.lab_cluster(st.where) is None:
            raise StepFailed(f"no lab's ceph-fuse serves {st.where} any more: `statstorm lab "
                             "down` and up again")
        st.done = True  # a failed restart is undone: the client started with its old options
        try:
            st.client_pid = ceph_client.restart_with(env, st.where, st.client_argv, st.after)
        except ComponentError as exc:
            raise StepFailed(f"the restart of {st.where}'s ceph-fuse failed ({exc})") from None
        if lab:
            labs.record_mount(env, lab, st.after, st.client_pid)
        return
    mp = Path(st.where)
    listing = sorted(os.listdir(mp))
    try:
        st.client_pid = gluster.stack_client(
            env, gluster.client_argv_with(st.client_argv, client_options(st.after)), mp)
    except ComponentError as exc:
        raise StepFailed(f"the remount of {mp} failed ({exc})") from None
    st.done = True
    top = mounts.fuse_client(st.where, GLUSTER_CLIENT)
    got = gluster_client_options(top[1]) if top else {}
    if top is None or top[0] != st.client_pid or any(
            got.get(k) != v for k, v in client_options(st.after).items()):
        raise StepFailed(f"the new client of {mp} does not serve it with {st.after}")
    if sorted(os.listdir(mp)) != listing:
        raise StepFailed(f"the remounted {mp} does not show the same files")
    if lab:
        labs.record_mount(env, lab, st.after, st.client_pid)


def undo(env: Env, st: StorageStep, lab: str = "") -> None:
    if not st.done:
        return
    env.log(f"storage: undoing {st.text()}")
    if st.kind == MIRROR:
        mirror.undo(env, st)
        return
    if st.kind == VOLUME:
        for key, value in st.before.items():
            if value:
                gluster.set_volume_option(env, st.where, key, value)
            else:
                gluster.reset_volume_option(env, st.where, key)
    elif _is_afsd(st):
        pid = afs_client.restore(env, st.where, st.client_argv)
        if lab:
            labs.record_mount(env, lab, st.before, pid)
    elif _is_ceph_fuse(st):
        pid = ceph_client.restore(env, st.where, st.client_argv)
        if lab:
            labs.record_mount(env, lab, st.before, pid)
    else:
        top = mounts.fuse_client(st.where, GLUSTER_CLIENT)
        if top is None or top[0] != st.client_pid:
            raise ComponentError(f"{st.where} is no longer served by the client apply started "
                                 f"(PID {st.client_pid}): unmount it by hand")
        gluster.unmount(env, Path(st.where), st.client_pid)
        below = mounts.fuse_client(st.where, GLUSTER_CLIENT)
        if lab:
            labs.record_mount(env, lab, st.before, below[0] if below else 0)
    st.done = False
