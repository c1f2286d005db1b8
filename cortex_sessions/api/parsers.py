"""Request parsing for the API: JSON only, strict, bounded (docs/design.md §7.3).

:class:`JSONObjectParser` turns every malformed body into a 400 with a code instead of a 500:
invalid JSON or encoding, ``NaN``/``Infinity``, nesting deeper than :data:`MAX_JSON_DEPTH`, and
strings with lone surrogates (which no database can store). Bodies over Django's
``DATA_UPLOAD_MAX_MEMORY_SIZE`` are refused with 413 before they are parsed (DRF reads the body
through ``HttpRequest.body``, which enforces that setting; the handler maps the error).
"""

from __future__ import annotations

import codecs
from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser, get_encoding  # type: ignore[attr-defined,unused-ignore]  # in the stubs from djangorestframework-stubs 3.18.2

from cortex_sessions.content import NO_KEY_LIMIT, check_json_value, parse_json
from cortex_sessions.exceptions import InvalidInput, InvalidText

__all__ = ["MAX_JSON_DEPTH", "MERGE_PATCH_MEDIA_TYPE", "JSONObjectParser", "MergePatchParser"]

#: The media type of a JSON Merge Patch (RFC 7386).
MERGE_PATCH_MEDIA_TYPE = "application/merge-patch+json"

#: Deepest nesting of arrays and objects accepted in a request body (parse safety; a stored
#: value inside it has its own, lower limit: ``cortex_sessions.content.MAX_JSON_DEPTH``).
MAX_JSON_DEPTH = 64


def check_json_tree(data: Any, *, max_depth: int = MAX_JSON_DEPTH) -> None:
    """Refuse deep nesting and unencodable strings in a parsed body, with the app's one JSON
    walk (:func:`cortex_sessions.content.check_json_value`); NUL is left to the field rules,
    which answer ``nul_character``, and objects with many keys to the rules of the fields
    that hold them (``too_many_keys``, naming the field; docs/design.md §12.6).

    Raises:
        ParseError: nesting deeper than ``max_depth``, or a string (or key) that is not valid
            Unicode (a lone surrogate such as ``"\\ud800"``).
    """
    try:
        check_json_value(
            data, field="body", max_depth=max_depth, allow_nul=True, max_keys=NO_KEY_LIMIT
        )
    except InvalidText:
        raise ParseError("JSON parse error - a string contains a lone surrogate.") from None
    except InvalidInput:
        raise ParseError(f"JSON parse error - nesting deeper than {max_depth} levels.") from None


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
            data = parse_json(codecs.getreader(encoding)(stream).read())
        except ValueError as exc:
            raise ParseError(f"JSON parse error - {exc}") from None
        check_json_tree(data)
        return data


class MergePatchParser(JSONObjectParser):
    """:class:`JSONObjectParser` for ``application/merge-patch+json`` bodies (RFC 7386), which
    only ``PATCH /sessions/{id}/`` accepts (docs/design.md §11.3)."""

    media_type = MERGE_PATCH_MEDIA_TYPE
