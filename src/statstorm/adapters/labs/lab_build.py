"""Making and removing labs: the job of `statstorm lab`, which `statstorm matrix` and
`statstorm demo` need too (a lab per cell, per storage), so it lives here, once.

A lab is a dedicated php-fpm master + pool behind a dedicated nginx on 127.0.0.1 — or a
dedicated Apache with one MPM running PHP through php-fpm, mod_php or mod_fcgid's php-cgi
(adapters/labs/apache_lab.py) — serving MediaWiki (from Debian) or the generated synthetic app,
from local disk or from a single-brick GlusterFS volume on loopback mounted with the FUSE
client, or from an OpenAFS cell of its own read through afsd.fuse (adapters/storage/openafs.py),
or from a single-node Ceph cluster of its own read through ceph-fuse (adapters/storage/ceph.py).
Everything `up` starts is recorded in `<state root>/labs/<name>/lab.json` the moment it starts,
so `down` (or the cleanup after a failed or interrupted `up`) ends exactly that, by PID.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from statstorm import faults
from statstorm.adapters.apply import backups
from statstorm.adapters.host import delay_path, procs
from statstorm.adapters.labs import (apache_lab, lab_apps, lab_servers, lab_tree, mariadb,
                                     php_roots, phpfpm)
from statstorm.adapters.labs import state as labs
from statstorm.adapters.php import target
from statstorm.adapters.servers import nginx
from statstorm.adapters.storage import ceph, gluster, mounts, openafs
from statstorm.apps import mediawiki, synthetic, wordpress
from statstorm.env import Env
from statstorm.errors import BusyError, ComponentError, PrivilegeError, UsageError
from statstorm.model import storage_delay
from statstorm.model.storage_kinds import STORAGE, lab_storages
from statstorm.results.common import read_json
from statstorm.results.lab import LabState
from statstorm.results.php_root import HOST_VERSION, release
from statstorm.results.serving import Handler
from statstorm.results.storage_kind import StorageKind

APPS = ("mediawiki", "synthetic", "wordpress")
STORAGES = tuple(str(k) for k in lab_storages())  # local, glusterfs, cephfs, openafs
GLUSTER_CLIENT = STORAGE[StorageKind.GLUSTERFS].client  # its FUSE client's program
SERVERS = ("nginx", "apache")
VOLUME_PREFIX = "statstorm-"
_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,31}$")


@dataclass(frozen=True)
class LabOptions:
    name: str = "lab"
    app: str = "mediawiki"
    storage: str = "local"
    mount_options: dict[str, str] = field(default_factory=dict)
    php_ini: dict[str, str] = field(default_factory=dict)
    workers: int = 4
    port: int | None = None
    app_spec: synthetic.AppSpec = field(default_factory=synthetic.AppSpec)
    server: str = "nginx"
    mpm: str = ""  # Apache's MPM; '' = prefork for mod_php, event otherwise
    handler: str = "fpm"
    allow_override: str = ""  # Apache's AllowOverride for the docroot; '' = None
    php: str = HOST_VERSION  # PHP's version: the host's own, or one run from its PHP root
    storage_delay_us: int = 0  # added to each round trip to the storage (model/storage_delay.py)


def validate(env: Env, opts: LabOptions) -> None:
    """Check every option, privilege and dependency before anything starts."""
    if not _NAME.match(opts.name):
        raise UsageError(f"--name {opts.name!r}: use 1-32 lower-case letters, digits and dashes")
    if release(opts.php).version != HOST_VERSION and opts.handler != "fpm":
        raise UsageError(f"--php {opts.php}: php-fpm runs from its PHP root, so use --handler "
                         f"fpm (mod_php and fcgid run the host's PHP {HOST_VERSION})")
    if opts.app not in APPS:
        raise UsageError(f"--app {opts.app!r}: choose one of {', '.join(APPS)}")
    if opts.storage not in STORAGES:
        raise UsageError(f"--storage {opts.storage!r}: choose one of {', '.join(STORAGES)}")
    if not 1 <= opts.workers <= 256:
        raise UsageError("--workers must be between 1 and 256")
    if opts.server not in SERVERS:
        raise UsageError(f"--server {opts.server!r}: choose one of {', '.join(SERVERS)}")
    apache_lab.check_architecture(opts.server, opts.mpm, opts.handler, opts.allow_override)
    if opts.mount_options and opts.storage != StorageKind.GLUSTERFS:
        raise UsageError("--mount-opt applies to --storage glusterfs only")
    if not 0 <= opts.storage_delay_us <= storage_delay.MAX_US:
        raise UsageError(f"--storage-delay: {opts.storage_delay_us} µs is out of range "
                         f"(0 to {storage_delay.format_us(storage_delay.MAX_US)})")
    storage_delay.check(opts.storage, opts.storage_delay_us)
    for key in opts.mount_options:
        if key not in gluster.KNOWN_MOUNT_OPTIONS:
            raise UsageError(f"--mount-opt {key}: unknown GlusterFS FUSE option; known: "
                             + ", ".join(sorted(gluster.KNOWN_MOUNT_OPTIONS)))
    if opts.port is not None and not 1 <= opts.port <= 65535:
        raise UsageError(f"--port {opts.port}: not a TCP port")
    if opts.app == "synthetic":
        opts.app_spec.validate()
    if not env.is_root():
        raise PrivilegeError("statstorm lab needs root (it starts php-fpm as www-data, mounts "
                             "GlusterFS and binds ports): run it with sudo")
    phpfpm.find_binary()
    php_roots.require(env, opts.php)
    if opts.server == "apache":
        apache_lab.require_installed(opts.handler)
        apache_lab.check_path(labs.lab_dir(env, opts.name))
    else:
        nginx.require_installed()
    if opts.app == "mediawiki":
        mediawiki.require_installed()
    if opts.app == "wordpress":
        lab_apps.require_wordpress(env, opts.php)
    if opts.storage == StorageKind.GLUSTERFS:
        gluster.require_installed()
        if opts.storage_delay_us:
            gluster.require_delay_translator()
    if opts.storage_delay_us and storage_delay.by_path(opts.storage):
        delay_path.require()
    if opts.storage == StorageKind.OPENAFS:
        openafs.require_installed()
        openafs.check_free()
    if opts.storage == StorageKind.CEPHFS:
        ceph.require_installed()
        ceph.check_free()
    if opts.port is not None:
        procs.check_port_free(opts.port)
    _check_reachable(labs.labs_root(env))
    if labs.lab_dir(env, opts.name).exists():
        raise BusyError(f"a lab named {opts.name!r} exists: use it, pick another --name, or run "
                        f"`statstorm lab down --name {opts.name}`")


def _check_reachable(path: Path) -> None:
    """The web server and PHP workers run as www-data: every ancestor must be searchable."""
    for parent in [path, *path.parents]:
        if parent.exists() and not parent.stat().st_mode & 0o001:
            raise UsageError(f"{parent} is not searchable by www-data, so the lab could not serve "
                             f"from below it: `chmod o+x {parent}` or set STATSTORM_HOME elsewhere")


def up(env: Env, opts: LabOptions) -> LabState:
    """Start the lab; on any failure or interruption, undo what was started and re-raise."""
    validate(env, opts)
    port = opts.port if opts.port is not None else procs.free_port()
    root = labs.lab_dir(env, opts.name)
    root.parent.mkdir(parents=True, exist_ok=True)
    try:
        root.mkdir()
    except FileExistsError:
        raise BusyError(f"a lab named {opts.name!r} is being created by another statstorm") from None
    for path in (env.state_root, root.parent, root):
        path.chmod(0o755)  # www-data serves from below here, whatever the umask
    apache = opts.server == "apache"
    rec = labs.LabRecord(LabState(
        name=opts.name, app=opts.app, storage=opts.storage, port=port, workers=opts.workers,
        state_dir=str(root), php_ini=dict(opts.php_ini), mount_options=dict(opts.mount_options),
        server=opts.server, handler=opts.handler,
        mpm=(opts.mpm or apache_lab.default_mpm(opts.handler)) if apache else "",
        allow_override=(opts.allow_override or "None") if apache else "",
        storage_delay_us=opts.storage_delay_us))
    started = env.clock()
    try:
        rec.record()
        _up_steps(env, opts, rec)
    except BaseException:
        env.log(f"lab {opts.name}: start failed, removing what was started…")
        try:
            rec.record(phase="failed")
        except OSError:
            pass
        down(env, opts.name, quiet=True)
        raise
    env.log(f"lab {opts.name}: up in {env.clock() - started:.1f} s")
    return labs.status(env, opts.name)


def _up_steps(env: Env, opts: LabOptions, rec: labs.LabRecord) -> None:
    root = Path(rec.state.state_dir)
    for sub in ("conf", "run", "log", "tmp", "data"):
        (root / sub).mkdir(exist_ok=True)
    fpm = phpfpm.find_binary()
    php = phpfpm.php_cli_for(fpm)
    state = rec.record(fpm_binary=fpm)
    php_roots.share_lab_dir(env, rec, opts.php)  # another PHP: its root sees later mounts
    state = rec.state

    # 1. Where the code will live (behind a delayed path when the storage has no delay of its
    # own: its client in a namespace of the lab's, its servers on the path's host end).
    delayed = None
    if opts.storage_delay_us and storage_delay.by_path(opts.storage):
        lab_servers.step(env, state, "making the storage's delayed path (a namespace for its "
                         f"client, +{storage_delay.format_us(opts.storage_delay_us)} per round "
                         "trip)…", "delay-path")
        # No delay yet: the app is copied in at the machine's own speed (MediaWiki's 24,743
        # files through 5 ms round trips would take many minutes); step 3 puts it on.
        delayed = delay_path.make(env, root, opts.name, opts.storage_delay_us, now_us=0)
    tree = lab_tree.plan(env, opts.app, opts.storage)  # a cached tree's key, if it can have one
    if opts.storage == StorageKind.GLUSTERFS:
        lab_servers.step(env, state, "creating a GlusterFS volume on loopback…", "volume")
        state = rec.record(volume=VOLUME_PREFIX + opts.name, brick=str(root / "brick"))
        lab_tree.seed(env, state, tree, Path(state.brick))  # its brick the cached tree, if any
        with gluster.glusterd_lock():  # no other lab's down stops it meanwhile
            gluster.ensure_glusterd(env)
            gluster.create_volume(env, state.volume, Path(state.brick),
                                  delay_us=opts.storage_delay_us)
        if opts.storage_delay_us:
            gluster.check_delay(env, state.volume, opts.storage_delay_us)
        state = rec.record(mount_point=str(root / "mnt"))
        faults.phase("lab-up/mount")
        state = rec.record(fuse_client_pid=gluster.mount(
            env, state.volume, Path(state.mount_point), opts.mount_options))
        code = Path(state.mount_point) / "app"
        stage = root / "stage"
    elif opts.storage == StorageKind.OPENAFS:
        lab_servers.step(env, state, "starting an OpenAFS cell (database and file servers)…",
                         "volume")
        cell = openafs.Cell(root / openafs.CELL_DIR)
        openafs.write_config(cell, openafs.host_address(env))
        for path in (cell.root, cell.mount_point):
            path.chmod(0o755)  # www-data reads the app through the mount below here
        openafs.start(env, cell, lambda pid: openafs.record_pid(cell, pid),
                      clients=(delayed.ns_address,) if delayed else ())
        state = rec.record(mount_point=str(cell.mount_point))
        faults.phase("lab-up/mount")
        state = rec.record(fuse_client_pid=openafs.mount(env, cell))
        code = cell.code
        code.mkdir()
        stage = root / "stage"
    elif opts.storage == StorageKind.CEPHFS:
        lab_servers.step(env, state, "starting a Ceph cluster on loopback (mon, mgr, OSD, "
                         "MDS)…", "volume")
        cluster = ceph.Cluster(root / ceph.CLUSTER_DIR)
        ceph.write_config(cluster, delayed.host_address if delayed else ceph.ADDRESS)
        for path in (cluster.root, cluster.mount_point):
            path.chmod(0o755)  # www-data reads the app through the mount below here
        ceph.start(env, cluster, lambda pid: ceph.record_pid(cluster, pid))
        state = rec.record(mount_point=str(cluster.mount_point))
        faults.phase("lab-up/mount")
        state = rec.record(fuse_client_pid=ceph.mount(
            cluster, lambda pid: ceph.record_pid(cluster, pid)))
        code = cluster.code
        code.mkdir()
        code.chmod(0o755)
        stage = root / "stage"
    else:
        code = root / "code"
        stage = code
    state = rec.record(code_path=str(code))

    # 2. The app, prepared on local disk, then copied to the storage.
    if opts.app == "mediawiki":
        lab_servers.step(env, state, f"copying MediaWiki {mediawiki.version()} and installing "
                         "it (SQLite)…", "app")
        lab_apps.copy_mediawiki(env, stage)
        lab_tree.after_package(env, state, tree, stage, code)
        mediawiki.install(env, php, stage, root / "data", state.port)
        docroot, entry, front = code, mediawiki.ENTRY, "index.php"
        extra_ini: dict[str, str] = {}
    elif opts.app == "wordpress":
        lab_servers.step(env, state, "starting the lab's MariaDB on a unix socket…", "database")

        def record_db(pid: int) -> None:
            rec.record(mariadb_pid=pid)

        db = lab_apps.start_wordpress_database(env, root, root / "log/mariadbd.out", record_db)
        state = rec.record(db_socket=str(db.socket))
        lab_servers.step(env, state, f"copying WordPress {wordpress.version()} and installing "
                         "it (MariaDB)…", "app")
        lab_apps.copy_wordpress(env, stage)
        lab_tree.after_package(env, state, tree, stage, code)
        wordpress.install(env, php, stage, root / "data", root / "conf", state.port, db)
        docroot, entry, front = code, wordpress.ENTRY, "index.php"
        extra_ini = {}
    else:
        lab_servers.step(env, state, "generating the synthetic app…", "app")
        app = synthetic.generate(env, stage, opts.app_spec)
        docroot, entry, front = code / "public", "/" + app.entry, app.entry
        extra_ini = {"include_path": app.include_path_for(str(code))}
    if stage != code:
        lab_tree.finish(env, state, tree, stage, code)
        shutil.rmtree(stage)

    if delayed is not None:
        lab_servers.step(env, state, f"the storage's path now delays each round trip by "
                         f"{storage_delay.format_us(opts.storage_delay_us)}…", "delay")
        delay_path.set_delay(root, opts.storage_delay_us)

    # 3. php-fpm (unless Apache runs PHP itself) and the web server, our own masters.
    ini = {**extra_ini, **opts.php_ini}
    state = rec.record(docroot=str(docroot), entry_path=entry, php_ini=ini)
    fpm = php_roots.lab_fpm(env, rec, opts.php, fpm)  # another version: its root's, mounted
    state = rec.record(fpm_binary=fpm)
    faults.phase("lab-up/php")
    if Handler(state.handler).php_in_server:
        (root / "conf/php").mkdir(exist_ok=True)
        labs.php_ini_file(state).write_text(apache_lab.render_ini(ini))
        rec.record(php_cgi_binary=target.kind_of(state.handler).cgi_binary())
    else:
        lab_servers.start_fpm(env, rec, fpm, ini)
    if state.server == "apache":
        lab_servers.start_apache(env, rec, docroot, front, fixed_port=opts.port is not None)
    else:
        lab_servers.start_nginx(env, rec, docroot, front, fixed_port=opts.port is not None)
    state = rec.record(url=f"http://127.0.0.1:{rec.state.port}")

    # 4. Prove it serves the app.
    lab_servers.step(env, state, f"checking {state.url}{entry}…", "check")
    lab_servers.check_pages(env, state)
    effective = (apache_lab.effective_ini(state.url, sorted({*lab_servers.REPORTED_INI, *ini}))
                 if Handler(state.handler).php_in_server else state.effective_ini)
    rec.record(effective_ini=effective, phase="up")
    faults.phase("lab-up/up")


def _own_pids(state: LabState) -> list[int]:
    """Processes of this lab found by their unique config paths (covers a crash between a
    spawn and the state write) plus the recorded ones."""
    root = state.state_dir
    pids = {p for p in (state.nginx_pid, state.apache_pid, state.fpm_master_pid) if p}
    pids.update(procs.find_pids([f"{root}/conf/nginx.conf"]))
    pids.update(procs.find_pids([f"{root}/conf/apache2.conf"]))
    pids.update(procs.find_pids([f"{root}/conf/php-fpm.conf"]))
    return sorted(p for p in pids if procs.alive(p))


def down(env: Env, name: str, *, quiet: bool = False) -> bool:
    """Stop everything the lab started; idempotent. Returns False if there was no lab."""
    if not _NAME.match(name):
        raise UsageError(f"--name {name!r}: use 1-32 lower-case letters, digits and dashes")
    root = labs.lab_dir(env, name)
    if not root.exists():
        if not quiet:
            env.log(f"lab {name}: not running; nothing to do")
        return False
    if not env.is_root():
        raise PrivilegeError("statstorm lab down needs root: run it with sudo")
    try:
        state = LabState.from_json(read_json(root / "lab.json", "lab state"))
    except (UsageError, ValueError):
        state = LabState(name=name, app="", storage="", port=0, workers=0, state_dir=str(root))
    if not quiet:
        env.log(f"lab {name}: stopping…")
    recorded_workers = set(state.worker_pids)
    if state.fpm_master_pid and procs.alive(state.fpm_master_pid):
        recorded_workers.update(phpfpm.worker_pids(state.fpm_master_pid))
    for pid in _own_pids(state):
        procs.terminate(pid)
    # mod_fcgid's php-cgi processes end with Apache; any that outlived it, by their error_log.
    for pid in procs.find_pids([f"{root}/log/php-cgi.log"]):
        procs.terminate(pid)
    pool_title = f"pool {state.pool}" if state.pool else None
    for pid in recorded_workers:
        if pool_title and pool_title in " ".join(procs.cmdline(pid)):
            procs.terminate(pid)
    php_roots.release_lab(env, state)  # the mounts in a PHP root, once its php-fpm ended
    # WordPress's database, after its clients; found by its data directory as well.
    mariadb.stop(state.mariadb_pid, mariadb.Instance.under(root))
    mount_point = Path(state.mount_point) if state.mount_point else root / "mnt"
    cell = openafs.Cell(root / openafs.CELL_DIR)
    cluster = ceph.Cluster(root / ceph.CLUSTER_DIR)
    try:
        if cell.root.exists():  # an OpenAFS lab, however far its up went: client, servers
            mount_point = cell.mount_point
            openafs.unmount(env, cell)
            openafs.stop(cell, openafs.recorded_pids(cell))
        if cluster.root.exists():  # a CephFS lab, however far its up went: client, daemons
            mount_point = cluster.mount_point
            ceph.unmount(env, cluster)
            ceph.stop(cluster, ceph.recorded_pids(cluster))
    finally:
        delay_path.remove(env, root)  # after the client that ran in its namespace
    # `statstorm apply` may have stacked clients with other options: unmount each, top first.
    clients = [pid for pid, _ in mounts.fuse_clients(str(mount_point), GLUSTER_CLIENT)]
    for pid in dict.fromkeys([*clients, state.fuse_client_pid]):
        gluster.unmount(env, mount_point, pid)
    if state.volume:
        gluster.delete_volume(env, state.volume, Path(state.brick) if state.brick else None)
    # The last lab down stops the glusterd that statstorm started (its PID file is ours),
    # unless it serves any volume still, a lab's or one an admin made on it since (the
    # pool `tune` changes may be mounted from it); under the lock, so no other statstorm is
    # between starting it and creating its volume.
    if gluster.GLUSTERD_PIDFILE.exists() and Path("/usr/sbin/gluster").exists():
        with gluster.glusterd_lock():
            if not gluster.glusterd_running(env):
                gluster.GLUSTERD_PIDFILE.unlink(missing_ok=True)
            elif not gluster.list_volumes(env):
                gluster.stop_glusterd(env)
    php_roots.unshare_lab_dir(env, state)
    if gluster.is_mounted(mount_point):
        raise ComponentError(f"{mount_point} is still mounted; unmount it and run "
                             f"`statstorm lab down --name {name}` again")
    shutil.rmtree(root, ignore_errors=True)
    if root.exists():
        raise ComponentError(f"could not remove {root}; remove it by hand")
    backups.retire_lab(env, name)  # apply's sets of it: their files went with the lab
    if not quiet:
        env.log(f"lab {name}: down")
    return True
