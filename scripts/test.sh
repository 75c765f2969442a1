#!/usr/bin/env bash
# The statstorm test suite: installs what it needs (idempotent), then runs every test,
# including the ones against real php-fpm, nginx, GlusterFS and MediaWiki (root).
#   scripts/test.sh [PYTEST ARGS]          everything (CI runs this); ends with where the time
#                                          went (scripts/suite_time.py)
#   scripts/test.sh --fast [PYTEST ARGS]   the developer loop, under 2 min: lint (ruff), types
#                                          (mypy), the layering check and every test that
#                                          needs no root component, on 2 processes (whole
#                                          files to each)
# tests/README.md says which tests need what and how to run one file.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
fast=0
if [[ "${1:-}" == "--fast" ]]; then
    fast=1
    shift
fi
start=$SECONDS
if [[ $(id -u) -eq 0 ]]; then
    bash "$here/scripts/setup.sh" --dev
elif ((!fast)) || [[ ! -x $here/.venv/bin/ruff ]]; then
    echo "statstorm test: run \`sudo bash scripts/setup.sh --dev\` once first (the full suite" \
         "also needs root: sudo bash scripts/test.sh)" >&2
    exit 2
fi
cd "$here"
py=.venv/bin/python
if ((!fast)); then
    # the tests that need no root component on 2 processes, then the root ones one at a time
    # (they share the machine's services, mounts and load lock); at the end, where the time
    # went: the 20 slowest tests, the root tests by file, each part's wall time and the total
    times=$(mktemp -d)
    trap 'rm -rf "$times"' EXIT
    setup_s=$((SECONDS - start))
    rc=0
    t=$SECONDS
    "$py" -m pytest -q -m "not root" -n 2 --junitxml="$times/nonroot.xml" "$@" || rc=$?
    nonroot_s=$((SECONDS - t))
    [[ $rc -eq 5 ]] && rc=0  # none of them among the tests named
    root_rc=0
    t=$SECONDS
    "$py" -m pytest -q -m root --junitxml="$times/root.xml" "$@" || root_rc=$?
    root_s=$((SECONDS - t))
    [[ $root_rc -eq 5 ]] && root_rc=0
    "$py" scripts/suite_time.py --phase "setup=$setup_s" \
        --phase "non-root=$nonroot_s:$times/nonroot.xml" --phase "root=$root_s:$times/root.xml"
    exit $((rc != 0 ? rc : root_rc))
fi

step() { printf 'statstorm test --fast: %s\n' "$*" >&2; }
step "lint (ruff check src tests bench)"
.venv/bin/ruff check --quiet src tests bench
step "types (mypy --strict src/statstorm)"
.venv/bin/mypy --no-error-summary
if [[ -f scripts/layers.py ]]; then
    step "layers (scripts/layers.py)"
    "$py" scripts/layers.py
fi
# whole files to each process (--dist loadfile): a file's module fixtures and imports once,
# not on both processes; measured quicker than `load` and than 3 processes on 2 cores
step "tests that need no root component (pytest -m 'not root' -n 2 --dist loadfile)"
exec "$py" -m pytest -q -m "not root" -n 2 --dist loadfile "$@"
