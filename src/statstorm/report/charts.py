"""The report's charts: matplotlib figures saved as SVG, ready to inline in the HTML.

Every chart is readable without colour (hatches, markers and line styles tell the series
apart, values are labelled), carries a text alternative (`alt`, an SVG <title>/<desc>) and
the numbers it draws as a table (`table`), and is deterministic: no dates, fixed ids.
Pure functions of result data; no files.
"""

from __future__ import annotations

import io
import logging
import re
from dataclasses import dataclass, field
from html import escape
from typing import Any, Sequence

import matplotlib

matplotlib.use("Agg")
# its font cache, made on first use, says on stderr for each mathtext family it lacks that
# DejaVu Sans stands in: harmless for these charts, noise in a verb's progress
logging.getLogger("matplotlib.font_manager").setLevel(logging.ERROR)
from matplotlib import rc_context  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

# Okabe-Ito: told apart by colour-blind readers; hatches and markers tell them apart in grey
COLOURS = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442",
           "#000000", "#999999", "#882255")
HATCHES = ("", "//", "..", "xx", "\\\\", "++", "oo", "--", "**", "||")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")
LINES = ("-", "--", ":", "-.")
RC: Any = {"svg.fonttype": "none", "font.size": 9, "axes.spines.top": False,
      "axes.spines.right": False, "axes.grid": True, "grid.alpha": 0.3, "hatch.linewidth": 0.6}


@dataclass
class Chart:
    """One chart: its id in the page, title, text alternative, SVG markup and data table."""

    id: str
    title: str
    alt: str
    svg: str = ""
    headers: tuple[str, ...] = ()
    rows: list[tuple[Any, ...]] = field(default_factory=list)


def _svg(fig: Figure, chart: Chart) -> Chart:
    buf = io.StringIO()
    with rc_context({**RC, "svg.hashsalt": chart.id}):
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None,
                                                                     "Creator": None})
    text = buf.getvalue()
    text = text[text.index("<svg"):]
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", text, count=1, flags=re.S)
    # ids unique in the page: every id, and every reference to one, prefixed by the chart's
    text = re.sub(r'(\bid="|url\(#|href="#)([^")]+)', lambda m: f"{m.group(1)}{chart.id}-{m.group(2)}",
                  text)
    # the page sizes the chart (CSS); the viewBox keeps its proportions
    text = re.sub(r'<svg([^>]*?) width="[^"]*" height="[^"]*"',
                  lambda m: f'<svg{m.group(1)}', text, count=1)
    head = (f'<svg id="{chart.id}" class="chart" role="img" '
            f'aria-labelledby="{chart.id}-t {chart.id}-d"')
    text = text.replace("<svg", head, 1)
    first = text.index(">") + 1
    chart.svg = (text[:first] + f'<title id="{chart.id}-t">{escape(chart.title)}</title>'
                 f'<desc id="{chart.id}-d">{escape(chart.alt)}</desc>' + text[first:])
    return chart


def _fig(w: float = 7.2, h: float = 3.2) -> Figure:
    with rc_context(RC):
        return Figure(figsize=(w, h))


def fmt(v: float | None) -> str:
    if v is None:
        return "–"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    return f"{v:,.1f}" if abs(v) >= 10 else f"{v:,.2f}"


def stacked(cid: str, title: str, bars: Sequence[tuple[str, dict[str, float]]],
            unit: str) -> Chart:
    """Horizontal stacked bars: one bar per label, one segment per category (hatched)."""
    cats: list[str] = []
    for _, parts in bars:
        cats += [c for c in parts if c not in cats and parts[c] > 0]
    totals = [sum(parts.values()) for _, parts in bars]
    alt = f"{title}: " + "; ".join(
        f"{label} {fmt(t)} {unit} (" + ", ".join(f"{c} {fmt(p[c])}" for c in cats if p.get(c))
        + ")" for (label, p), t in zip(bars, totals))
    ch = Chart(cid, title, alt, headers=("", *cats, "total"),
               rows=[(label, *(fmt(p.get(c, 0.0)) for c in cats), fmt(t))
                     for (label, p), t in zip(bars, totals)])
    with rc_context(RC):
        fig = _fig(7.2, 0.9 + 0.55 * len(bars))
        ax = fig.add_subplot()
        labels = [b[0] for b in bars]
        left = [0.0] * len(bars)
        for i, c in enumerate(cats):
            vals = [p.get(c, 0.0) for _, p in bars]
            ax.barh(labels, vals, left=left, label=c, color=COLOURS[i % len(COLOURS)],
                    hatch=HATCHES[i % len(HATCHES)], edgecolor="black", linewidth=0.4)
            left = [a + b for a, b in zip(left, vals)]
        for y, t in enumerate(totals):
            ax.text(t, y, f" {fmt(t)}", va="center")
        ax.invert_yaxis()
        ax.set_xlabel(unit)
        ax.set_xlim(0, max(totals or [1]) * 1.15 or 1)
        if cats:
            ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.35 - 0.1 / max(len(bars), 1)),
                      ncol=min(len(cats), 5), frameon=False, fontsize=8)
        return _svg(fig, ch)


