"""`statstorm sweep …`: flags → SweepOptions → commands.sweep → table / JSON."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from statstorm.cli import cli, started
from statstorm.cli.paths import OutputPath
from statstorm.commands import sweep as sweep_cmd
from statstorm.commands import trace as trace_cmd
from statstorm.env import Env
from statstorm.model import storage_delay
from statstorm.errors import EXIT_FAILURE, Interrupted, UsageError
from statstorm.results.sweep import LevelResult, SweepResult


def number_list(text: str | None, flag: str, kind: type) -> tuple:  # type: ignore[type-arg]
    if not text:
        return ()
    try:
        return tuple(kind(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise UsageError(f"{flag} {text!r}: expected numbers separated by commas, e.g. 1,2,5,10") from None


def _row(lv: LevelResult, traced: bool = False) -> list[str]:
    s = lv.server
    fpm = "-"
    if s.fpm_active_max is not None:
        fpm = f"{s.fpm_active_max}/{s.fpm_total} q{s.fpm_listen_queue_max}"
        if s.fpm_max_children_reached:
            fpm += " max!"
    return [
        f"{lv.level:g}", f"{lv.rps:.1f} ±{lv.rps_spread:.1f}", f"{lv.p50:.1f}", f"{lv.p90:.1f}",
        f"{lv.p99:.1f}", f"{lv.max:.1f}",
        str(lv.errors.total) if not lv.errors.total else
        f"{lv.errors.total} (c{lv.errors.connect} t{lv.errors.timeout} r{lv.errors.read_write} "
        f"s{lv.errors.non_2xx} w{lv.errors.wrong_content})",
        f"{s.ctx_switches_per_s:,.0f}", f"{s.cpu_busy_pct:.0f}%", fpm,
        *([_trace_cell(lv)] if traced else []),
        "ok" if not lv.validation else "FAIL",
    ]


def _trace_cell(lv: LevelResult) -> str:
    s = lv.server
    if s.file_syscalls_per_request is None:
        return "-"
    return f"{s.file_syscalls_per_s or 0:,.0f} ({s.file_syscalls_per_request:.1f}/req)"


HEADERS = ["level", "req/s", "p50 ms", "p90 ms", "p99 ms", "max ms", "errors", "cs/s", "cpu",
           "fpm act/all q", "check"]
TRACE_HEADER = "file sc/s"


def _headers(traced: bool) -> list[str]:
    return HEADERS[:-1] + [TRACE_HEADER] + HEADERS[-1:] if traced else list(HEADERS)


def _traced(result: SweepResult) -> bool:
    return any(lv.server.file_syscalls_per_request is not None for lv in result.levels)


def lab_line(plan: sweep_cmd.Plan) -> str:
    """What a lab's sweep ran on: `lab sw1 on glusterfs +1ms, 1ms added to each round trip to
    the storage by its --storage-delay`; '' for a URL."""
    if not plan.lab:
        return ""
    delay = (f", {storage_delay.format_us(plan.storage_delay_us)} added to each round trip "
             "to the storage by its --storage-delay" if plan.storage_delay_us else "")
    return f"lab {plan.lab} on {plan.lab_storage}{delay}"


def _table(result: SweepResult, plan: sweep_cmd.Plan | None = None) -> Table:
    first = "concurrency" if result.model == "closed" else "rate/s"
    traced = _traced(result)
    headers = _headers(traced)
    where = f", {plan.lab_storage}" if plan is not None and plan.lab else ""
    t = Table(title=f"sweep {result.target} ({result.tool}, {result.model} model{where})")
    for i, h in enumerate(headers):
        t.add_column(first if i == 0 else h, justify="right" if i < len(headers) - 1 else "left")
    for lv in result.levels:
        t.add_row(*_row(lv, traced))
    return t


@cli.command("sweep")
@click.argument("url", required=False, default="")
@click.option("--lab", "lab", is_flag=False, flag_value="lab", default=None, metavar="[NAME]",
              help="Sweep a lab's entry page (default name: lab) and sample its pool.")
@click.option("-c", "--concurrency", default=None, metavar="N1,N2,…",
              help="Closed model: concurrent connections per level  [default: 1,2,5,10,20,30]")
@click.option("--rate", default=None, metavar="R1,R2,…",
              help="Open model: constant arrival rates (requests/s) per level; uses vegeta.")
@click.option("-d", "--duration", type=float, default=10.0, show_default=True, help="Seconds per measured run.")
@click.option("--warmup", type=float, default=2.0, show_default=True, help="Seconds of warm-up per level, not recorded.")
@click.option("--repeats", type=int, default=3, show_default=True, help="Measured runs per level (median and spread).")
@click.option("--tool", type=click.Choice(sweep_cmd.CLOSED_TOOLS + sweep_cmd.OPEN_TOOLS), default=None,
              help="Load generator  [default: wrk; vegeta with --rate]")
@click.option("--timeout", type=float, default=10.0, show_default=True, help="Per-request timeout, seconds.")
@click.option("--expect-status", type=int, default=200, show_default=True, help="Status the direct check GET must get.")
@click.option("--expect-text", default="", help="Text every response body must contain (wrk, vegeta: every response; ab: the check GET).")
@click.option("--allow-remote", is_flag=True, help="Allow a target that is not on loopback (only servers you own).")
@click.option("--pool", default=None, help="php-fpm pool to sample (its status page: --fpm-status, or a lab's).")
@click.option("--fpm-status", "fpm_status", default=None, metavar="URL", help="The pool's pm.status_path URL.")
@click.option("-o", "--output", type=OutputPath(dir_okay=False), default=None,
              help="JSON result file, rewritten after each level  [default: sweep-DATE-TIME.json]")
@click.option("--plot", type=OutputPath(dir_okay=False), default=None,
              help="SVG plot  [default: the output file with .svg]")
@click.option("--trace", is_flag=True,
              help="Trace the pool's file syscalls during every measured run (statstorm trace; "
                   "root, bpftrace; needs --lab or --pool; about 6 s more per run).")
@click.option("--dry-run", is_flag=True, help="Print the load generator commands and exit.")
@click.option("--json", "as_json", is_flag=True, help="Print the result JSON on stdout.")
@click.pass_obj
def sweep(env: Env, url: str, lab: str | None, concurrency: str | None, rate: str | None,
          duration: float, warmup: float, repeats: int, tool: str | None, timeout: float,
          expect_status: int, expect_text: str, allow_remote: bool, pool: str | None,
          fpm_status: str | None, output: Path | None, plot: Path | None, trace: bool,
          dry_run: bool, as_json: bool) -> None:
    """HTTP load sweep: throughput, latency, errors and server signals per level; knee and collapse.

    Closed model (-c, wrk or ab): N connections, each sends when the last answer came.
    Open model (--rate, vegeta): constant arrival rate, latency free of coordinated omission.
    Load goes to loopback only unless --allow-remote. --trace also records the pool's
    file-syscall rate per level with statstorm trace (one .sst.gz per run next to the JSON).

    \b
    Examples:
      statstorm sweep --lab sw1 -c 1,2,5,10 -d 5 --repeats 3
      statstorm sweep http://127.0.0.1:8080/index.php --expect-text 'app=statstorm-synthetic'
      statstorm sweep --lab --rate 20,50,100 -d 5 -o open.json
      statstorm sweep --lab --tool ab -c 1,4 --dry-run
      sudo statstorm sweep --lab sw1 -c 1,5,20 -d 5 --repeats 1 --trace -o traced.json
    """
    opts = sweep_cmd.SweepOptions(
        url=url, lab=lab, concurrency=number_list(concurrency, "--concurrency", int),
        rates=number_list(rate, "--rate", float), duration_s=duration, warmup_s=warmup,
        repeats=repeats, tool=tool, timeout_s=timeout, expect_status=expect_status,
        expect_text=expect_text, allow_remote=allow_remote, fpm_status_url=fpm_status, pool=pool,
        output=output, plot=plot, dry_run=dry_run, trace=trace,
    )
    plan = sweep_cmd.plan(env, opts)
    if dry_run:
        feed = f"echo {shlex.quote('GET ' + plan.url)} | " if plan.model == "open" else ""
        for argv in sweep_cmd.dry_run_commands(plan):
            click.echo(feed + shlex.join(argv))
        return
    err = Console(file=env.stderr, stderr=True, highlight=False,
                  width=None if env.stderr.isatty() else 140)
    unit = "connections" if plan.model == "closed" else "req/s"
    on_lab = f" ({lab_line(plan)})" if plan.lab else ""
    started(env, "sweep", f"{plan.url}{on_lab} with {plan.tool} ({plan.model} model): "
            f"{','.join(f'{lv:g}' for lv in plan.levels)} {unit}, {plan.repeats}× "
            f"{plan.duration_s:g} s + {plan.warmup_s:g} s warm-up per level, about "
            f"{plan.estimated_s / 60:.1f} min"
            + (f" (tracing adds about {sweep_cmd.TRACE_OVERHEAD_S:.0f} s per run: attach and "
               f"detach)" if plan.trace else "")
            + f" → {plan.output}. Ctrl-C to stop.")

    def progress(msg: str, lv: LevelResult | None) -> None:
        if lv is None:
            err.print(f"  {msg}", style="dim")
        else:
            traced = lv.server.file_syscalls_per_request is not None
            err.print("  " + " | ".join(f"{h} {v}" for h, v in zip(_headers(traced),
                                                                   _row(lv, traced))))

    try:
        result = sweep_cmd.run(env, plan, progress=progress,
                               trace_with=trace_cmd.counting_tracer)
    except (KeyboardInterrupt, Interrupted):
        err.print(f"interrupted: the finished levels are in {plan.output}")
        raise
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
    else:
        out = Console(file=env.stdout, highlight=False,
                      width=None if env.stdout.isatty() else 140)
        out.print(_table(result, plan))
        assert result.knee is not None
        out.print(result.knee.sentence)
        if plan.lab:
            out.print(lab_line(plan))
        for w in result.warnings:
            out.print(f"warning: {w}")
        out.print(f"wrote {plan.output}" + (f" and {plan.plot}" if plan.plot else ""))
    bad = [lv for lv in result.levels if lv.validation]
    if bad:
        env.log(f"statstorm: check failed at {len(bad)} level(s): {bad[0].validation}")
        sys.exit(EXIT_FAILURE)
