"""A lab's own MariaDB server (Debian's `mariadbd`) on a unix socket, ended by PID.

The server runs as the `mysql` user with its data directory and socket below the lab's
state directory, no TCP listener (`--skip-networking`) and no system configuration
(`--no-defaults`), so it never meets the machine's own MariaDB service. Root logs in over
the socket as the operating system's root (unix_socket authentication); the app gets its
own database and user with a password.
"""

from __future__ import annotations

import pwd
import shutil
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from statstorm.adapters.host import procs
from statstorm.env import Env
from statstorm.errors import ComponentError, DependencyError, UsageError

SERVER = "/usr/sbin/mariadbd"
INSTALL_DB = "/usr/bin/mariadb-install-db"
CLIENT = "/usr/bin/mariadb"
USER = "mysql"
# A unix socket's path must fit sockaddr_un.sun_path (108 bytes with its NUL).
SOCKET_PATH_MAX = 107
_PROTOCOL_V10 = 10  # the first payload byte of the server's greeting packet


@dataclass(frozen=True)
class Instance:
    """Where one server keeps its files: data on local disk, socket and PID file in a
    directory the `mysql` user owns."""

    datadir: Path
    run_dir: Path

    @classmethod
    def under(cls, lab_root: Path) -> "Instance":
        return cls(datadir=lab_root / "data/mysql", run_dir=lab_root / "run/mysqld")

    @property
    def socket(self) -> Path:
        return self.run_dir / "mysqld.sock"

    @property
    def pid_file(self) -> Path:
        return self.run_dir / "mysqld.pid"


def require_installed() -> None:
    for path in (SERVER, INSTALL_DB, CLIENT):
        if not Path(path).exists():
            raise DependencyError(f"{path} is missing (package mariadb-server): "
                                  "run scripts/setup.sh --lab as root")
    try:
        pwd.getpwnam(USER)
    except KeyError:
        raise DependencyError(f"there is no {USER!r} user (made by mariadb-server): "
                              "reinstall it with scripts/setup.sh --lab") from None


def server_argv(inst: Instance) -> list[str]:
    """The server's command line; `--datadir=…` in it is how `own_pids` finds it."""
    return [SERVER, "--no-defaults", f"--datadir={inst.datadir}", f"--socket={inst.socket}",
            f"--pid-file={inst.pid_file}", "--skip-networking", f"--user={USER}"]


def init(env: Env, inst: Instance) -> None:
    """Create the system tables in an empty data directory (`mariadb-install-db`)."""
    if len(str(inst.socket)) > SOCKET_PATH_MAX:
        raise UsageError(f"the MariaDB socket path {inst.socket} is longer than "
                         f"{SOCKET_PATH_MAX} bytes: use a shorter --name or STATSTORM_HOME")
    inst.run_dir.mkdir(parents=True, exist_ok=True)
    shutil.chown(inst.run_dir, USER, USER)
    inst.run_dir.chmod(0o755)  # the PHP workers (www-data) reach the socket through it
    env.run([INSTALL_DB, "--no-defaults", f"--datadir={inst.datadir}", f"--user={USER}",
             "--auth-root-authentication-method=socket", "--skip-test-db"],
            timeout=180, what="mariadb-install-db")


def start(env: Env, inst: Instance, log: Path, record: Callable[[int], None],
          timeout: float = 60) -> int:
    """Start the server in the foreground of its own session; wait until its socket
    greets. `record(pid)` stores the PID before anything else can fail."""
    env.debug("$ " + " ".join(server_argv(inst)))
    pid = procs.spawn_daemon(server_argv(inst), log, record)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not procs.alive(pid):
            raise ComponentError(f"mariadbd exited at start: {_last_error(log)}")
        if greets(inst.socket):
            return pid
        time.sleep(0.1)
    stop(pid, inst)
    raise ComponentError(f"mariadbd did not answer on {inst.socket} within {timeout:.0f} s: "
                         f"see {log}")


def greets(path: Path) -> bool:
    """True when a server answers on the unix socket `path` with a protocol-10 greeting."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(5)
        try:
            sock.connect(str(path))
            head = sock.recv(5)
        except OSError:
            return False
    return len(head) == 5 and head[4] == _PROTOCOL_V10


def create_database(env: Env, inst: Instance, database: str, user: str, password: str) -> None:
    """A database and a user with every right on it, connecting over the socket. The
    statements go on stdin so the password never shows in a command line."""
    for value in (database, user, password):
        if not value.replace("_", "").replace("-", "").isalnum():
            raise ComponentError(f"refusing an SQL name or password with odd characters: {value!r}")
    sql = (f"CREATE DATABASE `{database}` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci;\n"
           f"CREATE USER '{user}'@'localhost' IDENTIFIED BY '{password}';\n"
           f"GRANT ALL PRIVILEGES ON `{database}`.* TO '{user}'@'localhost';\n")
    env.run([CLIENT, "--no-defaults", f"--socket={inst.socket}", "--user=root", "--batch"],
            input_text=sql, timeout=60, what="mariadb (creating the app's database)")


def own_pids(inst: Instance) -> list[int]:
    """Live processes whose command line names this data directory: the server, and
    `mariadb-install-db` with its bootstrap server if an interrupted start left them."""
    return procs.find_pids([f"--datadir={inst.datadir}"])


def stop(pid: int, inst: Instance, timeout: float = 30) -> None:
    """End the server (`pid`, 0 if never recorded) and anything else on its data directory:
    SIGTERM for a clean InnoDB shutdown, SIGKILL after `timeout`. A recorded PID is ended
    only while its command line still names the data directory, never once reused."""
    found = own_pids(inst)
    for p in sorted(found, key=lambda p: p != pid):
        procs.terminate(p, timeout=timeout)


def _last_error(log: Path) -> str:
    try:
        lines = log.read_text(errors="replace").strip().splitlines()
    except OSError:
        return f"see {log}"
    errors = [ln for ln in lines if "[ERROR]" in ln]
    return (errors or lines or [f"see {log}"])[-1].strip()
