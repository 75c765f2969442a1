"""php-fpm: a dedicated master + pool for the lab, never the system's own."""

from __future__ import annotations

import glob
import os
import re
import signal
import time
from pathlib import Path
from typing import Callable, Mapping

from statstorm.adapters.host import procs
from statstorm.env import Env
from statstorm.errors import ComponentError, DependencyError, UsageError
from statstorm.results.lab import LabState
from statstorm.results.php_root import MARKER

_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")


def find_binary() -> str:
    """The newest php-fpm binary installed (Debian 12's, `/usr/sbin/php-fpm` + its version)."""
    found = sorted(glob.glob("/usr/sbin/php-fpm[0-9]*"), key=_version_key)
    if not found:
        raise DependencyError("php-fpm is not installed: run scripts/setup.sh --lab as root")
    return found[-1]


def _version_key(path: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", Path(path).name))


def root_of(binary: str) -> str:
    """The PHP root (adapters/labs/php_roots.py) holding `binary`: the nearest ancestor with
    a root's marker; '' for the host's own PHP."""
    if not binary.startswith("/"):
        return ""
    for parent in Path(binary).parents:
        if parent != Path("/") and (parent / MARKER).is_file():
            return str(parent)
    return ""


def command(binary: str) -> list[str]:
    """How to run a php-fpm (or php) binary: as it is for the host's PHP; chrooted in its
    PHP root (adapters/labs/php_roots.py) when `binary` lies in one, so a lab of another
    PHP version is tested, read back and started by the same code."""
    root = root_of(binary)
    if root:
        return ["chroot", root, "/" + str(Path(binary).relative_to(root))]
    return [binary]


def version_of(binary: str) -> str:
    """The PHP version in a php-fpm or php binary's Debian name (`php-fpm8.4` → "8.4"),
    '' when the name carries none."""
    m = re.search(r"(\d+\.\d+)$", Path(binary).name)
    return m.group(1) if m else ""


def php_cli_for(fpm_binary: str) -> str:
    """The php CLI of the same version as `fpm_binary`, in the same PHP root when it lies in
    one (run it through `command`)."""
    version = Path(fpm_binary).name.removeprefix("php-fpm")
    root = root_of(fpm_binary)
    cli = f"{root}/usr/bin/php{version}"
    if not Path(cli).exists():
        where = f" in the PHP root {root} (rebuild it: `statstorm lab php-root build " \
                f"{version} --rebuild`)" if root else ""
        raise DependencyError(f"{cli} is missing: install php{version}-cli{where}")
    return cli


def parse_ini_overrides(pairs: list[str]) -> dict[str, str]:
    """`KEY=VALUE` strings from --php-ini into a dict, rejecting what php-fpm would choke on."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not _KEY.match(key):
            raise UsageError(f"--php-ini {pair!r}: expected KEY=VALUE, e.g. realpath_cache_size=16K")
        if "\n" in value or "\0" in value:
            raise UsageError(f"--php-ini {key}: the value may not contain newlines")
        out[key] = value.strip()
    return out


def render_conf(*, pool: str, run_dir: Path, log_dir: Path, workers: int,
                user: str = "www-data", max_requests: int = 0) -> str:
    return f"""\
; written by statstorm lab; the lab's own php-fpm master
[global]
pid = {run_dir}/php-fpm.pid
error_log = {log_dir}/php-fpm.log
daemonize = no
process_control_timeout = 5s

[{pool}]
user = {user}
group = {user}
listen = {run_dir}/php-fpm.sock
listen.owner = {user}
listen.group = {user}
listen.mode = 0660
pm = static
pm.max_children = {workers}
pm.max_requests = {max_requests}
pm.status_path = /statstorm-fpm-status
ping.path = /statstorm-fpm-ping
catch_workers_output = yes
clear_env = no
"""


def ini_args(overrides: Mapping[str, str]) -> list[str]:
    args: list[str] = []
    for key, value in overrides.items():
        args += ["-d", f"{key}={value}"]
    return args


def lab_conf(state: LabState) -> Path:
    """A lab master's configuration file."""
    return Path(state.state_dir) / "conf/php-fpm.conf"


def lab_argv(state: LabState) -> list[str]:
    """A lab master's binary and the options that decide its settings: its own config file
    and its ini overrides, which it gets as -d options."""
    return [state.fpm_binary, "-y", str(lab_conf(state)), *ini_args(state.php_ini)]


def test_config(env: Env, binary: str, conf: Path, overrides: Mapping[str, str]) -> None:
    res = env.run([*command(binary), "-t", "-y", str(conf), *ini_args(overrides)], check=False,
                  what="php-fpm -t")
    if res.returncode != 0:
        lines = [ln for ln in (res.stderr + res.stdout).splitlines() if "ERROR" in ln]
        raise ComponentError(f"php-fpm rejected the lab configuration: "
                             f"{(lines or [res.first_error_line()])[0].strip()}")


def start(env: Env, binary: str, conf: Path, overrides: Mapping[str, str], log: Path,
          workers: int, record: Callable[[int], None], timeout: float = 30,
          ini_dir: Path | None = None) -> int:
    """Start the master in the foreground of its own session; wait for all workers.
    `ini_dir`: a directory of ini files read after the SAPI's conf.d (PHP_INI_SCAN_DIR with a
    leading `:`), at every start and every reload (SIGUSR2 re-executes the master)."""
    scan = ["/usr/bin/env", f"PHP_INI_SCAN_DIR=:{ini_dir}"] if ini_dir else []
    pid = procs.spawn_daemon([*scan, *command(binary), "--nodaemonize", "-y", str(conf),
                              *ini_args(overrides)], log, record)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not procs.alive(pid):
            tail = log.read_text(errors="replace").strip().splitlines()[-1:] if log.exists() else []
            raise ComponentError(f"php-fpm exited at start: {' '.join(tail) or 'see ' + str(log)}")
        if len(procs.children(pid)) >= workers:
            return pid
        time.sleep(0.05)
    procs.terminate(pid)
    raise ComponentError(f"php-fpm did not start {workers} workers within {timeout:.0f} s: see {log}")


def master_of(worker: int) -> tuple[int, str, str]:
    """A pool worker's master: its PID, its php-fpm binary, and its configuration file from
    its title `php-fpm: master process (FILE)` ('' when the title does not say)."""
    master = procs.ppid(worker)
    binary = procs.exe(worker)
    if not os.path.basename(binary).startswith("php-fpm"):
        binary = find_binary()  # /proc/PID/exe of another user's worker: unreadable
    conf = re.search(r"\((\S+)\)", " ".join(procs.cmdline(master)))
    return master, binary, conf.group(1) if conf else ""


def worker_pids(master_pid: int) -> list[int]:
    return procs.children(master_pid)


def effective_ini(env: Env, binary: str, conf: Path, overrides: Mapping[str, str],
                  keys: list[str]) -> dict[str, str]:
    """Read back effective values with `php-fpm -i` (the FPM SAPI's ini, not the CLI's)."""
    res = env.run([*command(binary), "-i", "-y", str(conf), *ini_args(overrides)],
                  what="php-fpm -i")
    values: dict[str, str] = {}
    for line in res.stdout.splitlines():
        parts = [p.strip() for p in line.split("=>")]
        if len(parts) >= 2 and parts[0] in keys:
            values[parts[0]] = parts[1]
    return values


def pool_directives(text: str, pool: str) -> dict[str, str]:
    """All `key = value` lines of one pool's section in `php-fpm -tt` output."""
    out: dict[str, str] = {}
    current = ""
    for line in text.splitlines():
        m = re.search(r"NOTICE:\s+(.*)$", line)
        if not m:
            continue
        body = m.group(1).strip()
        sec = re.fullmatch(r"\[(.+)\]", body)
        if sec:
            current = sec.group(1)
        elif current == pool and " = " in body:
            key, _, value = body.partition(" = ")
            value = value.strip().strip("'")
            out[key.strip()] = "" if value == "undefined" else value
    return out


def conf_files(conf: Path) -> list[Path]:
    """The main php-fpm configuration and the files its `include =` lines name, in order."""
    out = [conf]
    try:
        text = conf.read_text(errors="replace")
    except OSError:
        return out
    for line in text.splitlines():
        m = re.match(r"\s*include\s*=\s*(\S+)", line)
        if m:
            pattern = m.group(1).strip("\"'")
            if not pattern.startswith("/"):
                pattern = str(conf.parent / pattern)
            out += [Path(p) for p in sorted(glob.glob(pattern))]
    return out


def pool_file(conf: Path, pool: str) -> Path | None:
    """The file that holds the `[pool]` section, among `conf` and its includes."""
    header = re.compile(rf"^\s*\[{re.escape(pool)}\]\s*$", re.M)
    for path in conf_files(conf):
        try:
            if header.search(path.read_text(errors="replace")):
                return path
        except OSError:
            continue
    return None


def ini_scan_dir(php_i: str) -> str:
    """The directory of additional .ini files from `php-fpm -i` output ('' if none)."""
    m = re.search(r"^Scan this dir for additional \.ini files => (.+)$", php_i, re.M)
    value = m.group(1).strip() if m else ""
    return "" if value in ("(none)", "") else value.split(":")[0]


def reload(master_pid: int, old_workers: list[int], timeout: float = 40.0) -> list[int]:
    """Graceful reload (SIGUSR2): the master lets running requests finish, re-reads its
    configuration and forks new workers; the listening socket stays open, so requests wait
    in its backlog meanwhile. Returns the new workers' PIDs."""
    return procs.replace_children(master_pid, signal.SIGUSR2, old_workers, "php-fpm", timeout)
