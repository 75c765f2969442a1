"""The small interface every HTTP load generator adapter (wrk, ab, vegeta) implements.

An adapter builds the command line for one measured run, runs it bounded in time, and parses
its output into a `LoadRun`. Running goes through `run_bounded`, which ends the generator by
PID on timeout, Ctrl-C or SIGTERM, and holds the machine-wide load lock while load is sent.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Protocol, Sequence
from contextlib import contextmanager

from statstorm import faults
from statstorm.adapters.host import procs
from statstorm.env import Env
from statstorm.errors import ComponentError, DependencyError
from statstorm.results.sweep import LoadRun

LOAD_LOCK = Path(os.environ.get("STATSTORM_LOAD_LOCK", "/tmp/statstorm-load.lock"))


@dataclass(frozen=True)
class RunSpec:
    """One measured run at one level."""

    url: str
    duration_s: float
    timeout_s: float  # per request
    concurrency: int = 0  # closed model
    rate: float = 0.0  # open model (requests/s)
    max_requests: int = 0  # hard cap on requests (0: the adapter's own bound)
    expect_text: str = ""


class LoadGenerator(Protocol):
    name: str
    model: str  # "closed" | "open"

    def available(self) -> str | None:
        """Path of the binary, or None when it is not installed."""

    def command(self, spec: RunSpec, workdir: Path) -> list[str]:
        """The argv of one run (shown by --dry-run and -v)."""

    def run(self, env: Env, spec: RunSpec, workdir: Path) -> LoadRun:
        """Run once, bounded, and parse the result."""


@contextmanager
def load_lock(env: Env) -> Iterator[None]:
    """Hold the machine-wide load lock so two load tests never overlap on this host."""
    LOAD_LOCK.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(LOAD_LOCK, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            env.log(f"waiting for the load lock {LOAD_LOCK} (another load test is running)…")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def run_bounded(env: Env, argv: Sequence[str], *, timeout: float, what: str,
                stdin_text: str | None = None) -> tuple[int, str, str]:
    """Run a load generator to completion within `timeout`; end it by PID on any exit path."""
    env.debug("$ " + shlex.join(argv))
    try:
        proc = subprocess.Popen(
            list(argv), stdin=subprocess.PIPE if stdin_text is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace",
            start_new_session=True,
        )
    except FileNotFoundError:
        raise DependencyError(f"{argv[0]} is not installed: run scripts/setup.sh --lab as root") from None
    try:
        faults.phase("load/running")
        out, err = proc.communicate(input=stdin_text, timeout=timeout)
    except subprocess.TimeoutExpired:
        procs.terminate(proc.pid, timeout=3)
        proc.communicate()
        raise ComponentError(f"{what} did not finish within {timeout:.0f} s and was stopped; "
                             f"lower --duration or check that the server answers") from None
    except BaseException:
        procs.terminate(proc.pid, timeout=3)
        try:
            proc.communicate(timeout=5)
        except (subprocess.TimeoutExpired, ValueError):
            pass
        raise
    return proc.returncode, out, err


def find_binary(name: str, env_var: str, extra_dirs: Sequence[str] = ()) -> str | None:
    """The binary named by `env_var`, else in `extra_dirs`, else on PATH."""
    import shutil

    forced = os.environ.get(env_var)
    if forced:
        return forced if os.access(forced, os.X_OK) else None
    for d in extra_dirs:
        cand = Path(d) / name
        if os.access(cand, os.X_OK):
            return str(cand)
    return shutil.which(name)


# -- reading what a generator printed ---------------------------------------------------------
def is_number(value: object) -> bool:
    """A JSON number a counter or a time can be: not negative, finite, an integer under 2**63
    (booleans are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if isinstance(value, int):
        return 0 <= value < 1 << 63  # a bigger one would not even convert to a float
    return math.isfinite(value) and value >= 0


def json_object(text: str, what: str) -> Any:
    """`text` as JSON; a ComponentError naming `what` when it is not JSON (too deep or a
    number of thousands of digits included)."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        raise ComponentError(f"{what} is not JSON: {text[:80]!r}") from None


@dataclass(frozen=True)
class ScriptLine:
    """A packaged Lua script's `MARKER {...}` line, checked: its numbers by name (an int
    stays an int) and its [percent, microseconds] pairs."""

    numbers: dict[str, float]
    percentiles_us: tuple[tuple[float, float], ...]


def script_line(text: str, marker: str, numbers: Sequence[str], tool: str) -> ScriptLine | None:
    """The JSON object a packaged Lua script printed on its `MARKER {...}` line (None when
    there is no such line), checked: every field of `numbers` a count or time, and
    `percentiles_us` a list of [percent, microseconds] pairs."""
    m = re.search(rf"^{re.escape(marker)} (\{{.*\}})\s*$", text, re.M)
    if not m:
        return None
    data = json_object(m.group(1), f"{tool}'s {marker} line")
    if not isinstance(data, dict):
        bad = "not an object"
    else:
        nums = {f: data[f] for f in numbers if f in data and is_number(data[f])}
        bad = next((f"no number {f!r}" for f in numbers if f not in nums), "")
        pct = data["percentiles_us"] if "percentiles_us" in data else None
        if not bad and isinstance(pct, list) and all(
                isinstance(p, list) and len(p) == 2 and all(is_number(v) for v in p)
                for p in pct):
            return ScriptLine(nums, tuple((p[0], p[1]) for p in pct))
        bad = bad or "no [percent, microseconds] list 'percentiles_us'"
    raise ComponentError(f"{tool}'s {marker} line is damaged ({bad}): rerun the measurement")
