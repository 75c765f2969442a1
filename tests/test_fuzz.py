"""Fuzzing every parser in the suite (issue 20, part 3), and the parser bugs it found.

The property, for each parser of bench/fuzz.py's TARGETS (strace logs and `-c` tables,
wrk/ab/vegeta output, mountstats, GlusterFS profiles, `php -i`, `php-fpm -tt`, nginx's
configuration, FastCGI records, the CLI's value parsers): whatever the input, the parser
returns or raises a project error (the one-line message the CLI prints), never another
exception. Inputs are
Hypothesis-driven mutations of the real outputs those targets start from, raw bytes, and
inputs built from strace's grammar whose parse is also checked for what it must say.
Deterministic (derandomize) with a fixed budget; bench/fuzz.py is the long run.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import invoke
from statstorm.adapters.load import ab, http, vegeta, wrk
from statstorm.adapters.storage import gluster_profile, nfs_mountstats
from statstorm.adapters.tracing import strace_log
from statstorm.adapters.tracing.strace_parser import parse_log
from statstorm.adapters.tracing.strace_summary import parse_tables
from statstorm.commands import trace as trace_cmd
from statstorm.errors import ComponentError, StatstormError, UsageError
from statstorm.model import phpsettings

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures"
SEEDS = ROOT.parent / "shared" / "seeds"  # the posts the project was seeded with, when present


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("statstorm_bench_fuzz",
                                                  ROOT / "bench" / "fuzz.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


FUZZ = _bench()
TARGETS = {t.name: t for t in FUZZ.TARGETS}
SEED_BYTES = {name: [s for s in t.seeds() if s] for name, t in TARGETS.items()}
BUDGET = settings(max_examples=250, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))


def passes(name: str, data: bytes) -> None:
    """The property: a result or a project error, nothing else."""
    try:
        TARGETS[name].run(data)
    except StatstormError as exc:
        assert "\n" not in str(exc), f"{name}: a project error of several lines: {exc}"


# -- Hypothesis strategies ----------------------------------------------------------------------
@st.composite
def mutations(draw: st.DrawFn, name: str) -> bytes:
    """A real input of the parser with a few edits: bytes changed, cut, repeated, lines swapped,
    numbers made huge, the fuzzer's hard tokens inserted (as bench/fuzz.py does)."""
    seeds = SEED_BYTES[name]
    data = bytearray(seeds[draw(st.integers(0, len(seeds) - 1))])
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        op = draw(st.sampled_from(["byte", "cut", "token", "copy", "lines", "number", "tail"]))
        if op == "byte" and at < len(data):
            data[at] = draw(st.integers(0, 255))
        elif op == "cut":
            del data[at:at + draw(st.sampled_from([1, 3, 40, 400]))]
        elif op == "token":
            data[at:at] = draw(st.sampled_from(FUZZ.TOKENS))
        elif op == "copy":
            src = draw(st.integers(0, len(data)))
            data[at:at] = data[src:src + draw(st.sampled_from([1, 20, 300]))]
        elif op == "lines":
            lines = bytes(data).split(b"\n")
            i, j = draw(st.integers(0, len(lines) - 1)), draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
            data = bytearray(b"\n".join(lines))
        elif op == "number":
            digits = [k for k in range(len(data)) if 48 <= data[k] <= 57]
            if digits:
                k = digits[draw(st.integers(0, len(digits) - 1))]
                data[k:k + 1] = draw(st.sampled_from(FUZZ.NUMBERS))
        else:
            del data[at:]
    return bytes(data)


def inputs(name: str) -> st.SearchStrategy[bytes]:
    return st.one_of(mutations(name), st.binary(max_size=200),
                     st.text(max_size=120).map(lambda s: s.encode("utf-8", "surrogatepass")))


def _fuzz_test(name: str):  # type: ignore[no-untyped-def]
    @BUDGET
    @given(data=inputs(name))
    def test(data: bytes) -> None:
        passes(name, data)
    test.__name__ = f"test_fuzz_{name.replace('-', '_')}"
    return test


for _name in TARGETS:
    globals()[f"test_fuzz_{_name.replace('-', '_')}"] = _fuzz_test(_name)


# strace's grammar: lines as strace prints them, with every option that changes their shape.
_PATH = st.one_of(st.sampled_from(["/srv/www/index.php", "lib/a.php", "", "café.php"]),
                  st.text(max_size=12))
