"""The attributor, the trace file format and the trace CLI's error paths (no root needed)."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any

import pytest

from conftest import invoke, run_cli
from statstorm.errors import UsageError
from statstorm.adapters.tracing import bpftrace
from statstorm.adapters.tracing.count_lines import feed_fields
from statstorm.model.attribution import Attributor
from statstorm.model.count_attribution import CountAttributor
from statstorm.model.events import Reorder, feed
from statstorm.model.tracestats import SummaryBuilder, include_entry, summarize_trace
from statstorm.results.trace import (Operation, Request, RequestCounts, Syscall, TraceWriter,
                                     new_header, read_trace)

FIXTURES = Path(__file__).parent / "fixtures"


class Collect:
    def __init__(self) -> None:
        self.syscalls: list[Syscall] = []
        self.requests: list[Request] = []
        self.ops: list[Operation] = []

    def syscall(self, s: Syscall) -> None:
        self.syscalls.append(s)

    def request(self, r: Request) -> None:
        self.requests.append(r)

    def operation(self, o: Operation) -> None:
        self.ops.append(o)


def run_lines(lines: list[str], *, single: bool = False) -> Collect:
    sink = Collect()
    attr = Attributor(sink, [("/", "ext4"), ("/srv/nfs", "nfs4")], cwd_of=lambda pid: "/srv/app",
                      single_request=single)
    attr.t0 = 0
    ro = Reorder(window_ns=10)
    for line in lines:
        ro.push(line.encode().split(b"\t"))
    for fields in ro.pop_ready(flush=True):
        feed(attr, fields)
    attr.finish()
    return sink


FPM_REQUEST = [
    "A\t10\t100",
    "S\t10\t110\t5\tnewfstatat\t256\t-100\t0\t/srv/nfs/www/index.php",  # fix_pathinfo lstat
    "U\t10\t120\t/srv/nfs/www/index.php",
    "V\t10\t/index.php",
    "X\t10\t130",
    "S\t10\t131\t2\tgetcwd\t0\t-100\t10\t/",
    "S\t10\t132\t2\tchdir\t0\t-100\t0\t/srv/nfs/www",
    "O\t10\t140\tresolve\t5\tx.php",
    "P\t10\t.:/usr/share/php:/srv/nfs/lib",
    "O\t10\t141\trealpath\t0\t/srv/nfs/www/x.php",
    "S\t10\t142\t3\tnewfstatat\t256\t-100\t-2\t/srv/nfs/www/x.php",
    "R\t10\t144\trealpath",
    "S\t10\t145\t3\tnewfstatat\t256\t-100\t-2\t/usr/share/php/x.php",
    "S\t10\t146\t3\tnewfstatat\t256\t-100\t0\t/srv/nfs/lib/x.php",
    "R\t10\t150\tresolve",
    "O\t10\t160\tcompile\t2\tx.php",
    "S\t10\t161\t1\topenat\t0\t-100\t5\t/srv/nfs/lib/x.php",
    "S\t10\t163\t1\tnewfstatat\t4096\t5\t0\t",
    "R\t10\t170\tcompile",
    "O\t10\t180\tstat\t15\t/srv/nfs/lib/missing.php",
    "S\t10\t181\t1\taccess\t0\t-100\t-2\tmissing.php",
    "R\t10\t182\tstat",
    "S\t10\t190\t1\tnewfstatat\t0\t-100\t0\t/srv/nfs/lib/y.php",
    "Q\t10\t200",
    "A\t10\t300",
]


def test_fpm_request_is_split_and_attributed() -> None:
    sink = run_lines(FPM_REQUEST)
    first = sink.requests[0]
    assert (first.id, first.pid, first.script, first.uri) == (0, 10, "/srv/nfs/www/index.php",
                                                              "/index.php")
    assert first.end_ns == 200
    kinds = [(s.call, s.kind) for s in sink.syscalls if s.req == 0]
    assert kinds == [
        ("lstat", "main_script"), ("getcwd", "main_script"), ("chdir", "main_script"),
        ("lstat", "include_resolve"), ("lstat", "include_resolve"),
        ("lstat", "include_resolve"), ("open", "include"), ("fstat", "include"),
        ("access", "file_probe"), ("stat", "opcache_revalidate")]
    # fstat names the file opened on that fd; a relative access path uses the cwd.
    assert sink.syscalls[7].path == "/srv/nfs/lib/x.php"
    assert sink.syscalls[8].path == "/srv/nfs/www/missing.php"
    assert sink.syscalls[3].mount == 1 and sink.syscalls[4].mount == 0
    resolve = next(o for o in sink.ops if o.kind == "include_resolve")
    assert resolve.args["include_path"] == ".:/usr/share/php:/srv/nfs/lib"
    assert resolve.args["candidates"] == ["/srv/nfs/www/x.php"]
    probe = next(o for o in sink.ops if o.kind == "file_probe")
    assert probe.args["func"] == "file_exists"
    # The second accept opened request 1; it never finished, so its end is -1.
    assert sink.requests[1].end_ns == -1


def test_summary_groups_failed_lookups_by_include_path_entry() -> None:
    sink = run_lines(FPM_REQUEST)
    b = SummaryBuilder(new_header("bpftrace", created="", host="", targets={}, settings={},
                                  mounts=[("/", "ext4"), ("/srv/nfs", "nfs4")]))
    for s in sink.syscalls:
        b.syscall(s)
    for o in sink.ops:
        b.operation(o)
    for r in sink.requests:
        b.request(r)
    out = b.build()
    assert out.requests == 1
    assert out.per_request.lstat == 4 and out.per_request.failed == 3
    assert out.per_request.total == 9  # chdir is recorded but not counted
    assert {e.entry: e.failed for e in out.failed_by_include_path_entry or ()} == {
        ".": 1, "/usr/share/php": 1}
    assert [m.mount for m in out.by_mount or ()] == ["/srv/nfs", "/"]
    assert include_entry("/a/./x", ".", "/a") == "."


def test_reorder_restores_time_order_across_cpus() -> None:
    # The second CPU's buffer is read first; the op enter must still precede its syscall.
    lines = [
        "S\t10\t142\t3\tnewfstatat\t256\t-100\t-2\t/srv/a.php",
        "R\t10\t150\tresolve",
        "O\t10\t140\tresolve\t5\ta.php",
        "P\t10\t/srv",
    ]
    sink = run_lines(lines, single=True)
    assert sink.syscalls[0].kind == "include_resolve"
    assert sink.ops[0].args["include_path"] == "/srv"


def test_cmd_mode_is_one_request_with_startup() -> None:
    sink = run_lines([
        "S\t7\t10\t1\topenat\t0\t-100\t3\t/etc/php/8.2/cli/php.ini",
        "U\t7\t20\t/srv/app/t.php",
        "S\t7\t30\t1\tnewfstatat\t0\t-100\t0\tt.php",
        "X\t7\t40",
        "Q\t7\t50",
    ], single=True)
    assert [s.kind for s in sink.syscalls] == ["startup", "main_script"]
    assert sink.syscalls[1].path == "/srv/app/t.php"
    assert len(sink.requests) == 1 and sink.requests[0].end_ns == 50


def test_cmd_mode_without_php_shutdown_ends_with_the_command() -> None:
    sink = run_lines(["S\t7\t10\t1\topenat\t0\t-100\t3\t/etc/passwd",
                      "S\t7\t35\t1\tnewfstatat\t-2\t-100\t0\t/nope", "E\t7"], single=True)
    assert len(sink.requests) == 1 and sink.requests[0].end_ns == 35
    assert {s.req for s in sink.syscalls} == {sink.requests[0].id}


def test_held_command_waits_for_release_whatever_fd_the_pipe_gets(tmp_path: Path) -> None:
    """The command must not start before the tracer releases it, also when the hold pipe
    does not get descriptor 3 (it did not when a file was open, and the command then ran
    before the probes were attached)."""
    import time
    from statstorm.adapters.host.procs import HeldCommand
    mark = tmp_path / "started"
    spare = [os.open("/dev/null", os.O_RDONLY) for _ in range(3)]  # the pipe gets fds > 3
    try:
        held = HeldCommand(["sh", "-c", f"read x; echo \"$x\" > {mark}"])
    finally:
        for fd in spare:
            os.close(fd)
    try:
        time.sleep(0.3)
        assert not held.ended() and not mark.exists()
    finally:
        held.release()
    assert held.proc.wait(timeout=10) == 0
    assert mark.read_text() == "\n"  # its stdin reads as empty once released


def test_perf_buffers_split_a_fixed_budget_over_cpus() -> None:
    assert bpftrace.perf_pages(1) == bpftrace.PERF_PAGES_MAX
    assert bpftrace.perf_pages(2) == 4096 and bpftrace.perf_pages(16) == 512
    assert bpftrace.perf_pages(3) == 2048  # a power of two, within the budget
    assert bpftrace.perf_pages(10_000) == bpftrace.PERF_PAGES_MIN
    assert bpftrace.env()["BPFTRACE_PERF_RB_PAGES"] == str(bpftrace.perf_pages(os.cpu_count() or 1))


def write_small(path: Path, *, path_text: str = "/srv/a.php") -> None:
    h = new_header("bpftrace", created="now", host="h", targets={}, settings={"x": "1"},
                   mounts=[("/", "ext4")])
    with TraceWriter(path, h) as w:
        w.syscall(Syscall(5, 1, "lstat", "newfstatat", path_text, -2, 100, 0, -1, 0, "other"))
        w.syscall(Syscall(6, 1, "stat", "newfstatat", path_text, 0, 100, 0, -1, 0, "other"))
        w.request(Request(0, 1, 0, 10, "/srv/index.php", "/index.php"))


@pytest.mark.parametrize("name", ["t.sst.gz", "t.sst"])
def test_trace_file_round_trip_with_non_utf8_path(tmp_path: Path, name: str) -> None:
    weird = b"/srv/caf\xe9/\x01x.php".decode("utf-8", "surrogateescape")
    out = tmp_path / name
    write_small(out, path_text=weird)
    t = read_trace(out)
    assert t.syscalls[0].path == weird and t.syscalls[0].ret == -2
    assert t.requests[0].script == "/srv/index.php"
    assert t.trailer["events"] == 2 and t.trailer["stopped"] == "end"
    s = summarize_trace(t)
    assert s.per_request.total == 2 and s.per_request.failed == 1
    assert not list(tmp_path.glob(".t.sst*"))  # the temp file was renamed into place


def test_interrupted_writer_leaves_the_previous_trace(tmp_path: Path) -> None:
    out = tmp_path / "i.sst.gz"
    write_small(out)
    before = out.read_bytes()
    with pytest.raises(KeyboardInterrupt):
        with TraceWriter(out, new_header("bpftrace", created="", host="", targets={},
                                         settings={}, mounts=[])) as w:
            w.syscall(Syscall(1, 1, "stat", "stat", "/x", 0))
            raise KeyboardInterrupt
    assert out.read_bytes() == before and not list(tmp_path.glob(".i.sst*"))


@pytest.mark.parametrize("content,expect", [
    (b"", "empty file"),
    (b"\x89PNG\r\n\x1a\n\x00\x00", "not a statstorm trace"),
    (b'{"format": "statstorm-trace", "version": 99}\n', "version 99"),
    (b'{"format": "statstorm-trace", "version": 1}\n["s", 1, 2\n', "not a statstorm trace line"),
])
def test_malformed_trace_files_are_one_line_errors(tmp_path: Path, content: bytes,
                                                   expect: str) -> None:
    bad = tmp_path / "bad.sst"
    bad.write_bytes(content)
    with pytest.raises(UsageError) as exc:
        read_trace(bad)
    assert expect in str(exc.value) and "\n" not in str(exc.value)
    gz = tmp_path / "trunc.sst.gz"
    write_small(gz)
    gz.write_bytes(gz.read_bytes()[:40])
    with pytest.raises(UsageError) as exc:
        read_trace(gz)
    assert "\n" not in str(exc.value)


def cli_json(args: list[str], home: Path) -> dict[str, Any]:
    proc = invoke(args, home, check=True)
    return dict(json.loads(proc.stdout))


def test_import_show_and_diff_through_the_cli(tmp_path: Path) -> None:
    table = FIXTURES / "strace/seed-systemadmin-es-table1.txt"
    a = cli_json(["trace", "import", str(table), "--requests", "1000", "-o",
                  str(tmp_path / "c.sst.gz"), "--json"], tmp_path)
    assert a["source"] == "strace-c" and a["requests"] == 1000
    assert a["totals"]["stat"] == 383248 and a["totals"]["lstat"] == 54892
    assert a["per_request"]["stat"] == pytest.approx(383.248)
    for key in ("lstat", "stat", "fstat", "access", "open", "readlink", "getcwd", "total",
                "failed"):
        assert key in a["per_request"] and key in a["totals"]
    log = FIXTURES / "strace/real-cli-f-tt-T-y.log"
    b = cli_json(["trace", "import", str(log), "-o", str(tmp_path / "l.sst.gz"), "--json"],
                 tmp_path)
    assert b["requests"] == 1 and b["per_request"]["total"] > 0
    shown = cli_json(["trace", "show", str(tmp_path / "l.sst.gz"), "--json"], tmp_path)
    assert shown["per_request"] == b["per_request"]
    d = cli_json(["trace", "diff", str(tmp_path / "c.sst.gz"), str(tmp_path / "l.sst.gz"),
                  "--json"], tmp_path)
    assert d["per_request"]["stat"]["a"] == pytest.approx(383.248)
    assert "syscall_time_us" not in d  # an strace -c table has no per-request time
    assert b["syscall_time_us"]["per_request"] > 0  # from strace -T
    same = cli_json(["trace", "diff", str(tmp_path / "l.sst.gz"), str(tmp_path / "l.sst.gz"),
                     "--json"], tmp_path)
    assert same["syscall_time_us"]["ratio"] == 1.0
    text = invoke(["trace", "show", str(tmp_path / "l.sst.gz")], tmp_path, check=True).stdout
    assert "per request" in text and "failed" in text


@pytest.mark.parametrize("args,expect", [
    (["trace", "--apache", "--pool", "x"], "exactly one target"),
    (["trace", "--pool", "x", "--cmd", "php a.php"], "exactly one target"),
    (["trace", "--cmd", "php a.php", "-d", "0"], "--duration"),
    (["trace", "--cmd", "php a.php", "-o", "/nonexistent-dir/x.sst"], "does not exist"),
    (["trace", "show", "/nonexistent.sst"], "no such trace file"),
    (["trace", "--cmd", "php a.php", "--counts", "--backend", "strace"], "--counts"),
    (["trace", "--lab", "--counts", "--sample", "4"], "--sample"),
    (["trace", "--lab", "--sample", "0"], "--sample must be at least 1"),
    (["trace", "--lab", "--sample", "4", "--backend", "bpftrace"], "--sample"),
    (["trace", "--cmd", "php a.php", "--sample", "4"], "one request"),
    (["trace", "import", "/nonexistent.log"], "/nonexistent.log"),
])
def test_bad_usage_is_a_one_line_error(tmp_path: Path, args: list[str], expect: str,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # no target: trace takes the only php-fpm pool running; here none runs, whatever the host's
    from statstorm.adapters.php import fpm_master
    monkeypatch.setattr(fpm_master, "running_pools", lambda: [])
    proc = invoke(args, tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and expect in lines[0], proc.stderr


def test_non_utf8_import_path_and_gz_detection(tmp_path: Path) -> None:
    plain = tmp_path / "plain.sst"
    write_small(plain)
    gz = tmp_path / "renamed.sst"
    with gzip.open(gz, "wb") as fh:
        fh.write(plain.read_bytes())
    assert read_trace(gz).syscalls[0].path == "/srv/a.php"


@pytest.mark.root
def test_missing_pool_and_missing_privileges(tmp_path: Path) -> None:
    proc = run_cli(["trace", "--pool", "no-such-pool", "-d", "1"], tmp_path)
    assert proc.returncode == 2 and "no php-fpm pool 'no-such-pool'" in proc.stderr
    tmp_path.chmod(0o755)
    proc = run_cli(["trace", "--cmd", "php -v", "-o", "/tmp/x.sst"], tmp_path, user="www-data")
    assert proc.returncode == 3, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "root" in proc.stderr


# -- counts mode (`trace --counts`) -----------------------------------------------------------
def k_line(pid: int, start: int, end: int, **calls: tuple[int, int, int]) -> str:
    """A K line as the counting program prints it: calls=(ok, failed, latency_ns)."""
    vals = [0] * (2 * len(bpftrace.COUNT_CALLS))
    for call, (ok, bad, lat) in calls.items():
        i = bpftrace.COUNT_CALLS.index(call)
        vals[2 * i] = (ok << bpftrace.COUNT_SHIFT) | lat
        vals[2 * i + 1] = bad << bpftrace.COUNT_SHIFT
    return "\t".join(["K", str(pid), str(start), str(end), *map(str, vals)])


class CountCollect:
    def __init__(self) -> None:
        self.requests: list[Request] = []
        self.counts: list[RequestCounts] = []

    def request(self, r: Request) -> None:
        self.requests.append(r)

    def request_counts(self, rc: RequestCounts) -> None:
        self.counts.append(rc)


def run_count_lines(lines: list[str], *, single: bool = False) -> CountCollect:
    sink = CountCollect()
    attr = CountAttributor(sink, single_request=single)
    attr.t0 = 0
    ro = Reorder(window_ns=10)
    for line in lines:
        ro.push(line.encode().split(b"\t"))
    for fields in ro.pop_ready(flush=True):
        feed_fields(attr, fields)
    attr.finish()
    return sink


def test_count_program_counts_every_call_in_the_kernel() -> None:
    prog = bpftrace.count_program(bpftrace.Targets((7,), (1,)), ["/usr/sbin/php-fpm8.2"],
                                  syscalls={"newfstatat", "openat", "accept4", "access"})
    assert "@tgt[7] = 1;" in prog and "@tgt[1] = 2;" in prog
    for name in ("newfstatat", "openat", "access"):
        assert f"sys_enter_{name} /@tgt[pid] == 1/" in prog and f"sys_exit_{name} {{" in prog
    # a thread's slot is overwritten by its next entry, and goes when the thread ends
    assert "delete(@k[tid])" in prog and prog.count("delete(@k[") == 1
    assert "sys_enter_accept4" in prog and "@st[pid] = nsecs" in prog
    assert "printf(\"S\\t" not in prog and "uprobe:" not in prog  # no per-event lines
    assert prog.count("printf(\"K") == 2  # at the next accept() and at exit
    assert "usdt:/usr/sbin/php-fpm8.2:php:request__startup" in prog


def test_unpack_counts() -> None:
    vals = [int(v) for v in k_line(1, 0, 0, lstat=(3, 2, 500), open=(1, 0, 70)).split("\t")[4:]]
    assert bpftrace.unpack_counts(vals) == {"lstat": (5, 2, 500), "open": (1, 0, 70)}


def test_counts_become_requests_named_by_their_script() -> None:
    sink = run_count_lines([
        k_line(10, 0, 50, stat=(4, 0, 100)),  # mid-request when the trace began: outside
        "U\t10\t120\t/srv/www/index.php", "V\t10\t/index.php",
        k_line(10, 100, 200, lstat=(5, 1, 600), stat=(2, 0, 100)),
        k_line(11, 150, 260, access=(0, 3, 30)),  # no startup probe seen: no script
        k_line(11, 0, 270),  # an idle worker's accept(): nothing
    ])
    assert [(r.id, r.pid, r.start_ns, r.end_ns, r.script, r.uri) for r in sink.requests] == [
        (0, 10, 100, 200, "/srv/www/index.php", "/index.php"), (1, 11, 150, 260, "", "")]
    assert [(c.req, c.calls) for c in sink.counts] == [
        (-1, {"stat": (4, 0, 100)}), (0, {"lstat": (6, 1, 600), "stat": (2, 0, 100)}),
        (1, {"access": (3, 3, 30)})]
    b = SummaryBuilder(new_header("bpftrace", created="", host="", targets={}, settings={},
                                  mounts=[], detail="counts"))
    for r in sink.requests:
        b.request(r)
    for c in sink.counts:
        b.request_counts(c)
    s = b.build()
    assert s.requests == 2 and s.detail == "counts"
    assert s.per_request.total == (8 + 3) / 2 and s.per_request.failed == 2
    assert s.totals.stat == 6 and s.outside_requests == 4
    assert s.syscall_time_us is not None
    assert s.syscall_time_us.by_call == {"lstat": 0.3, "stat": 0.1, "access": 0.0}


def test_counts_of_a_command_are_one_request(tmp_path: Path) -> None:
    sink = run_count_lines([k_line(20, 0, 90, open=(2, 1, 10)),
                            k_line(21, 0, 100, open=(1, 0, 5), getcwd=(1, 0, 1))], single=True)
    assert len(sink.requests) == 1 and sink.requests[0].end_ns == 100
    assert sink.counts[0].calls == {"open": (4, 1, 15), "getcwd": (1, 0, 1)}
    # A counts trace round-trips through the file and summarises the same.
    path = tmp_path / "k.sst.gz"
    with TraceWriter(path, new_header("bpftrace", created="", host="", targets={},
                                      settings={}, mounts=[], detail="counts")) as w:
        w.request(sink.requests[0])
        w.request_counts(sink.counts[0])
    tr = read_trace(path)
    assert tr.request_counts == sink.counts and tr.trailer["events"] == 5
    s = summarize_trace(tr)
    assert s.per_request.open == 4 and s.per_request.total == 5


def test_sampled_trace_states_its_sample() -> None:
    """A sampled trace's trailer: requests recorded and counted, the scale, the counted calls
    by type and the 95 % error of the recorded mean (finite-population corrected)."""
    from statstorm.model.sampling import CountedRequests, scale, whatif_note
    c = CountedRequests()
    for n in (10, 10, 14):
        c.add({"stat": (n - 2, 1, 1000), "lstat": (2, 0, 500)})
    t = c.trailer(4, [10, 12])
    assert t["recorded_requests"] == 2 and t["counted_requests"] == 3
    assert t["scale"] == scale(2, 3) == 2.5
    assert t["counted_calls"]["stat"] == {"calls": 28, "failed": 3, "latency_ns": 3000}
    assert t["counted_calls_per_request"] == round(34 / 3, 3)
    every = [10, 12, 10, 10, 14]
    m = sum(every) / 5
    sd = (sum((x - m) ** 2 for x in every) / 4) ** 0.5
    assert t["calls_per_request_error"] == round(1.96 * sd / 2 ** 0.5 * (3 / 4) ** 0.5, 3)
    # Nothing to tell from one request; a trace that recorded everything needs no note.
    assert CountedRequests().stated_error([5]) == 0.0
    assert whatif_note({"sampling": {"one_in": 1}}) is None
    assert "1 request in 10" in str(whatif_note({"sampling": {"one_in": 10}}))


def test_compiled_tracer_records_decode_to_the_bpftrace_events() -> None:
    """The compiled tracer's binary records become the typed events of bpftrace's lines."""
    from statstorm.model.events import parse_fields
    import struct
    from statstorm.adapters.tracing import libbpf_trace as lt
    path = b"/srv/a.php"
    s_rec = struct.pack("<HBBIQQqqq", 48 + len(path), ord("S"), lt.CALLS.index("openat"), 7,
                        100, 5, 0x80000, -100, -2) + path
    o_rec = struct.pack("<HBBIQQqqq", 48 + 3, ord("O"), lt.FUNCS.index("stat"), 7, 90,
                        (1 << 64) - 1, 0, 0, 0) + b"x.p"
    r_rec = struct.pack("<HBBIQQ", 24, ord("R"), lt.FUNCS.index("stat"), 7, 120, 0)
    f_rec = struct.pack("<HBBIQQ", 24, ord("F"), 0, 7, 130, 8)
    k_rec = struct.pack("<HBBIQQ16Q", 152, ord("K"), 0, 7, 200, 150, *range(16))
    got = list(lt.decode(s_rec + o_rec + r_rec + f_rec + k_rec + b"\x30\x00"))
    lines = [b"S\t7\t100\t5\topenat\t524288\t-100\t-2\t/srv/a.php", b"O\t7\t90\tstat\t-1\tx.p",
             b"R\t7\t120\tstat", b"F\t7\t8"]
    assert got[:4] == [parse_fields(ln.split(b"\t")) for ln in lines]
    assert got[4] == ("K", 7, 150, 200, list(range(16)))
    assert len(got) == 5  # the cut record at the end is dropped


def test_compiled_tracer_table_entries_sent_once_decode_to_their_paths() -> None:
    """An included-files table entry whose path OPcache interned comes once in full (T, with
    its string's address, hash and length), then as those numbers only (I): both decode to
    the same include. An entry not interned (address 0) is not remembered, and another
    string at the same address (after OPcache restarts) is told apart by its hash."""
    from statstorm.adapters.tracing import libbpf_trace as lt

    def rec(tag: str, pid: int, ts: int, key: tuple[int, int, int], path: bytes = b"") -> bytes:
        return lt.BODY.pack(lt.BODY.size + len(path), ord(tag), 2, pid, ts, 1, *key) + path

    a, b, a2 = (0x7F0000001000, 11, 8), (0x7F0000002000, 12, 8), (0x7F0000001000, 13, 8)
    data = (rec("T", 10, 1, a, b"/w/a.php") + rec("T", 10, 2, (0, 0, 0), b"/w/x.php")
            + rec("I", 11, 3, a) + rec("T", 11, 4, b, b"/w/b.php") + rec("I", 10, 5, b)
            + rec("T", 10, 6, a2, b"/w/c.php") + rec("I", 10, 7, a) + rec("I", 11, 8, a2))
    recs = list(lt.decode(data))
    opens = [(r[1], r[2], r[5]) for r in recs if r[0] == "O"]
    assert opens == [(10, 1, b"/w/a.php"), (10, 2, b"/w/x.php"), (11, 3, b"/w/a.php"),
                     (11, 4, b"/w/b.php"), (10, 5, b"/w/b.php"), (10, 6, b"/w/c.php"),
                     (10, 7, b"/w/a.php"), (11, 8, b"/w/c.php")]
    assert all(r[3] == "sopen" and r[4] == 1 for r in recs if r[0] == "O")
    assert [r[0] for r in recs] == ["O", "R"] * 8
