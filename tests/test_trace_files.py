"""Trace files are all or nothing, and check themselves (issue #20, part 1 for traces).

- Writes: Ctrl-C and SIGTERM in the middle of a real `trace import` (delivered by the writer's
  fault hook, STATSTORM_TEST_FAULT, never by timing), ENOSPC and EACCES injected at every
  write, fsync, chmod and rename of the writer, and a real full disk (a small tmpfs) under a
  real `trace --cmd`: the previous trace and its sidecar stay byte for byte, no temp file.
- Reads: a trace cut at every line boundary or mid-line is reported truncated with what it
  holds; random damage to the trace or its sidecar is either reported (one line) or gives the
  same result; a sidecar that does not match is rebuilt; a trace written before seals existed
  still reads, with a note.
- Usage: a non-writable -o, an unreadable trace as another user, non-ASCII names.
"""

from __future__ import annotations

import errno
import gzip
import json
import os
import pwd
import random
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, BinaryIO, Iterator

import pytest

from conftest import ROOT, invoke, run_cli
from statstorm.commands import trace as trace_cmd
from statstorm.errors import DamagedInput, OutputError, StatstormError, UsageError
from statstorm.results import common
from statstorm.results.trace import raw, read_trace, sidecar, write_trace, writer
from statstorm.results.trace.sidecar import records_path
from test_trace_speed import pool_trace, varied_trace

FIX = Path(__file__).parent / "fixtures"
OLD_TRACE = FIX / "report" / "demo" / "before.sst.gz"  # written before traces were sealed


def default_signals() -> None:
    """In the child, before Python starts: SIGINT and SIGTERM as a terminal gives them. A shell
    starts a background job (`pytest … &`, CI scripts) with SIGINT ignored, the child inherits
    that, and Python then installs no KeyboardInterrupt handler: the fault's SIGINT would be
    lost and the import finish (exit 0 instead of 130)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def statstorm(args: list[str], home: Path, env: dict[str, str] | None = None,
              user: str | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI in a real process, as run_cli runs it, with extra environment, or as `user`
    with that user's own group (Debian's nobody has no group of that name). SIGINT is not
    inherited ignored (see default_signals)."""
    argv = [sys.executable, "-m", "statstorm", *args]
    if user:
        gid = pwd.getpwnam(user).pw_gid
        argv = ["setpriv", f"--reuid={user}", f"--regid={gid}", "--clear-groups", *argv]
    p = subprocess.run(argv, capture_output=True, timeout=600, preexec_fn=default_signals,
                       env=dict(os.environ, STATSTORM_HOME=str(home), **(env or {})))
    # in the C locale a name's bytes go out as they are
    return subprocess.CompletedProcess(argv, p.returncode,
                                       p.stdout.decode("utf-8", "surrogateescape"),
                                       p.stderr.decode("utf-8", "surrogateescape"))


STARTUP = re.compile(r"^statstorm [a-z ]+: ")  # a verb's startup line, printed once it works


def one_line_error(p: subprocess.CompletedProcess[str], code: int, *words: str) -> None:
    """One error line (after the verb's startup line, when the work had started)."""
    assert p.returncode == code, (p.returncode, p.stdout, p.stderr)
    lines = [ln for ln in p.stderr.strip().splitlines()
             if ln.strip() and not STARTUP.match(ln)]  # click ends a ^C's line: a blank one
    assert "Traceback" not in p.stderr and len(lines) == 1, p.stderr
    for w in words:
        assert w in p.stderr, (w, p.stderr)


def temp_files(d: Path) -> list[str]:
    return sorted(x.name for x in d.iterdir() if x.name.startswith("."))


