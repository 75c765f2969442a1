"""`statstorm report`: one self-contained HTML page from result files only.

Reads every file (recognised by its content: results.result_files), builds the page's data
(report.page) and renders it (report.html); the page is written atomically, so a failed
report leaves no file and an old report stays as it was.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from statstorm.env import Env
from statstorm.errors import UsageError
from statstorm.report import html
from statstorm.report.page import build
from statstorm.results.common import write_atomic
from statstorm.results.result_files import load_all


@dataclass(frozen=True)
class ReportOptions:
    inputs: tuple[Path, ...]
    output: Path = Path("report.html")
    title: str = ""
    follow_demo: bool = True  # a demo.json brings the traces and results it names


@dataclass(frozen=True)
class ReportResult:
    output: Path
    kinds: tuple[str, ...]  # of every file read, in order
    charts: int
    headline: str
    warnings: tuple[str, ...] = ()  # a file a demo.json names, missing or of another run


def validate(opts: ReportOptions) -> None:
    if not opts.inputs:
        raise UsageError("give at least one result file: statstorm report RESULT… -o report.html")
    out = opts.output
    if out.is_dir():
        raise UsageError(f"-o {out}: is a directory; give the HTML file to write")
    if not out.parent.is_dir():
        raise UsageError(f"-o {out}: directory {out.parent} does not exist; create it first")
    if out.suffix.lower() not in (".html", ".htm"):
        raise UsageError(f"-o {out}: give a name ending in .html")
    for p in opts.inputs:
        if p.resolve() == out.resolve():
            raise UsageError(f"{p}: is the output too; give another -o")


def run(env: Env, opts: ReportOptions) -> ReportResult:
    validate(opts)
    files = load_all(list(opts.inputs), follow_demo=opts.follow_demo)
    page = build(files, title=opts.title,
                 generated=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    text = html.render(page)
    write_atomic(opts.output, text, new_mode=0o644)
    return ReportResult(opts.output, tuple(f.kind for f in files), page.charts,
                        page.headline.verdict, tuple(n for f in files for n in f.notes))
