"""ab, ApacheBench (closed model: `-c` requests in flight, one connection each).

ab cannot look into bodies; its "Failed requests" breakdown counts an answer whose length
differs from the first one's as "Length", which we report as wrong content. `-e` writes the
percentile spectrum (0..100 %) as CSV; `-r` keeps ab going after socket errors.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from statstorm.adapters.load.loadgen import RunSpec, find_binary, run_bounded
from statstorm.env import Env
from statstorm.errors import ComponentError, DependencyError
from statstorm.results.sweep import ErrorCounts, LoadRun

# Without a cap from the caller, ab stops at this many requests (or at -t, whichever first).
DEFAULT_CAP = 1_000_000
_REAL = r"\d{1,15}(?:\.\d{1,9})?"  # a number ab prints (thousands of digits are no number)
_FAILED = re.compile(r"\(Connect: (\d{1,15}), Receive: (\d{1,15}), Length: (\d{1,15}), "
                     r"Exceptions: (\d{1,15})\)")
_PERCENT = re.compile(r"^\s+(\d{1,3})%\s+(\d{1,15})\b", re.M)


def parse(text: str, csv_text: str = "") -> LoadRun:
    """Parse ab's report (and the -e CSV when given) into a LoadRun."""
    def num(pattern: str, default: float | None = None) -> float:
        m = re.search(pattern, text, re.M)
        if not m:
            if default is not None:
                return default
            raise ComponentError("ab output not understood (missing "
                                 f"{pattern.split(':')[0].strip('^')!r}): "
                                 + " ".join(text.split())[-160:])
        return float(m.group(1))

    complete = int(num(r"^Complete requests:\s+(\d{1,15})\s*$"))
    taken = num(rf"^Time taken for tests:\s+({_REAL}) seconds")
    rps = num(rf"^Requests per second:\s+({_REAL})\s")
    fb = _FAILED.search(text)
    errors = ErrorCounts(
        connect=int(fb.group(1)) if fb else 0,
        read_write=(int(fb.group(2)) + int(fb.group(4))) if fb else 0,
        wrong_content=int(fb.group(3)) if fb else 0,
        non_2xx=int(num(r"^Non-2xx responses:\s+(\d{1,15})\s*$", 0)),
    )
    pct: dict[float, float] = {}
    for line in csv_text.splitlines()[1:]:
        p, _, ms = line.partition(",")
        if re.fullmatch(_REAL, p.strip()) and re.fullmatch(_REAL, ms.strip()):
            pct[float(p)] = float(ms)
    if not pct:
        for m in _PERCENT.finditer(text):
            pct[float(m.group(1))] = float(m.group(2))
    if not pct:
        raise ComponentError("ab output has no percentile table (no request completed?)")
    return LoadRun(
        tool="ab", requests=complete, duration_s=taken, rps=rps,
        p50=pct.get(50.0, 0.0), p90=pct.get(90.0, 0.0), p99=pct.get(99.0, 0.0),
        max=pct.get(100.0, max(pct.values())), errors=errors,
        percentiles=tuple(sorted(pct.items())),
    )


class Ab:
    name = "ab"
    model = "closed"

    def available(self) -> str | None:
        return find_binary("ab", "STATSTORM_AB")

    def command(self, spec: RunSpec, workdir: Path) -> list[str]:
        binary = self.available() or "ab"
        cap = spec.max_requests or DEFAULT_CAP
        # -t before -n: -t implies -n 50000, the later -n sets our own cap.
        return [binary, "-r", "-q", "-c", str(max(1, spec.concurrency)),
                "-t", str(max(1, round(spec.duration_s))), "-n", str(cap),
                "-s", str(max(1, round(spec.timeout_s))), "-e", str(workdir / "ab-percentiles.csv"),
                spec.url]

    def run(self, env: Env, spec: RunSpec, workdir: Path) -> LoadRun:
        if not self.available():
            raise DependencyError("ab is not installed: run scripts/setup.sh --lab as root (or apt-get install apache2-utils)")
        csv = workdir / "ab-percentiles.csv"
        csv.unlink(missing_ok=True)
        rc, out, err = run_bounded(env, self.command(spec, workdir), what="ab",
                                   timeout=spec.duration_s + spec.timeout_s + 15)
        if rc != 0 or "Complete requests" not in out:
            last = (err.strip().splitlines() or out.strip().splitlines() or [f"exit status {rc}"])[-1]
            raise ComponentError(f"ab failed: {last}")
        return parse(out, csv.read_text() if csv.exists() else "")


