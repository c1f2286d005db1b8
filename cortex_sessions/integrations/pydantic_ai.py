"""Pydantic AI message history in cortex sessions (docs/design.md §19.3).

Install with the ``[pydantic-ai]`` extra. Use::

    from cortex_sessions.integrations.pydantic_ai import load_history, save_messages

    history = load_history(scope="org=acme/user=42", agent_id="support-bot")
    result = agent.run_sync("Hello", message_history=history)
    save_messages(scope="org=acme/user=42", agent_id="support-bot", messages=result.new_messages())

Every Pydantic AI ``ModelMessage`` (a ``ModelRequest`` or a ``ModelResponse``) is one cortex
:class:`~cortex_sessions.models.Message`:

- ``role``: a response is ``assistant``; a request with a user prompt is ``user``, one with tool
  returns or retry feedback (and no user prompt) ``tool``, one with only system prompts ``system``.
- ``content``: a ``text`` block with its readable text (the user prompt, the response's text, a
  tool's return) when it has any, then one ``{"type": "pydantic_ai_message", "message": {...}}``
  block holding the message as ``ModelMessagesTypeAdapter`` dumps it (JSON mode), so
  :func:`load_history` validates it back equal to what was saved. The text is stored once:
  where one part holds it all as its string ``content`` (a user prompt, a response's one text
  part, a tool's string return), the block keeps the message without that string and says
  where it goes (``"text_at": ["parts", 0, "content"]``, :mod:`.blocks`). A message holding text
  PostgreSQL cannot store (NUL, lone surrogates) or nested too deep is kept as JSON text
  (``"message_json"``) instead.
- Messages other writers added read back by role: ``user`` as a request with a user prompt,
  ``assistant`` as a response with one text part, ``system`` as a request with a system prompt;
  ``tool`` messages without the block are skipped.

Both functions go through the services (docs/design.md §7.1), so the scope rules hold, except
that on PostgreSQL :func:`load_history` reads the history with :mod:`.block_history`'s statement,
which checks the scope, expiry and (for a pinned session) the agent itself; and
:func:`save_messages` checks a pinned session's agent once per process (:data:`_CHECKED`). Their
async twins run them off the event loop as the services' own twins do (§13.1).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from asgiref.sync import sync_to_async
from django.utils import timezone
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_core import from_json

from .. import services
from ..conf import app_settings
from ..content import content_text
from ..exceptions import InvalidContent, InvalidInput, SessionNotFound
from ..models import Session
from ..scope import Scope, as_scope
from ..services.messages import _BuiltMessage, append_built
from . import block_history
from .blocks import BAD_RECORD, Path, find_block, record_blocks, record_message, stored_record

__all__ = [
    "MESSAGE_BLOCK_TYPE",
    "aload_history",
    "asave_messages",
    "from_cortex",
    "load_history",
    "save_messages",
    "to_cortex",
]

#: The ``type`` of the content block that keeps a Pydantic AI message verbatim.
MESSAGE_BLOCK_TYPE = "pydantic_ai_message"
#: Messages read per query when the history is read.
_PAGE = 1000


def _as_json(value: Any) -> str:
    try:
        return json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as error:
        raise InvalidContent(f"content is not valid JSON: {error}", field="content") from None


def _role_and_text(message: ModelMessage) -> tuple[str, str]:
    if isinstance(message, ModelResponse):
        return "assistant", "".join(p.content for p in message.parts if isinstance(p, TextPart))
    prompts = [p for p in message.parts if isinstance(p, UserPromptPart)]
    if prompts:
        texts = [p.content for p in prompts if isinstance(p.content, str)]
        texts += [
            item
            for p in prompts
            if not isinstance(p.content, str)
            for item in p.content
            if isinstance(item, str)
        ]
        return "user", "\n".join(texts)
    others = [p for p in message.parts if not isinstance(p, SystemPromptPart)]
    if others:  # tool returns, retry feedback: what the model is told
        return "tool", "\n".join(_part_text(part) for part in others)
    systems = [p.content for p in message.parts if isinstance(p, SystemPromptPart)]
    return "system", "\n".join(systems)


def _part_text(part: Any) -> str:
    if isinstance(part, ToolReturnPart):
        try:
            return part.model_response_str()
        except ValueError:  # content Pydantic cannot write as JSON (a lone surrogate): as Python
            # writes it; the readable copy replaces what is not text (blocks.text_blocks)
            return str(part.content)
    response = getattr(part, "model_response", None)
    if callable(response):
        text = response()
        return text if isinstance(text, str) else ""
    content = getattr(part, "content", None)
    return content if isinstance(content, str) else ""


def to_cortex(message: ModelMessage) -> dict[str, Any]:
    """The cortex message a Pydantic AI message is stored as (docs/design.md §19.3).

    Args:
        message: a ``ModelRequest`` or ``ModelResponse``.

    Returns:
        A mapping for :func:`cortex_sessions.services.append_messages`: ``role``, ``content``.

    Raises:
        InvalidInput: ``message`` is neither.
        InvalidContent: it does not dump to JSON.
    """
    role, text, data = _parts(message)
    content = record_blocks(
        text, MESSAGE_BLOCK_TYPE, "message", data, as_json=_as_json, text_at=_text_at(data, text)
    )
    return {"role": role, "content": content}


def _text_at(data: Any, text: str) -> Path | None:
    """Where the dumped message ``data`` holds its readable ``text`` as one part's string
    ``content``: ``("parts", index, "content")``; else ``None``."""
    for index, part in enumerate(data.get("parts") or ()):
        if isinstance(part, dict) and part.get("content") == text:
            return ("parts", index, "content")
    return None


def _parts(message: ModelMessage) -> tuple[str, str, Any]:
    """``(role, readable text, the message as dumped)`` (see :func:`to_cortex`)."""
    if not isinstance(message, ModelRequest | ModelResponse):
        raise InvalidInput(
            "Every message must be a Pydantic AI ModelRequest or ModelResponse.",
            field="messages",
        )
    try:
        data = ModelMessagesTypeAdapter.dump_python([message], mode="json")[0]
    except (TypeError, ValueError) as error:
        raise InvalidContent(f"content is not valid JSON: {error}", field="content") from None
    return (*_role_and_text(message), data)


def _built(message: ModelMessage, now: datetime) -> _BuiltMessage:
    """:func:`to_cortex`'s message, validated and encoded once (:func:`.blocks.record_message`),
    created at ``now``: what :func:`save_messages` appends."""
    role, text, data = _parts(message)
    built = record_message(
        role,
        text,
        MESSAGE_BLOCK_TYPE,
        "message",
        data,
        as_json=_as_json,
        now=now,
        text_at=_text_at(data, text),
    )
    # Pydantic's JSON-mode dump writes a lone surrogate in an object key (a tool call's
    # argument name, say) as U+FFFD replacement characters, which would read back as another
    # key: refused, as the LangChain adapter refuses it. Only a dump holding U+FFFD is looked at.
    if ("\ufffd" in built.content_json or "\\ufffd" in built.content_json) and _surrogate_key(
        ModelMessagesTypeAdapter.dump_python([message])[0]
    ):
        raise InvalidContent(
            "content has an object key with a lone surrogate, which is not text.",
            field="content",
        )
    return built


def _surrogate_key(value: Any) -> bool:
    """Whether ``value`` (a Python-mode dump: dicts, lists, scalars) has a dict key holding a
    lone surrogate at any depth."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, child in item.items():
                if isinstance(key, str) and not key.isascii():
                    try:
                        key.encode("utf-8")
                    except UnicodeEncodeError:
                        return True
                stack.append(child)
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return False


