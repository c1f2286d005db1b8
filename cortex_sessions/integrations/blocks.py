"""The content blocks the runtime integrations write and read (docs/design.md §13.2, §13.3).

Each adapter stores one runtime record (an OpenAI Agents SDK item, an ADK event, a LangChain or
Pydantic AI message) as one message: a text block with the record's readable text, when it has
any (so ``last_message`` reads naturally), then one block that keeps the record verbatim — as
JSON where it passes the content rule (docs/design.md §12.4), else as its JSON text, which
escapes what PostgreSQL cannot store.

The text is stored once (docs/design.md §19.2, §19.3): when the record holds the readable text
as one string (a LangChain message's ``content``, a Pydantic AI part's), :func:`record_message`
and :func:`record_blocks`, given where (``text_at``), keep the record without it and name the
place in the block's ``"text_at"`` (a JSON array of keys and indexes); :func:`stored_record`
(and, on PostgreSQL, :mod:`.block_history`'s whole-history read) puts the text block's text
back there, by one rule (:func:`with_text`). So a message reaches ``MAX_MESSAGE_BYTES`` at the size
of its text, not twice it. Blocks without ``"text_at"`` (every block written before, and the
OpenAI Agents and ADK adapters') keep the whole record and read as they are.

Pure functions: nothing here reads or writes the database or imports an SDK.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from functools import cache
from typing import TYPE_CHECKING, Any

from ..content import MAX_JSON_DEPTH, check_json_value
from ..exceptions import InvalidContent, InvalidInput, InvalidText, NulCharacter, TooManyKeys

if TYPE_CHECKING:
    from ..services.messages import _BuiltMessage

__all__ = [
    "BAD_RECORD",
    "TEXT_AT",
    "find_block",
    "is_storable",
    "record_blocks",
    "record_message",
    "stored_record",
    "text_blocks",
    "verbatim_block",
    "with_text",
    "with_texts",
]

#: The key of a verbatim block naming where in its record the message's text belongs: a JSON
#: array of object keys and list indexes, its last item a key (docs/design.md §19.2, §19.3).
TEXT_AT = "text_at"

#: A place in a record: object keys and list indexes, the last a key.
Path = Sequence[str | int]


def is_storable(value: Any, *, depth: int = 0) -> bool:
    """Whether ``value``, stored ``depth`` levels deep inside a message's content, passes the
    content rule (no NUL, no lone surrogate, not nested too deep; docs/design.md §12.4).

    Args:
        value: parsed JSON (dicts or mappings, lists, strings, numbers, booleans, ``None``).
        depth: how many levels of the content enclose it (``0``: it is the content).

    Returns:
        ``True`` when the content rule accepts it there; never raises.
    """
    try:
        check_json_value(value, field="content", max_depth=MAX_JSON_DEPTH - depth)
    except InvalidInput:
        return False
    return True


def text_blocks(text: str) -> list[dict[str, Any]]:
    """The readable copy of a record: ``[]`` for blank ``text``, else one ``text`` block.

    The copy is storable even when the record is not: NUL characters are removed and lone
    surrogates replaced by ``?``.

    Args:
        text: the record's readable text.

    Returns:
        A list of zero or one content block, to which the caller appends the verbatim block.
    """
    if not text.strip():
        return []
    if not is_storable(text):
        text = text.replace("\x00", "").encode("utf-8", "replace").decode("utf-8")
    return [{"type": "text", "text": text}]


def verbatim_block(
    block_type: str, key: str, value: Any, *, as_json: Callable[[Any], str]
) -> dict[str, Any]:
    """The block keeping ``value`` verbatim: ``{"type": block_type, key: value}`` when it is
    storable inside a block of the content list, else ``{"type": block_type, key + "_json":
    as_json(value)}``.

    Args:
        block_type: the block's ``type`` (e.g. ``"adk_event"``).
        key: the name ``value`` is kept under (e.g. ``"event"``).
        value: the record as JSON-compatible data.
        as_json: turns ``value`` into JSON text; called only when ``value`` is not storable.

    Returns:
        The content block.

    Raises:
        Whatever ``as_json`` raises (e.g. ``InvalidContent`` for data that is not JSON).
    """
    if is_storable(value, depth=2):  # content list > block > value
        return {"type": block_type, key: value}
    return {"type": block_type, f"{key}_json": as_json(value)}


#: What the content rule raises for a value it refuses (:func:`is_storable` is false for it):
#: :func:`record_message` then keeps the record as JSON text, as :func:`verbatim_block` does.
_UNSTORABLE = (NulCharacter, InvalidText, TooManyKeys, InvalidContent)


def record_message(
    role: str,
    text: str,
    block_type: str,
    key: str,
    value: Any,
    *,
    as_json: Callable[[Any], str],
    now: datetime,
    text_at: Path | None = None,
) -> _BuiltMessage:
    """The message keeping a record, validated and encoded for
    :func:`cortex_sessions.services.messages.append_built`: its content is
    :func:`record_blocks`'s, walked by the content rule once, where :func:`verbatim_block` and
    then the append would walk the record twice (docs/design.md §12.4, §19.2, §19.3).

    Args:
        role: the message's role.
        text, block_type, key, value, as_json, text_at: as for :func:`record_blocks`.
        now: the message's ``created_at``.

    Returns:
        The validated message.

    Raises:
        MessageTooLarge: over ``MAX_MESSAGE_BYTES``; InvalidContent: ``value`` is not JSON
            (``as_json`` raises it); whatever ``as_json`` and ``TOKEN_COUNTER`` raise, as the
            append would.
    """
    build = _builder()
    # The usual case first: the text is storable (the build's walk of the content checks it,
    # so it is walked once, not also by text_blocks) and the record is kept as JSON.
    head = [{"type": "text", "text": text}] if text and not text.isspace() else []
    kept, path = _without_text(head, value, text_at)
    block = {"type": block_type, key: kept}
    if path is not None:
        block[TEXT_AT] = path
    try:
        return build(role, [*head, block], now)
    except _UNSTORABLE:
        pass
    # The text, the record or both are not storable (or not JSON: as_json says so): the text
    # block's copy made storable, the record as JSON text.
    head = text_blocks(text)
    kept, path = _without_text(head, value, text_at)
    block = {"type": block_type, f"{key}_json": as_json(kept)}
    if path is not None:
        block[TEXT_AT] = path
    return build(role, [*head, block], now)


@cache
def _builder() -> Callable[..., _BuiltMessage]:
    """The services' message validation for blocks made here
    (:func:`~cortex_sessions.services.message_input.build_blocks`), imported on first use (it
    imports the models, which need the app registry ready) and kept: an import statement in
    :func:`record_message` cost about a tenth of a short message's build."""
    from ..services.message_input import build_blocks

    return build_blocks


