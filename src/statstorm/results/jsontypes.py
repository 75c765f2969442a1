"""The type of JSON data a result writes: `JsonObject` is what a `to_json` gives (its
`from_json` reads JSON as parsed, at the edge)."""

from __future__ import annotations

from typing import TypeAlias

JsonValue: TypeAlias = (str | int | float | bool | None | list["JsonValue"]
                        | dict[str, "JsonValue"])
JsonObject = dict[str, JsonValue]
