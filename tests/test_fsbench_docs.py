"""docs/fsbench.md documents every operation, every CLI flag and every JSON field."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from click.testing import CliRunner

from statstorm.cli import cli
from statstorm.model.fsworkload import OPS
from statstorm.model.latency import LatencyStats
from statstorm.results.fsbench import Cell, ColdCheck

DOC = (Path(__file__).parent.parent / "docs" / "fsbench.md").read_text()


def test_ops_documented() -> None:
    for op in OPS:
        assert f"`{op}`" in DOC, op


def test_json_fields_documented() -> None:
    for cls in (Cell, LatencyStats, ColdCheck):
        for f in dataclasses.fields(cls):
            if cls is ColdCheck:
                continue  # summarised as "dentries, Cached kB, resident pages…"
            assert f"`{f.name}`" in DOC, f"{cls.__name__}.{f.name}"


def test_flags_documented() -> None:
    from statstorm.cli import fsbench  # noqa: F401

    out = CliRunner().invoke(cli, ["fsbench", "--help"]).output
    for flag in ("--ops", "--state", "--clients", "--duration", "--iterations", "--max-files",
                 "--json", "--output", "--profile-out"):
        assert flag in out
        assert flag in DOC or flag.lstrip("-") in DOC, flag
