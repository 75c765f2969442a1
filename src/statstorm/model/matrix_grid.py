"""`statstorm matrix`'s options, grid of cells and plan (what runs, in which order, and how
long it should take). Pure: the checks that touch the machine are in commands/matrix.py."""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from pathlib import Path

from statstorm.errors import UsageError
from statstorm.model import storage_delay
from statstorm.model.storage_kinds import lab_storages
from statstorm.results.php_root import HOST_VERSION, release
from statstorm.results.storage_kind import StorageKind

# server-MPM-handler, as the --arch flag names them.
ARCHS = ("nginx-fpm", "apache-prefork-mod_php", "apache-event-fpm", "apache-worker-fpm",
         "apache-event-fcgid", "apache-worker-fcgid")
APPS = ("mediawiki", "wordpress", "synthetic")
STORAGES = lab_storages()  # local, glusterfs
# Rough costs of one lab (seconds), used only for the plan's estimate.
LAB_UP_S = {"synthetic": 6.0, "mediawiki": 20.0, "wordpress": 35.0}
GLUSTER_UP_S = 15.0
LAB_DOWN_S = 3.0
RUN_OVERHEAD_S = 1.0  # wrk start/stop, memory reads, JSON write per cell-round
MAX_ROUNDS = 100
MAX_CELLS = 64
PRECISION_ROUNDS = 4  # --precision's default --max-rounds, in multiples of --rounds


@dataclass(frozen=True)
class Knob:
    """A deliberate, real change to one cell's requests, for tests and benches (hidden flags):
    `spin_us` burns that much CPU at the start of every request; `break_every` answers about
    one request in N with a page that lacks the app's content (status 200)."""

    spin_us: int = 0
    break_every: int = 0
    twin: bool = False  # on a copy of the cell (id + "+knob"), the cell itself unchanged

    def __bool__(self) -> bool:
        return bool(self.spin_us or self.break_every)


@dataclass(frozen=True)
class Cell:
    """One point of the grid: a lab configuration."""

    arch: str
    opcache: bool
    huge_code_pages: bool
    storage: str
    knob: Knob = Knob()
    php: str = ""  # the PHP version when --php names several (an axis), else ''

    @property
    def server(self) -> str:
        return self.arch.split("-", 1)[0]

    @property
    def mpm(self) -> str:
        parts = self.arch.split("-", 2)
        return parts[1] if self.server == "apache" else ""

    @property
    def handler(self) -> str:
        return self.arch.split("-", 2)[-1] if self.server == "apache" else "fpm"

    @property
    def id(self) -> str:
        php = f"opcache-{'on' if self.opcache else 'off'}"
        if self.huge_code_pages:
            php += "+huge-pages"
        version = f"/php{self.php}" if self.php else ""
        return f"{self.arch}/{php}/{self.storage}{version}" + ("+knob" if self.knob.twin else "")

    def php_ini(self) -> dict[str, str]:
        ini = {"opcache.enable": "1" if self.opcache else "0"}
        ini["opcache.huge_code_pages"] = "1" if self.huge_code_pages else "0"
        return ini


@dataclass(frozen=True)
class MatrixOptions:
    app: str = "synthetic"
    archs: tuple[str, ...] = ARCHS
    opcache: tuple[bool, ...] = (True, False)
    huge_code_pages: tuple[bool, ...] = (False,)
    storages: tuple[str, ...] = (StorageKind.LOCAL,)
    php: tuple[str, ...] = ()  # PHP versions (--php); () = the host's own
    cells: tuple[str, ...] = ()  # cell ids or glob patterns; () = all
    rounds: int = 5
    duration_s: float = 10.0
    warmup_s: float = 5.0  # once per cell, before its first round
    round_warmup_s: float = 1.0  # before every measured run (the cell was idle meanwhile)
    concurrency: int = 8
    workers: int = 4
    timeout_s: float = 10.0
    marker: str = ""  # '' = the app's own
    length_tolerance: float = 0.1
    alpha: float = 0.05
    output: Path | None = None
    resume: Path | None = None
    dry_run: bool = False
    knobs: tuple[tuple[str, Knob], ...] = ()  # (cell pattern, knob), hidden flags
    precision: float = 0.0  # > 0: add rounds until every shown interval is within ±this
    max_rounds: int = 0  # the most rounds --precision may reach (0: PRECISION_ROUNDS × rounds)

    @property
    def round_cap(self) -> int:
        """The most rounds this matrix may run: --rounds, or with --precision --max-rounds."""
        if not self.precision:
            return self.rounds
        return self.max_rounds or min(MAX_ROUNDS, PRECISION_ROUNDS * self.rounds)

    def php_of(self, cell: Cell) -> str:
        """The PHP version of the cell's lab: its own when --php names several, else the one
        --php names, else the host's."""
        return cell.php or (self.php[0] if self.php else HOST_VERSION)

    def identity(self) -> dict[str, object]:
        """What must match for a result file to be continued (rounds may grow)."""
        return {"app": self.app, "cells": [c.id for c in grid(self)],
                "duration_s": self.duration_s, "concurrency": self.concurrency,
                "workers": self.workers, "marker": self.marker,
                "length_tolerance": self.length_tolerance,
                "knobs": {p + ("+" if k.twin else ""): [k.spin_us, k.break_every]
                          for p, k in self.knobs},
                **({"php": list(self.php)} if self.php else {})}


