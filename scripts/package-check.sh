#!/usr/bin/env bash
# statstorm package check: installs a built .deb into a clean Debian 12 root (debootstrap
# minbase with only php8.2-fpm and nginx, no compiler) and runs the installed statstorm there.
#   scripts/package-check.sh [DEB]     (default: the newest dist/statstorm_*_amd64.deb)
#   scripts/package-check.sh --root    only make (or find) the cached clean root; print its path
# The clean root is made once per machine and kept under /var/tmp/statstorm-package-roots,
# keyed by its release, mirror and package list; each check runs on an overlay of it (the
# cached root is never written) and unmounts everything after, also on failure.  No service
# of the root is started by its packages (policy-rc.d); before the install the check starts
# the root's php-fpm (Debian's pool www) and nginx itself, serving a small PHP site on a free
# loopback port (scripts/package-site.sh), and stops them by PID before unmounting; after it,
# the installed statstorm checks that pool and traces it (--counts, then full events) under
# a loopback load.  It refuses to run while this machine runs a pool www of its own (the
# root sees the machine's /proc).  Needs root, debootstrap and the Debian mirror once.
# Prints what it measured as `name value` lines at its end (tests/test_package.py reads them).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
release=bookworm
packages=(php8.2-fpm nginx)
only_root=0
deb=""
for arg in "$@"; do
    case $arg in --root) only_root=1 ;; *) deb=$arg ;; esac
done
if [[ $(id -u) -ne 0 ]]; then
    echo "statstorm package-check: must run as root (debootstrap, chroot, mounts)" >&2
    exit 2
