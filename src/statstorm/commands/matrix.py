"""`statstorm matrix`: one app under a grid of serving architectures and PHP settings, measured
the way TechEmpower and hyperfine measure.

Order of work: validate every option → plan (printed first; `--dry-run` stops there) → every
cell's lab up at once (`statstorm lab up`, one lab per cell, each on its own port) → per cell a
primer request (status, length and marker of a good answer) and a warm-up → rounds: in each
round every cell is loaded once, one cell at a time (interleaved, so drift hits all cells
alike), the order turned by one each round; every answer is validated by wrk's Lua script;
PSS of the server and PHP processes is sampled while the load goes → the result file
rewritten after every cell-round → every lab down, whatever happened.

Resuming: re-running with the same `-o` (or `--resume FILE`) measures only the cell-rounds the
file lacks, on fresh labs of the same cells.
"""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator

from statstorm.adapters.host import memory
from statstorm.adapters.labs import lab_build, lab_memory, php_roots
from statstorm.adapters.load import http, wrk_checked
from statstorm.adapters.load.loadgen import load_lock
from statstorm.env import Env
from statstorm.errors import ComponentError, DependencyError, PrivilegeError, UsageError
from statstorm.model.matrix_grid import (APPS, MAX_CELLS, MAX_ROUNDS, STORAGES, Cell, Knob,
                                         MatrixOptions, Plan, check_php, estimate, grid, lab_name,
                                         remaining, round_order)
from statstorm.model import storage_delay
from statstorm.model.matrix_summary import precision, refresh
from statstorm.results import jsonread as jr
from statstorm.results import matrix as results
from statstorm.results.jsontypes import JsonObject
from statstorm.results.lab import LabState
from statstorm.results.matrix import Cell as CellResult
from statstorm.results.matrix import MatrixResult, Round, StopRule

# The text a good answer of each app holds (--marker overrides it).
MARKERS = {"synthetic": "app=statstorm-synthetic", "mediawiki": 'id="mw-content-text"',
           "wordpress": "/wp-content/themes/"}
SAMPLE_EVERY_S = 0.25
AfterRound = Callable[[MatrixResult], None]


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def options_to_json(opts: MatrixOptions) -> JsonObject:
    d = {f.name: getattr(opts, f.name) for f in dataclasses.fields(opts)
         if f.name not in ("output", "resume", "dry_run")}
    d["knobs"] = [[p, k.spin_us, k.break_every, k.twin] for p, k in opts.knobs]
    return {**d, "identity": opts.identity()}


def options_from_json(d: JsonObject, output: Path) -> MatrixOptions:
    try:
        known = {f.name for f in dataclasses.fields(MatrixOptions)}
        kw: dict[str, Any] = {k: (tuple(v) if isinstance(v, list) else v)
                              for k, v in d.items() if k in known}
        knobs = (jr.array(k, "knobs") for k in jr.lst(d, "knobs"))
        kw["knobs"] = tuple((k[0], Knob(jr.integer(k[1], "knobs"), jr.integer(k[2], "knobs"),
                                        bool(k[3:] and k[3]))) for k in knobs)
        return MatrixOptions(**{**kw, "output": output})
    except (TypeError, ValueError) as exc:
        raise UsageError(f"{output}: its options cannot be read back ({exc})") from None


