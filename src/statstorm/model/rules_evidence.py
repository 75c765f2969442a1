"""Rules on the evidence check has, not on the pool: a trace taken before the last change apply
made (its figures describe a pool that is no more), and code on network storage with no trace
to say how much of the request time goes there. Without them check could call a pool healthy
that runs at half of local speed. Pure code: the times are given as data (model.checkfacts
`TraceOrigin`, `AppliedChange`)."""

from __future__ import annotations

from statstorm.model.checkfacts import Facts
from statstorm.model.finding import Finding, Rule, code_on_network, finding
from statstorm.results.check import Severity

TRACE_FILE = "after.sst.gz"  # the file the commands below name
TRACE_SECONDS = 20


def target_args(facts: Facts) -> str:
    """How `trace` and `check` name the pool (`--pool NAME` unless the command said)."""
    return facts.target_args or f"--pool {facts.pool}"


def retrace(facts: Facts) -> list[str]:
    """The commands that measure the pool as it runs now and judge it by that trace."""
    args = target_args(facts)
    return [f"statstorm trace {args} -d {TRACE_SECONDS} -o {TRACE_FILE}",
            f"statstorm check {args} --trace {TRACE_FILE}"]


def trace_predates_change(facts: Facts) -> list[Finding]:
    origin, change = facts.trace_origin, facts.last_change
    if origin is None or change is None or origin.taken_at is None or change.at is None:
        return []
    if change.at <= origin.taken_at:
        return []
    which = "the last trace of this pool" if origin.remembered else "the trace given"
    ev = [f"{which}, {origin.path}, was taken at {origin.taken}",
          f"apply changed the pool after it, at {change.when} (backup set {change.backup}): "
          "the trace shows the pool as it was before that change",
          "its figures (calls per request, time on network storage) are not the pool's now: "
          "a pool can look healthy, or not, on a trace of another configuration"]
    return [finding(Severity.WARNING, "the last trace predates the last change: trace again",
                    ev, retrace(facts),
                    f"the trace runs for {TRACE_SECONDS} s with the tracer's overhead on "
                    "every traced call (docs/trace-overhead.md)", None,
                    "a measurement, not a change: it tells whether the change worked")]


def no_trace(facts: Facts) -> list[Finding]:
    net = code_on_network(facts)
    t = facts.trace
    if not net or (t is not None and t.network_time_share is not None):
        return []
    where = f"{net[0].mount_point} ({net[0].kind})"
    if t is None:
        why = "no trace of this pool was given, and statstorm trace has none on record"
    elif t.detail == "counts":
        why = "the trace counted calls only (--counts): it timed no call on a mount"
    else:
        why = "the trace timed no finished request"
    ev = [f"the pool's code is on network storage, {where}", why,
          "check cannot tell how much of the request time goes to the network without a "
          "trace: the settings alone cannot show a pool that runs at half of local speed"]
    return [finding(Severity.INFO, "time spent on network storage not measured: trace the pool",
                    ev, retrace(facts),
                    f"the trace runs for {TRACE_SECONDS} s with the tracer's overhead on every "
                    "traced call (docs/trace-overhead.md)", None,
                    "a measurement, not a change")]


RULES: tuple[tuple[str, Rule], ...] = (
    ("trace-predates-change", trace_predates_change),
    ("no-trace", no_trace),
)
