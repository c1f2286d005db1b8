"""The one JSON serializer of snapshots, and the byte arithmetic retention does with it (§8.6-§8.7).

:func:`tag_safe_json` is compact JSON (``separators=(",", ":")``), ``ensure_ascii=False``, no NaN,
with every ``<`` written ``\\u003c`` so no data can open or close a tag in the prompt. Retention
measures snapshots with exactly this function and rendering writes them with it, so the bytes
the budget bounds are the bytes in the prompt.

:func:`json_text_cost` gives the UTF-8 bytes a string costs *inside* the quotes of that JSON,
which differs from its own UTF-8 length: ``"``, ``\\`` and ``\\b \\t \\n \\f \\r`` cost 2, other
controls below U+0020 cost 6 (``\\u00xx``), ``<`` costs 6 (``\\u003c``), everything else its
UTF-8 length.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = [
    "char_json_cost",
    "clean_text",
    "json_text_cost",
    "tag_safe_json",
    "utf8_len",
]

_SURROGATE = re.compile("[\ud800-\udfff]")
_ASCII_COST = [6] * 0x20 + [1] * 0x60
for _char in "\b\t\n\f\r":
    _ASCII_COST[ord(_char)] = 2
_ASCII_COST[ord('"')] = 2
_ASCII_COST[ord("\\")] = 2
_ASCII_COST[ord("<")] = 6


def tag_safe_json(value: Any) -> str:
    """Serialize ``value`` as compact, tag-safe JSON (docs/design.md §8.6, §8.7).

    Args:
        value: JSON data (dicts keep their insertion order); strings must be free of lone
            surrogates (see :func:`clean_text`).

    Returns:
        The JSON text, with ``<`` written ``\\u003c``; its UTF-8 bytes are what the
        ``MAX_REFERENCE_BYTES`` budget bounds.

    Raises:
        TypeError / ValueError: ``value`` is not JSON data (a programming error).
    """
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c")


def utf8_len(text: str) -> int:
    """UTF-8 length of ``text`` in bytes (``text`` must be free of lone surrogates)."""
    return len(text.encode("utf-8"))


def char_json_cost(char: str) -> int:
    """UTF-8 bytes one character costs inside a :func:`tag_safe_json` string."""
    code = ord(char)
    if code < 0x80:
        return _ASCII_COST[code]
    if code < 0x800:
        return 2
    return 3 if code < 0x10000 else 4


def json_text_cost(text: str) -> int:
    """UTF-8 bytes of ``tag_safe_json(text)`` without its two quotes."""
    return utf8_len(tag_safe_json(text)) - 2


def clean_text(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD, so it is valid Unicode.

    Stored JSON can hold ``"\\ud800"`` on SQLite; such a string cannot be UTF-8 and would break
    both measuring and rendering. Well-formed text is returned unchanged (the same object).
    """
    if _SURROGATE.search(text) is None:
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
