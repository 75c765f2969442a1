"""The PHP version through a trace and whatif: the header's "php" read tolerantly (an old
trace: unknown), the version's defaults under the recorded settings, the version whatif says
it modelled, and the version of a traced binary."""

from __future__ import annotations

from pathlib import Path

from statstorm.adapters.tracing import trace_backends, trace_targets
from statstorm.commands.whatif import modelled_php
from statstorm.model import php_versions
from statstorm.model.phpsettings import defaults, from_recorded
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
