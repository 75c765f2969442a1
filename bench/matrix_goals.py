#!/usr/bin/env python3
"""Benchmark: `statstorm matrix`'s goals, printed as ratios side by side.

Goals (issue "Apache, WordPress and statstorm matrix"):
  (a) the matrix resolves a 3 % throughput difference at 95 % confidence on this machine —
      shown on a cell pair with a known, real difference: the same cell twice, the twin with
      a test knob that spends CPU time at the start of every request, sized from a calibration
      run so that it costs about 3 % of the throughput at saturation (2 CPUs / req/s is the
      CPU time of a request; optionally rescaled by a short pilot, --pilot-rounds) (MediaWiki
      by default, --app-a; resolved = the interval excludes 1 and the ratio is ≥ 0.965). The
      runs use `matrix --precision`: at least --rounds-a rounds, then more until the interval
      is within ±--precision-a % (at most --max-rounds-a), so a bursty host costs more rounds
      instead of an unresolved answer;
  (b) the full default matrix (6 architectures × OPcache on/off) on MediaWiki (or
      --app wordpress) in ≤ 20 minutes, its plan printed first;
  (c) huge code pages' effect on WordPress (or --huge-app mediawiki), with its interval,
      whatever it turns out to be.

Run as root on a quiet machine:  python3 bench/matrix_goals.py [--only a,b,c]
Each part runs `statstorm matrix … --json` and reads its result file; nothing here measures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

GOAL_RATIO, GOAL_FULL_S = 0.03, 20 * 60.0
CELL_A = "nginx-fpm/opcache-on/local"


def statstorm(args: list[str], *, show: bool = True) -> tuple[int, str]:
    argv = [sys.executable, "-m", "statstorm", *args]
    print("$ statstorm " + " ".join(args), flush=True)
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=None if show else subprocess.PIPE,
                          text=True)
    if proc.returncode not in (0, 1) and proc.stderr:  # 1: answers failed validation, shown
        print(proc.stderr.rstrip().splitlines()[-1], file=sys.stderr, flush=True)
    return proc.returncode, proc.stdout


def result(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise SystemExit(f"no result file {path}: the matrix run failed (its error is above)")
    return dict(json.loads(path.read_text()))


def comparison(data: dict[str, Any], a: str, b: str) -> dict[str, Any]:
    for c in data["comparisons"]:
        if (c["a"], c["b"]) == (a, b):
            return dict(c)
        if (c["a"], c["b"]) == (b, a):  # report B against A as asked
            inv = dict(c)
            inv["ratio"] = 1 / c["ratio"]
            inv["ci_low"], inv["ci_high"] = 1 / c["ci_high"], 1 / c["ci_low"]
            return inv
    raise SystemExit(f"no comparison of {a} and {b} in the result")


def twin_run(out: Path, name: str, app: str, rounds: int, duration: int, spin_us: int,
             precision: float = 0.0, max_rounds: int = 0) -> dict[str, Any]:
    """The same cell twice, the twin ("+knob") burning `spin_us` of CPU per request."""
    path = out / f"{name}.json"
    more = ["--precision", f"{precision:g}", "--max-rounds", str(max_rounds)] if precision else []
    statstorm(["matrix", "--app", app, "--arch", "nginx-fpm", "--opcache", "on",
               "--rounds", str(rounds), "-d", str(duration), *more,
               "--test-spin", f"{CELL_A}+={spin_us}", "-o", str(path), "--json"], show=False)
    data = result(path)
    c = comparison(data, CELL_A, CELL_A + "+knob")
    c["spin_us"] = spin_us
    c["stop"] = data.get("stop", {})
    c["n"] = min(len(cell["rounds"]) for cell in data["cells"])
    return c


def part_a(out: Path, app: str, rounds: int, duration: int, pilot_rounds: int,
           precision: float, max_rounds: int, knob_us: int = 0) -> dict[str, Any]:
    """Two cells with a known ~3 % difference: nginx-fpm OPcache on vs the same with CPU burnt.

    The knob is sized in two steps: from a calibration run (CPU time of a request ≈ cores /
    throughput, which overestimates it, as the load generator and the web server share the
    cores), then rescaled by the slowdown a short pilot of that knob really measured, so the
    main run looks at a difference of about 3 %, not whatever the first guess gave."""
    if knob_us > 0:
        print(f"(a) knob of {knob_us} µs given: no calibration, no pilot")
        return twin_run(out, "a", app, rounds, duration, knob_us, precision, max_rounds)
    calib = out / "a-calibration.json"
    statstorm(["matrix", "--app", app, "--arch", "nginx-fpm", "--opcache", "on", "--rounds", "1",
               "-d", str(duration), "-o", str(calib), "--json"], show=False)
    cells = result(calib)["cells"] if calib.exists() else []
    rps = cells[0]["rps"]["median"] if cells else 0.0
    if not rps > 0:
        raise SystemExit(f"(a) calibration measured no throughput (see {calib})")
    cores = os.cpu_count() or 1
    spin_us = max(1, round(GOAL_RATIO * cores / rps * 1e6))
    print(f"(a) calibration: {rps:.1f} req/s → first knob of {spin_us} µs of CPU per request")
    if pilot_rounds > 0:
        pilot = twin_run(out, "a-pilot", app, pilot_rounds, duration, spin_us, precision,
                         max(pilot_rounds, max_rounds // 3))
        slowdown = 1 - pilot["ratio"]
        if slowdown > 0.005:
            spin_us = max(1, round(spin_us * GOAL_RATIO / slowdown))
        print(f"(a) pilot: {fmt(pilot)} → knob of {spin_us} µs")
    return twin_run(out, "a", app, rounds, duration, spin_us, precision, max_rounds)


def part_b(out: Path, app: str) -> tuple[float, dict[str, Any]]:
    path = out / "b.json"
    statstorm(["matrix", "--app", app, "--dry-run", "-o", str(path)])
    t0 = time.monotonic()
    statstorm(["matrix", "--app", app, "-o", str(path), "--json"], show=False)
    return time.monotonic() - t0, result(path)


def part_c(out: Path, app: str, rounds: int) -> dict[str, Any]:
    path = out / "c.json"
    statstorm(["matrix", "--app", app, "--arch", "nginx-fpm", "--opcache", "on",
               "--huge-code-pages", "off,on", "--rounds", str(rounds), "-o", str(path), "--json"],
              show=False)
    data = result(path)
    c = comparison(data, "nginx-fpm/opcache-on/local", "nginx-fpm/opcache-on+huge-pages/local")
    hp = [cell.get("huge_pages") or {} for cell in data["cells"]]
    c["huge_pages_in_use"] = [h.get("in_use") for h in hp]
    c["thp_mode"] = data["thp_mode"]
    return c


def fmt(c: dict[str, Any]) -> str:
    rounds = f", {c['n']} rounds" if "n" in c else ""
    stop = f" ({c['stop']['reason']})" if c.get("stop") else ""
    return (f"{c['ratio']:.4f} [{c['ci_low']:.4f} – {c['ci_high']:.4f}] p={c['p_value']:.4f} "
            f"{c['verdict']}{rounds}{stop}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="a,b,c", help="parts to run (a,b,c)")
    ap.add_argument("--app", default="mediawiki", help="app of (b)")
    ap.add_argument("--app-a", default="mediawiki",
                    help="app of (a) (MediaWiki's rounds vary least here; the synthetic app's "
                         "thousands of requests/s make wrk's answer checks part of the noise)")
    ap.add_argument("--huge-app", default="wordpress", help="app of (c)")
    ap.add_argument("--rounds", type=int, default=10, help="rounds of (c)")
    ap.add_argument("--rounds-a", type=int, default=16, help="least rounds of (a)")
    ap.add_argument("--precision-a", type=float, default=1.5,
                    help="(a) adds rounds until its interval is within ±this %% (0: no more)")
    ap.add_argument("--max-rounds-a", type=int, default=100, help="most rounds of (a)")
    ap.add_argument("--pilot-rounds", type=int, default=0,
                    help="rounds of a pilot that rescales (a)'s knob by the slowdown it "
                         "measured (0: the calibration alone sizes it)")
    ap.add_argument("--duration", type=int, default=5, help="seconds per cell-round in (a)")
    ap.add_argument("--knob-us", type=int, default=0,
                    help="(a)'s knob in µs of CPU per request, given: no calibration, no pilot")
    ap.add_argument("--out", type=Path, default=None, help="directory of the result files")
    args = ap.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="matrix-goals-"))
    out.mkdir(parents=True, exist_ok=True)
    parts = set(args.only.split(","))
    rows: list[tuple[str, str, str]] = []
    if "a" in parts:
        c = part_a(out, args.app_a, args.rounds_a, args.duration, args.pilot_rounds,
                   args.precision_a, args.max_rounds_a, args.knob_us)
        # resolved: a slowdown of at most ~3 % (ratio ≥ 0.965) whose interval excludes 1
        ok = c["verdict"] == "significant" and c["ci_high"] < 1.0 and c["ratio"] >= 0.965
        rows.append(("(a) known ~3 % slowdown (B/A)", fmt(c) + f", knob {c['spin_us']} µs",
                     "resolved" if ok else "NOT resolved"))
    if "b" in parts:
        wall, data = part_b(out, args.app)
        failed = sum(c["failed"] for c in data["cells"])
        rows.append(("(b) full default matrix", f"{wall / 60:.1f} min for {len(data['cells'])} "
                     f"cells, {failed} failed answers; ratio to goal {wall / GOAL_FULL_S:.2f}",
                     "met" if wall <= GOAL_FULL_S else "MISSED"))
    if "c" in parts:
        c = part_c(out, args.huge_app, args.rounds)
        rows.append(("(c) huge code pages on/off (B/A)",
                     fmt(c) + f", in use {c['huge_pages_in_use']}, THP {c['thp_mode']}",
                     "reported"))
    print(f"\nresult files in {out}")
    width = max(len(r[0]) for r in rows) if rows else 0
    for name, value, verdict in rows:
        print(f"{name:<{width}}  {value}  → {verdict}")


if __name__ == "__main__":
    main()
