"""`statstorm tune`: the demo's job on the user's own running pool.

A shadow of the pool on local disk is the reference (adapters/labs/shadow.py: its code tree
copied, a php-fpm with the pool's own settings, a loopback nginx), then, as the demo does:

1. **shadow**: the pool's site's docroot copied, the shadow started;
2. **before**: the pool (through the given URLs) and the shadow (the same paths) under the
   same closed-model load, rounds interleaved (adapters/load/interleaved.py);
3. **find**: `trace` of the pool during page views of the URLs, `check --trace`;
4. **predict**: `whatif` of check's PHP changes and the round-trip forecast, printed before
   anything changes;
5. **fix**: without `yes`, `apply --all` as a dry run (its diffs) and the run ends there;
   with `yes`, `apply --all --yes` on the pool and the same PHP and app settings on the shadow;
6. **after**: the same interleaved measurement again;
7. **escalation** (with `yes`, while the pool is below 0.90x of its shadow): the changes
   `apply --all` leaves out that check proposed (model/escalation.py: GlusterFS's content
   caches, OPcache's timestamps off with its deploy step, last a local mirror of the code
   unless `mirror` is off), least invasive first, each applied alone by name, both sides
   measured again, and kept only when the pool's throughput over its shadow's rose by more
   than `results.tune.KEEP_MARGIN` (5 %) over the ratio without it; else `apply --rollback`
   undoes it (its backup set is the last one).

`tune.json` is rewritten after every step; the shadow is removed whatever happens.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, ContextManager

from statstorm import faults
from statstorm.adapters.apply import apply_target
from statstorm.adapters.labs import php_roots, shadow as shadows, shadow_site
from statstorm.adapters.load import http, interleaved
from statstorm.adapters.load.wrk import Wrk
from statstorm.adapters.php import php_targets
from statstorm.adapters.servers import nginx
from statstorm.adapters.storage import round_trips
from statstorm.adapters.tracing import page_views
from statstorm.commands import apply as apply_cmd, check as check_cmd
from statstorm.commands import trace as trace_cmd, whatif as whatif_cmd
from statstorm.env import Env
from statstorm.errors import DependencyError, PrivilegeError, UsageError
from statstorm.model import applyplan, escalation
from statstorm.results.apply import ApplyMode
from statstorm.results.common import write_json_atomic
from statstorm.results.check import CheckResult
from statstorm.results.demo import Lab, PerRequest, Phase, Prediction, new_run_id, with_run_id
from statstorm.results.jsontypes import JsonObject
from statstorm.results.lab import LabState
from statstorm.results.php_root import release
from statstorm.results.sites import Site
from statstorm.results.tune import KEEP_MARGIN, Skipped, TuneResult, judge

LOOPBACK_FIX = ("tune loads and copies a pool of this machine only: give its site's URL on "
                "127.0.0.1, ::1 or localhost")


@dataclass(frozen=True)
class TuneOptions:
    pool: str
    urls: tuple[str, ...]
    yes: bool = False
    output_dir: Path = Path("statstorm-tune")
    rounds: int = 3
    duration_s: float = 8.0
    warmup_s: float = 3.0
    concurrency: int = 4
    views: int = 10  # page views traced
    mirror: bool = True  # the escalation may end with a local mirror of the code (--no-mirror)
    php: str = ""  # the shadow's PHP version ('' = the pool's own, in its root if it has one)

    def load(self) -> interleaved.Load:
        return interleaved.Load(self.rounds, self.duration_s, self.warmup_s, self.concurrency)


def validate_options(opts: TuneOptions) -> None:
    """The options alone (no root, no system read): one line each."""
    if not opts.pool:
        raise UsageError("--pool NAME is required: the php-fpm pool to tune (e.g. www)")
    if not opts.urls:
        raise UsageError("--url URL is required: a page of the site the pool serves, e.g. "
                         "--url http://127.0.0.1/index.php")
    for url in opts.urls:
        http.check_loopback(url, False, LOOPBACK_FIX)
    if not 1 <= opts.rounds <= 10:
        raise UsageError("--rounds must be between 1 and 10")
    if not 1 <= opts.duration_s <= 120:
        raise UsageError("--duration must be between 1 and 120 s")
    if not 0 <= opts.warmup_s <= 60:
        raise UsageError("--warmup must be between 0 and 60 s")
    if not 1 <= opts.concurrency <= 64:
        raise UsageError("--concurrency must be between 1 and 64")
    if not 1 <= opts.views <= 200:
        raise UsageError("--views must be between 1 and 200")
    if opts.php:
        release(opts.php)  # one of the versions statstorm runs
    out = opts.output_dir
    if out.exists() and not out.is_dir():
        raise UsageError(f"-o {out}: a file of that name exists; choose a directory")


def validate(env: Env, opts: TuneOptions) -> None:
    validate_options(opts)
    if not env.is_root():
        raise PrivilegeError("statstorm tune starts a shadow php-fpm and nginx and traces the "
                             "pool: run it as root")
    if Wrk().available() is None:
        raise DependencyError("wrk is not installed: run scripts/setup.sh as root")


# -- the pool, its site and its shadow -------------------------------------------------------------
@dataclass(frozen=True)
class Resolved:
    """The pool's site serving the URLs and the shadow to make of it."""

    site: Site
    plan: shadows.ShadowPlan


