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


def test_architecture_names_only_modules_that_exist() -> None:
    """docs/architecture.md is the map: every module or package it names is there."""
    import re
    src = DOCS.parent / "src" / "statstorm"
    text = (DOCS / "architecture.md").read_text()
    named = set(re.findall(r"`((?:cli|commands|model|adapters|results|apps)/[\w/]*?(?:\.py|/))`", text))
    named |= set(re.findall(r"`((?:errors|env)\.py)`", text))
    assert len(named) > 20
    missing = sorted(n for n in named if not (src / n).exists())
    assert not missing, f"docs/architecture.md names modules that do not exist: {missing}"


def test_on_your_server_starts_with_doctor() -> None:
    """README's "On your server": the first verb named is `statstorm doctor`, which says what
    the host allows before any other verb fails on it."""
    import re
    text = (DOCS.parent / "README.md").read_text()
    section = text.split("## On your server", 1)[1].split("\n## ", 1)[0]
    verbs = re.findall(r"`statstorm (\w+)", section)
    assert verbs and verbs[0] == "doctor", verbs
