"""docs/check.md documents every rule id (the `docs` link of each finding), every flag and the
exit codes of `statstorm check`."""

from __future__ import annotations

import re
from pathlib import Path

from statstorm.cli.docs import render
from statstorm.model.rules import RULES

DOC = (Path(__file__).parent.parent / "docs" / "check.md").read_text()


def test_every_rule_has_a_section() -> None:
    headings = set(re.findall(r"^### (\S+)$", DOC, re.M))
    missing = [r for r in RULES if r not in headings]
    assert not missing, f"rules without a section in docs/check.md: {missing}"
    stale = headings - set(RULES)
    assert not stale, f"sections for rules that do not exist: {stale}"


def test_flags_documented() -> None:
    # The help as docs/cli.md renders it (invoking the CLI here would change how later tests
    # render the top-level --help).
    out = render().split("## statstorm check\n", 1)[1].split("\n## ", 1)[0]
    for flag in ("--pool", "--lab", "--trace", "--fsbench", "--docroot", "--no-query", "--json",
                 "--fail-on"):
        assert flag in out, flag
        assert flag in DOC, flag


def test_exit_codes_documented() -> None:
    for code in ("| 0 |", "| 1 |", "| 2 |"):
        assert code in DOC
