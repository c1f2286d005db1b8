"""``CortexCheckpointSaver``: LangGraph's checkpoint saver over cortex sessions (docs/design.md §19.1)."""

from __future__ import annotations

import builtins
import random
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from django.db import connections
from django.utils import timezone
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from ... import services
from ...scope import Scope, as_scope
from . import mirror, store, threads

__all__ = ["CortexCheckpointSaver", "athread_config", "thread_config"]

T = TypeVar("T")


def _sync(operation: Callable[[], T]) -> T:
    """``operation()``, then the database connections it opened closed, unless a transaction
    holds them.

    A sync graph run (``graph.invoke``) calls ``put`` and ``put_writes`` from LangGraph's
    short-lived worker threads, each with a connection of its own that Django, outside a
    request, never closes: the sync methods close what they opened. A thread that already had
    its connection open (a request's, a test's) keeps it; when every database's connection
    was open before, none can be new and nothing is looked at after.
    """
    before = {conn.alias for conn in connections.all(initialized_only=True) if conn.connection}
    if len(before) == sum(1 for _ in connections):
        return operation()
    try:
        return operation()
    finally:
        for conn in connections.all(initialized_only=True):
            if conn.connection and conn.alias not in before and not conn.in_atomic_block:
                conn.close()


class CortexCheckpointSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpoint saver whose threads are cortex sessions (docs/design.md §19.1).

    A thread id is a cortex session id (its text). The saver is bound to a tenant ``scope``: it
    reads and writes sessions at or beneath it only. ``config["configurable"]`` may carry:

    - ``thread_id`` (required by LangGraph): the session id. The first ``put`` to an id that
      names no session creates the session with that id, at the config's scope, for its agent.
    - ``scope``: the scope the thread lies in, at or beneath the saver's (default: the saver's).
      A new thread is created exactly there.
    - ``agent_id``: the agent the thread belongs to (default: the saver's). With one known, a
      thread of another agent is not found.
    - ``checkpoint_ns``, ``checkpoint_id``: LangGraph's own.

    :func:`thread_config` builds such a config for the agent's default session (§6.1).

    Implements ``put``, ``put_writes``, ``get_tuple``, ``list``, ``delete_thread`` and the async
    twins (which run the same work off the event loop with ``sync_to_async(thread_sensitive=True)``,
    §13.1). The sync methods close a database connection they opened themselves (outside a
    transaction): a sync graph run calls them from LangGraph's worker threads. A ``put`` of the root namespace that updates the ``messages_key`` channel mirrors
    the messages it gained into the session (:mod:`.mirror`), in the same transaction.

    Args:
        scope: the tenant scope (a ``Scope`` or its canonical string).
        agent_id: the default agent of new threads and the agent threads must belong to, or
            ``None`` (then a config must name the agent of a new thread, and reads match any).
        serde: LangGraph's serializer for values (default ``JsonPlusSerializer``).
        messages_key: the channel mirrored into the session's messages (``None``: none).

    Raises:
        NoScope, InvalidScope: at construction, for a missing or malformed scope.
        InvalidAgentId: at construction, for a bad agent id.
    """

    def __init__(
        self,
        *,
        scope: Scope | str,
        agent_id: str | None = None,
        serde: SerializerProtocol | None = None,
        messages_key: str | None = "messages",
    ) -> None:
        super().__init__(serde=serde)
        self.scope = as_scope(scope)
        self.agent_id = services.check_agent_id(agent_id) if agent_id is not None else None
        self.messages_key = messages_key
        self._targets = threads.TargetCache(self.scope, self.agent_id)

    def _target(self, config: RunnableConfig) -> threads.Target:
        targets = self._targets
        if targets.bound is not self.scope or targets.agent_id != self.agent_id:
            targets = self._targets = threads.TargetCache(self.scope, self.agent_id)
        return targets(config)

    # -- sync -------------------------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (its ``checkpoint_id``), or the thread's latest in
        the namespace; ``None`` when there is none, or the thread is outside the scope or
        another agent's.

        Raises:
            InvalidInput: no ``thread_id``, or one that is not a UUID.
            InvalidScope, ScopeForbidden: a bad ``scope`` key in the config.
        """
        return _sync(lambda: self._get_tuple(config))

    def _get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        target = self._target(config)
        found = store.list_tuples(
            self.serde,
            target.scope,
            target.agent_id,
            thread_id=target.session_id,
            checkpoint_ns=target.checkpoint_ns,
            checkpoint_id=target.checkpoint_id,
            filter=None,
            before=None,
            limit=1,
        )
        return found[0] if found else None

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first: of ``config``'s thread (and namespace, when it names one),
        or with ``config=None`` of every thread at or beneath the saver's scope (and agent).

        Args:
            filter: metadata keys and values every listed checkpoint has (matched in the
                database, JSON equality).
            before: only checkpoints older than this config's ``checkpoint_id``.
            limit: at most this many.

        Raises:
            InvalidInput: a ``thread_id`` that is not a UUID.
            InvalidScope, ScopeForbidden: a bad ``scope`` key in the config.
        """
        yield from _sync(lambda: self._list(config, filter=filter, before=before, limit=limit))

    def _list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> builtins.list[CheckpointTuple]:
        configurable = (config or {}).get("configurable") or {}
        thread_id = ns = checkpoint_id = None
        if configurable.get("thread_id"):
            target = self._target(config)  # type: ignore[arg-type]
            scope, agent_id, thread_id = target.scope, target.agent_id, target.session_id
            raw_ns = configurable.get("checkpoint_ns")
            ns = None if raw_ns is None else str(raw_ns)
            checkpoint_id = target.checkpoint_id
        else:
            scope, agent_id = threads.scope_and_agent(configurable, self.scope, self.agent_id)
        return store.list_tuples(
            self.serde,
            scope,
            agent_id,
            thread_id=thread_id,
            checkpoint_ns=ns,
            checkpoint_id=checkpoint_id,
            filter=filter,
            before=get_checkpoint_id(before) if before else None,
            limit=limit,
        )

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint (and the values of the channels in ``new_versions``), creating
        the thread's session on first use, and mirror new messages (see the class docs).

        Returns:
            The stored checkpoint's config.

        Raises:
            InvalidInput: no ``thread_id``, one that is not a UUID, or a new thread without
                an ``agent_id``; ValueTooLong: a namespace, channel or id over its length, or
                a serializer's type name over 32 characters; NulCharacter, InvalidText: a NUL
                or lone surrogate in one of those.
            InvalidScope, ScopeForbidden: a bad ``scope`` key in the config.
            InvalidMetadata: metadata that is not storable JSON (NaN, NUL, a lone surrogate).
            SessionNotFound: the thread id is a session outside the scope or another agent's.
            SessionArchived: the session is archived (docs/design.md §11.2).
            InvalidContent, MessageTooLarge: a mirrored message cannot be stored.
            django.db.OperationalError: on MySQL/MariaDB, values over the server's
                ``max_allowed_packet`` (the message names it, docs/langgraph.md); nothing
                is written.
        """
        return _sync(lambda: self._put(config, checkpoint, metadata, new_versions))

    def _put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        target = self._target(config)
        return threads.retrying_deadlocks(  # type: ignore[return-value]
            lambda: store.put_checkpoint(
                self.serde,
                target,
                checkpoint,
                metadata,
                new_versions,
                config=config,
                messages_key=self.messages_key,
            )
        )

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's pending writes against the checkpoint ``config`` names.

        Raises:
            InvalidInput: no ``thread_id`` or ``checkpoint_id``; ValueTooLong, NulCharacter,
                InvalidText: a namespace, id, task id, channel or the serializer's type name
                over its length, or with a NUL or lone surrogate (as :meth:`put`).
            SessionNotFound: the thread is missing, outside the scope or another agent's.
            SessionArchived: the session is archived.
            InvalidContent, MessageTooLarge, …: a message written to the mirrored channel
                (``messages_key``, root namespace) that :meth:`put` could not mirror
                (NaN in its ``additional_kwargs``, say); nothing is written.
            django.db.OperationalError: on MySQL/MariaDB, values over the server's
                ``max_allowed_packet``, as :meth:`put`.
        """
        _sync(lambda: self._put_writes(config, writes, task_id, task_path))

    def _put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> None:
        target = self._target(config)
        if self.messages_key is not None and target.checkpoint_ns == "":  # what puts mirror
            mirror.check_written(writes, self.messages_key, timezone.now())
        store.put_writes(self.serde, target, writes, task_id, task_path)

    def delete_thread(self, thread_id: str) -> None:
        """Delete the thread: its cortex session, with its checkpoints, writes and messages
        (``services.delete_session``). Nothing happens for a thread that is missing, outside
        the scope or of another agent than the saver's."""
        _sync(lambda: store.delete_thread(self.scope, self.agent_id, thread_id))

    def get_next_version(self, current: str | None, channel: None) -> str:
        """The next channel version: a zero-padded counter and a random fraction, as
        LangGraph's own savers make them (strings that sort in order)."""
        if current is None:
            number = 0
        elif isinstance(current, int):
            number = current
        else:
            number = int(str(current).split(".")[0])
        return f"{number + 1:032}.{random.random():016}"

    # -- async ------------------------------------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """:meth:`get_tuple`, off the event loop."""
        return await sync_to_async(self._get_tuple, thread_sensitive=True)(config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """:meth:`list`, off the event loop (read in one go, then yielded)."""
        found = await sync_to_async(
            lambda: self._list(config, filter=filter, before=before, limit=limit),
            thread_sensitive=True,
        )()
        for item in found:
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """:meth:`put`, off the event loop."""
        return await sync_to_async(self._put, thread_sensitive=True)(
            config, checkpoint, metadata, new_versions
        )

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """:meth:`put_writes`, off the event loop."""
        await sync_to_async(self._put_writes, thread_sensitive=True)(
            config, writes, task_id, task_path
        )

    async def adelete_thread(self, thread_id: str) -> None:
        """:meth:`delete_thread`, off the event loop."""
        await sync_to_async(store.delete_thread, thread_sensitive=True)(
            self.scope, self.agent_id, thread_id
        )


def thread_config(
    *, scope: Scope | str, agent_id: str, session_id: uuid.UUID | str | None = None
) -> RunnableConfig:
    """A LangGraph config for a cortex session: the pinned ``session_id`` (checked: within
    ``scope``, ``agent_id``'s) or the agent's default session at ``scope`` (created on first
    use, docs/design.md §6.1).

    Returns:
        ``{"configurable": {"thread_id": <session id>, "scope": <canonical>, "agent_id": ...}}``.

    Raises:
        NoScope, InvalidScope, InvalidAgentId; SessionNotFound for a bad ``session_id``.
    """
    session, _ = services.resolve_session(scope=scope, agent_id=agent_id, session_id=session_id)
    return {
        "configurable": {
            "thread_id": str(session.pk),
            "scope": as_scope(scope).canonical,
            "agent_id": session.agent_id,
        }
    }


async def athread_config(
    *, scope: Scope | str, agent_id: str, session_id: uuid.UUID | str | None = None
) -> RunnableConfig:
    """:func:`thread_config`, off the event loop."""
    return await sync_to_async(thread_config, thread_sensitive=True)(
        scope=scope, agent_id=agent_id, session_id=session_id
    )
