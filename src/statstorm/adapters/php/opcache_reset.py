"""OPcache reset over FastCGI, as cachetool does it: a small PHP file of statstorm's own run
in one worker of a php-fpm pool (`fastcgi.script_file`, the same place and mechanism as
check's settings query), calling `opcache_reset()` without a web request.

One worker is enough: OPcache's shared memory is created by the php-fpm master and inherited
by every worker it forks, so the reset empties it for the whole pool (and for the other pools
of the same master). `opcache_reset()` only schedules the reset; PHP carries it out when the
next request starts and no worker is in a request, so the figures after are read by further
requests until the pending reset is done (or the wait ends).

PHP inside Apache (mod_php's children, mod_fcgid's php-cgi) has no pool socket to ask: its
OPcache goes with a graceful restart of Apache (`refusal` says so).
"""

from __future__ import annotations

import time

from statstorm.adapters.php import fastcgi, php_runtime, php_targets
from statstorm.adapters.php.target import PhpTarget
from statstorm.env import Env
from statstorm.errors import ComponentError, UsageError
from statstorm.results import jsonlenient as lenient
from statstorm.results.jsontypes import JsonObject
from statstorm.results.opcache_reset import OpcacheFigures, OpcacheReset
from statstorm.results.serving import Handler

# The script a worker runs: the status (and, with ?reset, opcache_reset()) as JSON. Warnings
# are silenced and reported in the JSON, so a display_errors=On pool still answers JSON.
RESET_PHP = r"""<?php
header('Content-Type: application/json');
header('Cache-Control: no-store');
$on = function_exists('opcache_get_status');
$status = $on ? @opcache_get_status(false) : false;
$reset = null;
if (isset($_GET['reset'])) { $reset = $on ? @opcache_reset() : false; }
$err = error_get_last();
echo json_encode(['pid' => getmypid(), 'reset' => $reset, 'status' => $status ?: null,
  'restrict_api' => (string)ini_get('opcache.restrict_api'),
  'error' => $err ? (string)$err['message'] : '']);
"""
RESET_QUERY = "reset=1"
POLL_S = 0.1


def refusal(php: PhpTarget, directives: dict[str, str]) -> str:
    """Why this target's OPcache cannot be reset over FastCGI, naming what to do instead
    ('' when it can)."""
    if php.handler.php_in_server:
        what = ("mod_php in Apache's children" if php.handler is Handler.MOD_PHP else
                "mod_fcgid's php-cgi processes, each with its own OPcache")
        how = (f"a graceful restart of the lab's Apache (`kill -USR1 {php.masters[0]}`)"
               if php.lab and php.masters else "`apache2ctl graceful`")
        return (f"{php.label} runs PHP as {what}: there is no pool socket to reset OPcache "
                f"through; run {how} instead (it starts fresh children with an empty OPcache)")
    if directives.get("chroot"):
        return (f"{php.label} runs chrooted in {directives['chroot']}: statstorm's script "
                "outside it cannot be run; reload php-fpm instead (`systemctl reload "
                f"php{php_runtime.of_binary(php.binary).version}-fpm`, or SIGUSR2 to its "
                "master: OPcache starts empty)")
    if not directives.get("listen"):
        return (f"{php.label}: its listen address is unknown (php-fpm -tt did not show it); "
                "reload php-fpm instead (OPcache starts empty)")
    return ""


def decode(head: str, body: bytes) -> tuple[OpcacheFigures, bool | None, JsonObject]:
    """A worker's answer to RESET_PHP: its OPcache figures, what opcache_reset() returned
    (None: not asked) and the answer as sent."""
    data = php_targets.decode_answer(head, body)
    pid = data.get("pid")
    figures = OpcacheFigures.from_status(pid if isinstance(pid, int) else 0,
                                         lenient.obj_or_none(data, "status"))
    reset = data.get("reset")
    return figures, reset if isinstance(reset, bool) else None, data


def _refused(php: PhpTarget, listen: str, script: str, exc: ComponentError) -> ComponentError:
    return ComponentError(
        f"{php.label} at {listen} refused statstorm's script {script} ({exc}): its open_basedir "
        "or security.limit_extensions keep it out; add /run to the pool's open_basedir, or "
        "reload php-fpm instead (OPcache starts empty)")


def reset(env: Env, php: PhpTarget, directives: dict[str, str],
          wait: float = 5.0) -> OpcacheReset:
    """Reset the OPcache of the pool `php` (its `directives` from `php.directives`): the
    figures before, opcache_reset()'s answer, and the figures once the reset is done (still
    pending after `wait` seconds: a worker kept busy; `after.restart_pending` says so)."""
    why = refusal(php, directives)
    if why:
        raise UsageError(why)
    listen = directives["listen"]
    # a pool run chrooted in a PHP root (`lab up --php 8.4`) runs the script from there
    with fastcgi.script_file(RESET_PHP, php_runtime.of_binary(php.binary).root) as script:
        env.debug(f"FastCGI {listen}: {script}?{RESET_QUERY}")
        try:
            before, done, data = decode(*fastcgi.run_script(listen, script, query=RESET_QUERY))
        except fastcgi.AnsweredError as exc:
            raise _refused(php, listen, script, exc) from None
        if not before.enabled:
            raise UsageError(f"{php.label}: OPcache is off in its workers (opcache_get_status() "
                             "is false): there is nothing to reset")
        if not done:
            api = str(data.get("restrict_api", ""))
            raise ComponentError(
                f"{php.label}: opcache_reset() refused ({data.get('error') or 'returned false'})"
                + (f"; opcache.restrict_api = {api} allows only scripts under it: reload "
                   "php-fpm instead" if api else "; reload php-fpm instead"))
        deadline = env.clock() + wait
        while True:
            after, _, _ = decode(*fastcgi.run_script(listen, script))
            if not after.restart_pending or env.clock() >= deadline:
                break
            time.sleep(POLL_S)
    return OpcacheReset(php.label, php.name, php.lab, listen, True, before, after)
