#!/usr/bin/env bash
# statstorm package: builds, from this clone, into dist/:
#   statstorm_<version>_amd64.deb      for Debian 12: `apt install ./statstorm_<version>_amd64.deb`
#   statstorm-<version>-py3-none-linux_x86_64.whl   for pipx / pip
# both carrying the compiled tracer prebuilt (statstorm/bpf/bin/statstorm-trace, stamped with
# the hash of the sources it was built from; adapters/tracing/libbpf_trace.py finds it).
# The tracer is built against Debian 12's 6.1 kernel types (the BTF of its linux-image
# package, fetched once and cached under /var/tmp/statstorm-vmlinux), not this machine's, and
# links libbpf in: where it runs it needs libc, libelf and zlib only.
# The .deb bundles its Python libraries (wheels from PyPI, built at package time) in
# /usr/lib/statstorm/lib for Debian 12's python3 (3.11): Debian 12 has neither hdrhistogram
# nor crossplane, its numpy, scipy, matplotlib and prometheus-client are older than
# pyproject.toml's floors, and its python3-scipy brings a compiler (it depends on
# python3-pythran, which depends on g++ and libboost-dev: 154 packages, 800 MB with
# matplotlib's). Nothing is fetched at install time. Their versions and wheels are those of
# packaging/bundled.lock (sha256-checked): every build bundles the same; `bash
# scripts/lock-bundled.sh` updates it.
# Files are taken from git (tracked files as they are in the work tree); a tree with
# uncommitted changes gives a version that says so (<version>+dirty).
# $STATSTORM_DIST: where to write them (default: dist/ of this clone). $STATSTORM_DEB_COMPRESS:
# the .deb's compressor, dpkg-deb's -Z: zstd by default (Debian 12's dpkg reads it; measured
# here: 72 MB, written in 1 s, installed in 12 s; xz: 52 MB, 75-130 s, 28-43 s).
# Needs: what scripts/setup.sh --lab installs (clang, bpftool, libbpf-dev, gcc, dpkg-deb), PyPI and
# the Debian mirror (once). Run as any user that can write dist/ and /var/tmp.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
started=$(date +%s)
say() { echo "statstorm package: [$(( $(date +%s) - started )) s] $*" >&2; }
python=/usr/bin/python3   # Debian 12's 3.11: the interpreter the .deb's libraries are for
for tool in git clang bpftool cc dpkg-deb "$python"; do
    command -v "$tool" >/dev/null || { say "$tool is not installed (run scripts/setup.sh --lab)"; exit 4; }
done

version=$("$python" -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["project"]["version"])' "$here/pyproject.toml")
if [[ -n $(git -C "$here" status --porcelain --untracked-files=no) ]]; then
    version=$version+dirty
    say "the work tree has uncommitted changes: version $version"
fi
work=$(mktemp -d /var/tmp/statstorm-package.XXXXXX)
trap 'rm -rf "$work"' EXIT
tree=$work/tree
mkdir -p "$tree"
git -C "$here" ls-files -z | (cd "$here" && xargs -0 cp --parents -t "$tree" 2>/dev/null || true)
if [[ $version == *+dirty ]]; then
    sed -i "s/^version = .*/version = \"$version\"/" "$tree/pyproject.toml"
    sed -i "s/^__version__ = .*/__version__ = \"$version\"/" "$tree/src/statstorm/__init__.py"
fi

# --- PHP's layouts: the tracer's table made again from each version's phpX.Y-dev headers ---
# (scripts/php_layouts.py; the packages cached once), so the package reads PHP 7.4-8.4 with
# no headers and no compiler where it runs; a table that differs from them stops the build
say "PHP's layouts, made from each version's headers…"
"$python" "$here/scripts/php_layouts.py" --out "$tree/src/statstorm/bpf/php_layouts.json" \
    >"$work/layouts.log" 2>&1 || { cat "$work/layouts.log" >&2; say "PHP's layouts failed"; exit 1; }

