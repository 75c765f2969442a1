"""Typed readers of JSON as parsed, for the results' `from_json`: each narrows one value of a
`JsonObject` to the type its field holds, and raises `ValueError` naming the key when the
value is of another kind. A missing key or null reads as the reader's default (a file written
before the key existed); the `opt_` readers give None for it.
"""

from __future__ import annotations

from statstorm.results.jsontypes import JsonObject, JsonValue


def _kind(x: object) -> str:
    return type(x).__name__


def obj(x: object, what: str) -> JsonObject:
    """`x` (JSON as parsed) as an object; `what` names it in the error."""
    if not isinstance(x, dict):
        raise ValueError(f"{what}: expected an object, got {_kind(x)}")
    return x


def array(x: object, what: str) -> list[JsonValue]:
    """`x` (JSON as parsed) as a list; `what` names it in the error."""
    if not isinstance(x, list):
        raise ValueError(f"{what}: expected a list, got {_kind(x)}")
    return x


def number(x: object, what: str) -> float:
    """`x` as a number (an int stays an int)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise ValueError(f"{what}: expected a number, got {x!r}")
    return x


def integer(x: object, what: str) -> int:
    if isinstance(x, bool) or not isinstance(x, int):
        raise ValueError(f"{what}: expected a whole number, got {x!r}")
    return x


def lst(d: JsonObject, key: str) -> list[JsonValue]:
    """The list under `key`; [] when it is missing or null."""
    v = d.get(key)
    return [] if v is None else array(v, key)


def opt_lst(d: JsonObject, key: str) -> list[JsonValue] | None:
    """The list under `key`; None when it is missing or null."""
    v = d.get(key)
    return None if v is None else array(v, key)


def opt_num(d: JsonObject, key: str) -> float | None:
    v = d.get(key)
    return None if v is None else number(v, key)  # an int stays an int: JSON round-trips


def num(d: JsonObject, key: str, default: float = 0) -> float:
    v = opt_num(d, key)
    return default if v is None else v


def opt_int(d: JsonObject, key: str) -> int | None:
    v = d.get(key)
    return None if v is None else integer(v, key)


def int_(d: JsonObject, key: str, default: int = 0) -> int:
    v = opt_int(d, key)
    return default if v is None else v


def bool_(d: JsonObject, key: str, default: bool = False) -> bool:
    v = d.get(key)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise ValueError(f"{key}: expected true or false, got {v!r}")
    return v


def str_(d: JsonObject, key: str, default: str = "") -> str:
    v = d.get(key)
    return default if v is None else str(v)


def opt_str(d: JsonObject, key: str) -> str | None:
    v = d.get(key)
    return None if v is None else str(v)


def strs(d: JsonObject, key: str) -> tuple[str, ...]:
    """The list of strings under `key`; () when it is missing or null."""
    return tuple(str(x) for x in lst(d, key))


def opt_strs(d: JsonObject, key: str) -> tuple[str, ...] | None:
    """The list of strings under `key`; None when it is missing or null."""
    v = opt_lst(d, key)
    return None if v is None else tuple(str(x) for x in v)


def nums(d: JsonObject, key: str) -> tuple[float, ...]:
    return tuple(number(x, key) for x in lst(d, key))


def ints(d: JsonObject, key: str) -> tuple[int, ...]:
    return tuple(integer(x, key) for x in lst(d, key))


def num_pairs(d: JsonObject, key: str) -> tuple[tuple[float, float], ...]:
    """The list of [number, number] pairs under `key` (e.g. [percentile, ms])."""
    out = []
    for x in lst(d, key):
        a, b = (number(v, key) for v in array(x, key))
        out.append((a, b))
    return tuple(out)


def opt_ints(d: JsonObject, key: str) -> tuple[int, ...] | None:
    v = opt_lst(d, key)
    return None if v is None else tuple(integer(x, key) for x in v)


def objs(d: JsonObject, key: str) -> tuple[JsonObject, ...]:
    """The list of objects under `key`; () when it is missing or null."""
    return tuple(obj(x, key) for x in lst(d, key))


def sub(d: JsonObject, key: str) -> JsonObject:
    """The object under `key`; {} when it is missing or null."""
    v = d.get(key)
    return {} if v is None else obj(v, key)


def opt_obj(d: JsonObject, key: str) -> JsonObject | None:
    """The object under `key`; None when it is missing or null."""
    v = d.get(key)
    return None if v is None else obj(v, key)


def section(d: JsonObject, key: str) -> JsonObject | None:
    """The object under `key`; None when it is missing, null or empty."""
    v = d.get(key)
    return None if v is None or v == {} else obj(v, key)


def str_map(d: JsonObject, key: str) -> dict[str, str]:
    """The object of strings under `key` (values as text); {} when it is missing or null."""
    return {k: str(v) for k, v in sub(d, key).items()}


def scalar_map(x: object, what: str) -> dict[str, str | int | float | bool]:
    """`x` as an object of scalars (text, numbers, true/false), as written."""
    out: dict[str, str | int | float | bool] = {}
    for k, v in obj(x, what).items():
        if not isinstance(v, (str, int, float, bool)):
            raise ValueError(f"{what}.{k}: expected a scalar, got {_kind(v)}")
        out[k] = v
    return out


def num_map(d: JsonObject, key: str) -> dict[str, float]:
    """The object of numbers under `key`; {} when it is missing or null."""
    m = sub(d, key)
    return {k: num(m, k) for k in m}
