"""`statstorm tune`: the demo's job on the user's own running pool.

A shadow of the pool on local disk is the reference (adapters/labs/shadow.py: its code tree
copied, a php-fpm with the pool's own settings, a loopback nginx), the pool is the target, and
the demo's pipeline (commands/demo.py `pipeline`) runs on that pair:

1. **shadow**: the pool's site's code copied (its docroot, or the directory above it that holds
   the code two traced page views include: model/app_tree.py), the shadow started;
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
   than `results.trials.KEEP_MARGIN` (5 %) over the ratio without it; else `apply --rollback`
   undoes it (its backup set is the last one);
8. **prove** (with `yes`): a second trace and check of the pool.

`tune.json` is rewritten after every step, `report.html` is written beside it at the end; the
shadow is removed whatever happens.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ContextManager

from statstorm.adapters.labs import php_roots, shadow as shadows, shadow_site
from statstorm.adapters.load import http, interleaved
from statstorm.adapters.load.wrk import Wrk
from statstorm.adapters.php import php_targets
from statstorm.adapters.servers import nginx
from statstorm.adapters.storage import round_trips
from statstorm.adapters.tracing import page_views
from statstorm.commands import demo as demo_cmd, trace as trace_cmd
from statstorm.commands.pair import Pair, lab_member, pool_member
from statstorm.commands.run_record import Record
from statstorm.env import Env
from statstorm.errors import ComponentError, DependencyError, PrivilegeError, UsageError
from statstorm.model import app_tree as app_trees, applyplan, checkfacts
from statstorm.results.app_tree import AppTree
from statstorm.results.demo import Lab, new_run_id
from statstorm.results.lab import LabState
from statstorm.results.php_root import release
from statstorm.results.sites import Site
from statstorm.results.trace import read_trace
from statstorm.results.tune import TuneResult

TREE_VIEWS = 2  # page views traced to find the tree the app runs from
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
        raise DependencyError("wrk is not installed: run scripts/setup.sh --lab as root (or apt-get install wrk)")


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
    tree = app_tree(env, opts.pool, opts.urls, site.known_docroot)
    if tree.note():
        notes.append(tree.note())
    return Resolved(site, shadows.ShadowPlan(
        pool=opts.pool, lab=shadows.lab_name(opts.pool), source=site.known_docroot,
        binary=binary, ini=ini, directives=directives,
        workers=shadows.workers_of(directives), user=directives.get("user") or "www-data",
        front=shadow_site.front_controller(opts.urls[0]), notes=tuple(notes),
        tree=tree.root))


def app_tree(env: Env, pool: str, urls: tuple[str, ...], docroot: str) -> AppTree:
    """The tree the pool's app runs from (model/app_tree.py): the PHP files two traced page
    views of its URLs include (PHP's included-files table), and those they open."""
    with tempfile.TemporaryDirectory(prefix="statstorm-tune-tree-") as tmp:
        out = Path(tmp) / "tree.sst.gz"
        try:
            page_views.trace_views(env, trace_cmd.views_tracer(TREE_VIEWS), lab=None,
                                   pool=pool, urls=urls, output=out, views=TREE_VIEWS,
                                   name="statstorm-tune-tree")
            tr = read_trace(out)
        except (ComponentError, DependencyError, OSError) as exc:  # the docroot, said so
            return AppTree(docroot, docroot, why=f"the app's tree was not traced ({exc}): its "
                                                 "docroot is copied")
    opened = {os.path.dirname(s.path) for s in tr.syscalls
              if s.ret >= 0 and s.path.endswith(".php") and s.call == "open"}
    return app_trees.tree_of_dirs(docroot, [*checkfacts.included_dirs(tr), *opened])


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


# -- the steps, injectable for tests -----------------------------------------------------------------
@dataclass(frozen=True)
class Steps(demo_cmd.Steps):
    """The pipeline's steps and tune's own: the pool's site and shadow, its storage's counter."""

    resolve: Callable[[Env, TuneOptions], Resolved] = resolve
    shadow: Callable[[Env, shadows.ShadowPlan, Callable[[str], None]],
                     ContextManager[LabState]] = shadows.running
    window: Callable[[Env, str], round_trips.Window | None] = round_trips.window_for


def run(env: Env, opts: TuneOptions, say: Callable[[str], None] | None = None,
        steps: Steps = Steps(), found: Resolved | None = None) -> TuneResult:
    """The whole job (`found`: the pool's site and shadow plan, when already resolved)."""
    validate(env, opts)
    log = say or env.log
    found = found or steps.resolve(env, opts)
    plan, docroot = found.plan, found.plan.source
    out = opts.output_dir
    out.mkdir(parents=True, exist_ok=True)
    rec: Record[TuneResult] = Record(
        TuneResult(opts.pool, opts.urls, str(out), run_id=new_run_id(), docroot=docroot,
                   dry_run=not opts.yes, notes=plan.notes),
        out / "tune.json", "tune", 8 if opts.yes else 5, log)

    def planned(rec_: Record[Any], result: demo_cmd.ApplyResult) -> None:
        rec_.save(planned=tuple(dict.fromkeys(c.line for c in result.changes
                                              if c.kind != applyplan.MANUAL)),
                  diffs=tuple(e.diff() for e in result.edits))

    def fixed(rec_: Record[Any], applied: demo_cmd.ApplyResult, carried: list[str]) -> None:
        if carried:
            rec_.save(notes=(*rec_.result.notes, f"on the shadow too: {'; '.join(carried)}"))

    job = demo_cmd.Job(opts.views, opts.load(), "the pool and its shadow", yes=opts.yes,
                       mirror=opts.mirror, planned=planned, fixed=fixed)
    try:
        rec.step(1, f"shadow: pool {opts.pool}'s code ({plan.copied}) copied to local disk, a "
                    "php-fpm with its settings behind a loopback nginx…")
        with steps.shadow(env, plan, log) as shadow:
            rec.save(shadow=Lab(shadow.name, shadow.url))
            pair = Pair(lab_member(env, shadow, "local",
                                   shadow_site.shadow_urls(shadow.url, opts.urls),
                                   code=shadow.code_path or shadow.docroot),
                        pool_member(opts.pool, opts.urls, plan.copied,
                                    lambda: steps.window(env, docroot)))
            demo_cmd.pipeline(env, job, pair, rec, steps)
    finally:
        rec.close()
        steps.report(rec)
    return rec.result