# --- the kernel types: Debian 12's newest 6.1 kernel image, its BTF as vmlinux.h --------------
kcache=/var/tmp/statstorm-vmlinux
kpkg=$(apt-cache search --names-only '^linux-image-6\.1\.0-[0-9]+-amd64$' 2>/dev/null | cut -d' ' -f1 | sort -V | tail -1)
kver=$(apt-cache policy "$kpkg" 2>/dev/null | sed -n 's/ *Candidate: //p')
vmlinux_h=$kcache/${kpkg}_${kver}.h
if [[ -z $kpkg || -z $kver ]]; then
    say "apt knows no Debian 12 linux-image-6.1 package (apt-get update?)"; exit 4
fi
if [[ ! -s $vmlinux_h ]]; then
    say "the kernel types of $kpkg $kver (its BTF), once…"
    mkdir -p "$kcache"
    kdir=$work/kernel
    mkdir -p "$kdir"
    chmod 777 "$kdir"  # apt's _apt user downloads there
    (cd "$kdir" && apt-get download -q "$kpkg=$kver" >/dev/null 2>&1) || { say "could not fetch $kpkg"; exit 1; }
    dpkg-deb --fsys-tarfile "$kdir"/"$kpkg"_*.deb | tar -x -C "$kdir" --wildcards './boot/vmlinuz-*'
    # vmlinuz: a boot stub followed by the compressed vmlinux (xz in Debian 12, gzip or zstd
    # elsewhere); the ELF inside carries the .BTF section bpftool reads.
    "$python" - "$kdir"/boot/vmlinuz-* "$kdir/vmlinux" <<'PY'
import gzip, lzma, sys, zlib
data = open(sys.argv[1], "rb").read()
for magic, open_ in ((b"\xfd7zXZ\x00", lambda: lzma.LZMADecompressor(lzma.FORMAT_XZ)),
                     (b"\x1f\x8b\x08", lambda: zlib.decompressobj(16 + zlib.MAX_WBITS))):
    off = data.find(magic)
    while off >= 0:
        try:
            out = open_().decompress(data[off:])
        except (lzma.LZMAError, zlib.error):
            out = b""
        if out[:4] == b"\x7fELF":
            open(sys.argv[2], "wb").write(out)
            sys.exit(0)
        off = data.find(magic, off + 1)
sys.exit("no compressed ELF kernel found in " + sys.argv[1])
PY
    bpftool btf dump file "$kdir/vmlinux" format c > "$vmlinux_h.tmp"
    mv "$vmlinux_h.tmp" "$vmlinux_h"
    rm -rf "$kdir"
fi

# --- the tracer, into the package's statstorm/bpf/bin ------------------------------------------
bpf=$tree/src/statstorm/bpf
# PHP 8.2's layout (the included-files table the tracer reads) from the php8.2-dev headers
# scripts/setup.sh --lab unpacks; without them the packaged tracer would probe every include.
php_inc=$(ls -d /opt/statstorm/php/include/php/20* 2>/dev/null | sort | tail -1 || true)
if [[ -z $php_inc || ! -f $php_inc/main/php.h ]]; then
    say "no PHP headers in /opt/statstorm/php/include (run scripts/setup.sh --lab): the tracer would" \
        "not know PHP 8.2's layout"
    exit 4
fi
say "building the eBPF tracer against $kpkg $kver's types and PHP API ${php_inc##*/}'s layout"
VMLINUX_H=$vmlinux_h nice -n 10 bash "$bpf/build.sh" "$bpf/bin" "$php_inc" >"$work/bpf.log" 2>&1 ||
    { cat "$work/bpf.log" >&2; say "building the tracer failed"; exit 1; }
PYTHONPATH=$tree/src "$python" -c 'from statstorm.adapters.tracing import libbpf_trace as t; print(t.source_hash())' > "$bpf/bin/source.sha"
printf 'kernel types: %s %s\nPHP layout: PHP API %s (php8.2-dev %s)\n' "$kpkg" "$kver" \
    "${php_inc##*/}" "$(apt-cache policy php8.2-dev 2>/dev/null | sed -n 's/ *Candidate: //p')" \
    > "$bpf/bin/build-info"

