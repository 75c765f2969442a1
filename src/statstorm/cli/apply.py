"""`statstorm apply`: flags → ApplyOptions → commands.apply → diffs, results or JSON."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from statstorm.cli import cli, started
from statstorm.cli.paths import InputPath
from statstorm.commands import apply as apply_cmd
from statstorm.env import Env
from statstorm.model.applyplan import MANUAL
from statstorm.results.apply import ApplyMode
from statstorm.results.apply_verify import Prediction, Verify

WHERE = {"pool-ini": "pool (php_admin_value)", "master-ini": "master ini (conf.d)",
         "pool": "pool directive", "nginx": "nginx (fastcgi_param)",
         "mount": "mount options", "volume": "gluster volume"}


def _diff(out: Console, text: str) -> None:
    for line in text.splitlines():
        style = ("green" if line.startswith("+") and not line.startswith("+++") else
                 "red" if line.startswith("-") and not line.startswith("---") else
                 "cyan" if line.startswith("@@") else "bold" if line.startswith(("---", "+++"))
                 else "")
        out.print(f"[{style}]{escape(line)}[/{style}]" if style else escape(line))


def render(env: Env, r: apply_cmd.ApplyResult) -> None:
    mode = ApplyMode(r.mode)
    out = Console(file=env.stdout, highlight=False, width=None if env.stdout.isatty() else 120)
    for missing in r.not_found:
        out.print(f"{missing}: not reported by check now: nothing to change for it")
    changes = [c for c in r.changes if c.kind != MANUAL]
    if changes:
        t = Table(title="changes", show_lines=False)
        for col in ("finding", "setting", "current", "recommended", "where", "why"):
            t.add_column(col, overflow="fold")
        for c in changes:
            where = WHERE.get(c.kind, c.kind) + (f" {c.where}" if c.where else "")
            t.add_row(c.finding, c.key, "-" if c.current is None else repr(c.current),
                      repr(c.value), where, c.why)
        out.print(t)
    for e in r.edits:
        _diff(out, e.diff())
    if r.steps:
        verb = {ApplyMode.DRY_RUN: "would change", ApplyMode.APPLIED: "changed",
                ApplyMode.ROLLED_BACK: "put back"}.get(mode, "")
        out.print(f"[bold]storage, live ({verb}):[/bold]")
        for st in r.steps:
            out.print(f"  {escape(st.text())}")
    if r.manual:
        out.print("[bold]not applied by statstorm (do these by hand):[/bold]")
        for c in r.manual:
            out.print(f"  {c.finding}: {escape(c.line)}"
                      + (f"  [dim]({escape(c.why)})[/dim]" if c.key else ""))
    for note in r.notes:
        out.print(f"note: {escape(note)}")
    if r.verify:
        _verify(out, r.verify)
    steps = f" and {len(r.steps)} storage change(s)" if r.steps else ""
    if mode == ApplyMode.DRY_RUN:
        out.print(f"dry run: {len(r.edits)} file(s){steps} would change; apply with --yes")
    elif mode == ApplyMode.NOTHING:
        out.print("nothing to change in the files and storage statstorm manages")
    elif mode == ApplyMode.APPLIED:
        out.print(f"applied: {len(r.edits)} file(s){steps} changed and reloaded; backup in "
                  f"{r.backup}; undo with `statstorm apply --rollback`")
    else:
        out.print(f"rolled back ({r.reason}); the files of {r.backup} are back in place")


def _verify(out: Console, v: Verify) -> None:
    """--verify's measurements before and after, how the after settled, and the prediction."""
    t = Table(title="--verify: before and after, same method")
    for col in ("", "before", "after", "change"):
        t.add_column(col, justify="right")
    b, a, ch = v.before, v.after, v.change
    for label, x, y, c in (
            ("requests/s", b.rps, a.rps, ch.rps), ("p50 ms", b.p50_ms, a.p50_ms, ch.p50_ms),
            ("p99 ms", b.p99_ms, a.p99_ms, ch.p99_ms),
            ("metadata calls/request", b.syscalls_per_request, a.syscalls_per_request,
             ch.syscalls_per_request),
            ("network round trips/request", b.round_trips_per_request,
             a.round_trips_per_request, ch.round_trips_per_request)):
        t.add_row(label, str(x), str(y), "-" if c is None else f"{c:+.1%}")
    out.print(t)
    s = a.settling
    if s is not None and s.runs > 1:
        first = s.first
        out.print(f"after: {'settled' if s.settled else 'not settled'} in "
                  f"{s.runs} runs; the first run right after the change: "
                  f"{first.syscalls_per_request} calls"
                  + (f", {first.round_trips_per_request} round trips"
                     if first.round_trips_per_request is not None else "")
                  + " per request")
    if v.predicted:
        _prediction(out, v)


def _prediction(out: Console, v: Verify) -> None:
    """whatif's prediction (from a trace before the change) beside --verify's measurement."""
    def f(x: float | None) -> str:
        return "-" if x is None else f"{x:,.1f}"
    p: Prediction | None = v.predicted
    assert p is not None
    t = Table(title="--verify: whatif's prediction (trace before the change) and the measurement")
    for col in ("change", "calls/request predicted", "measured", "round trips/request predicted",
                "measured"):
        t.add_column(col, justify="left" if col == "change" else "right")
    t.add_row("(none: before)", f(p.current.calls_per_request), "",
              f(p.current.round_trips_per_request), "")
    for setting, fig in p.each:
        t.add_row(f"{escape(setting)} alone", f(fig.calls_per_request), "",
                  f(fig.round_trips_per_request), "")
    m, err = v.measured, v.error
    t.add_row("all changes", f(p.proposed.calls_per_request), f(m.calls_per_request),
              f(p.proposed.round_trips_per_request), f(m.round_trips_per_request))
    out.print(t)
    pct = ", ".join(f"{k} {x:+.1%}" for k, x in (("calls", err.calls_per_request),
                                                 ("round trips", err.round_trips_per_request))
                    if x is not None)
    if pct:
        out.print(f"prediction error (predicted vs measured): {pct}")
    if p.not_modelled:
        out.print("not in whatif's model (measured only): " + ", ".join(p.not_modelled))


