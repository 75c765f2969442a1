"""`statstorm lab`: stand up, inspect and tear down a real PHP stack on this machine.

The work is `adapters.lab_build` (matrix and demo make labs too); the lab's state is read
through `adapters.labs`.
"""

from __future__ import annotations

from pathlib import Path

from statstorm.adapters.labs import php_roots, state as labs
from statstorm.adapters.labs.lab_build import (APPS, SERVERS, STORAGES, LabOptions, down, up,
                                          validate)
from statstorm.adapters.labs.lab_servers import check_pages
from statstorm.apps import synthetic
from statstorm.adapters.storage import tree_cache
from statstorm.env import Env
from statstorm.errors import PrivilegeError
from statstorm.results.lab import LabState
from statstorm.results.php_root import PhpRoot
from statstorm.results.tree_manifest import CachedTree


def status(env: Env, name: str) -> LabState:
    """The lab's state with its live workers (`statstorm lab status`)."""
    return labs.status(env, name)


def list_labs(env: Env) -> list[LabState]:
    """Every lab of the state root, with its live workers (`statstorm lab list`)."""
    return labs.list_labs(env)


def gen_app(env: Env, directory: Path, spec: synthetic.AppSpec, *,
            force: bool = False) -> tuple[synthetic.GeneratedApp, str]:
    """The synthetic app generated into `directory` (`statstorm lab gen-app`) and its
    manifest (JSON text)."""
    app = synthetic.generate(env, directory, spec, force=force)
    return app, (app.root / synthetic.MANIFEST).read_text().strip()


def php_root_build(env: Env, version: str, *, rebuild: bool = False) -> tuple[PhpRoot, bool]:
    """PHP `version`'s root, made once with debootstrap or reused (`lab php-root build`);
    whether it was reused."""
    return php_roots.build(env, version, rebuild=rebuild)


def php_root_list(env: Env) -> tuple[list[PhpRoot], list[str], bool]:
    """The finished PHP roots, the versions whose root is half-built, and whether a build
    is going on now (`lab php-root list`)."""
    return (*php_roots.list_roots(env), php_roots.building(env))


def php_root_remove(env: Env, version: str) -> bool:
    """Remove PHP `version`'s root unless a lab uses it (`lab php-root remove`)."""
    return php_roots.remove(env, version)


def cache_list(env: Env) -> list[CachedTree]:
    """The cached app trees (`lab cache list`)."""
    return tree_cache.cached(env)


def cache_clear(env: Env) -> list[str]:
    """Remove every cached app tree (`lab cache clear`); their names."""
    if not env.is_root():
        raise PrivilegeError("statstorm lab cache clear needs root (the cached trees are "
                             "root's): run it with sudo")
    return tree_cache.clear(env)


__all__ = ["APPS", "SERVERS", "STORAGES", "LabOptions", "LabState", "check_pages", "down",
           "gen_app", "list_labs", "status", "up", "validate"]
__all__ += ["php_root_build", "php_root_list", "php_root_remove", "cache_list", "cache_clear"]
