"""`statstorm demo`: the main job on the built-in default — find, explain, fix and prove.

Two labs side by side, the same app on local disk (the reference) and on network storage
(GlusterFS with its default mount and volume options, Debian's PHP defaults), then:

1. **before**: both measured with the same closed-model load, rounds interleaved (local,
   network, …) under the same machine conditions; the volume's profile counts round trips;
2. **find**: `trace` of the network lab's pool during a few page views, `check --trace`;
3. **predict**: `whatif` of check's PHP changes and the round-trip forecast of the mount
   changes (model.network_forecast) — printed before anything changes;
4. **fix**: `apply --all --yes` on the network lab (storage, PHP and app changes), and the
   same PHP and app changes on the local lab, so the ratio still measures the storage;
5. **prove**: the same interleaved measurement again, a second trace and check.

Every result is written to the output directory as soon as it exists (`demo.json` after each
step); both labs are removed whatever happens, unless `keep`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from statstorm import faults
from statstorm.adapters.apply import apply_target
from statstorm.adapters.labs import lab_build, state as labs
from statstorm.adapters.load import interleaved
from statstorm.adapters.storage import round_trips
from statstorm.adapters.load.wrk import Wrk
from statstorm.adapters.tracing import page_views
from statstorm.commands import apply as apply_cmd, check as check_cmd
from statstorm.commands import trace as trace_cmd, whatif as whatif_cmd
from statstorm.env import Env
from statstorm.errors import DependencyError, PrivilegeError, StatstormError, UsageError
from statstorm.model import storage_delay
from statstorm.model.storage_kinds import LAB_ALIASES, STORAGE, lab_storages
from statstorm.model import applyplan
from statstorm.results import result_files
from statstorm.results.common import write_atomic, write_json_atomic
from statstorm.results.apply import ApplyMode
from statstorm.results.demo import (DemoResult, JsonObject, Lab, LabSettings, PerRequest, Phase,
                                    new_run_id, with_run_id)
from statstorm.results.lab import LabState
from statstorm.results.php_root import HOST_VERSION, release
from statstorm.results.storage_kind import StorageKind

ROLES = ("local", "network")
STEPS = 7
# the network storages a demo compares with local disk (`--storage`; afs: OpenAFS)
# every network storage a lab can stand up (model/storage_kinds.py), and their other names
STORAGES = tuple(str(k) for k in lab_storages() if STORAGE[k].network) + tuple(
    alias for alias, kind in LAB_ALIASES.items() if STORAGE[kind].network)


def storage_of(name: str) -> str:
    """`--storage`'s value as a storage kind (`afs` → openafs)."""
    return str(LAB_ALIASES.get(name, name))


@dataclass(frozen=True)
class DemoOptions:
    name: str = "demo"
    app: str = "mediawiki"
    storage: str = StorageKind.GLUSTERFS
    output_dir: Path = Path("statstorm-demo")
    rounds: int = 3
    duration_s: float = 8.0
    warmup_s: float = 3.0
    concurrency: int = 4
    workers: int = 4
    views: int = 10  # page views traced
    keep: bool = False
    storage_delay_us: int = 0  # the network lab's --storage-delay
    php: str = HOST_VERSION  # both labs' PHP: the host's, or a version run from its PHP root


def validate(env: Env, opts: DemoOptions) -> None:
    if not env.is_root():
        raise PrivilegeError("statstorm demo starts labs (php-fpm, nginx, GlusterFS) and "
                             "traces them: run it as root")
    storage_delay.check(opts.storage, opts.storage_delay_us)
    release(opts.php)  # a version statstorm runs, or the one line naming those
    if not 1 <= opts.rounds <= 10:
        raise UsageError("--rounds must be between 1 and 10")
    if not 2 <= opts.duration_s <= 120:
        raise UsageError("--duration must be between 2 and 120 s")
    if not 1 <= opts.concurrency <= 64:
        raise UsageError("--concurrency must be between 1 and 64")
    if not 1 <= opts.views <= 200:
        raise UsageError("--views must be between 1 and 200")
    if Wrk().available() is None:
        raise DependencyError("wrk is not installed: run scripts/setup.sh as root")
    out = opts.output_dir
    if out.exists() and not out.is_dir():
        raise UsageError(f"-o {out}: a file of that name exists; choose a directory")
    for role in ROLES:
        name = lab_name(opts, role)
        if labs.lab_dir(env, name).exists():
            raise UsageError(f"a lab named {name!r} exists: remove it with `statstorm lab down "
                             f"--name {name}` or give the demo another --name")


def lab_name(opts: DemoOptions, role: str) -> str:
    return f"{opts.name}-{'local' if role == 'local' else 'net'}"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


