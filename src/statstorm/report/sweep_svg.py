"""SVG plot of a sweep, rendered from its JSON file only: throughput (median ± spread of the
repeats) and p99 latency against concurrency or rate, with the knee and collapse marked.
Hand-written SVG: no plotting dependency, deterministic output."""

from __future__ import annotations

from html import escape
from pathlib import Path

from statstorm.results.common import read_json, write_atomic
from statstorm.results.sweep import SweepResult

W, PANEL_H, LEFT, RIGHT, TOP, GAP = 720, 220, 70, 20, 40, 60


def _nice_max(v: float) -> float:
    if v <= 0:
        return 1.0
    mag = 10 ** len(str(int(v))) / 10
    for step in (1, 2, 2.5, 5, 10):
        if v <= step * mag:
            return float(step * mag)
    return v


def render(data: SweepResult) -> str:
    levels = data.levels
    key = "concurrency" if data.model == "closed" else "rate"
    xs = [float((lv.concurrency if key == "concurrency" else lv.rate) or 0) for lv in levels]
    n = max(len(xs), 1)
    plot_w = W - LEFT - RIGHT

    def x_at(i: int) -> float:
        return LEFT + (plot_w * (i + 0.5) / n)

    out: list[str] = []
    height = TOP + 2 * PANEL_H + GAP + 50
    out.append(f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height}" '
               f'viewBox="0 0 {W} {height}" font-family="sans-serif" font-size="12">')
    out.append(f'<rect width="{W}" height="{height}" fill="white"/>')
    title = f"statstorm sweep — {data.target} ({data.tool}, {data.model} model)"
    out.append(f'<text x="{LEFT}" y="20" font-size="14">{escape(title)}</text>')
    knee = data.knee
    marks = [(knee.knee if knee else None, "#2ca02c"), (knee.collapse_at if knee else None, "#ff7f0e")]
    panels = [("requests/s", [lv.rps for lv in levels], [lv.rps_spread for lv in levels], "#1f77b4"),
              ("p99 latency (ms)", [lv.p99 for lv in levels], [0.0] * len(levels), "#d62728")]
    for pi, (label, ys, errs, colour) in enumerate(panels):
        top = TOP + pi * (PANEL_H + GAP)
        bottom = top + PANEL_H
        ymax = _nice_max(max([y + e for y, e in zip(ys, errs)] or [1.0]))

        def y_at(v: float) -> float:
            return bottom - PANEL_H * v / ymax

        out.append(f'<rect x="{LEFT}" y="{top}" width="{plot_w}" height="{PANEL_H}" fill="none" stroke="#999"/>')
        for t in range(5):
            v = ymax * t / 4
            yy = y_at(v)
            out.append(f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{yy:.1f}" y2="{yy:.1f}" stroke="#eee"/>')
            out.append(f'<text x="{LEFT - 6}" y="{yy + 4:.1f}" text-anchor="end">{v:g}</text>')
        out.append(f'<text x="{LEFT}" y="{top - 6}" fill="{colour}">{escape(label)}</text>')
        for i, x in enumerate(xs):
            for mark, colour_m in marks:
                if mark is not None and float(mark) == x:
                    out.append(f'<line x1="{x_at(i):.1f}" x2="{x_at(i):.1f}" y1="{top}" y2="{bottom}" '
                               f'stroke="{colour_m}" stroke-dasharray="4 3"/>')
        pts = " ".join(f"{x_at(i):.1f},{y_at(y):.1f}" for i, y in enumerate(ys))
        if pts:
            out.append(f'<polyline points="{pts}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for i, (y, e) in enumerate(zip(ys, errs)):
            if e > 0:
                out.append(f'<line x1="{x_at(i):.1f}" x2="{x_at(i):.1f}" y1="{y_at(y - e):.1f}" '
                           f'y2="{y_at(y + e):.1f}" stroke="{colour}"/>')
            out.append(f'<circle cx="{x_at(i):.1f}" cy="{y_at(y):.1f}" r="3.5" fill="{colour}">'
                       f'<title>{xs[i]:g}: {y:g}</title></circle>')
        for i, x in enumerate(xs):
            out.append(f'<text x="{x_at(i):.1f}" y="{bottom + 16}" text-anchor="middle">{x:g}</text>')
    xlabel = "concurrent connections" if key == "concurrency" else "offered rate (requests/s)"
    out.append(f'<text x="{LEFT + plot_w / 2}" y="{height - 22}" text-anchor="middle">{xlabel}</text>')
    if knee is not None and knee.sentence:
        out.append(f'<text x="{LEFT}" y="{height - 6}" font-size="11">{escape(knee.sentence[:120])}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def write(json_path: Path, svg_path: Path) -> None:
    """Render the sweep JSON at `json_path` to `svg_path` (all or nothing: write_atomic)."""
    data = SweepResult.from_json(read_json(json_path, "sweep result"))
    write_atomic(svg_path, render(data), new_mode=0o644)