_PREFIX = st.tuples(st.sampled_from(["", "300 ", "[pid   301] "]),
                    st.sampled_from(["", "10:00:0{}.000100 ", "1700000000.00010{} ",
                                     "     0.00010{} "]),
                    st.integers(0, 9))


@st.composite
def strace_line(draw: st.DrawFn) -> bytes:
    pid, clock, tick = draw(_PREFIX)
    path = draw(_PATH).encode("utf-8", "surrogatepass").replace(b"\\", b"\\\\") \
        .replace(b'"', b'\\"')
    call = draw(st.sampled_from([
        b'newfstatat(AT_FDCWD, "%s", 0x7ffd, AT_SYMLINK_NOFOLLOW)', b'stat("%s", 0x1)',
        b'openat(AT_FDCWD, "%s", O_RDONLY)', b'access("%s", F_OK)', b'getcwd("%s", 4096)',
        b'chdir("%s")', b'readlink("%s", "x", 9)', b"fstat(3, 0x1)", b"close(3)",
        b"accept4(9, NULL, NULL, SOCK_CLOEXEC)", b"clone(child_stack=NULL)", b"read(3, 0x1, 9)"]))
    result = draw(st.sampled_from([b" = 0", b" = 3", b" = -1 ENOENT (No such file or directory)",
                                   b" = ?", b" = 4<TCP:[1]>", b" = 301", b" = -1 EAGAIN"]))
    latency = draw(st.sampled_from([b"", b" <0.000010>", b" <1.500000>"]))
    body = call.replace(b"%s", path) if b"%s" in call else call
    shape = draw(st.sampled_from(["whole", "unfinished", "resumed", "exit", "signal"]))
    if shape == "unfinished":
        body = body[:body.index(b"(") + 1] + b" <unfinished ...>"
    elif shape == "resumed":
        body = b"<... " + body[:body.index(b"(")] + b" resumed>)" + result + latency
    elif shape == "exit":
        body = b"+++ exited with 0 +++"
    elif shape == "signal":
        body = b"--- SIGCHLD {si_signo=SIGCHLD} ---"
    else:
        body += result + latency
    return (pid + clock.format(tick)).encode() + body


@BUDGET
@given(lines=st.lists(strace_line(), min_size=1, max_size=30))
def test_strace_grammar_never_says_time_went_back(lines: list[bytes]) -> None:
    """Logs built from strace's grammar: no negative time, latency or request duration."""
    try:
        parsed = parse_log(lines, source="gen")
    except UsageError as exc:
        assert "\n" not in str(exc)
        return
    assert all(s.ts_ns >= 0 and s.lat_ns >= 0 for s in parsed.syscalls)
    assert all(r.end_ns == -1 or r.end_ns >= r.start_ns for r in parsed.requests.values())
    assert all(isinstance(s.path, str) for s in parsed.syscalls)


# strace -c tables: rendered as strace prints them, then cut and damaged as people paste them.
_ROWS = st.lists(st.tuples(st.sampled_from(["stat", "lstat", "fstat", "open", "access", "read",
                                            "mmap", "getcwd", "readlink", "newfstatat"]),
                           st.integers(1, 10**7), st.integers(0, 10**5),
                           st.integers(1, 10**6)),
                 min_size=1, max_size=8, unique_by=lambda r: r[0])
HEADER = "% time     seconds  usecs/call     calls    errors syscall\n" \
         "------ ----------- ----------- --------- --------- ----------------\n"


def render_row(name: str, calls: int | None, errors: int, usecs: int) -> str:
    seconds = usecs * (calls or 1) / 1e6
    return (f"{0.0:6.2f} {seconds:11.6f} {usecs:11d} "
            + (f"{calls:9d}" if calls is not None else " " * 9)
            + (f" {errors:9d}" if errors else " " * 10) + f" {name}\n")


def render_table(rows: list[tuple[str, int, int, int]], total: bool) -> str:
    text = HEADER + "".join(render_row(*r) for r in rows)
    if total:
        text += "------ ----------- ----------- --------- --------- ----------------\n"
        text += f"100.00 {1.0:11.6f} {'':11} {sum(r[1] for r in rows):9d} " \
                f"{sum(r[2] for r in rows):9d} total\n"
    return text


@BUDGET
@given(rows=_ROWS, total=st.booleans(), cut=st.integers(-1, 7), blank=st.integers(-1, 7),
       mangle=st.booleans())
