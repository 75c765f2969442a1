#!/usr/bin/env python3
"""Benchmark: the tracer's cost measured inside one wrk window, out of reach of the host's drift.

bench/trace_overhead.py compares windows taken one after another; on this host throughput
drifts by 15-25 % between them, more than the cost left to measure. Here one window serves
both sides at once. The lab's php-fpm workers are split in two halves: `statstorm trace -p`
traces one half (the compiled tracer puts PHP's function probes in those workers only), the
other half runs untraced, and wrk drives the whole pool at saturation. Every worker always has
a request waiting and the scheduler gives runnable workers equal CPU, so each serves requests
at the rate its own cost per request allows: the traced half's requests per worker over the
untraced half's is the tracer's throughput ratio for PHP, taken in one window. The requests are
counted by php-fpm's status page (each process's request counter), read twice while wrk runs.

Modes, in rotated order every round; the traced half alternates between rounds, so a
difference between the halves themselves cancels out:
  control  nothing traced: the halves' ratio (1 but for noise: its spread is the method's)
  ebpf     `--backend ebpf`, every call and PHP operation recorded, on one half
  sampled  the same with `--sample 10`
  ebpf-b, sampled-b  ebpf and sampled with another build of the tracer (--loader-b DIR, as
           in bench/trace_overhead.py), not run by default

Printed per mode, per round and as a geometric mean with its 95 % interval over rounds:
  per worker  the traced half's requests per worker / the untraced half's
  projected   the whole pool traced, from the CPU each part used in the window (/proc):
              (untraced PHP + rest) / (traced PHP + rest + tracer) per request, where rest is
              nginx, wrk and the kernel's other work per request, and tracer is the tracer's own
              processes (which here take CPU from both halves alike) per traced request
What the design leaves out: the syscall tracepoints are attached for every process, so the
untraced half pays their entry (a map lookup that finds it untraced) on its metadata syscalls;
its side is then a little slower than untraced, and the ratios err low.
With --profile, perf samples every CPU during each counted window (bench/cpu_profile.py) and
the PHP CPU per request of the traced half, less the untraced half's, is split by where it went.
Run as root:  PYTHONPATH=src python3 bench/trace_paired.py [--rounds 6] [--profile] [--json]
The machine-wide load lock (/tmp/statstorm-load.lock) is held for the whole measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from statstorm.adapters.load.loadgen import RunSpec, load_lock
from statstorm.adapters.load.sysstat import fpm_status
from statstorm.commands import lab as lab_cmd
from statstorm.env import Env
from statstorm.model.stats import compare_paired

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpu_profile import CATEGORIES, Profile  # noqa: E402
from trace_overhead import (GOAL_RATIO, CpuWindow, NoiseWatch, Tracer, lab_groups, log,  # noqa: E402
                            run_wrk, wait_quiet)

MODES = ("control", "ebpf", "sampled", "ebpf-b", "sampled-b")
STATUS_PATH = "/statstorm-fpm-status"  # the lab pool's pm.status_path


def served(url: str) -> tuple[dict[int, int], int]:
    """Requests each worker has started ({pid: n}), and the worker serving this reading."""
    st = fpm_status(url, timeout=30.0)
    if not st or "processes" not in st:
        raise RuntimeError(f"php-fpm's status page did not answer: {url}")
    counts, serving = {}, 0
    for p in st["processes"]:
        counts[int(p["pid"])] = int(p["requests"])
        if p.get("state") == "Running" and STATUS_PATH in str(p.get("request uri", "")):
            serving = int(p["pid"])
    return counts, serving


def window(env: Env, spec: RunSpec, workdir: Path, status_url: str, lead: float, d: float,
           groups: dict[str, list[int]], prof: Profile | None) -> dict[str, Any]:
    """wrk for lead + d + lead seconds; the requests and CPU of the d seconds in its middle
    (sampled by perf when profiling)."""
    wrk: dict[str, Any] = {}
    t = threading.Thread(target=lambda: wrk.update(run_wrk(env, spec, workdir)), daemon=True)
    t.start()
    time.sleep(lead)
    cpu = CpuWindow(groups)
    before, _ = served(status_url)
    if prof is not None:
        prof.start()
    cpu.start()
    time.sleep(d)
    used = cpu.stop()
    if prof is not None:
        prof.stop()
    after, serving = served(status_url)
    t.join(timeout=spec.duration_s + 120)
    delta = {p: after[p] - before.get(p, after[p]) for p in after}
    if serving in delta:
        delta[serving] -= 1  # the second reading's own request
    return {"served": delta, "cpu": used, "wrk": wrk}


def ratios(w: dict[str, Any], traced: list[int], untraced: list[int]) -> dict[str, float]:
    n_t = sum(w["served"].get(p, 0) for p in traced)
    n_u = sum(w["served"].get(p, 0) for p in untraced)
    c = w["cpu"]
    out = {"n_traced": n_t, "n_untraced": n_u, "per_worker": 0.0, "projected": 0.0}
    if not n_t or not n_u:
        return out
    out["per_worker"] = round((n_t / len(traced)) / (n_u / len(untraced)), 4)
    p_t, p_u = c["traced_s"] / n_t, c["untraced_s"] / n_u
    rest = (c["rest_s"] + c["nginx_s"]) / (n_t + n_u)
    tracer = c.get("tracer_s", 0.0) / n_t
    out["projected"] = round((p_u + rest) / (p_t + rest + tracer), 4)
    out.update(php_ms_traced=round(p_t * 1000, 3), php_ms_untraced=round(p_u * 1000, 3),
               rest_ms=round(rest * 1000, 3), tracer_ms=round(tracer * 1000, 3))
    return out


def measure(env: Env, mode: str, a: argparse.Namespace, lab: str, spec: RunSpec, workdir: Path,
            status_url: str, traced: list[int], untraced: list[int], tag: str,
            active: list[Tracer]) -> dict[str, Any]:
    noise = wait_quiet(a.quiet_wait)
    workers, groups = lab_groups(env, lab)
    if sorted(workers) != sorted(traced + untraced):
        raise RuntimeError(f"the pool's workers changed: {workers}")
    g = {"traced": traced, "untraced": untraced, "nginx": groups["nginx"]}
    res: dict[str, Any] = {"mode": mode, "traced_pids": traced}
    tr = None
    if mode != "control":
        tr = Tracer(mode, lab, 2 * a.lead + a.duration + a.margin,
                    workdir / f"{tag}-{mode}.sst.gz", workdir, workers, a.loader_b,
                    pids=traced)
        active.append(tr)
        tr.start()
        tr.wait_attached(workers, timeout=120, settle=a.settle)
        g["tracer"] = [tr.proc.pid if tr.proc else 0, tr.helper]
    watch = NoiseWatch({os.getpid(), tr.proc.pid if tr and tr.proc else 0})
    watch.start()
    prof = Profile(workdir / f"{tag}-{mode}.perf.data") if a.profile else None
    w = window(env, spec, workdir, status_url, a.lead, a.duration, g, prof)
    res["noise"] = sorted(set(noise) | set(watch.stop()))
    res.update(w)
    res.update(ratios(w, traced, untraced))
    if prof is not None and res["n_traced"] and res["n_untraced"]:
        # the same window's samples, split by half: what tracing adds, by where it went
        comm = Path(f"/proc/{traced[0]}/comm").read_text().strip()
        t = prof.split(comm, res["n_traced"], pids=traced, keep=True)
        u = prof.split(comm, res["n_untraced"], pids=untraced)
        res["profile"] = {c: round(t[c] - u[c], 1) for c in CATEGORIES}
        res["profile_untraced"] = u
    if tr is not None:
        summary = tr.finish(timeout=a.duration + a.margin + 180)
        active.remove(tr)
        t = summary.get("trace", {})
        res["tracer"] = {"requests": summary.get("requests", 0) + (t.get("sampling") or {}).get(
            "counted_requests", 0), "dropped": t.get("dropped"), "warnings": tr.warnings()}
        tr.out.unlink(missing_ok=True)
    return res


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for m in dict.fromkeys(r["mode"] for r in runs):
        rs = [r for r in runs if r["mode"] == m and r["per_worker"] > 0]
        if not rs:
            continue
        d: dict[str, Any] = {"rounds": len(rs)}
        for k in ("per_worker", "projected"):
            v = [r[k] for r in rs]
            d[k] = v
            if len(v) > 1:
                c = compare_paired([1.0] * len(v), v)
                d[f"{k}_gm"] = [round(c.ratio, 4), round(c.ci_low, 4), round(c.ci_high, 4)]
        for k in ("php_ms_traced", "php_ms_untraced", "rest_ms", "tracer_ms"):
            d[k] = round(statistics.median(r[k] for r in rs), 3)
        d["dropped"] = sum((r.get("tracer") or {}).get("dropped") or 0 for r in rs)
        if all("profile" in r for r in rs):
            d["profile"] = {c: round(statistics.median(r["profile"][c] for r in rs), 1)
                            for c in CATEGORIES}
            d["profile_untraced"] = {c: round(statistics.median(
                r["profile_untraced"][c] for r in rs), 1) for c in CATEGORIES}
        out[m] = d
    return out


def print_table(out: Any, summary: dict[str, Any], runs: list[dict[str, Any]]) -> None:
    def p(line: str = "") -> None:
        print(line, file=out)

    p(f"{'mode':8} {'round':>5} {'traced':>14} {'req/worker t/u':>15} {'per worker':>10} "
      f"{'projected':>9} {'php ms t/u':>15} {'rest ms':>8} {'tracer ms':>9}")
    for r in runs:
        nt, nu = len(r["traced_pids"]), len(r["served"]) - len(r["traced_pids"])
        per = f"{r['n_traced'] / max(nt, 1):.0f}/{r['n_untraced'] / max(nu, 1):.0f}"
        php = f"{r.get('php_ms_traced', 0):.1f}/{r.get('php_ms_untraced', 0):.1f}"
        p(f"{r['mode']:8} {r['round'] + 1:5} {','.join(map(str, r['traced_pids'])):>14} "
          f"{per:>15} {r['per_worker']:10.3f} {r['projected']:9.3f} {php:>15} "
          f"{r.get('rest_ms', 0):8.2f} {r.get('tracer_ms', 0):9.3f}")
    p()
    p("Geometric mean over rounds [95 % interval]:")
    for m, d in summary.items():
        goal = GOAL_RATIO.get(m)
        for k in ("per_worker", "projected"):
            if f"{k}_gm" not in d:
                continue
            gm, lo, hi = d[f"{k}_gm"]
            verdict = ""
            if goal is not None:
                shown = "met" if lo >= goal else "not shown" if hi >= goal else "missed"
                verdict = f"  (goal >= {goal:.2f}x: {shown})"
            p(f"  {m:8} {k:10} {gm:.3f} [{lo:.3f} - {hi:.3f}]{verdict}")
        if m != "control":
            p(f"  {m:8} dropped events: {d['dropped']}")
    profiled = {m: d for m, d in summary.items() if "profile" in d}
    if profiled:
        p()
        p("PHP CPU per request, traced half minus untraced half of the same window, by where "
          "it went (perf cpu-clock samples, microseconds, median over rounds):")
        p(f"{'mode':8} " + " ".join(f"{c[:12]:>12}" for c in CATEGORIES) + f" {'total':>9}")
        for m, d in profiled.items():
            v = d["profile"]
            p(f"{m:8} " + " ".join(f"{v[c]:+12.0f}" for c in CATEGORIES)
              + f" {sum(v.values()):+9.0f}")
        u = profiled.get("control", next(iter(profiled.values())))["profile_untraced"]
        p(f"{'(untraced':8} " + " ".join(f"{u[c]:12.0f}" for c in CATEGORIES)
          + f" {sum(u.values()):9.0f})")
    noisy = [f"round {r['round'] + 1} {r['mode']}" for r in runs if r.get("noise")]
    if noisy:
        p(f"\nWARNING: other tracers or load generators ran during: {', '.join(noisy)}")


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--app", choices=("synthetic", "mediawiki"), default="mediawiki")
    ap.add_argument("--storage", choices=("local", "glusterfs"), default="local")
    ap.add_argument("--workers", type=int, default=4, help="php-fpm workers (even; pm=static)")
    ap.add_argument("-c", "--concurrency", type=int, default=0,
                    help="wrk connections [default: 2 x workers]")
    ap.add_argument("-d", "--duration", type=float, default=15.0,
                    help="seconds counted per window")
    ap.add_argument("--lead", type=float, default=2.0,
                    help="seconds of load before and after the counted window")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--warmup", type=float, default=5.0, help="seconds of discarded load")
    ap.add_argument("--margin", type=float, default=4.0,
                    help="the tracer runs this much longer than wrk")
    ap.add_argument("--settle", type=float, default=0.5,
                    help="seconds between the tracer attaching and wrk starting")
    ap.add_argument("--quiet-wait", type=float, default=60.0,
                    help="before each window, wait this long for other tracers/load to go")
    ap.add_argument("--home-parent", type=Path, default=Path("/var/tmp"))
    ap.add_argument("--profile", action="store_true",
                    help="sample every CPU with perf during each counted window and split the "
                         "PHP CPU per request of each half by where it went")
    ap.add_argument("--modes", default="control,ebpf,sampled",
                    help="comma-separated subset of " + ",".join(MODES))
    ap.add_argument("--loader-b", type=Path, default=None,
                    help="a directory holding another build of statstorm-trace, for ebpf-b "
                         "and sampled-b")
    ap.add_argument("--json", action="store_true", help="print all results as JSON on stdout")
    a = ap.parse_args()
    modes = [m for m in MODES if m in a.modes.split(",")]
    if not modes:
        ap.error("--modes: none of " + ",".join(MODES))
    if any(m.endswith("-b") for m in modes):
        if a.loader_b is None or not (a.loader_b / "statstorm-trace").is_file():
            ap.error("ebpf-b and sampled-b need --loader-b DIR with a built statstorm-trace")
        a.loader_b = a.loader_b.resolve()
    if a.workers < 2 or a.workers % 2:
        ap.error("--workers must be even (two halves)")
    if os.geteuid() != 0:
        ap.error("run as root (lab up and tracing need it)")
    conc = a.concurrency or 2 * a.workers
    signal.signal(signal.SIGTERM, _interrupt)
    home = Path(tempfile.mkdtemp(prefix="statstorm-bench-", dir=a.home_parent))
    home.chmod(0o755)  # www-data serves the lab's code from below here
    os.environ["STATSTORM_HOME"] = str(home)
    env = Env(state_root=home)
    name = f"tp{os.getpid() % 100000}"
    workdir = home / "bench"
    workdir.mkdir()
    active: list[Tracer] = []
    runs: list[dict[str, Any]] = []
    try:
        with load_lock(env):
            try:
                st = lab_cmd.up(env, lab_cmd.LabOptions(name=name, app=a.app, storage=a.storage,
                                                        workers=a.workers))
                url = st.url + st.entry_path
                status_url = st.url + STATUS_PATH + "?full"
                spec = RunSpec(url, a.duration + 2 * a.lead, timeout_s=10.0, concurrency=conc)
                workers = sorted(lab_groups(env, name)[0])
                halves = [workers[: len(workers) // 2], workers[len(workers) // 2:]]
                log(f"lab {name}: {a.app} on {a.storage}, workers {workers}, {url}; wrk -c {conc}, "
                    f"{a.duration:g} s counted x {a.rounds} rounds x {','.join(modes)}")
                if a.warmup > 0:
                    warm = RunSpec(url, a.warmup, timeout_s=10.0, concurrency=conc)
                    w = run_wrk(env, warm, workdir)
                    log(f"warm-up: {w['rps']:.1f} req/s, {w['errors']} errors")
                for i in range(a.rounds):
                    traced, untraced = halves[i % 2], halves[1 - i % 2]
                    for m in modes[i % len(modes):] + modes[:i % len(modes)]:
                        r = measure(env, m, a, name, spec, workdir, status_url, traced, untraced,
                                    f"r{i}", active)
                        r["round"] = i
                        runs.append(r)
                        extra = f"; NOISY ({' '.join(r['noise'])})" if r["noise"] else ""
                        if r.get("tracer"):
                            extra += (f"; tracer: {r['tracer']['requests']} requests, dropped "
                                      f"{r['tracer']['dropped']}")
                        log(f"round {i + 1} {m:8}: per worker {r['per_worker']:.3f}, projected "
                            f"{r['projected']:.3f} ({r['n_traced']}/{r['n_untraced']} requests, "
                            f"wrk {r['wrk'].get('rps', 0):.1f} req/s){extra}")
                summary = summarize(runs)
                print_table(sys.stderr if a.json else sys.stdout, summary, runs)
                if a.json:
                    print(json.dumps({"app": a.app, "storage": a.storage, "workers": a.workers,
                                      "concurrency": conc, "duration_s": a.duration,
                                      "rounds": a.rounds, "modes": summary, "runs": runs},
                                     indent=2))
            finally:
                for tr in list(active):
                    tr.kill()
                lab_cmd.down(env, name, quiet=True)
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
