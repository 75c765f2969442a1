"""Golden tests for importing strace logs and `strace -c` tables (adapters/tracing/strace_log.py,
strace_parser.py, strace_syntax.py).

The real-*.log fixtures were recorded on a Debian host with strace 6.1 and php8.2 by
tests/fixtures/strace/record.sh; the synthetic-*.log ones are hand-written for cases a modern
host does not produce (stat64, `open`, fpm workers, non-UTF-8 names). The seed-*.txt tables are
copied verbatim from a blog post (systemadmin.es, realpath_cache on NFS).
"""

from __future__ import annotations

import collections
import os
import re
from pathlib import Path

import pytest

from statstorm.adapters.tracing.strace_log import detect, import_file
from statstorm.adapters.tracing.strace_parser import parse_log
from statstorm.adapters.tracing.strace_summary import parse_summaries, parse_summary
from statstorm.errors import EXIT_USAGE, UsageError
from statstorm.results.trace import Syscall, TraceWriter, read_trace

FIX = Path(__file__).parent / "fixtures" / "strace"


def lines(name: str) -> list[bytes]:
    return (FIX / name).read_bytes().splitlines()


def by_call(calls: list[Syscall]) -> tuple[dict[str, int], dict[str, int]]:
    total = collections.Counter(s.call for s in calls)
    failed = collections.Counter(s.call for s in calls if s.failed)
    return dict(total), dict(failed)


# Counted by hand (and by the independent line count below) for each real log.
REAL = {
    "real-cli-f-tt-T-y.log": (
        {"access": 7, "chdir": 1, "fstat": 41, "getcwd": 7, "lstat": 15, "open": 34,
         "readlink": 3, "stat": 5}, {"access": 6, "lstat": 2, "open": 2},
        {"-C", "-T", "-f", "-tt", "-y"}),
    "real-cli-f.log": (
        {"access": 7, "chdir": 1, "fstat": 64, "getcwd": 7, "lstat": 15, "open": 34,
         "readlink": 3, "stat": 5}, {"access": 6, "lstat": 2, "open": 2}, {"-f"}),
    "real-cli-plain.log": (
        {"access": 4, "chdir": 1, "fstat": 55, "getcwd": 6, "lstat": 15, "open": 25,
         "readlink": 3, "stat": 3}, {"access": 3, "lstat": 2, "open": 2}, set()),
    "real-cli-ttt-T.log": (
        {"access": 4, "chdir": 1, "fstat": 55, "getcwd": 6, "lstat": 15, "open": 25,
         "readlink": 3, "stat": 3}, {"access": 3, "lstat": 2, "open": 2}, {"-T", "-ttt"}),
    "real-cli-f-stderr.log": (
        {"access": 8, "chdir": 1, "fstat": 66, "getcwd": 8, "lstat": 15, "open": 38,
         "readlink": 3, "stat": 7}, {"access": 7, "lstat": 2, "open": 2}, {"-f"}),
    "real-server-f-tt-e-file.log": (
        {"access": 4, "chdir": 4, "fstat": 49, "getcwd": 5, "lstat": 17, "open": 27,
         "readlink": 2, "stat": 9}, {"access": 3, "lstat": 4, "open": 2, "stat": 1},
        {"-f", "-tt"}),
}
TRACED = ("newfstatat", "statx", "openat", "access", "readlink", "getcwd", "chdir")
ENTRY = re.compile(rb"(?:^|[\s\]])(" + b"|".join(n.encode() for n in TRACED) + rb")\(")
RESUMED = re.compile(rb"<\.\.\. (" + b"|".join(n.encode() for n in TRACED) + rb") resumed>")


def independent_count(data: list[bytes]) -> tuple[dict[str, int], dict[str, int]]:
    """Per syscall name: entry lines (one per call) and `= -1 E...` results, by plain regex."""
    calls: collections.Counter[str] = collections.Counter()
    failed: collections.Counter[str] = collections.Counter()
    for line in data:
        m = ENTRY.search(line)
        r = RESUMED.search(line)
        if m and not r:
            calls[m.group(1).decode()] += 1
        hit = r or m
        name = hit.group(1).decode() if hit else None
        if name and not line.rstrip().endswith(b"<unfinished ...>") \
                and re.search(rb"\) += -1 E", line):
            failed[name] += 1
    return dict(calls), dict(failed)


