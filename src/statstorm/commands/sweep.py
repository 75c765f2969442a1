"""`statstorm sweep`: drive a load generator through concurrency (closed) or rate (open) levels,
sample the server side while each level runs, and find the knee and any collapse.

Order of work: validate everything (options, target on loopback, tool installed, output
writable, one GET that must answer as expected) → per level: warm-up (discarded), repeats
(each sampled), a direct GET to validate content → JSON rewritten after every level →
analysis → plot. Ctrl-C/SIGTERM ends the load generator by PID and still writes the levels
that finished.

With --trace every measured run (not the warm-up) is traced: `statstorm trace --counts` runs
on the pool in a background thread (counted in the kernel, so nothing is lost at full load),
the load starts once bpftrace has attached, and the trace stops when the load ends.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from statstorm import faults
from statstorm.adapters.labs import state as labs
from statstorm.adapters.load import http, sysstat
from statstorm.adapters.php import php_targets
from statstorm.adapters.tracing import bpftrace
from statstorm.adapters.load.ab import Ab
from statstorm.adapters.load.loadgen import LoadGenerator, RunSpec, load_lock
from statstorm.adapters.tracing.trace_thread import TraceThread, Tracer
from statstorm.adapters.load.vegeta import Vegeta
from statstorm.adapters.load.wrk import Wrk
from statstorm.env import Env
from statstorm.errors import ComponentError, DependencyError, Interrupted, UsageError
from statstorm.model import storage_delay
from statstorm.model.sweep_levels import aggregate, analyse, with_trace
from statstorm.results.common import write_json_atomic
from statstorm.results.sweep import LevelResult, RepeatResult, SweepResult, SweepSettings

CLOSED_TOOLS = ("wrk", "ab")
OPEN_TOOLS = ("vegeta",)
DEFAULT_CONCURRENCY = (1, 2, 5, 10, 20, 30)
FPM_STATUS_PATH = "/statstorm-fpm-status"
# Bounds: every sweep ends.
MAX_DURATION_S = 600.0
MAX_LEVELS = 50
MAX_REPEATS = 20
MAX_TOTAL_S = 4 * 3600.0
MAX_CONCURRENCY = 10_000
MAX_RATE = 100_000.0
# --trace: bpftrace attaches in about 2 s before each run and is stopped after it (an upper bound).
TRACE_OVERHEAD_S = 3.0  # attach, detach and the counts written (bench/trace_detach.py)


def make_tool(name: str) -> LoadGenerator:
    tools: dict[str, LoadGenerator] = {"wrk": Wrk(), "ab": Ab(), "vegeta": Vegeta()}
    return tools[name]


@dataclass(frozen=True)
class SweepOptions:
    url: str = ""
    lab: str | None = None
    concurrency: tuple[int, ...] = ()
    rates: tuple[float, ...] = ()
    duration_s: float = 10.0
    warmup_s: float = 2.0
    repeats: int = 3
    tool: str | None = None
    timeout_s: float = 10.0
    expect_status: int = 200
    expect_text: str = ""
    allow_remote: bool = False
    fpm_status_url: str | None = None
    pool: str | None = None
    output: Path | None = None
    plot: Path | None = None
    dry_run: bool = False
    trace: bool = False


@dataclass(frozen=True)
class Plan:
    """Validated options: what will run."""

    url: str
    tool: str
    model: str
    levels: tuple[float, ...]
    duration_s: float
    warmup_s: float
    repeats: int
    timeout_s: float
    expect_status: int
    expect_text: str
    fpm_status_url: str | None
    pool: str | None
    output: Path
    plot: Path | None
    trace_lab: str | None = None  # --trace: the lab whose pool is traced, or
    trace_pool: str | None = None  # the pool traced (exactly one of the two when tracing)
    lab: str | None = None  # --lab: the lab swept, its storage and that storage's delay
    storage: str = ""
    storage_delay_us: int = 0  # the lab's `--storage-delay`: µs per metadata call (0: none)

    @property
    def lab_storage(self) -> str:
        """The lab's storage as its outputs name it (`glusterfs +1ms`), '' without --lab."""
        return storage_delay.label(self.storage, self.storage_delay_us) if self.lab else ""

    @property
    def trace(self) -> bool:
        return bool(self.trace_lab or self.trace_pool)

    @property
    def estimated_s(self) -> float:
        per_run = self.duration_s + 1 + (TRACE_OVERHEAD_S if self.trace else 0.0)
        return len(self.levels) * (self.warmup_s + self.repeats * per_run)

    def trace_path(self, level: float, repeat: int) -> Path:
        """Trace file of one measured run: next to the JSON, `<stem>-c<level>-r<repeat>.sst.gz`
        (`-rate<level>` in the open model)."""
        tag = "c" if self.model == "closed" else "rate"
        return self.output.with_name(f"{self.output.stem}-{tag}{level:g}-r{repeat}.sst.gz")

    def spec(self, level: float, duration: float) -> RunSpec:
        cap = int(max(1000, duration * 50_000))
        if self.model == "closed":
            return RunSpec(self.url, duration, self.timeout_s, concurrency=int(level),
                           max_requests=cap, expect_text=self.expect_text)
        return RunSpec(self.url, duration, self.timeout_s, rate=level,
                       max_requests=int(level * duration) + 1, expect_text=self.expect_text)


