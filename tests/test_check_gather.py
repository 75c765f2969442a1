"""The parsers `statstorm check` gathers facts with, on fixed inputs; its usage errors. No root."""

from __future__ import annotations

import os
import struct
import subprocess
import time
from pathlib import Path

from conftest import invoke
from statstorm.adapters.host import elf, memory
from statstorm.adapters.php import fastcgi
from statstorm.adapters.php.codetree import app_root as _app_root
from statstorm.adapters.php.codetree import scan as _scan_tree
from statstorm.adapters.php.codetree import writable_paths
from statstorm.adapters.servers import nginx_conf
from statstorm.adapters.labs.phpfpm import pool_directives
from statstorm.adapters.php.pool_facts import app_docroot
from statstorm.model.checkfacts import MountFact, fsbench_p50, sample_note, trace_facts
from statstorm.model.tracestats import summarize_trace
from statstorm.results.trace import Request, RequestCounts, Syscall, Trace, new_header

NGINX_CONF = """\
events {}
http {
    server {
        listen 80;
        root /srv/other;
        location ~ \\.php$ { fastcgi_pass unix:/run/php/other.sock; }
    }
    server {
        listen 8080;
        root /srv/app/current/public;   # the release symlink
        location ~ [^/]\\.php(/|$) {
            include fastcgi_params;
            fastcgi_param SCRIPT_FILENAME $document_root$fastcgi_script_name;
            fastcgi_pass unix:/run/php/www.sock;
        }
        location = /status {
            fastcgi_param SCRIPT_FILENAME $uri;
            fastcgi_pass unix:/x;
        }
    }
}
"""

FPM_TT = """\
[21-Nov-2026 10:00:00] NOTICE: [global]
[21-Nov-2026 10:00:00] NOTICE: \tpid = /run/php/php-fpm.pid
[21-Nov-2026 10:00:00] NOTICE: [www]
[21-Nov-2026 10:00:00] NOTICE: \tlisten = /run/php/www.sock
[21-Nov-2026 10:00:00] NOTICE: \tchroot = undefined
[21-Nov-2026 10:00:00] NOTICE: \tpm = dynamic
[21-Nov-2026 10:00:00] NOTICE: \tpm.max_children = 5
[21-Nov-2026 10:00:00] NOTICE: \tphp_admin_value[open_basedir] = /srv/app
[21-Nov-2026 10:00:00] NOTICE: [other]
[21-Nov-2026 10:00:00] NOTICE: \tlisten = /run/php/other.sock
"""


def test_nginx_sites(tmp_path: Path) -> None:
    (tmp_path / "fastcgi_params").write_text("fastcgi_param QUERY_STRING $query_string;\n")
    (tmp_path / "nginx.conf").write_text(NGINX_CONF)
    config = nginx_conf.read(tmp_path / "nginx.conf")
    (site,) = nginx_conf.sites_passing_to(config, "/run/php/www.sock")
    assert (site.docroot, site.script_filename, site.passes_to) == (
        "/srv/app/current/public", "$document_root$fastcgi_script_name", ("/run/php/www.sock",))
    (other,) = nginx_conf.sites_passing_to(config, "/run/php/other.sock")
    assert other.docroot == "/srv/other"


def test_pool_directives() -> None:
    d = pool_directives(FPM_TT, "www")
    assert d["listen"] == "/run/php/www.sock" and d["chroot"] == ""
    assert d["pm.max_children"] == "5" and d["php_admin_value[open_basedir]"] == "/srv/app"
    assert pool_directives(FPM_TT, "other") == {"listen": "/run/php/other.sock"}


def test_fastcgi_records_round_trip() -> None:
    req = fastcgi.build_request({"SCRIPT_FILENAME": "/x.php", "LONG": "v" * 300})
    assert req[:8] == struct.pack("!BBHHBx", 1, fastcgi.BEGIN_REQUEST, 1, 8, 0)
    assert b"\x0f\x06SCRIPT_FILENAME/x.php" in req
    assert b"\x04\x80\x00\x01\x2cLONG" in req  # a length >= 128 takes 4 bytes
    reply = (fastcgi._record(fastcgi.STDOUT, b"Content-type: text/html\r\n\r\n{}")
             + fastcgi._record(fastcgi.STDERR, b"warn")
             + fastcgi._record(fastcgi.END_REQUEST, b"\0" * 8))
    assert fastcgi.parse_response(reply) == (b"Content-type: text/html\r\n\r\n{}", b"warn", True)
    assert fastcgi.parse_response(reply[:20])[2] is False