def grouped(cid: str, title: str, groups: Sequence[str], series: Sequence[tuple[str, list[float | None]]],
            unit: str, log: bool = False, errors: Sequence[list[tuple[float, float] | None]] = (),
            ref: float | None = None) -> Chart:
    """Vertical grouped bars: one group per category, one hatched bar per series, values on
    top; `errors` per series and group as (low, high); `ref` draws a reference line."""
    alt = f"{title}: " + "; ".join(
        f"{g}: " + ", ".join(f"{name} {fmt(vals[i])}" for name, vals in series)
        for i, g in enumerate(groups)) + f" ({unit})"
    ch = Chart(cid, title, alt, headers=("", *(s[0] for s in series)),
               rows=[(g, *(fmt(vals[i]) for _, vals in series)) for i, g in enumerate(groups)])
    with rc_context(RC):
        fig = _fig(7.2, 3.2)
        ax = fig.add_subplot()
        n = max(len(series), 1)
        width = 0.8 / n
        for j, (name, vals) in enumerate(series):
            xs = [i + (j - (n - 1) / 2) * width for i in range(len(groups))]
            ys = [v if v is not None else 0.0 for v in vals]
            err = errors[j] if j < len(errors) else None
            yerr = None
            if err:
                yerr = [[max(0.0, y - (e[0] if e else y)) for y, e in zip(ys, err)],
                        [max(0.0, (e[1] if e else y) - y) for y, e in zip(ys, err)]]
            ax.bar(xs, ys, width=width * 0.95, label=name, color=COLOURS[j % len(COLOURS)],
                   hatch=HATCHES[j % len(HATCHES)], edgecolor="black", linewidth=0.4,
                   yerr=yerr, capsize=3 if yerr else 0)
            for x, v in zip(xs, vals):
                if v is not None:
                    ax.text(x, v, fmt(v) + ("x" if unit.startswith("x") else ""),
                            ha="center", va="bottom", fontsize=7)
        if ref is not None:
            ax.axhline(ref, color="black", linewidth=0.8, linestyle="--")
        ax.set_xticks(range(len(groups)), list(groups), rotation=20 if len(groups) > 4 else 0,
                      ha="right" if len(groups) > 4 else "center")
        if log:
            ax.set_yscale("log")
        ax.set_ylabel(unit)
        if len(series) > 1:
            ax.legend(frameon=False, fontsize=8)
        return _svg(fig, ch)


def histograms(cid: str, title: str, mounts: Sequence[tuple[str, dict[str, int]]]) -> Chart:
    """Latency histograms (log2 µs buckets, `{"<8": n}` as a trace summary holds them), one
    line per mount, both axes logarithmic."""
    def edges(h: dict[str, int]) -> list[tuple[int, int]]:
        return sorted((int(k.lstrip("<")), v) for k, v in h.items())

    alt = f"{title}: " + "; ".join(
        f"{name}: " + ", ".join(f"{n} under {e} µs" for e, n in edges(h)) for name, h in mounts)
    all_edges = sorted({e for _, h in mounts for e, _ in edges(h)})
    ch = Chart(cid, title, alt, headers=("below µs", *(m[0] for m in mounts)),
               rows=[(e, *(dict(edges(h)).get(e, 0) for _, h in mounts)) for e in all_edges])
    with rc_context(RC):
        fig = _fig(7.2, 3.0)
        ax = fig.add_subplot()
        for j, (name, h) in enumerate(mounts):
            pts = edges(h)
            if not pts:
                continue
            ax.step([e for e, _ in pts], [n for _, n in pts], where="pre", label=name,
                     color=COLOURS[j % len(COLOURS)], linestyle=LINES[j % len(LINES)],
                     marker=MARKERS[j % len(MARKERS)], markersize=4)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("syscall latency, µs (upper bucket edge, log scale)")
        ax.set_ylabel("calls (log scale)")
        ax.legend(frameon=False, fontsize=8)
        return _svg(fig, ch)


def curves(cid: str, title: str, x_label: str, xs: list[float],
           series: Sequence[tuple[str, list[float], list[tuple[float, float]] | None]],
           y_label: str, marks: Sequence[tuple[float, str]] = (), log_y: bool = False) -> Chart:
    """Lines against a numeric x (by value, not by index), each with its repeats' spread as
    error bars ((low, high) per point); `marks` are labelled vertical lines (knee, collapse)."""
    alt = f"{title}: " + "; ".join(
        f"{name}: " + ", ".join(f"{fmt(x)} → {fmt(y)}" for x, y in zip(xs, ys))
        for name, ys, _ in series) + "".join(f"; {label} at {fmt(x)}" for x, label in marks)
    ch = Chart(cid, title, alt, headers=(x_label, *(s[0] for s in series)),
               rows=[(fmt(x), *(fmt(ys[i]) + (f" ({fmt(sp[i][0])}–{fmt(sp[i][1])})" if sp else "")
                                 for _, ys, sp in series)) for i, x in enumerate(xs)])
    with rc_context(RC):
        fig = _fig(7.2, 3.0)
        ax = fig.add_subplot()
        for j, (name, ys, spread) in enumerate(series):
            yerr = None
            if spread:
                yerr = [[max(0.0, y - lo) for y, (lo, _) in zip(ys, spread)],
                        [max(0.0, hi - y) for y, (_, hi) in zip(ys, spread)]]
            ax.errorbar(xs, ys, yerr=yerr, label=name, color=COLOURS[j % len(COLOURS)],
                        linestyle=LINES[j % len(LINES)], marker=MARKERS[j % len(MARKERS)],
                        markersize=4, capsize=3)
        for k, (x, label) in enumerate(marks):
            ax.axvline(x, color="black", linewidth=0.8, linestyle=LINES[(k + 1) % len(LINES)])
            ax.annotate(f"{label} {fmt(x)}", (x, 1.0), xycoords=("data", "axes fraction"),
                        rotation=90, va="top", ha="right", fontsize=8)
        ax.set_xlabel(x_label)
        ax.set_ylabel(y_label)
        if log_y:
            ax.set_yscale("log")
        ax.set_ylim(bottom=None if log_y else 0)
        if len(series) > 1:
            ax.legend(frameon=False, fontsize=8)
        return _svg(fig, ch)
