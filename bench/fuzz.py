"""Fuzz every parser statstorm reads outside input with: the long run (issue 20, part 3).

Each parser is fed mutations of real outputs (tests/fixtures, the seed posts, and outputs of
the real php, php-fpm and nginx on this machine when they are installed) and inputs made from
scratch. A parser passes an input when it returns or raises a project error
(`statstorm.errors.StatstormError`: the one-line message the CLI prints); any other exception
is a failure, and an input that takes longer than the time limit is a hang.

    .venv/bin/python bench/fuzz.py                  # 100,000 inputs over all parsers
    .venv/bin/python bench/fuzz.py --inputs 5000 --only strace-import,wrk

Prints per parser: inputs tried, failures (each kind once, with the smallest input found that
raises it), hangs and run time. Exit status 1 when any parser failed or hung. CPU only: no
server, no load, no network (the URL check's name lookups are answered locally).

tests/test_fuzz.py imports TARGETS from here, so the suite and the long run fuzz the same
parsers from the same seeds.
"""

from __future__ import annotations

import argparse
import atexit
import faulthandler
import ipaddress
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Callable, Iterator

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from statstorm.adapters.labs import phpfpm
from statstorm.adapters.load import ab, http, vegeta, wrk, wrk_checked
from statstorm.adapters.php import fastcgi, php_targets
from statstorm.adapters.servers import nginx, nginx_conf
from statstorm.adapters.storage import gluster_profile, nfs_mountstats
from statstorm.adapters.tracing import strace_log, strace_summary
from statstorm.cli.lab import key_values  # noqa: E402
from statstorm.cli.sweep import number_list  # noqa: E402
from statstorm.commands import exporter as exporter_cmd  # noqa: E402
from statstorm.commands import fsbench as fsbench_cmd  # noqa: E402
from statstorm.errors import StatstormError  # noqa: E402
from statstorm.model import checkfacts, matrix_grid, phpsettings  # noqa: E402
from statstorm.model.tracestats import summarize  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures"
SEEDS = ROOT.parent / "shared" / "seeds"  # the posts the project was seeded with, when present

# Pieces that broke parsers before or are known to be hard: huge numbers, bytes that are not
# UTF-8, Unicode line separators (str.splitlines splits on them), strace's own markers.
TOKENS = [b"9" * 5000, b"-1", b"0x", b"0x" + b"f" * 40, b"\xff\xfe", "é中".encode(), b"\x00",
          b"(...)", b"...", b"<unfinished ...>", b"<... stat resumed>", b"<... accept4 resumed>",
          b'"', b"\\", b"\\x", b"{", b"}", b"[", b"]", b"(", b")", b"<", b">", b"NaN", b"1e400",
          b"-0", b"\r\n", b"\t", b"%", b":", b"=", b",", b" ", b"\n", b"total", b"calls",
          b"errors", "\u2028".encode(), b"\x85", b"\x0c", b"\x1c", "²".encode(), "٣".encode(),
          b"-- ", b"+++ ", b"[pid 7] ", b"00:00:00.000001 ", b"1700000000.000001 "]
NUMBERS = [b"0", b"1", b"-1", b"07", b"9" * 20, b"9" * 5000, b"18446744073709551616",
           b"9223372036854775808", b"1.5", b"1e400", b"0x10", b"-9" * 3]


class Hang(Exception):
    """An input ran past the per-input time limit."""


@dataclass
class Target:
    """One parser: how to feed it raw bytes, and the real inputs its mutations start from."""

    name: str
    run: Callable[[bytes], object]
    seeds: Callable[[], list[bytes]]


def _text(data: bytes) -> str:
    """Program output as statstorm reads it: UTF-8, bad bytes replaced."""
    return data.decode("utf-8", "replace")


def _arg(data: bytes) -> str:
    """A command-line argument as Python gets it: bad bytes as surrogates."""
    return data.decode("utf-8", "surrogateescape")


def _files(folder: Path, *patterns: str) -> list[bytes]:
    return [p.read_bytes() for pat in patterns for p in sorted(folder.glob(pat))]


