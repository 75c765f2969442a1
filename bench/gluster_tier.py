#!/usr/bin/env python3
"""Benchmark: GlusterFS's content-caching options on a running lab, after the md-cache tier.

For a lab on GlusterFS (made with `statstorm lab up --storage glusterfs`, its md-cache tier
applied with `statstorm apply --lab NAME --all --yes`), each variant below is switched on in
turn, interleaved with the baseline in every round: volume options by `gluster volume set`
(reset after), then, for every window (the baseline's too), a fresh FUSE client stacked on the
mount point with the variant's client options (unmounted after). Each window is a warm-up then a `wrk` run against the lab's loopback URL; the volume's
profile gives the FOPs that reached the brick per request (network round trips), wrk the
throughput. Holds the load lock for the whole run. Prints a table and writes JSON.

Run as root:  python3 bench/gluster_tier.py --lab NAME [--rounds 3] [-d 8]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
from pathlib import Path

from statstorm.adapters.labs import state as labs
from statstorm.adapters.load.loadgen import load_lock
from statstorm.adapters.storage import gluster, gluster_profile, mounts
from statstorm.env import Env

VARIANTS: dict[str, dict[str, dict[str, str]]] = {
    "baseline": {},
    "quick-read 600 s + invalidation": {"volume": {"performance.qr-cache-timeout": "600",
                                                   "performance.quick-read-cache-invalidation": "on"}},
    "io-cache on": {"volume": {"performance.io-cache": "on"}},
    "open-behind off": {"volume": {"performance.open-behind": "off"}},
    "quick-read off": {"volume": {"performance.quick-read": "off"}},
    "readdir-ahead on": {"volume": {"performance.readdir-ahead": "on"}},
    "stat-prefetch off": {"volume": {"performance.stat-prefetch": "off"}},
    "cache-max-file-size 1MB": {"volume": {"performance.cache-max-file-size": "1MB"}},
    "read-after-open no": {"volume": {"performance.read-after-open": "no"}},
    "read-after-open no + quick-read 600 s": {"volume": {
        "performance.read-after-open": "no", "performance.qr-cache-timeout": "600",
        "performance.quick-read-cache-invalidation": "on"}},
    "fopen-keep-cache": {"mount": {"fopen-keep-cache": "on"}},
    "kernel-writeback-cache": {"mount": {"kernel-writeback-cache": "on"}},
    "use-readdirp no": {"mount": {"use-readdirp": "no"}},
    "keep-cache + quick-read 600 s": {"mount": {"fopen-keep-cache": "on"},
                                      "volume": {"performance.qr-cache-timeout": "600",
                                                 "performance.quick-read-cache-invalidation": "on"}},
}


def wrk(url: str, seconds: float, conns: int) -> tuple[float, int]:
    out = subprocess.run(["wrk", "-t2", f"-c{conns}", f"-d{seconds:g}s", url],
                         capture_output=True, text=True, timeout=seconds + 30).stdout
    rps = next(float(line.split()[1]) for line in out.splitlines()
               if line.startswith("Requests/sec"))
    reqs = next(int(line.split()[0]) for line in out.splitlines() if "requests in" in line)
    return rps, reqs


def window(env: Env, url: str, volume: str, seconds: float, conns: int) -> dict[str, object]:
    wrk(url, 2, conns)  # warm-up under the variant
    before = gluster_profile.info(env, volume)
    rps, reqs = wrk(url, seconds, conns)
    calls = gluster_profile.delta(before, gluster_profile.info(env, volume))
    per = {k: round(v / reqs, 3) for k, v in calls.items()}
    return {"rps": rps, "requests": reqs, "fops_per_request": per,
            "rt_per_request": round(gluster_profile.round_trips(calls, waited_only=True) / reqs, 3)}


def run_variant(env: Env, name: str, url: str, volume: str, mp: Path, seconds: float,
                conns: int) -> dict[str, object]:
    v = VARIANTS[name]
    stacked = 0
    set_keys: list[str] = []
    try:
        for key, value in v.get("volume", {}).items():
            gluster.set_volume_option(env, volume, key, value)
            set_keys.append(key)
        # every window on a fresh client stacked on the mount, the variant's FUSE options
        # given: a `gluster volume set` switches a running client's graph, and the inodes of
        # the old graph are then looked up again (LOOKUPs a fresh client does not make)
        top = mounts.fuse_client(str(mp), "glusterfs")
        assert top is not None, f"no GlusterFS client serves {mp}"
        stacked = gluster.stack_client(env, gluster.client_argv_with(top[1], v.get("mount", {})), mp)
        return window(env, url, volume, seconds, conns)
    finally:
        if stacked:
            gluster.unmount(env, mp, stacked)
        for key in set_keys:
            gluster.reset_volume_option(env, volume, key)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lab", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-d", "--duration", type=float, default=8.0)
    ap.add_argument("-c", "--connections", type=int, default=4)
    ap.add_argument("--only", nargs="*", default=None, help="variants to run (baseline always)")
    ap.add_argument("-o", "--output", type=Path, default=Path("gluster-tier.json"))
    a = ap.parse_args()
    env = Env()
    st = labs.load(env, a.lab)
    url, volume = st.url, st.volume
    mp = Path(mounts.detect(st.code_path).mount_point)
    names = ["baseline", *[n for n in VARIANTS if n != "baseline"
                           and (a.only is None or n in a.only)]]
    rows: dict[str, list[dict[str, object]]] = {n: [] for n in names}
    gluster_profile.start(env, volume)
    with load_lock(env):
        for r in range(a.rounds):
            for n in names:
                res = run_variant(env, n, url, volume, mp, a.duration, a.connections)
                rows[n].append(res)
                print(f"round {r + 1} {n:32} {res['rps']:8.1f} req/s  "
                      f"{res['rt_per_request']:7.2f} rt/req  {res['fops_per_request']}", flush=True)
    a.output.write_text(json.dumps(rows, indent=1))
    base = statistics.median(float(x["rps"]) for x in rows["baseline"])  # type: ignore[arg-type]
    print(f"\n{'variant':32} {'req/s median':>12} {'vs base':>8} {'rt/req':>7}  (n={a.rounds})")
    for n, rs in rows.items():
        rps = statistics.median(float(x["rps"]) for x in rs)  # type: ignore[arg-type]
        rt = statistics.median(float(x["rt_per_request"]) for x in rs)  # type: ignore[arg-type]
        spread = max(float(x["rps"]) for x in rs) - min(float(x["rps"]) for x in rs)  # type: ignore[arg-type]
        print(f"{n:32} {rps:12.1f} {100 * (rps / base - 1):+7.1f}% {rt:7.2f}  spread {spread:.1f}")


if __name__ == "__main__":
    main()
