"""vegeta (open model: requests leave at a constant rate whether or not earlier ones answered).

`vegeta attack` writes every result (send time, latency, status, error, body) to a file;
`vegeta encode --to json` turns it into JSON lines which we analyse ourselves, so that
 - latency is counted from the *intended* send time (start + seq / rate): if the client ever
   sent late, the lag is added back (no coordinated omission even then),
 - errors are split into connect / timeout / other socket errors / non-2xx,
 - the expected text is checked in every body.
Installed by scripts/setup.sh --lab into /opt/statstorm/bin (Go module github.com/tsenart/vegeta/v12).
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from statstorm.adapters.load.loadgen import RunSpec, find_binary, is_number, json_object, run_bounded
from statstorm.env import Env
from statstorm.errors import ComponentError, DependencyError
from statstorm.model import stats
from statstorm.results.sweep import ErrorCounts, LoadRun

INSTALL_DIRS = ("/opt/statstorm/bin",)
PERCENTILES = (1, 5, 10, 20, 25, 30, 40, 50, 60, 70, 75, 80, 90, 95, 99, 99.9, 99.99, 100)


def percentile(sorted_values: list[float], p: float) -> float:
    """Percentile `p` (0-100): statstorm.model.stats's one definition (0 for an empty list)."""
    return stats.percentile(sorted_values, p)


_RFC3339 = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?"
                      r"(Z|[+-]\d\d:\d\d)")


def _ts(text: str) -> float:
    # Go's RFC 3339 with nanoseconds; Python's fromisoformat takes at most microseconds.
    m = _RFC3339.fullmatch(text)
    if m is None:
        raise ValueError(text)
    zone = "+00:00" if m.group(3) == "Z" else m.group(3)
    base = datetime.fromisoformat(m.group(1) + zone).timestamp()
    return base + (float("0." + m.group(2)) if m.group(2) else 0.0)


@dataclass(frozen=True)
class Hit:
    """One `vegeta encode --to json` line: its sequence number, when it was sent (seconds),
    its latency (ns), status (0: none), error text and body (base64)."""

    seq: int
    sent: float
    latency: float
    code: int
    error: str
    body: str


FIELDS = ("seq", "timestamp", "latency", "code", "error", "body")


def _row(n: int, line: str) -> Hit:
    """One `vegeta encode --to json` line, checked field by field."""
    r = json_object(line, f"vegeta result line {n}")
    f = {k: r.get(k) for k in FIELDS} if isinstance(r, dict) else {}
    bad = "not an object" if not isinstance(r, dict) else next((
        f"no {k!r}" for k, ok in (
            ("seq", lambda v: isinstance(v, int) and is_number(v)),
            ("timestamp", lambda v: isinstance(v, str)), ("latency", is_number),
            ("code", lambda v: v is None or isinstance(v, int) and not isinstance(v, bool)),
            ("error", lambda v: v is None or isinstance(v, str)),
            ("body", lambda v: v is None or isinstance(v, str)))
        if not ok(f[k])), "")
    sent = 0.0
    if not bad:
        try:
            sent = _ts(str(f["timestamp"]))
        except (ValueError, OverflowError):
            bad = f"timestamp {str(f['timestamp'])[:40]!r} is not RFC 3339"
    if bad:
        raise ComponentError(f"vegeta result line {n} is damaged ({bad}): rerun the attack")
    return Hit(int(r["seq"]), sent, float(r["latency"]), int(f["code"] or 0),
               str(f["error"] or ""), str(f["body"] or ""))


def _body(r: Hit) -> bytes:
    try:
        return base64.b64decode(r.body, validate=True)
    except (binascii.Error, ValueError):
        raise ComponentError(f"vegeta result {r.seq}: the body is not base64: rerun the "
                             "attack") from None


def classify(code: int, error: str) -> str:
    """'ok', 'connect', 'timeout', 'read_write' or 'non_2xx'."""
    e = error.lower()
    if e:
        if "timeout" in e or "deadline exceeded" in e:
            return "timeout"
        if "refused" in e or "dial" in e or "no route" in e or "connect:" in e:
            return "connect"
        return "read_write" if not code else ("non_2xx" if not 200 <= code < 300 else "read_write")
    if not 200 <= code < 300:
        return "non_2xx"
    return "ok"