def validate(env: Env, opts: MatrixOptions) -> None:
    """Every option before anything starts (labs' own checks run as each lab starts)."""
    if opts.app not in APPS:
        raise UsageError(f"--app {opts.app!r}: choose one of {', '.join(APPS)}")
    for s in opts.storages:
        storage, delay_us = storage_delay.split(s)  # glusterfs+1ms: --storage-delay's cells
        if storage not in STORAGES:
            raise UsageError(f"--storage {storage!r}: choose from {', '.join(STORAGES)}")
        storage_delay.check(storage, delay_us)
    if not opts.archs or not opts.storages:
        raise UsageError("--arch and --storage need at least one value each")
    check_php(opts)
    if not 1 <= opts.rounds <= MAX_ROUNDS:
        raise UsageError(f"--rounds must be between 1 and {MAX_ROUNDS}")
    if not 0 <= opts.precision <= 0.5:
        raise UsageError("--precision is a percentage between 0 and 50, e.g. 1.5 for ±1.5 %")
    if opts.max_rounds and not opts.precision:
        raise UsageError("--max-rounds goes with --precision (without it, --rounds is the count)")
    if opts.precision and not opts.rounds <= opts.round_cap <= MAX_ROUNDS:
        raise UsageError(f"--max-rounds must be between --rounds ({opts.rounds}) and {MAX_ROUNDS}")
    if not 1 <= opts.duration_s <= 600 or opts.duration_s != int(opts.duration_s):
        raise UsageError("--duration must be whole seconds between 1 and 600 (wrk's unit)")
    for flag, v in (("--warmup", opts.warmup_s), ("--round-warmup", opts.round_warmup_s)):
        if v < 0 or v != int(v):
            raise UsageError(f"{flag} must be whole seconds, 0 or more (wrk's unit)")
    if not 1 <= opts.concurrency <= 1000:
        raise UsageError("--concurrency must be between 1 and 1000")
    if not 1 <= opts.workers <= 256:
        raise UsageError("--workers must be between 1 and 256")
    if not 0 <= opts.length_tolerance <= 10:
        raise UsageError("--length-tolerance is a fraction of the primer's length, e.g. 0.1")
    if not 0 < opts.alpha < 0.5:
        raise UsageError("--alpha must be between 0 and 0.5, e.g. 0.05")
    cells = grid(opts)
    if not cells:
        raise UsageError("no cell to run: --opcache off with --huge-code-pages on only is empty "
                         "(huge code pages are an OPcache setting)")
    if len(cells) > MAX_CELLS:
        raise UsageError(f"{len(cells)} cells: at most {MAX_CELLS}; pick some with --cells")
    if opts.dry_run:
        return
    if not env.is_root():
        raise PrivilegeError("statstorm matrix needs root (it starts labs): run it with sudo")
    if not wrk_checked.binary():
        raise DependencyError("wrk is not installed: run scripts/setup.sh --lab as root (or apt-get install wrk)")
    for version in opts.php:  # each root there, or one that can be made
        php_roots.require(env, version)


def output_path(opts: MatrixOptions, started: str) -> Path:
    out = opts.resume or opts.output or Path(f"matrix-{started}.json")
    parent = out.parent if str(out.parent) else Path(".")
    if out.exists() and out.is_dir():
        raise UsageError(f"-o {out}: is a directory; name a file")
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        raise UsageError(f"-o {out}: {parent} is not a writable directory")
    return out


def plan(env: Env, opts: MatrixOptions) -> Plan:
    """Validate and lay out the work (nothing starts)."""
    if opts.resume is not None:
        prev = results.load(opts.resume)
        opts = dataclasses.replace(options_from_json(prev.options, opts.resume),
                                   dry_run=opts.dry_run, resume=opts.resume)
    validate(env, opts)
    cells = grid(opts)
    out = output_path(opts, datetime.now().strftime("%Y%m%d-%H%M%S"))
    done: dict[str, set[int]] = {}
    if out.exists() and out.stat().st_size:
        prev = results.load(out)
        if prev.source != "measured" or prev.options.get("identity") != opts.identity():
            raise UsageError(f"-o {out} holds another matrix (other app, cells or settings): "
                             "pick another -o, or the same flags to continue it")
        done = {c.id: {r.round for r in c.rounds} for c in prev.cells}
    order = remaining(cells, opts.rounds, done)
    cmd = wrk_checked.command(wrk_checked.CheckSpec(
        url="http://127.0.0.1:PORT/ENTRY", concurrency=opts.concurrency,
        duration_s=opts.duration_s, timeout_s=opts.timeout_s,
        marker=opts.marker or MARKERS[opts.app], expect_length=0,
        length_tolerance=opts.length_tolerance))
    cmd[cmd.index("--") + 2] = "PRIMER_LENGTH"
    most = remaining(cells, opts.round_cap, done)
    return Plan(options=opts, cells=tuple(cells), order=tuple(order), output=out,
                estimated_s=estimate(opts, cells, order, with_labs=True),
                wrk_command=tuple(cmd),
                estimated_max_s=estimate(opts, cells, most, with_labs=True))


