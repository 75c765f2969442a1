#!/usr/bin/env bash
# statstorm setup: installs the Debian packages and the Python package statstorm needs.
# Idempotent; takes seconds when everything is already there.  Run as root on Debian 12.
#   scripts/setup.sh            what running statstorm from this clone on a server needs:
#                               python3 and the Python package in .venv, strace, procps,
#                               iproute2, util-linux; no compiler and none of the lab's
#                               services. The eBPF tracer is built only where its toolchain
#                               (clang, bpftool, cc, libbpf-dev, libelf-dev, zlib1g-dev) is
#                               already installed; otherwise `statstorm trace` uses its fallback
#                               (bpftrace, else strace) and the package (scripts/package.sh)
#                               carries the tracer prebuilt. wrk (sweep, tune, apply --verify),
#                               apache2-utils (ab) and bpftrace (145 MB of LLVM libraries) are
#                               not installed: `apt-get install wrk bpftrace` where wanted.
#   scripts/setup.sh --lab      + the lab's packages (php-fpm, nginx, GlusterFS, MariaDB,
#                               Apache, MediaWiki, WordPress, composer, wrk, ab, bpftrace) and
#                               the tracer's toolchain, which it builds; APCu's apcu.so and
#                               PHP's headers unpacked into /opt/statstorm; vegeta where Go is
#                               installed: what `statstorm demo` and `statstorm lab` need
#   scripts/setup.sh --dev      --lab + test dependencies (pytest, mypy, ruff, pytest-xdist,
#                               Chromium, Prometheus, OpenAFS, Ceph…: everything
#                               `scripts/test.sh` runs)
#   scripts/setup.sh --afs      --lab + OpenAFS, for `statstorm lab up --storage afs`
#   scripts/setup.sh --ceph     --lab + Ceph, for `statstorm lab up --storage cephfs`
#   scripts/setup.sh [FLAGS] --print-plan
#                               prints the Debian packages FLAGS' mode installs (where
#                               missing), one a line, and does nothing else (no root needed)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
lab=0
dev=0
afs=0
ceph=0
plan=0
for arg in "$@"; do
    case $arg in
        --lab) lab=1 ;;
        --dev) dev=1 lab=1 ;;
        --afs) afs=1 lab=1 ;;
        --ceph) ceph=1 lab=1 ;;
        --print-plan) plan=1 ;;
        *) echo "statstorm setup: unknown argument $arg (flags: --lab, --dev, --afs, --ceph," \
                "--print-plan)" >&2
           exit 2 ;;
    esac
done

