"""packaging/bundled.lock, the Python libraries scripts/package.sh bundles into the .deb
(pip --require-hashes --no-deps): every entry pinned with == and a sha256, and the entries
exactly the closure of pyproject.toml's [project].dependencies: each needed by statstorm or by
another entry (its `# via` comment, written by scripts/lock-bundled.sh from the wheels'
metadata), none by nothing; checked against the real metadata of the libraries installed here
at the locked version."""
from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "packaging/bundled.lock"
SHA256 = re.compile(r"--hash=sha256:([0-9a-f]{64})")


@dataclass(frozen=True)
class Entry:
    name: str
    version: str
    hashes: tuple[str, ...]
    via: frozenset[str]


def entries() -> dict[str, Entry]:
    out: dict[str, Entry] = {}
    for n, line in enumerate(LOCK.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        spec, _, via = line.partition("  # via ")
        words = spec.split()
        req = Requirement(words[0])
        options = words[1:]
        assert options and all(SHA256.fullmatch(o) for o in options), f"line {n}: {options}"
        assert not req.extras and req.marker is None and req.url is None, f"line {n}"
        (pin,) = req.specifier  # exactly one specifier
        assert pin.operator == "==" and "*" not in pin.version, f"line {n}: {pin}"
        name = canonicalize_name(req.name)
        assert name == req.name, f"line {n}: {req.name} is not written as {name}"
        assert name not in out, f"line {n}: {name} twice"
        parents = frozenset(p.strip() for p in via.split(",") if p.strip())
        assert parents, f"line {n}: {name} says nothing needs it"
        out[name] = Entry(name, pin.version, tuple(SHA256.findall(spec)), parents)
    return out


def roots() -> list[Requirement]:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return [Requirement(d) for d in deps]


def test_every_entry_is_pinned_with_a_hash_and_every_dependency_of_pyproject_is_there() -> None:
    lock = entries()
    assert all(e.hashes for e in lock.values())
    for req in roots():
        name = canonicalize_name(req.name)
        assert name in lock, f"pyproject's {req} is not in {LOCK.name}"
        assert req.specifier.contains(Version(lock[name].version), prereleases=True), (
            f"pyproject wants {req}, the lock has {lock[name].version}: bash scripts/lock-bundled.sh")
        assert "statstorm" in lock[name].via


def test_the_lock_is_the_closure_of_pyprojects_dependencies_and_nothing_more() -> None:
    lock = entries()
    direct = {canonicalize_name(r.name) for r in roots()}
    assert {n for n, e in lock.items() if "statstorm" in e.via} == direct
    for e in lock.values():
        assert e.via <= set(lock) | {"statstorm"}, f"{e.name}: needed by {e.via - set(lock)}?"
    reached: set[str] = set()
    todo: list[str] = list(direct)
    while todo:
        name = todo.pop()
        if name not in reached:
            reached.add(name)
            todo += [n for n, e in lock.items() if name in e.via]
    assert reached == set(lock)


def test_the_via_comments_match_the_real_metadata_of_the_libraries_installed_here() -> None:
    """Where this environment has a locked library at its locked version, what that version
    requires (markers evaluated here, no extras) is in the lock, each saying it is needed by it."""
    lock = entries()
    requires: dict[str, set[str]] = {}  # of each library installed here as locked
    for name, e in lock.items():
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        if dist.version != e.version:
            continue
        requires[name] = set()
        for r in map(Requirement, dist.requires or ()):
            if r.marker is not None and not r.marker.evaluate({"extra": ""}):
                continue
            sub = canonicalize_name(r.name)
            requires[name].add(sub)
            assert sub in lock, f"{name} {e.version} requires {r}, which is not in the lock"
            assert name in lock[sub].via, f"{sub}'s `# via` does not name {name}"
            assert r.specifier.contains(Version(lock[sub].version), prereleases=True), (name, r)
    # and the other way: what an entry says needs it does
    for e in lock.values():
        for parent in e.via & set(requires):
            assert e.name in requires[parent], f"{e.name}: {parent} does not require it"
    if not requires:
        pytest.skip("no locked library is installed here at its locked version")