@pytest.mark.parametrize("name", sorted(REAL))
def test_real_log_counts(name: str) -> None:
    parsed = parse_log(lines(name), source=name)
    calls, failed, flags = REAL[name]
    assert by_call(parsed.syscalls) == (calls, failed)
    assert parsed.flags_seen == flags
    assert parsed.skipped_bad == 0 and parsed.unmatched_unfinished == 0
    names = collections.Counter(s.syscall for s in parsed.syscalls)
    names_failed = collections.Counter(s.syscall for s in parsed.syscalls if s.failed)
    assert independent_count(lines(name)) == (dict(names), dict(names_failed))


def test_minus_C_table_agrees_with_the_log_it_ends() -> None:
    """strace -C appended its own count of the same run; syscalls the fixture filter left
    untouched must agree exactly."""
    text = (FIX / "real-cli-f-tt-T-y.log").read_text()
    (table,) = parse_summaries(text)
    rows = {r.syscall: r for r in table}
    parsed = parse_log(lines("real-cli-f-tt-T-y.log"), source="x")
    names = collections.Counter(s.syscall for s in parsed.syscalls)
    errors = collections.Counter(s.syscall for s in parsed.syscalls if s.failed)
    for sc in ("access", "readlink", "getcwd", "chdir", "statx"):
        assert (rows[sc].calls, rows[sc].errors) == (names[sc], errors[sc]), sc
    assert parsed.summary_tables == 1


def test_relative_paths_follow_getcwd_chdir_and_fork() -> None:
    parsed = parse_log(lines("real-cli-f.log"), source="x")
    access = [s for s in parsed.syscalls if s.syscall == "access" and s.failed]
    assert "/tmp/sst-fixture/app/missing-rel.txt" in [s.path for s in access]
    after_chdir = [s for s in parsed.syscalls if s.call == "stat"
                   and s.path == "/tmp/sst-fixture/lib/inc/b.php"]
    assert len(after_chdir) == 1  # is_file('inc/b.php') after chdir('/tmp/sst-fixture/lib')
    (ls_statx,) = [s for s in parsed.syscalls if s.syscall == "statx"]
    assert ls_statx.path == "/tmp/sst-fixture/lib/inc"  # `ls inc` in a child inherits the cwd
    assert len({s.pid for s in parsed.syscalls}) == 3
    assert not any(s.path and not s.path.startswith("/") for s in parsed.syscalls)


def test_include_path_probe_order() -> None:
    parsed = parse_log(lines("real-cli-f.log"), source="x")
    probes = [(s.path, s.ret) for s in parsed.syscalls if s.call == "lstat" and "inc/a" in s.path]
    assert probes == [("/tmp/sst-fixture/app/./inc/a.php", -2),
                      ("/tmp/sst-fixture/vendor/inc/a.php", -2),
                      ("/tmp/sst-fixture/lib/inc/a.php", 0)]


@pytest.mark.parametrize("name", ["real-cli-f.log", "real-cli-f-tt-T-y.log"])
def test_fstat_is_named_by_fd_table_or_decoration(name: str) -> None:
    calls = parse_log(lines(name), source="x").syscalls
    i = next(i for i, s in enumerate(calls) if s.call == "open"
             and s.path == "/tmp/sst-fixture/lib/inc/b.php")
    assert (calls[i + 1].call, calls[i + 1].path) == ("fstat", "/tmp/sst-fixture/lib/inc/b.php")
    readlinks = [s for s in calls if s.call == "readlink"]
    assert readlinks[-1].path == "/tmp/sst-fixture/current" and readlinks[-1].ret == 3


def test_timestamps_and_latency() -> None:
    tt = parse_log(lines("real-cli-f-tt-T-y.log"), source="x").syscalls
    ttt = parse_log(lines("real-cli-ttt-T.log"), source="x").syscalls
    plain = parse_log(lines("real-cli-plain.log"), source="x").syscalls
    for calls in (tt, ttt):
        assert calls[0].ts_ns >= 0 and calls[-1].ts_ns > calls[0].ts_ns
        assert all(s.lat_ns > 0 for s in calls)
        assert all(a.ts_ns <= b.ts_ns for a, b in zip(calls, calls[1:]) if a.pid == b.pid)
    assert all(s.ts_ns == 0 and s.lat_ns == 0 and s.pid == 0 for s in plain)