def resolve(env: Env, opts: TuneOptions) -> Resolved:
    pool = php_targets.find_pool(opts.pool)
    directives = pool.directives(env)
    listen = directives.get("listen", "")
    site = shadow_site.site_of(opts.pool, listen, nginx.sites_passing_to(None, listen) if listen else (),
                   opts.urls)
    ini, notes = shadows.master_ini(php_targets.settings_args(pool.argv))
    binary = shadow_binary(env, pool.binary, opts.php)
    notes.append(shadows.php_note(binary) if binary == pool.binary else
                 f"{shadows.php_note(binary).removesuffix(', as the pool does')}; the pool runs "
                 f"PHP {shadows.php_of(pool.binary)[0] or '?'}: the ratio measures the PHP "
                 "versions as well as the storage")
    return Resolved(site, shadows.ShadowPlan(
        pool=opts.pool, lab=shadows.lab_name(opts.pool), source=site.known_docroot,
        binary=binary, ini=ini, directives=directives,
        workers=shadows.workers_of(directives), user=directives.get("user") or "www-data",
        front=shadow_site.front_controller(opts.urls[0]), notes=tuple(notes)))


def shadow_binary(env: Env, pool_binary: str, version: str) -> str:
    """The shadow's php-fpm: the pool's own; with --php another version's (the host's, or
    from its PHP root, which must be built)."""
    if not version:
        return pool_binary
    rel = release(version)
    if rel.version == shadows.php_of(pool_binary)[0]:
        return pool_binary
    if rel.host:
        return f"/usr/sbin/php-fpm{rel.version}"
    root = php_roots.root_dir(env, rel)
    if php_roots.load(root) is None:
        raise UsageError(f"--php {rel.version}: its PHP root is not built: run `statstorm lab "
                         f"php-root build {rel.version}` first")
    return str(root / rel.fpm.lstrip("/"))


def mirror(env: Env, applied: apply_cmd.ApplyResult, docroot: str, state: LabState) -> list[str]:
    """The pool's PHP and app changes made on the shadow too (its own files), so the ratio
    after measures the storage, not the settings; the lines made."""
    changes = []
    for c in applied.changes:
        if c.kind in (applyplan.POOL_INI, applyplan.POOL):
            changes.append(c)
        elif c.kind == applyplan.APP and c.where.startswith(docroot.rstrip("/") + "/"):
            changes.append(replace(c, where=state.docroot + c.where[len(docroot.rstrip("/")):]))
    if not changes:
        return []
    aopts = apply_cmd.ApplyOptions(lab=state.name, all=True, yes=True)
    target = apply_cmd.resolve(env, aopts)
    placed, edits = apply_target.plan_edits(target, changes)
    if edits:
        apply_cmd.execute(env, apply_cmd.ApplyResult(ApplyMode.DRY_RUN, target, placed, edits),
                          aopts)
    return [c.line for c in placed if c.kind != applyplan.MANUAL]


# -- the steps, injectable for tests -----------------------------------------------------------------
@dataclass(frozen=True)
class Steps:
    """What `run` calls to touch the system (the real ones by default)."""

    resolve: Callable[[Env, TuneOptions], Resolved] = resolve
    shadow: Callable[[Env, shadows.ShadowPlan, Callable[[str], None]],
                     ContextManager[LabState]] = shadows.running
    measure: Callable[..., Phase] = interleaved.measure
    window: Callable[[Env, str], round_trips.Window | None] = round_trips.window_for
    trace: Callable[..., float] = page_views.trace_views
    check: Callable[[Env, check_cmd.CheckOptions], CheckResult] = check_cmd.run
    predict: Callable[..., Prediction] = whatif_cmd.predict_findings
    apply: Callable[[Env, apply_cmd.ApplyOptions], apply_cmd.ApplyResult] = apply_cmd.run
    mirror: Callable[[Env, apply_cmd.ApplyResult, str, LabState], list[str]] = mirror


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class _Run:
    """The result as it grows, written to tune.json after every step."""

    def __init__(self, result: TuneResult, path: Path) -> None:
        self.result, self.path = result, path

    def save(self, **changes: object) -> None:
        self.result = replace(self.result, **changes)  # type: ignore[arg-type]
        write_json_atomic(self.path, self.result.to_json())

    def write(self, name: str, data: JsonObject) -> str:
        assert self.result.run_id is not None
        write_json_atomic(self.path.parent / name, with_run_id(data, self.result.run_id))
        return name


