"""Docs that cannot drift: the CLI reference matches `--help`, and every command has docs."""

from __future__ import annotations

from pathlib import Path

from statstorm.cli.docs import render

DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_cli_reference_is_current() -> None:
    assert (DOCS / "cli.md").read_text() == render(), (
        "docs/cli.md is stale: run `.venv/bin/python -m statstorm.cli.docs > docs/cli.md`")


def test_every_command_has_examples() -> None:
    text = render()
    for section in text.split("\n## ")[1:]:
        name = section.splitlines()[0]
        if name.count(" ") >= 1 or name == "statstorm":
            assert "Example" in section, f"`{name} --help` has no examples"