def test_c_tables_say_what_they_leave_out(rows: list[tuple[str, int, int, int]], total: bool,
                                          cut: int, blank: int, mangle: bool) -> None:
    """A table reads back row for row; one cut with `(...)`, without its total row or with a
    row whose `calls` cell is blank is incomplete, and the other rows are all still read."""
    lines = render_table(rows, total).splitlines(keepends=True)
    if 0 <= blank < len(rows):
        name, _, errors, usecs = rows[blank]
        lines[2 + blank] = render_row(name, None, errors, usecs)
    if 0 <= cut < len(rows):
        lines.insert(2 + cut, "(...)\n")
    text = "".join(lines)
    if mangle:
        text = "\n".join(" ".join(line.split()) for line in text.splitlines())
    (table,) = parse_tables(text)
    damaged = 0 <= blank < len(rows)
    want = {r[0]: (r[1], r[2]) for i, r in enumerate(rows) if i != blank or not damaged}
    got = {r.syscall: (r.calls, r.errors) for r in table.rows}
    # Without its columns (mangled), a row whose calls cell is blank reads like a row whose
    # errors cell is: "362 1 open" is 1 call and no error as well as no call and 1 error.
    # Read that way it is still a row the table holds, not a lost one.
    ambiguous = mangle and damaged and got.get(rows[blank][0]) == (rows[blank][2], 0)
    if ambiguous:
        del got[rows[blank][0]]
    assert got == want
    if damaged and not ambiguous:
        assert table.unreadable == [rows[blank][0]]
    whole = total and not damaged and not 0 <= cut < len(rows)
    if mangle:  # the total row's blank usecs/call cell is lost too: never complete wrongly,
        # unless the blank calls cell read as a row that agrees with the total (ambiguous)
        assert whole or ambiguous or not table.complete
    else:
        assert table.complete == whole


# -- regressions: each bug the issue lists or the fuzzer found ---------------------------------
def test_c_table_without_total_row_is_an_excerpt_not_a_log_of_zeros() -> None:
    text = render_table([("stat", 787146, 188495, 6), ("lstat", 91444, 1809, 4)], False)
    tr = strace_log.import_data(text.encode(), source="excerpt.txt")
    assert tr.header["source"] == "strace-c" and not tr.syscalls
    assert [(r.syscall, r.calls) for r in tr.counts] == [("stat", 787146), ("lstat", 91444)]
    assert tr.header["import"]["complete"] is False


def test_c_row_missing_its_calls_cell_keeps_the_rows_after_it() -> None:
    rows = [("stat", 787146, 188495, 6), ("open", 46260, 5, 46), ("lstat", 91444, 1809, 4)]
    for mangle in (False, True):
        lines = render_table(rows, True).splitlines(keepends=True)
        lines[3] = render_row("open", None, 5, 46)
        text = "".join(lines) if not mangle else "\n".join(" ".join(x.split()) for x in lines)
        (table,) = parse_tables(text)
        assert [(r.syscall, r.calls) for r in table.rows] == [("stat", 787146), ("lstat", 91444)]
        assert table.unreadable == ["open"] and not table.complete  # not open: 5 calls


def test_resumed_before_its_unfinished_gives_no_negative_duration() -> None:
    log = [b"100 10:00:00.000300 <... accept4 resumed>{sa_family=AF_UNIX}, [112]) = 4",
           b'100 10:00:00.000400 stat("/a", 0x1) = 0',
           b"100 10:00:00.000050 accept4(3, <unfinished ...>"]
    with pytest.raises(UsageError, match=r"^x.log:3: the time goes back .* for PID 100"):
        parse_log(log, source="x.log")
    # a log that ends as an accept returns: the request ends when it began, not before
    ended = parse_log([b"7 10:00:00.000100 accept4(3, NULL, NULL, 0) = 4 <0.002000>"],
                      source="y")
    assert [(r.start_ns, r.end_ns) for r in ended.requests.values()] == [(2_000_000, 2_000_000)]