fi
mirror=${STATSTORM_DEBIAN_MIRROR:-$(sed -n 's/^URIs: *\([^ ]*\/debian\)\/\?$/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)}
mirror=${mirror:-http://deb.debian.org/debian}
key=$(printf '%s\n' "$release" minbase "$mirror" "${packages[@]}" | sha256sum | cut -c1-12)
cache=/var/tmp/statstorm-package-roots
root=$cache/$release-$key

if [[ ! -f $root/.statstorm-root-ready ]]; then
    command -v debootstrap >/dev/null || { echo "statstorm package-check: debootstrap is not installed (scripts/setup.sh --dev)" >&2; exit 4; }
    mkdir -p "$cache"
    rm -rf "$root" "$root.tmp"
    log=$cache/$release-$key.build.log
    echo "statstorm package-check: making the clean $release root ($mirror; ${packages[*]}) in $root, once…" >&2
    started=$(date +%s)
    cleanup_build() {
        for m in "$root.tmp/proc" "$root.tmp/sys"; do mountpoint -q "$m" && umount -l "$m"; done
        return 0
    }
    trap cleanup_build EXIT
    if ! { nice -n 19 debootstrap --variant=minbase --components=main "$release" "$root.tmp" "$mirror" &&
           printf '#!/bin/sh\nexit 101\n' > "$root.tmp/usr/sbin/policy-rc.d" &&
           chmod 755 "$root.tmp/usr/sbin/policy-rc.d" &&
           mount -t proc proc "$root.tmp/proc" &&
           DEBIAN_FRONTEND=noninteractive LC_ALL=C nice -n 19 chroot "$root.tmp" apt-get update -q &&
           DEBIAN_FRONTEND=noninteractive LC_ALL=C nice -n 19 chroot "$root.tmp" \
               apt-get install -y -q --no-install-recommends "${packages[@]}" &&
           chroot "$root.tmp" apt-get clean; } >"$log" 2>&1; then
        tail -5 "$log" >&2
        echo "statstorm package-check: making the clean root failed (log: $log)" >&2
        exit 1
    fi
    cleanup_build
    trap - EXIT
    echo "root_build_seconds $(( $(date +%s) - started ))" >> "$log"
    touch "$root.tmp/.statstorm-root-ready"
    mv "$root.tmp" "$root"
fi
if ((only_root)); then
    echo "$root"
    exit 0
fi

[[ -n $deb ]] || deb=$(ls -t "$here"/dist/statstorm_*_amd64.deb 2>/dev/null | head -1)
[[ -f $deb ]] || { echo "statstorm package-check: no package (run scripts/package.sh)" >&2; exit 2; }

# An overlay of the cached root: the install writes only to its upper layer.
work=$(mktemp -d /var/tmp/statstorm-package-check.XXXXXX)
mnt=$work/root
mkdir -p "$work/upper" "$work/work" "$mnt"
served=()  # the PIDs of the root's php-fpm and nginx masters, once started
stop_served() {
    local pid
    for pid in "${served[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${served[@]}"; do
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    served=()
}
cleanup() {
    stop_served
    for m in "$mnt/sys/kernel/tracing" "$mnt/sys" "$mnt/proc" "$mnt"; do
        mountpoint -q "$m" && { umount "$m" 2>/dev/null || umount -l "$m"; }
    done
    rm -rf "$work"
}
trap cleanup EXIT
mount -t overlay overlay -o "lowerdir=$root,upperdir=$work/upper,workdir=$work/work" "$mnt"
mount -t proc proc "$mnt/proc"
mount -t sysfs sysfs "$mnt/sys"
mount -t tracefs tracefs "$mnt/sys/kernel/tracing"
cp "$deb" "$mnt/tmp/"
name=$(basename "$deb")
in_root() { DEBIAN_FRONTEND=noninteractive LC_ALL=C chroot "$mnt" "$@"; }

for tool in cc gcc clang; do
    if in_root sh -c "command -v $tool" >/dev/null; then
        echo "statstorm package-check: the clean root has a compiler ($tool)" >&2; exit 1
    fi
done
echo "--- what apt pulls in (apt-get -s install ./$name)"
in_root apt-get -s install "/tmp/$name" | sed -n 's/^Inst \([^ ]*\) .*/\1/p' | tr '\n' ' ' | tee "$work/pulled"
echo
source "$here/scripts/package-site.sh"
serve_site
echo "--- apt install ./$name, then statstorm check --pool www --json"
t0=$(date +%s.%N)
in_root apt-get install -y -q "/tmp/$name" > "$work/install.log" 2>&1 || { tail -20 "$work/install.log"; exit 1; }
t1=$(date +%s.%N)
check_rc=0
in_root statstorm check --pool www --json > "$work/check.json" 2> "$work/check.err" || check_rc=$?
t2=$(date +%s.%N)
python3 - "$work/check.json" "$check_rc" "$work/check.err" "$site" <<'PY'
import json, sys
rc, err = int(sys.argv[2]), open(sys.argv[3]).read().strip().splitlines()
try:
    got = json.load(open(sys.argv[1]))
except ValueError as exc:
    sys.exit(f"statstorm package-check: check --pool www in the clean root: exit {rc}, "
             f"no JSON ({exc}): {err[-1] if err else ''}")
findings = got.get("findings")
if rc != 0 or not isinstance(findings, list):
    sys.exit(f"statstorm package-check: check --pool www in the clean root: exit {rc}, "
             f"findings {type(findings).__name__}: {err[-1] if err else ''}")
docroots = [p.get("docroot") for p in got.get("pools", [])]
if docroots != [sys.argv[4]]:
    sys.exit(f"statstorm package-check: check --pool www in the clean root found the pool's "
             f"code at {docroots}, not {sys.argv[4]} (the root's nginx site passing to it)")
print(f"check: exit 0, pool www's code at {docroots[0]}, {len(findings)} findings:",
      ", ".join(sorted({str(f["id"]) for f in findings})))
PY
echo "--- statstorm --help"
in_root statstorm --help | head -5
echo "--- statstorm check --help"
in_root statstorm check --help | head -3
echo "--- the packaged tracer"
in_root python3 -I -c 'import sys; sys.path.insert(0, "/usr/lib/statstorm/lib")
from statstorm.adapters.tracing import libbpf_trace as t
print(t.find())'
in_root ldd "$(in_root python3 -I -c 'import sys; sys.path.insert(0, "/usr/lib/statstorm/lib")
from statstorm.adapters.tracing import libbpf_trace as t
print(t.find())')" | sed 's/ (0x.*//'
echo "--- statstorm doctor (the PHP it lists: the machine's, its /proc is bound in)"
doctor_rc=0
in_root statstorm doctor --json > "$work/doctor.json" || doctor_rc=$?
in_root statstorm doctor | tail -3 || true
python3 - "$work/doctor.json" "$doctor_rc" <<'PY'
import json, sys
got = json.load(open(sys.argv[1]))
rc, modes = int(sys.argv[2]), {m["mode"]: m["works"] for m in got["modes"]}
if rc != 0 or not modes.get("events") or not modes.get("counts"):
    sys.exit(f"statstorm package-check: doctor in the clean root: exit {rc}, modes {modes}")
print(f"doctor: exit 0, modes {modes}")
PY
trace_site
for f in /usr/share/man/man1/statstorm.1.gz /usr/share/bash-completion/completions/statstorm \
         /lib/systemd/system/statstorm-exporter.service /etc/default/statstorm-exporter; do
    [[ -e $mnt$f ]] || { echo "statstorm package-check: $f is not installed" >&2; exit 1; }
done
in_root sh -c 'MANWIDTH=80 man -l /usr/share/man/man1/statstorm.1.gz 2>/dev/null | head -3' || true
if compgen -G "$mnt/etc/systemd/system/*.wants/statstorm-exporter.service" >/dev/null; then
    echo "statstorm package-check: the exporter's unit is enabled" >&2; exit 1
fi
for tool in cc gcc clang; do
    if in_root sh -c "command -v $tool" >/dev/null; then
        echo "statstorm package-check: the package pulled in a compiler ($tool)" >&2; exit 1
    fi
done
echo "--- bash completion of 'statstorm tr'"
in_root env _STATSTORM_COMPLETE=bash_complete COMP_WORDS="statstorm tr" COMP_CWORD=1 statstorm | tr '\n' ' '
echo
in_root statstorm --version
echo "--- apt remove statstorm"
in_root apt-get remove -y -q statstorm > "$work/remove.log" 2>&1 || { tail -20 "$work/remove.log"; exit 1; }
if [[ -e $mnt/usr/lib/statstorm ]]; then
    echo "statstorm package-check: removing the package left /usr/lib/statstorm behind:" >&2
    find "$mnt/usr/lib/statstorm" | head -5 >&2; exit 1
fi
echo "--- numbers"
echo "deb_bytes $(stat -c %s "$deb")"
echo "installed_kib $(in_root dpkg-query -W -f='${Installed-Size}' statstorm)"
echo "pulled_packages $(wc -w < "$work/pulled")"
echo "install_seconds $(printf '%.1f' "$(echo "$t1 - $t0" | bc 2>/dev/null || python3 -c "print($t1-$t0)")")"
echo "check_seconds $(python3 -c "print(f'{$t2 - $t1:.1f}')")"
echo "check_after_install_seconds $(python3 -c "print(f'{$t2 - $t0:.1f}')")"
cat "$work/trace.numbers"
echo "ok"
