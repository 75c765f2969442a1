"""The PHP version through a trace and whatif: the header's "php" read tolerantly (an old
trace: unknown), the version's defaults under the recorded settings, the version whatif says
it modelled, and the version of a traced binary."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from statstorm.adapters.tracing import trace_backends, trace_targets
from statstorm.commands.whatif import modelled_php
from statstorm.model import php_versions
from statstorm.model.fs_view import DIR, FILE, FsView
from statstorm.model.php_engine import Engine
from statstorm.model.engine_events import E_INCLUDE, E_OPC_CLI, E_PROBE, E_REQ
from statstorm.model.phpsettings import PhpSettings, defaults, from_recorded
from statstorm.model.replay_limits import limits
from statstorm.results.trace.vocabulary import CALLS
from statstorm.results.trace.header import PhpIdentity, TraceHeader
from statstorm.results.whatif import ModelledPhp


def test_header_php_read_back_and_old_traces_unknown() -> None:
    head = TraceHeader.from_json({"php": {"version": "8.4", "full": "8.4.11", "from": "lab"}})
    assert head.php == PhpIdentity("8.4", "8.4.11", "lab")
    assert TraceHeader.from_json({}).php == PhpIdentity()  # written before traces said
    assert not TraceHeader.from_json({}).php.known
    for bad in ({"php": "8.4"}, {"php": {"version": 84}}, {"php": {"version": "x"}},
                {"php": None}):
        assert TraceHeader.from_json(bad).php == PhpIdentity()  # type: ignore[arg-type]
    # the full version alone gives major.minor
    assert TraceHeader.from_json({"php": {"full": "7.4.33"}}).php.version == "7.4"
    assert PhpIdentity.from_json(PhpIdentity("7.4", "7.4.33", "binary").to_json()) == \
        PhpIdentity("7.4", "7.4.33", "binary")


def test_whatif_says_traced_or_assumed() -> None:
    traced = modelled_php(TraceHeader.from_json({"php": {"version": "8.4", "full": "8.4.11"}}))
    assert traced == ModelledPhp("8.4", "traced", "8.4.11")
    assert traced.line() == "modelled PHP 8.4 (traced: 8.4.11)"
    assumed = modelled_php(TraceHeader.from_json({}))
    assert assumed.line() == "modelled PHP 8.2 (assumed: the trace does not say)"
    other = modelled_php(TraceHeader.from_json({"php": {"version": "8.3"}}))
    assert other.as_version == "8.2" and "PHP 8.2's mechanisms" in other.line()
    assert ModelledPhp.from_json(traced.to_json()) == traced


def test_nearest_version() -> None:
    assert [php_versions.nearest(v) for v in ("7.3", "7.4", "8.0", "8.3", "8.4", "8.5")] == \
        ["7.4", "7.4", "7.4", "8.2", "8.4", "8.4"]


def test_version_defaults_under_recorded_settings() -> None:
    for v in ("7.4", "8.2", "8.4", ""):
        d = defaults(v)
        assert d.realpath_cache_size == 4096 << 10 and d.realpath_cache_ttl == 120
        assert d.php_version == v
        s = from_recorded({"sapi": "cli", "realpath_cache_size": "16K"}, v)
        assert s.realpath_cache_size == 16 << 10 and s.php_version == v
    assert "php_version" not in defaults("8.4").describe()


def test_version_of_a_traced_binary(tmp_path: Path) -> None:
    """The version a traced binary's Debian name carries (a lab's state first); unknown for
    binaries of several versions or none that is PHP."""
    a, b = tmp_path / "php-fpm8.4", tmp_path / "php7.4"
    a.write_text("")
    b.write_text("")
    ident = trace_backends.php_identity
    t = trace_targets.Target(mode="pool", description="", binaries=[str(a)])
    assert ident(None, t) == PhpIdentity("8.4", "", "binary")
    t.php_version = "8.4"
    assert ident(None, t).source == "lab"
    both = trace_targets.Target(mode="pids", description="", binaries=[str(a), str(b)])
    assert ident(None, both) == PhpIdentity()
    none = trace_targets.Target(mode="cmd", description="", binaries=[str(tmp_path / "sh")])
    assert ident(None, none) == PhpIdentity()


def _calls(version: str, events: list[tuple[object, ...]], fs: FsView,
           opcache: bool = False) -> dict[str, int]:
    eng = Engine(PhpSettings(php_version=version, opcache=opcache), fs)
    eng.run(1, list(events), [1] * len(events))
    counts = eng.tally.per_req[0]
    return {c: counts[2 * i] + counts[2 * i + 1] for i, c in enumerate(CALLS)}


def test_lstat_fills_the_stat_cache_from_8_1_only() -> None:
    """filemtime(f), is_link(dir), filemtime(f): on 7.4 the lstat leaves the stat cache
    holding f (one stat); from 8.1 it takes the directory's place (two)."""
    fs = FsView()
    fs.observe("/d/f.php", FILE)
    fs.observe("/d", DIR)
    fs.finish()
    evs = [(E_REQ, 0, ""), (E_PROBE, 0, "/d/f.php", "filemtime", "/d/f.php", "/"),
           (E_PROBE, 0, "/d", "is_link", "/d", "/"),
           (E_PROBE, 0, "/d/f.php", "filemtime", "/d/f.php", "/")]
    assert _calls("7.4", evs, fs)["stat"] == 1
    assert _calls("8.2", evs, fs)["stat"] == 2
    assert _calls("8.4", evs, fs)["stat"] == 2