# --- the wheel ------------------------------------------------------------------------------
dist=${STATSTORM_DIST:-$here/dist}
mkdir -p "$dist"
# The tracer is a Linux x86-64 program: the wheel says so (it is pure Python otherwise).
printf '[bdist_wheel]\nplat_name = linux_x86_64\n' > "$tree/setup.cfg"
venv=$work/venv
"$python" -m venv "$venv"
say "building the wheel"
"$venv/bin/pip" wheel -q --no-deps -w "$work/wheel" "$tree" >"$work/wheel.log" 2>&1 ||
    { cat "$work/wheel.log" >&2; say "building the wheel failed (is PyPI reachable?)"; exit 1; }
whl=$(ls "$work"/wheel/statstorm-*.whl)
rm -f "$dist"/statstorm-"$version"-*.whl
cp "$whl" "$dist/"

# --- the .deb -------------------------------------------------------------------------------
say "building the Debian package (its Python libraries: packaging/bundled.lock's wheels)"
deb=$work/deb
lib=$deb/usr/lib/statstorm/lib
# the libraries exactly as locked (versions and wheels' hashes: scripts/lock-bundled.sh
# writes the lock), then statstorm's wheel, neither resolving anything; then pip check on the
# result: every library's requirements (statstorm's included) met by what is there
{ "$venv/bin/pip" install -q --target "$lib" --only-binary :all: --no-deps --require-hashes \
      --no-warn-script-location --disable-pip-version-check -r "$tree/packaging/bundled.lock" &&
  "$venv/bin/pip" install -q --target "$lib" --no-deps --no-warn-script-location \
      --disable-pip-version-check "$whl"; } >"$work/pip.log" 2>&1 ||
    { cat "$work/pip.log" >&2; say "pip install --target failed (is PyPI reachable?)"; exit 1; }
PYTHONPATH=$lib "$venv/bin/python" -m pip check --disable-pip-version-check >"$work/pip.log" 2>&1 ||
    { cat "$work/pip.log" >&2; say "the bundled libraries do not meet their requirements:" \
          "packaging/bundled.lock is stale (bash scripts/lock-bundled.sh)"; exit 1; }