def run(env: Env, opts: TuneOptions, say: Callable[[str], None] | None = None,
        steps: Steps = Steps(), found: Resolved | None = None) -> TuneResult:
    """The whole job (`found`: the pool's site and shadow plan, when already resolved)."""
    validate(env, opts)
    log = say or env.log
    found = found or steps.resolve(env, opts)
    plan, docroot = found.plan, found.plan.source
    total = 7 if opts.yes else 5
    out = opts.output_dir
    out.mkdir(parents=True, exist_ok=True)
    run_id = new_run_id()
    tune = _Run(TuneResult(opts.pool, opts.urls, str(out), run_id=run_id, docroot=docroot,
                           dry_run=not opts.yes, notes=plan.notes), out / "tune.json")
    t0 = time.monotonic()
    timings: dict[str, float] = {}
    mark = [t0]
    files = {"tune": tune.path.name}

    def step(n: int, text: str) -> None:
        now = time.monotonic()
        if n > 1:
            timings[f"step{n - 1}"] = round(now - mark[0], 1)
        mark[0] = now
        faults.phase(f"tune/step-{n}")
        log(f"[{n}/{total}] {text}")

    try:
        step(1, f"shadow: pool {opts.pool}'s code ({docroot}) copied to local disk, a php-fpm "
                "with its settings behind a loopback nginx…")
        with steps.shadow(env, plan, log) as shadow:
            tune.save(shadow=Lab(shadow.name, shadow.url), timings_s=dict(timings))
            local = interleaved.Target("local", shadow_site.shadow_urls(shadow.url, opts.urls))
            network = interleaved.Target("network", opts.urls,
                                         lambda: steps.window(env, docroot))

            step(2, "before: the pool and its shadow under the same load, rounds interleaved…")
            before = steps.measure(env, local, network, opts.load(), "before", log)
            tune.save(before=before, timings_s=dict(timings), files=dict(files))

            step(3, f"find: tracing {opts.views} page views of pool {opts.pool}, then check…")
            trace_path = out / "before.sst.gz"
            calls = steps.trace(env, trace_cmd.views_tracer(opts.views, run_id), lab=None,
                                pool=opts.pool, urls=opts.urls, output=trace_path,
                                views=opts.views, name="statstorm-tune-trace")
            files["trace_before"] = trace_path.name
            chk = steps.check(env, check_cmd.CheckOptions(pools=(opts.pool,), trace=trace_path))
            files["check_before"] = tune.write("check-before.json", chk.to_json())
            tune.save(metadata_calls_per_request=PerRequest(before=calls, keys=("before",)),
                      findings_before=tuple(f"{f.severity}: {f.id}" for f in chk.findings),
                      files=dict(files), timings_s=dict(timings))

            step(4, "predict: whatif of check's PHP changes, forecast of the storage changes…")
            settings = {k: str(v) for k, v in (chk.pools[0].settings if chk.pools else {}).items()}
            # what `apply --all` makes: the findings it leaves out (measure-first ones among
            # them, tried in step 7) are no part of the `after` this predicts
            predicted = steps.predict([f for f in chk.findings if f.id not in applyplan.NAMED_ONLY],
                                      settings, trace_path, before.network.round_trips_per_request)
            tune.save(predicted=predicted, predicted_at=_now(), timings_s=dict(timings),
                      metadata_calls_per_request=PerRequest(
                          before=calls, predicted=predicted.metadata_calls_per_request,
                          keys=("before", "predicted")))
            log(whatif_cmd.prediction_line(predicted, tune.result.round_trips().before))

            if not opts.yes:
                step(5, f"fix (dry run): statstorm apply --all on pool {opts.pool}; nothing "
                        "changes without --yes…")
                plan_ = steps.apply(env, apply_cmd.ApplyOptions(pool=opts.pool, all=True,
                                                                trace=trace_path))
                _record_apply(tune, files, plan_, "apply-plan.json", timings)
                return tune.result

            step(5, f"fix: statstorm apply --all --yes on pool {opts.pool}, the same PHP and "
                    "app settings on the shadow…")
            applied = steps.apply(env, apply_cmd.ApplyOptions(pool=opts.pool, all=True, yes=True,
                                                              trace=trace_path))
            _record_apply(tune, files, applied, "apply.json", timings)
            made = [c for c in applied.changes if c.kind != applyplan.MANUAL]
            tune.save(applied=tuple(sorted({c.finding for c in made})), applied_at=_now())
            mirrored = steps.mirror(env, applied, docroot, shadow)
            if mirrored:
                tune.save(notes=(*tune.result.notes,
                                 f"on the shadow too: {'; '.join(mirrored)}"))

            step(6, "after: the pool and its shadow under the same load again…")
            after = steps.measure(env, local, network, opts.load(), "after", log)
            tune.save(after=after, timings_s=dict(timings))

            escalate(env, opts, steps, tune, files, timings, chk, trace_path, local, network,
                     after, lambda text: step(7, text), log)
    finally:
        timings["total"] = round(time.monotonic() - t0, 1)
        if out.is_dir():
            tune.save(timings_s=dict(timings), files=dict(files))
    return tune.result


