"""Rules on what the app itself does per request on network storage: data files it reads
again on every request (configuration JSON, templates, translations), and request time that
stays on the network mount whatever the settings. Pure code."""

from __future__ import annotations

from statstorm.model.checkfacts import Facts
from statstorm.model.finding import Finding, Rule, code_on_network, finding
from statstorm.model.php_versions import version_of
from statstorm.results.check import Gain, Severity
from statstorm.results.php_root import HOST_VERSION

# Below this, a few opens per request are noise (a template cache, a robots.txt).
DATA_OPENS_MIN = 2.0
# Share of request time in metadata calls on network mounts that makes a pool network-bound.
NETWORK_SHARE = 0.5
# The object-cache setting of each app statstorm can change, and the alternatives for the rest.
APP_SETTING = {"mediawiki": ("$wgMainCacheType", "CACHE_ACCEL")}
APP_ADVICE = {
    "wordpress": "# install a persistent object cache drop-in (wp-content/object-cache.php: "
                 "APCu, Redis or memcached)",
    "drupal": "# in settings.php: $settings['cache']['default'] = 'cache.backend.apcu'; "
              "(the apcu module) or a Redis/memcached backend",
    "laravel": "# CACHE_DRIVER=apc (or redis) in .env, then `php artisan config:cache`",
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
        key, value = APP_SETTING[facts.app]
        change = []
        if not loaded:
            if not facts.apcu_path:
                ev.append("APCu is not loaded in the pool and not available on this machine")
                return [finding(Severity.WARNING, f"{facts.app} re-reads its data files from network "
                                "storage on every request", ev,
                                [f"# install APCu (scripts/setup.sh, or the php"
                                 f"{version_of(facts.php_binary) or HOST_VERSION}-apcu "
                                 "package), then run statstorm check again"], tradeoff, gain)]
            ev.append("APCu is not loaded in the pool: statstorm loads it for this pool only")
            change.append(f"extension = {facts.apcu_path}")
        change += [f"# in {facts.app_config}:", f"{key} = {value};"]
        return [finding(Severity.WARNING, f"{facts.app} re-reads its data files from network storage "
                        "on every request: give it a local object cache", ev, change,
                        tradeoff, gain)]
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
    if t is None or t.network_time_share is None or t.network_time_share < NETWORK_SHARE:
        return []
    net = code_on_network(facts)
    where = f" ({net[0].mount_point}, {net[0].kind})" if net else ""
    o = facts.trace_origin
    source = ([f"measured by {'the last trace of this pool' if o.remembered else 'the trace'} "
               f"{o.path}, taken at {o.taken}"] if o is not None else [])
    return [finding(Severity.WARNING, "most of the request time goes to network storage",
                    [f"{t.network_time_share:.0%} of the traced requests' time is spent in "
                     f"metadata calls on network mounts{where}: "
                     f"{t.network_ms_per_request:g} ms per request",
                     "the pool is not healthy while this holds, even where no other rule "
                     "has a fix"] + source + ([f"{t.round_trips_per_request:g} network round trips per "
                                      "request measured"]
                                     if t.round_trips_per_request is not None else []),
                    ["# apply the other findings on this mount, then trace again",
                     "# if the share stays high: keep a local copy of the code on each web "
                     "server, synced at deploy"],
                    "a local copy of the code needs a deploy step on every web server", None,
                    "measured from the trace; no change of this pool's settings is known to "
                    "remove it")]


RULES: tuple[tuple[str, Rule], ...] = (
    ("app-data-on-network", app_data_on_network),
    ("network-bound", network_bound),
)