rm -rf "$lib/bin"
# the libraries' own test suites (numpy's, scipy's, matplotlib's: about 27 MB) are never imported
find "$lib" \( -name __pycache__ -o -name tests \) -type d -prune -exec rm -rf {} +
mkdir -p "$deb/usr/bin"
cat > "$deb/usr/bin/statstorm" <<'SH'
#!/usr/bin/python3 -I
# statstorm, from its own libraries in /usr/lib/statstorm/lib (Debian package)
import sys
sys.path.insert(0, "/usr/lib/statstorm/lib")
from statstorm.cli import main
main()
SH
chmod 755 "$deb/usr/bin/statstorm"
run_staged() { "$python" -I -c 'import sys; sys.path.insert(0, sys.argv.pop(1)); sys.argv[0] = "statstorm"; from statstorm.cli import main; main()' "$lib" "$@"; }
mkdir -p "$deb/usr/share/man/man1" "$deb/usr/share/bash-completion/completions"
"$python" -I -c 'import sys; sys.path.insert(0, sys.argv[1]); from pathlib import Path
from statstorm.cli import manpage; manpage.write(Path(sys.argv[2]))' "$lib" "$deb/usr/share/man/man1" >/dev/null
gzip -9n "$deb"/usr/share/man/man1/*.1
_STATSTORM_COMPLETE=bash_source run_staged > "$deb/usr/share/bash-completion/completions/statstorm"
grep -q _STATSTORM_COMPLETE "$deb/usr/share/bash-completion/completions/statstorm" ||
    { say "click made no bash completion"; exit 1; }
mkdir -p "$deb/lib/systemd/system" "$deb/etc/default" "$deb/usr/share/doc/statstorm"
sed 's#/usr/local/bin/statstorm#/usr/bin/statstorm#; s#^\# Install as .*#\# Installed by the statstorm package (not enabled: systemctl enable --now statstorm-exporter);#' \
    "$tree/contrib/systemd/statstorm-exporter.service" > "$deb/lib/systemd/system/statstorm-exporter.service"
install -m 0644 "$tree/contrib/default/statstorm-exporter" "$deb/etc/default/statstorm-exporter"
cp -r "$tree/contrib/prometheus" "$tree/contrib/grafana" "$deb/usr/share/doc/statstorm/"
gzip -9nc "$tree/README.md" > "$deb/usr/share/doc/statstorm/README.md.gz"
# which versions of the libraries this build bundled (packaging/bundled.lock's)
"$python" -I -c 'import sys; sys.path.insert(0, sys.argv[1])
from importlib import metadata
for d in sorted(metadata.distributions(path=[sys.argv[1]]), key=lambda d: d.metadata["Name"].lower()):
    print(d.metadata["Name"], d.version)' "$lib" > "$deb/usr/share/doc/statstorm/bundled-libraries.txt"
printf 'statstorm %s\nLicense: MIT\nBundled Python libraries in /usr/lib/statstorm/lib: see their *.dist-info/ for their licenses.\n' \
    "$version" > "$deb/usr/share/doc/statstorm/copyright"
# The compiled byte code is made at install time, where it is removed from again.
mkdir -p "$deb/DEBIAN"
cat > "$deb/DEBIAN/postinst" <<'SH'
#!/bin/sh
set -e
if [ "$1" = configure ]; then
    python3 -I -m compileall -q /usr/lib/statstorm/lib >/dev/null 2>&1 || true
    if [ -d /run/systemd/system ]; then systemctl daemon-reload >/dev/null 2>&1 || true; fi
fi
SH
cat > "$deb/DEBIAN/prerm" <<'SH'
#!/bin/sh
set -e
find /usr/lib/statstorm/lib -name __pycache__ -prune -exec rm -rf {} + 2>/dev/null || true
SH
cat > "$deb/DEBIAN/postrm" <<'SH'
#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then systemctl daemon-reload >/dev/null 2>&1 || true; fi
SH
chmod 755 "$deb"/DEBIAN/postinst "$deb"/DEBIAN/prerm "$deb"/DEBIAN/postrm
echo /etc/default/statstorm-exporter > "$deb/DEBIAN/conffiles"
size=$(du -sk --exclude=DEBIAN "$deb" | cut -f1)
# Depends: what the bundled libraries and the tracer link against (numpy's and scipy's
# wheels carry their own BLAS); Recommends: strace (trace's fallback where eBPF is refused);
# Suggests: what only some verbs run (bpftrace: trace's other backend; wrk, ab: sweep, tune,
# matrix; debootstrap: lab's PHP roots; chromium: none at run time).
cat > "$deb/DEBIAN/control" <<EOF
Package: statstorm
Version: $version
Architecture: amd64
Maintainer: statstorm developers <statstorm@localhost>
Installed-Size: $size
Depends: python3 (>= 3.11), python3 (<< 3.12), libc6 (>= 2.36), libelf1, zlib1g, util-linux
Recommends: strace
Suggests: bpftrace, wrk, apache2-utils, debootstrap
Section: admin
Priority: optional
Description: find, explain, fix and prove the file-system cost of PHP web serving
 statstorm traces PHP's file-metadata syscalls (lstat walks, failed include_path
 lookups, OPcache revalidation, autoloader probes) per request with a compiled
 eBPF tracer (prebuilt, CO-RE: no compiler needed), checks php-fpm pools, nginx
 and Apache for their causes, applies the fixes and measures them.
 .
 Its Python libraries are bundled in /usr/lib/statstorm/lib; the exporter's
 systemd unit is installed, not enabled.
EOF
out=$dist/statstorm_${version}_amd64.deb
rm -f "$out"
say "writing the .deb (${STATSTORM_DEB_COMPRESS:-zstd})"
dpkg-deb --root-owner-group -Z"${STATSTORM_DEB_COMPRESS:-zstd}" --threads-max="$(nproc)" \
    --build "$deb" "$out" >/dev/null
say "done in $(( $(date +%s) - started )) s:"
ls -l "$out" "$dist/$(basename "$whl")" | awk '{print "  " $5 " bytes  " $NF}' >&2
