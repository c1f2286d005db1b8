"""Pure helpers for message content: normalizing, text extraction, previews, JSON checks.

Nothing here touches the database, so migrations and the reference module can use it too.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Mapping
from typing import Any

import regex

from .conf import app_settings
from .exceptions import (
    EmptyContent,
    InvalidContent,
    InvalidInput,
    InvalidMetadata,
    InvalidText,
    NulCharacter,
    TooManyKeys,
)

__all__ = [
    "CONVERSATION_USER_SOURCES",
    "ELLIPSIS",
    "MAX_JSON_DEPTH",
    "NO_KEY_LIMIT",
    "check_json_object",
    "check_json_value",
    "check_object_keys",
    "content_text",
    "is_conversation",
    "is_grapheme_boundary",
    "json_bytes",
    "json_text",
    "normalize_content",
    "parse_json",
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
    if len(content) == 1:  # most messages: one block, no join
        return _block_text(content[0]) or ""
    return "\n".join(text for block in content if (text := _block_text(block)) is not None)


def _block_text(block: Any) -> str | None:
    """A text block's ``text``; ``None`` for any other block (or a text block without one)."""
    if isinstance(block, Mapping) and block.get("type") == "text":
        text = block.get("text")
        if isinstance(text, str):
            return text
    return None


#: Stdlib ``re``, not ``regex``: ``regex`` releases the interpreter lock for every match on a
#: ``str``, so each check of a message would let another thread take the lock and wait to get
#: it back; under eight writer threads that cost more than the match (docs/performance.md).
_UNSTORABLE = re.compile(r"[\x00\ud800-\udfff]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")

#: Deepest nesting of arrays and objects in a JSON value the app stores (``metadata``,
#: ``content``): MariaDB's ``JSON_VALID`` — the check constraint of its JSON columns — refuses a
#: document nested 32 deep, so a value accepted on one database is storable on every one
#: (docs/design.md §12.4, §15). A top-level object or array counts as level 1.
MAX_JSON_DEPTH = 31

#: The error a JSON value of each field raises when it is not JSON or nested too deep
#: (``InvalidInput`` for any other field, e.g. an ADK ``state``).
_JSON_FIELD_ERRORS: dict[str, type[InvalidInput]] = {
    "metadata": InvalidMetadata,
    "content": InvalidContent,
}


#: ``max_keys`` of :func:`check_json_value` that sets no bound (the API's body parser, whose
#: fields are checked again by the rules of what they hold).
NO_KEY_LIMIT = sys.maxsize