# a server's: the Python package's interpreter and venv, trace's strace fallback, what the
# verbs read the host with (ps, ss, findmnt, nsenter), the compiled tracer's libraries
debs=(python3 python3-venv strace procps iproute2 util-linux libelf1 zlib1g tar)
# --lab: the lab's services and apps (it starts its own instances, never the system's), the
# load generators, bpftrace, and the compiled tracer's build toolchain
lab_debs=(
    php8.2-fpm php8.2-cli php8.2-cgi php8.2-sqlite3 php8.2-intl php8.2-mbstring php8.2-xml
    nginx composer glusterfs-server glusterfs-client fuse3 bpftrace wrk apache2-utils
    mediawiki
    apache2 libapache2-mod-php8.2 libapache2-mod-fcgid wordpress wordpress-theme-twentytwentyone
    php8.2-mysql mariadb-server
    clang llvm libbpf-dev bpftool libelf-dev zlib1g-dev gcc libc6-dev
)
((lab)) && debs+=("${lab_debs[@]}")
# --dev only: headless Chromium opens `statstorm report`'s HTML in the report tests; `perf
# trace` is an anchor of bench/trace_overhead.py; the exporter's tests start a real
# Prometheus on loopback and check the contrib alert rules with promtool (its package; the
# packaged service is kept from starting, like the others). DokuWiki and phpMyAdmin are the
# stock-host tests' Debian-packaged apps that statstorm has no knowledge of (tests/stock_host.py):
# installed without a database or a web server configured for them. debootstrap makes the PHP
# roots (7.4 from bullseye, 8.4 from trixie) that `lab up --php` runs; the tests build them
# once (tests/test_php_root_lab.py), setup does not.
dev_debs=(chromium linux-perf prometheus dokuwiki phpmyadmin debootstrap)
((dev)) && debs+=("${dev_debs[@]}")
# --afs, and --dev (tests/test_lab_afs.py): OpenAFS's servers and its FUSE client, which
# `lab up --storage afs` starts as a cell of the lab's own (vos and pts come with
# openafs-client). Like glusterd, the packaged openafs-fileserver and openafs-client services
# are kept from starting (policy-rc.d below); no Kerberos is needed: the cell runs unkeyed.
afs_debs=(openafs-fileserver openafs-dbserver openafs-fuse openafs-client)
((afs || dev)) && debs+=("${afs_debs[@]}")
# --ceph, and --dev (tests/test_lab_ceph.py): a monitor, a manager, an OSD, an MDS and the FUSE
# client, which `lab up --storage cephfs` starts as a cluster of the lab's own on its own
# config (the `ceph` tool comes with ceph-common). The packaged ceph services are kept from
# starting like glusterd's (policy-rc.d below); no cephx keys are made: the cluster runs
# with `auth_*_required = none`.
ceph_debs=(ceph-mon ceph-osd ceph-mds ceph-mgr ceph-fuse)
((ceph || dev)) && debs+=("${ceph_debs[@]}")
if ((plan)); then
    printf '%s\n' "${debs[@]}"
    exit 0
fi

if [[ $(id -u) -ne 0 ]]; then
    echo "statstorm setup: must run as root (try: sudo $0 $*)" >&2
    exit 2
fi
missing=()
for p in "${debs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "statstorm setup: installing ${missing[*]}"
    # Keep Debian from starting the packaged nginx/php-fpm/glusterd services: the lab starts
    # its own instances and never touches the system's.
    policy=/usr/sbin/policy-rc.d
    own_policy=0
    if [[ ! -e $policy ]]; then
        printf '#!/bin/sh\nexit 101\n' > "$policy"; chmod 755 "$policy"; own_policy=1
    fi
    trap 'if [[ $own_policy == 1 ]]; then rm -f "$policy"; fi' EXIT
    export DEBIAN_FRONTEND=noninteractive
    debconf-set-selections <<'SEL'
phpmyadmin phpmyadmin/dbconfig-install boolean false
phpmyadmin phpmyadmin/reconfigure-webserver multiselect
dokuwiki dokuwiki/system/configure-webserver multiselect
dokuwiki dokuwiki/system/restart-webserver boolean false
SEL
    apt-get update -qq
    # Apache, mod_php, mod_fcgid, WordPress and MariaDB are for the Apache labs and
    # `statstorm matrix`; the lab starts its own apache2 and mariadbd, never the system's.
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

venv=$here/.venv
stamp=$venv/.statstorm-installed
python=/usr/bin/python3   # Debian's 3.11: the same on a fresh machine and here
want="$(sha1sum < "$here/pyproject.toml" | cut -c1-12) dev=$dev $python"
have=$(cat "$stamp" 2>/dev/null || true)
# a venv with the test dependencies serves every mode: `setup.sh --lab` after `--dev` keeps it
if [[ ! -x $venv/bin/python || ( $have != "$want" && $have != "${want/dev=0/dev=1}" ) ]]; then
    echo "statstorm setup: installing the Python package into $venv"
    rm -rf "$venv"
    "$python" -m venv "$venv"
    log=$(mktemp)
    target="$here"
    ((dev)) && target="$here[dev]"
    if ! { "$venv/bin/pip" install -q --upgrade pip && "$venv/bin/pip" install -q -e "$target"; } >"$log" 2>&1; then
        cat "$log" >&2; rm -f "$log"
        echo "statstorm setup: pip install failed (see above); is PyPI reachable?" >&2
        exit 1
    fi
    rm -f "$log"
    echo "$want" > "$stamp"
