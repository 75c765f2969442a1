"""statstorm run with a fault at one of its named points (statstorm.faults), and what it left
behind: for tests/test_faults.py and bench/faults.py.

A run is contained in a cgroup of its own (the `pids` controller), so every process it
started is found afterwards, daemons that left its session included (a FUSE client, wrk).
The points a verb passes are listed by a first run with STATSTORM_TEST_FAULT_LOG; then the
verb is run again once per point (and per signal or errno), never interrupted by timing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

CGROUPS = Path("/sys/fs/cgroup/pids")
SIGNALS = ("INT", "TERM")
ERRNOS = ("ENOSPC", "EACCES")
# a temp file statstorm writes beside its target: `.NAME.XXXXXXXX[.rec]` (tempfile.mkstemp)
TEMP = re.compile(r"^\..+\.[a-z0-9_]{8}(\.[a-z]+)?$")


def available() -> str | None:
    """Why contained runs cannot be made here, or None."""
    if os.geteuid() != 0:
        return "needs root"
    if not (CGROUPS / "cgroup.procs").exists():
        return "no cgroup v1 pids controller at " + str(CGROUPS)
    return None


@dataclass
class Run:
    args: list[str]
    fault: str
    code: int
    stdout: str
    stderr: str
    left: list[str] = field(default_factory=list)  # processes still in its cgroup
    tmp_left: list[str] = field(default_factory=list)  # what it left in its own TMPDIR


def _alive(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    if stat.rsplit(")", 1)[1].split()[0] == "Z":
        return None
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def shared(cmdline: str, home: Path) -> bool:
    """A process the machine's labs share, not the run's own: glusterd (one for every lab,
    started by whichever lab first needs it, and serving the other lane's labs too:
    scripts/test.sh), and what it forked into the run's cgroup for a volume that is not the
    run's: a brick of another state root's lab, or of a stock-host test's volume (its brick
    under /var/tmp/statstorm-stock-brick-*)."""
    argv0 = cmdline.split(" ", 1)[0]
    if argv0.endswith("/glusterd"):
        return True
    if argv0.endswith("/glusterfsd") and str(home) not in cmdline:
        return True
    return "/statstorm-test-" in cmdline and str(home) not in cmdline


def run(args: list[str], home: Path, fault: str, timeout: float = 900,
        keep: Callable[[str], bool] = lambda cmdline: False) -> Run:
    """`statstorm ARGS` in a cgroup of its own, with STATSTORM_TEST_FAULT=`fault`; whatever
    is still running in the cgroup when it has exited is reported in `left`, then ended (by
    PID: only processes this run started are in it), except the daemons it was meant to
    leave (`keep` of their command line: e.g. the FUSE client of a mount apply remade) and
    those the machine's labs share (`shared`), which are moved out of the cgroup and left
    running. It gets a TMPDIR of its own, whose
    leftovers are reported in `tmp_left`."""
    cg = CGROUPS / f"statstorm-fault-{uuid.uuid4().hex[:8]}"
    cg.mkdir()
    tmp = Path(tempfile.mkdtemp(prefix="statstorm-fault-tmp-"))
    env = dict(os.environ, STATSTORM_HOME=str(home), TMPDIR=str(tmp))
    env.pop("STATSTORM_TEST_FAULT_LOG", None)
    env["STATSTORM_TEST_FAULT"] = fault

    def enter() -> None:
        with open(cg / "cgroup.procs", "w") as fh:
            fh.write(str(os.getpid()))

    try:
        p = subprocess.run([sys.executable, "-m", "statstorm", *args], capture_output=True,
                           text=True, errors="replace", env=env, timeout=timeout,
                           preexec_fn=enter)
        time.sleep(0.2)  # a child ended by its parent's last act may still be exiting
        left = []
        for line in (cg / "cgroup.procs").read_text().split():
            what = _alive(int(line))
            if what is not None and (keep(what) or shared(what, home)):
                (CGROUPS / "cgroup.procs").write_text(line)
            elif what is not None:
                left.append(f"{line}: {what}")
        return Run(args, fault, p.returncode, p.stdout, p.stderr, left,
                   sorted(x.name for x in tmp.iterdir()))
    finally:
        _empty(cg)
        shutil.rmtree(tmp, ignore_errors=True)


def _empty(cg: Path) -> None:
    for _ in range(100):
        pids = [int(x) for x in (cg / "cgroup.procs").read_text().split()]
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)
    cg.rmdir()


def points(args: list[str], home: Path, tmp: Path) -> list[tuple[str, int]]:
    """The points `statstorm ARGS` passes, in order, each with how many times it passed
    (a run without a fault, which must succeed; what it starts, e.g. a lab, stays)."""
    log = tmp / f"points-{uuid.uuid4().hex[:6]}.log"
    env = dict(os.environ, STATSTORM_HOME=str(home), STATSTORM_TEST_FAULT_LOG=str(log))
    env.pop("STATSTORM_TEST_FAULT", None)
    p = subprocess.run([sys.executable, "-m", "statstorm", *args], capture_output=True,
                       text=True, errors="replace", env=env, timeout=900)
    assert p.returncode == 0, (args, p.returncode, p.stderr)
    seen: dict[str, int] = {}
    for line in log.read_text().split():
        seen[line] = seen.get(line, 0) + 1
    log.unlink()
    return list(seen.items())


def faults_for(found: list[tuple[str, int]], signals: Iterable[str] = SIGNALS,
               errnos: Iterable[str] = ERRNOS, write_stride: int = 1,
               alternate: bool = False) -> list[str]:
    """STATSTORM_TEST_FAULT values for every point found: each phase point at its first and
    second passing (before and while a repeated step), with each signal (or, `alternate`,
    INT and TERM in turn); every `write_stride`-th write and the last (0: the first and the
    last) with each errno (or, `alternate`, in turn)."""
    out: list[str] = []
    sigs, errs = list(signals), list(errnos)
    k = 0
    for point, n in found:
        if point == "write":
            ns = (sorted({*range(1, n + 1, write_stride), n}) if write_stride > 0
                  else sorted({1, n}))
            for i in ns:
                for e in ([errs[i % len(errs)]] if alternate else errs):
                    out.append(f"write:{i}:{e}")
            continue
        for i in sorted({1, min(2, n)}):
            for s in ([sigs[k % len(sigs)]] if alternate else sigs):
                out.append(f"{point}:{i}:{s}")
            k += 1
    return out


def temp_files(dirs: Iterable[Path]) -> list[str]:
    """Temp files statstorm's writers left in `dirs` (recursively)."""
    found = []
    for d in dirs:
        if not d.is_dir():
            continue
        for p in d.rglob(".*"):
            if TEMP.match(p.name) and p.is_file():
                found.append(str(p))
    return sorted(found)


