"""`statstorm apply`: make the changes `statstorm check` recommends, safely, and prove them.

Default is a dry run: the findings' changes as unified diffs of the files they go to. With
`yes`: every file is backed up first (`<state root>/apply/<stamp>-<pool>/`), written through a
temp file + rename, checked with `php-fpm -t` (and `nginx -t` when nginx changes), then the
php-fpm master (and nginx) reload gracefully; if a check fails, the reload fails or the pool
stops answering, the files are restored and reloaded again. With `verify`: a short traced
sweep before and after, with the same method; a change that made things worse is rolled back.

It touches only the pool's php-fpm configuration file, a file of its own in the FPM SAPI's
conf.d (settings only the master reads), the nginx files that pass requests to the pool and
/etc/fstab's line for a code mount; in a lab, only the lab's own files and volume.

Storage changes are live steps, undone like files: a GlusterFS volume option is set with
`gluster volume set` (the old value kept), and a GlusterFS FUSE mount gets new options from a
second client stacked on its mount point (a FUSE mount cannot change them in place, and
unmounting first would fail every request in between); open files stay with the client below,
and undoing unmounts the new one, which brings the old options back.
"""

from __future__ import annotations

import dataclasses
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, TypeVar

from statstorm import faults
from statstorm.adapters.apply import (apply_steps, apply_target, backups, mirror, pool_config,
                                      storage_steps)
from statstorm.adapters.load import http, interleaved
from statstorm.adapters.php import by_site
from statstorm.adapters.storage import afs_client, fstab
from statstorm.adapters.apply.pool_config import ApplyFailed, Target
from statstorm.adapters.tracing.trace_thread import Tracer
from statstorm.commands import check as check_cmd
from statstorm.commands import sweep as sweep_cmd
from statstorm.commands import trace as trace_cmd
from statstorm.commands import whatif as whatif_cmd
from statstorm.env import Env
from statstorm.errors import ComponentError, PrivilegeError, UsageError
from statstorm.model import applyplan
from statstorm.model.applyplan import MANUAL, MOUNT, NAMED_ONLY, VOLUME, Change
from statstorm.model.finding import Finding
from statstorm.model.rules import RULES
from statstorm.results.apply import SCHEMA, ApplyMode, FileEdit, StorageStep
from statstorm.results.apply_verify import Measurement, Prediction, Settling, Verify
from statstorm.results.jsontypes import JsonObject
from statstorm.results.page import Page
from statstorm.results.sweep import LevelResult
from statstorm.results.trace import read_trace

T = TypeVar("T")



@dataclass(frozen=True)
class ApplyOptions:
    findings: tuple[str, ...] = ()
    all: bool = False
    pool: str | None = None
    lab: str | None = None
    yes: bool = False
    verify: bool = False
    rollback: bool = False
    fstab: bool = True  # keep a mount's new options in fstab (adapters/storage/fstab.py)
    trace: Path | None = None
    url: str = ""  # --verify on a pool: the page to load
    verify_duration_s: float = 5.0
    verify_concurrency: int = 4
    verify_settle_s: float = 60.0  # after the change: measure again until settled, this long
    apache: bool = False  # the system Apache's PHP (mod_php, mod_fcgid)
    site: str = ""  # a site's URL: the PHP target serving it (and --url's default)
    local_ratio: float | None = None  # check's evidence of a network-bound pool (tune's shadow)