fi
# the package's byte code, written here once: every statstorm process (the suite starts
# hundreds) then loads it instead of compiling some 200 modules (about 0.15 s of CPU a
# process), also where PYTHONDONTWRITEBYTECODE is set; what is up to date is skipped
"$venv/bin/python" -m compileall -q -j 0 "$here/src/statstorm"

# ---------------------------------------------------------------------------------------------
# --lab: APCu for `statstorm apply`: the object cache an app's own caches go to, loaded into one pool
# only (php_admin_value[extension]). Debian's php8.2-apcu would enable it for every SAPI and
# pool, so its apcu.so is unpacked into statstorm's own directory instead. Skipped when there.
# On a server, install php8.2-apcu (and load it where wanted) instead.
php_api=$(php-config8.2 --phpapi 2>/dev/null || ls /usr/lib/php 2>/dev/null | grep -E '^20[0-9]{6}$' | sort | tail -1 || true)
apcu_so=/opt/statstorm/php/$php_api/apcu.so
if ((lab)) && [[ -n $php_api && ! -f $apcu_so && ! -f /usr/lib/php/$php_api/apcu.so ]]; then
    echo "statstorm setup: unpacking php8.2-apcu's apcu.so into ${apcu_so%/*} (not enabled anywhere)"
    tmpdeb=$(mktemp -d)
    chmod 755 "$tmpdeb"
    if (cd "$tmpdeb" && apt-get download -qq php8.2-apcu >/dev/null 2>&1) \
            && dpkg-deb -x "$tmpdeb"/php8.2-apcu_*.deb "$tmpdeb/x" \
            && [[ -f $tmpdeb/x/usr/lib/php/$php_api/apcu.so ]]; then
        mkdir -p "${apcu_so%/*}"
        chmod 755 /opt/statstorm /opt/statstorm/php "${apcu_so%/*}"
        install -m 0644 "$tmpdeb/x/usr/lib/php/$php_api/apcu.so" "$apcu_so"
    else
        echo "statstorm setup: could not fetch php8.2-apcu (is the Debian mirror reachable?);" \
             "statstorm apply cannot give apps an object cache" >&2
    fi
    rm -rf "$tmpdeb"
fi

