"""Fault injection (issue #20, part 4): SIGINT and SIGTERM at every step of `lab up`, `trace`,
`sweep`, `fsbench`, `apply --yes`, `apply --rollback` and the demo, and ENOSPC or EACCES at
their writes, each delivered at a named point of the code (statstorm.faults), never by timing.
Afterwards: no process, mount, probe, lab, temp file or work directory remains; the previous
files are intact or the new ones whole; a configuration is the old one or the new one, and the
pool serves. `apply` and `--rollback` under wrk at full load fail no request.

The points each verb passes are listed by a first run (STATSTORM_TEST_FAULT_LOG), so a new
step is tested as soon as it is marked. The suite sends INT and TERM in turn and fails the
first and last write; `bench/faults.py` runs every point with both signals and every write
with both errnos.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

import pytest

import fault_runs
from conftest import leftovers, run_cli, unique_name
from test_apply_lab import Load  # light load, failures counted
from statstorm.adapters.apply import backups

pytestmark = [pytest.mark.root, pytest.mark.beside,
              pytest.mark.skipif(fault_runs.available() is not None,
                                 reason=str(fault_runs.available()))]

SIG_CODES = (130,)
WRITE_CODES = (1, 2)


def sweep_faults(args: list[str], home: Path, tmp: Path, extra: Callable[[fault_runs.Run], list[str]],
                 *, before: Callable[[], None] = lambda: None, ok_sig: tuple[int, ...] = SIG_CODES,
                 ok_write: tuple[int, ...] = WRITE_CODES, every: bool = False,
                 write_stride: int = 1, found: list[tuple[str, int]] | None = None) -> Outcome:
    """Run `args` once per fault (listed from a first run unless `found`): INT and TERM in
    turn and the first and last write, or with `every` both signals at every point and both
    errnos at every `write_stride`-th write. Every problem found, named by its fault."""
    found = found if found is not None else fault_runs.points(args, home, tmp)
    wanted = fault_runs.faults_for(found, alternate=not every,
                                   write_stride=write_stride if every else 0)
    assert wanted
    bad = []
    for fault in wanted:
        before()
        r = fault_runs.run(args, home, fault)
        codes = ok_write if fault.startswith("write:") else ok_sig
        bad += [f"{fault}: {p}" for p in fault_runs.problems(r, ok_codes=codes, extra=extra)]
    return Outcome(len(wanted), bad)


@dataclass
class Outcome:
    runs: int
    problems: list[str]


@pytest.fixture(scope="module")
def home() -> Iterator[Path]:
    d = Path(f"/var/tmp/statstorm-faults-{unique_name('h')}")
    d.mkdir(mode=0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def served(home: Path) -> Iterator[dict[str, str]]:
    with served_lab(home) as st:
        yield st


@contextmanager
def served_lab(home: Path) -> Iterator[dict[str, str]]:
    """A synthetic lab on local disk with a finding apply can fix (a 2 s realpath TTL)."""
    name = unique_name("flt")
    run_cli(["lab", "up", "--name", name, "--app", "synthetic", "--workers", "2",
             "--php-ini", "realpath_cache_ttl=2"], home, check=True)
    try:
        st = json.loads(run_cli(["lab", "status", "--name", name, "--json"], home,
                                check=True).stdout)
        yield {"name": name, "url": st["url"] + st["entry_path"], "state_dir": st["state_dir"]}
    finally:
        run_cli(["lab", "down", "--name", name], home)


def serves(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            return None if resp.status == 200 else f"{url} answered {resp.status}"
    except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
        return f"{url}: {exc}"


# -- the cases: each a verb, the points it passes and what must hold after a fault ----------
def lab_up_case(home: Path, tmp: Path, storage: str, every: bool = False) -> Outcome:
    """`lab up`: the lab is removed whole (processes, mount, volume, directory). Without
    `every`, a GlusterFS lab is stopped only at the steps a local lab does not have."""
    name = unique_name("lu")
    args = ["lab", "up", "--name", name, "--app", "synthetic", "--storage", storage]
    found = fault_runs.points(args, home, tmp)
    run_cli(["lab", "down", "--name", name], home, check=True)
    gluster = ["lab-up/volume", "lab-up/mount", "lab-up/copy"] if storage == "glusterfs" else []
    assert [p for p, _ in found if p != "write"] == [
        *gluster[:2], "lab-up/app", *gluster[2:], "lab-up/php", "lab-up/fpm", "lab-up/server",
        "lab-up/check", "lab-up/up"]
    if gluster and not every:
        found = [(p, n) for p, n in found if p in gluster]
    state_dir = home / "labs" / name

    def extra(r: fault_runs.Run) -> list[str]:
        left = leftovers(str(state_dir), f"statstorm-{name}")
        if left:
            run_cli(["lab", "down", "--name", name], home)
        return left

    return sweep_faults(args, home, tmp, extra, found=found, every=every)


def trace_case(home: Path, tmp: Path, served: dict[str, str], every: bool = False) -> Outcome:
    """`trace` on a lab under light load: the previous trace, or a whole new one (Ctrl-C
    ends a trace early and publishes what it holds); no temp file, no spool, no loader."""
    out = tmp / "out" / "t.sst.gz"
    out.parent.mkdir()
    args = ["trace", "--lab", served["name"], "-d", "1", "-o", str(out)]
    with Load(served["url"]):
        found = fault_runs.points(args, home, tmp)
    assert [p for p, _ in found][:2] == ["trace/attached", "trace/recording"]
    assert {"trace/stopped", "trace/publish", "write"} <= {p for p, _ in found}
    previous, restore = fault_runs.snapshot(out.parent)  # the trace and its sidecars

    def extra(r: fault_runs.Run) -> list[str]:
        bad = [f"temp file left: {t}" for t in fault_runs.temp_files([out.parent])]
        if out.read_bytes() != previous[out]:
            shown = run_cli(["trace", "show", str(out), "--json"], home)
            if shown.returncode != 0:
                bad.append(f"a new trace that does not read: {shown.stderr.strip()}")
            elif r.code != 0:
                bad.append(f"a new trace published by a run that failed ({r.code})")
        return bad

    with Load(served["url"]):
        return sweep_faults(args, home, tmp, extra, before=restore, ok_sig=(0, 130),
                            ok_write=(0, 1, 2), found=found, every=every)


def trace_import_case(home: Path, tmp: Path, every: bool = False) -> Outcome:
    """`trace import` of a real strace log: stopped after parsing, while writing (the
    writer's own after-events point) or at a failed write, the previous trace stays."""
    out = tmp / "imp" / "i.sst.gz"
    out.parent.mkdir()
    log = Path(__file__).parent / "fixtures" / "strace" / "real-cli-f-tt-T-y.log"
    args = ["trace", "import", str(log), "-o", str(out)]
    found = fault_runs.points(args, home, tmp)
    assert [p for p, _ in found if p != "write"] == ["trace-import/parsed"]
    found += [("after-events", 2)]
    previous, restore = fault_runs.snapshot(out.parent)

    def extra(r: fault_runs.Run) -> list[str]:
        bad = [f"temp file left: {t}" for t in fault_runs.temp_files([out.parent])]
        now = {p: p.read_bytes() for p in out.parent.iterdir()}
        if r.code != 0 and now != previous:
            bad.append("a failed import changed the previous trace or its sidecar")
        return bad

    return sweep_faults(args, home, tmp, extra, before=restore, found=found, every=every)


def _whole_result(out: Path, tmp: Path, schema: str) -> Callable[[fault_runs.Run], list[str]]:
    """After a run: no temp file beside the result, and the result whole (previous or new)."""
    def extra(r: fault_runs.Run) -> list[str]:
        bad = [f"temp file left: {t}" for t in fault_runs.temp_files([tmp])]
        problem = fault_runs.json_whole(out, schema)
        return bad + ([problem] if problem else [])
    return extra


def sweep_case(home: Path, tmp: Path, served: dict[str, str], every: bool = False) -> Outcome:
    """`sweep`: its JSON is the previous one or a whole new one; wrk is ended."""
    out = tmp / "sweep.json"
    levels = "1,2" if every else "2"
    args = ["sweep", served["url"], "-c", levels, "-d", "1", "--warmup", "0", "-o", str(out)]
    found = fault_runs.points(args, home, tmp)
    assert [p for p, _ in found if p != "write"] == ["sweep/level", "load/running",
                                                     "sweep/written"]
    previous = out.read_bytes()

    return sweep_faults(args, home, tmp, _whole_result(out, tmp, "statstorm.sweep"),
                        before=lambda: out.write_bytes(previous),
                        found=found, every=every)


def fsbench_case(home: Path, tmp: Path, served: dict[str, str], every: bool = False) -> Outcome:
    """`fsbench` on the lab's code tree: its JSON is the previous or a whole new one."""
    out = tmp / "fs.json"
    code = Path(served["state_dir"]) / "code"
    args = ["fsbench", str(code), "--ops", "stat,open", "--iterations", "2", "-o", str(out)]
    found = fault_runs.points(args, home, tmp)
    assert {"fsbench/pass", "fsbench/cell", "write"} <= {p for p, _ in found}
    previous = out.read_bytes()

    return sweep_faults(args, home, tmp, _whole_result(out, tmp, "statstorm.fsbench"),
                        before=lambda: out.write_bytes(previous),
                        found=found, every=every)


def _apply_setup(home: Path, served: dict[str, str]) -> tuple[Path, str, str]:
    """The lab's pool file, its text before and after apply fixes realpath-cache-ttl."""
    conf = Path(served["state_dir"]) / "conf" / "php-fpm.conf"
    old = conf.read_text()
    run_cli(["apply", "--lab", served["name"], "realpath-cache-ttl", "--yes"], home, check=True)
    new = conf.read_text()
    assert new != old and "realpath_cache_ttl] = 600" in new
    run_cli(["apply", "--lab", served["name"], "--rollback"], home, check=True)
    assert conf.read_text() == old
    return conf, old, new


def _config_state(home: Path, served: dict[str, str], conf: Path, old: str, new: str,
                  ) -> list[str]:
    """The pool file is the old or the new one and the pool serves; backup sets are whole;
    no temp file. Leaves the old configuration in place for the next run."""
    sets = home / "apply"
    bad = [f"temp file left: {t}" for t in fault_runs.temp_files([conf.parent, sets])]
    text = conf.read_text()
    if text not in (old, new):
        bad.append("the pool file is neither the old nor the new one")
    problem = serves(served["url"])
    if problem:
        bad.append(problem)
    for d in sets.iterdir():
        try:
            backups.manifest(d)
        except Exception as exc:  # noqa: BLE001 - any failure is what the test reports
            bad.append(f"backup set {d.name}: {exc}")
    if text == new:  # what apply left in effect, --rollback finds and puts back
        rb = run_cli(["apply", "--lab", served["name"], "--rollback"], home)
        if rb.returncode != 0 or conf.read_text() != old:
            bad.append(f"--rollback after it: {rb.returncode} {rb.stderr.strip()}")
    return bad


def apply_case(home: Path, tmp: Path, served: dict[str, str], every: bool = False) -> Outcome:
    """`apply --yes`: the pool file is the old one (rolled back) or the new one (and then
    --rollback finds it), the pool serves, every backup set is whole."""
    conf, old, new = _apply_setup(home, served)
    args = ["apply", "--lab", served["name"], "realpath-cache-ttl", "--yes"]
    found = fault_runs.points(args, home, tmp)
    run_cli(["apply", "--lab", served["name"], "--rollback"], home, check=True)
    assert [p for p, _ in found if p != "write"] == [
        "apply/backup", "apply/edit", "apply/tested", "apply/reloaded", "apply/checked",
        "apply/applied"]
    return sweep_faults(args, home, tmp, lambda r: _config_state(home, served, conf, old, new),
                        found=found, every=every)


def rollback_case(home: Path, tmp: Path, served: dict[str, str], every: bool = False,
                  ) -> Outcome:
    """`apply --rollback`: it holds Ctrl-C and SIGTERM until the files are back and the pool
    reloaded; a failed write leaves the old or the new file, and a second --rollback ends it."""
    conf, old, new = _apply_setup(home, served)
    name = served["name"]

    def applied() -> None:
        run_cli(["apply", "--lab", name, "realpath-cache-ttl", "--yes"], home, check=True)

    args = ["apply", "--lab", name, "--rollback"]
    applied()
    found = fault_runs.points(args, home, tmp)
    assert [p for p, _ in found if p != "write"] == [
        "rollback/restored", "rollback/reloaded", "rollback/marked"]

    def extra(r: fault_runs.Run) -> list[str]:
        if not r.fault.startswith("write:") and conf.read_text() != old:
            return ["a rollback stopped by a signal did not finish"]
        return _config_state(home, served, conf, old, new)

    return sweep_faults(args, home, tmp, extra, before=applied, found=found, every=every)


DEMO_STEPS = 8  # the demo's `[n/8]` steps, each passing its fault point `demo/step-N` once


def demo_case(home: Path, tmp: Path, every: bool = False) -> Outcome:
    """The demo (synthetic app, shortest options): both labs removed whatever the step; its
    files whole. Without `every`, its first trace (step 3, in a thread) while it records,
    step 5 (apply) and the first write; with it, every step (and every point of the verbs it
    runs) and every fifth of its (many) writes."""
    name = unique_name("dmf")
    out = tmp / "demo"
    args = ["demo", "--app", "synthetic", "--rounds", "1", "--duration", "2", "--views", "2",
            "--name", name, "-o", str(out)]
    if every:
        found = fault_runs.points(args, home, tmp)
        steps = [p for p, _ in found if p.startswith("demo/step-")]
        assert steps == [f"demo/step-{n}" for n in range(1, DEMO_STEPS + 1)], steps
        assert all(n == 1 for p, n in found if p in steps), found
    else:
        # step 3's trace runs in a thread: stopped there, its loader and spool must go too
        found = [("trace/recording", 1), ("demo/step-5", 1), ("write", 1)]

    def extra(r: fault_runs.Run) -> list[str]:
        bad = [f"temp file left: {t}" for t in fault_runs.temp_files([out])]
        for role in ("local", "net"):
            lab = f"{name}-{role}"
            bad += leftovers(str(home / "labs" / lab), f"statstorm-{lab}")
        if (out / "demo.json").exists():
            problem = fault_runs.json_whole(out / "demo.json", "statstorm.demo")
            bad += [problem] if problem else []
        return bad

    return sweep_faults(args, home, tmp, extra, found=found, every=every, write_stride=5)


@pytest.mark.parametrize("storage", ["local", "glusterfs"])
def test_lab_up_stopped_at_any_step_leaves_nothing(home: Path, tmp_path: Path,
                                                   storage: str) -> None:
    assert lab_up_case(home, tmp_path, storage).problems == []


def test_trace_stopped_at_any_step_leaves_the_previous_trace_or_a_whole_one(
        home: Path, tmp_path: Path, served: dict[str, str]) -> None:
    assert trace_case(home, tmp_path, served).problems == []


def test_trace_import_stopped_or_failed_leaves_the_previous_trace(home: Path,
                                                                  tmp_path: Path) -> None:
    assert trace_import_case(home, tmp_path).problems == []


def test_sweep_stopped_at_any_step_leaves_a_whole_result(home: Path, tmp_path: Path,
                                                         served: dict[str, str]) -> None:
    assert sweep_case(home, tmp_path, served).problems == []


def test_fsbench_stopped_at_any_step_leaves_a_whole_result(home: Path, tmp_path: Path,
                                                           served: dict[str, str]) -> None:
    assert fsbench_case(home, tmp_path, served).problems == []


def test_apply_stopped_at_any_step_leaves_the_old_or_the_new_config(
        home: Path, tmp_path: Path, served: dict[str, str]) -> None:
    assert apply_case(home, tmp_path, served).problems == []


def test_rollback_stopped_at_any_step_leaves_the_old_or_the_new_config(
        home: Path, tmp_path: Path, served: dict[str, str]) -> None:
    assert rollback_case(home, tmp_path, served).problems == []


def test_demo_stopped_at_any_step_leaves_no_lab(home: Path, tmp_path: Path) -> None:
    assert demo_case(home, tmp_path).problems == []


WRK_ERRORS = re.compile(r"Non-2xx or 3xx responses: (\d+)|Socket errors: connect (\d+), "
                        r"read (\d+), write (\d+), timeout (\d+)")


def test_apply_and_rollback_under_full_load_fail_no_request(home: Path,
                                                            served: dict[str, str]) -> None:
    """wrk at saturation (8 connections on 2 workers) through a graceful apply and its
    rollback: every answer a 200, no connection error."""
    conf = Path(served["state_dir"]) / "conf" / "php-fpm.conf"
    old = conf.read_text()
    wrk = subprocess.Popen(["wrk", "-t", "2", "-c", "8", "-d", "14s", "--timeout", "10s",
                            served["url"]], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
    try:
        time.sleep(2)
        r = run_cli(["apply", "--lab", served["name"], "realpath-cache-ttl", "--yes"], home)
        assert r.returncode == 0, r.stderr
        assert conf.read_text() != old
        time.sleep(2)
        rb = run_cli(["apply", "--lab", served["name"], "--rollback"], home)
        assert rb.returncode == 0, rb.stderr
        assert conf.read_text() == old
        out, _ = wrk.communicate(timeout=60)
    finally:
        if wrk.poll() is None:
            wrk.kill()
            wrk.wait()
    requests = re.search(r"(\d+) requests in", out)
    assert requests and int(requests.group(1)) > 20, out
    failures = [int(x) for m in WRK_ERRORS.finditer(out) for x in m.groups() if x]
    assert sum(failures) == 0, out