def test_time_formats_r_t_and_midnight() -> None:
    r = parse_log([b"     0.000000 getcwd(\"/a\", 9) = 3",
                   b"     0.000250 stat(\"b\", 0x1) = 0",
                   b"     0.001000 lstat(\"c\", 0x1) = -1 ENOENT (No such file or directory)"],
                  source="x")
    assert [s.ts_ns for s in r.syscalls] == [0, 250_000, 1_250_000] and r.flags_seen == {"-r"}
    assert [s.path for s in r.syscalls] == ["/a", "/a/b", "/a/c"]
    t = parse_log([b"23:59:59 stat(\"/a\", 0x1) = 0", b"00:00:01 stat(\"/b\", 0x1) = 0"],
                  source="x")
    assert [s.ts_ns for s in t.syscalls] == [0, 2 * 10**9] and t.flags_seen == {"-t"}


def test_server_requests_split_on_accept() -> None:
    parsed = parse_log(lines("real-server-f-tt-e-file.log"), source="x")
    assert len(parsed.requests) == 3
    assert [r.id for r in parsed.requests.values()] == [0, 1, 2]
    starts = [r.start_ns for r in parsed.requests.values()]
    assert starts == sorted(starts) and all(r.script == r.uri == "" for r in
                                            parsed.requests.values())
    per_req = collections.Counter(s.req for s in parsed.syscalls)
    assert per_req[-1] > 0  # php -S start-up, before the first accept
    assert (per_req[0], per_req[1], per_req[2]) == (20, 15, 3)  # warm realpath cache
    missing = [s for s in parsed.syscalls if s.path == "/tmp/sst-fixture/missing.txt"]
    assert [s.req for s in missing] == [0, 1]
    assert [s.ret for s in missing] == [-2, -2]


def test_no_accept_is_one_request() -> None:
    parsed = parse_log(lines("real-cli-f.log"), source="x")
    assert list(parsed.requests) == [0]
    assert parsed.requests[0].pid == parsed.syscalls[0].pid
    assert {s.req for s in parsed.syscalls} == {0}


def test_stderr_pid_prefix_adopts_the_first_process() -> None:
    """Without -o strace prints no prefix while one process runs; `clone3(...` is cut by
    "strace: Process N attached" and finished by a ` <unfinished ...>` line."""
    parsed = parse_log(lines("real-cli-f-stderr.log"), source="x")
    pids = [s.pid for s in parsed.syscalls]
    assert 0 not in pids and len(set(pids)) == 3
    assert parsed.requests[0].pid == pids[0]
    assert parsed.unmatched_unfinished == 0


def test_synthetic_old_spellings() -> None:
    parsed = parse_log(lines("synthetic-old-spellings.log"), source="x")
    got = [(s.call, s.syscall, s.path, s.ret) for s in parsed.syscalls]
    assert got == [
        ("getcwd", "getcwd", "/srv/app", 9),
        ("stat", "stat64", "/srv/app/index.php", 0),
        ("lstat", "lstat64", "/srv", 0),
        ("lstat", "lstat64", "/srv/app/lib/missing.inc.php", -2),
        ("open", "open", "/srv/app/index.php", 3),
        ("fstat", "fstat64", "/srv/app/index.php", 0),
        ("stat", "stat", "/etc/php.ini", -13),
        ("lstat", "lstat", "/srv/app/current", 0),
        ("readlink", "readlink", "/srv/app/current", 7),
        ("access", "access", "/srv/app/cache/", 0),
        ("fstat", "fstat", "/srv/app/index.php", 0),
        ("fstat", "fstat", "", -9),  # after close(3)
        ("open", "open", "/srv/app/missing.php", -2),
        ("chdir", "chdir", "/srv/app/lib", 0),
        ("stat", "stat64", "/srv/app/lib/x.php", -2),
        ("access", "faccessat", "/srv/app/lib/y.php", 0),
        ("readlink", "readlinkat", "/srv/app/current", 7),
        ("lstat", "fstatat64", "/srv/app/lib/z.php", -2),
    ]
    assert parsed.skipped == 3 and parsed.lines == 22
    assert parsed.syscalls[-1].ts_ns == 1_900_000


