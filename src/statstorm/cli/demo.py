"""`statstorm demo`."""

from __future__ import annotations

import json
from pathlib import Path
import click
from rich.console import Console
from rich.table import Table

from statstorm.cli import cli, started
from statstorm.cli.paths import OutputPath
from statstorm.commands import demo as demo_cmd
from statstorm.model import storage_delay
from statstorm.env import Env
from statstorm.model import prediction_fit
from statstorm.results.demo import DemoResult
from statstorm.results.php_root import HOST_VERSION
from statstorm.results.storage_kind import StorageKind


def _fmt(v: float | str | None, unit: str = "") -> str:
    if v is None:
        return "-"
    return f"{v:,.2f}{unit}" if isinstance(v, float) else f"{v}{unit}"


def render(env: Env, r: DemoResult) -> None:
    con = Console(file=env.stdout, highlight=False, soft_wrap=True, width=110)
    t = Table(title=f"{r.app}{f' (PHP {r.php})' if r.php else ''}: {storage_delay.label(r.storage, r.storage_delay_us)} against "
                    "local disk, before and after the fix")
    for h in ("", "local req/s", f"{r.storage} req/s", "ratio", "local p50/p99 ms",
              f"{r.storage} p50/p99 ms", "p99 ratio"):
        t.add_column(h, justify="left" if not h else "right")
    for name, ph in (("before", r.before), ("after", r.after)):
        if ph is None:
            continue
        t.add_row(name, _fmt(ph.local.rps), _fmt(ph.network.rps), _fmt(ph.ratio_rps, "x"),
                  f"{ph.local.p50_ms:g} / {ph.local.p99_ms:g}",
                  f"{ph.network.p50_ms:g} / {ph.network.p99_ms:g}", _fmt(ph.ratio_p99, "x"))
    for trial in r.trials:  # the escalation's changes, each kept or rolled back
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
    rt = r.round_trips()
    end = r.final()
    if end is not None:
        con.print(end.line(rt.before))
    mc = r.metadata_calls_per_request
    t2 = Table(title="per request, on the network lab")
    for h in ("", "before", "predicted", "after"):
        t2.add_column(h, justify="left" if not h else "right")
    pc, pr = prediction_fit.predicted_cells(mc, rt, r.predicted)  # marked: not predicted
    t2.add_row("network round trips", _fmt(rt.before), pr, _fmt(rt.after))
    t2.add_row("metadata calls (traced)", _fmt(mc.before), pc, _fmt(mc.after))
    con.print(t2)
    for line in prediction_fit.closing_notes(mc, rt, r.predicted):
        con.print(line)
    if r.applied:
        con.print(f"applied: {', '.join(r.applied)} (at {r.applied_at}; predicted at "
                  f"{r.predicted_at})")
    for line in r.manual:
        con.print(f"left to do by hand: {line}")
    if r.findings_after:
        con.print("check after the fix: " + "; ".join(r.findings_after))
    con.print(f"results: {r.output_dir}/ (demo.json, before/after traces, check and apply "
              f"JSON{', report.html' if 'report' in r.files else ''}); took {r.timings_s['total'] if 'total' in r.timings_s else 0:.0f} s")
    if r.kept:
        for role, lab in r.labs.items():
            con.print(f"kept {role} lab {lab.name}: {lab.url} (statstorm lab down "
                      f"--name {lab.name})")
    else:
        con.print("labs removed.")


@cli.command()
@click.option("--app", type=click.Choice(["mediawiki", "synthetic"]), default="mediawiki",
              show_default=True, help="The application both labs serve.")
@click.option("--storage", type=click.Choice(demo_cmd.STORAGES),
              metavar="[glusterfs|cephfs|afs]", default=StorageKind.GLUSTERFS.value,
              show_default=True,
              help="The network storage compared with local disk: GlusterFS, the CephFS of a "
                   "single-node Ceph cluster, or an OpenAFS cell of the lab's own (afs, also "
                   "openafs).")
@click.option("--storage-delay", "storage_delay_text", default="0", metavar="DURATION",
              help="Delay each round trip to the network lab's storage by this much "
                   "(`lab up --storage-delay`), e.g. 200us or 1ms [default: 0, none].")
@click.option("--php", "php", default=HOST_VERSION, show_default=True, metavar="VERSION",
              help="PHP both labs run: the host's, or 7.4 / 8.4 from a PHP root (`lab up "
                   "--php`; built once, a few minutes, then reused).")
@click.option("-o", "--output-dir", type=OutputPath(file_okay=False),
              default=Path("statstorm-demo"), show_default=True,
              help="Where the demo writes demo.json, the traces and check/apply results.")
@click.option("--rounds", type=int, default=3, show_default=True,
              help="Measured rounds per lab and phase (interleaved local, network, …).")
@click.option("-d", "--duration", "duration_s", type=float, default=8.0, show_default=True,
              help="Seconds of load per round.")
@click.option("-c", "--concurrency", type=int, default=4, show_default=True,
              help="Concurrent users (wrk connections) in every round.")
@click.option("--views", type=int, default=10, show_default=True,
              help="Page views traced before and after the fix.")
@click.option("--name", default="demo", show_default=True,
              help="Lab name prefix (labs NAME-local and NAME-net).")
@click.option("--keep", is_flag=True, help="Leave both labs running and print their URLs.")
@click.option("--json", "as_json", is_flag=True, help="Print demo.json on stdout.")
@click.pass_obj
def demo(env: Env, app: str, storage: str, storage_delay_text: str, php: str, output_dir: Path,
         rounds: int, duration_s: float, concurrency: int, views: int, name: str, keep: bool,
         as_json: bool) -> None:
    """The main job on the built-in default: find, explain, fix and prove.

    MediaWiki on local disk and on GlusterFS (default mount and volume options, Debian's PHP
    defaults): both measured side by side, the GlusterFS pool traced and checked, the fix
    predicted, applied, and both measured again; while the GlusterFS lab stays below 0.90x of
    the local one, the changes apply --all leaves out are tried one at a time, each kept only
    where it measures a gain; a second trace and check prove the fix, and report.html shows it
    all. About 8 minutes on 2 cores.

    \b
    Examples:
      statstorm demo
      statstorm demo --json > demo.json
      statstorm demo --keep --rounds 5 -o /var/tmp/demo
      statstorm demo --app synthetic --rounds 1 --duration 3
      statstorm demo --storage-delay 200us       # GlusterFS one LAN round trip away
      statstorm demo --php 8.4                   # both labs on PHP 8.4 (a PHP root)
      statstorm demo --storage afs --app synthetic   # OpenAFS: round trips by RPC counts
    """
    storage = demo_cmd.storage_of(storage)
    opts = demo_cmd.DemoOptions(name=name, app=app, storage=storage, output_dir=output_dir,
                                rounds=rounds, duration_s=duration_s, concurrency=concurrency,
                                views=views, keep=keep,
                                storage_delay_us=storage_delay.parse(storage_delay_text),
                                php=php)
    demo_cmd.validate(env, opts)
    started(env, "demo", f"{app}{'' if php == HOST_VERSION else f' (PHP {php})'} on local disk vs "
            f"{storage_delay.label(storage, opts.storage_delay_us)} — measure, trace, check, "
            f"predict, apply, measure again ({rounds} rounds of {duration_s:g} s per lab and "
            f"phase); results in {output_dir}/. Ctrl-C stops it and removes the labs.")
    result = demo_cmd.run(env, opts)
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
    else:
        render(env, result)