def record_blocks(
    text: str,
    block_type: str,
    key: str,
    value: Any,
    *,
    as_json: Callable[[Any], str],
    text_at: Path | None = None,
) -> list[dict[str, Any]]:
    """The content a record is stored as: :func:`text_blocks` of ``text``, then
    :func:`verbatim_block` of ``value`` — without the text when ``text_at`` names where
    ``value`` holds it (the block then has ``"text_at"``; see the module docs).

    Args:
        text: the record's readable text.
        block_type, key, as_json: as for :func:`verbatim_block`.
        value: the record as JSON-compatible data (not changed: what is stored is a copy).
        text_at: where ``value`` holds ``text`` as one string (keys and indexes, the last a
            key), or ``None``. Ignored unless that string is ``text`` and the text block
            holds it unchanged (``text`` is not blank and passes the content rule).

    Returns:
        The content blocks.

    Raises:
        Whatever ``as_json`` raises (e.g. ``InvalidContent`` for data that is not JSON).
    """
    head = text_blocks(text)
    kept, path = _without_text(head, value, text_at)
    block = verbatim_block(block_type, key, kept, as_json=as_json)
    if path is not None:
        block[TEXT_AT] = path
    return [*head, block]


def _without_text(
    head: list[dict[str, Any]], value: Any, text_at: Path | None
) -> tuple[Any, list[str | int] | None]:
    """``(value without its text, the block's "text_at")``: ``(value, None)`` unless the
    string at ``text_at`` is the text block's text; else the containers along the path copied
    (``value`` is not changed), the last key left out, and the path as a list."""
    if not text_at or not head or not _well_formed(list(text_at)):
        return value, None  # a path stored_record would not put the text back by: kept whole
    *steps, last = text_at
    copy = outer = _shallow(value)
    try:
        for step in steps:
            outer[step] = inner = _shallow(outer[step])
            outer = inner
        if type(outer) is not dict or type(last) is not str or outer.get(last) != head[0]["text"]:
            return value, None
    except (LookupError, TypeError):
        return value, None
    del outer[last]
    return copy, list(text_at)