def plan(env: Env, opts: SweepOptions) -> Plan:
    """Validate every option before any load is sent."""
    url, fpm_url, pool = opts.url, opts.fpm_status_url, opts.pool
    storage, delay_us = "", 0
    if opts.lab is not None:
        if url:
            raise UsageError("give either a URL or --lab, not both")
        state = labs.status(env, opts.lab)
        if state.phase != "up":
            raise UsageError(f"lab {opts.lab!r} is {state.phase}: restart it with "
                             f"`statstorm lab down --name {opts.lab}` then `statstorm lab up`")
        url = state.url + state.entry_path
        fpm_url = fpm_url or state.url + FPM_STATUS_PATH
        pool = pool or state.pool
        storage, delay_us = state.storage, state.storage_delay_us
    elif not url:
        raise UsageError("no target: pass a URL or --lab NAME")
    elif pool and not fpm_url:
        match = [s for s in labs.list_labs(env) if s.pool == pool]
        if not match:
            raise UsageError(f"pool {pool!r}: pass its status page with --fpm-status URL "
                             f"(pm.status_path of the pool)")
        fpm_url = match[0].url + FPM_STATUS_PATH
    http.check_loopback(url, opts.allow_remote)
    if fpm_url:
        http.check_loopback(fpm_url, opts.allow_remote)
    trace_lab = trace_pool = None
    if opts.trace:
        if opts.lab is None and not opts.pool:
            raise UsageError("--trace needs the pool to trace: add --lab NAME (a lab's pool) or "
                             "--pool NAME (a php-fpm pool on this machine)")
        if not opts.dry_run:
            bpftrace.check_privileges()
            bpftrace.find()
            bpftrace.ensure_tracefs()
        if opts.lab is not None:
            trace_lab = opts.lab
        else:
            assert pool
            if not opts.dry_run and not php_targets.pool_workers(pool):
                raise UsageError(f"--trace: no php-fpm pool {pool!r} is running (no process "
                                 f"titled 'php-fpm: pool {pool}'); check --pool")
            trace_pool = pool

    if opts.rates and opts.concurrency:
        raise UsageError("give --concurrency (closed model) or --rate (open model), not both")
    model = "open" if opts.rates else "closed"
    tool = opts.tool or ("vegeta" if model == "open" else "wrk")
    if model == "open" and tool not in OPEN_TOOLS:
        raise UsageError(f"--rate needs an open-model tool ({', '.join(OPEN_TOOLS)}); "
                         f"{tool} keeps a fixed number of requests in flight")
    if model == "closed" and tool not in CLOSED_TOOLS:
        raise UsageError(f"{tool} sends at a fixed rate: pass --rate R1,R2,… with it")
    levels: tuple[float, ...] = tuple(float(r) for r in opts.rates) if model == "open" else tuple(
        float(c) for c in (opts.concurrency or DEFAULT_CONCURRENCY))
    if not levels or len(levels) > MAX_LEVELS:
        raise UsageError(f"give 1 to {MAX_LEVELS} levels")
    if len(set(levels)) != len(levels):
        raise UsageError("levels must not repeat: use --repeats to run a level several times")
    top = MAX_RATE if model == "open" else MAX_CONCURRENCY
    if any(not 0 < lv <= top for lv in levels):
        raise UsageError(f"levels must be between 1 and {top:g}")
    if not 1 <= opts.duration_s <= MAX_DURATION_S:
        raise UsageError(f"--duration must be between 1 and {MAX_DURATION_S:.0f} s")
    if not 0 <= opts.warmup_s <= MAX_DURATION_S:
        raise UsageError(f"--warmup must be between 0 and {MAX_DURATION_S:.0f} s")
    if not 1 <= opts.repeats <= MAX_REPEATS:
        raise UsageError(f"--repeats must be between 1 and {MAX_REPEATS}")
    if not 0.1 <= opts.timeout_s <= 120:
        raise UsageError("--timeout must be between 0.1 and 120 s")
    if tool == "ab" and opts.expect_text:
        env.log("note: ab cannot check bodies; --expect-text is checked by one direct GET per "
                "level, and ab's 'Length' failures count as wrong content")
    if not make_tool(tool).available():
        hint = {"wrk": "Debian package wrk", "ab": "Debian package apache2-utils",
                "vegeta": "installed into /opt/statstorm/bin"}[tool]
        raise DependencyError(f"{tool} is not installed: run scripts/setup.sh --lab as root ({hint})")

    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    output = opts.output or Path(f"sweep-{stamp}.json")
    plot_path = opts.plot if opts.plot is not None else output.with_suffix(".svg")
    for path in (output, plot_path):
        if path is None:
            continue
        d = path.parent if str(path.parent) else Path(".")
        if path.exists() and path.is_dir():
            raise UsageError(f"{path} is a directory: pass a file name")
        if not d.exists() or not os.access(d, os.W_OK):
            raise UsageError(f"cannot write {path}: directory {d} does not exist or is not writable")
    p = Plan(url=url, tool=tool, model=model, levels=levels, duration_s=opts.duration_s,
             warmup_s=opts.warmup_s, repeats=opts.repeats, timeout_s=opts.timeout_s,
             expect_status=opts.expect_status, expect_text=opts.expect_text,
             fpm_status_url=fpm_url, pool=pool, output=output, plot=plot_path,
             trace_lab=trace_lab, trace_pool=trace_pool, lab=opts.lab, storage=storage,
             storage_delay_us=delay_us)
    if p.estimated_s > MAX_TOTAL_S:
        raise UsageError(f"this sweep would take about {p.estimated_s / 60:.0f} min (limit "
                         f"{MAX_TOTAL_S / 3600:.0f} h): fewer levels, repeats or a shorter --duration")
    return p