@dataclass
class ApplyResult:
    mode: ApplyMode
    target: Target | None
    changes: list[Change] = field(default_factory=list)
    edits: list[FileEdit] = field(default_factory=list)
    steps: list[StorageStep] = field(default_factory=list)
    not_found: list[str] = field(default_factory=list)  # asked-for ids check did not report
    backup: str = ""
    reason: str = ""  # why it was rolled back
    verify: Verify | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def manual(self) -> list[Change]:
        return [c for c in self.changes if c.kind == MANUAL]

    def to_json(self) -> JsonObject:
        return {"schema": SCHEMA, "mode": ApplyMode(self.mode).value,
                "target": self.target.to_json() if self.target else None,
                "changes": [c.to_json() for c in self.changes if c.kind != MANUAL],
                "manual": [c.to_json() for c in self.manual],
                "files": [{"path": str(e.path), "created": e.before is None, "diff": e.diff()}
                          for e in self.edits],
                "storage": [st.to_json() for st in self.steps],
                "not_found": list(self.not_found), "backup": self.backup or None,
                "reason": self.reason or None,
                "verify": self.verify.to_json() if self.verify else None, "notes": list(self.notes)}


def validate(env: Env, opts: ApplyOptions) -> None:
    if sum(map(bool, (opts.pool, opts.lab, opts.apache, opts.site))) > 1:
        raise UsageError("give one of --pool, --lab, --apache or --site, not several")
    if opts.rollback and (opts.findings or opts.all or opts.verify or not opts.fstab):
        raise UsageError("--rollback restores the last backup set: give it alone (with --lab or "
                         "--pool)")
    if not opts.rollback and not opts.findings and not opts.all:
        raise UsageError("name the findings to apply (ids from `statstorm check`) or give --all")
    if opts.findings and opts.all:
        raise UsageError("give finding ids or --all, not both")
    unknown = [f for f in opts.findings if f not in RULES]
    if unknown:
        raise UsageError(f"unknown finding id {unknown[0]!r}: see `statstorm check` or "
                         "docs/check.md for the ids")
    if opts.verify and not opts.yes:
        raise UsageError("--verify measures an applied change: add --yes")
    if opts.verify and opts.apache:
        raise UsageError("--verify measures a php-fpm pool or a lab; drop it for --apache and "
                         "trace before and after with `statstorm trace --apache`")
    if opts.verify and not opts.lab and not opts.url:
        raise UsageError("--verify on a pool needs the page to load: add --url URL")
    if opts.url:
        try:
            http.check_loopback(opts.url, False)
        except UsageError:
            raise UsageError(f"--url {opts.url}: give an http(s) page of this machine's server "
                             "(127.0.0.1, ::1 or localhost)") from None
    if (opts.yes or opts.rollback) and not env.is_root():
        raise PrivilegeError("statstorm apply --yes/--rollback writes configuration files and "
                             "signals php-fpm: run it as root")


# -- target --------------------------------------------------------------------------------------
def resolve(env: Env, opts: ApplyOptions) -> Target:
    return apply_target.resolve(env, lab=opts.lab, pool=opts.pool, url=opts.url,
                                apache=opts.apache)


# -- planning -----------------------------------------------------------------------------------
def _as_manual(changes: list[Change], why: str) -> list[Change]:
    """One manual step per distinct line (a mount line gives one change per option)."""
    out: dict[str, Change] = {}
    for c in changes:
        out.setdefault(c.line, Change(c.finding, MANUAL, "", "", c.line, why, where=c.where))
    return list(out.values())


def plan_storage(env: Env, target: Target, changes: list[Change], keep: bool = True,
                 ) -> tuple[list[Change], list[StorageStep], list[FileEdit], list[str]]:
    """The live steps that carry the MOUNT and VOLUME changes (and MIRROR's copy), and (with
    `keep`) the edit of fstab that keeps the mounts' new options; the ones apply cannot make
    become manual, with the reason."""
    out = [c for c in changes if c.kind not in (MOUNT, VOLUME)]
    groups: dict[tuple[str, str], list[Change]] = {}
    for c in changes:
        if c.kind in (MOUNT, VOLUME):
            groups.setdefault((c.kind, c.where), []).append(c)
    steps: list[StorageStep] = []
    for (kind, where), cs in groups.items():
        options = {c.key: c.value for c in cs}
        made = (storage_steps.mount_step(where, options) if kind == MOUNT
                else storage_steps.volume_step(env, where, options))
        if isinstance(made, str):
            out += _as_manual(cs, made)
            continue
        out += [dataclasses.replace(c, current=made.before.get(c.key)) for c in cs]
        if made.before != made.after:
            steps.append(made)
    persist = [fstab.Persist(st.where, st.after, storage_steps.live_options(st))
               for st in steps if st.kind == MOUNT and not afs_client.is_afs(st.where)]
    edit = fstab.plan(target.fstab, persist) if target.fstab and persist and keep else None
    out, copies, notes = mirror.plan(env, target, out)  # a local mirror of the code
    return out, steps + copies, [edit] if edit else [], notes


