"""A stock Debian host for the tests: Debian's own services, configured the Debian way in
/etc, and the host restored exactly afterwards.

`stock_host()` holds the stock-host lock (one such test at a time), refuses to run while the
host's own php-fpm, nginx or Apache serves (it never stops what it did not start), copies the
configuration trees it may change (`/etc/php/8.2`, `/etc/nginx`, `/etc/apache2`,
`/etc/fstab`) and, whatever the test did, stops the services it started (by their pid files
and PIDs), unmounts its mounts, deletes its GlusterFS volume and puts every tree back as it was
— checked by a digest of each tree (names, bytes, modes, owners, link targets).

What a test builds on it, all through Debian's own tools and files:
- php-fpm from `/etc/php/8.2/fpm` started as Debian's init script starts it (`--daemonize`,
  the pid file of php-fpm.conf), as its systemd unit does (`--nodaemonize`) or as containers do
  (`-F`);
- nginx from `/etc/nginx` (sites in `sites-available`, enabled by a symlink, as admins do);
- Apache from `/etc/apache2` (`a2enmod`, `a2dismod`, `a2ensite`, `apache2ctl`);
- a GlusterFS volume mounted by hand or from `/etc/fstab`, with default options;
- the code of Debian-packaged PHP applications statstorm has no knowledge of (DokuWiki,
  phpMyAdmin), copied to local disk and onto the volume.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import signal
import subprocess
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

LOCK = Path("/tmp/statstorm-stock-host.lock")
TREES = (Path("/etc/php/8.2"), Path("/etc/nginx"), Path("/etc/apache2"), Path("/etc/fstab"))
FPM = "/usr/sbin/php-fpm8.2"
FPM_CONF = Path("/etc/php/8.2/fpm/php-fpm.conf")
FPM_PIDFILE = Path("/run/php/php8.2-fpm.pid")
NGINX_PIDFILE = Path("/run/nginx.pid")
APACHE_PIDFILE = Path("/var/run/apache2/apache2.pid")
FPM_STYLES = {  # how each start style starts Debian's php-fpm
    "init": ["--daemonize"],  # /etc/init.d/php8.2-fpm
    "systemd": ["--nodaemonize"],  # php8.2-fpm.service's ExecStart
    "container": ["-F"],
}
APPS = {"dokuwiki": Path("/usr/share/dokuwiki"), "phpmyadmin": Path("/usr/share/phpmyadmin")}


def php_site(port: int, root: Path, index: str = "doku.php index.php") -> str:
    """An nginx site in Debian's style: `root`, PHP through snippets/fastcgi-php.conf to
    Debian's www pool."""
    return (f"server {{\n\tlisten 127.0.0.1:{port};\n\troot {root};\n\tindex {index};\n\n"
            "\tlocation ~ \\.php$ {\n\t\tinclude snippets/fastcgi-php.conf;\n"
            "\t\tfastcgi_pass unix:/run/php/php8.2-fpm.sock;\n\t}\n}\n")


def tree_entries(path: Path) -> dict[str, str]:
    """Each name under `path` with its type and mode, owner, and bytes' or link's digest."""
    items = [path] if not path.is_dir() or path.is_symlink() else sorted(
        [path, *path.rglob("*")])
    out = {}
    for p in items:
        if not os.path.lexists(p):
            out[str(p)] = "absent"
            continue
        st = p.lstat()
        body = (os.readlink(p).encode() if p.is_symlink()
                else p.read_bytes() if p.is_file() else b"")
        out[str(p)] = f"{st.st_mode:o} {st.st_uid}:{st.st_gid} {hashlib.sha256(body).hexdigest()}"
    return out


class TreeDigest(str):
    """A tree's digest that names the entries that differ when compared with another."""

    entries: dict[str, str]

    def __new__(cls, path: Path) -> "TreeDigest":
        entries = tree_entries(path)
        made = super().__new__(cls, hashlib.sha256(repr(sorted(entries.items())).encode())
                               .hexdigest())
        made.entries = entries
        return made

    def differences(self, other: "TreeDigest") -> list[str]:
        names = sorted(set(self.entries) | set(other.entries))
        return [n for n in names if self.entries.get(n) != other.entries.get(n)]


def tree_digest(path: Path) -> TreeDigest:
    """Every name under `path` with its type, mode, owner, bytes or link target (compared as
    a string; `differences` names what changed)."""
    return TreeDigest(path)


def _pid_of(pidfile: Path) -> int:
    try:
        return int(pidfile.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def _alive(pid: int) -> bool:
    try:
        return pid > 0 and Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][0] != "Z"
    except OSError:
        return False


def _end(pid: int, sig: int = signal.SIGQUIT, timeout: float = 15) -> None:
    """End one process this harness started, gently first."""
    if not _alive(pid):
        return
    os.kill(pid, sig)
    deadline = time.monotonic() + timeout
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)


def _run(*argv: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=check, timeout=timeout)


def _serving(pidfile: Path, comm: str) -> int:
    pid = _pid_of(pidfile)
    if _alive(pid) and comm in Path(f"/proc/{pid}/comm").read_text():
        return pid
    return 0