@dataclass(frozen=True)
class Plan:
    options: MatrixOptions
    cells: tuple[Cell, ...]
    order: tuple[tuple[int, int], ...]  # (round, cell index) still to measure, in order
    output: Path
    estimated_s: float
    wrk_command: tuple[str, ...] = field(default_factory=tuple)
    estimated_max_s: float = 0.0  # with --precision: if every round up to the cap runs

    def lines(self) -> list[str]:
        """The plan as printed by --dry-run and before a run starts."""
        o = self.options
        php = f" on PHP {', '.join(o.php)}" if o.php else ""
        out = [f"matrix of {len(self.cells)} cell(s) on {o.app}{php}, {o.rounds} interleaved "
               f"round(s) of {o.duration_s:g} s at {o.concurrency} connections "
               f"({o.workers} PHP workers per lab):"]
        for i, c in enumerate(self.cells, 1):
            knob = ""
            if c.knob.spin_us:
                knob += f"  [test knob: +{c.knob.spin_us} µs CPU per request]"
            if c.knob.break_every:
                knob += f"  [test knob: 1 in {c.knob.break_every} answers broken]"
            out.append(f"  {i:2}. {c.id}{knob}")
        todo = len(self.order)
        out.append(f"measured runs to go: {todo} (cell-rounds), each after {o.round_warmup_s:g} s "
                   f"of warm-up; {o.warmup_s:g} s warm-up per cell first")
        if o.precision:
            out.append(f"then more rounds, up to {o.round_cap} in all, until every comparison "
                       f"shown has its 95 % interval within ±{o.precision * 100:g} % of its ratio")
        out.append("load per run: " + " ".join(self.wrk_command))
        out.append(f"result: {self.output} (rewritten after every cell-round)")
        out.append(f"estimated duration: {_min_s(self.estimated_s)}"
                   + (f", up to {_min_s(self.estimated_max_s)} if all {o.round_cap} rounds run"
                      if self.estimated_max_s > self.estimated_s else "")
                   + " (labs up and down included)")
        return out


def _min_s(seconds: float) -> str:
    m, s = divmod(int(round(seconds)), 60)
    return f"{m} min {s:02d} s"


def parse_arch(text: str) -> str:
    if text not in ARCHS:
        raise UsageError(f"--arch {text!r}: choose from {', '.join(ARCHS)}")
    return text


def parse_on_off(text: str, flag: str) -> tuple[bool, ...]:
    vals = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        if part not in ("on", "off"):
            raise UsageError(f"{flag} {text!r}: use on, off or on,off")
        vals.append(part == "on")
    if not vals:
        raise UsageError(f"{flag} is empty: use on, off or on,off")
    return tuple(dict.fromkeys(vals))


def parse_knob(text: str, kind: str) -> tuple[str, Knob]:
    """`CELL_PATTERN=N` puts the knob on the matching cells; `CELL_PATTERN+=N` on a twin of
    each (the same lab configuration once more, with the knob), so that a known difference
    can be measured between two otherwise identical cells."""
    pattern, _, value = text.rpartition("=")
    twin = pattern.endswith("+")
    pattern = pattern.removesuffix("+")
    if not pattern or not re.fullmatch(r"[0-9]{1,9}", value) or int(value) <= 0:
        raise UsageError(f"test knob {text!r}: use CELL_PATTERN=N (or CELL_PATTERN+=N for a "
                         "twin cell) with N > 0")
    n = int(value)
    return pattern, Knob(spin_us=n, twin=twin) if kind == "spin" else Knob(break_every=n, twin=twin)


