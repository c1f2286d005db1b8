"""Request parsing for the API: JSON only, strict, bounded (docs/design.md §7.3).

:class:`JSONObjectParser` turns every malformed body into a 400 with a code instead of a 500:
invalid JSON or encoding, ``NaN``/``Infinity``, nesting deeper than :data:`MAX_JSON_DEPTH`, and
strings with lone surrogates (which no database can store). Bodies over Django's
``DATA_UPLOAD_MAX_MEMORY_SIZE`` are refused with 413 before they are parsed (DRF reads the body
through ``HttpRequest.body``, which enforces that setting; the handler maps the error).
"""

from __future__ import annotations

import codecs
import json
import math
from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser, get_encoding  # type: ignore[attr-defined]  # not in the stubs

__all__ = ["MAX_JSON_DEPTH", "MERGE_PATCH_MEDIA_TYPE", "JSONObjectParser", "MergePatchParser"]

#: The media type of a JSON Merge Patch (RFC 7386).
MERGE_PATCH_MEDIA_TYPE = "application/merge-patch+json"

#: Deepest nesting of arrays and objects accepted in a request body.
MAX_JSON_DEPTH = 64


def _strict_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is out of range")
    return value


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def check_json_tree(data: Any, *, max_depth: int = MAX_JSON_DEPTH) -> None:
    """Walk parsed JSON once, iteratively, refusing deep nesting and unencodable strings.

    Raises:
        ParseError: nesting deeper than ``max_depth``, or a string (or key) that is not valid
            Unicode (a lone surrogate such as ``"\\ud800"``).
    """
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if _has_surrogate(item):
                raise ParseError("JSON parse error - a string contains a lone surrogate.")
        elif isinstance(item, dict | list):
            if depth > max_depth:
                raise ParseError(f"JSON parse error - nesting deeper than {max_depth} levels.")
            if isinstance(item, dict):
                stack.extend((key, depth) for key in item)
                stack.extend((value, depth + 1) for value in item.values())
            else:
                stack.extend((value, depth + 1) for value in item)


class JSONObjectParser(JSONParser):
    """DRF's ``JSONParser``, strict: every bad body is a ``ParseError`` (400 ``parse_error``)."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        """Parse the body.

        Returns:
            The decoded JSON value.

        Raises:
            ParseError: malformed JSON or encoding, non-finite numbers, too deep, or lone
                surrogates.
        """
        encoding = get_encoding(parser_context or {})
        try:
            data = json.load(
                codecs.getreader(encoding)(stream),
                parse_constant=_strict_constant,
                parse_float=_finite_float,
            )
        except (ValueError, RecursionError) as exc:
            raise ParseError(f"JSON parse error - {exc}") from None
        check_json_tree(data)
        return data


class MergePatchParser(JSONObjectParser):
    """:class:`JSONObjectParser` for ``application/merge-patch+json`` bodies (RFC 7386), which
    only ``PATCH /sessions/{id}/`` accepts (docs/design.md §11.3)."""

    media_type = MERGE_PATCH_MEDIA_TYPE
