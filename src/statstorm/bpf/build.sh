#!/usr/bin/env bash
# Builds statstorm-trace (loader.c + trace.bpf.c, libbpf CO-RE) into DEST from this directory.
# The kernel's BTF gives the types (no kernel headers needed).  Used by scripts/setup.sh and
# scripts/package.sh.
#   build.sh DEST [PHP_INCLUDE]
# $VMLINUX_H, when set, is the kernel types to build against instead of this machine's BTF
# (scripts/package.sh: Debian 12's 6.1 kernel, the oldest the package supports; CO-RE
# relocates the programs to the running kernel's layout when they load). libbpf is linked in
# (libbpf.a), so the loader needs only libc, libelf and zlib where it runs.
# PHP_INCLUDE (default: the headers setup unpacks into /opt/statstorm/php/include/php/API) gives
# the layout of PHP's included-files table (php_layout.c); without it the loader probes every
# include's zend_stream_open instead of reading the table.
set -euo pipefail
src=$(cd "$(dirname "$0")" && pwd)
dest=$1
php_inc=${2:-$(ls -d /opt/statstorm/php/include/php/20* 2>/dev/null | sort | tail -1 || true)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
arch=$(uname -m | sed -e 's/x86_64/x86/' -e 's/aarch64/arm64/')
if [[ -n ${VMLINUX_H:-} ]]; then
    cp "$VMLINUX_H" "$work/vmlinux.h"
else
    bpftool btf dump file /sys/kernel/btf/vmlinux format c > "$work/vmlinux.h"
fi
clang -O2 -g -Wall -target bpf -D__TARGET_ARCH_"$arch" -I"$work" -I"/usr/include/$(uname -m)-linux-gnu" \
    -c "$src/trace.bpf.c" -o "$work/trace.bpf.o"
bpftool gen skeleton "$work/trace.bpf.o" name trace_bpf > "$work/trace.skel.h"
echo "/* no PHP headers: no layout of the included-files table */" > "$work/php_layout.h"
if [[ -n $php_inc && -f $php_inc/main/php.h ]] &&
        cc -w -I"$php_inc" -I"$php_inc/main" -I"$php_inc/Zend" -I"$php_inc/TSRM" \
            "$src/php_layout.c" -o "$work/php_layout" && "$work/php_layout" > "$work/layout.h"; then
    mv "$work/layout.h" "$work/php_layout.h"
fi
cc -O2 -Wall -pthread -I"$work" -I"$src" "$src/loader.c" "$src/window.c" "$src/probes.c" "$src/php_table.c" -o "$work/statstorm-trace" \
    -Wl,-Bstatic -lbpf -Wl,-Bdynamic -lelf -lz
mkdir -p "$dest"
install -m 0755 "$work/statstorm-trace" "$dest/statstorm-trace"