def run(env: Env, p: Plan, after_round: AfterRound | None = None) -> MatrixResult:
    """Measure the plan's remaining cell-rounds (then, with --precision, more rounds until the
    intervals are narrow enough or the cap is reached); labs always come down."""
    opts = p.options
    result = refresh(_start_result(p), opts.alpha)
    order = list(p.order)
    if not order:  # every planned round is there; --precision may still want more
        order, result = _more_rounds(env, opts, result, list(p.cells))
    if not order:
        env.log(f"matrix: {p.output} already holds every round; nothing to measure")
        results.save(p.output, result)
        return result
    run_id = uuid.uuid4().hex[:6]
    knob_dir = env.state_root / "matrix-knobs" / run_id
    # with --precision any cell may get more rounds: every cell's lab is needed
    active = list(range(len(p.cells))) if opts.precision else sorted({i for _, i in order})
    names = {i: lab_name(run_id, i) for i in active}
    states: dict[int, LabState] = {}
    completed = False
    started = env.clock()
    try:
        for n, i in enumerate(active, 1):
            cell = p.cells[i]
            env.log(f"matrix: lab {n}/{len(active)} for {cell.id}…")
            states[i] = lab_build.up(env, _lab_options(env, opts, cell, names[i], knob_dir))
            result = _primer(env, opts, result, cell, states[i])
            results.save(p.output, result)
        _arm_knobs(knob_dir)
        with load_lock(env):
            if opts.warmup_s > 0:
                for i in active:
                    env.log(f"matrix: warming up {p.cells[i].id} ({opts.warmup_s:g} s)…")
                    _load(env, opts, result, p.cells[i], states[i], opts.warmup_s)
            while order:
                # each cell-round's result as it comes, so the finally writes the latest
                for latest in _rounds(env, p, result, states, order, after_round):
                    result = latest
                order, result = _more_rounds(env, opts, result, list(p.cells))
        completed = True
    finally:
        result = refresh(dataclasses.replace(
            result, wall_s=result.wall_s + env.clock() - started, interrupted=not completed,
            finished=_now() if completed else ""), opts.alpha)
        try:
            results.save(p.output, result)
        finally:
            for i in active:
                try:
                    lab_build.down(env, names[i], quiet=True)
                except Exception as exc:  # one lab's trouble must not keep the others up
                    env.log(f"matrix: lab {names[i]} did not come down cleanly: {exc}")
            shutil.rmtree(knob_dir, ignore_errors=True)
            try:
                knob_dir.parent.rmdir()
            except OSError:
                pass
    return result


def _rounds(env: Env, p: Plan, result: MatrixResult, states: dict[int, LabState],
            order: list[tuple[int, int]],
            after_round: AfterRound | None) -> Iterator[MatrixResult]:
    """Measure these cell-rounds in order; after each, the result with it (also written)."""
    opts = p.options
    for n, (rnd, i) in enumerate(order, 1):
        cell = p.cells[i]
        if opts.round_warmup_s > 0:
            _load(env, opts, result, cell, states[i], opts.round_warmup_s)
        measured = _measure(env, opts, result, cell, states[i], rnd)
        entry = result.cell(cell.id)
        assert entry is not None
        rounds = tuple(sorted((*entry.rounds, measured), key=lambda r: r.round))
        result = refresh(result.with_cell(dataclasses.replace(entry, rounds=rounds)), opts.alpha)
        results.save(p.output, result)
        yield result  # before anything else can fail: the caller holds every round measured
        left = estimate(opts, list(p.cells), order[n:], with_labs=False)
        of = f"{opts.rounds}" if not opts.precision else f"{opts.rounds}–{opts.round_cap}"
        env.log(f"matrix: round {rnd + 1}/{of} {cell.id}: {measured.rps:,.1f} "
                f"good answers/s, {measured.failed} failed of {measured.requests} "
                f"[{n}/{len(order)}, about {left / 60:.1f} min left]")
        if after_round:
            after_round(result)