# ---------------------------------------------------------------------------------------------
# --lab: sweep's vegeta, the open-model (constant arrival rate) load generator, from the Go module proxy.
# Installed once into /opt/statstorm/bin (the sweep adapter looks there first); skipped when
# that binary is already present.  Built through a throw-away module because the proxy refuses
# the version-list query that `go install …@version` makes.
vegeta_version=v12.12.0
vegeta_bin=/opt/statstorm/bin/vegeta
if ((lab)) && [[ ! -x $vegeta_bin ]]; then
    if ! command -v go >/dev/null; then
        echo "statstorm setup: Go is not installed; skipping vegeta (statstorm sweep --rate needs it)" >&2
    else
        echo "statstorm setup: installing vegeta $vegeta_version into ${vegeta_bin%/*}"
        mkdir -p "${vegeta_bin%/*}"
        tmpmod=$(mktemp -d)
        (
            cd "$tmpmod"
            go mod init statstorm-vegeta >/dev/null 2>&1
            go get "github.com/tsenart/vegeta/v12@$vegeta_version" >/dev/null 2>&1
            GOBIN=${vegeta_bin%/*} go install github.com/tsenart/vegeta/v12
        )
        rm -rf "$tmpmod"
    fi
fi

# ---------------------------------------------------------------------------------------------
# trace: the compiled eBPF tracer (src/statstorm/bpf: libbpf CO-RE, types from the kernel's
# BTF, no kernel headers needed), built into /opt/statstorm/bpf and stamped with its sources'
# hash (adapters/tracing/libbpf_trace.py uses only a loader built from the sources it has).
# --lab installs its toolchain above; without --lab it is built only with a toolchain that is
# already there (no compiler is installed on a server: the package carries the tracer prebuilt).
# PHP's headers (php8.2-dev, unpacked into statstorm's own directory, not installed) give it
# the layout of PHP's included-files table, which it reads instead of probing every include.
bpf_src=$here/src/statstorm/bpf
bpf_dest=/opt/statstorm/bpf
php_inc=/opt/statstorm/php/include/php/$php_api
toolchain=1
for tool in clang bpftool cc; do command -v "$tool" >/dev/null || toolchain=0; done
for header in bpf/libbpf.h libelf.h zlib.h; do [[ -f /usr/include/$header ]] || toolchain=0; done
if ((toolchain)) && [[ -n $php_api && ! -f $php_inc/main/php.h ]]; then
    echo "statstorm setup: unpacking php8.2-dev's headers into ${php_inc%/php/*} (not installed)"
    tmpdeb=$(mktemp -d)
    chmod 755 "$tmpdeb"
    if (cd "$tmpdeb" && apt-get download -qq php8.2-dev >/dev/null 2>&1) \
            && dpkg-deb -x "$tmpdeb"/php8.2-dev_*.deb "$tmpdeb/x" \
            && [[ -f $tmpdeb/x/usr/include/php/$php_api/main/php.h ]]; then
        mkdir -p "${php_inc%/*}"
        rm -rf "$php_inc"
        cp -r "$tmpdeb/x/usr/include/php/$php_api" "$php_inc"
        rm -f "$bpf_dest/source.sha"  # rebuilt with the table's layout
    else
        echo "statstorm setup: could not fetch php8.2-dev (is the Debian mirror reachable?);" \
             "the eBPF tracer probes every include instead of reading PHP's table" >&2
    fi
    rm -rf "$tmpdeb"
fi
bpf_want=$(cat "$bpf_src/trace.bpf.c" "$bpf_src/loader.c" "$bpf_src/window.h" "$bpf_src/window.c" "$bpf_src/probes.h" "$bpf_src/probes.c" "$bpf_src/build.sh" "$bpf_src/php_layout.c" "$bpf_src/php_table.h" "$bpf_src/php_table.c" | sha256sum | cut -c1-16)
if [[ ! -x $bpf_dest/statstorm-trace || $(cat "$bpf_dest/source.sha" 2>/dev/null) != "$bpf_want" ]]; then
    if ((!toolchain)); then
        echo "statstorm setup: no eBPF build toolchain here (clang, bpftool, cc, libbpf-dev," \
             "libelf-dev, zlib1g-dev; installed only with --lab): the tracer is not built and" \
             "\`statstorm trace\` uses its fallback (bpftrace, else strace); the package" \
             "(scripts/package.sh, README \"On your server\") carries it prebuilt" >&2
    elif [[ ! -r /sys/kernel/btf/vmlinux ]]; then
        echo "statstorm setup: this kernel has no BTF (/sys/kernel/btf/vmlinux); the compiled" \
             "eBPF tracer is not built and statstorm trace uses its fallback (bpftrace, else" \
             "strace)" >&2
    else
        echo "statstorm setup: building the eBPF tracer into $bpf_dest"
        log=$(mktemp)
        if ! bash "$bpf_src/build.sh" "$bpf_dest" "$php_inc" >"$log" 2>&1; then
            cat "$log" >&2; rm -f "$log"
            echo "statstorm setup: building the eBPF tracer failed (see above)" >&2
            exit 1
        fi
        rm -f "$log"
        echo "$bpf_want" > "$bpf_dest/source.sha"
    fi
fi