def from_cortex(role: str, content: Any) -> ModelMessage | None:
    """The Pydantic AI message a cortex message reads back as, or ``None`` (see the module docs).

    A block that keeps no message ``ModelMessagesTypeAdapter`` validates (``"message": null``,
    a host's block: :data:`.blocks.BAD_RECORD`) counts as none: the message reads by its role
    and text, as another writer's. Never raises (docs/design.md §19.3).
    """
    block = find_block(content, MESSAGE_BLOCK_TYPE)
    if block is not None:
        try:
            data = stored_record(block, "message", content)
            return ModelMessagesTypeAdapter.validate_python([data])[0]
        except BAD_RECORD:
            pass  # no record this adapter wrote: read as another writer's message
    text = content_text(content)
    if not text:
        return None
    if role == "user":
        return ModelRequest(parts=[UserPromptPart(content=text)])
    if role == "assistant":
        return ModelResponse(parts=[TextPart(content=text)])
    if role == "system":
        return ModelRequest(parts=[SystemPromptPart(content=text)])
    return None


def save_messages(
    *,
    scope: Scope | str,
    agent_id: str,
    messages: Sequence[ModelMessage],
    session_id: uuid.UUID | str | None = None,
) -> Session:
    """Append a run's messages (``result.new_messages()``) to a cortex session, in order.

    Args:
        scope: the tenant scope.
        agent_id: the host's agent identifier.
        messages: Pydantic AI messages; an empty sequence appends no message.
        session_id: the session to append to (within ``scope``, ``agent_id``'s), or ``None``
            for the agent's default session at exactly ``scope``, created on first use (§6.1).

    A pinned session is checked against ``agent_id`` (``resolve_session``) on the first save
    to it in this process; later saves append at once (on PostgreSQL one statement, whose own
    checks refuse a session that is missing, out of scope, expired or archived).

    Returns:
        The session, with its counters as of the last append.

    Raises:
        NoScope, InvalidScope, InvalidAgentId.
        InvalidInput: a message is not a ``ModelRequest`` or ``ModelResponse``; nothing is written.
        InvalidContent, MessageTooLarge: a message cannot be stored; nothing is written.
        SessionNotFound: ``session_id`` is missing, out of scope or another agent's.
        SessionArchived: the session is archived (docs/design.md §11.2).
    """
    now = timezone.now()  # the messages' created_at
    rows = [_built(message, now) for message in messages]
    batch = app_settings.MAX_MESSAGES_PER_APPEND
    pk = _as_uuid(session_id) if session_id is not None else None
    if rows and pk is not None and isinstance(agent_id, str) and (pk, agent_id) in _CHECKED:
        session_pk = pk  # the append checks the scope (and that it lives) in its statement
    else:
        session, _ = services.resolve_session(scope=scope, agent_id=agent_id, session_id=session_id)
        session_pk = session.pk
        if pk is not None:
            _remember(pk, agent_id)
    for start in range(0, len(rows), batch):
        session = append_built(
            scope=scope, session_id=session_pk, built=rows[start : start + batch], instances=False
        ).session
    return session