def test_synthetic_unfinished_across_pids() -> None:
    parsed = parse_log(lines("synthetic-unfinished-pids.log"), source="x")
    got = [(s.pid, s.call, s.path, s.ret, s.lat_ns) for s in parsed.syscalls]
    assert got == [
        (300, "getcwd", "/srv/www", 9, 10_000),
        (301, "chdir", "/srv/www/lib", 0, 20_000),
        (300, "stat", "/srv/www/a.php", -2, 50_000),
        (301, "lstat", "/srv/www/lib/b.php", 0, 60_000),  # flags came on the resumed line
        (300, "open", "/srv/www/index.php", 4, 30_000),
        (301, "access", "/srv/www/lib/c.php", -2, 40_000),
        (300, "fstat", "/srv/www/index.php", 0, 5_000),
        (300, "lstat", "/srv/www/index.php", 0, 7_000),
    ]
    # an orphan `<... read resumed>` and a statx left unfinished at exit
    assert parsed.unmatched_unfinished == 2
    assert parsed.skipped_bad == 1 and parsed.skipped == 4
    assert parsed.flags_seen == {"-f", "-T"}


def test_synthetic_non_utf8_paths_round_trip(tmp_path: Path) -> None:
    parsed = parse_log(lines("synthetic-nonutf8.log"), source="x")
    raw = [s.path.encode("utf-8", "surrogateescape") for s in parsed.syscalls]
    assert raw == [b"/srv/www", "/srv/www/café.php".encode(), b"/srv/www/caf\xe9.php",
                   b"/srv/www/caf\xe9-x.php", b'/srv/www/say "hi"\\tab\there.php',
                   "/srv/www/rel中.php".encode(),
                   b"/srv/www/very-long-name-truncated-by-strace-s"]
    out = tmp_path / "t.jsonl"
    with TraceWriter(out, {"format": "statstorm-trace", "version": 1}) as w:
        for s in parsed.syscalls:
            w.syscall(s)
    back = read_trace(out)
    assert [s.path for s in back.syscalls] == [s.path for s in parsed.syscalls]


def test_synthetic_fpm_requests() -> None:
    parsed = parse_log(lines("synthetic-fpm-accept4.log"), source="x")
    reqs = [(r.id, r.pid, r.start_ns, r.end_ns) for r in parsed.requests.values()]
    assert reqs == [(0, 1200, 1_000_000, 1_700_000), (1, 1201, 2_000_000, 3_200_000),
                    (2, 1200, 3_000_000, 3_404_000)]  # the last call returned 4 µs later
    got = [(s.pid, s.req, s.call, s.path) for s in parsed.syscalls]
    assert got == [
        (1200, -1, "getcwd", "/"), (1200, -1, "chdir", "/srv/www"),
        (1201, -1, "stat", "/srv/www/warmup.php"),
        (1200, 0, "stat", "/srv/www/index.php"), (1200, 0, "open", "/srv/www/index.php"),
        (1200, 0, "fstat", "/srv/www/index.php"), (1200, 0, "access", "/srv/www/missing.txt"),
        (1201, 1, "stat", "/srv/www/index.php"), (1201, 1, "lstat", "/srv/www/lib/a.php"),
        (1200, 2, "stat", "/srv/www/index.php"),
        (1200, 2, "lstat", "/srv/www/after-eagain.php"),  # a failed accept4 starts nothing
    ]
    assert parsed.flags_seen == {"-f", "-tt", "-T", "-y"}


@pytest.mark.parametrize("name", ["malformed-binary.png", "malformed.json",
                                  "malformed-empty.log", "malformed-nginx-access.log"])
def test_malformed_files_are_one_line_usage_errors(name: str) -> None:
    with pytest.raises(UsageError) as exc:
        import_file(FIX / name)
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith(str(FIX / name))
    assert "strace -f -tt -T -y -o FILE" in msg
    assert exc.value.exit_code == EXIT_USAGE
    if name != "malformed-empty.log":
        assert msg.startswith(f"{FIX / name}:1: not strace output;")


def test_a_few_garbage_lines_are_tolerated_but_not_half() -> None:
    good = lines("synthetic-old-spellings.log")
    parsed = parse_log(good[:10] + [b"<html>", b"\x00\xff junk"] + good[10:], source="x")
    assert parsed.skipped_bad == 2 and len(parsed.syscalls) == 18
    with pytest.raises(UsageError, match=r"^y.log:4: not strace output"):
        parse_log(good[:3] + [b"junk %d" % i for i in range(4)], source="y.log")


def test_file_errors(tmp_path: Path) -> None:
    for path, text in [(tmp_path / "nope.log", "no such file"), (tmp_path, "is a directory")]:
        with pytest.raises(UsageError, match=text):
            import_file(path)
    blank = tmp_path / "blank.log"
    blank.write_text("\n  \n")
    with pytest.raises(UsageError, match="empty file"):
        import_file(blank)
    if os.geteuid() != 0:
        locked = tmp_path / "locked.log"
        locked.write_bytes(b'stat("/a", 0x1) = 0\n')
        locked.chmod(0)
        with pytest.raises(UsageError, match="permission denied"):
            import_file(locked)


