#!/usr/bin/env bash
# The main job on the built-in default: MediaWiki on a GlusterFS lab, measured, then removed.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bash "$here/scripts/setup.sh" --lab   # the lab's packages (MediaWiki, GlusterFS…), the tracer built
exec "$here/.venv/bin/statstorm" demo "$@"
