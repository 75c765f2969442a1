"""Ground truth for `statstorm whatif`: real PHP scripts traced with `statstorm trace --cmd`,
replayed by the model under their own settings (must reproduce the measured counts) and under
other settings, then run for real under those settings and compared (cross-setting prediction).

Every scenario is deterministic under the PHP CLI (one process, one request), so the
comparisons are exact unless a test says why not. Files get an old mtime so that OPcache's
file_update_protection never refuses to cache them.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterator

import pytest

from conftest import run_cli, wait_cacheable
from statstorm.model.phpsettings import from_recorded, parse_set, with_changes
from statstorm.model.replay import prepare, replay
from statstorm.model.tracestats import summarize
from statstorm.results.trace import SUMMARY_KEYS, read_trace

pytestmark = pytest.mark.root

OLD = 1_600_000_000  # 2020-09-13: far older than file_update_protection
OPCACHE = "-d zend_extension=opcache -d opcache.enable_cli=1"


@pytest.fixture
def tree(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = Path("/var/tmp") / tmp_path_factory.mktemp("whatif").name
    root.mkdir(parents=True, exist_ok=True)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def age(root: Path) -> None:
    for dirpath, dirnames, filenames in os.walk(root):
        for n in filenames + dirnames:
            os.utime(Path(dirpath, n), (OLD, OLD), follow_symlinks=False)


def trace(home: Path, cmd: str, out: Path, cwd: Path | None = None,
          env: dict[str, str] | None = None, backend: str = "auto") -> Path:
    """Run `cmd` under `statstorm trace --cmd` and return the trace file (the command's
    output goes to `out` + ".out")."""
    full = dict(os.environ, STATSTORM_HOME=str(home), **(env or {}))
    proc = subprocess.run([sys.executable, "-m", "statstorm", "trace", "--cmd", cmd, "-o",
                           str(out), "--json", "--backend", backend], capture_output=True,
                          text=True, env=full, cwd=cwd, timeout=300)
    assert proc.returncode == 0, proc.stderr
    Path(str(out) + ".out").write_text(proc.stderr)
    trailer = read_trace(out).trailer
    assert trailer["dropped"] == 0 and trailer["completed_requests"] == 1, (cmd, trailer)
    return out


def traces(home: Path, *runs: tuple[str, Path], cwd: Path | None = None,
           env: dict[str, str] | None = None) -> list[Path]:
    """Several independent `trace()` runs at once (each bpftrace follows only its own
    command), which halves the suite's wall time on two cores."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = [pool.submit(trace, home, cmd, out, cwd, env) for cmd, out in runs]
        return [f.result() for f in futures]


def php_said(out: Path, tag: str) -> int:
    """A number the traced script printed as `tag=N`."""
    text = Path(str(out) + ".out").read_text()
    return int(text.split(f"{tag}=")[1].split()[0])


def cache_bytes(path: Path, *sets: str) -> int:
    t = read_trace(path)
    recorded = t.header["settings"]
    s = with_changes(from_recorded(recorded), recorded, parse_set(list(sets)))
    return replay(prepare(t), s).cache_bytes_final


def measured(path: Path) -> dict[str, float]:
    return dict(summarize(read_trace(path))["per_request"])


def predict(path: Path, *sets: str) -> dict[str, float]:
    """The model's per-request counts for the trace under its settings + `sets`."""
    t = read_trace(path)
    recorded = t.header["settings"]
    s = with_changes(from_recorded(recorded), recorded, parse_set(list(sets)))
    return dict(replay(prepare(t), s).per_request)


def record(pred: dict[str, float], real: dict[str, float], what: str) -> None:
    """With STATSTORM_WHATIF_REPORT=FILE, every comparison is appended to FILE (JSON lines),
    so docs/whatif.md can quote the figures of a run."""
    dest = os.environ.get("STATSTORM_WHATIF_REPORT")
    if dest:
        test = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0]
        with open(dest, "a") as fh:
            fh.write(json.dumps({"test": test, "what": what,
                                 "model": {k: pred[k] for k in SUMMARY_KEYS},
                                 "real": {k: real[k] for k in SUMMARY_KEYS}}) + "\n")


