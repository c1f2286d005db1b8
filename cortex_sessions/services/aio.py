"""Async twins of the services, for agent runtimes that live on an event loop (docs/design.md §13.1).

Each twin is named like Django's own async APIs (``aget``, ``acreate``): the service's name with an
``a`` prefix — ``aappend_messages``, ``alist_messages``, ``aresolve_session``, … It takes exactly the
service's keyword arguments, returns the same value and raises the same
:mod:`cortex_sessions.exceptions`, because it *is* the service, run through asgiref's
``sync_to_async(thread_sensitive=True)``: the whole call, with its ``transaction.atomic`` blocks,
row locks and ``on_commit`` signals, runs on one thread and one database connection, exactly as
a synchronous call does. Nothing of a transaction ever spans an ``await``.

``thread_sensitive=True`` is what Django requires for ORM calls from async code: under an ASGI
server (or inside ``async_to_sync``) the service runs on the thread that owns the request's
connection; in a plain ``asyncio.run`` script it runs on asgiref's single shared sync thread.

Services that do no I/O have no twin: :func:`~cortex_sessions.services.session_queryset` returns a
lazy queryset (iterate it with ``async for``) and ``check_agent_id`` only validates.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

from asgiref.sync import sync_to_async

from .compaction import compact_session
from .context import context_messages
from .erasure import erase_scope, get_erasure, resume_erasure
from .idempotency import prune_idempotency_keys
from .keyset import list_sessions_page
from .lifecycle import archive_session, fork_session, patch_session, unarchive_session
from .maintenance import recount_sessions
from .messages import append_messages, clear_messages, delete_message, list_messages
from .retention import expire_sessions, set_retention
from .sessions import (
    count_sessions,
    create_session,
    delete_session,
    get_session,
    list_sessions,
    make_default,
    resolve_session,
    update_session,
)
from .totals import usage_totals
from .undo import delete_messages_after, pop_message

__all__ = [
    "aappend_messages",
    "aarchive_session",
    "aclear_messages",
    "acompact_session",
    "acontext_messages",
    "acount_sessions",
    "acreate_session",
    "adelete_message",
    "adelete_messages_after",
    "adelete_session",
    "aerase_scope",
    "aexpire_sessions",
    "afork_session",
    "aget_erasure",
    "aget_session",
    "alist_messages",
    "alist_sessions",
    "alist_sessions_page",
    "amake_default",
    "apatch_session",
    "apop_message",
    "aprune_idempotency_keys",
    "arecount_sessions",
    "aresolve_session",
    "aresume_erasure",
    "aset_retention",
    "aunarchive_session",
    "aupdate_session",
    "ausage_totals",
]

P = ParamSpec("P")
R = TypeVar("R")


def async_twin(service: Callable[P, R]) -> Callable[P, Coroutine[Any, Any, R]]:
    """Build the ``a``-prefixed twin of a synchronous service (docs/design.md §13.1).

    Args:
        service: a function of :mod:`cortex_sessions.services`.

    Returns:
        A coroutine function with the service's signature and annotations, named
        ``a<name>``, whose docstring points to the service's. Awaiting it runs the service
        under ``sync_to_async(thread_sensitive=True)`` and returns its result; any exception the
        service raises propagates unchanged.
    """
    run = sync_to_async(service, thread_sensitive=True)

    @functools.wraps(service)
    async def twin(*args: P.args, **kwargs: P.kwargs) -> R:
        return await run(*args, **kwargs)

    twin.__name__ = twin.__qualname__ = f"a{service.__name__}"
    twin.__doc__ = (
        f"Async twin of :func:`cortex_sessions.services.{service.__name__}` (docs/design.md §13.1): same "
        "arguments, return value, errors and transaction, run with "
        "``sync_to_async(thread_sensitive=True)``.\n\n" + inspect.cleandoc(service.__doc__ or "")
    )
    twin.__module__ = __name__
    return twin


aappend_messages = async_twin(append_messages)
aclear_messages = async_twin(clear_messages)
acount_sessions = async_twin(count_sessions)
acreate_session = async_twin(create_session)
adelete_message = async_twin(delete_message)
adelete_session = async_twin(delete_session)
aget_session = async_twin(get_session)
alist_messages = async_twin(list_messages)
alist_sessions = async_twin(list_sessions)
alist_sessions_page = async_twin(list_sessions_page)
amake_default = async_twin(make_default)
aprune_idempotency_keys = async_twin(prune_idempotency_keys)
arecount_sessions = async_twin(recount_sessions)
aresolve_session = async_twin(resolve_session)
aupdate_session = async_twin(update_session)
aarchive_session = async_twin(archive_session)
adelete_messages_after = async_twin(delete_messages_after)
afork_session = async_twin(fork_session)
apatch_session = async_twin(patch_session)
apop_message = async_twin(pop_message)
aunarchive_session = async_twin(unarchive_session)
acompact_session = async_twin(compact_session)
acontext_messages = async_twin(context_messages)
aexpire_sessions = async_twin(expire_sessions)
aset_retention = async_twin(set_retention)
ausage_totals = async_twin(usage_totals)
aerase_scope = async_twin(erase_scope)
aget_erasure = async_twin(get_erasure)
aresume_erasure = async_twin(resume_erasure)
