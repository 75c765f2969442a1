"""Rules on what the app itself does per request on network storage: data files it reads
again on every request (configuration JSON, templates, translations), and request time that
stays on the network mount whatever the settings. Pure code."""

from __future__ import annotations

from statstorm.model.checkfacts import Facts
from statstorm.model.checkfacts import ini_bool
from statstorm.model.finding import (Finding, Rule, code_on_network, finding, opcache_on,
                                     opcache_reset_step, setting)
from statstorm.model.php_versions import version_of
from statstorm.results.check import Gain, Severity
from statstorm.results.php_root import HOST_VERSION

# Below this, a few opens per request are noise (a template cache, a robots.txt).
DATA_OPENS_MIN = 2.0
# Share of request time in metadata calls on network mounts that makes a pool network-bound.
NETWORK_SHARE = 0.5
# Throughput over the same code's on local disk, measured side by side (tune's shadow), below
# which a pool is network-bound whatever the trace's share (time in reads of data files, in the
# FUSE client, is no metadata call the share counts); tune's escalation aims at it too.
NETWORK_RATIO = 0.90


def network_bound_evidence(facts: Facts) -> list[str]:
    """Why the pool is network-bound, a line per measurement that says so: the trace's share
    of request time in metadata calls on network mounts, the throughput measured against the
    same code on local disk; [] when neither does."""
    t, out = facts.trace, []
    if t is not None and t.network_time_share is not None and t.network_time_share >= NETWORK_SHARE:
        out.append(f"{t.network_time_share:.0%} of the traced requests' time is spent in "
                   f"metadata calls on network mounts ({t.network_ms_per_request:g} ms per "
                   "request)")
    if (facts.local_ratio is not None and facts.local_ratio < NETWORK_RATIO
            and code_on_network(facts)):
        out.append(f"the pool serves {facts.local_ratio:g}x the throughput of the same code on "
                   f"local disk, measured side by side (below {NETWORK_RATIO:g}x)")
    return out


# The object-cache settings of each app statstorm can change in the app's own configuration
# file (adapters/php/php_apps.py finds it): the lines after `# in FILE:` (model.applyplan APP
# changes), each needing APCu in the pool. Drupal's core has an APCu cache backend; Laravel's
# `apc` store (CACHE_STORE from 11, CACHE_DRIVER before); Symfony's `cache.adapter.apcu`.
APP_SETTING: dict[str, tuple[str, ...]] = {
    "mediawiki": ("$wgMainCacheType = CACHE_ACCEL;",),
    "drupal": ("$settings['cache']['default'] = 'cache.backend.apcu';",),
    "laravel": ("CACHE_STORE=apc", "CACHE_DRIVER=apc"),
    "symfony": ("framework.cache.app: cache.adapter.apcu",),
}
# What an app needs after its configuration changed, before it reads the new setting.
APP_AFTER = {
    "laravel": "Laravel reads .env only when its configuration is not cached: where "
               "bootstrap/cache/config.php exists, run `php artisan config:cache` after apply "
               "(and after a rollback)",
    "symfony": "Symfony compiles its configuration: run `php bin/console cache:clear` with the "
               "app's environment after apply (and after a rollback)",
}
APP_ADVICE = {
    "wordpress": "# install a persistent object cache drop-in (wp-content/object-cache.php: "
                 "APCu, Redis or memcached)",
    "drupal": "# in settings.php: $settings['cache']['default'] = 'cache.backend.apcu'; "
              "(the apcu module) or a Redis/memcached backend",
    "laravel": "# CACHE_STORE=apc (CACHE_DRIVER before Laravel 11) in .env, then "
               "`php artisan config:cache`",
    "symfony": "# framework.cache.app: cache.adapter.apcu in config/packages/cache.yaml",
}


def _names(examples: tuple[tuple[str, float], ...]) -> str:
    return ", ".join(f"{p.rsplit('/', 1)[-1]} ({n:g}/req)" for p, n in examples[:4])


