#!/usr/bin/env bash
# Builds statstorm-trace (loader.c + trace.bpf.c, libbpf CO-RE) into DEST from this directory.
# The kernel's BTF gives the types (no kernel headers needed).  Used by scripts/setup.sh.
#   build.sh DEST
set -euo pipefail
src=$(cd "$(dirname "$0")" && pwd)
dest=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
arch=$(uname -m | sed -e 's/x86_64/x86/' -e 's/aarch64/arm64/')
bpftool btf dump file /sys/kernel/btf/vmlinux format c > "$work/vmlinux.h"
clang -O2 -g -Wall -target bpf -D__TARGET_ARCH_"$arch" -I"$work" -I"/usr/include/$(uname -m)-linux-gnu" \
    -c "$src/trace.bpf.c" -o "$work/trace.bpf.o"
bpftool gen skeleton "$work/trace.bpf.o" name trace_bpf > "$work/trace.skel.h"
cc -O2 -Wall -pthread -I"$work" -I"$src" "$src/loader.c" "$src/window.c" -o "$work/statstorm-trace" -lbpf -lelf -lz
mkdir -p "$dest"
install -m 0755 "$work/statstorm-trace" "$dest/statstorm-trace"
