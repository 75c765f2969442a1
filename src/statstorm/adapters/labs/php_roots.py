"""PHP roots: a Debian tree of another release (bullseye for PHP 7.4, trixie for 8.4) made
once with debootstrap under the state root and reused by every later lab, whose php-fpm
then runs chrooted in it (`lab up --php 8.4`) while the web server stays outside.

A root also holds its PHP's headers (phpV-dev unpacked, not installed, in usr/include/php):
the tracer computes PHP's layout from them (adapters/tracing/php_layouts.py); and APCu's
apcu.so (php-apcu unpacked beside the extensions, enabled for no pool: apply loads it into
the one that needs it). Both are fetched when the root is made and, for a root made before,
on its next use (`build`).

Layout: `<roots>/<version>/` is the tree, `<roots>/<version>/.statstorm-php-root.json`
its marker (results/php_root.py `PhpRoot`), written last: a tree without it is half-built
and is made again. `<roots>` is `<state root>/php-roots` ($STATSTORM_PHP_ROOTS elsewhere,
so test sessions with state roots of their own share one). A lab's mounts in a root
(/proc, /dev, its own state directory at the same path) are recorded in its `LabState`
the moment each is made, and `release_lab` undoes them at `lab down`.
"""

from __future__ import annotations

import dataclasses
import fcntl
import os
import shutil
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from statstorm.adapters.labs import debootstrap, phpfpm, state as labs
from statstorm.adapters.storage import mounts
from statstorm.env import Env
from statstorm.errors import BusyError, PrivilegeError, UsageError
from statstorm.results.common import read_json
from statstorm.results.lab import LabState
from statstorm.adapters.php.apcu import SO as APCU_SO
from statstorm.results.php_root import (HEADERS, MARKER, PhpRelease, PhpRoot, other_releases,
                                        release)

# A lab's mounts in the root besides its own state directory: what php-fpm needs of the host.
SYSTEM_MOUNTS = (("proc", "/proc"), ("bind", "/dev"))


def roots_dir(env: Env) -> Path:
    override = os.environ.get("STATSTORM_PHP_ROOTS")
    return Path(override) if override else env.state_root / "php-roots"


def root_dir(env: Env, rel: PhpRelease) -> Path:
    return roots_dir(env) / rel.version


def root_of(binary: str) -> Path | None:
    """The PHP root holding `binary` (its marker in an ancestor), None for the host's."""
    for parent in Path(binary).parents:
        if parent != Path("/") and (parent / MARKER).is_file():
            return parent
    return None


# --- what is there --------------------------------------------------------------------------

def load(path: Path) -> PhpRoot | None:
    """The finished root at `path` (its marker read), None when it is missing or half-built."""
    marker = path / MARKER
    if not marker.is_file():
        return None
    try:
        root = PhpRoot.from_json(read_json(marker, "PHP root marker"))
    except (UsageError, ValueError):
        return None
    return root if Path(path, root.version and f"usr/sbin/php-fpm{root.version}").exists() else None


def mounts_under(path: Path) -> list[str]:
    """Mount points at or below `path`, deepest first."""
    base = str(path).rstrip("/")
    found = [m.mount_point for m in mounts.current()
             if m.mount_point == base or m.mount_point.startswith(base + "/")]
    return sorted(found, key=len, reverse=True)


def processes_in(path: Path) -> list[int]:
    """Processes whose root directory is `path` or below it (chrooted there)."""
    base = str(path).rstrip("/")
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            root = os.readlink(entry / "root")
        except OSError:
            continue
        if root == base or root.startswith(base + "/"):
            out.append(int(entry.name))
    return out


def users(env: Env, path: Path) -> list[str]:
    """The labs whose php-fpm runs in the root at `path`."""
    return [s.name for s in labs.list_labs(env) if s.php_root == str(path)]


def building(env: Env) -> bool:
    """Whether another statstorm holds the roots' lock (building or removing one now)."""
    lock = roots_dir(env) / ".lock"
    if not lock.exists():
        return False
    with open(lock) as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
    return False


