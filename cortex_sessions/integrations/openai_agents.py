"""The OpenAI Agents SDK's ``Session`` protocol over a cortex session (docs/design.md §13.2).

Install with the ``[openai-agents]`` extra. Use::

    from agents import Runner
    from cortex_sessions.integrations.openai_agents import CortexSession

    session = CortexSession(scope="org=acme/user=42", agent_id="support-bot")
    result = await Runner.run(agent, "Hello", session=session)

Every SDK item is one :class:`~cortex_sessions.models.Message`:

- ``role``: the item's own ``role`` where it has one (``user``, ``assistant``; ``system`` and
  ``developer`` become ``system``); items without one (function calls and their outputs,
  reasoning, …) are ``tool`` messages.
- ``content``: a text block with the item's readable text when it has any (so ``last_message``
  reads naturally in the admin and the API), then one ``{"type": "openai_agents_item", "item":
  {...}}`` block holding the item verbatim. :meth:`CortexSession.get_items` returns that block's
  item, so items round-trip exactly (deep-equal, in order). An item holding text PostgreSQL cannot
  store (NUL, lone surrogates) is kept as its JSON text in ``"item_json"`` instead.
- Messages written by other writers (the REST API, the admin, host code) take part in the history
  too: a ``user``, ``assistant`` or ``system`` message without an item block reads back as
  ``{"role": ..., "content": <its text>}``; other messages without one are skipped.

Every operation goes through the async services (docs/design.md §13.1), so the scope rules hold:
a ``CortexSession`` can never read or write a session outside its ``scope``.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Mapping
from functools import cache
from typing import Any, cast

from agents.memory.session_settings import SessionSettings, resolve_session_limit
from asgiref.sync import sync_to_async
from django.db import connections, router, transaction

from .. import services
from ..content import content_text, ensure_storable_text
from ..exceptions import InvalidInput, SessionNotFound
from ..models import Message, Session
from ..scope import Scope, as_scope, scope_q

__all__ = ["ITEM_BLOCK_TYPE", "CortexSession", "item_to_message", "message_to_item"]

#: The ``type`` of the content block that keeps an SDK item verbatim.
ITEM_BLOCK_TYPE = "openai_agents_item"
#: Messages read per query when the whole history is asked for.
_PAGE = 1000
_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}


def _item_text(item: Mapping[str, Any]) -> str:
    """The human-readable text of an SDK item (message text, a tool's string output), or ``""``."""
    for key in ("content", "output"):
        value = item.get(key)
        if isinstance(value, str):
            return value
        if isinstance(value, list):
            parts = [
                part.get("text") or part.get("refusal")
                for part in value
                if isinstance(part, Mapping)
            ]
            return "\n".join(part for part in parts if isinstance(part, str) and part)
    return ""


def _storable(value: Any) -> bool:
    try:
        ensure_storable_text(value, field="content")
    except InvalidInput:
        return False
    return True


def item_to_message(item: Mapping[str, Any]) -> dict[str, Any]:
    """The message an SDK item is stored as (docs/design.md §13.2).

    Args:
        item: one ``TResponseInputItem`` (a JSON-compatible dict).

    Returns:
        A mapping for :func:`cortex_sessions.services.append_messages`: ``role``, ``content``.

    Raises:
        InvalidInput: ``item`` is not a mapping.
        InvalidContent: ``item`` is not JSON (NaN, a set, …); raised by the append.
    """
    if not isinstance(item, Mapping):
        raise InvalidInput("Every session item must be a JSON object.", field="items")
    role = _ROLES.get(item.get("role")) if isinstance(item.get("role"), str) else None  # type: ignore[arg-type]
    text = _item_text(item)
    content: list[dict[str, Any]] = []
    if text.strip():
        # The readable copy must be storable even when the item is not.
        if not _storable(text):
            text = text.replace("\x00", "").encode("utf-8", "replace").decode("utf-8")
        content.append({"type": "text", "text": text})
    if _storable(item):
        content.append({"type": ITEM_BLOCK_TYPE, "item": dict(item)})
    else:
        content.append({"type": ITEM_BLOCK_TYPE, "item_json": json.dumps(item)})
    return {"role": role or "tool", "content": content}


def message_to_item(message: Message) -> dict[str, Any] | None:
    """The SDK item a message reads back as, or ``None`` when it has none (§13.2)."""
    return _item_of(message.role, message.content)


def _item_of(role: str, content: Any) -> dict[str, Any] | None:
    for block in content or ():
        if isinstance(block, Mapping) and block.get("type") == ITEM_BLOCK_TYPE:
            if "item" in block:
                return cast(dict[str, Any], block["item"])
            return cast(dict[str, Any], json.loads(block["item_json"]))
    if role in ("user", "assistant", "system"):
        text = content_text(content)
        if text:
            return {"role": role, "content": text}
    return None


class CortexSession:
    """An OpenAI Agents SDK session stored as a cortex session (docs/design.md §13.2).

    Implements the SDK's ``agents.memory.Session`` protocol: :meth:`get_items`,
    :meth:`add_items`, :meth:`pop_item`, :meth:`clear_session`, ``session_id`` and
    ``session_settings``.

    Args:
        scope: the tenant scope the runtime acts in (a ``Scope`` or its canonical string).
        agent_id: the host's agent identifier.
        session_id: a cortex session id; it must lie within ``scope`` and belong to
            ``agent_id``. ``None`` (default): the agent's default session at exactly ``scope``,
            created on first use (docs/design.md §6.1).
        session_settings: the SDK's ``SessionSettings`` (or a dict of them); its ``limit`` is
            the default of :meth:`get_items`.

    Raises:
        NoScope, InvalidScope: at construction, for a missing or malformed scope.
        InvalidAgentId: at construction, for a bad agent id.
        SessionNotFound: on first use, when ``session_id`` is missing, out of scope or
            another agent's — never another tenant's data.
    """

    def __init__(
        self,
        *,
        scope: Scope | str,
        agent_id: str,
        session_id: uuid.UUID | str | None = None,
        session_settings: SessionSettings | Mapping[str, Any] | None = None,
    ) -> None:
        self.scope = as_scope(scope)
        self.agent_id = services.check_agent_id(agent_id)
        self._requested_id = session_id
        self._session_pk: uuid.UUID | None = None
        if session_settings is None:
            session_settings = SessionSettings()
        elif isinstance(session_settings, Mapping):
            session_settings = SessionSettings(**session_settings)
        self.session_settings: SessionSettings | None = session_settings

    # -- identity ---------------------------------------------------------------------------------

    @property
    def session_id(self) -> str:
        """The cortex session's id as a string.

        Known without a query when an id was given. For the default session it is known once
        the session is resolved — by :meth:`resolve` or the first operation; reading it before
        that from async code raises ``RuntimeError`` (the SDK tolerates this), and from sync
        code resolves the default on the spot.
        """
        if self._session_pk is not None:
            return str(self._session_pk)
        if self._requested_id is not None:
            return str(self._requested_id)
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            session, _ = services.resolve_session(scope=self.scope, agent_id=self.agent_id)
            self._session_pk = session.pk
            return str(session.pk)
        raise RuntimeError(
            "The default session is not resolved yet; await CortexSession.resolve() first."
        )

    async def resolve(self) -> Session:
        """Resolve (and on first use create) the cortex session this object stores to.

        Returns:
            The :class:`~cortex_sessions.models.Session`.

        Raises:
            SessionNotFound: the given ``session_id`` is missing, out of scope or another
                agent's.
        """
        session, _ = await services.aresolve_session(
            scope=self.scope,
            agent_id=self.agent_id,
            session_id=self._session_pk or self._requested_id,
        )
        self._session_pk = session.pk
        return session

    async def _pk(self) -> uuid.UUID:
        if self._session_pk is None:
            await self.resolve()
        assert self._session_pk is not None
        return self._session_pk

    async def _retry_default(self, operation: Any, *args: Any) -> Any:
        """Run ``operation(pk, *args)``; a default session deleted meanwhile is re-resolved once
        (docs/design.md §6.3: the next resolve creates a new default)."""
        pk = await self._pk()
        try:
            return await operation(pk, *args)
        except SessionNotFound:
            if self._requested_id is not None:
                raise
            self._session_pk = None
            return await operation(await self._pk(), *args)

    # -- the Session protocol ---------------------------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[dict[str, Any]]:
        """The conversation history, oldest first (the SDK's ``Session.get_items``).

        Args:
            limit: the newest ``limit`` items (in chronological order); ``None`` uses
                ``session_settings.limit``, and ``None`` there means every item. ``0`` or less
                returns ``[]``.

        Returns:
            The items exactly as they were added (deep-equal), plus items read from messages
            other writers added (see the module docs).

        Raises:
            SessionNotFound: the session is out of scope, another agent's, or deleted.
        """
        effective = resolve_session_limit(limit, self.session_settings)
        if effective is not None and effective <= 0:
            return []
        items = await self._retry_default(_read_items_async, self.scope, effective)
        return cast(list[dict[str, Any]], items)

    async def add_items(self, items: list[Any]) -> None:
        """Append items, in order, in one transaction (the SDK's ``Session.add_items``).

        Each item becomes one message (see the module docs); an empty list writes nothing.

        Raises:
            InvalidInput (InvalidContent, MessageTooLarge, …): an item is not a JSON object or
                is over ``MAX_MESSAGE_BYTES``; nothing is written.
            SessionNotFound: the session is out of scope, another agent's, or deleted.
        """
        if not items:
            return
        messages = [item_to_message(item) for item in items]

        async def append(pk: uuid.UUID) -> None:
            await services.aappend_messages(scope=self.scope, session_id=pk, messages=messages)

        await self._retry_default(append)

    async def pop_item(self) -> dict[str, Any] | None:
        """Remove and return the newest item, atomically (the SDK's ``Session.pop_item``).

        The session's row is locked while the newest message is read and deleted, so two
        concurrent pops never return the same item. Counters follow (docs/design.md §5).

        Returns:
            The newest item, or ``None`` when the session is empty.

        Raises:
            SessionNotFound: the session is out of scope, another agent's, or deleted.
        """
        item = await self._retry_default(_pop_async, self.scope)
        return cast(dict[str, Any] | None, item)

    async def clear_session(self) -> None:
        """Delete every item (the SDK's ``Session.clear_session``).

        The cortex session itself stays (with zero messages), so it remains listed in the
        admin and the API; ``seq`` values are never reused.

        Raises:
            SessionNotFound: the session is out of scope, another agent's, or deleted.
        """

        async def clear(pk: uuid.UUID) -> None:
            await services.aclear_messages(scope=self.scope, session_id=pk)

        await self._retry_default(clear)

    def __repr__(self) -> str:
        return (
            f"CortexSession(scope={self.scope.canonical!r}, agent_id={self.agent_id!r}, "
            f"session_id={str(self._session_pk or self._requested_id)!r})"
        )


# -- database work, each run as one sync_to_async call ----------------------------------------------


def _rows(pk: uuid.UUID, scope: Scope) -> Any:
    """The session's messages as ``(seq, role, content)``, scope-checked in the same query.

    ``Message.scope`` is the session's scope, copied and never rewritten (docs/design.md §2.6),
    so the predicate on it is the scope check; an empty result is told apart from a missing or
    out-of-scope session by :func:`_check_session`.
    """
    return Message.objects.filter(scope_q(scope), session_id=pk).values_list(
        "seq", "role", "content"
    )


def _newest_rows_postgresql(
    pk: uuid.UUID, scope: Scope, limit: int, before: int | None
) -> list[tuple[int, str, Any]]:
    """The newest ``limit`` rows (below ``seq`` ``before``, if given) as ``(seq, role,
    content)``, newest first, in one hand-written statement on the runtime's hottest read
    (SQLite keeps the ORM path).

    The scope predicate is §2.3's rule written out: the row's scope is ``S`` or starts with
    ``S/`` — as a range ``'S' <= scope < 'S0'`` (``'0'`` follows ``'/'``) for the index,
    narrowed to ``scope = 'S' OR scope >= 'S/'`` to drop siblings such as ``S-x``.
    """
    canonical = scope.canonical
    connection = _connection_for_read()
    params: list[Any] = [pk, canonical, canonical + "0", canonical, canonical + "/"]
    if before is not None:
        params.append(before)
    params.append(limit)
    with connection.cursor() as cursor:
        cursor.execute(_newest_sql(connection.ops.quote_name, before is not None), params)
        return [
            (seq, role, json.loads(content) if isinstance(content, str) else content)
            for seq, role, content in cursor.fetchall()
        ]


@cache
def _newest_sql(quote_name: Any, before: bool) -> str:
    """The statement of :func:`_newest_rows_postgresql`, built once (the same text each call)."""
    return (
        f"SELECT seq, role, content FROM {quote_name(Message._meta.db_table)} "
        "WHERE session_id = %s AND scope >= %s AND scope < %s AND (scope = %s OR scope >= %s) "
        + ("AND seq < %s " if before else "")
        + "ORDER BY seq DESC LIMIT %s"
    )


def _connection_for_read() -> Any:
    return connections[router.db_for_read(Message)]


def _check_session(pk: uuid.UUID, scope: Scope) -> None:
    services.get_session(scope=scope, session_id=pk)  # raises SessionNotFound


def _read_items(pk: uuid.UUID, scope: Scope, limit: int | None) -> list[dict[str, Any]]:
    """Items of the session, newest ``limit`` (or all) in chronological order.

    One query per page (the newest page is usually all there is). Messages without an item
    are skipped; ``limit`` counts items, so a page with skipped messages is followed by an
    older one until ``limit`` items are found or history ends.

    Raises:
        SessionNotFound: the session is missing or outside ``scope``.
    """
    if limit is None:
        items: list[dict[str, Any]] = []
        after = 0
        while True:
            page = list(_rows(pk, scope).filter(seq__gt=after).order_by("seq")[:_PAGE])
            if not page and after == 0:
                _check_session(pk, scope)
            items.extend(item for _, r, c in page if (item := _item_of(r, c)) is not None)
            if len(page) < _PAGE:
                return items
            after = page[-1][0]
    newest_first: list[dict[str, Any]] = []
    postgresql = _connection_for_read().vendor == "postgresql"
    before: int | None = None
    while len(newest_first) < limit:
        want = limit - len(newest_first)
        if postgresql:
            page = _newest_rows_postgresql(pk, scope, want, before)
        else:
            rows = _rows(pk, scope).order_by("-seq")
            page = list((rows if before is None else rows.filter(seq__lt=before))[:want])
        if not page and before is None:
            _check_session(pk, scope)
        newest_first.extend(item for _, r, c in page if (item := _item_of(r, c)) is not None)
        if len(page) < want:
            break
        before = page[-1][0]
    return list(reversed(newest_first[:limit]))


def _pop(pk: uuid.UUID, scope: Scope) -> dict[str, Any] | None:
    """Delete and return the newest item under the session's row lock."""
    with transaction.atomic(using=router.db_for_write(Session)):
        session = services.get_session(scope=scope, session_id=pk)
        Session.objects.select_for_update().filter(pk=session.pk).values_list("pk").get()
        while True:
            message = Message.objects.filter(session_id=session.pk).order_by("-seq").first()
            if message is None:
                return None
            # An SDK-shaped item is returned; a message that reads as none (a tool row some
            # other writer added) is dropped like the SDK's stores drop rows they cannot decode.
            services.delete_message(scope=scope, session_id=session.pk, seq=cast(int, message.seq))
            item = message_to_item(message)
            if item is not None:
                return item


_read_items_async = sync_to_async(_read_items, thread_sensitive=True)
_pop_async = sync_to_async(_pop, thread_sensitive=True)
