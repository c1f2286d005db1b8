"""Which cortex session a LangGraph config names, and within which scope (docs/design.md §19.1).

A thread id is a cortex session id. ``config["configurable"]`` may carry ``scope`` (a scope at or
beneath the saver's) and ``agent_id``; without them the saver's own apply. Pure lookups and the
one create: the first ``put`` or ``put_writes`` to a thread id that names no session creates it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, TypeVar

from django.db import IntegrityError, OperationalError, connections, transaction

from ... import routing, services, signals
from ...exceptions import InvalidInput, ScopeForbidden, SessionNotFound
from ...models import Session, not_expired_q
from ...scope import Scope, as_scope, scope_q

__all__ = [
    "CREATE_ATTEMPTS",
    "Target",
    "TargetCache",
    "create_or_get",
    "retrying_deadlocks",
    "scope_and_agent",
    "target_of",
    "thread_uuid",
]


class Target(NamedTuple):
    """What a config addresses: the scope, the agent (or ``None``: any), the thread (its id as
    the config gave it and as a session id) and the namespace."""

    scope: Scope
    agent_id: str | None
    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str | None
    session_id: uuid.UUID


def thread_uuid(thread_id: Any) -> uuid.UUID:
    """``thread_id`` as a session id.

    Raises:
        InvalidInput: it is not a UUID (``invalid``, field ``thread_id``).
    """
    if isinstance(thread_id, uuid.UUID):
        return thread_id
    try:
        return uuid.UUID(str(thread_id))
    except ValueError:
        raise InvalidInput(
            "thread_id must be a cortex session id (a UUID).", field="thread_id"
        ) from None


def _narrowed(bound: Scope, requested: Any) -> Scope:
    """The scope a config asks for, which must lie at or beneath the saver's ``bound``.

    Raises:
        InvalidScope: a malformed scope. ScopeForbidden: one outside ``bound``.
    """
    if requested is None or requested == "":
        return bound
    scope = as_scope(requested)
    if scope.canonical != bound.canonical and not scope.canonical.startswith(bound.canonical + "/"):
        raise ScopeForbidden()
    return scope


def scope_and_agent(
    configurable: Mapping[str, Any], bound: Scope, agent_id: str | None
) -> tuple[Scope, str | None]:
    """The scope and agent a config's ``configurable`` asks for, for a saver bound to
    ``bound`` and ``agent_id`` (the config's ``scope`` must lie at or beneath ``bound``).

    Raises:
        InvalidScope, ScopeForbidden: a bad ``scope`` key. InvalidAgentId: a bad ``agent_id``.
    """
    agent = configurable.get("agent_id") or agent_id
    return (
        _narrowed(bound, configurable.get("scope")),
        services.check_agent_id(agent) if agent is not None else None,
    )


def target_of(config: Mapping[str, Any], bound: Scope, agent_id: str | None) -> Target:
    """The target of a LangGraph ``config`` for a saver bound to ``bound`` and ``agent_id``.

    Raises:
        InvalidInput: no ``thread_id``, or one that is not a UUID.
        InvalidScope, ScopeForbidden: a bad ``scope`` key. InvalidAgentId: a bad ``agent_id``.
    """
    configurable = config.get("configurable") or {}
    if configurable.get("thread_id") in (None, ""):
        raise InvalidInput("config['configurable'] needs a thread_id.", field="thread_id")
    thread_id = str(configurable["thread_id"])
    session_id = thread_uuid(thread_id)
    scope, agent = scope_and_agent(configurable, bound, agent_id)
    return Target(
        scope=scope,
        agent_id=agent,
        thread_id=thread_id,
        checkpoint_ns=str(configurable.get("checkpoint_ns") or ""),
        checkpoint_id=configurable.get("checkpoint_id") or None,
        session_id=session_id,
    )


#: The configurable keys :class:`TargetCache` keeps a thread's parse by.
_THREAD_KEYS = ("thread_id", "scope", "agent_id")


class TargetCache:
    """:func:`target_of` for one saver (bound to ``bound`` and ``agent_id``), with the parse of
    each thread kept: a graph's steps pass the same thread id, scope and agent again and again
    (only the namespace and checkpoint id change), and the thread id's UUID, the scope's
    narrowing and the agent id's check are done once per thread. Kept only for configs whose
    three keys are each ``str`` or ``None`` (a ``Scope`` for ``scope``), so equal keys parse
    alike; at most ``size`` threads (all dropped at once past it); a config that raises is
    parsed again each time. Each target is exactly what :func:`target_of` returns for the
    config: what the session must satisfy (scope, agent, not expired, not archived) is checked
    by the database on every call, not here.
    """

    __slots__ = ("_threads", "agent_id", "bound", "size")

    def __init__(self, bound: Scope, agent_id: str | None, size: int = 256) -> None:
        self.bound, self.agent_id, self.size = bound, agent_id, size
        self._threads: dict[tuple[Any, ...], Target] = {}

    def __call__(self, config: Mapping[str, Any]) -> Target:
        """:func:`target_of` ``config``.

        Raises:
            InvalidInput, InvalidScope, ScopeForbidden, InvalidAgentId: as :func:`target_of`.
        """
        configurable = config.get("configurable") or {}
        key = tuple(map(configurable.get, _THREAD_KEYS))
        keyable = all(map(_keyable, key))
        thread = self._threads.get(key) if keyable else None
        if thread is None:
            target = target_of(config, self.bound, self.agent_id)
            if keyable:
                if len(self._threads) >= self.size:
                    self._threads.clear()
                self._threads[key] = target
            return target
        return Target(
            scope=thread.scope,
            agent_id=thread.agent_id,
            thread_id=thread.thread_id,
            checkpoint_ns=str(configurable.get("checkpoint_ns") or ""),
            checkpoint_id=configurable.get("checkpoint_id") or None,
            session_id=thread.session_id,
        )


def _keyable(value: Any) -> bool:
    """Whether a config value may be part of a :class:`TargetCache` key."""
    return value is None or type(value) is str or type(value) is Scope


def create_or_get(target: Target, alias: str, *, lock: bool = True) -> Session:
    """The session ``target`` names, created (with that id, at the target's scope, for its
    agent) when no session has the id; with ``lock``, locked (``SELECT … FOR UPDATE``) in the
    caller's transaction on ``alias``.

    ``lock=False`` is for a write that does not change the session row (``put_writes``): it
    may run beside the ``put`` creating the thread and beside other tasks' writes, and on
    MySQL/MariaDB two transactions that each lost the race to insert the row hold a shared
    lock on it (the duplicate-key check's), so two ``FOR UPDATE`` reads after it deadlock.

    Raises:
        InvalidInput: the session must be created and no ``agent_id`` is known (field
            ``agent_id``).
        SessionNotFound: the id is a session outside the scope or another agent's.
    """
    pk = target.session_id
    rows = Session.objects.using(alias)
    if lock:
        rows = rows.select_for_update()
    session = rows.filter(scope_q(target.scope), pk=pk).first()
    if session is None:
        if target.agent_id is None:
            raise InvalidInput(
                "A new thread needs an agent_id (the saver's or the config's).", field="agent_id"
            )
        try:
            with transaction.atomic(using=alias):
                session = Session.objects.using(alias).create(
                    id=pk, agent_id=target.agent_id, scope=target.scope.canonical
                )
        except IntegrityError:  # the id is taken: another scope's, or a concurrent create
            session = rows.filter(scope_q(target.scope), pk=pk).first()
            if session is None:
                raise SessionNotFound() from None
        else:
            created = session
            transaction.on_commit(
                lambda: signals.session_created.send_robust(sender=Session, session=created),
                using=alias,
            )
    if target.agent_id is not None and session.agent_id != target.agent_id:
        raise SessionNotFound()
    if (
        session.expires_at is not None
        and not Session.objects.using(alias).filter(not_expired_q(), pk=session.pk).exists()
    ):  # expired: gone for every read and write until the sweep (§18.1)
        raise SessionNotFound()
    return session


T = TypeVar("T")

#: How many times :func:`retrying_deadlocks` runs a write in all.
CREATE_ATTEMPTS = 3
#: MySQL/MariaDB's ER_LOCK_DEADLOCK: the server rolled the whole transaction back.
_DEADLOCK = 1213


def retrying_deadlocks(operation: Callable[[], T]) -> T:
    """``operation()`` (a ``put``'s write, its own transaction), run again when MySQL/MariaDB
    chose it as a deadlock's victim, at most :data:`CREATE_ATTEMPTS` times in all.

    Two ``put`` calls creating the same new thread at once (two runs of a graph on one new
    thread id) deadlock there: each insert that lost the race holds the duplicate-key check's
    shared lock on the new row, then asks for :func:`create_or_get`'s ``FOR UPDATE``. The
    server rolls the victim back whole and says to restart it, which this does, unless a
    transaction of the caller's holds the connection (then nothing can be restarted here).

    Raises:
        django.db.OperationalError: the deadlock again on the last attempt, under a caller's
            transaction, or any other error of ``operation``, as it is.
    """
    alias = routing.db_for_write(Session)
    attempt = 1
    while True:
        try:
            return operation()
        except OperationalError as error:
            code = error.args[0] if error.args else None
            if (
                code != _DEADLOCK
                or attempt == CREATE_ATTEMPTS
                or connections[alias].vendor != "mysql"
                or connections[alias].in_atomic_block
            ):
                raise
        attempt += 1