Progress = Callable[[str, LevelResult | None], None]


def run(env: Env, p: Plan, progress: Progress | None = None,
        tool: LoadGenerator | None = None,
        sampler_factory: Callable[[str | None], sysstat.Sampler] | None = None,
        trace_with: Tracer | None = None) -> SweepResult:
    """Run the planned sweep. The JSON at `p.output` is rewritten after each level.
    `trace_with`: the tracer for a plan with --trace (the CLI gives `statstorm trace`'s)."""
    if p.trace and trace_with is None:
        raise UsageError("this sweep traces the pool: give run() a tracer (trace_with=)")
    gen = tool or make_tool(p.tool)
    make_sampler = sampler_factory or (lambda url: sysstat.Sampler(url))
    say = progress or (lambda msg, lv: env.log(msg))
    base = SweepResult(
        target=p.url, tool=p.tool, model=p.model,
        options=SweepSettings(levels=tuple(p.levels), duration_s=p.duration_s,
                              warmup_s=p.warmup_s, repeats=p.repeats, timeout_s=p.timeout_s,
                              expect_status=p.expect_status, expect_text=p.expect_text,
                              fpm_status_url=p.fpm_status_url, pool=p.pool, trace=p.trace),
        started=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )
    base = with_lab(base, p)
    levels: list[LevelResult] = []
    warnings: list[str] = []

    def now(interrupted: bool = False) -> SweepResult:
        """The sweep so far."""
        return replace(base, levels=tuple(levels), warnings=tuple(warnings),
                       interrupted=interrupted)

    problem = http.check_answer(p.url, p.expect_status, p.expect_text, p.timeout_s)
    if problem:
        raise ComponentError(f"{p.url}: {problem} — fix the target or --expect-status/--expect-text "
                             f"before sending load")
    if p.fpm_status_url and sysstat.fpm_status(p.fpm_status_url) is None:
        warnings.append(f"FPM status page {p.fpm_status_url} does not answer: pool signals omitted")
        env.log("warning: " + warnings[-1])
    write_json_atomic(p.output, now().to_json())
    try:
        with tempfile.TemporaryDirectory(prefix="statstorm-sweep-") as tmp:
            work = Path(tmp)
            for level in p.levels:
                name = f"{'concurrency' if p.model == 'closed' else 'rate'} {level:g}"
                faults.phase("sweep/level")
                if p.warmup_s > 0:
                    say(f"{name}: warm-up {p.warmup_s:g} s (not recorded)", None)
                    with load_lock(env):
                        gen.run(env, p.spec(level, max(1.0, p.warmup_s)), work)
                reps: list[RepeatResult] = []
                for i in range(p.repeats):
                    say(f"{name}: run {i + 1}/{p.repeats}, {p.duration_s:g} s", None)
                    with load_lock(env):
                        tracer = None
                        if p.trace:
                            assert trace_with is not None
                            tracer = TraceThread(
                                env, trace_with, lab=p.trace_lab, pool=p.trace_pool,
                                duration_s=p.duration_s + p.timeout_s + 30,
                                output=p.trace_path(level, i + 1))
                            tracer.start()
                        sampler = make_sampler(p.fpm_status_url)
                        sampler.start()
                        t0 = time.monotonic()
                        try:
                            load = gen.run(env, p.spec(level, p.duration_s), work)
                        except BaseException:
                            sampler.stop()
                            if tracer is not None:
                                tracer.abandon()
                            raise
                        wall = time.monotonic() - t0
                        server = sampler.stop()
                        if tracer is not None:
                            traced = tracer.finish()
                            server = with_trace(server, traced, load.duration_s or wall)
                            for w in traced.warnings:
                                warnings.append(f"{name}, run {i + 1}: trace: {w}")
                                env.log("warning: " + warnings[-1])
                    reps.append(RepeatResult(load, server))
                    if load.target_rate and load.sent_rate < 0.9 * load.target_rate:
                        w = (f"{name}: the client sent only {load.sent_rate:.0f} req/s of "
                             f"{load.target_rate:g} asked for; latency is corrected for the lag, "
                             f"but the load was lower than planned")
                        warnings.append(w)
                        env.log("warning: " + w)
                validation = http.check_answer(p.url, p.expect_status, p.expect_text, p.timeout_s)
                lv = aggregate(level, p.model, reps, validation)
                levels.append(lv)
                write_json_atomic(p.output, now().to_json())
                faults.phase("sweep/written")
                say(f"{name}: done", lv)
    except (KeyboardInterrupt, Interrupted):
        finish(now(interrupted=True), p)
        raise
    return finish(now(), p)