def assert_same(pred: dict[str, float], real: dict[str, float], what: str) -> None:
    record(pred, real, what)
    assert {k: pred[k] for k in SUMMARY_KEYS} == {k: real[k] for k in SUMMARY_KEYS}, what


def assert_within(pred: dict[str, float], real: dict[str, float], share: float,
                  what: str) -> None:
    record(pred, real, what)
    for k in SUMMARY_KEYS:
        assert abs(pred[k] - real[k]) <= share * max(real[k], 1), (what, k, pred, real)


def deep_files(root: Path, n: int, sub: str = "vendor/acme/pkg/src/Deep/Er") -> list[Path]:
    return [write(root / sub / f"Class{i:03d}WithALongerName.php", f"<?php $c{i} = {i};\n")
            for i in range(n)]


# -- realpath cache --------------------------------------------------------------------------
def test_cold_then_warm_and_cache_off(tree: Path, state_home: Path, tmp_path: Path) -> None:
    """Two passes over 30 includes: the first pays the lstat chains, the second nothing.
    Predicted for realpath_cache_size=0 from the 4096K trace: every include walks again."""
    files = deep_files(tree, 30)
    script = write(tree / "cold.php", "<?php\nfor ($p = 0; $p < 2; $p++) {\n" + "".join(
        f"  include '{f}';\n" for f in files) + "}\n"
        "fwrite(STDERR, 'bytes=' . realpath_cache_size() . \"\\n\");\n")
    age(tree)
    a, b = traces(state_home, (f"php -n {script}", tmp_path / "a.sst.gz"),
                  (f"php -n -d realpath_cache_size=0 {script}", tmp_path / "b.sst.gz"))
    assert_same(predict(a), measured(a), "replay under its own settings")
    assert_same(predict(a, "realpath_cache_size=0"), measured(b), "4096K → 0")
    assert_same(predict(b, "realpath_cache_size=4096K"), measured(a), "0 → 4096K")
    assert measured(b)["lstat"] > measured(a)["lstat"] + 30
    # byte accounting: realpath_cache_size() as PHP reports it at the end
    assert cache_bytes(a) == php_said(a, "bytes") > 0
    assert cache_bytes(b) == php_said(b, "bytes") == 0


def test_cache_too_small_and_find_min(tree: Path, state_home: Path, tmp_path: Path) -> None:
    """A 16K cache cannot hold 200 long paths: the deep leaves stay uncached (no eviction,
    parents first). --find-min gives the size at which the second pass costs nothing, and
    real PHP agrees: at that size it matches the 4096K run, one byte less it does not."""
    files = deep_files(tree, 200)
    script = write(tree / "small.php", "<?php\nfor ($p = 0; $p < 2; $p++) {\n"
                   f"  for ($i = 0; $i < 200; $i++) {{ include sprintf('{files[0].parent}/"
                   "Class%03dWithALongerName.php', $i); }\n}\n"
                   "fwrite(STDERR, 'bytes=' . realpath_cache_size() . \"\\n\");\n")
    age(tree)
    a, b = traces(state_home, (f"php -n {script}", tmp_path / "a.sst.gz"),
                  (f"php -n -d realpath_cache_size=16K {script}", tmp_path / "b.sst.gz"))
    assert_same(predict(b), measured(b), "replay of the 16K trace")
    assert_same(predict(a, "realpath_cache_size=16K"), measured(b), "4096K → 16K")
    assert cache_bytes(b) == php_said(b, "bytes") <= 16 * 1024
    assert cache_bytes(a, "realpath_cache_size=16K") == php_said(b, "bytes")
    assert measured(b)["lstat"] > measured(a)["lstat"] + 50
    proc = run_cli(["whatif", str(a), "--find-min", "realpath_cache_size", "--json"],
                   state_home, check=True)
    need = json.loads(proc.stdout)["find_min"]["bytes"]
    assert 16 * 1024 < need < 64 * 1024
    at, below = traces(state_home,
                       (f"php -n -d realpath_cache_size={need} {script}", tmp_path / "at.sst.gz"),
                       (f"php -n -d realpath_cache_size={need - 1} {script}",
                        tmp_path / "below.sst.gz"))
    assert_same(measured(at), measured(a), "real PHP at the found minimum")
    assert measured(below)["lstat"] > measured(a)["lstat"]
    assert_same(predict(a, f"realpath_cache_size={need - 1}"), measured(below),
                "one byte below the minimum")