def _run_tool(argv: list[str]) -> bytes:
    """The output of a real program (stdout and stderr), b'' when it is not installed."""
    try:
        res = subprocess.run(argv, capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return b""
    return res.stdout + res.stderr


# -- the parsers ------------------------------------------------------------------------------
def _strace_import(data: bytes) -> None:
    for table in (0, 1):
        try:
            trace = strace_log.import_data(data, source="fuzz", requests=None, table=table)
        except StatstormError:
            continue
        summarize(trace)


def _strace_tables(data: bytes) -> None:
    for t in strace_summary.parse_tables(_text(data)):
        assert t.lines >= 1 and all(r.calls >= 0 and r.errors >= 0 for r in t.rows)
    strace_summary.parse_summary(_text(data))


def _ab_csv(data: bytes) -> None:
    ab.parse((FIXTURES / "ab" / "plain.txt").read_text(), _text(data))


def _ab_reports(data: bytes) -> None:
    for _, body in ab.split_reports(_text(data)):
        ab.parse_report(body)


def _php_i(data: bytes) -> None:
    php_targets.parse_php_i(_text(data))
    phpfpm.ini_scan_dir(_text(data))


_NGINX_TREE: list[Path] = []


def _nginx_conf(data: bytes) -> None:
    """The input as a site of Debian's configuration tree (a copy of the fixture's), read
    whole with crossplane: its includes, snippets and fastcgi_params followed."""
    if not _NGINX_TREE:
        tmp = Path(tempfile.mkdtemp(prefix="statstorm-fuzz-nginx-"))
        atexit.register(shutil.rmtree, tmp, True)
        shutil.copytree(FIXTURES / "nginx" / "debian-default", tmp / "tree")
        _NGINX_TREE.append(tmp / "tree")
    tree = _NGINX_TREE[0]
    (tree / "sites-enabled" / "default").write_bytes(data)
    config = nginx_conf.read(tree / "nginx.conf")
    nginx_conf.sites(config)
    nginx_conf.sites_passing_to(config, "/run/php/php8.2-fpm.sock")
    nginx_conf.files_passing_to(config, "9000")


def _lookup_locally(real: Callable[..., list[Any]]) -> Callable[..., list[Any]]:
    """getaddrinfo that never asks DNS: IP literals and localhost as the real one answers them,
    other names as unknown. The host is IDNA-encoded first, as the real one does."""
    def lookup(host: str, port: object, *args: object, **kw: object) -> list[Any]:
        if isinstance(host, str):
            host.encode("idna")
        try:
            literal = host == "localhost" or bool(ipaddress.ip_address(host))
        except ValueError:
            literal = False
        if literal:  # answered from /etc/hosts or the literal itself: no DNS query
            return real(host, port, *args, **kw)
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    return lookup


def _url(data: bytes) -> None:
    real = socket.getaddrinfo
    socket.getaddrinfo = _lookup_locally(real)
    try:
        http.check_loopback(_arg(data), allow_remote=False)
    finally:
        socket.getaddrinfo = real


def _set(data: bytes) -> None:
    changes = phpsettings.parse_set([_arg(data)])
    phpsettings.with_changes(phpsettings.PhpSettings(), {}, changes)


def _levels(data: bytes) -> None:
    number_list(_arg(data), "--concurrency", int)
    number_list(_arg(data), "--rate", float)


def _matrix_knob(data: bytes) -> None:
    matrix_grid.parse_knob(_arg(data), "spin")
    matrix_grid.parse_on_off(_arg(data), "--opcache")


def _fsbench_lists(data: bytes) -> None:
    fsbench_cmd.parse_ops(_arg(data))


def _fsbench_states(data: bytes) -> None:
    fsbench_cmd.parse_states(_arg(data))


def _ini_values(data: bytes) -> None:
    checkfacts.ini_bytes(_arg(data))
    checkfacts.ini_int(_arg(data))
    phpfpm.parse_ini_overrides([_arg(data)])


# -- seeds --------------------------------------------------------------------------------------
def _strace_seeds() -> list[bytes]:
    return _files(FIXTURES / "strace", "*.log", "*.txt") + _files(SEEDS, "*.txt")


def _fpm_tt_seeds() -> list[bytes]:
    out = [b"[01-Jan-2026 00:00:00] NOTICE: [www]\n[01-Jan-2026 00:00:00] NOTICE: \tpm = static\n"
           b"[01-Jan-2026 00:00:00] NOTICE: \tphp_admin_value[realpath_cache_size] = 16K\n"]
    binaries = sorted(Path("/usr/sbin").glob("php-fpm[0-9]*"))
    if binaries:
        with tempfile.TemporaryDirectory() as tmp:
            conf = Path(tmp, "fpm.conf")
            conf.write_text(phpfpm.render_conf(pool="www", run_dir=Path(tmp), log_dir=Path(tmp),
                                               workers=2).replace(
                "clear_env = no", "clear_env = no\nphp_admin_value[realpath_cache_size] = 16K"))
            out.append(_run_tool([str(binaries[-1]), "-tt", "-y", str(conf)]))
    return [s for s in out if s]


def _nginx_seeds() -> list[bytes]:
    """The fixtures' sites, the lab's server block and this machine's default site."""
    lab = nginx.render_conf(port=8080, docroot="/srv/www", socket="/run/php/php8.2-fpm.sock",
                            prefix=Path("/var/tmp/lab"), front_controller="index.php")
    server = lab[lab.index("    server {"):lab.rindex("}")]
    machine = Path("/etc/nginx/sites-enabled/default")
    return ([p.read_bytes() for p in sorted((FIXTURES / "nginx").glob("*/sites-enabled/*"))]
            + [server.encode()] + ([machine.read_bytes()] if machine.is_file() else []))


def _wrk_matrix_seeds() -> list[bytes]:
    pct = ",".join(f"[{p},{p * 40}]" for p in range(1, 100))
    line = ('STATSTORM-MATRIX {"duration_us":5000000,"requests":2100,"bytes":900000,'
            '"checked":2100,"failed":3,"bad_status":1,"bad_length":1,"bad_marker":1,"connect":0,'
            '"read":0,"write":0,"timeout":0,"min_us":300,"max_us":9000,"percentiles_us":'
            f'[[0,300],{pct},[99.9,8000],[100,9000]]}}\n')
    plain = (FIXTURES / "wrk" / "plain.txt").read_text()
    return [(plain + line).encode(), line.encode()]


def _fastcgi_seeds() -> list[bytes]:
    def record(rtype: int, content: bytes) -> bytes:
        pad = -len(content) % 8
        return bytes([1, rtype, 0, 1, len(content) >> 8, len(content) & 255, pad, 0]) \
            + content + b"\0" * pad
    body = b'Content-Type: application/json\r\n\r\n{"ini": {}, "pid": 7}'
    return [record(6, body) + record(7, b"PHP Warning: x") + record(3, b"\0" * 8),
            fastcgi.build_request({"SCRIPT_FILENAME": "/srv/www/index.php"})]


TARGETS: list[Target] = [
    Target("strace-import", _strace_import, _strace_seeds),
    Target("strace-c-tables", _strace_tables, lambda: _files(FIXTURES / "strace", "*.txt")
           + _files(SEEDS, "*.txt")),
    Target("wrk", lambda d: wrk.parse(_text(d)), lambda: _files(FIXTURES / "wrk", "*.txt")),
    Target("wrk-matrix", lambda d: wrk_checked.parse(_text(d)), _wrk_matrix_seeds),
    Target("ab", lambda d: ab.parse(_text(d)), lambda: _files(FIXTURES / "ab", "*.txt")),
    Target("ab-csv", _ab_csv, lambda: [b"Percentage served,Time in ms\n0,0.5\n50,1.25\n"
                                       b"90,3.5\n99,8.75\n100,14.0\n"]),
    Target("ab-reports", _ab_reports, lambda: _files(FIXTURES / "matrix", "*.txt")
           + _files(FIXTURES / "ab", "*.txt")),
    Target("vegeta", lambda d: vegeta.parse(_text(d), 10.0, "app="),
           lambda: _files(FIXTURES / "vegeta", "*.jsonl")),
    Target("mountstats", lambda d: nfs_mountstats.parse(_text(d)),
           lambda: _files(FIXTURES / "nfs", "*.txt") + _files(FIXTURES / "mounts",
                                                              "nfs_mountstats.txt")),
    Target("gluster-profile", lambda d: gluster_profile.parse_info(_text(d)),
           lambda: _files(FIXTURES / "gluster", "*.txt")),
    Target("php-i", _php_i, lambda: [s for s in (_run_tool(["php", "-i"]),
                                                 b"realpath_cache_size => 4096K => 4096K\n"
                                                 b"Scan this dir for additional .ini files => "
                                                 b"/etc/php/8.2/cli/conf.d\n") if s]),
    Target("php-fpm-tt", lambda d: php_targets.parse_fpm_tt(_text(d), "www"), _fpm_tt_seeds),
    Target("nginx-conf", _nginx_conf, _nginx_seeds),
    Target("fastcgi", lambda d: fastcgi.parse_response(d), _fastcgi_seeds),
    Target("cli-url", _url, lambda: [b"http://127.0.0.1:8080/index.php", b"http://[::1]:80/",
                                     b"https://localhost/x?y=1"]),
    Target("cli-set", _set, lambda: [b"realpath_cache_size=16K", b"realpath_cache_ttl=600",
                                     b"opcache.enable=1", b"pm.max_requests=500",
                                     b"open_basedir=/srv:/tmp"]),
    Target("cli-levels", _levels, lambda: [b"1,2,5,10", b"20.5,50", b"1"]),
    Target("cli-pairs", lambda d: key_values((_arg(d),), "--mount-opt"),
           lambda: [b"attribute-timeout=600,entry-timeout=600", b"actimeo=60"]),
    Target("cli-listen", lambda d: exporter_cmd.parse_listen(_arg(d)),
           lambda: [b"127.0.0.1:9464", b"[::1]:9464"]),
    Target("cli-matrix", _matrix_knob, lambda: [b"nginx-fpm/*=500", b"*/opcache-on/*+=200",
                                                b"on,off"]),
    Target("cli-fsbench-ops", _fsbench_lists, lambda: [b"stat,lstat,open", b"access"]),
    Target("cli-fsbench-state", _fsbench_states, lambda: [b"warm", b"both"]),
    Target("cli-ini-values", _ini_values, lambda: [b"16K", b"4096K", b"1G", b"120",
                                                   b"realpath_cache_size=16K"]),
]


# -- inputs -------------------------------------------------------------------------------------
def mutate(rng: random.Random, data: bytes, seeds: list[bytes]) -> bytes:
    """One to four random edits of `data`, each of a kind that broke parsers somewhere."""
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        if not b:
            b = bytearray(rng.choice(TOKENS))
        i = rng.randrange(len(b) + 1)
        op = rng.randrange(11)
        if op == 0 and i < len(b):
            b[i] = rng.randrange(256)
        elif op == 1:
            del b[i:i + rng.choice((1, 2, 8, 40, 400))]
        elif op == 2:
            b[i:i] = rng.choice(TOKENS)
        elif op == 3:
            j = rng.randrange(len(b) + 1)
            b[i:i] = b[j:j + rng.choice((1, 10, 100, 1000))]
        elif op in (4, 5, 6):
            lines = bytes(b).split(b"\n")
            k, m = rng.randrange(len(lines)), rng.randrange(len(lines))
            if op == 4:
                lines[k], lines[m] = lines[m], lines[k]
            elif op == 5:
                del lines[k]
            else:
                lines[k:k] = [lines[m]] * rng.choice((1, 2, 50))
            b = bytearray(b"\n".join(lines))
        elif op == 7:
            runs = [k for k in range(len(b)) if 48 <= b[k] <= 57 and (k == 0 or not
                                                                      48 <= b[k - 1] <= 57)]
            if runs:
                k = rng.choice(runs)
                end = k
                while end < len(b) and 48 <= b[end] <= 57:
                    end += 1
                b[k:end] = rng.choice(NUMBERS)
        elif op == 8:
            del b[i:]
        elif op == 9:
            other = rng.choice(seeds)
            b = b[:i] + other[rng.randrange(len(other) + 1):]
        else:
            b[i:i] = bytes(rng.randrange(256) for _ in range(rng.choice((1, 4, 16))))
    return bytes(b)


def inputs(rng: random.Random, seeds: list[bytes]) -> Iterator[bytes]:
    """Mostly mutations of the seeds; some random bytes and random printable text."""
    alphabet = b"0123456789abcdefxyz.,:;=-+%/[](){}<>\"' \t\n"
    while True:
        roll = rng.random()
        if seeds and roll < 0.9:
            yield mutate(rng, rng.choice(seeds), seeds)
        elif roll < 0.95:
            yield bytes(rng.randrange(256) for _ in range(rng.randrange(64)))
        else:
            yield bytes(rng.choice(alphabet) for _ in range(rng.randrange(200)))


# -- running ------------------------------------------------------------------------------------
def failure_key(exc: BaseException) -> str:
    """An exception by type and the line of statstorm's code it came from."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/statstorm/" in f.filename]
    where = frames[-1] if frames else traceback.extract_tb(exc.__traceback__)[-1]
    return f"{type(exc).__name__} at {Path(where.filename).name}:{where.lineno}"


def outcome(target: Target, data: bytes, limit: float) -> str | None:
    """None when the parser passed, else the failure's key ('hang' for a hang)."""
    def on_alarm(signum: int, frame: FrameType | None) -> None:
        raise Hang()

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, limit)
    start = time.perf_counter()
    try:
        target.run(data)
    except StatstormError:
        pass
    except Hang:
        return "hang"
    except Exception as exc:  # noqa: BLE001 - what the fuzzer is looking for
        return failure_key(exc)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    return "hang" if time.perf_counter() - start > limit else None


