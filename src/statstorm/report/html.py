"""The report as one self-contained HTML page: report.page's data through the Jinja2
templates in report/templates (the stylesheet inlined, charts inline SVG, no script, nothing
fetched when it is viewed)."""

from __future__ import annotations

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from markupsafe import Markup

from statstorm import __version__
from statstorm.report.page import Page


def _environment() -> Environment:
    env = Environment(loader=PackageLoader("statstorm.report", "templates"),
                      autoescape=select_autoescape(["html", "j2"], default=True),
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                      keep_trailing_newline=True)
    env.filters["svg"] = lambda text: Markup(text)  # made by report.charts, not from input
    return env


def render(page: Page) -> str:
    return _environment().get_template("report.html.j2").render(page=page, version=__version__)
