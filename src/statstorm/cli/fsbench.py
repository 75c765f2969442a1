"""`statstorm fsbench PATH…`: flags → FsbenchOptions → commands.fsbench.run → rendered result."""

from __future__ import annotations

import json
from pathlib import Path

import click

from statstorm.cli import cli, started
from statstorm.cli.paths import OutputPath
from statstorm.commands import fsbench as cmd
from statstorm.env import Env
from statstorm.model import storage_delay
from statstorm.model.fsworkload import OPS
from statstorm.results.fsbench import Cell, FsbenchResult

BARS = " ▁▂▃▄▅▆▇█"


def _fmt_us(v: float) -> str:
    if v >= 1e6:
        return f"{v / 1e6:.2f} s"
    if v >= 1e3:
        return f"{v / 1e3:.2f} ms"
    return f"{v:.1f} µs"


def _histogram(cell: Cell) -> str:
    """One line: log2 latency buckets from the smallest to the largest non-empty one."""
    h = cell.stats.histogram
    if not h:
        return ""
    lo, hi = h[0][0], h[-1][0]
    counts = dict(h)
    peak = max(counts.values())
    bars = []
    k = lo
    while k <= hi:
        c = counts.get(k, 0)
        bars.append(BARS[0] if c == 0 else BARS[max(1, round(8 * c / peak))])
        k *= 2
    return f"{_fmt_us(lo / 1000)} |{''.join(bars)}| {_fmt_us(hi * 2 / 1000)}"


def render(r: FsbenchResult) -> str:
    lines = []
    for i, m in enumerate(r.mounts):
        label = "PATH" if len(r.mounts) == 1 else f"PATH {i + 1}"
        w = r.workload[i]
        lines.append(f"{label}: {r.paths[i]}")
        lines.append(f"  mount   {m['mount_point']} ({m['fstype']}, {m['source']})")
        lines.append(f"  tree    {w.files} files ({w.php_files} PHP), {w.dirs} dirs, "
                     f"depth {w.max_depth}, {w.walk_lstats_per_pass} lstat per walk")
        if r.storage_delay_us(i):
            lines.append(f"  delay   {storage_delay.format_us(r.storage_delay_us(i))} added to "
                         "each round trip to the storage (the lab's --storage-delay)")
        if m["cache_options"]:
            lines.append("  caching " + " ".join(f"{k}={v}" for k, v in m["cache_options"].items()))
        if m["volume_options"]:
            lines.append("  volume  " + " ".join(f"{k}={v}" for k, v in m["volume_options"].items()))
        for mm in m["meanings"]:
            lines.append(f"  - {mm['option']} = {mm['value']}: {mm['meaning']}")
        for n in m["notes"]:
            lines.append(f"  note: {n}")
    for cs in r.cold:
        lines.append(f"cold levels for {cs.path}:")
        for x in cs.reached:
            lines.append(f"  reached: {x}")
        for x in cs.not_reached:
            lines.append(f"  NOT reached: {x}")
        if cs.check:
            k = cs.check
            lines.append(f"  verified: dentries {k.dentries_before} -> {k.dentries_after}, "
                         f"page cache {k.cached_kb_before // 1024} -> {k.cached_kb_after // 1024} MiB, "
                         f"sample file pages resident {k.resident_pages_before} -> "
                         f"{k.resident_pages_after} of {k.total_pages}"
                         + (f", FUSE client pid {k.client_pid_before} -> {k.client_pid_after}"
                            if k.remounted else ""))
    lines.append("")
    hdr = f"{'op':9} {'state':5} {'path':>4} {'calls':>9} {'ops/s':>10} {'p50':>10} {'p95':>10} " \
          f"{'p99':>10} {'max':>10} {'x first':>8} {'ENOENT':>7}"
    lines.append(hdr)
    for c in r.cells:
        s = c.stats
        rt = "" if c.ratio_to_first is None else f"{c.ratio_to_first:.1f}x"
        lines.append(f"{c.op:9} {c.state:5} {c.path_index + 1:>4} {s.count:>9} {s.ops_per_s:>10.0f} "
                     f"{_fmt_us(s.p50_us):>10} {_fmt_us(s.p95_us):>10} {_fmt_us(s.p99_us):>10} "
                     f"{_fmt_us(s.max_us):>10} {rt:>8} {c.enoent:>7}")
    lines.append("")
    lines.append("latency histograms (log2 buckets):")
    for c in r.cells:
        lines.append(f"  {c.op:9} {c.state:5} path {c.path_index + 1}  {_histogram(c)}")
    lines.append("")
    lines.append(f"timing overhead per sample (null loop p50): {r.overhead_p50_us:.2f} µs")
    return "\n".join(lines)


@cli.command("fsbench")
@click.argument("paths", nargs=-1, required=True)
@click.option("--ops", default=",".join(OPS), show_default=True,
              help="Comma-separated operations to run.")
@click.option("--state", "state", default="warm", show_default=True,
              type=click.Choice(["warm", "cold", "both"]), help="Cache state(s); cold needs root.")
@click.option("--clients", type=int, default=1, show_default=True,
              help="Concurrent client processes per pass.")
@click.option("-d", "--duration", type=float, default=None,
              help="Seconds per operation and state (rounds over all PATHs until it elapses).")
@click.option("--iterations", type=int, default=None,
              help=f"Measured passes per operation, state and PATH [default: {cmd.DEFAULT_ITERATIONS}].")
@click.option("--max-files", type=int, default=None,
              help="Use an evenly spread sample of at most this many files per tree.")
@click.option("--json", "as_json", is_flag=True, help="Print the result JSON instead of tables.")
@click.option("-o", "--output", type=OutputPath(dir_okay=False), default=None,
              help="Write the result JSON here, updated as each cell finishes.")
@click.option("--profile-out", type=OutputPath(dir_okay=False), default=None,
              help="Write a latency profile (statstorm.latency-profile/1) for `statstorm whatif`.")
@click.pass_obj
def fsbench(env: Env, paths: tuple[str, ...], ops: str, state: str, clients: int,
            duration: float | None, iterations: int | None, max_files: int | None,
            as_json: bool, output: Path | None, profile_out: Path | None) -> None:
    """Benchmark PHP-shaped metadata latency on the real code tree at each PATH.

    Operations: walk (lstat of every path component), stat, negative (lookups of missing
    names), open (open+fstat+read+close of PHP files), readdir, find. Several PATHs are
    interleaved and compared to the first one: put local disk first.

    \b
    Examples:
      statstorm fsbench /srv/app-local /mnt/gluster/app
      statstorm fsbench --state both --ops walk,stat,negative /var/www /mnt/nfs/www
      statstorm fsbench --clients 4 -d 10 -o fsbench.json --profile-out profile.json /mnt/app
    """
    opts = cmd.FsbenchOptions(
        paths=paths, ops=cmd.parse_ops(ops), states=cmd.parse_states(state), clients=clients,
        iterations=iterations, duration_s=duration, max_files=max_files, output=output,
        profile_out=profile_out)
    cmd.validate(env, opts)
    started(env, "fsbench", f"{', '.join(paths)}: ops {','.join(opts.ops)}, state "
            f"{'+'.join(opts.states)}, {clients} client(s)"
            + (f" → {output}" if output else "") + ". Ctrl-C to stop.")
    result = cmd.run(env, opts)
    click.echo(json.dumps(result.to_json(), indent=2) if as_json else render(result))