def shrink(target: Target, data: bytes, key: str, limit: float, budget: int = 300) -> bytes:
    """A smaller input that fails the same way: chunks removed while the failure stays."""
    chunk = max(1, len(data) // 2)
    while chunk >= 1 and budget > 0:
        i, smaller = 0, False
        while i < len(data) and budget > 0:
            candidate = data[:i] + data[i + chunk:]
            budget -= 1
            if outcome(target, candidate, limit) == key:
                data, smaller = candidate, True
            else:
                i += chunk
        if not smaller:
            chunk //= 2
    return data


@dataclass
class Failure:
    count: int
    example: bytes  # the smallest input found that fails this way


@dataclass
class Report:
    name: str
    tried: int = 0
    hangs: int = 0
    seconds: float = 0.0
    failures: dict[str, Failure] = field(default_factory=dict)  # by failure_key; 'hang' too

    @property
    def failed(self) -> int:
        return sum(f.count for k, f in self.failures.items() if k != "hang")


def fuzz(target: Target, n: int, seed: int, limit: float) -> Report:
    rng = random.Random(f"{seed}:{target.name}")
    seeds = [s for s in target.seeds() if s]
    rep = Report(target.name)
    start = time.perf_counter()
    for data, _ in zip(inputs(rng, seeds), range(n)):
        faulthandler.dump_traceback_later(max(60.0, limit * 20), exit=True,  # C-level hangs
                                          file=2)
        key = outcome(target, data, limit)
        rep.tried += 1
        if key == "hang":
            rep.hangs += 1
        if key is not None:
            rep.failures.setdefault(key, Failure(0, data)).count += 1
    faulthandler.cancel_dump_traceback_later()
    rep.seconds = time.perf_counter() - start
    for key, f in rep.failures.items():
        if key != "hang":
            f.example = shrink(target, f.example, key, limit)
    return rep


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--inputs", type=int, default=100_000,
                    help="inputs in all, shared out evenly over the parsers (default 100000)")
    ap.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    ap.add_argument("--time-limit", type=float, default=2.0,
                    help="seconds one input may take before it counts as a hang (default 2)")
    ap.add_argument("--only", default="", help="comma-separated parser names (default: all)")
    args = ap.parse_args(argv)
    chosen = [t for t in TARGETS if not args.only or t.name in args.only.split(",")]
    if not chosen or args.inputs < len(chosen):
        ap.error(f"choose from {', '.join(t.name for t in TARGETS)}, and at least one input each")
    per, extra = divmod(args.inputs, len(chosen))
    print(f"fuzzing {len(chosen)} parsers, {args.inputs:,} inputs in all, seed {args.seed}, "
          f"time limit {args.time_limit:g} s per input", file=sys.stderr)
    reports = []
    for i, t in enumerate(chosen):
        rep = fuzz(t, per + (i < extra), args.seed, args.time_limit)
        reports.append(rep)
        print(f"{rep.name:18} {rep.tried:>8,} inputs  {rep.failed:>6,} failures  "
              f"{rep.hangs:>4} hangs  {rep.seconds:7.1f} s", flush=True)
        for key, f in rep.failures.items():
            print(f"    {f.count:>6}x {key}: {f.example[:200]!r}", flush=True)
    total = sum(r.tried for r in reports)
    failed = sum(r.failed for r in reports)
    hangs = sum(r.hangs for r in reports)
    print(f"{'all':18} {total:>8,} inputs  {failed:>6,} failures  {hangs:>4} hangs  "
          f"{sum(r.seconds for r in reports):7.1f} s")
    return 1 if failed or hangs else 0


if __name__ == "__main__":
    sys.exit(main())
