"""Shared fixtures: the CLI in-process and in a real process, real labs that are always torn
down, and leftover checks (tests/README.md says which tests need what)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import uuid
from contextlib import redirect_stderr, redirect_stdout
from io import StringIO
from pathlib import Path
from typing import Callable, Iterator

import pytest

ROOT = os.geteuid() == 0
# Every case of every lab test, also those repeating what another case proves (`full_labs`):
# bench runs and a release's check; CI runs without (tests/README.md).
FULL_LABS = os.environ.get("STATSTORM_FULL_LABS") == "1"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "full_labs: a slow lab case that repeats what other "
                            "cases prove; run only with STATSTORM_FULL_LABS=1 "
                            "(tests/README.md)")
    config.addinivalue_line("markers", "beside: a root file that runs in the lane beside the "
                            "main one (scripts/test.sh): its own labs, of storages no other "
                            "lane uses; no pool traced; nothing measured (tests/README.md)")
    config.addinivalue_line("markers", "alone: a root file that needs the machine to itself: "
                            "the system's own services, every pool running, or a timing "
                            "(tests/README.md)")


# The app trees that labs copy onto network storage, cached once per machine and reused by
# every test session after (adapters/storage/tree_cache.py), as PHP roots are (PHP_ROOTS)
TREE_CACHE = Path("/var/tmp/statstorm-tree-cache")
if ROOT:
    os.environ.setdefault("STATSTORM_TREE_CACHE", str(TREE_CACHE))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # The files that share session labs run first, one after the other, each in its own
    # order: the session's labs are down before any other file runs (one that takes "the
    # only PHP target running", or traces every php-fpm process, would see them).
    users = {item.nodeid.split("::")[0] for item in items
             if "session_lab" in getattr(item, "fixturenames", ())}
    items[:] = sorted(items, key=lambda item: item.nodeid.split("::")[0] not in users)
    if not FULL_LABS:
        repeat = pytest.mark.skip(reason="repeats what other cases prove: "
                                  "STATSTORM_FULL_LABS=1 runs it")
        for item in items:
            if "full_labs" in item.keywords:
                item.add_marker(repeat)
    if ROOT:
        return
    skip = pytest.mark.skip(reason="needs root and real components")
    for item in items:
        if "root" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def state_home() -> Iterator[Path]:
    """Labs made by tests live in their own state root, never the user's. It must be
    reachable by www-data (pytest's tmp_path is 0700), so it lives under /var/tmp."""
    home = Path(f"/var/tmp/statstorm-test-{uuid.uuid4().hex[:8]}")
    home.mkdir(mode=0o755)
    yield home
    shutil.rmtree(home, ignore_errors=True)


def invoke(args: list[str], home: Path, *, check: bool = False,
           stdin: str = "") -> subprocess.CompletedProcess[str]:
    """Run the real `main()` in this process, with captured stdout and stderr and `home` as
    the state root: the same exit code and outputs as `run_cli`, without the 0.7 s a new
    Python process takes to start. For every CLI test where the process is not the point
    (usage errors, one-line errors, --json shapes, show/diff/import of fixtures); signals,
    locales, other users and real servers go through `run_cli`."""
    from statstorm.cli import main
    from statstorm.env import Env

    out, err = StringIO(), StringIO()
    old_home, old_stdin = os.environ.get("STATSTORM_HOME"), sys.stdin
    old_term = signal.getsignal(signal.SIGTERM)
    os.environ["STATSTORM_HOME"] = str(home)  # for the processes a verb starts
    sys.stdin = StringIO(stdin)
    try:
        with redirect_stdout(out), redirect_stderr(err):
            try:
                main(list(args), Env(stdout=out, stderr=err, state_root=home))
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
    finally:
        sys.stdin = old_stdin
        signal.signal(signal.SIGTERM, old_term)
        if old_home is None:
            os.environ.pop("STATSTORM_HOME", None)
        else:
            os.environ["STATSTORM_HOME"] = old_home
    proc = subprocess.CompletedProcess(["statstorm", *args], code, out.getvalue(), err.getvalue())
    if check and proc.returncode != 0:
        raise AssertionError(f"statstorm {' '.join(args)} failed ({proc.returncode}):\n"
                             f"{proc.stdout}\n{proc.stderr}")
    return proc


def run_cli(args: list[str], home: Path, *, check: bool = False, timeout: float = 600,
            user: str | None = None, environ: dict[str, str] | None = None,
            ) -> subprocess.CompletedProcess[str]:
    """Run the installed CLI in a real process (as a user would): for signals, locales,
    other users (`user`, through setpriv) and verbs that start real servers. `environ`
    replaces this process's environment (STATSTORM_HOME is set whatever it holds)."""
    env = dict(os.environ if environ is None else environ, STATSTORM_HOME=str(home))
    argv = [sys.executable, "-m", "statstorm", *args]
    if user:
        argv = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *argv]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=env) as p:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            # SIGTERM first: statstorm then takes down what it started (labs, tracers)
            p.send_signal(signal.SIGTERM)
            try:
                p.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                p.kill()
                p.communicate()
            raise
    proc = subprocess.CompletedProcess(argv, p.returncode, out, err)
    if check and proc.returncode != 0:
        raise AssertionError(f"statstorm {' '.join(args)} failed ({proc.returncode}):\n"
                             f"{proc.stdout}\n{proc.stderr}")
    return proc


