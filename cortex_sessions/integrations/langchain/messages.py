"""A LangChain message as a cortex message, and back (docs/design.md §19.1, §19.2).

Every :class:`~langchain_core.messages.BaseMessage` is one cortex
:class:`~cortex_sessions.models.Message`:

- ``role``: ``human`` → ``user``, ``ai`` → ``assistant``, ``system`` → ``system``, ``tool`` and
  ``function`` → ``tool``; a ``ChatMessage`` keeps its role when it is ``user``, ``assistant`` or
  ``system`` (``developer`` → ``system``), else ``tool``. Chunks map as their message type.
- ``content``: a ``text`` block with the message's readable text when it has any (so
  ``last_message``, search and references read naturally), then one ``{"type":
  "langchain_message", "message": {"type": ..., "data": {...}}}`` block keeping the message
  verbatim (its ``model_dump(mode="json")``: content, ``tool_calls``, ``id``, ``name``,
  ``additional_kwargs``, ``response_metadata``, ``usage_metadata``, …), so it reads back equal
  to what was stored. The text is stored once: where the message holds it as one string (its
  ``content``, or the one text part of a content list that is all its text), the block keeps
  the message without that string and says where it goes (``"text_at": ["data", "content"]``,
  :mod:`..blocks`). A message holding text PostgreSQL cannot store (NUL, lone surrogates) or
  nested too deep is kept as JSON text (``"message_json"``) instead.
- Messages other writers added (the REST API, the admin) read back by role: ``user`` as a
  ``HumanMessage``, ``assistant`` as an ``AIMessage``, ``system`` as a ``SystemMessage``, with
  their text; a ``tool`` message without the block (no ``tool_call_id`` to give it) is skipped.

Pure functions: nothing here reads or writes the database.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    messages_from_dict,
)

from ...content import content_text
from ...exceptions import InvalidContent, InvalidInput
from ...services.messages import _BuiltMessage
from ..blocks import BAD_RECORD, Path, find_block, record_blocks, record_message, stored_record

__all__ = [
    "MESSAGE_BLOCK_TYPE",
    "built_message",
    "decode_records",
    "from_cortex",
    "message_id",
    "to_cortex",
]

#: The ``type`` of the content block that keeps a LangChain message verbatim.
MESSAGE_BLOCK_TYPE = "langchain_message"

_TYPE_ROLES = {
    "human": "user",
    "ai": "assistant",
    "system": "system",
    "tool": "tool",
    "function": "tool",
}
_CHAT_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
_READ_BACK = {"user": HumanMessage, "assistant": AIMessage, "system": SystemMessage}


def _role(message: BaseMessage) -> str:
    kind = message.type.removesuffix("MessageChunk").lower()
    if kind == "chat":
        role = getattr(message, "role", None)
        return _CHAT_ROLES.get(role, "tool") if isinstance(role, str) else "tool"
    return _TYPE_ROLES.get(kind, "tool")


def _as_json(value: Any) -> str:
    try:
        return json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as error:
        raise InvalidContent(f"content is not valid JSON: {error}", field="content") from None


def to_cortex(message: BaseMessage) -> dict[str, Any]:
    """The cortex message a LangChain message is stored as (docs/design.md §19.2).

    Args:
        message: any ``BaseMessage`` but ``RemoveMessage``.

    Returns:
        A mapping for :func:`cortex_sessions.services.append_messages`: ``role``, ``content``.

    Raises:
        InvalidInput: ``message`` is not a ``BaseMessage``, or is a ``RemoveMessage`` (an
            instruction to a graph's reducer, not a message).
        InvalidContent: the message does not serialise to JSON (a value pydantic cannot dump).
    """
    role, text, record = _parts(message)
    content = record_blocks(
        text,
        MESSAGE_BLOCK_TYPE,
        "message",
        record,
        as_json=_as_json,
        text_at=_text_at(record, text),
    )
    return {"role": role, "content": content}


def built_message(message: BaseMessage, now: datetime) -> _BuiltMessage:
    """:func:`to_cortex`'s message, validated and encoded once, for
    :func:`cortex_sessions.services.messages.append_built` (:func:`.blocks.record_message`):
    what the history's :meth:`add_messages` appends.

    Args:
        message: any ``BaseMessage`` but ``RemoveMessage``.
        now: its ``created_at``.

    Raises:
        InvalidInput, InvalidContent: as :func:`to_cortex`.
        MessageTooLarge: over ``MAX_MESSAGE_BYTES``; and what ``TOKEN_COUNTER`` raises, as
            the append would.
    """
    role, text, record = _parts(message)
    return record_message(
        role,
        text,
        MESSAGE_BLOCK_TYPE,
        "message",
        record,
        as_json=_as_json,
        now=now,
        text_at=_text_at(record, text),
    )


def _text_at(record: dict[str, Any], text: str) -> Path | None:
    """Where ``record`` (``{"type", "data"}``) holds the message's ``text`` as one string: its
    ``content``, or the first text part of a content list whose text it is; else ``None``."""
    content = record["data"].get("content")
    if isinstance(content, str):
        return ("data", "content") if content == text else None
    if isinstance(content, list):
        for index, part in enumerate(content):
            if isinstance(part, dict) and part.get("type") == "text" and part.get("text") == text:
                return ("data", "content", index, "text")
    return None


def _parts(message: BaseMessage) -> tuple[str, str, dict[str, Any]]:
    """``(role, readable text, the record kept verbatim)`` of a message (see :func:`to_cortex`)."""
    if isinstance(message, RemoveMessage):
        raise InvalidInput(
            "A RemoveMessage removes a message from a graph's state; it is not one to store.",
            field="messages",
        )
    if not isinstance(message, BaseMessage):
        raise InvalidInput(
            f"Every message must be a LangChain BaseMessage, not {type(message).__name__}.",
            field="messages",
        )
    if _non_finite(vars(message)):
        # model_dump(mode="json") writes NaN and the infinities as null: stored, they would read
        # back as None. JSON has neither (docs/design.md §12.4).
        raise InvalidContent(
            "content is not valid JSON: NaN and infinity are not JSON numbers.", field="content"
        )
    try:
        data = message.model_dump(mode="json")
    except (TypeError, ValueError) as error:
        raise InvalidContent(f"content is not valid JSON: {error}", field="content") from None
    return _role(message), str(message.text), {"type": message.type, "data": data}


def _non_finite(value: Any) -> bool:
    """Whether ``value`` (a message's fields: dicts, lists, scalars, nested models' dicts not
    looked into) holds a float that is NaN or infinite at any depth."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is float:
            if not math.isfinite(item):
                return True
        elif kind is dict:
            stack.extend(item.values())
        elif kind is list or kind is tuple:
            stack.extend(item)
        elif isinstance(item, float) and not math.isfinite(item):
            return True
        elif isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return False


def decode_records(records: list[Any]) -> list[BaseMessage]:
    """LangChain's ``messages_from_dict`` of the records kept in ``langchain_message`` blocks,
    refusing a ``RemoveMessage``: :func:`to_cortex` never stores one (it is an instruction to a
    reducer, not a message of the conversation), so a block holding one is a host's, read as
    another writer's message (docs/design.md §19.2).

    Args:
        records: ``{"type": ..., "data": {...}}`` mappings, their text put back.

    Returns:
        The messages, in order.

    Raises:
        ValueError: a record is a ``RemoveMessage``. And what ``messages_from_dict`` raises for
            a record it cannot read (:data:`..blocks.BAD_RECORD`).
    """
    messages = messages_from_dict(records)
    if RemoveMessage in set(map(type, messages)):  # the type "remove" makes exactly this class
        raise ValueError("A RemoveMessage is not a message of the conversation.")
    return messages


def from_cortex(role: str, content: Any) -> BaseMessage | None:
    """The LangChain message a cortex message reads back as, or ``None`` (see the module docs).

    Args:
        role: the cortex message's role.
        content: its content (a list of blocks).

    Returns:
        The stored message, equal to the one :func:`to_cortex` was given; or one built from
        the text of a ``user``, ``assistant`` or ``system`` message another writer added, or
        whose block keeps no message LangChain reads (``"message": null``, a host's block:
        :data:`..blocks.BAD_RECORD`); ``None`` for anything else. Never raises.
    """
    block = find_block(content, MESSAGE_BLOCK_TYPE)
    if block is not None:
        try:
            return decode_records([stored_record(block, "message", content)])[0]
        except BAD_RECORD:
            pass  # no record this adapter wrote: read as another writer's message
    kind = _READ_BACK.get(role)
    if kind is None:
        return None
    text = content_text(content)
    return kind(content=text) if text else None


def message_id(content: Any) -> str | None:
    """The LangChain ``id`` of the message a cortex message's content keeps, or ``None``."""
    block = find_block(content, MESSAGE_BLOCK_TYPE)
    if block is None:
        return None
    stored = stored_record(block, "message", content)
    value = stored.get("data", {}).get("id") if isinstance(stored, Mapping) else None
    return value if isinstance(value, str) else None