def big_log(path: Path, events: int, per_request: int = 50) -> Path:
    """An strace -f -tt -T log of a php-fpm worker: `events` metadata calls, a request
    every `per_request` of them (accept4), 10 µs apart."""
    out = []
    us = 0

    def ts() -> str:
        nonlocal us
        us += 10
        s, u = divmod(us, 1_000_000)
        return f"10:{s // 60:02d}:{s % 60:02d}.{u:06d}"
    for i in range(events):
        if i % per_request == 0:
            out.append(f"1200  {ts()} accept4(9<TCP:[127.0.0.1:9000]>, {{sa_family=AF_INET, "
                       f"sin_port=htons(40000), sin_addr=inet_addr(\"127.0.0.1\")}}, [16], "
                       f"SOCK_CLOEXEC) = 10<TCP:[127.0.0.1:9000->127.0.0.1:40000]> <0.000010>")
        if i % 2:
            out.append(f"1200  {ts()} lstat(\"/srv/www/lib/x{i % 97}.php\", 0x7ffd) = -1 "
                       "ENOENT (No such file or directory) <0.000004>")
        else:
            out.append(f"1200  {ts()} newfstatat(AT_FDCWD, \"/srv/www/lib/f{i % 89}.php\", "
                       "{st_mode=S_IFREG|0644, st_size=99, ...}, 0) = 0 <0.000006>")
    path.write_text("\n".join(out) + "\n")
    return path


@pytest.fixture
def shared_dir(state_home: Path) -> Iterator[Path]:
    """A directory other users can reach (pytest's tmp_path is 0700)."""
    d = state_home / f"files-{os.urandom(3).hex()}"
    d.mkdir(mode=0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


# -- writes: signals ------------------------------------------------------------------------
@pytest.mark.parametrize("sig", ["INT", "TERM"])
def test_signal_during_import_leaves_the_previous_trace(tmp_path: Path, sig: str) -> None:
    # 40,000 events: the second fault comes after the sidecar's first chunk (CHUNK records)
    # was written; parsing the log is most of the test's time, so it is no bigger
    log = big_log(tmp_path / "big.strace", 40_000)
    out = tmp_path / "t.sst.gz"
    invoke(["trace", "import", str(FIX / "strace" / "real-cli-f.log"), "-o", str(out)],
           tmp_path, check=True)
    before = {p: p.read_bytes() for p in (out, records_path(out))}
    shown = invoke(["trace", "show", str(out), "--json"], tmp_path, check=True).stdout
    p = statstorm(["trace", "import", str(log), "-o", str(out)], tmp_path,
                  env={"STATSTORM_TEST_FAULT": f"after-events:10007:{sig}"})
    one_line_error(p, 130)
    assert {q: q.read_bytes() for q in before} == before
    assert temp_files(tmp_path) == []
    assert invoke(["trace", "show", str(out), "--json"], tmp_path, check=True).stdout == shown
    # nothing there before: nothing there after
    fresh = tmp_path / "fresh.sst"
    p = statstorm(["trace", "import", str(log), "-o", str(fresh)], tmp_path,
                  env={"STATSTORM_TEST_FAULT": f"after-events:36000:{sig}"})
    one_line_error(p, 130)
    assert not fresh.exists() and not records_path(fresh).exists() and temp_files(tmp_path) == []
    # the hook only fires where it is asked to: past the last event, the import completes
    p = statstorm(["trace", "import", str(log), "-o", str(fresh), "--json"], tmp_path,
                  env={"STATSTORM_TEST_FAULT": f"after-events:40001:{sig}"})
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["totals"]["total"] == 40_000
    assert read_trace(fresh).sealed and sidecar.load(fresh) is not None


# -- writes: a failure at each write --------------------------------------------------------
class Faults:
    """Counts the writer's file operations; the `at`-th raises OSError(err)."""

    def __init__(self, at: int, err: int) -> None:
        self.n = 0
        self.at = at
        self.err = err

    def hit(self) -> None:
        self.n += 1
        if self.n == self.at:
            raise OSError(self.err, os.strerror(self.err))


class FaultyFile:
    def __init__(self, fh: BinaryIO, faults: Faults) -> None:
        self._fh = fh
        self._faults = faults

    def write(self, data: bytes) -> int:
        self._faults.hit()
        return self._fh.write(data)

    def flush(self) -> None:
        self._faults.hit()
        self._fh.flush()

    def fileno(self) -> int:
        return self._fh.fileno()

    def close(self) -> None:
        self._fh.close()


def inject(monkeypatch: pytest.MonkeyPatch, faults: Faults) -> None:
    real_temp = common.temp_beside

    def temp_beside(path: Path, suffix: str = "") -> tuple[Any, str]:
        faults.hit()
        fh, tmp = real_temp(path, suffix)
        return FaultyFile(fh, faults), tmp
    monkeypatch.setattr(common, "temp_beside", temp_beside)
    for name in ("fsync", "chmod", "replace"):
        real = getattr(os, name)

        def wrapped(*a: Any, _real: Any = real, **k: Any) -> Any:
            faults.hit()
            return _real(*a, **k)
        monkeypatch.setattr(os, name, wrapped)


@pytest.mark.parametrize("name", ["t.sst", "t.sst.gz"])
@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EACCES, errno.EIO])
def test_a_failure_at_any_write_publishes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  name: str, err: int) -> None:
    monkeypatch.setattr(writer, "LINES_PER_WRITE", 40)  # many writes of each file
    monkeypatch.setattr(writer, "CHUNK", 50)
    monkeypatch.setattr(sidecar, "CHUNK", 50)
    new = read_trace(pool_trace(tmp_path / "src" / "p.sst"))
    out = tmp_path / name
    varied_trace(out)  # the previous trace, and its sidecar
    old = {p: p.read_bytes() for p in (out, records_path(out))}
    clean = Faults(-1, err)
    with monkeypatch.context() as m:
        inject(m, clean)
        write_trace(tmp_path / ("c" + name), new)
    assert clean.n > 40  # every file operation of a whole write, counted
    outcomes = set()
    for at in range(1, clean.n + 1):
        for p, data in old.items():
            p.write_bytes(data)
        faults = Faults(at, err)
        try:
            with monkeypatch.context() as m:
                inject(m, faults)
                write_trace(out, new)
        except StatstormError as exc:
            assert isinstance(exc, UsageError if err == errno.EACCES else OutputError), exc
            assert "\n" not in str(exc) and "-o" in str(exc)
            assert {p: p.read_bytes() for p in old} == old, at  # the previous files, intact
            outcomes.add("refused")
        else:  # only the sidecar's rename failed: the trace is in place, whole, alone
            assert faults.n >= at and read_trace(out) == new and read_trace(out).sealed
            assert not records_path(out).exists()
            outcomes.add("trace without sidecar")
        assert temp_files(tmp_path) == [], at
    assert outcomes == {"refused", "trace without sidecar"}


