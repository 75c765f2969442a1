"""A lab's memory while it is loaded: PSS of its web server's and PHP's processes, sampled in a
thread, and the huge pages its PHP workers got (from smaps)."""

from __future__ import annotations

import threading

from statstorm.adapters.host import smaps
from statstorm.adapters.labs import state as labs
from statstorm.model import stats
from statstorm.results.lab import LabState
from statstorm.results.matrix import Memory


def process_groups(state: LabState) -> tuple[list[int], list[int], list[int]]:
    """(server-only processes, PHP processes, PHP workers) of a lab, live. Under mod_php the
    server's children run PHP: they count as PHP, the server is then its master alone."""
    php = labs.php_pids(state)
    master = state.fpm_master_pid
    workers = [p for p in php if p != master] or php
    server = labs.server_pids(state)
    php_set = set(php)
    return [p for p in server if p not in php_set], php, workers


class Sampler:
    """PSS of the lab's server and PHP processes every `every_s` while a load goes."""

    def __init__(self, state: LabState, every_s: float) -> None:
        self.state = state
        self.every_s = every_s
        self.samples: list[tuple[int, int, int, int]] = []  # server, php, workers' sum, workers
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="lab-pss", daemon=True)
        self._huge = (0, 0, 0)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._sample()  # one more at the end, which also reads the huge pages
        _, _, workers = process_groups(self.state)
        mems = smaps.read_all(workers)
        self._huge = (sum(m.anon_huge_kb for m in mems), sum(m.file_pmd_kb for m in mems),
                      sum(1 for m in mems if m.huge_kb > 0))

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            self._sample()

    def _sample(self) -> None:
        try:
            server, php, workers = process_groups(self.state)
        except (OSError, ValueError):
            return
        s = sum(m.pss_kb for m in smaps.read_all(server))
        mems = {m.pid: m.pss_kb for m in smaps.read_all(php)}
        w = [mems[p] for p in workers if p in mems]
        if mems:
            self.samples.append((s, sum(mems.values()), sum(w), len(w)))

    def memory(self) -> Memory:
        if not self.samples:
            return Memory()
        srv = [s[0] for s in self.samples]
        php = [s[1] for s in self.samples]
        per = [s[2] / s[3] for s in self.samples if s[3]]
        return Memory(server_steady_kb=int(stats.median(srv)), server_peak_kb=max(srv),
                      php_steady_kb=int(stats.median(php)), php_peak_kb=max(php),
                      per_worker_kb=int(stats.median(per)) if per else 0,
                      workers=max(s[3] for s in self.samples), samples=len(self.samples),
                      anon_huge_kb=self._huge[0], file_pmd_kb=self._huge[1],
                      workers_with_huge_pages=self._huge[2])