def parse_php(text: str) -> tuple[str, ...]:
    """--php's versions (`7.4,8.2,8.4`), each as the version table names it, in order, once."""
    versions = [release(p).version for p in (p.strip() for p in text.split(",")) if p]
    if not versions:
        raise UsageError("--php is empty: name one or more versions, e.g. --php 7.4,8.2,8.4")
    return tuple(dict.fromkeys(versions))


def check_php(opts: MatrixOptions) -> None:
    """Another PHP than the host's runs in php-fpm from its root: fpm architectures only."""
    rooted = [v for v in opts.php if not release(v).host]
    other = [a for a in opts.archs if not a.endswith("-fpm")]
    if rooted and other:
        raise UsageError(f"--php {','.join(rooted)} runs php-fpm from a PHP root, which "
                         f"{', '.join(other)} cannot use (PHP {HOST_VERSION} in the server): "
                         "pick fpm architectures with --arch, e.g. --arch nginx-fpm")


def grid(opts: MatrixOptions) -> list[Cell]:
    """Every cell of the grid (huge code pages only with OPcache on: they are an OPcache
    setting; the PHP version an axis when --php names several), filtered by --cells, with
    the test knobs attached."""
    cells = []
    versions = opts.php if len(opts.php) > 1 else ("",)
    for storage in opts.storages:
        for arch in opts.archs:
            for php in versions:
                for opcache in opts.opcache:
                    for hcp in opts.huge_code_pages:
                        if hcp and not opcache:
                            continue
                        cells.append(Cell(arch, opcache, hcp, storage, php=php))
    if opts.cells:
        picked = [c for c in cells if any(fnmatch.fnmatchcase(c.id, p) for p in opts.cells)]
        unmatched = [p for p in opts.cells if not any(fnmatch.fnmatchcase(c.id, p) for c in cells)]
        if unmatched:
            raise UsageError(f"--cells {','.join(unmatched)}: no such cell; cells are named like "
                             f"{cells[0].id if cells else 'nginx-fpm/opcache-on/local'} "
                             "(globs allowed, see --dry-run)")
        cells = picked
    out = []
    for c in cells:
        for twin in (False, True):
            mine = [k for p, k in opts.knobs if k.twin == twin and fnmatch.fnmatchcase(c.id, p)]
            if twin and not mine:
                continue
            spin = max((k.spin_us for k in mine), default=0)
            brk = max((k.break_every for k in mine), default=0)
            out.append(Cell(c.arch, c.opcache, c.huge_code_pages, c.storage,
                            Knob(spin, brk, twin), c.php))
    return out


def estimate(opts: MatrixOptions, cells: list[Cell], order: list[tuple[int, int]],
             with_labs: bool) -> float:
    per_lab = LAB_UP_S.get(opts.app, 20.0) + LAB_DOWN_S
    gluster = sum(storage_delay.split(c.storage)[0] == StorageKind.GLUSTERFS for c in cells)
    if gluster:
        per_lab += GLUSTER_UP_S * gluster / len(cells)
    started = {i for _, i in order}
    total = len(started) * (per_lab if with_labs else 0.0)
    total += len(started) * (opts.warmup_s + RUN_OVERHEAD_S)
    total += len(order) * (opts.round_warmup_s + opts.duration_s + RUN_OVERHEAD_S)
    return total


def round_order(rnd: int, n: int) -> list[int]:
    """The cells' order in round `rnd`: rotated by one each round (AB, BA, … for two cells),
    so that no cell always runs first or right after another; a drift within a round or what
    one cell's load leaves behind then falls on every cell alike."""
    return [(rnd + k) % n for k in range(n)] if n else []


def remaining(cells: list[Cell], rounds: int, done: dict[str, set[int]]) -> list[tuple[int, int]]:
    """(round, cell index) not measured yet, round after round (interleaved, rotated)."""
    return [(r, i) for r in range(rounds) for i in round_order(r, len(cells))
            if r not in done.get(cells[i].id, set())]


def lab_name(run_id: str, index: int) -> str:
    name = f"mx{run_id}-{index}"
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,31}", name):
        raise UsageError(f"internal: bad lab name {name}")
    return name
