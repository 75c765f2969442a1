"""`statstorm tune`."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from statstorm.cli import cli, started
from statstorm.cli.paths import OutputPath
from statstorm.commands import tune as tune_cmd
from statstorm.env import Env
from statstorm.model import prediction_fit
from statstorm.results.tune import TuneResult


def _fmt(v: float | None, unit: str = "") -> str:
    return "-" if v is None else f"{v:,.2f}{unit}"


def render(env: Env, r: TuneResult) -> None:
    con = Console(file=env.stdout, highlight=False, soft_wrap=True, width=110)
    t = Table(title=f"pool {r.pool} against its shadow on local disk ({r.docroot})")
    for h in ("", "shadow req/s", "pool req/s", "ratio", "shadow p50/p99 ms",
              "pool p50/p99 ms", "p99 ratio"):
        t.add_column(h, justify="left" if not h else "right")
    for name, ph in (("before", r.before), ("after", r.after)):
        if ph is not None:
            t.add_row(name, _fmt(ph.local.rps), _fmt(ph.network.rps), _fmt(ph.ratio_rps, "x"),
                      f"{ph.local.p50_ms:g} / {ph.local.p99_ms:g}",
                      f"{ph.network.p50_ms:g} / {ph.network.p99_ms:g}", _fmt(ph.ratio_p99, "x"))
    for trial in r.trials:  # measure-first changes, each kept or rolled back
        ph = trial.phase
        t.add_row(f"with {trial.finding} ({'kept' if trial.kept else 'rolled back'})",
                  _fmt(ph.local.rps), _fmt(ph.network.rps), _fmt(ph.ratio_rps, "x"),
                  f"{ph.local.p50_ms:g} / {ph.local.p99_ms:g}",
                  f"{ph.network.p50_ms:g} / {ph.network.p99_ms:g}", _fmt(ph.ratio_p99, "x"))
    con.print(t)
    for trial in r.trials:
        con.print(f"escalation: {trial.finding}: {trial.why}"
                  + (f"; its price: {trial.price}" if trial.kept and trial.price else ""))
    for skip in r.skipped:
        con.print(f"escalation: {skip.finding}: {skip.why}")
    rt, mc = r.round_trips(), r.metadata_calls_per_request
    end = r.final()
    if end is not None and not r.dry_run:
        con.print(end.line(rt.before))
    t2 = Table(title=f"per request, on pool {r.pool}")
    for h in ("", "before", "predicted", "after"):
        t2.add_column(h, justify="left" if not h else "right")
    pc, pr = prediction_fit.predicted_cells(mc, rt, r.predicted)  # marked: not predicted
    t2.add_row("network round trips", _fmt(rt.before), pr, _fmt(rt.after))
    t2.add_row("metadata calls (traced)", _fmt(mc.before), pc, _fmt(mc.after))
    con.print(t2)
    for line in prediction_fit.closing_notes(mc, rt, r.predicted):
        con.print(line)
    if end is not None and end.kept:
        con.print("not predicted: the escalation's kept changes (" + ", ".join(end.kept)
                  + ") were made after the prediction; with them, "
                  f"{_fmt(end.round_trips_per_request)} round trips per request measured "
                  "(their rows above)")
    if r.findings_before:
        con.print("check: " + "; ".join(r.findings_before))
    if r.findings_after:
        con.print("check after the fix: " + "; ".join(r.findings_after))
    if r.dry_run:
        for diff in r.diffs:
            con.print(escape(diff))
        con.print(f"dry run: {len(r.planned)} change(s) planned, nothing changed; run again "
                  "with --yes to apply them and measure again.")
    elif r.applied:
        con.print(f"applied: {', '.join(r.applied)} (at {r.applied_at}; predicted at "
                  f"{r.predicted_at})")
    for line in r.manual:
        con.print(f"left to do by hand: {line}")
    for note in r.notes:
        con.print(f"note: {note}")
    page = f" and {r.output_dir}/{r.files['report']}" if "report" in r.files else ""
    con.print(f"results: {r.output_dir}/tune.json{page}; shadow removed.")


@cli.command()
@click.option("--pool", required=True, help="The running php-fpm pool to tune (e.g. www).")
@click.option("--url", "urls", multiple=True, required=True,
              help="A page of the pool's site on this machine (repeat for several pages).")
@click.option("--yes", is_flag=True,
              help="Apply every finding and measure again (without it: a dry run).")
@click.option("-o", "--output-dir", type=OutputPath(file_okay=False),
              default=Path("statstorm-tune"), show_default=True,
              help="Where tune writes tune.json, the trace and check/apply results.")
@click.option("--rounds", type=int, default=3, show_default=True,
              help="Measured rounds per page, side and phase (interleaved shadow, pool, …).")
@click.option("-d", "--duration", "duration_s", type=float, default=8.0, show_default=True,
              help="Seconds of load per round.")
@click.option("--warmup", "warmup_s", type=float, default=3.0, show_default=True,
              help="Seconds of load per page and side before the rounds.")
@click.option("-c", "--concurrency", type=int, default=4, show_default=True,
              help="Concurrent users (wrk connections) in every round.")
@click.option("--views", type=int, default=10, show_default=True,
              help="Page views traced.")
@click.option("--no-mirror", "no_mirror", is_flag=True,
              help="Leave the local mirror of the code out of the escalation (--yes).")
@click.option("--php", default="", metavar="VERSION",
              help="The shadow's PHP: 7.4, 8.2 or 8.4 (another than the host's from its PHP "
                   "root, `lab php-root build`)  [default: the pool's own, in its PHP root when "
                   "it runs in one]")
@click.option("--json", "as_json", is_flag=True, help="Print tune.json on stdout.")
@click.pass_obj
def tune(env: Env, pool: str, urls: tuple[str, ...], yes: bool, output_dir: Path, rounds: int,
         duration_s: float, warmup_s: float, concurrency: int, views: int, no_mirror: bool,
         php: str,
         as_json: bool) -> None:
    """The main job on your own running pool: measure, find, predict, fix and prove.

    The pool's code is copied to local disk and served by a shadow php-fpm (the pool's own
    settings) behind a loopback nginx: the reference. Pool and shadow are measured side by
    side, the pool is traced while the pages are viewed and checked, the fix is predicted
    and printed; without --yes the run stops there with the diffs apply would make. With
    --yes every finding is applied and both are measured again; then, while the pool stays
    below 0.90x of its shadow, the changes apply --all leaves out are tried one at a time,
    least invasive first (GlusterFS content caches, OPcache's timestamps off, last a local
    mirror of the code a deploy must sync), each kept only where it measures a gain; a second
    trace and check of the pool prove the fix. report.html is written beside tune.json. The
    shadow is removed at the end, whatever happens.

    \b
    Examples:
      statstorm tune --pool www --url http://127.0.0.1/index.php
      statstorm tune --pool www --url http://127.0.0.1:8080/doku.php --json > tune.json
      statstorm tune --pool www --url http://127.0.0.1/ --url http://127.0.0.1/doku.php?id=wiki --yes
      statstorm tune --pool www --url http://127.0.0.1/ --rounds 1 -d 3 --warmup 1 --views 3
      statstorm tune --pool www --url http://127.0.0.1:8080/doku.php --yes --no-mirror
      statstorm tune --pool statstorm-p84 --url http://127.0.0.1:8084/index.php   # a lab of PHP 8.4
    """
    opts = tune_cmd.TuneOptions(pool=pool, urls=urls, yes=yes, output_dir=output_dir,
                                rounds=rounds, duration_s=duration_s, warmup_s=warmup_s,
                                concurrency=concurrency, views=views, mirror=not no_mirror,
                                php=php)
    tune_cmd.validate(env, opts)
    found = tune_cmd.resolve(env, opts)
    started(env, "tune", f"pool {pool} against a shadow of its code on local disk — measure, "
            f"trace, check, predict{', apply, measure again' if yes else ' (dry run)'}; "
            f"results in {output_dir}/. Ctrl-C stops it and removes the shadow.")
    result = tune_cmd.run(env, opts, found=found)
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
    else:
        render(env, result)
