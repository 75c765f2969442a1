#!/usr/bin/env python3
"""Benchmark: `statstorm tune --yes` on stock-host scenarios, apps the lab does not build.

Goals (issue "statstorm tune"): on the stock-host scenarios, with at least two apps the lab
does not build, after `statstorm tune --pool www --url … --yes`, unaided: network/local
throughput ≥ 0.90x and p99 ≤ 1.3x; the prediction printed before the apply; 0 failed
requests; every predicted figure within 15 % of the one measured after (or said not
predicted); tune of an unknown app within 10 minutes. The ratios are printed after `apply
--all` and after the escalation's kept changes (each trial with its ratios and price).

Each scenario stands up the host with `tests/stock_host.py` (Debian's php-fpm www pool and
nginx from /etc, a GlusterFS volume mounted by hand with default options, the app copied onto
it) and restores it exactly afterwards; `tune` makes its own local reference (a shadow of the
pool on local disk) and measures both with interleaved rounds, as the demo does.

Run as root on a quiet machine (no tests, no other benchmark):
    python3 bench/tune_goals.py [--apps dokuwiki,phpmyadmin] [--rounds 3] [-d 8]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent / "tests"), str(HERE.parent / "src")]

from stock_host import stock_host  # noqa: E402

from statstorm.model.prediction_fit import closing_notes  # noqa: E402
from statstorm.results.tune import TuneResult  # noqa: E402

PORT = 18391
PAGES = {"dokuwiki": "/doku.php", "phpmyadmin": "/index.php"}
GOAL_RPS, GOAL_P99, GOAL_S = 0.90, 1.3, 600.0


def site(port: int, root: Path) -> str:
    return (f"server {{\n\tlisten 127.0.0.1:{port};\n\troot {root};\n\tindex index.php doku.php;\n"
            "\tlocation ~ \\.php$ {\n\t\tinclude snippets/fastcgi-php.conf;\n"
            "\t\tfastcgi_pass unix:/run/php/php8.2-fpm.sock;\n\t}\n}\n")


def run_app(app: str, rounds: int, seconds: float) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix="statstorm-tune-bench-", dir="/var/tmp"))
    home.chmod(0o755)  # the pool's workers must reach a code mirror made under it
    out = home / "out"
    url = f"http://127.0.0.1:{PORT}{PAGES[app]}"
    with stock_host() as host:
        host.gluster_volume()
        code = host.copy_app(app, host.mount_by_hand(host.scratch("net")) / app)
        host.nginx_site(f"tune-{app}", site(PORT, code))
        host.fpm_start("init")
        host.nginx_start()
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "statstorm", "tune", "--pool", "www",
                               "--url", url, "--yes", "--json", "-o", str(out), "--rounds",
                               str(rounds), "-d", str(seconds)], capture_output=True, text=True,
                              env=dict(os.environ, STATSTORM_HOME=str(home),
                                       STATSTORM_MIRROR_ROOT=str(home / "mirror")))
        wall = time.monotonic() - t0
    shutil.rmtree(home, ignore_errors=True)  # tune.json is printed below; the shadow is gone
    # (a kept mirror goes with it: stock_host put nginx's root back before)
    if proc.returncode != 0:
        return {"app": app, "error": proc.stderr.strip().splitlines()[-1:], "wall_s": wall}
    r = json.loads(proc.stdout)
    order_ok = bool(r.get("predicted_at") and r.get("applied_at")
                    and str(r["predicted_at"]) <= str(r["applied_at"]))
    t = TuneResult.from_json(r)
    final = t.final()
    return {"app": app, "wall_s": wall, "before": r["before"], "after": r["after"],
            "final": final.to_json() if final is not None else None,
            "trials": [{"finding": x.finding, "ratio_without": x.ratio_without,
                        "ratio_with": x.ratio_with, "p99_with": x.phase.ratio_p99,
                        "kept": x.kept, "why": x.why, "price": x.price} for x in t.trials],
            "skipped": [(x.finding, x.why) for x in t.skipped],
            "fit": closing_notes(t.metadata_calls_per_request, t.round_trips(), t.predicted),
            "timings": r.get("timings_s"),
            "failed": sum(int(ph[side].get("errors") or 0)
                          for ph in (r["before"], r["after"],
                                     *(x["phase"] for x in r.get("measure_first") or []))
                          for side in ("local", "network")),
            "predicted": r.get("predicted"), "calls": r.get("metadata_calls_per_request"),
            "round_trips": r.get("round_trips_per_request"), "applied": r.get("applied"),
            "prediction_first": order_ok}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--apps", default="dokuwiki,phpmyadmin")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-d", "--seconds", type=float, default=8.0)
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/tune_goals.py: run as root (it starts Debian's services)")
    for app in a.apps.split(","):
        r = run_app(app, a.rounds, a.seconds)
        if "error" in r:
            print(f"{app}: tune failed after {r['wall_s']:.0f} s: {r['error']}")
            continue
        b, f, z = r["before"], r["after"], r["final"] or r["after"]
        print(f"{app}: throughput {b['ratio_rps']:.3f}x -> {f['ratio_rps']:.3f}x after apply "
              f"--all -> {z['ratio_rps']:.3f}x with the escalation's kept changes "
              f"(goal >= {GOAL_RPS}); p99 {b['ratio_p99']:.2f}x -> {f['ratio_p99']:.2f}x -> "
              f"{z['ratio_p99']:.2f}x (goal <= {GOAL_P99}); wall {r['wall_s']:.0f} s "
              f"(goal <= {GOAL_S:.0f}); prediction first: {r['prediction_first']}")
        for x in r["trials"]:
            print(f"  escalation: {x['finding']}: {'kept' if x['kept'] else 'rolled back'} "
                  f"({x['ratio_without']}x -> {x['ratio_with']}x, p99 {x['p99_with']}x): "
                  f"{x['why']}" + (f"; price: {x['price']}" if x["kept"] else ""))
        for finding, why in r["skipped"]:
            print(f"  escalation: {finding}: not tried: {why}")
        print(f"  metadata calls/request: {json.dumps(r['calls'])}")
        print(f"  round trips/request: {json.dumps(r['round_trips'])}")
        print(f"  applied: {', '.join(map(str, r['applied'] or []))}")
        print(f"  failed requests in the measurements: {r['failed']} (goal 0)")
        for line in r["fit"] or ["every predicted figure within 15 % of the measured one"]:
            print(f"  prediction: {line}")
        print(f"  where the time goes (s): {json.dumps(r['timings'])}")


if __name__ == "__main__":
    main()