@cli.command("apply")
@click.argument("finding_ids", nargs=-1, metavar="[FINDING-ID ...]")
@click.option("--all", "all_", is_flag=True, help="Apply every finding check reports.")
@click.option("--pool", default=None, metavar="NAME", help="The php-fpm pool to change "
              "[default: the only one running].")
@click.option("--lab", "lab", is_flag=False, flag_value="lab", default=None, metavar="[NAME]",
              help="Change a lab's own files (default name: lab).")
@click.option("--apache", is_flag=True, help="Change the system Apache's PHP (mod_php, "
              "mod_fcgid): statstorm's file in the SAPI's conf.d, `apache2ctl graceful` "
              "[default: when it is the only PHP running].")
@click.option("--site", default="", metavar="URL", help="Change the PHP target serving this "
              "site (the nginx server or Apache virtual host on its port, and the pool it "
              "passes to); also --url's default.")
@click.option("--yes", is_flag=True, help="Make the changes (default: a dry run that shows the "
              "diffs).")
@click.option("--verify", is_flag=True, help="Measure before and after (a short traced run); "
              "roll back if the change made things worse.")
@click.option("--rollback", is_flag=True, help="Restore the last applied backup set and reload.")
@click.option("--no-fstab", "no_fstab", is_flag=True, help="Change mounts live only: leave "
              "/etc/fstab ($STATSTORM_FSTAB when set) as it is, so the new options last until "
              "the mount is mounted again.")
@click.option("--trace", "trace_file", type=InputPath(dir_okay=False),
              default=None, help="A trace of the pool, for check's measured evidence.")
@click.option("--url", default="", metavar="URL", help="A page of the app (loopback): checked "
              "after the reload, and loaded by --verify.")
@click.option("--verify-duration", type=float, default=5.0, show_default=True, metavar="S",
              help="Seconds of load per --verify measurement.")
@click.option("--verify-concurrency", type=click.IntRange(1, 256), default=4, show_default=True,
              metavar="N", help="Connections for --verify.")
@click.option("--verify-settle", type=click.FloatRange(0, 3600), default=60.0, show_default=True,
              metavar="S", help="After the change, measure again until two runs in a row agree "
              "within 5 % (calls and round trips per request), for at most S seconds; 0: once.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.pass_obj
def apply(env: Env, finding_ids: tuple[str, ...], all_: bool, pool: str | None, lab: str | None,
          apache: bool, site: str, yes: bool, verify: bool, rollback: bool, no_fstab: bool,
          trace_file: Path | None, url: str, verify_duration: float, verify_concurrency: int, verify_settle: float,
          as_json: bool) -> None:
    """Apply what `statstorm check` recommends: dry run first, then safely, then proven.

    Without --yes nothing is written: each change is shown with the current and recommended
    value and a unified diff of the file it goes to. With --yes every file is backed up,
    written atomically, checked with `php-fpm -t` / `nginx -t` / `findmnt --verify`, and
    php-fpm (and nginx) reload gracefully; a failed check, a failed reload or a pool that
    stops answering is rolled back at once. GlusterFS volume options are set live, and a
    GlusterFS mount gets its new options from a second client stacked on it (no unmount, no
    failed request); both are undone by a rollback. The mount's new options are also kept in
    its /etc/fstab line (a line is added, with _netdev, for a mount made by hand), checked
    with `findmnt --verify` before it is written and put back by --rollback; --no-fstab
    leaves the file alone, and a lab keeps them only in $STATSTORM_FSTAB when it is set
    (tests point it at a copy). Changes statstorm does not make itself
    (NFS mount options, composer, sysctl) are listed as manual steps.

    Exit status: 0; 1 when a change was rolled back because it failed; 2 bad usage;
    3 --yes without root.

    \b
    Examples:
      statstorm apply --lab --all
      statstorm apply --lab realpath-cache-small open-basedir --yes --verify
      statstorm apply --pool www opcache-revalidate --yes
      statstorm apply --pool www --rollback
      statstorm apply --apache realpath-cache-small --yes
      statstorm apply --site http://127.0.0.1:8080/ --all
    """
    opts = apply_cmd.ApplyOptions(
        findings=finding_ids, all=all_, pool=pool, lab=lab, yes=yes, verify=verify,
        rollback=rollback, fstab=not no_fstab, trace=trace_file, url=url,
        verify_duration_s=verify_duration, verify_concurrency=verify_concurrency,
        verify_settle_s=verify_settle, apache=apache, site=site)
    apply_cmd.validate(env, opts)
    if yes or rollback:
        where = (f"lab {lab}" if lab else f"pool {pool}" if pool else "the system Apache's PHP"
                 if apache else f"the PHP serving {site}" if site else "the running PHP")
        started(env, "apply", f"{where}: restore the last backup set and reload" if rollback
                else f"{where}: {'every finding' if all_ else ', '.join(finding_ids)}, backed "
                "up, tested and reloaded" + (f"; --verify measures before and after "
                                             f"({verify_duration:g} s of load each)"
                                             if verify else ""))
    result = apply_cmd.run(env, opts)
    if as_json:
        json.dump(result.to_json(), env.stdout, indent=2)
        env.stdout.write("\n")
    else:
        render(env, result)
