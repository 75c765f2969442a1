"""The rules of `statstorm check`: Facts in, graded findings out. Pure code.

Each rule is a function `Facts -> list[Finding]` listed under its stable id in its module's
RULES (model.rules_php, model.rules_stack, model.rules_gluster, model.rules_ceph, model.rules_apache,
model.rules_app, model.rules_mirror, then model.rules_evidence); RULES here is all of them, in the order they
are evaluated. The id is the anchor of its section in docs/check.md (a test fails if a rule
has none). A finding (model.finding) carries the evidence (settings and measured figures),
the exact lines to change, the trade-off, and a predicted gain where statstorm can estimate
one from the trace (syscalls per request it removes, and with an fsbench result their time);
otherwise `predicted_gain` is None and `gain_note` says why.
"""

from __future__ import annotations

from dataclasses import replace

from statstorm.model import (rules_afs, rules_apache, rules_app, rules_ceph,
                             rules_evidence, rules_gluster, rules_mirror, rules_php,
                             rules_stack)
from statstorm.model.checkfacts import Facts
from statstorm.model.finding import Finding, Rule
from statstorm.model.php_versions import proposable, version_of
from statstorm.results.check import SEVERITIES, Severity, by_severity
from statstorm.results.php_root import HOST_VERSION

DOCS = "docs/check.md#"

RULES: dict[str, Rule] = dict(rules_php.RULES + rules_stack.RULES + rules_gluster.RULES
                              + rules_ceph.RULES + rules_afs.RULES + rules_apache.RULES
                              + rules_app.RULES + rules_mirror.RULES + rules_evidence.RULES)


def rank(severity: Severity | str) -> int:
    return Severity(severity).rank


def evaluate(facts: Facts) -> list[Finding]:
    """All findings for one pool, most severe first (stable order within a severity);
    never a setting the pool's PHP version does not have (model/php_versions.py)."""
    out = [replace(f, id=rule_id, pool=facts.pool, docs=DOCS + rule_id)
           for rule_id, fn in RULES.items() for f in fn(facts)]
    version = version_of(facts.php_binary) or HOST_VERSION
    return list(by_severity(proposable(out, version)))


__all__ = ["RULES", "SEVERITIES", "Severity", "evaluate", "rank"]
