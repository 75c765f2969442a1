"""Knee, saturation and collapse of a throughput sweep. Pure: no I/O, deterministic.

Definitions (per level: the median of the repeats' requests/s, and their *spread*, half the
range max-min; levels sorted by concurrency or rate):

- **peak**: the level with the highest median; **saturation throughput** is that median.
- **knee**: the first level where throughput stops growing: its median is within *tolerance*
  of the peak (tolerance = max(10 % of the peak, 2 × the peak's spread)), or it is at least
  80 % of the peak and the peak gains less than a tenth as much throughput as load was added
  (e.g. +13 % throughput for 4× the users).
- **collapse**: a level above the peak whose median is *clearly* below the peak:
  peak − median > max(floor × peak, 3 × (peak spread + level spread)), floor = 10 % with two
  or more repeats, 20 % with a single run (its spread is unknown). Noise of the repeats widens
  the threshold, so noisy-but-flat series do not "collapse".

The server-side signals at the collapse (or the last level) are compared with those at the
knee and named in one sentence a human can act on.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median
from typing import Sequence

from statstorm.results.sweep import Knee, ServerSignals


@dataclass(frozen=True)
class LevelPoint:
    level: float
    rps_repeats: tuple[float, ...]
    server: ServerSignals | None = None
    errors: int = 0
    requests: int = 0

    @property
    def rps(self) -> float:
        return float(median(self.rps_repeats)) if self.rps_repeats else 0.0

    @property
    def spread(self) -> float:
        r = self.rps_repeats
        return (max(r) - min(r)) / 2.0 if len(r) > 1 else 0.0


def spread(values: Sequence[float]) -> float:
    """Half the range: the ± of `median ± spread` shown for repeats."""
    return (max(values) - min(values)) / 2.0 if len(values) > 1 else 0.0


def _fmt_level(level: float, unit: str) -> str:
    text = f"{level:g}"
    if unit == "users" and level == 1:
        unit = "user"
    return f"{text} {unit}"


def _ratio(a: float, b: float) -> float | None:
    return a / b if b > 0 else None


def signals_moved(base: ServerSignals | None, at: ServerSignals | None) -> tuple[list[str], str]:
    """Human phrases for the server signals that changed between `base` and `at`, and a
    diagnosis keyword: storage | cpu | pool | ''."""
    if base is None or at is None:
        return [], ""
    phrases: list[str] = []
    diagnosis = ""
    cs = _ratio(at.ctx_switches_per_s, base.ctx_switches_per_s)
    if cs is not None and cs >= 1.5:
        phrases.append(f"context switches ×{cs:.0f}" if cs >= 3 else f"context switches ×{cs:.1f}")
    if (at.fpm_listen_queue_max or 0) > 0 and (at.fpm_listen_queue_max or 0) > (base.fpm_listen_queue_max or 0):
        phrases.append(f"listen queue grows to {at.fpm_listen_queue_max}")
    if (at.fpm_max_children_reached or 0) > 0:
        phrases.append("max children reached")
    if at.fpm_idle_min == 0 and at.fpm_total:
        phrases.append(f"all {at.fpm_total} workers busy")
    if at.cpu_iowait_pct >= 5 and at.cpu_iowait_pct > 2 * base.cpu_iowait_pct:
        phrases.append(f"iowait {at.cpu_iowait_pct:.0f} %")
    fa, fb = at.file_syscalls_per_request, base.file_syscalls_per_request
    if fa is not None and fb is not None:  # sweep --trace
        fr = _ratio(fa, fb)
        lost = ", bpftrace lost events" if (at.trace_dropped or base.trace_dropped) else ""
        if fr is not None and (fr >= 1.5 or fr <= 0.67):
            phrases.append(f"file syscalls/request ×{fr:.1f} ({fb:.0f} → {fa:.0f}{lost})")
        else:
            phrases.append(f"file syscalls/request unchanged ({fa:.0f}{lost})")
    if at.cpu_busy_pct >= 90:
        phrases.append(f"CPU {at.cpu_busy_pct:.0f} % busy")
        diagnosis = "cpu"
    elif cs is not None and cs >= 3 or at.cpu_iowait_pct >= 5:
        diagnosis = "storage"
    elif (at.fpm_idle_min == 0 and at.fpm_total) or (at.fpm_listen_queue_max or 0) > 0:
        diagnosis = "pool"
    return phrases, diagnosis


_ADVICE = {
    "storage": "the pool is blocked on storage or locks, not CPU (trace its file syscalls)",
    "cpu": "this machine is out of CPU (the load generator runs on it too)",
    "pool": "the pool is the bottleneck: requests wait for a free php-fpm worker",
    "": "",
}


def analyse(points: Sequence[LevelPoint], unit: str = "users") -> Knee:
    """Find knee, saturation and collapse in `points` (any order) and say it in one sentence."""
    pts = sorted((p for p in points if p.rps_repeats), key=lambda p: p.level)
    if not pts:
        return Knee(None, None, 0.0, False, None, None, 0.0, (), "",
                    "no level finished: nothing to analyse")
    peak = max(pts, key=lambda p: p.rps)
    tolerance = max(0.10 * peak.rps, 2 * peak.spread)
    def flat_from(p: LevelPoint) -> bool:
        if p.rps >= peak.rps - tolerance:
            return True
        if p.rps < 0.8 * peak.rps or p.rps <= 0 or p.level >= peak.level:
            return False
        # Gains less than a tenth as much throughput as load was added up to the peak.
        return (peak.rps / p.rps - 1) < 0.1 * (peak.level / p.level - 1)

    knee = next(p for p in pts if flat_from(p))
    multi = all(len(p.rps_repeats) > 1 for p in pts)
    floor = (0.10 if multi else 0.20) * peak.rps
    collapse_pt: LevelPoint | None = None
    threshold = floor
    for p in pts:
        if p.level <= peak.level:
            continue
        need = max(floor, 3 * (peak.spread + p.spread))
        if peak.rps - p.rps > need:
            collapse_pt, threshold = p, need
            break
    if collapse_pt is None:
        # The threshold the highest level would have had to cross.
        last = pts[-1]
        threshold = max(floor, 3 * (peak.spread + last.spread))
    worst = min((p for p in pts if p.level > peak.level), key=lambda p: p.rps, default=None)

    compare = collapse_pt or pts[-1]
    phrases, diagnosis = signals_moved(knee.server, compare.server)
    err_pt = next((p for p in pts if p.requests and p.errors / p.requests >= 0.01), None)
    if err_pt is not None:
        phrases.append(f"{100.0 * err_pt.errors / err_pt.requests:.0f} % errors from "
                       f"{_fmt_level(err_pt.level, unit)}")

    sat = f"{peak.rps:.0f} req/s"
    if collapse_pt is not None:
        assert worst is not None
        head = (f"throughput collapses after {_fmt_level(peak.level, unit)}: {sat} at the peak, "
                f"{collapse_pt.rps:.0f} at {_fmt_level(collapse_pt.level, unit)}")
        if worst is not collapse_pt:
            head += f", {worst.rps:.0f} at {_fmt_level(worst.level, unit)}"
    elif peak is pts[-1] and len(pts) > 1 and knee is pts[-1]:
        head = (f"throughput still grows at {_fmt_level(peak.level, unit)} ({sat}): "
                f"no knee yet, sweep higher levels")
    elif len(pts) == 1:
        head = f"only one level: {sat} at {_fmt_level(peak.level, unit)}; sweep more levels to find a knee"
    elif knee is pts[0]:
        head = (f"throughput is flat from {_fmt_level(knee.level, unit)} on: within "
                f"{tolerance:.0f} req/s of the peak ({sat} at {_fmt_level(peak.level, unit)}); "
                f"no collapse up to {_fmt_level(pts[-1].level, unit)}")
    else:
        head = (f"throughput stops growing at {_fmt_level(knee.level, unit)} (saturation {sat}); "
                f"no collapse up to {_fmt_level(pts[-1].level, unit)}")
    sentence = head
    noisy = max((p.spread / p.rps for p in pts if p.rps > 0), default=0.0)
    if noisy > 0.2:
        sentence += (f" (noisy: repeats differ by up to ±{100 * noisy:.0f} %; "
                     f"use more --repeats or a quieter machine)")
    if phrases:
        sentence += "; " + ", ".join(phrases)
    if _ADVICE[diagnosis] and (collapse_pt is not None or knee is not pts[-1]):
        sentence += ": " + _ADVICE[diagnosis]
    still_growing = peak is pts[-1] and len(pts) > 1 and knee is pts[-1] and collapse_pt is None
    return Knee(
        knee=None if still_growing else knee.level, peak=peak.level, saturation_rps=round(peak.rps, 3),
        collapse=collapse_pt is not None,
        collapse_at=collapse_pt.level if collapse_pt else None,
        collapse_rps=round(collapse_pt.rps, 3) if collapse_pt else None,
        drop_threshold_rps=round(threshold, 3), signals=tuple(phrases), diagnosis=diagnosis,
        sentence=sentence,
    )