def check_fstab(env: Env, result: ApplyResult) -> str:
    """`findmnt --verify` on the planned fstab's lines for the changed mounts: '' when it
    accepts them (or fstab does not change), else why not."""
    target = result.target
    mps = [st.where for st in result.steps if st.kind == MOUNT]
    return next((problem for e in result.edits if target and e.path == target.fstab
                 if (problem := fstab.verify(env, e.after, mps))), "")


def _check(env: Env, opts: ApplyOptions) -> tuple[list[Finding], dict[str, str]]:
    """The pool's findings and live settings, as check sees them with the trace given."""
    env.log("reading the live configuration (statstorm check)…")
    res = check_cmd.run(env, check_cmd.CheckOptions(pools=(opts.pool,) if opts.pool else (),
                                                    lab=opts.lab, trace=opts.trace,
                                                    apache=opts.apache, remembered=False,
                                                    local_ratio=opts.local_ratio))
    settings = res.pools[0].settings if res.pools else {}
    return res.findings, {k: str(v) for k, v in settings.items()}


def plan(env: Env, opts: ApplyOptions) -> ApplyResult:
    """What would change (the dry run), from the findings check reports now."""
    target = resolve(env, opts)
    found, settings = _check(env, dataclasses.replace(opts, apache=True)
                             if target.system_apache else opts)
    chosen = [f for f in found
              if f.id in opts.findings or (opts.all and f.id not in NAMED_ONLY)]
    result = ApplyResult(ApplyMode.DRY_RUN, target,
                         not_found=[i for i in opts.findings if i not in {f.id for f in found}])
    changes = applyplan.merge([c for f in chosen for c in applyplan.classify(f, settings)])
    changes, result.steps, fstab_edits, result.notes = plan_storage(env, target, changes,
                                                                     opts.fstab)
    result.changes, result.edits = apply_target.plan_edits(target, changes)
    result.edits += fstab_edits
    if fstab_edits and (problem := check_fstab(env, result)):
        result.notes.append(f"{problem}: apply --yes refuses it")
    result.notes += [NAMED_ONLY[i] for i in dict.fromkeys(f.id for f in found)
                     if opts.all and i in NAMED_ONLY]
    if not result.edits and not result.steps:
        result.mode = ApplyMode.NOTHING
    if (result.edits or result.steps) and (note := target.reload_note(result.changes)):
        result.notes.append(note)
    return result


# -- verifying ----------------------------------------------------------------------------------
def full_tracer(env: Env, *, lab: str | None, pool: str | None, duration_s: float,
                output: Path, ready: threading.Event, stop: threading.Event,
                ) -> trace_cmd.TraceRun:
    """A full trace (every call, PHP operations) during a load run: whatif's input."""
    return trace_cmd.run(env, trace_cmd.TraceOptions(lab=lab, pool=pool, duration_s=duration_s,
                                                     output=output), ready=ready, stop=stop)


def predict(env: Env, target: Target, opts: ApplyOptions, changes: list[Change],
            ) -> Prediction | None:
    """whatif's prediction of the changes, from a short full trace of the pool before (None:
    the run left no trace)."""
    sets, other = applyplan.whatif_sets(changes)
    env.log("verify: tracing the pool for whatif's prediction…")

    def then(_: LevelResult, traced: Path | None) -> Prediction | None:
        return (Prediction.from_json(whatif_cmd.predict_changes(traced, sets, other))
                if traced else None)
    return _traced_run(env, target, opts, full_tracer, then)