def test_opcache_lock_file_and_compile_clears_per_version() -> None:
    """A CLI run with OPcache opens its lock file on 7.4 and 8.2, not on 8.4 (a memfd); 8.4
    clears the stat cache while it compiles an included file."""
    fs = FsView()
    fs.observe("/s.php", FILE)
    fs.observe("/i.php", FILE)
    fs.finish()
    start = [(E_REQ, 0, ""), (E_OPC_CLI, 0, "/tmp/.ZendSem.x", "/s.php")]
    assert _calls("7.4", start, fs, opcache=True)["open"] == 1
    assert _calls("8.2", start, fs, opcache=True)["open"] == 1
    assert _calls("8.4", start, fs, opcache=True)["open"] == 0
    probe = (E_PROBE, 0, "/s.php", "is_file", "/s.php", "/")
    evs = [(E_REQ, 0, ""), probe, (E_INCLUDE, 0, "/i.php", False, "/", "", ""), probe]
    assert _calls("8.2", evs, fs)["stat"] == 1
    assert _calls("8.4", evs, fs)["stat"] == 2


def test_stat_probes_check_open_basedir_twice_on_7_4() -> None:
    """With open_basedir, 7.4's is_file() checks the path before its stat cache and again
    before its stat (35 calls for an allowed file, 17 when repeated, on 7.4.33); 8.x
    checks once, after the cache (18, then 0). file_exists() (access) checks once on all."""
    fs = FsView()
    fs.observe("/srv/app/f.php", FILE)
    for d in ("/srv/app", "/srv", "/"):
        fs.observe(d, DIR)
    fs.finish()

    def lstats(version: str, func: str) -> list[int]:
        eng = Engine(PhpSettings(php_version=version, open_basedir="/srv"), fs)
        probe = (E_PROBE, 0, "/srv/app/f.php", func, "/srv/app/f.php", "/")
        eng.run(1, [(E_REQ, 0, ""), probe], [1, 1])
        one = eng.tally.per_req[0][2 * CALLS.index("lstat")]
        eng.run(1, [probe], [1])
        return [one, eng.tally.per_req[0][2 * CALLS.index("lstat")] - one]

    once = lstats("8.2", "is_file")
    assert once[0] > 0 and once[1] == 0
    assert lstats("8.4", "is_file") == once
    assert lstats("7.4", "is_file") == [2 * once[0], once[0]]
    assert lstats("7.4", "is_link") == [2 * once[0] + 1, once[0]]  # its own call: lstat
    assert lstats("7.4", "file_exists") == lstats("8.2", "file_exists")
    prep: Any = SimpleNamespace(wipes=0)  # what limits() reads of a prepared trace here
    on = PhpSettings(php_version="7.4", open_basedir="/srv")
    assert not limits(prep, on, on)