def _elf64(segments: list[tuple[int, int, int]]) -> bytes:
    """A minimal little-endian ELF64 header + program headers (type, flags, memsz)."""
    head = bytearray(64)
    head[:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<Q", head, 0x20, 64)
    struct.pack_into("<HH", head, 0x36, 56, len(segments))
    body = b""
    for ptype, flags, memsz in segments:
        ph = bytearray(56)
        struct.pack_into("<II", ph, 0, ptype, flags)
        struct.pack_into("<Q", ph, 0x28, memsz)
        body += bytes(ph)
    return bytes(head) + body


def test_elf_text_segment(tmp_path: Path) -> None:
    data = _elf64([(1, 4, 0x1000), (1, 5, 0x315E5D), (1, 6, 0x2000), (2, 5, 0x99)])
    assert elf.text_segment_bytes(data) == 0x315E5D
    p = tmp_path / "bin"
    p.write_bytes(data)
    assert elf.read_text_segment(str(p)) == 0x315E5D
    assert elf.text_segment_bytes(b"#!/bin/sh\n" * 10) is None
    assert elf.read_text_segment(str(tmp_path / "missing")) is None


def test_meminfo_and_thp() -> None:
    info = memory.parse_meminfo("MemTotal:  8000000 kB\nMemAvailable: 4000000 kB\n"
                                "HugePages_Total:      4\nHugepagesize:       2048 kB\n")
    assert info == {"MemTotal": 8000000, "MemAvailable": 4000000, "HugePages_Total": 4,
                    "Hugepagesize": 2048}
    assert memory.thp_mode("always [madvise] never\n") == "madvise"


def test_app_root(tmp_path: Path) -> None:
    (tmp_path / "public").mkdir()
    assert _app_root(str(tmp_path / "public")) == str(tmp_path / "public")
    (tmp_path / "vendor").mkdir()
    assert _app_root(str(tmp_path / "public")) == str(tmp_path)


def test_scan_tree(tmp_path: Path) -> None:
    (tmp_path / "pub" / "sub").mkdir(parents=True)
    old = tmp_path / "pub" / "a.php"
    old.write_text("<?php")
    os.utime(old, (1e9, 1e9))
    ahead = tmp_path / "pub" / "sub" / "b.php"
    ahead.write_text("<?php")
    os.utime(ahead, (time.time() + 3600,) * 2)
    (tmp_path / "pub" / "new.php").write_text("<?php")  # just written
    (tmp_path / "pub" / "sub" / ".user.ini").write_text("")
    (tmp_path / "loop").symlink_to(tmp_path / "pub")  # followed once, not twice
    t = _scan_tree([str(tmp_path)], ".user.ini", 2)
    assert t.php_files == 3 and t.user_ini_files == 1
    assert len(t.future) == 1 and t.future[0].endswith("/sub/b.php")
    assert len(t.recent) == 1 and t.recent[0].endswith("/new.php")
    base = Path(t.future[0]).parent.parent  # pub/ or loop/, whichever the walk met first
    entries = {str(base / n) for n in ("a.php", "new.php", "sub", "sub/b.php")}
    p = base
    while str(p) != "/":
        entries.add(str(p))
        p = p.parent
    assert t.entries == len(entries)
    assert t.bytes == sum(48 + len(e) + 1 for e in entries)


def test_writable_paths(tmp_path: Path) -> None:
    (tmp_path / "var").mkdir()
    (tmp_path / "src").mkdir()
    got = writable_paths({"session.save_path": "2;/srv/sessions", "opcache.file_cache": "",
                          "upload_tmp_dir": "/srv/up"}, str(tmp_path))
    assert got == [("session files", "/srv/sessions"), ("upload temp dir", "/srv/up"),
                   ("app directory", str(tmp_path / "var"))]
    assert writable_paths({"session.save_handler": "redis",
                           "session.save_path": "tcp://x:6379"}, "") == []


def test_trace_facts_from_a_trace() -> None:
    h = new_header("bpftrace", created="", host="", targets={"pool": "www"},
                   settings={"include_path": "/a:/b"}, mounts=[("/", "ext4")])
    tr = Trace(header=h)
    for req in range(4):
        pid = 10 + req % 2
        tr.requests[req] = Request(req, pid, req * 100, req * 100 + 50, "/srv/index.php", "/")
        calls = [Syscall(0, pid, "lstat", "newfstatat", "/srv/app/x.php", 0, req=req),
                 Syscall(0, pid, "access", "access", "/srv/vendor/acme/Foo.php", -2, req=req,
                         kind="file_probe"),
                 Syscall(0, pid, "stat", "newfstatat", "/srv/app/y.php", 0, req=req,
                         kind="opcache_revalidate")]
        if req < 2:  # each worker's first request is cold
            calls += [Syscall(0, pid, "lstat", "newfstatat", "/srv", 0, req=req)] * 5
        tr.syscalls += calls
    f = trace_facts(tr, summarize_trace(tr))
    assert f.requests == 4 and f.detail == "events"
    assert f.vendor_failed_per_request == 1.0 and f.vendor_failed_examples == (
        "/srv/vendor/acme/Foo.php",)
    assert f.revalidate_per_request == 1.0
    assert f.ok_lstat_per_request == 3.5
    assert f.cold_extra_calls == 5.0
    # /srv, /srv/app, /srv/app/x.php, /srv/app/y.php
    assert f.working_set_entries == 4
    assert f.working_set_bytes == 4 * 49 + len("/srv/srv/app/srv/app/x.php/srv/app/y.php")


def test_trace_facts_from_a_counts_trace() -> None:
    """A `trace --counts` trace has no paths: per-request totals only, nothing invented."""
    h = new_header("bpftrace", created="", host="", targets={}, settings={}, mounts=[],
                   detail="counts")
    tr = Trace(header=h)
    for req in range(3):
        tr.requests[req] = Request(req, 10, req * 100, req * 100 + 50)
        tr.request_counts.append(RequestCounts(req, 10, {"lstat": (40, 2, 0), "stat": (5, 0, 0)}))
    f = trace_facts(tr, summarize_trace(tr))
    assert f.detail == "counts" and f.requests == 3
    assert f.per_request["lstat"] == 40 and f.per_request["total"] == 45
    assert f.working_set_bytes == 0 and f.ok_lstat_per_request == 0
    assert f.vendor_failed_per_request == 0 and f.cold_extra_calls is None


def _unfinished_trace(finished: int) -> Trace:
    """Four requests of mod_php children traced by PID, `finished` of them seen to end (the
    rest broke off: the trace stopped first), each with its calls."""
    h = new_header("ebpf", created="", host="", targets={"pids": [10, 11]}, settings={},
                   mounts=[("/", "ext4")])
    tr = Trace(header=h)
    for req in range(4):
        end = req * 100 + 50 if req < finished else -1
        tr.requests[req] = Request(req, 10 + req % 2, req * 100, end, "/srv/index.php", "/")
        tr.syscalls += [Syscall(0, 10 + req % 2, "lstat", "newfstatat", "/srv/x.php", 0,
                                req=req)] * 3
    return tr


def test_a_trace_with_no_finished_request_gives_check_no_figure() -> None:
    """Seen on Debian's mod_php: a trace whose 4 requests never showed their end made check's
    facts take the median of nothing (a traceback). Now: requests 0, no figure, a note, and
    the rules judge the pool as traced by nothing."""
    from test_check_rules import facts
    from statstorm.model.rules import evaluate
    tr = _unfinished_trace(0)
    f = trace_facts(tr, summarize_trace(tr))
    assert f.requests == 0 and f.per_request == {} and f.ok_lstat_per_request == 0
    assert sample_note(tr) == ("not enough requests in the trace (0 finished of 4): check goes "
                               "on without its figures")
    evaluate(facts(trace=f))  # no exception


def test_a_trace_of_few_finished_requests_is_used_and_said() -> None:
    one, three = _unfinished_trace(1), _unfinished_trace(3)
    f = trace_facts(one, summarize_trace(one))
    assert f.requests == 1 and f.ok_lstat_per_request == 3.0
    assert sample_note(one) == "only 1 finished request(s) in the trace: its figures are one " \
        "sample each"
    assert sample_note(three) is None
    # a trace without requests of its own (an imported `strace -c` table): its count stands
    assert sample_note(Trace(header=one.header)) is None


def test_fsbench_p50() -> None:
    from statstorm.model.latency import summarize as lat
    from statstorm.results.fsbench import Cell, FsbenchResult

    cells = tuple(Cell(op=op, state=state, path_index=i, path=p, clients=1, passes=1,
                       calls_per_pass=3, ok=3, enoent=0, other_errors=0,
                       stats=lat([us * 1000] * 3, wall_s=0.1))
                  for i, p, op, state, us in ((1, "/mnt/code", "negative", "warm", 180.5),
                                              (1, "/mnt/code", "negative", "cold", 900.0),
                                              (0, "/code", "walk", "warm", 1.2)))
    result = FsbenchResult(paths=("/code", "/mnt/code"), ops=("walk", "negative"),
                           states=("cold", "warm"), clients=1, iterations=1, duration_s=None,
                           max_files=None, started_at="",
                           mounts=({"mount_point": "/"}, {"mount_point": "/mnt"}), workload=(),
                           overhead_p50_us=0.1, cold=(), cells=cells, caveats=(), complete=True)
    assert fsbench_p50(result) == {"/mnt": {"negative": 180.5}, "/": {"walk": 1.2}}


def test_fsbench_file_as_fsbench_writes_it(tmp_path: Path) -> None:
    """--fsbench reads the file `statstorm fsbench -o` writes (same dataclasses, same writer)."""
    from statstorm.commands.check import _load_fsbench
    from statstorm.model.latency import summarize as lat
    from statstorm.results.fsbench import Cell, FsbenchResult, write

    cells = tuple(Cell(op=op, state="warm", path_index=i, path=p, clients=1, passes=1,
                       calls_per_pass=3, ok=3, enoent=0, other_errors=0,
                       stats=lat([us * 1000] * 3, wall_s=0.1))
                  for i, (p, op, us) in enumerate((("/code", "walk", 2),
                                                   ("/mnt/code", "negative", 150))))
    res = FsbenchResult(paths=("/code", "/mnt/code"), ops=("walk", "negative"), states=("warm",),
                        clients=1, iterations=1, duration_s=None, max_files=None, started_at="",
                        mounts=({"mount_point": "/"}, {"mount_point": "/mnt"}), workload=(),
                        overhead_p50_us=0.1, cold=(), cells=cells, caveats=(), complete=True)
    out = tmp_path / "fs.json"
    write(out, res)
    assert _load_fsbench(out) == {"/": {"walk": 2.0}, "/mnt": {"negative": 150.0}}


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return invoke(["check", *args], home)


def test_usage_errors_are_one_line(tmp_path: Path) -> None:
    p = _cli(tmp_path, "--pool", "www", "--lab", "x")
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "not several" in p.stderr
    p = _cli(tmp_path, "--trace", str(tmp_path / "none.sst.gz"))
    assert p.returncode == 2 and "no such file" in p.stderr and "Traceback" not in p.stderr
    bad = tmp_path / "bad.sst"
    bad.write_text("hello\n")
    p = _cli(tmp_path, "--lab", "nope-" + tmp_path.name, "--trace", str(bad))
    assert p.returncode == 2 and "not a statstorm" in p.stderr
    other = tmp_path / "other.json"
    other.write_text('{"schema": "statstorm.sweep/1"}')
    p = _cli(tmp_path, "--lab", "nope-" + tmp_path.name, "--fsbench", str(other))
    assert p.returncode == 2 and "not a `statstorm fsbench" in p.stderr
    p = _cli(tmp_path, "--pool", "statstorm-no-such-pool")
    assert p.returncode == 2 and "no php-fpm pool" in p.stderr


def test_the_app_judged_is_the_one_on_network_storage() -> None:
    """A pool serving the same app from local disk and from a GlusterFS mount: its object
    cache is turned on in the network site's configuration, not the first site's."""
    local = MountFact("docroot", "/srv/local/w", "/", "ext4", "local")
    net = MountFact("docroot", "/srv/net/w", "/srv/net", "fuse.glusterfs", "glusterfs-fuse")
    inc = MountFact("include_path", "/srv/net/lib", "/srv/net", "fuse.glusterfs",
                    "glusterfs-fuse")
    assert app_docroot(["/srv/local/w", "/srv/net/w"], (local, net)) == "/srv/net/w"
    assert app_docroot(["/srv/local/w", "/srv/other"], (local, inc)) == "/srv/local/w"
    assert app_docroot([], ()) == ""
