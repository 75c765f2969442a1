"""`statstorm check`: flags → CheckOptions → commands.check → findings table or JSON."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from statstorm.cli import cli
from statstorm.cli.paths import InputPath
from statstorm.commands import check as check_cmd
from statstorm.env import Env
from statstorm.errors import EXIT_FAILURE
from statstorm.results.check import SEVERITIES, CheckResult, Severity

STYLE = {Severity.CRITICAL: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}


def render(env: Env, result: CheckResult) -> None:
    out = Console(file=env.stdout, highlight=False,
                  width=None if env.stdout.isatty() else 120)
    for pc in result.pools:
        out.print(f"[bold]pool {pc.pool}[/bold]: settings from {pc.settings_source}")
        if pc.docroot:
            out.print(f"  docroot {pc.docroot} ({pc.php_files or 0:,} PHP files)")
        for site in pc.sites if len(pc.sites) > 1 else ():
            out.print(f"  site {' '.join(site.names) or site.source}: "
                      f"{site.docroot or 'docroot from ' + site.unknown}")
        for note in pc.notes:
            out.print(f"  note: {note}")
    found = result.findings
    for sev in reversed(SEVERITIES):
        group = [f for f in found if f.severity == sev]
        if not group:
            continue
        t = Table(title=f"{sev}: {len(group)} finding(s)", show_lines=True, expand=False)
        t.add_column("id", style=STYLE[sev], no_wrap=True)
        t.add_column("finding and evidence", overflow="fold")
        t.add_column("change", overflow="fold")
        t.add_column("gain / trade-off", overflow="fold")
        for f in group:
            gain = f.predicted_gain
            g = (f"{gain['syscalls_per_request']:+g} {gain['metric']}"
                 + (f", {gain['us_per_request']:+g} µs" if "us_per_request" in gain else "")
                 if gain else f"- ({f.gain_note})")
            pool = f" [dim](pool {f.pool})[/dim]" if len(result.pools) > 1 else ""
            t.add_row(f.id, f"[bold]{f.title}[/bold]{pool}\n" + "\n".join(f"• {e}" for e in f.evidence)
                      + f"\n[dim]{f.docs}[/dim]",
                      "\n".join(f.change), f"{g}\n[dim]trade-off: {f.tradeoff}[/dim]")
        out.print(t)
    out.print(summary(result), markup=False)


def summary(result: CheckResult) -> str:
    """The last line: the findings by severity, and for each pool the share of request time
    its trace measured on network storage (never a bare count that reads as healthy while
    the trace says the pool waits on the network), or that it was not measured."""
    found = result.findings
    counts = {s: sum(1 for f in found if f.severity == s) for s in SEVERITIES}
    parts = ["no findings" if not found else
             ", ".join(f"{counts[s]} {s}" for s in reversed(SEVERITIES) if counts[s])]
    for pc in result.pools:
        ids = {f.id for f in found if f.pool == pc.pool}
        t = pc.trace
        if t is not None and t.network_time_share is not None:
            said = [f"{t.network_ms_per_request:g} ms per request"]
            if "network-bound" in ids:
                said.append("network-bound: not healthy")
            said.append(f"{'last trace' if pc.trace_remembered else 'trace'} {t.path}")
            if "trace-predates-change" in ids:
                said.append("taken before the last change")
            parts.append(f"pool {pc.pool}: {t.network_time_share:.0%} of request time on "
                         f"network storage ({', '.join(said)})")
        elif "no-trace" in ids:
            parts.append(f"pool {pc.pool}: time on network storage not measured (no trace)")
    return "; ".join(parts)


@cli.command("check")
@click.option("--pool", "pools", multiple=True, metavar="NAME",
              help="Check this php-fpm pool (repeatable)  [default: every running pool]")
@click.option("--lab", "lab", is_flag=False, flag_value="lab", default=None, metavar="[NAME]",
              help="Check a lab's pool (default name: lab).")
@click.option("--apache", is_flag=True, help="Check the system Apache's PHP (mod_php, "
              "mod_fcgid), each of its sites  [default: with every running pool]")
@click.option("--site", default="", metavar="URL", help="Check the PHP target serving this "
              "site (the nginx server or Apache virtual host on its port, and the pool it "
              "passes to), e.g. http://127.0.0.1:8080/")
@click.option("--trace", "trace_file", type=InputPath(dir_okay=False),
              default=None, help="A trace of the pool (`statstorm trace -o FILE`): measured "
              "evidence and predicted gains  [default: the pool's last trace, when statstorm "
              "trace took one and its file is still there]")
@click.option("--fsbench", "fsbench_file", type=InputPath(dir_okay=False),
              default=None, help="An fsbench result (`statstorm fsbench -o FILE`): the "
              "storage's per-call latency, to turn saved calls into time.")
@click.option("--docroot", default=None, metavar="DIR", help="The pool's document root, when "
              "no nginx server in front of it says so.")
@click.option("--no-query", is_flag=True, help="Do not ask the pool over FastCGI (a worker "
              "runs a read-only status script); read php-fpm -i/-tt only.")
@click.option("--json", "as_json", is_flag=True, help="Print {\"findings\": [...]} as JSON.")
@click.option("--fail-on", type=click.Choice([s.value for s in SEVERITIES]), default=None,
              help="Exit with status 1 if a finding is at least this severe.")
@click.pass_obj
def check(env: Env, pools: tuple[str, ...], lab: str | None, apache: bool, site: str,
          trace_file: Path | None, fsbench_file: Path | None, docroot: str | None,
          no_query: bool, as_json: bool, fail_on: str | None) -> None:
    """Graded findings on the live PHP configuration, with evidence and the lines to change.

    Reads each php-fpm pool's settings as its workers see them (asking a worker over
    FastCGI where it can) and those of PHP inside the system Apache (each of its sites),
    the CLI's for comparison, nginx's or Apache's configuration in front, the mounts
    holding the code, memory and huge pages. Read-only: nothing is changed. Every
    finding id is documented in docs/check.md.

    Exit status: 0, or 1 when --fail-on is given and a finding is at least that severe;
    2 bad usage or input. Run it as root to see other users' workers (memory, binary).

    \b
    Examples:
      statstorm check
      statstorm check --lab --trace lab.sst.gz --json
      statstorm check --pool www --fail-on warning
      statstorm check --apache --json
      statstorm check --site http://127.0.0.1:8080/
    """
    opts = check_cmd.CheckOptions(pools=pools, lab=lab, trace=trace_file, fsbench=fsbench_file,
                                  docroot=docroot, query_pool=not no_query, apache=apache,
                                  site=site)
    result = check_cmd.run(env, opts)
    if as_json:
        json.dump(result.to_json(), env.stdout, indent=2)
        env.stdout.write("\n")
    else:
        render(env, result)
    if result.failed(None if fail_on is None else Severity(fail_on)):
        env.stdout.flush()
        sys.exit(EXIT_FAILURE)
