"""What a good answer to one URL looks like, taken from the site as it is before anything
changes (model/same_page.py): a measurement that judges (the demo's and tune's rounds, the
escalation's trials) counts only answers that look like it."""

from __future__ import annotations

from dataclasses import dataclass

from statstorm.results.jsontypes import JsonObject


@dataclass(frozen=True)
class Page:
    """One URL's page: its status, its body's length (a good answer is within
    `tolerance` of it) and a marker text it holds ('' none: the page has no title)."""

    url: str
    status: int
    length: int
    marker: str
    tolerance: float = 0.1

    def to_json(self) -> JsonObject:
        return {"url": self.url, "status": self.status, "length": self.length,
                "marker": self.marker, "tolerance": self.tolerance}

    def says(self) -> str:
        """`200, 48,112 bytes, titled 'Main Page'`."""
        return (f"{self.status}, {self.length:,} bytes"
                + (f", titled {self.marker!r}" if self.marker else ""))
