"""The content blocks the runtime integrations write and read (docs/design.md §13.2, §13.3).

Both adapters store one runtime record (an OpenAI Agents SDK item, an ADK event) as one message:
a text block with the record's readable text, when it has any (so ``last_message`` reads
naturally), then one block that keeps the record verbatim — as JSON where it passes the content
rule (docs/design.md §12.4), else as its JSON text, which escapes what PostgreSQL cannot store.
Pure functions: nothing here reads or writes the database or imports an SDK.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..content import MAX_JSON_DEPTH, check_json_value
from ..exceptions import InvalidContent, InvalidInput, InvalidText, NulCharacter, TooManyKeys

if TYPE_CHECKING:
    from ..services.messages import _BuiltMessage

__all__ = ["find_block", "is_storable", "record_message", "text_blocks", "verbatim_block"]


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
) -> _BuiltMessage:
    """The message keeping a record, validated and encoded for
    :func:`cortex_sessions.services.messages.append_built`: its content is
    ``text_blocks(text)`` then ``verbatim_block(block_type, key, value, as_json=as_json)``,
    walked by the content rule once, where :func:`verbatim_block` and then the append would
    walk the record twice (docs/design.md §12.4, §19.2, §19.3).

    Args:
        role: the message's role.
        text: the record's readable text (:func:`text_blocks`).
        block_type, key, value, as_json: as for :func:`verbatim_block`.
        now: the message's ``created_at``.

    Returns:
        The validated message.

    Raises:
        MessageTooLarge: over ``MAX_MESSAGE_BYTES``; InvalidContent: ``value`` is not JSON
            (``as_json`` raises it); whatever ``as_json`` and ``TOKEN_COUNTER`` raise, as the
            append would.
    """
    from ..services.messages import _build_message  # models: once the app registry is ready

    head = text_blocks(text)
    try:
        return _build_message(
            {"role": role, "content": [*head, {"type": block_type, key: value}]}, 0, now
        )
    except _UNSTORABLE:
        # Not storable as it is (or not JSON: as_json says so): as JSON text.
        pass
    block = {"type": block_type, f"{key}_json": as_json(value)}
    return _build_message({"role": role, "content": [*head, block]}, 0, now)


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