def unique_name(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def leftovers(state_dir: str, volume: str = "") -> list[str]:
    """Anything of a lab still on the machine: processes, mounts, volume, files."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "cmdline").read_bytes()
            stat = (entry / "stat").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            continue
        if state_dir.encode() in raw or (volume and volume.encode() in raw):
            argv = raw.replace(b"\0", b" ").decode(errors="replace")
            found.append(f"process {entry.name}: {argv}")
    with open("/proc/self/mounts") as fh:
        for line in fh:
            if state_dir in line:
                found.append(f"mount: {line.strip()}")
    if volume:
        out = subprocess.run(["gluster", "--mode=script", "volume", "list"],
                             capture_output=True, text=True).stdout
        if volume in out.split():
            found.append(f"volume {volume}")
        if Path("/var/lib/glusterd/vols", volume).exists():  # known to glusterd, running or not
            found.append(f"volume {volume} in glusterd's store")
    if Path(state_dir).exists():
        found.append(f"directory {state_dir}")
    return found


@pytest.fixture
def lab(state_home: Path) -> Iterator[Callable[..., dict[str, object]]]:
    """Start labs with `lab(*flags)`; every one is torn down and checked at the end."""
    names: list[str] = []

    def start(*flags: str, name: str | None = None) -> dict[str, object]:
        name = name or unique_name()
        names.append(name)
        run_cli(["lab", "up", "--name", name, *flags], state_home, check=True)
        proc = run_cli(["lab", "status", "--name", name, "--json"], state_home, check=True)
        return dict(json.loads(proc.stdout))

    yield start
    for name in names:
        run_cli(["lab", "down", "--name", name], state_home)


@pytest.fixture(scope="module")
def shared_lab(state_home: Path) -> Iterator[Callable[..., dict[str, object]]]:
    """One lab per module and set of flags, for the tests of a file that use a lab without
    changing it for the next (or that put back what they change): `shared_lab(*flags)`
    starts it the first time and returns its current `lab status` every time (worker PIDs
    as they are now). Every one is taken down when the module ends, whatever its tests did,
    in the environment it was started in (a test's monkeypatched STATSTORM_PHP_ROOTS)."""
    labs: dict[tuple[str, ...], str] = {}
    environs: dict[str, dict[str, str]] = {}

    def start(*flags: str) -> dict[str, object]:
        if flags not in labs:
            name = unique_name("shared")
            environs[name] = dict(os.environ)  # before `up`: one failing half-way goes down too
            labs[flags] = name
            try:
                run_cli(["lab", "up", "--name", name, *flags], state_home, check=True)
            except BaseException:
                del labs[flags]  # the next test starts another
                raise
        proc = run_cli(["lab", "status", "--name", labs[flags], "--json"], state_home,
                       check=True)
        return dict(json.loads(proc.stdout))

    yield start
    for name, environ in environs.items():
        run_cli(["lab", "down", "--name", name], state_home, environ=environ)


class SessionLabs:
    """The labs `session_lab` started: one per set of flags for the whole run, taken down
    (and checked for leftovers) after the last test that asks for `session_lab`, or at the
    session's end whatever happened, each in the environment it was started in."""

    def __init__(self) -> None:
        self.home: Path | None = None
        self.labs: dict[tuple[str, ...], str] = {}
        self.started: dict[str, tuple[dict[str, str], str, str]] = {}  # environ, dir, volume

    def start(self, home: Path, flags: tuple[str, ...]) -> dict[str, object]:
        self.home = home
        if flags not in self.labs:
            name = unique_name("session")
            self.labs[flags] = name
            self.started[name] = (dict(os.environ), str(home / "labs" / name), "")
            try:
                run_cli(["lab", "up", "--name", name, *flags], home, check=True)
            except BaseException:
                del self.labs[flags]  # the next test starts another (this one goes down)
                raise
        name = self.labs[flags]
        proc = run_cli(["lab", "status", "--name", name, "--json"], home, check=True)
        state = dict(json.loads(proc.stdout))
        environ, _, _ = self.started[name]
        self.started[name] = (environ, str(state["state_dir"]), str(state.get("volume") or ""))
        return state

    def down(self) -> None:
        """Every lab down; AssertionError naming what any of them left on the machine."""
        started, self.started, self.labs = self.started, {}, {}
        left = []
        for name, (environ, state_dir, volume) in started.items():
            assert self.home is not None
            proc = run_cli(["lab", "down", "--name", name], self.home, environ=environ)
            if proc.returncode != 0:
                left.append(f"lab down --name {name} failed: {proc.stderr.strip()}")
            left += leftovers(state_dir, volume)
        assert left == [], f"the session's labs left {left}"


SESSION_LABS = SessionLabs()


@pytest.fixture(scope="session")
def session_lab(state_home: Path) -> Iterator[Callable[..., dict[str, object]]]:
    """One lab per set of flags for the whole run, shared by the tests of several files
    that read the same kind of lab without changing it (tracing, checking, fetching pages):
    `session_lab(*flags)` starts it the first time and returns its current `lab status`
    every time. Taken down, and checked for leftovers, after the last test of the run that
    uses `session_lab` (`pytest_runtest_teardown`), else at the session's end."""
    yield lambda *flags: SESSION_LABS.start(state_home, flags)
    SESSION_LABS.down()


@pytest.hookimpl(trylast=True)  # after the test's own fixtures are torn down
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """The session's labs go down after the last test that uses them, not at the end of the
    run: a lab kept running would load the machine under the files after it."""
    if not SESSION_LABS.started:
        return
    items = item.session.items
    later = items[items.index(item) + 1:] if item in items else []
    if not any("session_lab" in getattr(i, "fixturenames", ()) for i in later):
        SESSION_LABS.down()


def wait_cacheable(*trees: object, protection_s: float = 2.0) -> None:
    """Until every file under `trees` is older than OPcache's file_update_protection (2 s;
    files younger are not cached, PHP's request time counts whole seconds): no wait at all
    for a lab made earlier (a shared one), the rest of the 2.5 s a new one needs."""
    import time
    newest = 0.0
    for tree in trees:
        for dirpath, _, filenames in os.walk(str(tree)):
            for name in filenames:
                try:
                    newest = max(newest, os.lstat(os.path.join(dirpath, name)).st_mtime)
                except FileNotFoundError:
                    continue
    wait = newest + protection_s + 0.5 - time.time()
    if wait > 0:
        time.sleep(wait)


# PHP roots of other versions shared by every test session (built once per machine, reused
# after, as a user's are under their state root).
PHP_ROOTS = Path("/var/tmp/statstorm-php-roots")


@pytest.fixture
def roots(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The shared roots directory as STATSTORM_PHP_ROOTS; the test is skipped only when the
    8.4 root is not built and the Debian mirror cannot be reached to build it."""
    from statstorm.adapters.labs import debootstrap, php_roots
    from statstorm.errors import DependencyError
    from statstorm.results.php_root import release
    PHP_ROOTS.mkdir(mode=0o755, exist_ok=True)
    monkeypatch.setenv("STATSTORM_PHP_ROOTS", str(PHP_ROOTS))
    if php_roots.load(PHP_ROOTS / "8.4") is None:
        try:
            debootstrap.check_mirror(debootstrap.mirror(), release("8.4"))
        except DependencyError as exc:
            pytest.skip(f"PHP 8.4's root is not built and {exc}")
    yield PHP_ROOTS


def interrupt_up(state_home: Path, flags: list[str], step: str, sig: int, *,
                 name: str | None = None, timeout: float = 120,
                 ) -> tuple[int, str, dict[str, object]]:
    """Start `lab up`, send `sig` as soon as lab.json records `step`, return (rc, stderr,
    state). A `lab up` still running when this fails is killed (its lab is the caller's to
    take down)."""
    import time
    name = name or unique_name("sig")
    env = dict(os.environ, STATSTORM_HOME=str(state_home))
    proc = subprocess.Popen([sys.executable, "-m", "statstorm", "lab", "up", "--name", name,
                             *flags], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    state_file = state_home / "labs" / name / "lab.json"
    deadline = time.monotonic() + timeout
    state: dict[str, object] = {}
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                state = json.loads(state_file.read_text())
            except (FileNotFoundError, json.JSONDecodeError):
                state = {}
            if state.get(step):
                break
            time.sleep(0.02)
        assert state.get(step), f"up never reached {step}"
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, err, state
