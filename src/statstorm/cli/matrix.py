"""`statstorm matrix …` and `statstorm matrix import …`: flags → MatrixOptions → commands.matrix
→ table / JSON."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from statstorm.cli import cli, started
from statstorm.cli.paths import InputPath, OutputPath
from statstorm.commands import matrix as matrix_cmd
from statstorm.commands import matrix_import
from statstorm.model import storage_delay
from statstorm.model.matrix_grid import (ARCHS, MatrixOptions, parse_arch, parse_knob,
                                         parse_on_off, parse_php)
from statstorm.model.matrix_summary import shown
from statstorm.env import Env
from statstorm.errors import EXIT_FAILURE
from statstorm.results.php_root import release
from statstorm.results.matrix import CellSummary, FailedBy, MatrixResult, RpsInterval


def _list(text: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in text.split(",") if p.strip())


# the figures of a cell with no round yet
EMPTY = CellSummary(RpsInterval(None, None, None), None, None, 0, FailedBy(), 0, None)


def _fmt(v: object, spec: str = ".1f") -> str:
    return "-" if v is None else format(v, spec)


def cells_table(result: MatrixResult) -> Table:
    t = Table(title=f"matrix on {result.app or 'imported runs'} ({result.source}; THP "
                    f"{result.thp_mode or 'unknown'})")
    for h in ("cell", "good req/s (median)", "95 % interval", "rounds", "p50 ms", "p99 ms",
              "failed", "PSS server/php/worker MB", "huge pages"):
        # a cell's id whole (its storage and delay are its last part): folded, never cut
        t.add_column(h, justify="left" if h == "cell" else "right",
                     overflow="fold" if h == "cell" else "ellipsis")
    for c in result.cells:
        s = c.summary or EMPTY
        rps, pss, hp = s.rps, s.pss_mb, s.huge_pages
        knob = " [test knob]" if c.knob else ""
        t.add_row(c.id + knob, _fmt(rps.median),
                  f"{_fmt(rps.ci_low)} – {_fmt(rps.ci_high)}"
                  + (f" ({rps.coverage * 100:.0f} %)" if rps.rounds > 1 else ""),
                  str(rps.rounds), _fmt(s.p50_ms, ".2f"), _fmt(s.p99_ms, ".2f"),
                  f"{s.failed} of {s.requests}",
                  f"{pss.server:g} / {pss.php:g} / {pss.per_worker:g}" if pss else "-",
                  ("yes" if hp.in_use else "no") if hp else "-")
    return t


def comparisons_table(result: MatrixResult, all_pairs: bool) -> Table | None:
    rows = [c for c in result.comparisons if all_pairs or shown(c)]
    if not rows:
        return None
    t = Table(title="comparisons: B against A (throughput ratio of medians)"
              + ("" if all_pairs else ", pairs that differ in one parameter at most"))
    for h in ("A", "B", "B/A", "95 % interval", "p", "verdict"):
        t.add_column(h, justify="left" if h in ("A", "B", "verdict") else "right")
    for c in rows:
        t.add_row(c["a"], c["b"], _fmt(c["ratio"], ".3f"),
                  f"{_fmt(c['ci_low'], '.3f')} – {_fmt(c['ci_high'], '.3f')}",
                  _fmt(c["p_value"], ".4f"), c["verdict"])
    return t


def render(result: MatrixResult, all_pairs: bool = False) -> None:
    console = Console(file=sys.stdout, width=160)
    console.print(cells_table(result))
    for c in result.cells:
        if c.summary is None or not c.summary.failed:
            continue
        fb = c.summary.failed_by
        console.print(f"[bold]{c.id}[/]: {c.summary.failed} answer(s) failed validation "
                      f"(status {fb.status}, length {fb.length}, marker {fb.marker}, "
                      f"socket errors {fb.socket})")
    comp = comparisons_table(result, all_pairs)
    if comp is not None:
        console.print(comp)
    stop = result.stop
    if stop is not None and stop.reason in ("precision reached", "max rounds reached"):
        widest = stop.widest_pct
        console.print(f"rounds: {stop.rounds}, {stop.reason} (widest interval "
                      + (f"±{widest:g} %" if widest is not None else "none yet")
                      + f" for {stop.widest or '-'}; asked ±{stop.precision_pct:g} %)")
    for w in result.warnings:
        console.print(f"warning: {w}")


@cli.group("matrix", invoke_without_command=True)
@click.option("--app", type=click.Choice(["mediawiki", "wordpress", "synthetic"]),
              default="synthetic", show_default=True, help="The app every cell serves.")
@click.option("--arch", default=",".join(ARCHS), show_default=True, metavar="A1,A2,…",
              help="Server-MPM-handler architectures, comma-separated.")
@click.option("--opcache", default="on,off", show_default=True, help="OPcache: on, off or on,off.")
@click.option("--huge-code-pages", "hcp", default="off", show_default=True,
              help="opcache.huge_code_pages: on, off or on,off (with OPcache on only).")
@click.option("--storage", default="local", show_default=True, metavar="local,glusterfs",
              help="Where the code lives, comma-separated.")
@click.option("--storage-delay", "storage_delay_text", default="0", show_default=True,
              metavar="D1,D2,…",
              help="One more axis, the delay added to each round trip to the network storage "
                   "(as `lab up --storage-delay`), e.g. 0,200us,1ms; 0 is none. Local "
                   "storage takes part with 0 only.")
@click.option("--php", "php_text", default="", metavar="V1,V2,…",
              help="PHP versions, comma-separated (7.4, 8.2, 8.4: another than the host's runs "
                   "php-fpm from its PHP root, as `lab up --php`); several make one more axis  "
                   "[default: the host's; with a root's version, --arch defaults to the fpm "
                   "architectures]")
@click.option("--cells", default="", metavar="ID1,ID2,…",
              help="Only these cells (ids as --dry-run prints them; globs allowed).")
@click.option("--rounds", type=int, default=5, show_default=True,
              help="Interleaved rounds: every cell is measured once per round (with "
                   "--precision: the least).")
@click.option("--precision", "precision_pct", type=float, default=0.0, metavar="PCT",
              help="Then add rounds until every comparison shown has its 95 % interval within "
                   "±PCT % of its ratio (or its cell's median, for one cell), e.g. 1.5.")
@click.option("--max-rounds", type=int, default=0, metavar="N",
              help="With --precision: the most rounds in all  [default: 4 × --rounds, at most 100]")
@click.option("-d", "--duration", type=float, default=10.0, show_default=True,
              help="Seconds of load per cell-round.")
@click.option("--warmup", type=float, default=5.0, show_default=True,
              help="Seconds of warm-up per cell before its first round, not recorded.")
@click.option("--round-warmup", type=float, default=1.0, show_default=True,
              help="Seconds of warm-up before every measured run, not recorded.")
@click.option("-c", "--concurrency", type=int, default=8, show_default=True, help="wrk connections.")
@click.option("--workers", type=int, default=4, show_default=True, help="PHP workers per lab.")
@click.option("--timeout", type=float, default=10.0, show_default=True, help="Per-request timeout, seconds.")
@click.option("--marker", default="", help="Text every good answer holds  [default: the app's own]")
@click.option("--length-tolerance", type=float, default=0.1, show_default=True,
              help="A good answer's length is within this fraction of the primer's.")
@click.option("--alpha", type=float, default=0.05, show_default=True,
              help="Significance level of the comparisons (0.05: 95 % intervals).")
@click.option("-o", "--output", type=OutputPath(dir_okay=False), default=None,
              help="JSON result file, rewritten after every cell-round; an unfinished one is "
                   "continued  [default: matrix-DATE-TIME.json]")
@click.option("--resume", type=InputPath(dir_okay=False), default=None,
              help="Continue the matrix in this result file with the flags it was started with.")
@click.option("--all-pairs", is_flag=True, help="Show every comparison, not only one-parameter ones.")
@click.option("--dry-run", is_flag=True, help="Print the plan and its estimated duration, and exit.")
@click.option("--json", "as_json", is_flag=True, help="Print the result JSON on stdout.")
@click.option("--test-spin", multiple=True, hidden=True, metavar="CELL=US")
@click.option("--test-break", multiple=True, hidden=True, metavar="CELL=N")
@click.pass_context
def matrix(ctx: click.Context, app: str, arch: str, opcache: str, hcp: str, storage: str,
           storage_delay_text: str, php_text: str, cells: str, rounds: int, precision_pct: float, max_rounds: int, duration: float, warmup: float, round_warmup: float,
           concurrency: int, workers: int, timeout: float, marker: str, length_tolerance: float,
           alpha: float, output: Path | None, resume: Path | None, all_pairs: bool,
           dry_run: bool, as_json: bool, test_spin: tuple[str, ...],
           test_break: tuple[str, ...]) -> None:
    """One app under a grid of serving architectures and PHP settings, measured with variance.

    Every cell (architecture × PHP version × OPcache × huge code pages × storage × storage
    delay) is its own lab, all up at once; after a primer request and a warm-up, cells are
    measured one at a time, round after round (interleaved, so drift hits all alike). wrk validates every answer (status, length
    within --length-tolerance of the primer's, the app's marker text): failures are counted
    and shown. Per cell: the median of the rounds' good answers/s and its 95 % interval,
    p50/p99 of all requests, PSS of the server and PHP processes, and whether the PHP workers
    really got huge pages; between cells: the ratio of medians, its interval and a
    Mann-Whitney test, or "no significant difference". Ctrl-C stops cleanly; run it again with
    the same -o to continue. Needs root (it starts labs).

    \b
    Examples:
      sudo statstorm matrix --app mediawiki --dry-run
      sudo statstorm matrix --app mediawiki -o mw.json
      sudo statstorm matrix --app wordpress --arch nginx-fpm --opcache on --huge-code-pages on,off --rounds 10
      sudo statstorm matrix --app mediawiki --arch nginx-fpm,apache-event-fpm --opcache on --precision 2
      sudo statstorm matrix --arch nginx-fpm --opcache on --storage local,glusterfs --storage-delay 0,200us,1ms
      sudo statstorm matrix --app synthetic --arch nginx-fpm --cells 'nginx-fpm/*' --rounds 3 -d 5 --json
      sudo statstorm matrix --arch nginx-fpm --opcache on --storage glusterfs --php 7.4,8.2,8.4
      sudo statstorm matrix --resume mw.json
      statstorm matrix import post.txt --json
    """
    if ctx.invoked_subcommand is not None:
        return
    env: Env = ctx.obj
    knobs = tuple(parse_knob(t, "spin") for t in test_spin) + tuple(
        parse_knob(t, "break") for t in test_break)
    php = parse_php(php_text) if php_text else ()
    archs = tuple(parse_arch(a) for a in _list(arch))
    rooted = any(not release(v).host for v in php)
    if rooted and ctx.get_parameter_source("arch") == click.core.ParameterSource.DEFAULT:
        # a root runs php-fpm only: the architectures that pass PHP to it
        archs = tuple(a for a in archs if a.endswith("-fpm"))
    opts = MatrixOptions(
        app=app, archs=archs, php=php,
        opcache=parse_on_off(opcache, "--opcache"), huge_code_pages=parse_on_off(hcp, "--huge-code-pages"),
        storages=storage_delay.axis(_list(storage), storage_delay.parse_list(storage_delay_text)),
        cells=_list(cells), rounds=rounds, duration_s=duration,
        warmup_s=warmup, round_warmup_s=round_warmup, concurrency=concurrency, workers=workers,
        timeout_s=timeout, marker=marker, length_tolerance=length_tolerance, alpha=alpha,
        output=output, resume=resume, dry_run=dry_run, knobs=knobs,
        precision=precision_pct / 100.0, max_rounds=max_rounds)
    plan = matrix_cmd.plan(env, opts)
    lines = plan.lines()
    if dry_run:
        for line in lines:
            click.echo(line)
        return
    started(env, "matrix", lines[0])  # then the rest of the plan
    for line in lines[1:]:
        env.log(line)
    result = matrix_cmd.run(env, plan)
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
    else:
        render(result, all_pairs)
    env.log(f"matrix: {plan.output} written ({result.wall_s / 60:.1f} min measuring)")
    if any(c.summary is not None and c.summary.failed for c in result.cells):
        ctx.exit(EXIT_FAILURE)


@matrix.command("import")
@click.argument("files", nargs=-1, required=True,
                type=InputPath(exists=True, dir_okay=False))
@click.option("--label", "labels", multiple=True,
              help="The label of each report, in order (default: the bulleted line above "
                   "each report in the file, else FILE#N).")
@click.option("--app", default="", help="The app the runs served (recorded only).")
@click.option("-o", "--output", type=OutputPath(dir_okay=False), default=None,
              help="Write the result JSON to this file.")
@click.option("--json", "as_json", is_flag=True, help="Print the result JSON on stdout.")
@click.pass_obj
def import_(env: Env, files: tuple[Path, ...], labels: tuple[str, ...], app: str,
            output: Path | None, as_json: bool) -> None:
    """Import ab outputs measured elsewhere into the matrix's result form.

    A FILE holds one ab report or several (a blog post quoting labelled runs); a label such
    as "apache mpm_worker + php5-cgi + mod_fcgid" names the cell's server, MPM and handler.
    One run per cell gives no interval: comparisons of imported cells never say significant.

    \b
    Examples:
      statstorm matrix import post.txt
      statstorm matrix import prefork.txt event-fpm.txt --label 'apache prefork mod_php' --label 'apache event fpm'
      statstorm matrix import post.txt -o imported.json --json
    """
    from statstorm.results import matrix as results

    result = matrix_import.import_ab(list(files), labels, app=app)
    if output is not None:
        results.save(output, result)
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
    else:
        render(result, all_pairs=True)