def problems(r: Run, *, ok_codes: tuple[int, ...], extra: Callable[[Run], list[str]]) -> list[str]:
    """What is wrong after a faulted run: an unexpected exit, a traceback, an error that is
    not one line, a process left, or what `extra` finds (files, mounts, labs)."""
    bad = []
    if r.code not in ok_codes:
        bad.append(f"exit {r.code} (expected one of {ok_codes}): {r.stderr.strip()[-300:]}")
    if "Traceback" in r.stderr:
        bad.append("traceback: " + r.stderr.strip()[-600:])
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("statstorm: error:")]
    if len(errors) > 1:
        bad.append(f"{len(errors)} error lines")
    if r.code in (1, 2) and not errors and "--json" not in r.args:
        bad.append("failed without an error line: " + r.stderr.strip()[-300:])
    if r.left:
        bad.append(f"processes left: {r.left} (its stderr: {r.stderr.strip()[-300:]})")
    if r.tmp_left:
        bad.append(f"left in its TMPDIR: {r.tmp_left}")
    bad += extra(r)
    return bad


def snapshot(d: Path) -> tuple[dict[Path, bytes], Callable[[], None]]:
    """The files of `d` now, and a function that puts `d` back to exactly them."""
    previous = {p: p.read_bytes() for p in d.iterdir()}

    def restore() -> None:
        for p in d.iterdir():
            p.unlink()
        for p, data in previous.items():
            p.write_bytes(data)
    return previous, restore


def json_whole(path: Path, schema_prefix: str) -> str | None:
    """None when `path` is a whole JSON result of that schema, else what is wrong."""
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError) as exc:
        return f"{path}: {exc}"
    if not str(data.get("schema", "")).startswith(schema_prefix):
        return f"{path}: schema {data.get('schema')!r}"
    return None
