"""JSON equality as PostgreSQL's ``jsonb`` has it, for SQLite (docs/design.md §11.3, §15.6).

SQLite keeps JSON as text, so comparing two objects compares their text: ``{"x": 1, "y": 2}``
differed from ``{"y": 2, "x": 1}`` and ``{"n": 1}`` from ``{"n": 1.0}``. :func:`canonical_json`
writes a JSON value in one canonical form — object keys sorted, numbers by value (``1``,
``1.0`` and ``1e0`` alike, compared exactly as decimals, never through a binary float) — so two
texts are equal ``jsonb`` values exactly when their canonical forms are equal.

Every SQLite connection gets it as the deterministic SQL function ``cortex_json_canonical(text)``
(:func:`register`, connected to ``connection_created`` by the app config), which the metadata
filter applies to an object or array member (:func:`cortex_sessions.metadata.filter_by_metadata`).
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

__all__ = ["SQL_FUNCTION", "canonical_json", "canonical_json_text", "register"]

#: Name of the SQL function on SQLite connections.
SQL_FUNCTION = "cortex_json_canonical"

#: Integral numbers with more digits than this keep their exponent form (``1E+5000``) instead of
#: being written out in full; both sides of a comparison go through the same rule.
_MAX_INTEGRAL_DIGITS = 400


def _number(value: Decimal) -> str:
    if value.is_zero():
        return "0"  # jsonb: -0 = 0 = 0.0
    if value == value.to_integral_value() and value.adjusted() < _MAX_INTEGRAL_DIGITS:
        return str(int(value))
    return str(value.normalize())


def _canonical(value: Any) -> str:
    if isinstance(value, dict):
        members = (json.dumps(key) + ":" + _canonical(value[key]) for key in sorted(value))
        return "{" + ",".join(members) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_canonical(item) for item in value) + "]"
    if isinstance(value, Decimal):
        return _number(value)
    return json.dumps(value)  # str, bool, None


def canonical_json_text(text: str | bytes | None) -> str | None:
    """The canonical form of a JSON text (see the module docstring).

    Args:
        text: a JSON text, as SQLite's ``JSON_EXTRACT`` gives an object or array member; SQL
            ``NULL`` (a missing member) stays ``None``.

    Returns:
        Compact JSON: keys sorted by code point, no spaces, strings escaped to ASCII, numbers
        in their shortest exact decimal form (integral values as integers); ``None`` for
        ``None`` or for text that is not JSON (which then equals nothing).
    """
    if text is None:
        return None
    try:
        parsed = json.loads(text, parse_float=Decimal, parse_int=Decimal)
    except (ValueError, RecursionError):
        return None
    return _canonical(parsed)


def canonical_json(value: Any) -> str:
    """The canonical form of a Python JSON value (``dict``, ``list``, ``str``, numbers, ``bool``,
    ``None``), equal to :func:`canonical_json_text` of its JSON text.

    Raises:
        TypeError, ValueError: ``value`` is not JSON-serializable.
    """
    result = canonical_json_text(json.dumps(value, allow_nan=False))
    assert result is not None  # json.dumps wrote JSON
    return result


def register(sender: Any = None, *, connection: Any, **kwargs: Any) -> None:
    """Give a new SQLite connection ``cortex_json_canonical`` (a ``connection_created``
    receiver; other vendors are left alone).

    Args:
        sender: the backend's connection class (unused).
        connection: the Django database wrapper whose connection was just opened.
    """
    if connection.vendor != "sqlite":
        return
    connection.connection.create_function(SQL_FUNCTION, 1, canonical_json_text, deterministic=True)
