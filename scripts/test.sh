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
    # the tests that need no root component on 2 processes; then the root ones: two lanes
    # side by side (the files marked `beside` share nothing with the others: their own labs
    # of storages no other file uses, no tracer on a pool, no measurement), then the files
    # marked `alone`, which need the machine to themselves (tests/README.md says why each).
    # At the end, where the time went: the 20 slowest tests, the root tests by file, each
    # part's wall time and the total.
    times=$(mktemp -d)
    beside_pid=
    trap 'if [[ -n $beside_pid ]]; then kill -INT "$beside_pid" 2>/dev/null; wait "$beside_pid"; fi
          rm -rf "$times"' EXIT
    setup_s=$((SECONDS - start))
    rc=0
    t=$SECONDS
    "$py" -m pytest -q -m "not root" -n 2 --junitxml="$times/nonroot.xml" "$@" || rc=$?
    nonroot_s=$((SECONDS - t))
    [[ $rc -eq 5 ]] && rc=0  # none of them among the tests named
    t=$SECONDS
    # job control: the beside lane in its own process group, with SIGINT not ignored (a
    # script's background job ignores it otherwise, and the signal tests send it)
    set -m
    "$py" -m pytest -q -m "root and beside and not alone" \
        --junitxml="$times/beside.xml" "$@" </dev/null >"$times/beside.log" 2>&1 &
    beside_pid=$!
    main_rc=0
    "$py" -m pytest -q -m "root and not beside and not alone" --junitxml="$times/main.xml" \
        "$@" || main_rc=$?
    main_s=$((SECONDS - t))
    if [[ $main_rc -eq 2 ]]; then  # Ctrl-C (the main lane has the terminal): the run ends
        exit 2                     # here, the beside lane stopped by the EXIT trap
    fi
    beside_rc=0
    wait "$beside_pid" || beside_rc=$?
    beside_pid=
    set +m
    lanes_s=$((SECONDS - t))
    echo "statstorm test: the root tests beside the main lane (${main_s} s for the main lane," \
         "$((lanes_s)) s for both):"
    cat "$times/beside.log"
    alone_rc=0
    t=$SECONDS
    "$py" -m pytest -q -m "root and alone" --junitxml="$times/alone.xml" "$@" || alone_rc=$?
    alone_s=$((SECONDS - t))
    root_rc=0
    for r in $main_rc $beside_rc $alone_rc; do
        [[ $r -ne 0 && $r -ne 5 ]] && root_rc=$r
    done
    "$py" scripts/suite_time.py --phase "setup=$setup_s" \
        --phase "non-root=$nonroot_s:$times/nonroot.xml" \
        --phase "root (two lanes)=$lanes_s:$times/main.xml,$times/beside.xml" \
        --phase "root (alone)=$alone_s:$times/alone.xml"
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
