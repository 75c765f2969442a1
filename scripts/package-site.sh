# statstorm package check, its served site (sourced by scripts/package-check.sh, which sets
# $mnt, $work, $served and in_root): a small PHP site of files that include each other, served
# by the clean root's own php-fpm (Debian's www pool, /run/php/php8.2-fpm.sock) behind its own
# nginx on a free loopback port, both started inside the root (chroot) and stopped by PID
# (stop_served) before it is unmounted; then the installed statstorm traces that pool there.
#   serve_site    write the site and nginx's site, start php-fpm and nginx, wait for the page
#   trace_site    `trace --counts` and a full-event `trace` of the pool under a loopback load,
#                 their requests and the site's includes checked; numbers in $work/trace.numbers
site=/srv/statstorm-site
site_libs=(config.php util.php view.php)

fail() { echo "statstorm package-check: $*" >&2; exit 1; }

write_site() {
    local d=$mnt$site
    mkdir -p "$d/lib"
    # an include by absolute path, one relative to the script's directory (include_path's
    # '.'), one found through an include_path entry the script sets: three kinds of resolution
    cat > "$d/index.php" <<'PHP'
<?php
require __DIR__ . '/lib/config.php';
include 'lib/util.php';
set_include_path(__DIR__ . '/lib' . PATH_SEPARATOR . get_include_path());
require_once 'view.php';
echo render(site_title(), greet('statstorm')), "\n";
PHP
    cat > "$d/lib/config.php" <<'PHP'
<?php
function site_title(): string { return 'statstorm package check'; }
PHP
    cat > "$d/lib/util.php" <<'PHP'
<?php
function greet(string $who): string { return 'served to ' . $who; }
PHP
    cat > "$d/lib/view.php" <<'PHP'
<?php
function render(string $title, string $body): string {
    return file_exists(__DIR__ . '/config.php') ? "$title: $body" : $body;
}
PHP
    # Debian's nginx, its default site (port 80) off, this one on the loopback port
    rm -f "$mnt/etc/nginx/sites-enabled/default"
    cat > "$mnt/etc/nginx/sites-available/statstorm-site" <<NGINX
server {
	listen 127.0.0.1:$port;
	root $site;
	index index.php;

	location ~ \.php\$ {
		include snippets/fastcgi-php.conf;
		fastcgi_pass unix:/run/php/php8.2-fpm.sock;
	}
}
NGINX
    ln -s ../sites-available/statstorm-site "$mnt/etc/nginx/sites-enabled/statstorm-site"
}

serve_site() {
    # the root's /proc is the machine's: a pool www of the host would be traced with the root's
    if ps -eo args= | grep -qx 'php-fpm: pool www'; then
        fail "this machine already runs a php-fpm pool www (stop it first): the root's pool" \
             "www would not be the only one"
    fi
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    url=http://127.0.0.1:$port/index.php
    write_site
    echo "--- the root's php-fpm (pool www) and nginx serving $site on 127.0.0.1:$port"
    # chroot execs each server: $! is the master's PID (in_root, a function, would fork)
    LC_ALL=C chroot "$mnt" /usr/sbin/php-fpm8.2 --nodaemonize \
        --fpm-config /etc/php/8.2/fpm/php-fpm.conf > "$work/php-fpm.log" 2>&1 &
    served+=($!)
    LC_ALL=C chroot "$mnt" /usr/sbin/nginx -g 'daemon off;' > "$work/nginx.log" 2>&1 &
    served+=($!)
    local body=""
    for _ in $(seq 100); do
        body=$(curl -fsS --max-time 2 "$url" 2>/dev/null) && break
        sleep 0.1
    done
    [[ $body == "statstorm package check: served to statstorm" ]] ||
        fail "the root's nginx and php-fpm do not serve $url (got '${body:0:80}';" \
             "$(tail -1 "$work/nginx.log" "$work/php-fpm.log" 2>/dev/null | tr '\n' ' ')"
    local pid
    for pid in "${served[@]}"; do
        [[ $(tr '\0' ' ' < "/proc/$pid/cmdline") == *"master process"* ]] ||
            fail "PID $pid is not the master it was started as"
    done
    echo "served: $body (masters ${served[*]})"
}

