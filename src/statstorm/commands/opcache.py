"""`statstorm opcache reset`: empty a php-fpm pool's OPcache without a web request, the deploy
step `opcache.validate_timestamps = 0` needs (check's opcache-revalidate finding names it).
The target is a pool, a lab's pool or the one PHP target running; the FastCGI work is
`adapters/php/opcache_reset.py`.
"""

from __future__ import annotations

from dataclasses import dataclass

from statstorm.adapters.labs import state as labs
from statstorm.adapters.php import opcache_reset, php_targets, target
from statstorm.adapters.php.target import PhpTarget
from statstorm.env import Env
from statstorm.errors import UsageError
from statstorm.results.opcache_reset import OpcacheFigures, OpcacheReset


@dataclass(frozen=True)
class ResetOptions:
    pool: str = ""  # a running php-fpm pool by name
    lab: str | None = None  # a lab's pool
    wait: float = 5.0  # seconds to wait for a pending reset (a worker busy with a request)


def validate(opts: ResetOptions) -> None:
    if opts.pool and opts.lab:
        raise UsageError("give --pool NAME or --lab NAME, not both")
    if opts.wait < 0:
        raise UsageError(f"--wait {opts.wait:g}: give a number of seconds, 0 or more")


def resolve(env: Env, opts: ResetOptions) -> PhpTarget:
    """The PHP target named by the options: the lab's, the pool, or the only one running."""
    if opts.lab:
        return target.for_lab(labs.require_up(env, opts.lab))
    if opts.pool:
        return php_targets.find_pool(opts.pool)
    return target.sole(env)


def run(env: Env, opts: ResetOptions) -> OpcacheReset:
    """Reset the target's OPcache; its figures before and after."""
    validate(opts)
    php = resolve(env, opts)
    return opcache_reset.reset(env, php, php.directives(env), wait=opts.wait)


__all__ = ["OpcacheFigures", "OpcacheReset", "ResetOptions", "run", "validate"]