# -- measuring ------------------------------------------------------------------------------------
def measure(env: Env, states: dict[str, LabState], opts: DemoOptions, label: str,
            say: Callable[[str], None]) -> Phase:
    """Both labs under the same closed-model load, rounds interleaved; the network lab's
    round trips from its storage's counter (adapters/storage/round_trips.py: a GlusterFS
    volume's profile, ceph-fuse's admin socket, an OpenAFS file server's RPC counts)."""
    net = states["network"]
    volume = net.volume

    def window() -> round_trips.Window | None:
        if volume:
            return round_trips.gluster(env, volume)
        return round_trips.window_for(env, net.mount_point)

    def side(role: str, win: Callable[[], round_trips.Window | None]) -> interleaved.Target:
        return interleaved.Target(role, (states[role].url + states[role].entry_path,), win)
    return interleaved.measure(env, side("local", lambda: None), side("network", window),
                               interleaved.Load(opts.rounds, opts.duration_s, opts.warmup_s,
                                                opts.concurrency), label, say)


def trace_views(env: Env, state: LabState, views: int, output: Path, run_id: str = "") -> float:
    """`statstorm trace` of the lab's pool while `views` page views are fetched (the trace
    carrying `run_id`); its metadata calls per request."""
    return page_views.trace_views(env, trace_cmd.views_tracer(views, run_id), lab=state.name,
                                  pool=None, urls=(state.url + state.entry_path,),
                                  output=output, views=views, name="statstorm-demo-trace")


# -- predicting -----------------------------------------------------------------------------------
predict = whatif_cmd.predict_findings


def prediction_text(result: DemoResult) -> str:
    return whatif_cmd.prediction_line(result.predicted, result.round_trips().before)


# -- fixing ---------------------------------------------------------------------------------------
def same_settings(env: Env, applied: apply_cmd.ApplyResult,
                  states: dict[str, LabState]) -> list[str]:
    """The network lab's PHP and app changes made on the local lab too (its own files): the
    ratio after must measure the storage, not the app's own cache."""
    net, local = states["network"], states["local"]
    changes = []
    for c in applied.changes:
        if c.kind in (applyplan.POOL_INI, applyplan.POOL):
            changes.append(c)
        elif c.kind == applyplan.APP and c.where.startswith(net.code_path):
            changes.append(replace(
                c, where=local.code_path + c.where[len(net.code_path):]))
    if not changes:
        return []
    aopts = apply_cmd.ApplyOptions(lab=local.name, all=True, yes=True)
    target = apply_cmd.resolve(env, aopts)
    placed, edits = apply_target.plan_edits(target, changes)
    if edits:
        apply_cmd.execute(env, apply_cmd.ApplyResult(ApplyMode.DRY_RUN, target, placed, edits), aopts)
    return [c.line for c in placed if c.kind != applyplan.MANUAL]


# -- the command ----------------------------------------------------------------------------------
class _Run:
    """The demo's result as it grows, written to demo.json after every step."""

    def __init__(self, result: DemoResult, path: Path) -> None:
        self.result, self.path = result, path

    def save(self, result: DemoResult | None = None) -> None:
        """demo.json of `result` (by default, of the result so far)."""
        self.result = result or self.result
        write_json_atomic(self.path, self.result.to_json())

    def write(self, name: str, data: JsonObject) -> str:
        """A result file of this run beside demo.json (carrying the run's id); its link."""
        assert self.result.run_id is not None
        write_json_atomic(self.path.parent / name, with_run_id(data, self.result.run_id))
        return name