def test_ttl_expiry_with_real_waiting(tree: Path, state_home: Path, tmp_path: Path) -> None:
    """realpath_cache_ttl=1 and a 2.2 s pause: every entry has expired (expires < now),
    so the second pass pays the chains again; with ttl=120 it pays nothing."""
    files = deep_files(tree, 20)
    body = "".join(f"  include '{f}';\n" for f in files)
    script = write(tree / "ttl.php", f"<?php\n{body}usleep(2200000);\n{body}")
    age(tree)
    a, b = traces(state_home, (f"php -n -d realpath_cache_ttl=1 {script}", tmp_path / "a.sst.gz"),
                  (f"php -n -d realpath_cache_ttl=120 {script}", tmp_path / "b.sst.gz"))
    assert_same(predict(a), measured(a), "replay of the ttl=1 trace")
    assert_same(predict(a, "realpath_cache_ttl=120"), measured(b), "ttl 1 → 120")
    assert_same(predict(b, "realpath_cache_ttl=1"), measured(a), "ttl 120 → 1")
    assert measured(a)["lstat"] >= measured(b)["lstat"] + 20


def test_open_basedir(tree: Path, state_home: Path, tmp_path: Path) -> None:
    """open_basedir disables the cache and adds the check's resolutions to every include
    and probe; predicted from a trace without it, and the other way round."""
    files = deep_files(tree, 15)
    script = write(tree / "ob.php", "<?php\nfor ($p = 0; $p < 2; $p++) {\n" + "".join(
        f"  include '{f}';\n" for f in files) + f"  file_exists('{tree}/missing.php');\n"
        f"  is_file('{files[0]}');\n}}\n")
    age(tree)
    basedir = f"/nonexistent-first:{tree}:/usr/share/php"
    a, b = traces(state_home, (f"php -n {script}", tmp_path / "a.sst.gz"),
                  (f"php -n -d open_basedir={basedir} {script}", tmp_path / "b.sst.gz"))
    assert_same(predict(b), measured(b), "replay of the open_basedir trace")
    assert_same(predict(a, f"open_basedir={basedir}"), measured(b), "none → open_basedir")
    assert_same(predict(b, "open_basedir="), measured(a), "open_basedir → none")


def test_symlinked_release_directory(tree: Path, state_home: Path, tmp_path: Path) -> None:
    """`current -> releases/r2`: the symlinked spelling gets its own entries and a
    readlink; predicted with the cache off (every include reads the link again)."""
    rel = tree / "releases/r2"
    deep_files(rel, 10, "lib/Acme")
    (tree / "current").symlink_to("releases/r2")
    script = write(tree / "sym.php", "<?php\nfor ($p = 0; $p < 3; $p++) {\n"
                   f"  for ($i = 0; $i < 10; $i++) {{ include sprintf('{tree}/current/lib/Acme/"
                   "Class%03dWithALongerName.php', $i); }\n}\n")
    age(tree)
    a, b = traces(state_home, (f"php -n {script}", tmp_path / "a.sst.gz"),
                  (f"php -n -d realpath_cache_size=0 {script}", tmp_path / "b.sst.gz"))
    assert_same(predict(a), measured(a), "replay")
    assert_same(predict(a, "realpath_cache_size=0"), measured(b), "4096K → 0")
    assert measured(b)["readlink"] >= 30


def test_dot_and_dotdot_includes(tree: Path, state_home: Path, tmp_path: Path) -> None:
    """`./x` and `../x` resolve against the cwd and are cached under their own spellings;
    a failed include_once resolves twice (zend_include_or_eval, then the stream open)."""
    write(tree / "app/lib/a.php", "<?php $a = 1;\n")
    write(tree / "shared/b.php", "<?php $b = 1;\n")
    write(tree / "app/lib/sub/c.php", "<?php $c = 1;\n")
    script = write(tree / "app/dot.php", "<?php\nchdir(__DIR__);\nfor ($p = 0; $p < 3; $p++) {\n"
                   "  include './lib/a.php';\n  include '../shared/b.php';\n"
                   "  include './lib/sub/../a.php';\n  include 'lib/sub/c.php';\n"
                   "  @include_once 'lib/nope.php';\n  @include '../shared/nope.php';\n}\n")
    age(tree)
    a, b = traces(state_home, (f"php -n {script}", tmp_path / "a.sst.gz"),
                  (f"php -n -d realpath_cache_size=0 {script}", tmp_path / "b.sst.gz"),
                  cwd=tree / "app")
    assert_same(predict(a), measured(a), "replay")
    assert_same(predict(a, "realpath_cache_size=0"), measured(b), "4096K → 0")