def _shallow(value: Any) -> Any:
    """A shallow copy of a dict or list (to change without changing ``value``); else ``value``."""
    kind = type(value)
    return dict(value) if kind is dict else list(value) if kind is list else value


#: What reading a block's record raises when the block is not one an adapter wrote (a host's
#: block posted through the API: ``{"type": "langchain_message", "message": null}``, a
#: ``"message_json"`` that is not JSON, a record of no known type): :func:`stored_record`'s
#: ``KeyError``, ``ValueError`` and ``TypeError``, and what the runtimes' decoders raise
#: (``messages_from_dict``: ``KeyError``, ``TypeError``, ``ValueError``, ``AttributeError``;
#: pydantic's ``ValidationError``, a ``ValueError``). The history reads then treat the block
#: as no record: its message reads as another writer's (docs/design.md §19.2, §19.3).
BAD_RECORD = (AttributeError, LookupError, TypeError, ValueError)


def stored_record(block: Mapping[str, Any], key: str, content: Any) -> Any:
    """The record a verbatim block keeps: its ``key``, or its ``key + "_json"`` decoded, with the
    message's text put back where the block's ``"text_at"`` says (see the module docs).

    Args:
        block: the verbatim block (:func:`find_block`).
        key: the name the record is kept under (e.g. ``"message"``).
        content: the message's content, whose first block, a text block, holds the text
            (only read when the block has ``"text_at"``; a block without, written before, is
            read as it is, and so is a record whose content does not start with a text block).

    Returns:
        The record, equal to what :func:`record_blocks` was given (a new object when the text
        is put back: the stored content is not changed).

    Raises:
        KeyError: the block keeps no record under ``key``; ValueError: its JSON text is not
            JSON (not written by this module).
    """
    record = block[key] if key in block else json.loads(block[f"{key}_json"])
    path = block.get(TEXT_AT)
    if path is None:
        return record
    head = content[0] if isinstance(content, list) and content else None
    return with_text(record, path, _head_text(head))


def with_text(record: Any, path: Any, text: Any, *, copy: bool = True) -> Any:
    """``record`` with its message's text put back at ``path`` (a block's ``"text_at"``): the
    one rule both history reads apply, :func:`stored_record` and, on PostgreSQL,
    :func:`.block_history.read_history` (docs/design.md §19.2, §19.3).

    The text is the ``text`` of the message's first content block when that is a text block
    (``"type": "text"``) and its ``text`` a string; it goes back only when ``path`` is well formed (a
    non-empty list of keys, letters and ``_``, and indexes from 0 under 10^9, the last a key)
    and leads, as PostgreSQL's ``#>`` walks a path (a key of an object by its text, an index
    of a list), to an object without that last key. Any other ``"text_at"`` (a block a host
    wrote through the API) leaves the record as it is, never an error.

    Args:
        record: the record as stored (parsed JSON).
        path: the block's ``"text_at"``, any JSON value (``None``: none).
        text: the ``text`` of the message's first content block when that is a text block,
            any JSON value (``None``: none; anything but a string leaves the record as it is).
        copy: copy the containers along the path, so ``record`` is not changed (``False``:
            set the text in ``record`` itself, for a record parsed for this read alone).

    Returns:
        ``record`` itself when nothing is put back; else a copy with the text, or ``record``
        changed when ``copy`` is false.
    """
    if type(text) is not str or not _well_formed(path):
        return record
    if not copy:
        _put_text(record, path, text)
        return record
    *steps, last = path
    parent = _parent_at(record, steps)
    if type(parent) is not dict or last in parent:
        return record
    copied = outer = _shallow(record)
    for step in steps:
        index = str(step) if type(outer) is dict else step
        outer[index] = inner = _shallow(outer[index])
        outer = inner
    outer[last] = text
    return copied