# -- importing ab outputs written elsewhere (statstorm matrix import) ------------------------
_REPORT_START = re.compile(r"^(?:This is ApacheBench|Server Software:|Concurrency Level:)", re.M)
_BULLET = re.compile(r"^\s*[*•-]\s+(.+?):?\s*$")


def split_reports(text: str) -> list[tuple[str, str]]:
    """The ab reports in a text holding one or several (a blog post quoting runs), each with
    its label: the nearest bulleted line (`* apache mpm_prefork + mod_php:`) above it, else ''.
    A report starts at ab's banner, `Server Software:` or `Concurrency Level:` (whichever
    comes first) and ends where the next one starts."""
    starts: list[int] = []
    for m in _REPORT_START.finditer(text):
        # A banner or Server Software line belongs to the report whose Concurrency follows.
        if starts and "Concurrency Level:" not in text[starts[-1]:m.start()]:
            continue
        starts.append(m.start())
    out = []
    for n, start in enumerate(starts):
        end = starts[n + 1] if n + 1 < len(starts) else len(text)
        body = _trim(text[start:end])
        if "Complete requests:" not in body:
            continue
        label = ""
        for line in reversed(text[:start].splitlines()):
            bm = _BULLET.match(line)
            if bm:
                label = bm.group(1).strip()
                break
            if "Complete requests:" in line:
                break  # the previous report: no label between the two
        out.append((label, body))
    return out


def _trim(body: str) -> str:
    """Cut a report after ab's last line (the percentile table's longest request, else the
    connection times' Total, else the transfer rate), dropping prose that follows it."""
    for pattern in (r"^\s*100%.*$", r"^Total:.*$", r"^Transfer rate:.*$"):
        found = list(re.finditer(pattern, body, re.M))
        if found:
            return body[:found[-1].end()] + "\n"
    return body


@dataclass(frozen=True)
class AbReport:
    """What one ab report says (`matrix import`); `percentiles`: (percent, ms), possibly
    empty."""

    concurrency: int
    complete: int
    failed: int
    failed_connect: int
    failed_receive: int
    failed_length: int
    failed_exceptions: int
    non_2xx: int
    time_taken_s: float
    requests_per_second: float
    total_transferred: int
    html_transferred: int
    percentiles: tuple[tuple[float, float], ...]


def parse_report(text: str) -> AbReport:
    """One ab report, leniently: what it says, even without a percentile table."""
    def grab(pattern: str) -> str | None:
        m = re.search(pattern.replace("NUM", r"(\d{1,15})").replace("REAL", f"({_REAL})"),
                      text, re.M)
        return m.group(1) if m else None

    def count(pattern: str) -> int:
        return int(grab(pattern) or 0)

    complete = grab(r"^Complete requests:\s+NUM\s*$")
    taken = grab(r"^Time taken for tests:\s+REAL seconds")
    if complete is None or taken is None:
        raise ComponentError("not an ab report (no 'Complete requests' or 'Time taken for "
                             "tests' line): " + " ".join(text.split())[:120])
    fb = _FAILED.search(text)
    pct = tuple((float(m.group(1)), float(m.group(2))) for m in _PERCENT.finditer(text))
    return AbReport(
        concurrency=count(r"^Concurrency Level:\s+NUM"), complete=int(complete),
        failed=count(r"^Failed requests:\s+NUM"),
        failed_connect=int(fb.group(1)) if fb else 0,
        failed_receive=int(fb.group(2)) if fb else 0,
        failed_length=int(fb.group(3)) if fb else 0,
        failed_exceptions=int(fb.group(4)) if fb else 0,
        non_2xx=count(r"^Non-2xx responses:\s+NUM"), time_taken_s=float(taken),
        requests_per_second=float(grab(r"^Requests per second:\s+REAL") or 0.0),
        total_transferred=count(r"^Total transferred:\s+NUM"),
        html_transferred=count(r"^HTML transferred:\s+NUM"), percentiles=pct)
