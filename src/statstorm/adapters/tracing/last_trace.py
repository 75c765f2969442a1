"""The last trace of each pool, kept in the state root (`<state root>/traces/`): `statstorm
trace` remembers every trace of a pool, a lab or the system Apache's PHP it finishes, and
`check` without `--trace` judges the pool by it. Also the one loader of a trace as check's
evidence (its `TraceFacts`, pool and sampling note), for both.

A record is a `LastTrace` (results/last_trace.py) written all at once; one that cannot be read
is no record (check says nothing was remembered rather than fail).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import dataclass
from pathlib import Path

from statstorm.env import Env
from statstorm.errors import UsageError
from statstorm.model import sampling
from statstorm.model.checkfacts import TraceFacts, network_time, sample_note, trace_facts
from statstorm.model.tracestats import summarize_trace
from statstorm.results.common import MAX_JSON_BYTES, read_bounded, write_atomic
from statstorm.results.last_trace import LastTrace
from statstorm.results.trace import raw, read_trace

MODES = ("pool", "lab", "apache")  # the trace targets that are a pool check can judge


@dataclass(frozen=True)
class LoadedTrace:
    """A trace file as check's evidence."""

    facts: TraceFacts
    pool: str  # the pool the trace's header names ('' when none)
    sampled: str | None  # what to say of its sampling (None: every request recorded)
    created: str  # when it began (the header's ISO time; '' when it does not say)
    thin: str | None = None  # what to say of too few finished requests (None: enough)


def load(path: Path) -> LoadedTrace:
    """A trace's facts for check (UsageError when it cannot be read as a trace)."""
    tr = read_trace(path)
    return LoadedTrace(trace_facts(tr, summarize_trace(tr)), tr.head.target_pool,
                       sampling.check_note(tr.head, tr.tail), tr.head.created,
                       sample_note(tr))


def root(env: Env) -> Path:
    return env.state_root / "traces"


def _file(env: Env, pool: str, lab: str) -> Path:
    name = f"lab-{lab}" if lab else f"pool-{pool}"
    return root(env) / (re.sub(r"[^A-Za-z0-9_.-]", "_", name) + ".json")


def now() -> str:
    """This moment as a record's time (ISO 8601 UTC, to the second)."""
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def epoch(iso: str) -> float | None:
    """An ISO 8601 time as seconds since the epoch (None: empty or not a time; a time
    without a zone is taken as UTC)."""
    try:
        t = dt.datetime.fromisoformat(iso)
    except ValueError:
        return None
    return (t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)).timestamp()


def record(path: Path, pool: str, lab: str, ended: str) -> LastTrace:
    """The record of a trace just written, its records read back once (from the sidecar,
    without an object per record) for its network share."""
    records = raw.read_records(path)
    net = network_time(records)
    return LastTrace(pool=pool, path=str(path.resolve()), ended=ended,
                     network_time_share=net.share, network_ms_per_request=net.ms_per_request,
                     requests=net.requests, detail=records.head.detail, lab=lab)


def remember(env: Env, rec: LastTrace) -> Path:
    """Keep `rec` as its pool's last trace (OSError when the state root is not writable)."""
    out = _file(env, rec.pool, rec.lab)
    write_atomic(out, json.dumps(rec.to_json(), indent=2) + "\n", new_mode=0o644)
    return out


def _read(path: Path) -> LastTrace | None:
    try:
        return LastTrace.from_json(json.loads(read_bounded(path, MAX_JSON_BYTES, "")))
    except (UsageError, ValueError, KeyError, TypeError, RecursionError):
        return None


def covers(traced: str, pool: str) -> bool:
    """Whether a trace of `traced` (its header's pool) is a trace of `pool`: the same name, or
    the system Apache's whole PHP ("apache") for one of its sites ("apache:NAME:PORT"), whose
    requests run in the same processes."""
    return traced == pool or (bool(traced) and pool.split(":", 1)[0] == traced != pool
                              and ":" in pool)


def recall(env: Env, pool: str, lab: str = "") -> LastTrace | None:
    """The last trace of the pool (a lab's, when `lab`) whose file still exists; a site of
    the system Apache ("apache:NAME:PORT") falls back to the trace of its whole PHP."""
    names = [pool] if lab else list(dict.fromkeys((pool, pool.split(":", 1)[0])))
    for name in names:
        rec = _read(_file(env, name, lab))
        if rec is not None and Path(rec.path).is_file():
            return rec
    return None


__all__ = ["MODES", "LoadedTrace", "covers", "epoch", "load", "now", "recall", "record", "remember",
           "root"]
