"""`statstorm demo`: the main job on the built-in default — find, explain, fix and prove — and
the pipeline it shares with `statstorm tune` (commands/tune.py).

The pipeline runs on a pair (commands/pair.py): a reference on local disk and a target on
network storage. The demo's pair is two labs, the same app on local disk (`NAME-local`) and on
network storage (`NAME-net`: GlusterFS with its default mount and volume options, Debian's PHP
defaults); tune's is a shadow of the user's pool and the pool itself. Then:

1. **pair**: the two sides made (the demo's labs, tune's shadow);
2. **before**: both measured with the same closed-model load, rounds interleaved (reference,
   target, …) under the same machine conditions; the target's storage counts round trips;
3. **find**: `trace` of the target during a few page views, `check --trace`;
4. **predict**: `whatif` of the changes `apply --all` makes and the round-trip forecast of
   the mount changes (model/network_forecast.py) — printed before anything changes;
5. **fix**: `apply --all --yes` on the target (storage, PHP and app changes), and the same PHP
   and app changes on the reference, so the ratio still measures the storage (tune without
   `yes`: `apply --all` as a dry run, and the run ends here);
6. **after**: the same interleaved measurement again;
7. **escalation** (commands/escalation_trials.py): while the target stays below 0.90x of its
   reference, the changes `apply --all` leaves out, each tried alone and kept where measured;
8. **prove**: a second trace and check of the target.

Every result is written to the output directory as soon as it exists (demo.json or tune.json
after each step, commands/run_record.py), then `report.html`; the demo's labs (unless `keep`)
and tune's shadow are removed whatever happens. What touches the system comes through `Steps`,
so tests replace it.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterator

from statstorm.adapters.apply import apply_target
from statstorm.adapters.labs import lab_build, state as labs
from statstorm.adapters.load import interleaved
from statstorm.adapters.load.wrk import Wrk
from statstorm.adapters.tracing import page_views
from statstorm.commands import apply as apply_cmd, check as check_cmd
from statstorm.commands import trace as trace_cmd, whatif as whatif_cmd
from statstorm.commands.escalation_trials import Applied, Tries, escalate
from statstorm.commands.pair import Member, Pair, carried_path, lab_member
from statstorm.commands.run_record import Record, now
from statstorm.env import Env
from statstorm.errors import (DependencyError, NotSamePage, PrivilegeError, StatstormError,
                              UsageError)
from statstorm.model import applyplan, escalation, storage_delay
from statstorm.model.storage_kinds import LAB_ALIASES, STORAGE, lab_storages
from statstorm.results.apply import ApplyMode
from statstorm.results.check import CheckResult
from statstorm.results.demo import (DemoResult, Lab, LabSettings, PerRequest, Phase, Prediction,
                                    new_run_id)
from statstorm.results.lab import LabState
from statstorm.results.page import Page
from statstorm.results.php_root import HOST_VERSION, release
from statstorm.results.storage_kind import StorageKind
from statstorm.results.trials import final_of

ROLES = ("local", "network")
STEPS = 8
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
        raise DependencyError("wrk is not installed: run scripts/setup.sh --lab as root")
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


def trace_views(env: Env, state: LabState, views: int, output: Path, run_id: str = "") -> float:
    """`statstorm trace` of the lab's pool while `views` page views are fetched (the trace
    carrying `run_id`); its metadata calls per request."""
    return page_views.trace_views(env, trace_cmd.views_tracer(views, run_id), lab=state.name,
                                  pool=None, urls=(state.url + state.entry_path,),
                                  output=output, views=views, name="statstorm-demo-trace")


# -- the pipeline ---------------------------------------------------------------------------------
ApplyResult = apply_cmd.ApplyResult  # what apply answers the pipeline (and its verbs' hooks)


def carry_over(env: Env, applied: apply_cmd.ApplyResult, pair: Pair) -> list[str]:
    """The target's PHP and app changes made on the reference too (a lab: its own files, its
    app's files under its own code), so the ratio after measures the storage, not the
    settings or the app's own cache; the lines made."""
    changes = []
    for c in applied.changes:
        if c.kind in (applyplan.POOL_INI, applyplan.POOL):
            changes.append(c)
        elif c.kind == applyplan.APP:
            where = carried_path(c.where, pair.target, pair.reference)
            if where is not None:
                changes.append(replace(c, where=where))
    if not changes or not pair.reference.lab:
        return []
    aopts = apply_cmd.ApplyOptions(lab=pair.reference.lab, all=True, yes=True)
    target = apply_cmd.resolve(env, aopts)
    placed, edits = apply_target.plan_edits(target, changes)
    if edits:
        apply_cmd.execute(env, apply_cmd.ApplyResult(ApplyMode.DRY_RUN, target, placed, edits),
                          aopts)
    return [c.line for c in placed if c.kind != applyplan.MANUAL]