def test_include_path_misses(tree: Path, state_home: Path, tmp_path: Path) -> None:
    """Relative require_once through a:b:c:lib fails 3 lstats per file, every time (negative
    results are not cached); predicted for the reordered include_path lib:a:b:c."""
    for d in ("a", "b", "c"):
        (tree / d).mkdir()
    for i in range(1, 31):
        write(tree / f"lib/f{i}.php", f"<?php $v{i} = {i};\n")
    script = write(tree / "ip.php", "<?php\nfor ($p = 0; $p < 2; $p++) {\n"
                   "  for ($i = 1; $i <= 30; $i++) { require_once \"f$i.php\"; }\n"
                   "  for ($i = 1; $i <= 5; $i++) { include \"f$i.php\"; }\n}\n")
    age(tree)
    ip = f"{tree}/a:{tree}/b:{tree}/c:{tree}/lib"
    good = f"{tree}/lib:{tree}/a:{tree}/b:{tree}/c"
    a, b = traces(state_home, (f"php -n -d include_path={ip} {script}", tmp_path / "a.sst.gz"),
                  (f"php -n -d include_path={good} {script}", tmp_path / "b.sst.gz"))
    assert_same(predict(a), measured(a), "replay")
    assert measured(a)["failed"] >= 3 * 30 * 2
    assert_same(predict(a, f"include_path={good}"), measured(b), "reordered include_path")


@pytest.mark.parametrize("backend", ("ebpf", "bpftrace"))
def test_include_path_the_script_sets(tree: Path, state_home: Path, tmp_path: Path,
                                      backend: str) -> None:
    """A script that sets its include_path keeps it, even when it sets the value php.ini
    gave: a proposed include_path applies only before. The tracer records the change
    (include_path's ini handler), which no syscall shows; not its restore at the end."""
    for d in ("a", "b"):
        (tree / d).mkdir()
    for i in range(1, 11):
        write(tree / f"lib/f{i}.php", f"<?php $v{i} = {i};\n")
    ip = f"{tree}/a:{tree}/b:{tree}/lib"
    good = f"{tree}/lib"
    script = write(tree / "own.php", "<?php\nrequire_once 'f1.php';\n"
                   f"set_include_path({ip!r});\n"
                   "for ($i = 2; $i <= 10; $i++) { require_once \"f$i.php\"; }\n")
    age(tree)
    a, b = (trace(state_home, f"php -n -d include_path={v} {script}", tmp_path / f"{n}.sst.gz",
                  backend=backend) for n, v in (("a", ip), ("b", good)))
    ops = [o for o in read_trace(a).operations.values() if o.kind == "ini_set"]
    assert [o.args["setting"] for o in ops] == ["include_path"]
    # only f1's two misses go with php.ini's include_path: f2..f10 still try a and b first
    assert measured(a)["failed"] - measured(b)["failed"] == 2
    assert_same(predict(a, f"include_path={good}"), measured(b), "include_path set by the script")


def test_file_exists_storm_and_stat_cache(tree: Path, state_home: Path, tmp_path: Path) -> None:
    """An autoloader-style storm: file_exists over 4 candidate directories per class (access,
    never cached), is_file twice on the same string (one stat: the 1-entry stat cache),
    clearstatcache() in between; predicted under open_basedir."""
    for i in range(40):
        write(tree / f"src/d{i % 4}/C{i}.php", "<?php\n")
    script = write(tree / "storm.php", "<?php\nfor ($i = 0; $i < 40; $i++) {\n"
                   "  foreach (['d0', 'd1', 'd2', 'd3'] as $d) {\n"
                   f"    if (file_exists(\"{tree}/src/$d/C$i.php\")) {{ break; }}\n  }}\n"
                   f"  is_file(\"{tree}/src/d0/C$i.php\"); is_file(\"{tree}/src/d0/C$i.php\");\n"
                   "  if ($i % 10 == 0) { clearstatcache(); }\n"
                   f"  is_dir('{tree}/src'); is_dir('{tree}/src');\n}}\n")
    age(tree)
    a, b = traces(state_home, (f"php -n {script}", tmp_path / "a.sst.gz"),
                  (f"php -n -d open_basedir={tree} {script}", tmp_path / "b.sst.gz"))
    assert_same(predict(a), measured(a), "replay")
    assert_same(predict(a, f"open_basedir={tree}"), measured(b), "none → open_basedir")


