"""`statstorm trace --cmd` on real PHP scripts with known syscall counts, checked against
strace recording the same script (imported with statstorm's own strace importer)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from conftest import run_cli
from statstorm.adapters.tracing import libbpf_trace
from statstorm.results.trace import read_trace

pytestmark = pytest.mark.root

KEYS = ("lstat", "stat", "fstat", "access", "open", "readlink", "getcwd", "total", "failed")
STRACE_SET = ("newfstatat,statx,stat,lstat,fstat,access,faccessat,faccessat2,open,openat,"
              "readlink,readlinkat,getcwd,chdir,fchdir")


@pytest.fixture
def scen(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A scenario tree: include_path entries a, b, c (empty) and lib (40 files)."""
    root = Path("/var/tmp") / tmp_path_factory.mktemp("sst").name
    root.mkdir(parents=True, exist_ok=True)
    for d in ("a", "b", "c", "lib", "deep/x/y/z"):
        (root / d).mkdir(parents=True, exist_ok=True)
    for i in range(1, 41):
        (root / f"lib/f{i}.php").write_text(f"<?php $v{i} = {i};\n")
        (root / f"deep/x/y/z/g{i}.php").write_text(f"<?php $w{i} = {i};\n")
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(params=["ebpf", "bpftrace"])
def backend(request: pytest.FixtureRequest) -> str:
    """Every eBPF backend: the compiled tracer and bpftrace (its fallback)."""
    return str(request.param)


def trace_cmd(home: Path, cmd: str, out: Path, backend: str) -> dict[str, Any]:
    proc = run_cli(["trace", "--cmd", cmd, "-o", str(out), "--json", "--backend", backend],
                   home, timeout=300)
    assert proc.returncode == 0, proc.stderr
    summary = dict(json.loads(proc.stdout))
    assert summary["source"] == backend
    return summary


def strace_counts(home: Path, argv: list[str], cwd: Path, tmp: Path) -> dict[str, float]:
    log = tmp / "strace.log"
    subprocess.run(["strace", "-f", "-qq", "-e", f"trace={STRACE_SET}", "-o", str(log), *argv],
                   cwd=cwd, check=True, capture_output=True)
    proc = run_cli(["trace", "import", str(log), "-o", str(tmp / "strace.sst.gz"), "--json"],
                   home, check=True)
    return dict(json.loads(proc.stdout)["per_request"])


def test_include_path_misses_attributed_to_entries(scen: Path, state_home: Path,
                                                   tmp_path: Path, backend: str) -> None:
    script = scen / "s1.php"
    script.write_text(
        "<?php\n"
        f"set_include_path('{scen}/a:{scen}/b:{scen}/c:{scen}/lib');\n"
        "for ($i = 1; $i <= 40; $i++) { require_once \"f$i.php\"; }\n")
    s = trace_cmd(state_home, f"php -n {script}", tmp_path / "t.sst.gz", backend)
    assert s["requests"] == 1
    # Each of the 40 relative require_once tries a, b and c first: one failed lstat each.
    entries = {e["entry"]: e["failed"] for e in s["failed_by_include_path_entry"]}
    assert entries == {f"{scen}/a": 40, f"{scen}/b": 40, f"{scen}/c": 40}
    resolve = s["by_operation"]["include_resolve"]
    assert resolve["failed"] == 120 and resolve["lstat"] >= 120 + 40
    # The same script under strace, imported: identical counts for every call type.
    ref = strace_counts(state_home, ["php", "-n", str(script)], scen, tmp_path)
    assert {k: s["per_request"][k] for k in KEYS} == {k: ref[k] for k in KEYS}
    # The trace file re-renders to the same summary.
    again = run_cli(["trace", "show", str(tmp_path / "t.sst.gz"), "--json"], state_home,
                    check=True)
    assert json.loads(again.stdout)["per_request"] == s["per_request"]