@pytest.mark.root
@pytest.mark.parametrize("backend", ["auto", "bpftrace"])
def test_full_disk_under_a_real_trace_cmd_leaves_no_temp_file(shared_dir: Path,
                                                              backend: str) -> None:
    if not shutil.which("php") or (backend == "bpftrace" and not shutil.which("bpftrace")):
        pytest.skip("php or bpftrace is not installed")
    disk = shared_dir / "small"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=96k", "tmpfs", str(disk)], check=True)
    try:
        out = disk / "t.sst"
        write_trace(out, read_trace(pool_trace(shared_dir / "p.sst")))
        old = {p: p.read_bytes() for p in (out, records_path(out))}
        p = run_cli(["trace", "--cmd", "php -r 'for ($i = 0; $i < 3000; $i++) "
                     "file_exists(\"/tmp/statstorm-none-$i\");'", "-o", str(out),
                     "--backend", backend], shared_dir)
        one_line_error(p, 1, "No space left on device", str(out))
        assert {q: q.read_bytes() for q in old} == old
        assert temp_files(disk) == [] and sorted(x.name for x in disk.iterdir()) == [
            "t.sst", "t.sst.records"]
    finally:
        subprocess.run(["umount", str(disk)], check=True)


# -- reads: truncation ----------------------------------------------------------------------
def test_a_trace_cut_anywhere_is_reported_truncated(tmp_path: Path) -> None:
    path = pool_trace(tmp_path / "p.sst", records=False)
    want = read_trace(path)
    data = path.read_bytes()
    ends = [i + 1 for i, b in enumerate(data) if b == 0x0A]
    cut = tmp_path / "cut.sst"
    seen = 0
    for end in ends[:-1]:  # every line boundary before the last line
        cut.write_bytes(data[:end])
        with pytest.raises(DamagedInput) as exc:
            read_trace(cut)
        msg = str(exc.value)
        assert "truncated trace" in msg and "\n" not in msg, msg
        n = data[:end].count(b'\n["s",')
        assert f"it holds only {n:,} syscalls, " in msg or f"only {n:,} syscalls and " in msg
        seen += 1
    rng = random.Random(7)
    for end in rng.sample(range(1, len(data) - 1), 150):  # mid-line, anywhere
        cut.write_bytes(data[:end])
        with pytest.raises(UsageError):
            read_trace(cut)
    cut.write_bytes(data[:-1])  # only the last newline missing: every record is there
    assert read_trace(cut) == want and read_trace(cut).sealed
    assert seen > 300
    gz = pool_trace(tmp_path / "p.sst.gz", records=False)
    zdata = gz.read_bytes()
    for end in range(20, len(zdata) - 1, max(1, len(zdata) // 60)):
        cut.write_bytes(zdata[:end])
        with pytest.raises(DamagedInput, match="truncated trace"):
            read_trace(cut)


def test_truncated_trace_through_the_cli(tmp_path: Path) -> None:
    path = pool_trace(tmp_path / "p.sst", records=False)
    lines = path.read_bytes().splitlines(True)
    half = tmp_path / "half.sst"
    half.write_bytes(b"".join(lines[:len(lines) // 2]))
    holds = b"".join(lines[:len(lines) // 2]).count(b'["s",')
    for verb in (["trace", "show"], ["whatif"]):
        p = invoke([*verb, str(half), "--json"], tmp_path)
        one_line_error(p, 2, "truncated trace", f"{holds:,} syscalls", str(half))
        assert json.loads(p.stdout)["exit"] == 2


# -- reads: damage --------------------------------------------------------------------------
def damage(rng: random.Random, data: bytes) -> bytes:
    n = len(data)
    kind = rng.randrange(4)
    if kind == 0:
        i = rng.randrange(n)
        return data[:i] + bytes([data[i] ^ rng.randrange(1, 256)]) + data[i + 1:]
    if kind == 1:
        return data[:rng.randrange(n)]
    a = rng.randrange(n - 1)
    b = min(n, a + rng.randint(1, 80))
    return data[:a] + data[b:] if kind == 2 else data[:b] + data[a:b] + data[b:]


@pytest.mark.parametrize("which", ["trace", "sidecar"])
def test_damage_is_reported_or_changes_nothing(tmp_path: Path, which: str) -> None:
    path = pool_trace(tmp_path / "p.sst")
    side = records_path(path)
    pristine = {path: path.read_bytes(), side: side.read_bytes()}
    want_show, want_recs = trace_cmd.show(path), raw.read_records(path)
    rng = random.Random(11 if which == "trace" else 12)
    detected = identical = 0
    for _ in range(150):
        for p, data in pristine.items():
            p.write_bytes(data)
        target = path if which == "trace" else side
        target.write_bytes(damage(rng, pristine[target]))
        try:
            got_show, got_recs = trace_cmd.show(path), raw.read_records(path)
        except StatstormError as exc:
            assert "\n" not in str(exc)
            detected += 1
            continue
        assert got_show == want_show and got_recs == want_recs
        identical += 1
    if which == "trace":
        assert detected == 150  # every change to a sealed trace is caught
    else:
        assert identical == 150  # the JSON lines answer instead, the same


def test_a_sidecar_that_does_not_match_is_rebuilt(tmp_path: Path) -> None:
    path = pool_trace(tmp_path / "p.sst.gz")
    side = records_path(path)
    good = side.read_bytes()
    want = raw.read_records(path, sidecar=False)
    bad = bytearray(good)
    bad[len(bad) // 2] ^= 0x20  # inside a record chunk: still loads as marshal data, maybe
    side.write_bytes(bytes(bad))
    assert sidecar.load(path) is None
    assert raw.read_records(path) == want  # from the JSON lines
    assert sidecar.load(path) is not None and side.read_bytes() != bytes(bad)  # rebuilt
    assert raw.read_records(path) == want  # now from the rebuilt sidecar
    # a v1 sidecar (before sidecars named the trace's bytes) is replaced as well
    import marshal
    import struct
    first = marshal.dumps({"format": sidecar.FORMAT, "version": 1, "header": {}})
    side.write_bytes(struct.pack("<Q", len(first)) + first)
    assert read_trace(path) == read_trace(path) and sidecar.load(path) is not None
    assert temp_files(tmp_path) == []


def test_a_trace_written_before_seals_reads_with_a_note(tmp_path: Path) -> None:
    old = tmp_path / "old.sst.gz"
    shutil.copy(OLD_TRACE, old)
    t = read_trace(old)
    assert not t.sealed and t.trailer["stopped"] and len(t.syscalls) > 100
    s = trace_cmd.show(old)
    assert any("before statstorm sealed its traces" in n for n in s.notes or ())
    sealed = tmp_path / "new.sst.gz"
    write_trace(sealed, t)
    again = read_trace(sealed)
    assert again.sealed and (again.syscalls, again.requests, again.operations) == (
        t.syscalls, t.requests, t.operations)
    assert not any("sealed" in n for n in trace_cmd.show(sealed).notes or ())
    lines = gzip.decompress(OLD_TRACE.read_bytes()).splitlines(True)
    old.write_bytes(b"".join(lines[:-1]))  # without its trailer: truncated, old or not
    with pytest.raises(DamagedInput, match="truncated trace"):
        read_trace(old)


# -- usage ----------------------------------------------------------------------------------
def test_output_where_it_cannot_be_written(tmp_path: Path, shared_dir: Path) -> None:
    log = shared_dir / "x.log"
    shutil.copy(FIX / "strace" / "real-cli-f.log", log)
    log.chmod(0o644)
    p = invoke(["trace", "import", str(log), "-o", str(tmp_path / "no" / "x.sst")], tmp_path)
    one_line_error(p, 2, "does not exist", "-o")
    p = invoke(["trace", "import", str(log), "-o", str(tmp_path)], tmp_path)
    assert p.returncode == 2 and "Traceback" not in p.stderr and "directory" in p.stderr
    if ROOT:  # a directory nobody may write in
        p = statstorm(["trace", "import", str(log), "-o", str(shared_dir / "x.sst")],
                      shared_dir, user="nobody")
        one_line_error(p, 2, "not writable", "-o")
        assert sorted(x.name for x in shared_dir.iterdir()) == ["x.log"]


@pytest.mark.root
def test_unreadable_trace_as_another_user(shared_dir: Path) -> None:
    path = pool_trace(shared_dir / "p.sst")
    path.chmod(0o600)
    for verb in (["trace", "show"], ["whatif"], ["trace", "diff", str(path)]):
        p = statstorm([*verb, str(path)], shared_dir, user="nobody")
        # click's own check of the argument (a usage error) or the reader's one line
        assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
        last = p.stderr.strip().splitlines()[-1]
        assert str(path) in last and ("not readable" in last or "permission denied" in last)
    path.chmod(0o644)
    records_path(path).chmod(0o600)  # the sidecar alone unreadable: the JSON lines answer
    p = statstorm(["trace", "show", str(path), "--json"], shared_dir, user="nobody")
    assert p.returncode == 0 and json.loads(p.stdout)["requests"] == 12, p.stderr


@pytest.mark.parametrize("locale", ["C.UTF-8", "en_US.UTF-8", "C"])
def test_non_ascii_names_and_paths(tmp_path: Path, locale: str) -> None:
    name = os.fsdecode(b"caf\xc3\xa9-\xe9.sst")
    env = {"LC_ALL": locale, "LANG": locale}
    src = FIX / "strace" / "synthetic-nonutf8.log"
    p = statstorm(["trace", "import", str(src), "-o", str(tmp_path / name)], tmp_path, env)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    for args in (["trace", "show", str(tmp_path / name)],
                 ["trace", "show", str(tmp_path / name), "--json"]):
        p = statstorm(args, tmp_path, env)
        assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
        assert ("/srv/www/caf\\xe9.php" in p.stdout  # the path inside, as \xNN
                or "/srv/www/caf\\\\xe9.php" in p.stdout or "caf\\udce9.php" in p.stdout)
    cut = tmp_path / name.replace(".sst", "-cut.sst")
    cut.write_bytes(b"".join((tmp_path / name).read_bytes().splitlines(True)[:3]))
    p = statstorm(["trace", "show", str(cut)], tmp_path, env)
    one_line_error(p, 2, "truncated trace")