def test_rename_wipes_the_cache(tree: Path, state_home: Path, tmp_path: Path) -> None:
    """A successful rename() (and unlink()) wipes the whole realpath cache: the includes
    after it pay their lstat chains again; a failed unlink wipes nothing."""
    files = deep_files(tree, 10)
    body = "".join(f"  include '{f}';\n" for f in files)
    script = write(tree / "wipe.php", f"<?php\n{body}"
                   f"file_put_contents('{tree}/tmp.txt', 'x');\n"
                   f"rename('{tree}/tmp.txt', '{tree}/tmp2.txt');\n{body}"
                   f"@unlink('{tree}/no-such-file');\n{body}"
                   f"unlink('{tree}/tmp2.txt');\n{body}")
    age(tree)
    # One after the other: both runs create, rename and unlink the same files.
    a = trace(state_home, f"php -n {script}", tmp_path / "a.sst.gz")
    b = trace(state_home, f"php -n -d realpath_cache_ttl=0 {script}", tmp_path / "b.sst.gz")
    for run in (a, b):
        assert "Warning" not in Path(str(run) + ".out").read_text()
    assert_same(predict(a), measured(a), "replay")
    assert_same(predict(a, "realpath_cache_ttl=0"), measured(b), "ttl 120 → 0 (never)")
    no_wipe = measured(a)["lstat"]
    assert no_wipe >= 3 * 10  # each wipe re-resolves the 10 includes


# -- OPcache ---------------------------------------------------------------------------------
def opcache_script(tree: Path) -> Path:
    files = deep_files(tree, 20)
    for i in range(1, 6):
        write(tree / f"inc/g{i}.php", f"<?php $g{i} = {i};\n")
    return write(tree / "oc.php", "<?php\nfor ($p = 0; $p < 3; $p++) {\n" + "".join(
        f"  include '{f}';\n" for f in files)
        + "  for ($i = 1; $i <= 5; $i++) { require_once \"g$i.php\"; include \"g$i.php\"; }\n}\n")


def test_opcache_revalidation_windows(tree: Path, state_home: Path, tmp_path: Path) -> None:
    """OPcache on: revalidate_freq=0 stats every cached script on every include;
    validate_timestamps=0 and revalidate_freq=2 (the window outlasts the run) never do."""
    script = opcache_script(tree)
    age(tree)
    ip = f"-d include_path=.:{tree}/inc"
    a, b, c = traces(
        state_home,
        (f"php -n {OPCACHE} -d opcache.revalidate_freq=0 {ip} {script}", tmp_path / "a.sst.gz"),
        (f"php -n {OPCACHE} -d opcache.validate_timestamps=0 {ip} {script}",
         tmp_path / "b.sst.gz"),
        (f"php -n {OPCACHE} -d opcache.revalidate_freq=2 {ip} {script}", tmp_path / "c.sst.gz"))
    assert_same(predict(a), measured(a), "replay, revalidate_freq=0")
    assert_same(predict(a, "opcache.validate_timestamps=0"), measured(b),
                "validate_timestamps 1 → 0")
    assert_same(predict(a, "opcache.revalidate_freq=2"), measured(c), "revalidate_freq 0 → 2")
    assert_same(predict(c, "opcache.revalidate_freq=0"), measured(a), "revalidate_freq 2 → 0")
    assert measured(a)["stat"] >= measured(c)["stat"] + 2 * 25