def run(env: Env, opts: DemoOptions, say: Callable[[str], None] | None = None) -> DemoResult:
    validate(env, opts)
    log = say or env.log
    out = opts.output_dir
    out.mkdir(parents=True, exist_ok=True)
    run_id = new_run_id()  # in demo.json, its result files and its traces' headers
    demo = _Run(DemoResult(opts.app, opts.storage, str(out), run_id=run_id, kept=opts.keep,
                           storage_delay_us=opts.storage_delay_us,
                           php="" if release(opts.php).host else release(opts.php).version),
                out / "demo.json")
    states: dict[str, LabState] = {}
    t_start = time.monotonic()
    mark = [t_start]
    timings: dict[str, float] = {}

    def step(n: int, text: str) -> None:
        now = time.monotonic()
        if n > 1:
            timings[f"step{n - 1}"] = round(now - mark[0], 1)
        mark[0] = now
        faults.phase(f"demo/step-{n}")
        log(f"[{n}/{STEPS}] {text}")

    manual: dict[str, str] = {}
    files: dict[str, str] = {}

    try:
        step(1, f"two labs: {opts.app} on local disk and on {opts.storage} (default options)…")
        for role in ROLES:
            storage = "local" if role == "local" else opts.storage
            st = lab_build.up(env, lab_build.LabOptions(name=lab_name(opts, role), app=opts.app,
                                                    storage=storage, workers=opts.workers,
                                                    php=opts.php,
                                                    storage_delay_us=0 if role == "local"
                                                    else opts.storage_delay_us))
            states[role] = st
            demo.save(replace(demo.result, timings_s=dict(timings), labs={
                **demo.result.labs, role: Lab(st.name, st.url + st.entry_path)}))

        step(2, "before: both labs under the same load, rounds interleaved…")
        before = measure(env, states, opts, "before", log)
        files["demo"] = demo.path.name
        demo.save(replace(demo.result, before=before, files=dict(files),
                          timings_s=dict(timings)))

        step(3, f"find: tracing {opts.views} page views of the {opts.storage} lab, then check…")
        before_trace = out / "before.sst.gz"
        calls_before = trace_views(env, states["network"], opts.views, before_trace, run_id)
        files["trace_before"] = before_trace.name
        demo.result = replace(demo.result, metadata_calls_per_request=PerRequest(
            before=calls_before, keys=("before",)))
        chk = check_cmd.run(env, check_cmd.CheckOptions(lab=states["network"].name,
                                                        trace=before_trace))
        files["check_before"] = demo.write("check-before.json", chk.to_json())
        demo.save(replace(demo.result, files=dict(files), timings_s=dict(timings),
                          findings_before=tuple(f"{f.severity}: {f.id}" for f in chk.findings)))

        step(4, "predict: whatif of check's PHP changes, forecast of the storage changes…")
        settings = {k: str(v) for k, v in (chk.pools[0].settings if chk.pools else {}).items()}
        predicted = predict(chk.findings, settings, before_trace,
                            before.network.round_trips_per_request)
        demo.save(replace(demo.result, predicted=predicted, predicted_at=_now(),
                          timings_s=dict(timings)))
        log(prediction_text(demo.result))

        step(5, f"fix: statstorm apply --all --yes on the {opts.storage} lab, the same PHP and "
                "app settings on the local lab…")
        applied = apply_cmd.run(env, apply_cmd.ApplyOptions(
            lab=states["network"].name, all=True, yes=True, trace=before_trace))
        files["apply"] = demo.write("apply.json", applied.to_json())
        manual = {c.line: c.finding for c in applied.manual}
        made = [c for c in applied.changes if c.kind != applyplan.MANUAL]
        demo.result = replace(demo.result, applied=tuple(sorted({c.finding for c in made})),
                              applied_at=_now())
        local_lines = same_settings(env, applied, states)
        demo.save(replace(
            demo.result, files=dict(files), timings_s=dict(timings),
            settings={"network": LabSettings(tuple(dict.fromkeys(c.line for c in made)),
                                             labs.load(env, states["network"].name).mount_options),
                      "local": LabSettings(tuple(local_lines))}))

        step(6, "after: both labs under the same load again…")
        after = measure(env, states, opts, "after", log)
        demo.save(replace(demo.result, after=after, timings_s=dict(timings)))

        step(7, "prove: a second trace and check of the fixed lab…")
        after_trace = out / "after.sst.gz"
        calls_after = trace_views(env, states["network"], opts.views, after_trace, run_id)
        files["trace_after"] = after_trace.name
        demo.result = replace(demo.result, metadata_calls_per_request=PerRequest(
            calls_before, calls_after, predicted.metadata_calls_per_request))
        chk2 = check_cmd.run(env, check_cmd.CheckOptions(lab=states["network"].name,
                                                         trace=after_trace))
        files["check_after"] = demo.write("check-after.json", chk2.to_json())
        still = {f.id for f in chk2.findings}
        timings["step7"] = round(time.monotonic() - mark[0], 1)
        demo.save(replace(
            demo.result, files=dict(files), timings_s=dict(timings),
            findings_after=tuple(f"{f.severity}: {f.id}" for f in chk2.findings),
            manual=tuple(line for line, fid in manual.items() if fid in still)))
    finally:
        notes = list(demo.result.notes)
        if not opts.keep:
            for role in reversed(ROLES):
                if role in states or labs.lab_dir(env, lab_name(opts, role)).exists():
                    try:
                        lab_build.down(env, lab_name(opts, role), quiet=True)
                    except StatstormError as exc:
                        notes.append(f"lab {lab_name(opts, role)}: {exc}")
        timings["total"] = round(time.monotonic() - t_start, 1)
        demo.result = replace(demo.result, notes=tuple(notes), timings_s=dict(timings),
                              files=dict(files))
        if out.is_dir():
            demo.save()
            demo.save(write_report(out, demo.result, log))
    return demo.result


def write_report(out: Path, result: DemoResult, log: Callable[[str], None]) -> DemoResult:
    """`report.html` beside demo.json, rendered from the result files only (as `statstorm
    report DIR/demo.json` would); a report that cannot be made is a note, not a failure.
    Returns the result with the page's link, or with the note."""
    page = out / "report.html"
    from statstorm.report import html  # matplotlib: loaded only when a page is drawn
    from statstorm.report.page import build
    try:
        files = result_files.load_all([out / "demo.json"])
        write_atomic(page, html.render(build(files, generated=_now())), new_mode=0o644)
    except (StatstormError, OSError, ValueError, KeyError, TypeError) as exc:
        return replace(result, notes=(*result.notes, f"report.html not written: {exc}"))
    log(f"report: {page}")
    return replace(result, files={**result.files, "report": page.name})
