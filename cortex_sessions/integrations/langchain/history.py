"""``CortexChatMessageHistory``: LangChain's chat history over a cortex session (docs/design.md §19.2)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from django.utils import timezone
from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import BaseMessage

from ... import services
from ...conf import app_settings
from ...exceptions import SessionNotFound
from ...models import Session
from ...scope import Scope, as_scope
from ...services.messages import append_built
from .. import block_history
from ..blocks import stored_record
from ..sessions import on_session
from .messages import MESSAGE_BLOCK_TYPE, built_message, decode_records, from_cortex

__all__ = ["CortexChatMessageHistory"]

#: Messages read per query when the history is read.
_PAGE = 1000
T = TypeVar("T")


class CortexChatMessageHistory(BaseChatMessageHistory):
    """A LangChain chat message history stored as a cortex session (docs/design.md §19.2).

    Implements ``BaseChatMessageHistory``: the :attr:`messages` property, :meth:`add_messages`,
    :meth:`clear` and their async twins :meth:`aget_messages`, :meth:`aadd_messages`,
    :meth:`aclear` (which run the services off the event loop with
    ``sync_to_async(thread_sensitive=True)``, as the services' own twins do, §13.1). Every
    message is one cortex message (:mod:`cortex_sessions.integrations.langchain.messages`), so the
    conversation shows in the admin, the API, search and references like any other, and reads
    back equal to what was added, in order.

    Which session: ``session_id`` pins one, which must lie within ``scope`` and belong to
    ``agent_id``; without it the history follows the agent's default session at exactly
    ``scope``, resolved afresh on each operation and created on first use (§6.1), as the OpenAI
    Agents adapter does (§13.2).

    Args:
        scope: the tenant scope (a ``Scope`` or its canonical string).
        agent_id: the host's agent identifier.
        session_id: a cortex session id to pin (``uuid.UUID`` or string), or ``None``.

    Raises:
        NoScope, InvalidScope: at construction, for a missing or malformed scope.
        InvalidAgentId, NulCharacter, InvalidText: at construction, for a bad agent id.
        SessionNotFound: on use of a pinned session that is missing, out of scope or another
            agent's.
    """

    def __init__(
        self, *, scope: Scope | str, agent_id: str, session_id: uuid.UUID | str | None = None
    ) -> None:
        self.scope = as_scope(scope)
        self.agent_id = services.check_agent_id(agent_id)
        self._pinned = session_id
        self._current_pk: uuid.UUID | None = None

    @property
    def session_id(self) -> uuid.UUID:
        """The cortex session's id: the pinned one, or the default as of the latest operation
        (resolved on the spot, synchronously, before the first)."""
        if self._current_pk is None:
            self._resolve()
        assert self._current_pk is not None
        return self._current_pk

    def _resolve(self) -> Session:
        session, _ = services.resolve_session(
            scope=self.scope, agent_id=self.agent_id, session_id=self._pinned
        )
        self._current_pk = session.pk
        return session

    def _on_session(self, operation: Callable[[uuid.UUID], T]) -> T:
        """Run ``operation(pk)`` on the session this history stores to (the pinned session,
        checked once; or the default, resolved for every call and once more when it was
        deleted or archived meanwhile)."""
        return on_session(
            operation,
            pinned=self._pinned is not None,
            current_pk=self._current_pk,
            resolve=self._resolve,
        )

    # -- BaseChatMessageHistory -------------------------------------------------------------------

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """Every message of the session, oldest first (see the module docs of
        :mod:`~cortex_sessions.integrations.langchain.messages` for messages other writers added).

        Raises:
            SessionNotFound: the pinned session is missing, out of scope or another agent's.
        """
        scope = self.scope
        return self._on_session(lambda pk: _read(scope, pk))

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Append ``messages``, in order; an empty sequence writes nothing.

        Up to ``MAX_MESSAGES_PER_APPEND`` messages are one append, in one transaction; more are
        validated together, then written as consecutive appends of at most that many
        (docs/design.md §12.6).

        Raises:
            InvalidInput: a message is not a ``BaseMessage`` or is a ``RemoveMessage``;
                nothing is written.
            InvalidContent, MessageTooLarge: a message does not serialise or is over
                ``MAX_MESSAGE_BYTES``; nothing is written.
            SessionNotFound: the pinned session is missing, out of scope or another agent's.
            SessionArchived: the pinned session is archived (docs/design.md §11.2).
        """
        now = timezone.now()  # the messages' created_at
        built = [built_message(message, now) for message in messages]
        if not built:
            return
        batch, scope = app_settings.MAX_MESSAGES_PER_APPEND, self.scope

        def append(pk: uuid.UUID) -> None:
            for start in range(0, len(built), batch):
                append_built(
                    scope=scope, session_id=pk, built=built[start : start + batch], instances=False
                )

        self._on_session(append)

    def clear(self) -> None:
        """Delete every message; the session itself stays, with zero messages.

        Raises:
            SessionNotFound: the pinned session is missing, out of scope or another agent's.
            SessionArchived: the pinned session is archived.
        """
        scope = self.scope

        def clear(pk: uuid.UUID) -> None:
            services.clear_messages(scope=scope, session_id=pk)

        self._on_session(clear)

    async def aget_messages(self) -> list[BaseMessage]:
        """:attr:`messages`, off the event loop (same result and errors)."""
        return await sync_to_async(lambda: self.messages, thread_sensitive=True)()

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        """:meth:`add_messages`, off the event loop (same rules and errors)."""
        await sync_to_async(self.add_messages, thread_sensitive=True)(messages)

    async def aclear(self) -> None:
        """:meth:`clear`, off the event loop (same rules and errors)."""
        await sync_to_async(self.clear, thread_sensitive=True)()

    def __repr__(self) -> str:
        which = self._pinned if self._pinned is not None else "<default>"
        return (
            f"CortexChatMessageHistory(scope={self.scope.canonical!r}, "
            f"agent_id={self.agent_id!r}, session_id={str(which)!r})"
        )


def _read(scope: Scope, pk: uuid.UUID) -> list[BaseMessage]:
    """Every message of session ``pk`` that reads as a LangChain message, in ``seq`` order.

    On PostgreSQL a page of up to :data:`.block_history.PAGE` messages per statement, the
    stored messages decoded at once (:func:`.block_history.read_history`, docs/design.md
    §19.2); elsewhere one :func:`~cortex_sessions.services.list_messages` page of ``_PAGE`` at
    a time. Both return the same messages.

    Raises:
        SessionNotFound: the session is missing, out of scope or expired.
    """
    if block_history.serves(scope):
        messages = block_history.read_history(
            pk,
            scope,
            block_type=MESSAGE_BLOCK_TYPE,
            key="message",
            decode=decode_records,
            convert=_convert,
        )
        if messages is None:
            raise SessionNotFound()
        return messages
    out: list[BaseMessage] = []
    after = 0
    while True:
        page = services.list_messages(scope=scope, session_id=pk, limit=_PAGE, after_seq=after)
        for row in page:
            message = from_cortex(row.role, row.content)
            if message is not None:
                out.append(message)
        if len(page) < _PAGE:
            return out
        after = page[-1].seq or after


def _convert(role: str, block: Any, content: Any) -> BaseMessage | None:
    """:func:`.messages.from_cortex` of a message read message by message
    (:func:`.block_history.read_history`) when its content is given; else its block's record,
    kept whole, decoded.

    Raises:
        KeyError, TypeError, ValueError, AttributeError (:data:`..blocks.BAD_RECORD`):
            ``content`` is ``None`` and the block keeps no message LangChain reads (the read
            then asks again with the content).
    """
    if content is None:
        return decode_records([stored_record(block, "message", [block])])[0]
    return from_cortex(role, content)