@dataclass(frozen=True)
class Steps:
    """What the pipeline calls to touch the system (the real ones by default)."""

    measure: Callable[..., Phase] = interleaved.measure
    pages: Callable[[tuple[str, ...]], tuple[Page, ...]] = interleaved.pages_of
    trace: Callable[..., float] = page_views.trace_views
    check: Callable[[Env, check_cmd.CheckOptions], CheckResult] = check_cmd.run
    predict: Callable[..., Prediction] = whatif_cmd.predict_findings
    apply: Callable[[Env, apply_cmd.ApplyOptions], apply_cmd.ApplyResult] = apply_cmd.run
    mirror: Callable[[Env, apply_cmd.ApplyResult, Pair], list[str]] = carry_over
    report: Callable[[Record[Any]], None] = Record.report


@dataclass(frozen=True)
class Job:
    """What the pipeline is asked, and how its lines name the two sides."""

    views: int
    load: interleaved.Load
    both: str  # "both labs", "the pool and its shadow"
    yes: bool = True  # without it: apply's dry run, and the run ends there
    mirror: bool = True  # the escalation may end with a local mirror of the code
    # the verb's own fields: after `apply --all` (a dry run or not), after the fix
    planned: Callable[[Record[Any], apply_cmd.ApplyResult], None] = lambda rec, result: None
    fixed: Callable[[Record[Any], apply_cmd.ApplyResult, list[str]], None] = \
        lambda rec, applied, carried: None


def check_options(side: Member, trace: Path,
                  local_ratio: float | None = None) -> check_cmd.CheckOptions:
    if side.lab:
        return check_cmd.CheckOptions(lab=side.lab, trace=trace, local_ratio=local_ratio)
    return check_cmd.CheckOptions(pools=(side.pool or "",), trace=trace, local_ratio=local_ratio)


def record_apply(rec: Record[Any], job: Job, result: apply_cmd.ApplyResult, name: str) -> None:
    rec.write("apply", name, result.to_json())
    rec.save(manual=tuple(c.line for c in result.manual))
    job.planned(rec, result)


