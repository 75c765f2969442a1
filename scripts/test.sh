#!/usr/bin/env bash
# The statstorm test suite: installs what it needs (idempotent), then runs every test,
# including the ones against real php-fpm, nginx, GlusterFS and MediaWiki (root).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bash "$here/scripts/setup.sh" --dev
cd "$here"
exec .venv/bin/python -m pytest -q "$@"
