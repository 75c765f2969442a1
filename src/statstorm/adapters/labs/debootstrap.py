"""Debootstrap: a Debian tree of another release made from the mirror apt already uses,
with PHP installed inside, for adapters/labs/php_roots.py (which owns the roots' layout,
their marker and the labs that run in them). Each step's output goes to a build log and a
progress line is printed as each stage starts; a failed step names its last error line.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

from statstorm.env import Env
from statstorm.errors import ComponentError, DependencyError, PrivilegeError
from statstorm.results.common import write_json_atomic
from statstorm.results.php_root import MARKER, PhpRelease, PhpRoot

BUILD_TIMEOUT = 1200.0  # s, debootstrap and the PHP packages together


def require_tools(env: Env) -> None:
    """Root (debootstrap and chroot need it) and debootstrap, or a one-line error."""
    if not env.is_root():
        raise PrivilegeError("a PHP root is made with debootstrap and chroot: run it with sudo")
    if shutil.which("debootstrap") is None:
        raise DependencyError("debootstrap is not installed: run scripts/setup.sh --dev "
                              "(or apt-get install debootstrap)")


# --- the mirror ---------------------------------------------------------------------------

def sources_mirror(texts: list[str]) -> str:
    """The first Debian archive (not the security one) named by apt's sources: deb822
    `URIs:` lines or one-line `deb URI SUITE` entries; '' when none."""
    for text in texts:
        for line in text.splitlines():
            words = line.split("#", 1)[0].split()
            uris = words[1:] if words[:1] == ["URIs:"] else []
            if words[:1] == ["deb"]:
                rest = words[1:]
                if rest and rest[0].startswith("["):  # [arch=… signed-by=…]
                    end = next((i for i, w in enumerate(rest) if w.endswith("]")), len(rest))
                    rest = rest[end + 1:]
                uris = rest[:1]
            for uri in uris:
                if "security" not in uri and "/debian" in uri:
                    return uri.rstrip("/")
    return ""


def mirror() -> str:
    """The Debian mirror this machine's apt uses ($STATSTORM_DEBIAN_MIRROR overrides)."""
    if os.environ.get("STATSTORM_DEBIAN_MIRROR"):
        return os.environ["STATSTORM_DEBIAN_MIRROR"].rstrip("/")
    files = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*.sources")),
             *sorted(Path("/etc/apt/sources.list.d").glob("*.list"))]
    texts = []
    for f in files:
        try:
            texts.append(f.read_text(errors="replace"))
        except OSError:
            continue
    found = sources_mirror(texts)
    if not found:
        raise DependencyError("apt's sources name no Debian mirror (/etc/apt/sources.list, "
                              "sources.list.d): set STATSTORM_DEBIAN_MIRROR to one")
    return found


def check_mirror(url: str, rel: PhpRelease, timeout: float = 15.0) -> None:
    """One line naming the fix unless the mirror serves `rel`'s release file."""
    release_file = f"{url}/dists/{rel.release}/Release"
    try:
        with urllib.request.urlopen(release_file, timeout=timeout) as resp:
            resp.read(1)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise DependencyError(f"the Debian mirror {url} cannot be reached ({reason}) for "
                              f"{rel.release}: PHP {rel.version}'s root needs it once; check the "
                              f"network or set STATSTORM_DEBIAN_MIRROR") from None


