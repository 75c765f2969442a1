#!/usr/bin/env bash
# statstorm lock-bundled: writes packaging/bundled.lock, the Python libraries scripts/package.sh
# bundles into the .deb, from what PyPI resolves today for pyproject.toml's
# [project].dependencies: every library of their closure pinned (name==version) with the
# sha256 of the wheel pip picks for Debian 12's python3 (3.11, x86-64), and a comment naming
# what needs it. Resolved by Debian's own python3 and pip in a throw-away venv (the pip
# package.sh installs with, so it picks the same wheels), wheels only (no sdist is built).
# Says which versions it resolved and what changed; run it to update the libraries, then
# commit the lock. Needs PyPI; any user.
#   scripts/lock-bundled.sh [OUT]     OUT: default packaging/bundled.lock
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$here/packaging/bundled.lock}
python=/usr/bin/python3   # Debian 12's 3.11: the interpreter the .deb's libraries are for
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$python" -m venv "$work/venv"
mapfile -t deps < <("$python" -c 'import sys, tomllib
print("\n".join(tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"]))' "$here/pyproject.toml")
echo "statstorm lock-bundled: resolving ${deps[*]} (wheels for $("$python" -V))" >&2
"$work/venv/bin/pip" download -q --only-binary :all: --disable-pip-version-check \
    -d "$work/wheels" "${deps[@]}" >"$work/pip.log" 2>&1 ||
    { cat "$work/pip.log" >&2; echo "statstorm lock-bundled: pip download failed (is PyPI reachable?)" >&2; exit 1; }
# the venv's python: its pip's vendored packaging reads the wheels' requirements and markers
"$work/venv/bin/python" - "$here/pyproject.toml" "$work/wheels" "$out" <<'PY'
import hashlib, sys, tomllib, zipfile
from email.parser import Parser
from pathlib import Path
from pip._vendor.packaging.requirements import Requirement
from pip._vendor.packaging.utils import canonicalize_name

pyproject, wheels, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
roots = [Requirement(r) for r in tomllib.loads(pyproject.read_text())["project"]["dependencies"]]
found = {}  # name -> (version, sha256, requirements)
for whl in sorted(wheels.glob("*.whl")):
    with zipfile.ZipFile(whl) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        msg = Parser().parsestr(z.read(meta).decode())
    name = canonicalize_name(msg["Name"])
    reqs = [Requirement(r) for r in msg.get_all("Requires-Dist") or ()]
    found[name] = (msg["Version"], hashlib.sha256(whl.read_bytes()).hexdigest(), reqs)
not_wheels = sorted(p.name for p in wheels.iterdir() if p.suffix != ".whl")
if not_wheels:
    sys.exit(f"statstorm lock-bundled: not wheels: {not_wheels}")

# the closure, walked from pyproject's dependencies with each library's requested extras
needed_by: dict[str, set[str]] = {}
todo = [("statstorm", r) for r in roots]
seen = set()
while todo:
    parent, req = todo.pop()
    name = canonicalize_name(req.name)
    needed_by.setdefault(name, set()).add(parent)
    if name not in found:
        sys.exit(f"statstorm lock-bundled: {parent} needs {req}, which pip did not download")
    version, _, reqs = found[name]
    if not req.specifier.contains(version, prereleases=True):
        sys.exit(f"statstorm lock-bundled: {parent} needs {req}, pip resolved {version}")
    for extra in ("", *sorted(req.extras)):
        if (name, extra) in seen:
            continue
        seen.add((name, extra))
        for sub in reqs:
            if sub.marker is None or sub.marker.evaluate({"extra": extra}):
                todo.append((name, sub))
extra = sorted(set(found) - set(needed_by))
if extra:
    sys.exit(f"statstorm lock-bundled: pip downloaded {extra}, which nothing needs")

old = {}
if out.exists():
    for line in out.read_text().splitlines():
        if line and not line.startswith("#"):
            pin = line.split()[0]
            old[canonicalize_name(pin.split("==")[0])] = pin.split("==")[1]
lines = [
    "# The Python libraries scripts/package.sh bundles into the .deb (/usr/lib/statstorm/lib),",
    "# installed with pip --require-hashes --no-deps: every library of the closure of",
    "# pyproject.toml's [project].dependencies, pinned, with the sha256 of the wheel pip picks for",
    "# Debian 12's python3 (3.11, x86-64). Written by scripts/lock-bundled.sh from what PyPI",
    "# resolved; run it again to update, not by hand.",
]
for name in sorted(found):
    version, sha, _ = found[name]
    via = ", ".join(sorted(needed_by[name], key=lambda p: (p != "statstorm", p)))
    lines.append(f"{name}=={version} --hash=sha256:{sha}  # via {via}")
    was = old.get(name)
    note = "" if was == version else f" (was {was})" if was else " (new)"
    print(f"  {name} {version}{note}", file=sys.stderr)
for name in sorted(set(old) - set(found)):
    print(f"  {name} removed (was {old[name]})", file=sys.stderr)
out.parent.mkdir(parents=True, exist_ok=True)
out.write_text("\n".join(lines) + "\n")
print(f"statstorm lock-bundled: {len(found)} libraries into {out}", file=sys.stderr)
PY
