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
  store (NUL, lone surrogates) or nested too deep is kept as its JSON text in ``"item_json"``
  instead; one that is not JSON (a key that is not a string, NaN) is :class:`ItemNotJSON`, an
  ``InvalidContent`` and a ``TypeError`` (what the SDK's own stores raise).
- Messages written by other writers (the REST API, the admin, host code) take part in the history
  too: a ``user``, ``assistant`` or ``system`` message without an item block reads back as
  ``{"role": ..., "content": <its text>}``; other messages without one are skipped.

Every operation goes through the services (docs/design.md §7.1), run off the event loop with
``sync_to_async(thread_sensitive=True)`` as their async twins are (§13.1), so the scope rules
hold: a ``CortexSession`` can never read or write a session outside its ``scope``. Without a
``session_id`` it follows the agent's default session, resolved afresh on each operation (see
:class:`CortexSession`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar, cast

from agents.memory.session_settings import (
    SessionSettings,
    coerce_session_settings,
    resolve_session_limit,
)
from asgiref.sync import sync_to_async

from .. import routing, services
from ..conf import app_settings
from ..content import check_object_keys, content_text
from ..exceptions import (
    InvalidContent,
    InvalidInput,
)
from ..models import Message, Session, not_expired_q
from ..scope import Scope, as_scope, scope_q
from . import openai_agents_history as history
from .blocks import find_block, text_blocks, verbatim_block
from .runtime_usage import attach_usage, openai_run_usage
from .sessions import on_session

__all__ = [
    "ITEM_BLOCK_TYPE",
    "CortexSession",
    "ItemNotJSON",
    "item_to_message",
    "message_to_item",
]

#: The ``type`` of the content block that keeps an SDK item verbatim.
ITEM_BLOCK_TYPE = "openai_agents_item"
#: Messages read per query when the whole history is asked for.
_PAGE = 1000
#: Messages per statement of a whole history on PostgreSQL (one JSON array each; a history of
#: up to this many messages is one statement, as the SDK's own stores read it).
_HISTORY_PAGE = 5000
_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
T = TypeVar("T")


class ItemNotJSON(InvalidContent, TypeError):
    """An SDK item that is not JSON: code ``invalid_content`` (a cortex
    :class:`~cortex_sessions.exceptions.InvalidContent`), and a ``TypeError``, as the SDK's own
    stores raise for an item ``json.dumps`` refuses (docs/design.md §13.2)."""


def _settings(value: SessionSettings | Mapping[str, Any] | None) -> SessionSettings:
    """``session_settings`` as the SDK's stores take it: ``None`` is the defaults; a dict is
    checked and converted (``coerce_session_settings``).

    Raises:
        TypeError: a dict with a key ``SessionSettings`` has no field for (``{"limitt": 1}``),
            or a value that is neither (``5``), as the SDK's own stores raise.
    """
    if value is None:
        return SessionSettings()
    if isinstance(value, Mapping):
        unknown = sorted(set(value) - {field.name for field in dataclasses.fields(SessionSettings)})
        if unknown:
            raise TypeError(f"Unknown session settings: {', '.join(map(str, unknown))}.")
        return coerce_session_settings(dict(value))
    if not isinstance(value, SessionSettings):
        raise TypeError(f"session_settings must be a SessionSettings or a dict, not {value!r}.")
    return value


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


def _item_json(item: Mapping[str, Any]) -> str:
    """``item`` as JSON text, for an item whose text PostgreSQL cannot store (NUL, lone
    surrogates, which JSON text escapes) or nested deeper than the content rule allows.

    Raises:
        ItemNotJSON: ``item`` is not JSON: an object key anywhere in it that is not a
            string, or two keys of one object with the same text
            (:func:`~cortex_sessions.content.check_object_keys`), NaN or infinity, a value of
            another type, or nesting Python's encoder cannot follow.
    """
    stack: list[Any] = [item]
    while stack:  # iterative: the item may be nested deeper than the recursion limit
        value = stack.pop()
        if isinstance(value, Mapping):
            try:
                check_object_keys(value, field="content")
            except InvalidContent as error:
                raise ItemNotJSON(str(error), field="content") from None
            stack.extend(value.values())
        elif isinstance(value, list | tuple):
            stack.extend(value)
    try:
        return json.dumps(item, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as error:
        raise ItemNotJSON(f"content is not valid JSON: {error}", field="content") from None


def item_to_message(item: Mapping[str, Any]) -> dict[str, Any]:
    """The message an SDK item is stored as (docs/design.md §13.2).

    Args:
        item: one ``TResponseInputItem`` (a JSON-compatible dict).

    Returns:
        A mapping for :func:`cortex_sessions.services.append_messages`: ``role``, ``content``.

    Raises:
        InvalidInput: ``item`` is not a mapping.
        ItemNotJSON: ``item`` is not JSON (an object key that is not a string, NaN, a
            set, …): an ``InvalidContent`` and a ``TypeError``.
    """
    if not isinstance(item, Mapping):
        raise InvalidInput("Every session item must be a JSON object.", field="items")
    role = _ROLES.get(item.get("role")) if isinstance(item.get("role"), str) else None  # type: ignore[arg-type]
    content = text_blocks(_item_text(item))
    content.append(verbatim_block(ITEM_BLOCK_TYPE, "item", dict(item), as_json=_item_json))
    return {"role": role or "tool", "content": content}


def message_to_item(message: Message) -> dict[str, Any] | None:
    """The SDK item a message reads back as, or ``None`` when it has none (§13.2)."""
    return _item_of(message.role, message.content)


def _item_of(role: str, content: Any) -> dict[str, Any] | None:
    return _item_of_block(role, find_block(content, ITEM_BLOCK_TYPE), content)


def _item_of_block(role: str, block: Any, content: Any) -> dict[str, Any] | None:
    """The item of a message whose item block (or ``None``) is already found."""
    if block is not None:
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

    Which cortex session it stores to:

    - **pinned** (``session_id`` given): that session, always. It must lie within ``scope`` and
      belong to ``agent_id``; once it is deleted every operation raises ``SessionNotFound``,
      and once it is archived every write raises ``SessionArchived`` (reads still work).
    - **default-following** (``session_id=None``): the agent's default session at exactly
      ``scope`` *at the time of each operation* (docs/design.md §6.1, §13.2). Every operation
      resolves the default afresh (one statement on PostgreSQL), so when the host makes another
      session the default, the next operation uses it; when the default is deleted or archived
      (archiving demotes it, §11.2), the next operation creates a fresh default (§6.3).

    Every operation runs its synchronous services — the resolve and then the service it needs
    (``append_messages``, ``pop_message``, ``clear_messages``, the read) — in one
    ``sync_to_async(thread_sensitive=True)`` call. Writes settle before a cancellation
    propagates: a cancelled :meth:`add_items`, :meth:`pop_item` or :meth:`clear_session`
    waits until the database answered, then raises ``CancelledError`` (as the SDK's own
    stores do), so the caller never leaves a write of unknown outcome behind.

    Args:
        scope: the tenant scope the runtime acts in (a ``Scope`` or its canonical string).
        agent_id: the host's agent identifier.
        session_id: a cortex session id to pin (``uuid.UUID`` or string), or ``None`` (default)
            to follow the agent's default session at exactly ``scope``.
        session_settings: the SDK's ``SessionSettings`` (or a dict of them); its ``limit`` is
            the default of :meth:`get_items`.

    Raises:
        TypeError: at construction, for ``session_settings`` with an unknown key, as the SDK's
            stores raise.
        NoScope, InvalidScope: at construction, for a missing or malformed scope.
        InvalidAgentId, NulCharacter, InvalidText: at construction, for a bad agent id.
        SessionNotFound: on use of a pinned session that is missing, out of scope or
            another agent's — never another tenant's data.
    """

    def __init__(
        self,
        *,
        scope: Scope | str,
        agent_id: str,
        session_id: uuid.UUID | str | None = None,
        session_settings: SessionSettings | Mapping[str, Any] | None = None,
        record_usage: bool = False,
    ) -> None:
        self.scope = as_scope(scope)
        #: Record the usage the SDK reports for a run on the messages of its answer
        #: (docs/design.md §16.5): opt-in.
        self.record_usage = record_usage
        self.agent_id = services.check_agent_id(agent_id)
        self._pinned = session_id
        #: The pinned session once checked (scope and agent), or the default as last resolved.
        self._current_pk: uuid.UUID | None = None
        self.session_settings: SessionSettings | None = _settings(session_settings)

    # -- identity ---------------------------------------------------------------------------------

    @property
    def follows_default(self) -> bool:
        """``True`` when no ``session_id`` was given: each operation uses the current default."""
        return self._pinned is None

    @property
    def session_id(self) -> str:
        """The cortex session's id as a string (docs/design.md §13.2); reading it never
        queries.

        Pinned: the given id. Default-following: the id of the default session **as of the
        latest operation** (or :meth:`resolve`) — a snapshot, which the next operation moves
        on when the host has made another session the default or deleted or archived it
        meanwhile — and ``""`` before the first one (no session is chosen yet; the SDK reads
        an empty id as none). So ``isinstance(session, agents.memory.Session)``, which reads
        every attribute of the protocol, neither creates the default session nor raises, in
        synchronous and async code alike; ``await session.resolve()`` settles the id.
        """
        if self._pinned is not None:
            return str(self._current_pk or self._pinned)
        return "" if self._current_pk is None else str(self._current_pk)

    async def resolve(self) -> Session:
        """The cortex session this object stores to now (the default: resolved afresh and
        created on first use).

        Returns:
            The :class:`~cortex_sessions.models.Session`; ``session_id`` then reports its id.

        Raises:
            SessionNotFound: the pinned ``session_id`` is missing, out of scope or another
                agent's.
        """
        return await sync_to_async(self._resolve, thread_sensitive=True)()

    def _resolve(self) -> Session:
        """:meth:`resolve`, synchronously: one ``resolve_session`` (one statement on
        PostgreSQL when the session exists, docs/design.md §14)."""
        session, _ = services.resolve_session(
            scope=self.scope, agent_id=self.agent_id, session_id=self._pinned
        )
        self._current_pk = session.pk
        return session

    def _on_session(self, operation: Callable[[uuid.UUID], T]) -> T:
        """Run ``operation(pk)`` on the session this object stores to, synchronously.

        Pinned: the session is checked once (scope and agent, :meth:`_resolve`); afterwards the
        services the operation calls check the scope themselves, so a deleted or archived
        session raises their ``SessionNotFound`` / ``SessionArchived``. Default-following: the
        default is resolved on every call; a default deleted or archived between the resolve
        and the operation is resolved again (``DEFAULT_ATTEMPTS`` times in all).
        """
        return on_session(
            operation,
            pinned=self._pinned is not None,
            current_pk=self._current_pk,
            resolve=self._resolve,
        )

    async def _run(self, operation: Callable[[uuid.UUID], T]) -> T:
        return await sync_to_async(self._on_session, thread_sensitive=True)(operation)

    # -- the Session protocol ---------------------------------------------------------------------

    async def get_items(
        self, limit: int | None = None, wrapper: Any = None
    ) -> list[dict[str, Any]]:
        """The conversation history, oldest first (the SDK's ``Session.get_items``).

        Args:
            limit: the newest ``limit`` items (in chronological order); ``None`` uses
                ``session_settings.limit``, and ``None`` there means every item. ``0`` or less
                returns ``[]``.

        Returns:
            The items exactly as they were added (deep-equal), plus items read from messages
            other writers added (see the module docs).

        Raises:
            SessionNotFound: the pinned session is out of scope, another agent's, or deleted.
        """
        effective = resolve_session_limit(limit, self.session_settings)
        if effective is not None and effective <= 0:
            return []
        scope = self.scope
        from .openai_compaction import read_history  # it imports this module

        return await self._run(lambda pk: read_history(pk, scope, effective))

    async def _atomic_replace_items(self, items: list[Any]) -> bool:
        """The replacement hook of the SDK's ``OpenAIResponsesCompactionSession``: the
        compacted ``items`` become one cortex compaction, deleting nothing, and :meth:`get_items`
        then reads the context (docs/design.md §16.3, §16.5;
        :func:`~.openai_compaction.replace_with_compaction`, which lists the errors)."""
        from .openai_compaction import replace_with_compaction

        return await replace_with_compaction(self, items)

    async def add_items(self, items: list[Any], wrapper: Any = None) -> None:
        """Append items, in order (the SDK's ``Session.add_items``).

        Every operation takes the SDK's optional ``wrapper`` (its ``RunContextWrapper``), which
        the SDK passes to a session whose four operations all accept it; only ``add_items``
        uses it. With ``record_usage``, the usage the SDK's run reports (its ``RunContextWrapper``,
        which the SDK passes as ``wrapper`` to a session that takes one) since it was last
        recorded is stored as the ``usage`` of the batch's last ``assistant`` message
        (docs/design.md §16.1, §16.5).

        Each item becomes one message (see the module docs); an empty list writes nothing.
        Up to ``MAX_MESSAGES_PER_APPEND`` items are one append, in one transaction. More are
        written as consecutive appends of at most that many, each its own transaction, so
        the call never holds the session's lock longer than one bounded append
        (docs/design.md §12.6, §13.2): every item is validated before the first append, so
        bad input still writes nothing, while a database fault in a later append leaves the
        earlier ones written (the SDK then sees the error and may add the rest again).

        Raises:
            ItemNotJSON: an item is not JSON (a set, bytes, an object key that is not a
                string, …): an ``InvalidContent`` and a ``TypeError``; nothing is written.
            InvalidInput (MessageTooLarge, …): an item is not a JSON object or is over
                ``MAX_MESSAGE_BYTES``; nothing is written.
            SessionNotFound: the pinned session is out of scope, another agent's, or deleted.
            SessionArchived: the pinned session is archived (docs/design.md §11.2).
        """
        if not items:
            return
        with _items_are_json():
            messages = [item_to_message(item) for item in items]
            if self.record_usage and wrapper is not None:
                attach_usage(messages, openai_run_usage(wrapper))
            scope = self.scope
            batch = app_settings.MAX_MESSAGES_PER_APPEND
            if len(messages) > batch:
                services.check_messages(messages)

            def append(pk: uuid.UUID) -> None:
                for start in range(0, len(messages), batch):
                    services.append_messages(
                        scope=scope, session_id=pk, messages=messages[start : start + batch]
                    )

            await _settled(self._run(append))

    async def pop_item(self, wrapper: Any = None) -> dict[str, Any] | None:
        """Remove and return the newest item (the SDK's ``Session.pop_item``).

        Each removal is as :func:`cortex_sessions.services.pop_message` (docs/design.md §11.4):
        the session row is locked while the newest message is deleted and the counters move, so
        two concurrent pops never return the same item and a ``seq`` is never reused. A newest
        message that reads as no item (a ``tool`` message another writer added without an item
        block) is removed too and the next one popped, as the SDK's stores drop rows they
        cannot decode. In a compacted session the item is the last one :meth:`get_items`
        returns (docs/design.md §16.5): when the newest message is the compaction summary and
        no message is shown after it, the summary's own last item, the summary being replaced
        by one holding the items before it (:func:`~.openai_compaction.pop_window_item`); the
        transcript's messages stay.

        Returns:
            The newest item, or ``None`` when the session is (or became) empty.

        Raises:
            SessionNotFound: the pinned session is out of scope, another agent's, or deleted.
            SessionArchived: the pinned session is archived (docs/design.md §11.2).
        """
        scope = self.scope
        item = await _settled(self._run(lambda pk: _pop_item(pk, scope)))
        return item

    async def clear_session(self, wrapper: Any = None) -> None:
        """Delete every item (the SDK's ``Session.clear_session``).

        The cortex session itself stays (with zero messages), so it remains listed in the
        admin and the API; ``seq`` values are never reused.

        Raises:
            SessionNotFound: the pinned session is out of scope, another agent's, or deleted.
            SessionArchived: the pinned session is archived (docs/design.md §11.2).
        """
        scope = self.scope

        def clear(pk: uuid.UUID) -> None:
            services.clear_messages(scope=scope, session_id=pk)

        await _settled(self._run(clear))

    def __repr__(self) -> str:
        which = self._pinned if self._pinned is not None else "<default>"
        return (
            f"CortexSession(scope={self.scope.canonical!r}, agent_id={self.agent_id!r}, "
            f"session_id={str(which)!r})"
        )


@contextmanager
def _items_are_json() -> Iterator[None]:
    """Raise the append's ``InvalidContent`` for content that is not JSON as
    :class:`ItemNotJSON` (also a ``TypeError``, as the SDK's stores raise); its subclasses
    (``NulCharacter`` …) keep their own codes."""
    try:
        yield
    except InvalidContent as error:
        if type(error) is not InvalidContent:
            raise
        raise ItemNotJSON(error.message, **error.params) from None


async def _settled(operation: Awaitable[T]) -> T:
    """Await ``operation`` to its end even when the caller is cancelled meanwhile; then
    re-raise the cancellation (the SDK's stores do the same for every write).

    A write runs on a worker thread and commits whether or not its caller still waits; without
    this, cancelling the caller would raise at once and leave the write's outcome unknown.
    """
    task = asyncio.ensure_future(operation)
    cancelled: asyncio.CancelledError | None = None
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError as exc:
            cancelled = cancelled or exc
    if cancelled is not None:
        if not task.cancelled():
            task.exception()  # retrieved: the caller is told only of its cancellation
        raise cancelled
    return task.result()


# -- database work, each run as one sync_to_async call ----------------------------------------------


def _rows(pk: uuid.UUID, scope: Scope) -> Any:
    """The session's messages as ``(seq, role, content)``, scope-checked in the same query.

    ``Message.scope`` is the session's scope, copied and never rewritten (docs/design.md §2.6),
    so the predicate on it is the scope check; an empty result is told apart from a missing or
    out-of-scope session by :func:`_check_session`.
    """
    using = routing.db_for_read(Message, scope=scope)
    return (
        Message.objects.using(using)
        .filter(scope_q(scope), not_expired_q(prefix="session__"), session_id=pk)
        .values_list("seq", "role", "content")
    )


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
        if history.serves(scope):  # a page per statement, decoded at once
            while True:
                count, after_next, page_items, compacted = history.items_page(
                    pk, scope, after=after, size=_HISTORY_PAGE, block_type=ITEM_BLOCK_TYPE
                )
                if page_items is None:  # a message without an item: the page read whole
                    count, after_next, entries, compacted = history.history_page(
                        pk, scope, after=after, size=_HISTORY_PAGE, block_type=ITEM_BLOCK_TYPE
                    )
                    page_items = [
                        item
                        for role, block, content in entries
                        if (item := _item_of_block(role, block, content)) is not None
                    ]
                if compacted:  # the context's items instead (docs/design.md §16.5)
                    from .openai_compaction import window_items

                    return window_items(scope, pk)
                if not count and after == 0:
                    _check_session(pk, scope)
                items.extend(page_items)
                if count < _HISTORY_PAGE:
                    return items
                after = after_next
        while True:
            page = list(_rows(pk, scope).filter(seq__gt=after).order_by("seq")[:_PAGE])
            if not page and after == 0:
                _check_session(pk, scope)
            items.extend(item for _, r, c in page if (item := _item_of(r, c)) is not None)
            if len(page) < _PAGE:
                return items
            after = page[-1][0]
    newest_first: list[dict[str, Any]] = []
    before: int | None = None
    if history.serves(scope):  # a page per statement, which tells a compaction too
        while len(newest_first) < limit:
            want = limit - len(newest_first)
            count, first_seq, entries, compacted = history.newest_page(
                pk, scope, before=before, size=want, block_type=ITEM_BLOCK_TYPE
            )
            if compacted:  # the context's items instead (docs/design.md §16.5)
                from .openai_compaction import window_items

                return window_items(scope, pk)[-limit:]
            if not count and before is None:
                _check_session(pk, scope)
            newest_first.extend(
                item
                for role, block, content in entries
                if (item := _item_of_block(role, block, content)) is not None
            )
            if count < want:
                break
            before = first_seq
        return list(reversed(newest_first[:limit]))
    while len(newest_first) < limit:
        want = limit - len(newest_first)
        rows = _rows(pk, scope).order_by("-seq")
        page = list((rows if before is None else rows.filter(seq__lt=before))[:want])
        if not page and before is None:
            _check_session(pk, scope)
        newest_first.extend(item for _, r, c in page if (item := _item_of(r, c)) is not None)
        if len(page) < want:
            break
        before = page[-1][0]
    return list(reversed(newest_first[:limit]))


def _pop_item(pk: uuid.UUID, scope: Scope) -> dict[str, Any] | None:
    """Pop the newest item the SDK sees, removing messages that read as no item on the way;
    ``None`` when that history is empty (docs/design.md §11.4, §13.2, §16.5;
    :func:`~.openai_compaction.pop_window_item`, which also handles a compacted session).

    Each step is its own transaction; the messages dropped on the way (no item) are gone like
    any popped message.
    """
    from .openai_compaction import pop_window_item  # it imports this module

    return pop_window_item(pk, scope)
