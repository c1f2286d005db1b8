"""ADK events as cortex messages and back (docs/design.md §13.3).

An event is stored as one message: ``user`` when the user wrote it, ``tool`` when it carries
function calls or responses, else ``assistant``; a text block with the event's text, then a
``{"type": "adk_event", ...}`` block with the event's JSON verbatim (or as its JSON text when it
holds text PostgreSQL cannot store). Pure functions: nothing here reads or writes the database.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any, cast

from google.adk.events.event import Event
from google.genai import types

from cortex_sessions.content import content_text
from cortex_sessions.exceptions import InvalidInput
from cortex_sessions.integrations.blocks import find_block, text_blocks, verbatim_block
from cortex_sessions.models import Message

__all__ = ["EVENT_BLOCK_TYPE", "event_to_message", "message_to_event"]

#: The ``type`` of the content block that keeps an ADK event verbatim.
EVENT_BLOCK_TYPE = "adk_event"


def _timestamp(value: dt.datetime) -> float:
    return value.timestamp()


def _when(timestamp: float) -> dt.datetime:
    """The aware UTC time of an ADK ``timestamp`` (seconds since the epoch).

    Raises:
        InvalidInput: it is not a finite time between the years 1 and 9999 (field
            ``timestamp``); nothing is written.
    """
    try:
        return dt.datetime.fromtimestamp(timestamp, tz=dt.UTC)
    except (OverflowError, ValueError, OSError):
        raise InvalidInput(
            f"timestamp must be seconds since the epoch within the years 1-9999; got {timestamp!r}.",
            field="timestamp",
        ) from None


def _event_text(event: Event) -> str:
    content = event.content
    if content is None or not content.parts:
        return ""
    return "\n".join(
        part.text for part in content.parts if part.text and not getattr(part, "thought", False)
    )


def _event_role(event: Event) -> str:
    if event.author == "user":
        return "user"
    parts = (event.content.parts if event.content else None) or []
    if any(part.function_call or part.function_response for part in parts):
        return "tool"
    return "assistant"


def event_to_message(event: Event) -> dict[str, Any]:
    """The message an ADK event is stored as (docs/design.md §13.3).

    Returns:
        A mapping for :func:`cortex_sessions.services.append_messages`.
    """
    content = text_blocks(_event_text(event))
    # The JSON ADK's own database store keeps (its schema v1 ``event_data``).
    data = event.model_dump(mode="json", exclude_none=True)
    content.append(verbatim_block(EVENT_BLOCK_TYPE, "event", data, as_json=json.dumps))
    return {"role": _event_role(event), "content": content, "created_at": _when(event.timestamp)}


def message_to_event(message: Message, app_name: str) -> Event | None:
    """The event a message reads back as; ``None`` for a message that is no event (§13.3).

    Messages other writers add (the REST API, the admin) read as plain text events: a ``user``
    message as the user's, an ``assistant`` message as the app's; other roles are skipped.
    """
    return _event_of(
        message.role,
        message.content,
        cast(int, message.seq),  # messages of a session always have one
        message.created_at,
        message.session_id,
        app_name,
    )


def _event_of(
    role: str, content: Any, seq: int, created_at: dt.datetime, session_pk: Any, app_name: str
) -> Event | None:
    block = find_block(content, EVENT_BLOCK_TYPE)
    return _event_from(role, block, content, seq, _timestamp(created_at), session_pk, app_name)


def _event_from(
    role: str,
    block: Any,
    content: Any,
    seq: int,
    timestamp: float,
    session_pk: Any,
    app_name: str,
) -> Event | None:
    """The event of a message whose first ``adk_event`` block is ``block`` (``None``: it has
    none); ``timestamp`` is its ``created_at`` in seconds since the epoch."""
    if block is not None:
        if "event" in block:
            return Event.model_validate(block["event"])
        return Event.model_validate_json(block["event_json"])
    if role not in ("user", "assistant"):
        return None
    text = content_text(content)
    if not text:
        return None
    return Event(
        id=f"cortex-{session_pk}-{seq}",
        invocation_id="",
        author="user" if role == "user" else app_name,
        content=types.Content(
            role="user" if role == "user" else "model", parts=[types.Part(text=text)]
        ),
        timestamp=timestamp,
    )