def check_json_value(
    value: Any,
    *,
    field: str,
    max_depth: int = MAX_JSON_DEPTH,
    allow_nul: bool = False,
    max_keys: int | None = None,
) -> None:
    """Check a JSON value once, iteratively, before anything stores, encodes or compares it.

    The one rule for every JSON value the app takes in (the services, the admin forms, the
    API's parser and the ``metadata`` list filter all call it, docs/design.md §12.4–12.6):
    nested at most ``max_depth`` arrays/objects deep, no object with more than ``max_keys``
    keys, every object key a string (JSON has no
    other: ``json.dumps`` would turn ``1``, ``True`` and ``None`` into ``"1"``, ``"true"`` and
    ``"null"``, and two keys into one), and every string — object keys included — storable
    text. A value this accepts never makes the walk, ``json.dumps`` or a database's
    JSON parser recurse too deep, and never reaches PostgreSQL with a NUL.

    Args:
        value: parsed JSON (dicts, lists or tuples, strings, numbers, booleans, ``None``).
        field: the input's name, reported with the error; ``"metadata"`` and ``"content"``
            choose the error class of a too-deep value.
        max_depth: the deepest nesting accepted (a top-level object or array is level 1).
        allow_nul: accept NUL characters (the API's parser, which leaves them to the field
            rules so they answer ``nul_character``).
        max_keys: the most keys one object (at any depth) may have; ``None``, the default,
            reads the ``MAX_JSON_KEYS`` setting, :data:`NO_KEY_LIMIT` sets no bound.

    Raises:
        NulCharacter: a string holds ``\\x00`` (unless ``allow_nul``).
        InvalidText: a string holds a lone surrogate (``"\\ud800"``), which is not Unicode
            text and has no UTF-8 encoding.
        InvalidMetadata / InvalidContent / InvalidInput: nested deeper than ``max_depth``, an
            object key that is not a ``str``, or two keys of one object with the same text
            (``str`` subclasses that compare unequal; the class follows ``field``).
        TooManyKeys: an object with more than ``max_keys`` keys (``too_many_keys``): MariaDB
            took 16 s to store an object of 60,000 (docs/design.md §12.6).
    """
    search = (_SURROGATE if allow_nul else _UNSTORABLE).search
    if isinstance(value, str):
        if (found := _unstorable(value, search, allow_nul)) is not None:
            _refuse_text(found, field)
        return
    most_keys = app_settings.MAX_JSON_KEYS if max_keys is None else max_keys
    # Only containers go on the stack; strings are checked as they are met (the append path
    # runs this on every message).
    # Exact types first (``type(x) is …``, a set lookup): ``isinstance`` of a number or
    # ``None`` against ``Mapping`` asks the ABC machinery, the most of a walk over the
    # records the runtime adapters store (docs/performance.md).
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        kind = type(item)
        if kind is list or kind is tuple or (kind is not dict and isinstance(item, list | tuple)):
            children: Any = item
        elif kind is dict or isinstance(item, Mapping):
            if len(item) > most_keys:
                raise TooManyKeys(
                    f"{field} has an object of {len(item)} keys; at most {most_keys} are "
                    "accepted (MAX_JSON_KEYS).",
                    field=field,
                    size=len(item),
                    limit=most_keys,
                )
            keys_checked = False
            for key in item:
                if type(key) is str:  # the usual case
                    if key.isascii() and (allow_nul or "\x00" not in key):
                        continue
                elif not keys_checked:
                    check_object_keys(item, field=field)
                    keys_checked = True
                if (found := _unstorable(key, search, allow_nul)) is not None:
                    _refuse_text(found, field)
            children = item.values()
        else:
            continue
        if depth > max_depth:
            error = _JSON_FIELD_ERRORS.get(field, InvalidInput)
            raise error(f"{field} is nested deeper than {max_depth} levels.", field=field)
        for child in children:
            kind = type(child)
            if kind is str:
                if child.isascii() and (allow_nul or "\x00" not in child):
                    continue
                if (found := search(child)) is not None:
                    _refuse_text(found, field)
            elif kind in _JSON_SCALARS:
                continue
            elif isinstance(child, str):
                if (found := _unstorable(child, search, allow_nul)) is not None:
                    _refuse_text(found, field)
            elif kind is dict or kind is list or isinstance(child, dict | list | tuple | Mapping):
                stack.append((child, depth + 1))


#: Exact types of the JSON values that hold no string and no container (subclasses take the
#: ``isinstance`` tests: a ``str`` subclass of ``int`` cannot exist, but a ``Mapping`` may
#: subclass anything).
_JSON_SCALARS = frozenset({int, float, bool, type(None)})


def check_object_keys(item: Mapping[Any, Any], *, field: str) -> None:
    """Check that the keys of one JSON object (not the objects inside it) are JSON's: strings,
    no two with the same text. ``json.dumps`` writes ``1`` as ``"1"`` and a ``str`` subclass
    key as its text, so ``{1: …, "1": …}`` or two subclass keys that compare unequal would
    become two equal keys, one of which a reader drops (docs/design.md §12.4).

    Args:
        item: the object.
        field: the input's name, reported with the error; it chooses the error's class as in
            :func:`check_json_value`.

    Raises:
        InvalidMetadata / InvalidContent / InvalidInput: a key that is not a ``str``, or two
            keys with the same text.
    """
    error = _JSON_FIELD_ERRORS.get(field, InvalidInput)
    for key in item:
        if not isinstance(key, str):
            raise error(
                f"{field} has an object key that is not a string ({key!r}): JSON object keys "
                "are strings.",
                field=field,
            )
    if len({str.__str__(key) for key in item}) < len(item):
        raise error(f"{field} has two object keys with the same text.", field=field)


def _unstorable(text: str, search: Any, allow_nul: bool) -> Any:
    """The first character of ``text`` that ``search`` (``_UNSTORABLE`` or ``_SURROGATE``'s)
    finds, as a match, or ``None``.

    ASCII text (a flag CPython keeps on every str) holds no surrogate, and ``in`` finds a NUL
    with memchr: most strings skip the regular expression, which reads every character
    through its character class (several times slower on a message's text). Only exact
    ``str``: a subclass may override ``isascii`` or ``in``; the expression reads its text.
    """
    if type(text) is str and text.isascii() and (allow_nul or "\x00" not in text):
        return None
    return search(text)