def measure(env: Env, target: Target, opts: ApplyOptions,
            tracer: Tracer = trace_cmd.counting_tracer, page: Page | None = None) -> Measurement:
    """One short traced run at one concurrency (a sweep of one level, after a warm-up):
    throughput, latency and metadata calls per request; with `page`, an answer without its
    title (or of another status) is a failed request."""
    def figures(lv: LevelResult, traced: Path | None) -> Measurement:
        network = read_trace(traced).trailer.get("network") if traced else None
        rt = network.get("per_request") if isinstance(network, dict) else None
        return Measurement(
            rps=round(lv.rps, 1), p50_ms=round(lv.p50, 2), p99_ms=round(lv.p99, 2),
            errors=lv.errors.total, syscalls_per_request=lv.server.file_syscalls_per_request,
            failed_per_request=lv.server.failed_per_request,
            round_trips_per_request=rt if isinstance(rt, (int, float)) else None,
            requests=sum(r.run.requests for r in lv.repeats))
    return _traced_run(env, target, opts, tracer, figures, page)


def _traced_run(env: Env, target: Target, opts: ApplyOptions, tracer: Tracer,
                read: Callable[[LevelResult, Path | None], T], page: Page | None = None) -> T:
    """A sweep of one level under `tracer`; `read(level, trace)` is what it gives (the trace
    is removed after)."""
    with tempfile.TemporaryDirectory(prefix="statstorm-apply-") as tmp:
        p = sweep_cmd.Plan(
            url=target.url, tool="wrk", model="closed",
            levels=(float(opts.verify_concurrency),), duration_s=opts.verify_duration_s,
            warmup_s=2.0, repeats=1, timeout_s=10.0,
            expect_status=page.status if page else 200, expect_text=page.marker if page else "",
            fpm_status_url=None, pool=None, output=Path(tmp) / "sweep.json", plot=None,
            trace_lab=target.lab or None, trace_pool=None if target.lab else target.pool)
        res = sweep_cmd.run(env, p, progress=lambda msg, lv: env.log(f"verify: {msg}"),
                            trace_with=tracer)
        lv = res.levels[0]
        traced = lv.server.trace_file
        return read(lv, Path(traced) if traced else None)


def settle(env: Env, target: Target, opts: ApplyOptions, page: Page | None = None
           ) -> Measurement:
    """The measurement after the change, once settled: runs until two in a row agree
    (applyplan.settled) or verify_settle_s has passed; the first run is kept beside it."""
    first = cur = measure(env, target, opts, page=page)
    runs, done = 1, opts.verify_settle_s <= 0
    start = env.clock()
    while not done and env.clock() - start < opts.verify_settle_s:
        prev, cur = cur, measure(env, target, opts, page=page)
        runs += 1
        done = applyplan.settled(prev, cur)
        if not done:
            env.log(f"verify: not settled yet ({_figures(prev)} → {_figures(cur)}); again…")
    return dataclasses.replace(cur, settling=Settling(runs, done and runs > 1,  # one run: not
                                                      first))  # checked


def _figures(m: Measurement) -> str:
    rt = m.round_trips_per_request
    return (f"{m.syscalls_per_request} calls" +
            (f", {rt} round trips" if rt is not None else "") + " per request")


# -- the command --------------------------------------------------------------------------------
def run(env: Env, opts: ApplyOptions) -> ApplyResult:
    validate(env, opts)
    if opts.site:
        found = by_site.serving(env, opts.site)
        env.log(f"{opts.site}: {found.how}")
        opts = dataclasses.replace(opts, pool=found.pool or None, apache=found.apache,
                                   url=opts.url or opts.site)
    if opts.rollback:
        return rollback(env, opts)
    result = plan(env, opts)
    if not opts.yes or not (result.edits or result.steps):
        return result
    return execute(env, result, opts)