def escalate(env: Env, opts: TuneOptions, steps: Steps, tune: _Run, files: dict[str, str],
             timings: dict[str, float], chk: CheckResult, trace_path: Path,
             local: interleaved.Target, network: interleaved.Target, after: Phase,
             step: Callable[[str], None], log: Callable[[str], None]) -> None:
    """Step 7: while the pool stays below TARGET_RATIO of its shadow, each change of the
    escalation check proposed (model/escalation.py, least invasive first) applied alone by
    name, both sides measured again, kept only when the ratio rose by more than KEEP_MARGIN
    over the ratio without it; else `apply --rollback` undoes it at once."""
    todo, left_out = escalation.plan([f.id for f in chk.findings], opts.mirror)
    skipped = [Skipped(i, why) for i, why in left_out]
    baseline = after
    if escalation.reached(after.ratio_rps):
        skipped += [Skipped(i, f"the pool was at {after.ratio_rps:g}x of its shadow after "
                               f"apply --all: at or above {escalation.TARGET_RATIO:g}x, not "
                               "tried") for i in todo]
        todo = []
    step("escalation: " + (", ".join(todo) + " tried one at a time, least invasive first, "
                           f"while the ratio is below {escalation.TARGET_RATIO:g}x; each kept only "
                           f"when the ratio rises by more than {KEEP_MARGIN:.0%}…" if todo
                           else "no change to try"))
    tune.save(skipped=tuple(skipped))
    for n, rule_id in enumerate(todo):
        if escalation.reached(baseline.ratio_rps):
            skipped += [Skipped(i, f"the pool reached {baseline.ratio_rps:g}x of its shadow: "
                                   "not tried") for i in todo[n:]]
            break
        price = escalation.price(rule_id, opts.pool)
        log(f"{rule_id}: trying it; its price: {price}")
        tried = steps.apply(env, apply_cmd.ApplyOptions(
            pool=opts.pool, findings=(rule_id,), yes=True, trace=trace_path))
        files[f"apply_{rule_id}"] = tune.write(f"apply-{rule_id}.json", tried.to_json())
        if tried.mode != ApplyMode.APPLIED:
            skipped.append(Skipped(rule_id, f"apply made nothing ({ApplyMode(tried.mode).value}"
                                   + (f": {tried.reason}" if tried.reason else "")
                                   + "); not measured"))
            tune.save(skipped=tuple(skipped), files=dict(files))
            continue
        phase = steps.measure(env, local, network, opts.load(), f"with {rule_id}", log)
        trial = judge(rule_id, phase, baseline, price)
        if trial.kept:
            baseline = phase
        else:
            steps.apply(env, apply_cmd.ApplyOptions(pool=opts.pool, rollback=True))
        log(f"{rule_id}: {trial.why}")
        tune.save(trials=(*tune.result.trials, trial), files=dict(files),
                  timings_s=dict(timings), skipped=tuple(skipped),
                  applied=(*tune.result.applied, rule_id) if trial.kept
                  else tune.result.applied)
    tune.save(skipped=tuple(skipped))


def _record_apply(tune: _Run, files: dict[str, str], result: apply_cmd.ApplyResult, name: str,
                  timings: dict[str, float]) -> None:
    files["apply"] = tune.write(name, result.to_json())
    tune.save(planned=tuple(dict.fromkeys(c.line for c in result.changes
                                          if c.kind != applyplan.MANUAL)),
              diffs=tuple(e.diff() for e in result.edits),
              manual=tuple(c.line for c in result.manual), files=dict(files),
              timings_s=dict(timings))
