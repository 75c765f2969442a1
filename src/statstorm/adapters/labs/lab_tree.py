"""A lab's app tree put on its storage (for adapters/labs/lab_build.py): copied through the
storage's client, or — for MediaWiki and WordPress on GlusterFS — given from the cached tree
of the same package versions (adapters/storage/tree_cache.py) as the brick the lab's volume
is created on, the lab's own files (its installer's) then written through the mount.

The flow, in lab_build's steps: `plan` (the key, before the volume), `seed` (the brick from
the cache, before the volume is created on it), `after_package` (the package tree copied to
the stage: on a miss, copied through the mount now, before the installer, and cached),
`finish` (after the installer: the lab's files on top, or the whole copy where there is no
cache).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from statstorm.adapters.labs import lab_servers
from statstorm.adapters.storage import openafs, tree_cache, tree_copy
from statstorm.apps import mediawiki, wordpress
from statstorm.env import Env
from statstorm.model import tree_cache as rules
from statstorm.model.storage_kinds import STORAGE
from statstorm.model.tree_cache import TreeKey
from statstorm.results.lab import LabState
from statstorm.results.storage_kind import StorageKind
from statstorm.results.tree_manifest import TreeManifest

# The apps whose tree comes from Debian packages, and the storages a cached tree serves.
_PACKAGED = {"mediawiki": (mediawiki.PACKAGES, mediawiki.EXCLUDES, "MediaWiki"),
             "wordpress": (wordpress.PACKAGES, wordpress.EXCLUDES, "WordPress")}
CACHED_STORAGES = (StorageKind.GLUSTERFS,)


@dataclass
class TreePlan:
    """Where a lab's tree comes from; `key` None: copied whole, no cache."""

    key: TreeKey | None = None
    title: str = ""  # "MediaWiki 1:1.39.17-1+deb12u2"
    brick: Path | None = None
    cached: TreeManifest | None = None  # the tree already on the storage (from the cache
    # or copied by after_package), before the lab's own files


def package_version(env: Env, packages: tuple[str, ...]) -> str:
    """The installed versions of `packages` ('1:1.39.17-1+deb12u2'; several joined by ';')."""
    res = env.run(["dpkg-query", "-W", "-f=${Version}\\n", *packages], check=False,
                  what="dpkg-query")
    versions = res.stdout.split() if res.returncode == 0 else []
    if len(versions) != len(packages):
        return ""
    return ";".join(versions)


def plan(env: Env, app: str, storage: str) -> TreePlan:
    if app not in _PACKAGED or storage not in CACHED_STORAGES:
        return TreePlan()
    packages, excludes, name = _PACKAGED[app]
    version = package_version(env, packages)
    if not version:
        env.debug(f"no package version for {', '.join(packages)}: the tree is not cached")
        return TreePlan()
    return TreePlan(key=rules.key_for(app, version, storage, excludes),
                    title=f"{name} {version.split(';')[0]}")


def seed(env: Env, state: LabState, tree: TreePlan, brick: Path) -> None:
    """The lab's brick from the cached tree, verified, if there is one (before its volume)."""
    if tree.key is None:
        return
    tree.brick = brick
    started = env.clock()
    tree.cached, _ = tree_cache.seed_brick(env, tree.key, brick)
    if tree.cached is not None:
        lab_servers.step(env, state, f"the brick is the cached tree of {tree.title} "
                         f"({tree.cached.files} files, verified, {env.clock() - started:.1f} s)",
                         "seed")


def after_package(env: Env, state: LabState, tree: TreePlan, stage: Path, code: Path) -> None:
    """On a cache miss, the package tree (not yet installed) copied through the mount and
    cached from the brick."""
    if tree.key is None or tree.cached is not None or tree.brick is None:
        return
    copied = tree_cache.scan(stage, digests=True)
    lab_servers.step(env, state, f"copying the app tree to {code} ({_title(state)}; building "
                     f"the cached tree of {tree.title})…", "copy")
    tree_copy.copy_tree(stage, code, jobs=8)
    if tree_cache.store_brick(env, tree.key, tree.brick, copied):
        env.log(f"lab {state.name}: cached the tree of {tree.title} for the next labs "
                f"({tree_cache.cache_root(env) / tree.key.name})")
    tree.cached = copied


def finish(env: Env, state: LabState, tree: TreePlan, stage: Path, code: Path) -> None:
    """After the installer: the lab's own files on the cached tree, or the whole copy."""
    if tree.cached is not None:
        lab_servers.step(env, state, f"writing the lab's own files onto {code} "
                         f"({_title(state)}; on the tree of {tree.title})…", "copy")
        tree_cache.overlay(env, stage, code, tree.cached)
        return
    lab_servers.step(env, state, f"copying the app tree to {code} ({_title(state)})…", "copy")
    if state.storage == StorageKind.OPENAFS:
        openafs.copy_in(env, stage, code)
    else:
        tree_copy.copy_tree(stage, code, jobs=8)


def _title(state: LabState) -> str:
    return STORAGE[StorageKind(state.storage)].title