def test_excerpts_diff_as_unknown_not_as_zero(tmp_path: Path) -> None:
    """The seed post's second and third tables are excerpts: fstat is only in the third, so
    `trace diff` must not say fstat +79,734."""
    post = SEEDS / "000_3106f24556a4e8a2.txt"
    if not post.exists():
        post = FIX / "strace" / "seed-systemadmin-es-prose.txt"
    src = tmp_path / "post.txt"
    src.write_bytes(post.read_bytes())
    a, _ = trace_cmd.import_log(src, tmp_path / "a.sst.gz", requests=None, table=1)
    b, summary = trace_cmd.import_log(src, tmp_path / "b.sst.gz", requests=None, table=2)
    assert summary.per_request.fstat == 79734 and summary.per_request.total is None
    d = trace_cmd.diff(a, b).to_json()
    assert d["per_request"]["fstat"] == {"a": None, "b": 79734, "delta": None, "ratio": None}
    assert d["per_request"]["stat"]["delta"] == 563228 - 787146
    assert d["not_compared"] == ["fstat", "access", "readlink", "getcwd", "total", "failed"]
    whole = trace_cmd.show(trace_cmd.import_log(src, tmp_path / "c.sst.gz", requests=None,
                                                table=0)[0])
    assert whole.unknown is None and whole.per_request.readlink == 0


HUGE = "9" * 5000


def test_integer_fields_of_5000_digits() -> None:
    for line in [f'stat("/a", 0x1) = {HUGE}', f'{HUGE} stat("/a", 0x1) = 0',
                 'stat("/a", 0x1) = 06', f'stat("/a", 0x1) = 0x{"f" * 40}']:
        with pytest.raises(UsageError, match="not strace output"):
            parse_log([line.encode()], source="x")
    # a statx without its arguments (bench/fuzz.py --seed 4 --inputs 300000) reads as one
    assert [s.call for s in parse_log([b"statx()=4"], source="x").syscalls] == ["stat"]
    # an fd or a latency that is no number: the fd's path and the latency are unknown
    got = parse_log([f'fstat({HUGE}, 0x1) = 0'.encode(),
                     f'stat("/a", 0x1) = 0 <{HUGE}.000001>'.encode()], source="x").syscalls
    assert [(s.path, s.ret, s.lat_ns) for s in got] == [("", 0, 0), ("/a", 0, 0)]
    table = render_table([("stat", 5, 0, 6)], True).replace("        5", HUGE)
    assert parse_tables(table)[0].rows == [] and not parse_tables(table)[0].complete
    plain = (FIX / "wrk" / "plain.txt").read_text()
    for text, parse in [(plain.replace("2159 requests", f"{HUGE} requests"), wrk.parse),
                        ((FIX / "ab" / "plain.txt").read_text().replace("1602", HUGE), ab.parse)]:
        with pytest.raises(ComponentError):
            parse(text)
    stats = (FIX / "nfs" / "mountstats-before.txt").read_text()
    with pytest.raises(UsageError, match="malformed per-op line"):
        nfs_mountstats.parse(stats.replace("GETATTR: ", f"GETATTR: {HUGE}", 1))
    with pytest.raises(UsageError, match="realpath_cache_size"):
        phpsettings.with_changes(phpsettings.PhpSettings(), {},
                                 phpsettings.parse_set([f"realpath_cache_size={HUGE}"]))


def test_damaged_load_generator_outputs_found_by_mutation() -> None:
    plain = (FIX / "wrk" / "plain.txt").read_text()
    lua = (FIX / "wrk" / "lua_ok.txt").read_text()
    for text in [plain.replace("2.00s,", "230.00,"), lua.replace('"write":', '"wri":'),
                 lua.replace('"max_us":', '"max_us":"x","m":'),
                 plain.replace("1077.58", "1077.5.")]:
        with pytest.raises(ComponentError, match="^wrk"):
            wrk.parse(text)
    matrix = SEED_BYTES["wrk-matrix"][1].decode()  # integers too big for a float: --seed 2
    for damaged in (matrix.replace("2100", HUGE[:400], 1),
                    matrix.replace("[0,300]", f"[0,{HUGE[:400]}]")):
        with pytest.raises(ComponentError, match="STATSTORM-MATRIX line is damaged"):
            TARGETS["wrk-matrix"].run(damaged.encode())
    ok0 = (FIX / "vegeta" / "ok.jsonl").read_text().splitlines()
    with pytest.raises(ComponentError, match="no 'seq'"):
        vegeta.parse(ok0[0].replace('"seq":0', f'"seq":{HUGE[:400]}'), 10.0, "")
    with pytest.raises(ComponentError, match="^ab output not understood"):
        ab.parse((FIX / "ab" / "plain.txt").read_text().replace("799.98", ".28.71"))
    ok = (FIX / "vegeta" / "ok.jsonl").read_text().splitlines()
    for line, why in [(ok[0].replace('"body":"', '"body":"!'), "not base64"),
                      (ok[0].replace("T14:", "T14\u00e9:"), "not RFC 3339"),
                      (ok[0].replace('"seq":0', '"sq":0'), "no 'seq'"),
                      ('{"seq": [[[[' + "[" * 5000, "not JSON")]:
        with pytest.raises(ComponentError, match=why):
            vegeta.parse("\n".join([line, *ok[1:]]), 10.0, "app=")