#: Pinned sessions :func:`save_messages` found to be an agent's, as ``(session id, agent
#: id)``: a session's agent never changes (no service changes it, docs/design.md §3), so a
#: later save to it appends at once, one statement on PostgreSQL, whose own checks refuse a
#: session that is missing, out of scope, expired or archived (docs/design.md §19.3).
_CHECKED: dict[tuple[uuid.UUID, str], None] = {}
#: Most entries :data:`_CHECKED` holds; it starts afresh when full.
_CHECKED_MAX = 10_000


def _remember(pk: uuid.UUID, agent_id: str) -> None:
    if len(_CHECKED) >= _CHECKED_MAX:
        _CHECKED.clear()
    _CHECKED[(pk, agent_id)] = None


def load_history(
    *, scope: Scope | str, agent_id: str, session_id: uuid.UUID | str | None = None
) -> list[ModelMessage]:
    """The session's messages as Pydantic AI messages, oldest first, for ``message_history=``.

    Args:
        scope, agent_id, session_id: as for :func:`save_messages` (without ``session_id``, the
            default session, created on first use: an empty history).

    Returns:
        The messages :func:`save_messages` stored, equal to what was saved, plus messages other
        writers added (see the module docs).

    Raises:
        NoScope, InvalidScope, InvalidAgentId.
        SessionNotFound: ``session_id`` is missing, out of scope, expired or another agent's.
    """
    services.check_agent_id(agent_id)  # first, as the service checks it
    where = as_scope(scope)
    fast = block_history.serves(where)
    if fast and session_id is not None and (pk := _as_uuid(session_id)) is not None:
        # a pinned session: the agent's check is in the read's own statement (§19.3)
        loaded = _read(pk, where, agent_id)
        if loaded is not None:
            return loaded
    session, _ = services.resolve_session(scope=where, agent_id=agent_id, session_id=session_id)
    if fast:
        loaded = _read(session.pk, where, None)
        if loaded is None:
            raise SessionNotFound()
        return loaded
    history: list[ModelMessage] = []
    after = 0
    while True:
        page = services.list_messages(
            scope=where, session_id=session.pk, limit=_PAGE, after_seq=after
        )
        history.extend(m for row in page if (m := from_cortex(row.role, row.content)) is not None)
        if len(page) < _PAGE:
            return history
        after = page[-1].seq or after


