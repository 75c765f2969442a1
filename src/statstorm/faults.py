"""Fault injection for the tests: a signal or a failed write at a named point of the code,
chosen through the environment, never by timing.

`STATSTORM_TEST_FAULT=POINT:N[:WHAT]` asks for a fault the N-th time the process passes
POINT. WHAT is a signal (`INT`, the default, or `TERM`) for a phase point, or an errno name
(`ENOSPC`, `EACCES`, `EIO`) for the `write` point that every published file passes.

- `phase(point)` marks a step of a verb (`lab-up/mount`, `apply/edit`, `sweep/level`…). The
  signal is sent to the process itself, so Python runs its handler before the next line: the
  interruption lands exactly there, as a Ctrl-C or a SIGTERM would.
- `write(path)` is called by every writer of a file statstorm publishes (results, config
  edits, backup sets, manifests, trace files) before it writes; it raises the asked errno.
- With `STATSTORM_TEST_FAULT_LOG=FILE` every point passed is appended to FILE, one per line,
  so a test first lists the points a verb passes and then interrupts it at each of them.

Nothing here runs unless those variables are set.
"""

from __future__ import annotations

import errno
import os
import signal
from collections import Counter

FAULT_ENV = "STATSTORM_TEST_FAULT"
LOG_ENV = "STATSTORM_TEST_FAULT_LOG"

_passed: Counter[str] = Counter()


def _spec(point: str) -> tuple[int, str] | None:
    spec = os.environ.get(FAULT_ENV, "")
    name, _, rest = spec.partition(":")
    if name != point or not rest:
        return None
    count, _, what = rest.partition(":")
    try:
        return int(count), what
    except ValueError:
        return None


def _signal(what: str) -> int | None:
    try:
        return int(getattr(signal, "SIG" + (what or "INT").upper().removeprefix("SIG")))
    except (AttributeError, ValueError):
        return None


def hook(point: str) -> tuple[int, int] | None:
    """The signal fault asked for at a counted `point` (e.g. `after-events:25000:TERM`, which
    the trace writer counts itself): (N, signal number), or None."""
    spec = _spec(point)
    if spec is None:
        return None
    sig = _signal(spec[1])
    return None if sig is None else (spec[0], sig)


def _pass(point: str) -> int:
    _passed[point] += 1
    log = os.environ.get(LOG_ENV)
    if log:
        with open(log, "a") as fh:
            fh.write(point + "\n")
    return _passed[point]


def phase(point: str) -> None:
    """A step of a verb: the test's signal is delivered here when asked for."""
    if not (os.environ.get(FAULT_ENV) or os.environ.get(LOG_ENV)):
        return
    n = _pass(point)
    spec = hook(point)
    if spec is not None and spec[0] == n:
        os.kill(os.getpid(), spec[1])


def write(path: object) -> None:
    """Before a published file is written: the test's errno is raised here when asked for."""
    if not (os.environ.get(FAULT_ENV) or os.environ.get(LOG_ENV)):
        return
    n = _pass("write")
    spec = _spec("write")
    if spec is None or spec[0] != n:
        return
    code = getattr(errno, spec[1].upper(), None)
    if isinstance(code, int):
        raise OSError(code, os.strerror(code), str(path))
    sig = _signal(spec[1])
    if sig is not None:
        os.kill(os.getpid(), sig)