# load SECONDS: GET the page in a loop (paced: 2 cores) for that long; prints the answers.
load() {
    python3 - "$url" "$1" <<'PY'
import sys, time, urllib.request
url, until, ok = sys.argv[1], time.monotonic() + float(sys.argv[2]), 0
while time.monotonic() < until:
    with urllib.request.urlopen(url, timeout=5) as r:
        ok += r.status == 200 and r.read().startswith(b"statstorm package check")
    time.sleep(0.02)
print(ok)
PY
}

# traced_under_load NAME SECONDS TRACE-ARGS…: the trace run while `load` sends requests from
# before it attaches until after it stops; its --json summary in $work/NAME.json
traced_under_load() {
    local name=$1 seconds=$2 rc=0 loader
    shift 2
    load "$seconds" > "$work/$name.load" &
    loader=$!
    in_root statstorm trace --pool www "$@" --json > "$work/$name.json" 2> "$work/$name.err" || rc=$?
    wait "$loader" || fail "the load on $url failed during trace $*"
    ((rc == 0)) || fail "statstorm trace --pool www $* in the clean root: exit $rc:" \
                        "$(tail -1 "$work/$name.err")"
}

trace_site() {
    echo "--- statstorm trace --pool www --counts -d 3 (under a loopback load)"
    traced_under_load counts 8 --counts -d 3 -o /tmp/counts.sst.gz
    tail -2 "$work/counts.err"
    echo "--- statstorm trace --pool www -d 4 -o /tmp/t.sst.gz (full events, under a loopback load)"
    traced_under_load full 9 -d 4 -o /tmp/t.sst.gz
    tail -2 "$work/full.err"
    in_root statstorm trace show /tmp/t.sst.gz --json > "$work/show.json" ||
        fail "statstorm trace show /tmp/t.sst.gz in the clean root failed"
    in_root statstorm trace show /tmp/t.sst.gz | head -12 || true
    # the site's includes among the trace's PHP operations, read by the installed statstorm
    in_root python3 -I - "$site" "${site_libs[@]}" > "$work/ops.json" <<'PY' ||
import collections, json, sys
sys.path.insert(0, "/usr/lib/statstorm/lib")
from pathlib import Path
from statstorm.results.trace import read_trace
site, libs = sys.argv[1], sys.argv[2:]
ops = collections.Counter()
for o in read_trace(Path("/tmp/t.sst.gz")).operations.values():
    name = str(o.args.get("name", o.args.get("path", "")))
    if o.req >= 0 and o.kind in ("include", "include_resolve") and name.rsplit("/", 1)[-1] in libs:
        ops[f"{o.kind} {name}"] += 1
print(json.dumps(dict(ops)))
PY
        fail "reading /tmp/t.sst.gz's operations with the installed statstorm failed"
    python3 - "$work" "$site" "${site_libs[@]}" > "$work/trace.numbers" <<'PY'
import json, sys
from pathlib import Path
work, site, libs = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
def fail(msg):
    sys.exit(f"statstorm package-check: {msg}")
counts, full, show = (json.loads((work / f"{n}.json").read_text()) for n in ("counts", "full", "show"))
ops = json.loads((work / "ops.json").read_text())
if not counts.get("requests"):
    fail(f"trace --counts of pool www saw no request ({(work / 'counts.load').read_text().strip()} sent)")
if not full.get("requests") or show.get("requests") != full["requests"]:
    fail(f"the full trace of pool www saw {full.get('requests')} requests, its file {show.get('requests')}")
included = {n.split(" ", 1)[1].rsplit("/", 1)[-1] for n in ops if n.startswith("include ")}
if set(libs) - included:
    fail(f"the full trace attributes no include of {sorted(set(libs) - included)} "
         f"(its includes of the site: {sorted(ops)})")
resolved = sum(n for k, n in ops.items() if k.startswith("include_resolve "))
for k, n in sorted(ops.items()):
    print(f"  {n:5d}  {k}", file=sys.stderr)
print("counts_requests", counts["requests"])
print("trace_requests", full["requests"])
print("trace_includes_attributed", sum(n for k, n in ops.items() if k.startswith("include ")))
print("trace_resolutions_attributed", resolved)
PY
}