def test_counts_mode_matches_strace(scen: Path, state_home: Path, backend: str,
                                    tmp_path: Path) -> None:
    """`--counts` (counted in the kernel) gives strace's counts, call type by call type, with
    the compiled tracer and with bpftrace."""
    script = scen / "s4.php"
    script.write_text(
        "<?php\n"
        f"set_include_path('{scen}/a:{scen}/lib');\n"
        "for ($i = 1; $i <= 20; $i++) { require_once \"f$i.php\"; }\n"
        "for ($i = 0; $i < 30; $i++) { file_exists(\"/nonexistent/$i\"); clearstatcache(); }\n")
    proc = run_cli(["trace", "--counts", "--backend", backend, "--cmd", f"php -n {script}",
                    "-o", str(tmp_path / "k.sst.gz"), "--json"], state_home, timeout=300)
    assert proc.returncode == 0, proc.stderr
    s = json.loads(proc.stdout)
    assert s["detail"] == "counts" and s["requests"] == 1
    assert s["source"] == backend
    ref = strace_counts(state_home, ["php", "-n", str(script)], scen, tmp_path)
    assert {k: s["per_request"][k] for k in KEYS} == {k: ref[k] for k in KEYS}
    assert s["per_request"]["failed"] >= 20 + 30  # the include_path misses, the probes
    assert s["syscall_time_us"]["per_request"] > 0
    assert not s["by_operation"] and not s["top_paths"]  # counts only
    # The saved trace re-renders to the same summary.
    again = run_cli(["trace", "show", str(tmp_path / "k.sst.gz"), "--json"], state_home,
                    check=True)
    assert json.loads(again.stdout)["per_request"] == s["per_request"]


def test_strace_backend_counts_what_ebpf_counts(scen: Path, state_home: Path,
                                                tmp_path: Path) -> None:
    """The last fallback, `--backend strace`, run for real: the same calls as the compiled
    tracer, call type by call type, and its loud warning."""
    script = scen / "s5.php"
    script.write_text("<?php\nfor ($i = 0; $i < 5; $i++) { file_exists(\"/nonexistent/$i\");"
                      " clearstatcache(); }\n")
    got = {}
    for backend in ("strace", "ebpf"):
        proc = run_cli(["trace", "--backend", backend, "--cmd", f"php -n {script}", "-o",
                        str(tmp_path / f"{backend}.sst.gz"), "--json"], state_home, timeout=300)
        assert proc.returncode == 0, proc.stderr
        s = json.loads(proc.stdout)
        assert s["source"] == backend and s["requests"] == 1
        got[backend] = {k: s["per_request"][k] for k in KEYS}
        if backend == "strace":
            assert "tracing with strace" in proc.stderr
    assert got["strace"] == got["ebpf"]
    assert got["strace"]["failed"] >= 5


def test_realpath_cache_off_costs_component_lstats(scen: Path, state_home: Path, backend: str,
                                                   tmp_path: Path) -> None:
    script = scen / "s2.php"
    script.write_text(
        "<?php\n"
        "for ($r = 0; $r < 2; $r++) {\n"
        f"  for ($i = 1; $i <= 40; $i++) {{ include '{scen}/deep/x/y/z/g' . $i . '.php'; }}\n"
        "}\n")
    on = trace_cmd(state_home, f"php -n -d realpath_cache_size=4096K {script}",
                   tmp_path / "on.sst.gz", backend)
    off = trace_cmd(state_home, f"php -n -d realpath_cache_size=0 {script}",
                    tmp_path / "off.sst.gz", backend)
    depth = len(Path(scen, "deep/x/y/z/g1.php").parts) - 1  # components below "/"
    inc_on = on["by_operation"]["include_resolve"]["lstat"]
    inc_off = off["by_operation"]["include_resolve"]["lstat"]
    # Cache on: the directories not already cached by the script's own path once, then one
    # lstat per new file; the second pass costs nothing.
    assert inc_on == (depth - (len(scen.parts) - 1)) + 39
    # Cache off: every include walks every component again.
    assert inc_off == 80 * depth, (inc_on, inc_off, off["per_request"])
    for name, s, size in (("on", on, "4096K"), ("off", off, "0")):
        ref = strace_counts(state_home, ["php", "-n", "-d", f"realpath_cache_size={size}",
                                         str(script)], scen, tmp_path)
        assert {k: s["per_request"][k] for k in KEYS} == {k: ref[k] for k in KEYS}, name
    # diff shows the difference per request.
    d = run_cli(["trace", "diff", str(tmp_path / "on.sst.gz"), str(tmp_path / "off.sst.gz"),
                 "--json"], state_home, check=True)
    change = json.loads(d.stdout)["per_request"]["lstat"]
    assert change["delta"] == off["per_request"]["lstat"] - on["per_request"]["lstat"] > 0


def test_file_probes_and_relative_paths(scen: Path, state_home: Path, tmp_path: Path,
                                        backend: str) -> None:
    (scen / "link").symlink_to(scen / "lib")
    script = scen / "s3.php"
    script.write_text(
        "<?php\n"
        "chdir(__DIR__);\n"
        "for ($i = 0; $i < 25; $i++) { file_exists(\"missing/x$i.php\"); }\n"
        "for ($i = 1; $i <= 10; $i++) { is_file(\"lib/f$i.php\"); }\n"
        "echo realpath('link/f1.php'), \"\\n\";\n")
    s = trace_cmd(state_home, f"php -n {script}", tmp_path / "t.sst.gz", backend)
    probe = s["by_operation"]["file_probe"]
    assert probe["access"] == 25 and probe["failed"] == 25 and probe["stat"] == 10
    assert s["per_request"]["readlink"] >= 1
    failed = {p["path"] for p in s["top_failed_paths"]}
    # Relative paths are made absolute with the process's working directory.
    assert f"{scen}/missing/x0.php" in failed
    ref = strace_counts(state_home, ["php", "-n", str(script)], scen, tmp_path)
    assert {k: s["per_request"][k] for k in KEYS} == {k: ref[k] for k in KEYS}