def _as_uuid(value: uuid.UUID | str) -> uuid.UUID | None:
    """``value`` as a UUID, or ``None`` when it is not one (the service then says why)."""
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(value)
    except (TypeError, ValueError, AttributeError):
        return None


#: The text of a message whose one part holds it (the usual request and response: its first
#: part's ``content``) goes back into the stored message's JSON text, which pydantic then
#: validates as JSON (``validate_json``, as the plain-SQL floor does: no Python tree of the
#: messages first). PostgreSQL prints a message's keys shortest first, so ``"kind"`` then
#: ``"parts"`` open it; a message of any other shape is parsed and given its text as
#: :func:`from_cortex` gives it (:class:`.block_history.Splice`).
_SPLICE = block_history.Splice(
    path='["parts", 0, "content"]',
    prefixes=('{"kind": "request", "parts": [{', '{"kind": "response", "parts": [{'),
    decode_json=ModelMessagesTypeAdapter.validate_json,
)


def _read(pk: uuid.UUID, scope: Scope, agent_id: str | None) -> list[ModelMessage] | None:
    """The history of session ``pk`` on PostgreSQL (:func:`.block_history.read_history`):
    the messages of the usual shape validated from their JSON text with the text put back
    (:data:`_SPLICE`), the others parsed (``pydantic_core.from_json``), given their text and
    validated (``validate_python``, as :func:`from_cortex` validates one); ``None`` when the
    session is not visible (or, given ``agent_id``, not that agent's)."""
    return block_history.read_history(
        pk,
        scope,
        block_type=MESSAGE_BLOCK_TYPE,
        key="message",
        decode=ModelMessagesTypeAdapter.validate_python,
        convert=_convert,
        agent_id=agent_id,
        parse=from_json,
        splice=_SPLICE,
    )


def _convert(role: str, block: Any, content: Any) -> ModelMessage | None:
    """:func:`from_cortex` of a message read message by message
    (:func:`.block_history.read_history`) when its content is given; else its block's record,
    kept whole, validated.

    Raises:
        ValueError, TypeError, LookupError (:data:`.blocks.BAD_RECORD`): ``content`` is
            ``None`` and the block keeps no message pydantic validates (the read then asks
            again with the content).
    """
    if content is None:
        data = stored_record(block, "message", [block])
        return ModelMessagesTypeAdapter.validate_python([data])[0]
    return from_cortex(role, content)


async def asave_messages(
    *,
    scope: Scope | str,
    agent_id: str,
    messages: Sequence[ModelMessage],
    session_id: uuid.UUID | str | None = None,
) -> Session:
    """:func:`save_messages`, off the event loop (same arguments, result and errors)."""
    return await sync_to_async(save_messages, thread_sensitive=True)(
        scope=scope, agent_id=agent_id, messages=messages, session_id=session_id
    )


async def aload_history(
    *, scope: Scope | str, agent_id: str, session_id: uuid.UUID | str | None = None
) -> list[ModelMessage]:
    """:func:`load_history`, off the event loop (same arguments, result and errors)."""
    return await sync_to_async(load_history, thread_sensitive=True)(
        scope=scope, agent_id=agent_id, session_id=session_id
    )
