"""`statstorm matrix import`: ab outputs measured elsewhere, into the matrix's result form.

Each FILE holds one ab report or several (a blog post quoting labelled runs). A report's
label is `--label` (files with one report, in order), else the nearest bulleted line above it
(`* apache mpm_prefork + mod_php:`), else `FILE#N`. The label names the cell's architecture
when it mentions them: nginx/apache, prefork/worker/event, mod_php/fpm/fcgid. An imported
cell has one round: its median has no interval (ci = the value, coverage 0) and comparisons
say "no significant difference" — one run is not a measurement to conclude from. ab's own
"Requests per second" counts failed answers too; `rps` here counts good ones only, like a
measured cell, and ab's figure is kept under `imported`.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

from statstorm.adapters.load import ab
from statstorm.model.matrix_summary import refresh
from statstorm.errors import ComponentError, UsageError
from statstorm.results.matrix import Cell, MatrixResult, Round


def arch_of(label: str) -> tuple[str, str, str]:
    """(server, mpm, handler) named by a label; '' for what it does not say."""
    t = label.lower()
    server = "nginx" if "nginx" in t else "apache" if ("apache" in t or "mpm" in t) else ""
    mpm = next((m for m in ("prefork", "worker", "event") if m in t), "")
    handler = ("mod_php" if re.search(r"mod_?php", t) else "fcgid" if "fcgid" in t
               else "fpm" if "fpm" in t else "")
    if server == "nginx":
        mpm = ""
    return server, mpm, handler


def _cell_id(server: str, mpm: str, handler: str, label: str, taken: set[str]) -> str:
    base = "-".join(p for p in (server, mpm, handler) if p)
    slug = re.sub(r"[^a-z0-9_]+", "-", label.lower()).strip("-") or "run"
    cid = f"{base}/ab" if base else f"{slug}/ab"
    n = 2
    while cid in taken:
        cid, n = f"{base or slug}/ab-{n}", n + 1
    return cid


def import_ab(paths: Sequence[Path], labels: Sequence[str] = (), app: str = "",
              alpha: float = 0.05) -> MatrixResult:
    """Read every report of every file into one matrix result."""
    reports: list[tuple[str, str]] = []
    for path in paths:
        try:
            text = path.read_text(errors="replace")
        except OSError as exc:
            raise UsageError(f"{path}: cannot read it ({exc.strerror})") from None
        found = ab.split_reports(text)
        if not found:
            raise UsageError(f"{path}: no ab report in it (no 'Complete requests' line)")
        reports += [(label or f"{path.name}#{n}", body) for n, (label, body) in enumerate(found, 1)]
    if labels and len(labels) != len(reports):
        raise UsageError(f"{len(labels)} --label for {len(reports)} ab report(s): give one per "
                         "report, in order, or none to use the labels in the files")
    started = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    cells: list[Cell] = []
    taken: set[str] = set()
    for n, (label, body) in enumerate(reports):
        if labels:
            label = labels[n]
        try:
            r = ab.parse_report(body)
        except ComponentError as exc:
            raise UsageError(f"report {label!r}: {exc}") from None
        server, mpm, handler = arch_of(label)
        cid = _cell_id(server, mpm, handler, label, taken)
        taken.add(cid)
        complete, taken_s = r.complete, r.time_taken_s
        socket = r.failed_connect + r.failed_receive + r.failed_exceptions
        failed = r.failed + r.non_2xx
        good = max(0, complete - failed)
        pct = r.percentiles
        rnd = Round(round=0, requests=complete, duration_s=taken_s,
                    rps=round(good / taken_s, 3) if taken_s > 0 else 0.0, failed=failed,
                    bad_status=r.non_2xx, bad_length=r.failed_length,
                    bad_marker=0, socket_errors=socket,
                    max_ms=float(pct[-1][1]) if pct else 0.0, percentiles=pct)
        cell = Cell(id=cid, server=server, mpm=mpm, handler=handler, opcache=None,
                    huge_code_pages=None, storage="", rounds=(rnd,),
                    primer={"label": label, "imported": {
                        "tool": "ab", "concurrency": r.concurrency,
                        "requests_per_second": r.requests_per_second,
                        "failed": r.failed, "total_transferred": r.total_transferred,
                        "html_transferred": r.html_transferred}})
        cells.append(cell)
    return refresh(MatrixResult(
        app=app, source="ab import", options={"files": [str(p) for p in paths], "alpha": alpha},
        started=started, cells=tuple(cells), finished=started,
        warnings=("imported ab runs: one run per cell, no warm-up, no interval; "
                  "comparisons cannot be significant",)), alpha)