#: A path :func:`with_texts` has not met yet in its page.
_UNSEEN = object()


def with_texts(
    records: list[Any],
    paths: Sequence[Any],
    texts: Sequence[Any],
    *,
    seen: dict[str, Any] | None = None,
) -> None:
    """:func:`with_text` of each record in place, by the same rule, each distinct path read
    and checked once (on PostgreSQL, :mod:`.block_history`'s page: a thousand records, one or
    two distinct paths).

    Args:
        records: records parsed for this read alone (each may be changed).
        paths: beside ``records``, item for item: ``None`` or ``"null"`` (nothing to put
            back) or the block's ``"text_at"`` as JSON text (PostgreSQL's ``jsonb::text``,
            so ``0.0`` stays apart from ``0``).
        texts: beside ``records``: the text of each message's first block when that is a
            text block, any JSON value (``None``: none).
        seen: the paths read so far, kept across calls for one page (a new dict: none).

    Raises:
        ValueError: ``paths`` or ``texts`` is not as long as ``records``, or a path is not
            JSON text.
    """
    known: dict[str, Any] = {} if seen is None else seen
    for record, key, text in zip(records, paths, texts, strict=True):
        if key is None or type(text) is not str:
            continue
        path = known.get(key, _UNSEEN)
        if path is _UNSEEN:
            path = json.loads(key)
            path = known[key] = path if _well_formed(path) else None
        if path is not None:
            _put_text(record, path, text)


def _put_text(record: Any, path: list[str | int], text: str) -> None:
    """:func:`with_text` in place, ``path`` known well formed."""
    *steps, last = path
    parent = _parent_at(record, steps)
    if type(parent) is dict and last not in parent:
        parent[last] = text


def _parent_at(record: Any, steps: list[str | int]) -> Any:
    """What ``steps`` lead to in ``record``, walked as PostgreSQL's ``#>`` walks a path (a key
    by its text, an index of a list), or ``None`` where a step finds nothing."""
    parent = record
    for step in steps:
        kind = type(parent)
        if kind is dict:
            parent = parent.get(str(step))
        elif kind is list and type(step) is int and step < len(parent):
            parent = parent[step]
        else:
            return None
    return parent


def _well_formed(path: Any) -> bool:
    """Whether a block's ``"text_at"`` has the form this module writes, the only one
    :func:`with_text` puts the text back by (on every database and both read paths): a
    non-empty list of keys (ASCII letters and ``_``) and indexes (integers from 0, under
    10^9), the last a key. Any other ``"text_at"`` (a block a host wrote through the API) is
    ignored: the record reads as it is, never an error."""
    if type(path) is not list or not path or type(path[-1]) is not str:
        return False
    for step in path:
        kind = type(step)
        if kind is str:
            if not (step.isascii() and step.replace("_", "a").isalpha()):
                return False
        elif kind is not int or not 0 <= step < 10**9:
            return False
    return True


def _head_text(head: Any) -> str | None:
    """The ``text`` of a message's first content block ``head`` when that is a text block with
    a string ``text`` (where :func:`record_blocks` puts it), else ``None``."""
    if type(head) is not dict and not isinstance(head, Mapping):
        return None
    if head.get("type") != "text":
        return None
    text = head.get("text")
    return text if type(text) is str else None


def find_block(content: Any, block_type: str) -> Mapping[str, Any] | None:
    """The first block of ``content`` whose ``type`` is ``block_type``, or ``None``.

    Args:
        content: a message's content (a list of blocks; ``None`` or empty reads as none).
        block_type: the ``type`` sought.

    Returns:
        The block (a mapping), as stored.
    """
    for block in content or ():
        if isinstance(block, Mapping) and block.get("type") == block_type:
            return block
    return None
