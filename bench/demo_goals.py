#!/usr/bin/env python3
"""Benchmark: `statstorm demo`'s goals, printed as ratios, run after run.

Goals (issue "the main job proves the fix"): after the demo's apply, network storage
throughput ≥ 0.95x local and p99 ≤ 1.2x local, in the demo's own interleaved measurement;
network round trips per request ≥ 95 % fewer than before; the whole demo within 8 minutes.
Each figure is printed after `apply --all` and where the run ended (demo.json's `final`: with
the escalation's kept changes, which are named), the goals judged on the latter.

Runs `statstorm demo --storage STORAGE --json` RUNS times (each in its own output directory)
and prints one row per run and the medians, or, with --from, summarises demo.json files
already written (one written before the `final` key: its end read from its trials).
Run as root on a quiet machine (the demo takes the load lock for each of its measurements;
do not wrap this script in the lock too):
    python3 bench/demo_goals.py --runs 3 [--storage cephfs] [--app synthetic]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parent.parent / "src")]

from statstorm.commands.demo import STORAGES  # noqa: E402
from statstorm.results.demo import DemoResult  # noqa: E402

GOAL_RPS, GOAL_P99, GOAL_RT, GOAL_S = 0.95, 1.2, 0.95, 480.0


def fewer(before: float | None, after: float | None) -> float | None:
    """The share of round trips per request gone since before."""
    return 1 - after / before if before and after is not None else None


def final_of(d: dict[str, Any]) -> dict[str, Any] | None:
    """demo.json's `final` (the phase the run ended at), or, in a file written before the
    key, the same figures from its `after` and its trials."""
    if d.get("final") is not None:
        return dict(d["final"])
    end = DemoResult.from_json(d).final()
    return end.to_json() if end is not None else None


def row(d: dict[str, Any], wall: float | None) -> dict[str, Any]:
    rt = d["round_trips_per_request"]
    end = final_of(d) or {}
    return {"storage": d.get("storage", "?"),
            "before_rps": d["before"]["ratio_rps"], "after_rps": d["after"]["ratio_rps"],
            "final_rps": end.get("ratio_rps"),
            "before_p99": d["before"]["ratio_p99"], "after_p99": d["after"]["ratio_p99"],
            "final_p99": end.get("ratio_p99"),
            "rt_before": rt.get("before"), "rt_predicted": rt.get("predicted"),
            "rt_after": rt.get("after"), "rt_final": end.get("round_trips_per_request"),
            "rt_fewer": fewer(rt.get("before"), rt.get("after")),
            "rt_final_fewer": fewer(rt.get("before"), end.get("round_trips_per_request")),
            "label": end.get("label", "-"), "kept": list(end.get("kept") or []),
            "tried": [(t["finding"], bool(t["kept"])) for t in d.get("measure_first") or []],
            "wall_s": wall if wall is not None else d.get("timings_s", {}).get("total")}


def x(v: float | None, width: int, digits: int) -> str:
    return f"{v:>{width - 1}.{digits}f}x" if v is not None else f"{'-':>{width}}"


def pct(v: float | None) -> str:
    return f"{v:.1%}" if v is not None else "-"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--app", default="mediawiki")
    ap.add_argument("--storage", default="glusterfs", choices=STORAGES,
                    help="the network storage the demo compares with local disk "
                         "(`statstorm demo --storage`) [default: glusterfs]")
    ap.add_argument("--from", dest="files", nargs="*", type=Path, default=None,
                    help="summarise these demo.json files instead of running the demo")
    a = ap.parse_args()
    rows = []
    if a.files:
        rows = [row(json.loads(f.read_text()), None) for f in a.files]
    else:
        for i in range(a.runs):
            out = Path(tempfile.mkdtemp(prefix="statstorm-demo-bench-"))
            t0 = time.monotonic()
            proc = subprocess.run([sys.executable, "-m", "statstorm", "demo", "--app", a.app,
                                   "--storage", a.storage, "-o", str(out), "--json"],
                                  capture_output=True, text=True)
            wall = time.monotonic() - t0
            if proc.returncode != 0:
                sys.exit(f"run {i + 1} failed: {proc.stderr.strip().splitlines()[-1:]}")
            rows.append(row(json.loads(proc.stdout), round(wall, 1)))
            print(f"run {i + 1}: results in {out}", file=sys.stderr)
    print(f"{'run':>4} {'storage':>10} {'x local before':>15} {'after':>7} {'final':>7} "
          f"{'p99 before':>11} {'after':>7} {'final':>7} "
          f"{'round trips/req before→pred→after→final':>41} {'fewer after':>12} "
          f"{'fewer final':>12} {'wall s':>7}")
    for i, r in enumerate(rows, 1):
        rt = f"{r['rt_before']}→{r['rt_predicted']}→{r['rt_after']}→{r['rt_final']}"
        print(f"{i:>4} {r['storage']:>10} {x(r['before_rps'], 15, 3)} {x(r['after_rps'], 7, 3)} "
              f"{x(r['final_rps'], 7, 3)} {x(r['before_p99'], 11, 2)} {x(r['after_p99'], 7, 2)} "
              f"{x(r['final_p99'], 7, 2)} {rt:>41} {pct(r['rt_fewer']):>12} "
              f"{pct(r['rt_final_fewer']):>12} {r['wall_s'] or 0:>7.0f}")
    for i, r in enumerate(rows, 1):
        tried = ", ".join(f"{f} ({'kept' if k else 'rolled back'})" for f, k in r["tried"])
        print(f"run {i}: ended {r['label']}; escalation kept: {', '.join(r['kept']) or 'none'}"
              + (f" (tried: {tried})" if tried else ""))

    def med(key: str) -> float | None:
        vals = [r[key] for r in rows if r[key] is not None]
        return statistics.median(vals) if vals else None

    def f(v: float | None, spec: str) -> str:
        return format(v, spec) if v is not None else "-"
    print(f"median: throughput {f(med('after_rps'), '.3f')}x local after apply --all, "
          f"{f(med('final_rps'), '.3f')}x final (goal ≥ {GOAL_RPS}); p99 "
          f"{f(med('after_p99'), '.2f')}x after, {f(med('final_p99'), '.2f')}x final "
          f"(goal ≤ {GOAL_P99}); round trips {f(med('rt_fewer'), '.1%')} fewer after, "
          f"{f(med('rt_final_fewer'), '.1%')} final (goal ≥ {GOAL_RT:.0%}); wall "
          f"{f(med('wall_s'), '.0f')} s (goal ≤ {GOAL_S:.0f})")


if __name__ == "__main__":
    main()