SEED_FIRST = {"stat": (383248, 91282), "open": (24499, 4), "lstat": (54892, 837),
              "access": (35259, 21325), "fstat": (51893, 0), "getcwd": (3344, 0),
              "chdir": (2659, 0)}


def test_seed_classic_table() -> None:
    rows = parse_summary((FIX / "seed-systemadmin-es-table1.txt").read_text())
    got = {r.syscall: (r.calls, r.errors) for r in rows}
    assert {k: got[k] for k in SEED_FIRST} == SEED_FIRST
    assert len(rows) == 48 and "total" not in got
    assert rows[0].seconds == 2.174016 and got["select"] == (83791, 0)  # blank errors cell


def test_seed_tables_found_in_prose() -> None:
    tables = parse_summaries((FIX / "seed-systemadmin-es-prose.txt").read_text())
    assert [len(t) for t in tables] == [48, 5, 15, 12]
    firsts = [{r.syscall: (r.calls, r.errors) for r in t} for t in tables]
    assert {k: firsts[0][k] for k in SEED_FIRST} == SEED_FIRST
    assert firsts[1]["stat"] == (787146, 188495) and firsts[1]["lstat"] == (91444, 1809)
    assert firsts[1]["open"] == (46260, 5)
    assert firsts[2]["stat"] == (563228, 132133) and firsts[2]["access"] == (39784, 24072)
    assert firsts[2]["lstat"] == (62471, 2192) and firsts[2]["open"] == (37367, 4)
    assert firsts[3]["stat"] == (633638, 139733) and firsts[3]["open"] == (41706, 0)
    assert firsts[3]["lstat"] == (55735, 1248) and firsts[3]["access"] == (43321, 26203)
    assert parse_summary((FIX / "seed-systemadmin-es-prose.txt").read_text()) == tables[0]


def test_minus_U_columns_by_name() -> None:
    rows = parse_summary((FIX / "real-c-w-U.txt").read_text())
    got = {r.syscall: (r.calls, r.errors, r.seconds) for r in rows}
    assert got["openat"] == (39, 19, 0.004361) and got["mmap"] == (30, 0, 0.002507)
    assert "total" not in got
    only = parse_summary("    calls    errors syscall\n--------- --------- ----------\n"
                         "       30           mmap\n       39        19 openat\n")
    assert [(r.syscall, r.calls, r.errors) for r in only] == [("mmap", 30, 0),
                                                              ("openat", 39, 19)]


def test_no_table_is_a_one_line_error() -> None:
    with pytest.raises(UsageError) as exc:
        parse_summary("these calls to the syscall layer\nare prose, not a table\n")
    assert "\n" not in str(exc.value)


def test_detect_and_import_file_headers() -> None:
    assert detect(FIX / "real-cli-f-tt-T-y.log") == "log"  # a log that ends in a -C table
    assert detect(FIX / "seed-systemadmin-es-prose.txt") == "summary"
    assert detect(FIX / "real-c-w-U.txt") == "summary"
    t = import_file(FIX / "seed-systemadmin-es-prose.txt", requests=1000, table=2)
    assert t.header["source"] == "strace-c" and t.header["requests_hint"] == 1000
    assert t.header["import"] == {"flags": ["-c"], "table": 2, "tables": 4,
                                  "complete": False, "unreadable": []}  # cut with (...)
    whole = import_file(FIX / "seed-systemadmin-es-prose.txt", table=0)
    assert whole.header["import"]["complete"] is True
    assert t.header["targets"] == {"import": str(FIX / "seed-systemadmin-es-prose.txt")}
    assert t.counts[0].syscall == "stat" and t.counts[0].calls == 563228 and not t.syscalls
    with pytest.raises(UsageError, match="from 0 to 3"):
        import_file(FIX / "seed-systemadmin-es-prose.txt", table=4)
    log = import_file(FIX / "real-server-f-tt-e-file.log")
    assert log.header["source"] == "strace-log" and "requests_hint" not in log.header
    assert log.header["import"]["flags"] == ["-f", "-tt"]
    assert log.header["mounts"] == [] and log.header["settings"] == {}
    assert len(log.requests) == 3 and not log.counts
    assert all(s.mount == -1 and s.op == -1 for s in log.syscalls)
