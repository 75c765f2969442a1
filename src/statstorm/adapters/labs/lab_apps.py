"""The lab's apps made on this machine (for adapters/labs/lab_build.py): their package trees
copied with symlinks resolved (adapters/storage/tree_copy.py), WordPress's database on the
lab's own MariaDB (adapters/labs/mariadb.py) and what each needs installed.

What each app is (its package, entry page, markers, configuration and installer) stays in
apps/, which sits below adapters/ and imports none of them."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Callable

from statstorm.adapters.labs import mariadb, php_roots
from statstorm.adapters.storage import tree_copy
from statstorm.apps import mediawiki, wordpress
from statstorm.env import Env
from statstorm.results.php_root import HOST_VERSION, release


def copy_package_tree(env: Env, source: Path, excludes: tuple[str, ...], dest: Path) -> None:
    """Copy an app's package tree into `dest` with symlinks resolved."""
    env.debug(f"copying {source} to {dest} (tar -ch, symlinks resolved)")
    tree_copy.copy_tree(source, dest, jobs=4, dereference=True, excludes=excludes)


def copy_mediawiki(env: Env, dest: Path) -> None:
    copy_package_tree(env, mediawiki.SOURCE, mediawiki.EXCLUDES, dest)


def copy_wordpress(env: Env, dest: Path) -> None:
    copy_package_tree(env, wordpress.SOURCE, wordpress.EXCLUDES, dest)


def require_wordpress(env: Env | None = None, php: str = HOST_VERSION) -> None:
    """WordPress, its theme, PHP's mysqli and MariaDB: a one-line error naming the fix.
    `php`: the lab's PHP version; another than the host's runs from its PHP root, whose own
    mysqli is checked when the root is built (one made by this `lab up` gets it with the
    rest of its PHP packages)."""
    rel = release(php)
    root = php_roots.root_dir(env, rel) if env is not None and not rel.host else None
    if root is not None and php_roots.load(root) is not None:
        wordpress.require_installed(rel.version, str(root))
    else:
        wordpress.require_installed()
    mariadb.require_installed()


def start_wordpress_database(env: Env, lab_root: Path, log: Path,
                             record: Callable[[int], None]) -> wordpress.Database:
    """Initialise and start the lab's MariaDB; create WordPress's database and user."""
    inst = mariadb.Instance.under(lab_root)
    mariadb.init(env, inst)
    mariadb.start(env, inst, log, record)
    password = secrets.token_urlsafe(24)
    mariadb.create_database(env, inst, wordpress.DB_NAME, wordpress.DB_USER, password)
    return wordpress.Database(socket=inst.socket, password=password)
