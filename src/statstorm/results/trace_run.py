"""What `statstorm trace` returns: the trace file written, its summary, the backend that
recorded it and the warnings to show (commands/trace.py; sweep's --trace and apply's --verify
read it through model/sweep_levels.py `Traced`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from statstorm.results.trace.summary import TraceSummary
from statstorm.results.trace.vocabulary import TracerBackend


@dataclass
class TraceRun:
    output: Path
    summary: TraceSummary
    backend: TracerBackend
    warnings: list[str] = field(default_factory=list)
