"""wrk with every response checked, for `statstorm matrix` (closed model, like wrk.py).

The packaged Lua script (lua/matrix.lua) checks each response's status (2xx), its body
length (within a tolerance of an expected length, the primer's) and a marker text, counts
the failures by kind, and prints them with the latency percentile spectrum as one
`STATSTORM-MATRIX {...}` line. A response that fails several checks counts once in `failed`.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from importlib import resources
from typing import Any

from statstorm.adapters.load.loadgen import find_binary, run_bounded, script_line
from statstorm.env import Env
from statstorm.errors import ComponentError, DependencyError


@dataclass(frozen=True)
class CheckSpec:
    """One checked run: where, how hard, how long, and what a good answer looks like."""

    url: str
    concurrency: int
    duration_s: float  # wrk takes whole seconds: rounded, at least 1
    timeout_s: float = 10.0
    marker: str = ""
    expect_length: int = 0  # 0: no length check
    length_tolerance: float = 0.1  # fraction of expect_length


@dataclass(frozen=True)
class CheckedRun:
    """What one checked run measured. `rps` counts good answers only (failed ones are not
    throughput); `percentiles` are (percent, ms) over all answers."""

    requests: int
    duration_s: float
    rps: float
    failed: int
    bad_status: int
    bad_length: int
    bad_marker: int
    socket_errors: int
    percentiles: tuple[tuple[float, float], ...]
    max_ms: float

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["percentiles"] = [list(p) for p in self.percentiles]
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "CheckedRun":
        return cls(**{**d, "percentiles": tuple((float(p), float(v)) for p, v in d["percentiles"])})


_FIELDS = ("duration_us", "checked", "requests", "failed", "bad_status", "bad_length",
           "bad_marker", "connect", "read", "write", "timeout", "max_us")


def binary() -> str | None:
    return find_binary("wrk", "STATSTORM_WRK")


def script() -> str:
    return str(resources.files("statstorm.adapters.load").joinpath("lua/matrix.lua"))


def command(spec: CheckSpec) -> list[str]:
    c = max(1, spec.concurrency)
    threads = max(1, min(c, os.cpu_count() or 1))
    return [binary() or "wrk", "-t", str(threads), "-c", str(c), "-d", f"{max(1, round(spec.duration_s))}s",
            "--timeout", f"{spec.timeout_s:g}s", "-s", script(), spec.url, "--",
            spec.marker, str(spec.expect_length), f"{spec.length_tolerance:g}"]


def parse(text: str) -> CheckedRun:
    """wrk's output with the matrix.lua line → CheckedRun."""
    line = script_line(text, "STATSTORM-MATRIX", _FIELDS, "wrk")
    if line is None:
        raise ComponentError("wrk output has no STATSTORM-MATRIX line (was lua/matrix.lua "
                             "loaded?): " + " ".join(text.split())[:160])
    d = line.numbers
    duration = d["duration_us"] / 1e6
    answered = d["checked"]
    socket = int(d["connect"] + d["read"] + d["write"] + d["timeout"])
    good = max(0, answered - d["failed"])
    return CheckedRun(
        requests=int(d["requests"]), duration_s=round(duration, 3),
        rps=round(good / duration, 3) if duration > 0 else 0.0,
        failed=int(d["failed"]), bad_status=int(d["bad_status"]),
        bad_length=int(d["bad_length"]), bad_marker=int(d["bad_marker"]), socket_errors=socket,
        percentiles=tuple((float(p), us / 1000.0) for p, us in line.percentiles_us),
        max_ms=d["max_us"] / 1000.0)


def run(env: Env, spec: CheckSpec) -> CheckedRun:
    """Run wrk once, bounded in time and ended by PID on any exit path."""
    if not binary():
        raise DependencyError("wrk is not installed: run scripts/setup.sh --lab as root (or apt-get install wrk)")
    rc, out, err = run_bounded(env, command(spec), what="wrk",
                               timeout=spec.duration_s + spec.timeout_s + 15)
    if rc != 0 and "STATSTORM-MATRIX" not in out:
        raise ComponentError(f"wrk failed: {(err or out).strip().splitlines()[-1:] or rc}")
    return parse(out)
