"""wrk (closed model: `-c` connections each send the next request when the last answered).

The packaged Lua script (lua/sweep.lua) adds what wrk's text output lacks: the latency
percentile spectrum, the raw error counters and, with an expected text, a per-response body
check. Parsing reads the text output and, when present, the script's `STATSTORM {...}` line.
"""

from __future__ import annotations

import os
import re
from importlib import resources
from pathlib import Path

from statstorm.adapters.load.loadgen import RunSpec, find_binary, run_bounded, script_line
from statstorm.env import Env
from statstorm.errors import ComponentError, DependencyError
from statstorm.results.sweep import ErrorCounts, LoadRun

_UNITS_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0, "h": 3600000.0}
_DURATION = re.compile(r"(\d{1,12}(?:\.\d{1,9})?)(us|ms|s|m|h)")
_LUA_FIELDS = ("max_us", "connect", "read", "write", "timeout", "status", "wrong_content")


def _ms(text: str) -> float:
    m = _DURATION.fullmatch(text.strip())
    if not m:
        raise ComponentError(f"wrk output not understood: {text.strip()[:40]!r} is not a "
                             "duration such as 3.35ms")
    return float(m.group(1)) * _UNITS_MS[m.group(2)]


def _not_understood(text: str, what: str) -> ComponentError:
    return ComponentError(f"wrk output not understood (no {what}): "
                          + " ".join(text.split())[:160])


def parse(text: str) -> LoadRun:
    """Parse wrk's output (with or without the sweep.lua line) into a LoadRun."""
    if "unable to connect" in text and "requests in" not in text:
        raise ComponentError("wrk could not connect: " + text.strip().splitlines()[-1])
    m = re.search(r"^\s*(\d{1,15}) requests in (\S+?),", text, re.M)
    rps_m = re.search(r"^Requests/sec:\s+(\d{1,12}(?:\.\d{1,9})?)\s*$", text, re.M)
    if not m or not rps_m:
        raise _not_understood(text, "'requests in' / 'Requests/sec' line")
    requests = int(m.group(1))
    duration_s = _ms(m.group(2)) / 1000.0
    rps = float(rps_m.group(1))
    pct: dict[float, float] = {}
    for pm in re.finditer(r"^\s+(\d{1,3}(?:\.\d{1,6})?)%\s+(\S+)\s*$", text, re.M):
        pct[float(pm.group(1))] = _ms(pm.group(2))
    lat = re.search(r"^\s+Latency\s+(\S+)\s+(\S+)\s+(\S+)", text, re.M)
    max_ms = _ms(lat.group(3)) if lat else 0.0
    sock = re.search(r"Socket errors: connect (\d{1,15}), read (\d{1,15}), write (\d{1,15}), "
                     r"timeout (\d{1,15})", text)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d{1,15})", text)
    errors = ErrorCounts(
        connect=int(sock.group(1)) if sock else 0,
        read_write=(int(sock.group(2)) + int(sock.group(3))) if sock else 0,
        timeout=int(sock.group(4)) if sock else 0,
        non_2xx=int(non2xx.group(1)) if non2xx else 0,
    )
    data = script_line(text, "STATSTORM", _LUA_FIELDS, "wrk")
    if data is not None:
        n = data.numbers
        pct = {float(p): us / 1000.0 for p, us in data.percentiles_us}
        max_ms = n["max_us"] / 1000.0
        errors = ErrorCounts(connect=int(n["connect"]), read_write=int(n["read"] + n["write"]),
                             timeout=int(n["timeout"]), non_2xx=int(n["status"]),
                             wrong_content=int(n["wrong_content"]))
    if not pct:
        raise ComponentError("wrk output has no latency distribution: run it with --latency")
    return LoadRun(
        tool="wrk", requests=requests, duration_s=duration_s, rps=rps,
        p50=pct.get(50.0, 0.0), p90=pct.get(90.0, 0.0), p99=pct.get(99.0, 0.0), max=max_ms,
        errors=errors, percentiles=tuple(sorted(pct.items())),
    )


class Wrk:
    name = "wrk"
    model = "closed"

    def available(self) -> str | None:
        return find_binary("wrk", "STATSTORM_WRK")

    def script(self) -> str:
        return str(resources.files("statstorm.adapters.load").joinpath("lua/sweep.lua"))

    def command(self, spec: RunSpec, workdir: Path) -> list[str]:
        binary = self.available() or "wrk"
        c = max(1, spec.concurrency)
        threads = max(1, min(c, os.cpu_count() or 1))
        argv = [binary, "-t", str(threads), "-c", str(c), "-d", f"{spec.duration_s:g}s",
                "--timeout", f"{spec.timeout_s:g}s", "--latency", "-s", self.script(), spec.url]
        if spec.expect_text:
            argv += ["--", spec.expect_text]
        return argv

    def run(self, env: Env, spec: RunSpec, workdir: Path) -> LoadRun:
        if not self.available():
            raise DependencyError("wrk is not installed: run scripts/setup.sh --lab as root (or apt-get install wrk)")
        rc, out, err = run_bounded(env, self.command(spec, workdir), what="wrk",
                                   timeout=spec.duration_s + spec.timeout_s + 15)
        if rc != 0 and "requests in" not in out:
            raise ComponentError(f"wrk failed: {(err or out).strip().splitlines()[-1:] or rc}")
        return parse(out)