def _more_rounds(env: Env, opts: MatrixOptions, result: MatrixResult,
                 cells: list[Cell]) -> tuple[list[tuple[int, int]], MatrixResult]:
    """With --precision: the next round of every cell while the widest interval shown is
    wider than asked and the cap allows; and the result with why the rounds stopped."""
    done = min((len(c.rounds) for c in result.cells), default=0)
    if not opts.precision:
        return [], dataclasses.replace(result, stop=None)
    prec = precision(result, opts.precision)
    widest = round(prec.widest * 100, 2) if math.isfinite(prec.widest) else None
    stop = StopRule("precision", opts.precision * 100, done, widest, prec.what, "running")
    shown = f"±{widest:g} %" if widest is not None else "no interval yet"
    if prec.met:
        env.log(f"matrix: widest interval {shown} ({prec.what}) within "
                f"±{opts.precision * 100:g} % after {done} rounds: done")
        return [], dataclasses.replace(
            result, stop=dataclasses.replace(stop, reason="precision reached"))
    if done >= opts.round_cap:
        env.log(f"matrix: {done} rounds, the most allowed (--max-rounds), and the widest "
                f"interval is still {shown} ({prec.what}), not ±{opts.precision * 100:g} %")
        return [], dataclasses.replace(
            result, stop=dataclasses.replace(stop, reason="max rounds reached"))
    env.log(f"matrix: widest interval {shown} ({prec.what}), asked ±"
            f"{opts.precision * 100:g} %: round {done + 1} of at most {opts.round_cap}")
    rnd = max((r.round for c in result.cells for r in c.rounds), default=-1) + 1
    return [(rnd, i) for i in round_order(rnd, len(cells))], dataclasses.replace(result,
                                                                                stop=stop)


def _start_result(p: Plan) -> MatrixResult:
    opts = p.options
    if p.output.exists() and p.output.stat().st_size:
        prev = results.load(p.output)
    else:
        prev = MatrixResult(app=opts.app, source="measured", options={}, started=_now())
    new = tuple(CellResult(
        id=c.id, server=c.server, mpm=c.mpm, handler=c.handler, opcache=c.opcache,
        huge_code_pages=c.huge_code_pages, storage=c.storage, php=c.php,
        knob={k: v for k, v in dataclasses.asdict(c.knob).items() if v})
        for c in p.cells if prev.cell(c.id) is None)
    return dataclasses.replace(prev, options=options_to_json(opts),
                               thp_mode=memory.thp_enabled(), cells=(*prev.cells, *new))


def _lab_options(env: Env, opts: MatrixOptions, cell: Cell, name: str,
                 knob_dir: Path) -> lab_build.LabOptions:
    ini = cell.php_ini()
    if cell.knob:
        ini["auto_prepend_file"] = str(_write_knob(env, knob_dir, name, cell.knob))
    storage, delay_us = storage_delay.split(cell.storage)
    kw: dict[str, Any] = {"name": name, "app": opts.app, "storage": storage,
                          "storage_delay_us": delay_us, "php_ini": ini, "workers": opts.workers,
                          "php": opts.php_of(cell)}
    fields = {f.name for f in dataclasses.fields(lab_build.LabOptions)}
    if "server" in fields:
        kw.update(server=cell.server, mpm=cell.mpm, handler=cell.handler)
    elif cell.server != "nginx":
        raise UsageError(f"cell {cell.id}: this statstorm's labs serve through nginx + php-fpm "
                         "only; pick nginx-fpm cells with --arch nginx-fpm")
    return lab_build.LabOptions(**kw)


