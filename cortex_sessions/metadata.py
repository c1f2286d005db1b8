"""Host-owned session metadata: the list filter and JSON Merge Patch (docs/design.md §11.3).

Pure functions: :func:`check_metadata_filter` validates a filter object, :func:`metadata_q`
turns it into a query predicate, :func:`merge_patch` applies an RFC 7386 merge patch. The
services call them; nothing here reads the database.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from django.db import connections
from django.db.models import BooleanField, CharField, F, Func, QuerySet, Value
from django.db.models.fields.json import KeyTransform

from .content import check_json_value, json_bytes
from .exceptions import InvalidFilter, InvalidInput, InvalidText, NulCharacter
from .sqlite_json import SQL_FUNCTION, canonical_json

__all__ = [
    "MAX_METADATA_FILTER_KEYS",
    "check_metadata_filter",
    "filter_by_metadata",
    "merge_patch",
]

#: Most top-level keys a ``metadata`` filter may name (docs/design.md §11.3).
MAX_METADATA_FILTER_KEYS = 10


def check_metadata_filter(value: Any) -> dict[str, Any]:
    """Validate a ``metadata`` list filter: a JSON object of at most 10 keys.

    Args:
        value: the parsed filter (the API parses the query parameter's JSON first).

    Returns:
        ``value`` as a dict.

    Raises:
        InvalidFilter: ``value`` is not an object, has more than
            :data:`MAX_METADATA_FILTER_KEYS` keys, is not JSON-serializable, or is nested
            deeper than ``content.MAX_JSON_DEPTH``; all with code ``invalid_filter`` and field
            ``metadata``.
        NulCharacter, InvalidText: a string or key of ``value`` holds a NUL character
            (``nul_character``) or a lone surrogate (``invalid_text``), which no database
            can compare — the codes these have in every other input (docs/design.md §12.4).
    """
    if not isinstance(value, Mapping):
        raise InvalidFilter(
            f"metadata must be a JSON object, not {type(value).__name__}.", field="metadata"
        )
    checked: dict[str, Any] = dict(value)
    if len(checked) > MAX_METADATA_FILTER_KEYS:
        raise InvalidFilter(
            f"metadata may name at most {MAX_METADATA_FILTER_KEYS} keys; got {len(checked)}.",
            field="metadata",
        )
    try:
        check_json_value(checked, field="metadata")
        json_bytes(checked, field="metadata")
    except (NulCharacter, InvalidText):  # one rule, one code: as in every other string
        raise
    except InvalidInput as exc:  # the filter's shape: invalid_filter
        raise InvalidFilter(f"metadata filter: {exc.message}", field="metadata") from None
    return checked


def filter_by_metadata(queryset: QuerySet[Any], value: Mapping[str, Any]) -> QuerySet[Any]:
    """Sessions of ``queryset`` whose metadata has every top-level key of ``value`` with an
    equal JSON value (docs/design.md §11.3).

    On PostgreSQL the filter starts with containment (``metadata @> value``), which the GIN
    ``jsonb_path_ops`` index serves; containment is equality for a scalar value, and for an
    object or array value an exact comparison of that key is added (containment alone would
    also match a larger object or array). On MariaDB each key is compared with ``JSON_EQUALS``
    (see :func:`_mysql_equal`), with the same results as PostgreSQL. On SQLite each key is
    compared with its JSON type, so ``true`` never matches ``1`` nor ``null`` the string
    ``"null"``, and a scalar with Django's JSON key lookup; an object or array value is compared
    there in canonical form (:mod:`cortex_sessions.sqlite_json`: keys sorted, numbers by value),
    so key order does not count and ``1`` equals ``1.0`` at any depth, as in ``jsonb``.

    Args:
        queryset: a ``Session`` queryset.
        value: a filter already checked by :func:`check_metadata_filter`.

    Returns:
        The filtered queryset (``queryset`` itself for ``{}``).

    Raises:
        InvalidFilter: a key this database's JSON paths cannot name (code ``invalid_filter``,
            field ``metadata``): on SQLite a key holding ``"``, on MySQL/MariaDB a key starting
            with ``-``. Refused rather than matched wrongly (docs/design.md §15).
    """
    if not value:
        return queryset
    vendor = connections[queryset.db].vendor
    for key in value:
        _check_addressable(vendor, key)
    if vendor == "postgresql":
        queryset = queryset.filter(metadata__contains=dict(value))
    for index, (key, expected) in enumerate(value.items()):
        if vendor == "postgresql" and not isinstance(expected, dict | list):
            continue
        if vendor == "mysql":
            queryset = queryset.filter(_mysql_equal(key, expected, connections[queryset.db]))
            continue
        name = f"_metadata_{index}"
        if vendor == "sqlite" and isinstance(expected, dict | list):
            queryset = queryset.alias(**{name: _sqlite_canonical_member(key)}).filter(
                **{name: canonical_json(expected)}
            )
        else:
            # An alias, not ``metadata__<key>``: a key may contain ``__`` or name a lookup.
            queryset = queryset.alias(**{name: KeyTransform(_ObjectKey(key), "metadata")}).filter(
                **{name: expected}
            )
        if vendor == "sqlite":
            type_name = f"_metadata_type_{index}"
            queryset = queryset.alias(
                **{
                    type_name: Func(
                        F("metadata"),
                        Value(_sqlite_key_path(key)),
                        function="JSON_TYPE",
                        output_field=CharField(),
                    )
                }
            ).filter(**{f"{type_name}__in": _sqlite_json_types(expected)})
    return queryset


def _mysql_equal(key: str, expected: Any, connection: Any) -> Func:
    """``metadata``'s member ``key`` equals the JSON value ``expected``, on MySQL/MariaDB; false
    (never unknown) when the member is missing.

    Django's key lookup compares MariaDB's JSON text as SQL strings in the column's collation:
    ``1`` equalled ``"1"``, ``"rain"`` equalled ``"rain "``, and an object matched only with
    its keys in the same order. MariaDB's ``JSON_EQUALS`` compares JSON values — types kept,
    object keys in any order, ``1`` equal to ``1.0`` — as PostgreSQL's ``jsonb`` does. It (and
    the path) read strings as their JSON text, escapes included, which is exact for metadata
    the app wrote: Django's encoder escapes every non-ASCII character, and so does the filter.
    Two MariaDB quirks are kept out: the path is a binary literal, because with a text literal
    the optimizer took ``JSON_EQUALS(…'$."n"'…) = 1`` and the ``"N"`` twin for one condition
    and dropped the second; and ``COALESCE`` makes a missing member false, because a bare
    ``JSON_EQUALS`` that is ``NULL`` passes a ``WHERE``.

    MySQL 8 (not tested here) has no ``JSON_EQUALS``; there the member is compared with its
    JSON ``=`` to ``CAST(… AS JSON)``, which also compares JSON values.
    """
    text = CharField()
    mariadb = connection.mysql_is_mariadb
    path = Func(
        Value("$." + json.dumps(key)),
        template="_binary %(expressions)s" if mariadb else "%(expressions)s",
        output_field=text,
    )
    member = Func(F("metadata"), path, function="JSON_EXTRACT", output_field=text)
    value = Value(json.dumps(expected))
    if mariadb:
        equal = Func(member, value, function="JSON_EQUALS", output_field=text)
    else:
        cast = Func(value, template="CAST(%(expressions)s AS JSON)", output_field=text)
        equal = Func(member, cast, template="%(expressions)s", arg_joiner=" = ", output_field=text)
    return Func(equal, template="COALESCE(%(expressions)s, FALSE)", output_field=BooleanField())


def _check_addressable(vendor: str, key: str) -> None:
    """Refuse a top-level key that ``vendor``'s JSON path syntax cannot name.

    SQLite's path labels have no escape, so a key holding ``"`` cannot be quoted; MariaDB reads
    a quoted label that starts with ``-`` as nothing (``$."-1"`` finds no member). PostgreSQL
    names every key (``->`` takes the key as a value).

    Raises:
        InvalidFilter: as :func:`filter_by_metadata` describes.
    """
    if vendor == "sqlite" and '"' in key:
        reason = 'SQLite cannot filter on a metadata key containing "'
    elif vendor == "mysql" and key.startswith("-"):
        reason = "MySQL/MariaDB cannot filter on a metadata key starting with -"
    else:
        return
    raise InvalidFilter(f"{reason}: {key!r}.", field="metadata")


class _ObjectKey(str):
    """A top-level metadata key that Django's JSON key transforms always treat as an object
    member name.

    ``KeyTransform`` reads any key that ``int()`` accepts (``"1"``, ``"-1"``, ``" 2 "``) as an
    array index: ``$[1]`` on SQLite and MySQL, ``-> 1`` on PostgreSQL, which never match an
    object's member. Refusing ``int()`` makes every backend build a quoted member path
    (``$."1"``, ``-> '1'``) instead. ``__str__`` returns the key itself because
    ``KeyTransform`` stores ``str(key_name)``.
    """

    __slots__ = ()

    def __str__(self) -> str:
        return self

    def __int__(self) -> int:
        raise ValueError("a metadata key names an object member, never an array index")


def _sqlite_canonical_member(key: str) -> Func:
    """``metadata``'s member ``key`` in canonical JSON form, on SQLite: the deterministic SQL
    function :data:`cortex_sessions.sqlite_json.SQL_FUNCTION` over ``JSON_EXTRACT``'s text of an
    object or array member (``NULL`` when the member is missing, which equals nothing).

    SQLite keeps JSON as text, so comparing a member with Django's key lookup compared texts:
    an object matched only with its keys in the stored order, and ``{"n": 1.0}`` never matched
    ``{"n": 1}``. Both sides in canonical form compare as ``jsonb`` values do."""
    text = CharField()
    member = Func(
        F("metadata"), Value(_sqlite_key_path(key)), function="JSON_EXTRACT", output_field=text
    )
    return Func(member, function=SQL_FUNCTION, output_field=text)


def _sqlite_key_path(key: str) -> str:
    """The SQLite JSON path of a top-level object key: always quoted, so a key such as ``"1"``
    names that member, never the second element of an array."""
    return "$." + json.dumps(key)


def _sqlite_json_types(expected: Any) -> list[str]:
    """The SQLite ``JSON_TYPE`` names a member must have to equal ``expected``: SQLite's
    ``JSON_EXTRACT`` gives ``true`` as ``1`` and the JSON ``null`` and string ``"null"`` alike,
    so the value comparison alone would take ``1`` for ``true`` and ``"null"`` for ``null``."""
    if expected is None:
        return ["null"]
    if isinstance(expected, bool):
        return ["true" if expected else "false"]
    if isinstance(expected, int | float):
        return ["integer", "real"]
    if isinstance(expected, str):
        return ["text"]
    return ["array"] if isinstance(expected, list) else ["object"]


def merge_patch(target: Any, patch: Any) -> Any:
    """Apply a JSON Merge Patch (RFC 7386) to ``target`` and return the result.

    An object patch merges into an object target key by key, recursively; a ``null`` member
    removes that key; any other patch value replaces the target. Neither argument is mutated.

    Args:
        target: the current JSON value.
        patch: the merge patch.

    Returns:
        The patched JSON value.
    """
    if not isinstance(patch, Mapping):
        return patch
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, change in patch.items():
        if change is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), change)
    return result
