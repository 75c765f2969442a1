"""`statstorm report RESULT… -o report.html`: flags → ReportOptions → commands.report."""

from __future__ import annotations

import json
from pathlib import Path

import click

from statstorm.cli import cli
from statstorm.cli.paths import InputPath, OutputPath
from statstorm.env import Env

SCHEMA = "statstorm.report/1"


@cli.command("report")
@click.argument("inputs", nargs=-1, type=InputPath())
@click.option("-o", "--output", type=OutputPath(), default=Path("report.html"),
              show_default=True, help="The HTML file to write (atomically: whole or not at all).")
@click.option("--title", default="", help="The page's title  [default: from the results].")
@click.option("--no-follow", is_flag=True, help="Read only the files given, not the traces and "
              "results a demo.json names.")
@click.option("--json", "as_json", is_flag=True, help="Print what was written as JSON.")
@click.pass_obj
def report(env: Env, inputs: tuple[Path, ...], output: Path, title: str, no_follow: bool,
           as_json: bool) -> None:
    """One self-contained HTML page from result files only.

    Reads any mix of trace files (.sst, .sst.gz) and the JSON of `check --json`, `whatif
    --json`, `fsbench`, `sweep`, `apply --json`, `demo` and `matrix`, each recognised by its
    content. The page has a headline, findings by severity, predicted against measured,
    charts (metadata calls by PHP operation, latency by mount, sweep curves, fsbench ratios),
    the environment and the command behind each file. Nothing is fetched when it is viewed;
    it prints on paper and reads without colour. Nothing is measured: re-make it at will.

    \b
    Examples:
      statstorm report statstorm-demo/demo.json -o demo.html
      statstorm report before.sst.gz after.sst.gz check.json -o report.html
      statstorm report sweep.json fsbench.json --title "GlusterFS tuning" -o tuning.html
    """
    from statstorm.commands import report as report_cmd  # matplotlib: only for this verb
    opts = report_cmd.ReportOptions(inputs=inputs, output=output, title=title,
                                    follow_demo=not no_follow)
    result = report_cmd.run(env, opts)
    for w in result.warnings:  # on the page too, as a note of the demo's section
        env.log(f"warning: {w}")
    if as_json:
        click.echo(json.dumps({"schema": SCHEMA, "output": str(result.output),
                               "inputs": list(result.kinds), "charts": result.charts,
                               "headline": result.headline}, indent=2))
    else:
        env.log(f"report: {result.output} ({len(result.kinds)} result file(s): "
                f"{', '.join(dict.fromkeys(result.kinds))}; {result.charts} chart(s))")
        click.echo(result.headline)
