"""Pure helpers for message content: normalizing, text extraction, previews, JSON checks.

Nothing here touches the database, so migrations and the reference module can use it too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import regex

from .exceptions import EmptyContent, InvalidContent, InvalidMetadata, InvalidText, NulCharacter

__all__ = [
    "CONVERSATION_USER_SOURCES",
    "ELLIPSIS",
    "check_json_object",
    "content_text",
    "ensure_storable_text",
    "is_conversation",
    "is_grapheme_boundary",
    "json_bytes",
    "json_text",
    "normalize_content",
    "preview",
    "utf8_size",
]

#: Sources of a ``user`` message that count as conversation (docs/design.md §3.2).
CONVERSATION_USER_SOURCES = frozenset({"user", "checkpoint"})
ELLIPSIS = "…"


def is_conversation(role: str, source: str) -> bool:
    """Whether a message is a conversation message: an ``assistant`` message, or a ``user``
    message typed by a person or a checkpoint summary (docs/design.md §3.2)."""
    return role == "assistant" or (role == "user" and source in CONVERSATION_USER_SOURCES)


def content_text(content: Any) -> str:
    """The text of a message: its text blocks' ``text`` joined by ``\\n`` (docs/design.md §3.2).

    Args:
        content: a list of content blocks (dicts); anything else yields ``""``.
    """
    if not isinstance(content, list):
        return ""
    return "\n".join(
        block["text"]
        for block in content
        if isinstance(block, Mapping)
        and block.get("type") == "text"
        and isinstance(block.get("text"), str)
    )


_UNSTORABLE = regex.compile(r"[\x00\ud800-\udfff]")


def ensure_storable_text(value: Any, *, field: str) -> None:
    """Check that every string inside ``value`` (keys included) can be stored on any database.

    PostgreSQL refuses NUL in ``text`` and ``jsonb``, and a lone surrogate (``\\ud800``, which a
    JSON ``\\u`` escape can produce) is not Unicode text and cannot be encoded as UTF-8;
    refusing both here makes them clear validation errors instead of database crashes.

    Raises:
        NulCharacter: a string contains ``\\x00``.
        InvalidText: a string contains a lone surrogate.
    """
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            found = _UNSTORABLE.search(item)
            if found is not None:
                if found.group() == "\x00":
                    raise NulCharacter(field=field)
                raise InvalidText(field=field)
        elif isinstance(item, Mapping):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)


def json_text(value: Any, *, field: str) -> str:
    """The compact JSON encoding of ``value`` (no spaces, non-ASCII kept as is), the text a
    write stores and :func:`json_bytes` measures.

    Raises:
        InvalidContent / InvalidMetadata: ``value`` is not JSON (e.g. a set, NaN, infinity);
            the class follows ``field``.
    """
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        error = InvalidMetadata if field == "metadata" else InvalidContent
        raise error(f"{field} is not valid JSON: {exc}", field=field) from exc


def utf8_size(text: str) -> int:
    """UTF-8 byte length of ``text`` (lone surrogates counted as three bytes each)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def json_bytes(value: Any, *, field: str) -> int:
    """UTF-8 byte length of the compact JSON encoding of ``value`` (:func:`json_text`).

    Raises:
        InvalidContent / InvalidMetadata: ``value`` is not JSON (e.g. a set, NaN, infinity);
            the class follows ``field``.
    """
    return utf8_size(json_text(value, field=field))


def check_json_object(value: Any, *, field: str = "metadata") -> dict[str, Any]:
    """Validate a host-owned JSON object (``metadata``) and return it.

    Raises:
        InvalidMetadata: ``value`` is not a dict or not JSON-serializable.
        NulCharacter: a key or string value contains ``\\x00``.
    """
    if not isinstance(value, dict):
        raise InvalidMetadata(
            f"{field} must be a JSON object, not {type(value).__name__}.", field=field
        )
    json_bytes(value, field=field)
    ensure_storable_text(value, field=field)
    return value


def normalize_content(content: Any) -> list[dict[str, Any]]:
    """Turn API or service input into a list of content blocks (docs/design.md §3.2).

    A string becomes one ``{"type": "text", "text": ...}`` block; a list must hold objects each
    with a string ``type``, and text blocks need a string ``text``. Other block types are kept as
    given. Blocks are copied, never mutated.

    Raises:
        InvalidContent: not a string or a list of blocks, or a malformed block.
        EmptyContent: no blocks, or only text blocks whose text is blank.
        NulCharacter: a string inside contains ``\\x00``.
    """
    if isinstance(content, str):
        blocks: list[dict[str, Any]] = [{"type": "text", "text": content}]
    elif isinstance(content, list | tuple):
        blocks = []
        for index, block in enumerate(content):
            if not isinstance(block, Mapping):
                raise InvalidContent(
                    f"content[{index}] must be an object with a 'type'.", field="content"
                )
            kind = block.get("type")
            if not isinstance(kind, str) or not kind:
                raise InvalidContent(
                    f"content[{index}] needs a non-empty string 'type'.", field="content"
                )
            if kind == "text" and not isinstance(block.get("text"), str):
                raise InvalidContent(
                    f"content[{index}] is a text block without a string 'text'.", field="content"
                )
            blocks.append(dict(block))
    else:
        raise InvalidContent(field="content")
    ensure_storable_text(blocks, field="content")
    only_text = all(block["type"] == "text" for block in blocks)
    if not blocks or (only_text and not content_text(blocks).strip()):
        raise EmptyContent(field="content")
    return blocks


#: Characters looked at on each side of a candidate cut when segmenting (UAX #29 rules are
#: local but for runs of extenders and regional indicators, which are followed back further).
_BOUNDARY_WINDOW = 32
_GRAPHEME = regex.compile(r"\X")
_RUN_CONTINUES = regex.compile(r"[\p{Grapheme_Extend}\p{Regional_Indicator}\u200d]")


def is_grapheme_boundary(text: str, index: int) -> bool:
    """Whether cutting ``text`` at ``index`` (between ``text[index - 1]`` and ``text[index]``)
    keeps every user-perceived character whole: an extended grapheme cluster boundary of
    Unicode UAX #29 (combining marks, Hangul jamo, emoji ZWJ sequences, flags, Indic conjuncts,
    prepended marks, CR LF), as the ``regex`` library segments it.

    Looks only at a window around ``index``, so a caller may test positions in a long text
    without reading all of it.
    """
    if index <= 0 or index >= len(text):
        return True
    start = max(0, index - _BOUNDARY_WINDOW)
    # Start the segmentation outside any cluster or regional-indicator run.
    while start > 0 and _RUN_CONTINUES.match(text, start):
        start -= 1
    end = min(len(text), index + _BOUNDARY_WINDOW)
    for cluster in _GRAPHEME.finditer(text, start, end):
        if cluster.start() >= index:
            return bool(cluster.start() == index)
    return False  # ``index`` lies inside the window's last cluster


def preview(text: str, max_chars: int) -> str:
    """``text`` cut to at most ``max_chars`` characters, with ``…`` appended when cut (docs/design.md §5).

    The cut falls on a grapheme cluster boundary (:func:`is_grapheme_boundary`), so a preview
    never ends in half a character.
    """
    if len(text) <= max_chars:
        return text
    cut = max_chars
    while cut > 0 and not is_grapheme_boundary(text, cut):
        cut -= 1
    return text[:cut] + ELLIPSIS