def with_lab(result: SweepResult, p: Plan) -> SweepResult:
    """The result with the lab swept, its storage and that storage's delay."""
    return replace(result, lab=p.lab or "", storage=p.storage,
                   storage_delay_us=p.storage_delay_us)


def finish(result: SweepResult, p: Plan) -> SweepResult:
    """Analyse, stamp, write the JSON, render the plot from that JSON; the finished sweep."""
    result = replace(analyse(result),
                     finished=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    spreads = [lv for lv in result.levels if lv.rps > 0 and lv.rps_spread / lv.rps > 0.10]
    if spreads:
        result = replace(result, warnings=(
            *result.warnings,
            "repeats differ by more than ±10 % at " + ", ".join(f"{lv.level:g}" for lv in spreads)
            + ": other load on this machine? use more --repeats or a longer --duration"))
    write_json_atomic(p.output, result.to_json())
    if p.plot is not None and result.levels:
        from statstorm.report import sweep_svg

        sweep_svg.write(p.output, p.plot)
    return result


def dry_run_commands(p: Plan) -> list[list[str]]:
    gen = make_tool(p.tool)
    work = Path(tempfile.gettempdir()) / "statstorm-sweep-XXXX"
    return [gen.command(p.spec(level, p.duration_s), work) for level in p.levels]