def pipeline(env: Env, job: Job, pair: Pair, rec: Record[Any], steps: Steps) -> None:
    """Steps 2 to 8 on `pair`, each result saved in `rec` as it comes."""
    target, run_id = pair.target, rec.result.run_id or ""
    pages: list[Page] = []  # the target's pages before anything changed: both sides' measure

    def measure(label: str) -> Phase:
        if not pages:
            pages.extend(steps.pages(target.urls))
        return steps.measure(env, pair.reference.target(tuple(pages)),
                             target.target(tuple(pages)), job.load, label, rec.log)

    def trace(name: str, key: str) -> float:
        calls = steps.trace(env, trace_cmd.views_tracer(job.views, run_id), **target.names(),
                            urls=target.urls, output=rec.out / name, views=job.views,
                            name=f"statstorm-{rec.verb}-trace")
        rec.link(key, name)
        return calls

    def on_target(**kw: object) -> apply_cmd.ApplyOptions:
        return apply_cmd.ApplyOptions(**target.names(), **kw)  # type: ignore[arg-type]

    rec.step(2, f"before: {job.both} under the same load, rounds interleaved…")
    before = measure("before")
    rec.save(before=before)

    rec.step(3, f"find: tracing {job.views} page views of {target.label}, then check…")
    trace_path = rec.out / "before.sst.gz"
    calls = trace(trace_path.name, "trace_before")
    chk = steps.check(env, check_options(target, trace_path))
    rec.write("check_before", "check-before.json", chk.to_json())
    rec.save(metadata_calls_per_request=PerRequest(before=calls, keys=("before",)),
             findings_before=tuple(f"{f.severity}: {f.id}" for f in chk.findings))

    rec.step(4, "predict: whatif of check's PHP changes, forecast of the storage changes…")
    settings = {k: str(v) for k, v in (chk.pools[0].settings if chk.pools else {}).items()}
    # what `apply --all` makes: the findings it leaves out (the escalation's among them, tried
    # in step 7) are no part of the `after` this predicts
    predicted = steps.predict([f for f in chk.findings if f.id not in applyplan.NAMED_ONLY],
                              settings, trace_path, before.network.round_trips_per_request)
    rec.save(predicted=predicted, predicted_at=now(), metadata_calls_per_request=PerRequest(
        before=calls, predicted=predicted.metadata_calls_per_request,
        keys=("before", "predicted")))
    rec.log(whatif_cmd.prediction_line(predicted, before.network.round_trips_per_request))

    if not job.yes:
        rec.step(5, f"fix (dry run): statstorm apply --all on {target.label}; nothing changes "
                    "without --yes…")
        record_apply(rec, job, steps.apply(env, on_target(all=True, trace=trace_path)),
                     "apply-plan.json")
        return
    rec.step(5, f"fix: statstorm apply --all --yes on {target.label}, the same PHP and app "
                f"settings on {pair.reference.label}…")
    applied = steps.apply(env, on_target(all=True, yes=True, trace=trace_path))
    record_apply(rec, job, applied, "apply.json")
    made = [c for c in applied.changes if c.kind != applyplan.MANUAL]
    rec.save(applied=tuple(sorted({c.finding for c in made})), applied_at=now())
    job.fixed(rec, applied, steps.mirror(env, applied, pair))

    rec.step(6, f"after: {job.both} under the same load again…")
    try:
        after = measure("after")
    except NotSamePage as exc:
        if exc.role != target.role:
            raise
        rec.log(f"{exc}: rolling back apply --all on {target.label}…")
        steps.apply(env, on_target(rollback=True))
        raise NotSamePage(f"apply --all changed {target.label}'s page, so it was rolled back: "
                          f"{exc}", exc.role) from None
    rec.save(after=after)

    def write(rule_id: str, tried: Applied) -> None:
        rec.write(f"apply_{rule_id}", f"apply-{rule_id}.json", tried.to_json())
    # the escalation's candidates as check sees the target now: after apply --all (a content
    # cache waits for the metadata tier), with the gap to the reference measured in step 6 as
    # evidence (a pool whose time goes to reading data files through a FUSE client is
    # network-bound whatever the trace's share of metadata calls)
    def gap() -> float | None:
        """The target's latest ratio to its reference (after apply --all, or with the last
        change kept), as check's evidence while it is below the goal."""
        end = final_of(after, rec.result.trials)
        ratio = end.phase.ratio_rps if end is not None else after.ratio_rps
        return None if escalation.reached(ratio) else ratio
    reported, below = chk, gap()
    if below is not None:  # step 7's line (and fault point) first, then its re-check
        rec.step(7, f"escalation: re-checking {target.label} with the ratio measured after "
                    f"apply --all ({below:g}x of {pair.reference.label}, below "
                    f"{escalation.TARGET_RATIO:g}x)…")
        reported = steps.check(env, check_options(target, trace_path, below))
        rec.write("check_escalation", "check-escalation.json", reported.to_json())
    escalate(rec, [f.id for f in reported.findings], job.mirror, target.args, after,
             Tries(apply=lambda i: steps.apply(env, on_target(findings=(i,), yes=True,
                                                               trace=trace_path,
                                                               local_ratio=gap())),
                   rollback=lambda: steps.apply(env, on_target(rollback=True)),
                   measure=measure, write=write),
             rec.log if below is not None else lambda text: rec.step(7, text), rec.log)

    rec.step(8, f"prove: a second trace and check of {target.label}…")
    after_trace = rec.out / "after.sst.gz"
    calls_after = trace(after_trace.name, "trace_after")
    chk2 = steps.check(env, check_options(target, after_trace, gap()))  # --yes only: a dry run ended at step 5
    rec.write("check_after", "check-after.json", chk2.to_json())
    still = {f.id for f in chk2.findings}
    # the second trace sees the escalation's kept changes too, which the prediction did not
    kept = tuple(f"{t.finding} (kept by the escalation, after the prediction)"
                 for t in rec.result.trials if t.kept)
    if kept:
        predicted = replace(predicted, not_modelled_calls=(
            *(predicted.not_modelled_calls or ()), *kept))
        rec.save(predicted=predicted)
    rec.save(metadata_calls_per_request=PerRequest(calls, calls_after,
                                                   predicted.metadata_calls_per_request),
             findings_after=tuple(f"{f.severity}: {f.id}" for f in chk2.findings),
             manual=tuple(dict.fromkeys(c.line for c in applied.manual if c.finding in still)))