def execute(env: Env, result: ApplyResult, opts: ApplyOptions) -> ApplyResult:
    """Make the planned edits: back up, write, test, reload, check; roll back on failure;
    with opts.verify, measure before and after and roll back a change for the worse."""
    target = result.target
    assert target is not None
    before = prediction = page = None
    if opts.verify:
        (page,) = interleaved.pages_of((target.url,))  # the page before: what counts after
        prediction = predict(env, target, opts, result.changes)
        env.log("verify: measuring before the change…")
        before = measure(env, target, opts, page=page)
    for path in pool_config.app_files(target, [e.path for e in result.edits]):
        problem = pool_config.php_lint(env, target, path)
        if problem:
            raise UsageError(f"{path} does not parse now (php -l: {problem}): fix it first; "
                             "nothing was changed")
    problem = check_fstab(env, result)
    if problem:
        raise UsageError(f"{problem}: fix it or add --no-fstab; nothing was changed")
    backup = backups.save(env, target.pool, target.to_json(), result.edits, result.steps)
    result.backup = str(backup)
    env.log(f"backed up {len(result.edits)} file(s) to {backup}")
    try:
        faults.phase("apply/backup")
        result.notes += apply_steps.install(env, target, result.edits, result.changes,
                                            result.steps)
        apply_steps.record(backup, result.steps, "applied")
    except (ApplyFailed, OSError) as exc:
        why = (str(exc) if isinstance(exc, ApplyFailed) else
               f"cannot record the change in {backup} ({exc.strerror or exc})")
        apply_steps.roll_back(env, target, backup, why, result.steps)
        raise ComponentError(f"{why}: rolled back, the pool serves with the previous "
                             f"configuration (backup {backup})") from None
    except BaseException:
        apply_steps.roll_back(env, target, backup, "interrupted while applying", result.steps)
        raise
    faults.phase("apply/applied")
    result.mode = ApplyMode.APPLIED
    if before is not None and page is not None:
        env.log("verify: measuring after the change…")
        result.verify = Verify(before, settle(env, target, opts, page), prediction)
        changed = interleaved.page_changed(page)
        if changed or result.verify.worse:
            result.reason = f"--verify: {changed or result.verify.worse}"
            apply_steps.roll_back(env, target, backup, result.reason, result.steps)
            result.mode = ApplyMode.ROLLED_BACK
        else:
            try:
                backups.mark(backup, "verified")
            except OSError as exc:  # applied and in effect: the manifest still says so
                result.notes.append(f"{backup}/manifest.json still says applied, not verified "
                                    f"({exc.strerror or exc})")
    return result


def rollback(env: Env, opts: ApplyOptions) -> ApplyResult:
    """Restore the newest backup set still in effect (for the pool or lab, if one is named)."""
    found = backups.newest(env, opts.lab, opts.pool)
    if found is not None:
        d, m = found
        t = m.target
        apache = t.written.get("apache") is True  # the system Apache's PHP
        target = resolve(env, ApplyOptions(lab=t.lab or None, pool=None if t.lab or apache
                                           else t.pool, url=t.url or "", apache=apache))
        edits = [FileEdit(Path(entry.path), backups.read_text(Path(entry.path)),
                          backups.copy_text(d, entry) or "", ("now", "restored"))
                 for entry in m.files]
        steps = list(m.storage)
        apply_steps.roll_back(env, target, d, "statstorm apply --rollback", steps)
        return ApplyResult(ApplyMode.ROLLED_BACK, target, edits=edits, steps=steps, backup=str(d),
                           reason="statstorm apply --rollback")
    where = f" for {'lab ' + opts.lab if opts.lab else 'pool ' + str(opts.pool)}" if (
        opts.lab or opts.pool) else ""
    raise UsageError(f"no applied change to roll back{where} (backup sets: {backups.root(env)})")


__all__ = ["ApplyOptions", "ApplyResult", "run"]