def test_gluster_counts_that_are_no_numbers() -> None:
    text = (FIX / "gluster" / "profile-info-cumulative-before.txt").read_text()
    row = next(x for x in text.splitlines() if x.rstrip().endswith("LOOKUP"))
    calls = row.split()[-2]
    for bad in ("²", HUGE):
        with pytest.raises(UsageError, match="not a FOP row"):
            gluster_profile.parse_info(text.replace(row, row.replace(f" {calls} ", f" {bad} ")))


def test_trace_cmd_with_an_unbalanced_quote() -> None:
    opts = trace_cmd.TraceOptions(cmd="php -r 'echo 1;")
    with pytest.raises(UsageError, match="No closing quotation") as exc:
        trace_cmd.validate(opts)
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize("url", ["http://127.0.0.1:99999/", "http://127.0.0.1:abc/",
                                 "http://[::1/", "http://\u00a8/", "http://a..b/",
                                 "http://127.0.0.1:-1/"])
def test_sweep_bad_url_or_port(url: str) -> None:
    with pytest.raises(UsageError) as exc:
        http.check_loopback(url, allow_remote=False)
    assert "\n" not in str(exc.value)


def _cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "statstorm", *args], capture_output=True,
                          text=True, timeout=120, env={**os.environ, **env})


def test_non_regular_and_too_big_inputs_are_refused(tmp_path: Path) -> None:
    """/dev/zero would never end, a FIFO would wait for a writer forever: both refused at
    once, as one line; a file over the limit is refused without being read."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for args in (["trace", "import", "/dev/zero"], ["trace", "import", str(fifo)],
                 ["trace", "show", str(fifo)]):
        res = invoke(args, tmp_path)
        assert res.returncode == 2, res.stderr
        assert res.stderr.count("\n") == 1 and "not a regular file" in res.stderr
    big = tmp_path / "big.log"
    with open(big, "wb") as fh:
        fh.truncate(strace_log.MAX_BYTES + 1)  # sparse: no disk used
    with pytest.raises(UsageError, match="more than the 1,073,741,824"):
        strace_log.import_file(big)


def test_paths_that_are_not_utf8_in_a_utf8_locale(tmp_path: Path) -> None:
    """A strict UTF-8 stdout (en_US.UTF-8 as installed) and paths that are not UTF-8 or not
    ASCII: trace import and trace show print them (bad bytes as \\xNN), no traceback."""
    log = tmp_path / "paths.log"
    log.write_bytes('stat("/srv/café.php", 0x1) = -1 ENOENT (No such file or directory)\n'
                    .encode() + b'stat("/srv/caf\\351.php", 0x1) = -1 ENOENT (x)\n'
                    + b'stat("/srv/\xff\xfe.php", 0x1) = -1 ENOENT (x)\n')
    out = tmp_path / "paths.sst.gz"
    for args in (["trace", "import", str(log), "-o", str(out)], ["trace", "show", str(out)]):
        for locale in ("C.UTF-8", "en_US.UTF-8"):
            res = _cli(*args, LC_ALL=locale, PYTHONIOENCODING="utf-8:strict")
            assert res.returncode == 0, res.stderr
            assert "café.php" in res.stdout and "\\xe9.php" in res.stdout
            assert "\\xff\\xfe.php" in res.stdout and "Traceback" not in res.stderr


def test_the_long_run_reports_per_parser(capsys: pytest.CaptureFixture[str]) -> None:
    assert FUZZ.main(["--inputs", "300", "--only", "wrk,cli-levels,strace-c-tables"]) == 0
    out = capsys.readouterr().out
    assert "wrk " in out and "100 inputs" in out and "0 failures" in out and "0 hangs" in out
    assert out.strip().splitlines()[-1].startswith("all")