def test_opcache_off_to_on(tree: Path, state_home: Path, tmp_path: Path) -> None:
    """OPcache loaded but off for the CLI, predicted on: exact, the include calls and
    OPcache's own calls in a CLI run (its lock file's open, one more fstat of the primary
    script) alike."""
    script = opcache_script(tree)
    age(tree)
    ip = f"-d include_path=.:{tree}/inc"
    off, on = traces(state_home, (f"php -n -d zend_extension=opcache -d opcache.enable_cli=0 "
                                  f"{ip} {script}", tmp_path / "off.sst.gz"),
                     (f"php -n {OPCACHE} {ip} {script}", tmp_path / "on.sst.gz"))
    assert_same(predict(off), measured(off), "replay, OPcache off")
    assert_same(predict(on), measured(on), "replay, OPcache on")
    assert_same(predict(off, "opcache.enable_cli=1"), measured(on), "off → on")
    # On → off cannot be exact: a require_once that OPcache answers from its key (passes
    # 2 and 3 here, 10 calls) runs no PHP function the tracer sees, so the trace does not
    # know it happened; without OPcache each costs a getcwd and a failed lstat (./gN.php).
    back = predict(on, "opcache.enable_cli=0")
    real = measured(off)
    assert real["lstat"] - back["lstat"] == 10 and real["getcwd"] - back["getcwd"] == 10
    assert_within({**back, "lstat": back["lstat"] + 10, "getcwd": back["getcwd"] + 10,
                   "failed": back["failed"] + 10, "total": back["total"] + 20}, real, 0.02,
                  "on → off, hidden *_once calls added")
    # the include-related calls themselves match exactly
    ops_off = summarize(read_trace(off))["by_operation"]
    ops_on = summarize(read_trace(on))["by_operation"]
    inc = ("include", "include_resolve", "opcache_revalidate")
    real_on = sum(ops_on.get(k, {}).get("total", 0) for k in inc)
    real_off = sum(ops_off.get(k, {}).get("total", 0) for k in inc)
    kept = measured(off)["total"] - real_off
    # + 1: OPcache's own getcwd (for its first relative key) is attributed to no operation
    # ("other") in the real trace; the model makes it as part of the include. + 2: the lock
    # file's open and the primary script's extra fstat, which the model makes at the start
    assert predict(off, "opcache.enable_cli=1")["total"] - kept == real_on + 1 + 2


def test_opcache_relative_primary_script(tree: Path, state_home: Path, tmp_path: Path) -> None:
    """`php oc.php` from its directory: OPcache's key for the relative primary script
    already fetched the cwd, so the first relative include needs no getcwd of its own."""
    opcache_script(tree)
    age(tree)
    ip = f"-d include_path=.:{tree}/inc"
    off, on = traces(state_home, (f"php -n -d zend_extension=opcache -d opcache.enable_cli=0 "
                                  f"{ip} oc.php", tmp_path / "off.sst.gz"),
                     (f"php -n {OPCACHE} -d opcache.revalidate_freq=0 {ip} oc.php",
                      tmp_path / "on.sst.gz"), cwd=tree)
    assert_same(predict(on), measured(on), "replay, relative primary, OPcache on")
    assert_within(predict(off, "opcache.enable_cli=1", "opcache.revalidate_freq=0"),
                  measured(on), 0.02, "relative primary, off → on")


# -- .user.ini (CGI) --------------------------------------------------------------------------
def test_user_ini_lookups_under_cgi(tree: Path, state_home: Path, tmp_path: Path) -> None:
    """php-cgi stats `.user.ini` in every directory from DOCUMENT_ROOT down to the script's;
    predicted with user_ini.filename empty (no lookups) and with another name."""
    if not shutil.which("php-cgi8.2"):
        pytest.skip("php-cgi8.2 is not installed (apt-get install php8.2-cgi)")
    script = write(tree / "www/sub/dir/index.php", "<?php echo 1;\n")
    write(tree / "www/sub/.user.ini", "precision=10\n")
    age(tree)
    env = {"DOCUMENT_ROOT": str(tree / "www"), "REDIRECT_STATUS": "200"}
    a, b = traces(state_home, (f"php-cgi8.2 -n {script}", tmp_path / "a.sst.gz"),
                  (f"php-cgi8.2 -n -d user_ini.filename= {script}", tmp_path / "b.sst.gz"),
                  env=env)
    assert_same(predict(a), measured(a), "replay")
    assert measured(a)["stat"] >= 3
    assert_same(predict(a, "user_ini.filename="), measured(b), ".user.ini → none")