# -- the demo ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DemoSteps(Steps):
    """The pipeline's steps and the demo's labs (made and removed)."""

    up: Callable[[Env, lab_build.LabOptions], LabState] = lab_build.up
    down: Callable[..., bool] = lab_build.down


@contextmanager
def lab_pair(env: Env, opts: DemoOptions, rec: Record[DemoResult],
             steps: DemoSteps) -> Iterator[Pair]:
    """Step 1: both labs, the reference and the target; removed after the block whatever
    happens, unless `keep` (a lab that cannot be removed is a note)."""
    states: dict[str, LabState] = {}
    rec.step(1, f"two labs: {opts.app} on local disk and on {opts.storage} (default options)…")
    try:
        for role in ROLES:
            st = steps.up(env, lab_build.LabOptions(
                name=lab_name(opts, role), app=opts.app,
                storage="local" if role == "local" else opts.storage, workers=opts.workers,
                php=opts.php, storage_delay_us=0 if role == "local" else opts.storage_delay_us))
            states[role] = st
            rec.save(labs={**rec.result.labs, role: Lab(st.name, st.url + st.entry_path)})
        yield Pair(lab_member(env, states["local"], "local"),
                   lab_member(env, states["network"], "network"))
    finally:
        notes = list(rec.result.notes)
        if not opts.keep:
            for role in reversed(ROLES):
                name = lab_name(opts, role)
                if role in states or labs.lab_dir(env, name).exists():
                    try:
                        steps.down(env, name, quiet=True)
                    except StatstormError as exc:
                        notes.append(f"lab {name}: {exc}")
        if rec.out.is_dir():
            rec.save(notes=tuple(notes))


def run(env: Env, opts: DemoOptions, say: Callable[[str], None] | None = None,
        steps: DemoSteps = DemoSteps()) -> DemoResult:
    validate(env, opts)
    out = opts.output_dir
    out.mkdir(parents=True, exist_ok=True)
    run_id = new_run_id()  # in demo.json, its result files and its traces' headers
    rec: Record[DemoResult] = Record(
        DemoResult(opts.app, opts.storage, str(out), run_id=run_id, kept=opts.keep,
                   storage_delay_us=opts.storage_delay_us,
                   php="" if release(opts.php).host else release(opts.php).version),
        out / "demo.json", "demo", STEPS, say or env.log)

    def fixed(rec_: Record[Any], applied: apply_cmd.ApplyResult,
              carried: list[str]) -> None:
        made = [c.line for c in applied.changes if c.kind != applyplan.MANUAL]
        try:
            mount = labs.load(env, lab_name(opts, "network")).mount_options
        except (StatstormError, OSError, ValueError):
            mount = None
        rec_.save(settings={"network": LabSettings(tuple(dict.fromkeys(made)), mount),
                            "local": LabSettings(tuple(carried))})

    job = Job(opts.views, interleaved.Load(opts.rounds, opts.duration_s, opts.warmup_s,
                                           opts.concurrency), "both labs",
              fixed=fixed)
    try:
        with lab_pair(env, opts, rec, steps) as pair:
            pipeline(env, job, pair, rec, steps)
    finally:
        rec.close()
        steps.report(rec)
    return rec.result
