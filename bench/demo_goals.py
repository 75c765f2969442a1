#!/usr/bin/env python3
"""Benchmark: `statstorm demo`'s goals, printed as ratios, run after run.

Goals (issue "the main job proves the fix"): after the demo's apply, GlusterFS throughput
≥ 0.95x local and p99 ≤ 1.2x local, in the demo's own interleaved measurement; network round
trips per request ≥ 95 % fewer than before; the whole demo within 8 minutes.

Runs `statstorm demo --json` RUNS times (each in its own output directory) and prints one row
per run and the medians, or, with --from, summarises demo.json files already written.
Run as root on a quiet machine (the demo takes the load lock for each of its measurements;
do not wrap this script in the lock too):  python3 bench/demo_goals.py --runs 3
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

GOAL_RPS, GOAL_P99, GOAL_RT, GOAL_S = 0.95, 1.2, 0.95, 480.0


def row(d: dict[str, Any], wall: float | None) -> dict[str, Any]:
    rt = d["round_trips_per_request"]
    fewer = (1 - rt["after"] / rt["before"]) if rt.get("before") and rt.get("after") is not None \
        else None
    return {"before_rps": d["before"]["ratio_rps"], "after_rps": d["after"]["ratio_rps"],
            "before_p99": d["before"]["ratio_p99"], "after_p99": d["after"]["ratio_p99"],
            "rt_before": rt.get("before"), "rt_predicted": rt.get("predicted"),
            "rt_after": rt.get("after"), "rt_fewer": fewer,
            "wall_s": wall if wall is not None else d.get("timings_s", {}).get("total")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--app", default="mediawiki")
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
                                   "-o", str(out), "--json"], capture_output=True, text=True)
            wall = time.monotonic() - t0
            if proc.returncode != 0:
                sys.exit(f"run {i + 1} failed: {proc.stderr.strip().splitlines()[-1:]}")
            rows.append(row(json.loads(proc.stdout), round(wall, 1)))
            print(f"run {i + 1}: results in {out}", file=sys.stderr)
    print(f"{'run':>4} {'before x local':>15} {'after x local':>14} {'p99 before':>11} "
          f"{'p99 after':>10} {'round trips/req before→pred→after':>34} {'fewer':>7} {'wall s':>7}")
    for i, r in enumerate(rows, 1):
        rt = f"{r['rt_before']}→{r['rt_predicted']}→{r['rt_after']}"
        fewer = f"{r['rt_fewer']:.1%}" if r["rt_fewer"] is not None else "-"
        print(f"{i:>4} {r['before_rps']:>14.3f}x {r['after_rps']:>13.3f}x "
              f"{r['before_p99']:>10.2f}x {r['after_p99']:>9.2f}x {rt:>34} {fewer:>7} "
              f"{r['wall_s'] or 0:>7.0f}")

    def med(key: str) -> float:
        return statistics.median(r[key] for r in rows if r[key] is not None)
    print(f"median: throughput after {med('after_rps'):.3f}x local (goal ≥ {GOAL_RPS}), "
          f"p99 after {med('after_p99'):.2f}x local (goal ≤ {GOAL_P99}), round trips "
          f"{med('rt_fewer'):.1%} fewer (goal ≥ {GOAL_RT:.0%}), wall {med('wall_s'):.0f} s "
          f"(goal ≤ {GOAL_S:.0f})")


if __name__ == "__main__":
    main()