def _write_knob(env: Env, knob_dir: Path, name: str, knob: Knob) -> Path:
    """A PHP file run before every request of the cell (auto_prepend_file): real CPU spent
    (the worker's own CPU time, so a preempted worker still spends all of it),
    or a real answer without the app's content — the latter only once armed (after the lab's
    own page check and the primer). Readable by the web server's user."""
    knob_dir.mkdir(parents=True, exist_ok=True)
    for d in (env.state_root, knob_dir.parent, knob_dir):
        d.chmod(0o755)
    path = knob_dir / f"{name}.php"
    path.write_text(
        "<?php\n// statstorm matrix test knob: a deliberate change to every request of one cell.\n"
        # the process's own CPU time (user + system, as the kernel accounts it), not the
        # clock: a worker preempted while it spins still burns the whole amount
        f"if ({knob.spin_us} > 0) {{\n"
        "    $statstorm_cpu = function (): int {\n"
        "        $r = getrusage();\n"
        "        return ($r['ru_utime.tv_sec'] + $r['ru_stime.tv_sec']) * 1000000\n"
        "            + $r['ru_utime.tv_usec'] + $r['ru_stime.tv_usec'];\n"
        "    };\n"
        f"    $statstorm_until = $statstorm_cpu() + {knob.spin_us};\n"
        "    while ($statstorm_cpu() < $statstorm_until) {\n    }\n"
        "    unset($statstorm_cpu, $statstorm_until);\n}\n"
        f"if ({knob.break_every} > 0 && is_file({str(_armed(path))!r})\n"
        f"        && mt_rand(1, max(1, {knob.break_every})) === 1) {{\n"
        "    echo \"statstorm matrix test knob: this answer is broken on purpose\\n\";\n"
        "    exit;\n}\n")
    path.chmod(0o644)
    return path


def _armed(knob_file: Path) -> Path:
    return knob_file.with_suffix(".armed")


def _arm_knobs(knob_dir: Path) -> None:
    for f in knob_dir.glob("*.php") if knob_dir.is_dir() else ():
        _armed(f).write_text("armed\n")


def _url(state: LabState) -> str:
    return state.url + (state.entry_path or "/")


def _primer(env: Env, opts: MatrixOptions, result: MatrixResult, cell: Cell,
            state: LabState) -> MatrixResult:
    """One request before any load: it must be a good answer; its length is the reference.
    Returns the result with the cell's primer."""
    marker = opts.marker or MARKERS[opts.app]
    try:
        status, body = http.get(_url(state), timeout=opts.timeout_s)
    except OSError as exc:
        raise ComponentError(f"cell {cell.id}: the primer request to {_url(state)} got no "
                             f"answer ({exc}); see {state.state_dir}/log/") from None
    if not 200 <= status < 300 or marker.encode() not in body:
        raise ComponentError(f"cell {cell.id}: the primer request answered {status} without "
                             f"{marker!r}; fix the lab or pass --marker TEXT")
    entry = result.cell(cell.id)
    assert entry is not None
    return result.with_cell(dataclasses.replace(entry, primer={
        "status": status, "length": len(body), "marker": marker, "url": _url(state)}))


def _spec(opts: MatrixOptions, result: MatrixResult, cell: Cell, state: LabState,
          duration_s: float) -> wrk_checked.CheckSpec:
    entry = result.cell(cell.id)
    assert entry is not None
    return wrk_checked.CheckSpec(
        url=_url(state), concurrency=opts.concurrency, duration_s=duration_s,
        timeout_s=opts.timeout_s, marker=jr.str_(entry.primer, "marker"),
        expect_length=jr.int_(entry.primer, "length"), length_tolerance=opts.length_tolerance)


def _load(env: Env, opts: MatrixOptions, result: MatrixResult, cell: Cell, state: LabState,
          duration_s: float) -> wrk_checked.CheckedRun:
    return wrk_checked.run(env, _spec(opts, result, cell, state, duration_s))


def _measure(env: Env, opts: MatrixOptions, result: MatrixResult, cell: Cell, state: LabState,
             rnd: int) -> Round:
    sampler = lab_memory.Sampler(state, SAMPLE_EVERY_S)
    sampler.start()
    try:
        r = _load(env, opts, result, cell, state, opts.duration_s)
    finally:
        sampler.stop()
    return Round(round=rnd, requests=r.requests, duration_s=r.duration_s, rps=r.rps,
                 failed=r.failed, bad_status=r.bad_status, bad_length=r.bad_length,
                 bad_marker=r.bad_marker, socket_errors=r.socket_errors, max_ms=r.max_ms,
                 percentiles=r.percentiles, memory=sampler.memory())