def op_shape(path: Path) -> tuple[list[Any], list[Any]]:
    """A trace's operations (kind, parent, arguments) and its syscalls after PHP's start-up
    (call, path, result, operation kind, operation), operations by their rank: no times, no
    ids."""
    tr = read_trace(path)
    ops = sorted(tr.operations.values(), key=lambda o: o.id)
    rank = {o.id: i for i, o in enumerate(ops)}
    shape = [(o.kind, rank.get(o.parent, -1), sorted((k, str(v)) for k, v in o.args.items()))
             for o in ops]
    calls = [(s.syscall, s.path, s.ret, s.kind, rank.get(s.op, -1)) for s in tr.syscalls
             if s.kind != "startup"]
    return shape, calls


@pytest.fixture(scope="module")
def probes_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The compiled tracer built without PHP's headers: it does not know the layout of the
    included-files table, so it probes every include's zend_stream_open instead."""
    dest = tmp_path_factory.mktemp("bpf-probes")
    subprocess.run(["bash", str(libbpf_trace.SOURCE_DIR / "build.sh"), str(dest),
                    str(dest / "no-php-headers")], check=True, capture_output=True)
    return dest


@pytest.mark.parametrize("build", ["table", "probes"])
@pytest.mark.parametrize("opcache", [False, True], ids=["plain", "opcache"])
def test_compiled_tracer_sees_each_operation_as_bpftrace_does(scen: Path, state_home: Path,
                                                              tmp_path: Path, opcache: bool,
                                                              build: str,
                                                              request: pytest.FixtureRequest,
                                                              monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    """The compiled tracer has no return probe on zend_stream_open (about 1,000 traps a
    MediaWiki request): it sees the return at the next event outside the call; where it knows
    the layout of PHP's included-files table (`table`, the build setup makes) it probes only
    the opens that open a file and reads the other includes from the table. Operation by
    operation and syscall by syscall, its trace equals bpftrace's, which probes every open and
    its return: require_once along include_path with open_basedir (realpaths inside the open),
    absolute and failing *_once includes, a `require` (its open nested in compile_filename),
    file probes and their syscalls right after an include."""
    loader = libbpf_trace.find()
    if build == "probes":
        loader = request.getfixturevalue("probes_build") / "statstorm-trace"
        monkeypatch.setenv(libbpf_trace.OTHER_BUILD_ENV, str(loader.parent))
    # The table's layout is compiled in with the PHP build id it belongs to.
    assert (b"API20" in loader.read_bytes()) == (build == "table")
    script = scen / "s6.php"
    script.write_text(
        "<?php\n"
        f"set_include_path('{scen}/a:{scen}/b:{scen}/lib');\n"
        "for ($i = 1; $i <= 12; $i++) { require_once \"f$i.php\";"
        f" if ($i % 3 == 0) {{ clearstatcache(); is_file(\"{scen}/lib/f$i.php\"); }} }}\n"
        f"for ($i = 1; $i <= 6; $i++) {{ require_once '{scen}/deep/x/y/z/g' . $i . '.php';"
        " file_exists(\"missing$i\"); }\n"
        "@include_once 'nowhere.php';\n"
        f"require '{scen}/deep/x/y/z/g7.php';\n"
        "require_once 'f1.php';\n"
        "echo realpath('f2.php') === false ? 'no' : 'yes', \"\\n\";\n")
    ini = f"-n -d open_basedir={scen}:/tmp"
    if opcache:
        ini += " -d zend_extension=opcache.so -d opcache.enable_cli=1"
    got = {}
    for backend in ("ebpf", "bpftrace"):
        out = tmp_path / f"{backend}.sst.gz"
        s = trace_cmd(state_home, f"php {ini} {script}", out, backend)
        assert s["requests"] == 1 and s["trace"]["dropped"] == 0
        got[backend] = op_shape(out)
    ops, calls = got["ebpf"]
    assert sum(1 for o in ops if o[0] == "include") >= 19
    assert any(c[3] == "include" for c in calls)  # syscalls inside an include's open
    assert got["ebpf"] == got["bpftrace"]