def wait_for(what: str, test: object, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(test) and test():
            return
        time.sleep(0.05)
    raise AssertionError(f"{what} within {timeout:.0f} s")


@dataclass
class StockHost:
    """The host while a test changes it; everything recorded here is undone at the end."""

    backup: Path
    digests: dict[Path, str]
    fpm_pids: list[int] = field(default_factory=list)  # masters and -F/--nodaemonize parents
    nginx_pids: list[int] = field(default_factory=list)
    apache_started: bool = False
    mounts: list[Path] = field(default_factory=list)
    volume: str = ""
    brick: Path | None = None
    glusterd_started: bool = False
    dirs: list[Path] = field(default_factory=list)

    # -- files -----------------------------------------------------------------------------
    def write(self, path: str | Path, text: str) -> Path:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        return p

    def scratch(self, name: str) -> Path:
        """A directory of the test's own, www-data can read, removed at the end."""
        d = Path(f"/srv/statstorm-stock-{uuid.uuid4().hex[:6]}-{name}")
        d.mkdir(parents=True, mode=0o755)
        self.dirs.append(d)
        return d

    def copy_app(self, app: str, dest: Path) -> Path:
        """A Debian-packaged PHP application's code, copied as an admin would (`cp -a`)."""
        src = APPS[app]
        _run("cp", "-a", str(src), str(dest), timeout=300)
        return dest

    # -- php-fpm ---------------------------------------------------------------------------
    def fpm_start(self, style: str = "init") -> int:
        """Debian's php-fpm on /etc/php/8.2/fpm, started in `style`; returns the master's PID."""
        argv = [FPM, *FPM_STYLES[style], "--fpm-config", str(FPM_CONF)]
        Path("/run/php").mkdir(exist_ok=True)
        _run(FPM, "-t", "--fpm-config", str(FPM_CONF))
        if style == "init":
            _run("start-stop-daemon", "--start", "--quiet", "--pidfile", str(FPM_PIDFILE),
                 "--exec", FPM, "--", *argv[1:])
            wait_for("php-fpm wrote its pid file", lambda: _serving(FPM_PIDFILE, "php-fpm"))
            pid = _serving(FPM_PIDFILE, "php-fpm")
        else:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL, start_new_session=True)
            pid = proc.pid
            wait_for("php-fpm wrote its pid file", lambda: _pid_of(FPM_PIDFILE) == pid)
        self.fpm_pids.append(pid)
        return pid

    def fpm_master(self) -> int:
        """The php-fpm master serving now (after a reload it may be another PID)."""
        return _serving(FPM_PIDFILE, "php-fpm")

    def fpm_stop(self) -> None:
        for pid in {*self.fpm_pids, self.fpm_master()}:
            if pid:
                _end(pid)
        self.fpm_pids.clear()

    # -- nginx -----------------------------------------------------------------------------
    def nginx_site(self, name: str, text: str) -> Path:
        """A site as admins add one: sites-available/NAME, enabled by a symlink."""
        avail = self.write(f"/etc/nginx/sites-available/{name}", text)
        link = Path(f"/etc/nginx/sites-enabled/{name}")
        if not link.is_symlink():
            link.symlink_to(avail)
        return avail

    def nginx_start(self, *, keep_default: bool = False) -> int:
        if not keep_default:
            Path("/etc/nginx/sites-enabled/default").unlink(missing_ok=True)
        _run("nginx", "-t", "-q")
        _run("nginx")  # Debian's: daemon on, pid /run/nginx.pid
        wait_for("nginx wrote its pid file", lambda: _serving(NGINX_PIDFILE, "nginx"))
        pid = _serving(NGINX_PIDFILE, "nginx")
        self.nginx_pids.append(pid)
        return pid

    def nginx_stop(self) -> None:
        for pid in {*self.nginx_pids, _serving(NGINX_PIDFILE, "nginx")}:
            if pid:
                _end(pid)
        self.nginx_pids.clear()

    # -- Apache ----------------------------------------------------------------------------
    def apache_listen(self, *ports: int) -> None:
        """ports.conf as an admin keeping Apache on loopback writes it."""
        self.write("/etc/apache2/ports.conf",
                   "".join(f"Listen 127.0.0.1:{p}\n" for p in ports))

    def apache_site(self, name: str, text: str) -> Path:
        avail = self.write(f"/etc/apache2/sites-available/{name}.conf", text)
        _run("a2ensite", "-q", name)
        return avail

    def a2(self, tool: str, *names: str) -> None:
        """a2enmod / a2dismod / a2enconf / a2disconf / a2dissite, quietly."""
        _run(tool, "-q", *names)

    def apache_start(self) -> int:
        Path("/etc/apache2/sites-enabled/000-default.conf").unlink(missing_ok=True)
        _run("apache2ctl", "configtest")
        _run("apache2ctl", "start")
        self.apache_started = True
        wait_for("Apache wrote its pid file", lambda: _serving(APACHE_PIDFILE, "apache2"))
        return _serving(APACHE_PIDFILE, "apache2")

    def apache_stop(self) -> None:
        pid = _serving(APACHE_PIDFILE, "apache2")
        if self.apache_started and pid:
            _run("apache2ctl", "stop", check=False)
            deadline = time.monotonic() + 15
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            _end(pid, signal.SIGTERM)
        self.apache_started = False

    # -- GlusterFS -------------------------------------------------------------------------
    def gluster_volume(self) -> str:
        """A one-brick volume on this machine (glusterd started if it was not running)."""
        from statstorm.adapters.storage import gluster
        from statstorm.env import Env

        env = Env()
        gluster.require_installed()
        with gluster.glusterd_lock():
            self.glusterd_started = gluster.ensure_glusterd(env)
            self.volume = f"stock{uuid.uuid4().hex[:6]}"
            self.brick = Path(f"/var/tmp/statstorm-stock-brick-{self.volume}")
            gluster.create_volume(env, self.volume, self.brick)
        return self.volume

    def mount_by_hand(self, mount_point: Path) -> Path:
        """`mount -t glusterfs HOST:/VOL DIR` with default options, as an admin types it."""
        from statstorm.adapters.storage import gluster

        mount_point.mkdir(parents=True, exist_ok=True)
        _run("mount", "-t", "glusterfs", f"{gluster.brick_host()}:/{self.volume}",
             str(mount_point))
        self.mounts.append(mount_point)
        return mount_point

    def mount_from_fstab(self, mount_point: Path, options: str = "defaults,_netdev") -> Path:
        """An fstab line for the volume, then `mount DIR`, as a boot would mount it."""
        from statstorm.adapters.storage import gluster

        mount_point.mkdir(parents=True, exist_ok=True)
        line = f"{gluster.brick_host()}:/{self.volume} {mount_point} glusterfs {options} 0 0\n"
        fstab = Path("/etc/fstab")
        fstab.write_text(fstab.read_text() + line)
        _run("mount", str(mount_point))
        self.mounts.append(mount_point)
        return mount_point

    # -- the end ---------------------------------------------------------------------------
    def teardown(self) -> list[str]:
        """Undo everything; return what could not be undone (the test fails on it)."""
        problems: list[str] = []
        for step in (self.apache_stop, self.nginx_stop, self.fpm_stop):
            try:
                step()
            except Exception as exc:  # keep undoing the rest
                problems.append(f"{step.__name__}: {exc}")
        for mp in reversed(self.mounts):
            for _ in range(4):  # stacked clients (apply remounts) come off one by one
                if _run("mountpoint", "-q", str(mp), check=False).returncode != 0:
                    break
                if _run("umount", str(mp), check=False).returncode != 0:
                    _run("umount", "-l", str(mp), check=False)
        if self.volume:
            from statstorm.adapters.storage import gluster
            from statstorm.env import Env

            env = Env()
            with gluster.glusterd_lock():
                try:
                    gluster.delete_volume(env, self.volume, self.brick)
                except Exception as exc:
                    problems.append(f"deleting volume {self.volume}: {exc}")
                if self.glusterd_started and not gluster.list_volumes(env):
                    gluster.stop_glusterd(env)
        for d in self.dirs:
            shutil.rmtree(d, ignore_errors=True)
        for tree in TREES:
            saved = self.backup / tree.name
            if tree_digest(tree) == self.digests[tree]:
                continue
            if tree.is_dir() and not tree.is_symlink():
                shutil.rmtree(tree)
            else:
                tree.unlink(missing_ok=True)
            if os.path.lexists(saved):
                _run("cp", "-a", str(saved), str(tree))
            if tree_digest(tree) != self.digests[tree]:
                problems.append(f"{tree} is not as it was")
        return problems


def _host_serving() -> list[str]:
    found = []
    for pidfile, comm in ((FPM_PIDFILE, "php-fpm"), (NGINX_PIDFILE, "nginx"),
                          (APACHE_PIDFILE, "apache2")):
        if _serving(pidfile, comm):
            found.append(f"{comm} ({pidfile})")
    return found


@contextmanager
def stock_host() -> Iterator[StockHost]:
    """The host for one test, restored exactly afterwards (see the module's docstring)."""
    LOCK.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        busy = _host_serving()
        if busy:
            raise RuntimeError(f"the host's own {', '.join(busy)} is running: the stock-host "
                               "tests start and stop Debian's services themselves")
        backup = Path(f"/var/tmp/statstorm-stock-backup-{uuid.uuid4().hex[:8]}")
        backup.mkdir(mode=0o700)
        digests = {}
        for tree in TREES:
            digests[tree] = tree_digest(tree)
            if os.path.lexists(tree):
                _run("cp", "-a", str(tree), str(backup / tree.name))
        host = StockHost(backup, digests)
        try:
            yield host
        finally:
            problems = host.teardown()
            shutil.rmtree(backup, ignore_errors=True)
            assert not problems, "; ".join(problems)
    finally:
        os.close(fd)
