"""Server-side signals sampled while load runs: /proc/stat (system-wide context switches and
CPU) and a php-fpm pool's status page (active/idle workers, listen queue, max children reached).

`Sampler` runs in a background thread for the length of one run; it only reads files and
one loopback URL, so it costs the server one status request per interval.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from statstorm.results.sweep import ServerSignals


@dataclass(frozen=True)
class CpuSnapshot:
    t: float
    ctxt: int
    busy: int
    system: int
    iowait: int
    total: int


def parse_proc_stat(text: str, t: float) -> CpuSnapshot:
    """The aggregate `cpu` line and `ctxt` of /proc/stat."""
    ctxt = 0
    fields: list[int] = []
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] == "cpu":
            fields = [int(x) for x in parts[1:]]
        elif parts and parts[0] == "ctxt":
            ctxt = int(parts[1])
    fields += [0] * (8 - len(fields))
    user, nice, system, idle, iowait, irq, softirq, steal = fields[:8]
    total = user + nice + system + idle + iowait + irq + softirq + steal
    return CpuSnapshot(t, ctxt, user + nice + system + irq + softirq, system, iowait, total)


def read_proc_stat(path: Path = Path("/proc/stat")) -> CpuSnapshot:
    return parse_proc_stat(path.read_text(), time.monotonic())


@dataclass(frozen=True)
class FpmSample:
    """One read of a php-fpm pool's status page (`?json`; its keys have spaces)."""

    pool: str = ""
    active: int = 0
    idle: int = 0
    total: int = 0
    listen_queue: int = 0
    max_children_reached: int = 0

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> FpmSample:
        f = {"pool": "", "active processes": 0, "idle processes": 0, "total processes": 0,
             "listen queue": 0, "max children reached": 0, **d}
        return cls(str(f["pool"]), int(f["active processes"]), int(f["idle processes"]),
                   int(f["total processes"]), int(f["listen queue"]),
                   int(f["max children reached"]))


def fpm_status(url: str, timeout: float = 2.0) -> FpmSample | None:
    """The pool's status page (`?json`), or None when it does not answer."""
    sep = "&" if "?" in url else "?"
    try:
        with urllib.request.urlopen(f"{url}{sep}json", timeout=timeout) as resp:
            data = json.loads(resp.read().decode("utf-8", "replace"))
            return FpmSample.from_json(data) if isinstance(data, dict) else None
    except (urllib.error.URLError, OSError, ValueError, TypeError):
        return None


def summarise(first: CpuSnapshot, last: CpuSnapshot, fpm: list[FpmSample]) -> ServerSignals:
    """Rates between two /proc/stat snapshots, and extremes of the FPM samples."""
    dt = max(last.t - first.t, 1e-9)
    dtotal = max(last.total - first.total, 1)
    sig = ServerSignals(
        seconds=round(dt, 3),
        ctx_switches_per_s=round((last.ctxt - first.ctxt) / dt, 1),
        cpu_busy_pct=round(100.0 * (last.busy - first.busy) / dtotal, 1),
        cpu_system_pct=round(100.0 * (last.system - first.system) / dtotal, 1),
        cpu_iowait_pct=round(100.0 * (last.iowait - first.iowait) / dtotal, 1),
    )
    if not fpm:
        return sig
    mcr = [s.max_children_reached for s in fpm]
    return replace(
        sig,
        fpm_pool=fpm[-1].pool,
        fpm_active_max=max(s.active for s in fpm),
        fpm_idle_min=min(s.idle for s in fpm),
        fpm_total=fpm[-1].total,
        fpm_listen_queue_max=max(s.listen_queue for s in fpm),
        fpm_max_children_reached=max(mcr) - min(mcr),
        fpm_samples=len(fpm),
    )


class Sampler:
    """Sample /proc/stat at start and stop, and the FPM status page every `interval` s."""

    def __init__(self, fpm_url: str | None, interval: float = 0.5,
                 reader: Callable[[], CpuSnapshot] = read_proc_stat,
                 fpm_reader: Callable[[str], FpmSample | None] = fpm_status) -> None:
        self.fpm_url = fpm_url
        self.interval = interval
        self._reader = reader
        self._fpm_reader = fpm_reader
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._fpm: list[FpmSample] = []
        self._first: CpuSnapshot | None = None

    def _loop(self) -> None:
        assert self.fpm_url
        while not self._stop.is_set():
            s = self._fpm_reader(self.fpm_url)
            if s is not None:
                self._fpm.append(s)
            self._stop.wait(self.interval)

    def start(self) -> None:
        self._first = self._reader()
        if self.fpm_url:
            self._thread = threading.Thread(target=self._loop, name="statstorm-fpm-sampler", daemon=True)
            self._thread.start()

    def stop(self) -> ServerSignals:
        last = self._reader()
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=5)
        assert self._first is not None
        return summarise(self._first, last, self._fpm)