def list_roots(env: Env) -> tuple[list[PhpRoot], list[str]]:
    """The finished roots (with their size and the labs using each) and the versions whose
    root is half-built (or being built now: `building`)."""
    done: list[PhpRoot] = []
    half: list[str] = []
    for rel in other_releases():
        path = root_dir(env, rel)
        if not path.exists():
            continue
        root = load(path)
        if root is None:
            half.append(rel.version)
            continue
        done.append(dataclasses.replace(root, size_bytes=_size(path),
                                        in_use_by=tuple(users(env, path))))
    return done, half


def _size(path: Path) -> int:
    res = subprocess.run(["du", "-sxb", str(path)], capture_output=True, text=True, check=False)
    try:
        return int(res.stdout.split()[0])
    except (IndexError, ValueError):
        return 0


# --- build and remove -----------------------------------------------------------------------

@contextmanager
def _lock(env: Env) -> Iterator[None]:
    """One build or removal of roots at a time (another statstorm waits)."""
    top = roots_dir(env)
    top.mkdir(parents=True, exist_ok=True)
    top.chmod(0o755)  # www-data's workers start below it
    with open(top / ".lock", "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            env.log("php-root: another statstorm is building or removing a root; waiting…")
            fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def _refuse_busy(env: Env, path: Path, doing: str) -> None:
    used = users(env, path)
    busy = mounts_under(path) or processes_in(path)
    if used or busy:
        who = f"lab(s) {', '.join(used)}" if used else f"mounts/processes ({(busy or [''])[0]})"
        raise BusyError(f"cannot {doing} {path}: {who} use it; run `statstorm lab down` "
                        f"for them first")


def build(env: Env, version: str, *, rebuild: bool = False) -> tuple[PhpRoot, bool]:
    """The root of PHP `version`, made unless a finished one is there (then reused in
    seconds); a half-built one is removed and made again. Returns the root and whether it
    was reused."""
    rel = release(version, "VERSION")
    if rel.host:
        raise UsageError(f"PHP {rel.version} is the host's own (Debian 12's packages): it "
                         f"needs no root; roots are for "
                         f"{', '.join(r.version for r in other_releases())}")
    path = root_dir(env, rel)
    if not rebuild and (done := load(path)) is not None:
        if headers(path) is None or apcu(path) is None:  # a root made before them
            with _lock(env):
                unpack_headers(env, rel, path)
                unpack_apcu(env, rel, path)
        return done, True
    debootstrap.require_tools(env)
    url = debootstrap.mirror()
    debootstrap.check_mirror(url, rel)
    with _lock(env):
        if not rebuild and (done := load(path)) is not None:  # made meanwhile
            return done, True
        if path.exists():
            if load(path) is None and not users(env, path) and not processes_in(path):
                # an interrupted debootstrap may leave its /proc and /sys mounted there
                for target in mounts_under(path):
                    env.run(["umount", "-R", "-l", target], check=False, what="umount")
            _refuse_busy(env, path, "rebuild")  # never rmtree through a mount
            env.log(f"php-root {rel.version}: "
                    + ("removing the old root…" if rebuild else
                       "a half-built root is there (a build that did not finish): removing it…"))
            shutil.rmtree(path)
        made = debootstrap.make(env, rel, path, url)
        unpack_headers(env, rel, path)
        unpack_apcu(env, rel, path)
        return made, False


def headers(path: Path) -> Path | None:
    """The PHP headers in the root at `path` (usr/include/php/<API>), None when not there."""
    found = sorted(h.parent.parent for h in (path / HEADERS).glob("*/main/php.h"))
    return found[-1] if found else None


@contextmanager
def _unpacked(env: Env, rel: PhpRelease, path: Path, package: str,
              why: str) -> Iterator[Path | None]:
    """`package` downloaded by the root's own apt and unpacked (not installed) in a scratch
    directory of the root, removed afterwards; None, with one line saying so and what it
    costs (`why`), when the mirror cannot give it."""
    with tempfile.TemporaryDirectory(prefix="statstorm-deb-", dir=path / "var/tmp") as tmp:
        os.chmod(tmp, 0o755)  # apt downloads as the _apt user
        inside = "/" + str(Path(tmp).relative_to(path))
        res = env.run(["chroot", str(path), "sh", "-c", f"cd {inside} && apt-get download -q "
                       f"{package}"], check=False, what=f"apt-get download {package}")
        debs = sorted(Path(tmp).glob(f"{package}_*.deb"))
        if res.returncode != 0 or not debs:
            err = (res.stderr.strip().splitlines() or [f"exit status {res.returncode}"])[-1]
            env.log(f"php-root {rel.version}: could not fetch {package} ({err}); {why}")
            yield None
            return
        unpacked = Path(tmp) / "x"
        env.run(["dpkg-deb", "-x", str(debs[-1]), str(unpacked)], what="dpkg-deb -x")
        yield unpacked


def unpack_headers(env: Env, rel: PhpRelease, path: Path) -> Path | None:
    """PHP's headers unpacked into the root (its phpV-dev), once: the tracer's layout of
    this PHP. None, with one line saying so, when the mirror cannot give them (the tracer
    then counts, without attributing)."""
    if (done := headers(path)) is not None:
        return done
    why = "the tracer counts this PHP's syscalls without attributing them"
    with _unpacked(env, rel, path, rel.dev_package, why) as unpacked:
        if unpacked is None:
            return None
        found = sorted(h.parent.parent for h in (unpacked / HEADERS).glob("*/main/php.h"))
        if not found:
            env.log(f"php-root {rel.version}: {rel.dev_package} holds no PHP headers; {why}")
            return None
        dest = path / HEADERS / found[-1].name
        dest.parent.mkdir(parents=True, exist_ok=True)
        found[-1].rename(dest)  # whole or not at all: headers() looks for main/php.h
    env.log(f"php-root {rel.version}: {rel.dev_package}'s headers unpacked into {dest}")
    return dest


def apcu(path: Path) -> Path | None:
    """APCu's apcu.so in the root at `path` (usr/lib/php/<API>/apcu.so), None when not there."""
    found = sorted((path / "usr/lib/php").glob(f"*/{APCU_SO}"))
    return found[-1] if found else None


def unpack_apcu(env: Env, rel: PhpRelease, path: Path) -> Path | None:
    """APCu's apcu.so unpacked beside the root's PHP extensions, once, not enabled for any
    pool (no conf.d file): `apply` loads it into the pool whose app needs an object cache
    (adapters/php/apcu.py). None, with one line saying so, when the mirror cannot give it."""
    if (done := apcu(path)) is not None:
        return done
    why = "an app's object cache (app-data-on-network) cannot be applied on this PHP"
    with _unpacked(env, rel, path, rel.apcu_package, why) as unpacked:
        if unpacked is None:
            return None
        found = sorted((unpacked / "usr/lib/php").glob(f"*/{APCU_SO}"))
        if not found:
            env.log(f"php-root {rel.version}: {rel.apcu_package} holds no {APCU_SO}; {why}")
            return None
        dest = path / "usr/lib/php" / found[-1].parent.name / APCU_SO
        dest.parent.mkdir(parents=True, exist_ok=True)
        part = dest.with_name(f".{APCU_SO}.part")
        shutil.copyfile(found[-1], part)
        part.chmod(0o644)
        os.replace(part, dest)  # whole or not at all
    env.log(f"php-root {rel.version}: {rel.apcu_package}'s {APCU_SO} unpacked into {dest}")
    return dest


def remove(env: Env, version: str) -> bool:
    """Remove PHP `version`'s root; refused while a lab uses it. False when there was none."""
    rel = release(version, "VERSION")
    path = root_dir(env, rel)
    if rel.host or not path.exists():
        return False
    if not env.is_root():
        raise PrivilegeError("removing a PHP root needs root: run it with sudo")
    _refuse_busy(env, path, "remove")  # at once, before waiting for another's build
    with _lock(env):
        _refuse_busy(env, path, "remove")
        shutil.rmtree(path)
        (path.parent / f"{rel.version}.build.log").unlink(missing_ok=True)
    return True


def require(env: Env, version: str) -> None:
    """For `lab up --php`: the root is there, or can be made (debootstrap installed, the
    mirror reachable), checked before anything starts."""
    rel = release(version)
    if rel.host or load(root_dir(env, rel)) is not None:
        return
    debootstrap.require_tools(env)
    debootstrap.check_mirror(debootstrap.mirror(), rel)


# --- a lab's php-fpm in a root --------------------------------------------------------------

def share_lab_dir(env: Env, rec: labs.LabRecord, version: str) -> None:
    """For a lab of another PHP version, before anything is mounted in its state directory:
    the directory bound onto itself and made shared, so that every mount made in it later
    (its storage's client, and the clients `apply` stacks on it) is seen in the PHP root's
    copy too (lab_fpm binds it there as a slave). Without it, the root's php-fpm would keep
    reading the storage through the client it saw at start-up: a changed mount would not
    reach it. Recorded first, undone last (`unshare_lab_dir`)."""
    if release(version).host:
        return
    d = rec.state.state_dir
    env.run(["mount", "--bind", d, d], what="mount --bind the lab's directory onto itself")
    rec.record(root_mounts=[*rec.state.root_mounts, d])
    env.run(["mount", "--make-rshared", d], what="mount --make-rshared")


def unshare_lab_dir(env: Env, state: LabState) -> None:
    """Undo `share_lab_dir`, once everything mounted in the directory is unmounted."""
    d = state.state_dir
    if not d or d not in state.root_mounts or d not in {m.mount_point for m in mounts.current()}:
        return
    res = env.run(["umount", "-R", d], check=False, what="umount")
    if res.returncode != 0:
        env.run(["umount", "-R", "-l", d], what=f"umount -l {d}")


def lab_fpm(env: Env, rec: labs.LabRecord, version: str, host_fpm: str) -> str:
    """The php-fpm binary a lab runs: the host's for its own PHP; for another version the
    root's (built first if it is not there), with /proc, /dev and the lab's state directory
    (code, configuration, socket, logs) mounted in the root at the same paths, each mount
    recorded in the lab's state as it is made."""
    rel = release(version)
    if rel.host:  # the version the host's binary names (Debian 12: 8.2)
        rec.record(php_version=phpfpm.version_of(host_fpm) or rel.version)
        return host_fpm
    root, reused = build(env, rel.version)
    if reused:
        env.log(f"lab {rec.state.name}: PHP {root.php_version} from its root {root.path}")
    path = Path(root.path)
    rec.record(php_version=rel.version, php_root=root.path)
    for kind, source in (*SYSTEM_MOUNTS, ("rbind", rec.state.state_dir)):
        target = path / source.lstrip("/")
        target.mkdir(parents=True, exist_ok=True)
        if kind == "proc":
            env.run(["mount", "-t", "proc", "proc", str(target)], what="mount proc in the root")
        else:
            env.run(["mount", f"--{kind}", source, str(target)], what=f"mount {source} in the root")
            if kind == "rbind":  # the lab's own unmounts below it are not sent back
                env.run(["mount", "--make-rslave", str(target)], what="mount --make-rslave")
        rec.record(root_mounts=[*rec.state.root_mounts, str(target)])
    return str(path / rel.fpm.lstrip("/"))


def release_lab(env: Env, state: LabState) -> None:
    """Unmount what the lab mounted in its root, last first (after its processes ended)."""
    for target in reversed(state.root_mounts):
        if target == state.state_dir:  # the lab's own directory: unshare_lab_dir, last
            continue
        if target not in {m.mount_point for m in mounts.current()}:
            continue
        res = env.run(["umount", "-R", target], check=False, what="umount")
        if res.returncode != 0:
            env.run(["umount", "-R", "-l", target], what=f"umount -l {target}")
    if state.php_root and state.state_dir:
        own = Path(state.php_root) / state.state_dir.lstrip("/")
        if own.is_dir() and not mounts_under(own):
            try:
                own.rmdir()
            except OSError:
                pass