def parse(jsonl: str, rate: float, expect_text: str = "") -> LoadRun:
    """Analyse `vegeta encode --to json` lines of one attack at `rate` requests/s."""
    rows = [_row(n, line) for n, line in enumerate(jsonl.splitlines(), 1) if line.strip()]
    if not rows:
        raise ComponentError("vegeta sent no request: check --duration and --rate")
    rows.sort(key=lambda r: r.seq)
    t0 = rows[0].sent
    counts = {"connect": 0, "timeout": 0, "read_write": 0, "non_2xx": 0, "wrong_content": 0}
    latencies: list[float] = []
    last_end = t0
    needle = expect_text.encode()
    for r in rows:
        sent = r.sent
        lat_s = r.latency / 1e9
        intended = t0 + r.seq / rate if rate > 0 else sent
        lag = max(0.0, sent - intended)
        latencies.append((lat_s + lag) * 1000.0)
        last_end = max(last_end, sent + lat_s)
        kind = classify(r.code, r.error)
        if kind != "ok":
            counts[kind] += 1
        elif needle and needle not in _body(r):
            counts["wrong_content"] += 1
    latencies.sort()
    sends = [r.sent for r in rows]
    send_span = max(sends) - t0
    sent_rate = (len(rows) - 1) / send_span if send_span > 0 else float(len(rows))
    duration = max(last_end - t0, 1e-9)
    ok = len(rows) - sum(counts.values())
    spectrum = stats.percentiles(latencies, PERCENTILES)
    pct = tuple((float(p), round(v, 3)) for p, v in zip(PERCENTILES, spectrum))
    by_p = dict(zip(PERCENTILES, spectrum))
    return LoadRun(
        tool="vegeta", requests=len(rows), duration_s=round(duration, 3),
        rps=round(ok / duration, 3),
        p50=round(by_p[50], 3), p90=round(by_p[90], 3),
        p99=round(by_p[99], 3), max=round(latencies[-1], 3),
        errors=ErrorCounts(**counts), percentiles=pct, target_rate=rate,
        sent_rate=round(sent_rate, 3),
    )


class Vegeta:
    name = "vegeta"
    model = "open"

    def available(self) -> str | None:
        return find_binary("vegeta", "STATSTORM_VEGETA", INSTALL_DIRS)

    def command(self, spec: RunSpec, workdir: Path) -> list[str]:
        binary = self.available() or "vegeta"
        # Enough workers that a slow server never holds back the send schedule, but bounded.
        workers = max(8, min(10000, math.ceil(spec.rate * spec.timeout_s)))
        return [binary, "attack", "-rate", f"{spec.rate:g}/s", "-duration", f"{spec.duration_s:g}s",
                "-timeout", f"{spec.timeout_s:g}s", "-max-workers", str(workers),
                "-max-body", "1048576", "-output", str(workdir / "vegeta.bin")]

    def run(self, env: Env, spec: RunSpec, workdir: Path) -> LoadRun:
        binary = self.available()
        if not binary:
            raise DependencyError("vegeta is not installed: run scripts/setup.sh --lab as root "
                                  "(it installs it into /opt/statstorm/bin)")
        out_file = workdir / "vegeta.bin"
        out_file.unlink(missing_ok=True)
        rc, out, err = run_bounded(env, self.command(spec, workdir), what="vegeta attack",
                                   stdin_text=f"GET {spec.url}\n",
                                   timeout=spec.duration_s + spec.timeout_s + 15)
        if rc != 0:
            raise ComponentError(f"vegeta attack failed: {(err.strip().splitlines() or [str(rc)])[0]}")
        rc, out, err = run_bounded(env, [binary, "encode", "--to", "json", str(out_file)],
                                   what="vegeta encode", timeout=120)
        if rc != 0:
            raise ComponentError(f"vegeta encode failed: {(err.strip().splitlines() or [str(rc)])[-1]}")
        return parse(out, spec.rate, spec.expect_text)