def app_data_on_network(facts: Facts) -> list[Finding]:
    t = facts.trace
    net = code_on_network(facts)
    if t is None or not net or t.detail != "events" or t.data_opens_per_request < DATA_OPENS_MIN:
        return []
    ev = [f"{t.data_opens_per_request:g} non-PHP files opened per request on network storage "
          f"({net[0].mount_point}, {net[0].kind}): {_names(t.data_open_examples)}",
          "each open (and its reads) goes to the storage whatever the attribute and entry "
          "caches hold: the app reads its own data again on every request"]
    gain: Gain = {"metric": "non-PHP opens on network storage per request",
            "syscalls_per_request": -round(t.data_opens_per_request, 1)}
    tradeoff = ("the app's cache lives in each pool's memory (APCu): several web servers each "
                "keep their own copy, and a deploy must clear it (reload php-fpm)")
    loaded = facts.extensions is not None and "apcu" in {e.lower() for e in facts.extensions}
    if facts.app in APP_SETTING and facts.app_config:
        change = []
        if not loaded:
            if not facts.apcu_path:
                ev.append("APCu is not loaded in the pool and not available on this machine")
                return [finding(Severity.WARNING, f"{facts.app} re-reads its data files from network "
                                "storage on every request", ev,
                                [f"# install APCu (scripts/setup.sh --lab, or the php"
                                 f"{version_of(facts.php_binary) or HOST_VERSION}-apcu "
                                 "package), then run statstorm check again"], tradeoff, gain)]
            ev.append("APCu is not loaded in the pool: statstorm loads it for this pool only")
            change.append(f"extension = {facts.apcu_path}")
        change += [f"# in {facts.app_config}:", *APP_SETTING[facts.app]]
        after = APP_AFTER.get(facts.app, "")
        return [finding(Severity.WARNING, f"{facts.app} re-reads its data files from network storage "
                        "on every request: give it a local object cache", ev, change,
                        tradeoff + (f"; {after}" if after else ""), gain)]
    what = APP_ADVICE.get(facts.app, "# give the app a local object cache (APCu, Redis, "
                                     "memcached) for its configuration and templates")
    return [finding(Severity.WARNING, "the app re-reads its data files from network storage on every "
                    "request", ev,
                    [what, "# or: keep a local copy of the code on each web server, synced at "
                     "deploy"], tradeoff, gain,
                    "statstorm does not recognise this app's cache setting: the change is "
                    "by hand" if facts.app not in APP_ADVICE else "")]


def network_bound(facts: Facts) -> list[Finding]:
    t = facts.trace
    why = network_bound_evidence(facts)
    if not why:
        return []
    net = code_on_network(facts)
    o = facts.trace_origin
    source = ([f"measured by {'the last trace of this pool' if o.remembered else 'the trace'} "
               f"{o.path}, taken at {o.taken}"] if o is not None and t is not None else [])
    trips = ([f"{t.round_trips_per_request:g} network round trips per request measured"]
             if t is not None and t.round_trips_per_request is not None else [])
    return [finding(Severity.WARNING, "most of the request time goes to network storage",
                    [*why,
                     *([f"the code is on {net[0].mount_point} ({net[0].kind})"] if net else []),
                     "the pool is not healthy while this holds, even where no other rule "
                     "has a fix", *source, *trips],
                    ["# apply the other findings on this mount, then trace again",
                     "# if the share stays high: keep a local copy of the code on each web "
                     "server, synced at deploy"],
                    "a local copy of the code needs a deploy step on every web server", None,
                    "measured; no change of this pool's settings is known to remove it")]


# -- OPcache's timestamps off, paired with its deploy step ---------------------------------------
# A measure-first change of `statstorm tune`'s escalation: with opcache.revalidate_freq = 60
# (opcache-revalidate, part of `apply --all`) few revalidation stats are left, so whether turning
# them off helps is known only by measuring; `apply --all` leaves it out (applyplan.NAMED_ONLY).
TIMESTAMPS_OFF = "opcache-timestamps-off"  # tune's escalation (model/escalation.py)


def opcache_timestamps_off(facts: Facts) -> list[Finding]:
    t = facts.trace
    if t is None or not opcache_on(facts):
        return []
    if not ini_bool(setting(facts, "opcache.validate_timestamps"), True):
        return []
    net = [m for m in code_on_network(facts) if m.role == "docroot"]
    why = network_bound_evidence(facts)
    if not net or (t.revalidate_per_request <= 0 and not why):
        return []
    step = opcache_reset_step(facts)
    ev = [f"opcache.validate_timestamps = 1 with the code on {net[0].kind} "
          f"({net[0].mount_point}): OPcache stats a cached file again every "
          f"revalidate_freq + 1 s, each a lookup through the network client"]
    if t.revalidate_per_request > 0:
        ev.append(f"measured: {t.revalidate_per_request:g} OPcache revalidation stat per request")
    ev += why
    return [finding(Severity.INFO, "OPcache still revalidates code on network storage "
                    "(measure first)", ev,
                    ["opcache.validate_timestamps = 0",
                     f"# after each deploy: {step} (the old code is served until then)"],
                    f"a changed file is never picked up by itself: every deploy must run {step}",
                    None, "measure first: with revalidate_freq = 60 few stats remain; "
                    "`statstorm tune` keeps this change only where its measurement shows a gain")]


RULES: tuple[tuple[str, Rule], ...] = (
    ("app-data-on-network", app_data_on_network),
    ("network-bound", network_bound),
    (TIMESTAMPS_OFF, opcache_timestamps_off),
)