def make(env: Env, rel: PhpRelease, path: Path, url: str) -> PhpRoot:
    """Make `rel`'s root at `path` (an empty directory made here): debootstrap minbase,
    then PHP's packages with apt inside; its marker written last."""
    started = time.monotonic()
    log = path.parent / f"{rel.version}.build.log"
    log.unlink(missing_ok=True)
    path.mkdir(mode=0o755)
    env.log(f"php-root {rel.version}: debootstrap {rel.release} (minbase) from {url} into "
            f"{path}; a few minutes, once…")
    stream(env, rel, ["debootstrap", "--variant=minbase", "--components=main", rel.release,
                       str(path), url], log, started)
    # No service of the root starts while packages install (php-fpm's postinst would).
    policy = path / "usr/sbin/policy-rc.d"
    policy.write_text("#!/bin/sh\nexit 101\n")
    policy.chmod(0o755)
    apt_env = {"DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C"}
    env.log(f"php-root {rel.version}: apt-get update inside the root…")
    stream(env, rel, ["chroot", str(path), "apt-get", "update", "-q"], log, started, apt_env)
    env.log(f"php-root {rel.version}: installing {' '.join(rel.packages())}…")
    stream(env, rel, ["chroot", str(path), "apt-get", "install", "-y", "-q",
                       "--no-install-recommends", *rel.packages()], log, started, apt_env)
    stream(env, rel, ["chroot", str(path), "apt-get", "clean"], log, started, apt_env)
    res = env.run(["chroot", str(path), rel.cli, "-r", "echo PHP_VERSION;"], what="php -r")
    php_version = res.stdout.strip()
    if not php_version.startswith(rel.version + "."):
        raise ComponentError(f"the root's {rel.cli} says PHP {php_version!r}, not "
                             f"{rel.version}: see {log}")
    for sub in ("", "usr", "usr/sbin"):  # www-data's workers start there
        (path / sub).chmod(0o755)
    root = PhpRoot(version=rel.version, release=rel.release, path=str(path),
                   php_version=php_version, mirror=url, packages=rel.packages(),
                   build_seconds=time.monotonic() - started,
                   built_at=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
    write_json_atomic(path / MARKER, root.to_json())
    env.log(f"php-root {rel.version}: PHP {php_version} ready in {root.build_seconds:.0f} s")
    return root


# debootstrap's and apt's lines that start a new stage worth a progress line
_STAGES = ("I: Retrieving InRelease", "I: Validating Packages", "I: Resolving", "I: Found",
           "I: Retrieving ", "I: Extracting", "I: Installing core", "I: Unpacking required",
           "I: Configuring required", "I: Unpacking the base", "I: Configuring the base",
           "I: Base system installed", "Get:", "Unpacking ", "Setting up ")


def stream(env: Env, rel: PhpRelease, argv: list[str], log: Path, started: float,
            extra_env: dict[str, str] | None = None) -> None:
    """Run a build step, its output to `log`; a progress line when a stage starts and every
    15 s; the step's last error line when it fails."""
    env.debug("$ " + " ".join(argv))
    full_env = {**os.environ, **(extra_env or {})}
    last_stage, last_print, count, errors = "", 0.0, 0, []
    with open(log, "a") as out, subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            text=True, errors="replace", env=full_env) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            out.write(line)
            line = line.strip()
            if line.startswith(("E:", "W: Failure", "dpkg: error")):
                errors.append(line)
            stage = next((s for s in _STAGES if line.startswith(s)), "")
            if not stage:
                continue
            count = count + 1 if stage == last_stage else 1
            now = time.monotonic()
            if stage != last_stage or now - last_print >= 15:
                words = line.split(" (")[0][:90]
                env.log(f"php-root {rel.version}: [{now - started:4.0f} s] {words}"
                        + (f" (#{count})" if count > 1 else ""))
                last_stage, last_print = stage, now
            if now - started > BUILD_TIMEOUT:
                proc.kill()
                raise ComponentError(f"building PHP {rel.version}'s root took over "
                                     f"{BUILD_TIMEOUT:.0f} s: see {log}")
        code = proc.wait()
    if code != 0:
        why = errors[-1] if errors else f"exit status {code}"
        raise ComponentError(f"{argv[0] if argv[0] != 'chroot' else ' '.join(argv[2:4])} failed "
                             f"for PHP {rel.version}'s root: {why}; see {log} (the half-built "
                             f"root is made again next time)")