def _refuse_text(found: Any, field: str) -> None:
    if found.group() == "\x00":
        raise NulCharacter(field=field)
    raise InvalidText(field=field)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is out of range")
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"the key {key!r} is given twice in one object")
            seen.add(key)
    return value


def parse_json(text: str) -> Any:
    """Parse JSON text strictly: the one parser of every JSON text the app is given (API
    bodies, the admin's JSON boxes, the ``metadata`` query parameter).

    Unlike ``json.loads`` it refuses ``NaN``, ``Infinity`` and numbers out of float range
    (``1e999``), which no database stores as JSON, and a key given twice in one object (``{"a":
    1, "a": 2}``), which ``json.loads`` would silently read as its last value — as a query
    parameter given twice is refused (docs/design.md §12.4). Nesting deep enough to exhaust
    Python's recursion limit is a ``ValueError`` like any other malformed text, never a
    ``RecursionError``. Check the value with :func:`check_json_value` before using it.

    Args:
        text: the JSON text.

    Returns:
        The parsed value.

    Raises:
        ValueError: malformed JSON (``json.JSONDecodeError``), a non-finite number, a repeated
            key, or nesting too deep to parse.
    """
    try:
        return json.loads(
            text,
            parse_constant=_refuse_constant,
            parse_float=_finite_float,
            object_pairs_hook=_unique_keys,
        )
    except RecursionError:
        raise ValueError("nested too deep to parse") from None


#: ``json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)``, with
#: its encoder made once (``json.dumps`` makes one on every call given such arguments).
_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode


def json_text(value: Any, *, field: str) -> str:
    """The compact JSON encoding of ``value`` (no spaces, non-ASCII kept as is), the text a
    write stores and :func:`json_bytes` measures.

    Raises:
        InvalidMetadata / InvalidContent / InvalidInput: ``value`` is not JSON (e.g. a set,
            NaN, infinity); the class follows ``field`` as in :func:`check_json_value`.
    """
    try:
        return _encode(value)
    except (TypeError, ValueError) as exc:
        error = _JSON_FIELD_ERRORS.get(field, InvalidInput)
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
        InvalidMetadata: ``value`` is not a dict, not JSON-serializable, or nested deeper than
            :data:`MAX_JSON_DEPTH`.
        NulCharacter: a key or string value contains ``\\x00``.
        InvalidText: a key or string value contains a lone surrogate.
    """
    if not isinstance(value, dict):
        raise InvalidMetadata(
            f"{field} must be a JSON object, not {type(value).__name__}.", field=field
        )
    check_json_value(value, field=field)
    json_bytes(value, field=field)
    return value


def normalize_content(content: Any) -> list[dict[str, Any]]:
    """Turn API or service input into a list of content blocks (docs/design.md §3.2).

    A string becomes one ``{"type": "text", "text": ...}`` block; a list must hold objects each
    with a string ``type``, and text blocks need a string ``text``. Other block types are kept as
    given. Blocks are copied, never mutated.

    Raises:
        InvalidContent: not a string or a list of blocks, a malformed block, or blocks nested
            deeper than :data:`MAX_JSON_DEPTH` (the list of blocks is level 1).
        EmptyContent: no blocks, or only text blocks whose text is blank.
        NulCharacter: a string inside contains ``\\x00``.
        InvalidText: a string inside contains a lone surrogate.
    """
    if isinstance(content, str):
        # One text block: the walk below would check only this string, and the blank test
        # read only it (the append path takes this branch for most messages).
        check_json_value(content, field="content")
        if not content.strip():
            raise EmptyContent(field="content")
        return [{"type": "text", "text": content}]
    if isinstance(content, list | tuple):
        blocks: list[dict[str, Any]] = []
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
    check_json_value(blocks, field="content")
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
    # ``concurrent=False``: keep the interpreter lock for these window-sized matches (see
    # _UNSTORABLE); ``regex`` would release it for each.
    while start > 0 and _RUN_CONTINUES.match(text, start, concurrent=False):
        start -= 1
    end = min(len(text), index + _BOUNDARY_WINDOW)
    for cluster in _GRAPHEME.finditer(text, start, end, concurrent=False):
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
