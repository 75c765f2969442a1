"""In-process CLI tests of `statstorm sweep`: validation happens before any load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from xml.etree import ElementTree

from statstorm.cli import main
from statstorm.adapters.load.http import check_loopback
from statstorm.errors import UsageError
from statstorm.report import sweep_svg


def run_main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err


def test_non_loopback_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_main(["sweep", "http://192.0.2.10/index.php", "-c", "1", "-d", "1"], capsys)
    assert code == 2
    assert "not on loopback" in err and "--allow-remote" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("url", ["http://127.0.0.1:9/", "http://localhost:9/x", "http://[::1]:9/"])
def test_loopback_accepted(url: str) -> None:
    check_loopback(url, allow_remote=False)


def test_remote_allowed_with_flag() -> None:
    check_loopback("http://192.0.2.10/", allow_remote=True)
    with pytest.raises(UsageError):
        check_loopback("http://192.0.2.10/", allow_remote=False)


@pytest.mark.parametrize("args, needle", [
    (["http://127.0.0.1:9/", "--rate", "5", "--tool", "wrk"], "open-model tool"),
    (["http://127.0.0.1:9/", "-c", "1,x"], "numbers separated by commas"),
    (["http://127.0.0.1:9/", "-c", "1,1"], "must not repeat"),
    (["http://127.0.0.1:9/", "-d", "0"], "--duration"),
    (["http://127.0.0.1:9/", "-c", "1", "--rate", "5"], "not both"),
    (["ftp://127.0.0.1/"], "not an http"),
    (["http://127.0.0.1:9/", "-c", "1", "--trace"], "--trace needs the pool to trace"),
    ([], "no target"),
])
def test_bad_options(args: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_main(["sweep", *args], capsys)
    assert code == 2 and needle in err and "Traceback" not in err


def test_dry_run_shows_commands(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, err = run_main(["sweep", "http://127.0.0.1:9/", "-c", "1,4", "-d", "2",
                               "-o", str(tmp_path / "s.json"), "--dry-run"], capsys)
    assert code == 0
    lines = out.strip().splitlines()
    assert len(lines) == 2 and "-c 4" in lines[1] and "--latency" in lines[1]
    assert not (tmp_path / "s.json").exists()


def test_svg_renders_from_json(tmp_path: Path) -> None:
    data = {"schema": "statstorm.sweep/1", "target": "http://127.0.0.1/", "tool": "wrk", "model": "closed",
            "levels": [{"concurrency": c, "rps": r, "rps_spread": 1.0, "p99": p}
                       for c, r, p in ((1, 16, 70), (2, 27, 80), (5, 32, 160), (10, 10, 900))],
            "knee": {"knee": 5, "collapse_at": 10, "sentence": "throughput collapses after 5 users"}}
    (tmp_path / "s.json").write_text(json.dumps(data))
    sweep_svg.write(tmp_path / "s.json", tmp_path / "s.svg")
    svg = (tmp_path / "s.svg").read_text()
    assert svg.startswith("<svg") and svg.count("<circle") == 8 and "collapses" in svg
    ElementTree.fromstring(svg)  # well-formed XML
