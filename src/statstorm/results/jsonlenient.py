"""Tolerant readers of JSON as parsed, for input that others write and that is read as far
as it goes (a PHP worker's answer, a trace's header and summary): a value of another kind
reads as missing, where `results/jsonread.py`'s readers raise."""

from __future__ import annotations

from collections.abc import Mapping

from statstorm.results.jsontypes import JsonObject, JsonValue


def obj_or_empty(d: Mapping[str, JsonValue], key: str) -> JsonObject:
    """The object under `key`; {} when it is missing or of another kind."""
    v = d.get(key)
    return v if isinstance(v, dict) else {}


def obj_or_none(d: Mapping[str, JsonValue], key: str) -> JsonObject | None:
    """The object under `key`; None when it is missing or of another kind."""
    v = d.get(key)
    return v if isinstance(v, dict) else None


def list_or_none(d: Mapping[str, JsonValue], key: str) -> list[JsonValue] | None:
    """The list under `key`; None when it is missing or of another kind."""
    v = d.get(key)
    return v if isinstance(v, list) else None