# -- php-fpm: a pool, recycling ---------------------------------------------------------------
def fcgi_get(sock: Path, params: dict[str, str]) -> bytes:
    """One FastCGI request (responder role) over a unix socket; returns its stdout."""
    def record(kind: int, body: bytes) -> bytes:
        return struct.pack("!BBHHBx", 1, kind, 1, len(body), 0) + body

    def pair(k: str, v: str) -> bytes:
        out = b""
        for x in (k.encode(), v.encode()):
            out += bytes([len(x)]) if len(x) < 128 else struct.pack("!I", len(x) | 1 << 31)
        return out + k.encode() + v.encode()
    body = b"".join(pair(k, v) for k, v in params.items())
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(30)
        s.connect(str(sock))
        s.sendall(record(1, struct.pack("!HB5x", 1, 0)) + record(4, body) + record(4, b"")
                  + record(5, b""))
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    out, i = b"", 0
    while i + 8 <= len(data):
        _, kind, _, n, pad = struct.unpack("!BBHHB", data[i:i + 7])
        if kind == 6:
            out += data[i + 8:i + 8 + n]
        i += 8 + n + pad
    return out


class Fpm:
    """A php-fpm master of our own (pool `name`, one static worker), ended by its PID."""

    def __init__(self, root: Path, name: str, max_requests: int) -> None:
        self.root = root
        self.sock = root / f"{name}.sock"
        conf = write(root / f"{name}.conf", f"""[global]
error_log = {root}/{name}.log
pid = {root}/{name}.pid
daemonize = no
[{name}]
user = www-data
group = www-data
listen = {self.sock}
pm = static
pm.max_children = 1
pm.max_requests = {max_requests}
php_admin_value[opcache.enable] = 0
php_admin_value[realpath_cache_size] = 4096K
""")
        self.proc = subprocess.Popen(["php-fpm8.2", "-F", "-y", str(conf)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while not self.sock.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert self.sock.exists(), (root / f"{name}.log").read_text()

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def default_sigint() -> None:
    """The tracer is stopped with SIGINT (Ctrl-C): make sure it is not inherited ignored (as
    in a shell's background job), or Python would not turn it into KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def trace_pool(home: Path, fpm: Fpm, pool: str, script: Path, docroot: Path, n: int,
               out: Path) -> Path:
    """Trace `n` requests of `script` served by the pool (bpftrace attached first)."""
    env = dict(os.environ, STATSTORM_HOME=str(home))
    proc = subprocess.Popen([sys.executable, "-m", "statstorm", "-v", "trace", "--pool", pool,
                             "-d", "120", "-o", str(out), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=default_sigint)
    assert proc.stderr is not None
    attached = False
    for line in proc.stderr:  # -v: "bpftrace attached in … s"
        if "attached" in line:
            attached = True
            break
    assert attached, proc.communicate()
    params = {"SCRIPT_FILENAME": str(script), "SCRIPT_NAME": "/" + script.name,
              "DOCUMENT_ROOT": str(docroot), "REQUEST_METHOD": "GET",
              "REQUEST_URI": "/" + script.name, "QUERY_STRING": "",
              "SERVER_PROTOCOL": "HTTP/1.1", "GATEWAY_INTERFACE": "CGI/1.1"}
    # one more than traced: a request is complete once its worker accepts the next one;
    # then Ctrl-C (the trace is still written)
    for _ in range(n + 1):
        assert b"ok" in fcgi_get(fpm.sock, params)
        time.sleep(0.05)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return out


def test_fpm_pool_recycling(tree: Path, state_home: Path, tmp_path: Path) -> None:
    """php-fpm, one static worker, 6 requests of a script with 15 includes under a docroot
    with a .user.ini: with pm.max_requests=0 only the first request is cold; predicted for
    pm.max_requests=2 (a fresh worker every other request: its realpath cache, .user.ini
    cache and fix_pathinfo resolution start empty), then run for real, and back."""
    files = deep_files(tree / "www", 15)
    script = write(tree / "www/sub/index.php", "<?php\n" + "".join(
        f"include '{f}';\n" for f in files) + "echo 'ok';\n")
    write(tree / "www/.user.ini", "precision=14\n")
    age(tree)
    os.chmod(tree, 0o755)
    runs = {}
    for mr in (0, 2):
        pool = f"wi{os.getpid()}m{mr}"
        fpm = Fpm(tree, pool, mr)
        try:
            runs[mr] = trace_pool(state_home, fpm, pool, script, tree / "www", 6,
                                  tmp_path / f"mr{mr}.sst.gz")
        finally:
            fpm.stop()
    a, b = runs[0], runs[2]
    assert read_trace(a).header["settings"].get("pm.max_requests") == "0"
    assert_same(predict(a), measured(a), "fpm replay, max_requests=0")
    assert_same(predict(b), measured(b), "fpm replay, max_requests=2")
    assert_same(predict(a, "pm.max_requests=2"), measured(b), "fpm max_requests 0 → 2")
    assert_same(predict(b, "pm.max_requests=0"), measured(a), "fpm max_requests 2 → 0")
    assert measured(b)["lstat"] > measured(a)["lstat"]


# -- the lab: real apps behind nginx + php-fpm -------------------------------------------------
def trace_lab(home: Path, name: str, url: str, n: int, out: Path) -> Path:
    """Trace `n` requests to a lab (already warm), one at a time, 0.1 s apart: long enough
    for OPcache's revalidation window (revalidate_freq=2) to expire during the trace. The
    first traced request comes 3 s after the warm-up, so it revalidates, as the replay
    assumes of a script's first traced use (PHP's request time is in whole seconds: a
    window lasts 2 to 3 s)."""
    env = dict(os.environ, STATSTORM_HOME=str(home))
    proc = subprocess.Popen([sys.executable, "-m", "statstorm", "-v", "trace", "--lab", name,
                             "-d", "120", "-o", str(out), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=default_sigint)
    assert proc.stderr is not None
    for line in proc.stderr:
        if "attached" in line:
            break
    time.sleep(3.0)
    for _ in range(n + 1):
        with urllib.request.urlopen(url, timeout=60) as resp:
            resp.read()
        time.sleep(0.1)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return out


def warm(url: str, *trees: object) -> None:
    wait_cacheable(*trees)  # OPcache does not cache files younger than file_update_protection
    for _ in range(6):
        with urllib.request.urlopen(url, timeout=60) as resp:
            resp.read()


def test_lab_pools_replay_and_predict(lab: Any, session_lab: Any, state_home: Path,
                                      tmp_path: Path) -> None:
    """Running pools (2 warm workers, OPcache on with its default 2 s revalidation window):
    the synthetic app and MediaWiki replay to their measured counts; the synthetic app's
    prediction for opcache.validate_timestamps=0 matches a lab run with that setting. The
    MediaWiki lab is the run's (conftest.session_lab, traced by test_trace_lab.py too:
    tracing changes nothing in it); the two synthetic labs are this test's own, both made
    just before their traces: the run's synthetic lab, made a minute or two earlier, can
    reach realpath_cache_ttl (120 s) inside its traced window and re-resolve its paths
    there (0.76 lstat a request, once), which a new lab with the other setting does not."""
    runs = {}
    for key, flags in (("synthetic", ["--app", "synthetic"]), ("mediawiki", ["--app", "mediawiki"]),
                       ("novalidate", ["--app", "synthetic", "--php-ini",
                                       "opcache.validate_timestamps=0"])):
        own = key != "mediawiki"
        st = (lab if own else session_lab)(*flags, "--storage", "local", "--workers", "2")
        url = str(st["url"]) + str(st.get("entry_path") or "/")
        warm(url, st["code_path"], st["docroot"])
        runs[key] = trace_lab(state_home, str(st["name"]), url, 20, tmp_path / f"{key}.sst.gz")
        if own:
            run_cli(["lab", "down", "--name", str(st["name"])], state_home)
    for key in ("synthetic", "mediawiki", "novalidate"):
        t = runs[key]
        assert summarize(read_trace(t))["trace"].get("dropped", 0) == 0
        assert_within(predict(t), measured(t), 0.02, f"lab {key}: replay")
    assert_within(predict(runs["synthetic"], "opcache.validate_timestamps=0"),
                  measured(runs["novalidate"]), 0.02, "lab synthetic: validate_timestamps 1 → 0")
    assert measured(runs["synthetic"])["stat"] > measured(runs["novalidate"])["stat"]
